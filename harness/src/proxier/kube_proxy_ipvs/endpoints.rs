//! Which endpoints become IPVS real servers: pkg/proxy/topology.go `CategorizeEndpoints` plus the
//! local/cluster choice of `syncEndpoint` in pkg/proxy/ipvs/proxier.go.

use crate::cluster::{EndpointInfo, NodeContext, ServicePortInfo};
use ipvs_genl::{Destination, ForwardMethod, TunnelType};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

/// The first two results of `CategorizeEndpoints`. `None` is Go's nil slice: the service never
/// uses that traffic policy (or has no endpoints at all).
#[derive(Debug, Default)]
pub(super) struct Categorized<'a> {
    pub(super) cluster: Option<Vec<&'a EndpointInfo>>,
    pub(super) local: Option<Vec<&'a EndpointInfo>>,
}

/// `UsesClusterEndpoints()` (pkg/proxy/serviceport.go): anything but an internal-only service with
/// internalTrafficPolicy Local.
fn uses_cluster_endpoints(sp: &ServicePortInfo) -> bool {
    !sp.internal_policy_local || sp.externally_accessible()
}

/// `UsesLocalEndpoints()` (pkg/proxy/serviceport.go).
fn uses_local_endpoints(sp: &ServicePortInfo) -> bool {
    sp.internal_policy_local || (sp.external_policy_local && sp.externally_accessible())
}

fn filter(eps: &[EndpointInfo], pred: impl Fn(&EndpointInfo) -> bool) -> Vec<&EndpointInfo> {
    eps.iter().filter(|ep| pred(ep)).collect()
}

/// `CategorizeEndpoints` without topology hints: the cluster state carries no hints, so
/// `topologyModeFromHints` is always "" and every Ready endpoint is available.
///
/// "Usable" means Ready; when there is none, Serving+Terminating endpoints are used instead,
/// independently for the cluster and the local list.
pub(super) fn categorize<'a>(sp: &'a ServicePortInfo, node: &NodeContext) -> Categorized<'a> {
    let eps = sp.endpoints.as_slice();
    let mut out = Categorized::default();
    if eps.is_empty() {
        return out;
    }
    if uses_cluster_endpoints(sp) {
        let mut cluster = filter(eps, |ep| ep.ready);
        if cluster.is_empty() {
            cluster = filter(eps, |ep| ep.serving && ep.terminating);
        }
        out.cluster = Some(cluster);
    }
    if !uses_local_endpoints(sp) {
        return out;
    }
    let has_local_ready = eps.iter().any(|ep| ep.ready && ep.is_local(node));
    // topology.go's pre-scan uses `else if`: a Ready endpoint is never counted as
    // serving-terminating.
    let has_local_serving_terminating = eps
        .iter()
        .any(|ep| !ep.ready && ep.serving && ep.terminating && ep.is_local(node));
    if has_local_ready {
        out.local = Some(filter(eps, |ep| ep.is_local(node) && ep.ready));
    } else if has_local_serving_terminating {
        out.local = Some(filter(eps, |ep| {
            ep.is_local(node) && ep.serving && ep.terminating
        }));
    }
    out
}

/// The endpoints `syncEndpoint` programs for one virtual server.
///
/// With `only_node_local` (internalTrafficPolicy Local for the ClusterIP, externalTrafficPolicy
/// Local for everything external) local endpoints win when there are any; otherwise — and also
/// when there are no local ones (PR #97081: "Allow access from local PODs even if no local
/// endpoints exist") — the cluster endpoints are used, which are nil for an internal-only
/// iTP=Local service.
pub(super) fn selected<'c, 'a>(
    cat: &'c Categorized<'a>,
    only_node_local: bool,
) -> &'c [&'a EndpointInfo] {
    let none: &'c [&'a EndpointInfo] = &[];
    if only_node_local {
        if let Some(local) = cat.local.as_deref().filter(|l| !l.is_empty()) {
            return local;
        }
    }
    cat.cluster.as_deref().unwrap_or(none)
}

/// `RealServer{Address, Port, Weight: 1}` converted by `toIPVSDestination` (util/ipvs_linux.go):
/// no ConnectionFlags, i.e. masquerading (NAT) forwarding. `newEndpoints` is a string set, so
/// duplicates collapse; sorted by address then port for determinism.
pub(super) fn real_servers(endpoints: &[&EndpointInfo]) -> Vec<Destination> {
    let unique: BTreeSet<(Ipv4Addr, u16)> = endpoints.iter().map(|ep| (ep.ip, ep.port)).collect();
    unique
        .into_iter()
        .map(|(ip, port)| Destination {
            addr: IpAddr::V4(ip),
            port,
            forward: ForwardMethod::Masq,
            weight: 1,
            upper_threshold: 0,
            lower_threshold: 0,
            tunnel_type: TunnelType::default(),
            tunnel_port: 0,
            tunnel_flags: 0,
        })
        .collect()
}
