//! Evidence for a failing probe: what it was, what was expected, and what the kernel of the nodes
//! involved held — read while the namespaces still exist, so a report can show it after
//! teardown. Nothing is read for a probe that passes.
//!
//! Nodes involved: the node the probe's first packet enters (the node a pod or the external
//! client sends it to, or whose socket sends it), and the node owning the destination address
//! when that is another node (a NodePort on the other node's IP). That is where a proxier's
//! programming translates the packet. What is shown of each node's state is chosen by
//! [`excerpt`] for the probe's destination and every address of the service port it targets.

pub mod counters;
pub mod excerpt;

use crate::netns::naming::{mac_for, BRIDGE_IF, UNDERLAY_IF};
use crate::netns::Netns;
use crate::probe::{ProbePlan, Source};
use crate::programming::kube_ipvs0::{self, DeviceState};
use crate::programming::nft::NftTable;
use crate::programming::tools::Xtables;
use crate::programming::{effective_state, EffectiveState, ReadOptions};
use crate::scenario::{Expectation, Probe, ProbeSource, ProbeTarget, Scenario, TargetPort, Via};
use crate::topology::Topology;
use excerpt::Target;
use ipvs_genl::{format_list, Info, IpvsHandle, TableEntry};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// A failing probe, as a report shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProbeEvidence {
    pub probe: String,
    /// The probe's `from` as declared (`pod client`, `external`).
    pub from: String,
    /// The probe's `to` as declared (`service web port http via nodePort node node-a`).
    pub to: String,
    /// `TCP`, `UDP` or `SCTP` (of the service port, or the probe's own for a literal target).
    pub protocol: String,
    /// The declared expectation that applied, on one line.
    pub expected: String,
    /// Each violated expectation (as `expectation_check::check` words them, `probe `x` shot 2: …`).
    pub violations: Vec<String>,
    /// What the excerpts were selected for (`tcp 10.96.0.10:80`, `tcp *:30080`).
    pub targets: Vec<String>,
    pub nodes: Vec<NodeEvidence>,
}

/// One involved node's relevant state.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct NodeEvidence {
    pub node: String,
    /// Why this node is involved.
    pub role: String,
    /// iptables excerpt, `iptables-save` syntax (empty: no rule selected).
    pub iptables: String,
    /// ipset excerpt, `ipset save` syntax (empty: no set holds a target).
    pub ipsets: String,
    /// nftables excerpt, `nft list` syntax, rules with their counters (empty: nothing names a
    /// target).
    pub nft: String,
    /// `ipvsadm -Ln` of the targets' virtual services; `None` when the node has no IPVS
    /// service at all (or the kernel no IPVS).
    pub ipvs: Option<String>,
    /// Whether kube-ipvs0 holds the destination; `None` when the node has no kube-ipvs0.
    pub kube_ipvs0: Option<String>,
    /// The node's conntrack entries of flows to a target, each with the translation the kernel
    /// keeps for it (`tcp 10.244.1.10:40000 -> 10.96.0.10:80, replies 10.244.2.10:8081 ->
    /// 10.244.1.10:40000`): what a stale-entry bug leaves.
    pub conntrack: Vec<String>,
    /// Parts that could not be read.
    pub errors: Vec<String>,
    /// What the node's proxier said and did (a real proxier's log tail, API requests and
    /// events); `None` for a proxier that says nothing.
    pub proxier: Option<String>,
}

/// A node's state, read once per scenario run at its first failing probe.
struct NodeState {
    effective: Result<EffectiveState, String>,
    /// `None`: no IPVS in the kernel, or no service in the table.
    ipvs: Result<Option<(Info, Vec<TableEntry>)>, String>,
    /// `iptables-save -c`, for the counters of the rules shown.
    counters: Result<String, String>,
    /// `ip6tables-save -c`, where the node has ip6tables (a dual-stack one).
    counters6: Result<String, String>,
    /// The nftables tables listed with the rules' counters.
    nft: Result<BTreeMap<NftTable, Vec<String>>, String>,
    conntrack: Result<Vec<crate::netfilter::conntrack::Entry>, String>,
}

