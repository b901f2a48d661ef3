//! `kpct bench`: benchmark numbers, printed with the machine, never asserted.

use crate::proxiers;
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Setup and teardown cost of nodes and pods (namespaces, veths, bridge, VXLAN).
    Topology {
        #[arg(long, default_value_t = 3)]
        nodes: u8,
        #[arg(long, default_value_t = 10)]
        pods_per_node: u8,
        #[arg(long, default_value_t = 3)]
        rounds: u32,
    },
    /// N services × E endpoints per proxier and size: time to compute and apply the
    /// programming, what each node holds, and pod -> ClusterIP connect latency.
    Scale {
        /// Built-in proxier; repeatable. Default: the three built-ins.
        #[arg(long = "proxier")]
        proxiers: Vec<kpct::ProxierSpec>,
        #[command(flatten)]
        scale: ScaleArgs,
    },
    /// Every scenario against each proxier: total and per-scenario min/median/max.
    Suite {
        /// Proxier, repeatable: a built-in, `kube-proxy:MODE[:PATH|:VERSION]` (a real
        /// kube-proxy, timed beside the built-in of its mode), `exec:` or `replay:`. Default:
        /// the three built-ins.
        #[arg(long = "proxier")]
        proxiers: Vec<kpct::ProxierSpec>,
        /// Scenario files or globs; repeatable. Default: scenarios/*.yaml.
        #[arg(long = "scenario")]
        scenarios: Vec<String>,
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// Workers of the parallel pass, timed against -j 1. Default: four per core, at most 16.
        #[arg(short = 'j', long = "jobs")]
        jobs: Option<usize>,
    },
    /// Generated cases a minute: cases of a seed run against two proxiers (each case against
    /// both at once), as `kpct explore` runs them.
    Explore {
        /// The two proxiers. Default: real kube-proxy v1.37.2 in iptables mode and the
        /// built-in of its mode.
        #[arg(long = "proxier")]
        proxiers: Vec<kpct::ProxierSpec>,
        #[arg(long, default_value_t = 60)]
        cases: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Runs at once.
        #[arg(short = 'j', long = "jobs", default_value_t = 2)]
        jobs: usize,
    },
    /// topology (3 nodes x 10 pods, 2 rounds), suite and scale, in one run.
    All {
        /// Built-in proxier; repeatable. Default: the three built-ins.
        #[arg(long = "proxier")]
        proxiers: Vec<kpct::ProxierSpec>,
        #[command(flatten)]
        scale: ScaleArgs,
    },
}

#[derive(clap::Args)]
struct ScaleArgs {
    /// Service counts, comma-separated; one fresh cluster each.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    services: Vec<usize>,
    /// Endpoints per service.
    #[arg(long, default_value_t = 10)]
    endpoints: usize,
    #[arg(long, default_value_t = 3)]
    nodes: u8,
    /// Backend pods per node (endpoints are spread over them).
    #[arg(long, default_value_t = 10)]
    pods_per_node: u8,
    /// Connections timed per probed service (the first, middle and last).
    #[arg(long, default_value_t = 30)]
    probes: usize,
    /// iptables flavours to run the proxiers that write iptables with, comma-separated (`nft`,
    /// `legacy`): each is a row of its own, side by side in the same run.
    #[arg(long, value_delimiter = ',', default_values_t = [Backend::Nft])]
    iptables_backend: Vec<Backend>,
}

/// An iptables flavour on the command line.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Nft,
    Legacy,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Nft => "nft",
            Backend::Legacy => "legacy",
        })
    }
}

impl ScaleArgs {
    fn options(&self) -> kpct::operations::bench::ScaleOptions {
        kpct::operations::bench::ScaleOptions {
            services: self.services.clone(),
            endpoints: self.endpoints,
            nodes: self.nodes,
            pods_per_node: self.pods_per_node,
            probes: self.probes,
            probe_timeout: kpct::probe::probe_timeout(),
            iptables_backends: self
                .iptables_backend
                .iter()
                .map(|b| match b {
                    Backend::Nft => kpct::programming::tools::IptablesBackend::Nft,
                    Backend::Legacy => kpct::programming::tools::IptablesBackend::Legacy,
                })
                .collect(),
        }
    }
}

