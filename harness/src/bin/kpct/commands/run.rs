//! `kpct run`: scenarios × proxiers, the result table, and the files CI reads.

use crate::proxiers;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A built-in proxier (kube-proxy-ipvs, kube-proxy-iptables, kube-proxy-nftables),
    /// `exec:COMMAND [ARGS]`, `replay:DIR`, a real kube-proxy (`kube-proxy:MODE[:PATH|:VERSION]`)
    /// or any API-watching proxier (`api:--sync-metric=NAME@PORT COMMAND [ARGS]`), each also as
    /// `NAME=SPEC`; repeatable. Default: the three built-ins.
    #[arg(long = "proxier")]
    proxiers: Vec<String>,
    /// An earlier run's results (`--json`) as the accepted state: the run fails only on a
    /// regression (a check that passed there fails now) or a failure it does not hold; failures
    /// it holds are reported, and skipped in JUnit. Checks match by scenario, proxier label
    /// (keep it with `NAME=SPEC`) and probe or step.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Scenario files or globs; repeatable. Default: scenarios/*.yaml.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Only scenarios with this tag (repeatable: every one given); tags are derived from what
    /// a scenario holds (README: "Tags").
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Leave out scenarios with this tag (repeatable: any one given), e.g. `--exclude-tag ipv6`
    /// for an IPv4-only proxier.
    #[arg(long = "exclude-tag")]
    exclude_tags: Vec<String>,
    /// Write each observation document (YAML) into this directory.
    #[arg(long)]
    observations: Option<PathBuf>,
    /// Write JUnit XML (one testcase per probe) to this file.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Write every result as one JSON document to this file (format: harness/src/report/
    /// json-format.md).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a report to this file: Markdown (`.md`) or HTML (`.html`), by extension. It
    /// shows every failing probe with its expectations, observation and the relevant
    /// iptables/ipset/IPVS state of the nodes involved.
    #[arg(long)]
    report: Option<PathBuf>,
    /// With --report: trace the first failing probe of this many failing runs again (one shot
    /// each, in a fresh cluster, kernel tracing on) and draw its path in the report; 0 for
    /// none.
    #[arg(long, default_value_t = 3, value_name = "RUNS")]
    trace_failures: usize,
    /// Print the scenarios and their probes (with the proxiers that would run them) and
    /// exit without running anything.
    #[arg(long)]
    list: bool,
    /// Print the kernel features the selected runs need (`ip_vs,dummy,sctp`, as `kpct caps
    /// --require` takes them; an empty line for none) and exit without running anything:
    /// `ci/kpct.sh` boots a VM only when this kernel lacks one.
    #[arg(long, conflicts_with = "list")]
    kernel_needs: bool,
    /// Run only the probes of this name (repeatable); each keeps the source ports it has in
    /// the full scenario, so its shots are the same.
    #[arg(long = "probe")]
    probes: Vec<String>,
    /// Stop after the first scenario run that fails or errors (in the order of the table:
    /// runs after it are not reported, even if they had already finished).
    #[arg(long)]
    fail_fast: bool,
    /// Scenario × proxier runs at once, each in its own namespaces; the output is the same
    /// as with -j 1 but for the times. Default: four per core, at most 16.
    #[arg(short = 'j', long = "jobs")]
    jobs: Option<usize>,
    /// Run only share K of N of the scenario × proxier runs (round robin over the table's
    /// order), for a CI matrix of N machines; their JUnit files together hold every run once.
    #[arg(long)]
    shard: Option<kpct::parallel::Shard>,
    /// Decide every unanswered shot at the probe timeout, even when a node traced the DROP
    /// verdict that ended it (by default that verdict decides it at once; the observations are
    /// the same either way).
    #[arg(long)]
    wait_out_drops: bool,
    /// (For the child a run starts in a VM.) Run only these scenario × proxier runs, each as
    /// `SCENARIO=LABEL`; repeatable.
    #[arg(long = "only-run", hide = true)]
    only_runs: Vec<String>,
    /// (For the child a run starts in a VM.) Write the results in wire form to this file
    /// instead of printing them.
    #[arg(long, hide = true)]
    wire: Option<PathBuf>,
}

/// What a run needs of the kernel: its scenario's needs, and IP_VS for an IPVS proxier.
fn kernel_needs(job: &kpct::parallel::Job) -> std::collections::BTreeSet<kpct::caps::Feature> {
    let mut needs: std::collections::BTreeSet<_> =
        job.scenario.kernel_needs().into_iter().collect();
    if kpct::proxier::needs_ipvs(&job.proxier.spec()) {
        needs.extend([kpct::caps::Feature::IpVs, kpct::caps::Feature::Dummy]);
    }
    needs
}

