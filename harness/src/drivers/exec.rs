//! `exec:` proxiers: an external program programs one node.
//!
//! The program runs once per node, **inside that node's network namespace**, with the
//! [`ProxierInput`] JSON (schema below) on stdin and the environment variables `KPCT_NODE` (node
//! name) and `KPCT_NETNS` (the namespace's name, for messages: `/run/netns` is hidden from it,
//! see [`CONFINEMENT`]). It then either
//!
//! * prints a programming on stdout in the text format of [`crate::programming::text`]
//!   (`*nat` ... `COMMIT`, `*ipset`, `*ipvs`, `*addresses`, `*sysctl`), which the harness
//!   applies atomically, or
//! * prints nothing and exits 0, meaning it programmed the namespace itself (with
//!   iptables-restore, ipset, ipvsadm, ip ... — it already runs inside the namespace).
//!
//! Either way the harness reads the namespace's effective state back afterwards. A non-zero exit
//! status, or running longer than the timeout (default 120 s, `KPCT_EXEC_TIMEOUT_S`), is an
//! error naming the node and carrying the program's stderr. The program runs in its own process
//! group: on a timeout, when it exits, and when kpct is interrupted, every process of that group
//! is killed, so nothing it started in the background outlives its run for the node.
//!
//! The input document is described below (also in `harness/src/drivers/exec-schema.md`).
//!
#![doc = include_str!("exec-schema.md")]

use crate::netns::Netns;
use crate::programming::effective::{
    effective_state, EffectiveState, Missing, ReadError, ReadOptions,
};
use crate::programming::text::{parse_text_with_sources, ParsedText, TextError};
use crate::programming::{AppliedReport, Applier, ApplyError};
use crate::scenario::cluster::{ClusterState, NodeContext, ProxierInput, SCHEMA_VERSION};
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a proxier may run for one node unless configured otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the timeout is configured: whole seconds, at least 1.
pub const TIMEOUT_VARIABLE: &str = "KPCT_EXEC_TIMEOUT_S";

/// Whether `program` (a path, or a name looked up in `PATH`) is an executable file.
fn is_executable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return runnable(std::path::Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| runnable(&dir.join(program))))
}

/// [`TIMEOUT_VARIABLE`] if set, else [`DEFAULT_TIMEOUT`].
fn timeout_from_env() -> Result<Duration, ExecError> {
    timeout_setting(std::env::var(TIMEOUT_VARIABLE).ok())
}

/// The timeout a value of [`TIMEOUT_VARIABLE`] sets (`None`: unset).
fn timeout_setting(value: Option<String>) -> Result<Duration, ExecError> {
    match value {
        None => Ok(DEFAULT_TIMEOUT),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(s) if s >= 1 => Ok(Duration::from_secs(s)),
            _ => Err(ExecError::TimeoutSetting(v)),
        },
    }
}

/// An external proxier program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecProxier {
    pub program: String,
    pub args: Vec<String>,
    pub timeout: Duration,
}

/// What the program did for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    /// It printed a programming for the harness to apply.
    Printed(Box<ParsedText>),
    /// It printed nothing and exited 0: it programmed the namespace itself.
    SelfProgrammed,
}

/// The result of running the proxier for one node, applying what it printed and reading back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSync {
    pub outcome: ExecOutcome,
    /// Set when the harness applied a printed programming.
    pub applied: Option<AppliedReport>,
    pub effective: EffectiveState,
    /// Items of the printed programming the kernel does not hold (empty when all applied).
    pub missing: Vec<Missing>,
}

