//! The reference proxiers' programming, applied to a real node namespace and read back from the
//! kernel: the effective state is snapshotted, and what the design documents (the seeds) claim
//! about kube-proxy's IPVS mode is asserted from it — iptables still does NodePort entry, the
//! masquerade mark and MASQUERADE; IPVS holds the virtual/real servers, with Masq forwarding.

mod common;

use kpct::builtin;
use kpct::kernel_features::require_ipvs;
use kpct::programming::{apply, effective_state, EffectiveState, ReadOptions, Table};
use kpct::scenario;
use kpct::topology::Topology;

/// Every service shape the issue lists: ClusterIP, NodePort with eTP Cluster and Local,
/// ExternalIP, LoadBalancer (with source ranges), sessionAffinity ClientIP.
const ALL_SERVICE_TYPES: &str = concat!(
    crate::two_nodes!(),
    r#"  pods:
    - { name: web-a, node: node-a, ip: 10.244.1.10, labels: { app: web }, ports: [{ name: http, containerPort: 8080 }] }
    - { name: web-b, node: node-b, ip: 10.244.2.10, labels: { app: web }, ports: [{ name: http, containerPort: 8080 }] }
services:
  - name: cluster-ip
    spec: { clusterIP: 10.96.0.10, selector: { app: web }, ports: [{ port: 80, targetPort: http }] }
  - name: node-port-cluster
    spec: { type: NodePort, clusterIP: 10.96.0.11, selector: { app: web }, ports: [{ port: 80, targetPort: http, nodePort: 30080 }] }
  - name: node-port-local
    spec:
      type: NodePort
      clusterIP: 10.96.0.12
      externalTrafficPolicy: Local
      selector: { app: web }
      ports: [{ port: 80, targetPort: http, nodePort: 30081 }]
  - name: external-ip
    spec: { clusterIP: 10.96.0.13, externalIPs: [203.0.113.10], selector: { app: web }, ports: [{ port: 80, targetPort: http }] }
  - name: load-balancer
    spec:
      type: LoadBalancer
      clusterIP: 10.96.0.14
      selector: { app: web }
      loadBalancerSourceRanges: [192.168.1.0/24]
      ports: [{ port: 80, targetPort: http, nodePort: 30082 }]
    status: { loadBalancer: { ingress: [{ ip: 203.0.113.20 }] } }
  - name: affinity
    spec:
      clusterIP: 10.96.0.15
      sessionAffinity: ClientIP
      selector: { app: web }
      ports: [{ port: 80, targetPort: http }]
"#
);

/// Programs node-a with a built-in proxier and reads the kernel's state back.
async fn programmed_node_a(proxier: &str) -> EffectiveState {
    let s = scenario::parse(ALL_SERVICE_TYPES, "all-service-types.yaml").unwrap();
    let topo = Topology::build(&s).await.unwrap();
    let node = topo.node("node-a").unwrap();
    let cluster = scenario::cluster_state(&s);
    let ctx = scenario::node_context(&s, "node-a").unwrap();
    let programming = builtin(proxier).unwrap().program(&cluster, &ctx).unwrap();
    apply(node, &programming).unwrap_or_else(|e| panic!("{proxier} programming applies: {e}"));
    let state = effective_state(&node.netns, &ReadOptions::for_programming(&programming)).unwrap();
    assert_eq!(
        state.diff_against(&programming),
        vec![],
        "the kernel holds everything the proxier asked for"
    );
    state
}

fn snapshot(name: &str, state: &EffectiveState) {
    insta::with_settings!({snapshot_path => "../../snapshots", prepend_module_to_snapshot => false, omit_expression => true}, {
        insta::assert_snapshot!(name, state.to_text());
    });
}

