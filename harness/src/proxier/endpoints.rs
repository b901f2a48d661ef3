//! What kube-proxy's modes share about one service port's endpoints, written once as
//! `pkg/proxy/` writes it once: the endpoints map entry (`pkg/proxy/endpointslicecache.go`),
//! which endpoint sets a port uses (`UsesClusterEndpoints` / `UsesLocalEndpoints` in
//! `pkg/proxy/serviceport.go`) and `CategorizeEndpoints` (`pkg/proxy/topology.go`).

use crate::scenario::cluster::{EndpointInfo, NodeContext, ServicePortInfo};

/// Which endpoint sets a service port uses (`UsesClusterEndpoints` / `UsesLocalEndpoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyUse {
    pub cluster: bool,
    pub local: bool,
}

impl PolicyUse {
    pub fn of(sp: &ServicePortInfo) -> Self {
        let externally_accessible = sp.externally_accessible();
        // serviceport.go takes `apiservice.ExternalPolicyLocal(service)`, which is false for a
        // service that is not externally accessible.
        let external_policy_local = sp.external_policy_local && externally_accessible;
        Self {
            // "Even if the external traffic policy is Local, we need Cluster endpoints to
            // implement short circuiting." (serviceport.go)
            cluster: !sp.internal_policy_local || externally_accessible,
            local: sp.internal_policy_local || external_policy_local,
        }
    }
}

/// `BaseEndpointInfo.String()`: `net.JoinHostPort(ip, port)` (`[ip]:port` for IPv6), the key
/// endpoints are deduplicated and sorted by.
pub(crate) fn endpoint_key(ep: &EndpointInfo) -> String {
    std::net::SocketAddr::new(ep.ip, ep.port).to_string()
}

/// The endpoints of a service port as kube-proxy's `EndpointsMap` lists them: deduplicated by
/// `ip:port` (a local copy wins, `addEndpoints` in endpointslicecache.go) and sorted by that
/// string (`sort.Sort(byEndpoint(...))`), so `10.0.0.10:80` comes before `10.0.0.2:80`.
pub(crate) fn endpoints_map_entry<'a>(
    sp: &'a ServicePortInfo,
    node: &NodeContext,
) -> Vec<&'a EndpointInfo> {
    let mut out: Vec<&EndpointInfo> = Vec::with_capacity(sp.endpoints.len());
    for ep in &sp.endpoints {
        match out.iter_mut().find(|e| endpoint_key(e) == endpoint_key(ep)) {
            Some(existing) if ep.is_local(node) => *existing = ep,
            Some(_) => {}
            None => out.push(ep),
        }
    }
    out.sort_by_key(|e| endpoint_key(e));
    out
}

/// The result of `CategorizeEndpoints`. An empty list stands for Go's nil slice too: both
/// modes only ever test a list for emptiness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Categorized<'a> {
    pub cluster: Vec<&'a EndpointInfo>,
    pub local: Vec<&'a EndpointInfo>,
    pub all_reachable: Vec<&'a EndpointInfo>,
    pub has_any: bool,
}

fn filter<'a>(
    endpoints: &[&'a EndpointInfo],
    keep: impl Fn(&EndpointInfo) -> bool,
) -> Vec<&'a EndpointInfo> {
    endpoints.iter().copied().filter(|ep| keep(ep)).collect()
}

/// `CategorizeEndpoints` without topology hints (the suite's input has none, so
/// `topologyMode` is always ""): Ready endpoints are preferred, falling back to
/// Serving+Terminating ones, independently for the Cluster and the Local set.
pub(crate) fn categorize<'a>(
    endpoints: &[&'a EndpointInfo],
    uses: PolicyUse,
    node: &NodeContext,
) -> Categorized<'a> {
    let mut out = Categorized::default();
    if uses.cluster {
        out.cluster = filter(endpoints, |ep| ep.ready);
        if out.cluster.is_empty() {
            out.cluster = filter(endpoints, |ep| ep.serving && ep.terminating);
        }
        out.has_any = !out.cluster.is_empty();
    }
    if !uses.local {
        out.all_reachable = out.cluster.clone();
        return out;
    }

    let usable = |ep: &&EndpointInfo| ep.ready || (ep.serving && ep.terminating);
    out.has_any |= endpoints.iter().any(usable);
    let has_local_ready = endpoints.iter().any(|ep| ep.is_local(node) && ep.ready);
    // topology.go's pre-scan uses `else if`: a Ready endpoint is never counted as
    // serving-terminating.
    let has_local_serving_terminating = endpoints
        .iter()
        .any(|ep| ep.is_local(node) && !ep.ready && ep.serving && ep.terminating);
    let mut use_serving_terminating = false;
    if has_local_ready {
        out.local = filter(endpoints, |ep| ep.is_local(node) && ep.ready);
    } else if has_local_serving_terminating {
        use_serving_terminating = true;
        out.local = filter(endpoints, |ep| {
            ep.is_local(node) && ep.serving && ep.terminating
        });
    }

    if !uses.cluster {
        out.all_reachable = out.local.clone();
        return out;
    }
    if !use_serving_terminating {
        // Cluster endpoints are then a superset of the local ones (topology.go).
        out.all_reachable = out.cluster.clone();
        return out;
    }
    // topology.go merges the two lists through a Go map (random order); we keep the endpoints
    // map's `ip:port` order so the output is deterministic. Only chain order differs.
    let mut merged = out.cluster.clone();
    for ep in &out.local {
        if !merged.iter().any(|m| endpoint_key(m) == endpoint_key(ep)) {
            merged.push(ep);
        }
    }
    merged.sort_by_key(|e| endpoint_key(e));
    out.all_reachable = merged;
    out
}
