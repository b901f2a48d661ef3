//! Two observation documents compared by behaviour: what each probe did, whatever the numbers
//! of rules and the source ports, as the real-proxier table and exploring compare runs.

use anyhow::{Context, Result};

/// What an observation document says in terms any two proxiers of the same behaviour share,
/// one line each, sorted: per probe the distinct outcomes (whether recorded shot by shot or as
/// a set, how many shots were fired aside) and the set of backends reached; per step whether
/// it converged and how not. Two proxiers that behave alike give the same lines: this is how a
/// real kube-proxy is compared with the built-in of its mode.
pub fn behaviour_lines(document: &str) -> Result<Vec<String>> {
    Ok(behaviour_lines_of(&read_document(document)?))
}

/// An observation document, read; a golden snapshot's own insta header (a document of its own
/// before it) left out.
fn read_document(document: &str) -> Result<serde_yaml_ng::Value> {
    let body = match document.strip_prefix("---\n") {
        Some(rest) => rest.split_once("\n---\n").map_or(rest, |(_, body)| body),
        None => document,
    };
    serde_yaml_ng::from_str(body).context("reading an observation document")
}

/// Every probe of a document: the initial ones, then each step's.
fn probes(doc: &serde_yaml_ng::Value) -> impl Iterator<Item = &serde_yaml_ng::Value> {
    use serde_yaml_ng::Value;
    let steps = doc["steps"].as_sequence().into_iter().flatten();
    std::iter::once(&doc["probes"])
        .chain(steps.map(|step| &step["probes"]))
        .filter_map(Value::as_sequence)
        .flatten()
}

fn behaviour_lines_of(doc: &serde_yaml_ng::Value) -> Vec<String> {
    let mut lines = std::collections::BTreeSet::new();
    for probe in probes(doc) {
        probe_lines(probe, &mut lines);
    }
    for step in doc["steps"].as_sequence().into_iter().flatten() {
        let name = yaml_text(&step["step"]);
        lines.insert(format!(
            "step {name} converged: {}",
            yaml_text(&step["converged"])
        ));
        for difference in step["not_converged"].as_sequence().into_iter().flatten() {
            lines.insert(format!(
                "step {name} not converged: {}",
                yaml_text(difference)
            ));
        }
    }
    lines.into_iter().collect()
}

/// A scalar as written; anything else as YAML on one line.
fn yaml_text(v: &serde_yaml_ng::Value) -> String {
    use serde_yaml_ng::Value;
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

/// The behaviour lines of one probe observation.
fn probe_lines(probe: &serde_yaml_ng::Value, lines: &mut std::collections::BTreeSet<String>) {
    let name = yaml_text(&probe["probe"]);
    let shots = probe["shots"]
        .as_sequence()
        .or_else(|| probe["outcomes"].as_sequence())
        .into_iter()
        .flatten();
    for shot in shots {
        let mut fields: Vec<String> = shot
            .as_mapping()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let (k, mut v) = (yaml_text(k), yaml_text(v));
                if k == "backend_saw" {
                    v = any_source_port(&v);
                }
                format!("{k}={v}")
            })
            .collect();
        fields.sort();
        lines.insert(format!("probe {name}: {}", fields.join(", ")));
    }
    let mut backends: Vec<String> = probe["backends"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(yaml_text)
        .collect();
    backends.sort();
    backends.dedup();
    lines.insert(format!("probe {name} reached: [{}]", backends.join(", ")));
}

/// The probes (steps' included) a document records as exactly one shot.
fn one_shot_probes(doc: &serde_yaml_ng::Value) -> std::collections::BTreeSet<String> {
    probes(doc)
        .filter(|p| p["shots"].as_sequence().is_some_and(|s| s.len() == 1))
        .map(|p| yaml_text(&p["probe"]))
        .collect()
}

/// Whether a behaviour line is one of `probe`'s: an outcome or the backends it reached.
fn of_probe(line: &str, probe: &str) -> bool {
    line.strip_prefix("probe ")
        .and_then(|rest| rest.strip_prefix(probe))
        .is_some_and(|rest| rest.starts_with(": ") || rest.starts_with(" reached: "))
}

/// `SOURCE:PORT -> DEST` with the source port written `*`: a sequence records each shot's own
/// port, a set of outcomes none.
fn any_source_port(flow: &str) -> String {
    let Some((source, rest)) = flow.split_once(" -> ") else {
        return flow.to_string();
    };
    match source.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
            format!("{host}:* -> {rest}")
        }
        _ => flow.to_string(),
    }
}

