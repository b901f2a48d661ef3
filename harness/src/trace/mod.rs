//! `kpct trace`: one shot of one probe with the kernel telling which netfilter chains and rules
//! the packet went through on each node (nf_tables trace, see [`monitor`]), which IPVS virtual
//! service and real server it took (IPVS counters, see [`ipvs_hits`]), and which connections
//! conntrack and IPVS hold afterwards — the packet path the seeds draw by hand, observed.

pub mod ipvs_hits;
pub mod monitor;

use crate::document::ProbeObservation;
use crate::kept_flows::KeptFlows;
use crate::observe;
use crate::observe::node_addresses;
use crate::probe;
use crate::run::{stage, NodeProgrammer};
use crate::scenario::Scenario;
use crate::topology::Topology;
use anyhow::{anyhow, bail, Context, Result};
use ipvs_hits::IpvsHit;
use monitor::{Monitor, TraceEvent, Tracer};
use std::fmt::{self, Write as _};
use std::time::Duration;

/// What one traced shot did.
#[derive(Debug, Clone)]
pub struct Trace {
    pub scenario: String,
    pub proxier: String,
    pub observation: ProbeObservation,
    pub nodes: Vec<NodeTrace>,
}

/// What the kernel of one node reported about the shot.
#[derive(Debug, Clone)]
pub struct NodeTrace {
    pub node: String,
    /// Trace events in the order the kernel emitted them (all packets of the shot).
    pub events: Vec<TraceEvent>,
    /// The IPVS connections after the shot: the services and real servers it went through.
    pub ipvs: Vec<IpvsHit>,
    /// `conntrack -L` after the shot (conntrack is flushed before it).
    pub conntrack: Vec<String>,
    /// `ipvsadm -Lnc` after the shot, when the node has IPVS.
    pub ipvs_connections: Vec<String>,
}

/// One packet's path through one node: the chains in the order it met them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketPath {
    /// The kernel's trace ids of the packet: more than one when the kernel re-traced it
    /// (a frame from a pod is traced at PREROUTING by br_netfilter, then as a new skb from
    /// INPUT or FORWARD on).
    pub ids: Vec<String>,
    /// The packet as it entered the first hook.
    pub first_seen: String,
    /// The chains entered, in order (`table:CHAIN`, hook entries and jumps), each with the
    /// non-jump targets it applied (`nat:KUBE-MARK-MASQ [MARK --set-xmark 0x4000/0x4000]`), and
    /// `IPVS …` where IPVS took the packet from the input hook and sent it out again.
    pub hops: Vec<String>,
    /// The base chain (hook) the packet is in, while the path is being built.
    hook: String,
    /// How the packet looked at the last hook it entered.
    last_seen: String,
}

