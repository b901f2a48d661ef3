//! The programming a real kube-proxy leaves on each node against what the built-in of its mode
//! writes, after the first sync and after every step (`programming_diff`): every difference
//! must be one the known-differences table declares, with its reason and source, and every
//! entry of the table that applies to the version must show in these scenarios (an entry
//! nothing needs any more is dead and hides nothing, but says something false).
//!
//! The scenarios are chosen so that together they show every applying entry: a ClusterIP
//! across nodes, localhost NodePorts, the steps of a scale-down and up, an IPv6-only and a
//! dual-stack cluster. `kpct diff-programming` runs the same comparison over any scenarios
//! (the whole library: no undeclared difference for either version or mode).

use kpct::programming_diff::{self, Declared, RealKey};
use kpct::NodeProgrammer;
use std::path::PathBuf;

const SCENARIOS: [&str; 5] = [
    "clusterip-cross-node",
    "nodeport-localhost",
    "transition-scale-down-up",
    "ipv6-only-clusterip-cross-node",
    "dual-stack-clusterip",
];

fn compare(spec: &str) {
    kpct::netns::install_signal_cleanup();
    let real = kpct::ProxierSpec::parse_as::<kpct::drivers::RealProxier>(spec)
        .unwrap_or_else(|e| panic!("{e:#} (ci/install-deps.sh runs ci/real-proxiers.sh)"));
    let key = RealKey::of(&real).expect("the binary answers --version");
    let builtin = kpct::builtin(&real.expectations_of()).expect("a built-in of the mode");
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let mut all = Declared::default();
    for name in SCENARIOS {
        let path = PathBuf::from("../scenarios").join(format!("{name}.yaml"));
        let scenario = kpct::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let differences = rt
            .block_on(programming_diff::diff_programming(
                &scenario, &real, &builtin,
            ))
            .unwrap_or_else(|e| panic!("{name} under {spec}: {e:#}"));
        let sorted = Declared::sort(key, differences);
        all.declared.extend(sorted.declared);
        all.undeclared.extend(sorted.undeclared);
    }
    let builtin_label = builtin.label();
    assert!(
        all.undeclared.is_empty(),
        "{} difference(s) of {key} with {builtin_label} no known difference declares \
         (harness/src/programming_diff/known.rs):\n{}",
        all.undeclared.len(),
        all.undeclared
            .iter()
            .take(40)
            .map(|d| d.describe(spec, &builtin_label))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let unseen = all.unseen(key);
    assert!(
        unseen.is_empty(),
        "known differences of {key} that none of {SCENARIOS:?} shows:\n{}",
        unseen
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn v1_37_2_iptables() {
    compare("kube-proxy:iptables:v1.37.2");
}

#[test]
fn v1_37_2_nftables() {
    compare("kube-proxy:nftables:v1.37.2");
}

#[test]
#[ignore = "not in ci/real-proxiers.sh's CI set: --all builds it"]
fn v1_34_4_iptables() {
    compare("kube-proxy:iptables:v1.34.4");
}

#[test]
#[ignore = "not in ci/real-proxiers.sh's CI set: --all builds it"]
fn v1_34_4_nftables() {
    compare("kube-proxy:nftables:v1.34.4");
}

/// The comparison catches what the table does not excuse: kube-proxy told to mark with
/// another masquerade bit than the scenario's writes other marks than the built-in, and every
/// such rule is an undeclared difference.
#[test]
fn another_masquerade_bit_is_an_undeclared_difference() {
    kpct::netns::install_signal_cleanup();
    let dir = std::env::temp_dir().join(format!("kpct-test-{}-masq-bit", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let patch = dir.join("patch.json");
    std::fs::write(&patch, r#"{"iptables": {"masqueradeBit": 10}}"#).expect("writing the patch");
    let spec = format!(
        "kube-proxy:iptables:v1.37.2 --config-patch={}",
        patch.display()
    );
    let real = kpct::ProxierSpec::parse_as::<kpct::drivers::RealProxier>(&spec)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let key = RealKey::of(&real).expect("the binary answers --version");
    let builtin = kpct::builtin("kube-proxy-iptables").expect("the built-in");
    let scenario = kpct::load(&PathBuf::from("../scenarios/clusterip-cross-node.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let differences = tokio::runtime::Runtime::new()
        .expect("a tokio runtime")
        .block_on(programming_diff::diff_programming(
            &scenario, &real, &builtin,
        ))
        .expect("compared");
    let _ = std::fs::remove_dir_all(&dir);
    let sorted = Declared::sort(key, differences);
    let undeclared: Vec<String> = sorted
        .undeclared
        .iter()
        .map(|d| d.describe(&spec, "kube-proxy-iptables"))
        .collect();
    assert!(
        undeclared.iter().any(|d| d.contains("0x400/0x400"))
            && undeclared.iter().any(|d| d.contains("0x4000/0x4000")),
        "the other mark is undeclared on both sides: {undeclared:#?}"
    );
}
