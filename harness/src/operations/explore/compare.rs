//! Two runs of one generated case compared: the comparison the real-proxier table uses
//! ([`crate::document::behaviour_differences`]), over observations in which what Kubernetes leaves
//! to the proxier is written alike, and each difference given a [`Signature`] that shrinking
//! keeps.

use crate::document::ProbeObservation;
use crate::document::{behaviour_differences, ScenarioObservation};
use crate::scenario::{state_at, Probe, Scenario, SessionAffinity};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// What one run of a case gave: its observation, or the error that ended it.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ran(ScenarioObservation),
    Failed(String),
}

/// How two runs of a case differ, if they do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// The behaviour lines only the first run has (`- …`), then only the second's (`+ …`).
    pub lines: Vec<String>,
    /// Each differing probe or step, by name, with what kind of difference it is.
    pub signatures: BTreeMap<String, Signature>,
}

/// What kind of difference one probe (or step, or the run) shows, in terms that survive
/// shrinking: which fields differ and, for verdicts and convergence, how (`delivered` on one
/// side, `rejected` on the other), without addresses, ports or pod names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Signature(pub Vec<String>);

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// How `a` and `b` (runs of `scenario`) differ in behaviour; `None` when they behave alike.
/// Two runs that both failed are alike here (the caller reports them apart).
pub fn compare(scenario: &Scenario, a: &Outcome, b: &Outcome) -> Result<Option<Difference>> {
    let (a, b) = match (a, b) {
        (Outcome::Ran(a), Outcome::Ran(b)) => (a, b),
        (Outcome::Failed(_), Outcome::Failed(_)) => return Ok(None),
        (Outcome::Failed(e), Outcome::Ran(_)) | (Outcome::Ran(_), Outcome::Failed(e)) => {
            let first = matches!(a, Outcome::Failed(_));
            let (sign, other) = if first { ('-', '+') } else { ('+', '-') };
            let reason = first_line(e);
            return Ok(Some(Difference {
                lines: vec![
                    format!("{sign} run failed: {reason}"),
                    format!("{other} run completed"),
                ],
                signatures: BTreeMap::from([(
                    "(run)".to_string(),
                    Signature(vec![format!("run: {sign}failed {other}completed")]),
                )]),
            }));
        }
    };
    let open = open_choice_probes(scenario);
    let (a, b) = normalized(a, b, &open);
    let lines = behaviour_differences(&yaml(&a)?, &yaml(&b)?)?;
    if lines.is_empty() {
        return Ok(None);
    }
    let signatures = signatures(&lines);
    Ok(Some(Difference { lines, signatures }))
}

fn yaml(o: &ScenarioObservation) -> Result<String> {
    o.to_yaml()
}

/// The first line of an error, without the run's own names (its namespaces carry a random
/// prefix): enough to tell one failure from another.
fn first_line(e: &str) -> String {
    e.lines().next().unwrap_or_default().trim().to_string()
}

/// The probes (`STEP/PROBE` in steps) whose backend Kubernetes leaves to the proxier beyond
/// what every shot shows: those to a Service with `sessionAffinity: ClientIP`, where every shot
/// sticks to one backend, but which one is the first shot's random pick.
fn open_choice_probes(scenario: &Scenario) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut check = |state: &Scenario, probes: &[Probe], prefix: &str| {
        for p in probes {
            if targets_affinity(state, p) {
                out.insert(format!("{prefix}{}", p.name));
            }
        }
    };
    check(scenario, &scenario.probes, "");
    for (k, step) in scenario.steps.iter().enumerate() {
        let state = state_at(scenario, Some(k)).scenario;
        let prefix = format!("{}/", crate::scenario::step_name(step, k));
        check(&state, &step.probes, &prefix);
    }
    out
}

