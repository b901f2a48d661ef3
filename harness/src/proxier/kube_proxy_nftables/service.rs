//! The transaction of one service port: the body of the `for svcName, svc := range
//! proxier.svcPortMap` loop in `syncProxyRules` and `writeServiceToEndpointRules`
//! (pkg/proxy/nftables/proxier.go), in the same order.

use super::names::{endpoint_names, ServiceChains};
use super::{
    Config, Tx, CLUSTER_IPS_SET, FIREWALL_IPS_MAP, MARK_MASQ_CHAIN, NO_ENDPOINT_NODE_PORTS_MAP,
    NO_ENDPOINT_SERVICES_MAP, REJECT_CHAIN, SERVICE_IPS_MAP, SERVICE_NODE_PORTS_MAP,
};
use crate::proxier::endpoints::{categorize, endpoints_map_entry, PolicyUse};
use crate::scenario::cluster::{EndpointInfo, NodeContext, ServicePortInfo};
use crate::scenario::ServiceType;
use std::collections::BTreeSet;

/// An endpoint with its chain and affinity set (`endpointInfo`).
struct Endpoint {
    ip: String,
    port: u16,
    /// On this node: its own traffic back to it is a hairpin (v1.36 and later).
    local: bool,
    /// `BaseEndpointInfo.String()`.
    key: String,
    chain: String,
    affinity_set: String,
}

impl Endpoint {
    fn new(
        sp: &ServicePortInfo,
        protocol: &str,
        ep: &EndpointInfo,
        node: &NodeContext,
    ) -> Endpoint {
        let ip = ep.ip.to_string();
        // "if EndpointIP is IPv6 then it will contain colons, which aren't allowed in a chain
        // name" (servicePortEndpointChainNameBase).
        let (chain, affinity_set) = endpoint_names(
            &sp.namespace,
            &sp.name,
            protocol,
            &sp.port_name,
            &ip.replace(':', "."),
            ep.port,
        );
        Endpoint {
            key: std::net::SocketAddr::new(ep.ip, ep.port).to_string(),
            ip,
            port: ep.port,
            local: ep.is_local(node),
            chain,
            affinity_set,
        }
    }
}

