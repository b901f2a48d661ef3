//! The rules of one service port: the body of the `for svcName, svc := range
//! proxier.svcPortMap` loop in `syncProxyRules`, and `writeServiceToEndpointRules`
//! (pkg/proxy/iptables/proxier.go). Rules are written in the same order, to the same buffers.

use super::endpoints::{categorized, Categorized, Endpoint};
use super::names::ServiceChains;
use super::{
    Buffers, Config, KUBE_EXTERNAL_SERVICES, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL,
    KUBE_SERVICES,
};
use crate::proxier::endpoints::PolicyUse;
use crate::scenario::cluster::{NodeContext, ServicePortInfo};
use crate::scenario::ServiceType;

/// Everything about one service port the rule writers need, computed up front as the top of
/// the loop in `syncProxyRules` does.
struct Ctx<'a> {
    sp: &'a ServicePortInfo,
    cfg: &'a Config,
    /// `svcPortNameString`.
    name: String,
    /// Lower-case protocol.
    proto: &'static str,
    cluster_ip: String,
    port: String,
    chains: ServiceChains,
    eps: Categorized,
    large_cluster: bool,
    external_policy_local: bool,
    internal_policy_local: bool,
    has_endpoints: bool,
    has_internal_endpoints: bool,
    has_external_endpoints: bool,
}

impl Ctx<'_> {
    /// `-m <proto> -p <proto>`, the protocol match every service rule carries.
    fn proto_match(&self) -> String {
        format!("-m {p} -p {p}", p = self.proto)
    }

    /// The chain ClusterIP traffic goes to (`internalTrafficChain`).
    fn internal_chain(&self) -> &str {
        if self.internal_policy_local {
            &self.chains.local_policy
        } else {
            &self.chains.cluster_policy
        }
    }

    /// The chain external traffic ends in (`externalPolicyChain`).
    fn external_policy_chain(&self) -> &str {
        if self.external_policy_local {
            &self.chains.local_policy
        } else {
            &self.chains.cluster_policy
        }
    }

    /// `usesFWChain`: LoadBalancer IPs with loadBalancerSourceRanges.
    fn uses_fw_chain(&self) -> bool {
        self.has_endpoints
            && !self.sp.load_balancer_vips.is_empty()
            && !self.sp.load_balancer_source_ranges.is_empty()
    }

    /// `loadBalancerTrafficChain`.
    fn load_balancer_chain(&self) -> &str {
        if self.uses_fw_chain() {
            &self.chains.firewall
        } else {
            &self.chains.external
        }
    }

    /// (target, comment) of the filter rules for ClusterIP traffic that has no endpoint
    /// (`internalTrafficFilterTarget/Comment`).
    fn internal_filter(&self) -> (&'static str, String) {
        if !self.has_endpoints {
            ("REJECT", format!("\"{} has no endpoints\"", self.name))
        } else {
            ("DROP", format!("\"{} has no local endpoints\"", self.name))
        }
    }

    /// Same for external destinations (`externalTrafficFilterTarget/Comment`); identical text.
    fn external_filter(&self) -> (&'static str, String) {
        self.internal_filter()
    }

    /// `appendServiceCommentLocked`: comments are dropped in large-cluster mode.
    fn comment(&self, text: &str) -> String {
        if self.large_cluster {
            String::new()
        } else {
            format!(" -m comment --comment {text}")
        }
    }
}

/// Whether kube-proxy proxies this service port at all: headless and ExternalName services are
/// skipped by the service change tracker (`ShouldSkipService` in pkg/proxy/util/utils.go).
pub(super) fn is_proxied(sp: &ServicePortInfo) -> bool {
    sp.cluster_ip.is_some() && sp.type_ != ServiceType::ExternalName
}

/// Builds the per-service context; `None` for ports kube-proxy skips.
fn context<'a>(
    sp: &'a ServicePortInfo,
    node: &NodeContext,
    cfg: &'a Config,
    large_cluster: bool,
) -> Option<Ctx<'a>> {
    let cluster_ip = sp.cluster_ip?;
    let name = sp.service_port_name();
    let proto = sp.protocol.lower();
    let externally_accessible = sp.externally_accessible();
    // serviceport.go takes `apiservice.ExternalPolicyLocal(service)`, which is false for
    // services that are not externally accessible.
    let external_policy_local = sp.external_policy_local && externally_accessible;
    let internal_policy_local = sp.internal_policy_local;
    let eps = categorized(sp, node);
    let has_endpoints = eps.has_any;
    let has_internal_endpoints = has_endpoints && !(internal_policy_local && eps.local.is_empty());
    let has_external_endpoints = has_endpoints && !(external_policy_local && eps.local.is_empty());
    Some(Ctx {
        sp,
        cfg,
        chains: ServiceChains::new(&name, proto),
        name,
        proto,
        cluster_ip: cluster_ip.to_string(),
        port: sp.port.to_string(),
        eps,
        large_cluster,
        external_policy_local,
        internal_policy_local,
        has_endpoints,
        has_internal_endpoints,
        has_external_endpoints,
    })
}