pub fn run(Args { what }: Args) -> Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let builtins = |specs: &[kpct::ProxierSpec]| proxiers::builtins(specs, "bench");
    let suite_options = |patterns: &[String], rounds: usize, jobs: Option<usize>| -> Result<_> {
        Ok(kpct::operations::bench::SuiteOptions {
            patterns: patterns.to_vec(),
            rounds,
            probe_timeout: kpct::probe::probe_timeout(),
            workers: super::jobs(jobs)?,
        })
    };
    match what {
        What::Topology {
            nodes,
            pods_per_node,
            rounds,
        } => print!(
            "{}",
            rt.block_on(kpct::operations::bench::topology(
                nodes,
                pods_per_node,
                rounds
            ))?
        ),
        What::Scale { proxiers, scale } => {
            let proxiers = builtins(&proxiers)?;
            print!(
                "{}",
                rt.block_on(kpct::operations::bench::scale(&proxiers, &scale.options()))?
            );
        }
        What::Suite {
            proxiers,
            scenarios,
            rounds,
            jobs,
        } => {
            let proxiers = proxiers::ready(&proxiers, "bench")?;
            print!(
                "{}",
                kpct::operations::bench::suite(
                    &proxiers,
                    &suite_options(&scenarios, rounds, jobs)?
                )?
            );
        }
        What::Explore {
            proxiers: specs,
            cases,
            seed,
            jobs,
        } => {
            let specs = if specs.is_empty() {
                vec![
                    "kube-proxy:iptables:v1.37.2".parse()?,
                    "kube-proxy-iptables".parse()?,
                ]
            } else {
                specs
            };
            anyhow::ensure!(specs.len() == 2, "bench explore runs a pair of proxiers");
            let built = proxiers::ready(&specs, "bench")?;
            let refs: Vec<&dyn kpct::NodeProgrammer> = built.iter().map(|p| p.as_ref()).collect();
            println!(
                "kpct bench explore on kernel {}, {} CPUs, load average {}",
                kpct::kernel_features::detect()?.kernel,
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            let bench = kpct::operations::bench::explore(
                &refs,
                cases,
                seed,
                jobs,
                kpct::probe::probe_timeout(),
            )?;
            let labels: Vec<String> = built.iter().map(|p| p.label()).collect();
            print!("{}", bench.render(&labels, jobs));
        }
        What::All {
            proxiers: names,
            scale,
        } => {
            let proxiers = builtins(&names)?;
            let started = std::time::Instant::now();
            println!(
                "kpct bench all on kernel {}, {} CPUs, load average {}\n",
                kpct::kernel_features::detect()?.kernel,
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            let section = |name: &str, t: std::time::Instant| {
                println!("({name}: {:.1} s)\n", t.elapsed().as_secs_f64());
            };
            let t = std::time::Instant::now();
            println!(
                "{}",
                rt.block_on(kpct::operations::bench::topology(3, 10, 2))?
            );
            section("topology", t);
            let t = std::time::Instant::now();
            let programmers: Vec<Box<dyn kpct::NodeProgrammer>> = builtins(&names)?
                .into_iter()
                .map(|p| Box::new(p) as Box<dyn kpct::NodeProgrammer>)
                .collect();
            println!(
                "{}",
                kpct::operations::bench::suite(&programmers, &suite_options(&[], 1, None)?)?
            );
            section("suite", t);
            let t = std::time::Instant::now();
            println!(
                "{}",
                rt.block_on(kpct::operations::bench::scale(&proxiers, &scale.options()))?
            );
            section("scale", t);
            println!(
                "bench all: {:.1} s in total",
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
