//! `kpct record`: a new scenario's goldens, as pending snapshots, without the whole suite.

use crate::proxiers;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// The scenario files.
    #[arg(required = true)]
    files: Vec<String>,
    /// Built-in proxiers to record; repeatable. Default: the three built-ins.
    #[arg(long = "proxier")]
    proxiers: Vec<kpct::ProxierSpec>,
}

pub fn run(args: Args) -> Result<()> {
    // In the VM (`ci/kpct.sh record …`) the snapshots come back into the repository.
    let proxiers = proxiers::builtins(&args.proxiers, "record")?;
    let super::validate::Checked {
        scenarios,
        problems,
    } = super::validate::checked(&kpct::scenario::files(&args.files)?)?;
    if !problems.is_empty() {
        for p in &problems {
            println!("{p}");
        }
        anyhow::bail!("{} problem(s): nothing recorded", problems.len());
    }
    let rt = tokio::runtime::Runtime::new()?;
    let repo = std::env::current_dir()?;
    let mut failed = false;
    let mut pending = 0;
    for (file, s) in &scenarios {
        for p in &proxiers {
            let run = rt.block_on(kpct::run_scenario(
                s,
                p.as_ref(),
                kpct::probe::probe_timeout(),
            ))?;
            if !run.violations.is_empty() {
                failed = true;
                println!(
                    "{} × {}: not recorded, expectations failed:",
                    s.name,
                    p.name()
                );
                for v in &run.violations {
                    println!("  FAIL {v}");
                }
                continue;
            }
            match kpct::operations::record::record(&repo, file, &run)? {
                kpct::operations::record::Recorded::Unchanged(golden) => {
                    println!(
                        "{} × {}: unchanged ({})",
                        s.name,
                        p.name(),
                        golden.display()
                    )
                }
                kpct::operations::record::Recorded::Pending(path) => {
                    pending += 1;
                    println!("{} × {}: pending {}", s.name, p.name(), path.display())
                }
            }
        }
    }
    if pending > 0 {
        println!("review with `cargo insta review`, then `kpct scenario-table --write`");
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
