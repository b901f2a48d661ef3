//! `exec:` and `replay:` proxiers against the real kernel (needs root; no IPVS).

mod common;

use kpct::drivers::exec::{input_for, ExecError, ExecOutcome, ExecProxier};
use kpct::drivers::replay::{self, Replay};
use kpct::netns::naming::RunPrefix;
use kpct::netns::{install_signal_cleanup, Netns};
use kpct::programming::{
    effective_state, Applier, ChainDecl, EffectiveState, IpSet, IpSetType, Programming,
    ReadOptions, Table, TableRules,
};
use kpct::proxier::kube_proxy_iptables::KubeProxyIptables;
use kpct::proxier::kube_proxy_nftables::KubeProxyNftables;
use kpct::scenario::cluster::{ClusterState, NodeContext};
use kpct::Proxier;
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn netns(role: &str) -> Netns {
    install_signal_cleanup();
    Netns::create(&format!("{}{role}", RunPrefix::next().as_str())).expect("create namespace")
}

fn applier() -> Applier {
    Applier::new(kpct::kernel_features::apply_options().expect("probe kernel capabilities"))
}

fn scenario() -> (ClusterState, NodeContext) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/clusterip-cross-node.yaml"
    );
    let s = kpct::load(std::path::Path::new(path)).expect("scenario loads");
    let node = kpct::scenario::node_context(&s, "node-a").expect("node-a");
    (kpct::scenario::cluster_state(&s), node)
}

fn exec(script: &str) -> ExecProxier {
    kpct::ProxierSpec::parse_as::<kpct::drivers::ExecProxier>(&format!(
        "exec:{FIXTURES}/exec/{script}"
    ))
    .unwrap()
}

/// An `exec:` proxier running `text`, written as the executable `name` in `dir`.
fn script_proxier(dir: &Path, name: &str, text: &str) -> ExecProxier {
    let script = dir.join(name);
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    kpct::ProxierSpec::parse_as::<kpct::drivers::ExecProxier>(&format!("exec:{}", script.display()))
        .unwrap()
}