pub fn run(args: Args) -> Result<()> {
    // Before anything runs: an unknown report format and an output that cannot be written are
    // usage errors.
    let report = args
        .report
        .as_deref()
        .map(|path| {
            kpct::report::document::Format::from_path(path)
                .map(|format| (path, format))
                .map_err(anyhow::Error::msg)
        })
        .transpose()?;
    ensure_writable(&args)?;
    // Read before anything runs: a bad baseline fails fast.
    let baseline = match &args.baseline {
        Some(path) => Some((path.clone(), kpct::baseline::Checks::read(path)?)),
        None => None,
    };
    let names = proxiers::or_builtins(&args.proxiers);
    let proxiers = names
        .iter()
        .map(|n| proxiers::from_spec(n))
        .collect::<Result<Vec<_>>>()?;
    // Listing runs nothing, so it needs no IP_VS; with a VM runner, the runs that need it go
    // to the VM.
    let vm_runner = super::vm_share::runner().filter(|_| args.wire.is_none());
    if names.iter().any(|n| kpct::proxier::needs_ipvs(n))
        && !args.list
        && !args.kernel_needs
        && vm_runner.is_none()
    {
        proxiers::ensure_ipvs("run it through `sudo ci/kpct.sh run …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`")?;
    }
    let labels: Vec<String> = proxiers.iter().map(|p| p.label()).collect();
    for (i, label) in labels.iter().enumerate() {
        if labels[..i].contains(label) {
            anyhow::bail!(
                "two proxiers are labelled `{label}`: name them apart, `--proxier NAME=SPEC`"
            );
        }
    }
    // expectFor may name a proxier by its label or by the built-in it is judged as.
    let mut known = labels.clone();
    known.extend(proxiers.iter().map(|p| p.expectations_of()));
    known.dedup();
    let chosen = selected(
        &kpct::scenario::files(&args.scenarios)?,
        &known,
        &args.probes,
    )?;
    kpct::scenario::check_tags(&[args.tags.clone(), args.exclude_tags.clone()].concat())
        .map_err(|e| anyhow::anyhow!("--tag/--exclude-tag: {e}"))?;
    let chosen: Vec<(PathBuf, kpct::scenario::Scenario)> = chosen
        .into_iter()
        .filter(|(_, s)| {
            let tags = s.tags();
            args.tags.iter().all(|t| tags.contains(t.as_str()))
                && !args.exclude_tags.iter().any(|t| tags.contains(t.as_str()))
        })
        .collect();
    if chosen.is_empty() && !(args.tags.is_empty() && args.exclude_tags.is_empty()) {
        anyhow::bail!("no scenario has the tags asked for (--tag/--exclude-tag)");
    }
    let files: std::collections::BTreeMap<String, PathBuf> = chosen
        .iter()
        .map(|(f, s)| (s.name.clone(), f.clone()))
        .collect();
    let scenarios: Vec<kpct::scenario::Scenario> = chosen.into_iter().map(|(_, s)| s).collect();
    let jobs: Vec<kpct::parallel::Job> = scenarios
        .iter()
        .flat_map(|scenario| {
            proxiers.iter().map(move |proxier| kpct::parallel::Job {
                scenario,
                proxier: proxier.as_ref(),
            })
        })
        .enumerate()
        .filter(|(position, _)| args.shard.is_none_or(|s| s.holds(*position)))
        .map(|(_, job)| job)
        .filter(|job| {
            args.only_runs.is_empty()
                || args.only_runs.contains(&format!(
                    "{}={}",
                    job.scenario.name,
                    job.proxier.label()
                ))
        })
        .collect();
    if args.kernel_needs {
        let mut needs = std::collections::BTreeSet::new();
        for job in &jobs {
            needs.extend(kernel_needs(job));
        }
        let names: Vec<&str> = needs.iter().map(|f| f.name()).collect();
        crate::stdout::emit(&format!("{}\n", names.join(",")))?;
        return Ok(());
    }
    if args.list {
        // What would run: this share's runs (`--shard`), each scenario's probes with the
        // proxiers that would run them.
        for s in &scenarios {
            let with: Vec<String> = jobs
                .iter()
                .filter(|j| std::ptr::eq(j.scenario, s))
                .map(|j| j.proxier.label())
                .collect();
            if with.is_empty() {
                continue;
            }
            for p in &s.probes {
                crate::stdout::emit(&format!("{}\t{}\t{}\n", s.name, p.name, with.join(",")))?;
            }
        }
        return Ok(());
    }
    if let Some(dir) = &args.observations {
        std::fs::create_dir_all(dir)?;
    }
    // Runs this kernel cannot hold go to the VM when there is a runner, else they are
    // reported as not run here, never run to an error.
    let caps = kpct::caps::detect()?;
    let mut not_run = Vec::new();
    let mut vm_jobs = Vec::new();
    let all_jobs = jobs;
    let jobs: Vec<kpct::parallel::Job> = all_jobs
        .iter()
        .filter(|job| {
            let needs: Vec<_> = kernel_needs(job).into_iter().collect();
            let missing = caps.missing(&needs);
            if missing.is_empty() {
                return true;
            }
            if vm_runner.is_some() {
                vm_jobs.push(*job);
                return false;
            }
            not_run.push(kpct::report::NotRun {
                scenario: job.scenario.name.clone(),
                proxier: job.proxier.label(),
                reason: missing
                    .iter()
                    .map(|(f, why)| format!("needs {}: {why}", f.name()))
                    .collect::<Vec<_>>()
                    .join("; "),
            });
            false
        })
        .copied()
        .collect();
    let workers = super::jobs(args.jobs)?;
    let share = match (&vm_runner, vm_jobs.is_empty()) {
        (Some(runner), false) => {
            eprintln!(
                "{} run(s) need what this kernel lacks (IP_VS, SCTP): they run in a VM ({}) \
                 beside the {} here",
                vm_jobs.len(),
                runner.display(),
                jobs.len()
            );
            Some(super::vm_share::start(
                runner,
                &vm_jobs,
                &files,
                &super::vm_share::Selection {
                    proxiers: &names,
                    probes: &args.probes,
                    wait_out_drops: args.wait_out_drops,
                    jobs: args.jobs,
                    fail_fast: args.fail_fast,
                },
            )?)
        }
        _ => None,
    };
    let mut results = kpct::report::Results {
        not_run,
        files,
        specs: proxiers.iter().map(|p| (p.label(), p.spec())).collect(),
        started: std::time::SystemTime::now(),
        ..kpct::report::Results::new(
            Vec::new(),
            Vec::new(),
            kpct::environment::Environment::detect(),
        )
    };
    let started = std::time::Instant::now();
    let mut progress = kpct::progress::Progress::stderr(jobs.len());
    let label = |index: usize| {
        (
            jobs[index].scenario.name.clone(),
            jobs[index].proxier.label(),
        )
    };
    let patience = kpct::probe::Patience {
        timeout: kpct::probe::probe_timeout(),
        drops: if args.wait_out_drops {
            kpct::probe::DropDecision::AtTimeout
        } else {
            kpct::probe::DropDecision::AtVerdict
        },
    };
    let finished = kpct::parallel::run_jobs(&jobs, workers, patience, &mut |event| match event {
        kpct::parallel::Event::Started(index) => {
            let (scenario, proxier) = label(index);
            progress.start(&scenario, &proxier);
            kpct::parallel::After::Continue
        }
        kpct::parallel::Event::Finished(done) => {
            let (scenario, proxier) = label(done.index);
            let outcome = match &done.outcome {
                Ok(run) if run.violations.is_empty() => kpct::progress::Outcome::Ok,
                Ok(_) => kpct::progress::Outcome::Fail,
                Err(e) => kpct::progress::Outcome::Error(format!("{e:#}")),
            };
            progress.finish(&scenario, &proxier, &outcome, done.elapsed);
            if args.fail_fast && outcome != kpct::progress::Outcome::Ok {
                kpct::parallel::After::StopAfterThis
            } else {
                kpct::parallel::After::Continue
            }
        }
    })?;
    // In job order, whatever order the runs ended in: every file below is what -j 1 writes.
    results.record(&jobs, finished);
    if let Some(share) = share {
        eprintln!("waiting for the {} run(s) in the VM", share.runs());
        match share.finish() {
            Ok(back) => {
                results.runs.extend(back.runs);
                results.errors.extend(back.errors);
                results.not_run.extend(back.not_run);
            }
            Err(why) => results
                .errors
                .extend(vm_jobs.iter().map(|job| kpct::report::RunError {
                    scenario: job.scenario.name.clone(),
                    proxier: job.proxier.label(),
                    message: why.clone(),
                    elapsed: std::time::Duration::ZERO,
                })),
        }
        // In the order of the table, as if every run had been made here.
        let position = |scenario: &str, proxier: &str| {
            all_jobs
                .iter()
                .position(|j| j.scenario.name == scenario && j.proxier.label() == proxier)
        };
        results
            .runs
            .sort_by_key(|r| position(&r.observation.scenario, &r.observation.proxier));
        results
            .errors
            .sort_by_key(|e| position(&e.scenario, &e.proxier));
        results
            .not_run
            .sort_by_key(|n| position(&n.scenario, &n.proxier));
    }
    if let Some(path) = &args.wire {
        progress.close();
        let text = kpct::report::wire::write(&results.runs, &results.errors, &results.not_run)?;
        return std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()));
    }
    if let Some(dir) = &args.observations {
        for run in &results.runs {
            let o = &run.observation;
            let file = o.proxier.replace(['/', ' ', ':'], "_");
            let path = dir.join(format!("{}@{file}.yaml", o.scenario));
            std::fs::write(&path, o.to_yaml()?)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        }
    }
    progress.close();
    if report.is_some() && args.trace_failures > 0 && !results.failing().is_empty() {
        results.traced =
            tokio::runtime::Runtime::new()?.block_on(kpct::report::traced::trace_failures(
                &results,
                &jobs,
                args.trace_failures,
                patience.timeout,
                |scenario, proxier, probe| {
                    eprintln!("tracing {scenario} × {proxier}: probe {probe}, for the report");
                },
            ));
    }
    results.elapsed = started.elapsed();
    print!(
        "{}",
        kpct::report::table(&results, kpct::report::Style::for_stdout())
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
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    };
    let judged = match &baseline {
        Some((path, before)) => {
            let now = kpct::baseline::Checks::from_json(
                &kpct::report::json::json(&results)?,
                "this run",
            )?;
            let comparison = kpct::baseline::compare(before, &now);
            println!(
                "\nagainst the baseline {}:\n{}",
                path.display(),
                comparison.render()
            );
            results.accepted = comparison.accepted();
            Some(comparison)
        }
        None => None,
    };
    if let Some(path) = &args.junit {
        write(path, kpct::report::junit(&results))?;
    }
    if let Some(path) = &args.json {
        write(path, kpct::report::json::json(&results)?)?;
    }
    if let Some((path, format)) = report {
        write(path, kpct::report::document::render(format, &results))?;
    }
    // The rule every output follows too (with a baseline, JUnit skips what it accepts).
    let code = match &judged {
        Some(comparison) if comparison.fails() => 1,
        Some(_) if results.counts().not_run > 0 => kpct::report::NOT_RUN_EXIT,
        Some(_) => 0,
        None => results.exit_code(),
    };
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Every output path can be written, before anything runs.
fn ensure_writable(args: &Args) -> Result<()> {
    use kpct::output::{Output, OutputKind};
    fn file<'a>(flag: &'static str, path: &'a Option<PathBuf>) -> Option<Output<'a>> {
        path.as_deref().map(|path| Output {
            flag,
            path,
            kind: OutputKind::File,
        })
    }
    let outputs: Vec<Output> = [
        file("--junit", &args.junit),
        file("--json", &args.json),
        file("--report", &args.report),
        args.observations.as_deref().map(|path| Output {
            flag: "--observations",
            path,
            kind: OutputKind::Directory,
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    kpct::output::ensure_writable(&outputs)
}

/// The scenarios of `files`, every one validated before anything runs (a typo fails fast, with
/// all the problems of all the files; `expectFor` may name only the run's proxiers, `labels`),
/// cut down to the probes named in `probes` when there are any.
fn selected(
    files: &[PathBuf],
    labels: &[String],
    probes: &[String],
) -> Result<Vec<(PathBuf, kpct::scenario::Scenario)>> {
    let mut scenarios = Vec::new();
    let mut invalid = Vec::new();
    for file in files {
        match kpct::scenario::load_for(file, kpct::scenario::KnownProxiers::Run(labels)) {
            Ok(s) => scenarios.push((file.clone(), s)),
            Err(e) => invalid.push(e.to_string()),
        }
    }
    if !invalid.is_empty() {
        anyhow::bail!("{}", invalid.join("\n"));
    }
    let scenarios: Vec<(PathBuf, kpct::scenario::Scenario)> = scenarios
        .into_iter()
        .filter_map(|(f, s)| only_probes(s, probes).map(|s| (f, s)))
        .collect();
    if let Some(missing) = probes.iter().find(|name| {
        !scenarios
            .iter()
            .any(|(_, s)| s.probes.iter().any(|p| &&p.name == name))
    }) {
        anyhow::bail!("no probe named `{missing}` in the scenarios given");
    }
    Ok(scenarios)
}

/// Keeps only the probes named `wanted`, each with the source port it has in the whole file.
/// `None` when the scenario has none of them.
fn only_probes(
    mut s: kpct::scenario::Scenario,
    wanted: &[String],
) -> Option<kpct::scenario::Scenario> {
    if wanted.is_empty() {
        return Some(s);
    }
    for (index, probe) in s.probes.iter_mut().enumerate() {
        let first = probe.first_source_port(index);
        probe.source_port = u16::try_from(first).ok();
    }
    s.probes.retain(|p| wanted.contains(&p.name));
    (!s.probes.is_empty()).then_some(s)
}
