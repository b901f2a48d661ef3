//! `kpct explore`: generated scenarios against one proxier (invariants) or two (compared),
//! each unexplained difference shrunk to a minimal scenario.

use crate::proxiers;
use anyhow::{bail, Context, Result};
use kpct::operations::explore::{self, generate, known::KnownDifferences, run};
use kpct::ProxierSpec;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// One proxier (checked against the invariants) or two (compared), each any spec
    /// `--proxier` takes: a built-in (`BUILTIN@v1.MINOR` for an older release), `exec:`,
    /// `replay:`, `kube-proxy:MODE[:PATH|:VERSION]`, `api:…`, `NAME=SPEC`.
    #[arg(long = "proxier", required_unless_present_any = ["list_weights", "merge", "print"])]
    proxiers: Vec<ProxierSpec>,
    /// Generated cases to run (cases 0 to N-1 of the seed).
    #[arg(long, conflicts_with_all = ["case", "scenario"])]
    cases: Option<u64>,
    /// Stop starting cases after this long (`90s`, `10m`, `2h`, `1h30m`); with `--cases`, the
    /// first of the two to run out.
    #[arg(long, value_parser = parse_duration)]
    budget: Option<Duration>,
    /// The seed: the same seed and weights make the same cases.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run only this case of the seed (repeatable): a finding's case, again.
    #[arg(long = "case", conflicts_with = "scenario")]
    case: Vec<u64>,
    /// Run these scenario files instead of generated cases (repeatable): a shrunk finding,
    /// again.
    #[arg(long = "scenario")]
    scenario: Vec<PathBuf>,
    /// Change how often the generator makes something: `NAME=VALUE` (repeatable; see
    /// `--list-weights`).
    #[arg(long = "weight")]
    weights: Vec<String>,
    /// Print every weight, its value and what it weighs, and exit.
    #[arg(long)]
    list_weights: bool,
    /// Print the cases of `--case` (in the library's format, as `--seed` and `--weight` make
    /// them) and exit without running anything.
    #[arg(long, requires = "case")]
    print: bool,
    /// Runs at once. Default: four per core, at most 16.
    #[arg(short = 'j', long = "jobs")]
    jobs: Option<usize>,
    /// Run only share K of N of the cases (round robin), for a CI matrix; merge the shares'
    /// `--json` files with `--merge`.
    #[arg(long)]
    shard: Option<kpct::operations::parallel::Shard>,
    /// Leave findings as found, without shrinking them.
    #[arg(long)]
    no_shrink: bool,
    /// At most this many candidate scenarios run while shrinking one finding.
    #[arg(long, default_value_t = 120)]
    shrink_runs: usize,
    /// The known differences (default: the repository's known-differences.yaml).
    #[arg(long)]
    known: Option<PathBuf>,
    /// Write the exploration's record as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a summary: Markdown (`.md`) or HTML (`.html`), by extension.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Write each finding's shrunk scenario and observations into this directory
    /// (`F1/found-SEED-CASE.yaml`, …).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Merge these records (`--json` files of shards of one exploration) instead of running;
    /// writes `--json`/`--report` of the whole.
    #[arg(long, num_args = 1.., conflicts_with_all = ["proxiers", "cases", "case", "scenario"])]
    merge: Vec<PathBuf>,
}

/// `90s`, `10m`, `2h`, `1h30m` (or a bare number of seconds).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{text}`: expected a duration such as 90s, 10m, 2h or 1h30m");
    if let Ok(s) = text.parse::<u64>() {
        return Ok(Duration::from_secs(s));
    }
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().map_err(|_| bad())?;
        number.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(bad()),
        };
    }
    if !number.is_empty() || total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

