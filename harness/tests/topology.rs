//! The topology engine against the real kernel (needs root; no IPVS).

mod common;

use common::udp_socket;
use kpct::capture::{Capture, Flow};
use kpct::scenario::Scenario;
use kpct::topology::naming::VXLAN_PORT;
use kpct::topology::Topology;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const TWO_NODES_FOUR_PODS: &str = r#"
topology:
  underlay: 192.168.1.0/24
  clusterCIDR: 10.244.0.0/16
  nodes:
    - { name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24 }
    - { name: node-b, ip: 192.168.1.11, podCIDR: 10.244.2.0/24 }
  pods:
    - { name: a1, node: node-a, ip: 10.244.1.10 }
    - { name: a2, node: node-a, ip: 10.244.1.11 }
    - { name: b1, node: node-b, ip: 10.244.2.10 }
    - { name: b2, node: node-b, ip: 10.244.2.11 }
  external: { ip: 192.168.1.100 }
"#;

const WAIT: Duration = Duration::from_secs(3);

fn scenario() -> Scenario {
    serde_yaml_ng::from_str(TWO_NODES_FOUR_PODS).expect("test scenario parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_to_pod_across_nodes_goes_over_vxlan_and_replies() {
    let topo = Topology::build(&scenario()).await.expect("topology builds");
    let a1 = topo.pod("a1").unwrap();
    let b1 = topo.pod("b1").unwrap();
    let node_b = topo.node("node-b").unwrap();

    // Captures first, so the first packet cannot be missed.
    let mut on_b1_veth = Capture::open(&node_b.netns, &b1.host_veth).unwrap();
    let mut on_node_b_underlay = Capture::open(&node_b.netns, "eth0").unwrap();

    let server = udp_socket(&b1.netns, SocketAddrV4::new(b1.ip, 8080), WAIT);
    let client = udp_socket(&a1.netns, SocketAddrV4::new(a1.ip, 40000), WAIT);

    client
        .send_to(b"probe", SocketAddrV4::new(b1.ip, 8080))
        .unwrap();
    let expected = Flow {
        protocol: 17,
        src: a1.ip,
        sport: 40000,
        dst: b1.ip,
        dport: 8080,
    };

    let encapsulated = on_node_b_underlay
        .wait_for(WAIT, |f| f.vxlan_inner_flow(VXLAN_PORT) == Some(expected))
        .unwrap();
    let encapsulated =
        encapsulated.expect("the packet crossed the underlay inside VXLAN (UDP 8472)");
    let outer = encapsulated.flow().unwrap();
    assert_eq!(
        (outer.src, outer.dst, outer.dport),
        (
            Ipv4Addr::new(192, 168, 1, 10),
            Ipv4Addr::new(192, 168, 1, 11),
            VXLAN_PORT
        ),
        "outer header goes node-a -> node-b on the VXLAN port"
    );
    let delivered = on_b1_veth
        .wait_for(WAIT, |f| f.flow() == Some(expected))
        .unwrap();
    assert!(
        delivered.is_some(),
        "the packet was observed on b1's veth with addresses untouched"
    );

    let mut buf = [0u8; 64];
    let (n, from) = server
        .recv_from(&mut buf)
        .expect("b1 received the datagram");
    assert_eq!(
        (&buf[..n], from),
        (&b"probe"[..], SocketAddrV4::new(a1.ip, 40000).into())
    );
    server.send_to(b"reply", from).unwrap();
    let (n, from) = client.recv_from(&mut buf).expect("a1 received the reply");
    assert_eq!(
        (&buf[..n], from),
        (&b"reply"[..], SocketAddrV4::new(b1.ip, 8080).into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_bytes_on_the_wire_every_build() {
    let first = Topology::build(&scenario()).await.unwrap();
    let second = Topology::build(&scenario()).await.unwrap();
    assert_ne!(
        first.prefix(),
        second.prefix(),
        "each build has its own namespace prefix"
    );
    for (a, b) in first.pods().iter().zip(second.pods()) {
        assert_eq!((a.mac, &a.host_veth, a.ip), (b.mac, &b.host_veth, b.ip));
    }
    for (a, b) in first.nodes().iter().zip(second.nodes()) {
        assert_eq!(a.vtep_mac, b.vtep_mac);
    }
}

/// Namespaces of a prefix still present in /run/netns, and mounts of them in mountinfo.
fn remnants(prefix: &str) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    found.extend(
        mountinfo
            .lines()
            .filter(|l| l.contains(prefix))
            .map(|l| format!("mount: {l}")),
    );
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_remains_after_drop() {
    let topo = Topology::build(&scenario()).await.unwrap();
    let prefix = topo.prefix().to_string();
    // fabric + 2 nodes + 4 pods + external: one /run/netns entry and one bind mount each.
    assert_eq!(remnants(&prefix).len(), 2 * 8, "{:#?}", remnants(&prefix));
    topo.teardown();
    assert_eq!(remnants(&prefix), Vec::<String>::new());
}

#[test]
fn nothing_remains_after_a_panic_mid_test() {
    let prefix = std::sync::Mutex::new(String::new());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let topo = Topology::build(&scenario()).await.unwrap();
            *prefix.lock().unwrap() = topo.prefix().to_string();
            assert!(!remnants(topo.prefix()).is_empty());
            panic!("deliberate panic while the topology is up");
        })
    }));
    assert!(outcome.is_err(), "the closure panicked");
    let prefix = prefix.into_inner().unwrap();
    assert!(!prefix.is_empty());
    assert_eq!(remnants(&prefix), Vec::<String>::new());
}

