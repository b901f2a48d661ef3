//! The topology engine against the real kernel (needs root; no IPVS).

mod common;

use common::udp_socket;
use kpct::capture::{Capture, Flow};
use kpct::netns::naming::VXLAN_PORT;
use kpct::topology::Topology;
use kpct::Scenario;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

const TWO_NODES_FOUR_PODS: &str = concat!(
    crate::two_nodes!(),
    r#"  pods:
    - { name: a1, node: node-a, ip: 10.244.1.10 }
    - { name: a2, node: node-a, ip: 10.244.1.11 }
    - { name: b1, node: node-b, ip: 10.244.2.10 }
    - { name: b2, node: node-b, ip: 10.244.2.11 }
  external: { ip: 192.168.1.100 }
"#
);

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
    let (a1_ip, b1_ip) = (a1.ip.unwrap(), b1.ip.unwrap());

    // Captures first, so the first packet cannot be missed.
    let mut on_b1_veth = Capture::open(&node_b.netns, &b1.host_veth).unwrap();
    let mut on_node_b_underlay = Capture::open(&node_b.netns, "eth0").unwrap();

    let server = udp_socket(&b1.netns, SocketAddrV4::new(b1_ip, 8080), WAIT);
    let client = udp_socket(&a1.netns, SocketAddrV4::new(a1_ip, 40000), WAIT);

    client
        .send_to(b"probe", SocketAddrV4::new(b1_ip, 8080))
        .unwrap();
    let expected = Flow {
        protocol: 17,
        src: a1_ip.into(),
        sport: 40000,
        dst: b1_ip.into(),
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
            Ipv4Addr::new(192, 168, 1, 10).into(),
            Ipv4Addr::new(192, 168, 1, 11).into(),
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
        (&b"probe"[..], SocketAddrV4::new(a1_ip, 40000).into())
    );
    server.send_to(b"reply", from).unwrap();
    let (n, from) = client.recv_from(&mut buf).expect("a1 received the reply");
    assert_eq!(
        (&buf[..n], from),
        (&b"reply"[..], SocketAddrV4::new(b1_ip, 8080).into())
    );
}

/// An IPv6-only cluster: the underlay and the pods are IPv6 only, and the VXLAN overlay runs
/// over IPv6 outer headers (flannel's IPv6 vxlan backend): a pod's datagram to a pod on another
/// node crosses the underlay as IPv6 UDP to port 8472 between the nodes' IPv6 addresses, and
/// the reply comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_only_pods_talk_over_an_ipv6_vxlan_overlay() {
    let scenario: Scenario = serde_yaml_ng::from_str(
        r#"
name: ipv6-only-overlay
topology:
  underlay: fd00:192:168:1::/64
  clusterCIDR: fd00:10:244::/56
  serviceCIDR: fd00:10:96::/112
  nodes:
    - { name: node-a, ip: "fd00:192:168:1::10", podCIDR: "fd00:10:244:1::/64" }
    - { name: node-b, ip: "fd00:192:168:1::11", podCIDR: "fd00:10:244:2::/64" }
  pods:
    - { name: a1, node: node-a, ip: "fd00:10:244:1::10" }
    - { name: b1, node: node-b, ip: "fd00:10:244:2::10" }
"#,
    )
    .expect("test scenario parses");
    kpct::scenario::validate(&scenario).expect("an IPv6-only topology is valid");
    let topo = Topology::build(&scenario).await.expect("topology builds");
    let (a1, b1) = (topo.pod("a1").unwrap(), topo.pod("b1").unwrap());
    assert_eq!((a1.ip, b1.ip), (None, None), "no IPv4 pod address");
    let node_b = topo.node("node-b").unwrap();
    let mut on_node_b_underlay = Capture::open(&node_b.netns, "eth0").unwrap();
    let a1_addr: SocketAddr = "[fd00:10:244:1::10]:40000".parse().unwrap();
    let b1_addr: SocketAddr = "[fd00:10:244:2::10]:8080".parse().unwrap();
    let server = udp_socket(&b1.netns, b1_addr, WAIT);
    let client = udp_socket(&a1.netns, a1_addr, WAIT);
    client.send_to(b"probe", b1_addr).unwrap();
    let inner = Flow {
        protocol: 17,
        src: a1_addr.ip(),
        sport: 40000,
        dst: b1_addr.ip(),
        dport: 8080,
    };
    let encapsulated = on_node_b_underlay
        .wait_for(WAIT, |f| f.vxlan_inner_flow(VXLAN_PORT) == Some(inner))
        .unwrap()
        .expect("the datagram crossed the underlay inside VXLAN");
    let outer = encapsulated.flow().unwrap();
    assert_eq!(
        (outer.src, outer.dst, outer.dport),
        (
            "fd00:192:168:1::10".parse::<std::net::IpAddr>().unwrap(),
            "fd00:192:168:1::11".parse::<std::net::IpAddr>().unwrap(),
            VXLAN_PORT
        ),
        "the outer header is IPv6, node-a -> node-b on the VXLAN port"
    );
    let mut buf = [0u8; 64];
    let (n, from) = server.recv_from(&mut buf).expect("b1 received it");
    assert_eq!((&buf[..n], from), (&b"probe"[..], a1_addr));
    server.send_to(b"reply", from).unwrap();
    let (n, from) = client.recv_from(&mut buf).expect("a1 received the reply");
    assert_eq!((&buf[..n], from), (&b"reply"[..], b1_addr));
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
    let mine = kpct::netns::naming::RunPrefix::next();
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

