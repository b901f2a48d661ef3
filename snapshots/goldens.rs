//! The goldens' folder itself. Every `<scenario>@<proxier>.snap` here belongs to a scenario file in
//! `scenarios/` and a built-in proxier, and every other snapshot names a test file that still
//! exists: a renamed or deleted scenario cannot leave behind a golden that nothing checks.
//!
//! This file is also why `cargo insta review` finds the pending snapshots here: cargo-insta looks
//! in each target's source folder (see `[[test]] goldens` in harness/Cargo.toml).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness sits in the repository")
        .to_path_buf()
}

fn scenario_names(repo: &Path) -> BTreeSet<String> {
    // A scenario is named after its file (scenario/conventions.rs refuses any other name).
    std::fs::read_dir(repo.join("scenarios"))
        .expect("scenarios/ is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            p.file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// What is wrong with the snapshot file `name` whose text is `text`, if anything.
fn problem(repo: &Path, scenarios: &BTreeSet<String>, name: &str, text: &str) -> Option<String> {
    let source = text
        .strip_prefix("---\n")
        .and_then(|header| header.lines().find_map(|l| l.strip_prefix("source: ")));
    let Some(source) = source else {
        return Some("has no insta header naming its source".into());
    };
    if !repo.join(source).is_file() {
        return Some(format!("names the source {source}, which does not exist"));
    }
    if source != "harness/tests/scenarios.rs" {
        return None;
    }
    let stem = name.strip_suffix(".snap")?;
    // A scenario's name has no `@`; a built-in at an older release has one of its own
    // (`<scenario>@kube-proxy-iptables@v1.35.snap`).
    let Some((scenario, proxier)) = stem.split_once('@') else {
        return Some("is not named <scenario>@<proxier>.snap".into());
    };
    if !scenarios.contains(scenario) {
        return Some(format!(
            "belongs to scenarios/{scenario}.yaml, which does not exist"
        ));
    }
    if kpct::proxier::builtin(proxier).is_none() {
        return Some(format!(
            "belongs to {proxier}, which is not a built-in proxier"
        ));
    }
    None
}

#[test]
fn every_golden_belongs_to_a_scenario_and_a_builtin() {
    let repo = repo();
    let scenarios = scenario_names(&repo);
    let mut goldens = 0;
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(repo.join("snapshots")).expect("snapshots/ is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        if !name.ends_with(".snap") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a snapshot is text");
        goldens += 1;
        if let Some(p) = problem(&repo, &scenarios, &name, &text) {
            problems.push(format!("snapshots/{name} {p}"));
        }
    }
    assert!(
        goldens > 300,
        "only {goldens} snapshots: is this the goldens' folder?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_orphaned_golden_is_named() {
    let repo = repo();
    let scenarios = scenario_names(&repo);
    let header = |source: &str| format!("---\nsource: {source}\ndescription: x\n---\nbody\n");
    let scenario_test = header("harness/tests/scenarios.rs");
    assert_eq!(
        problem(
            &repo,
            &scenarios,
            "clusterip-udp@kube-proxy-ipvs.snap",
            &scenario_test
        ),
        None
    );
    assert_eq!(
        problem(
            &repo,
            &scenarios,
            "gone@kube-proxy-ipvs.snap",
            &scenario_test
        )
        .as_deref(),
        Some("belongs to scenarios/gone.yaml, which does not exist")
    );
    assert_eq!(
        problem(
            &repo,
            &scenarios,
            "clusterip-udp@kube-router.snap",
            &scenario_test
        )
        .as_deref(),
        Some("belongs to kube-router, which is not a built-in proxier")
    );
    assert_eq!(
        problem(
            &repo,
            &scenarios,
            "x.snap",
            &header("harness/tests/gone.rs")
        )
        .as_deref(),
        Some("names the source harness/tests/gone.rs, which does not exist")
    );
    assert_eq!(
        problem(&repo, &scenarios, "x.snap", "no header").as_deref(),
        Some("has no insta header naming its source")
    );
}
