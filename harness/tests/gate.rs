//! What a proxier's CI gate reads of `kpct run`: its verdict against a baseline
//! (`--baseline`, `kpct compare`) and the runs this kernel cannot hold. A proxier labelled
//! `gate` is once the built-in (every probe passes) and once a build that programs nothing
//! (`exec:true`: every probe fails).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
        text.contains("REGRESSED: probe `pod-to-udp-clusterip-cross-node`\n    was: pass — delivered → dns-b\n    now: fail — rejected → no backend")
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
            && xml.contains("<skipped message=\"accepted by the baseline: clusterip-udp [gate]: probe `pod-to-udp-clusterip-cross-node`: expected delivery to one of [dns-b], observed rejected\""),
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
    let caps = kpct::kernel_features::detect().unwrap();
    if !caps
        .missing(&[kpct::kernel_features::Feature::Sctp])
        .is_empty()
    {
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

/// The workflow a proxier's repository copies (ci/examples/proxier-gate.yml) is well-formed and
/// runs kpct's gate script; the script, run as the README says from a proxier repository
/// outside kpct's, writes the first baseline, passes the same proxier against it and fails a
/// broken build as a regression, with JUnit and the report written either way.
#[test]
fn the_example_workflow_gates_a_proxier_from_its_own_repository() {
    let kpct_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap();
    let workflow: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(kpct_dir.join("ci/examples/proxier-gate.yml")).unwrap(),
    )
    .expect("the workflow is YAML");
    let steps = workflow["jobs"]["gate"]["steps"]
        .as_sequence()
        .expect("jobs.gate.steps");
    let uses = |action: &str| {
        steps
            .iter()
            .find(|s| s["uses"].as_str().is_some_and(|u| u.starts_with(action)))
    };
    let checkout_kpct = steps
        .iter()
        .find(|s| s["with"]["path"].as_str() == Some("kpct"))
        .expect("a step checks kpct out into kpct/");
    assert!(
        checkout_kpct["with"]["ref"].as_str().is_some(),
        "kpct at a tag"
    );
    let gate = steps
        .iter()
        .find(|s| {
            s["run"]
                .as_str()
                .is_some_and(|r| r.contains("kpct/ci/examples/proxier-gate.sh"))
        })
        .expect("a step runs the gate script");
    assert!(gate["env"]["PROXIER"].as_str().is_some(), "{gate:?}");
    let upload = uses("actions/upload-artifact").expect("the results are uploaded");
    assert_eq!(
        upload["if"].as_str(),
        Some("always()"),
        "uploaded on failure too"
    );
    assert_eq!(
        upload["with"]["path"].as_str(),
        gate["env"]["OUT"]
            .as_str()
            .map(|o| format!("{o}/"))
            .as_deref()
    );

    // A proxier repository of its own, outside kpct's.
    let repo = dir("proxier-repo");
    std::fs::create_dir_all(repo.join("bin")).unwrap();
    std::fs::copy(
        kpct_dir.join("harness/tests/fixtures/exec/minimal_proxier.py"),
        repo.join("bin/my-proxier.py"),
    )
    .unwrap();
    let gate_run = |proxier: &str| {
        Command::new("bash")
            .arg(kpct_dir.join("ci/examples/proxier-gate.sh"))
            .current_dir(&repo)
            .env("PROXIER", proxier)
            .env("KPCT_BIN", env!("CARGO_BIN_EXE_kpct"))
            .env(
                "KPCT_ARGS",
                format!(
                    "--scenario {}",
                    kpct_dir.join("scenarios/clusterip-udp.yaml").display()
                ),
            )
            .env_remove("BASELINE")
            .env_remove("OUT")
            .output()
            .unwrap()
    };
    let good = "mine=exec:python3 bin/my-proxier.py print";
    let first = gate_run(good);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("this run is now kpct-baseline.json"),
        "{first:?}"
    );
    assert!(repo.join("kpct-baseline.json").is_file());
    let again = gate_run(good);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("judged by kpct-baseline.json"),
        "{again:?}"
    );
    for file in ["junit.xml", "report.html", "kpct.json"] {
        std::fs::remove_file(repo.join("target/kpct").join(file)).unwrap();
    }
    let broken = gate_run("mine=exec:true");
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
    assert!(stdout(&broken).contains("regress"), "{broken:?}");
    for file in ["junit.xml", "report.html", "kpct.json"] {
        assert!(repo.join("target/kpct").join(file).is_file(), "{file}");
    }
    std::fs::remove_dir_all(&repo).unwrap();
}
