//! The probe machinery against the real kernel, without any proxier: direct pod-to-pod paths
//! whose correct outcome is known, so the verdicts themselves are what is under test.

mod common;

use kpct::backends::Backends;
use kpct::document::Verdict;
use kpct::observe::observe_probe;
use kpct::probe::{self, packet::ProbePacket};
use kpct::scenario::{self, Protocol, Scenario};
use kpct::topology::Topology;
use std::time::Duration;

const SCENARIO: &str = concat!(
    crate::two_nodes!(),
    r#"  pods:
    - name: a1
      node: node-a
      ip: 10.244.1.10
    - name: b1
      node: node-b
      ip: 10.244.2.10
      ports:
        - { containerPort: 8080, protocol: TCP }
        - { containerPort: 5353, protocol: UDP }
  external: { ip: 192.168.1.100 }
probes:
  - { name: tcp-direct, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 8080 } }
  - { name: udp-direct, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 5353 }, protocol: UDP }
  - { name: no-listener, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 9999 } }
  - { name: nobody-home, from: { pod: a1 }, to: { ip: 10.244.2.99, dport: 8080 } }
  - { name: node-socket, from: { node: node-a }, to: { ip: 10.244.2.10, dport: 8080 } }
  - { name: node-socket-udp, from: { node: node-a }, to: { ip: 10.244.2.10, dport: 5353 }, protocol: UDP }
  - { name: external-to-pod, from: { external: true }, to: { ip: 10.244.2.10, dport: 8080, node: node-b } }
"#
);

const TIMEOUT: Duration = Duration::from_millis(1500);

fn scenario() -> Scenario {
    scenario::parse(SCENARIO, "probe-test.yaml").expect("scenario is valid")
}

async fn observe(name: &str) -> kpct::document::ProbeObservation {
    observe_in(&scenario(), name).await
}

