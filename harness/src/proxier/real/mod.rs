//! Real proxiers: the unmodified binary, one process per node, confined to it
//! ([`process`]), watching a Kubernetes API server kpct serves from the scenario
//! ([`crate::apiserver`]), synced when its metrics say so ([`sync`]).
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
    pub binary: PathBuf,
    pub timeout: Duration,
    /// A JSON merge patch (RFC 7386) over the configuration kpct writes
    /// (`--config-patch=FILE`): a setting kpct does not derive from the scenario, or a
    /// deliberately wrong one.
    pub config_patch: Option<serde_json::Value>,
}

impl RealProxier {
    /// Parses `kube-proxy:MODE[:PATH|:VERSION] [--config-patch=FILE]`.
    pub fn from_spec(spec: &str) -> Result<RealProxier> {
        let usage = "expected `kube-proxy:MODE[:PATH|:VERSION] [--config-patch=FILE]`, MODE one \
                     of iptables, ipvs, nftables (e.g. kube-proxy:nftables:v1.37.2)";
        let mut words = spec.split_whitespace();
        let rest = words
            .next()
            .and_then(|w| w.strip_prefix("kube-proxy:"))
            .with_context(|| format!("proxier `{spec}`: {usage}"))?;
        let mut config_patch = None;
        for word in words {
            let file = word
                .strip_prefix("--config-patch=")
                .with_context(|| format!("proxier `{spec}`: unknown argument `{word}`; {usage}"))?;
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("proxier `{spec}`: reading {file}"))?;
            config_patch = Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("proxier `{spec}`: {file} is not JSON"))?,
            );
        }
        let (mode, binary) = rest.split_once(':').unwrap_or((rest, ""));
        let mode = Mode::parse(mode)
            .with_context(|| format!("proxier `{spec}`: unknown mode `{mode}`; {usage}"))?;
        let binary = resolve_binary(binary).with_context(|| format!("proxier `{spec}`"))?;
        Ok(RealProxier {
            spec: spec.to_string(),
            mode,
            binary,
            timeout: timeout_from_env()?,
            config_patch,
        })
    }

    /// Whether `spec` names a real proxier.
    pub fn is_spec(spec: &str) -> bool {
        spec.starts_with("kube-proxy:")
    }
}

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

/// [`BUILT_DIR`] under the repository this kpct was built from.
fn built_dir() -> Result<PathBuf> {
    // The harness crate is one level below the repository root.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("finding the repository root")?;
    Ok(root.join(BUILT_DIR))
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
