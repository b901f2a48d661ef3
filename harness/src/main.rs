//! `kpct`: the suite's command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use kpct::caps::{self, Feature};
use kpct::netns;

#[derive(Parser)]
#[command(name = "kpct", version, about = "Conformance suite for Kubernetes service proxiers, in network namespaces")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report what the running kernel offers (IP_VS, dummy, vxlan, xt_ipvs, ipset types).
    Caps {
        /// Exit 1 unless every listed feature is present (comma-separated: ip_vs,dummy,…).
        #[arg(long, value_delimiter = ',')]
        require: Vec<String>,
        /// Print nothing; only the exit status tells.
        #[arg(long)]
        quiet: bool,
    },
    /// Print benchmark numbers (never asserted).
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Remove network namespaces left behind by crashed runs (those whose process is gone).
    Cleanup {
        /// Also remove namespaces of runs that are still alive.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Setup and teardown cost of nodes and pods (namespaces, veths, bridge, VXLAN).
    Topology {
        #[arg(long, default_value_t = 3)]
        nodes: u8,
        #[arg(long, default_value_t = 10)]
        pods_per_node: u8,
        #[arg(long, default_value_t = 3)]
        rounds: u32,
    },
}

fn main() {
    if let Err(e) = run() {
        eprintln!("kpct: {e:#}");
        std::process::exit(2);
    }
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Caps { require, quiet } => caps_command(&require, quiet),
        Command::Bench { what } => match what {
            BenchCommand::Topology {
                nodes,
                pods_per_node,
                rounds,
            } => {
                let rt = tokio::runtime::Runtime::new()?;
                print!("{}", rt.block_on(kpct::bench::topology(nodes, pods_per_node, rounds))?);
                Ok(())
            }
        },
        Command::Cleanup { all } => {
            let names = netns::leftovers(all)?;
            netns::remove_leftovers(&names);
            for name in &names {
                println!("removed {name}");
            }
            println!("{} namespace(s) removed", names.len());
            Ok(())
        }
    }
}

fn caps_command(require: &[String], quiet: bool) -> Result<()> {
    let wanted = require
        .iter()
        .map(|r| Feature::parse(r).ok_or_else(|| anyhow::anyhow!("unknown feature `{r}`")))
        .collect::<Result<Vec<_>>>()?;
    let caps = caps::detect()?;
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