/// Runs `s` against `proxier`, which must complete.
fn run_with(s: &kpct::Scenario, proxier: &ExecProxier) -> kpct::ScenarioRun {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(kpct::run_scenario(s, proxier, kpct::probe::probe_timeout()))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn read(ns: &Netns, opts: &ReadOptions) -> EffectiveState {
    effective_state(ns, opts).expect("read effective state")
}

/// What tests/fixtures/exec/minimal_proxier.py computes, built here independently.
fn minimal_proxier(cluster: &ClusterState, node: &NodeContext) -> Programming {
    let mut p = Programming::default();
    p.sysctls
        .insert("net.ipv4.conf.all.route_localnet".into(), "1".into());
    let mut cluster_ips = Vec::new();
    let mut dnat = Vec::new();
    for sp in &cluster.service_ports {
        let Some(std::net::IpAddr::V4(cip)) = sp.cluster_ip else {
            continue;
        };
        let proto = sp.protocol.lower();
        let bound = p.ipvs_addresses.get_or_insert_with(Vec::new);
        if !bound.contains(&cip.into()) {
            bound.push(cip.into());
        }
        cluster_ips.push(format!("{cip},{proto}:{}", sp.port));
        let ready: Vec<_> = sp.endpoints.iter().filter(|e| e.ready).collect();
        for (i, ep) in ready.iter().enumerate() {
            let left = ready.len() - i;
            let stat = if left == 1 {
                String::new()
            } else {
                format!(
                    " -m statistic --mode random --probability {:.11}",
                    1.0 / left as f64
                )
            };
            dnat.push(format!(
                "-A KPCT-SERVICES -d {cip}/32 -p {proto} -m {proto} --dport {}{stat} -j DNAT --to-destination {}:{}",
                sp.port, ep.ip, ep.port
            ));
        }
    }
    let hash = |name: &str, set_type, entries: Vec<String>| IpSet {
        name: name.into(),
        set_type,
        create_options: "family inet hashsize 1024 maxelem 65536".into(),
        entries,
    };
    p.ipsets = vec![
        hash("KPCT-CLUSTER-IP", IpSetType::HashIpPort, cluster_ips),
        hash(
            "KPCT-NODE-ADDRS",
            IpSetType::HashIp,
            node.local_addresses.iter().map(|a| a.to_string()).collect(),
        ),
    ];
    let chain = |name: &str| ChainDecl {
        name: name.into(),
        policy: None,
    };
    let mut nat = vec![
        "-A PREROUTING -j KPCT-SERVICES".to_string(),
        "-A OUTPUT -j KPCT-SERVICES".into(),
        "-A KPCT-MARK-MASQ -j MARK --or-mark 0x4000".into(),
        format!(
            "-A KPCT-SERVICES -m set --match-set KPCT-CLUSTER-IP dst,dst ! -s {} -j KPCT-MARK-MASQ",
            cluster.cluster_cidr
        ),
    ];
    nat.extend(dnat);
    p.iptables.insert(
        Table::Nat,
        TableRules {
            chains: vec![chain("KPCT-SERVICES"), chain("KPCT-MARK-MASQ")],
            rules: nat,
        },
    );
    p.iptables.insert(
        Table::Filter,
        TableRules {
            chains: vec![chain("KPCT-FORWARD")],
            rules: vec![
                "-A FORWARD -j KPCT-FORWARD".into(),
                "-A KPCT-FORWARD -m set --match-set KPCT-NODE-ADDRS dst -j ACCEPT".into(),
            ],
        },
    );
    p
}

#[test]
fn exec_printed_and_self_programmed_match_a_direct_apply() {
    let (cluster, node) = scenario();
    let input = input_for(&cluster, &node);
    let expected = minimal_proxier(&cluster, &node);
    let opts = ReadOptions::for_programming(&expected);

    let direct = netns("direct");
    applier()
        .apply(&direct, "node-a", &expected, None)
        .expect("direct apply");
    let direct_state = read(&direct, &opts);
    assert_eq!(direct_state.diff_against(&expected), vec![]);

    let printed = netns("printed");
    let sync = exec("print-programming.sh")
        .sync_node(&printed, &input, &applier())
        .expect("exec sync");
    let ExecOutcome::Printed(parsed) = &sync.outcome else {
        panic!("the script printed a programming");
    };
    assert_eq!(
        parsed.programming, expected,
        "the script got the input and printed the same programming"
    );
    assert!(sync.applied.is_some());
    assert_eq!(sync.missing, vec![]);
    assert_eq!(read(&printed, &opts), direct_state);

    let itself = netns("itself");
    let sync = exec("self-program.sh")
        .sync_node(&itself, &input, &applier())
        .expect("exec sync");
    assert_eq!(sync.outcome, ExecOutcome::SelfProgrammed);
    assert!(sync.applied.is_none());
    assert_eq!(read(&itself, &opts), direct_state);
}

#[test]
fn exec_failures_name_the_node() {
    let (cluster, node) = scenario();
    let input = input_for(&cluster, &node);
    let ns = netns("execfail");
    let err = exec("fails.sh").run(&ns, &input).unwrap_err();
    assert!(matches!(err, ExecError::Failed { .. }), "{err}");
    let text = err.to_string();
    assert!(text.starts_with("node node-a: "), "{text}");
    assert!(text.contains("exit status: 3"), "{text}");
    assert!(
        text.contains("cannot reach the API server for node node-a"),
        "{text}"
    );

    let err = exec("prints-garbage.sh")
        .run(&ns, &input)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "prints-garbage.sh (stdout for node node-a):3: unknown ipset type `hash:nope`"
        ),
        "{err}"
    );

    let mut slow = ExecProxier::new("sleep", vec!["30".into()]);
    slow.timeout = std::time::Duration::from_millis(300);
    let err = slow.run(&ns, &input).unwrap_err();
    assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{}{name}", RunPrefix::next().as_str()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn replay_of_a_kube_proxy_iptables_node_reproduces_it() {
    let (cluster, node) = scenario();
    let p = KubeProxyIptables::default()
        .program(&cluster, &node)
        .expect("program");
    let live = netns("live");
    applier()
        .apply(&live, "node-a", &p, None)
        .expect("apply reference programming");
    // A capture records the proxier-relevant sysctls the kernel has, set or not.
    let opts = ReadOptions {
        sysctls: replay::KUBE_PROXY_SYSCTLS
            .iter()
            .filter(|k| live.get_sysctl(k).is_ok())
            .map(|k| k.to_string())
            .collect(),
        ..ReadOptions::default()
    };
    let live_state = read(&live, &opts);
    assert_eq!(live_state.diff_against(&p), vec![]);

    let dir = scratch_dir("replay");
    replay::capture(&live, "node-a", &dir, Default::default()).expect("capture");
    let fresh = netns("fresh");
    let (report, replayed) = Replay::new(&dir)
        .sync_node(&fresh, "node-a", &applier())
        .expect("replay");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(report.rules > 0, "{report}");
    assert_eq!(
        replayed, live_state,
        "replayed:\n{replayed}\nlive:\n{live_state}"
    );
}

/// A dual-stack iptables-mode node: its capture holds `ip6tables-save` beside `iptables-save`,
/// and the replay puts both back (the IPv6 proxier's rules in ip6tables only).
#[test]
fn replay_of_a_dual_stack_iptables_node_reproduces_both_families() {
    let s = kpct::load(Path::new("../scenarios/dual-stack-clusterip.yaml")).unwrap();
    let cluster = kpct::scenario::cluster_state(&s);
    let node = kpct::scenario::node_context(&s, "node-a").unwrap();
    let p = kpct::proxier::families::program_node(&KubeProxyIptables::default(), &cluster, &node)
        .expect("program");
    assert!(!p.ip6tables.is_empty(), "the IPv6 proxier writes ip6tables");
    let live = netns("live-dual");
    applier()
        .apply(&live, "node-a", &p, None)
        .expect("apply reference programming");
    let live_state = read(&live, &ReadOptions::for_programming(&p));
    assert_eq!(live_state.diff_against(&p), vec![]);
    assert!(!live_state.ip6tables.is_empty());

    let dir = scratch_dir("replay-dual");
    replay::capture(&live, "node-a", &dir, Default::default()).expect("capture");
    let saved = std::fs::read_to_string(dir.join("node-a").join(replay::IP6TABLES_FILE)).unwrap();
    assert!(saved.contains("fd00:10:96::a/128"), "{saved}");
    let fresh = netns("fresh-dual");
    let (_, replayed) = Replay::new(&dir)
        .sync_node(&fresh, "node-a", &applier())
        .expect("replay");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (&replayed.iptables, &replayed.ip6tables),
        (&live_state.iptables, &live_state.ip6tables),
        "replayed:\n{replayed}\nlive:\n{live_state}"
    );
}

