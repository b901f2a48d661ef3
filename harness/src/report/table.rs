//! The table `kpct run` prints: one group per scenario × proxier run, one row per probe with the
//! result first, so a failure is seen at the left edge; at most [`Style::width`] columns, long
//! cells wrapped onto continuation lines rather than cut.

use super::results::Results;
use super::{
    converged_name, dedup, not_converged, probe_violations, run_violations, shots, spelled,
};
use std::fmt::Write as _;
use std::time::Duration;

/// How the table is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// ANSI colour for pass/FAIL/ERROR.
    pub colour: bool,
    /// The widest line, in characters.
    pub width: usize,
}

impl Style {
    /// `COLUMNS` columns when it is set (at least [`MIN_WIDTH`]), else 120; colour only for a
    /// terminal and only without `NO_COLOR` (no-color.org: set and not empty).
    pub fn for_stdout() -> Style {
        use std::io::IsTerminal;
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            colour: std::io::stdout().is_terminal() && !no_color,
            width: width_from(std::env::var("COLUMNS").ok().as_deref()),
        }
    }

    /// No colour, 120 columns: what logs and tests read.
    pub fn plain() -> Style {
        Style {
            colour: false,
            width: 120,
        }
    }

    fn paint(&self, word: &str) -> String {
        let code = match word {
            "pass" => "32",
            "FAIL" | "ERROR" => "1;31",
            _ => return word.to_string(),
        };
        if self.colour {
            format!("\x1b[{code}m{word}\x1b[0m")
        } else {
            word.to_string()
        }
    }
}

/// The narrowest table drawn, whatever `COLUMNS` says: the fixed columns need about this.
pub const MIN_WIDTH: usize = 60;

/// The width `COLUMNS` asks for: a number, at least [`MIN_WIDTH`]; 120 without one.
fn width_from(columns: Option<&str>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .map_or(120, |c| c.max(MIN_WIDTH))
}

const HEADER: [&str; 4] = ["result", "probe", "verdict", "observed"];
/// Widest probe and verdict columns; longer cells wrap.
const PROBE_MAX: usize = 34;
const VERDICT_MAX: usize = 24;
const GAP: &str = "  ";

