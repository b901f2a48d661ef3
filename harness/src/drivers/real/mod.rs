//! Real proxiers: the unmodified binary, one process per node, confined to it
//! ([`process`]), watching a Kubernetes API server kpct serves from the scenario
//! ([`apiserver`]), synced when its metrics say so ([`sync`]).
//!
//! `kube-proxy:MODE[:PATH|:VERSION]` runs kube-proxy in `iptables`, `ipvs` or `nftables`
//! mode, configured from the scenario ([`config`]); a VERSION (`v1.37.2`) names a binary
//! `ci/real-proxiers.sh` built into `target/real-proxiers/`, and without one the newest built
//! there is taken. It is judged by the expectations written for the built-in of its mode.

pub mod api;
pub mod config;
mod counter;
mod metrics;
pub mod process;
mod programmer;
mod publisher;
pub(crate) mod session;
mod sync;

pub use api::ApiProxier;
pub use config::Mode;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a real proxier may take to start and sync, or to sync an update, unless
/// configured otherwise ([`TIMEOUT_VARIABLE`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the sync timeout is configured: whole seconds, at least 1.
pub const TIMEOUT_VARIABLE: &str = "KPCT_REAL_TIMEOUT_S";

/// Where `ci/real-proxiers.sh` puts the binaries it builds, under the repository root.
pub const BUILT_DIR: &str = "target/real-proxiers";

/// A real kube-proxy binary in one mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealProxier {
    /// The spec as the user wrote it: the label in every output.
    spec: String,
    pub mode: Mode,
    /// The release of the binary, when it says (see [`RealProxier::judged_as`]).
    pub release: Option<crate::proxier::Release>,
    pub binary: PathBuf,
    pub timeout: Duration,
    /// A JSON merge patch (RFC 7386) over the configuration kpct writes
    /// (`--config-patch=FILE`): a setting kpct does not derive from the scenario, or a
    /// deliberately wrong one.
    pub config_patch: Option<serde_json::Value>,
}

/// `kube-proxy:MODE[:PATH|:VERSION] [--config-patch=FILE]` as written: which binary and patch
/// file are only looked up when it is resolved ([`RealSpec::resolve`]), before a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealSpec {
    spec: String,
    pub mode: Mode,
    /// The binary's path, its version, or empty (the newest built).
    binary: String,
    config_patch: Option<PathBuf>,
}

impl RealSpec {
    /// Parses the `MODE[:PATH|:VERSION] [--config-patch=FILE]` of `kube-proxy:…`; `spec` is the
    /// whole spec, its label.
    pub fn parse(spec: &str, rest: &str) -> Result<RealSpec> {
        let usage = "expected `kube-proxy:MODE[:PATH|:VERSION] [--config-patch=FILE]`, MODE one \
                     of iptables, ipvs, nftables (e.g. kube-proxy:nftables:v1.37.2)";
        let mut words = rest.split_whitespace();
        let rest = words
            .next()
            .with_context(|| format!("proxier `{spec}`: {usage}"))?;
        let mut config_patch = None;
        for word in words {
            let file = word
                .strip_prefix("--config-patch=")
                .with_context(|| format!("proxier `{spec}`: unknown argument `{word}`; {usage}"))?;
            config_patch = Some(PathBuf::from(file));
        }
        let (mode, binary) = rest.split_once(':').unwrap_or((rest, ""));
        let mode = Mode::parse(mode)
            .with_context(|| format!("proxier `{spec}`: unknown mode `{mode}`; {usage}"))?;
        Ok(RealSpec {
            spec: spec.to_string(),
            mode,
            binary: binary.to_string(),
            config_patch,
        })
    }

    /// The proxier: its binary found (a path, a version built into [`BUILT_DIR`], or the
    /// newest built there), its configuration patch read.
    pub fn resolve(&self) -> Result<RealProxier> {
        let spec = &self.spec;
        let config_patch =
            match &self.config_patch {
                None => None,
                Some(file) => {
                    let text = std::fs::read_to_string(file)
                        .with_context(|| format!("proxier `{spec}`: reading {}", file.display()))?;
                    Some(serde_json::from_str(&text).with_context(|| {
                        format!("proxier `{spec}`: {} is not JSON", file.display())
                    })?)
                }
            };
        let binary = resolve_binary(&self.binary).with_context(|| format!("proxier `{spec}`"))?;
        let release = release_of(&binary);
        Ok(RealProxier {
            spec: spec.clone(),
            mode: self.mode,
            release,
            binary,
            timeout: timeout_from_env()?,
            config_patch,
        })
    }
}

