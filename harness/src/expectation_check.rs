//! The check of a scenario's declared expectations against what a probe observed: each
//! violated expectation as one line, `probe `x` shot 2: …`.

use crate::document::{ProbeObservation, ShotObservation, Verdict};
use crate::observe::{spelled, NodeAddress};
use crate::scenario::{Expectation, OutcomeExpectation, SourceExpectation};

/// Checks a probe's observation against its declared expectation; each violation is one
/// readable line saying what Kubernetes requires and what was observed.
pub fn check(expect: &Expectation, obs: &ProbeObservation, nodes: &[NodeAddress]) -> Vec<String> {
    // Observations name a backend by its pod's name, unique across namespaces.
    let expect = &expect.by_pod_name();
    let mut problems = Vec::new();
    let name = &obs.probe;
    // Where backend choice is random, which shot went where is chance: a shot's number would
    // make the message differ from run to run. The distinct outcomes do not (enough shots are
    // fired to reach every backend), so those are judged, each named by where it went.
    let judged: Vec<(String, &ShotObservation)> = match &obs.outcomes {
        Some(outcomes) if obs.all.len() > 1 => outcomes
            .iter()
            .map(|shot| {
                let went = match &shot.backend {
                    Some(b) => format!("reaching {b}"),
                    None => spelled(shot.verdict),
                };
                (format!("probe `{name}` (shots {went})"), shot)
            })
            .collect(),
        _ if obs.all.len() > 1 => obs
            .all
            .iter()
            .enumerate()
            .map(|(i, shot)| (format!("probe `{name}` shot {}", i + 1), shot))
            .collect(),
        _ => obs
            .all
            .iter()
            .map(|shot| (format!("probe `{name}`"), shot))
            .collect(),
    };
    for (at, shot) in judged {
        let observed = format!(
            "observed {}{}",
            spelled(shot.verdict),
            shot.backend
                .as_ref()
                .map(|b| format!(" at {b}"))
                .unwrap_or_default()
        );
        if let Some(outcome) = expect.outcome {
            let ok = match outcome {
                OutcomeExpectation::Delivered => shot.verdict.delivered(),
                OutcomeExpectation::Dropped => shot.verdict == Verdict::Dropped,
                OutcomeExpectation::Rejected => shot.verdict == Verdict::Rejected,
                OutcomeExpectation::NotDelivered => !shot.verdict.delivered(),
                OutcomeExpectation::AnsweredByNode => shot.verdict == Verdict::AnsweredByNode,
            };
            if !ok {
                problems.push(format!(
                    "{at}: expected outcome {}, {observed}",
                    spelled(outcome)
                ));
            }
        }
        for allowed in [&expect.reaches, &expect.reaches_one_of] {
            if allowed.is_empty() {
                continue;
            }
            match &shot.backend {
                Some(b) if allowed.contains(b) => {}
                _ => problems.push(format!(
                    "{at}: expected delivery to one of [{}], {observed}",
                    allowed.join(", ")
                )),
            }
        }
        if let Some(src) = expect.source {
            let seen = shot.source_ip_seen;
            let ok = match (src, seen) {
                (SourceExpectation::Preserved, Some(ip)) => Some(ip) == obs.client_ip,
                (SourceExpectation::Masqueraded, Some(ip)) => {
                    Some(ip) != obs.client_ip && nodes.iter().any(|n| n.ip == ip)
                }
                (_, None) => false,
            };
            if !ok {
                problems.push(format!(
                    "{at}: expected source {} (client {}), observed {}",
                    spelled(src),
                    obs.client_ip.map(|c| c.to_string()).unwrap_or_default(),
                    shot.source.clone().unwrap_or_else(|| "no delivery".into())
                ));
            }
        }
        if let (Some(port), true) = (expect.backend_port, shot.verdict.delivered()) {
            let saw = shot.backend_saw.as_deref().and_then(backend_port);
            if saw != Some(port) {
                problems.push(format!(
                    "{at}: expected the backend to be reached on port {port}, observed {}",
                    shot.backend_saw
                        .clone()
                        .unwrap_or_else(|| "no record of the port".into())
                ));
            }
        }
        if let Some(want_reply) = expect.reply {
            let got = shot.reply_translated == Some(true);
            if want_reply != got {
                problems.push(format!(
                    "{at}: expected {}a reply from the address the client used ({}), observed {}",
                    if want_reply { "" } else { "no " },
                    obs.to,
                    shot.reply.clone().unwrap_or_else(|| "no reply".into())
                ));
            }
        }
    }
    problems.extend(check_choice(expect, obs));
    problems
}

