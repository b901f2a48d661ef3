//! Checks of the topology: ranges, node and pod addresses, per family. An IPv6 value is only
//! valid where its family's range exists (an IPv6 node address needs an IPv6 underlay), and a
//! dual-stack cluster gives every node and pod one value of each family, as Kubernetes' node
//! IPAM and a dual-stack CNI do.

use super::{Checker, FieldPath};
use crate::scenario::cidr::{Dual, Prefix};
use crate::scenario::model::{Node, Pod};
use crate::scenario::IpFamily;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Which value of a pair a check is about; the IPv6 value is the second of the file's list.
#[derive(Clone, Copy)]
enum Family {
    V4,
    /// The IPv6 value of a pair: the second of two.
    V6,
    /// An IPv6 value alone (an IPv6-only cluster's).
    V6Alone,
}

impl Family {
    /// The IPv6 family of a pair with (`dual`) or without an IPv4 value.
    fn v6_of<V4, V6>(pair: &Dual<V4, V6>) -> Family {
        if pair.v4.is_some() {
            Family::V6
        } else {
            Family::V6Alone
        }
    }

    /// The path of this family's value of the pair at `path`.
    fn of(self, path: FieldPath) -> FieldPath {
        match self {
            Family::V4 | Family::V6Alone => path,
            Family::V6 => path.idx(1),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 | Family::V6Alone => "IPv6",
        }
    }

    /// Pod addresses a podCIDR reserves besides the network address (the VTEP) and the gateway:
    /// IPv4's broadcast address.
    fn has_broadcast(self) -> bool {
        matches!(self, Family::V4)
    }

    /// The longest podCIDR that leaves a pod address after the reserved ones.
    fn longest_pod_cidr(self) -> u8 {
        match self {
            Family::V4 => 30,
            Family::V6 | Family::V6Alone => 126,
        }
    }
}

