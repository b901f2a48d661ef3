//! Checks of the EndpointSlices: the Service they belong to, their ports and endpoints.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn endpoint_slices(&mut self) {
        for (i, slice) in self.s.endpoint_slices.iter().enumerate() {
            let path = FieldPath::root("endpointSlices").idx(i);
            match self.service(&slice.namespace, &slice.service) {
                None => self.err(
                    path.key("service"),
                    format!(
                        "unknown service `{}/{}` (an endpoint slice belongs to a service in its \
                         own namespace)",
                        slice.namespace, slice.service
                    ),
                ),
                Some(svc) => self.slice_ports(&path, slice, svc),
            }
            let family = slice.address_type;
            if !self.s.topology.cluster_cidr.has(family) {
                self.err(
                    path.key("addressType"),
                    format!(
                        "the cluster has no {family} range (topology.clusterCIDR): no proxier \
                         reads an {family} slice{}",
                        if family == IpFamily::Ipv4 {
                            " (addressType is IPv4 unless written: write `addressType: IPv6`)"
                        } else {
                            ""
                        }
                    ),
                );
            }
            for (j, endpoint) in slice.endpoints.iter().enumerate() {
                let path = path.key("endpoints").idx(j);
                self.endpoint(
                    &path,
                    slice.address_type,
                    &endpoint.addresses,
                    endpoint.node_name.as_deref(),
                );
            }
        }
    }

    /// kube-proxy joins slice ports to service ports by (name, protocol); a slice port that
    /// matches none is silently unused there, which in a scenario is always a mistake.
    pub(super) fn slice_ports(&mut self, path: &FieldPath, slice: &EndpointSlice, svc: &Service) {
        let mut seen = BTreeSet::new();
        for (j, port) in slice.ports.iter().enumerate() {
            let path = path.key("ports").idx(j);
            let name = port.name.as_deref().unwrap_or("");
            if port.port == 0 {
                self.err(path.key("port"), "port must be 1-65535");
            }
            if !seen.insert((name, port.protocol)) {
                self.err(
                    path.clone(),
                    format!("duplicate port name `{name}` for {}", port.protocol.upper()),
                );
            }
            let matched =
                svc.spec.ports.iter().any(|sp| {
                    sp.name.as_deref().unwrap_or("") == name && sp.protocol == port.protocol
                });
            if !matched {
                self.err(
                    path,
                    format!(
                        "port name `{name}` ({}) matches no port of service `{}/{}` \
                         (ports are matched by name and protocol)",
                        port.protocol.upper(),
                        svc.namespace,
                        svc.name
                    ),
                );
            }
        }
    }

    pub(super) fn endpoint(
        &mut self,
        path: &FieldPath,
        address_type: IpFamily,
        addresses: &[IpAddr],
        node_name: Option<&str>,
    ) {
        let clusters = self.s.topology.cluster_cidr;
        match addresses {
            [] => self.err(path.key("addresses"), "an endpoint needs an address"),
            [_] => {}
            _ => self.err(
                path.key("addresses").idx(1),
                "kube-proxy only uses the first address of an endpoint: list one endpoint per \
                 address",
            ),
        }
        for (k, ip) in addresses.iter().enumerate() {
            let path = path.key("addresses").idx(k);
            // EndpointSlice validation (pkg/apis/discovery/validation): every address is of the
            // slice's addressType.
            if IpFamily::of(*ip) != address_type {
                self.err(
                    path,
                    format!(
                        "{ip} must be a valid {address_type} address (the slice's addressType)"
                    ),
                );
                continue;
            }
            // An IPv6 address where the cluster has no IPv6 range: its slice is refused above.
            if let Some(range) = clusters.of(address_type) {
                if self.pod_by_ip(*ip).is_none() && !range.contains(*ip) {
                    self.err(
                        path,
                        format!("address {ip} is neither a pod IP nor inside clusterCIDR {range}"),
                    );
                }
            }
        }
        let Some(node_name) = node_name else {
            return;
        };
        if self.node(node_name).is_none() {
            self.err(path.key("nodeName"), format!("unknown node `{node_name}`"));
            return;
        }
        let owner = addresses.first().and_then(|ip| self.pod_by_ip(*ip));
        if let Some(pod) = owner.filter(|pod| pod.node != node_name) {
            self.err(
                path.key("nodeName"),
                format!(
                    "nodeName `{node_name}` contradicts pod `{}` with this address, which runs \
                     on `{}`",
                    pod.name, pod.node
                ),
            );
        }
    }
}