/// The port a backend was reached on, as `backend_saw` records it: `SRC -> IP:PORT`, or
/// `client IP -> port PORT` (a kept flow's, from the backend's own answer).
fn backend_port(saw: &str) -> Option<u16> {
    let (_, dst) = saw.split_once(" -> ")?;
    match dst.strip_prefix("port ") {
        Some(port) => port.trim().parse().ok(),
        None => dst.rsplit_once(':')?.1.trim().parse().ok(),
    }
}

/// How often each backend was reached, `web-a ×12, web-b ×8` (in order of first arrival), and
/// `nothing` for shots that reached none.
fn tally(obs: &ProbeObservation) -> String {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for shot in &obs.all {
        let name = shot.backend.clone().unwrap_or_else(|| "nothing".into());
        match seen.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => *count += 1,
            None => seen.push((name, 1)),
        }
    }
    seen.iter()
        .map(|(n, c)| format!("{n} ×{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The expectations on the probe's shots together: the set reached, per-backend counts, the
/// order, one backend for all.
fn check_choice(expect: &Expectation, obs: &ProbeObservation) -> Vec<String> {
    let mut problems = Vec::new();
    let name = &obs.probe;
    let shots = obs.all.len();
    let reached = |pod: &str| {
        obs.all
            .iter()
            .filter(|s| s.backend.as_deref() == Some(pod))
            .count()
    };
    let missing: Vec<&str> = expect
        .reaches
        .iter()
        .map(String::as_str)
        .filter(|pod| reached(pod) == 0)
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "probe `{name}`: expected every one of [{}] to be reached over {shots} shot(s), never reached: {}; observed {}",
            expect.reaches.join(", "),
            missing.join(", "),
            tally(obs)
        ));
    }
    if !expect.counts.is_empty() {
        let mut wrong = false;
        for (pod, want) in &expect.counts {
            wrong |= reached(pod) != *want as usize;
        }
        let listed: usize = expect.counts.values().map(|c| *c as usize).sum();
        wrong |= listed != shots;
        if wrong {
            let want = expect
                .counts
                .iter()
                .map(|(p, c)| format!("{p} ×{c}"))
                .collect::<Vec<_>>()
                .join(", ");
            problems.push(format!(
                "probe `{name}`: expected {want} over {listed} shot(s), observed {} over {shots}",
                tally(obs)
            ));
        }
    }
    if !expect.sequence.is_empty() {
        let off: Vec<usize> = obs
            .all
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                s.backend.as_deref() != Some(expect.sequence[i % expect.sequence.len()].as_str())
            })
            .map(|(i, _)| i)
            .collect();
        if let Some(&first) = off.first() {
            problems.push(format!(
                "probe `{name}`: expected the sequence [{}] repeated over {shots} shot(s); shot {} reached {} instead of {} ({} of {shots} shots out of order); observed {}",
                expect.sequence.join(", "),
                first + 1,
                obs.all[first].backend.as_deref().unwrap_or("nothing"),
                expect.sequence[first % expect.sequence.len()],
                off.len(),
                tally(obs)
            ));
        }
    }
    if !expect.cycle.is_empty() {
        if let Some(problem) = off_cycle(&expect.cycle, obs) {
            problems.push(format!(
                "probe `{name}`: expected a round over [{}] (each once, in one order) repeated over {shots} shot(s); {problem}; observed {}",
                expect.cycle.join(", "),
                tally(obs)
            ));
        }
    }
    if expect.same_backend {
        let first = obs.all.first().and_then(|s| s.backend.as_deref());
        if first.is_none() || obs.all.iter().any(|s| s.backend.as_deref() != first) {
            problems.push(format!(
                "probe `{name}`: expected every shot on one and the same backend, observed {}",
                tally(obs)
            ));
        }
    }
    problems
}

