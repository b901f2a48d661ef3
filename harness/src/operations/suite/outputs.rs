//! What a suite run leaves behind: the table and its ERROR and NOT RUN HERE lines on stdout,
//! the judgement against a baseline, the observation documents, JUnit, JSON and the report,
//! and one exit status that every one of them agrees with.

use crate::output_paths::{Output, OutputKind};
use crate::report::baseline::{Checks, Comparison};
use crate::report::document::Format;
use crate::report::Results;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The files asked for, checked before anything runs.
pub struct Outputs {
    observations: Option<PathBuf>,
    junit: Option<PathBuf>,
    json: Option<PathBuf>,
    report: Option<(PathBuf, Format)>,
}

impl Outputs {
    /// The files of `--observations` (a directory for each run's observation document),
    /// `--junit`, `--json` and `--report` (Markdown or HTML, by extension). Fails, before
    /// anything runs, on a report format not known and on a path that cannot be written (the
    /// observations' directory is created).
    pub fn new(
        observations: Option<PathBuf>,
        junit: Option<PathBuf>,
        json: Option<PathBuf>,
        report: Option<PathBuf>,
    ) -> Result<Outputs> {
        let report = report
            .map(|path| {
                Format::from_path(&path)
                    .map(|format| (path, format))
                    .map_err(anyhow::Error::msg)
            })
            .transpose()?;
        let outputs = Outputs {
            observations,
            junit,
            json,
            report,
        };
        outputs.check()?;
        Ok(outputs)
    }

    fn check(&self) -> Result<()> {
        fn file<'a>(flag: &'static str, path: Option<&'a Path>) -> Option<Output<'a>> {
            path.map(|path| Output {
                flag,
                path,
                kind: OutputKind::File,
            })
        }
        let outputs: Vec<Output> = [
            file("--junit", self.junit.as_deref()),
            file("--json", self.json.as_deref()),
            file(
                "--report",
                self.report.as_ref().map(|(path, _)| path.as_path()),
            ),
            self.observations.as_deref().map(|path| Output {
                flag: "--observations",
                path,
                kind: OutputKind::Directory,
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        crate::output_paths::ensure_writable(&outputs)
    }

    /// Writes everything of `results`, judged against `baseline` (its path, its checks) when
    /// there is one, and returns the exit status: the table and its lines go to stdout.
    pub fn write(
        &self,
        results: &mut Results,
        baseline: Option<&(PathBuf, Checks)>,
    ) -> Result<i32> {
        if let Some(dir) = &self.observations {
            for run in &results.runs {
                let o = &run.observation;
                let file = o.proxier.replace(['/', ' ', ':'], "_");
                write(
                    &dir.join(format!("{}@{file}.yaml", o.scenario)),
                    o.to_yaml()?,
                )?;
            }
        }
        print!(
            "{}",
            crate::report::table(results, crate::report::Style::for_stdout())
        );
        for e in &results.errors {
            println!("  ERROR {} × {}: {}", e.scenario, e.proxier, e.message);
        }
        for n in &results.not_run {
            println!(
                "  NOT RUN HERE {} × {}: {}",
                n.scenario, n.proxier, n.reason
            );
        }
        let judged = match baseline {
            Some((path, before)) => Some(judge(results, path, before)?),
            None => None,
        };
        if let Some(path) = &self.junit {
            write(path, crate::report::junit(results))?;
        }
        if let Some(path) = &self.json {
            write(path, crate::report::json::json(results)?)?;
        }
        if let Some((path, format)) = &self.report {
            write(path, crate::report::document::render(*format, results))?;
        }
        // The rule every output follows too (with a baseline, JUnit skips what it accepts).
        Ok(match &judged {
            Some(comparison) if comparison.fails() => 1,
            Some(_) if results.counts().not_run > 0 => crate::report::NOT_RUN_EXIT,
            Some(_) => 0,
            None => results.exit_code(),
        })
    }
}

/// `results` against the accepted state `before` (read from `path`), printed; the checks it
/// accepts are marked in `results` so JUnit skips them.
fn judge(results: &mut Results, path: &Path, before: &Checks) -> Result<Comparison> {
    let now = Checks::from_json(&crate::report::json::json(results)?, "this run")?;
    let comparison = crate::report::baseline::compare(before, &now);
    println!(
        "\nagainst the baseline {}:\n{}",
        path.display(),
        comparison.render()
    );
    results.accepted = comparison.accepted();
    Ok(comparison)
}

fn write(path: &Path, text: String) -> Result<()> {
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}
