//! `kpct`: the suite's command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use kpct::caps::{self, Feature};
use kpct::netns;

#[derive(Parser)]
#[command(
    name = "kpct",
    version,
    about = "Conformance suite for Kubernetes service proxiers, in network namespaces"
)]
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
    /// Run scenarios against proxiers and print the result table (exit 1 on any failure).
    Run {
        /// A built-in proxier (kube-proxy-ipvs, kube-proxy-iptables), `exec:COMMAND [ARGS]` or
        /// `replay:DIR`; repeatable. Default: both built-ins.
        #[arg(long = "proxier")]
        proxiers: Vec<String>,
        /// Scenario files or globs; repeatable. Default: scenarios/*.yaml.
        #[arg(long = "scenario")]
        scenarios: Vec<String>,
        /// Write each observation document (YAML) into this directory.
        #[arg(long)]
        observations: Option<std::path::PathBuf>,
        /// Write JUnit XML (one testcase per probe) to this file.
        #[arg(long)]
        junit: Option<std::path::PathBuf>,
    },
    /// Run one scenario many times and report whether every observation is identical.
    Soak {
        #[arg(long)]
        scenario: std::path::PathBuf,
        #[arg(long, default_value = "kube-proxy-ipvs")]
        proxier: String,
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Print the README's scenario table, generated from scenarios/ and snapshots/.
    ScenarioTable {
        /// Rewrite the table between the markers in this file instead of printing it.
        #[arg(long)]
        write: Option<std::path::PathBuf>,
    },
    /// Build a scenario's topology and programming and leave it running for debugging.
    Lab {
        #[command(subcommand)]
        action: LabCommand,
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
enum LabCommand {
    /// Build and program the lab of a scenario file; prints how to get in.
    Up {
        scenario: std::path::PathBuf,
        #[arg(long, default_value = "kube-proxy-ipvs")]
        proxier: String,
    },
    /// Remove the lab of a scenario (by scenario name or file).
    Down { scenario: String },
    /// List the labs that are up.
    List,
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
        Command::Run {
            proxiers,
            scenarios,
            observations,
            junit,
        } => run_command(
            &proxiers,
            &scenarios,
            observations.as_deref(),
            junit.as_deref(),
        ),
        Command::Soak {
            scenario,
            proxier,
            runs,
        } => {
            let s = kpct::scenario::load(&scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
            let p = kpct::proxier::builtin(&proxier)
                .ok_or_else(|| anyhow::anyhow!("unknown proxier `{proxier}`"))?;
            let rt = tokio::runtime::Runtime::new()?;
            let report = rt.block_on(kpct::soak::soak(
                &s,
                p.as_ref(),
                runs,
                kpct::probe::probe_timeout(),
            ))?;
            print!("{}", report.render(&s.name, p.name()));
            if !report.divergences.is_empty() {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::ScenarioTable { write } => {
            let table = kpct::docs::scenario_table(std::path::Path::new("."))?;
            match write {
                Some(path) => {
                    let readme = std::fs::read_to_string(&path)?;
                    std::fs::write(&path, kpct::docs::splice(&readme, &table)?)?;
                }
                None => print!("{table}"),
            }
            Ok(())
        }
        Command::Lab { action } => lab_command(action),
        Command::Bench { what } => match what {
            BenchCommand::Topology {
                nodes,
                pods_per_node,
                rounds,
            } => {
                let rt = tokio::runtime::Runtime::new()?;
                print!(
                    "{}",
                    rt.block_on(kpct::bench::topology(nodes, pods_per_node, rounds))?
                );
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

fn scenario_files(patterns: &[String]) -> Result<Vec<std::path::PathBuf>> {
    let patterns = if patterns.is_empty() {
        vec!["scenarios/*.yaml".to_string()]
    } else {
        patterns.to_vec()
    };
    let mut files = Vec::new();
    for pattern in &patterns {
        let matched: Vec<_> = glob::glob(pattern)
            .map_err(|e| anyhow::anyhow!("bad scenario pattern `{pattern}`: {e}"))?
            .collect::<std::result::Result<_, _>>()?;
        if matched.is_empty() {
            anyhow::bail!("no scenario file matches `{pattern}` (run from the repository root?)");
        }
        files.extend(matched);
    }
    files.sort();
    files.dedup();
    Ok(files)
}

fn run_command(
    proxier_names: &[String],
    patterns: &[String],
    observations: Option<&std::path::Path>,
    junit: Option<&std::path::Path>,
) -> Result<()> {
    let names: Vec<String> = if proxier_names.is_empty() {
        kpct::proxier::BUILTIN
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        proxier_names.to_vec()
    };
    let proxiers = names
        .iter()
        .map(|n| proxier_from_spec(n))
        .collect::<Result<Vec<_>>>()?;
    if names.iter().any(|n| n.contains("ipvs")) {
        ensure_ipvs("run it through `sudo ci/kpct.sh run …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`")?;
    }
    let files = scenario_files(patterns)?;
    // Every file is validated before anything runs: a typo fails fast, with all its problems.
    let scenarios = files
        .iter()
        .map(|f| kpct::scenario::load(f).map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<Result<Vec<_>>>()?;
    if let Some(dir) = observations {
        std::fs::create_dir_all(dir)?;
    }
    let total = scenarios.len() * proxiers.len();
    let rt = tokio::runtime::Runtime::new()?;
    let timeout = kpct::probe::probe_timeout();
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    let mut done = 0;
    for scenario in &scenarios {
        for proxier in &proxiers {
            done += 1;
            let started = std::time::Instant::now();
            eprint!(
                "[{done:>3}/{total}] {} × {} … ",
                scenario.name,
                proxier.label()
            );
            match rt.block_on(kpct::run::run_scenario(scenario, proxier.as_ref(), timeout)) {
                Ok(run) => {
                    let status = if run.violations.is_empty() {
                        "ok"
                    } else {
                        "FAIL"
                    };
                    eprintln!("{status} ({:.1}s)", started.elapsed().as_secs_f64());
                    if let Some(dir) = observations {
                        let label = proxier.label().replace(['/', ' ', ':'], "_");
                        let path = dir.join(format!("{}@{label}.yaml", scenario.name));
                        std::fs::write(&path, run.observation.to_yaml()?)?;
                    }
                    runs.push(run);
                }
                Err(e) => {
                    eprintln!("ERROR");
                    errors.push((scenario.name.clone(), proxier.label(), format!("{e:#}")));
                }
            }
        }
    }
    print!("{}", kpct::report::table(&runs));
    for (scenario, proxier, e) in &errors {
        println!("  ERROR {scenario} × {proxier}: {e}");
    }
    if let Some(path) = junit {
        std::fs::write(path, kpct::report::junit(&runs, &errors))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    let failed = runs.iter().any(|r| !r.violations.is_empty()) || !errors.is_empty();
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

fn lab_command(action: LabCommand) -> Result<()> {
    match action {
        LabCommand::Up { scenario, proxier } => {
            let s = kpct::scenario::load(&scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
            let p = kpct::proxier::builtin(&proxier)
                .ok_or_else(|| anyhow::anyhow!("unknown proxier `{proxier}`"))?;
            if proxier.contains("ipvs") {
                ensure_ipvs("use the Vagrant lab (vagrant/), or `--proxier kube-proxy-iptables`")?;
            }
            let rt = tokio::runtime::Runtime::new()?;
            let lab = rt.block_on(kpct::lab::up(&s, p.as_ref()))?;
            print!("{}", kpct::lab::instructions(&lab));
            Ok(())
        }
        LabCommand::Down { scenario } => {
            let name = std::path::Path::new(&scenario)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or(scenario);
            let removed = kpct::lab::down(&name)?;
            if removed.is_empty() {
                anyhow::bail!("no lab named {name} is up (`kpct lab list`)");
            }
            println!("removed {} namespace(s) of lab {name}", removed.len());
            Ok(())
        }
        LabCommand::List => {
            for lab in kpct::lab::list()? {
                println!("{lab}");
            }
            Ok(())
        }
    }
}

/// `kube-proxy-ipvs`, `kube-proxy-iptables`, `exec:COMMAND [ARGS]` or `replay:DIR`.
fn proxier_from_spec(spec: &str) -> Result<Box<dyn kpct::run::NodeProgrammer>> {
    if spec.starts_with("exec:") {
        return Ok(Box::new(kpct::proxier::exec::ExecProxier::from_spec(spec)?));
    }
    if spec.starts_with("replay:") {
        return Ok(Box::new(kpct::proxier::replay::Replay::from_spec(spec)?));
    }
    kpct::proxier::builtin(spec)
        .map(|p| Box::new(p) as Box<dyn kpct::run::NodeProgrammer>)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown proxier `{spec}` (built-in: {}; or exec:COMMAND, replay:DIR)",
                kpct::proxier::BUILTIN.join(", ")
            )
        })
}

/// Fails with the reason when the running kernel has no IP_VS; `way_out` says what to do instead.
fn ensure_ipvs(way_out: &str) -> Result<()> {
    let caps = caps::detect()?;
    if let Some((_, why)) = caps.missing(&[Feature::IpVs]).into_iter().next() {
        anyhow::bail!(
            "the IPVS proxier needs IP_VS, which kernel {} lacks ({why}); {way_out}",
            caps.kernel
        );
    }
    Ok(())
}
