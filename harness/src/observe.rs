//! From raw probe shots to observations ([`crate::document`]): verdicts, backends, sources and
//! replies, with the node addresses named. (The check of a scenario's declared expectations
//! against them is `expectation_check`.)

use crate::capture::Flow;
use crate::document::{ProbeObservation, ShotObservation, Verdict};
use crate::netns::naming::{BRIDGE_IF, UNDERLAY_IF, VXLAN_IF};
use crate::probe::packet::Answer;
use crate::probe::{ProbePlan, Shot, Source};
use crate::topology::Topology;
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

/// An address some node owns, with a name saying which interface: used to say *who* a
/// masqueraded packet came from ("node-b flannel.1").
#[derive(Debug, Clone)]
pub struct NodeAddress {
    pub ip: IpAddr,
    pub label: String,
}

/// The packet as the backend saw it. A masqueraded source port is written `*`: kube-proxy
/// masquerades with `--random-fully`, so that port is random by design.
fn flow_text(f: &Flow, client: IpAddr) -> String {
    let src = if f.src == client {
        SocketAddr::new(f.src, f.sport).to_string()
    } else {
        format!("{}:*", bracketed(f.src))
    };
    format!("{src} -> {}", SocketAddr::new(f.dst, f.dport))
}

/// An address as it precedes `:port`: IPv6 in brackets.
fn bracketed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

fn who(ip: IpAddr, nodes: &[NodeAddress]) -> String {
    nodes
        .iter()
        .find(|n| n.ip == ip)
        .map(|n| format!("{ip} ({})", n.label))
        .unwrap_or_else(|| ip.to_string())
}

/// The client address a probe really uses (a socket probe from localhost is still sourced from
/// 127.0.0.1 before any NAT).
fn client_ip(plan: &ProbePlan) -> IpAddr {
    match &plan.source {
        Source::Crafted { ip, .. } | Source::Socket { ip, .. } => *ip,
    }
}