/// Whether `probe` goes to a Service with ClientIP affinity in `state`: by name, or at one of
/// its addresses.
fn targets_affinity(state: &Scenario, probe: &Probe) -> bool {
    state.services.iter().any(|svc| {
        if svc.spec.session_affinity != SessionAffinity::ClientIP {
            return false;
        }
        let by_name = probe.to.service.as_deref().is_some_and(|r| {
            let (ns, name) = r.split_once('/').unwrap_or(("default", r));
            svc.namespace == ns && svc.name == name
        });
        let by_address = probe.to.ip.is_some_and(|ip| {
            svc.cluster_ips().contains(&ip)
                || svc.spec.external_ips.contains(&ip)
                || svc.status.load_balancer.ingress.iter().any(|i| i.ip == ip)
        });
        by_name || by_address
    })
}

/// `a` and `b` with every open-choice probe that reached other backends on the two sides
/// written as what does not depend on which backend: how many it reached (`(one of 1)` where
/// every shot stuck to one, as affinity wants), the verdicts, the replies and the port the
/// backend saw. The source does depend on it: a pod that reaches itself is masqueraded
/// (hairpin), and a node masquerades to the address of its interface towards the backend
/// (`MASQUERADE`, net/netfilter/nf_nat_masquerade.c: `inet_select_addr` on the output
/// device): its bridge for a backend of its own, its VXLAN device for another node's. An
/// open-choice probe that reached the same backends on both sides is compared as it is.
fn normalized(
    a: &ScenarioObservation,
    b: &ScenarioObservation,
    open: &BTreeSet<String>,
) -> (ScenarioObservation, ScenarioObservation) {
    let (mut a, mut b) = (a.clone(), b.clone());
    let reached = |p: &ProbeObservation| {
        let mut r = p.backends.clone();
        r.sort();
        r.dedup();
        r
    };
    let pairs = a.probes.iter_mut().zip(b.probes.iter_mut()).chain(
        a.steps
            .iter_mut()
            .zip(b.steps.iter_mut())
            .flat_map(|(x, y)| x.probes.iter_mut().zip(y.probes.iter_mut())),
    );
    for (x, y) in pairs {
        if x.probe != y.probe || !open.contains(&x.probe) || reached(x) == reached(y) {
            continue;
        }
        for p in [x, y] {
            let label = format!("(one of {})", reached(p).len());
            let shots = p.shots.iter_mut().chain(p.outcomes.iter_mut().flatten());
            for shot in shots {
                if shot.backend.is_some() {
                    shot.backend = Some(label.clone());
                }
                shot.backend_saw = shot.backend_saw.as_deref().map(only_backend_port);
                if shot.source.is_some() {
                    shot.source = Some("(depends on the backend)".into());
                }
                // Whether the reply comes back through the node that translated it follows
                // the pick too: a backend on the client's own node answers it directly.
                if shot.verdict == crate::document::Verdict::DeliveredReplyUntranslated {
                    shot.verdict = crate::document::Verdict::Delivered;
                }
                if shot.verdict == crate::document::Verdict::Delivered && shot.reply.is_some() {
                    shot.reply = Some("(depends on the backend)".into());
                }
            }
            if let Some(outcomes) = &mut p.outcomes {
                outcomes.sort_by_key(|s| serde_yaml_ng::to_string(s).unwrap_or_default());
                outcomes.dedup();
            }
            if !p.backends.is_empty() {
                p.backends = vec![label];
            }
        }
    }
    (a, b)
}

/// What a backend saw, reduced to the port it was reached on (`* -> *:PORT`); a node's
/// socket probe's `client ADDRESS` is `client *`.
fn only_backend_port(saw: &str) -> String {
    if saw.starts_with("client ") {
        return "client *".into();
    }
    let Some((_, dst)) = saw.split_once(" -> ") else {
        return saw.to_string();
    };
    match dst.rsplit_once(':') {
        Some((host, port)) if host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() => {
            format!("* -> *:{port}")
        }
        _ => saw.to_string(),
    }
}