/// Writes every rule and chain of one service port, in kube-proxy's order.
pub(super) fn write_service_port(
    b: &mut Buffers,
    sp: &ServicePortInfo,
    node: &NodeContext,
    cfg: &Config,
    large_cluster: bool,
    unchanged: bool,
) {
    if !is_proxied(sp) {
        return;
    }
    let Some(ctx) = context(sp, node, cfg, large_cluster) else {
        return;
    };
    capture_cluster_ip(b, &ctx);
    capture_external_ips(b, &ctx);
    capture_load_balancer_ips(b, &ctx);
    capture_node_port(b, &ctx);
    capture_health_check_node_port(b, &ctx);
    // "If the SVC/SVL/EXT/FW/SEP chains have not changed since the last sync then we can omit
    // them from the restore input": a partial sync writes the rest of an unchanged service
    // into buffers it throws away, keeping only the chain names, which stay in use.
    let mut skipped = Buffers::default();
    let chains = if unchanged { &mut skipped } else { &mut *b };
    internal_traffic_rules(chains, &ctx);
    external_traffic_chain(chains, &ctx);
    firewall_chain(chains, &ctx, node);
    policy_chains(chains, &ctx);
    endpoint_chains(chains, &ctx);
    b.skipped_nat_chains.extend(skipped.nat_chains);
}

/// "Capture the clusterIP.": DNAT entry in nat KUBE-SERVICES, or REJECT/DROP in filter.
fn capture_cluster_ip(b: &mut Buffers, c: &Ctx) {
    if c.has_internal_endpoints {
        b.nat_rules.push(format!(
            "-A {KUBE_SERVICES} -m comment --comment \"{} cluster IP\" {} -d {} --dport {} -j {}",
            c.name,
            c.proto_match(),
            c.cluster_ip,
            c.port,
            c.internal_chain()
        ));
    } else {
        let (target, comment) = c.internal_filter();
        b.filter_rules.push(format!(
            "-A {KUBE_SERVICES} -m comment --comment {comment} {} -d {} --dport {} -j {target}",
            c.proto_match(),
            c.cluster_ip,
            c.port
        ));
    }
}

/// "Capture externalIPs.": to KUBE-EXT-, and REJECT/DROP in filter KUBE-EXTERNAL-SERVICES
/// when external traffic has no endpoint.
fn capture_external_ips(b: &mut Buffers, c: &Ctx) {
    for ip in &c.sp.external_ips {
        if c.has_endpoints {
            b.nat_rules.push(format!(
                "-A {KUBE_SERVICES} -m comment --comment \"{} external IP\" {} -d {ip} --dport {} -j {}",
                c.name,
                c.proto_match(),
                c.port,
                c.chains.external
            ));
        }
        if !c.has_external_endpoints {
            let (target, comment) = c.external_filter();
            b.filter_rules.push(format!(
                "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment {comment} {} -d {ip} --dport {} -j {target}",
                c.proto_match(),
                c.port
            ));
        }
    }
}

/// "Capture load-balancer ingress.": to KUBE-FW- (source ranges) or KUBE-EXT-; the
/// KUBE-PROXY-FIREWALL DROP for traffic the FW chain did not accept; REJECT/DROP without
/// external endpoints.
fn capture_load_balancer_ips(b: &mut Buffers, c: &Ctx) {
    for ip in &c.sp.load_balancer_vips {
        if c.has_endpoints {
            b.nat_rules.push(format!(
                "-A {KUBE_SERVICES} -m comment --comment \"{} loadbalancer IP\" {} -d {ip} --dport {} -j {}",
                c.name,
                c.proto_match(),
                c.port,
                c.load_balancer_chain()
            ));
        }
        if c.uses_fw_chain() {
            b.filter_rules.push(format!(
                "-A {KUBE_PROXY_FIREWALL} -m comment --comment \"{} traffic not accepted by {}\" {} -d {ip} --dport {} -j DROP",
                c.name,
                c.chains.firewall,
                c.proto_match(),
                c.port
            ));
        }
    }
    if !c.has_external_endpoints {
        let (target, comment) = c.external_filter();
        for ip in &c.sp.load_balancer_vips {
            b.filter_rules.push(format!(
                "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment {comment} {} -d {ip} --dport {} -j {target}",
                c.proto_match(),
                c.port
            ));
        }
    }
}