/// Classifies one shot.
pub fn observe_shot(plan: &ProbePlan, shot: &Shot, nodes: &[NodeAddress]) -> ShotObservation {
    let client = client_ip(plan);
    if let Some(app) = &shot.app_answer {
        let app = &if plan.asks_http {
            health_server_answer(app)
        } else {
            app.clone()
        };
        // Socket probe: the backend told us who it is and whom it saw.
        let mut seen_ip = None;
        let mut pod = None;
        for field in app.split_whitespace() {
            if let Some(c) = field.strip_prefix("client=") {
                seen_ip = c.parse::<SocketAddr>().ok().map(|a| a.ip());
            } else if let Some(p) = field.strip_prefix("pod=") {
                pod = Some(p.to_string());
            }
        }
        let source = seen_ip.map(|ip| {
            if ip == client {
                "preserved".to_string()
            } else {
                format!("masqueraded to {}", who(ip, nodes))
            }
        });
        // The node's own health-check server answered (kube-proxy's, on a
        // healthCheckNodePort): no pod was reached, as a crafted shot that the node answers
        // is judged.
        if pod
            .as_deref()
            .is_some_and(|p| p.starts_with(crate::backends::HEALTH_CHECK_SERVER))
        {
            return ShotObservation {
                verdict: Verdict::AnsweredByNode,
                backend: None,
                backend_saw: None,
                source,
                reply: Some("answered".into()),
                source_ip_seen: seen_ip,
                reply_translated: Some(true),
                sport: shot.sport,
            };
        }
        // A kept flow also names the backend port that answered: a flow still on a pod's old
        // target port and one moved to its new one differ only there.
        let port = shot
            .kept_backend_port
            .map(|p| format!(" -> port {p}"))
            .unwrap_or_default();
        return ShotObservation {
            verdict: Verdict::Delivered,
            backend: pod,
            backend_saw: seen_ip.map(|ip| format!("client {ip}{port}")),
            source,
            reply: Some("answered".into()),
            source_ip_seen: seen_ip,
            reply_translated: Some(true),
            sport: shot.sport,
        };
    }
    if let Some(err) = &shot.socket_error {
        // A flow that never opened sends nothing: nothing comes back.
        let verdict = if err == "timeout" || err == crate::probe::NEVER_OPENED {
            Verdict::Dropped
        } else {
            Verdict::Rejected
        };
        return ShotObservation {
            verdict,
            backend: None,
            backend_saw: None,
            source: None,
            reply: Some(err.clone()),
            source_ip_seen: None,
            reply_translated: None,
            sport: shot.sport,
        };
    }

    let (reply, translated) = match shot.answer {
        Some(Answer::Reply { from, sport }) => {
            let ok = from == plan.dst && sport == plan.dport;
            (
                Some(format!("from {}", SocketAddr::new(from, sport))),
                Some(ok),
            )
        }
        Some(Answer::Reset) => (Some("tcp-reset".to_string()), None),
        Some(Answer::Unreachable { from, code }) => (
            Some(format!(
                "{}-unreachable code {code} from {}",
                if from.is_ipv6() { "icmpv6" } else { "icmp" },
                who(from, nodes)
            )),
            None,
        ),
        None => (None, None),
    };
    let verdict = match (&shot.delivered, shot.answer) {
        (Some(_), Some(Answer::Reply { .. })) if translated == Some(true) => Verdict::Delivered,
        (Some(_), Some(Answer::Reply { .. })) => Verdict::DeliveredReplyUntranslated,
        (Some(_), Some(Answer::Reset | Answer::Unreachable { .. })) => {
            Verdict::DeliveredRefusedByBackend
        }
        (Some(_), None) => Verdict::DeliveredNoReply,
        (None, Some(Answer::Reset | Answer::Unreachable { .. })) => Verdict::Rejected,
        (None, Some(Answer::Reply { from, .. }))
            if translated == Some(true) && nodes.iter().any(|n| n.ip == from) =>
        {
            Verdict::AnsweredByNode
        }
        // An answer without an observed delivery: something other than a pod answered.
        (None, Some(Answer::Reply { .. })) => Verdict::DeliveredReplyUntranslated,
        (None, None) => Verdict::Dropped,
    };
    let source = shot.delivered.as_ref().map(|d| {
        if d.flow.src == client {
            "preserved".to_string()
        } else {
            format!("masqueraded to {}", who(d.flow.src, nodes))
        }
    });
    ShotObservation {
        verdict,
        backend: shot.delivered.as_ref().map(|d| d.pod.clone()),
        backend_saw: shot.delivered.as_ref().map(|d| flow_text(&d.flow, client)),
        source,
        reply,
        source_ip_seen: shot.delivered.as_ref().map(|d| d.flow.src),
        reply_translated: translated,
        sport: shot.sport,
    }
}

/// Builds a probe's observation. `random_choice`: the proxier picks backends at random.
pub fn observe_probe(
    plan: &ProbePlan,
    shots: &[Shot],
    nodes: &[NodeAddress],
    random_choice: bool,
) -> ProbeObservation {
    let all: Vec<ShotObservation> = shots.iter().map(|s| observe_shot(plan, s, nodes)).collect();
    let from = format!(
        "{} ({})",
        plan.source.label(),
        SocketAddr::new(client_ip(plan), plan.sport)
    );
    let to = format!(
        "{} {}",
        plan.protocol.lower(),
        SocketAddr::new(plan.dst, plan.dport)
    );
    let reached: Vec<String> = all.iter().filter_map(|s| s.backend.clone()).collect();
    let client = Some(client_ip(plan));
    if random_choice {
        // Ports differ per shot, so keep outcomes without the per-shot port details.
        let distinct: BTreeSet<String> = all.iter().map(outcome_key).collect();
        let outcomes = distinct
            .into_iter()
            .filter_map(|k| all.iter().find(|s| outcome_key(s) == k).map(strip_ports))
            .collect();
        let backends: BTreeSet<String> = reached.into_iter().collect();
        return ProbeObservation {
            probe: plan.name.clone(),
            from,
            to,
            shots: Vec::new(),
            outcomes: Some(outcomes),
            shots_fired: Some(all.len() as u32),
            backends: backends.into_iter().collect(),
            all,
            client_ip: client,
        };
    }
    ProbeObservation {
        probe: plan.name.clone(),
        from,
        to,
        shots: all.clone(),
        outcomes: None,
        shots_fired: None,
        backends: reached,
        all,
        client_ip: client,
    }
}

