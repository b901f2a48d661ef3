//! kpct killed at any point leaves the host as it found it. Each command (`run` with a
//! built-in, an `exec:` proxier and a real kube-proxy, `lab up`, `trace`, `soak`) is run once whole, to learn
//! how long it takes, then started again and signalled at points spread over that time, chosen
//! by a seed the test prints (`KPCT_KILL_SEED=N` repeats a sequence, `KPCT_KILL_POINTS=N` sets
//! the points per signal and command, default 1). The signals take turns:
//! - SIGKILL: every process of the run must end by itself (parent-death signals), and
//!   `kpct cleanup` must find no process to kill and remove every namespace the run left;
//! - SIGTERM and SIGINT: kpct cleans up by itself, nothing is left without `kpct cleanup`.
//!
//! After each, the root namespace is compared with a snapshot taken before: links, addresses,
//! routes, iptables and ip6tables in both backends, nftables, ipsets, IPVS and the sysctls
//! under net; and no scratch directory of the run (a real proxier's files) may be left.

mod common;

use common::processes::{descendants, Watched};
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What can be seen of the root namespace, by aspect, with what changes by itself taken out
/// (counters, address lifetimes, save dates).
fn root_state() -> BTreeMap<String, String> {
    let run = |program: &str, args: &[&str]| -> String {
        match Command::new(program).args(args).output() {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("cannot run {program}: {e}"),
        }
    };
    let counters = regex::Regex::new(r"\[\d+:\d+\]|packets \d+ bytes \d+").unwrap();
    let lifetimes = regex::Regex::new(r"(valid|preferred)_lft \S+|expires \S+").unwrap();
    let stable = |text: String| -> String {
        let text = counters.replace_all(&text, "[counters]");
        let text = lifetimes.replace_all(&text, "");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut state = BTreeMap::new();
    let aspects: [(&str, &str, &[&str]); 12] = [
        ("links", "ip", &["-d", "-o", "link", "show"]),
        ("addresses", "ip", &["-o", "address", "show"]),
        ("routes", "ip", &["route", "show", "table", "all"]),
        ("routes6", "ip", &["-6", "route", "show", "table", "all"]),
        ("rules", "ip", &["rule", "show"]),
        ("iptables-legacy", "iptables-legacy-save", &[]),
        ("iptables-nft", "iptables-nft-save", &[]),
        ("ip6tables-legacy", "ip6tables-legacy-save", &[]),
        ("ip6tables-nft", "ip6tables-nft-save", &[]),
        ("nftables", "nft", &["list", "ruleset"]),
        ("ipsets", "ipset", &["save"]),
        ("ipvs", "ipvsadm", &["-Sn"]),
    ];
    for (name, program, args) in aspects {
        state.insert(name.to_string(), stable(run(program, args)));
    }
    state.insert("sysctls".to_string(), net_sysctls());
    let mut netns: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    netns.sort();
    state.insert("netns".to_string(), netns.join("\n"));
    state
}

/// Every readable sysctl under /proc/sys/net, but those that count traffic.
fn net_sysctls() -> String {
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::from("/proc/sys/net")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if !path.ends_with("nf_conntrack_count") {
                if let Ok(value) = std::fs::read_to_string(&path) {
                    out.push(format!("{} = {}", path.display(), value.trim()));
                }
            }
        }
    }
    out.sort();
    out.join("\n")
}

