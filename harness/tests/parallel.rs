//! Runs on several workers (`kpct run -j N`, [`kpct::operations::parallel`]) must report exactly what one
//! run at a time reports: the same observation documents byte for byte, and the same table,
//! JUnit, JSON and report once the clock readings (the only thing allowed to differ) are
//! zeroed. Real runs in namespaces, with kube-proxy-iptables so they run natively, a broken
//! proxier (failing probes, evidence read from the kernel) and one that cannot program (an
//! errored run).

mod common;

use common::{drop_postrouting_masquerade, kpct, Mutated};
use kpct::operations::parallel::{run_jobs, After, Event, Job};
use kpct::probe::probe_timeout;
use kpct::programming::Programming;
use kpct::provenance::Environment;
use kpct::proxier::{builtin, Proxier};
use kpct::report::document::{self, Format};
use kpct::report::{Results, Style};
use kpct::run::{NodeProgrammer, Timing};
use kpct::Scenario;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Drops, UDP, affinity, random choice, node and external sources, health checks, hairpin.
const SET: &[&str] = &[
    "clusterip-cross-node",
    "clusterip-udp",
    "clusterip-from-node",
    "externalip-basic",
    "nodeport-external-each-node",
    "session-affinity-clientip",
    "loadbalancer-etp-local",
    "hairpin-nodeport",
];

fn scenario_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{name}.yaml"))
}