impl Checker<'_> {
    pub(super) fn topology_cidrs(&mut self) {
        let t = &self.s.topology;
        let ranges = [
            ("underlay", t.underlay),
            ("clusterCIDR", t.cluster_cidr),
            ("serviceCIDR", t.service_cidr),
        ];
        let v4: Vec<_> = ranges
            .iter()
            .filter_map(|(f, d)| d.v4.map(|c| (*f, c, Family::V4)))
            .collect();
        self.ranges_of_family(&v4);
        let v6: Vec<_> = ranges
            .iter()
            .filter_map(|(f, d)| d.v6.map(|c| (*f, c, Family::v6_of(d))))
            .collect();
        self.ranges_of_family(&v6);
        // Services are of the cluster's families, its first one first (an IPv6-only cluster's
        // `--service-cluster-ip-range` is IPv6; the default serviceCIDR is IPv4).
        let foreign = IpFamily::ALL
            .into_iter()
            .find(|f| t.service_cidr.has(*f) && !t.cluster_cidr.has(*f));
        if let Some(family) = foreign {
            self.err(
                Self::topo().key("serviceCIDR"),
                format!(
                    "serviceCIDR {} has an {family} range, and the cluster has no {family} pods \
                     (clusterCIDR {}): write a serviceCIDR of the cluster's families",
                    t.service_cidr, t.cluster_cidr
                ),
            );
        } else if t.service_cidr.primary_family() != t.cluster_cidr.primary_family() {
            self.err(
                Self::topo().key("serviceCIDR"),
                format!(
                    "serviceCIDR {} starts with another family than clusterCIDR {}",
                    t.service_cidr, t.cluster_cidr
                ),
            );
        }
    }

    fn ranges_of_family<P: Prefix>(&mut self, ranges: &[(&str, P, Family)]) {
        for (field, cidr, family) in ranges {
            self.host_bits(family.of(Self::topo().key(field)), cidr);
        }
        for (i, (field_a, a, _)) in ranges.iter().enumerate() {
            for (field_b, b, family) in &ranges[i + 1..] {
                if a.overlaps(b) {
                    self.err(
                        family.of(Self::topo().key(field_b)),
                        format!("{field_b} {b} overlaps {field_a} {a}"),
                    );
                }
            }
        }
    }

    /// A prefix with host bits set is almost always a typo for another subnet.
    fn host_bits<P: Prefix>(&mut self, path: FieldPath, cidr: &P) {
        if cidr.addr() != cidr.network() {
            self.err(
                path,
                format!(
                    "{cidr} has host bits set (the network is {}/{})",
                    cidr.network(),
                    cidr.len()
                ),
            );
        }
    }

    pub(super) fn nodes(&mut self) {
        let t = &self.s.topology;
        if t.nodes.is_empty() {
            self.err(Self::topo().key("nodes"), "at least one node is required");
        }
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut ips: BTreeMap<IpAddr, FieldPath> = BTreeMap::new();
        for (i, node) in t.nodes.iter().enumerate() {
            let path = Self::topo().key("nodes").idx(i);
            self.dns_label(path.key("name"), "node name", &node.name);
            if let Some(first) = names.insert(&node.name, i) {
                names.insert(&node.name, first);
                self.err(
                    path.key("name"),
                    format!(
                        "duplicate node name `{}` (also topology.nodes[{first}])",
                        node.name
                    ),
                );
            }
            let underlay = t.underlay;
            if let Some(v4) = node.ip.v4 {
                self.underlay_ip(Family::V4, path.key("ip"), v4, underlay.v4, &mut ips);
            }
            if let Some(v6) = node.ip.v6 {
                let family = Family::v6_of(&node.ip);
                self.underlay_ip(family, path.key("ip"), v6, underlay.v6, &mut ips);
            }
            // kube-proxy's proxier of each family needs the node's address of that family
            // (`--bind-address`/node IP per family), and the overlay one of the underlay's.
            let needed = IpFamily::ALL
                .into_iter()
                .filter(|f| t.cluster_cidr.has(*f) || *f == underlay.primary_family());
            for family in needed.filter(|f| !node.ip.has(*f)) {
                self.err(
                    path.key("ip"),
                    format!(
                        "node `{}` has no {family} address, and {}: write one address per \
                         family in `ips`",
                        node.name,
                        if t.cluster_cidr.has(family) {
                            format!("the cluster has {family} pods (its {family} proxier needs the node's address)")
                        } else {
                            format!("the overlay runs over the {family} underlay")
                        }
                    ),
                );
            }
            self.pod_cidrs(&path, node, i);
            if let Err(e) = ipvs_genl::parse_save(&node.existing_ipvs) {
                self.err(
                    path.key("existingIPVS"),
                    format!("line {}: {}: `{}`", e.line, e.message, e.text.trim()),
                );
            }
        }
        // After every node's `ip`, so a clash names the secondary address as the culprit.
        for (i, node) in t.nodes.iter().enumerate() {
            for (k, &ip) in node.secondary_ips.iter().enumerate() {
                let path = Self::topo().key("nodes").idx(i).key("secondaryIPs").idx(k);
                // Each beside the node's own address of its family, on the same interface.
                if !node.ip.has(IpFamily::of(ip)) {
                    self.err(
                        path,
                        format!(
                            "secondary IP {ip} is {}, and node `{}` has no {0} `ip` to add it \
                             beside",
                            IpFamily::of(ip),
                            node.name
                        ),
                    );
                    continue;
                }
                match ip {
                    IpAddr::V4(v4) => {
                        self.underlay_ip(Family::V4, path, v4, t.underlay.v4, &mut ips)
                    }
                    IpAddr::V6(v6) => {
                        self.underlay_ip(Family::V6Alone, path, v6, t.underlay.v6, &mut ips)
                    }
                }
            }
        }
    }

    /// An underlay address (a node's `ip` or one of its `secondaryIPs`), each used once.
    /// `path` is the pair's; `underlay` is the family's range, if the underlay has one.
    fn underlay_ip<P: Prefix>(
        &mut self,
        family: Family,
        path: FieldPath,
        ip: P::Addr,
        underlay: Option<P>,
        ips: &mut BTreeMap<IpAddr, FieldPath>,
    ) where
        P::Addr: Into<IpAddr>,
    {
        let path = family.of(path);
        match underlay {
            None => self.err(
                path.clone(),
                format!(
                    "node IP {ip} is {}, and the underlay has no {0} range (write \
                     `underlay: IPv4-CIDR,IPv6-CIDR`)",
                    family.name()
                ),
            ),
            Some(underlay) if !underlay.contains(ip) => self.err(
                path.clone(),
                format!("node IP {ip} is outside the underlay {underlay}"),
            ),
            Some(underlay)
                if ip == underlay.network()
                    || (family.has_broadcast() && ip == underlay.last()) =>
            {
                self.err(
                    path.clone(),
                    format!(
                        "node IP {ip} is the network{} address of {underlay}",
                        if family.has_broadcast() {
                            " or broadcast"
                        } else {
                            ""
                        }
                    ),
                )
            }
            Some(_) => {}
        }
        if let Some(first) = ips.get(&ip.into()) {
            let first = first.clone();
            self.err(path, format!("node IP {ip} is already used by {first}"));
        } else {
            ips.insert(ip.into(), path);
        }
    }

    fn pod_cidrs(&mut self, path: &FieldPath, node: &Node, i: usize) {
        let path = path.key("podCIDR");
        let cluster = self.s.topology.cluster_cidr;
        let earlier = &self.s.topology.nodes[..i];
        match (node.pod_cidr.v4, cluster.v4) {
            (Some(v4), cluster_v4) => self.pod_cidr(
                Family::V4,
                path.clone(),
                v4,
                cluster_v4,
                earlier.iter().map(|n| n.pod_cidr.v4),
            ),
            (None, Some(cluster_v4)) => self.err(
                path.clone(),
                format!(
                    "node `{}` has no IPv4 podCIDR, and the cluster has IPv4 pods (clusterCIDR \
                     {cluster_v4})",
                    node.name
                ),
            ),
            (None, None) => {}
        }
        match (node.pod_cidr.v6, cluster.v6) {
            (Some(v6), cluster_v6) => self.pod_cidr(
                Family::v6_of(&node.pod_cidr),
                path,
                v6,
                cluster_v6,
                earlier.iter().map(|n| n.pod_cidr.v6),
            ),
            (None, Some(cluster_v6)) => self.err(
                path,
                format!(
                    "node `{}` has no IPv6 podCIDR, and the cluster is dual-stack (clusterCIDR \
                     {cluster_v6}): write `podCIDRs: [IPv4-CIDR, IPv6-CIDR]`, as node IPAM \
                     allocates one of each",
                    node.name
                ),
            ),
            (None, None) => {}
        }
    }

    /// `earlier`: the same family's podCIDRs of the nodes listed before this one.
    fn pod_cidr<P: Prefix>(
        &mut self,
        family: Family,
        path: FieldPath,
        cidr: P,
        cluster: Option<P>,
        earlier: impl Iterator<Item = Option<P>>,
    ) {
        let path = family.of(path);
        self.host_bits(path.clone(), &cidr);
        match cluster {
            None => self.err(
                path.clone(),
                format!(
                    "podCIDR {cidr} is {}, and clusterCIDR has no {0} range (write \
                     `clusterCIDR: IPv4-CIDR,IPv6-CIDR`)",
                    family.name()
                ),
            ),
            Some(cluster) if !cidr.within(&cluster) => self.err(
                path.clone(),
                format!("podCIDR {cidr} is not inside clusterCIDR {cluster}"),
            ),
            Some(_) => {}
        }
        if cidr.len() > family.longest_pod_cidr() {
            self.err(
                path.clone(),
                format!(
                    "podCIDR {cidr} is too small: the network address (VTEP), the first one \
                     (bridge gateway){} leave no pod address",
                    if family.has_broadcast() {
                        " and the broadcast address"
                    } else {
                        ""
                    }
                ),
            );
        }
        let clash = earlier
            .enumerate()
            .find_map(|(j, other)| other.filter(|o| o.overlaps(&cidr)).map(|o| (j, o)));
        if let Some((j, other)) = clash {
            self.err(
                path,
                format!("podCIDR {cidr} overlaps topology.nodes[{j}].podCIDR {other}"),
            );
        }
    }

    pub(super) fn pods(&mut self) {
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut ips: BTreeMap<IpAddr, usize> = BTreeMap::new();
        for (i, pod) in self.s.topology.pods.iter().enumerate() {
            let path = Self::topo().key("pods").idx(i);
            self.dns_label(path.key("namespace"), "namespace", &pod.namespace);
            // Unique across namespaces, unlike in Kubernetes: each pod gets a network namespace
            // named after it, and expectations name pods without their namespace.
            self.dns_label(path.key("name"), "pod name", &pod.name);
            if let Some(first) = names.insert(&pod.name, i) {
                names.insert(&pod.name, first);
                self.err(
                    path.key("name"),
                    format!(
                        "duplicate pod name `{}` (also topology.pods[{first}]; pod names must be \
                         unique across namespaces)",
                        pod.name
                    ),
                );
            }
            self.labels(&path.key("labels"), &pod.labels);
            self.pod_placement(&path, pod);
            let families = [
                (pod.ip.of(IpFamily::Ipv4), Family::V4),
                (pod.ip.of(IpFamily::Ipv6), Family::v6_of(&pod.ip)),
            ];
            for (ip, family) in families.into_iter().filter_map(|(ip, f)| Some((ip?, f))) {
                if let Some(first) = ips.insert(ip, i) {
                    ips.insert(ip, first);
                    self.err(
                        family.of(path.key("ip")),
                        format!("pod IP {ip} is already used by topology.pods[{first}]"),
                    );
                }
            }
            self.container_ports(&path, pod);
        }
    }

    fn pod_placement(&mut self, path: &FieldPath, pod: &Pod) {
        let Some(node) = self.node(&pod.node) else {
            self.err(path.key("node"), format!("unknown node `{}`", pod.node));
            return;
        };
        let path = path.key("ip");
        match (pod.ip.v4, node.pod_cidr.v4) {
            (Some(ip), Some(cidr)) => self.pod_ip(Family::V4, &path, node, ip, cidr),
            (Some(ip), None) => self.err(
                path.clone(),
                format!(
                    "pod IP {ip} is IPv4, and node `{}` has no IPv4 podCIDR",
                    node.name
                ),
            ),
            (None, Some(cidr)) => self.err(
                path.clone(),
                format!(
                    "pod `{}` has no IPv4 address, and node `{}` has an IPv4 podCIDR ({cidr})",
                    pod.name, node.name
                ),
            ),
            (None, None) => {}
        }
        let v6 = Family::v6_of(&pod.ip);
        match (pod.ip.v6, node.pod_cidr.v6) {
            (Some(ip), Some(cidr)) => self.pod_ip(v6, &path, node, ip, cidr),
            (Some(ip), None) => self.err(
                v6.of(path),
                format!(
                    "pod IP {ip} is IPv6, and node `{}` has no IPv6 podCIDR",
                    node.name
                ),
            ),
            (None, Some(cidr)) if node.pod_cidr.is_dual() => self.err(
                path,
                format!(
                    "pod `{}` has no IPv6 address, and node `{}` is dual-stack (podCIDR {cidr}): \
                     write `ips: [IPv4, IPv6]`, as a dual-stack CNI gives each pod one of each",
                    pod.name, node.name
                ),
            ),
            (None, Some(cidr)) => self.err(
                path,
                format!(
                    "pod `{}` has no IPv6 address, and node `{}` has IPv6 pods only (podCIDR \
                     {cidr})",
                    pod.name, node.name
                ),
            ),
            (None, None) => {}
        }
    }

    fn pod_ip<P: Prefix>(
        &mut self,
        family: Family,
        path: &FieldPath,
        node: &Node,
        ip: P::Addr,
        cidr: P,
    ) {
        let path = family.of(path.clone());
        let problem = if !cidr.contains(ip) {
            format!(
                "pod IP {ip} is outside podCIDR {cidr} of node `{}`",
                node.name
            )
        } else if ip == cidr.network() {
            format!("pod IP {ip} is the network address of {cidr} (the node's flannel.1 VTEP)")
        } else if Some(ip) == cidr.nth(1) {
            format!("pod IP {ip} is the gateway of {cidr} (the node's cni0 bridge)")
        } else if family.has_broadcast() && ip == cidr.last() {
            format!("pod IP {ip} is the broadcast address of {cidr}")
        } else {
            return;
        };
        self.err(path, problem);
    }

    fn container_ports(&mut self, path: &FieldPath, pod: &Pod) {
        let mut names = std::collections::BTreeSet::new();
        for (j, port) in pod.ports.iter().enumerate() {
            let path = path.key("ports").idx(j);
            if port.container_port == 0 {
                self.err(path.key("containerPort"), "containerPort must be 1-65535");
            }
            if let Some(name) = &port.name {
                if !names.insert(name.as_str()) {
                    self.err(
                        path.key("name"),
                        format!("duplicate container port name `{name}`"),
                    );
                }
            }
        }
    }

    pub(super) fn external(&mut self) {
        let Some(ext) = &self.s.topology.external else {
            return;
        };
        self.dns_label(
            Self::topo().key("external").key("name"),
            "external client name",
            &ext.name,
        );
        let path = Self::topo().key("external").key("ip");
        let underlay = self.s.topology.underlay;
        if let Some(v4) = ext.ip.v4 {
            self.external_ip(Family::V4, &path, v4, underlay.v4);
        }
        if let Some(v6) = ext.ip.v6 {
            self.external_ip(Family::v6_of(&ext.ip), &path, v6, underlay.v6);
        }
    }

    fn external_ip<P: Prefix>(
        &mut self,
        family: Family,
        path: &FieldPath,
        ip: P::Addr,
        underlay: Option<P>,
    ) where
        P::Addr: Into<IpAddr>,
    {
        let path = family.of(path.clone());
        match underlay {
            None => self.err(
                path.clone(),
                format!(
                    "external client IP {ip} is {}, and the underlay has no {0} range",
                    family.name()
                ),
            ),
            Some(underlay) if !underlay.contains(ip) => self.err(
                path.clone(),
                format!("external client IP {ip} is outside the underlay {underlay}"),
            ),
            Some(_) => {}
        }
        let ip: IpAddr = ip.into();
        if let Some(node) = self.s.topology.nodes.iter().find(|n| n.owns(ip)) {
            self.err(
                path,
                format!("external client IP {ip} is the IP of node `{}`", node.name),
            );
        }
    }
}
