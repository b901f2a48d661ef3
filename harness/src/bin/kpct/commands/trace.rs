//! `kpct trace`: one shot of one probe with kernel tracing on.

use crate::proxiers;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// The scenario file.
    scenario: std::path::PathBuf,
    /// The probe's name in that file.
    probe: String,
    /// Trace a probe of this step (1-based), after every step up to it has been applied and
    /// synced. Default: a probe of the initial state.
    #[arg(long)]
    step: Option<usize>,
    /// Any proxier (a built-in, `exec:`, `replay:`, `kube-proxy:…`, `api:…`, `NAME=SPEC`).
    /// Default: kube-proxy-ipvs where the kernel has IP_VS, else kube-proxy-iptables (and a
    /// note saying so).
    #[arg(long)]
    proxier: Option<kpct::ProxierSpec>,
}

pub fn run(args: Args) -> Result<()> {
    let s = super::load(&args.scenario)?;
    let p = proxiers::chosen(args.proxier, "trace")?;
    let rt = tokio::runtime::Runtime::new()?;
    let trace = rt.block_on(kpct::trace::trace(
        &s,
        args.step,
        &args.probe,
        p.as_ref(),
        kpct::probe::probe_timeout(),
    ))?;
    print!("{trace}");
    Ok(())
}
