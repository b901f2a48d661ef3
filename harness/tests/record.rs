//! `kpct record` as a user runs it (needs root: it runs the scenario).

mod common;

use std::process::Output;

fn kpct_record(args: &[&str]) -> Output {
    common::kpct(&[&["record"], args].concat())
}

/// A scenario whose golden already says what it observes records nothing; a new one gets a
/// pending snapshot in insta's format, with the observation the scenario test would record, in
/// the top-level snapshots/ where `cargo insta review` finds it.
#[test]
fn records_pending_snapshots_only_for_what_changed() {
    let same = kpct_record(&[
        "--proxier",
        "kube-proxy-iptables",
        "scenarios/clusterip-udp.yaml",
    ]);
    assert!(same.status.success(), "{same:?}");
    assert!(
        String::from_utf8_lossy(&same.stdout)
            .starts_with("clusterip-udp × kube-proxy-iptables: unchanged"),
        "{same:?}"
    );

    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let name = format!("record-check-{}", std::process::id());
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(repo.join("scenarios/clusterip-udp.yaml")).unwrap();
    std::fs::write(
        &file,
        text.replace("name: clusterip-udp", &format!("name: {name}")),
    )
    .unwrap();
    let new = kpct_record(&["--proxier", "kube-proxy-iptables", file.to_str().unwrap()]);
    let pending = repo.join(format!("snapshots/{name}@kube-proxy-iptables.snap.new"));
    let written = std::fs::read_to_string(&pending);
    // What `cargo insta review` walks through: the pending snapshot in the top-level snapshots/.
    let listed = std::process::Command::new("cargo")
        .args(["insta", "pending-snapshots"])
        .current_dir(repo)
        .output();
    let _ = std::fs::remove_file(&pending);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(new.status.success(), "{new:?}");
    let written = written.expect("a pending snapshot");
    let listed = listed.expect("cargo runs (cargo-insta comes from ci/install-deps.sh)");
    assert!(
        String::from_utf8_lossy(&listed.stdout)
            .contains(&format!("snapshots/{name}@kube-proxy-iptables.snap")),
        "`cargo insta pending-snapshots` did not list the recorded snapshot: {listed:?}"
    );
    let golden =
        std::fs::read_to_string(repo.join("snapshots/clusterip-udp@kube-proxy-iptables.snap"))
            .unwrap();
    let observation = |s: &str| s.split_once("\n---\n").map(|(_, b)| b.to_string()).unwrap();
    assert_eq!(
        observation(&written),
        observation(&golden).replace("scenario: clusterip-udp", &format!("scenario: {name}"))
    );
    assert!(
        written.starts_with(&format!(
            "---\nsource: harness/tests/scenarios.rs\ndescription: scenarios/{name}.yaml against kube-proxy-iptables\n---\n"
        )),
        "{written}"
    );
}

#[test]
fn a_broken_file_records_nothing() {
    let out = kpct_record(&[
        "--proxier",
        "kube-proxy-iptables",
        "harness/tests/fixtures/bad/unknown-node.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("unknown node `node-c`"),
        "{out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing recorded"),
        "{out:?}"
    );
}
