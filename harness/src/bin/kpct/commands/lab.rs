//! `kpct lab`: a scenario's nodes left up for debugging by hand.

use crate::proxiers;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Build and program the lab of a scenario file; prints how to get in.
    Up {
        scenario: std::path::PathBuf,
        /// Any proxier (a built-in, `exec:`, `replay:`, `kube-proxy:…`, `api:…`, `NAME=SPEC`).
        /// Default: kube-proxy-ipvs where the kernel has IP_VS, else kube-proxy-iptables (and a
        /// note saying so).
        #[arg(long)]
        proxier: Option<kpct::ProxierSpec>,
        /// Also start the scenario's echo backends and health-check listeners, and keep them
        /// serving until this command is stopped (Ctrl-C); the lab stays up after that.
        #[arg(long)]
        backends: bool,
        /// Leave the lab as the scenario stands after this step (1-based): every step up to it
        /// applied and synced by the proxier.
        #[arg(long)]
        step: Option<usize>,
    },
    /// Remove the lab of a scenario (by scenario name or file).
    Down { scenario: String },
    /// List the labs that are up.
    List,
}

pub fn run(Args { action }: Args) -> Result<()> {
    match action {
        Action::Up {
            scenario,
            proxier,
            backends,
            step,
        } => {
            let s = super::load(&scenario)?;
            let p = proxiers::chosen(proxier, "lab")?;
            let rt = tokio::runtime::Runtime::new()?;
            let serve = if backends {
                kpct::operations::lab::Serving::Backends
            } else {
                kpct::operations::lab::Serving::Nothing
            };
            let (lab, serving) =
                rt.block_on(kpct::operations::lab::up_with(&s, p.as_ref(), serve, step))?;
            print!("{}", kpct::operations::lab::instructions(&lab));
            if let Some(_serving) = serving {
                use std::io::Write;
                std::io::stdout().flush()?;
                // The backends are tasks of this runtime: serve until a signal ends the process
                // (the lab's namespaces are persisted, so the handler leaves them).
                rt.block_on(std::future::pending::<()>());
            }
            Ok(())
        }
        Action::Down { scenario } => {
            let name = std::path::Path::new(&scenario)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or(scenario);
            let removed = kpct::operations::lab::down(&name)?;
            if removed.is_empty() {
                anyhow::bail!("no lab named {name} is up (`kpct lab list`)");
            }
            println!("removed {} namespace(s) of lab {name}", removed.len());
            Ok(())
        }
        Action::List => {
            let labs = kpct::operations::lab::list()?;
            if labs.is_empty() {
                println!("no labs are up");
            }
            for lab in labs {
                crate::stdout::emit(&format!("{lab}\n"))?;
            }
            Ok(())
        }
    }
}
