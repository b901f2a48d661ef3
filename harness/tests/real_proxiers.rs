//! Real proxier processes (`kube-proxy:MODE…`): confined to their node, gone with kpct.

mod common;

use common::processes::{descendants, wait_for_descendants, Watched};
use common::{kube_proxy_binary, library_scenario as scenario};
use kpct::drivers::real::process::ProxierProcess;
use kpct::netns::naming::RunPrefix;
use kpct::netns::{install_signal_cleanup, Netns};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn netns(role: &str) -> Netns {
    install_signal_cleanup();
    let ns = Netns::create(&format!("{}{role}", RunPrefix::next().as_str())).expect("namespace");
    ns.exec("ip", &["link", "set", "lo", "up"]).expect("lo up");
    ns
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kpct-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// A proxier that exits at once is seen exited only with its last words read: the exit and
/// the output come from different threads, and an error quoting the log must quote the line
/// that explains the exit (seen under load: "exited (exit status: 3) …; its log ends:" with
/// nothing after it).
#[test]
#[serial_test::serial(real_proxier_processes)]
fn an_exit_is_seen_with_the_last_words() {
    let ns = netns("real-last-words");
    let dir = scratch_dir("real-last-words");
    // 60 KiB of log first, almost a pipe's buffer, so that much may still be unread at the exit.
    let crashing = script(
        &dir,
        "crashing",
        "#!/bin/sh\nhead -c 61440 /dev/zero | tr '\\0' '\\n' >&2\necho 'bad flag: boom' >&2\nexit 3\n",
    );
    for round in 0..100 {
        let process = ProxierProcess::start(
            &ns,
            "crashing",
            ns.scratch_dir().unwrap(),
            &crashing,
            &[],
            &[],
        )
        .unwrap();
        // Woken the moment the exit is known, as the sync waits are.
        let status = process.wait_exit(Duration::from_secs(30));
        assert_eq!(status.and_then(|s| s.code()), Some(3));
        assert_eq!(process.log_tail(1), "bad flag: boom", "round {round}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A proxier process sees its node and nothing else: no other namespace to enter (through
/// `/run/netns` or its parent's `/proc/PID/ns/net`), the host's files read-only (here a file
/// kpct can write, which it cannot), a sysfs of its own node's namespace only (it lists the
/// node's links, and cannot change a device through it), `/proc/sys` read-only but for its
/// node's `net.*`, no SYS_ADMIN, SYS_MODULE or SYS_PTRACE; it still writes its own sysctls.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn a_real_proxier_process_cannot_leave_its_node() {
    let ns = netns("real-confined");
    let other = netns("real-confined-other");
    ns.exec("ip", &["link", "add", "kpct-own0", "type", "bridge"])
        .unwrap();
    let dir = scratch_dir("real-confined");
    let host_file = dir.join("host-file");
    std::fs::write(&host_file, "kpct's\n").unwrap();
    let probe = script(
        &dir,
        "escape.sh",
        &format!(
            r#"#!/bin/sh
try() {{ if "$@" >/dev/null 2>&1; then echo "ESCAPED: $*"; else echo "refused: $*"; fi; }}
try nsenter --net=/proc/$PPID/ns/net true
try nsenter --net=/run/netns/{other} true
try test -e /run/netns/{other}
try sh -c 'echo proxier >> {host_file}'
try touch {dir}/new-file
try sh -c 'echo 1280 > /sys/class/net/kpct-own0/mtu'
try sh -c 'echo kpct > /sys/class/net/kpct-own0/ifalias'
v=$(cat /proc/sys/vm/swappiness); try sh -c "echo $v > /proc/sys/vm/swappiness"
try python3 -c 'import sys; e=int(open("/proc/self/status").read().split("CapEff:")[1].split()[0],16); sys.exit(not e & (1<<16 | 1<<21 | 1<<19))'
echo "links in sysfs: $(ls /sys/class/net | sort | tr '\n' ' ')"
echo "net namespaces seen: $(for p in /proc/[0-9]*; do readlink $p/ns/net; done | sort -u | tr '\n' ' ')"
echo 1 > /proc/sys/net/ipv4/ip_forward && echo "own sysctl: written"
echo proxier > "$KPCT_SCRATCH/own" && echo "scratch: written"
"#,
            other = other.name(),
            host_file = host_file.display(),
            dir = dir.display(),
        ),
    );
    let process = ProxierProcess::start(
        &ns,
        "probe on node-a",
        ns.scratch_dir().unwrap(),
        &probe,
        &[],
        &[],
    )
    .unwrap();
    let status = process.wait_exit(Duration::from_secs(30));
    let text = process.log_tail(100);
    let host_after = std::fs::read_to_string(&host_file).unwrap();
    let created = dir.join("new-file").exists();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{text}");
    assert!(!text.contains("ESCAPED"), "{text}");
    assert_eq!(text.matches("refused: ").count(), 9, "{text}");
    assert_eq!(host_after, "kpct's\n", "{text}");
    assert!(!created, "{text}");
    assert!(text.contains("links in sysfs: kpct-own0 lo \n"), "{text}");
    let own = std::fs::metadata(ns.path()).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert!(
        text.contains(&format!("net namespaces seen: net:[{}] \n", own.unwrap())),
        "every process it sees is in its node's namespace: {text}"
    );
    assert!(text.contains("own sysctl: written"), "{text}");
    assert!(text.contains("scratch: written"), "{text}");
    assert_eq!(ns.get_sysctl("net.ipv4.ip_forward").unwrap(), "1");
}

/// The process that holds a proxier in [`a_real_proxier_dies_with_kpct_even_by_sigkill`]: it
/// starts one (a `sleep` that forks a grandchild), prints the pids, and waits to be killed.
#[test]
fn holder_of_a_real_proxier() {
    let Ok(marker) = std::env::var(common::processes::HOLDER_VARIABLE) else {
        return;
    };
    let ns = netns("real-holder");
    let dir = scratch_dir(&format!("holder-{marker}"));
    let proxier = script(
        &dir,
        "proxier.sh",
        "#!/bin/sh\nsleep 3600 &\necho \"child $!\"\nexec sleep 3601\n",
    );
    let process =
        ProxierProcess::start(&ns, "holder", ns.scratch_dir().unwrap(), &proxier, &[], &[])
            .unwrap();
    loop {
        let log = process.log_tail(10);
        if log.contains("child") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("ready");
    // Until killed.
    loop {
        std::thread::park();
    }
}

/// SIGKILL kpct (here a test process holding a proxier) and every process of the proxier
/// goes too, the ones it started included: nothing holds the node's namespace after it.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn a_real_proxier_dies_with_kpct_even_by_sigkill() {
    let (mut holder, marker) = common::processes::start_holder("holder_of_a_real_proxier");
    let holder_pid = holder.id();
    // Every process of the proxier: the sleeps, found by their arguments and their ancestry.
    let sleeps = wait_for_descendants(holder_pid, "sleep 360", 2);
    let watched = Watched::new(&sleeps);
    holder.kill().unwrap();
    holder.wait().unwrap();
    watched.assert_all_end_within(Duration::from_secs(10), "the proxier");
    // The holder's namespaces, left by its SIGKILL, for `kpct cleanup`: nothing holds them.
    let prefix = kpct::netns::naming::owner_prefix(holder_pid);
    let left: Vec<String> = kpct::netns::leftovers(false)
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(&prefix) || n.contains(&format!("{holder_pid}_")))
        .collect();
    kpct::netns::remove_leftovers(&left);
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("kpct-test-{holder_pid}-holder-{marker}")),
    );
}

