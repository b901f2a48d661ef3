//! An exploration's record read by people: Markdown, or HTML (the Markdown's content, escaped,
//! in a page of its own).

use super::{Exploration, Finding};
use std::fmt::Write as _;

/// The record as Markdown: the counts, then each finding with its shrunk scenario.
pub fn markdown(ex: &Exploration) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# kpct explore: {}\n", ex.proxiers.join(" vs "));
    let _ = writeln!(
        out,
        "Seed {}{}{}, on {}, {:.0} s.\n",
        ex.seed,
        ex.shard
            .as_ref()
            .map(|s| format!(", shard {s}"))
            .unwrap_or_default(),
        if ex.weights.is_empty() {
            String::new()
        } else {
            format!(", weights {}", ex.weights.join(" "))
        },
        ex.machine,
        ex.seconds
    );
    let explained: u64 = ex.explained.values().sum();
    let _ = writeln!(out, "| | count |\n|---|---|");
    let _ = writeln!(out, "| cases | {} |", ex.cases);
    let _ = writeln!(out, "| runs | {} |", ex.runs);
    let _ = writeln!(out, "| alike | {} |", ex.alike);
    let _ = writeln!(out, "| explained by known differences | {explained} |");
    let _ = writeln!(
        out,
        "| with an unexplained finding | {} |",
        ex.cases_with_findings()
    );
    let _ = writeln!(out, "| distinct findings | {} |", ex.findings.len());
    let _ = writeln!(out, "| every run failed | {} |", ex.failed.len());
    let _ = writeln!(out, "| refused by a proxier | {} |\n", ex.refused);
    if !ex.explained.is_empty() {
        let _ = writeln!(out, "Explained (known-differences.yaml):\n");
        for (id, n) in &ex.explained {
            let _ = writeln!(out, "- `{id}`: {n}");
        }
        out.push('\n');
    }
    for (case, error) in &ex.failed {
        let _ = writeln!(
            out,
            "- case {case} failed: {}",
            error.lines().next().unwrap_or_default()
        );
    }
    if !ex.failed.is_empty() {
        out.push('\n');
    }
    for f in &ex.findings {
        finding(&mut out, f);
    }
    out
}

fn finding(out: &mut String, f: &Finding) {
    let _ = writeln!(out, "## {}: {}\n", f.id, f.key);
    let _ = writeln!(
        out,
        "First in case {} (`{}`){}.\n",
        f.first.case,
        f.first.name,
        if f.also.is_empty() {
            String::new()
        } else {
            format!(
                ", also in {} more: {}",
                f.also.len(),
                f.also
                    .iter()
                    .take(20)
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if let super::run::CaseVerdict::Differs { difference, .. } = &f.first.verdict {
        let _ = writeln!(out, "```diff\n{}\n```\n", difference.lines.join("\n"));
    }
    if let super::run::CaseVerdict::Violates { violations } = &f.first.verdict {
        for v in violations {
            let _ = writeln!(out, "- `{}` at {}: {}", v.invariant, v.probe, v.detail);
        }
        out.push('\n');
    }
    match &f.shrunk {
        Some(s) => {
            let _ = writeln!(
                out,
                "Shrunk in {} runs{}: {}\n\nReproduce: `{}`\n\n```yaml\n{}```\n",
                s.runs,
                if s.bounded {
                    " (stopped at the bound)"
                } else {
                    ""
                },
                if s.log.is_empty() {
                    "nothing could go".to_string()
                } else {
                    s.log.join("; ")
                },
                s.reproduce,
                s.scenario
            );
        }
        None => {
            if let Some(scenario) = &f.first.scenario {
                let _ = writeln!(out, "```yaml\n{scenario}```\n");
            }
        }
    }
}

/// The record as a page of HTML.
pub fn html(ex: &Exploration) -> String {
    let body = markdown(ex)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kpct explore</title>\
         <style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em;\
         white-space:pre-wrap}}</style></head><body><pre>{body}</pre></body></html>\n"
    )
}