/// The table and its summary: probes, passed, failed, runs that errored (listed after the
/// table by the caller), runs in all and the time they took; then every violated expectation.
pub fn table(results: &Results, style: Style) -> String {
    let mut groups: Vec<(String, Vec<[String; 4]>)> = Vec::new();
    for run in &results.runs {
        let obs = &run.observation;
        let probe_row = |probe: &crate::document::ProbeObservation| {
            let failed = !probe_violations(run, &probe.probe).is_empty();
            let shots = shots(probe);
            let verdicts = dedup(shots.iter().map(|s| spelled(s.verdict)));
            let seen = dedup(shots.iter().map(|s| match (&s.backend, &s.backend_saw) {
                // One entry per distinct path: each shot has its own source port.
                (Some(b), Some(saw)) => {
                    format!("{b}: {}", saw.replace(&format!(":{} ", s.sport), ":* "))
                }
                _ => s.reply.clone().unwrap_or_else(|| "-".into()),
            }));
            [
                if failed { "FAIL" } else { "pass" }.to_string(),
                probe.probe.clone(),
                verdicts.join(", "),
                seen.join("; "),
            ]
        };
        // Each step's convergence check is a row of its own, before the step's probes.
        let mut rows: Vec<[String; 4]> = obs.probes.iter().map(probe_row).collect();
        for step in &obs.steps {
            let failed = not_converged(run, step);
            rows.push([
                if failed { "FAIL" } else { "pass" }.to_string(),
                converged_name(&step.step),
                if failed { "differs" } else { "same" }.to_string(),
                if failed {
                    step.not_converged.join("; ")
                } else {
                    "every node as a fresh sync of the step's state".to_string()
                },
            ]);
            rows.extend(step.probes.iter().map(probe_row));
        }
        for v in run_violations(run) {
            rows.push([
                "FAIL".to_string(),
                "run".to_string(),
                "-".to_string(),
                v.clone(),
            ]);
        }
        groups.push((
            format!(
                "{} × {} ({})",
                obs.scenario,
                obs.proxier,
                seconds(run.timing.total())
            ),
            rows,
        ));
    }
    let counts = results.counts();
    let mut out = String::new();
    if counts.probes + counts.convergence_checks == 0 {
        let _ = writeln!(out, "no probe ran");
    } else {
        let all = || groups.iter().flat_map(|(_, rows)| rows.iter());
        let widest = |i: usize, max: usize| {
            all()
                .map(|r| r[i].chars().count())
                .chain([HEADER[i].len()])
                .max()
                .unwrap_or(0)
                .min(max)
        };
        let mut widths = [
            HEADER[0].len(),
            widest(1, PROBE_MAX),
            widest(2, VERDICT_MAX),
            0,
        ];
        let used: usize = widths[..3].iter().sum::<usize>() + 3 * GAP.len();
        widths[3] = style.width.saturating_sub(used).max(20);
        line(&mut out, &HEADER.map(String::from), &widths, &style);
        line(&mut out, &widths.map(|w| "-".repeat(w)), &widths, &style);
        for (title, rows) in &groups {
            let _ = writeln!(out, "{}", shorten(title, style.width));
            for row in rows {
                line(&mut out, row, &widths, &style);
            }
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{}",
        summary(
            &counts,
            results.runs.len() + results.errors.len(),
            results.elapsed
        )
    );
    failures(&mut out, results, &style);
    out
}

/// Failing probes shown per run below the summary; the rest are counted.
const PROBES_SHOWN: usize = 3;
/// Runs with failures shown below the summary; the rest are counted.
const RUNS_SHOWN: usize = 20;

/// The failures under the summary, grouped so a person can read them: per run (scenario ×
/// proxier), per probe or step check, its first violated expectation and how many more it
/// caused; at most [`PROBES_SHOWN`] per run and [`RUNS_SHOWN`] runs, with what was left out
/// counted. The report, JUnit and `--json` have every line.
fn failures(out: &mut String, results: &Results, style: &Style) {
    let failing: Vec<&crate::run::ScenarioRun> = results
        .runs
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    for run in failing.iter().take(RUNS_SHOWN) {
        let prefix = format!(
            "{} [{}]: ",
            run.observation.scenario, run.observation.proxier
        );
        // Grouped by what failed: `probe `NAME``, or a step's convergence.
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for v in &run.violations {
            let text = v.strip_prefix(&prefix).unwrap_or(v);
            let key = failure_subject(text);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, lines)) => lines.push(text),
                None => groups.push((key, vec![text])),
            }
        }
        let _ = writeln!(
            out,
            "  {} {} × {}: {} failing",
            style.paint("FAIL"),
            run.observation.scenario,
            run.observation.proxier,
            plural(groups.len(), "check")
        );
        for (_, lines) in groups.iter().take(PROBES_SHOWN) {
            let more = match lines.len() - 1 {
                0 => String::new(),
                n => format!(" (and {} about it)", plural(n, "more violation")),
            };
            let _ = writeln!(out, "      {}{more}", lines[0]);
        }
        if groups.len() > PROBES_SHOWN {
            let _ = writeln!(
                out,
                "      … and {}",
                plural(groups.len() - PROBES_SHOWN, "more failing check")
            );
        }
    }
    if failing.len() > RUNS_SHOWN {
        let _ = writeln!(
            out,
            "  … and {} with failures (every line: --report, --junit, --json)",
            plural(failing.len() - RUNS_SHOWN, "more run")
        );
    }
}

