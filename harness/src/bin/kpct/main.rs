//! `kpct`: the suite's command line. One module per subcommand under `commands/`, each owning
//! its arguments and its run function, as cargo's `src/bin/cargo/commands/` does.

mod commands;
mod proxiers;
mod stdout;

use clap::{Parser, Subcommand};
use commands::*;

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

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Report what the running kernel offers (IP_VS, dummy, vxlan, xt_ipvs, ipset types).
    Caps(caps::Args),
    /// Run scenarios against proxiers and print the result table (exit 1 on any failure; 3 when
    /// everything that ran passed but some run needs what this kernel lacks).
    Run(run::Args),
    /// Check scenario files without running them: every problem of every file in one pass,
    /// including the library's rules (header comment, description, name = file name, the
    /// `sctp-`/`ipvs-existing-` prefixes). Exit 1 on any problem.
    Validate(validate::Args),
    /// Print the programming a proxier makes for a scenario, per node, without touching a
    /// kernel: in the suite's text format or as one tool would show it. With `--diff`, a
    /// unified diff against a second proxier's instead (exit 1 when they differ).
    Program(program::Args),
    /// Act as an `exec:` proxier with a built-in's programming: read the document an `exec:`
    /// proxier gets on stdin, print what the built-in programs for it (text format).
    AsExec(as_exec::Args),
    /// Print the JSON document an `exec:` proxier gets on stdin for one node of a scenario, at
    /// its first sync or after a step (schema: harness/src/drivers/exec-schema.md).
    Input(input::Args),
    /// Validate scenario files, run them against the built-ins and write each observation as a
    /// pending snapshot for `cargo insta review` (nothing when the golden one already says it):
    /// a new scenario's goldens without the whole suite. Exit 1 if an expectation fails.
    Record(record::Args),
    /// Compare the programming two proxiers leave on each node of scenarios, after the first
    /// sync and after each step (e.g. a real kube-proxy with the built-in of its mode, whose
    /// known differences are declared). Exit 1 on any difference not declared.
    DiffProgramming(diff_programming::Args),
    /// Compare two runs' results (`kpct run --json`), scenario by scenario: regressions, fixes,
    /// failures still there, new and gone checks, changed observations. Exit 1 on a regression
    /// or a new failing check.
    Compare(compare::Args),
    /// Generated scenarios against two proxiers (compared) or one (checked against what any
    /// conformant proxier does); each unexplained difference shrunk to a minimal scenario.
    /// Exit 1 on any finding.
    Explore(explore::Args),
    /// Run one scenario many times and report whether every observation is identical.
    Soak(soak::Args),
    /// Print the README's scenario table, generated from scenarios/ and snapshots/.
    ScenarioTable(scenario_table::Args),
    /// Build a scenario's topology and programming and leave it running for debugging.
    Lab(lab::Args),
    /// Print benchmark numbers (never asserted).
    Bench(bench::Args),
    /// Fire one shot of one probe with kernel tracing on and print the path it took on each node:
    /// netfilter chains and rules (nf_tables trace), IPVS service and real server, conntrack.
    Trace(trace::Args),
    /// Remove network namespaces left behind by crashed runs (those whose process is gone).
    Cleanup(cleanup::Args),
}

/// With this set, kpct only parses its command line: exit 0 when it parses, clap's error and
/// exit 2 when not (harness/tests/docs.rs checks every command line of the documentation).
const PARSE_ONLY: &str = "KPCT_PARSE_ONLY";

fn main() {
    if std::env::var_os(PARSE_ONLY).is_some() {
        match Cli::try_parse() {
            Ok(_) => std::process::exit(0),
            Err(e) if !e.use_stderr() => std::process::exit(0),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    }
    let result = match Cli::parse().command {
        Command::Caps(args) => caps::run(args),
        Command::Run(args) => run::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Program(args) => program::run(args),
        Command::Record(args) => record::run(args),
        Command::Input(args) => input::run(args),
        Command::AsExec(args) => as_exec::run(args),
        Command::DiffProgramming(args) => diff_programming::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Explore(args) => explore::run(args),
        Command::Soak(args) => soak::run(args),
        Command::ScenarioTable(args) => scenario_table::run(args),
        Command::Lab(args) => lab::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Cleanup(args) => cleanup::run(args),
    };
    if let Err(e) = result {
        eprintln!("kpct: {e:#}");
        std::process::exit(2);
    }
}