/// `kpct cleanup` ends a process still inside a dead run's namespace (a proxier that outlived
/// its kpct would hold the namespace, and every link in it, after the file is gone), says so,
/// and removes the namespace.
#[test]
fn cleanup_kills_what_still_runs_in_a_dead_runs_namespace() {
    kpct::netns::install_signal_cleanup();
    let name = format!("kpct-{}_1-0-held", std::process::id());
    let ns = kpct::netns::Netns::create(&name).unwrap();
    // No parent-death signal: it outlives this handle, as an older kpct's proxier did.
    let mut sleeper = ns.command("sleep").unwrap().arg("3607").spawn().unwrap();
    let name = ns.persist();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kpct"))
        .arg("cleanup")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Reaped here (it is this test's child): gone only if cleanup killed it.
    let ended = sleeper.try_wait().unwrap();
    if ended.is_none() {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("killed {} `sleep 3607` in {name}\n", sleeper.id())),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("removed {name}\n")), "{stdout}");
    assert!(
        ended.is_some_and(|s| std::os::unix::process::ExitStatusExt::signal(&s) == Some(9)),
        "{ended:?}"
    );
    assert!(!std::path::Path::new("/run/netns").join(&name).exists());
}

const DUAL_STACK: &str = r#"
name: dual-stack
topology:
  underlay: 192.168.1.0/24,fd00:1::/64
  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
  serviceCIDR: 10.96.0.0/12,fd00:10:96::/112
  nodes:
    - name: node-a
      ips: [192.168.1.10, "fd00:1::10"]
      podCIDRs: [10.244.1.0/24, "fd00:10:244:1::/64"]
    - name: node-b
      ips: [192.168.1.11, "fd00:1::11"]
      podCIDRs: [10.244.2.0/24, "fd00:10:244:2::/64"]
  pods:
    - { name: a1, node: node-a, ips: [10.244.1.10, "fd00:10:244:1::10"] }
    - { name: b1, node: node-b, ips: [10.244.2.10, "fd00:10:244:2::10"] }
  external: { ips: [192.168.1.100, "fd00:1::100"] }
"#;

fn dual_stack() -> Scenario {
    let s: Scenario = serde_yaml_ng::from_str(DUAL_STACK).expect("dual-stack scenario parses");
    kpct::scenario::validate(&s).expect("dual-stack scenario is valid");
    s
}