/// A dual-stack IPVS-mode node: its capture holds IPv6 virtual servers (`ipvsadm -Sn`), the
/// `family inet6` KUBE-6- sets (`ipset save`), the /128 kube-ipvs0 address (`ip -o addr`) and
/// ip6tables; the replay puts all of them back.
#[test]
fn needs_ipvs_replay_of_a_dual_stack_ipvs_node_reproduces_both_families() {
    kpct::kernel_features::require_ipvs();
    let s = kpct::load(Path::new("../scenarios/dual-stack-clusterip.yaml")).unwrap();
    let cluster = kpct::scenario::cluster_state(&s);
    let node = kpct::scenario::node_context(&s, "node-a").unwrap();
    let p = kpct::proxier::families::program_node(
        &kpct::proxier::kube_proxy_ipvs::KubeProxyIpvs::default(),
        &cluster,
        &node,
    )
    .expect("program");
    let live = netns("live-dual-ipvs");
    applier()
        .apply(&live, "node-a", &p, None)
        .expect("apply reference programming");
    let opts = ReadOptions::for_programming(&p);
    let live_state = read(&live, &opts);
    assert_eq!(live_state.diff_against(&p), vec![]);

    let dir = scratch_dir("replay-dual-ipvs");
    replay::capture(&live, "node-a", &dir, Default::default()).expect("capture");
    let file = |name: &str| std::fs::read_to_string(dir.join("node-a").join(name)).unwrap();
    assert!(file(replay::IPVS_FILE).contains("-A -t [fd00:10:96::a]:80"));
    assert!(file(replay::IPSET_FILE).contains("create KUBE-6-CLUSTER-IP hash:ip,port family inet6"));
    assert!(file(replay::ADDRESSES_FILE).contains("inet6 fd00:10:96::a/128"));
    let fresh = netns("fresh-dual-ipvs");
    let (_, replayed) = Replay::new(&dir)
        .sync_node(&fresh, "node-a", &applier())
        .expect("replay");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (
            &replayed.ipvs,
            &replayed.ipsets,
            &replayed.kube_ipvs0,
            &replayed.iptables,
            &replayed.ip6tables
        ),
        (
            &live_state.ipvs,
            &live_state.ipsets,
            &live_state.kube_ipvs0,
            &live_state.iptables,
            &live_state.ip6tables
        ),
        "replayed:\n{replayed}\nlive:\n{live_state}"
    );
}

/// An nftables-mode node captured (`nft list ruleset`, beside iptables-nft's own tables) and
/// replayed into a fresh namespace holds the same tables; replayed over a node holding other
/// nftables tables, it replaces them.
#[test]
fn replay_of_a_kube_proxy_nftables_node_reproduces_it() {
    let (cluster, node) = scenario();
    let p = KubeProxyNftables::default()
        .program(&cluster, &node)
        .expect("program");
    let live = netns("live-nft");
    applier()
        .apply(&live, "node-a", &p, None)
        .expect("apply reference programming");
    // An iptables-nft table beside it, which the nft capture must leave to iptables-save.
    let iptables = kpct::programming::parse_text(
        "*filter\n:KPCT-X - [0:0]\n-A KPCT-X -j ACCEPT\nCOMMIT\n",
        "inline",
    )
    .unwrap();
    applier()
        .apply(&live, "node-a", &iptables, None)
        .expect("apply iptables");
    let live_state = read(&live, &ReadOptions::default());
    assert!(!live_state.nft.is_empty());

    let dir = scratch_dir("replay-nft");
    replay::capture(&live, "node-a", &dir, Default::default()).expect("capture");
    let ruleset = std::fs::read_to_string(dir.join("node-a").join(replay::NFT_FILE)).unwrap();
    assert!(ruleset.contains("table ip kube-proxy {"), "{ruleset}");
    let fresh = netns("fresh-nft");
    let (report, replayed) = Replay::new(&dir)
        .sync_node(&fresh, "node-a", &applier())
        .expect("replay");
    assert!(report.nft_lines > 0, "{report}");
    assert_eq!(
        replayed.nft, live_state.nft,
        "replayed:\n{replayed}\nlive:\n{live_state}"
    );
    assert_eq!(replayed.iptables, live_state.iptables);

    // Over a node holding another table of its own, the capture replaces the node's tables.
    let other = netns("other-nft");
    let stray =
        kpct::programming::parse_text("*nft\nadd table ip stray\nCOMMIT\n", "inline").unwrap();
    applier()
        .apply(&other, "node-a", &stray, None)
        .expect("stray");
    let (_, replaced) = Replay::new(&dir)
        .sync_node_replacing(&other, "node-a", &applier())
        .expect("replay over it");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(replaced.nft, live_state.nft);
}

