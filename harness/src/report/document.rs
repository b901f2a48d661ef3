//! The report `kpct run --report FILE.md|FILE.html` writes: a summary, what differs between the
//! proxiers when there are several ([`super::differences`]), every failing probe with
//! its spec, the violated expectations, what was observed and the relevant kernel state of the
//! nodes involved (captured before teardown, see [`crate::evidence`]), every run that could not
//! complete, one line per passing probe, and the environment it ran on. No timings: the same
//! results on the same machine give the same document, except for the rules' packet counters,
//! which also count stray packets (a client's RST arriving late) and so may differ by a few.

use super::markup::{self, code, strong, text, Block, Line};
use super::results::Results;
use super::{probe_violations, shots, spelled};
use crate::document::ProbeObservation;
use crate::evidence::{NodeEvidence, ProbeEvidence};
use crate::run::ScenarioRun;
use std::path::Path;

/// The report's format, from the file name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Html,
}

impl Format {
    /// `.md`/`.markdown` or `.html`/`.htm`; anything else is an error naming the choices.
    pub fn from_path(path: &Path) -> Result<Format, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("md" | "markdown") => Ok(Format::Markdown),
            Some("html" | "htm") => Ok(Format::Html),
            _ => Err(format!(
                "--report {}: cannot tell the format from the file name; use a .md (Markdown) or .html (HTML) file",
                path.display()
            )),
        }
    }
}

const TITLE: &str = "kpct report";

/// The report in `format`.
pub fn render(format: Format, results: &Results) -> String {
    let blocks = blocks(results);
    match format {
        Format::Markdown => markup::to_markdown(&blocks),
        Format::Html => markup::to_html(TITLE, &blocks),
    }
}

/// What the selection of kernel state shown for a failing probe is, in words (see
/// [`crate::evidence`] and [`crate::evidence::excerpt`]).
fn selection_rule() -> Line {
    vec![
        text(
            "Kernel state is read before the namespaces are removed, from the nodes the probe's \
packets meet first (the node they enter, and the node owning the destination address). Shown, \
for the targets (the probe's destination and every address of its service port): the iptables \
rules that mention a target (",
        ),
        code("-d"),
        text(", "),
        code("--dport"),
        text(", or "),
        code("--match-set"),
        text(
            " of an ipset holding it), every chain those rules lead to (whole), the rules leading \
into them from the built-in chains, and the masquerade chains ",
        ),
        code("KUBE-POSTROUTING"),
        text(" and "),
        code("KUBE-MARK-MASQ"),
        text(" with every rule that rewrites the source ("),
        code("-j MASQUERADE"),
        text(", "),
        code("-j SNAT"),
        text(
            "), whatever its chain; the nftables set and map elements and the rules that name a \
target inline, what they lead to, and every chain that masquerades or SNATs; the ipset entries \
of the targets; the IPVS virtual services of the targets with their real servers (",
        ),
        code("ipvsadm -Ln"),
        text(
            "); the conntrack entries of flows to a target, with their translation. Each rule \
carries its packet counters as ",
        ),
        code("iptables-save -c"),
        text(" or "),
        code("nft list"),
        text(
            " prints them (nftables rules that count), counted from programming until the run's \
first failing probe.",
        ),
    ]
}

