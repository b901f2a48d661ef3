//! The runs of a `kpct run` this kernel cannot hold (no IP_VS, no SCTP), handed to a kpct child
//! in a VM while the rest run here at the same time; what the child gives back
//! ([`crate::report::wire`]) joins this run's results, so one table, report, JUnit file and exit
//! status cover both. The VM comes from `KPCT_VM_RUNNER` (`ci/kpct.sh` sets it to `ci/vm.sh`):
//! a program run as `RUNNER --rwdir DIR -- COMMAND ARGS…` that runs the command in a VM whose
//! kernel has what the runs need, with DIR writable there. Without it those runs are reported
//! as not run here.

use crate::operations::parallel::Job;
use crate::report::wire::Returned;
use anyhow::{Context, Result};
use std::collections::VecDeque;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread::JoinHandle;

pub const RUNNER_ENV: &str = "KPCT_VM_RUNNER";

/// The VM runner, when one is configured.
pub fn runner() -> Option<PathBuf> {
    std::env::var_os(RUNNER_ENV)
        .filter(|r| !r.is_empty())
        .map(PathBuf::from)
}

/// What the child is asked to run, besides its runs.
pub struct Selection<'a> {
    /// Every `--proxier` as given (`NAME=SPEC` kept, so labels match).
    pub proxiers: &'a [String],
    pub probes: &'a [String],
    pub wait_out_drops: bool,
    pub jobs: Option<usize>,
    pub fail_fast: bool,
}

/// A child running in the VM.
pub struct Share {
    child: Child,
    /// Forwards the child's output to stderr, keeping its last lines for an error.
    output: JoinHandle<VecDeque<String>>,
    dir: PathBuf,
    runs: usize,
}

/// Lines of the child's output kept for the error when it gives nothing back.
const TAIL: usize = 15;

/// Starts the child for `jobs`, whose scenarios come from `files`.
pub fn start(
    runner: &Path,
    jobs: &[&Job<'_>],
    files: &std::collections::BTreeMap<String, PathBuf>,
    selection: &Selection<'_>,
) -> Result<Share> {
    let dir = std::env::temp_dir().join(format!(
        "{}vm-share",
        crate::netns::naming::RunPrefix::next().as_str()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the kpct binary for the VM")?;
    let mut command = Command::new(runner);
    command
        .arg("--rwdir")
        .arg(&dir)
        .arg("--")
        .arg(exe)
        .arg("run")
        .arg("--wire")
        .arg(dir.join("results.json"));
    for p in selection.proxiers {
        command.args(["--proxier", p]);
    }
    let mut scenarios: Vec<&str> = Vec::new();
    for job in jobs {
        let name = job.scenario.name.as_str();
        if !scenarios.contains(&name) {
            scenarios.push(name);
            let file = files
                .get(name)
                .with_context(|| format!("no file is known for scenario {name}"))?;
            let file = std::path::absolute(file)
                .with_context(|| format!("resolving {}", file.display()))?;
            command.arg("--scenario").arg(file);
        }
        command
            .arg("--only-run")
            .arg(format!("{}={}", job.scenario.name, job.proxier.label()));
    }
    for p in selection.probes {
        command.args(["--probe", p]);
    }
    if selection.wait_out_drops {
        command.arg("--wait-out-drops");
    }
    if selection.fail_fast {
        command.arg("--fail-fast");
    }
    if let Some(n) = selection.jobs {
        command.args(["-j", &n.to_string()]);
    }
    let (reader, writer) = std::io::pipe().context("a pipe for the VM's output")?;
    command
        .stdin(std::process::Stdio::null())
        .stdout(writer.try_clone().context("a pipe for the VM's output")?)
        .stderr(writer);
    // The VM goes with this process, even when it is SIGKILLed: the runner (ci/vm.sh) ends the
    // VM on SIGTERM.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .with_context(|| format!("starting the VM runner {}", runner.display()))?;
    // The write ends must close here, or the reader never sees the end of the output.
    drop(command);
    let output = std::thread::spawn(move || {
        let mut tail = VecDeque::new();
        for line in std::io::BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            eprintln!("  vm │ {line}");
            if tail.len() == TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        tail
    });
    Ok(Share {
        child,
        output,
        dir,
        runs: jobs.len(),
    })
}

impl Share {
    /// How many runs it holds.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Waits for the child and reads what it gave back; the error says why nothing came
    /// back, for each of its runs.
    pub fn finish(mut self) -> std::result::Result<Returned, String> {
        let status = self.child.wait();
        let tail = self.output.join().unwrap_or_default();
        let file = self.dir.join("results.json");
        let text = std::fs::read_to_string(&file);
        let _ = std::fs::remove_dir_all(&self.dir);
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("not known ({e})"),
        };
        let tail: Vec<String> = tail.into_iter().collect();
        match text {
            Ok(text) => crate::report::wire::read(&text).map_err(|e| {
                format!("the VM run (runner {status}) gave back results kpct cannot read: {e:#}")
            }),
            Err(e) => Err(format!(
                "the VM run gave no results ({}: {e}; the runner {status}); its last output:\n{}",
                file.display(),
                tail.join("\n")
            )),
        }
    }
}
