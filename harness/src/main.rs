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
        /// Write a report to this file: Markdown (`.md`) or HTML (`.html`), by extension. It
        /// shows every failing probe with its expectations, observation and the relevant
        /// iptables/ipset/IPVS state of the nodes involved.
        #[arg(long)]
        report: Option<std::path::PathBuf>,
        /// Print the scenarios and their probes (with the proxiers that would run them) and
        /// exit without running anything.
        #[arg(long)]
        list: bool,
        /// Run only the probes of this name (repeatable); each keeps the source ports it has in
        /// the full scenario, so its shots are the same.
        #[arg(long = "probe")]
        probes: Vec<String>,
        /// Stop after the first scenario run that fails or errors.
        #[arg(long)]
        fail_fast: bool,
    },
    /// Check scenario files without running them: every problem of every file in one pass,
    /// including the library's rules (header comment, description, name = file name, the
    /// `sctp-`/`ipvs-existing-` prefixes). Exit 1 on any problem.
    Validate {
        /// Scenario files or globs. Default: scenarios/*.yaml.
        files: Vec<String>,
    },
    /// Print the programming a proxier makes for a scenario, per node, without touching a
    /// kernel: in the suite's text format or as one tool would show it. With `--diff`, a
    /// unified diff against a second proxier's instead (exit 1 when they differ).
    Program {
        /// The scenario file.
        scenario: std::path::PathBuf,
        /// A built-in proxier or `replay:DIR`.
        #[arg(long, default_value = "kube-proxy-iptables")]
        proxier: String,
        /// Only this node (default: every node of the scenario).
        #[arg(long)]
        node: Option<String>,
        #[arg(long, value_enum, default_value_t = kpct::programming::view::View::Text)]
        view: kpct::programming::view::View,
        /// Compare with this proxier (a built-in or `replay:DIR`), rule by rule.
        #[arg(long)]
        diff: Option<String>,
    },
    /// Validate scenario files, run them against the built-ins and write each observation as a
    /// pending snapshot for `cargo insta review` (nothing when the golden one already says it):
    /// a new scenario's goldens without the whole suite. Exit 1 if an expectation fails.
    Record {
        /// The scenario files.
        #[arg(required = true)]
        files: Vec<String>,
        /// Built-in proxiers to record; repeatable. Default: both.
        #[arg(long = "proxier")]
        proxiers: Vec<String>,
    },
    /// Run one scenario many times and report whether every observation is identical.
    Soak {
        #[arg(long)]
        scenario: std::path::PathBuf,
        /// A built-in proxier. Default: kube-proxy-ipvs where the kernel has IP_VS, else
        /// kube-proxy-iptables (and a note saying so).
        #[arg(long)]
        proxier: Option<String>,
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Print the README's scenario table, generated from scenarios/ and harness/snapshots/.
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
    /// Fire one shot of one probe with kernel tracing on and print the path it took on each node:
    /// netfilter chains and rules (nf_tables trace), IPVS service and real server, conntrack.
    Trace {
        /// The scenario file.
        scenario: std::path::PathBuf,
        /// The probe's name in that file.
        probe: String,
        /// A built-in proxier. Default: kube-proxy-ipvs where the kernel has IP_VS, else
        /// kube-proxy-iptables (and a note saying so).
        #[arg(long)]
        proxier: Option<String>,
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
        /// A built-in proxier. Default: kube-proxy-ipvs where the kernel has IP_VS, else
        /// kube-proxy-iptables (and a note saying so).
        #[arg(long)]
        proxier: Option<String>,
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
    /// N services × E endpoints per proxier and size: time to compute and apply the
    /// programming, what each node holds, and pod -> ClusterIP connect latency.
    Scale {
        /// Built-in proxier; repeatable. Default: both.
        #[arg(long = "proxier")]
        proxiers: Vec<String>,
        #[command(flatten)]
        scale: ScaleArgs,
    },
    /// Every scenario against each built-in proxier: total and per-scenario min/median/max.
    Suite {
        /// Built-in proxier; repeatable. Default: both.
        #[arg(long = "proxier")]
        proxiers: Vec<String>,
        /// Scenario files or globs; repeatable. Default: scenarios/*.yaml.
        #[arg(long = "scenario")]
        scenarios: Vec<String>,
        #[arg(long, default_value_t = 1)]
        rounds: usize,
    },
    /// topology (3 nodes x 10 pods, 2 rounds), suite and scale, in one run.
    All {
        /// Built-in proxier; repeatable. Default: both.
        #[arg(long = "proxier")]
        proxiers: Vec<String>,
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
}

impl ScaleArgs {
    fn options(&self) -> kpct::bench::ScaleOptions {
        kpct::bench::ScaleOptions {
            services: self.services.clone(),
            endpoints: self.endpoints,
            nodes: self.nodes,
            pods_per_node: self.pods_per_node,
            probes: self.probes,
            probe_timeout: kpct::probe::probe_timeout(),
        }
    }
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
            report,
            list,
            probes,
            fail_fast,
        } => run_command(
            &proxiers,
            &scenarios,
            Outputs {
                observations: observations.as_deref(),
                junit: junit.as_deref(),
                report: report.as_deref(),
            },
            &Selection {
                list,
                probes,
                fail_fast,
            },
        ),
        Command::Validate { files } => validate_command(&files),
        Command::Record { files, proxiers } => record_command(&files, &proxiers),
        Command::Program {
            scenario,
            proxier,
            node,
            view,
            diff,
        } => program_command(&scenario, &proxier, node.as_deref(), view, diff.as_deref()),
        Command::Soak {
            scenario,
            proxier,
            runs,
        } => {
            let proxier = chosen_proxier(proxier)?;
            if proxier.contains("ipvs") {
                ensure_ipvs("run it through `sudo ci/kpct.sh soak …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`")?;
            }
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
        Command::Trace {
            scenario,
            probe,
            proxier,
        } => trace_command(&scenario, &probe, &chosen_proxier(proxier)?),
        Command::Bench { what } => bench_command(what),
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

/// Where `kpct run` writes besides the table.
struct Outputs<'a> {
    observations: Option<&'a std::path::Path>,
    junit: Option<&'a std::path::Path>,
    report: Option<&'a std::path::Path>,
}

/// Which part of `kpct run`'s work is done.
struct Selection {
    list: bool,
    probes: Vec<String>,
    fail_fast: bool,
}

/// Keeps only the probes named `wanted`, each with the source port it has in the whole file.
/// `None` when the scenario has none of them.
fn only_probes(
    mut s: kpct::scenario::Scenario,
    wanted: &[String],
) -> Option<kpct::scenario::Scenario> {
    if wanted.is_empty() {
        return Some(s);
    }
    for (index, probe) in s.probes.iter_mut().enumerate() {
        let first = probe.first_source_port(index);
        probe.source_port = u16::try_from(first).ok();
    }
    s.probes.retain(|p| wanted.contains(&p.name));
    (!s.probes.is_empty()).then_some(s)
}

fn run_command(
    proxier_names: &[String],
    patterns: &[String],
    outputs: Outputs<'_>,
    selection: &Selection,
) -> Result<()> {
    let Outputs {
        observations,
        junit,
        report,
    } = outputs;
    // Before anything runs: an unknown report format and an output that cannot be written are
    // usage errors.
    let report = report
        .map(|path| {
            kpct::report::document::Format::from_path(path)
                .map(|format| (path, format))
                .map_err(anyhow::Error::msg)
        })
        .transpose()?;
    {
        use kpct::output::{Output, OutputKind};
        let outputs: Vec<Output> = [
            junit.map(|path| Output {
                flag: "--junit",
                path,
                kind: OutputKind::File,
            }),
            report.map(|(path, _)| Output {
                flag: "--report",
                path,
                kind: OutputKind::File,
            }),
            observations.map(|path| Output {
                flag: "--observations",
                path,
                kind: OutputKind::Directory,
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        kpct::output::ensure_writable(&outputs)?;
    }
    let names = or_builtins(proxier_names);
    let proxiers = names
        .iter()
        .map(|n| proxier_from_spec(n))
        .collect::<Result<Vec<_>>>()?;
    // Listing runs nothing, so it needs no IP_VS.
    if names.iter().any(|n| n.contains("ipvs")) && !selection.list {
        ensure_ipvs("run it through `sudo ci/kpct.sh run …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`")?;
    }
    let files = kpct::scenario::files(patterns)?;
    // Every file is validated before anything runs: a typo fails fast, with all the problems
    // of all the files. `expectFor` may name only proxiers this run knows.
    let labels: Vec<String> = proxiers.iter().map(|p| p.label()).collect();
    let mut scenarios = Vec::new();
    let mut invalid = Vec::new();
    for file in &files {
        match kpct::scenario::load_for(file, kpct::scenario::KnownProxiers::Run(&labels)) {
            Ok(s) => scenarios.push(s),
            Err(e) => invalid.push(e.to_string()),
        }
    }
    if !invalid.is_empty() {
        anyhow::bail!("{}", invalid.join("\n"));
    }
    let scenarios: Vec<kpct::scenario::Scenario> = scenarios
        .into_iter()
        .filter_map(|s| only_probes(s, &selection.probes))
        .collect();
    if let Some(missing) = selection.probes.iter().find(|name| {
        !scenarios
            .iter()
            .any(|s| s.probes.iter().any(|p| &&p.name == name))
    }) {
        anyhow::bail!("no probe named `{missing}` in the scenarios given");
    }
    if selection.list {
        for s in &scenarios {
            for p in &s.probes {
                println!("{}\t{}\t{}", s.name, p.name, labels.join(","));
            }
        }
        return Ok(());
    }
    if let Some(dir) = observations {
        std::fs::create_dir_all(dir)?;
    }
    let total = scenarios.len() * proxiers.len();
    let rt = tokio::runtime::Runtime::new()?;
    let timeout = kpct::probe::probe_timeout();
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    let mut progress = kpct::progress::Progress::stderr(total);
    'scenarios: for scenario in &scenarios {
        for proxier in &proxiers {
            progress.start(&scenario.name, &proxier.label());
            match rt.block_on(kpct::run::run_scenario(scenario, proxier.as_ref(), timeout)) {
                Ok(run) => {
                    progress.finish(&if run.violations.is_empty() {
                        kpct::progress::Outcome::Ok
                    } else {
                        kpct::progress::Outcome::Fail
                    });
                    if let Some(dir) = observations {
                        let label = proxier.label().replace(['/', ' ', ':'], "_");
                        let path = dir.join(format!("{}@{label}.yaml", scenario.name));
                        std::fs::write(&path, run.observation.to_yaml()?)?;
                    }
                    runs.push(run);
                }
                Err(e) => {
                    let message = format!("{e:#}");
                    progress.finish(&kpct::progress::Outcome::Error(message.clone()));
                    errors.push((scenario.name.clone(), proxier.label(), message));
                }
            }
            // Every earlier run passed (or fail-fast would have stopped): look at this one.
            if selection.fail_fast
                && (!errors.is_empty() || runs.last().is_some_and(|r| !r.violations.is_empty()))
            {
                break 'scenarios;
            }
        }
    }
    progress.close();
    print!("{}", kpct::report::table(&runs, errors.len()));
    for (scenario, proxier, e) in &errors {
        println!("  ERROR {scenario} × {proxier}: {e}");
    }
    if let Some(path) = junit {
        std::fs::write(path, kpct::report::junit(&runs, &errors))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    if let Some((path, format)) = report {
        std::fs::write(path, kpct::report::document::render(format, &runs, &errors))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    let failed = runs.iter().any(|r| !r.violations.is_empty()) || !errors.is_empty();
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

fn trace_command(scenario: &std::path::Path, probe: &str, proxier: &str) -> Result<()> {
    let s = kpct::scenario::load(scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
    let p = proxier_from_spec(proxier)?;
    if proxier.contains("ipvs") {
        ensure_ipvs("run it through `sudo ci/kpct.sh trace …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`")?;
    }
    let rt = tokio::runtime::Runtime::new()?;
    let trace = rt.block_on(kpct::trace::trace(
        &s,
        probe,
        p.as_ref(),
        kpct::probe::probe_timeout(),
    ))?;
    print!("{trace}");
    Ok(())
}

fn lab_command(action: LabCommand) -> Result<()> {
    match action {
        LabCommand::Up { scenario, proxier } => {
            let proxier = chosen_proxier(proxier)?;
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
            let labs = kpct::lab::list()?;
            if labs.is_empty() {
                println!("no labs are up");
            }
            for lab in labs {
                println!("{lab}");
            }
            Ok(())
        }
    }
}

/// What `spec` programs on `node` of `s` (whose cluster state is `cluster`): a built-in
/// computes it, a replay reads its capture.
fn programming_of(
    spec: &str,
    s: &kpct::scenario::Scenario,
    cluster: &kpct::cluster::ClusterState,
    node: &str,
) -> Result<kpct::programming::Programming> {
    if spec.starts_with("replay:") {
        let replay = kpct::proxier::replay::Replay::from_spec(spec)?;
        return Ok(replay.load(node)?.programming);
    }
    if spec.starts_with("exec:") {
        anyhow::bail!(
            "`{spec}`: `program` does not run exec proxiers, which program a node namespace; \
             `kpct run --proxier {spec} --scenario … --report FILE` shows what one left on each node"
        );
    }
    let p = kpct::proxier::builtin(spec).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown proxier `{spec}` (program takes the built-ins: {}, or `replay:DIR`)",
            kpct::proxier::BUILTIN.join(", ")
        )
    })?;
    let ctx = kpct::scenario::node_context(s, node)
        .ok_or_else(|| anyhow::anyhow!("no node `{node}` in scenario {}", s.name))?;
    p.program(cluster, &ctx)
}

fn program_command(
    scenario: &std::path::Path,
    proxier: &str,
    node: Option<&str>,
    view: kpct::programming::view::View,
    diff: Option<&str>,
) -> Result<()> {
    let s = kpct::scenario::load(scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
    let nodes: Vec<String> = match node {
        Some(n) if s.topology.nodes.iter().any(|x| x.name == n) => vec![n.to_string()],
        Some(n) => anyhow::bail!(
            "no node `{n}` in scenario {} (nodes: {})",
            s.name,
            s.topology
                .nodes
                .iter()
                .map(|x| x.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => s.topology.nodes.iter().map(|x| x.name.clone()).collect(),
    };
    let cluster = kpct::scenario::cluster_state(&s);
    let render = |spec: &str, node: &str| -> Result<String> {
        Ok(kpct::programming::view::render(
            &programming_of(spec, &s, &cluster, node)?,
            view,
        ))
    };
    let mut differ = false;
    for node in &nodes {
        let ours = render(proxier, node)?;
        match diff {
            None => emit(&format!("# node {node}: {proxier}\n{ours}"))?,
            Some(other) => {
                let theirs = render(other, node)?;
                if ours != theirs {
                    differ = true;
                    emit(
                        &similar::TextDiff::from_lines(&ours, &theirs)
                            .unified_diff()
                            .header(&format!("{proxier} {node}"), &format!("{other} {node}"))
                            .to_string(),
                    )?;
                }
            }
        }
    }
    if differ {
        std::process::exit(1);
    }
    Ok(())
}

/// The proxiers named on the command line, or both built-ins when none is.
fn or_builtins(names: &[String]) -> Vec<String> {
    if names.is_empty() {
        kpct::proxier::BUILTIN
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        names.to_vec()
    }
}

/// Writes to stdout; a reader that went away (`| head`) ends the command quietly, as with any
/// Unix filter, instead of a panic.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// Built-in proxiers by name (both when none is named), refusing IPVS up front on a kernel
/// without it; `command` names the subcommand in messages, `way_out` says what to do instead.
fn builtins(
    names: &[String],
    command: &str,
    way_out: &str,
) -> Result<Vec<Box<dyn kpct::proxier::Proxier + Send + Sync>>> {
    let names = or_builtins(names);
    if names.iter().any(|n| n.contains("ipvs")) {
        ensure_ipvs(way_out)?;
    }
    names
        .iter()
        .map(|n| {
            kpct::proxier::builtin(n).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown proxier `{n}` ({command} takes the built-ins: {})",
                    kpct::proxier::BUILTIN.join(", ")
                )
            })
        })
        .collect()
}

/// Scenario files checked as `kpct validate` checks them.
struct Checked {
    /// The files that parse, with their scenarios.
    scenarios: Vec<(std::path::PathBuf, kpct::scenario::Scenario)>,
    /// Every problem of every file: the format's, then the library's rules.
    problems: Vec<kpct::scenario::Problem>,
}

fn checked_scenarios(files: &[std::path::PathBuf]) -> Result<Checked> {
    let mut scenarios = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("{}: cannot read scenario file: {e}", file.display()))?;
        match kpct::scenario::parse(&text, &file.display().to_string()) {
            Ok(s) => {
                problems.extend(kpct::scenario::conventions(file, &text, &s));
                scenarios.push((file.clone(), s));
            }
            Err(e) => problems.extend(e.problems().iter().cloned()),
        }
    }
    Ok(Checked {
        scenarios,
        problems,
    })
}

fn record_command(patterns: &[String], proxier_names: &[String]) -> Result<()> {
    let proxiers = builtins(
        proxier_names,
        "record",
        "run it through `sudo ci/kpct.sh record …`, which uses a VM whose kernel has it (the snapshots come back into the repository), or pick `--proxier kube-proxy-iptables`",
    )?;
    let Checked {
        scenarios,
        problems,
    } = checked_scenarios(&kpct::scenario::files(patterns)?)?;
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
            let run = rt.block_on(kpct::run::run_scenario(
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
            match kpct::record::record(&repo, file, &run)? {
                kpct::record::Recorded::Unchanged(golden) => {
                    println!(
                        "{} × {}: unchanged ({})",
                        s.name,
                        p.name(),
                        golden.display()
                    )
                }
                kpct::record::Recorded::Pending(path) => {
                    pending += 1;
                    println!("{} × {}: pending {}", s.name, p.name(), path.display())
                }
            }
        }
    }
    if pending > 0 {
        println!("review with `cargo insta review`, then `kpct scenario-table --write README.md`");
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

fn validate_command(patterns: &[String]) -> Result<()> {
    let patterns = if patterns.is_empty() {
        vec!["scenarios/*.yaml".to_string()]
    } else {
        patterns.to_vec()
    };
    let files = kpct::scenario::files(&patterns)?;
    let problems = checked_scenarios(&files)?.problems;
    for p in &problems {
        println!("{p}");
    }
    if problems.is_empty() {
        println!("{} scenario file(s), no problems", files.len());
        Ok(())
    } else {
        eprintln!(
            "kpct: {} problem(s) in {} scenario file(s)",
            problems.len(),
            files.len()
        );
        std::process::exit(1)
    }
}

fn bench_command(what: BenchCommand) -> Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let builtins = |names: &[String]| {
        builtins(
            names,
            "bench",
            "run it through `sudo ci/kpct.sh bench …`, which uses a VM whose kernel has it, or pick `--proxier kube-proxy-iptables`",
        )
    };
    let suite_options = |patterns: Vec<String>, rounds: usize| kpct::bench::SuiteOptions {
        patterns: if patterns.is_empty() {
            vec!["scenarios/*.yaml".into()]
        } else {
            patterns
        },
        rounds,
        probe_timeout: kpct::probe::probe_timeout(),
    };
    match what {
        BenchCommand::Topology {
            nodes,
            pods_per_node,
            rounds,
        } => print!(
            "{}",
            rt.block_on(kpct::bench::topology(nodes, pods_per_node, rounds))?
        ),
        BenchCommand::Scale { proxiers, scale } => {
            let proxiers = builtins(&proxiers)?;
            print!(
                "{}",
                rt.block_on(kpct::bench::scale(&proxiers, &scale.options()))?
            );
        }
        BenchCommand::Suite {
            proxiers,
            scenarios,
            rounds,
        } => {
            let proxiers = builtins(&proxiers)?;
            print!(
                "{}",
                rt.block_on(kpct::bench::suite(
                    &proxiers,
                    &suite_options(scenarios, rounds)
                ))?
            );
        }
        BenchCommand::All { proxiers, scale } => {
            let proxiers = builtins(&proxiers)?;
            let started = std::time::Instant::now();
            println!(
                "kpct bench all on kernel {}, {} CPUs, load average {}\n",
                kpct::caps::detect()?.kernel,
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .trim()
            );
            let section = |name: &str, t: std::time::Instant| {
                println!("({name}: {:.1} s)\n", t.elapsed().as_secs_f64());
            };
            let t = std::time::Instant::now();
            println!("{}", rt.block_on(kpct::bench::topology(3, 10, 2))?);
            section("topology", t);
            let t = std::time::Instant::now();
            println!(
                "{}",
                rt.block_on(kpct::bench::suite(&proxiers, &suite_options(Vec::new(), 1)))?
            );
            section("suite", t);
            let t = std::time::Instant::now();
            println!(
                "{}",
                rt.block_on(kpct::bench::scale(&proxiers, &scale.options()))?
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

/// The proxier a one-proxier command uses: the one asked for, else the IPVS one where the kernel
/// can run it, else the iptables one, with a note on stderr.
fn chosen_proxier(asked: Option<String>) -> Result<String> {
    if let Some(p) = asked {
        return Ok(p);
    }
    let has_ipvs = caps::detect()?.missing(&[Feature::IpVs]).is_empty();
    let (chosen, note) = default_proxier(has_ipvs);
    if let Some(note) = note {
        eprintln!("kpct: {note}");
    }
    Ok(chosen.to_string())
}

fn default_proxier(has_ipvs: bool) -> (&'static str, Option<&'static str>) {
    if has_ipvs {
        ("kube-proxy-ipvs", None)
    } else {
        (
            "kube-proxy-iptables",
            Some("no IP_VS in this kernel: using --proxier kube-proxy-iptables (for IPVS, run it through `sudo ci/kpct.sh`, which uses a VM whose kernel has it)"),
        )
    }
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

#[cfg(test)]
mod tests {
    use super::default_proxier;

    #[test]
    fn the_default_proxier_is_one_the_kernel_can_run() {
        assert_eq!(default_proxier(true), ("kube-proxy-ipvs", None));
        let (chosen, note) = default_proxier(false);
        assert_eq!(chosen, "kube-proxy-iptables");
        assert!(note.is_some_and(|n| n.contains("ci/kpct.sh")));
    }
}
