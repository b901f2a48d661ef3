//! JUnit XML for CI systems: valid against the Jenkins xunit plugin's `junit-10.xsd`
//! (`harness/tests/reports.rs` checks it with `xmllint --schema`). Testcases carry their time,
//! testsuites their time and start (`timestamp`, UTC) and the environment as properties;
//! classnames are dotted, `kpct.<proxier>.<scenario>`, so Jenkins and GitLab group testcases by
//! proxier, then scenario.

use super::markup::xml_escape as esc;
use super::results::{timestamp, Results};
use super::{
    converged_name, convergence_violations, not_converged, probe_violations, run_violations,
};
use crate::run::ScenarioRun;
use std::fmt::Write as _;
use std::time::Duration;

/// One testsuite per scenario × proxier, one testcase per probe and one per step's convergence
/// check (`STEP/converged`); a probe with violated expectations is a `<failure>` carrying them,
/// its observation and the kernel state captured for it, a step that did not converge one
/// carrying every difference. Runs that could not complete (setup or programming failed) are one `<error>` each.
pub fn junit(results: &Results) -> String {
    let (runs, errors) = (&results.runs, &results.errors);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let counts = results.counts();
    // Every check of a run: its probes, each step's convergence, and one `run` testcase when
    // a violation belongs to neither.
    let checks = |r: &ScenarioRun| {
        r.observation.all_probes().count()
            + r.observation.steps.len()
            + usize::from(!run_violations(r).is_empty())
    };
    let accepted = |r: &ScenarioRun, testcase: &str| {
        results.accepted.contains(&(
            r.observation.scenario.clone(),
            r.observation.proxier.clone(),
            testcase.to_string(),
        ))
    };
    // Failing checks, and those of them a baseline accepts (reported skipped).
    let failing_and_accepted = |r: &ScenarioRun| {
        let probes = r
            .observation
            .all_probes()
            .filter(|p| !probe_violations(r, &p.probe).is_empty())
            .map(|p| p.probe.clone());
        let steps = r
            .observation
            .steps
            .iter()
            .filter(|s| not_converged(r, s))
            .map(|s| converged_name(&s.step));
        let all: Vec<String> = probes.chain(steps).collect();
        let skipped = all.iter().filter(|t| accepted(r, t)).count();
        (
            all.len() - skipped + usize::from(!run_violations(r).is_empty()),
            skipped,
        )
    };
    let failing = |r: &ScenarioRun| failing_and_accepted(r).0;
    let error_accepted = |e: &super::results::RunError| {
        results
            .accepted
            .contains(&(e.scenario.clone(), e.proxier.clone(), "setup".to_string()))
    };
    // `<testsuites>` has no `skipped` in the JUnit schema: each `<testsuite>` counts its own.
    let errored = errors.iter().filter(|e| !error_accepted(e)).count();
    let _ = writeln!(
        out,
        "<testsuites name=\"kpct\" tests=\"{}\" failures=\"{}\" errors=\"{errored}\" time=\"{}\">",
        runs.iter().map(checks).sum::<usize>() + counts.errored,
        runs.iter().map(failing).sum::<usize>(),
        secs(results.elapsed)
    );
    let mut properties = String::from("    <properties>\n");
    for (name, value) in results.environment.rows() {
        let _ = writeln!(
            properties,
            "      <property name=\"{name}\" value=\"{}\"/>",
            esc(value)
        );
    }
    properties.push_str("    </properties>\n");
    for run in runs {
        let obs = &run.observation;
        let suite = esc(&format!("{}@{}", obs.scenario, obs.proxier));
        let class = classname(&obs.proxier, &obs.scenario);
        let _ = writeln!(
            out,
            "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{}\" timestamp=\"{}\">",
            checks(run),
            failing(run),
            failing_and_accepted(run).1,
            secs(run.timing.total()),
            timestamp(run.timing.started)
        );
        out.push_str(&properties);
        for (i, probe) in obs.all_probes().enumerate() {
            let _ = write!(
                out,
                "    <testcase classname=\"{class}\" name=\"{}\" time=\"{}\"",
                esc(&probe.probe),
                secs(run.timing.probes.get(i).copied().unwrap_or_default())
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
            let _ = write!(
                body,
                "\ntrace it: {}\n",
                results.trace_command(run, &probe.probe)
            );
            if let Some(ev) = run.evidence.iter().find(|e| e.probe == probe.probe) {
                for node in &ev.nodes {
                    let _ = write!(
                        body,
                        "\nkernel state of {} ({}):\n{}{}{}{}",
                        node.node,
                        node.role,
                        node.iptables,
                        node.ipsets,
                        node.nft,
                        node.ipvs.as_deref().unwrap_or_default()
                    );
                    if let Some(said) = &node.proxier {
                        let _ = write!(body, "\nproxier of {}:\n{said}\n", node.node);
                    }
                }
            }
            let _ = writeln!(
                out,
                ">\n      {}\n    </testcase>",
                failure(accepted(run, &probe.probe), "expectation", mine[0], &body)
            );
        }
        for step in &obs.steps {
            let mine = convergence_violations(run, &step.step);
            let _ = write!(
                out,
                "    <testcase classname=\"{class}\" name=\"{}\" time=\"{}\"",
                esc(&converged_name(&step.step)),
                secs(
                    obs.steps
                        .iter()
                        .position(|s| s.step == step.step)
                        .and_then(|i| run.timing.fresh_syncs.get(i).copied())
                        .unwrap_or_default()
                )
            );
            if !not_converged(run, step) {
                out.push_str("/>\n");
                continue;
            }
            let body = if mine.is_empty() {
                step.not_converged.join("\n")
            } else {
                mine.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let message = body.lines().next().unwrap_or("not converged").to_string();
            let _ = writeln!(
                out,
                ">\n      {}\n    </testcase>",
                failure(
                    accepted(run, &converged_name(&step.step)),
                    "convergence",
                    &message,
                    &body
                )
            );
        }
        let own = run_violations(run);
        if !own.is_empty() {
            let body = own
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let _ = writeln!(
                out,
                "    <testcase classname=\"{class}\" name=\"run\" time=\"0.000\">\n      <failure type=\"expectation\" message=\"{}\">{}</failure>\n    </testcase>",
                esc(own[0]),
                esc(&body)
            );
        }
        out.push_str("  </testsuite>\n");
    }
    for e in errors {
        let suite = esc(&format!("{}@{}", e.scenario, e.proxier));
        let first = e.message.lines().next().unwrap_or_default();
        let (errors, skipped, case) = if error_accepted(e) {
            (0, 1, failure(true, "setup", first, &e.message))
        } else {
            (
                1,
                0,
                format!(
                    "<error type=\"setup\" message=\"{}\">{}</error>",
                    esc(first),
                    esc(&e.message)
                ),
            )
        };
        let _ = writeln!(
            out,
            "  <testsuite name=\"{suite}\" tests=\"1\" failures=\"0\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{}\">\n{properties}    <testcase classname=\"{}\" name=\"setup\" time=\"{}\">\n      {case}\n    </testcase>\n  </testsuite>",
            secs(e.elapsed),
            classname(&e.proxier, &e.scenario),
            secs(e.elapsed),
        );
    }
    for n in &results.not_run {
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\" time=\"0.000\">\n{properties}    <testcase classname=\"{}\" name=\"setup\" time=\"0.000\">\n      <skipped message=\"not run here: {}\"/>\n    </testcase>\n  </testsuite>",
            esc(&format!("{}@{}", n.scenario, n.proxier)),
            classname(&n.proxier, &n.scenario),
            esc(&n.reason)
        );
    }
    out.push_str("</testsuites>\n");
    out
}

/// A failing testcase's element: `<failure>`, or `<skipped>` when a baseline accepts it (the
/// failure's text kept in its message and body, so nothing is hidden).
fn failure(accepted: bool, kind: &str, message: &str, body: &str) -> String {
    if accepted {
        format!(
            "<skipped message=\"accepted by the baseline: {}\">{}</skipped>",
            esc(message),
            esc(body)
        )
    } else {
        format!(
            "<failure type=\"{kind}\" message=\"{}\">{}</failure>",
            esc(message),
            esc(body)
        )
    }
}

/// `kpct.<proxier>.<scenario>`, escaped; dots inside a proxier's label (`exec:/opt/p.sh`) become
/// `_` so they do not add grouping levels.
fn classname(proxier: &str, scenario: &str) -> String {
    esc(&format!(
        "kpct.{}.{}",
        proxier.replace('.', "_"),
        scenario.replace('.', "_")
    ))
}

/// Seconds with millisecond precision, as surefire writes them.
fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classnames_group_by_proxier_then_scenario() {
        assert_eq!(
            classname("kube-proxy-ipvs", "clusterip-udp"),
            "kpct.kube-proxy-ipvs.clusterip-udp"
        );
        assert_eq!(classname("exec:/opt/p.sh", "s"), "kpct.exec:/opt/p_sh.s");
    }
}