/// A UDP socket bound to `addr` inside namespace `ns`, whose reads give up after [`WAIT`].
fn udp6_socket(ns: &kpct::netns::Netns, addr: std::net::SocketAddrV6) -> std::net::UdpSocket {
    let socket = ns
        .run(|| std::net::UdpSocket::bind(addr))
        .unwrap()
        .unwrap_or_else(|e| panic!("binding {addr} in {}: {e}", ns.name()));
    socket.set_read_timeout(Some(WAIT)).unwrap();
    socket
}

/// What a frame on a dual-stack topology's wire is, for the check that nothing but a probe's
/// packets and the neighbour discovery they need is there. Multicast listener reports (MLD to
/// ff02::16 after a hop-by-hop header, IGMPv3 to 224.0.0.22) are named as such: links send them
/// when they come up, IPv4 ones too, and no capture can take them for a probe's packet.
fn describe(frame: &kpct::capture::Frame) -> String {
    if let Some(flow) = frame.flow().filter(|f| f.src.is_ipv6()) {
        let icmp_type = frame.bytes.get(14 + 40).copied().unwrap_or(0);
        let mld_report = "ff02::16".parse::<std::net::IpAddr>().unwrap();
        return match (flow.protocol, icmp_type) {
            (0, _) if flow.dst == mld_report => "listener-report".into(),
            (58, 135) => "ndp-solicitation".into(),
            (58, 136) => "ndp-advertisement".into(),
            (58, t) => format!("icmpv6 type {t} {} -> {}", flow.src, flow.dst),
            _ => format!(
                "ipv6 proto {} [{}]:{} -> [{}]:{}",
                flow.protocol, flow.src, flow.sport, flow.dst, flow.dport
            ),
        };
    }
    match frame.flow() {
        Some(flow) if flow.dst == std::net::IpAddr::from([224, 0, 0, 22]) => {
            "listener-report".into()
        }
        Some(flow) => format!("ipv4 {flow}"),
        None => format!("ethertype {:02x}{:02x}", frame.bytes[12], frame.bytes[13]),
    }
}