/// The report's content.
pub fn blocks(results: &Results) -> Vec<Block> {
    let (runs, errors) = (&results.runs, &results.errors);
    let mut out = vec![Block::Heading(1, vec![text(TITLE)])];
    let mut scenarios: Vec<&str> = Vec::new();
    let mut proxiers: Vec<&str> = Vec::new();
    let names = runs
        .iter()
        .map(|r| {
            (
                r.observation.scenario.as_str(),
                r.observation.proxier.as_str(),
            )
        })
        .chain(
            errors
                .iter()
                .map(|e| (e.scenario.as_str(), e.proxier.as_str())),
        );
    for (s, p) in names {
        if !scenarios.contains(&s) {
            scenarios.push(s);
        }
        if !proxiers.contains(&p) {
            proxiers.push(p);
        }
    }
    let counts = results.counts();
    let probes = counts.probes;
    let failing = results.failing();
    let not_converged = results.not_converged();
    let verdict = if !counts.any_failure() && counts.not_run > 0 {
        vec![
            strong("Result: not all run."),
            text(format!(
                " All {probes} probe{} that ran passed, but {} run{} could not run on this \
                 kernel (below).",
                plural(probes),
                counts.not_run,
                plural(counts.not_run)
            )),
        ]
    } else if !counts.any_failure() {
        vec![
            strong("Result: all passed."),
            text(format!(
                " All {probes} probe{} passed{}; no run failed to complete.",
                plural(probes),
                if counts.convergence_checks > 0 {
                    format!(
                        ", every node converged after each of {} step{}",
                        counts.convergence_checks,
                        plural(counts.convergence_checks)
                    )
                } else {
                    String::new()
                }
            )),
        ]
    } else {
        vec![
            strong("Result: FAILED."),
            text(format!(
                " {} of {probes} probe{} failed;{} {} run{} could not complete.",
                failing.len(),
                plural(probes),
                if counts.convergence_checks > 0 {
                    format!(
                        " {} of {} convergence check{} failed;",
                        not_converged.len(),
                        counts.convergence_checks,
                        plural(counts.convergence_checks)
                    )
                } else {
                    String::new()
                },
                counts.errored,
                plural(counts.errored)
            )),
        ]
    };
    out.push(Block::Para(verdict));
    let count = |n: usize| vec![text(n.to_string())];
    let mut count_rows = vec![
        vec![
            vec![text("scenarios × proxiers")],
            vec![text(format!(
                "{} × {} ({} run{})",
                scenarios.len(),
                proxiers.len(),
                runs.len() + errors.len(),
                plural(runs.len() + errors.len())
            ))],
        ],
        vec![vec![text("probes")], count(probes)],
        vec![vec![text("passed")], count(probes - failing.len())],
        vec![vec![text("failed")], count(failing.len())],
    ];
    if counts.convergence_checks > 0 {
        count_rows.push(vec![
            vec![text("convergence checks (one per step)")],
            count(counts.convergence_checks),
        ]);
        count_rows.push(vec![
            vec![text("not converged")],
            count(not_converged.len()),
        ]);
    }
    count_rows.push(vec![
        vec![text("errors (runs that could not complete)")],
        count(errors.len()),
    ]);
    out.push(Block::Table {
        head: vec!["".into(), "count".into()],
        rows: count_rows,
    });

    out.push(Block::Table {
        head: vec!["environment".into(), "".into()],
        rows: results
            .environment
            .rows()
            .into_iter()
            .map(|(k, v)| vec![vec![text(k)], vec![code(v)]])
            .collect(),
    });

    out.extend(super::differences::section(results));
    if !failing.is_empty() {
        out.push(Block::Heading(2, vec![text("Failures")]));
        out.push(Block::Para(selection_rule()));
        for (run, probe) in &failing {
            failure(&mut out, results, run, probe);
        }
    }
    let own: Vec<(&ScenarioRun, Vec<&String>)> = runs
        .iter()
        .map(|r| (r, super::run_violations(r)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if !not_converged.is_empty() || !own.is_empty() {
        out.push(Block::Heading(2, vec![text("Not converged")]));
        out.push(Block::Para(vec![text(
            "After these steps a node held something else than a fresh node synced to the \
             same state: history leaked into the kernel.",
        )]));
        for (run, step) in &not_converged {
            out.push(Block::Heading(
                3,
                vec![
                    code(run.observation.scenario.as_str()),
                    text(" × "),
                    code(run.observation.proxier.as_str()),
                    text(": "),
                    code(super::converged_name(&step.step)),
                ],
            ));
            out.push(Block::Pre(step.not_converged.join("\n")));
        }
        for (run, lines) in &own {
            out.push(Block::Heading(
                3,
                vec![
                    code(run.observation.scenario.as_str()),
                    text(" × "),
                    code(run.observation.proxier.as_str()),
                ],
            ));
            out.push(Block::Pre(
                lines
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ));
        }
    }
    if !errors.is_empty() {
        out.push(Block::Heading(2, vec![text("Errors")]));
        for e in errors {
            out.push(Block::Heading(
                3,
                vec![
                    code(e.scenario.as_str()),
                    text(" × "),
                    code(e.proxier.as_str()),
                ],
            ));
            out.push(Block::Pre(e.message.clone()));
        }
    }
    if !results.not_run.is_empty() {
        out.push(Block::Heading(2, vec![text("Not run here")]));
        for n in &results.not_run {
            out.push(Block::Heading(
                3,
                vec![
                    code(n.scenario.as_str()),
                    text(" × "),
                    code(n.proxier.as_str()),
                ],
            ));
            out.push(Block::Pre(n.reason.clone()));
        }
    }
    let passing: Vec<Line> = runs
        .iter()
        .flat_map(|r| r.observation.all_probes().map(move |p| (r, p)))
        .filter(|(r, p)| probe_violations(r, &p.probe).is_empty())
        .map(|(r, p)| {
            vec![
                code(r.observation.scenario.as_str()),
                text(" × "),
                code(r.observation.proxier.as_str()),
                text(": "),
                code(p.probe.as_str()),
                text(format!(" — {}", super::outcome_summary(p))),
            ]
        })
        .collect();
    if !passing.is_empty() {
        out.push(Block::Heading(2, vec![text("Passed probes")]));
        out.push(Block::List(passing));
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn failure(out: &mut Vec<Block>, results: &Results, run: &ScenarioRun, probe: &ProbeObservation) {
    let obs = &run.observation;
    out.push(Block::Heading(
        3,
        vec![
            code(obs.scenario.as_str()),
            text(" × "),
            code(obs.proxier.as_str()),
            text(": probe "),
            code(probe.probe.as_str()),
        ],
    ));
    let ev: Option<&ProbeEvidence> = run.evidence.iter().find(|e| e.probe == probe.probe);
    let declared = |f: fn(&ProbeEvidence) -> &str| -> Line {
        match ev {
            Some(e) => vec![code(f(e)), text(" → ")],
            None => Vec::new(),
        }
    };
    let mut from = vec![strong("from"), text(": ")];
    from.extend(declared(|e| &e.from));
    from.push(code(probe.from.as_str()));
    let mut to = vec![strong("to"), text(": ")];
    to.extend(declared(|e| &e.to));
    to.push(code(probe.to.as_str()));
    let mut spec = vec![from, to];
    if let Some(e) = ev {
        spec.push(vec![
            strong("protocol"),
            text(": "),
            code(e.protocol.as_str()),
        ]);
        spec.push(vec![
            strong("expected"),
            text(" (declared): "),
            code(e.expected.as_str()),
        ]);
    }
    out.push(Block::List(spec));

    out.push(Block::Para(vec![strong("Violated expectations:")]));
    let lines: Vec<String> = match ev {
        Some(e) => e.violations.clone(),
        None => probe_violations(run, &probe.probe)
            .into_iter()
            .cloned()
            .collect(),
    };
    out.push(Block::List(
        group_by_shot(&probe.probe, &lines)
            .into_iter()
            .map(|l| vec![text(l)])
            .collect(),
    ));

    let fired = probe
        .shots_fired
        .map(|n| format!("{n} shot{} fired; distinct outcomes", plural(n as usize)))
        .unwrap_or_else(|| {
            let n = probe.shots.len();
            format!("{n} shot{}, in order", plural(n))
        });
    out.push(Block::Para(vec![
        strong("Observed"),
        text(format!(" ({fired}):")),
    ]));
    let cell = |v: &Option<String>| vec![code(v.as_deref().unwrap_or("-"))];
    out.push(Block::Table {
        head: ["verdict", "backend", "backend saw", "source", "reply"]
            .map(String::from)
            .to_vec(),
        rows: shots(probe)
            .iter()
            .map(|s| {
                vec![
                    vec![code(spelled(s.verdict))],
                    cell(&s.backend),
                    cell(&s.backend_saw),
                    cell(&s.source),
                    cell(&s.reply),
                ]
            })
            .collect(),
    });

    out.push(Block::Para(vec![
        strong("Trace it"),
        text(" (one shot, rule by rule, on every node it meets): "),
        code(results.trace_command(run, &probe.probe)),
    ]));
    traced_path(out, results, run, probe);

    match ev {
        None => out.push(Block::Para(vec![text(
            "No kernel state was captured for this probe.",
        )])),
        Some(e) => {
            if e.nodes.is_empty() {
                out.push(Block::Para(vec![text(
                    "No node of the topology is on this probe's path.",
                )]));
            }
            for node in &e.nodes {
                node_state(out, node, &e.targets);
            }
        }
    }
}

/// The picture of the probe's path, when the run traced it again (`kpct run --report`).
fn traced_path(
    out: &mut Vec<Block>,
    results: &Results,
    run: &ScenarioRun,
    probe: &ProbeObservation,
) {
    let obs = &run.observation;
    let Some(traced) = results
        .traced
        .iter()
        .find(|t| t.scenario == obs.scenario && t.proxier == obs.proxier && t.probe == probe.probe)
    else {
        return;
    };
    match &traced.picture {
        Ok(picture) => {
            let mut head = vec![
                strong("Traced path"),
                text(format!(
                    " (one more shot, fired in a fresh cluster with kernel tracing on: {}), \
                     node by node, each packet the chains it entered and the rules' actions",
                    picture.outcome
                )),
            ];
            match &picture.mark {
                Some(m) => {
                    head.push(text(format!(
                        "; marked ✗ where it went wrong: {} (node {})",
                        m.why, picture.lanes[m.lane].node
                    )));
                }
                None => head.push(text("; no hop could be marked")),
            }
            head.push(text(":"));
            out.push(Block::Para(head));
            out.push(Block::Figure(picture.figure()));
        }
        Err(e) => {
            out.push(Block::Para(vec![
                strong("Traced path"),
                text(": could not be traced:"),
            ]));
            out.push(Block::Pre(e.clone()));
        }
    }
}

fn node_state(out: &mut Vec<Block>, node: &NodeEvidence, targets: &[String]) {
    let mut head = vec![
        strong(format!("Kernel state of {}", node.node)),
        text(format!(" ({}), for ", node.role)),
    ];
    for (i, t) in targets.iter().enumerate() {
        if i > 0 {
            head.push(text(", "));
        }
        head.push(code(t.as_str()));
    }
    head.push(text(":"));
    out.push(Block::Para(head));
    if node.iptables.is_empty() && node.nft.is_empty() {
        out.push(Block::Para(vec![text(
            "iptables: no rule mentions a target, and there is no KUBE-POSTROUTING or \
             KUBE-MARK-MASQ chain.",
        )]));
    } else if !node.iptables.is_empty() {
        out.push(Block::Pre(node.iptables.clone()));
    }
    if !node.nft.is_empty() {
        out.push(Block::Pre(node.nft.clone()));
    }
    if !node.ipsets.is_empty() {
        out.push(Block::Pre(node.ipsets.clone()));
    }
    if let Some(ipvs) = &node.ipvs {
        out.push(Block::Pre(ipvs.clone()));
    }
    if !node.conntrack.is_empty() {
        out.push(Block::Para(vec![text(
            "Conntrack entries of flows to a target:",
        )]));
        out.push(Block::Pre(node.conntrack.join("\n") + "\n"));
    }
    if let Some(dev) = &node.kube_ipvs0 {
        out.push(Block::Para(vec![code(dev.as_str())]));
    }
    for e in &node.errors {
        out.push(Block::Para(vec![
            strong("Could not read: "),
            text(e.as_str()),
        ]));
    }
    if let Some(said) = &node.proxier {
        out.push(Block::Para(vec![strong(format!(
            "What the proxier of {} said and asked:",
            node.node
        ))]));
        out.push(Block::Pre(said.clone()));
    }
}

/// `probe `p` shot 3: expected …` lines, grouped by what they say: `shots 1–41: expected …`.
pub fn group_by_shot(probe: &str, lines: &[String]) -> Vec<String> {
    let prefix = format!("probe `{probe}`");
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for line in lines {
        let rest = line
            .find(&prefix)
            .map(|i| &line[i + prefix.len()..])
            .unwrap_or(line);
        let outcome_message;
        let (shot, message) = match (rest.strip_prefix(" shot "), rest.strip_prefix(" (shots ")) {
            (Some(r), _) => {
                let (n, m) = r.split_once(": ").unwrap_or((r, ""));
                (n.parse::<u32>().ok(), m)
            }
            // A random choice's violation names the outcome, not a shot: `shots reaching web-b: …`.
            (None, Some(r)) => {
                let (went, m) = r.split_once("): ").unwrap_or((r, ""));
                outcome_message = format!("shots {went}: {m}");
                (None, outcome_message.as_str())
            }
            (None, None) => (None, rest.strip_prefix(": ").unwrap_or(rest)),
        };
        match groups.iter_mut().find(|(m, _)| m == message) {
            Some((_, shots)) => shots.extend(shot),
            None => groups.push((message.to_string(), shot.into_iter().collect())),
        }
    }
    groups
        .into_iter()
        .map(|(message, shots)| match shots.len() {
            0 => message,
            1 => format!("shot {}: {message}", shots[0]),
            _ => format!("shots {}: {message}", ranges(&shots)),
        })
        .collect()
}

/// `1–5, 7, 9–10`.
fn ranges(ns: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ns.len() {
        let start = ns[i];
        let mut end = start;
        while i + 1 < ns.len() && ns[i + 1] == end + 1 {
            i += 1;
            end = ns[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}–{end}")
        });
        i += 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_comes_from_the_extension() {
        assert_eq!(Format::from_path(Path::new("r.md")), Ok(Format::Markdown));
        assert_eq!(Format::from_path(Path::new("a/R.HTML")), Ok(Format::Html));
        let e = Format::from_path(Path::new("r.txt")).unwrap_err();
        assert!(e.contains(".md") && e.contains(".html"), "{e}");
        assert!(Format::from_path(Path::new("report")).is_err());
    }

    #[test]
    fn violations_are_grouped_by_shot() {
        let lines: Vec<String> = [1, 2, 3, 5]
            .iter()
            .map(|n| format!("probe `p` shot {n}: expected source masqueraded, observed preserved"))
            .chain(["probe `p` shot 4: expected outcome delivered, observed dropped".into()])
            .collect();
        assert_eq!(
            group_by_shot("p", &lines),
            [
                "shots 1–3, 5: expected source masqueraded, observed preserved",
                "shot 4: expected outcome delivered, observed dropped"
            ]
        );
        assert_eq!(
            group_by_shot("p", &["s [x]: probe `p`: expected reply".into()]),
            ["expected reply"]
        );
        assert_eq!(
            group_by_shot(
                "p",
                &["s [x]: probe `p` (shots reaching web-b): expected a reply".into()]
            ),
            ["shots reaching web-b: expected a reply"]
        );
    }
}