/// Runs probe `probe_name` of `scenario` once against `proxier`, with tracing on every node:
/// a probe of the initial state (`step` `None`), or of step `step` (1-based), after every step
/// up to it has been applied and synced.
pub async fn trace<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    step: Option<usize>,
    probe_name: &str,
    proxier: &P,
    probe_timeout: Duration,
) -> Result<Trace> {
    if let Some(n) = step.filter(|n| *n == 0 || *n > scenario.steps.len()) {
        bail!(
            "scenario {} has no step {n} (it has {}; steps count from 1)",
            scenario.name,
            scenario.steps.len()
        );
    }
    let state = crate::scenario::state_at(scenario, step.map(|n| n - 1)).scenario;
    let index = state
        .probes
        .iter()
        .position(|p| p.name == probe_name)
        .ok_or_else(|| {
            anyhow!(
                "{} has no probe `{probe_name}`; its probes: {}",
                match step {
                    Some(n) => format!("step {n} of scenario {}", scenario.name),
                    None if scenario.steps.is_empty() => format!("scenario {}", scenario.name),
                    None => format!("scenario {} (before its steps)", scenario.name),
                },
                state
                    .probes
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    // A probe that continues a kept flow is traced on that flow: it is opened where the
    // scenario opens it (untraced), carried through the steps up to this one, and its next
    // exchange is what is traced, with its conntrack entry kept.
    let continued = state.probes[index].continues.clone();
    let opening = match &continued {
        Some(flow) => Some(opening_probe(scenario, step.map(|n| n - 1), flow)?),
        None => None,
    };
    let mut flows = KeptFlows::default();
    let mut staged = stage(scenario, proxier).await?;
    for k in 0..=step.unwrap_or(0) {
        if let (Some(flow), Some((at, probe))) = (&continued, &opening) {
            if *at == k.checked_sub(1) {
                let opened_in = crate::scenario::state_at(scenario, *at).scenario;
                let plan = probe::plan(&opened_in, &staged.topo, *probe)?;
                flows
                    .open(&staged.topo, flow, &plan, probe_timeout)
                    .with_context(|| format!("opening the flow `{flow}` to trace"))?;
            }
        }
        if k < step.unwrap_or(0) {
            staged.advance(scenario, k).await?;
        }
    }
    let topo = &staged.topo;
    let mut plan = match &continued {
        Some(flow) => flows
            .plan(flow)
            .cloned()
            .ok_or_else(|| anyhow!("no flow is kept as `{flow}`"))?,
        None => probe::plan(&state, topo, index)?,
    };
    plan.repeat = 1;
    let protocol = plan.protocol.lower();

    let ipv6 = state.probe_family(&state.probes[index]) == crate::scenario::IpFamily::Ipv6;
    let tracers = topo
        .nodes()
        .iter()
        .map(|node| Tracer::for_node(&node.netns, ipv6))
        .collect::<Result<Vec<_>>>()?;
    if tracers.contains(&Tracer::Xtables) {
        ensure_nft_iptables(topo)?;
    }
    let mut monitors = Vec::new();
    for (node, tracer) in topo.nodes().iter().zip(tracers) {
        monitors.push(Monitor::start(&node.name, &node.netns, protocol, tracer)?);
    }
    // Waited out: the verdict table's own trace events would join the trace shown.
    let patience = probe::Patience {
        timeout: probe_timeout,
        drops: probe::DropDecision::AtTimeout,
    };
    let shots = match &continued {
        Some(flow) => {
            let (_, shot) = flows
                .continue_flow(topo, flow)
                .with_context(|| format!("continuing the flow `{flow}`"))?;
            vec![shot]
        }
        None => probe::fire(topo, &plan, patience)
            .with_context(|| format!("firing probe {}", plan.name))?,
    };
    let mut nodes = Vec::new();
    for (node, monitor) in topo.nodes().iter().zip(monitors) {
        // Read before the closing sentinel, whose own flow would show up in conntrack.
        let (ipvs, ipvs_text) = ipvs_hits::read(&node.netns)?.unwrap_or_default();
        let conntrack = lines_of(node.netns.exec("conntrack", &["-L"]).with_context(|| {
            format!(
                "listing conntrack on node {} (is conntrack installed?)",
                node.name
            )
        })?);
        let events = monitor.finish(&node.netns)?;
        nodes.push(NodeTrace {
            node: node.name.clone(),
            events,
            ipvs,
            conntrack,
            ipvs_connections: lines_of(ipvs_text),
        });
    }
    let mut observation = observe::observe_probe(&plan, &shots, &node_addresses(topo), false);
    if let Some(flow) = &continued {
        observation.probe = format!("{probe_name} (continues the flow `{flow}`)");
    }
    Ok(Trace {
        scenario: scenario.name.clone(),
        proxier: proxier.label(),
        observation,
        nodes,
    })
}

/// Where the flow `flow` is opened: the state (`None`: initial, `Some(k)`: after step k,
/// 0-based) at or before `until` whose probe keeps it, and that probe's index.
fn opening_probe(
    scenario: &Scenario,
    until: Option<usize>,
    flow: &str,
) -> Result<(Option<usize>, usize)> {
    let states = std::iter::once(None).chain((0..until.map_or(0, |u| u + 1)).map(Some));
    let mut found = None;
    for at in states {
        let state = crate::scenario::state_at(scenario, at).scenario;
        if let Some(i) = state
            .probes
            .iter()
            .position(|p| p.keep.as_deref() == Some(flow))
        {
            found = Some((at, i));
        }
    }
    found.ok_or_else(|| anyhow!("no probe up to here keeps the flow `{flow}`"))
}

/// The trace comes from nf_tables: rules programmed through legacy iptables would be invisible.
fn ensure_nft_iptables(topo: &Topology) -> Result<()> {
    let Some(node) = topo.nodes().first() else {
        return Ok(());
    };
    let version = node.netns.exec("iptables", &["--version"])?;
    if !version.contains("nf_tables") {
        anyhow::bail!(
            "`kpct trace` needs iptables' nf_tables backend (its TRACE reports through nfnetlink per namespace); `iptables` here is {}",
            version.trim()
        );
    }
    Ok(())
}

fn lines_of(text: String) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

const BASE_CHAINS: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

impl NodeTrace {
    /// Every traced packet's path through this node, in the order the packets were first seen.
    pub fn paths(&self) -> Vec<PacketPath> {
        let mut paths: Vec<PacketPath> = Vec::new();
        for event in &self.events {
            // The kernel's id hashes the skb's address, flow hash and input interface, so the
            // next packet of a flow entering the same way can reuse an id (the client's RST
            // after its SYN, in a freed skb): a packet with other TCP flags is another packet.
            let same_packet = |p: &PacketPath| match event {
                TraceEvent::Packet { summary, .. } => {
                    tcp_flags(&brief(summary)) == tcp_flags(&p.first_seen)
                }
                TraceEvent::Verdict { .. } => true,
            };
            let index = match paths
                .iter()
                .rposition(|p| p.ids[0] == event.id())
                .filter(|i| same_packet(&paths[*i]))
            {
                Some(i) => i,
                None => {
                    paths.push(PacketPath {
                        ids: vec![event.id().to_string()],
                        first_seen: String::new(),
                        hops: Vec::new(),
                        hook: String::new(),
                        last_seen: String::new(),
                    });
                    paths.len() - 1
                }
            };
            let path = &mut paths[index];
            match event {
                TraceEvent::Packet { summary, hook, .. } => {
                    if path.first_seen.is_empty() {
                        path.first_seen = brief(summary);
                    }
                    path.last_seen = brief(summary);
                    // nft says which base chain the packet enters.
                    if let Some(hook) = hook.as_ref().filter(|h| **h != path.hook) {
                        path.hook = hook.clone();
                        path.hops.push(hook.clone());
                    }
                }
                TraceEvent::Verdict {
                    table,
                    chain,
                    verdict,
                    rule,
                    ..
                } => {
                    let here = format!("{table}:{chain}");
                    if BASE_CHAINS.contains(&chain.as_str()) && path.hook != here {
                        // Input hook, then an output hook, one packet: IPVS took it in between.
                        if path.hook.ends_with(":INPUT") && chain != "INPUT" {
                            let to = destination_of(&path.first_seen);
                            for hit in self
                                .ipvs
                                .iter()
                                .filter(|h| Some(&h.virtual_service) == to.as_ref())
                            {
                                path.hops.push(hit.to_string());
                            }
                        }
                        path.hook = here.clone();
                        path.hops.push(here.clone());
                    }
                    if let Some(target) = verdict
                        .strip_prefix("JUMP:")
                        .or_else(|| verdict.strip_prefix("GOTO:"))
                    {
                        path.hops.push(format!("{table}:{target}"));
                    } else if let Some(action) = rule.as_deref().and_then(action_of) {
                        let entry = format!("[{action}]");
                        match path.hops.last_mut() {
                            Some(last) if last.split(' ').next() == Some(here.as_str()) => {
                                last.push(' ');
                                last.push_str(&entry);
                            }
                            _ => path.hops.push(format!("{here} {entry}")),
                        }
                    }
                }
            }
        }
        join_continuations(paths)
    }

    /// The number (from 1) of the packet a trace id belongs to, as [`NodeTrace::paths`] counts.
    fn packet_number(paths: &[PacketPath], id: &str) -> usize {
        paths
            .iter()
            .position(|p| p.ids.iter().any(|i| i == id))
            .map_or(0, |i| i + 1)
    }
}

/// Joins a trace that starts past PREROUTING to the trace of the same packet (same addresses,
/// ports and flags) that ended at PREROUTING: one packet, re-traced by the kernel.
fn join_continuations(paths: Vec<PacketPath>) -> Vec<PacketPath> {
    let mut out: Vec<PacketPath> = Vec::new();
    for path in paths {
        let starts_later = path
            .hops
            .first()
            .is_some_and(|h| !h.ends_with(":PREROUTING"));
        let earlier = out
            .iter_mut()
            .rev()
            .find(|p| p.hook.ends_with(":PREROUTING") && p.last_seen == path.first_seen);
        match earlier {
            Some(earlier) if starts_later => {
                earlier.ids.extend(path.ids);
                earlier.hops.extend(path.hops);
                earlier.hook = path.hook;
                earlier.last_seen = path.last_seen;
            }
            _ => out.push(path),
        }
    }
    out
}

/// What a rule that neither jumps nor goes to a chain did: the target of an iptables rule
/// (`MARK --set-xmark …`), the statement of an nftables one (`dnat to …`, `masquerade …`,
/// `meta mark set …`, `update @set …`, `reject`, `drop`), without its comment.
fn action_of(rule: &str) -> Option<&str> {
    if let Some((_, target)) = rule.split_once(" -j ") {
        return Some(target);
    }
    let rule = rule.split(" comment \"").next().unwrap_or(rule);
    [
        "dnat to",
        "snat to",
        "masquerade",
        "meta mark set",
        "mark set",
        "update @",
        "reject",
        "drop",
    ]
    .iter()
    .filter_map(|s| rule.find(s))
    .min()
    .map(|at| &rule[at..])
}

/// `DST:DPORT` of a brief packet summary.
fn destination_of(brief: &str) -> Option<String> {
    let field = |key: &str| {
        brief
            .split_whitespace()
            .find_map(|f| f.strip_prefix(key).map(str::to_string))
    };
    Some(format!("{}:{}", field("DST=")?, field("DPORT=")?))
}

/// A traced packet's summary without the fields that never tell a path apart (MACs, length,
/// TTL, IP ID…): interfaces, addresses, ports, TCP flags and the mark stay.
/// The TCP flags of a [`brief`] summary (`SYN`, `SYN ACK`, `RST`; empty for other protocols).
fn tcp_flags(brief: &str) -> Vec<&str> {
    brief
        .split_whitespace()
        .filter(|w| !w.contains('='))
        .collect()
}

fn brief(summary: &str) -> String {
    summary
        .split_whitespace()
        .filter(|field| match field.split_once('=') {
            Some((key, _)) => ["IN", "OUT", "SRC", "DST", "SPORT", "DPORT", "MARK"].contains(&key),
            None => field.chars().all(|c| c.is_ascii_uppercase()) && *field != "DF",
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let obs = &self.observation;
        writeln!(
            f,
            "trace of {} / {} against {}",
            self.scenario, obs.probe, self.proxier
        )?;
        writeln!(f, "probe: {} -> {}", obs.from, obs.to)?;
        for shot in &obs.shots {
            // Spelled as scenario files and every other output spell it (`delivered`).
            let mut outcome = crate::observe::spelled(shot.verdict);
            if let Some(b) = &shot.backend {
                let _ = write!(outcome, " to {b}");
            }
            if let Some(saw) = &shot.backend_saw {
                let _ = write!(outcome, ", backend saw {saw}");
            }
            if let Some(r) = &shot.reply {
                let _ = write!(outcome, ", reply {r}");
            }
            writeln!(f, "outcome: {outcome}")?;
        }
        for node in &self.nodes {
            writeln!(f, "\n== node {} ==", node.node)?;
            let paths = node.paths();
            if paths.is_empty() {
                writeln!(f, "no packet of the probe passed through this node")?;
            }
            for (n, path) in paths.iter().enumerate() {
                writeln!(
                    f,
                    "packet {} [{}]: {}",
                    n + 1,
                    path.ids.join("+"),
                    path.first_seen
                )?;
                writeln!(f, "  path: {}", path.hops.join(" > "))?;
            }
            for hit in &node.ipvs {
                writeln!(f, "{hit}")?;
            }
            if !node.events.is_empty() {
                writeln!(f, "rules hit, in order:")?;
            }
            // (packet id, how it looked) of the packet last shown.
            let mut last: (&str, String) = ("", String::new());
            for event in &node.events {
                match event {
                    TraceEvent::Packet { id, summary, .. } => {
                        let n = NodeTrace::packet_number(&paths, id);
                        let now = brief(summary);
                        if id != last.0 {
                            writeln!(f, "  packet {n}: {now}")?;
                        } else if now != last.1 {
                            // The same packet at a later hook, rewritten (NAT, IPVS, a mark).
                            writeln!(f, "    now: {now}")?;
                        }
                        last = (id, now);
                    }
                    TraceEvent::Verdict {
                        table,
                        chain,
                        kind,
                        verdict,
                        rule,
                        ..
                    } => {
                        let what = match rule {
                            Some(r) => format!("{verdict:<24} {r}"),
                            None => format!("{kind} {verdict}").trim_end().to_string(),
                        };
                        writeln!(f, "    {:<34} {what}", format!("{table}:{chain}"))?;
                    }
                }
            }
            if !node.ipvs_connections.is_empty() {
                writeln!(f, "ipvsadm -Lnc:")?;
                for line in &node.ipvs_connections {
                    writeln!(f, "  {line}")?;
                }
            }
            if !node.conntrack.is_empty() {
                writeln!(f, "conntrack -L:")?;
                for line in &node.conntrack {
                    writeln!(f, "  {line}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(lines: &[&str], ipvs: Vec<IpvsHit>) -> NodeTrace {
        NodeTrace {
            node: "node-a".into(),
            events: lines
                .iter()
                .filter_map(|l| monitor::parse_line(l))
                .collect(),
            ipvs,
            conntrack: Vec::new(),
            ipvs_connections: Vec::new(),
        }
    }

    /// The shape of xtables-monitor's trace of an IPVS NodePort packet (kernel 6.1, kube-proxy
    /// IPVS mode): nat PREROUTING marks, INPUT accepts, IPVS re-injects it at OUTPUT.
    #[test]
    fn ipvs_appears_between_the_input_and_output_hooks() {
        let lines = [
            "PACKET: 2 aa IN=eth0 MACSRC=2:0:0:0:0:1 SRC=192.168.1.100 DST=192.168.1.10 LEN=40 TTL=64 ID=1 DF SPORT=21000 DPORT=30080 SYN",
            " TRACE: 2 aa raw:PREROUTING:policy:ACCEPT",
            " TRACE: 2 aa nat:PREROUTING:rule:0x3:JUMP:KUBE-SERVICES  -4 -t nat -A PREROUTING -j KUBE-SERVICES",
            " TRACE: 2 aa nat:KUBE-SERVICES:rule:0x9:JUMP:KUBE-NODE-PORT  -4 -t nat -A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
            " TRACE: 2 aa nat:KUBE-NODE-PORT:rule:0xa:JUMP:KUBE-MARK-MASQ  -4 -t nat -A KUBE-NODE-PORT -p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ",
            " TRACE: 2 aa nat:KUBE-MARK-MASQ:rule:0xb:CONTINUE  -4 -t nat -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
            " TRACE: 2 aa nat:KUBE-MARK-MASQ:return:",
            " TRACE: 2 aa nat:KUBE-NODE-PORT:return:",
            " TRACE: 2 aa nat:PREROUTING:policy:ACCEPT",
            "PACKET: 2 aa IN=eth0 SRC=192.168.1.100 DST=192.168.1.10 SPORT=21000 DPORT=30080 SYN MARK=0x4000",
            " TRACE: 2 aa filter:INPUT:rule:0x4:JUMP:KUBE-NODE-PORT  -4 -t filter -A INPUT -j KUBE-NODE-PORT",
            " TRACE: 2 aa filter:KUBE-NODE-PORT:return:",
            " TRACE: 2 aa filter:INPUT:policy:ACCEPT",
            "PACKET: 2 aa OUT=cni0 SRC=192.168.1.100 DST=10.244.1.11 SPORT=21000 DPORT=8080 SYN MARK=0x4000",
            " TRACE: 2 aa raw:OUTPUT:policy:ACCEPT",
            "PACKET: 2 aa IN=eth0 OUT=cni0 SRC=192.168.1.100 DST=10.244.1.11 SPORT=21000 DPORT=8080 SYN MARK=0x4000",
            " TRACE: 2 aa nat:POSTROUTING:rule:0x2:JUMP:KUBE-POSTROUTING  -4 -t nat -A POSTROUTING -j KUBE-POSTROUTING",
            " TRACE: 2 aa nat:KUBE-POSTROUTING:rule:0x5:ACCEPT  -4 -t nat -A KUBE-POSTROUTING -j MASQUERADE --random-fully",
        ];
        let hit = |virtual_service: &str| IpvsHit {
            protocol: "TCP".into(),
            state: "SYN_RECV".into(),
            client: "192.168.1.100:21000".into(),
            virtual_service: virtual_service.into(),
            real_server: "10.244.1.11:8080".into(),
            scheduler: "rr".into(),
            forward: "Masq".into(),
        };
        // A connection of another service must not be attributed to this packet.
        let trace = node(
            &lines,
            vec![hit("10.96.123.45:80"), hit("192.168.1.10:30080")],
        );
        let paths = trace.paths();
        assert_eq!(paths.len(), 1);
        assert_eq!(
            paths[0].first_seen,
            "IN=eth0 SRC=192.168.1.100 DST=192.168.1.10 SPORT=21000 DPORT=30080 SYN"
        );
        assert_eq!(
            paths[0].hops,
            [
                "raw:PREROUTING",
                "nat:PREROUTING",
                "nat:KUBE-SERVICES",
                "nat:KUBE-NODE-PORT",
                "nat:KUBE-MARK-MASQ [MARK --set-xmark 0x4000/0x4000]",
                "filter:INPUT",
                "filter:KUBE-NODE-PORT",
                "IPVS TCP 192.168.1.10:30080 rr -> 10.244.1.11:8080 Masq",
                "raw:OUTPUT",
                "nat:POSTROUTING",
                "nat:KUBE-POSTROUTING [MASQUERADE --random-fully]",
            ]
        );
    }

    /// Kernel 6.1 under load: the client's RST after its SYN reused the SYN's skb, and so its
    /// trace id; it must not be taken for the SYN's path (whose continuation then no longer
    /// joins it).
    #[test]
    fn a_reused_trace_id_with_other_flags_is_another_packet() {
        let lines = [
            "PACKET: 2 aa IN=cni0 SRC=10.244.2.10 DST=10.96.123.45 SPORT=20000 DPORT=80 SYN",
            " TRACE: 2 aa raw:PREROUTING:policy:ACCEPT",
            "PACKET: 2 bb IN=cni0 SRC=10.244.2.10 DST=10.96.123.45 SPORT=20000 DPORT=80 SYN",
            " TRACE: 2 bb filter:INPUT:policy:ACCEPT",
            "PACKET: 2 aa IN=cni0 SRC=10.244.2.10 DST=10.96.123.45 SPORT=20000 DPORT=80 RST",
            " TRACE: 2 aa raw:PREROUTING:policy:ACCEPT",
        ];
        let paths = node(&lines, Vec::new()).paths();
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert_eq!(paths[0].ids, ["aa", "bb"]);
        assert_eq!(paths[0].hops, ["raw:PREROUTING", "filter:INPUT"]);
        assert!(paths[1].first_seen.ends_with(" RST"), "{paths:?}");
        assert_eq!(paths[1].hops, ["raw:PREROUTING"]);
    }

    #[test]
    fn packets_are_told_apart_by_trace_id() {
        let lines = [
            "PACKET: 2 aa IN=eth0 SRC=192.168.1.100 DST=192.168.1.10 SPORT=21000 DPORT=30080 SYN",
            " TRACE: 2 aa raw:PREROUTING:policy:ACCEPT",
            "PACKET: 2 bb IN=cni0 OUT=eth0 SRC=10.244.1.11 DST=192.168.1.100 SPORT=8080 DPORT=21000 SYN ACK",
            " TRACE: 2 bb filter:FORWARD:rule:0x7:ACCEPT  -4 -t filter -A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        ];
        let paths = node(&lines, Vec::new()).paths();
        assert_eq!(paths.len(), 2);
        assert_eq!(paths[0].hops, ["raw:PREROUTING"]);
        assert_eq!(paths[1].hops, ["filter:FORWARD [ACCEPT]"]);
        assert_eq!(
            paths[1].first_seen,
            "IN=cni0 OUT=eth0 SRC=10.244.1.11 DST=192.168.1.100 SPORT=8080 DPORT=21000 SYN ACK"
        );
    }

    /// Kernel 6.1, IPVS mode, a pod's SYN to a ClusterIP: br_netfilter traces PREROUTING under
    /// one id, the routed packet continues under another; the RST after it is a new packet.
    #[test]
    fn a_packet_retraced_after_prerouting_is_one_path() {
        let lines = [
            "PACKET: 2 p1 IN=cni0 SRC=10.244.2.10 DST=10.96.123.45 SPORT=20000 DPORT=80 SYN",
            " TRACE: 2 p1 raw:PREROUTING:policy:ACCEPT",
            " TRACE: 2 p1 nat:PREROUTING:rule:0x3:JUMP:KUBE-SERVICES  -4 -t nat -A PREROUTING -j KUBE-SERVICES",
            " TRACE: 2 p1 nat:KUBE-SERVICES:rule:0x9:ACCEPT  -4 -t nat -A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT",
            "PACKET: 2 p2 IN=cni0 SRC=10.244.2.10 DST=10.96.123.45 SPORT=20000 DPORT=80 SYN",
            " TRACE: 2 p2 filter:INPUT:policy:ACCEPT",
            "PACKET: 2 p2 OUT=flannel.1 SRC=10.244.2.10 DST=10.244.1.11 SPORT=20000 DPORT=8080 SYN",
            " TRACE: 2 p2 raw:OUTPUT:policy:ACCEPT",
            "PACKET: 2 r1 IN=cni0 SRC=10.244.2.10 DST=10.96.123.45 SPORT=20000 DPORT=80 RST",
            " TRACE: 2 r1 raw:PREROUTING:policy:ACCEPT",
        ];
        let hit = IpvsHit {
            protocol: "TCP".into(),
            state: "SYN_RECV".into(),
            client: "10.244.2.10:20000".into(),
            virtual_service: "10.96.123.45:80".into(),
            real_server: "10.244.1.11:8080".into(),
            scheduler: "rr".into(),
            forward: "Masq".into(),
        };
        let trace = node(&lines, vec![hit]);
        let paths = trace.paths();
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert_eq!(paths[0].ids, ["p1", "p2"]);
        assert_eq!(
            paths[0].hops,
            [
                "raw:PREROUTING",
                "nat:PREROUTING",
                "nat:KUBE-SERVICES [ACCEPT]",
                "filter:INPUT",
                "IPVS TCP 10.96.123.45:80 rr -> 10.244.1.11:8080 Masq",
                "raw:OUTPUT",
            ]
        );
        assert_eq!(paths[1].ids, ["r1"]);
        assert_eq!(NodeTrace::packet_number(&paths, "p2"), 1);
        assert_eq!(NodeTrace::packet_number(&paths, "r1"), 2);
    }
}