fn read_node(ns: &Netns) -> NodeState {
    let ipvs = match IpvsHandle::in_netns(ns.path()) {
        Err(ipvs_genl::Error::FamilyMissing) => Ok(None),
        Err(e) => Err(format!("reading IPVS: {e}")),
        Ok(mut h) => match (h.info(), h.table()) {
            (Ok(info), Ok(table)) => Ok((!table.is_empty()).then_some((info, table))),
            (Err(e), _) | (_, Err(e)) => Err(format!("reading IPVS: {e}")),
        },
    };
    let opts = ReadOptions::default();
    let effective = effective_state(ns, &opts).map_err(|e| e.to_string());
    let saved = |family: Xtables| {
        crate::programming::tools::run(ns, family.save(opts.backend), &["-c"], None)
            .map_err(|e| format!("reading {} rule counters: {e}", family.save(opts.backend)))
    };
    let counters6 = match &effective {
        Ok(eff) if !eff.ip6tables.is_empty() => saved(Xtables::Ip6),
        _ => Ok(String::new()),
    };
    let nft = crate::programming::nft::read_tables_with_counters(ns)
        .map_err(|e| format!("reading nftables rule counters: {e}"));
    let conntrack =
        crate::netfilter::conntrack::entries(ns).map_err(|e| format!("reading conntrack: {e:#}"));
    NodeState {
        effective,
        ipvs,
        counters: saved(Xtables::Ip),
        counters6,
        nft,
        conntrack,
    }
}

/// Collects evidence during one scenario run; free until the first failing probe.
pub struct Collector<'a> {
    topo: &'a Topology,
    read: HashMap<String, NodeState>,
}

impl<'a> Collector<'a> {
    pub fn new(topo: &'a Topology) -> Self {
        Collector {
            topo,
            read: HashMap::new(),
        }
    }

    /// The evidence of probe `spec` (planned as `plan`), whose `violations` against `expected`
    /// were just found.
    pub fn collect(
        &mut self,
        scenario: &Scenario,
        spec: &Probe,
        plan: &ProbePlan,
        expected: &Expectation,
        violations: &[String],
    ) -> ProbeEvidence {
        let targets = targets(scenario, spec, plan);
        let nodes = involved_nodes(self.topo, plan)
            .into_iter()
            .map(|(name, role)| self.node_evidence(&name, role, &targets))
            .collect();
        ProbeEvidence {
            probe: spec.name.clone(),
            from: describe_source(&spec.from),
            to: describe_target(&spec.to),
            protocol: plan.protocol.upper().to_string(),
            expected: describe_expectation(expected),
            violations: violations.to_vec(),
            targets: targets.iter().map(Target::to_string).collect(),
            nodes,
        }
    }

    fn node_evidence(&mut self, name: &str, role: &str, targets: &[Target]) -> NodeEvidence {
        let mut ev = NodeEvidence {
            node: name.to_string(),
            role: role.to_string(),
            ..NodeEvidence::default()
        };
        let Ok(node) = self.topo.node(name) else {
            ev.errors
                .push(format!("node {name} is not in the topology"));
            return ev;
        };
        let state = self
            .read
            .entry(name.to_string())
            .or_insert_with(|| read_node(&node.netns));
        match &state.effective {
            Ok(eff) => {
                let shown = excerpt::iptables_excerpt(&eff.iptables, &eff.ipsets, targets);
                ev.iptables = match &state.counters {
                    Ok(save) => counters::annotate(&shown, save),
                    Err(e) => {
                        ev.errors.push(e.clone());
                        shown
                    }
                };
                // The IPv6 proxier's rules, with their counters from `ip6tables-save -c`.
                let shown6 = excerpt::iptables_excerpt(&eff.ip6tables, &eff.ipsets, targets);
                if !shown6.is_empty() {
                    let shown6 = match &state.counters6 {
                        Ok(save) => counters::annotate(&shown6, save),
                        Err(e) => {
                            ev.errors.push(e.clone());
                            shown6
                        }
                    };
                    ev.iptables.push_str(&format!("# ip6tables\n{shown6}"));
                }
                ev.ipsets = excerpt::ipset_excerpt(&eff.ipsets, targets);
                ev.nft = match &state.nft {
                    Ok(counted) => excerpt::nft_excerpt(counted, targets),
                    Err(e) => {
                        ev.errors.push(e.clone());
                        excerpt::nft_excerpt(&eff.nft, targets)
                    }
                };
                ev.kube_ipvs0 = eff
                    .kube_ipvs0
                    .as_ref()
                    .map(|dev| kube_ipvs0_line(dev, targets));
            }
            Err(e) => ev.errors.push(e.clone()),
        }
        match &state.conntrack {
            Ok(entries) => ev.conntrack = conntrack_lines(entries, targets),
            Err(e) => ev.errors.push(e.clone()),
        }
        match &state.ipvs {
            Ok(Some((info, table))) => {
                let picked = excerpt::ipvs_entries(table, targets);
                ev.ipvs = Some(format_list(info, &picked));
            }
            Ok(None) => {}
            Err(e) => ev.errors.push(e.clone()),
        }
        ev
    }
}

/// How many conntrack entries of a node's evidence are shown.
const CONNTRACK_SHOWN: usize = 10;