#[test]
fn replay_fixture_applies_and_reports_file_lines() {
    let replay =
        kpct::ProxierSpec::parse_as::<kpct::drivers::Replay>(&format!("replay:{FIXTURES}/replay"))
            .unwrap();
    assert_eq!(replay.nodes().unwrap(), ["bad-node", "node-a"]);
    let ns = netns("fixture");
    let (report, state) = replay
        .sync_node(&ns, "node-a", &applier())
        .expect("replay node-a");
    assert_eq!(
        (report.sets, report.addresses, report.sysctls),
        (2, 2, 1),
        "{report}"
    );
    let loaded = replay.load("node-a").unwrap();
    assert_eq!(state.diff_against(&loaded.programming), vec![]);
    // Counters and comments of the capture are gone from the effective state.
    let text = state.to_string();
    assert!(
        !text.contains("[0:0]") && !text.contains("Generated"),
        "{text}"
    );

    let err = replay
        .sync_node(&netns("fixture-bad"), "bad-node", &applier())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("table filter line 7: `-A KUBE-FORWARD -m conntrack --ctstate BOGUS -j DROP`"),
        "{err}"
    );
    assert!(err.contains("bad-node/iptables-save:14)"), "{err}");
}

/// kube-proxy iptables mode serves 127.0.0.1:nodePort only with `route_localnet`, a sysctl, so a
/// replay of its nodes must carry the capture's `sysctl` file; without it the same probe fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_carries_the_node_sysctls() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/nodeport-localhost.yaml"
    );
    let mut s = kpct::load(std::path::Path::new(path)).expect("scenario loads");
    let probe = &mut s.probes[0];
    probe.expect = probe.expect_for.remove("kube-proxy-iptables");
    probe.expect_for.clear();
    assert!(probe.expect.is_some(), "the scenario pins iptables mode");

    let dir = scratch_dir("replay-sysctl");
    let cluster = kpct::scenario::cluster_state(&s);
    for node in ["node-a", "node-b"] {
        let ctx = kpct::scenario::node_context(&s, node).expect("node");
        let p = KubeProxyIptables::default()
            .program(&cluster, &ctx)
            .expect("program");
        let live = netns(&format!("live-{node}"));
        applier().apply(&live, node, &p, None).expect("apply");
        replay::capture(&live, node, &dir, Default::default()).expect("capture");
    }
    let captured = std::fs::read_to_string(dir.join("node-a").join(replay::SYSCTL_FILE)).unwrap();
    assert!(
        captured.contains("net.ipv4.conf.all.route_localnet = 1\n"),
        "{captured}"
    );

    let timeout = kpct::probe::probe_timeout();
    let replayed = kpct::run_scenario(&s, &Replay::new(&dir), timeout)
        .await
        .expect("run");
    for node in ["node-a", "node-b"] {
        std::fs::remove_file(dir.join(node).join(replay::SYSCTL_FILE)).unwrap();
    }
    let without = kpct::run_scenario(&s, &Replay::new(&dir), timeout)
        .await
        .expect("run");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(replayed.violations, Vec::<String>::new());
    assert!(
        without
            .violations
            .iter()
            .any(|v| v.contains("node-a-localhost-to-nodeport")),
        "{:#?}",
        without.violations
    );
}

/// A capture file that is a FIFO or a link to a device is refused at once, naming the file,
/// instead of blocking or reading without end.
#[test]
fn replay_refuses_capture_files_that_are_not_regular_files() {
    for (name, make) in [
        (
            "fifo",
            (|p: &std::path::Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap())
                as fn(&std::path::Path),
        ),
        ("zero", |p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
    ] {
        let dir = scratch_dir(&format!("replay-{name}"));
        std::fs::create_dir_all(dir.join("node-a")).unwrap();
        let capture = dir.join("node-a").join("iptables-save");
        make(&capture);
        let err = Replay::new(&dir)
            .load("node-a")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            err.contains("node-a/iptables-save") && err.contains("is not a regular file"),
            "{name}: {err}"
        );
    }
}

/// Whether some process runs the command line `args` (seen from this PID namespace; a zombie
/// nobody has reaped yet runs no more).
fn runs(args: &[&str]) -> bool {
    let wanted: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let dir = e.path();
        let zombie = std::fs::read_to_string(dir.join("stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|state| state == "Z" || state == "X")
        });
        !zombie && std::fs::read(dir.join("cmdline")).is_ok_and(|c| c == wanted)
    })
}

/// A proxier whose script leaves a child running — hung past the timeout, or exited with the
/// child in the background holding its stdout — neither hangs kpct nor leaves the child: the
/// whole process group is killed.
#[test]
fn a_proxier_and_everything_it_started_end_with_its_run() {
    for (case, script, child) in [
        (
            "hung",
            "sleep 3001 & echo $! > \"$KPCT_SCRATCH/child\"; wait",
            "3001",
        ),
        (
            "backgrounded",
            "sleep 3002 & echo $! > \"$KPCT_SCRATCH/child\"; exit 0",
            "3002",
        ),
    ] {
        let ns = std::sync::Arc::new(netns("execgroup"));
        let dir = ns.scratch_dir().unwrap().to_path_buf();
        let mut proxier = ExecProxier::new("sh", vec!["-c".into(), script.into()]);
        proxier.timeout = std::time::Duration::from_millis(500);
        let (done, outcome) = std::sync::mpsc::channel();
        // Not a scoped thread: if the run hangs, the test fails after 30 s instead of hanging.
        let in_thread = std::sync::Arc::clone(&ns);
        std::thread::spawn(move || {
            let (cluster, node) = scenario();
            let _ = done.send(
                proxier
                    .run(&in_thread, &input_for(&cluster, &node))
                    .map(|_| ()),
            );
        });
        let result = outcome
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{case}: kpct still waits for the proxier after 30 s"));
        match case {
            "hung" => assert!(
                matches!(result, Err(ExecError::Timeout { .. })),
                "{result:?}"
            ),
            _ => assert!(result.is_ok(), "{case}: {result:?}"),
        }
        assert!(
            dir.join("child").exists(),
            "{case}: the script started its child"
        );
        assert!(
            !runs(&["sleep", child]),
            "{case}: the proxier's child still runs"
        );
    }
}

