//! `kpct trace`: one shot of a probe with the kernel's nf_tables trace on every node. The RKE2
//! walkthrough's NodePort packet must show, observed, the path the seed note draws by hand.

use kpct::probe::probe_timeout;
use kpct::trace::{PacketPath, Trace};
use std::path::Path;

fn try_trace(scenario: &str, probe: &str, proxier_name: &str) -> anyhow::Result<Trace> {
    try_trace_at(scenario, None, probe, proxier_name)
}

fn try_trace_at(
    scenario: &str,
    step: Option<usize>,
    probe: &str,
    proxier_name: &str,
) -> anyhow::Result<Trace> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(scenario);
    let scenario = kpct::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let proxier = kpct::builtin(proxier_name).expect("a built-in proxier");
    tokio::runtime::Runtime::new()
        .expect("a tokio runtime")
        .block_on(kpct::trace::trace(
            &scenario,
            step,
            probe,
            proxier.as_ref(),
            probe_timeout(),
        ))
}

fn trace(scenario: &str, probe: &str, proxier_name: &str) -> Trace {
    try_trace(scenario, probe, proxier_name)
        .unwrap_or_else(|e| panic!("tracing {probe} against {proxier_name}: {e:#}"))
}

/// The path of the probe's first packet (the client's SYN) through `node`.
fn request_path(trace: &Trace, node: &str) -> PacketPath {
    let node = trace
        .nodes
        .iter()
        .find(|n| n.node == node)
        .unwrap_or_else(|| panic!("no node {node} in the trace:\n{trace}"));
    node.paths()
        .into_iter()
        .find(|p| p.first_seen.ends_with(" SYN"))
        .unwrap_or_else(|| panic!("no SYN traced on {}:\n{trace}", node.node))
}

/// Asserts that hops matching each pattern occur in this order (other hops may come between).
fn assert_in_order(trace: &Trace, path: &PacketPath, patterns: &[&str]) {
    let mut rest = path.hops.iter();
    for pattern in patterns {
        assert!(
            rest.any(|hop| hop.contains(pattern)),
            "`{pattern}` missing or out of order in {:?}\n\nfull trace:\n{trace}",
            path.hops
        );
    }
}

#[test]
fn needs_ipvs_trace_shows_kube_node_port_then_ipvs_then_masquerade() {
    kpct::kernel_features::require_ipvs();
    let trace = trace(
        "rke2-ipvs-node.yaml",
        "external-to-nodeport",
        "kube-proxy-ipvs",
    );
    let path = request_path(&trace, "node-a");
    assert!(
        path.first_seen.contains("DST=192.168.1.10 ") && path.first_seen.contains("DPORT=30080")
    );
    assert_in_order(
        &trace,
        &path,
        &[
            "nat:PREROUTING",
            "nat:KUBE-SERVICES",
            "nat:KUBE-NODE-PORT",
            "nat:KUBE-MARK-MASQ [MARK --set-xmark 0x4000/0x4000]",
            "filter:INPUT",
            "IPVS TCP 192.168.1.10:30080 rr -> 10.244.1.1",
            "nat:POSTROUTING",
            // The mark is cleared so the packet is not masqueraded twice, then MASQUERADE.
            "nat:KUBE-POSTROUTING [MARK --set-xmark 0x4000/0x0] [MASQUERADE --random-fully]",
        ],
    );
    let ipvs_hop = path
        .hops
        .iter()
        .find(|h| h.starts_with("IPVS"))
        .expect("an IPVS hop");
    assert!(ipvs_hop.ends_with(":8080 Masq"), "{ipvs_hop}");
    // IPVS mode has no per-service DNAT rules: the translation is IPVS's alone.
    assert!(
        !path.hops.iter().any(|h| h.contains("DNAT")),
        "{:?}",
        path.hops
    );
    let text = trace.to_string();
    assert!(text.contains("ipvsadm -Lnc:"), "{text}");
    assert!(
        text.contains("192.168.1.100:21000 192.168.1.10:30080 10.244.1.1"),
        "{text}"
    );
    let node_b = trace
        .nodes
        .iter()
        .find(|n| n.node == "node-b")
        .expect("node-b");
    assert!(
        node_b.events.is_empty(),
        "the probe never touches node-b:\n{text}"
    );
}

