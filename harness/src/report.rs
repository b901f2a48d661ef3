//! Human-readable results: the table `kpct run` prints.

use crate::run::ScenarioRun;
use std::fmt::Write as _;

/// One row per probe shot outcome: scenario, proxier, probe, verdict, observed translation, and
/// PASS/FAIL against the scenario's declared expectations.
pub fn table(runs: &[ScenarioRun]) -> String {
    let mut rows: Vec<[String; 6]> = Vec::new();
    for run in runs {
        let obs = &run.observation;
        for probe in &obs.probes {
            let failed = run
                .violations
                .iter()
                .any(|v| v.contains(&format!("probe `{}`", probe.probe)));
            let shots = if probe.shots.is_empty() {
                probe.outcomes.clone().unwrap_or_default()
            } else {
                probe.shots.clone()
            };
            let verdicts: Vec<String> = dedup(shots.iter().map(|s| format!("{:?}", s.verdict)));
            let seen: Vec<String> =
                dedup(shots.iter().map(|s| match (&s.backend, &s.backend_saw) {
                    // One entry per distinct path: each shot has its own source port.
                    (Some(b), Some(saw)) => {
                        format!("{b}: {}", saw.replace(&format!(":{} ", s.sport), ":* "))
                    }
                    _ => s.reply.clone().unwrap_or_else(|| "-".into()),
                }));
            rows.push([
                obs.scenario.clone(),
                obs.proxier.clone(),
                probe.probe.clone(),
                verdicts.join(", "),
                seen.join("; "),
                if failed { "FAIL".into() } else { "pass".into() },
            ]);
        }
    }
    let header = [
        "scenario", "proxier", "probe", "verdict", "observed", "result",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.len()).min(70);
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut parts = Vec::new();
        for (cell, w) in cells.iter().zip(&widths) {
            parts.push(format!("{cell:<w$}", w = *w));
        }
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(&mut out, &header.map(String::from));
    line(
        &mut out,
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    );
    for row in &rows {
        line(&mut out, row);
    }
    let failed = rows.iter().filter(|r| r[5] == "FAIL").count();
    let _ = writeln!(
        out,
        "\n{} probe(s), {} passed, {} failed",
        rows.len(),
        rows.len() - failed,
        failed
    );
    for run in runs {
        for v in &run.violations {
            let _ = writeln!(out, "  FAIL {v}");
        }
    }
    out
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// JUnit XML: one testsuite per scenario × proxier, one testcase per probe; a probe with
/// violated expectations is a `<failure>` carrying them and its observation. `errors` are runs
/// that could not complete (setup or programming failed), one `<error>` each.
pub fn junit(runs: &[ScenarioRun], errors: &[(String, String, String)]) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let tests: usize = runs
        .iter()
        .map(|r| r.observation.probes.len())
        .sum::<usize>()
        + errors.len();
    let failures: usize = runs
        .iter()
        .map(|r| {
            r.observation
                .probes
                .iter()
                .filter(|p| {
                    r.violations
                        .iter()
                        .any(|v| v.contains(&format!("probe `{}`", p.probe)))
                })
                .count()
        })
        .sum();
    let _ = writeln!(
        out,
        "<testsuites name=\"kpct\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{}\">",
        errors.len()
    );
    for run in runs {
        let obs = &run.observation;
        let suite = format!("{}@{}", obs.scenario, obs.proxier);
        let failed: Vec<_> = obs
            .probes
            .iter()
            .filter(|p| {
                run.violations
                    .iter()
                    .any(|v| v.contains(&format!("probe `{}`", p.probe)))
            })
            .collect();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\">",
            xml_escape(&suite),
            obs.probes.len(),
            failed.len()
        );
        for probe in &obs.probes {
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\"",
                xml_escape(&suite),
                xml_escape(&probe.probe)
            );
            let mine: Vec<&String> = run
                .violations
                .iter()
                .filter(|v| v.contains(&format!("probe `{}`", probe.probe)))
                .collect();
            if mine.is_empty() {
                out.push_str("/>\n");
            } else {
                let observed = serde_yaml_ng::to_string(probe).unwrap_or_default();
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    xml_escape(mine[0]),
                    xml_escape(&format!(
                        "{}\n\nobserved:\n{observed}",
                        mine.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join("\n")
                    ))
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    for (scenario, proxier, message) in errors {
        let suite = xml_escape(&format!("{scenario}@{proxier}"));
        let _ = writeln!(
            out,
            "  <testsuite name=\"{suite}\" tests=\"1\" failures=\"0\" errors=\"1\">\n    <testcase classname=\"{suite}\" name=\"setup\">\n      <error message=\"{}\">{}</error>\n    </testcase>\n  </testsuite>",
            xml_escape(message.lines().next().unwrap_or_default()),
            xml_escape(message)
        );
    }
    out.push_str("</testsuites>\n");
    out
}