/// What breaks the round over `cycle` in `obs`'s shots, if anything: the first round (as many
/// shots as `cycle` names) must reach each of them once, and every later shot the backend its
/// place in the round had.
fn off_cycle(cycle: &[String], obs: &ProbeObservation) -> Option<String> {
    let backend = |i: usize| obs.all.get(i).and_then(|s| s.backend.as_deref());
    let round: Vec<Option<&str>> = (0..cycle.len()).map(backend).collect();
    let mut first: Vec<&str> = round.iter().map(|b| b.unwrap_or("nothing")).collect();
    let spelled = first.join(", ");
    first.sort_unstable();
    let mut want: Vec<&str> = cycle.iter().map(String::as_str).collect();
    want.sort_unstable();
    if first != want {
        return Some(format!(
            "the first {} shot(s) reached [{spelled}]",
            cycle.len()
        ));
    }
    let off: Vec<usize> = (cycle.len()..obs.all.len())
        .filter(|i| backend(*i) != round[i % cycle.len()])
        .collect();
    let at = *off.first()?;
    Some(format!(
        "the first round went [{spelled}], but shot {} reached {} instead of {} ({} of {} shots out of order)",
        at + 1,
        backend(at).unwrap_or("nothing"),
        round[at % cycle.len()].unwrap_or("nothing"),
        off.len(),
        obs.all.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::observe_shot;
    use std::net::IpAddr;

    fn shot(backend: Option<&str>) -> ShotObservation {
        ShotObservation {
            verdict: if backend.is_some() {
                Verdict::Delivered
            } else {
                Verdict::Dropped
            },
            backend: backend.map(str::to_string),
            backend_saw: None,
            source: None,
            reply: None,
            source_ip_seen: None,
            reply_translated: None,
            sport: 0,
        }
    }

    fn probe(backends: &[&str]) -> ProbeObservation {
        ProbeObservation {
            probe: "p".into(),
            from: String::new(),
            to: String::new(),
            shots: Vec::new(),
            outcomes: None,
            shots_fired: None,
            backends: Vec::new(),
            all: backends.iter().map(|b| shot(Some(b))).collect(),
            client_ip: None,
        }
    }

    fn expect(yaml: &str) -> Expectation {
        serde_yaml_ng::from_str(yaml).expect("an expectation")
    }

    /// A socket probe from a node that kube-proxy's health-check server answers is
    /// `answered-by-node`, as a crafted one from a pod or the external client is; the server is
    /// no backend.
    #[test]
    fn a_health_check_answered_to_a_node_source_is_answered_by_node() {
        let ip: IpAddr = "192.168.1.10".parse().unwrap();
        let plan = crate::probe::ProbePlan {
            name: "node-to-health-check".into(),
            source: crate::probe::Source::Socket {
                label: "node node-a".into(),
                node: "node-a".into(),
                ip,
                borrowed: false,
            },
            protocol: crate::scenario::Protocol::Tcp,
            dst: ip,
            dport: 32000,
            sport: 40000,
            repeat: 1,
            asks_http: true,
        };
        let shot = crate::probe::Shot {
            sport: 40000,
            delivered: None,
            answer: None,
            app_answer: Some(format!(
                "client=192.168.1.10:40000 pod={}node-a",
                crate::backends::HEALTH_CHECK_SERVER
            )),
            kept_backend_port: None,
            socket_error: None,
            dropped_at: None,
        };
        let seen = observe_shot(&plan, &shot, &[]);
        assert_eq!(seen.verdict, Verdict::AnsweredByNode);
        assert_eq!(seen.backend, None);
        let answered = probe(&[]);
        let answered = ProbeObservation {
            all: vec![seen],
            ..answered
        };
        assert!(check(&expect("{outcome: answeredByNode}"), &answered, &[]).is_empty());
    }

    #[test]
    fn a_cycle_is_one_round_in_any_order_repeated() {
        let e = expect("cycle: [web-1, web-2, web-3]");
        // Any order of the round passes, as long as every round keeps it.
        for round in [
            ["web-3", "web-2", "web-1"],
            ["web-1", "web-3", "web-2"],
            ["web-2", "web-1", "web-3"],
        ] {
            let shots: Vec<&str> = round.iter().cycle().take(7).copied().collect();
            assert!(check(&e, &probe(&shots), &[]).is_empty(), "{shots:?}");
        }
        // A weighted scheduler visits one backend twice a round.
        assert_eq!(
            check(&e, &probe(&["web-1", "web-1", "web-2", "web-3", "web-1", "web-1"]), &[]),
            ["probe `p`: expected a round over [web-1, web-2, web-3] (each once, in one order) repeated over 6 shot(s); the first 3 shot(s) reached [web-1, web-1, web-2]; observed web-1 ×4, web-2 ×1, web-3 ×1"]
        );
        // The order changing between rounds (a random choice) is no round robin.
        assert_eq!(
            check(&e, &probe(&["web-1", "web-2", "web-3", "web-2", "web-1", "web-3"]), &[]),
            ["probe `p`: expected a round over [web-1, web-2, web-3] (each once, in one order) repeated over 6 shot(s); the first round went [web-1, web-2, web-3], but shot 4 reached web-2 instead of web-1 (2 of 6 shots out of order); observed web-1 ×2, web-2 ×2, web-3 ×2"]
        );
        // Fewer shots than a round, or one that reached nothing.
        assert_eq!(
            check(&e, &probe(&["web-1", "web-2"]), &[]),
            ["probe `p`: expected a round over [web-1, web-2, web-3] (each once, in one order) repeated over 2 shot(s); the first 3 shot(s) reached [web-1, web-2, nothing]; observed web-1 ×1, web-2 ×1"]
        );
    }

    /// A backend port states where an endpoint was reached: a kept flow's answer (`port N`) or
    /// a crafted shot's (`IP:PORT`); a shot without a record of it fails the expectation.
    #[test]
    fn a_backend_port_is_judged_from_what_the_backend_saw() {
        let e = expect("{reaches: [web-a], backendPort: 9090}");
        let mut p = probe(&["web-a"]);
        let at = |saw: Option<&str>| {
            let mut p = probe(&["web-a"]);
            p.all[0].backend_saw = saw.map(str::to_string);
            check(&e, &p, &[])
        };
        assert!(at(Some("client 10.244.1.10 -> port 9090")).is_empty());
        assert!(at(Some("10.244.1.10:* -> 10.244.2.11:9090")).is_empty());
        assert!(at(Some("[fd00::1]:* -> [fd00:10:244:2::11]:9090")).is_empty());
        assert_eq!(
            at(Some("client 10.244.1.10 -> port 8080")),
            ["probe `p`: expected the backend to be reached on port 9090, observed client 10.244.1.10 -> port 8080"]
        );
        assert_eq!(
            at(None),
            ["probe `p`: expected the backend to be reached on port 9090, observed no record of the port"]
        );
        // A shot that reached nothing is judged by `reaches`, not by the port.
        p.all[0] = shot(None);
        assert!(!check(&expect("{backendPort: 9090}"), &p, &[])
            .iter()
            .any(|l| l.contains("port 9090")));
    }

    /// A pod outside `default` is named `namespace/name`; observations name it by its name.
    #[test]
    fn pods_outside_default_are_named_with_their_namespace() {
        let e = expect("{reaches: [team/web-a]}");
        assert!(check(&e, &probe(&["web-a"]), &[]).is_empty());
        assert!(!check(&e, &probe(&["web-b"]), &[]).is_empty());
    }

    #[test]
    fn reaches_is_the_exact_set() {
        let e = expect("reaches: [web-a, web-b]");
        assert!(check(&e, &probe(&["web-a", "web-b", "web-a"]), &[]).is_empty());
        assert_eq!(
            check(&e, &probe(&["web-a", "web-a"]), &[]),
            ["probe `p`: expected every one of [web-a, web-b] to be reached over 2 shot(s), never reached: web-b; observed web-a ×2"]
        );
        let stray = check(&e, &probe(&["web-a", "web-b", "web-c"]), &[]);
        assert_eq!(
            stray,
            ["probe `p` shot 3: expected delivery to one of [web-a, web-b], observed delivered at web-c"]
        );
    }

    #[test]
    fn a_random_choice_is_judged_by_its_distinct_outcomes_not_by_shot_numbers() {
        let e = expect("reaches: [web-a]");
        let mut random = probe(&["web-b", "web-a", "web-b"]);
        random.outcomes = Some(vec![shot(Some("web-a")), shot(Some("web-b"))]);
        random.shots_fired = Some(3);
        // Which shots went to web-b is chance; that some did is not.
        assert_eq!(
            check(&e, &random, &[]),
            ["probe `p` (shots reaching web-b): expected delivery to one of [web-a], observed delivered at web-b"]
        );
    }

    #[test]
    fn reaches_one_of_lets_the_proxier_choose() {
        let e = expect("reachesOneOf: [web-a, web-b]");
        assert!(check(&e, &probe(&["web-a", "web-a"]), &[]).is_empty());
        assert_eq!(check(&e, &probe(&["web-c"]), &[]).len(), 1);
    }

    #[test]
    fn counts_must_match_per_backend_and_in_total() {
        let e = expect("counts: {web-a: 2, web-b: 1}");
        assert!(check(&e, &probe(&["web-b", "web-a", "web-a"]), &[]).is_empty());
        assert_eq!(
            check(&e, &probe(&["web-a", "web-a", "web-a"]), &[]),
            ["probe `p`: expected web-a ×2, web-b ×1 over 3 shot(s), observed web-a ×3 over 3"]
        );
    }

    #[test]
    fn sequence_repeats_and_names_the_first_shot_out_of_order() {
        let e = expect("sequence: [web-3, web-2, web-1]");
        let good = ["web-3", "web-2", "web-1", "web-3", "web-2", "web-1"];
        assert!(check(&e, &probe(&good), &[]).is_empty());
        assert_eq!(
            check(&e, &probe(&["web-3", "web-2", "web-1", "web-3", "web-3", "web-1"]), &[]),
            ["probe `p`: expected the sequence [web-3, web-2, web-1] repeated over 6 shot(s); shot 5 reached web-3 instead of web-2 (1 of 6 shots out of order); observed web-3 ×3, web-2 ×1, web-1 ×2"]
        );
    }

    #[test]
    fn same_backend_fails_on_a_second_backend_or_no_delivery() {
        let e = expect("sameBackend: true");
        assert!(check(&e, &probe(&["web-b", "web-b"]), &[]).is_empty());
        assert_eq!(
            check(&e, &probe(&["web-b", "web-a"]), &[]),
            ["probe `p`: expected every shot on one and the same backend, observed web-b ×1, web-a ×1"]
        );
        let mut none = probe(&[]);
        none.all = vec![shot(None), shot(None)];
        assert_eq!(check(&e, &none, &[]).len(), 1);
    }
}