/// The aspects that differ, each with its first differing lines.
fn differences(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> String {
    let mut out = Vec::new();
    for (aspect, was) in before {
        let now = after.get(aspect).map(String::as_str).unwrap_or_default();
        if was != now {
            let diff = similar_lines(was, now);
            out.push(format!("{aspect} changed:\n{diff}"));
        }
    }
    out.join("\n")
}

fn similar_lines(was: &str, now: &str) -> String {
    let was: std::collections::BTreeSet<&str> = was.lines().collect();
    let now: std::collections::BTreeSet<&str> = now.lines().collect();
    was.difference(&now)
        .map(|l| format!("  - {l}"))
        .chain(now.difference(&was).map(|l| format!("  + {l}")))
        .take(20)
        .collect::<Vec<_>>()
        .join("\n")
}

/// splitmix64: the kill points from the seed, the same on every machine.
struct Points(u64);

impl Points {
    fn next_fraction(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn seed() -> u64 {
    std::env::var("KPCT_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        })
}

fn points_per_signal() -> usize {
    std::env::var("KPCT_KILL_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One command to kill, and what to undo when it completed before its signal.
struct Case {
    name: &'static str,
    args: Vec<String>,
    /// A lab that came up whole is meant to stay: taken down for the next point.
    lab: Option<String>,
}

fn cases(lab_dir: &Path) -> Vec<Case> {
    let scenario = |name: &str| {
        repo()
            .join("scenarios")
            .join(format!("{name}.yaml"))
            .display()
            .to_string()
    };
    let exec = format!(
        "exec:python3 {} print",
        repo()
            .join("harness/tests/fixtures/exec/minimal_proxier.py")
            .display()
    );
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let transition = scenario("transition-scale-down-up");
    let cross = scenario("clusterip-cross-node");
    // The lab under a name of this test's own, so a lab of the user's is never touched.
    let lab = format!("hard-kill-{}", std::process::id());
    let lab_file = lab_dir.join(format!("{lab}.yaml"));
    let text = std::fs::read_to_string(&cross).unwrap();
    std::fs::write(
        &lab_file,
        text.replace(
            "\nname: clusterip-cross-node\n",
            &format!("\nname: {lab}\n"),
        ),
    )
    .unwrap();
    let lab_file = lab_file.display().to_string();
    let same = scenario("clusterip-same-node");
    vec![
        Case {
            name: "run (built-in, steps)",
            args: strings(&[
                "run",
                "--proxier",
                "kube-proxy-iptables",
                "--scenario",
                &transition,
            ]),
            lab: None,
        },
        Case {
            name: "run (exec:)",
            args: strings(&["run", "--proxier", &exec, "--scenario", &cross]),
            lab: None,
        },
        Case {
            name: "run (real kube-proxy)",
            args: strings(&[
                "run",
                "--proxier",
                &format!(
                    "kube-proxy:iptables:{}",
                    common::kube_proxy_binary().display()
                ),
                "--scenario",
                &cross,
            ]),
            lab: None,
        },
        Case {
            name: "lab up",
            args: strings(&["lab", "up", &lab_file, "--proxier", "kube-proxy-iptables"]),
            lab: Some(lab),
        },
        Case {
            name: "trace",
            args: strings(&[
                "trace",
                &cross,
                "pod-a-to-clusterip",
                "--proxier",
                "kube-proxy-iptables",
            ]),
            lab: None,
        },
        Case {
            name: "soak",
            args: strings(&[
                "soak",
                "--scenario",
                &same,
                "--proxier",
                "kube-proxy-iptables",
                "--runs",
                "3",
                "-j",
                "2",
            ]),
            lab: None,
        },
    ]
}

/// What the temp directory holds of kpct's (`kpct-*`).
fn kpct_temp_files() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kpct-"))
        .map(|e| e.path())
        .collect()
}

fn lab_down(name: &str) {
    if !kpct::operations::lab::existing(name).unwrap().is_empty() {
        kpct::operations::lab::down(name).unwrap();
    }
}

/// Starts the case's command, its stderr (the progress it reports) into `stderr`.
fn start(case: &Case, stderr: &Path) -> std::process::Child {
    common::kpct_command(&case.args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap()
}

/// How far the run had got: the namespaces it had made (none before the build, all of them
/// while it probes) and the processes it ran (proxiers, tools).
fn progress(prefixes: &[String], processes: usize) -> String {
    let made = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            prefixes.iter().any(|p| name.starts_with(p))
        })
        .count();
    format!("{made} namespace(s), {processes} process(es) under it")
}

#[test]
fn a_kill_at_any_point_leaves_the_host_as_it_was() {
    let seed = seed();
    let per_signal = points_per_signal();
    let mut points = Points(seed);
    let repeat = format!("KPCT_KILL_SEED={seed} KPCT_KILL_POINTS={per_signal}");
    eprintln!("kill points from seed {seed} (repeat with {repeat})");
    let dir = std::env::temp_dir().join(format!("kpct-hard-kills-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stderr = dir.join("stderr");
    // Taken after the first whole run: a kernel module the run loads (br_netfilter, the
    // conntrack helpers) adds its sysctls to the root namespace, once, and that is no leftover.
    let mut before: Option<BTreeMap<String, String>> = None;
    let mut failures = Vec::new();
    let mut log = Vec::new();
    for case in cases(&dir) {
        if let Some(lab) = &case.lab {
            lab_down(lab);
        }
        // Once whole: how long it takes, and that it works here at all.
        let started = Instant::now();
        let status = start(&case, &stderr).wait().unwrap();
        let whole = started.elapsed();
        assert!(
            status.success(),
            "{} failed unkilled ({status}): {}",
            case.name,
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        if let Some(lab) = &case.lab {
            lab_down(lab);
        }
        let before = before.get_or_insert_with(root_state);
        for round in 0..per_signal {
            for signal in [Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT] {
                let at = whole.mul_f64(points.next_fraction());
                let point = format!("{} {signal} at {at:.2?} of {whole:.2?}", case.name);
                let temp_before = kpct_temp_files();
                let mut child = start(&case, &stderr);
                let pid = child.id();
                std::thread::sleep(at);
                // The processes it has now, to see each end.
                let watched = Watched::new(&descendants(pid));
                let owner = format!("kpct-{pid}_");
                // A lab's namespaces take its name once it is whole.
                let lab_prefix = case.lab.as_ref().map(|lab| {
                    kpct::netns::naming::RunPrefix::lab(lab)
                        .as_str()
                        .to_string()
                });
                let prefixes: Vec<String> =
                    std::iter::once(owner.clone()).chain(lab_prefix).collect();
                let reached = progress(&prefixes, watched.len());
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
                let status = child.wait().unwrap();
                log.push(format!("{point} (round {round}), at {reached}: {status}"));
                if let Err(panic) = std::panic::catch_unwind(|| {
                    watched.assert_all_end_within(Duration::from_secs(10), "the run")
                }) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_else(|| "a process outlived kpct".to_string());
                    failures.push(format!("{point}: {message}"));
                }
                if signal == Signal::SIGKILL {
                    let out = common::kpct(&["cleanup"]);
                    let text = String::from_utf8_lossy(&out.stdout);
                    if text.contains("killed ") {
                        failures.push(format!(
                            "{point}: processes outlived kpct until cleanup: {text}"
                        ));
                    }
                } else if !(status.success()
                    || status.code() == Some(130)
                    // Before its first namespace kpct has no handler yet, nor anything to
                    // clean up: the signal's default action ends it (the checks below hold).
                    || std::os::unix::process::ExitStatusExt::signal(&status)
                        == Some(signal as i32))
                {
                    failures.push(format!("{point}: exit {status}, not 130"));
                }
                let left: Vec<String> = kpct::netns::leftovers(true)
                    .unwrap()
                    .into_iter()
                    .filter(|n| n.starts_with(&owner))
                    .collect();
                if !left.is_empty() {
                    failures.push(format!("{point}: namespaces left: {left:?}"));
                    kpct::netns::remove_leftovers(&left);
                }
                // A real proxier's configuration and kubeconfig, or any other file of kpct's.
                let files: Vec<PathBuf> = kpct_temp_files()
                    .difference(&temp_before)
                    .cloned()
                    .collect();
                if !files.is_empty() {
                    failures.push(format!("{point}: scratch directories left: {files:?}"));
                    for f in &files {
                        let _ = std::fs::remove_dir_all(f);
                    }
                }
                if let Some(lab) = &case.lab {
                    lab_down(lab);
                }
                let after = root_state();
                let diff = differences(before, &after);
                if !diff.is_empty() {
                    failures.push(format!("{point}: the root namespace changed: {diff}"));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{}", log.join("\n"));
    assert!(
        failures.is_empty(),
        "{} (repeat with {repeat}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