/// What a violation is about: `probe `NAME``, or what comes before its first `: ` (a step's
/// convergence, `step s1: node node-a`).
fn failure_subject(violation: &str) -> String {
    if let Some(rest) = violation.strip_prefix("probe `") {
        if let Some(end) = rest.find('`') {
            return format!("probe `{}`", &rest[..end]);
        }
    }
    violation
        .split_once(": ")
        .map_or(violation, |(subject, _)| subject)
        .to_string()
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// One row: every cell wrapped to its column, the physical lines side by side.
fn line(out: &mut String, cells: &[String; 4], widths: &[usize; 4], style: &Style) {
    let wrapped: Vec<Vec<String>> = cells.iter().zip(widths).map(|(c, w)| wrap(c, *w)).collect();
    let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
    for i in 0..height {
        let mut parts = Vec::new();
        for (col, (lines, w)) in wrapped.iter().zip(widths).enumerate() {
            let cell = lines.get(i).map(String::as_str).unwrap_or("");
            let pad = w.saturating_sub(cell.chars().count());
            let shown = if col == 0 {
                style.paint(cell)
            } else {
                cell.to_string()
            };
            parts.push(format!("{shown}{}", " ".repeat(pad)));
        }
        let _ = writeln!(out, "{}", parts.join(GAP).trim_end());
    }
}

/// `text` in lines of at most `width` characters, broken after `, ` / `; ` / spaces where it
/// can be, else after a `-` or `/` (a probe's name: `external-to-node-b-` / `without-…`), and
/// inside a word only where it must.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut rest: Vec<char> = text.chars().collect();
    while rest.len() > width {
        let at_space = (1..=width)
            .rev()
            .find(|&i| rest[i] == ' ' || rest[i - 1] == ' ');
        let after_dash = || {
            (2..=width)
                .rev()
                .find(|&i| matches!(rest[i - 1], '-' | '/'))
        };
        let cut = at_space.or_else(after_dash).unwrap_or(width);
        lines.push(
            rest[..cut]
                .iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        rest.drain(..cut);
        while rest.first() == Some(&' ') {
            rest.remove(0);
        }
    }
    lines.push(rest.into_iter().collect());
    lines
}

/// `text`, cut to `width` characters with `…` when longer.
fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `N probe(s), P passed, F failed`, the convergence checks when there were, the runs with a
/// violation of their own and those that could not run at all when there are, and the runs in
/// all with their time; FAILED first when anything failed.
fn summary(counts: &super::results::Counts, runs: usize, elapsed: Duration) -> String {
    let mut s = String::new();
    if counts.any_failure() {
        s.push_str("FAILED: ");
    } else if counts.not_run > 0 {
        s.push_str("NOT ALL RUN: ");
    }
    s.push_str(&format!(
        "{} probe(s), {} passed, {} failed",
        counts.probes,
        counts.probes - counts.failed,
        counts.failed
    ));
    if counts.convergence_checks > 0 {
        s.push_str(&format!(
            "; {} convergence check(s), {} failed",
            counts.convergence_checks, counts.not_converged
        ));
    }
    if counts.other > 0 {
        s.push_str(&format!("; {} run(s) failed otherwise", counts.other));
    }
    if counts.errored > 0 {
        s.push_str(&format!(
            "; {} scenario run(s) errored (below)",
            counts.errored
        ));
    }
    if counts.not_run > 0 {
        s.push_str(&format!("; {} run(s) not run here (below)", counts.not_run));
    }
    s.push_str(&format!("; {runs} run(s) in {}", seconds(elapsed)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_spaces_and_inside_words_when_it_must() {
        assert_eq!(wrap("a, b; c", 4), ["a,", "b; c"]);
        assert_eq!(wrap("web-1: x; web-2: y", 9), ["web-1: x;", "web-2: y"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(
            wrap("external-to-node-b-without-local-endpoint", 34),
            ["external-to-node-b-without-local-", "endpoint"]
        );
        assert_eq!(
            wrap("scale-down/one-endpoint", 12),
            ["scale-down/", "one-endpoint"]
        );
        assert_eq!(wrap("short", 10), ["short"]);
    }

    #[test]
    fn columns_sets_the_width_within_reason() {
        assert_eq!(width_from(None), 120);
        assert_eq!(width_from(Some("200")), 200);
        assert_eq!(width_from(Some("20")), MIN_WIDTH);
        assert_eq!(width_from(Some("wide")), 120);
    }

    #[test]
    fn colour_only_when_asked() {
        let plain = Style::plain();
        assert_eq!(plain.paint("FAIL"), "FAIL");
        let coloured = Style {
            colour: true,
            ..plain
        };
        assert_eq!(coloured.paint("FAIL"), "\x1b[1;31mFAIL\x1b[0m");
        assert_eq!(coloured.paint("pass"), "\x1b[32mpass\x1b[0m");
    }
}
