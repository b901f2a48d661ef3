//! The documents `kpct run` writes, from real runs in namespaces (kube-proxy-iptables, so they
//! run natively) and from synthetic results:
//!
//! * `--report FILE.md|.html`: a bundled scenario against a proxier broken like in
//!   `mutation.rs` (its service MASQUERADE rule removed) must produce a report naming the
//!   violated expectation, the observed source and the KUBE-POSTROUTING chain as the kernel held
//!   it; the intact proxier's report must say that everything passed.
//! * `--junit FILE`: valid against the Jenkins xunit plugin's `junit-10.xsd`
//!   (`fixtures/junit-10.xsd`), checked with `xmllint --schema`. xmllint is required: without
//!   it these tests fail, they do not skip.

mod common;

use common::{drop_postrouting_masquerade, Mutated};
use kpct::document::{ProbeObservation, ShotObservation, Verdict};
use kpct::probe::probe_timeout;
use kpct::programming::Programming;
use kpct::provenance::Environment;
use kpct::proxier::{builtin, Proxier};
use kpct::report::document::{self, Format};
use kpct::report::{Results, RunError};
use kpct::ScenarioObservation;
use kpct::ScenarioRun;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../scenarios/nodeport-external-each-node.yaml"
);
const XSD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/junit-10.xsd");

fn refuse(_: &mut Programming) -> anyhow::Result<()> {
    anyhow::bail!("refusing to program <this> node & \"that\" one \u{1b}[31m(coloured)\u{1b}[0m")
}

const BROKEN: &str = "kube-proxy-iptables-without-masquerade";

struct RealRuns {
    intact: ScenarioRun,
    broken: ScenarioRun,
    /// A run that could not complete: the proxier fails to program.
    error: RunError,
}

/// The real runs, made once for every test of this file.
fn real() -> &'static RealRuns {
    static RUNS: OnceLock<RealRuns> = OnceLock::new();
    RUNS.get_or_init(|| {
        let scenario = kpct::load(Path::new(SCENARIO)).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let run = |p: &dyn Proxier| rt.block_on(kpct::run_scenario(&scenario, p, probe_timeout()));
        let intact = run(builtin("kube-proxy-iptables").unwrap().as_ref()).unwrap();
        let broken = run(&Mutated {
            name: BROKEN,
            inner: "kube-proxy-iptables",
            mutate: drop_postrouting_masquerade,
        })
        .unwrap();
        let failing = Mutated {
            name: "kube-proxy-iptables-refusing",
            inner: "kube-proxy-iptables",
            mutate: refuse,
        };
        let e = run(&failing).expect_err("a proxier that refuses cannot complete a run");
        RealRuns {
            intact,
            broken,
            error: RunError {
                scenario: scenario.name.clone(),
                proxier: failing.name.into(),
                message: format!("{e:#}"),
                elapsed: std::time::Duration::ZERO,
            },
        }
    })
}

/// A fixed environment, so documents do not depend on the machine that renders them.
fn environment() -> Environment {
    Environment {
        kpct: "0.1.0 (commit 0123456789ab)".into(),
        kernel: "6.1.0-test".into(),
        iptables: "iptables v1.8.9 (nf_tables)".into(),
        ipset: "ipset v7.17, protocol version: 7".into(),
        ipvsadm: "ipvsadm v1.31 2019/12/24 (compiled with popt and IPVS v1.2.1)".into(),
    }
}

fn results(runs: &[ScenarioRun], errors: &[RunError]) -> Results {
    let mut r = Results::new(runs.to_vec(), errors.to_vec(), environment());
    r.files.insert(
        "nodeport-external-each-node".into(),
        "scenarios/nodeport-external-each-node.yaml".into(),
    );
    r
}