#[test]
fn needs_ipvs_trace_follows_a_clusterip_packet_across_the_overlay() {
    kpct::kernel_features::require_ipvs();
    let trace = trace("rke2-ipvs-node.yaml", "pod-to-clusterip", "kube-proxy-ipvs");
    // The client's node balances (IPVS on the ClusterIP bound to kube-ipvs0) and does not
    // masquerade; the backend's node only forwards what arrives from flannel.1.
    let client_side = request_path(&trace, "node-b");
    assert_in_order(
        &trace,
        &client_side,
        &[
            "nat:PREROUTING",
            "nat:KUBE-SERVICES",
            "filter:INPUT",
            "IPVS TCP 10.96.123.45:80 rr -> 10.244.1.1",
            "nat:POSTROUTING",
        ],
    );
    assert!(
        !client_side.hops.iter().any(|h| h.contains("MASQUERADE")),
        "{:?}",
        client_side.hops
    );
    let backend_side = request_path(&trace, "node-a");
    assert!(
        backend_side.first_seen.starts_with("IN=flannel.1 "),
        "{}",
        backend_side.first_seen
    );
    assert_in_order(&trace, &backend_side, &["raw:PREROUTING", "filter:FORWARD"]);
    assert!(
        !backend_side.hops.iter().any(|h| h.starts_with("IPVS")),
        "{:?}",
        backend_side.hops
    );
}

#[test]
fn trace_shows_the_iptables_nodeport_chain_walk() {
    let trace = trace(
        "rke2-ipvs-node.yaml",
        "external-to-nodeport",
        "kube-proxy-iptables",
    );
    let path = request_path(&trace, "node-a");
    assert_in_order(
        &trace,
        &path,
        &[
            "nat:PREROUTING",
            "nat:KUBE-SERVICES",
            "nat:KUBE-NODEPORTS",
            "nat:KUBE-EXT-",
            "nat:KUBE-MARK-MASQ [MARK --set-xmark 0x4000/0x4000]",
            "nat:KUBE-SVC-",
            "[DNAT --to-destination 10.244.1.1",
            "filter:FORWARD",
            // The mark is cleared so the packet is not masqueraded twice, then MASQUERADE.
            "nat:KUBE-POSTROUTING [MARK --set-xmark 0x4000/0x0] [MASQUERADE --random-fully]",
        ],
    );
    assert!(
        !path.hops.iter().any(|h| h.starts_with("IPVS")),
        "no IPVS in iptables mode: {:?}",
        path.hops
    );
    let text = trace.to_string();
    assert!(text.contains("outcome: delivered to web-"), "{text}");
    assert!(text.contains("conntrack -L:"), "{text}");
    assert!(text.contains("sport=21000 dport=30080"), "{text}");
}

/// nftables mode is traced with `nft monitor trace`: its base chains, the verdict maps' gotos,
/// the endpoint chain's DNAT and the masquerade, in order.
#[test]
fn trace_shows_the_nftables_nodeport_chain_walk() {
    let trace = trace(
        "rke2-ipvs-node.yaml",
        "external-to-nodeport",
        "kube-proxy-nftables",
    );
    let path = request_path(&trace, "node-a");
    assert_in_order(
        &trace,
        &path,
        &[
            "kube-proxy:filter-prerouting-pre-dnat",
            "kube-proxy:firewall-check",
            "kube-proxy:nat-prerouting",
            "kube-proxy:services",
            "kube-proxy:external-",
            "kube-proxy:mark-for-masquerade [meta mark set meta mark | 0x00004000]",
            "kube-proxy:service-",
            "[dnat to 10.244.1.1",
            "kube-proxy:filter-forward",
            "kube-proxy:masquerading [meta mark set meta mark ^ 0x00004000 masquerade fully-random]",
        ],
    );
    let text = trace.to_string();
    assert!(text.contains("outcome: delivered to web-"), "{text}");
    assert!(
        !text.contains("kpct-trace"),
        "the tracer's own rules are left out: {text}"
    );
}

/// An IPv6 probe is traced too: the tracer's table is `inet`, and the packet summary reads
/// `ip6` addresses. Its SYN walks the `ip6 kube-proxy` table to the IPv6 endpoint's DNAT.
#[test]
fn trace_follows_an_ipv6_packet_through_the_ip6_table() {
    let trace = trace(
        "ipv6-nodeport-external.yaml",
        "external-via-node-a",
        "kube-proxy-nftables",
    );
    let path = request_path(&trace, "node-a");
    assert!(
        path.first_seen
            .contains("SRC=fd00:192:168:1::100 DST=fd00:192:168:1::10"),
        "{trace}"
    );
    assert_in_order(
        &trace,
        &path,
        &[
            "kube-proxy:nat-prerouting",
            "kube-proxy:services",
            "kube-proxy:external-",
            "[dnat to [fd00:10:244:2::",
            "kube-proxy:masquerading [meta mark set meta mark ^ 0x00004000 masquerade fully-random]",
        ],
    );
}

