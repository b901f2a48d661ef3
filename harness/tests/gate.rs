//! What a proxier's CI gate reads of `kpct run`: its verdict against a baseline
//! (`--baseline`, `kpct compare`) and the runs this kernel cannot hold. A proxier labelled
//! `gate` is once the built-in (every probe passes) and once a build that programs nothing
//! (`exec:true`: every probe fails).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

const SCENARIO: &str = "scenarios/clusterip-udp.yaml";
const GOOD: &str = "gate=kube-proxy-iptables";
const BROKEN: &str = "gate=exec:true";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kpct-baseline-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `kpct run` of the scenario with `proxier`, its results written to `json`.
fn run(proxier: &str, json: &Path, extra: &[&str]) -> Output {
    let json = json.to_str().unwrap();
    common::kpct(
        &[
            &[
                "run",
                "--proxier",
                proxier,
                "--scenario",
                SCENARIO,
                "--json",
                json,
            ],
            extra,
        ]
        .concat(),
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A regression fails the run (and `compare`); the same failure accepted by the baseline does
/// not, and JUnit reports it skipped with its text; a fix passes and says so.
#[test]
fn a_baseline_run_fails_only_on_regressions() {
    let d = dir("gate");
    let (good, broken, again) = (
        d.join("good.json"),
        d.join("broken.json"),
        d.join("again.json"),
    );
    assert!(run(GOOD, &good, &[]).status.success());

    let out = run(BROKEN, &broken, &["--baseline", good.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("REGRESSED: probe `pod-to-udp-clusterip-cross-node`\n    was: pass — delivered → dns-b\n    now: fail — dropped → no backend")
            && text.contains("2 regressed, 0 new failure(s)"),
        "{text}"
    );

    let junit = d.join("junit.xml");
    let out = run(
        BROKEN,
        &again,
        &[
            "--baseline",
            broken.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("0 regressed, 0 new failure(s), 2 still failing (accepted)"),
        "{text}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("tests=\"2\" failures=\"0\" errors=\"0\" skipped=\"2\"")
            && xml.contains("<skipped message=\"accepted by the baseline: clusterip-udp [gate]: probe `pod-to-udp-clusterip-cross-node`: expected delivery to one of [dns-b], observed dropped\""),
        "{xml}"
    );
    let schema = std::process::Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/junit-10.xsd"
        ))
        .arg(&junit)
        .output()
        .expect("xmllint (libxml2-utils, ci/install-deps.sh)");
    assert!(schema.status.success(), "{schema:?}\n{xml}");

    let out = run(
        GOOD,
        &d.join("fixed.json"),
        &["--baseline", broken.to_str().unwrap()],
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("FIXED: probe `pod-to-udp-clusterip-same-node`"),
        "{text}"
    );

    let compare = |old: &Path, new: &Path| {
        common::kpct(&["compare", old.to_str().unwrap(), new.to_str().unwrap()])
    };
    let out = compare(&good, &broken);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("clusterip-udp × gate\n  REGRESSED"),
        "{}",
        stdout(&out)
    );
    let out = compare(&broken, &again);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A baseline that is not a results document stops the run before anything runs, naming it.
#[test]
fn a_bad_baseline_is_refused_before_anything_runs() {
    let d = dir("bad");
    let bad = d.join("bad.json");
    std::fs::write(&bad, "{\"format\": \"kpct-results/2\"}").unwrap();
    let out = run(
        GOOD,
        &d.join("out.json"),
        &["--baseline", bad.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad.json: not a kpct results document"),
        "{err}"
    );
    assert!(!d.join("out.json").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

/// A scenario this kernel cannot hold (SCTP) is "not run here" in every output with its own
/// exit status (3), never a pass and never an error; on a kernel that has SCTP it runs.
#[test]
fn a_run_this_kernel_cannot_hold_is_not_run_here_everywhere() {
    let d = dir("not-run");
    let (json, junit, report) = (d.join("r.json"), d.join("j.xml"), d.join("r.md"));
    let out = common::kpct(&[
        "run",
        "--proxier",
        "kube-proxy-iptables",
        "--scenario",
        "scenarios/sctp-services.yaml",
        "--scenario",
        SCENARIO,
        "--json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let text = stdout(&out);
    let caps = kpct::caps::detect().unwrap();
    if !caps.missing(&[kpct::caps::Feature::Sctp]).is_empty() {
        assert_eq!(out.status.code(), Some(3), "{text}");
        assert!(
            text.contains("NOT ALL RUN: 2 probe(s), 2 passed, 0 failed; 1 run(s) not run here")
                && text.contains("NOT RUN HERE sctp-services × kube-proxy-iptables: needs sctp: "),
            "{text}"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["summary"]["result"], "not-run", "{doc}");
        assert_eq!(doc["runs"][1]["result"], "not-run", "{doc}");
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(
            xml.contains("<skipped message=\"not run here: needs sctp: "),
            "{xml}"
        );
        let md = std::fs::read_to_string(&report).unwrap();
        assert!(
            md.contains("**Result: not all run.**") && md.contains("## Not run here"),
            "{md}"
        );
    } else {
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(!text.contains("NOT RUN"), "{text}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--tag`/`--exclude-tag` fit the library to a proxier: an IPv4-only one leaves out every
/// scenario with IPv6; a typo is refused naming the known tags.
#[test]
fn tags_select_the_library_part_a_proxier_supports() {
    let list = |args: &[&str]| {
        let out =
            common::kpct(&[&["run", "--list", "--proxier", "kube-proxy-iptables"], args].concat());
        assert!(out.status.success(), "{out:?}");
        let mut names: Vec<String> = stdout(&out)
            .lines()
            .filter_map(|l| l.split('\t').next().map(str::to_string))
            .collect();
        names.dedup();
        names
    };
    let all = list(&[]);
    let v4 = list(&["--exclude-tag", "ipv6"]);
    let v6 = list(&["--tag", "ipv6"]);
    assert_eq!(v4.len() + v6.len(), all.len());
    assert!(
        v4.iter()
            .all(|n| !n.contains("ipv6") && !n.starts_with("dual-stack")),
        "{v4:?}"
    );
    assert!(v6.contains(&"dual-stack-clusterip".to_string()), "{v6:?}");
    let both = list(&[
        "--tag",
        "nodeport",
        "--tag",
        "etp-local",
        "--exclude-tag",
        "ipv6",
    ]);
    assert!(
        both.contains(&"nodeport-etp-local".to_string())
            && !both.contains(&"clusterip-udp".to_string()),
        "{both:?}"
    );
    let out = common::kpct(&["run", "--list", "--tag", "ipv7"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown tag(s) ipv7; known: ipv4"));
}

/// `--list --shard K/N` lists what that share would run: the shares' (scenario, probe,
/// proxier) runs are disjoint and make up the whole list.
#[test]
fn list_follows_the_shard() {
    let runs = |args: &[&str]| -> std::collections::BTreeSet<String> {
        let out = common::kpct(
            &[
                &["run", "--list", "--scenario", "scenarios/clusterip-*.yaml"],
                args,
            ]
            .concat(),
        );
        assert!(out.status.success(), "{out:?}");
        stdout(&out)
            .lines()
            .flat_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                f[2].split(',')
                    .map(|p| format!("{} {} {p}", f[0], f[1]))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let all = runs(&[]);
    let (one, two) = (runs(&["--shard", "1/2"]), runs(&["--shard", "2/2"]));
    assert!(!one.is_empty() && !two.is_empty());
    assert!(one.is_disjoint(&two));
    assert_eq!(&one | &two, all);
}