/// The entries whose original direction goes to a target, one line each, at most
/// [`CONNTRACK_SHOWN`] and a line saying how many more.
fn conntrack_lines(
    entries: &[crate::netfilter::conntrack::Entry],
    targets: &[Target],
) -> Vec<String> {
    let hits: Vec<&crate::netfilter::conntrack::Entry> = entries
        .iter()
        .filter(|e| {
            targets.iter().any(|t| {
                e.original.protocol == t.protocol.number()
                    && e.original.dport == t.port
                    && t.addr.is_none_or(|a| a == e.original.dst)
            })
        })
        .collect();
    let at = |a: IpAddr, port: u16| std::net::SocketAddr::new(a, port);
    let mut out: Vec<String> = hits
        .iter()
        .take(CONNTRACK_SHOWN)
        .map(|e| {
            // The original direction as every flow is spelled (`tcp SRC -> DST`).
            let original = crate::capture::Flow {
                protocol: e.original.protocol,
                src: e.original.src,
                sport: e.original.sport,
                dst: e.original.dst,
                dport: e.original.dport,
            };
            let (src, dst) = (
                at(e.reply.src, e.reply.sport),
                at(e.reply.dst, e.reply.dport),
            );
            format!("{original}, replies {src} -> {dst}")
        })
        .collect();
    if hits.len() > CONNTRACK_SHOWN {
        out.push(format!("… {} more", hits.len() - CONNTRACK_SHOWN));
    }
    out
}

/// `kube-ipvs0 (DOWN, NOARP): 10.96.0.10 bound as /32 with a local route; 192.168.1.10 not
/// bound` for every target address.
fn kube_ipvs0_line(dev: &DeviceState, targets: &[Target]) -> String {
    let mut addrs: Vec<IpAddr> = Vec::new();
    for a in targets.iter().filter_map(|t| t.addr) {
        if !addrs.contains(&a) {
            addrs.push(a);
        }
    }
    let each: Vec<String> = addrs
        .iter()
        .map(|a| {
            let host = kube_ipvs0::host_prefix_len(*a);
            let bound = dev.addresses.iter().any(|(b, p)| b == a && *p == host);
            let routed = dev.local_routes.contains(a);
            match (bound, routed) {
                (true, true) => format!("{a} bound as /{host} with a local route"),
                (true, false) => format!("{a} bound as /{host} but no local route"),
                (false, _) => format!("{a} not bound"),
            }
        })
        .collect();
    format!(
        "kube-ipvs0 ({}, {}): {}",
        if dev.up { "UP" } else { "DOWN" },
        if dev.noarp { "NOARP" } else { "ARP" },
        each.join("; ")
    )
}

/// The nodes whose programming the probe's packets meet first, with why (see the module
/// documentation).
pub fn involved_nodes(topo: &Topology, plan: &ProbePlan) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    match &plan.source {
        Source::Socket { node, .. } => out.push((node.clone(), "the probe's socket is on it")),
        Source::Crafted { next_hop_mac, .. } => {
            for n in topo.nodes() {
                let hop = |ifname: &str| mac_for(&format!("node/{}/{ifname}", n.name));
                if hop(BRIDGE_IF) == *next_hop_mac || hop(UNDERLAY_IF) == *next_hop_mac {
                    out.push((n.name.clone(), "first hop of the probe"));
                }
            }
        }
    }
    for n in topo.nodes() {
        if n.underlay_ips().any(|ip| ip == plan.dst) && !out.iter().any(|(name, _)| *name == n.name)
        {
            out.push((n.name.clone(), "owns the destination address"));
        }
    }
    out
}

/// The probe's destination, and every address of the service port it targets.
pub fn targets(scenario: &Scenario, spec: &Probe, plan: &ProbePlan) -> Vec<Target> {
    let mut out = vec![Target {
        protocol: plan.protocol,
        addr: Some(plan.dst),
        port: plan.dport,
    }];
    let service = spec.to.service.as_deref().and_then(|wanted| {
        let (ns, name) = wanted.split_once('/').unwrap_or(("default", wanted));
        scenario
            .services
            .iter()
            .find(|s| s.name == name && s.namespace == ns)
    });
    let port = service.and_then(|s| {
        s.spec.ports.iter().find(|p| match &spec.to.port {
            None => true,
            Some(TargetPort::Number(n)) => p.port == *n,
            Some(TargetPort::Name(n)) => p.name.as_deref() == Some(n.as_str()),
        })
    });
    if let (Some(svc), Some(port)) = (service, port) {
        let mut add = |addr: Option<IpAddr>, p: u16| {
            let t = Target {
                protocol: port.protocol,
                addr,
                port: p,
            };
            if !out.contains(&t) {
                out.push(t);
            }
        };
        for ip in svc.cluster_ips() {
            add(Some(ip), port.port);
        }
        for ip in &svc.spec.external_ips {
            add(Some(*ip), port.port);
        }
        for ingress in &svc.status.load_balancer.ingress {
            add(Some(ingress.ip), port.port);
        }
        if let Some(np) = port.node_port {
            add(None, np);
        }
    }
    out
}

