//! `kpct soak`: one scenario many times, every observation compared.

use crate::proxiers;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    scenario: std::path::PathBuf,
    /// Any proxier (a built-in, `kube-proxy:MODE[:PATH|:VERSION]`, `exec:`, `replay:`).
    /// Default: kube-proxy-ipvs where the kernel has IP_VS, else kube-proxy-iptables (and a
    /// note saying so).
    #[arg(long)]
    proxier: Option<String>,
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Runs at once (each in its own namespaces). Default: four per core, at most 16.
    #[arg(short = 'j', long = "jobs")]
    jobs: Option<usize>,
}

pub fn run(args: Args) -> Result<()> {
    let proxier = proxiers::chosen(args.proxier)?;
    if kpct::proxier::needs_ipvs(&proxier) {
        proxiers::ensure_ipvs(
            "run it through `sudo ci/kpct.sh soak …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`",
        )?;
    }
    let p = proxiers::from_spec(&proxier)?;
    let s = super::load(&args.scenario)?;
    let report = kpct::operations::soak::soak(
        &s,
        p.as_ref(),
        args.runs,
        super::jobs(args.jobs)?,
        kpct::probe::probe_timeout(),
    )?;
    print!("{}", report.render(&s.name, &p.label()));
    if !report.divergences.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