/// Writes one service port; notes the affinity sets it uses in `affinity_sets`.
pub(super) fn write_service_port(
    tx: &mut Tx,
    sp: &ServicePortInfo,
    node: &NodeContext,
    cfg: &Config,
    affinity_sets: &mut BTreeSet<String>,
) {
    // The service change tracker skips headless and ExternalName services
    // (`ShouldSkipService`, pkg/proxy/util/utils.go).
    let Some(cluster_ip) = sp
        .cluster_ip
        .filter(|_| sp.type_ != ServiceType::ExternalName)
    else {
        return;
    };
    let ip = cfg.family.ip();
    let protocol = sp.protocol.lower();
    let port = sp.port;
    let name = cfg.comment(&sp.service_port_name());
    let chains = ServiceChains::new(&sp.namespace, &sp.name, protocol, &sp.port_name);
    let uses = PolicyUse::of(sp);
    let entry = endpoints_map_entry(sp, node);
    let cat = categorize(&entry, uses, node);
    let endpoints = |list: &[&EndpointInfo]| -> Vec<Endpoint> {
        list.iter()
            .map(|ep| Endpoint::new(sp, protocol, ep, node))
            .collect()
    };
    let (cluster, local, reachable) = (
        endpoints(&cat.cluster),
        endpoints(&cat.local),
        endpoints(&cat.all_reachable),
    );
    let has_endpoints = cat.has_any;
    let affinity = sp.session_affinity_timeout_seconds;

    for ep in &reachable {
        tx.ensure_chain(&ep.chain);
        if affinity.is_some() {
            affinity_sets.insert(ep.affinity_set.clone());
        }
    }
    let uses_cluster_chain = !cluster.is_empty() && uses.cluster;
    if uses_cluster_chain {
        tx.ensure_chain(&chains.cluster_policy);
    }
    let uses_local_chain = !local.is_empty() && uses.local;
    if uses_local_chain {
        tx.ensure_chain(&chains.local_policy);
    }
    let (internal_chain, has_internal_endpoints) = if sp.internal_policy_local {
        (&chains.local_policy, has_endpoints && !local.is_empty())
    } else {
        (&chains.cluster_policy, has_endpoints)
    };
    // serviceport.go: `ExternalPolicyLocal` is false for a service that is not externally
    // accessible.
    let external_policy_local = sp.external_policy_local && sp.externally_accessible();
    let (external_policy_chain, has_external_endpoints) = if external_policy_local {
        (&chains.local_policy, has_endpoints && !local.is_empty())
    } else {
        (&chains.cluster_policy, has_endpoints)
    };
    let uses_external_chain = has_endpoints && sp.externally_accessible();
    if uses_external_chain {
        tx.ensure_chain(&chains.external);
    }
    let reject = format!("goto {REJECT_CHAIN}");
    let (internal_verdict, external_verdict) = if !has_endpoints {
        (reject.as_str(), reject.as_str())
    } else {
        ("drop", "drop")
    };

    // "Capture the clusterIP."
    let key = |addr: &dyn std::fmt::Display| format!("{addr} . {protocol} . {port}");
    tx.element(CLUSTER_IPS_SET, &cluster_ip.to_string(), None, None);
    if has_internal_endpoints {
        tx.element(
            SERVICE_IPS_MAP,
            &key(&cluster_ip),
            None,
            Some(&format!("goto {internal_chain}")),
        );
    } else {
        tx.element(
            NO_ENDPOINT_SERVICES_MAP,
            &key(&cluster_ip),
            Some(&name),
            Some(internal_verdict),
        );
    }

    // "Capture externalIPs."
    let to_external = format!("goto {}", chains.external);
    for external_ip in &sp.external_ips {
        if has_endpoints {
            tx.element(SERVICE_IPS_MAP, &key(external_ip), None, Some(&to_external));
        }
        if !has_external_endpoints {
            tx.element(
                NO_ENDPOINT_SERVICES_MAP,
                &key(external_ip),
                Some(&name),
                Some(external_verdict),
            );
        }
    }

    let uses_firewall_chain =
        !sp.load_balancer_vips.is_empty() && !sp.load_balancer_source_ranges.is_empty();
    if uses_firewall_chain {
        tx.ensure_chain(&chains.firewall);
    }
    // "Capture load-balancer ingress."
    for lb_ip in &sp.load_balancer_vips {
        if has_endpoints {
            tx.element(SERVICE_IPS_MAP, &key(lb_ip), None, Some(&to_external));
        }
        if uses_firewall_chain {
            tx.element(
                FIREWALL_IPS_MAP,
                &key(lb_ip),
                None,
                Some(&format!("goto {}", chains.firewall)),
            );
        }
    }
    if !has_external_endpoints {
        for lb_ip in &sp.load_balancer_vips {
            tx.element(
                NO_ENDPOINT_SERVICES_MAP,
                &key(lb_ip),
                Some(&name),
                Some(external_verdict),
            );
        }
    }

    // "Capture nodeports." ("For better or for worse, nodeports are not subject to
    // loadBalancerSourceRanges".)
    if let Some(node_port) = sp.node_port {
        let key = format!("{protocol} . {node_port}");
        if has_endpoints {
            tx.element(SERVICE_NODE_PORTS_MAP, &key, None, Some(&to_external));
        }
        if !has_external_endpoints {
            tx.element(
                NO_ENDPOINT_NODE_PORTS_MAP,
                &key,
                Some(&name),
                Some(external_verdict),
            );
        }
    }

    // "Set up internal traffic handling."
    if has_internal_endpoints {
        if cfg.masquerade_all {
            tx.rule(
                internal_chain,
                &format!("{ip} daddr {cluster_ip} jump {MARK_MASQ_CHAIN}"),
            );
        } else if let Some(not_local) = cfg.if_local(false) {
            tx.rule(
                internal_chain,
                &format!("{ip} daddr {cluster_ip} {not_local} jump {MARK_MASQ_CHAIN}"),
            );
        }
    }

    // "Set up external traffic handling".
    if uses_external_chain {
        let ext = &chains.external;
        if !external_policy_local {
            tx.rule(ext, &format!("jump {MARK_MASQ_CHAIN}"));
        } else {
            if let Some(local_source) = cfg.if_local(true) {
                tx.rule_commented(
                    ext,
                    &format!("{local_source} goto {}", chains.cluster_policy),
                    "short-circuit pod traffic",
                );
            }
            tx.rule_commented(
                ext,
                &format!("fib saddr type local jump {MARK_MASQ_CHAIN}"),
                "masquerade local traffic",
            );
            tx.rule_commented(
                ext,
                &format!("fib saddr type local goto {}", chains.cluster_policy),
                "short-circuit local traffic",
            );
        }
        if has_external_endpoints {
            tx.rule(ext, &format!("goto {external_policy_chain}"));
        }
    }

    if uses_firewall_chain {
        // "For VIP-like LBs, the VIP is often added as a local address … a request from a node
        // to the VIP will not hit the loadbalancer but will loop back with the source IP set to
        // the VIP."
        let mut sources: Vec<String> = sp
            .load_balancer_source_ranges
            .iter()
            .map(|c| c.normalized().to_string())
            .collect();
        if sp
            .load_balancer_source_ranges
            .iter()
            .any(|c| c.contains(cfg.node_ip))
        {
            sources.extend(sp.load_balancer_vips.iter().map(ToString::to_string));
        }
        tx.rule(
            &chains.firewall,
            &format!("{ip} saddr != {{ {} }} drop", sources.join(" , ")),
        );
    }

    if let Some(seconds) = affinity {
        // "Generate the per-endpoint affinity sets"
        for ep in &reachable {
            tx.op(
                "add",
                "set",
                &format!(
                    "{} {{ type {} ; flags dynamic,timeout ; timeout {seconds}s ; }}",
                    ep.affinity_set,
                    cfg.family.addr_type()
                ),
            );
        }
    }
    if uses_cluster_chain {
        service_to_endpoint_rules(
            tx,
            cfg,
            &chains.cluster_policy,
            &cluster,
            affinity.is_some(),
        );
    }
    if uses_local_chain {
        service_to_endpoint_rules(tx, cfg, &chains.local_policy, &local, affinity.is_some());
    }
    // "Generate the per-endpoint chains"
    for ep in &reachable {
        if cfg.release >= crate::release::Release::V1_36 {
            if ep.local {
                tx.element(
                    super::HAIRPIN_SET,
                    &format!("{} . {} . {protocol} . {}", ep.ip, ep.ip, ep.port),
                    None,
                    None,
                );
            }
        } else {
            tx.rule(
                &ep.chain,
                &format!("{ip} saddr {} jump {MARK_MASQ_CHAIN}", ep.ip),
            );
        }
        if affinity.is_some() {
            tx.rule(
                &ep.chain,
                &format!("update @{} {{ {ip} saddr }}", ep.affinity_set),
            );
        }
        tx.rule(
            &ep.chain,
            &format!("meta l4proto {protocol} dnat to {}", ep.key),
        );
    }
}

/// `writeServiceToEndpointRules`: affinity first (`ip saddr @affinity-X goto endpoint-X`), then
/// `numgen random mod N vmap { 0 : goto …, 1 : goto … }`.
fn service_to_endpoint_rules(
    tx: &mut Tx,
    cfg: &Config,
    chain: &str,
    endpoints: &[Endpoint],
    affinity: bool,
) {
    if affinity {
        for ep in endpoints {
            tx.rule(
                chain,
                &format!(
                    "{} saddr @{} goto {}",
                    cfg.family.ip(),
                    ep.affinity_set,
                    ep.chain
                ),
            );
        }
    }
    let elements: Vec<String> = endpoints
        .iter()
        .enumerate()
        .map(|(i, ep)| format!("{i} : goto {}", ep.chain))
        .collect();
    tx.rule(
        chain,
        &format!(
            "numgen random mod {} vmap {{ {} }}",
            endpoints.len(),
            elements.join(" , ")
        ),
    );
}