/// The signature of each probe or step that `lines` (from [`behaviour_differences`]) show
/// differing.
fn signatures(lines: &[String]) -> BTreeMap<String, Signature> {
    // (subject, field) -> (values on the first side, values on the second)
    let mut fields: BTreeMap<(String, String), (BTreeSet<String>, BTreeSet<String>)> =
        BTreeMap::new();
    for line in lines {
        let (first, rest) = match line.split_once(' ') {
            Some(("-", rest)) => (true, rest),
            Some(("+", rest)) => (false, rest),
            _ => continue,
        };
        for (subject, field, value) in line_fields(rest) {
            let entry = fields.entry((subject, field)).or_default();
            if first {
                entry.0.insert(value);
            } else {
                entry.1.insert(value);
            }
        }
    }
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((subject, field), (a, b)) in fields {
        if a == b {
            continue;
        }
        let part = if matches!(field.as_str(), "verdict" | "converged") {
            let only = |x: &BTreeSet<String>, y: &BTreeSet<String>| {
                let (x, y): (BTreeSet<String>, BTreeSet<String>) = (
                    x.iter().map(|v| general(v)).collect(),
                    y.iter().map(|v| general(v)).collect(),
                );
                x.difference(&y).cloned().collect::<Vec<_>>().join("|")
            };
            format!("{field}: -{} +{}", only(&a, &b), only(&b, &a))
        } else {
            format!("{field} differs")
        };
        out.entry(subject).or_default().push(part);
    }
    out.into_iter()
        .map(|(k, mut v)| {
            v.sort();
            v.dedup();
            (k, Signature(v))
        })
        .collect()
}

/// The (subject, field, value) triples of one behaviour line (without its sign):
/// `probe NAME: k=v, …`, `probe NAME reached: [..]`, `step NAME converged: …`.
fn line_fields(line: &str) -> Vec<(String, String, String)> {
    if let Some(rest) = line.strip_prefix("step ") {
        if let Some((name, value)) = rest.split_once(" converged: ") {
            return vec![(format!("step {name}"), "converged".into(), value.into())];
        }
        if let Some((name, what)) = rest.split_once(" not converged: ") {
            return vec![(format!("step {name}"), "not converged".into(), what.into())];
        }
        return Vec::new();
    }
    let Some(rest) = line.strip_prefix("probe ") else {
        return Vec::new();
    };
    if let Some((name, set)) = rest.split_once(" reached: ") {
        return vec![(format!("probe {name}"), "reached".into(), set.into())];
    }
    let Some((name, fields)) = rest.split_once(": ") else {
        return Vec::new();
    };
    fields
        .split(", ")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (format!("probe {name}"), k.to_string(), v.to_string()))
        .collect()
}

