//! Stale UDP conntrack cleanup, shared by both kube-proxy modes as `pkg/proxy/conntrack` is:
//! after a sync in which some UDP ServicePort's endpoints changed
//! (`UpdateEndpointsMapResult.ConntrackCleanupRequired`, pkg/proxy/endpointschangetracker.go),
//! `conntrack.CleanStaleEntries` (pkg/proxy/conntrack/cleanup.go) deletes every UDP entry to a
//! Service frontend whose DNAT target is not one of its serving endpoints.

use crate::programming::ConntrackCleanup;
use crate::scenario::cluster::{ClusterState, EndpointInfo, ServicePortInfo};
use crate::scenario::Protocol;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Whether the sync from `previous` (`None`: the first sync, which sees every endpoint as
/// new) to `current` changed the endpoints of a UDP ServicePort.
pub(crate) fn required(previous: Option<&ClusterState>, current: &ClusterState) -> bool {
    match previous {
        None => !udp_endpoints(current).is_empty(),
        Some(previous) => udp_endpoints(previous) != udp_endpoints(current),
    }
}

/// The endpoints of every UDP service port that has any, by service port name, sorted.
fn udp_endpoints(c: &ClusterState) -> BTreeMap<String, Vec<&EndpointInfo>> {
    c.service_ports
        .iter()
        .filter(|sp| sp.protocol == Protocol::Udp && !sp.endpoints.is_empty())
        .map(|sp| {
            let mut eps: Vec<&EndpointInfo> = sp.endpoints.iter().collect();
            eps.sort_by_key(|e| (e.ip, e.port));
            (sp.service_port_name(), eps)
        })
        .collect()
}

/// The filters `CleanStaleEntries` builds for `cluster`: for each UDP service port with a
/// serving endpoint, its ClusterIP, LoadBalancer VIPs and external IPs on the service port,
/// and its NodePort on any address.
pub(crate) fn stale_entry_filters(cluster: &ClusterState) -> Vec<ConntrackCleanup> {
    let mut out = Vec::new();
    for sp in cluster.service_ports.iter().filter(|sp| is_tracked(sp)) {
        // "Changes to the service should not affect existing flows, so we do not take traffic
        // policies, topology, or terminating status of the service into account."
        let mut serving: Vec<IpAddr> = sp
            .endpoints
            .iter()
            .filter(|e| e.serving)
            .map(|e| e.ip)
            .collect();
        serving.sort();
        serving.dedup();
        // "a Service without endpoints does not require to clean the conntrack entries".
        if serving.is_empty() {
            continue;
        }
        let frontends = sp
            .cluster_ip
            .iter()
            .chain(&sp.load_balancer_vips)
            .chain(&sp.external_ips);
        for ip in frontends {
            out.push(ConntrackCleanup {
                protocol: Protocol::Udp,
                orig_dst: Some(*ip),
                orig_dport: sp.port,
                serving: serving.clone(),
            });
        }
        if let Some(node_port) = sp.node_port.filter(|p| *p != 0) {
            out.push(ConntrackCleanup {
                protocol: Protocol::Udp,
                orig_dst: None,
                orig_dport: node_port,
                serving: serving.clone(),
            });
        }
    }
    out
}

/// UDP ports of the ServicePortMap (headless and ExternalName services are not in it).
fn is_tracked(sp: &ServicePortInfo) -> bool {
    sp.protocol == Protocol::Udp
        && sp.cluster_ip.is_some()
        && sp.type_ != crate::scenario::ServiceType::ExternalName
}

/// The cleanup a sync from `previous` to `current` ends with: none unless required.
pub(crate) fn after_sync(
    previous: Option<&ClusterState>,
    current: &ClusterState,
) -> Vec<ConntrackCleanup> {
    if required(previous, current) {
        stale_entry_filters(current)
    } else {
        Vec::new()
    }
}