pub fn run(args: Args) -> Result<()> {
    let weights =
        generate::Weights::with(&args.weights).map_err(|e| anyhow::anyhow!("--weight: {e}"))?;
    if args.list_weights {
        print!("{}", weights.listing());
        return Ok(());
    }
    if args.print {
        let generator = generate::Generator::new(weights);
        for case in &args.case {
            let s = generator.case(args.seed, *case);
            let header = format!(
                "Case {case} of seed {}{}: `kpct explore --seed {} --case {case}{}`.",
                args.seed,
                if generator.weights.changed().is_empty() {
                    ""
                } else {
                    " (weights changed)"
                },
                args.seed,
                generator
                    .weights
                    .changed()
                    .iter()
                    .map(|w| format!(" --weight {w}"))
                    .collect::<String>()
            );
            print!("{}", explore::library_yaml::library_yaml(&s, &header)?);
        }
        return Ok(());
    }
    {
        use kpct::output_paths::{ensure_writable, Output, OutputKind};
        let mut outputs = Vec::new();
        for (flag, path, kind) in [
            ("--json", &args.json, OutputKind::File),
            ("--report", &args.report, OutputKind::File),
            ("--out", &args.out, OutputKind::Directory),
        ] {
            if let Some(path) = path {
                outputs.push(Output { flag, path, kind });
            }
        }
        ensure_writable(&outputs)?;
    }
    let report_format = args
        .report
        .as_ref()
        .map(|p| match p.extension().and_then(|e| e.to_str()) {
            Some("md") => Ok(false),
            Some("html") => Ok(true),
            _ => bail!("--report {}: the summary is .md or .html", p.display()),
        })
        .transpose()?;
    let exploration = if !args.merge.is_empty() {
        let parts = args
            .merge
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("{}: not an exploration record", p.display()))
            })
            .collect::<Result<Vec<explore::Exploration>>>()?;
        explore::Exploration::merge(parts)?
    } else {
        explore_now(&args, weights)?
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&exploration)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let (Some(path), Some(html)) = (&args.report, report_format) {
        let text = if html {
            explore::summary::html(&exploration)
        } else {
            explore::summary::markdown(&exploration)
        };
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.out {
        write_findings(dir, &exploration)?;
    }
    let explained: u64 = exploration.explained.values().sum();
    println!(
        "explore {}: {} cases, {} alike, {} explained, {} with findings ({} distinct), {} failed, {} refused ({:.0} s)",
        exploration.proxiers.join(" vs "),
        exploration.cases,
        exploration.alike,
        explained,
        exploration.cases_with_findings(),
        exploration.findings.len(),
        exploration.failed.len(),
        exploration.refused,
        exploration.seconds
    );
    for f in &exploration.findings {
        println!(
            "  {} (case {}, {} more): {}",
            f.id,
            f.first.case,
            f.also.len(),
            f.key
        );
        if let Some(s) = &f.shrunk {
            println!("    reproduce: {}", s.reproduce);
        }
    }
    if !exploration.findings.is_empty() || !exploration.failed.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

fn explore_now(args: &Args, weights: generate::Weights) -> Result<explore::Exploration> {
    if !(1..=2).contains(&args.proxiers.len()) {
        bail!(
            "--proxier: one proxier (invariants) or two (compared), {} given",
            args.proxiers.len()
        );
    }
    if args.cases.is_none()
        && args.budget.is_none()
        && args.case.is_empty()
        && args.scenario.is_empty()
    {
        bail!("say how much to explore: --cases N, --budget DURATION (or both), --case N or --scenario FILE");
    }
    let built = proxiers::ready(&args.proxiers, "explore")?;
    let labels: Vec<String> = built.iter().map(|p| p.label()).collect();
    if labels.len() == 2 && labels[0] == labels[1] {
        bail!(
            "both proxiers are labelled {}: name one (NAME=SPEC) to explore a proxier against itself",
            labels[0]
        );
    }
    let cases = if !args.scenario.is_empty() {
        run::Cases::Files(
            args.scenario
                .iter()
                .map(|p| Ok((p.display().to_string(), super::load(p)?)))
                .collect::<Result<_>>()?,
        )
    } else if !args.case.is_empty() {
        run::Cases::Listed(args.case.clone())
    } else {
        run::Cases::Generated { count: args.cases }
    };
    let known = match &args.known {
        Some(path) => KnownDifferences::read(path)?,
        None => KnownDifferences::bundled()?,
    };
    let plan = run::Plan {
        proxiers: built.iter().map(|p| p.as_ref()).collect(),
        generator: generate::Generator::new(weights),
        seed: args.seed,
        cases,
        budget: args.budget,
        shard: args.shard,
        workers: super::jobs(args.jobs)?,
        probe_timeout: kpct::probe::probe_timeout(),
        known,
    };
    let specs: Vec<String> = args.proxiers.iter().map(|s| s.text().to_string()).collect();
    explore::explore(
        &plan,
        &specs,
        explore::Shrinking {
            enabled: !args.no_shrink,
            max_runs: args.shrink_runs,
        },
        &mut |line| eprintln!("{line}"),
    )
}

/// Each finding's shrunk scenario (or its case, unshrunk) and observations, under `dir/ID/`.
fn write_findings(dir: &std::path::Path, ex: &explore::Exploration) -> Result<()> {
    for f in &ex.findings {
        let at = dir.join(&f.id);
        std::fs::create_dir_all(&at).with_context(|| format!("creating {}", at.display()))?;
        let (scenario, observations) = match &f.shrunk {
            Some(s) => (Some(s.scenario.clone()), s.observations.clone()),
            None => (f.first.scenario.clone(), f.first.observations.clone()),
        };
        if let Some(text) = scenario {
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name: "))
                .unwrap_or("case")
                .to_string();
            std::fs::write(at.join(format!("{name}.yaml")), text)?;
        }
        for (i, o) in observations.iter().enumerate() {
            let label = ex.proxiers.get(i).cloned().unwrap_or_default();
            let safe: String = label
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            std::fs::write(at.join(format!("observation-{}-{safe}.yaml", i + 1)), o)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        for bad in ["", "m", "10x", "1h30", "0s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