/// Whether a proxier needs IP_VS is decided by what it is, not by its spelling: an `exec:`
/// script whose path says "ipvs" is not refused up front, a `replay:` capture holding IPVS
/// services needs IP_VS.
#[test]
fn needing_ipvs_is_decided_by_the_proxier_not_its_name() {
    let needs_ipvs = |spec: &str| spec.parse::<kpct::ProxierSpec>().unwrap().needs_ipvs();
    let dir = scratch_dir("needs-ipvs");
    std::fs::create_dir_all(dir.join("node-a")).unwrap();
    let replay = format!("replay:{}", dir.display());
    assert!(!needs_ipvs(&replay), "an empty capture");
    std::fs::write(dir.join("node-a/ipvsadm-Sn"), "-A -t 10.96.0.10:80 -s rr\n").unwrap();
    assert!(needs_ipvs(&replay), "a capture with an IPVS service");
    assert!(needs_ipvs("kube-proxy-ipvs"));
    assert!(needs_ipvs("old=kube-proxy-ipvs@v1.34"));
    assert!(!needs_ipvs("kube-proxy-iptables"));

    // An exec proxier named like the IPVS one programs iptables only: kpct runs it.
    let script = dir.join("kube-proxy-ipvs-lookalike.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec {FIXTURES}/exec/print-programming.sh\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let spec = format!("exec:{}", script.display());
    assert!(!needs_ipvs(&spec));
    let out = common::kpct(&[
        "run",
        "--proxier",
        &spec,
        "--scenario",
        "scenarios/clusterip-same-node.yaml",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!stderr.contains("needs IP_VS"), "{stderr}");
    assert!(
        stdout.contains("clusterip-same-node × exec:"),
        "{stdout}{stderr}"
    );
}

/// A proxier printing one huge line gets a short error: the line is quoted once, cut.
#[test]
fn a_huge_offending_line_is_quoted_short() {
    let dir = scratch_dir("long-line");
    let script = dir.join("long-line.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nprintf '*nat\\n:KUBE-X - [0:0]\\n-A KUBE-X -m comment --comment '\n\
         head -c 4000000 /dev/zero | tr '\\0' a\nprintf '\\nCOMMIT\\n'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = common::kpct(&[
        "run",
        "--proxier",
        &format!("exec:{}", script.display()),
        "--scenario",
        "scenarios/clusterip-same-node.yaml",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("failed at table nat line 3: `-A KUBE-X -m comment --comment aaa"),
        "{}",
        &stdout[..stdout.len().min(2000)]
    );
    assert!(
        stdout.contains("… (4000031 bytes in all)`"),
        "{}",
        &stdout[..stdout.len().min(2000)]
    );
    assert!(
        out.stdout.len() + out.stderr.len() < 4000,
        "{} bytes of output",
        out.stdout.len()
    );
}

/// A replay whose directory is missing is refused when it is named, and a node directory that
/// holds no capture file (here a link to /etc) is an error, not an empty node.
#[test]
fn replay_refuses_a_missing_directory_and_an_empty_node() {
    let missing =
        kpct::ProxierSpec::parse_as::<kpct::drivers::Replay>("replay:/nonexistent/capture")
            .unwrap_err();
    assert_eq!(
        missing.to_string(),
        "replay: /nonexistent/capture is not a directory (expected one subdirectory per node)"
    );
    let dir = scratch_dir("replay-etc");
    std::os::unix::fs::symlink("/etc", dir.join("node-a")).unwrap();
    let err = Replay::new(&dir)
        .load("node-a")
        .err()
        .map(|e| e.to_string());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        err.unwrap_or_default(),
        format!(
            "no capture for node node-a: {}/node-a holds none of the capture files \
             (iptables-save, ip6tables-save, ipset-save, ipvsadm-Sn, kube-ipvs0, sysctl, nft-ruleset)",
            dir.display()
        )
    );
}

/// An `exec:` proxier is confined to its node: it tries to enter the root namespace through its
/// parent's `/proc/PID/ns/net`, another node's namespace through `/run/netns`, to load a kernel
/// module, to write a host-wide sysctl, to change a device through `/sys`, and to write a file
/// in `/etc`, `/root`, `/var/tmp`, `/tmp` and the repository, and every attempt fails; it
/// holds none of SYS_MODULE, SYS_ADMIN, SYS_PTRACE, its sysfs lists its node's links only, and
/// every process it can see is in its node's network namespace. It still writes its own
/// node's net.* sysctls, and its scratch directory, which it finds again at its next sync.
#[test]
fn an_exec_proxier_cannot_leave_its_node() {
    let (cluster, node) = scenario();
    let ns = netns("confined");
    ns.exec("ip", &["link", "add", "kpct-own0", "type", "bridge"])
        .unwrap();
    let other = netns("confined-other");
    let dir = scratch_dir("confined");
    let script = dir.join("escape.sh");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pid = std::process::id();
    let targets: Vec<PathBuf> = [
        PathBuf::from("/etc"),
        PathBuf::from("/root"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/tmp"),
        dir.clone(),
        repo.canonicalize().unwrap(),
    ]
    .iter()
    .map(|d| d.join(format!("kpct-pwned-{pid}")))
    .collect();
    let writes: String = targets
        .iter()
        .map(|t| format!("try sh -c 'echo pwned > {}'\n", t.display()))
        .collect();
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
exec > "$KPCT_SCRATCH/report" 2>&1
if [ -e "$KPCT_SCRATCH/synced-before" ]; then echo "scratch kept"; exit 0; fi
try() {{ if "$@" >/dev/null 2>&1; then echo "ESCAPED: $*"; else echo "refused: $*"; fi; }}
{writes}touch "$KPCT_SCRATCH/synced-before" && echo "scratch: written"
try nsenter --net=/proc/$PPID/ns/net true
try nsenter --net=/run/netns/{other} true
try test -e /run/netns/{other}
try python3 -c 'import ctypes,sys; ctypes.CDLL(None,use_errno=True).syscall(313,-1,b"",0); sys.exit(ctypes.get_errno() in (1,38))'
try python3 -c 'import sys; e=int(open("/proc/self/status").read().split("CapEff:")[1].split()[0],16); sys.exit(not e & (1<<16 | 1<<21 | 1<<19))'
v=$(cat /proc/sys/vm/swappiness); try sh -c "echo $v > /proc/sys/vm/swappiness"
try sh -c 'echo 1280 > /sys/class/net/kpct-own0/mtu'
try sh -c 'echo kpct > /sys/class/net/kpct-own0/ifalias'
echo "links in sysfs: $(ls /sys/class/net | sort | tr '\n' ' ')"
echo "net namespaces seen: $(for p in /proc/[0-9]*; do readlink $p/ns/net; done | sort -u | tr '\n' ' ')"
echo 1 > /proc/sys/net/ipv4/ip_forward && echo "own sysctl: written"
"#,
            other = other.name()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let proxier = ExecProxier::new(script.display().to_string(), vec![]);
    let outcome = proxier.run(&ns, &input_for(&cluster, &node));
    let report = ns.scratch_dir().unwrap().join("report");
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    let written: Vec<&PathBuf> = targets.iter().filter(|t| t.exists()).collect();
    for t in &written {
        let _ = std::fs::remove_file(t);
    }
    let again = proxier.run(&ns, &input_for(&cluster, &node));
    let second = std::fs::read_to_string(&report).unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        written.is_empty(),
        "written on the host: {written:?}\n{text}"
    );
    assert!(
        matches!(outcome, Ok(ExecOutcome::SelfProgrammed)),
        "{outcome:?}\n{text}"
    );
    assert!(!text.contains("ESCAPED"), "{text}");
    // finit_module fails with EPERM without CAP_SYS_MODULE (ENOSYS on a kernel without module
    // support, as on some CI hosts); the capability check says which capability it lacks.
    assert_eq!(
        text.matches("refused: ").count(),
        8 + targets.len(),
        "{text}"
    );
    assert!(text.contains("scratch: written"), "{text}");
    assert!(
        matches!(again, Ok(ExecOutcome::SelfProgrammed)),
        "{again:?}"
    );
    assert_eq!(second.trim(), "scratch kept");
    assert!(text.contains("links in sysfs: kpct-own0 lo \n"), "{text}");
    let own = std::fs::metadata(ns.path()).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert!(
        text.contains(&format!("net namespaces seen: net:[{}] \n", own.unwrap())),
        "every process it sees is in its node's namespace: {text}"
    );
    assert!(text.contains("own sysctl: written"), "{text}");
    assert_eq!(ns.get_sysctl("net.ipv4.ip_forward").unwrap(), "1");
}

/// The process that holds an `exec:` proxier in
/// [`an_exec_proxier_dies_with_kpct_even_by_sigkill`]: it runs one (a script that starts a
/// `sleep` in the background and then becomes another), says when both run, and waits to be
/// killed.
#[test]
fn holder_of_an_exec_proxier() {
    let Ok(marker) = std::env::var(common::processes::HOLDER_VARIABLE) else {
        return;
    };
    let (cluster, node) = scenario();
    let ns = netns("exec-holder");
    let dir = scratch_dir(&format!("exec-holder-{marker}"));
    let started = ns.scratch_dir().unwrap().join("started");
    let proxier = script_proxier(
        &dir,
        "proxier.sh",
        "#!/bin/sh\nsleep 3600 &\ntouch \"$KPCT_SCRATCH/started\"\nexec sleep 3601\n",
    );
    let runner = std::thread::spawn(move || {
        let _ = proxier.run(&ns, &input_for(&cluster, &node));
    });
    while !started.exists() {
        assert!(!runner.is_finished(), "the proxier ended before it started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    println!("ready");
    loop {
        std::thread::park();
    }
}

/// SIGKILL kpct (here a test process running an `exec:` proxier) and every process of the
/// proxier goes too, the one it left in the background included: nothing holds the node's
/// namespace after it.
#[test]
fn an_exec_proxier_dies_with_kpct_even_by_sigkill() {
    let (mut holder, _) = common::processes::start_holder("holder_of_an_exec_proxier");
    let holder_pid = holder.id();
    let sleeps = common::processes::wait_for_descendants(holder_pid, "sleep 360", 2);
    let watched = common::processes::Watched::new(&sleeps);
    holder.kill().unwrap();
    holder.wait().unwrap();
    watched.assert_all_end_within(std::time::Duration::from_secs(10), "the exec: proxier");
    // What the holder's SIGKILL left: its namespaces and scratch directory.
    let left: Vec<String> = kpct::netns::leftovers(false)
        .unwrap()
        .into_iter()
        .filter(|n| n.contains(&format!("kpct-{holder_pid}_")))
        .collect();
    kpct::netns::remove_leftovers(&left);
    for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("kpct-{holder_pid}_")) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// At a step an `exec:` proxier gets input version 2: the new state plus `sync` (the step, and
/// the previous state unless it was restarted). What it leaves behind is judged by the
/// convergence check like a built-in's: this one names a chain after the input it got and
/// never deletes one, so each step leaves a chain a fresh node (which gets version 1) lacks.
#[test]
fn exec_proxiers_get_what_changed_at_steps_and_are_held_to_convergence() {
    let dir = scratch_dir("exec-steps");
    let proxier = script_proxier(
        &dir,
        "leaky.py",
        r#"#!/usr/bin/python3
import json, sys
inp = json.load(sys.stdin)
if inp["version"] == 1:
    assert "sync" not in inp, inp
    chain = "KPCT-V1"
else:
    sync = inp["sync"]
    assert inp["version"] == 2 and sync["step"], inp
    chain = "KPCT-V2-" + ("PREV" if sync["previous"] else "RESTART")
    if sync["previous"]:
        assert sync["previous"]["servicePorts"] != inp["cluster"]["servicePorts"], inp
print("*nat\n:%s - [0:0]\nCOMMIT" % chain)
"#,
    );
    let mut s = kpct::load(Path::new("../scenarios/transition-service-deleted.yaml")).unwrap();
    s.probes.clear();
    s.steps[0].probes.clear();
    s.steps.push(kpct::scenario::Step {
        name: "restart".into(),
        restart_proxier: true,
        ..Default::default()
    });
    let run = run_with(&s, &proxier);
    std::fs::remove_dir_all(&dir).unwrap();
    let stale: Vec<&str> = run
        .violations
        .iter()
        .filter_map(|v| v.split_once("]: ").map(|(_, rest)| rest))
        .collect();
    let expected: Vec<String> = [
        ("delete-web", &["KPCT-V2-PREV"][..]),
        ("restart", &["KPCT-V2-PREV", "KPCT-V2-RESTART"][..]),
    ]
    .iter()
    .flat_map(|(step, chains)| {
        ["node-a", "node-b"].iter().flat_map(move |node| {
            chains.iter().map(move |c| {
                format!(
                    "{node}: stale chain {c} (table nat) after step `{step}` (a fresh node \
                         synced to the same state differs)"
                )
            })
        })
    })
    .collect();
    assert_eq!(stale, expected, "{:#?}", run.violations);
}

/// A replay of a scenario with steps holds one capture per step (`DIR/<step>/<node>/`), each
/// replacing what the node held: captures of the iptables built-in at every state replay the
/// whole scenario, expectations and convergence checks included. A missing step's capture is
/// refused before anything is built.
#[test]
fn a_replay_holds_one_capture_per_step() {
    let s = kpct::load(Path::new("../scenarios/transition-service-deleted.yaml")).unwrap();
    let dir = scratch_dir("replay-steps");
    let capture_state = |state: &kpct::Scenario, into: &Path| {
        let cluster = kpct::scenario::cluster_state(state);
        for node in &state.topology.nodes {
            let ctx = kpct::scenario::node_context(state, &node.name).unwrap();
            let ns = netns(&format!("capture-{}", node.name));
            let p = KubeProxyIptables::default()
                .program(&cluster, &ctx)
                .unwrap();
            applier().apply(&ns, &node.name, &p, None).unwrap();
            replay::capture(&ns, &node.name, into, Default::default()).expect("capture");
        }
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let replay = Replay::new(&dir);
    let Err(refused) = rt.block_on(kpct::run_scenario(
        &s,
        &replay,
        kpct::probe::probe_timeout(),
    )) else {
        panic!("a replay without the step's capture ran");
    };
    assert!(
        format!("{refused:#}").contains("has no capture for step(s) delete-web"),
        "{refused:#}"
    );
    capture_state(&s, &dir);
    for (k, step) in s.steps.iter().enumerate() {
        let state = kpct::scenario::state_at(&s, Some(k)).scenario;
        capture_state(&state, &dir.join(&step.name));
    }
    let run = rt
        .block_on(kpct::run_scenario(
            &s,
            &replay,
            kpct::probe::probe_timeout(),
        ))
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(run.violations, Vec::<String>::new());
    assert!(run.observation.steps[0].converged);
}

/// On a dual-stack cluster an `exec:` proxier gets the IPv6 proxier's view in the same document
/// (`cluster.ipv6`, `node.ipv6`) and may program IPv6 in an `*nft` section. This one DNATs only
/// the IPv6 ClusterIP, to its first endpoint: the IPv6 probe is delivered there, and the IPv4
/// one, which it left unprogrammed, fails its expectation.
#[test]
fn an_exec_proxier_programs_ipv6_from_the_dual_stack_document() {
    let dir = scratch_dir("exec-dual-stack");
    let proxier = script_proxier(
        &dir,
        "ipv6-only.py",
        r#"#!/usr/bin/python3
import json, sys
inp = json.load(sys.stdin)
v6, node6 = inp["cluster"]["ipv6"], inp["node"]["ipv6"]
assert inp["cluster"]["ipFamily"] == "IPv4" and v6["ipFamily"] == "IPv6", inp
assert node6["nodeIP"].startswith("fd00:192:168:1::"), node6
assert "ipv6" not in v6 and "ipv6" not in node6, inp
lines = ["add table ip6 kpct-exec",
         "add chain ip6 kpct-exec pre { type nat hook prerouting priority -100 ; }"]
for sp in v6["servicePorts"]:
    ready = [e for e in sp["endpoints"] if e["ready"]]
    if sp["clusterIP"] and ready:
        lines.append("add rule ip6 kpct-exec pre ip6 daddr %s %s dport %d dnat to [%s]:%d" % (
            sp["clusterIP"], sp["protocol"].lower(), sp["port"], ready[0]["ip"], ready[0]["port"]))
print("*nft\n%s\nCOMMIT" % "\n".join(lines))
"#,
    );
    let mut s = kpct::load(Path::new(
        "../scenarios/dual-stack-endpoints-per-family.yaml",
    ))
    .unwrap();
    // One shot each: the IPv4 one is dropped, and waits out the probe timeout.
    for probe in &mut s.probes {
        probe.repeat = 1;
    }
    let run = run_with(&s, &proxier);
    std::fs::remove_dir_all(&dir).unwrap();
    let failing: std::collections::BTreeSet<&str> = run
        .violations
        .iter()
        .filter_map(|v| v.split('`').nth(1))
        .collect();
    assert_eq!(
        failing,
        ["ipv4"].into_iter().collect(),
        "{:#?}",
        run.violations
    );
}

/// In an IPv6-only cluster an `exec:` proxier's document is the IPv6 proxier's view at the top
/// (`ipFamily: IPv6`, no `ipv6` key), and its `*ip6:nat` section goes to ip6tables-restore. This
/// one spreads the ClusterIP over its ready endpoints with ip6tables DNAT rules: the probe
/// reaches both backends.
#[test]
fn an_exec_proxier_programs_an_ipv6_only_cluster_through_ip6tables() {
    let dir = scratch_dir("exec-ipv6-only");
    let proxier = script_proxier(
        &dir,
        "ip6tables.py",
        r#"#!/usr/bin/python3
import json, sys
inp = json.load(sys.stdin)
cluster, node = inp["cluster"], inp["node"]
assert cluster["ipFamily"] == "IPv6" and "ipv6" not in cluster and "ipv6" not in node, inp
assert node["nodeIP"].startswith("fd00:192:168:1::"), node
rules = [":PREROUTING ACCEPT [0:0]", ":KPCT-SVC - [0:0]", "-A PREROUTING -j KPCT-SVC"]
for sp in cluster["servicePorts"]:
    ready = [e for e in sp["endpoints"] if e["ready"]]
    for i, e in enumerate(ready):
        left = len(ready) - i
        spread = "" if left == 1 else "-m statistic --mode random --probability %.10f " % (1.0 / left)
        rules.append("-A KPCT-SVC -d %s/128 -p %s --dport %d %s-j DNAT --to-destination [%s]:%d" % (
            sp["clusterIP"], sp["protocol"].lower(), sp["port"], spread, e["ip"], e["port"]))
print("*ip6:nat\n%s\nCOMMIT" % "\n".join(rules))
"#,
    );
    let s = kpct::load(Path::new(
        "../scenarios/ipv6-only-clusterip-cross-node.yaml",
    ))
    .unwrap();
    let run = run_with(&s, &proxier);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(run.violations, Vec::<String>::new());
}

/// `kpct input` prints exactly what an `exec:` proxier gets on stdin: for every node, the first
/// sync's document and each step's are among those a recording proxier received in a run.
#[test]
fn kpct_input_prints_what_an_exec_proxier_reads() {
    let dir = scratch_dir("input-recorded");
    let script = dir.join("record.sh");
    let kept = dir.join("kept");
    // Its only writable place is its node's scratch directory, kept after the run here.
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > \"$(mktemp \"$KPCT_SCRATCH/$KPCT_NODE.XXXXXX\")\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let spec = format!("exec:{}", script.display());
    let scenario = "scenarios/transition-scale-down-up.yaml";
    // It programs nothing, so its probes fail; what it read is what counts.
    let _ = common::kpct_command(&["run", "--scenario", scenario, "--proxier", &spec])
        .env("KPCT_PROBE_TIMEOUT_MS", "100")
        .env("KPCT_KEEP_SCRATCH", &kept)
        .output()
        .expect("kpct runs");
    for node in ["node-a", "node-b"] {
        let received: Vec<String> = std::fs::read_dir(&kept)
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{node}.")))
            })
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        for step in [None, Some("scale-down"), Some("scale-up")] {
            let mut args = vec!["input", scenario, "--node", node];
            if let Some(step) = step {
                args.extend(["--step", step]);
            }
            let out = common::kpct(&args);
            assert!(out.status.success(), "{out:?}");
            let printed = String::from_utf8(out.stdout).unwrap();
            assert!(
                received.iter().any(|r| r.trim_end() == printed.trim_end()),
                "{node} {step:?}: kpct input printed\n{printed}\nbut the proxier received {} other document(s)",
                received.len()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