impl RealProxier {
    /// The name whose expectations judge it: the built-in of its mode, at its release when
    /// known (`kube-proxy-iptables@v1.34`; a scenario's `expectFor` falls back to the mode's
    /// built-in, then to `expect`).
    pub fn judged_as(&self) -> String {
        let builtin = self.mode.builtin();
        match self.release {
            Some(r) => crate::release::builtin_label(builtin, r),
            None => builtin.to_string(),
        }
    }
}

/// The kube-proxy release of `binary`, from the name `ci/real-proxiers.sh` gives its builds
/// (`kube-proxy-v1.34.4`); `None` for another name (judged as the mode's built-in at the
/// newest release). Nothing is run to ask it: the binary is untrusted, and runs only confined
/// to a node.
fn release_of(binary: &Path) -> Option<crate::proxier::Release> {
    let name = binary.file_name()?.to_string_lossy().into_owned();
    crate::proxier::Release::of_version_text(&name)
}

/// What a kube-proxy binary says of itself (`--version`: `Kubernetes v1.37.2`), within a few
/// seconds: any program may stand in for kube-proxy, and one that does not answer (a test's
/// stand-in that only sleeps) is killed and has said nothing.
pub fn version_text(binary: &Path) -> Result<String> {
    use std::io::Read;
    let mut child = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("running {} --version", binary.display()))?;
    // Its whole output, read on a thread: it ends when the program does.
    let mut out = child.stdout.take().context("the child's stdout")?;
    let (sender, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = String::new();
        let _ = sender.send(out.read_to_string(&mut said).map(|_| said));
    });
    let said = answer.recv_timeout(VERSION_TIMEOUT);
    if said.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    match said {
        Ok(said) => Ok(said?),
        Err(_) => bail!(
            "{} --version did not answer within {} s",
            binary.display(),
            VERSION_TIMEOUT.as_secs()
        ),
    }
}

/// How long `--version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// The binary a spec's third part names: a path (with a `/`), a version built into
/// [`BUILT_DIR`], or nothing (the newest built there).
fn resolve_binary(part: &str) -> Result<PathBuf> {
    if part.contains('/') {
        let path = PathBuf::from(part);
        if !is_executable(&path) {
            bail!("{} is not an executable file", path.display());
        }
        return Ok(path);
    }
    let dir = built_dir()?;
    let built = built_versions(&dir);
    let pick = if part.is_empty() {
        built.last().cloned()
    } else {
        built.iter().find(|(v, _)| v == part).cloned()
    };
    match pick {
        Some((_, path)) => Ok(path),
        None => bail!(
            "no kube-proxy{} built in {} (built: {}); `ci/real-proxiers.sh` builds them, or \
             give the binary's path",
            if part.is_empty() {
                String::new()
            } else {
                format!(" {part}")
            },
            dir.display(),
            if built.is_empty() {
                "none".to_string()
            } else {
                built
                    .iter()
                    .map(|(v, _)| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    }
}

/// [`BUILT_DIR`] under the repository this kpct belongs to (`crate::repository`).
fn built_dir() -> Result<PathBuf> {
    Ok(crate::repository::root_or_built().join(BUILT_DIR))
}

/// The kube-proxy binaries in `dir`, by version, oldest first.
fn built_versions(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(Vec<u64>, String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix("kube-proxy-")?.to_string();
            let numbers = version
                .trim_start_matches('v')
                .split('.')
                .map(|p| p.parse::<u64>().ok())
                .collect::<Option<Vec<_>>>()?;
            is_executable(&e.path()).then(|| (numbers, version, e.path()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, v, p)| (v, p)).collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn timeout_from_env() -> Result<Duration> {
    match std::env::var(TIMEOUT_VARIABLE) {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(s) if s >= 1 => Ok(Duration::from_secs(s)),
            _ => bail!("{TIMEOUT_VARIABLE}=`{v}`: expected whole seconds, at least 1"),
        },
    }
}