/// `; stderr: …` when the program wrote any.
fn stderr_part(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        " and wrote nothing on stderr".to_string()
    } else {
        format!("; stderr: {}", stderr.trim_end())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("exec proxier spec `exec:{0}`: expected `exec:PROGRAM [ARGS...]`")]
    Spec(String),
    #[error("{TIMEOUT_VARIABLE}=`{0}`: expected whole seconds, at least 1")]
    TimeoutSetting(String),
    #[error("exec proxier `{0}`: no such executable file (a path, or a program in PATH)")]
    NoProgram(String),
    #[error("node {node}: cannot encode the proxier input: {cause}")]
    Input {
        node: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: serde_json::Error,
    },
    #[error("node {node}: cannot start `{command}` in namespace {netns}: {message}")]
    Spawn {
        node: String,
        netns: String,
        command: String,
        message: String,
    },
    #[error("node {node}: `{command}` did not finish within {timeout:?} and was killed{}", stderr_part(.stderr))]
    Timeout {
        node: String,
        command: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("node {node}: `{command}` failed ({status}){}", stderr_part(.stderr))]
    Failed {
        node: String,
        command: String,
        status: String,
        stderr: String,
    },
    #[error(
        "node {node}: `{command}` printed more than {} MiB on stdout, more than any programming \
         needs; kpct reads no more",
        .limit >> 20
    )]
    TooMuchOutput {
        node: String,
        command: String,
        limit: usize,
    },
    #[error("node {node}: the programming printed by `{command}` is malformed: {cause}")]
    Output {
        node: String,
        command: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: TextError,
    },
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("node {node}: reading the effective state: {cause}")]
    Read {
        node: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: Box<ReadError>,
    },
}

/// The most a program may print on stdout: far more than any node's programming (10,000
/// Services' iptables rules are a few MiB), and what bounds kpct's memory however much a broken
/// program prints.
const STDOUT_LIMIT: usize = 64 << 20;

/// How much of the end of its stderr is kept, for error messages.
const STDERR_KEPT: usize = 64 << 10;

/// What of a pipe is kept.
#[derive(Clone, Copy)]
enum Keep {
    /// The first this many bytes; the rest is read and dropped (a program blocked on a full
    /// pipe would only time out).
    Head(usize),
    /// The last this many bytes.
    Tail(usize),
}

/// A pipe's text, as far as it was kept.
#[derive(Default)]
struct Drained {
    text: String,
    /// Whether more came than was kept.
    cut: bool,
}

/// Reads `pipe` to its end, keeping what `keep` says: memory stays bounded whatever the program
/// prints.
fn drain_bounded(mut pipe: Box<dyn Read + Send>, keep: Keep) -> Drained {
    let mut kept: Vec<u8> = Vec::new();
    let mut cut = false;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match keep {
            Keep::Head(limit) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                cut |= n > room;
            }
            Keep::Tail(limit) => {
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > 2 * limit {
                    let excess = kept.len() - limit;
                    kept.drain(..excess);
                    cut = true;
                }
            }
        }
    }
    // Valid UTF-8 becomes the String without a copy.
    let text = String::from_utf8(kept)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Drained { text, cut }
}

/// The stdin document for one node.
pub fn input_for(cluster: &ClusterState, node: &NodeContext) -> ProxierInput {
    ProxierInput {
        version: SCHEMA_VERSION,
        cluster: cluster.clone(),
        node: node.clone(),
        sync: None,
    }
}

/// What an `exec:` proxier receives for a later sync (version 2): version 1 plus what changed.
pub fn step_input_for(
    cluster: &ClusterState,
    node: &NodeContext,
    step: &str,
    previous: Option<&ClusterState>,
) -> ProxierInput {
    ProxierInput {
        version: crate::scenario::cluster::STEP_SCHEMA_VERSION,
        sync: Some(crate::scenario::cluster::StepSync {
            step: step.to_string(),
            previous: previous.cloned(),
        }),
        ..input_for(cluster, node)
    }
}