/// Runs `xmllint ARGS FILE` on `input` written to a file of its own (tests run in parallel).
fn xmllint(args: &[&str], input: &str, what: &str) -> Result<(), String> {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let file: PathBuf = std::env::temp_dir().join(format!(
        "kpct-reports-{}-{}-{what}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, input).unwrap();
    let out = Command::new("xmllint").args(args).arg(&file).output();
    let _ = std::fs::remove_file(&file);
    let out = out.unwrap_or_else(|e| {
        panic!("xmllint is required (apt-get install libxml2-utils, see ci/install-deps.sh): {e}")
    });
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "xmllint {args:?} rejects {what}:\n{}\n--- document ---\n{input}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn validate_junit(xml: &str) -> Result<(), String> {
    xmllint(&["--noout", "--schema", XSD], xml, "junit.xml")
}

// ---------------------------------------------------------------------------------------------
// --report

#[test]
fn report_of_a_failing_run_shows_expectation_observation_and_kernel_state() {
    let r = real();
    assert!(r.intact.violations.is_empty(), "{:#?}", r.intact.violations);
    assert!(!r.broken.violations.is_empty(), "the mutation is caught");
    assert!(
        r.intact.evidence.is_empty(),
        "nothing captured for a passing run"
    );
    let runs = [r.intact.clone(), r.broken.clone()];
    let md = document::render(Format::Markdown, &results(&runs, &[]));
    let html = document::render(Format::Html, &results(&runs, &[]));
    for (doc, what) in [(&md, "markdown"), (&html, "html")] {
        for wanted in [
            // the failing probe and its spec
            "external-to-node-a-nodeport",
            "service web port http via nodePort node node-a",
            // the violated expectation
            "expected source masqueraded (client 192.168.1.100), observed preserved",
            // the declared expectation
            "reaches [web-b], source masqueraded, reply true",
            // the kernel state: the masquerade chain as the kernel held it, without its
            // MASQUERADE rule, and the NodePort path
            ":KUBE-POSTROUTING -",
            "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
            "--dport 30080 -j KUBE-EXT-",
            // with its packet counters: the one SYN took the NodePort path
            "[1:40] -A KUBE-NODEPORTS -p tcp",
            // how to reproduce it, and where it ran
            "sudo ci/kpct.sh trace scenarios/nodeport-external-each-node.yaml external-to-node-a-nodeport --proxier kube-proxy-iptables-without-masquerade",
            "6.1.0-test",
            "iptables v1.8.9 (nf_tables)",
        ] {
            let wanted = if what == "html" {
                kpct::report::markup::xml_escape(wanted)
            } else {
                wanted.to_string()
            };
            assert!(
                doc.contains(&wanted),
                "{what} report lacks {wanted:?}:\n{doc}"
            );
        }
        assert!(
            !doc.contains("-j MASQUERADE --random-fully"),
            "the removed rule is not shown as present:\n{doc}"
        );
        assert!(doc.contains("Result: FAILED."), "{doc}");
    }
    // The observed source, as a table cell.
    assert!(md.contains("| `preserved` |"), "{md}");
    assert!(html.contains("<td><code>preserved</code></td>"), "{html}");
    // Fenced excerpts; passing probes one line each.
    assert!(md.contains("```text\n*nat\n"), "{md}");
    assert!(
        md.contains("- `nodeport-external-each-node` × `kube-proxy-iptables`: `external-to-node-a-nodeport` — delivered → web-b\n"),
        "{md}"
    );
    // The HTML is well-formed.
    xmllint(&["--noout"], &html, "report.html").unwrap();
    // Packet counters are not part of the golden file: those of the built-in chains count
    // stragglers too (a client's RST that crosses the overlay before or after the next probe's
    // conntrack flush makes the VXLAN flow new again, or not), so they differ from run to run.
    // The one counter that is certain, the NodePort rule's single SYN, is asserted above.
    let md = regex::Regex::new(r"(?m)^\[[0-9]+:[0-9]+\] -A ")
        .unwrap()
        .replace_all(&md, "[packets:bytes] -A ")
        .into_owned();
    insta::with_settings!({
        snapshot_path => "../../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => "kpct run --report, nodeport-external-each-node: intact kube-proxy-iptables, and without its MASQUERADE rule",
    }, {
        insta::assert_snapshot!("report-nodeport-external-each-node-without-masquerade", md);
    });
}

/// A failing IPv6 probe's evidence shows the IPv6 proxier's ip6tables rules with their packet
/// counters from `ip6tables-save -c`: every IPv6 SYN of the probe took the NodePort path.
#[test]
fn evidence_of_an_ipv6_probe_shows_ip6tables_rules_with_counters() {
    let scenario = kpct::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/ipv6-nodeport-external.yaml"
    )))
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broken = rt
        .block_on(kpct::run_scenario(
            &scenario,
            &Mutated {
                name: BROKEN,
                inner: "kube-proxy-iptables",
                mutate: drop_postrouting_masquerade,
            },
            probe_timeout(),
        ))
        .unwrap();
    assert!(!broken.violations.is_empty(), "the mutation is caught");
    let node_a = broken
        .evidence
        .iter()
        .flat_map(|p| &p.nodes)
        .find(|n| n.node == "node-a")
        .unwrap_or_else(|| panic!("no evidence of node-a: {:#?}", broken.evidence));
    let (_, ip6) = node_a
        .iptables
        .split_once("# ip6tables\n")
        .unwrap_or_else(|| panic!("no ip6tables excerpt:\n{}", node_a.iptables));
    let syn =
        regex::Regex::new(r"(?m)^\[[1-9][0-9]*:[0-9]+\] -A KUBE-NODEPORTS -p tcp .*--dport 30080")
            .unwrap();
    assert!(syn.is_match(ip6), "{ip6}");
    assert!(node_a.errors.is_empty(), "{:?}", node_a.errors);
}

#[test]
fn report_of_passing_runs_says_all_passed() {
    let r = real();
    let runs = [r.intact.clone()];
    let md = document::render(Format::Markdown, &results(&runs, &[]));
    assert!(
        md.contains("**Result: all passed.** All 2 probes passed; no run failed to complete."),
        "{md}"
    );
    assert!(!md.contains("## Failures"), "{md}");
    let html = document::render(Format::Html, &results(&runs, &[]));
    assert!(
        html.contains("<strong>Result: all passed.</strong>"),
        "{html}"
    );
    xmllint(&["--noout"], &html, "passing.html").unwrap();
}

#[test]
fn report_lists_runs_that_could_not_complete_escaped() {
    let r = real();
    let errors = [r.error.clone()];
    let html = document::render(Format::Html, &results(&[], &errors));
    xmllint(&["--noout"], &html, "error.html").unwrap();
    assert!(
        html.contains("refusing to program &lt;this&gt; node &amp; &quot;that&quot;"),
        "{html}"
    );
    let md = document::render(Format::Markdown, &results(&[], &errors));
    assert!(md.contains("## Errors"), "{md}");
    assert!(
        md.contains("refusing to program <this> node"),
        "verbatim in a code block: {md}"
    );
}