/// IPv6 pod traffic between nodes rides flannel.1 inside the IPv4 underlay's VXLAN, as
/// flannel's dual-stack vxlan backend carries it, and comes back. On the pod's port and on the
/// underlay there is nothing else than the exchange, the neighbour discovery it needs and
/// multicast listener reports: no router solicitation, no DAD probe, no other packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_pod_traffic_crosses_nodes_inside_the_ipv4_vxlan_and_nothing_else() {
    use std::net::{Ipv6Addr, SocketAddrV6};
    let topo = Topology::build(&dual_stack())
        .await
        .expect("topology builds");
    let a1 = topo.pod("a1").unwrap();
    let b1 = topo.pod("b1").unwrap();
    let node_b = topo.node("node-b").unwrap();
    let (a1_ip, b1_ip) = (a1.ipv6.unwrap(), b1.ipv6.unwrap());
    assert_eq!(b1_ip, "fd00:10:244:2::10".parse::<Ipv6Addr>().unwrap());

    let mut on_b1_veth = Capture::open(&node_b.netns, &b1.host_veth).unwrap();
    let mut on_node_b_underlay = Capture::open(&node_b.netns, "eth0").unwrap();
    let server = udp6_socket(&b1.netns, SocketAddrV6::new(b1_ip, 8080, 0, 0));
    let client = udp6_socket(&a1.netns, SocketAddrV6::new(a1_ip, 40000, 0, 0));
    client
        .send_to(b"probe", SocketAddrV6::new(b1_ip, 8080, 0, 0))
        .unwrap();

    let mut underlay_seen = Vec::new();
    let encapsulated = on_node_b_underlay
        .wait_for(WAIT, |f| {
            underlay_seen.push(f.clone());
            f.vxlan_inner(VXLAN_PORT)
                .and_then(|inner| inner.flow())
                .is_some_and(|flow| {
                    (flow.src, flow.dst, flow.dport) == (a1_ip.into(), b1_ip.into(), 8080)
                })
        })
        .unwrap()
        .expect("the IPv6 packet crossed the underlay inside VXLAN (UDP 8472)");
    let outer = encapsulated.flow().unwrap();
    assert_eq!(
        (outer.src, outer.dst, outer.dport),
        (
            Ipv4Addr::new(192, 168, 1, 10).into(),
            Ipv4Addr::new(192, 168, 1, 11).into(),
            VXLAN_PORT
        ),
        "the tunnel is the IPv4 one, node-a -> node-b"
    );

    let mut buf = [0u8; 64];
    let (n, from) = server
        .recv_from(&mut buf)
        .expect("b1 received the datagram");
    assert_eq!(
        (&buf[..n], from),
        (&b"probe"[..], SocketAddrV6::new(a1_ip, 40000, 0, 0).into())
    );
    server.send_to(b"reply", from).unwrap();
    let (n, from) = client.recv_from(&mut buf).expect("a1 received the reply");
    assert_eq!(
        (&buf[..n], from),
        (&b"reply"[..], SocketAddrV6::new(b1_ip, 8080, 0, 0).into())
    );

    // Everything both captures saw, up to what is queued now.
    let mut veth_seen = Vec::new();
    on_b1_veth
        .wait_for(Duration::ZERO, |f| {
            veth_seen.push(describe(f));
            false
        })
        .unwrap();
    on_node_b_underlay
        .wait_for(Duration::ZERO, |f| {
            underlay_seen.push(f.clone());
            false
        })
        .unwrap();
    let udp = |src: Ipv6Addr, sport, dst: Ipv6Addr, dport| {
        format!("ipv6 proto 17 [{src}]:{sport} -> [{dst}]:{dport}")
    };
    let exchange = [
        udp(a1_ip, 40000, b1_ip, 8080),
        udp(b1_ip, 8080, a1_ip, 40000),
    ];
    let is_expected =
        |d: &String| exchange.contains(d) || d.starts_with("ndp-") || d == "listener-report";
    assert!(
        veth_seen.iter().all(is_expected)
            && veth_seen.iter().filter(|d| exchange.contains(d)).count() == 2,
        "b1's port saw more than the exchange and its neighbour discovery: {veth_seen:#?}"
    );
    // The nodes resolve each other's underlay addresses by ARP, as before any IPv6.
    let underlay: Vec<String> = underlay_seen
        .iter()
        .map(|f| match f.vxlan_inner(VXLAN_PORT) {
            Some(inner) => format!("vxlan {}", describe(&inner)),
            None => describe(f),
        })
        .filter(|d| d != "listener-report" && d != "ethertype 0806")
        .collect();
    assert_eq!(
        underlay,
        exchange
            .iter()
            .map(|d| format!("vxlan {d}"))
            .collect::<Vec<_>>(),
        "the underlay carried exactly the exchange (the VTEPs' neighbours are permanent)"
    );
}

/// The external client and the nodes reach each other over the IPv6 underlay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ipv6_underlay_connects_the_external_client_and_the_nodes() {
    use std::net::SocketAddrV6;
    let topo = Topology::build(&dual_stack())
        .await
        .expect("topology builds");
    let ext = topo.external().unwrap();
    let node_a = topo.node("node-a").unwrap();
    let node_ip = node_a.ipv6.unwrap();
    let server = udp6_socket(&node_a.netns, SocketAddrV6::new(node_ip, 9000, 0, 0));
    let client = udp6_socket(
        &ext.netns,
        SocketAddrV6::new(ext.ipv6.unwrap(), 41000, 0, 0),
    );
    client
        .send_to(b"hello", SocketAddrV6::new(node_ip, 9000, 0, 0))
        .unwrap();
    let mut buf = [0u8; 16];
    let (n, from) = server.recv_from(&mut buf).expect("node-a received it");
    assert_eq!(&buf[..n], b"hello");
    server.send_to(b"back", from).unwrap();
    let (n, _) = client
        .recv_from(&mut buf)
        .expect("the client got the answer");
    assert_eq!(&buf[..n], b"back");
}