/// The document an `exec:` proxier gets on stdin for `node` of `scenario`: its first sync
/// (`step: None`), or the re-sync after the step named `step` (knowing the state before it,
/// unless that step restarts the proxier), as a run builds it ([`crate::run::Staged`]).
pub fn input_at(
    scenario: &crate::scenario::Scenario,
    node: &str,
    step: Option<&str>,
) -> anyhow::Result<ProxierInput> {
    use crate::scenario::{cluster_state, node_context, state_at, step_name};
    let names: Vec<String> = scenario
        .steps
        .iter()
        .enumerate()
        .map(|(k, st)| step_name(st, k))
        .collect();
    let k = match step {
        None => None,
        Some(name) => Some(names.iter().position(|n| n == name).ok_or_else(|| {
            anyhow::anyhow!(
                "{} has no step `{name}` (its steps: {})",
                scenario.name,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )
        })?),
    };
    let state = state_at(scenario, k).scenario;
    let ctx = node_context(&state, node).ok_or_else(|| {
        anyhow::anyhow!(
            "{} has no node `{node}` (its nodes: {})",
            scenario.name,
            state
                .topology
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let cluster = cluster_state(&state);
    Ok(match k {
        None => input_for(&cluster, &ctx),
        Some(k) => {
            let previous = (!scenario.steps[k].restart_proxier)
                .then(|| cluster_state(&state_at(scenario, k.checked_sub(1)).scenario));
            step_input_for(&cluster, &ctx, &names[k], previous.as_ref())
        }
    })
}

/// `input` as the proxier reads it on stdin.
pub fn input_text(input: &ProxierInput) -> serde_json::Result<String> {
    serde_json::to_string_pretty(input)
}

impl ExecProxier {
    pub fn new(program: impl Into<String>, args: Vec<String>) -> ExecProxier {
        ExecProxier {
            program: program.into(),
            args,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Parses the `PROGRAM [ARGS...]` of `exec:PROGRAM [ARGS...]` (arguments split on
    /// whitespace, no quoting).
    pub fn parse(command_line: &str) -> Result<ExecProxier, ExecError> {
        let mut words = command_line.split_whitespace().map(str::to_string);
        let program = words
            .next()
            .ok_or_else(|| ExecError::Spec(command_line.to_string()))?;
        let mut proxier = ExecProxier::new(program, words.collect());
        proxier.timeout = timeout_from_env()?;
        Ok(proxier)
    }

    /// Its program is there to run: checked before anything is built (the spec's `build`),
    /// so a mistyped program fails at once.
    pub fn check(&self) -> Result<(), ExecError> {
        if is_executable(&self.program) {
            Ok(())
        } else {
            Err(ExecError::NoProgram(self.program.clone()))
        }
    }

    pub(crate) fn command_line(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the program for one node inside `ns` and parses what it printed.
    pub fn run(&self, ns: &Netns, input: &ProxierInput) -> Result<ExecOutcome, ExecError> {
        let node = input.node.name.clone();
        let command = self.command_line();
        let json = input_text(input).map_err(|source| ExecError::Input {
            node: node.clone(),
            cause: source,
        })?;
        let spawn_err = |message: String| ExecError::Spawn {
            node: node.clone(),
            netns: ns.name().to_string(),
            command: command.clone(),
            message,
        };
        // Confined to its node (crate::drivers::confinement), the node's scratch directory
        // its one writable place, kept across the node's syncs.
        let mut cmd = ns
            .scratch_dir()
            .and_then(|scratch| {
                crate::drivers::confinement::command(
                    ns,
                    scratch,
                    std::path::Path::new(&self.program),
                    &self.args,
                )
            })
            .map_err(|e| spawn_err(format!("{e:#}")))?;
        cmd.env("KPCT_NODE", &node)
            .env("KPCT_NETNS", ns.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, so the timeout (and kpct's exit) reaches every process it
        // starts; dropped — killed — once the program has exited and its output is read.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // `unshare` dies with this thread, which waits for it below, SIGKILL of kpct included;
        // `--kill-child` then ends the PID namespace and everything in it.
        crate::process_groups::die_with_spawning_thread(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| spawn_err(e.to_string()))?;
        let group = crate::process_groups::Group::of_leader(child.id());
        // Pipes are drained on their own threads so a chatty program cannot block on a full
        // pipe while we wait for it to exit.
        let stdin = child.stdin.take();
        let writer = std::thread::spawn(move || {
            if let Some(mut pipe) = stdin {
                // A program that ignores its input may exit before reading it: not an error.
                let _ = pipe.write_all(json.as_bytes());
            }
        });
        let drain = |pipe: Option<Box<dyn Read + Send>>, keep: Keep| {
            std::thread::spawn(move || match pipe {
                Some(p) => drain_bounded(p, keep),
                None => Drained::default(),
            })
        };
        let stdout = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            Keep::Head(STDOUT_LIMIT),
        );
        let stderr = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            Keep::Tail(STDERR_KEPT),
        );
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() > self.timeout => {
                    group.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(spawn_err(format!("waiting for it: {e}"))),
            }
        };
        // What it left running in the background would hold the pipes open: the program's run
        // for this node is over, and so is everything it started.
        group.kill();
        let _ = writer.join();
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default().text.trim().to_string();
        let Some(status) = status else {
            return Err(ExecError::Timeout {
                node,
                command,
                timeout: self.timeout,
                stderr,
            });
        };
        if !status.success() {
            return Err(ExecError::Failed {
                node,
                command,
                status: status.to_string(),
                stderr,
            });
        }
        if stdout.cut {
            return Err(ExecError::TooMuchOutput {
                node,
                command,
                limit: STDOUT_LIMIT,
            });
        }
        let stdout = stdout.text;
        if stdout.trim().is_empty() {
            return Ok(ExecOutcome::SelfProgrammed);
        }
        let origin = format!("{} (stdout for node {node})", self.program);
        parse_text_with_sources(&stdout, &origin)
            .map(|p| ExecOutcome::Printed(Box::new(p)))
            .map_err(|source| ExecError::Output {
                node,
                command,
                cause: source,
            })
    }

    /// Runs the program for one node, applies what it printed (if anything) and reads the
    /// namespace back.
    pub fn sync_node(
        &self,
        ns: &Netns,
        input: &ProxierInput,
        applier: &Applier,
    ) -> Result<NodeSync, ExecError> {
        let node = input.node.name.clone();
        let outcome = self.run(ns, input)?;
        let (applied, read_opts) = match &outcome {
            ExecOutcome::Printed(parsed) => {
                let report =
                    applier.apply(ns, &node, &parsed.programming, Some(&parsed.sources))?;
                (
                    Some(report),
                    ReadOptions::for_programming(&parsed.programming),
                )
            }
            ExecOutcome::SelfProgrammed => (None, ReadOptions::default()),
        };
        let read_opts = ReadOptions {
            backend: applier.options.backend,
            ..read_opts
        };
        let effective = effective_state(ns, &read_opts).map_err(|source| ExecError::Read {
            node: node.clone(),
            cause: Box::new(source),
        })?;
        let missing = match &outcome {
            ExecOutcome::Printed(parsed) => effective.diff_against(&parsed.programming),
            ExecOutcome::SelfProgrammed => Vec::new(),
        };
        Ok(NodeSync {
            outcome,
            applied,
            effective,
            missing,
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_timeout_setting_takes_whole_seconds() {
        assert_eq!(timeout_setting(None).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(
            timeout_setting(Some("7".into())).unwrap(),
            Duration::from_secs(7)
        );
        for bad in ["0", "soon", "1.5", ""] {
            assert_eq!(
                timeout_setting(Some(bad.into())).unwrap_err().to_string(),
                format!("KPCT_EXEC_TIMEOUT_S=`{bad}`: expected whole seconds, at least 1")
            );
        }
    }

    use super::*;

    #[test]
    fn documented_example_is_a_valid_input() {
        let doc = include_str!("exec-schema.md");
        let start = doc
            .find("```json\n")
            .expect("the schema has a JSON example")
            + "```json\n".len();
        let example = &doc[start..start + doc[start..].find("```").expect("closed")];
        let input: ProxierInput =
            serde_json::from_str(example).expect("the documented example parses");
        assert_eq!(input.version, SCHEMA_VERSION);
        // And it is exactly what the harness would send (field names and order).
        let again = serde_json::to_string_pretty(&input).unwrap();
        assert_eq!(again.trim(), example.trim());
    }

    #[test]
    fn parses_specs() {
        let p = ExecProxier::parse("sh --flag 1").unwrap();
        assert_eq!(p.program, "sh");
        assert_eq!(p.args, ["--flag", "1"]);
        assert!(ExecProxier::parse("/bin/sh").unwrap().check().is_ok());
        assert!(ExecProxier::parse("").is_err());
        // A missing program is refused by name before anything is built.
        for missing in [
            "./no-such-proxier.sh",
            "no-such-proxier-in-path",
            "/etc/passwd",
        ] {
            assert_eq!(
                ExecProxier::parse(&format!("{missing} --x"))
                    .unwrap()
                    .check()
                    .unwrap_err()
                    .to_string(),
                format!(
                    "exec proxier `{missing}`: no such executable file (a path, or a program in PATH)"
                )
            );
        }
    }
}
