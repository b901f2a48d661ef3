//! Which endpoints become IPVS real servers: the shared `CategorizeEndpoints`
//! (`crate::proxier::endpoints`, pkg/proxy/topology.go) plus the local/cluster choice of
//! `syncEndpoint` in pkg/proxy/ipvs/proxier.go.

pub(super) use crate::proxier::endpoints::Categorized;
use crate::proxier::endpoints::{self, PolicyUse};
use crate::scenario::cluster::{EndpointInfo, NodeContext, ServicePortInfo};
use ipvs_genl::{Destination, ForwardMethod, TunnelType};
use std::collections::BTreeSet;
use std::net::IpAddr;

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
    if only_node_local && !cat.local.is_empty() {
        return &cat.local;
    }
    &cat.cluster
}

/// `CategorizeEndpoints` over the endpoints map entry of `sp` on `node`.
pub(super) fn categorize<'a>(sp: &'a ServicePortInfo, node: &NodeContext) -> Categorized<'a> {
    endpoints::categorize(
        &endpoints::endpoints_map_entry(sp, node),
        PolicyUse::of(sp),
        node,
    )
}

/// `RealServer{Address, Port, Weight: 1}` converted by `toIPVSDestination` (util/ipvs_linux.go):
/// no ConnectionFlags, i.e. masquerading (NAT) forwarding. `newEndpoints` is a string set, so
/// duplicates collapse; sorted by address then port for determinism.
pub(super) fn real_servers(endpoints: &[&EndpointInfo]) -> Vec<Destination> {
    let unique: BTreeSet<(IpAddr, u16)> = endpoints.iter().map(|ep| (ep.ip, ep.port)).collect();
    unique
        .into_iter()
        .map(|(ip, port)| Destination {
            addr: ip,
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