/// `pod client`, `node node-a`, `node node-a localhost`, `external`.
pub fn describe_source(from: &ProbeSource) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &from.pod {
        parts.push(format!("pod {p}"));
    }
    if let Some(n) = &from.node {
        parts.push(format!("node {n}"));
    }
    if let Some(n) = &from.node_localhost {
        parts.push(format!("node {n} localhost"));
    }
    if from.external {
        parts.push("external".to_string());
    }
    parts.join(", ")
}

/// `service web port http via nodePort node node-a`, `ip 10.96.0.10 dport 9376`.
pub fn describe_target(to: &ProbeTarget) -> String {
    let mut parts = Vec::new();
    if let Some(s) = &to.service {
        parts.push(format!("service {s}"));
    }
    match &to.port {
        Some(TargetPort::Number(n)) => parts.push(format!("port {n}")),
        Some(TargetPort::Name(n)) => parts.push(format!("port {n}")),
        None => {}
    }
    if let Some(via) = to.via {
        let via = match via {
            Via::ClusterIP => "clusterIP",
            Via::NodePort => "nodePort",
            Via::ExternalIP => "externalIP",
            Via::LoadBalancer => "loadBalancer",
            Via::HealthCheckNodePort => "healthCheckNodePort",
        };
        parts.push(format!("via {via}"));
    }
    if let Some(n) = &to.node {
        parts.push(format!("node {n}"));
    }
    if let Some(ip) = to.ip {
        parts.push(format!("ip {ip}"));
    }
    if let Some(p) = to.dport {
        parts.push(format!("dport {p}"));
    }
    parts.join(" ")
}

/// `reaches [web-1], source masqueraded, reply true, outcome delivered`.
pub fn describe_expectation(e: &Expectation) -> String {
    let mut parts = Vec::new();
    if !e.reaches.is_empty() {
        parts.push(format!("reaches [{}]", e.reaches.join(", ")));
    }
    if !e.reaches_one_of.is_empty() {
        parts.push(format!("reaches one of [{}]", e.reaches_one_of.join(", ")));
    }
    if !e.counts.is_empty() {
        let counts: Vec<String> = e.counts.iter().map(|(p, c)| format!("{p} ×{c}")).collect();
        parts.push(format!("counts {}", counts.join(", ")));
    }
    if !e.sequence.is_empty() {
        parts.push(format!("sequence [{}]", e.sequence.join(", ")));
    }
    if e.same_backend {
        parts.push("same backend".to_string());
    }
    let word = |v: serde_json::Result<serde_json::Value>| {
        v.ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    if let Some(s) = e.source {
        parts.push(format!("source {}", word(serde_json::to_value(s))));
    }
    if let Some(r) = e.reply {
        parts.push(format!("reply {r}"));
    }
    if let Some(o) = e.outcome {
        parts.push(format!("outcome {}", word(serde_json::to_value(o))));
    }
    if parts.is_empty() {
        "(nothing)".to_string()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programming::kube_ipvs0::DeviceKind;
    use crate::scenario::Protocol;

    #[test]
    fn describes_the_declared_probe() {
        let probe: Probe = serde_yaml_ng::from_str(
            "name: p\nfrom: { pod: client }\nto: { service: web, port: http, via: nodePort, node: node-b }\n\
             expect: { reaches: [web-1, web-2], source: masqueraded, reply: true }",
        )
        .unwrap();
        assert_eq!(describe_source(&probe.from), "pod client");
        assert_eq!(
            describe_target(&probe.to),
            "service web port http via nodePort node node-b"
        );
        assert_eq!(
            describe_expectation(probe.expect.as_ref().unwrap()),
            "reaches [web-1, web-2], source masqueraded, reply true"
        );
        let literal: ProbeTarget =
            serde_yaml_ng::from_str("{ ip: 10.96.0.10, dport: 9376 }").unwrap();
        assert_eq!(describe_target(&literal), "ip 10.96.0.10 dport 9376");
    }

    #[test]
    fn says_which_target_addresses_kube_ipvs0_holds() {
        let dev = DeviceState {
            kind: DeviceKind::Dummy,
            up: false,
            noarp: true,
            addresses: vec![([10, 96, 0, 10].into(), 32)],
            local_routes: vec![[10, 96, 0, 10].into()],
        };
        let t = |addr: Option<[u8; 4]>, port| Target {
            protocol: Protocol::Tcp,
            addr: addr.map(|a| IpAddr::V4(a.into())),
            port,
        };
        assert_eq!(
            kube_ipvs0_line(
                &dev,
                &[t(Some([192, 168, 1, 10]), 30080), t(Some([10, 96, 0, 10]), 80), t(None, 30080)]
            ),
            "kube-ipvs0 (DOWN, NOARP): 192.168.1.10 not bound; 10.96.0.10 bound as /32 with a local route"
        );
    }
}