/// "Capture nodeports.". The `-d 127.0.0.0/8 ... -m nfacct` twin of the NodePort rule is only
/// written when the nfacct counter exists; we never create it (see the module doc), so, as
/// kube-proxy does then, it is left out. Localhost NodePorts still match the rule below.
fn capture_node_port(b: &mut Buffers, c: &Ctx) {
    let Some(node_port) = c.sp.node_port else {
        return;
    };
    if c.has_endpoints {
        b.nat_rules.push(format!(
            "-A {KUBE_NODEPORTS} -m comment --comment {} {} --dport {node_port} -j {}",
            c.name,
            c.proto_match(),
            c.chains.external
        ));
    }
    if !c.has_external_endpoints {
        let (target, comment) = c.external_filter();
        b.filter_rules.push(format!(
            "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment {comment} -m addrtype --dst-type LOCAL {} --dport {node_port} -j {target}",
            c.proto_match()
        ));
    }
}

/// "Capture healthCheckNodePorts.": accepted in filter KUBE-NODEPORTS whether or not the node
/// has local endpoints. serviceport.go only keeps the port when `NeedsHealthCheck` (type
/// LoadBalancer with externalTrafficPolicy Local), which we re-check here.
fn capture_health_check_node_port(b: &mut Buffers, c: &Ctx) {
    let Some(hc) = c.sp.health_check_node_port else {
        return;
    };
    if c.sp.type_ != ServiceType::LoadBalancer || !c.sp.external_policy_local {
        return;
    }
    b.filter_rules.push(format!(
        "-A {KUBE_NODEPORTS} -m comment --comment \"{} health check node port\" -m tcp -p tcp --dport {hc} -j ACCEPT",
        c.name
    ));
}

/// "Set up internal traffic handling.": masquerade ClusterIP traffic from outside the cluster
/// CIDR (or all of it with --masquerade-all), first rule of the internal policy chain.
fn internal_traffic_rules(b: &mut Buffers, c: &Ctx) {
    if !c.has_internal_endpoints {
        return;
    }
    let head = format!(
        "-A {} -m comment --comment \"{} cluster IP\" {} -d {} --dport {}",
        c.internal_chain(),
        c.name,
        c.proto_match(),
        c.cluster_ip,
        c.port
    );
    if c.cfg.masquerade_all {
        b.nat_rules.push(format!("{head} -j {KUBE_MARK_MASQ}"));
    } else if let Some(if_not_local) = c.cfg.if_not_local() {
        b.nat_rules
            .push(format!("{head} {if_not_local} -j {KUBE_MARK_MASQ}"));
    }
}

/// "Set up external traffic handling": the KUBE-EXT- chain, written whenever the service has
/// endpoints and an external destination (even without externally usable endpoints, for the
/// short-circuit rules).
fn external_traffic_chain(b: &mut Buffers, c: &Ctx) {
    if !(c.has_endpoints && c.sp.externally_accessible()) {
        return;
    }
    let ext = &c.chains.external;
    b.nat_chains.push(ext.clone());
    if !c.external_policy_local {
        b.nat_rules.push(format!(
            "-A {ext} -m comment --comment \"masquerade traffic for {} external destinations\" -j {KUBE_MARK_MASQ}",
            c.name
        ));
    } else {
        let svc = &c.chains.cluster_policy;
        if let Some(if_local) = c.cfg.if_local() {
            b.nat_rules.push(format!(
                "-A {ext} -m comment --comment \"pod traffic for {} external destinations\" {if_local} -j {svc}",
                c.name
            ));
        }
        b.nat_rules.push(format!(
            "-A {ext} -m comment --comment \"masquerade LOCAL traffic for {} external destinations\" -m addrtype --src-type LOCAL -j {KUBE_MARK_MASQ}",
            c.name
        ));
        b.nat_rules.push(format!(
            "-A {ext} -m comment --comment \"route LOCAL traffic for {} external destinations\" -m addrtype --src-type LOCAL -j {svc}",
            c.name
        ));
    }
    if c.has_external_endpoints {
        b.nat_rules
            .push(format!("-A {ext} -j {}", c.external_policy_chain()));
    }
}