fn scenarios(names: &[&str]) -> Vec<Scenario> {
    names
        .iter()
        .map(|n| kpct::load(&scenario_file(n)).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

fn refuse(_: &mut Programming) -> anyhow::Result<()> {
    anyhow::bail!("refusing to program")
}

fn proxiers() -> Vec<Box<dyn Proxier>> {
    vec![
        builtin("kube-proxy-iptables").unwrap(),
        Box::new(Mutated {
            name: "kube-proxy-iptables-without-masquerade",
            inner: "kube-proxy-iptables",
            mutate: drop_postrouting_masquerade,
        }),
        Box::new(Mutated {
            name: "kube-proxy-iptables-refusing",
            inner: "kube-proxy-iptables",
            mutate: refuse,
        }),
    ]
}

fn jobs<'a>(scenarios: &'a [Scenario], proxiers: &'a [Box<dyn Proxier>]) -> Vec<Job<'a>> {
    scenarios
        .iter()
        .flat_map(|scenario| {
            proxiers.iter().map(move |p| Job {
                scenario,
                proxier: p as &dyn NodeProgrammer,
            })
        })
        .collect()
}

/// Every output of a run of `jobs` on `workers`, clock readings zeroed.
struct Outputs {
    observations: Vec<String>,
    table: String,
    junit: String,
    json: String,
    report: String,
}

fn run_on(jobs: &[Job], workers: usize) -> Outputs {
    let finished = run_jobs(jobs, workers, probe_timeout(), &mut |_| After::Continue).unwrap();
    let indices: Vec<usize> = finished.iter().map(|f| f.index).collect();
    assert_eq!(indices, (0..jobs.len()).collect::<Vec<_>>(), "in job order");
    let mut results = Results::new(Vec::new(), Vec::new(), Environment::detect());
    kpct::operations::parallel::record(&mut results, jobs, finished);
    assert!(
        !results.errors.is_empty() && results.runs.iter().any(|r| !r.violations.is_empty()),
        "the set holds failing and errored runs"
    );
    // The clock: the one thing a parallel run may read differently.
    results.started = SystemTime::UNIX_EPOCH;
    results.elapsed = Duration::ZERO;
    for run in &mut results.runs {
        let probes = run.timing.probes.len();
        run.timing = Timing {
            probes: vec![Duration::ZERO; probes],
            ..Timing::default()
        };
    }
    for e in &mut results.errors {
        e.elapsed = Duration::ZERO;
    }
    Outputs {
        observations: results
            .runs
            .iter()
            .map(|r| r.observation.to_yaml().unwrap())
            .collect(),
        table: kpct::report::table(&results, Style::plain()),
        junit: without_counters(&kpct::report::junit(&results)),
        json: without_counters(&kpct::report::json::json(&results).unwrap()),
        report: without_counters(&document::render(Format::Markdown, &results)),
    }
}

/// Packet counters of the excerpted rules (in the report and JUnit's failure texts) count
/// stragglers too (a late RST may cross the overlay before or after the next probe's conntrack
/// flush) and differ between serial runs as well; they are the one part of the evidence that
/// is not a function of the scenario.
fn without_counters(report: &str) -> String {
    let mut out = String::new();
    let mut rest = report;
    while let Some(open) = rest.find('[') {
        let (head, tail) = rest.split_at(open);
        out.push_str(head);
        match tail.find(']') {
            Some(close)
                if tail[1..close].split(':').count() == 2
                    && tail[1..close]
                        .split(':')
                        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
            {
                out.push_str("[packets:bytes]");
                rest = &tail[close + 1..];
            }
            _ => {
                out.push('[');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Equal, or a failure showing where they differ.
fn same(what: &str, serial: &str, parallel: &str) {
    if serial != parallel {
        let diff = similar::TextDiff::from_lines(serial, parallel)
            .unified_diff()
            .context_radius(2)
            .header("-j 1", "-j 4")
            .to_string();
        panic!("the {what} differs between -j 1 and -j 4:\n{diff}");
    }
}

#[test]
fn four_workers_report_what_one_worker_reports() {
    let (scenarios, proxiers) = (scenarios(SET), proxiers());
    let jobs = jobs(&scenarios, &proxiers);
    let serial = run_on(&jobs, 1);
    let parallel = run_on(&jobs, 4);
    assert_eq!(serial.observations.len(), parallel.observations.len());
    for (a, b) in serial.observations.iter().zip(&parallel.observations) {
        assert_eq!(
            a, b,
            "an observation document differs between -j 1 and -j 4"
        );
    }
    same("table", &serial.table, &parallel.table);
    same("JUnit", &serial.junit, &parallel.junit);
    same("JSON", &serial.json, &parallel.json);
    same("report", &serial.report, &parallel.report);
    assert!(
        serial.report.contains("KUBE-POSTROUTING"),
        "{}",
        serial.report
    );
}

#[test]
fn a_stopped_parallel_run_reports_what_a_stopped_serial_run_does() {
    // The masquerade-less proxier fails externalip-basic (job 3) at the latest; fail-fast
    // stops at its first failure, whichever later jobs had already finished.
    let set = [
        "clusterip-cross-node",
        "externalip-basic",
        "clusterip-udp",
        "clusterip-from-node",
    ];
    let (scenarios, proxiers) = (scenarios(&set), proxiers());
    let proxiers = &proxiers[..2];
    let jobs = jobs(&scenarios, proxiers);
    for workers in [1, 4] {
        let mut started = Vec::new();
        let finished = run_jobs(&jobs, workers, probe_timeout(), &mut |event| match event {
            Event::Started(i) => {
                started.push(i);
                After::Continue
            }
            Event::Finished(f) => match &f.outcome {
                Ok(run) if run.violations.is_empty() => After::Continue,
                _ => After::StopAfterThis,
            },
        })
        .unwrap();
        let indices: Vec<usize> = finished.iter().map(|f| f.index).collect();
        let first_failing = finished
            .iter()
            .position(|f| {
                f.outcome
                    .as_ref()
                    .map_or(true, |r| !r.violations.is_empty())
            })
            .expect("a run failed");
        assert_eq!(
            indices,
            (0..=first_failing).collect::<Vec<_>>(),
            "-j {workers}"
        );
        assert!(first_failing < jobs.len() - 1, "something was left to stop");
        assert!(
            started.len() < jobs.len() || workers > 1,
            "-j 1 started {started:?}"
        );
    }
}

#[test]
fn a_soak_on_four_workers_has_no_divergent_run() {
    let scenarios = scenarios(&["externalip-basic", "clusterip-cross-node"]);
    let proxier = builtin("kube-proxy-iptables").unwrap();
    let mut heard = Vec::new();
    let report = kpct::operations::soak::soak(
        &scenarios,
        &proxier,
        4,
        4,
        probe_timeout(),
        &mut |ended, total| heard.push((ended, total)),
    )
    .unwrap();
    println!("{}", report.render(&proxier.name(), ""));
    assert_eq!((report.runs(), report.divergent()), (8, 0));
    assert!(report.scenarios.iter().all(|s| s.identical == 4));
    assert_eq!(heard.last(), Some(&(8, 8)), "progress heard every run");
}

/// Calls of [`alternating_masquerade`] so far.
static PROGRAMMINGS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A proxier made nondeterministic: the nodes of every other run (two programmings per run of
/// a two-node scenario without steps, at -j 1) lack the service MASQUERADE rule, so a run's
/// observations depend on how many ran before it.
fn alternating_masquerade(p: &mut kpct::programming::Programming) -> anyhow::Result<()> {
    if PROGRAMMINGS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) / 2 % 2 == 1 {
        common::drop_postrouting_masquerade(p)?;
    }
    Ok(())
}

/// A soak finds a proxier whose observations change from pass to pass, and says which
/// scenario and pass, with the difference.
#[test]
fn a_soak_finds_a_nondeterministic_proxier() {
    let scenarios = scenarios(&["nodeport-external-each-node"]);
    let proxier = common::Mutated {
        name: "kube-proxy-iptables",
        inner: "kube-proxy-iptables",
        mutate: alternating_masquerade,
    };
    let report =
        kpct::operations::soak::soak(&scenarios, &proxier, 4, 1, probe_timeout(), &mut |_, _| {})
            .unwrap();
    let text = report.render("alternating", "");
    assert!(report.divergent() > 0, "{text}");
    assert!(
        text.contains("nodeport-external-each-node:\n--- pass 1\n+++ pass 2"),
        "{text}"
    );
    assert!(text.contains("masqueraded"), "{text}");
}

#[test]
fn kpct_run_writes_the_same_observation_files_at_any_j() {
    let dir = std::env::temp_dir().join(format!("kpct-parallel-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut listings = Vec::new();
    for j in ["1", "4"] {
        let out = dir.join(format!("j{j}"));
        let mut args = vec!["run", "--proxier", "kube-proxy-iptables", "-j", j];
        let files: Vec<String> = SET[..4]
            .iter()
            .map(|n| scenario_file(n).display().to_string())
            .collect();
        for f in &files {
            args.extend(["--scenario", f.as_str()]);
        }
        let out_arg = out.display().to_string();
        args.extend(["--observations", out_arg.as_str()]);
        let run = kpct(&args);
        assert!(
            run.status.success(),
            "kpct run -j {j}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        assert_eq!(files.len(), 4, "-j {j}");
        listings.push(files);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        listings[0] == listings[1],
        "-j 1 and -j 4 wrote different files"
    );
}

/// `(classname, name)` of every testcase of a JUnit document.
fn testcases(junit: &str) -> Vec<(String, String)> {
    let attribute = |tag: &str, name: &str| {
        let tag = format!(" {tag}");
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[start..].split('"').next()?.to_string())
    };
    junit
        .split("<testcase ")
        .skip(1)
        .map(|tag| {
            (
                attribute(tag, "classname").expect("a classname"),
                attribute(tag, "name").expect("a name"),
            )
        })
        .collect()
}

#[test]
fn shards_of_a_run_hold_every_testcase_exactly_once() {
    let dir = std::env::temp_dir().join(format!("kpct-shard-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<String> = SET[..3]
        .iter()
        .map(|n| scenario_file(n).display().to_string())
        .collect();
    let junit_of = |shard: Option<&str>| {
        let path = dir.join(format!(
            "junit-{}.xml",
            shard.unwrap_or("all").replace('/', "of")
        ));
        let path_arg = path.display().to_string();
        let mut args = vec![
            "run",
            "--proxier",
            "kube-proxy-iptables",
            "--junit",
            &path_arg,
        ];
        for f in &files {
            args.extend(["--scenario", f.as_str()]);
        }
        if let Some(s) = shard {
            args.extend(["--shard", s]);
        }
        let run = kpct(&args);
        assert!(
            run.status.success(),
            "kpct run --shard {shard:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        testcases(&std::fs::read_to_string(&path).unwrap())
    };
    let all = junit_of(None);
    let (first, second) = (junit_of(Some("1/2")), junit_of(Some("2/2")));
    let _ = std::fs::remove_dir_all(&dir);
    // Round robin over the 3 runs in the table's order (by file name): the first shard has runs
    // 1 and 3, the second run 2.
    let mut order = SET[..3].to_vec();
    order.sort();
    let scenario_of = |cases: &[(String, String)]| {
        let mut s: Vec<String> = cases.iter().map(|(class, _)| class.clone()).collect();
        s.dedup();
        s
    };
    assert_eq!(
        scenario_of(&first),
        [
            format!("kpct.kube-proxy-iptables.{}", order[0]),
            format!("kpct.kube-proxy-iptables.{}", order[2])
        ]
    );
    assert_eq!(
        scenario_of(&second),
        [format!("kpct.kube-proxy-iptables.{}", order[1])]
    );
    let mut merged: Vec<_> = first.into_iter().chain(second).collect();
    let mut all_sorted = all.clone();
    merged.sort();
    all_sorted.sort();
    assert_eq!(merged, all_sorted, "the shards together are the whole run");
    assert!(!all.is_empty());

    let bad = kpct(&["run", "--proxier", "kube-proxy-iptables", "--shard", "3/2"]);
    assert_eq!(bad.status.code(), Some(2), "a bad shard is a usage error");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("a shard is K/N with 1 ≤ K ≤ N"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