fn real(mode: &str, binary: &Path, timeout: Duration) -> kpct::drivers::real::RealProxier {
    let mut p = kpct::ProxierSpec::parse_as::<kpct::drivers::RealProxier>(&format!(
        "kube-proxy:{mode}:{}",
        binary.display()
    ))
    .unwrap();
    p.timeout = timeout;
    p
}

fn run(
    s: &kpct::Scenario,
    p: &kpct::drivers::real::RealProxier,
) -> anyhow::Result<kpct::ScenarioRun> {
    install_signal_cleanup();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(kpct::run_scenario(s, p, kpct::probe::probe_timeout()))
}

/// Nothing of this test process's runs is left: no namespace, no proxier process.
fn nothing_left() {
    let mine = kpct::netns::naming::owner_prefix(std::process::id());
    let namespaces: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&mine))
        .collect();
    assert!(namespaces.is_empty(), "left: {namespaces:?}");
    let processes: Vec<u32> = descendants(std::process::id());
    assert!(processes.is_empty(), "left running: {processes:?}");
}

/// A proxier that exits at start, one that never serves its metrics, and one that hangs on
/// SIGTERM: each run ends in bounded time in an error that names the node and quotes the
/// proxier's words, and leaves nothing behind.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn a_failing_real_proxier_is_a_clear_error_and_leaves_nothing() {
    let dir = scratch_dir("failing-real");
    let s = scenario("clusterip-cross-node.yaml");

    let crashing = script(
        &dir,
        "crashing",
        "#!/bin/sh\necho 'bad flag: boom' >&2\nexit 3\n",
    );
    let started = std::time::Instant::now();
    let err = run(&s, &real("nftables", &crashing, Duration::from_secs(20))).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("kube-proxy on node-a exited (exit status: 3)")
            && text.contains("bad flag: boom"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    nothing_left();

    let silent = script(
        &dir,
        "silent",
        "#!/bin/sh\necho 'waiting forever'\nexec sleep 3600\n",
    );
    let started = std::time::Instant::now();
    let err = run(&s, &real("nftables", &silent, Duration::from_secs(3))).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("kube-proxy on node-a did not complete its first sync within 3 s")
            && text.contains("never answered")
            && text.contains("waiting forever"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    nothing_left();

    // Takes SIGTERM and goes on (its kube-proxy keeps running), as a proxier stuck in its
    // shutdown would: the restart step must end it.
    let stubborn = script(
        &dir,
        "stubborn",
        &format!(
            "#!/bin/sh\ntrap 'echo ignoring TERM' TERM\n{} \"$@\" &\nwhile :; do wait $!; done\n",
            kube_proxy_binary().display()
        ),
    );
    let err = run(
        &scenario("transition-proxier-restart.yaml"),
        &real("nftables", &stubborn, Duration::from_secs(60)),
    )
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("did not exit within 10 s of SIGTERM; killed"),
        "{text}"
    );
    nothing_left();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A real kube-proxy killed between two syncs fails the next step with its exit and its log.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn a_real_proxier_that_dies_mid_run_fails_the_step() {
    let s = scenario("transition-scale-down-up.yaml");
    let proxier = real("nftables", &kube_proxy_binary(), Duration::from_secs(60));
    install_signal_cleanup();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let err = runtime.block_on(async {
        let mut staged = kpct::run::stage(&s, &proxier).await.unwrap();
        let victim = descendants(std::process::id())
            .into_iter()
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("--config=") && c.contains("/node-b/"))
            })
            .expect("kube-proxy of node-b runs");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        staged.advance(&s, 0).await.err()
    });
    let text = format!("{:#}", err.expect("the step fails"));
    assert!(
        text.contains("kube-proxy on node-b exited (signal: 9")
            && text.contains("SyncProxyRules complete"),
        "{text}"
    );
    nothing_left();
}

/// A kube-proxy configured with the wrong cluster CIDR takes pods for outsiders and
/// masquerades their traffic to a ClusterIP: the scenario's `source: preserved` catches it.
/// (The same binary configured from the scenario passes it in `real_scenarios`.)
#[test]
#[serial_test::serial(real_proxier_processes)]
fn a_real_proxier_with_the_wrong_cluster_cidr_fails_the_source_expectation() {
    let s = scenario("clusterip-cross-node.yaml");
    for mode in ["nftables", "iptables"] {
        let mut broken = real(mode, &kube_proxy_binary(), Duration::from_secs(60));
        broken.config_patch = Some(serde_json::json!({"clusterCIDR": "10.250.0.0/16"}));
        let run_broken = run(&s, &broken).unwrap();
        assert!(
            run_broken
                .violations
                .iter()
                .any(|v| v.contains("expected source preserved")),
            "{mode}: {:#?}",
            run_broken.violations
        );
    }
    nothing_left();
}
