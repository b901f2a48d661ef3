//! `kpct soak`: scenarios many times, every observation compared with its first pass,
//! optionally under a calibrated CPU load (a stress run).

use crate::proxiers;
use anyhow::Result;
use kpct::operations::cpu_load::{CpuLoad, LoadFactor};

#[derive(clap::Args)]
pub struct Args {
    /// Scenario files or globs; repeatable. Default: the whole library (scenarios/*.yaml),
    /// less what the proxier cannot run (each named).
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Any proxier (a built-in, `kube-proxy:MODE[:PATH|:VERSION]`, `exec:`, `replay:`).
    /// Default: kube-proxy-ipvs where the kernel has IP_VS, else kube-proxy-iptables (and a
    /// note saying so).
    #[arg(long)]
    proxier: Option<kpct::ProxierSpec>,
    /// Passes: each scenario runs this many times.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Runs at once (each in its own namespaces). Default: four per core, at most 16.
    #[arg(short = 'j', long = "jobs")]
    jobs: Option<usize>,
    /// Keep the machine loaded meanwhile: busy threads per core (`2x`: twice as many spinning
    /// threads as cores).
    #[arg(long)]
    load: Option<LoadFactor>,
}

pub fn run(args: Args) -> Result<()> {
    let p = proxiers::chosen(args.proxier, "soak")?;
    let mut scenarios = Vec::new();
    for file in kpct::scenario::files(&args.scenarios)? {
        let s = super::load(&file)?;
        match kpct::run::refusal(&s, p.as_ref()) {
            Ok(()) => scenarios.push(s),
            Err(e) => eprintln!("skipped: {e:#}"),
        }
    }
    anyhow::ensure!(!scenarios.is_empty(), "no scenario this proxier can run");
    let load = args.load.map(CpuLoad::start);
    let note = match (&load, args.load) {
        (Some(l), Some(f)) => format!(" under a {f} load ({} busy threads)", l.threads()),
        _ => String::new(),
    };
    let total = scenarios.len() * args.runs;
    let mut progress = |ended: usize, total: usize| {
        if ended.is_multiple_of(10) || ended == total {
            eprintln!("[{ended}/{total}] runs ended");
        }
    };
    let report = kpct::operations::soak::soak(
        &scenarios,
        p.as_ref(),
        args.runs,
        super::jobs(args.jobs)?,
        kpct::probe::probe_timeout(),
        &mut progress,
    )?;
    drop(load);
    debug_assert_eq!(report.runs(), total);
    print!("{}", report.render(&p.label(), &note));
    if report.divergent() > 0 {
        std::process::exit(1);
    }
    Ok(())
}
