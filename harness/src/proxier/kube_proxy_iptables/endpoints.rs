//! Endpoint selection for one service port: kube-proxy's endpoints map ordering
//! (`pkg/proxy/endpointslicecache.go`) and `CategorizeEndpoints` (`pkg/proxy/topology.go`).

use super::names::endpoint_chain;
use crate::cluster::{EndpointInfo, NodeContext, ServicePortInfo};

/// One endpoint as the iptables proxier holds it (`endpointInfo` in proxier.go): the base info
/// plus its precomputed `KUBE-SEP-` chain name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// `BaseEndpointInfo.String()`: `ip:port`.
    pub key: String,
    pub ip: String,
    pub local: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub chain: String,
}

impl Endpoint {
    fn new(
        info: &EndpointInfo,
        node: &NodeContext,
        service_port_name: &str,
        protocol: &str,
    ) -> Self {
        let key = format!("{}:{}", info.ip, info.port);
        Self {
            chain: endpoint_chain(service_port_name, protocol, &key),
            ip: info.ip.to_string(),
            local: info.is_local(node),
            ready: info.ready,
            serving: info.serving,
            terminating: info.terminating,
            key,
        }
    }
}

/// The endpoints of a service port as kube-proxy's `EndpointsMap` lists them: deduplicated by
/// `ip:port` (a local copy wins, `addEndpoints` in endpointslicecache.go) and sorted by that
/// string (`sort.Sort(byEndpoint(...))` in `endpointsMapFromEndpointInfo`). Note the sort is by
/// string, so `10.0.0.10:80` comes before `10.0.0.2:80`.
pub(super) fn endpoints_map_entry(sp: &ServicePortInfo, node: &NodeContext) -> Vec<Endpoint> {
    let name = sp.service_port_name();
    let protocol = sp.protocol.lower();
    let mut out: Vec<Endpoint> = Vec::with_capacity(sp.endpoints.len());
    for info in &sp.endpoints {
        let ep = Endpoint::new(info, node, &name, protocol);
        match out.iter_mut().find(|e| e.key == ep.key) {
            Some(existing) if ep.local => *existing = ep,
            Some(_) => {}
            None => out.push(ep),
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// Which endpoint sets a service port uses (`UsesClusterEndpoints` / `UsesLocalEndpoints` in
/// pkg/proxy/serviceport.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PolicyUse {
    pub cluster: bool,
    pub local: bool,
}

impl PolicyUse {
    pub fn new(
        internal_policy_local: bool,
        external_policy_local: bool,
        externally_accessible: bool,
    ) -> Self {
        Self {
            // "Even if the external traffic policy is Local, we need Cluster endpoints to
            // implement short circuiting." (serviceport.go)
            cluster: !internal_policy_local || externally_accessible,
            local: internal_policy_local || (external_policy_local && externally_accessible),
        }
    }
}

/// The result of `CategorizeEndpoints`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Categorized {
    pub cluster: Vec<Endpoint>,
    pub local: Vec<Endpoint>,
    pub all_reachable: Vec<Endpoint>,
    pub has_any: bool,
}

fn filter(endpoints: &[Endpoint], keep: impl Fn(&Endpoint) -> bool) -> Vec<Endpoint> {
    endpoints.iter().filter(|ep| keep(ep)).cloned().collect()
}

/// `CategorizeEndpoints` (pkg/proxy/topology.go) without topology hints (the suite's input has
/// none, so `topologyMode` is always ""): Ready endpoints are preferred, falling back to
/// Serving+Terminating ones, independently for the Cluster and the Local set.
pub(super) fn categorize(endpoints: &[Endpoint], uses: PolicyUse) -> Categorized {
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

    let usable = |ep: &Endpoint| ep.ready || (ep.serving && ep.terminating);
    out.has_any |= endpoints.iter().any(usable);
    let has_local_ready = endpoints.iter().any(|ep| ep.local && ep.ready);
    let has_local_serving_terminating = endpoints
        .iter()
        .any(|ep| ep.local && !ep.ready && ep.serving && ep.terminating);
    let mut use_serving_terminating = false;
    if has_local_ready {
        out.local = filter(endpoints, |ep| ep.local && ep.ready);
    } else if has_local_serving_terminating {
        use_serving_terminating = true;
        out.local = filter(endpoints, |ep| ep.local && ep.serving && ep.terminating);
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
        if !merged.iter().any(|m| m.key == ep.key) {
            merged.push(ep.clone());
        }
    }
    merged.sort_by(|a, b| a.key.cmp(&b.key));
    out.all_reachable = merged;
    out
}
