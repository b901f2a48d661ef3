//! The real proxiers `ci/real-proxiers.sh` builds (kube-proxy, kube-router; one per directory of
//! `ci/real-proxiers/`): those of its CI set are in `target/real-proxiers/`, and every one built
//! is up to date with its module files and answers `--version` with the version its name
//! carries.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const BUILD: &str =
    "sudo ci/real-proxiers.sh (or sudo ci/install-deps.sh; needs Go and the Go module proxy)";

/// What `ci/real-proxiers.sh` builds without arguments (its `ci_set`), which the `real_*` tests
/// run.
const CI_SET: [&str; 1] = ["kube-proxy-v1.37.2"];

/// Each directory of ci/real-proxiers/ and the binary built from it: `v1.37.2` is kube-proxy's
/// (`kube-proxy-v1.37.2`), `kube-router-v2.10.0` names its program.
fn binaries() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(repo().join("ci/real-proxiers")).expect("ci/real-proxiers/") {
        let path = entry.expect("a directory entry").path();
        if !path.join("go.mod").is_file() {
            continue;
        }
        let dir = path.file_name().unwrap().to_string_lossy().into_owned();
        let binary = if dir.starts_with('v') {
            format!("kube-proxy-{dir}")
        } else {
            dir.clone()
        };
        out.push((dir, binary));
    }
    out.sort();
    out
}

#[test]
fn real_proxiers_are_built_up_to_date_and_answer_their_version() {
    let binaries = binaries();
    assert!(
        binaries.iter().any(|(_, b)| b.starts_with("kube-proxy-v")),
        "ci/real-proxiers/ keeps no kube-proxy version: {binaries:?}"
    );
    let dir = repo().join("target/real-proxiers");
    for wanted in CI_SET {
        assert!(
            binaries.iter().any(|(_, b)| b == wanted),
            "the CI set's {wanted} has no directory in ci/real-proxiers/"
        );
    }
    let missing: Vec<String> = CI_SET
        .iter()
        .filter(|b| !dir.join(b).is_file())
        .map(|b| format!("target/real-proxiers/{b}"))
        .collect();
    assert!(
        missing.is_empty(),
        "real proxier binaries missing: {}\nbuild them with `{BUILD}`",
        missing.join(", ")
    );

    // The CI set, and whatever else was built (`--all` builds it).
    let built: Vec<&(String, String)> = binaries
        .iter()
        .filter(|(_, b)| dir.join(b).is_file())
        .collect();
    let check = Command::new("bash")
        .arg(repo().join("ci/real-proxiers.sh"))
        .arg("--check-only")
        .args(built.iter().map(|(d, _)| d))
        .output()
        .expect("bash runs ci/real-proxiers.sh");
    assert!(
        check.status.success(),
        "`ci/real-proxiers.sh --check-only` failed: rebuild with `{BUILD}`\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    for (_, binary) in built {
        let version = binary.rsplit('-').next().expect("a version in the name");
        let path = dir.join(binary);
        let out = Command::new(&path)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("running {} --version: {e}", path.display()));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // A word of its own: kube-router also echoes its path, which holds the version.
        let names_it = said
            .split_whitespace()
            .any(|w| w.trim_end_matches([',', ';', ')']) == version);
        assert!(
            out.status.success() && names_it,
            "target/real-proxiers/{binary} --version ({}) said {said:?}, not {version}: rebuild with `{BUILD}`",
            out.status
        );
    }
}
