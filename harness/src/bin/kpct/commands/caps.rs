//! `kpct caps`: what the running kernel offers.

use anyhow::Result;
use kpct::kernel_features::{self, Feature};

#[derive(clap::Args)]
pub struct Args {
    /// Exit 1 unless every listed feature is present (comma-separated: ip_vs,dummy,…).
    #[arg(long, value_delimiter = ',')]
    require: Vec<String>,
    /// Print nothing; only the exit status tells.
    #[arg(long)]
    quiet: bool,
}

pub fn run(Args { require, quiet }: Args) -> Result<()> {
    let wanted = require
        .iter()
        .map(|r| Feature::parse(r).ok_or_else(|| anyhow::anyhow!("unknown feature `{r}`")))
        .collect::<Result<Vec<_>>>()?;
    let caps = kernel_features::detect()?;
    if !quiet {
        print!("{caps}");
    }
    let missing = caps.missing(&wanted);
    if !missing.is_empty() {
        if !quiet {
            for (f, why) in &missing {
                eprintln!("missing {}: {why}", f.name());
            }
            if missing.iter().any(|(f, _)| *f == Feature::IpVs) {
                eprintln!("This kernel cannot run the IPVS tests; `sudo ci/test.sh` runs them in a VM whose kernel can.");
            }
        }
        std::process::exit(1);
    }
    if !quiet && !caps.get(Feature::IpVs).ok() {
        eprintln!("note: no IP_VS in this kernel; `sudo ci/test.sh` runs the IPVS tests in a VM whose kernel has it");
    }
    Ok(())
}
