//! Stale UDP conntrack cleanup, shared by every kube-proxy mode as `pkg/proxy/conntrack` is:
//! after a sync in which some UDP ServicePort's endpoints changed
//! (`UpdateEndpointsMapResult.ConntrackCleanupRequired`, pkg/proxy/endpointschangetracker.go),
//! `conntrack.CleanStaleEntries` (pkg/proxy/conntrack/cleanup.go) deletes every UDP entry to a
//! Service frontend whose DNAT target (reply source `IP:port`) is not one of its serving
//! endpoints' `IP:port`: an endpoint that moved from :8080 to :9090 on the same pod leaves its
//! flows' entries stale too.
//!
//! Where the releases differ: up to v1.36 "a Service without endpoints does not require to
//! clean the conntrack entries associated" (cleanup.go l.89-92 in v1.36.3: `if endpoints.Len()
//! == 0 { continue }`); from v1.37 such a Service's ClusterIP, load balancer VIPs and external
//! IPs are cleaned with an empty set, so a kept flow's next datagram meets the reject, while
//! its NodePort is still skipped (v1.37.2 l.89-97, l.119: `if svc.NodePort() != 0 &&
//! endpoints.Len() > 0`).

use crate::programming::{ConntrackCleanup, Serving};
use crate::release::Release;
use crate::scenario::cluster::{ClusterState, EndpointInfo, ServicePortInfo};
use crate::scenario::Protocol;
use std::collections::BTreeMap;

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

/// The filters `CleanStaleEntries` of `release` builds for `cluster`: for each UDP service
/// port, its ClusterIP, LoadBalancer VIPs and external IPs on the service port, and its
/// NodePort on any address, sparing the serving endpoints' `IP:port`.
pub(crate) fn stale_entry_filters(
    cluster: &ClusterState,
    release: Release,
) -> Vec<ConntrackCleanup> {
    let mut out = Vec::new();
    for sp in cluster.service_ports.iter().filter(|sp| is_tracked(sp)) {
        // "Changes to the service should not affect existing flows, so we do not take traffic
        // policies, topology, or terminating status of the service into account."
        let mut serving: Vec<Serving> = sp
            .endpoints
            .iter()
            .filter(|e| e.serving)
            .map(|e| Serving {
                ip: e.ip,
                port: Some(e.port),
            })
            .collect();
        serving.sort();
        serving.dedup();
        // Up to v1.36: "a Service without endpoints does not require to clean the conntrack
        // entries associated".
        if serving.is_empty() && release < Release::V1_37 {
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
        // v1.37 still skips the NodePort of a Service without serving endpoints: matched on
        // the port alone, an empty set would clear flows kube-proxy does not own.
        if let Some(node_port) = sp.node_port.filter(|p| *p != 0 && !serving.is_empty()) {
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

/// The cleanup a sync of `release` from `previous` to `current` ends with: none unless
/// required.
pub(crate) fn after_sync(
    previous: Option<&ClusterState>,
    current: &ClusterState,
    release: Release,
) -> Vec<ConntrackCleanup> {
    if required(previous, current) {
        stale_entry_filters(current, release)
    } else {
        Vec::new()
    }
}