/// "Set up firewall chain, if needed": accept each loadBalancerSourceRange (and the LB IPs
/// themselves when a range contains the node IP, for hairpinned VIP traffic); anything falling
/// off the end is dropped by filter KUBE-PROXY-FIREWALL because it was not DNATed.
fn firewall_chain(b: &mut Buffers, c: &Ctx, node: &NodeContext) {
    if !c.uses_fw_chain() {
        return;
    }
    let fw = &c.chains.firewall;
    b.nat_chains.push(fw.clone());
    let head = format!(
        "-A {fw} -m comment --comment \"{} loadbalancer IP\"",
        c.name
    );
    let mut allow_from_node = false;
    for cidr in &c.sp.load_balancer_source_ranges {
        // kube-proxy prints the parsed *net.IPNet: the masked network address.
        b.nat_rules.push(format!(
            "{head} -s {} -j {}",
            cidr.normalized(),
            c.chains.external
        ));
        allow_from_node |= cidr.contains(node.node_ip);
    }
    if allow_from_node {
        for ip in &c.sp.load_balancer_vips {
            b.nat_rules
                .push(format!("{head} -s {ip} -j {}", c.chains.external));
        }
    }
    b.nat_rules.push(format!(
        "-A {fw} -m comment --comment \"other traffic to {} will be dropped by KUBE-PROXY-FIREWALL\"",
        c.name
    ));
}

/// The KUBE-SVC- (Cluster policy) and KUBE-SVL- (Local policy) chains, when used and non-empty.
fn policy_chains(b: &mut Buffers, c: &Ctx) {
    let uses = PolicyUse::of(c.sp);
    if uses.cluster && !c.eps.cluster.is_empty() {
        b.nat_chains.push(c.chains.cluster_policy.clone());
        service_to_endpoint_rules(b, c, &c.chains.cluster_policy, &c.eps.cluster);
    }
    if uses.local && !c.eps.local.is_empty() {
        b.nat_chains.push(c.chains.local_policy.clone());
        service_to_endpoint_rules(b, c, &c.chains.local_policy, &c.eps.local);
    }
}

/// `computeProbability`: `fmt.Sprintf("%0.10f", 1.0/float64(n))`. Rust's `{:.10}` rounds the
/// exact binary value the same way Go does.
pub(super) fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

/// `writeServiceToEndpointRules`: session-affinity `recent --rcheck` jumps first, then the
/// `statistic` cascade where rule i of n matches with probability 1/(n-i) and the last always.
fn service_to_endpoint_rules(b: &mut Buffers, c: &Ctx, chain: &str, endpoints: &[Endpoint]) {
    if let Some(seconds) = c.sp.session_affinity_timeout_seconds {
        for ep in endpoints {
            let comment = c.comment(&format!("\"{} -> {}\"", c.name, ep.key));
            b.nat_rules.push(format!(
                "-A {chain}{comment} -m recent --name {sep} --rcheck --seconds {seconds} --reap -j {sep}",
                sep = ep.chain
            ));
        }
    }
    let n = endpoints.len();
    for (i, ep) in endpoints.iter().enumerate() {
        let comment = c.comment(&format!("\"{} -> {}\"", c.name, ep.key));
        let statistic = if i + 1 < n {
            format!(
                " -m statistic --mode random --probability {}",
                probability(n - i)
            )
        } else {
            String::new()
        };
        b.nat_rules
            .push(format!("-A {chain}{comment}{statistic} -j {}", ep.chain));
    }
}

/// "Generate the per-endpoint chains.": hairpin masquerade, affinity `--set`, DNAT.
fn endpoint_chains(b: &mut Buffers, c: &Ctx) {
    for ep in &c.eps.all_reachable {
        let sep = &ep.chain;
        b.nat_chains.push(sep.clone());
        let comment = c.comment(&c.name);
        b.nat_rules.push(format!(
            "-A {sep}{comment} -s {} -j {KUBE_MARK_MASQ}",
            ep.ip
        ));
        let affinity = if c.sp.session_affinity_timeout_seconds.is_some() {
            format!(" -m recent --name {sep} --set")
        } else {
            String::new()
        };
        b.nat_rules.push(format!(
            "-A {sep}{comment}{affinity} {} -j DNAT --to-destination {}",
            c.proto_match(),
            ep.key
        ));
    }
}