#[test]
fn an_unknown_report_format_fails_before_anything_runs() {
    let out = run_udp_scenario_with(&[
        "--proxier",
        "kube-proxy-iptables",
        "--report",
        "/nonexistent/report.txt",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--report /nonexistent/report.txt")
            && stderr.contains(".md")
            && stderr.contains(".html"),
        "{stderr}"
    );
    assert!(!stderr.contains("clusterip-udp ×"), "nothing ran: {stderr}");
}

/// IPVS mode: the report shows the virtual services of the NodePort with their real servers
/// (`ipvsadm -Ln`), the ipset entries and the rules using those sets.
#[test]
fn needs_ipvs_report_shows_ipvs_virtual_services_and_ipsets() {
    kpct::kernel_features::require_ipvs();
    let scenario = kpct::load(Path::new(SCENARIO)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broken = Mutated {
        name: "kube-proxy-ipvs-without-masquerade",
        inner: "kube-proxy-ipvs",
        mutate: drop_postrouting_masquerade,
    };
    let run = rt
        .block_on(kpct::run_scenario(&scenario, &broken, probe_timeout()))
        .unwrap();
    assert!(!run.violations.is_empty(), "the mutation is caught");
    let md = document::render(Format::Markdown, &results(&[run], &[]));
    println!("{md}"); // shown with --nocapture
    for wanted in [
        "IP Virtual Server version",
        "TCP  192.168.1.10:30080 rr",
        "TCP  10.96.0.10:80 rr",
        "  -> 10.244.2.20:8080",
        "add KUBE-NODE-PORT-TCP 30080",
        "--match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ",
        ":KUBE-POSTROUTING -",
        "kube-ipvs0 (DOWN, NOARP)",
    ] {
        assert!(md.contains(wanted), "report lacks {wanted:?}:\n{md}");
    }
}

// ---------------------------------------------------------------------------------------------
// --junit

#[test]
fn junit_of_real_runs_validates_against_the_xunit_schema() {
    let r = real();
    let xml = kpct::report::junit(&results(
        &[r.intact.clone(), r.broken.clone()],
        std::slice::from_ref(&r.error),
    ));
    validate_junit(&xml).unwrap();
    assert!(
        xml.contains("tests=\"5\" failures=\"2\" errors=\"1\""),
        "{xml}"
    );
    assert!(xml.contains("<failure type=\"expectation\""), "{xml}");
    assert!(xml.contains("<error type=\"setup\""), "{xml}");
    // What CI servers read: times, the start, dotted classnames, the environment.
    let testcase = regex::Regex::new(
        r#"<testcase classname="kpct\.kube-proxy-iptables\.nodeport-external-each-node" name="[^"]+" time="[0-9]+\.[0-9]{3}""#,
    )
    .unwrap();
    assert!(testcase.is_match(&xml), "{xml}");
    let suite = regex::Regex::new(r#"<testsuite name="[^"]+" [^>]* time="[0-9]+\.[0-9]{3}" timestamp="20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z">"#).unwrap();
    assert!(suite.is_match(&xml), "{xml}");
    assert!(
        xml.contains("<property name=\"kernel\" value=\"6.1.0-test\"/>"),
        "{xml}"
    );
    assert!(
        xml.contains("trace it: sudo ci/kpct.sh trace scenarios/nodeport-external-each-node.yaml"),
        "{xml}"
    );
    assert!(
        xml.contains("KUBE-POSTROUTING"),
        "the failure carries the kernel state: {xml}"
    );
}

fn shot(verdict: Verdict, backend: Option<&str>, source: Option<&str>) -> ShotObservation {
    ShotObservation {
        verdict,
        backend: backend.map(String::from),
        backend_saw: None,
        source: source.map(String::from),
        reply: Some("from 10.96.0.10:80".into()),
        source_ip_seen: None,
        reply_translated: Some(true),
        sport: 20000,
    }
}

fn synthetic(scenario: &str, probe: &str, violation: Option<&str>) -> ScenarioRun {
    let s = shot(Verdict::Delivered, Some("web-1"), Some("preserved"));
    ScenarioRun {
        observation: ScenarioObservation {
            scenario: scenario.into(),
            proxier: "exec:my-proxier --flag=\"<x>\"".into(),
            nodes: Vec::new(),
            probes: vec![ProbeObservation {
                probe: probe.into(),
                from: "pod client (10.244.1.10:20000)".into(),
                to: "tcp 10.96.0.10:80".into(),
                shots: vec![s.clone()],
                outcomes: None,
                shots_fired: None,
                backends: vec!["web-1".into()],
                all: vec![s],
                client_ip: None,
            }],
            steps: Vec::new(),
        },
        violations: violation
            .map(|v| vec![format!("{scenario} [x]: probe `{probe}`: {v}")])
            .unwrap_or_default(),
        evidence: Vec::new(),
        timing: kpct::run::Timing::default(),
        drops_at_verdict: Vec::new(),
    }
}

#[test]
fn junit_of_synthetic_results_validates_and_escapes() {
    let runs = [
        synthetic("passing", "pod-to-clusterip", None),
        synthetic(
            "failing & <odd>",
            "probe \"quoted\"",
            Some("expected source masqueraded (client 10.244.1.10), observed preserved"),
        ),
    ];
    let errors: [RunError; 1] = [RunError {
        scenario: "broken".into(),
        proxier: "exec:x".into(),
        message: "iptables-restore failed: \u{1b}[1mline 3\u{1b}[0m <bad> & \"worse\"\u{0}".into(),
        elapsed: std::time::Duration::from_millis(1500),
    }];
    let xml = kpct::report::junit(&results(&runs, &errors));
    validate_junit(&xml).unwrap();
    assert!(
        xml.contains("tests=\"3\" failures=\"1\" errors=\"1\""),
        "{xml}"
    );
    assert!(
        xml.contains(
            "name=\"failing &amp; &lt;odd&gt;@exec:my-proxier --flag=&quot;&lt;x&gt;&quot;\""
        ),
        "{xml}"
    );
    assert!(
        xml.contains("\\u{1b}[1mline 3"),
        "control characters are spelled out: {xml}"
    );
}

#[test]
fn the_schema_check_rejects_broken_junit() {
    // The validation can fail: a testsuite without its required `name`, and a stray element.
    let ok = kpct::report::junit(&results(&[synthetic("s", "p", None)], &[]));
    validate_junit(&ok).unwrap();
    let nameless = ok.replacen(" name=\"s@", " id=\"s@", 1);
    assert!(validate_junit(&nameless).is_err(), "{nameless}");
    let stray = ok.replacen("/>", "><result>pass</result></testcase>", 1);
    assert!(validate_junit(&stray).is_err(), "{stray}");
}

/// An output that cannot be written fails before any scenario runs, every such flag at once.
#[test]
fn unwritable_outputs_fail_before_anything_runs() {
    let out = run_udp_scenario_with(&[
        "--proxier",
        "kube-proxy-iptables",
        "--report",
        "/nonexistent/r.html",
        "--junit",
        "/nonexistent/j.xml",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--junit /nonexistent/j.xml: directory /nonexistent does not exist")
            && stderr
                .contains("--report /nonexistent/r.html: directory /nonexistent does not exist"),
        "{stderr}"
    );
    // Nothing ran: no progress line, no result table.
    assert!(!stderr.contains("clusterip-udp ×"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `kpct run` of one small scenario with `args` (the proxier, output flags).
fn run_udp_scenario_with(args: &[&str]) -> std::process::Output {
    common::kpct(&[&["run", "--scenario", "scenarios/clusterip-udp.yaml"], args].concat())
}

/// A proxier that fails leaves no empty table: the summary counts the errored run, and the
/// error names the node once and says the program wrote nothing on stderr.
#[test]
fn a_failing_exec_proxier_is_reported_as_an_errored_run() {
    let out = run_udp_scenario_with(&["--proxier", "exec:false"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expected = regex::Regex::new(
        "^no probe ran\n\
         FAILED: 0 probe\\(s\\), 0 passed, 0 failed; 1 scenario run\\(s\\) errored \\(below\\); 1 run\\(s\\) in [0-9]+\\.[0-9] s\n  \
         ERROR clusterip-udp × exec:false: node node-a: `false` failed \\(exit \
         status: 1\\) and wrote nothing on stderr\n$",
    )
    .unwrap();
    assert!(expected.is_match(&stdout), "{stdout}");
}

/// `--list` runs nothing; `--probe` runs one probe with the ports it has in the whole file;
/// `--fail-fast` stops at the first failed or errored run.
#[test]
fn run_selects_lists_and_stops_early() {
    let list = run_udp_scenario_with(&["--list"]);
    assert!(list.status.success(), "{list:?}");
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        "clusterip-udp\tpod-to-udp-clusterip-cross-node\tkube-proxy-ipvs,kube-proxy-iptables,kube-proxy-nftables\n\
         clusterip-udp\tpod-to-udp-clusterip-same-node\tkube-proxy-ipvs,kube-proxy-iptables,kube-proxy-nftables\n"
    );

    let dir = std::env::temp_dir().join(format!("kpct-select-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = run_udp_scenario_with(&[
        "--proxier",
        "kube-proxy-iptables",
        "--probe",
        "pod-to-udp-clusterip-same-node",
        "--observations",
        dir.to_str().unwrap(),
    ]);
    let observed =
        std::fs::read_to_string(dir.join("clusterip-udp@kube-proxy-iptables.yaml")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(one.status.success(), "{one:?}");
    assert!(
        String::from_utf8_lossy(&one.stdout).contains("1 probe(s), 1 passed, 0 failed"),
        "{one:?}"
    );
    // The second probe of the file keeps its source port 21000 (20000 + 1000 × its index).
    assert!(observed.contains(":21000)"), "{observed}");
    assert!(!observed.contains("cross-node"), "{observed}");

    let stopped = run_udp_scenario_with(&[
        "--proxier",
        "exec:false",
        "--proxier",
        "kube-proxy-iptables",
        "--fail-fast",
    ]);
    assert_eq!(stopped.status.code(), Some(1), "{stopped:?}");
    let out = String::from_utf8_lossy(&stopped.stdout);
    assert!(
        out.starts_with(
            "no probe ran\nFAILED: 0 probe(s), 0 passed, 0 failed; 1 scenario run(s) errored"
        ),
        "{out}"
    );
}

/// The table: result first, verdicts as scenario files spell them, every line within 120
/// columns, the run's time in the summary; colour only on a terminal without NO_COLOR.
#[test]
fn the_table_fits_120_columns_with_the_result_first() {
    let r = real();
    let table = kpct::report::table(
        &results(&[r.intact.clone(), r.broken.clone()], &[]),
        kpct::report::Style::plain(),
    );
    assert!(table.starts_with("result  probe"), "{table}");
    for line in table.lines().take_while(|l| !l.starts_with("  FAIL ")) {
        assert!(
            line.chars().count() <= 120,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(
        table.contains("\nFAIL    external-to-node-a-nodeport"),
        "{table}"
    );
    assert!(table.contains("delivered"), "lower-case verdicts: {table}");
    assert!(!table.contains("Delivered"), "{table}");
    assert!(
        table.contains(&format!("nodeport-external-each-node × {BROKEN} (")),
        "{table}"
    );
    assert!(table.contains("; 2 run(s) in 0.0 s"), "{table}");
}

/// Through a pseudo-terminal (`script`), pass/FAIL are coloured unless NO_COLOR is set.
#[test]
fn colour_on_a_terminal_unless_no_color() {
    let run = |no_color: bool| {
        let kpct = env!("CARGO_BIN_EXE_kpct");
        let mut cmd = Command::new("script");
        cmd.args(["-qec"])
            .arg(format!(
                "{kpct} run --proxier kube-proxy-iptables --scenario scenarios/clusterip-udp.yaml"
            ))
            .arg("/dev/null")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let out = cmd.output().expect("script (util-linux) runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run(false).contains("\x1b[32mpass\x1b[0m"), "coloured");
    let plain = run(true);
    assert!(
        plain.contains("pass  ") && !plain.contains("\x1b[32m"),
        "{plain}"
    );
}

/// `--json`'s document: the summary, every run with its probes, and for a failing probe its
/// violations and the trace command; an errored run with its message.
#[test]
fn json_holds_runs_probes_verdicts_violations_and_versions() {
    let r = real();
    let text = kpct::report::json::json(&results(
        &[r.intact.clone(), r.broken.clone()],
        std::slice::from_ref(&r.error),
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["format"], "kpct-results/2");
    assert_eq!(
        doc["environment"]["iptables"],
        "iptables v1.8.9 (nf_tables)"
    );
    let summary = &doc["summary"];
    assert_eq!(summary["result"], "error", "{summary}");
    assert_eq!(
        (
            &summary["runs"],
            &summary["probes"],
            &summary["failed"],
            &summary["errored"]
        ),
        (&3.into(), &4.into(), &2.into(), &1.into()),
        "{summary}"
    );
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs[0]["result"], "pass");
    assert_eq!(runs[1]["result"], "fail");
    assert_eq!(runs[2]["result"], "error");
    assert!(runs[2]["error"]
        .as_str()
        .unwrap()
        .contains("refusing to program"));
    let failing = runs[1]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["result"] == "fail")
        .unwrap();
    assert_eq!(failing["verdicts"][0], "delivered-reply-untranslated");
    assert!(failing["violations"][0]
        .as_str()
        .unwrap()
        .contains("expected source masqueraded"));
    assert_eq!(
        failing["trace"],
        format!("sudo ci/kpct.sh trace scenarios/nodeport-external-each-node.yaml {} --proxier {BROKEN}", failing["name"].as_str().unwrap())
    );
    assert!(failing["observation"]["from"].is_string(), "{failing}");
    assert!(runs[0]["probes"][0].get("trace").is_none());
}

/// A run whose only failure is a step that did not converge (kube-proxy's iptables mode that
/// never deletes a stale chain) fails in every output: a FAIL row and the summary of the table,
/// a `STEP/converged` testcase with its failure in JUnit (still schema-valid), `fail` in the
/// JSON with the step's differences, the report's verdict and its "Not converged" section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_convergence_failure_fails_every_output() {
    let path = format!(
        "{}/../scenarios/transition-scale-down-up.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = kpct::load(std::path::Path::new(&path)).expect("a library scenario");
    let broken = common::Mutated {
        name: "kube-proxy-iptables",
        inner: "kube-proxy-iptables",
        mutate: common::keep_stale_chains,
    };
    let run = kpct::run_scenario(&s, &broken, kpct::probe::probe_timeout())
        .await
        .expect("run");
    assert!(
        run.violations
            .iter()
            .all(|v| v.contains(kpct::run::NOT_CONVERGED)),
        "only the convergence check fails: {:#?}",
        run.violations
    );
    let results = results(&[run], &[]);
    let counts = results.counts();
    assert_eq!((counts.failed, counts.not_converged), (0, 1), "{counts:?}");
    assert!(counts.any_failure());

    let table = kpct::report::table(&results, kpct::report::Style::plain());
    let row = table
        .lines()
        .find(|l| l.contains("scale-down/converged"))
        .unwrap_or_else(|| panic!("no convergence row:\n{table}"));
    assert!(row.starts_with("FAIL"), "{row}");
    assert!(
        table.contains("FAILED: ") && table.contains("convergence check(s), 1 failed"),
        "{table}"
    );

    let xml = kpct::report::junit(&results);
    validate_junit(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    assert!(
        xml.contains("name=\"scale-down/converged\"")
            && xml.contains("<failure type=\"convergence\"")
            && xml.contains("stale chain KUBE-SEP-"),
        "{xml}"
    );
    assert!(!xml.contains("failures=\"0\" errors=\"0\" time"), "{xml}");

    let doc: serde_json::Value =
        serde_json::from_str(&kpct::report::json::json(&results).expect("json")).expect("parses");
    assert_eq!(doc["summary"]["result"], "fail", "{doc:#}");
    assert_eq!(doc["summary"]["not_converged"], 1);
    let step = &doc["runs"][0]["steps"][0];
    assert_eq!(
        (step["name"].as_str(), step["converged"].as_str()),
        (Some("scale-down"), Some("fail"))
    );

    let report = kpct::report::document::render(kpct::report::document::Format::Markdown, &results);
    assert!(
        report.contains("Result: FAILED.") && report.contains("## Not converged"),
        "{report}"
    );
}

/// Two `exec:` proxiers that differ by one flag are two proxiers in every output, and
/// `NAME=SPEC` labels one NAME everywhere; two with the same label are refused before anything
/// runs, as a usage error.
#[test]
fn proxiers_are_named_as_given_in_every_output() {
    let dir = std::env::temp_dir().join(format!("kpct-test-{}-named", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (junit, json) = (dir.join("j.xml"), dir.join("r.json"));
    let out = run_udp_scenario_with(&[
        "--proxier",
        "exec:false --a",
        "--proxier",
        "v2=exec:false --b",
        "--junit",
        junit.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("clusterip-udp × exec:false --a:") && table.contains("clusterip-udp × v2:"),
        "{table}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    validate_junit(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    assert!(
        xml.contains("name=\"clusterip-udp@exec:false --a\"")
            && xml.contains("name=\"clusterip-udp@v2\""),
        "{xml}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let named: Vec<&str> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["proxier"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["exec:false --a", "v2"], "{doc:#}");
    let _ = std::fs::remove_dir_all(&dir);

    let same = run_udp_scenario_with(&["--proxier", "exec:false", "--proxier", "exec:false"]);
    assert_eq!(same.status.code(), Some(2), "a usage error: {same:?}");
    assert!(
        String::from_utf8_lossy(&same.stderr).contains("two proxiers are labelled `exec:false`"),
        "{same:?}"
    );
}

/// An `exec:` proxier of its own making, in nftables, whose rules match inline (no sets or
/// maps, no kube-proxy chain names), broken: it DNATs the ClusterIP to a port nothing listens
/// on. The report's evidence for node-a shows the rule that took the probe's packets, with its
/// counter (40 shots went through it) and the chain that masquerades, found by what it does.
/// (No conntrack entry is left of these flows: the backend's reset ends each.)
#[test]
fn evidence_of_an_inline_nftables_proxier_shows_the_rule_and_its_counter() {
    let dir = std::env::temp_dir().join(format!(
        "{}inline-nft",
        kpct::netns::naming::RunPrefix::next().as_str()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let proxier = dir.join("inline-nft.sh");
    std::fs::write(
        &proxier,
        r#"#!/bin/sh
# Programs its node itself and prints nothing; the same everywhere.
nft -f - <<'RULES'
add table ip my-proxy
delete table ip my-proxy
table ip my-proxy {
  chain pre {
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr 10.96.0.10 tcp dport 80 counter dnat to 10.244.2.10:8081
  }
  chain out {
    type nat hook output priority -100; policy accept;
    ip daddr 10.96.0.10 tcp dport 80 counter dnat to 10.244.2.10:8081
  }
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 counter masquerade
  }
}
RULES
"#,
    )
    .unwrap();
    std::fs::set_permissions(
        &proxier,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let report = dir.join("report.md");
    let out = common::kpct(&[
        "run",
        "--proxier",
        &format!("exec:{}", proxier.display()),
        "--scenario",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/clusterip-cross-node.yaml"
        ),
        "--report",
        report.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rule = text
        .lines()
        .find(|l| l.contains("ip daddr 10.96.0.10 tcp dport 80 counter packets"))
        .unwrap_or_else(|| panic!("no inline rule with its counter in the report:\n{text}"));
    let packets: u64 = rule
        .split("counter packets ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(
        packets >= 40,
        "the probe's 40 shots went through it: {rule}"
    );
    assert!(rule.contains("dnat to 10.244.2.10:8081"), "{rule}");
    assert!(text.contains("chain post {"), "{text}");
    assert!(text.contains("masquerade"), "{text}");
    // The failing probe traced again and drawn (`--trace-failures`, on by default with a
    // report): its packet through the proxier's own chain, by its own name.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tracing clusterip-cross-node × exec:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figure = text
        .split("```mermaid\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no picture of the path in the report:\n{text}"));
    assert!(
        figure.contains("my-proxy:pre [dnat to 10.244.2.10:8081]"),
        "{figure}"
    );
}

/// A failing probe of a step is suggested a trace of that probe at that step, and the command
/// works: here a UDP flow continued after its endpoint was replaced, against a proxier that
/// skips kube-proxy's stale-entry cleanup (the datagram still goes to the deleted pod).
#[test]
fn the_trace_command_of_a_step_probe_names_its_step_and_traces_it() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/transition-udp-endpoint-replaced.yaml"
    );
    let scenario = kpct::load(Path::new(path)).unwrap();
    let broken = Mutated {
        name: "kube-proxy-iptables-without-conntrack-cleanup",
        inner: "kube-proxy-iptables",
        mutate: common::skip_conntrack_cleanup,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let run = rt
        .block_on(kpct::run_scenario(&scenario, &broken, probe_timeout()))
        .unwrap();
    let mut r = Results::new(vec![run.clone()], Vec::new(), environment());
    r.files.insert(
        scenario.name.clone(),
        "scenarios/transition-udp-endpoint-replaced.yaml".into(),
    );
    let failing: Vec<String> = r.failing().iter().map(|(_, p)| p.probe.clone()).collect();
    assert_eq!(failing, ["replace-endpoint/resolver-again"], "{failing:?}");
    assert_eq!(
        r.trace_command(&run, &failing[0]),
        "sudo ci/kpct.sh trace scenarios/transition-udp-endpoint-replaced.yaml resolver-again \
         --step 1 --proxier kube-proxy-iptables-without-conntrack-cleanup"
    );
    let trace = rt
        .block_on(kpct::trace::trace(
            &scenario,
            Some(1),
            "resolver-again",
            &broken,
            probe_timeout(),
        ))
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        trace.to_string().contains("continues the flow `resolver`"),
        "{trace}"
    );
}

/// Below the table, failures are grouped for a person: per run, per probe its first violation
/// and how many more it caused, at most three probes per run and twenty runs, with what was
/// left out counted (a broken proxier over the library printed 334 lines before).
#[test]
fn the_failures_under_the_table_are_grouped_and_capped() {
    let many_probes = {
        let mut run = synthetic("many", "p0", None);
        let prefix = format!("many [{}]: ", run.observation.proxier);
        for p in 0..5 {
            for v in ["expected delivery, observed rejected", "expected a reply"] {
                run.violations.push(format!("{prefix}probe `p{p}`: {v}"));
            }
        }
        run
    };
    let mut runs = vec![many_probes];
    for i in 0..22 {
        let mut run = synthetic(&format!("run-{i:02}"), "p", None);
        run.violations.push(format!(
            "run-{i:02} [{}]: probe `p`: expected outcome dropped",
            run.observation.proxier
        ));
        runs.push(run);
    }
    let table = kpct::report::table(&results(&runs, &[]), kpct::report::Style::plain());
    let below: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("FAILED"))
        .skip(1)
        .collect();
    let proxier = &runs[0].observation.proxier;
    assert_eq!(
        below[..5],
        [
            format!("  FAIL many × {proxier}: 5 checks failing").as_str(),
            "      probe `p0`: expected delivery, observed rejected (and 1 more violation about it)",
            "      probe `p1`: expected delivery, observed rejected (and 1 more violation about it)",
            "      probe `p2`: expected delivery, observed rejected (and 1 more violation about it)",
            "      … and 2 more failing checks",
        ],
        "{table}"
    );
    assert_eq!(
        below.last().copied(),
        Some("  … and 3 more runs with failures (every line: --report, --junit, --json)"),
        "{table}"
    );
    assert_eq!(below.len(), 5 + 19 * 2 + 1, "{table}");
}

/// Two proxiers over one scenario: the report tabulates the probes whose outcome differs, one
/// column per proxier, and nothing where they agree; one proxier alone gets no such table.
#[test]
fn a_report_of_two_proxiers_tabulates_where_they_differ() {
    let r = real();
    let runs = [r.intact.clone(), r.broken.clone()];
    let md = document::render(Format::Markdown, &results(&runs, &[]));
    let section = md
        .split("## Differences between proxiers")
        .nth(1)
        .unwrap_or_else(|| panic!("no difference table: {md}"));
    let section = section.split("\n## ").next().unwrap();
    assert!(
        section.contains(&format!(
            "| scenario | check | kube-proxy-iptables | {BROKEN} |"
        )),
        "{section}"
    );
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
    // Each probe the mutation failed is a row, FAIL only in the broken proxier's column; the
    // probes it did not touch are no rows.
    let failed: Vec<&str> = r
        .broken
        .observation
        .all_probes()
        .map(|p| p.probe.as_str())
        .filter(|p| {
            r.broken
                .violations
                .iter()
                .any(|v| v.contains(&format!("`{p}`")))
        })
        .collect();
    assert!(!failed.is_empty());
    assert_eq!(rows.len(), failed.len(), "{section}");
    for (row, probe) in rows.iter().zip(&failed) {
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(cells[1].contains(probe), "{row}");
        assert!(!cells[2].contains("FAIL"), "{row}");
        assert!(cells[3].starts_with("FAIL: delivered"), "{row}");
        assert!(cells[2].contains("source masqueraded"), "{row}");
        assert!(cells[3].contains("source preserved"), "{row}");
    }
    let html = document::render(Format::Html, &results(&runs, &[]));
    assert!(html.contains("Differences between proxiers"), "{html}");
    xmllint(&["--noout"], &html, "two-proxiers.html").unwrap();

    let alone = document::render(
        Format::Markdown,
        &results(std::slice::from_ref(&r.intact), &[]),
    );
    assert!(!alone.contains("Differences between proxiers"), "{alone}");
}

/// Pixels of `png` exactly of colour `rgb`, as Chromium drew them.
fn pixels_of(png: &Path, rgb: [u8; 3]) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("a screenshot in {other:?}"),
    };
    buf[..info.buffer_size()]
        .chunks(step)
        .filter(|p| p[..3] == rgb)
        .count()
}

/// `html` as headless Chromium (Debian's `chromium`, ci/deps.tsv) draws it, as a PNG in `dir`.
fn screenshot(dir: &Path, name: &str, html: &str) -> PathBuf {
    let page = dir.join(format!("{name}.html"));
    let png = dir.join(format!("{name}.png"));
    std::fs::write(&page, html).unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1300,3000",
            &format!("--screenshot={}", png.display()),
            &format!("file://{}", page.display()),
        ])
        .env("HOME", dir)
        .output()
        .expect("chromium runs (ci/install-deps.sh installs it)");
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    png
}

/// The report draws the traced path of a failing probe, node by node, with the hop where it
/// went wrong marked, and a real browser shows it: the broken proxier (its MASQUERADE rule
/// removed) is traced again, the hop marked is the request's last nat POSTROUTING on the node
/// it entered (where the masquerade was missing), and headless Chromium draws the marked box in
/// its red; the same report without the trace has no pixel of that red. Markdown carries it as
/// a Mermaid flowchart.
#[test]
fn the_report_draws_the_failing_path_with_the_wrong_hop_marked_in_a_browser() {
    let scenario = kpct::load(Path::new(SCENARIO)).unwrap();
    let broken = Mutated {
        name: BROKEN,
        inner: "kube-proxy-iptables",
        mutate: drop_postrouting_masquerade,
    };
    let mut r = results(&[real().broken.clone()], &[]);
    let jobs = [kpct::operations::parallel::Job {
        scenario: &scenario,
        proxier: &broken,
    }];
    let mut told = Vec::new();
    r.traced = tokio::runtime::Runtime::new().unwrap().block_on(
        kpct::operations::suite::traced::trace_failures(
            &r,
            &jobs,
            3,
            probe_timeout(),
            |s, p, probe| told.push(format!("{s} × {p}: {probe}")),
        ),
    );
    assert_eq!(
        told,
        [format!(
            "nodeport-external-each-node × {BROKEN}: external-to-node-a-nodeport"
        )],
        "the first failing probe of the one failing run"
    );
    let picture = r.traced[0]
        .picture
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    let mark = picture.mark.as_ref().expect("a hop is marked");
    let lane = &picture.lanes[mark.lane];
    let hop = &lane.packets[mark.packet].hops[mark.hop];
    assert_eq!(lane.node, "node-a", "{picture:#?}");
    assert!(hop.ends_with(":POSTROUTING"), "{hop}: {picture:#?}");
    assert!(mark.why.contains("source as it was"), "{mark:?}");
    assert!(
        lane.packets[0].hops.iter().any(|h| h.contains("[DNAT")),
        "the NodePort's DNAT is drawn on the way: {picture:#?}"
    );

    let md = document::render(Format::Markdown, &r);
    assert!(md.contains("```mermaid\nflowchart TB\n"), "{md}");
    assert!(md.contains("stroke:#d00000"), "{md}");
    let html = document::render(Format::Html, &r);
    xmllint(&["--noout"], &html, "report.html").unwrap();

    let dir = std::env::temp_dir().join(format!(
        "{}picture",
        kpct::netns::naming::RunPrefix::next().as_str()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let red = [0xd0, 0x00, 0x00];
    assert_eq!(kpct::report::picture::MARK_STROKE, "#d00000");
    let drawn = pixels_of(&screenshot(&dir, "with-picture", &html), red);
    r.traced.clear();
    let without = pixels_of(
        &screenshot(&dir, "without", &document::render(Format::Html, &r)),
        red,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(without, 0, "nothing else in the report is that red");
    // The marked box is 290 × 24 px or more, outlined 3 px wide: well over a thousand pixels.
    assert!(drawn > 1000, "{drawn} pixels of the mark's red were drawn");
}

/// Runs handed to a kpct in the VM come back in wire form and join the table: each renders
/// exactly as the run made here, in every output, with the fields the documents leave out
/// (each shot's source port, which the table folds into `:*`) carried along, and those fields
/// still left out of the documents.
#[test]
fn runs_carried_in_wire_form_render_as_the_runs_made_here() {
    let r = real();
    let runs = [r.intact.clone(), r.broken.clone()];
    let errors = [r.error.clone()];
    let text = kpct::report::wire::write(&runs, &errors, &[]).unwrap();
    let back = kpct::report::wire::read(&text).unwrap();
    let (here, carried) = (results(&runs, &errors), results(&back.runs, &back.errors));
    let style = kpct::report::Style {
        colour: false,
        width: 120,
    };
    assert_eq!(
        kpct::report::table(&carried, style),
        kpct::report::table(&here, style)
    );
    assert_eq!(
        kpct::report::json::json(&carried).unwrap(),
        kpct::report::json::json(&here).unwrap()
    );
    assert_eq!(kpct::report::junit(&carried), kpct::report::junit(&here));
    for format in [Format::Markdown, Format::Html] {
        assert_eq!(
            document::render(format, &carried),
            document::render(format, &here)
        );
    }
    let shot = |run: &ScenarioRun| run.observation.probes[0].all[0].clone();
    assert_ne!(shot(&runs[1]).sport, 0);
    assert_eq!(shot(&back.runs[1]), shot(&runs[1]));
    let yaml = back.runs[1].observation.to_yaml().unwrap();
    assert!(!yaml.contains("sport"), "{yaml}");
    assert_eq!(yaml, runs[1].observation.to_yaml().unwrap());
    assert!(
        kpct::report::wire::read(&text.replace("kpct-wire/1", "kpct-wire/0"))
            .unwrap_err()
            .to_string()
            .contains("this kpct reads kpct-wire/1"),
        "another kpct's form is refused"
    );
}