/// How two observation documents differ in behaviour ([`behaviour_lines`]): the lines only
/// `a` has (`- …`), then those only `b` has (`+ …`).
///
/// A probe one side fired once, where the other recorded a set of outcomes, is no difference
/// when that one outcome is in the set and its backend among those reached: one shot of a
/// `reachesOneOf` shows one member of a choice (the built-in's deterministic `rr`), which a
/// proxier whose choice is not known in advance (a real IPVS kube-proxy, its real servers in
/// the order Go's maps give) shows whole. The expectations judge whether each is allowed.
pub fn behaviour_differences(a: &str, b: &str) -> Result<Vec<String>> {
    let (a, b) = (read_document(a)?, read_document(b)?);
    let (a_one, b_one) = (one_shot_probes(&a), one_shot_probes(&b));
    let (mut a, mut b) = (behaviour_lines_of(&a), behaviour_lines_of(&b));
    let reached = |lines: &[String], probe: &str| -> Vec<String> {
        let head = format!("probe {probe} reached: [");
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&head)?.strip_suffix(']'))
            .map(|set| {
                set.split(", ")
                    .filter(|b| !b.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let covered: Vec<String> = a_one
        .symmetric_difference(&b_one)
        .filter(|probe| {
            let (one, whole) = if a_one.contains(*probe) {
                (&a, &b)
            } else {
                (&b, &a)
            };
            let outcomes_in = one
                .iter()
                .filter(|l| of_probe(l, probe) && !l.contains(" reached: "))
                .all(|l| whole.contains(l));
            let whole_reached = reached(whole, probe);
            outcomes_in
                && reached(one, probe)
                    .iter()
                    .all(|b| whole_reached.contains(b))
        })
        .cloned()
        .collect();
    for probe in &covered {
        a.retain(|l| !of_probe(l, probe));
        b.retain(|l| !of_probe(l, probe));
    }
    let only = |x: &[String], y: &[String], sign: char| -> Vec<String> {
        x.iter()
            .filter(|l| !y.contains(l))
            .map(|l| format!("{sign} {l}"))
            .collect()
    };
    let mut out = only(&a, &b, '-');
    out.extend(only(&b, &a, '+'));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQUENCE: &str = "---\nsource: x\n---\nscenario: s\nproxier: kube-proxy-ipvs\nnodes: []\nprobes:\n- probe: p\n  from: pod c\n  to: tcp 10.96.0.10:80\n  shots:\n  - verdict: delivered\n    backend: b2\n    backend_saw: 10.244.1.10:20000 -> 10.244.2.11:8080\n  - verdict: delivered\n    backend: b1\n    backend_saw: 10.244.1.10:20001 -> 10.244.2.10:8080\n  backends:\n  - b2\n  - b1\n";
    const SET: &str = "scenario: s\nproxier: kube-proxy:ipvs:v1.37.2\nnodes: []\nprobes:\n- probe: p\n  from: pod c\n  to: tcp 10.96.0.10:80\n  outcomes:\n  - verdict: delivered\n    backend: b1\n    backend_saw: 10.244.1.10:* -> 10.244.2.10:8080\n  - verdict: delivered\n    backend: b2\n    backend_saw: 10.244.1.10:* -> 10.244.2.11:8080\n  shots_fired: 41\n  backends:\n  - b1\n  - b2\n";

    /// One shot of a choice (web-b2) against the set of a proxier whose choice is not known in
    /// advance (web-b1, web-b2): alike; a one shot outside the set, or another verdict, is not.
    #[test]
    fn one_shot_of_a_choice_is_within_the_whole_set() {
        let one = "scenario: s\nproxier: kube-proxy-ipvs\nnodes: []\nprobes:\n- probe: p\n  from: node a\n  to: tcp [fd00::a]:30080\n  shots:\n  - verdict: delivered\n    backend: b2\n  backends:\n  - b2\n";
        let set = "scenario: s\nproxier: kube-proxy:ipvs:v1.37.2\nnodes: []\nprobes:\n- probe: p\n  from: node a\n  to: tcp [fd00::a]:30080\n  outcomes:\n  - verdict: delivered\n    backend: b1\n  - verdict: delivered\n    backend: b2\n  shots_fired: 41\n  backends:\n  - b1\n  - b2\n";
        assert_eq!(
            behaviour_differences(one, set).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            behaviour_differences(set, one).unwrap(),
            Vec::<String>::new()
        );
        let outside = one.replace("b2", "b3");
        assert_eq!(
            behaviour_differences(&outside, set).unwrap(),
            [
                "- probe p reached: [b3]",
                "- probe p: backend=b3, verdict=delivered",
                "+ probe p reached: [b1, b2]",
                "+ probe p: backend=b1, verdict=delivered",
                "+ probe p: backend=b2, verdict=delivered",
            ]
        );
        let refused = one.replace(
            "verdict: delivered",
            "verdict: delivered-refused-by-backend",
        );
        assert!(!behaviour_differences(&refused, set).unwrap().is_empty());
    }

    #[test]
    fn a_sequence_and_a_set_of_the_same_outcomes_behave_alike() {
        assert_eq!(
            behaviour_differences(SEQUENCE, SET).unwrap(),
            Vec::<String>::new()
        );
        let other = SET.replace("backend: b2", "backend: b3");
        assert_eq!(
            behaviour_differences(SEQUENCE, &other).unwrap(),
            [
                "- probe p: backend=b2, backend_saw=10.244.1.10:* -> 10.244.2.11:8080, verdict=delivered",
                "+ probe p: backend=b3, backend_saw=10.244.1.10:* -> 10.244.2.11:8080, verdict=delivered",
            ]
        );
    }
}
