//! JUnit XML for CI systems: valid against the Jenkins xunit plugin's `junit-10.xsd`
//! (`harness/tests/reports.rs` checks it with `xmllint --schema`). No `time`/`timestamp`/
//! `hostname`: the same results give the same file.

use super::document::RunError;
use super::markup::xml_escape as esc;
use super::probe_violations;
use crate::run::ScenarioRun;
use std::fmt::Write as _;

/// One testsuite per scenario × proxier, one testcase per probe; a probe with violated
/// expectations is a `<failure>` carrying them, its observation and the kernel state captured
/// for it. `errors` are runs that could not complete (setup or programming failed), one
/// `<error>` each.
pub fn junit(runs: &[ScenarioRun], errors: &[RunError]) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let tests: usize = runs
        .iter()
        .map(|r| r.observation.probes.len())
        .sum::<usize>()
        + errors.len();
    let failing = |r: &ScenarioRun| {
        r.observation
            .probes
            .iter()
            .filter(|p| !probe_violations(r, &p.probe).is_empty())
            .count()
    };
    let failures: usize = runs.iter().map(failing).sum();
    let _ = writeln!(
        out,
        "<testsuites name=\"kpct\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{}\">",
        errors.len()
    );
    for run in runs {
        let obs = &run.observation;
        let suite = esc(&format!("{}@{}", obs.scenario, obs.proxier));
        let _ = writeln!(
            out,
            "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">",
            obs.probes.len(),
            failing(run)
        );
        for probe in &obs.probes {
            let _ = write!(
                out,
                "    <testcase classname=\"{suite}\" name=\"{}\"",
                esc(&probe.probe)
            );
            let mine = probe_violations(run, &probe.probe);
            if mine.is_empty() {
                out.push_str("/>\n");
                continue;
            }
            let mut body = mine
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let observed = serde_yaml_ng::to_string(probe).unwrap_or_default();
            let _ = write!(body, "\n\nobserved:\n{observed}");
            if let Some(ev) = run.evidence.iter().find(|e| e.probe == probe.probe) {
                for node in &ev.nodes {
                    let _ = write!(
                        body,
                        "\nkernel state of {} ({}):\n{}{}{}",
                        node.node,
                        node.role,
                        node.iptables,
                        node.ipsets,
                        node.ipvs.as_deref().unwrap_or_default()
                    );
                }
            }
            let _ = writeln!(
                out,
                ">\n      <failure type=\"expectation\" message=\"{}\">{}</failure>\n    </testcase>",
                esc(mine[0]),
                esc(&body)
            );
        }
        out.push_str("  </testsuite>\n");
    }
    for (scenario, proxier, message) in errors {
        let suite = esc(&format!("{scenario}@{proxier}"));
        let _ = writeln!(
            out,
            "  <testsuite name=\"{suite}\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\">\n    <testcase classname=\"{suite}\" name=\"setup\">\n      <error type=\"setup\" message=\"{}\">{}</error>\n    </testcase>\n  </testsuite>",
            esc(message.lines().next().unwrap_or_default()),
            esc(message)
        );
    }
    out.push_str("</testsuites>\n");
    out
}
