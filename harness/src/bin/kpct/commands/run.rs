//! `kpct run`: scenarios × proxiers, the result table, and the files CI reads.

use crate::proxiers;
use anyhow::Result;
use kpct::operations::suite::{self, outputs::Outputs, selection, vm_share};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A built-in proxier (kube-proxy-ipvs, kube-proxy-iptables, kube-proxy-nftables),
    /// `exec:COMMAND [ARGS]`, `replay:DIR`, a real kube-proxy (`kube-proxy:MODE[:PATH|:VERSION]`)
    /// or any API-watching proxier (`api:--sync-metric=NAME@PORT COMMAND [ARGS]`), each also as
    /// `NAME=SPEC`; repeatable. Default: the three built-ins.
    #[arg(long = "proxier")]
    proxiers: Vec<kpct::ProxierSpec>,
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
    shard: Option<kpct::operations::parallel::Shard>,
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

pub fn run(args: Args) -> Result<()> {
    // Before anything runs: an unknown report format, an output that cannot be written and a
    // bad baseline are usage errors.
    let outputs = Outputs::new(
        args.observations.clone(),
        args.junit.clone(),
        args.json.clone(),
        args.report.clone(),
    )?;
    let baseline = match &args.baseline {
        Some(path) => Some((path.clone(), kpct::report::baseline::Checks::read(path)?)),
        None => None,
    };
    let specs = kpct::drivers::spec::or_builtins(&args.proxiers);
    let names: Vec<String> = specs.iter().map(|s| s.text().to_string()).collect();
    // Listing runs nothing, so it needs no IP_VS; with a VM runner, the runs that need it go
    // to the VM.
    let vm_runner = vm_share::runner().filter(|_| args.wire.is_none());
    let proxiers = if args.list || args.kernel_needs || vm_runner.is_some() {
        specs
            .iter()
            .map(kpct::ProxierSpec::build)
            .collect::<Result<Vec<_>>>()?
    } else {
        proxiers::ready(&specs, "run")?
    };
    let known = selection::names(&proxiers)?;
    let chosen = selection::scenarios(
        &kpct::scenario::files(&args.scenarios)?,
        &known,
        &selection::Filter {
            tags: &args.tags,
            exclude_tags: &args.exclude_tags,
            probes: &args.probes,
        },
    )?;
    let jobs = selection::jobs(&chosen.scenarios, &proxiers, args.shard, &args.only_runs);
    if args.kernel_needs {
        return crate::stdout::emit(&selection::needs_line(&jobs));
    }
    if args.list {
        return crate::stdout::emit(&selection::listing(&chosen.scenarios, &jobs));
    }
    let options = suite::Options {
        workers: super::jobs(args.jobs)?,
        wait_out_drops: args.wait_out_drops,
        fail_fast: args.fail_fast,
        vm: vm_runner.map(|runner| {
            (
                runner,
                vm_share::Selection {
                    proxiers: &names,
                    probes: &args.probes,
                    wait_out_drops: args.wait_out_drops,
                    jobs: args.jobs,
                    fail_fast: args.fail_fast,
                },
            )
        }),
    };
    let mut ran = suite::run(&proxiers, &jobs, chosen.files, &options)?;
    if let Some(path) = &args.wire {
        let results = &ran.results;
        let text = kpct::report::wire::write(&results.runs, &results.errors, &results.not_run)?;
        return std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()));
    }
    if args.report.is_some() {
        ran.trace_failures(args.trace_failures)?;
    }
    let code = outputs.write(&mut ran.results, baseline.as_ref())?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