fn rules(state: &EffectiveState, table: Table, chain: &str) -> Vec<String> {
    let prefix = format!("-A {chain} ");
    state
        .iptables
        .get(&table)
        .map(|t| {
            t.rules
                .iter()
                .filter(|r| r.starts_with(&prefix))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_effective_state_of_kube_proxy_ipvs() {
    require_ipvs();
    let state = programmed_node_a("kube-proxy-ipvs").await;
    snapshot("effective-all-service-types@kube-proxy-ipvs", &state);

    // Seeds: "iptables still matches NodePort first" — PREROUTING -> KUBE-SERVICES ->
    // (dst-type LOCAL) KUBE-NODE-PORT -> mark for masquerade.
    assert!(rules(&state, Table::Nat, "PREROUTING")
        .iter()
        .any(|r| r.ends_with("-j KUBE-SERVICES")));
    assert!(rules(&state, Table::Nat, "KUBE-SERVICES")
        .iter()
        .any(|r| r.contains("--dst-type LOCAL") && r.ends_with("-j KUBE-NODE-PORT")));
    assert!(rules(&state, Table::Nat, "KUBE-NODE-PORT")
        .iter()
        .any(|r| r.contains("--match-set KUBE-NODE-PORT-TCP dst")
            && r.ends_with("-j KUBE-MARK-MASQ")));
    // Seeds: "SNAT/MASQUERADE is done by iptables" — the mark chain and KUBE-POSTROUTING.
    assert!(rules(&state, Table::Nat, "KUBE-MARK-MASQ")
        .iter()
        .any(|r| r.contains("0x4000")));
    assert!(rules(&state, Table::Nat, "POSTROUTING")
        .iter()
        .any(|r| r.ends_with("-j KUBE-POSTROUTING")));
    assert!(rules(&state, Table::Nat, "KUBE-POSTROUTING")
        .iter()
        .any(|r| r.contains("-j MASQUERADE")));
    // ... but iptables never DNATs in IPVS mode: IPVS does.
    let nat = state.iptables.get(&Table::Nat).unwrap();
    assert!(
        !nat.rules.iter().any(|r| r.contains("-j DNAT")),
        "no DNAT rule in IPVS mode"
    );

    // Seeds: "IPVS does the load balancing and DNAT" — virtual servers for the ClusterIP and
    // the NodePort on the node IP, real servers = the endpoints, Masq forwarding.
    let ipvs = state.ipvs.as_ref().expect("IPVS table read back");
    for vs in [
        "-A -t 10.96.0.11:80 -s rr",
        "-A -t 192.168.1.10:30080 -s rr",
    ] {
        assert!(ipvs.save.lines().any(|l| l == vs), "{vs} in\n{}", ipvs.save);
    }
    for rs in [
        "-a -t 192.168.1.10:30080 -r 10.244.1.10:8080 -m -w 1",
        "-a -t 192.168.1.10:30080 -r 10.244.2.10:8080 -m -w 1",
    ] {
        assert!(ipvs.save.lines().any(|l| l == rs), "{rs} in\n{}", ipvs.save);
    }
    // sessionAffinity ClientIP = IPVS persistence with kube-proxy's default 10800 s.
    assert!(
        ipvs.save
            .lines()
            .any(|l| l == "-A -t 10.96.0.15:80 -s rr -p 10800"),
        "{}",
        ipvs.save
    );
    // eTP Local NodePort: only node-a's own endpoint.
    let local: Vec<_> = ipvs
        .save
        .lines()
        .filter(|l| l.starts_with("-a -t 192.168.1.10:30081 "))
        .collect();
    assert_eq!(
        local,
        vec!["-a -t 192.168.1.10:30081 -r 10.244.1.10:8080 -m -w 1"]
    );
    // Service VIPs live on kube-ipvs0 (DOWN, NOARP dummy) so IPVS sees them as local.
    let dev = state.kube_ipvs0.as_ref().expect("kube-ipvs0 exists");
    let text = format!("{dev:?}");
    for vip in ["10.96.0.10", "10.96.0.15", "203.0.113.10", "203.0.113.20"] {
        assert!(text.contains(vip), "{vip} on kube-ipvs0: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effective_state_of_kube_proxy_iptables() {
    let state = programmed_node_a("kube-proxy-iptables").await;
    snapshot("effective-all-service-types@kube-proxy-iptables", &state);
    // iptables mode: DNAT in KUBE-SEP chains, no IPVS, no ipsets.
    let nat = state.iptables.get(&Table::Nat).unwrap();
    assert!(nat
        .rules
        .iter()
        .any(|r| r.starts_with("-A KUBE-SEP-") && r.contains("-j DNAT")));
    assert!(state.ipvs.as_ref().is_none_or(|t| t.servers.is_empty()));
    assert!(state.ipsets.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effective_state_of_kube_proxy_nftables() {
    let state = programmed_node_a("kube-proxy-nftables").await;
    snapshot("effective-all-service-types@kube-proxy-nftables", &state);
    // nftables mode: one table of its own; no iptables, IPVS or ipsets.
    assert!(state.iptables.is_empty() && state.ipsets.is_empty());
    assert!(state.ipvs.as_ref().is_none_or(|t| t.servers.is_empty()));
    let tables: Vec<String> = state.nft.keys().map(ToString::to_string).collect();
    assert_eq!(tables, ["ip kube-proxy"]);
    let listing = state.nft.values().next().unwrap();
    // The kernel's spellings: the affinity sets' `timeout 10800s` reads `3h`, and the
    // dynamic sets' elements (packets add them) are not part of the state.
    assert!(listing.iter().any(|l| l == "timeout 3h"), "{listing:#?}");
    assert!(listing
        .iter()
        .any(|l| l.starts_with("element 10.96.0.11 . tcp . 80 : goto service-")));
    // Source ranges: the LB IP goes to its firewall chain, which drops other sources; the
    // range holds the node's IP, so the LB IP itself is allowed too (a node's own request to
    // a VIP-like LB comes back from the VIP).
    assert!(listing
        .iter()
        .any(|l| l.starts_with("element 203.0.113.20 . tcp . 80 : goto firewall-")));
    assert!(listing
        .iter()
        .any(|l| l == "ip saddr != { 192.168.1.0/24, 203.0.113.20 } drop"));
}