fn outcome_key(s: &ShotObservation) -> String {
    serde_yaml_ng::to_string(&strip_ports(s)).unwrap_or_default()
}

/// Replaces the shot's own source port (which differs per repetition) with `*`.
fn strip_ports(s: &ShotObservation) -> ShotObservation {
    let own = format!(":{} ", s.sport);
    ShotObservation {
        backend_saw: s.backend_saw.as_ref().map(|t| t.replace(&own, ":* ")),
        ..s.clone()
    }
}

/// A value of the format (a verdict, an expected outcome or source) as scenario files and
/// snapshots spell it: `delivered-no-reply`, `answeredByNode`, `masqueraded`.
pub fn spelled<T: serde::Serialize + std::fmt::Debug>(v: T) -> String {
    serde_json::to_value(&v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{v:?}"))
}

/// Everything a node owns, labelled, so masquerade sources can be named in observations.
pub fn node_addresses(topo: &Topology) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    for node in topo.nodes() {
        for ip in node.underlay_ips() {
            out.push(NodeAddress {
                ip,
                label: format!("{} {UNDERLAY_IF}", node.name),
            });
        }
        let gateways = node
            .gateway_ip()
            .map(IpAddr::V4)
            .into_iter()
            .chain(node.gateway_ip_v6().map(IpAddr::V6));
        for ip in gateways {
            out.push(NodeAddress {
                ip,
                label: format!("{} {BRIDGE_IF}", node.name),
            });
        }
        let vteps = node
            .vtep_ip()
            .map(IpAddr::V4)
            .into_iter()
            .chain(node.vtep_ip_v6().map(IpAddr::V6));
        for ip in vteps {
            out.push(NodeAddress {
                ip,
                label: format!("{} {VXLAN_IF}", node.name),
            });
        }
    }
    out
}

/// What a socket shot at a healthCheckNodePort tells of its answer: that the node's health
/// server answered, and nothing of whom it saw, which kube-proxy's HTTP reply does not say
/// (the suite's stand-in greets with it, kube-proxy does not: a comparison must not see them
/// differ there). A line that is neither is passed on as it came.
fn health_server_answer(line: &str) -> String {
    let stand_in = line
        .split_whitespace()
        .any(|f| f.starts_with(&format!("pod={}", crate::backends::HEALTH_CHECK_SERVER)));
    if line.starts_with("HTTP/") || stand_in {
        format!("pod={}", crate::backends::HEALTH_CHECK_SERVER)
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    /// kube-proxy's health server and the stand-in answer a socket shot alike: the node answered,
    /// whom it saw unsaid; anything else passes as it came.
    #[test]
    fn a_health_server_answer_reads_the_same_from_kube_proxy_and_the_stand_in() {
        let node = format!("pod={}", crate::backends::HEALTH_CHECK_SERVER);
        assert_eq!(
            super::health_server_answer("HTTP/1.0 503 Service Unavailable\r\n"),
            node
        );
        assert_eq!(
            super::health_server_answer(&format!(
                "client=192.168.1.11:20000 {node}node-b port=32000\n"
            )),
            node
        );
        assert_eq!(
            super::health_server_answer("client=10.244.1.10:20000 pod=web-1 port=8080\n"),
            "client=10.244.1.10:20000 pod=web-1 port=8080\n"
        );
    }
}
