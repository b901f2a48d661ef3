//! The endpoints of one service port as the iptables proxier holds them: the shared
//! `CategorizeEndpoints` result (`crate::proxier::endpoints`), each endpoint with its
//! precomputed `KUBE-SEP-` chain name (`endpointInfo` in pkg/proxy/iptables/proxier.go).

use super::names::endpoint_chain;
use crate::proxier::endpoints::{categorize, endpoint_key, endpoints_map_entry, PolicyUse};
use crate::scenario::cluster::{EndpointInfo, NodeContext, ServicePortInfo};

/// One endpoint with its `KUBE-SEP-` chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// `BaseEndpointInfo.String()`: `ip:port`.
    pub key: String,
    pub ip: String,
    pub chain: String,
}

impl Endpoint {
    fn new(info: &EndpointInfo, service_port_name: &str, protocol: &str) -> Self {
        let key = endpoint_key(info);
        Self {
            chain: endpoint_chain(service_port_name, protocol, &key),
            ip: info.ip.to_string(),
            key,
        }
    }
}

/// `CategorizeEndpoints`' result with chain names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Categorized {
    pub cluster: Vec<Endpoint>,
    pub local: Vec<Endpoint>,
    pub all_reachable: Vec<Endpoint>,
    pub has_any: bool,
}

/// Categorizes the endpoints map entry of `sp` on `node`.
pub(super) fn categorized(sp: &ServicePortInfo, node: &NodeContext) -> Categorized {
    let name = sp.service_port_name();
    let protocol = sp.protocol.lower();
    let chained = |list: &[&EndpointInfo]| -> Vec<Endpoint> {
        list.iter()
            .map(|info| Endpoint::new(info, &name, protocol))
            .collect()
    };
    let cat = categorize(&endpoints_map_entry(sp, node), PolicyUse::of(sp), node);
    Categorized {
        cluster: chained(&cat.cluster),
        local: chained(&cat.local),
        all_reachable: chained(&cat.all_reachable),
        has_any: cat.has_any,
    }
}