/// Everything about the root namespace's networking the suite could conceivably change.
fn root_namespace_state() -> String {
    let mut out = String::new();
    for (cmd, args) in [
        ("ip", &["-d", "-o", "link", "show"][..]),
        ("ip", &["-o", "addr", "show"][..]),
        ("ip", &["route", "show", "table", "all"][..]),
        ("ip", &["rule", "show"][..]),
        ("ip", &["neigh", "show", "permanent"][..]),
    ] {
        let o = std::process::Command::new(cmd).args(args).output().unwrap();
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    for save in ["iptables-save", "iptables-legacy-save", "ipset"] {
        let args: &[&str] = if save == "ipset" { &["save"] } else { &[] };
        if let Ok(o) = std::process::Command::new(save).args(args).output() {
            let text = String::from_utf8_lossy(&o.stdout);
            // Counters and the generation timestamp change on their own.
            out.extend(text.lines().filter(|l| !l.starts_with('#')).map(|l| {
                let mut l = l.to_string();
                if let Some(i) = l.find(" [") {
                    if l.starts_with(':') {
                        l.truncate(i);
                    }
                }
                l + "\n"
            }));
        }
    }
    for key in [
        "net/ipv4/ip_forward",
        "net/ipv4/conf/all/forwarding",
        "net/ipv4/conf/all/route_localnet",
        "net/ipv4/conf/all/rp_filter",
        "net/ipv4/conf/all/arp_ignore",
        "net/ipv4/conf/all/arp_announce",
        "net/ipv6/conf/all/forwarding",
    ] {
        let v = std::fs::read_to_string(format!("/proc/sys/{key}")).unwrap_or_default();
        out.push_str(&format!("{key}={v}"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[serial_test::serial(root_state)]
async fn root_namespace_is_never_modified() {
    let before = root_namespace_state();
    let topo = Topology::build(&scenario()).await.unwrap();
    let during = root_namespace_state();
    topo.teardown();
    let after = root_namespace_state();
    assert_eq!(
        before, during,
        "building a topology changed the root namespace"
    );
    assert_eq!(
        before, after,
        "tearing down a topology changed the root namespace"
    );
}

/// flannel's CNI config sets `hairpinMode: true`: without it a pod cannot reach itself through
/// its own Service (the DNATed packet must leave the bridge port it came in on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_ports_have_hairpin_mode_like_flannel() {
    let topo = Topology::build(&scenario()).await.unwrap();
    for node in topo.nodes() {
        let links = node.netns.exec("bridge", &["-d", "link", "show"]).unwrap();
        for pod in topo.pods().iter().filter(|p| p.node == node.name) {
            let line = links
                .lines()
                .skip_while(|l| !l.contains(&format!("{}@", pod.host_veth)))
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            assert!(
                line.contains("hairpin on"),
                "{} on {}: {line}",
                pod.host_veth,
                node.name
            );
        }
    }
}

/// SIGINT, SIGTERM or SIGHUP at any point of a 200-pod build (namespaces being created,
/// mounted, wired) leaves no namespace of that process behind: creation and the signal
/// handler's cleanup take the same lock, so a namespace is made before the cleanup (and removed
/// by it) or not at all.
///
/// Each signal is sent when the build has made a given number of its 206 namespaces, seen by
/// inotify on /run/netns, not after a wall-clock delay: a delay lands mid-build only as often as
/// the machine's speed allows (8 of 11 on a loaded CI machine), while a count below the total is
/// mid-build by construction, so every such run must end by the handler (exit 130).
#[test]
fn a_signal_at_any_point_of_a_large_build_leaves_nothing() {
    use nix::sys::signal::{kill, Signal};
    let signals = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
    // fabric + 4 nodes + 200 pods + external.
    const NAMESPACES: usize = 206;
    let made = [0usize, 1, 2, 5, 20, 60, 100, 150, 200, NAMESPACES - 1];
    for (i, &count) in made.iter().enumerate() {
        let watch = common::netns_watch::NetnsWatch::start();
        let mut child = common::kpct_command(&["bench", "topology", "--nodes", "4"])
            .args(["--pods-per-node", "50", "--rounds", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kpct starts");
        let pid = child.id();
        let prefix = format!("kpct-{pid}_");
        if count > 0 {
            watch.until_made(&prefix, count, &mut child);
        }
        let signal = signals[i % signals.len()];
        kill(nix::unistd::Pid::from_raw(pid as i32), signal).expect("kpct still runs");
        let status = child.wait().unwrap();
        // Before the first namespace the handler may not be installed yet: the default action
        // ends the process, which is as good, as long as nothing is left.
        if count > 0 {
            assert_eq!(
                status.code(),
                Some(130),
                "{signal} after {count} namespaces did not reach the handler ({status})"
            );
        }
        let left = remnants(&prefix);
        assert_eq!(
            left,
            Vec::<String>::new(),
            "{signal} after {count} namespaces ({status})"
        );
    }
}

/// `kpct cleanup` takes a namespace for a dead run's when its owner is gone — also when the pid
/// in its name now belongs to another process (pid reuse): the start time recorded in the name
/// differs. The namespaces of a live run are left alone.
#[test]
fn cleanup_tells_a_reused_pid_from_the_owner() {
    kpct::netns::install_signal_cleanup();
    let pid = std::process::id();
    let mine = kpct::topology::naming::RunPrefix::next();
    let own = kpct::netns::Netns::create(&format!("{}probe", mine.as_str())).unwrap();
    // The same pid with another start time: a namespace left by an earlier process whose pid
    // this test process now has.
    let stale_name = format!("kpct-{pid}_1-0-probe");
    let stale = kpct::netns::Netns::create(&stale_name).unwrap();
    let leftovers = kpct::netns::leftovers(false).unwrap();
    assert!(leftovers.contains(&stale_name), "{leftovers:?}");
    assert!(!leftovers.iter().any(|n| n == own.name()), "{leftovers:?}");
    drop((own, stale));
}