/// An IPv6 secondary address (`secondaryIPs`) receives — the external client reaches the node
/// at it — while the node still sources its own traffic from its `ip`: the secondary one is
/// deprecated, which source address selection avoids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_secondary_address_receives_but_is_never_the_source() {
    use std::net::SocketAddrV6;
    let mut s = dual_stack();
    let secondary: std::net::Ipv6Addr = "fd00:1::20".parse().unwrap();
    s.topology.nodes[0].secondary_ips = vec![secondary.into()];
    kpct::scenario::validate(&s).expect("an IPv6 secondary IP is valid");
    let topo = Topology::build(&s).await.expect("topology builds");
    let ext = topo.external().unwrap();
    let node_a = topo.node("node-a").unwrap();
    let server = udp6_socket(&node_a.netns, SocketAddrV6::new(secondary, 9000, 0, 0));
    let client = udp6_socket(
        &ext.netns,
        SocketAddrV6::new(ext.ipv6.unwrap(), 41000, 0, 0),
    );
    client
        .send_to(b"hello", SocketAddrV6::new(secondary, 9000, 0, 0))
        .unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = server
        .recv_from(&mut buf)
        .expect("node-a received it at the secondary IP");
    assert_eq!(&buf[..n], b"hello");
    // The node's own traffic to the client leaves from its `ip`.
    let unbound = node_a
        .netns
        .run(|| std::net::UdpSocket::bind("[::]:0"))
        .unwrap()
        .unwrap();
    unbound
        .connect(SocketAddrV6::new(ext.ipv6.unwrap(), 41000, 0, 0))
        .unwrap();
    assert_eq!(
        unbound.local_addr().unwrap().ip(),
        std::net::IpAddr::V6(node_a.ipv6.unwrap())
    );
}

/// IPv6 runs only in the namespaces of a scenario with an IPv6 range, and there with fixed
/// link-local addresses (EUI-64 of the fixed MACs) that no build changes and none tentative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_is_off_in_ipv4_scenarios_and_fixed_in_dual_stack_ones() {
    let v4 = Topology::build(&scenario()).await.unwrap();
    let pod = &v4.pods()[0];
    let disabled = pod
        .netns
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6"))
        .unwrap()
        .unwrap();
    assert_eq!(
        disabled.trim(),
        "1",
        "an IPv4 scenario's pod has IPv6 disabled"
    );
    drop(v4);

    let addresses = |topo: &Topology| -> Vec<String> {
        let pod = topo.pod("a1").unwrap();
        let out = pod
            .netns
            .exec("ip", &["-6", "-o", "addr", "show", "dev", "eth0"])
            .unwrap();
        out.lines()
            .map(|l| {
                l.split_whitespace()
                    .skip(2)
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let first = Topology::build(&dual_stack()).await.unwrap();
    let second = Topology::build(&dual_stack()).await.unwrap();
    let (one, two) = (addresses(&first), addresses(&second));
    assert_eq!(one, two, "every build gives the same IPv6 addresses");
    let mac = first.pod("a1").unwrap().mac;
    let eui64 = format!(
        "fe80::{:02x}{:02x}:{:02x}ff:fe{:02x}:{:02x}{:02x}/64",
        mac[0] ^ 2,
        mac[1],
        mac[2],
        mac[3],
        mac[4],
        mac[5]
    );
    let eui64 = eui64.replace("::0", "::").replace(":0", ":");
    assert!(
        one.iter().any(|a| a.contains("fd00:10:244:1::10/64"))
            && one.iter().any(|a| a.contains(&eui64)),
        "a1 has its IPv6 address and the EUI-64 link-local {eui64}: {one:?}"
    );
    let tentative = first
        .pod("a1")
        .unwrap()
        .netns
        .exec("ip", &["-6", "addr", "show", "tentative"])
        .unwrap();
    assert_eq!(
        tentative.trim(),
        "",
        "no address waits on duplicate address detection"
    );
}