/// A value with its addresses and numbers left out, for a signature that says how a verdict
/// differs in terms that survive shrinking: `masqueraded to 192.168.1.10 (node-a eth0)` is
/// `masqueraded`, `from 10.96.0.10:80` is `from`, `icmp-unreachable code 3` stays. (Which
/// fields differ is decided on the values as they are: a source masqueraded to another
/// address is a difference.)
fn general(value: &str) -> String {
    if value.starts_with("masqueraded") {
        return "masqueraded".into();
    }
    if value.starts_with("from ") {
        return "from".into();
    }
    value
        .split_whitespace()
        .filter(|w| {
            let bare = w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != ':' && c != '.');
            bare.parse::<IpAddr>().is_err() && bare.parse::<std::net::SocketAddr>().is_err()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_name_fields_and_how_verdicts_differ() {
        let lines = vec![
            "- probe p1: backend=a-1, verdict=delivered".to_string(),
            "+ probe p1: verdict=rejected".to_string(),
            "- probe p1 reached: [a-1]".to_string(),
            "+ probe p1 reached: []".to_string(),
            "- probe s1/c-p2: backend=a-1, backend_saw=client 10.244.1.10 -> port 8080, source=preserved, verdict=delivered".to_string(),
            "+ probe s1/c-p2: backend=a-1, backend_saw=client 10.244.1.10 -> port 9090, source=preserved, verdict=delivered".to_string(),
            "- step s1 converged: true".to_string(),
            "+ step s1 converged: false".to_string(),
        ];
        let s = signatures(&lines);
        assert_eq!(
            s["probe p1"].0,
            [
                "backend differs",
                "reached differs",
                "verdict: -delivered +rejected"
            ]
        );
        assert_eq!(s["probe s1/c-p2"].0, ["backend_saw differs"]);
        assert_eq!(s["step s1"].0, ["converged: -true +false"]);
        let masquerade = signatures(&[
            "- probe p: source=preserved, verdict=delivered".to_string(),
            "+ probe p: source=masqueraded to 10.244.1.1 (node-a cni0), verdict=delivered"
                .to_string(),
        ]);
        assert_eq!(masquerade["probe p"].0, ["source differs"]);
    }

    #[test]
    fn a_field_differing_only_in_an_address_is_named() {
        let s = signatures(&[
            "- probe p: source=masqueraded to 10.244.1.1 (node-a cni0), verdict=delivered"
                .to_string(),
            "+ probe p: source=masqueraded to 10.244.1.0 (node-a flannel.1), verdict=delivered"
                .to_string(),
        ]);
        assert_eq!(s["probe p"].0, ["source differs"]);
    }

    #[test]
    fn values_lose_their_addresses() {
        assert_eq!(
            general("masqueraded to 10.244.1.1 (node-a cni0)"),
            "masqueraded"
        );
        assert_eq!(general("from [fd00::a]:80"), "from");
        assert_eq!(
            general("icmp-unreachable code 3"),
            "icmp-unreachable code 3"
        );
        assert_eq!(
            only_backend_port("10.244.1.10:* -> 10.244.2.11:8080"),
            "* -> *:8080"
        );
        assert_eq!(
            only_backend_port("[fd00::1]:* -> [fd00:10:244:2::11]:8080"),
            "* -> *:8080"
        );
        assert_eq!(only_backend_port("client 10.244.1.1"), "client *");
    }
}

#[cfg(test)]
mod open_choice_tests {
    use super::*;

    fn observation(backend: &str, verdict: &str, reply: &str) -> ScenarioObservation {
        serde_yaml_ng::from_str(&format!(
            r#"
scenario: s
proxier: p
nodes: []
probes:
- probe: p1
  from: pod client-b (10.244.2.10:20000)
  to: udp 192.168.1.10:30001
  outcomes:
  - verdict: {verdict}
    backend: {backend}
    backend_saw: '10.244.2.10:* -> 10.244.1.11:5354'
    source: preserved
    reply: {reply}
  shots_fired: 41
  backends:
  - {backend}
"#
        ))
        .expect("an observation")
    }

    /// Two runs of an affinity probe that picked other backends: one on the client's own
    /// node answers directly (untranslated), the other through the node that translated it.
    /// Neither is the proxier's doing, so they compare alike; with the same pick they do not.
    #[test]
    fn an_open_choice_compares_alike_whatever_the_reply_path_of_each_pick() {
        let near = observation(
            "a-2",
            "delivered-reply-untranslated",
            "from 10.244.2.11:5354",
        );
        let far = observation("a-1", "delivered", "from 192.168.1.10:30001");
        let open: BTreeSet<String> = ["p1".to_string()].into();
        let (x, y) = normalized(&near, &far, &open);
        assert_eq!(x.to_yaml().unwrap(), y.to_yaml().unwrap());
        let same_pick = observation(
            "a-1",
            "delivered-reply-untranslated",
            "from 10.244.1.11:5354",
        );
        let (x, y) = normalized(&same_pick, &far, &open);
        assert_ne!(x.to_yaml().unwrap(), y.to_yaml().unwrap());
    }
}