/// Fires probe `name` of `s` in its freshly built topology, with no proxier.
async fn observe_in(s: &Scenario, name: &str) -> kpct::document::ProbeObservation {
    let topo = Topology::build(s).await.unwrap();
    let _servers = Backends::start(&topo, &s.topology.pods).unwrap();
    let index = s.probes.iter().position(|p| p.name == name).unwrap();
    let plan = probe::plan(s, &topo, index).unwrap();
    let shots = probe::fire(&topo, &plan, TIMEOUT).unwrap();
    observe_probe(&plan, &shots, &[], false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_tcp_syn_is_delivered_untranslated_and_answered() {
    let obs = observe("tcp-direct").await;
    let shot = &obs.shots[0];
    assert_eq!(shot.verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(shot.backend.as_deref(), Some("b1"));
    assert_eq!(
        shot.backend_saw.as_deref(),
        Some("10.244.1.10:20000 -> 10.244.2.10:8080")
    );
    assert_eq!(shot.source.as_deref(), Some("preserved"));
    assert_eq!(shot.reply.as_deref(), Some("from 10.244.2.10:8080"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_udp_datagram_is_echoed() {
    let obs = observe("udp-direct").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(
        obs.shots[0].backend_saw.as_deref(),
        Some("10.244.1.10:21000 -> 10.244.2.10:5353")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_without_listener_is_refused_by_the_backend() {
    let obs = observe("no-listener").await;
    assert_eq!(
        obs.shots[0].verdict,
        Verdict::DeliveredRefusedByBackend,
        "{obs:#?}"
    );
    assert_eq!(obs.shots[0].reply.as_deref(), Some("tcp-reset"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// The node that owns the subnet gives up resolving the address (the suite's neighbour retries
/// are short, so this comes before the probe's timeout) and answers host unreachable from its
/// overlay address.
async fn an_address_nobody_owns_is_unreachable() {
    let obs = observe("nobody-home").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Rejected, "{obs:#?}");
    assert_eq!(
        obs.shots[0].reply.as_deref(),
        Some("icmp-unreachable code 1 from 10.244.2.0")
    );
    assert_eq!(obs.backends, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_probes_report_what_the_backend_saw() {
    let obs = observe("node-socket").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(obs.shots[0].backend.as_deref(), Some("b1"));
    assert_eq!(obs.shots[0].source.as_deref(), Some("preserved"));
    let obs = observe("node-socket-udp").await;
    assert_eq!(obs.shots[0].backend.as_deref(), Some("b1"), "{obs:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_client_enters_through_the_named_node() {
    let obs = observe("external-to-pod").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(
        obs.shots[0].backend_saw.as_deref(),
        Some("192.168.1.100:26000 -> 10.244.2.10:8080")
    );
}

/// The same paths over IPv6, in a dual-stack topology: crafted IPv6 packets from pods and the
/// external client, IPv6 sockets from a node.
const DUAL_STACK: &str = r#"
topology:
  underlay: 192.168.1.0/24,fd00:192:168:1::/64
  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
  nodes:
    - { name: node-a, ips: [192.168.1.10, "fd00:192:168:1::10"], podCIDRs: [10.244.1.0/24, "fd00:10:244:1::/64"] }
    - { name: node-b, ips: [192.168.1.11, "fd00:192:168:1::11"], podCIDRs: [10.244.2.0/24, "fd00:10:244:2::/64"] }
  pods:
    - { name: a1, node: node-a, ips: [10.244.1.10, "fd00:10:244:1::10"] }
    - name: b1
      node: node-b
      ips: [10.244.2.10, "fd00:10:244:2::10"]
      ports:
        - { containerPort: 8080, protocol: TCP }
        - { containerPort: 5353, protocol: UDP }
  external: { ips: [192.168.1.100, "fd00:192:168:1::100"] }
probes:
  - { name: tcp6, from: { pod: a1 }, to: { ip: "fd00:10:244:2::10", dport: 8080 } }
  - { name: udp6, from: { pod: a1 }, to: { ip: "fd00:10:244:2::10", dport: 5353 }, protocol: UDP }
  - { name: no-listener6, from: { pod: a1 }, to: { ip: "fd00:10:244:2::10", dport: 9999 } }
  - { name: node-socket6, from: { node: node-a }, to: { ip: "fd00:10:244:2::10", dport: 8080 } }
  - { name: external6, from: { external: true }, to: { ip: "fd00:10:244:2::10", dport: 8080, node: node-b } }
  - { name: tcp4, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 8080 } }
"#;

async fn observe6(name: &str) -> kpct::document::ProbeObservation {
    let s = scenario::parse(DUAL_STACK, "probe-test-dual-stack.yaml").expect("scenario is valid");
    observe_in(&s, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_ipv6_packets_are_delivered_and_answered() {
    let obs = observe6("tcp6").await;
    let shot = &obs.shots[0];
    assert_eq!(shot.verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(obs.from, "pod a1 ([fd00:10:244:1::10]:20000)");
    assert_eq!(
        shot.backend_saw.as_deref(),
        Some("[fd00:10:244:1::10]:20000 -> [fd00:10:244:2::10]:8080")
    );
    assert_eq!(shot.reply.as_deref(), Some("from [fd00:10:244:2::10]:8080"));
    let obs = observe6("udp6").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
    let obs = observe6("no-listener6").await;
    assert_eq!(
        (obs.shots[0].verdict, obs.shots[0].reply.as_deref()),
        (Verdict::DeliveredRefusedByBackend, Some("tcp-reset")),
        "{obs:#?}"
    );
    // The IPv4 path of a dual-stack pod is unchanged: the IPv6 listener is a socket of its own.
    let obs = observe6("tcp4").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_sockets_and_the_external_client_reach_a_pod() {
    let obs = observe6("node-socket6").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(obs.shots[0].source.as_deref(), Some("preserved"));
    assert_eq!(
        obs.shots[0].backend_saw.as_deref(),
        Some("client fd00:192:168:1::10")
    );
    let obs = observe6("external6").await;
    assert_eq!(obs.shots[0].verdict, Verdict::Delivered, "{obs:#?}");
    assert_eq!(
        obs.shots[0].backend_saw.as_deref(),
        Some("[fd00:192:168:1::100]:24000 -> [fd00:10:244:2::10]:8080")
    );
}

#[test]
fn probe_sequence_numbers_are_stable_and_distinct() {
    assert_eq!(
        probe::sequence_number("a", 0),
        probe::sequence_number("a", 0)
    );
    assert_ne!(
        probe::sequence_number("a", 0),
        probe::sequence_number("a", 1)
    );
    assert_ne!(
        probe::sequence_number("a", 0),
        probe::sequence_number("b", 0)
    );
    let p = ProbePacket {
        protocol: Protocol::Tcp,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: "10.0.0.1".parse().unwrap(),
        sport: 1,
        dst: "10.0.0.2".parse().unwrap(),
        dport: 2,
        seq: 7,
    };
    assert_eq!(p.frame(), p.clone().frame());
}

/// Two probes on one 4-tuple with different sequence numbers, the client's RSTs dropped (as
/// when a broken reply path keeps the SYN-ACK from the client, or a lost RST): the backend must
/// answer the second with a SYN-ACK for its own sequence number. That holds because pods'
/// listeners keep no half-open state (syncookies always); with the kernel's default, the first
/// SYN's request socket survives and answers the second with the first's acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_leaves_nothing_for_the_next_probe() {
    let text = format!(
        "{SCENARIO}  - {{ name: first, from: {{ pod: a1 }}, to: {{ ip: 10.244.2.10, dport: 8080 }}, sourcePort: 40000 }}\n  - {{ name: second, from: {{ pod: a1 }}, to: {{ ip: 10.244.2.10, dport: 8080 }}, sourcePort: 40000 }}\n"
    );
    let s = scenario::parse(&text, "half-open.yaml").expect("scenario is valid");
    let verdicts = |syncookies: &'static str| {
        let s = s.clone();
        async move {
            let topo = Topology::build(&s).await.unwrap();
            let _servers = Backends::start(&topo, &s.topology.pods).unwrap();
            let client = &topo.pod("a1").unwrap().netns;
            client
                .exec(
                    "iptables",
                    &[
                        "-A",
                        "OUTPUT",
                        "-p",
                        "tcp",
                        "--tcp-flags",
                        "RST",
                        "RST",
                        "-j",
                        "DROP",
                    ],
                )
                .unwrap();
            let backend = &topo.pod("b1").unwrap().netns;
            backend
                .set_sysctl(kpct::topology::TCP_SYNCOOKIES, syncookies)
                .unwrap();
            let mut out = Vec::new();
            for name in ["first", "second"] {
                let index = s.probes.iter().position(|p| p.name == name).unwrap();
                let plan = probe::plan(&s, &topo, index).unwrap();
                let shots = probe::fire(&topo, &plan, TIMEOUT).unwrap();
                out.push(observe_probe(&plan, &shots, &[], false).shots[0].verdict);
            }
            out
        }
    };
    assert_eq!(
        verdicts("2").await,
        [Verdict::Delivered, Verdict::Delivered],
        "the topology's stateless listeners"
    );
    assert_eq!(
        verdicts("1").await,
        [Verdict::Delivered, Verdict::DeliveredNoReply],
        "the kernel default keeps the first SYN's request socket, which answers the second"
    );
}

/// A flow the proxier refuses to open is that probe's outcome (judged as any probe's), not an
/// error of the run; a later `continue` of it sends nothing and is recorded as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_flow_that_never_opens_is_an_outcome_not_an_error() {
    let text = concat!(
        crate::two_nodes!(),
        r#"  pods:
    - { name: client, node: node-a, ip: 10.244.1.10 }
services:
  - name: empty
    spec:
      clusterIP: 10.96.0.10
      selector: { app: nothing }
      ports: [{ name: http, port: 80, targetPort: 8080 }]
probes:
  - name: open
    from: { pod: client }
    to: { service: empty, port: http }
    keep: session
    expect: { outcome: rejected }
steps:
  - name: later
    probes:
      - name: again
        continue: session
        expect: { outcome: dropped }
"#
    );
    let s = kpct::scenario::parse(text, "never-opened.yaml").expect("valid");
    let proxier = kpct::builtin("kube-proxy-iptables").expect("built-in");
    let run = kpct::run_scenario(&s, &proxier, kpct::probe::probe_timeout())
        .await
        .expect("the run completes");
    assert!(run.violations.is_empty(), "{:#?}", run.violations);
    let again = &run.observation.steps[0].probes[0];
    assert_eq!(
        again.all[0].reply.as_deref(),
        Some(kpct::probe::NEVER_OPENED),
        "{again:#?}"
    );
}