/// iptables mode's IPv6 proxier writes ip6tables; an IPv6 probe is traced with `nft monitor
/// trace` (xtables-monitor 1.8.9 cannot print those rules): an IPv6-only cluster's NodePort SYN
/// walks the ip6tables-nft nat chains to the IPv6 DNAT, and its conntrack entry is listed.
#[test]
fn trace_follows_an_ipv6_packet_through_ip6tables() {
    let trace = trace(
        "ipv6-only-nodeport-external.yaml",
        "external-via-node-a",
        "kube-proxy-iptables",
    );
    let path = request_path(&trace, "node-a");
    assert_in_order(
        &trace,
        &path,
        &[
            "nat:PREROUTING",
            "nat:KUBE-SERVICES",
            "nat:KUBE-NODEPORTS",
            "nat:KUBE-EXT-",
            "[dnat to [fd00:10:244:2::",
            "nat:KUBE-POSTROUTING [meta mark set mark xor 0x4000] [masquerade fully-random]",
        ],
    );
    let text = trace.to_string();
    assert!(
        text.contains("dport=30080"),
        "the IPv6 flow's conntrack entry: {text}"
    );
}

#[test]
fn trace_names_the_probes_of_a_scenario_when_one_is_unknown() {
    let err = try_trace(
        "rke2-ipvs-node.yaml",
        "no-such-probe",
        "kube-proxy-iptables",
    )
    .expect_err("an unknown probe is an error");
    assert_eq!(
        err.to_string(),
        "scenario rke2-ipvs-node has no probe `no-such-probe`; its probes: pod-to-clusterip, \
         external-to-nodeport, external-to-nodeport-on-node-b, external-to-local-nodeport"
    );
}

/// `--step N` traces a probe of step N after the steps up to it were synced: the NodePort of a
/// Service changed to ClusterIP, traced after the change, passes an empty KUBE-NODEPORTS and
/// meets no KUBE-EXT- chain, which it did before.
#[test]
fn a_step_probe_is_traced_after_the_steps_before_it() {
    let t = try_trace_at(
        "transition-nodeport-to-clusterip.yaml",
        Some(1),
        "nodeport-closed-node-a",
        "kube-proxy-iptables",
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let text = t.to_string();
    assert!(text.contains("nat:KUBE-NODEPORTS"), "{text}");
    assert!(!text.contains("KUBE-EXT-"), "{text}");
    let before = trace(
        "transition-nodeport-to-clusterip.yaml",
        "nodeport-open",
        "kube-proxy-iptables",
    );
    assert!(before.to_string().contains("nat:KUBE-EXT-"), "{before}");
    let no_step = try_trace_at(
        "transition-nodeport-to-clusterip.yaml",
        Some(2),
        "nodeport-open",
        "kube-proxy-iptables",
    )
    .unwrap_err();
    assert!(
        no_step
            .to_string()
            .contains("has no step 2 (it has 1; steps count from 1)"),
        "{no_step:#}"
    );
}

/// A probe that continues a kept flow is traced on that flow: the connection is opened where the
/// scenario opens it, carried through the step (web-1 starts terminating), and its next
/// exchange traced. Its packets ride the established conntrack entry — no nat chain sees them —
/// still to web-1, and the entry is shown.
#[test]
fn trace_of_a_continued_flow_rides_its_conntrack_entry() {
    let trace = try_trace_at(
        "transition-terminating-established.yaml",
        Some(1),
        "session-continues",
        "kube-proxy-iptables",
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        trace
            .observation
            .probe
            .contains("session-continues (continues the flow `session`)"),
        "{trace}"
    );
    let node_a = trace.nodes.iter().find(|n| n.node == "node-a").unwrap();
    assert!(
        node_a.conntrack.iter().any(|l| l.contains(
            "ESTABLISHED src=10.244.1.10 dst=10.96.0.10 sport=20000 dport=80 src=10.244.2.21"
        )),
        "{trace}"
    );
    let request = node_a
        .paths()
        .into_iter()
        .find(|p| p.first_seen.contains("DST=10.96.0.10") && p.first_seen.ends_with("PSH"))
        .unwrap_or_else(|| panic!("the request is not traced:\n{trace}"));
    assert!(
        !request.hops.iter().any(|h| h.starts_with("nat:")),
        "an established flow meets no nat chain: {:?}\n{trace}",
        request.hops
    );
    assert!(trace.to_string().contains("delivered to web-1"), "{trace}");
}
