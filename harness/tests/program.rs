//! `kpct program` as a user runs it: no root and no kernel state needed, but for an `exec:`
//! proxier, which runs on nodes built for it.

mod common;

use kpct::programming::text::parse_text;
use kpct::proxier::{builtin, Proxier};
use std::process::Output;

fn kpct(args: &[&str]) -> Output {
    common::kpct(&[&["program"], args].concat())
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const SCENARIO: &str = "scenarios/clusterip-udp.yaml";

#[test]
fn prints_what_the_proxier_programs_in_the_text_format() {
    let out = kpct(&[SCENARIO, "--node", "node-a"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let body = text
        .strip_prefix("# node node-a: kube-proxy-iptables\n")
        .unwrap_or_else(|| panic!("{text}"));
    let s = kpct::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/clusterip-udp.yaml"
    )))
    .unwrap();
    let ctx = kpct::scenario::node_context(&s, "node-a").unwrap();
    let expected = builtin("kube-proxy-iptables")
        .unwrap()
        .program(&kpct::scenario::cluster_state(&s), &ctx)
        .unwrap();
    assert_eq!(parse_text(body, "stdout").unwrap(), expected);
}

#[test]
fn tool_views_and_every_node() {
    let out = kpct(&[
        SCENARIO,
        "--proxier",
        "kube-proxy-ipvs",
        "--view",
        "ipvsadm",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "# node node-a: kube-proxy-ipvs\n-A -u 10.96.0.53:53 -s rr\n-a -u 10.96.0.53:53 -r 10.244.2.53:5353 -m -w 1\n\
         # node node-b: kube-proxy-ipvs\n-A -u 10.96.0.53:53 -s rr\n-a -u 10.96.0.53:53 -r 10.244.2.53:5353 -m -w 1\n"
    );
    let save = stdout(&kpct(&[
        SCENARIO,
        "--node",
        "node-b",
        "--view",
        "iptables-save",
    ]));
    assert!(
        save.contains("\n*nat\n") && save.ends_with("COMMIT\n"),
        "{save}"
    );
    assert!(!save.contains("*sysctl"), "{save}");
}

#[test]
fn diff_compares_two_proxiers_rule_by_rule() {
    let same = kpct(&[SCENARIO, "--diff", "kube-proxy-iptables"]);
    assert!(same.status.success(), "{same:?}");
    assert_eq!(stdout(&same), "");
    let other = kpct(&[
        SCENARIO,
        "--node",
        "node-a",
        "--view",
        "iptables-save",
        "--diff",
        "kube-proxy-ipvs",
    ]);
    assert_eq!(other.status.code(), Some(1), "{other:?}");
    let diff = stdout(&other);
    assert!(
        diff.starts_with("--- kube-proxy-iptables node-a\n+++ kube-proxy-ipvs node-a\n"),
        "{diff}"
    );
    assert!(
        diff.contains("\n+-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN\n"),
        "{diff}"
    );
}

#[test]
fn replays_and_bad_input() {
    let replay = kpct(&[
        SCENARIO,
        "--proxier",
        "replay:harness/tests/fixtures/replay",
        "--node",
        "node-a",
        "--view",
        "ipset",
    ]);
    assert!(replay.status.success(), "{replay:?}");
    assert!(stdout(&replay).contains("create "), "{replay:?}");
    let unknown = kpct(&[SCENARIO, "--node", "node-z"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("no node `node-z` in scenario clusterip-udp (nodes: node-a, node-b)"),
        "{unknown:?}"
    );
    let exec = kpct(&[SCENARIO, "--proxier", "exec:./x.sh"]);
    assert_eq!(exec.status.code(), Some(2), "{exec:?}");
    assert!(
        String::from_utf8_lossy(&exec.stderr)
            .contains("exec proxier `./x.sh`: no such executable file"),
        "{exec:?}"
    );
}

/// An `exec:` proxier's programming is what it leaves on the scenario's nodes after its first
/// sync, read back with the real tools: the same every time (the kernel's random ipset initval
/// and the hash order it draws taken out), comparable with a built-in's, and nothing left
/// behind. Needs root (namespaces), unlike the rest of this file.
#[test]
fn an_exec_proxiers_programming_is_read_back_from_its_nodes() {
    let exec = "exec:python3 harness/tests/fixtures/exec/minimal_proxier.py print";
    let scenario = "scenarios/clusterip-cross-node.yaml";
    let leftovers = || {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("kpct-"))
            .count()
    };
    let before = leftovers();
    let text = kpct(&[scenario, "--proxier", exec]);
    assert!(text.status.success(), "{text:?}");
    let text = stdout(&text);
    assert!(
        text.starts_with(&format!("# node node-a: {exec}\n")),
        "{text}"
    );
    // The fixture's own chain, its DNAT to both endpoints, and its ipset, in the text format.
    for wanted in [
        "-A KPCT-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -m statistic --mode random \
         --probability 0.50000000000 -j DNAT --to-destination 10.244.2.10:8080",
        "create KPCT-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n",
        "# node node-b: ",
    ] {
        assert!(text.contains(wanted), "{wanted}:\n{text}");
    }
    assert!(!text.contains("initval"), "{text}");
    assert_eq!(stdout(&kpct(&[scenario, "--proxier", exec])), text);
    let diff = kpct(&[
        scenario,
        "--proxier",
        exec,
        "--diff",
        "kube-proxy-iptables",
        "--view",
        "iptables-save",
        "--node",
        "node-a",
    ]);
    assert_eq!(diff.status.code(), Some(1), "{diff:?}");
    assert!(
        stdout(&diff).contains("-:KPCT-SERVICES - [0:0]\n")
            && stdout(&diff).contains("+:KUBE-SERVICES - [0:0]\n"),
        "{diff:?}"
    );
    assert_eq!(leftovers(), before, "scratch directories left behind");
}
