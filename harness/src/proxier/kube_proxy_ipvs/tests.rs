//! Expectations ported from pkg/proxy/ipvs/proxier_test.go (test names cited per test), plus a
//! snapshot of a whole small cluster.
//!
//! proxier_test.go's fake proxier uses `NewNoOpLocalDetector()` and scheduler rr, and its
//! `checkIptables` compares only (jump target, `--match-set` name) per rule, looking chains up
//! by name across nat and filter; [`chain`] mirrors that.

use super::KubeProxyIpvs;
use crate::programming::{IpSetType, Programming, Table, VirtualServer};
use crate::proxier::test_cluster::{self, cidr, ip, With};
use crate::proxier::Proxier;
use crate::scenario::cluster::{
    ClusterState, EndpointInfo, NodeContext, NodeInfo, ServicePortInfo,
};
use crate::scenario::{IpFamily, Protocol, ProxierOptions, ServiceType};
use ipvs_genl::{ForwardMethod, ServiceFlags, ServiceKey};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

/// proxier_test.go's `testHostname`.
const THIS_NODE: &str = "test-hostname";
const OTHER_NODE: &str = "other-hostname";

/// The fake proxier's node: `100.101.102.103` on eth0.
fn node() -> NodeContext {
    NodeContext {
        name: THIS_NODE.into(),
        node_ip: ip("100.101.102.103"),
        pod_cidr: cidr("10.180.0.0/24"),
        local_addresses: vec![ip("100.101.102.103")],
        ipv6: None,
    }
}

/// A ClusterIP service port `ns1/<name>:p80` with no endpoints, of `protocol` on `port`.
fn svc(name: &str, cluster_ip: &str, protocol: Protocol, port: u16) -> ServicePortInfo {
    test_cluster::svc("ns1", name, cluster_ip).with(|s| {
        s.protocol = protocol;
        s.port = port;
    })
}

fn node_port(mut sp: ServicePortInfo, port: u16) -> ServicePortInfo {
    sp.type_ = ServiceType::NodePort;
    sp.node_port = Some(port);
    sp
}

fn load_balancer(sp: ServicePortInfo, node_port_number: u16, vip: &str) -> ServicePortInfo {
    let mut sp = node_port(sp, node_port_number);
    sp.type_ = ServiceType::LoadBalancer;
    sp.load_balancer_vips = vec![ip(vip)];
    sp
}

/// A ready endpoint; `node` None means no nodeName (never local).
fn ep(addr: &str, port: u16, node: Option<&str>) -> EndpointInfo {
    EndpointInfo {
        ip: ip(addr),
        port,
        node_name: node.map(str::to_string),
        ready: true,
        serving: true,
        terminating: false,
    }
}

fn ep_cond(
    addr: &str,
    node: Option<&str>,
    ready: bool,
    serving: bool,
    terminating: bool,
) -> EndpointInfo {
    EndpointInfo {
        ready,
        serving,
        terminating,
        ..ep(addr, 80, node)
    }
}

/// Options of proxier_test.go's fake proxier: no local detector, rr.
fn fake_options() -> ProxierOptions {
    ProxierOptions {
        masquerade_all: false,
        cluster_cidr: false,
        ipvs_scheduler: "rr".into(),
        strict_arp: false,
        localhost_node_ports: true,
        random_fully: true,
        masquerade_bit: 14,
        node_port_addresses: Vec::new(),
        ipvs_timeouts: Default::default(),
        ipvs_exclude_cidrs: Vec::new(),
        tcp_be_liberal: false,
    }
}

fn cluster_with(options: ProxierOptions, service_ports: Vec<ServicePortInfo>) -> ClusterState {
    ClusterState {
        ip_family: crate::scenario::IpFamily::Ipv4,
        cluster_cidr: cidr("10.180.0.0/16"),
        service_cidr: cidr("10.20.30.0/24"),
        nodes: vec![
            NodeInfo {
                name: THIS_NODE.into(),
                ip: ip("100.101.102.103"),
                pod_cidr: cidr("10.180.0.0/24"),
            },
            NodeInfo {
                name: OTHER_NODE.into(),
                ip: ip("100.101.102.104"),
                pod_cidr: cidr("10.180.1.0/24"),
            },
        ],
        service_ports,
        options,
        ipv6: None,
        idle: false,
    }
}

fn program(service_ports: Vec<ServicePortInfo>) -> Programming {
    program_with(fake_options(), &node(), service_ports)
}

fn program_with(
    options: ProxierOptions,
    node: &NodeContext,
    service_ports: Vec<ServicePortInfo>,
) -> Programming {
    KubeProxyIpvs::default()
        .program(&cluster_with(options, service_ports), node)
        .expect("program")
}

// ---------------------------------------------------------------------------------------------
// Accessors in the shape of proxier_test.go's checkIPVS / checkIPSet / checkIptables
// ---------------------------------------------------------------------------------------------

fn key(addr: &str, port: u16, protocol: ipvs_genl::Protocol) -> ServiceKey {
    ServiceKey::Addr {
        protocol,
        addr: ip(addr),
        port,
    }
}

const TCP: ipvs_genl::Protocol = ipvs_genl::Protocol::Tcp;
const UDP: ipvs_genl::Protocol = ipvs_genl::Protocol::Udp;

fn vs(p: &Programming, key: ServiceKey) -> &VirtualServer {
    p.ipvs
        .iter()
        .find(|v| v.service.key == key)
        .unwrap_or_else(|| panic!("no virtual server {key:?} in {:#?}", p.ipvs))
}

/// `addr:port` (`[addr]:port` for IPv6) of every real server of a VS.
fn rs(p: &Programming, key: ServiceKey) -> Vec<String> {
    vs(p, key)
        .destinations
        .iter()
        .map(|d| std::net::SocketAddr::new(d.addr, d.port).to_string())
        .collect()
}

fn set<'a>(p: &'a Programming, name: &str) -> &'a [String] {
    &p.ipsets
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no ipset {name}"))
        .entries
}

/// Every `-A <chain>` line of nat then filter (proxier_test.go looks chains up by name across
/// both tables).
fn chain_lines<'a>(p: &'a Programming, chain: &str) -> Vec<&'a str> {
    let prefix = format!("-A {chain} ");
    [Table::Nat, Table::Filter]
        .iter()
        .filter_map(|t| p.iptables.get(t))
        .flat_map(|t| t.rules.iter())
        .filter(|r| r.starts_with(&prefix))
        .map(String::as_str)
        .collect()
}

fn table_chain_lines<'a>(p: &'a Programming, table: Table, chain: &str) -> Vec<&'a str> {
    let prefix = format!("-A {chain} ");
    p.iptables[&table]
        .rules
        .iter()
        .filter(|r| r.starts_with(&prefix))
        .map(String::as_str)
        .collect()
}

fn arg_after<'a>(line: &'a str, flag: &str) -> &'a str {
    let mut words = line.split_whitespace();
    words.by_ref().find(|w| *w == flag);
    words.next().unwrap_or("")
}

/// `ExpectedIptablesRule{JumpChain, MatchSet}` of every rule in `chain`.
fn chain(p: &Programming, chain: &str) -> Vec<(String, String)> {
    chain_lines(p, chain)
        .into_iter()
        .map(|l| {
            (
                arg_after(l, "-j").to_string(),
                arg_after(l, "--match-set").to_string(),
            )
        })
        .collect()
}

fn rules(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(j, s)| (j.to_string(), s.to_string()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// proxier_test.go ports
// ---------------------------------------------------------------------------------------------

#[test]
fn name_is_kube_proxy_ipvs() {
    assert_eq!(KubeProxyIpvs::default().name(), "kube-proxy-ipvs");
}

/// TestNodePortIPv4 "1 UDP service with node port, has endpoints" (reference Example A).
#[test]
fn node_port_udp_with_endpoints() {
    let mut sp = node_port(svc("svc1", "10.20.30.41", Protocol::Udp, 80), 3001);
    sp.endpoints = vec![ep("10.180.0.1", 80, None)];
    let p = program(vec![sp]);

    assert_eq!(p.ipvs.len(), 2);
    assert_eq!(rs(&p, key("10.20.30.41", 80, UDP)), ["10.180.0.1:80"]);
    assert_eq!(rs(&p, key("100.101.102.103", 3001, UDP)), ["10.180.0.1:80"]);
    for v in &p.ipvs {
        assert_eq!(v.service.scheduler, "rr");
        assert_eq!(v.service.flags, ServiceFlags(0));
        assert_eq!(v.service.timeout, 0);
        assert_eq!(v.service.netmask_prefix, 32);
        for d in &v.destinations {
            assert_eq!((d.forward, d.weight), (ForwardMethod::Masq, 1));
        }
    }
    assert_eq!(set(&p, "KUBE-NODE-PORT-UDP"), ["3001"]);
    assert_eq!(set(&p, "KUBE-CLUSTER-IP"), ["10.20.30.41,udp:80"]);
    assert_eq!(
        chain(&p, "KUBE-NODE-PORT"),
        rules(&[
            ("KUBE-MARK-MASQ", "KUBE-NODE-PORT-UDP"),
            ("ACCEPT", "KUBE-HEALTH-CHECK-NODE-PORT")
        ])
    );
    assert_eq!(
        chain(&p, "KUBE-SERVICES"),
        rules(&[
            ("RETURN", ""),
            ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            ("KUBE-NODE-PORT", ""),
            ("ACCEPT", "KUBE-CLUSTER-IP"),
        ])
    );
    assert_eq!(
        chain_lines(&p, "KUBE-SERVICES")[0],
        "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN"
    );
    assert_eq!(
        table_chain_lines(&p, Table::Nat, "KUBE-NODE-PORT"),
        ["-A KUBE-NODE-PORT -p udp -m comment --comment \"Kubernetes nodeport UDP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ"]
    );
    // NodePort addresses are never bound to kube-ipvs0.
    assert_eq!(p.kube_ipvs0_addresses(), [ip("10.20.30.41")]);
    assert_eq!(set(&p, "KUBE-IPVS-IPS"), ["10.20.30.41"]);
}

/// The IPv6 proxier's node in TestNodePortIPv6: `2001:db8::1:1` (the IPv4 node IP of the test's
/// `nodeIPs` belongs to the IPv4 proxier: `NewNodePortAddresses` and `GetAllLocalAddresses`
/// keep the proxier's family).
fn node6(addresses: &[&str]) -> NodeContext {
    NodeContext {
        name: THIS_NODE.into(),
        node_ip: ip(addresses[0]),
        pod_cidr: cidr("fd00:10:180::/64"),
        local_addresses: addresses.iter().map(|a| ip(a)).collect(),
        ipv6: None,
    }
}

/// `NewFakeProxier(..., v1.IPv6Protocol)` with these service ports: the state of the IPv6
/// proxier, whose resolution already dropped the IPv4 services and slices (`serviceToServiceMap`
/// skips a Service without a ClusterIP of the family; `EndpointSliceUpdate` ignores slices of
/// the other address type; both pinned in scenario::resolve's tests).
fn program6(node: &NodeContext, service_ports: Vec<ServicePortInfo>) -> Programming {
    let cluster = ClusterState {
        ip_family: IpFamily::Ipv6,
        cluster_cidr: cidr("fd00:10:180::/48"),
        service_cidr: cidr("2020::/112"),
        ..cluster_with(fake_options(), service_ports)
    };
    KubeProxyIpvs::default()
        .program(&cluster, node)
        .expect("program")
}

/// TestNodePortIPv6 "1 service with node port, has 2 endpoints": the IPv6 proxier makes IPv6
/// virtual servers (`toIPVSService`: AF_INET6, netmask 128) for the ClusterIP and the IPv6 node
/// IP with the IPv6 endpoint; its ipsets are `family inet6` with `KUBE-6-` names, its rules
/// match those and return `::1/128` sources first, and the ClusterIP is bound to kube-ipvs0 as
/// an IPv6 address.
#[test]
fn ipv6_node_port_with_endpoints() {
    let mut sp = node_port(svc("svc1", "2020::1", Protocol::Tcp, 80), 3001);
    sp.endpoints = vec![ep("1002:ab8::2:10", 80, None)];
    let p = program6(&node6(&["2001:db8::1:1"]), vec![sp]);

    assert_eq!(p.ipvs.len(), 2);
    assert_eq!(rs(&p, key("2020::1", 80, TCP)), ["[1002:ab8::2:10]:80"]);
    assert_eq!(
        rs(&p, key("2001:db8::1:1", 3001, TCP)),
        ["[1002:ab8::2:10]:80"]
    );
    assert!(p.ipvs.iter().all(|v| v.service.netmask_prefix == 128));
    assert_eq!(set(&p, "KUBE-6-CLUSTER-IP"), ["2020::1,tcp:80"]);
    assert_eq!(set(&p, "KUBE-6-NODE-PORT-TCP"), ["3001"]);
    assert_eq!(set(&p, "KUBE-6-IPVS-IPS"), ["2020::1"]);
    assert!(p.ipsets.iter().all(|s| s.name.starts_with("KUBE-6-")));
    let cluster_ip_set = p.ipsets.iter().find(|s| s.name == "KUBE-6-CLUSTER-IP");
    assert_eq!(
        cluster_ip_set.map(|s| s.create_options.as_str()),
        Some("family inet6 hashsize 1024 maxelem 65536")
    );
    assert_eq!(
        chain(&p, "KUBE-SERVICES"),
        rules(&[
            ("RETURN", ""),
            ("KUBE-MARK-MASQ", "KUBE-6-CLUSTER-IP"),
            ("KUBE-NODE-PORT", ""),
            ("ACCEPT", "KUBE-6-CLUSTER-IP"),
        ])
    );
    assert_eq!(
        chain_lines(&p, "KUBE-SERVICES")[0],
        "-A KUBE-SERVICES -s ::1/128 -j RETURN"
    );
    assert_eq!(
        chain(&p, "KUBE-NODE-PORT"),
        rules(&[
            ("KUBE-MARK-MASQ", "KUBE-6-NODE-PORT-TCP"),
            ("ACCEPT", "KUBE-6-HEALTH-CHECK-NODE-PORT")
        ])
    );
    assert!(chain_lines(&p, "KUBE-IPVS-FILTER")
        .iter()
        .all(|l| !l.contains("--match-set KUBE-") || l.contains("--match-set KUBE-6-")));
    assert_eq!(p.kube_ipvs0_addresses(), [ip("2020::1")]);
    // cleanLegacyService of the IPv6 proxier: "Not our family" leaves IPv4 services alone.
    assert_eq!(
        p.ipvs_delete_others,
        BTreeMap::from([(IpFamily::Ipv6, vec![])])
    );
}

/// TestNodePortIPv6 "service has node port but no endpoints": both virtual servers, "no real
/// servers corresponding to no endpoints".
#[test]
fn ipv6_node_port_without_endpoints() {
    let sp = node_port(svc("svc1", "2020::1", Protocol::Tcp, 80), 3001);
    let p = program6(&node6(&["2001:db8::1:1"]), vec![sp]);
    assert_eq!(p.ipvs.len(), 2);
    assert!(p.ipvs.iter().all(|v| v.destinations.is_empty()));
    vs(&p, key("2001:db8::1:1", 3001, TCP));
}

/// TestNodePortIPv6 "node port service with protocol sctp on a node with multiple nodeIPs":
/// one virtual server and one KUBE-6-NODE-PORT-SCTP-HASH entry per IPv6 node IP.
#[test]
fn ipv6_node_port_sctp_on_every_node_ip() {
    let mut sp = node_port(svc("svc1", "2020::1", Protocol::Sctp, 80), 3001);
    sp.endpoints = vec![ep("2001::1", 80, None)];
    let p = program6(&node6(&["2001:db8::1:1", "2001:db8::1:2"]), vec![sp]);
    let sctp = ipvs_genl::Protocol::Sctp;
    for addr in ["2001:db8::1:1", "2001:db8::1:2"] {
        assert_eq!(rs(&p, key(addr, 3001, sctp)), ["[2001::1]:80"]);
    }
    assert_eq!(rs(&p, key("2020::1", 80, sctp)), ["[2001::1]:80"]);
    assert_eq!(p.ipvs.len(), 3);
    assert_eq!(
        set(&p, "KUBE-6-NODE-PORT-SCTP-HASH"),
        ["2001:db8::1:1,sctp:3001", "2001:db8::1:2,sctp:3001"]
    );
}

/// TestIPv6Proxier "2 services with Cluster IP, each with endpoints": of an IPv4 and an IPv6
/// Service the IPv6 proxier programs the IPv6 one only (resolution hands it that one).
#[test]
fn ipv6_cluster_ip_service() {
    let mut sp = svc("svc2", "1002:ab8::2:1", Protocol::Tcp, 8080);
    sp.endpoints = vec![ep("1009:ab8::5:6", 8080, None)];
    let p = program6(&node6(&["2001:db8::1"]), vec![sp]);
    assert_eq!(p.ipvs.len(), 1);
    assert_eq!(
        rs(&p, key("1002:ab8::2:1", 8080, TCP)),
        ["[1009:ab8::5:6]:8080"]
    );
}

/// TestNodePortIPv4 "1 UDP service with node port, does not have endpoints": "no real servers
/// corresponding to no endpoints"; IPVS mode writes no REJECT rule.
#[test]
fn node_port_udp_without_endpoints() {
    let p = program(vec![node_port(
        svc("svc1", "10.20.30.41", Protocol::Udp, 80),
        3001,
    )]);
    assert_eq!(p.ipvs.len(), 2);
    assert!(p.ipvs.iter().all(|v| v.destinations.is_empty()));
    let all_rules: Vec<&String> = p.iptables.values().flat_map(|t| t.rules.iter()).collect();
    assert!(!all_rules
        .iter()
        .any(|r| r.contains("REJECT") && !r.starts_with("-A KUBE-IPVS-FILTER")));
}

/// TestNodePortIPv4 "1 SCTP service with node port": hash:ip,port entries per node IP.
#[test]
fn node_port_sctp_uses_hash_entries_per_node_ip() {
    let mut n = node();
    n.local_addresses = vec![ip("100.101.102.103"), ip("100.101.102.104")];
    let mut sp = node_port(svc("svc1", "10.20.30.41", Protocol::Sctp, 80), 3001);
    sp.endpoints = vec![ep("10.180.0.1", 80, None)];
    let p = program_with(fake_options(), &n, vec![sp]);
    assert_eq!(
        set(&p, "KUBE-NODE-PORT-SCTP-HASH"),
        ["100.101.102.103,sctp:3001", "100.101.102.104,sctp:3001"]
    );
    assert!(set(&p, "KUBE-NODE-PORT-TCP").is_empty());
    assert_eq!(p.ipvs.len(), 3);
    assert_eq!(
        table_chain_lines(&p, Table::Nat, "KUBE-NODE-PORT"),
        ["-A KUBE-NODE-PORT -p sctp -m comment --comment \"Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'\" -m set --match-set KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ"]
    );
}

/// TestOnlyLocalNodePorts (reference Example B): eTP Local keeps only the local endpoint and
/// RETURNs before masquerading. The test sets nodePortAddresses `100.101.102.0/24`, so an
/// interface address outside it gets no NodePort virtual server.
#[test]
fn only_local_node_ports() {
    let mut sp = node_port(svc("svc1", "10.20.30.41", Protocol::Tcp, 80), 3001);
    sp.external_policy_local = true;
    sp.endpoints = vec![
        ep("10.180.0.1", 80, Some(THIS_NODE)),
        ep("10.180.1.1", 80, Some(OTHER_NODE)),
    ];
    let mut n = node();
    n.local_addresses.push(ip("10.0.0.5"));
    let options = ProxierOptions {
        node_port_addresses: vec!["100.101.102.0/24".parse().unwrap()],
        ..fake_options()
    };
    let p = program_with(options, &n, vec![sp]);

    assert_eq!(p.ipvs.len(), 2);
    assert_eq!(rs(&p, key("100.101.102.103", 3001, TCP)), ["10.180.0.1:80"]);
    // eTP does not affect the ClusterIP.
    assert_eq!(
        rs(&p, key("10.20.30.41", 80, TCP)),
        ["10.180.0.1:80", "10.180.1.1:80"]
    );
    assert_eq!(set(&p, "KUBE-NODE-PORT-TCP"), ["3001"]);
    assert_eq!(set(&p, "KUBE-NODE-PORT-LOCAL-TCP"), ["3001"]);
    assert_eq!(
        chain(&p, "KUBE-SERVICES"),
        rules(&[
            ("RETURN", ""),
            ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            ("KUBE-NODE-PORT", ""),
            ("ACCEPT", "KUBE-CLUSTER-IP"),
        ])
    );
    assert_eq!(
        chain(&p, "KUBE-NODE-PORT"),
        rules(&[
            ("RETURN", "KUBE-NODE-PORT-LOCAL-TCP"),
            ("KUBE-MARK-MASQ", "KUBE-NODE-PORT-TCP"),
            ("ACCEPT", "KUBE-HEALTH-CHECK-NODE-PORT"),
        ])
    );
    // The local endpoint is a hairpin candidate, the remote one is not.
    assert_eq!(set(&p, "KUBE-LOOP-BACK"), ["10.180.0.1,tcp:80,10.180.0.1"]);
}

/// TestLoadBalancerSourceRanges (reference Example C), with the node IP outside the range:
/// KUBE-IPVS-OUT-FILTER stops the node itself reaching the VIP (PR #119791).
#[test]
fn load_balancer_source_ranges() {
    let mut sp = load_balancer(
        svc("svc1", "10.20.30.41", Protocol::Tcp, 80),
        3001,
        "1.2.3.4",
    );
    sp.load_balancer_source_ranges = vec![cidr("10.0.0.0/8")];
    sp.endpoints = vec![ep("10.180.0.1", 80, Some(THIS_NODE))];
    let p = program(vec![sp]);

    assert_eq!(set(&p, "KUBE-LOAD-BALANCER"), ["1.2.3.4,tcp:80"]);
    assert_eq!(set(&p, "KUBE-LOAD-BALANCER-FW"), ["1.2.3.4,tcp:80"]);
    assert_eq!(
        set(&p, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
        ["1.2.3.4,tcp:80,10.0.0.0/8"]
    );
    assert!(set(&p, "KUBE-LOAD-BALANCER-SOURCE-IP").is_empty());
    assert_eq!(
        chain(&p, "KUBE-PROXY-FIREWALL"),
        rules(&[("KUBE-SOURCE-RANGES-FIREWALL", "KUBE-LOAD-BALANCER-FW")])
    );
    assert_eq!(
        chain(&p, "KUBE-SOURCE-RANGES-FIREWALL"),
        rules(&[("RETURN", "KUBE-LOAD-BALANCER-SOURCE-CIDR"), ("DROP", "")])
    );
    assert_eq!(
        chain_lines(&p, "KUBE-IPVS-OUT-FILTER"),
        ["-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80 -j DROP"]
    );
    assert_eq!(
        chain_lines(&p, "KUBE-SOURCE-RANGES-FIREWALL")[0],
        "-A KUBE-SOURCE-RANGES-FIREWALL -m comment --comment \"Kubernetes service load balancer ip + port + source cidr for packet filter purpose\" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN"
    );
    // The LB VIP is bound (it is not a node address).
    assert_eq!(p.kube_ipvs0_addresses(), [ip("1.2.3.4"), ip("10.20.30.41")]);
}

/// TestLoadBalancerSourceRanges' allowFromNode branch: a range containing the node IP adds the
/// `lbIP,proto:port,lbIP` source-IP entry and no KUBE-IPVS-OUT-FILTER rule.
#[test]
fn load_balancer_source_ranges_allowing_the_node() {
    let mut sp = load_balancer(
        svc("svc1", "10.20.30.41", Protocol::Tcp, 80),
        3001,
        "1.2.3.4",
    );
    sp.load_balancer_source_ranges = vec![cidr("10.0.0.0/8"), cidr("100.101.102.0/24")];
    let p = program(vec![sp]);
    assert_eq!(
        set(&p, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
        [
            "1.2.3.4,tcp:80,10.0.0.0/8",
            "1.2.3.4,tcp:80,100.101.102.0/24"
        ]
    );
    assert_eq!(
        set(&p, "KUBE-LOAD-BALANCER-SOURCE-IP"),
        ["1.2.3.4,tcp:80,1.2.3.4"]
    );
    assert!(chain_lines(&p, "KUBE-IPVS-OUT-FILTER").is_empty());
    assert_eq!(
        chain(&p, "KUBE-SOURCE-RANGES-FIREWALL"),
        rules(&[
            ("RETURN", "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
            ("RETURN", "KUBE-LOAD-BALANCER-SOURCE-IP"),
            ("DROP", ""),
        ])
    );
}

/// TestSessionAffinity: ClientIP affinity sets FlagPersistent and the timeout (10800 by default)
/// on every VS of the service — ClusterIP, external IP, LB VIP and NodePort alike.
#[test]
fn session_affinity_timeout_on_every_virtual_server() {
    let mut sp = load_balancer(
        svc("svc1", "10.20.30.41", Protocol::Tcp, 80),
        3001,
        "1.2.3.4",
    );
    sp.external_ips = vec![ip("50.60.70.81")];
    sp.session_affinity_timeout_seconds = Some(10800);
    sp.endpoints = vec![ep("10.180.0.1", 80, None)];
    let p = program(vec![sp]);
    assert_eq!(p.ipvs.len(), 4);
    for v in &p.ipvs {
        assert_eq!(
            v.service.flags,
            ServiceFlags(ServiceFlags::PERSISTENT),
            "{:?}",
            v.service.key
        );
        assert_eq!(v.service.timeout, 10800);
        assert_eq!(v.service.netmask_prefix, 32);
    }
}

/// proxier.go: "Set the source hash flag needed for the distribution method mh" (0x10, which the
/// kernel calls IP_VS_SVC_F_SCHED2), on top of the persistence flag.
#[test]
fn mh_scheduler_sets_source_hash_flag() {
    let mut options = fake_options();
    options.ipvs_scheduler = "mh".into();
    let mut sp = svc("svc1", "10.20.30.41", Protocol::Tcp, 80);
    sp.session_affinity_timeout_seconds = Some(60);
    let p = program_with(options, &node(), vec![sp]);
    let s = &vs(&p, key("10.20.30.41", 80, TCP)).service;
    assert_eq!(s.scheduler, "mh");
    assert_eq!(s.flags, ServiceFlags(0x11));
    assert_eq!(s.timeout, 60);
}

/// TestAcceptIPVSTraffic: KUBE-SERVICES order with LB, ClusterIP, ExternalIP and NodePort all
/// present (plus the loopback RETURN of PR #112950 first).
#[test]
fn accept_ipvs_traffic_rule_order() {
    let mut svc1 = svc("svc1", "10.20.30.40", Protocol::Tcp, 80);
    svc1.external_ips = vec![ip("5.6.7.8")];
    svc1.endpoints = vec![ep("10.180.0.1", 80, None)];
    let mut svc2 = load_balancer(svc("svc2", "10.20.30.41", Protocol::Tcp, 80), 80, "1.2.3.4");
    svc2.endpoints = vec![ep("10.180.0.2", 80, None)];
    let mut svc3 = node_port(svc("svc3", "10.20.30.42", Protocol::Tcp, 80), 80);
    svc3.endpoints = vec![ep("10.180.0.3", 80, None)];
    let p = program(vec![svc1, svc2, svc3]);
    assert_eq!(
        chain(&p, "KUBE-SERVICES"),
        rules(&[
            ("RETURN", ""),
            ("KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER"),
            ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            ("KUBE-MARK-MASQ", "KUBE-EXTERNAL-IP"),
            ("ACCEPT", "KUBE-EXTERNAL-IP"),
            ("ACCEPT", "KUBE-EXTERNAL-IP"),
            ("KUBE-NODE-PORT", ""),
            ("ACCEPT", "KUBE-CLUSTER-IP"),
            ("ACCEPT", "KUBE-LOAD-BALANCER"),
        ])
    );
    assert_eq!(
        chain_lines(&p, "KUBE-SERVICES")[4],
        "-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT"
    );
}

/// TestOnlyLocalLoadBalancing: eTP Local LB keeps the local endpoint, the LB is in
/// KUBE-LOAD-BALANCER-LOCAL, KUBE-LOAD-BALANCER RETURNs it before masquerading.
#[test]
fn only_local_load_balancing() {
    let mut sp = load_balancer(
        svc("svc1", "10.20.30.41", Protocol::Tcp, 80),
        3001,
        "1.2.3.4",
    );
    sp.external_policy_local = true;
    sp.health_check_node_port = Some(30000);
    sp.endpoints = vec![
        ep("10.180.0.1", 80, Some(THIS_NODE)),
        ep("10.180.1.1", 80, Some(OTHER_NODE)),
    ];
    let p = program(vec![sp]);
    assert_eq!(rs(&p, key("1.2.3.4", 80, TCP)), ["10.180.0.1:80"]);
    assert_eq!(set(&p, "KUBE-LOAD-BALANCER"), ["1.2.3.4,tcp:80"]);
    assert_eq!(set(&p, "KUBE-LOAD-BALANCER-LOCAL"), ["1.2.3.4,tcp:80"]);
    assert_eq!(
        chain(&p, "KUBE-LOAD-BALANCER"),
        rules(&[
            ("RETURN", "KUBE-LOAD-BALANCER-LOCAL"),
            ("KUBE-MARK-MASQ", "")
        ])
    );
    // TestHealthCheckNodePort-style: the health check node port is in its bitmap set.
    assert_eq!(set(&p, "KUBE-HEALTH-CHECK-NODE-PORT"), ["30000"]);
}

/// The three KUBE-CLUSTER-IP masquerade variants of writeIptablesRules.
#[test]
fn cluster_ip_masquerade_variants() {
    let line = |options: ProxierOptions| {
        let p = program_with(
            options,
            &node(),
            vec![svc("svc1", "10.20.30.41", Protocol::Tcp, 80)],
        );
        chain_lines(&p, "KUBE-SERVICES")[1].to_string()
    };
    let prefix = "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP";

    let mut masq_all = fake_options();
    masq_all.masquerade_all = true;
    masq_all.cluster_cidr = true;
    assert_eq!(
        line(masq_all),
        format!("{prefix} dst,dst -j KUBE-MARK-MASQ")
    );

    let mut by_cidr = fake_options();
    by_cidr.cluster_cidr = true;
    assert_eq!(
        line(by_cidr),
        format!("{prefix} dst,dst ! -s 10.180.0.0/16 -j KUBE-MARK-MASQ")
    );

    assert_eq!(
        line(fake_options()),
        format!("{prefix} src,dst -j KUBE-MARK-MASQ")
    );
}

/// No ClusterIP entries, no ClusterIP masquerade or accept rule (the set-empty checks), while
/// the always-written rules stay.
#[test]
fn empty_cluster_writes_only_unconditional_rules() {
    let p = program(vec![]);
    assert_eq!(
        chain(&p, "KUBE-SERVICES"),
        rules(&[("RETURN", ""), ("KUBE-NODE-PORT", "")])
    );
    assert_eq!(
        chain(&p, "KUBE-LOAD-BALANCER"),
        rules(&[("KUBE-MARK-MASQ", "")])
    );
    assert_eq!(chain(&p, "KUBE-IPVS-FILTER").len(), 6);
    assert!(p.ipvs.is_empty());
    assert_eq!(
        p.ipvs_addresses,
        Some(vec![]),
        "kube-ipvs0 stays, with no address"
    );
}

/// TestExternalIPs: eTP Cluster external IPs go to KUBE-EXTERNAL-IP, are bound to kube-ipvs0
/// unless already a node address, and use all endpoints.
#[test]
fn external_ips_cluster_policy() {
    let mut sp = svc("svc1", "10.20.30.41", Protocol::Udp, 80);
    // 100.101.102.103 is the node's own address: a VS, but no binding.
    sp.external_ips = vec![ip("50.60.70.81"), ip("100.101.102.103")];
    sp.endpoints = vec![
        ep("10.180.0.1", 80, Some(THIS_NODE)),
        ep("10.180.1.1", 80, Some(OTHER_NODE)),
    ];
    let p = program(vec![sp]);
    assert_eq!(
        set(&p, "KUBE-EXTERNAL-IP"),
        ["100.101.102.103,udp:80", "50.60.70.81,udp:80"]
    );
    assert!(set(&p, "KUBE-EXTERNAL-IP-LOCAL").is_empty());
    assert_eq!(p.ipvs.len(), 3);
    assert_eq!(
        rs(&p, key("50.60.70.81", 80, UDP)),
        ["10.180.0.1:80", "10.180.1.1:80"]
    );
    assert_eq!(
        p.kube_ipvs0_addresses(),
        [ip("10.20.30.41"), ip("50.60.70.81")]
    );
    assert_eq!(set(&p, "KUBE-IPVS-IPS"), ["10.20.30.41", "50.60.70.81"]);
}

/// TestOnlyLocalExternalIPs: eTP Local external IPs go to KUBE-EXTERNAL-IP-LOCAL (ACCEPT only,
/// no masquerade) and get only the local endpoint.
#[test]
fn external_ips_local_policy() {
    let mut sp = node_port(svc("svc1", "10.20.30.41", Protocol::Tcp, 80), 3001);
    sp.external_ips = vec![ip("50.60.70.81")];
    sp.external_policy_local = true;
    sp.endpoints = vec![
        ep("10.180.0.1", 80, Some(OTHER_NODE)),
        ep("10.180.2.1", 80, Some(THIS_NODE)),
    ];
    let p = program(vec![sp]);
    assert_eq!(set(&p, "KUBE-EXTERNAL-IP-LOCAL"), ["50.60.70.81,tcp:80"]);
    assert!(set(&p, "KUBE-EXTERNAL-IP").is_empty());
    assert_eq!(rs(&p, key("50.60.70.81", 80, TCP)), ["10.180.2.1:80"]);
    assert_eq!(
        chain(&p, "KUBE-SERVICES"),
        rules(&[
            ("RETURN", ""),
            ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            ("ACCEPT", "KUBE-EXTERNAL-IP-LOCAL"),
            ("ACCEPT", "KUBE-EXTERNAL-IP-LOCAL"),
            ("KUBE-NODE-PORT", ""),
            ("ACCEPT", "KUBE-CLUSTER-IP"),
        ])
    );
}

/// eTP Local with no local endpoint falls back to the cluster endpoints (PR #97081, "Allow access
/// from local PODs even if no local endpoints exist").
#[test]
fn external_policy_local_without_local_endpoints_uses_cluster_endpoints() {
    let mut sp = node_port(svc("svc1", "10.20.30.41", Protocol::Tcp, 80), 3001);
    sp.external_policy_local = true;
    sp.endpoints = vec![ep("10.180.1.1", 80, Some(OTHER_NODE))];
    let p = program(vec![sp]);
    assert_eq!(rs(&p, key("100.101.102.103", 3001, TCP)), ["10.180.1.1:80"]);
}

/// The four Test_EndpointSlice*Terminating* tests of proxier_test.go: a NodePort-type service
/// (nodePort 0) with external IP 1.2.3.4. "Usable" endpoints are Ready ones, else
/// serving+terminating ones, chosen independently for the cluster list (ClusterIP, and the
/// external IP under eTP Cluster) and the local list (external IP under eTP Local). Every local
/// endpoint, whatever its conditions, is a KUBE-LOOP-BACK entry.
#[test]
fn ready_and_terminating_endpoints() {
    const LOCAL: Option<&str> = Some(THIS_NODE);
    const REMOTE: Option<&str> = Some("another-node");
    struct Case {
        name: &'static str,
        external_policy_local: bool,
        endpoints: [(&'static str, Option<&'static str>, bool, bool, bool); 5],
        loop_back: usize,
        cluster_ip_rs: &'static [&'static str],
        external_ip_rs: &'static [&'static str],
    }
    let cases = [
        Case {
            name: "Test_EndpointSliceReadyAndTerminatingCluster",
            external_policy_local: false,
            endpoints: [
                ("10.0.1.1", LOCAL, true, true, false),
                ("10.0.1.2", LOCAL, true, true, false),
                ("10.0.1.3", LOCAL, false, true, true),
                ("10.0.1.4", LOCAL, false, false, true),
                ("10.0.1.5", REMOTE, true, true, false),
            ],
            loop_back: 4,
            cluster_ip_rs: &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"],
            external_ip_rs: &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"],
        },
        Case {
            name: "Test_EndpointSliceReadyAndTerminatingLocal",
            external_policy_local: true,
            endpoints: [
                ("10.0.1.1", LOCAL, true, true, false),
                ("10.0.1.2", LOCAL, true, true, false),
                ("10.0.1.3", LOCAL, false, true, true),
                ("10.0.1.4", LOCAL, false, false, true),
                ("10.0.1.5", REMOTE, true, true, false),
            ],
            loop_back: 4,
            cluster_ip_rs: &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"],
            external_ip_rs: &["10.0.1.1:80", "10.0.1.2:80"],
        },
        Case {
            name: "Test_EndpointSliceOnlyReadyAndTerminatingCluster",
            external_policy_local: false,
            endpoints: [
                ("10.0.1.1", LOCAL, false, true, true),
                ("10.0.1.2", LOCAL, false, true, true),
                ("10.0.1.3", LOCAL, false, false, true),
                ("10.0.1.4", REMOTE, false, true, true),
                ("10.0.1.5", REMOTE, false, false, false),
            ],
            loop_back: 3,
            cluster_ip_rs: &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.4:80"],
            external_ip_rs: &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.4:80"],
        },
        Case {
            name: "Test_EndpointSliceOnlyReadyAndTerminatingLocal",
            external_policy_local: true,
            endpoints: [
                ("10.0.1.1", LOCAL, false, true, true),
                ("10.0.1.2", LOCAL, false, true, true),
                ("10.0.1.3", LOCAL, false, false, true),
                ("10.0.1.4", REMOTE, false, true, true),
                ("10.0.1.5", REMOTE, true, true, false),
            ],
            loop_back: 3,
            cluster_ip_rs: &["10.0.1.5:80"],
            external_ip_rs: &["10.0.1.1:80", "10.0.1.2:80"],
        },
    ];
    for case in cases {
        let mut sp = svc("svc1", "172.20.1.1", Protocol::Tcp, 80);
        sp.type_ = ServiceType::NodePort;
        sp.external_ips = vec![ip("1.2.3.4")];
        sp.external_policy_local = case.external_policy_local;
        sp.endpoints = case
            .endpoints
            .iter()
            .map(|&(addr, node, ready, serving, terminating)| {
                ep_cond(addr, node, ready, serving, terminating)
            })
            .collect();
        let p = program(vec![sp]);
        assert_eq!(
            set(&p, "KUBE-LOOP-BACK").len(),
            case.loop_back,
            "{}",
            case.name
        );
        assert_eq!(p.ipvs.len(), 2, "{}", case.name);
        assert_eq!(
            rs(&p, key("172.20.1.1", 80, TCP)),
            case.cluster_ip_rs,
            "{}",
            case.name
        );
        assert_eq!(
            rs(&p, key("1.2.3.4", 80, TCP)),
            case.external_ip_rs,
            "{}",
            case.name
        );
    }
}

/// TestEndpointSliceE2E: Ready endpoints become real servers, a not-ready (and so not-serving)
/// one is ignored, only the local one is a KUBE-LOOP-BACK entry.
#[test]
fn endpoint_slice_e2e() {
    let mut sp = svc("svc1", "172.20.1.1", Protocol::Tcp, 80);
    sp.port_name = String::new();
    sp.endpoints = vec![
        ep("10.0.1.1", 80, Some(THIS_NODE)),
        ep("10.0.1.2", 80, Some("node2")),
        ep("10.0.1.3", 80, Some("node3")),
        ep_cond("10.0.1.4", Some("node3"), false, false, false),
    ];
    let p = program(vec![sp.clone()]);
    assert_eq!(set(&p, "KUBE-LOOP-BACK"), ["10.0.1.1,tcp:80,10.0.1.1"]);
    assert_eq!(p.ipvs.len(), 1);
    assert_eq!(
        rs(&p, key("172.20.1.1", 80, TCP)),
        ["10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"]
    );

    sp.endpoints.clear();
    let p = program(vec![sp]);
    assert!(set(&p, "KUBE-LOOP-BACK").is_empty());
    assert_eq!(p.ipvs.len(), 1);
    assert!(rs(&p, key("172.20.1.1", 80, TCP)).is_empty());
}

/// TestMultiPortServiceBindAddr: the ports of one service share one kube-ipvs0 address.
#[test]
fn multi_port_service_binds_one_address() {
    let mut port1 = svc("svc1", "172.16.55.4", Protocol::Tcp, 1234);
    port1.port_name = "port1".into();
    let mut port2 = svc("svc1", "172.16.55.4", Protocol::Tcp, 1235);
    port2.port_name = "port2".into();
    let mut port3 = svc("svc1", "172.16.55.4", Protocol::Udp, 1236);
    port3.port_name = "port3".into();
    let p = program(vec![port1, port2, port3]);
    assert_eq!(p.ipvs.len(), 3);
    assert_eq!(p.kube_ipvs0_addresses(), [ip("172.16.55.4")]);
    assert_eq!(set(&p, "KUBE-IPVS-IPS"), ["172.16.55.4"]);
}

/// TestHealthCheckNodePortE2E: an eTP Local LB's health check node port is in
/// KUBE-HEALTH-CHECK-NODE-PORT even without a NodePort or ingress IP.
#[test]
fn health_check_node_port_e2e() {
    let mut sp = svc("svc1", "172.20.1.1", Protocol::Tcp, 80);
    sp.type_ = ServiceType::LoadBalancer;
    sp.external_policy_local = true;
    sp.health_check_node_port = Some(30000);
    let p = program(vec![sp]);
    assert_eq!(set(&p, "KUBE-HEALTH-CHECK-NODE-PORT"), ["30000"]);
    assert_eq!(
        chain_lines(&p, "KUBE-NODE-PORT").last().copied(),
        Some("-A KUBE-NODE-PORT -m comment --comment \"Kubernetes health check node port\" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT")
    );
}

/// TestTestInternalTrafficPolicyE2E: iTP Local programs only local endpoints on the ClusterIP;
/// with none, an internal-only service gets 0 real servers (clusterEndpoints is nil).
#[test]
fn internal_traffic_policy_local() {
    let mut sp = svc("svc1", "172.20.1.1", Protocol::Tcp, 80);
    sp.internal_policy_local = true;
    sp.endpoints = vec![
        ep("10.0.1.1", 80, Some(THIS_NODE)),
        ep("10.0.1.2", 80, Some(OTHER_NODE)),
        ep("10.0.1.3", 80, Some(OTHER_NODE)),
    ];
    let p = program(vec![sp.clone()]);
    assert_eq!(rs(&p, key("172.20.1.1", 80, TCP)), ["10.0.1.1:80"]);

    sp.endpoints.remove(0);
    let p = program(vec![sp.clone()]);
    assert!(rs(&p, key("172.20.1.1", 80, TCP)).is_empty());

    // Externally accessible: UsesClusterEndpoints() is true, so the ClusterIP falls back to the
    // cluster endpoints when there is no local one.
    let sp = node_port(sp, 30080);
    let p = program(vec![sp]);
    assert_eq!(
        rs(&p, key("172.20.1.1", 80, TCP)),
        ["10.0.1.2:80", "10.0.1.3:80"]
    );
}

/// TestLoadBalancerIngressRouteTypeProxy: ipMode Proxy ingress IPs are removed upstream
/// (ClusterState.loadBalancerVIPs), so an LB with only Proxy-mode ingress has no LB VS and no
/// KUBE-LOAD-BALANCER entry.
#[test]
fn load_balancer_ip_mode_proxy_is_not_programmed() {
    let mut sp = load_balancer(
        svc("svc1", "10.20.30.41", Protocol::Tcp, 80),
        3001,
        "1.2.3.4",
    );
    sp.load_balancer_vips.clear();
    sp.endpoints = vec![ep("10.180.0.1", 80, None)];
    let p = program(vec![sp]);
    assert_eq!(p.ipvs.len(), 2);
    assert!(set(&p, "KUBE-LOAD-BALANCER").is_empty());
    assert!(!chain_lines(&p, "KUBE-SERVICES")
        .iter()
        .any(|l| l.contains("KUBE-LOAD-BALANCER")));
}

/// TestBuildServiceMapServiceHeadless / …TypeExternalName: neither is proxied.
#[test]
fn headless_and_external_name_are_ignored() {
    let mut headless = svc("headless", "10.20.30.41", Protocol::Udp, 1234);
    headless.cluster_ip = None;
    headless.endpoints = vec![ep("10.180.0.1", 1234, Some(THIS_NODE))];
    let mut external_name = svc("external-name", "172.16.55.4", Protocol::Udp, 1235);
    external_name.type_ = ServiceType::ExternalName;
    let p = program(vec![headless, external_name]);
    assert!(p.ipvs.is_empty());
    assert!(p.ipsets.iter().all(|s| s.entries.is_empty()));
}

/// Hairpin: KUBE-LOOP-BACK holds `ep,proto:port,ep` for local endpoints only and adds the
/// POSTROUTING MASQUERADE rule before the mark rules (ipsetWithIptablesChain comes first).
#[test]
fn hairpin_loop_back_entries_and_rule() {
    let mut sp = svc("svc1", "10.20.30.41", Protocol::Tcp, 80);
    sp.endpoints = vec![
        ep("10.180.0.1", 8080, Some(THIS_NODE)),
        ep("10.180.1.1", 8080, Some(OTHER_NODE)),
    ];
    let mut sp2 = svc("svc2", "10.20.30.42", Protocol::Udp, 53);
    sp2.endpoints = vec![ep("10.180.0.1", 5353, Some(THIS_NODE))];
    let p = program(vec![sp, sp2]);
    assert_eq!(
        set(&p, "KUBE-LOOP-BACK"),
        [
            "10.180.0.1,tcp:8080,10.180.0.1",
            "10.180.0.1,udp:5353,10.180.0.1"
        ]
    );
    assert_eq!(
        chain_lines(&p, "KUBE-POSTROUTING"),
        [
            "-A KUBE-POSTROUTING -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose\" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE",
            "-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN",
            "-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000",
            "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully",
        ]
    );
}

/// TestCreateAndLinkKubeChain: chain declarations, plus the built-in jumps in the order repeated
/// `iptables -I` leaves them on a fresh node.
#[test]
fn chains_and_jumps_from_builtin_chains() {
    let p = program(vec![]);
    let names = |t: Table| -> Vec<(String, Option<String>)> {
        p.iptables[&t]
            .chains
            .iter()
            .map(|c| (c.name.clone(), c.policy.clone()))
            .collect()
    };
    let accept = Some("ACCEPT".to_string());
    assert_eq!(
        names(Table::Nat),
        [
            ("PREROUTING".into(), accept.clone()),
            ("OUTPUT".into(), accept.clone()),
            ("POSTROUTING".into(), accept.clone()),
            ("KUBE-SERVICES".into(), None),
            ("KUBE-POSTROUTING".into(), None),
            ("KUBE-NODE-PORT".into(), None),
            ("KUBE-LOAD-BALANCER".into(), None),
            ("KUBE-MARK-MASQ".into(), None),
        ]
    );
    assert_eq!(
        names(Table::Filter),
        [
            ("INPUT".into(), accept.clone()),
            ("FORWARD".into(), accept.clone()),
            ("OUTPUT".into(), accept),
            ("KUBE-FORWARD".into(), None),
            ("KUBE-NODE-PORT".into(), None),
            ("KUBE-PROXY-FIREWALL".into(), None),
            ("KUBE-SOURCE-RANGES-FIREWALL".into(), None),
            ("KUBE-IPVS-FILTER".into(), None),
            ("KUBE-IPVS-OUT-FILTER".into(), None),
        ]
    );
    assert_eq!(
        &p.iptables[&Table::Nat].rules[..3],
        [
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
        ]
    );
    assert_eq!(
        &p.iptables[&Table::Filter].rules[..6],
        [
            "-A INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER",
            "-A INPUT -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL",
            "-A INPUT -m comment --comment \"kubernetes health check rules\" -j KUBE-NODE-PORT",
            "-A FORWARD -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL",
            "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD",
            "-A OUTPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-OUT-FILTER",
        ]
    );
    assert_eq!(p.restore_mode, crate::programming::RestoreMode::NoFlush);
}

/// KUBE-IPVS-FILTER (PR #108460) is always the same six rules.
#[test]
fn ipvs_filter_rules() {
    let p = program(vec![]);
    assert_eq!(
        chain_lines(&p, "KUBE-IPVS-FILTER"),
        [
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT",
        ]
    );
    assert_eq!(
        chain_lines(&p, "KUBE-FORWARD"),
        [
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x00004000/0x00004000 -j ACCEPT",
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        ]
    );
    assert_eq!(
        chain_lines(&p, "KUBE-MARK-MASQ"),
        ["-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000"]
    );
}

/// Every ipsetInfo set is created, empty or not, with kube-proxy's create options.
#[test]
fn every_ipset_is_created() {
    let p = program(vec![]);
    let sets: Vec<(&str, IpSetType, &str)> = p
        .ipsets
        .iter()
        .map(|s| (s.name.as_str(), s.set_type, s.create_options.as_str()))
        .collect();
    let hash = "family inet hashsize 1024 maxelem 65536";
    let bitmap = "range 0-65535";
    assert_eq!(
        sets,
        [
            ("KUBE-LOOP-BACK", IpSetType::HashIpPortIp, hash),
            ("KUBE-CLUSTER-IP", IpSetType::HashIpPort, hash),
            ("KUBE-EXTERNAL-IP", IpSetType::HashIpPort, hash),
            ("KUBE-EXTERNAL-IP-LOCAL", IpSetType::HashIpPort, hash),
            ("KUBE-LOAD-BALANCER", IpSetType::HashIpPort, hash),
            ("KUBE-LOAD-BALANCER-FW", IpSetType::HashIpPort, hash),
            ("KUBE-LOAD-BALANCER-LOCAL", IpSetType::HashIpPort, hash),
            (
                "KUBE-LOAD-BALANCER-SOURCE-IP",
                IpSetType::HashIpPortIp,
                hash
            ),
            (
                "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                IpSetType::HashIpPortNet,
                hash
            ),
            ("KUBE-NODE-PORT-TCP", IpSetType::BitmapPort, bitmap),
            ("KUBE-NODE-PORT-LOCAL-TCP", IpSetType::BitmapPort, bitmap),
            ("KUBE-NODE-PORT-UDP", IpSetType::BitmapPort, bitmap),
            ("KUBE-NODE-PORT-LOCAL-UDP", IpSetType::BitmapPort, bitmap),
            ("KUBE-NODE-PORT-SCTP-HASH", IpSetType::HashIpPort, hash),
            (
                "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
                IpSetType::HashIpPort,
                hash
            ),
            ("KUBE-HEALTH-CHECK-NODE-PORT", IpSetType::BitmapPort, bitmap),
            ("KUBE-IPVS-IPS", IpSetType::HashIp, hash),
        ]
    );
}

/// NewProxier's sysctls; arp_ignore/arp_announce only with strictARP.
#[test]
fn sysctls_with_and_without_strict_arp() {
    let p = program(vec![]);
    let keys: Vec<(&str, &str)> = p
        .sysctls
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.vs.conntrack", "1"),
            ("net.ipv4.vs.expire_nodest_conn", "1"),
            ("net.ipv4.vs.expire_quiescent_template", "1"),
        ]
    );
    let mut options = fake_options();
    options.strict_arp = true;
    let p = program_with(options, &node(), vec![]);
    assert_eq!(p.sysctls["net.ipv4.conf.all.arp_ignore"], "1");
    assert_eq!(p.sysctls["net.ipv4.conf.all.arp_announce"], "2");
    assert!(!p.sysctls.contains_key("net.ipv4.vs.conn_reuse_mode"));
}

/// `conntrack.tcpBeLiberal`: `platformSetup` sets `nf_conntrack_tcp_be_liberal=1` in every mode;
/// IPVS mode has no INVALID drop to leave out, so its rules stay the same.
#[test]
fn tcp_be_liberal_adds_only_the_sysctl() {
    let strict = program(vec![]);
    let mut options = fake_options();
    options.tcp_be_liberal = true;
    let liberal = program_with(options, &node(), vec![]);
    assert_eq!(
        liberal.sysctls["net.netfilter.nf_conntrack_tcp_be_liberal"],
        "1"
    );
    let mut sysctls = liberal.sysctls.clone();
    sysctls.remove("net.netfilter.nf_conntrack_tcp_be_liberal");
    assert_eq!(sysctls, strict.sysctls);
    assert_eq!(liberal.iptables, strict.iptables);
}

/// NodePort services get one VS per node address (every interface but kube-ipvs0), and a node
/// without addresses skips NodePort and health-check programming (the `continue`).
#[test]
fn node_port_on_every_local_address() {
    let mut n = node();
    n.local_addresses = vec![ip("10.180.0.1"), ip("100.101.102.103"), ip("127.0.0.1")];
    let mut sp = node_port(svc("svc1", "10.20.30.41", Protocol::Tcp, 80), 3001);
    sp.health_check_node_port = Some(30000);
    let p = program_with(fake_options(), &n, vec![sp.clone()]);
    let keys: Vec<ServiceKey> = p.ipvs.iter().map(|v| v.service.key).collect();
    assert_eq!(
        keys,
        [
            key("10.20.30.41", 80, TCP),
            key("10.180.0.1", 3001, TCP),
            key("100.101.102.103", 3001, TCP),
        ]
    );

    n.local_addresses.clear();
    let p = program_with(fake_options(), &n, vec![sp]);
    assert_eq!(p.ipvs.len(), 1);
    assert!(set(&p, "KUBE-NODE-PORT-TCP").is_empty());
    assert!(set(&p, "KUBE-HEALTH-CHECK-NODE-PORT").is_empty());
}

// ---------------------------------------------------------------------------------------------
// Snapshot
// ---------------------------------------------------------------------------------------------

/// A human-readable dump: `ipset save`-like sets, `iptables-restore` input, `ipvsadm -Sn`-like
/// services, kube-ipvs0 addresses, sysctls.
pub(super) fn render(p: &Programming) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "# ipsets");
    for s in &p.ipsets {
        let _ = writeln!(
            out,
            "create {} {} {}",
            s.name,
            s.set_type.name(),
            s.create_options
        );
        for e in &s.entries {
            let _ = writeln!(out, "add {} {e}", s.name);
        }
    }
    let _ = writeln!(out, "\n# iptables ({:?})", p.restore_mode);
    out.push_str(&restore_input(p));
    let _ = writeln!(out, "\n# ipvs");
    for v in &p.ipvs {
        let s = &v.service;
        let (proto, addr, port) = match s.key {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => (format!("{protocol:?}").to_lowercase(), addr, port),
            ServiceKey::FwMark { .. } => {
                ("fwmark".to_string(), IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
            }
        };
        let _ = writeln!(
            out,
            "-A {proto} {addr}:{port} -s {} flags 0x{:x} timeout {} netmask /{}",
            s.scheduler, s.flags.0, s.timeout, s.netmask_prefix
        );
        for d in &v.destinations {
            let _ = writeln!(
                out,
                "  -a -r {}:{} {:?} -w {}",
                d.addr, d.port, d.forward, d.weight
            );
        }
    }
    let _ = writeln!(out, "\n# kube-ipvs0");
    for a in p.kube_ipvs0_addresses() {
        let _ = writeln!(out, "{a}/32");
    }
    let _ = writeln!(out, "\n# sysctls");
    for (k, v) in &p.sysctls {
        let _ = writeln!(out, "{k} = {v}");
    }
    out
}

/// The nat and filter tables as one `iptables-restore` document.
pub(super) fn restore_input(p: &Programming) -> String {
    p.iptables
        .iter()
        .map(|(table, rules)| crate::programming::text::render_table(*table, rules))
        .collect()
}

/// A small cluster exercising most paths: ClusterIP with a local hairpin endpoint, a NodePort
/// with eTP Local and a terminating fallback, an LB with source ranges and ClientIP affinity,
/// an external IP, a UDP service without endpoints.
pub(super) fn small_cluster() -> (ClusterState, NodeContext) {
    let mut web = svc("web", "10.96.0.10", Protocol::Tcp, 80);
    web.namespace = "default".into();
    web.endpoints = vec![
        ep("10.244.1.5", 8080, Some("node-a")),
        ep("10.244.2.7", 8080, Some("node-b")),
    ];
    web.external_ips = vec![ip("192.0.2.50")];

    let mut local = node_port(svc("local", "10.96.0.11", Protocol::Tcp, 8080), 30080);
    local.namespace = "default".into();
    local.external_policy_local = true;
    local.endpoints = vec![
        ep_cond("10.244.1.6", Some("node-a"), false, true, true),
        ep("10.244.2.8", 8080, Some("node-b")),
    ];
    for e in &mut local.endpoints {
        e.port = 8080;
    }

    let mut lb = load_balancer(
        svc("lb", "10.96.0.12", Protocol::Tcp, 443),
        30443,
        "203.0.113.10",
    );
    lb.namespace = "default".into();
    lb.load_balancer_source_ranges = vec![cidr("198.51.100.0/24")];
    lb.session_affinity_timeout_seconds = Some(10800);
    lb.external_policy_local = true;
    lb.health_check_node_port = Some(32000);
    lb.endpoints = vec![ep("10.244.1.5", 8443, Some("node-a"))];

    let mut dns = svc("dns", "10.96.0.53", Protocol::Udp, 53);
    dns.namespace = "kube-system".into();

    let mut cluster = cluster_with(ProxierOptions::default(), vec![web, local, lb, dns]);
    cluster.cluster_cidr = cidr("10.244.0.0/16");
    cluster.service_cidr = cidr("10.96.0.0/12");
    cluster.nodes = vec![
        NodeInfo {
            name: "node-a".into(),
            ip: ip("172.18.0.2"),
            pod_cidr: cidr("10.244.1.0/24"),
        },
        NodeInfo {
            name: "node-b".into(),
            ip: ip("172.18.0.3"),
            pod_cidr: cidr("10.244.2.0/24"),
        },
    ];
    let node = NodeContext {
        name: "node-a".into(),
        node_ip: ip("172.18.0.2"),
        pod_cidr: cidr("10.244.1.0/24"),
        local_addresses: vec![ip("10.244.1.1"), ip("172.18.0.2")],
        ipv6: None,
    };
    (cluster, node)
}

#[test]
fn snapshot_small_cluster() {
    let (cluster, node) = small_cluster();
    let p = KubeProxyIpvs::default()
        .program(&cluster, &node)
        .expect("program");
    insta::assert_snapshot!(render(&p));
}

/// `iptables.HasRandomFully()` decides the MASQUERADE rule's `--random-fully`
/// (pkg/proxy/ipvs/proxier.go writeIptablesRules); the `randomFully` option models an iptables
/// older than 1.6.2.
#[test]
fn masquerade_rule_follows_random_fully() {
    let masquerade = |random_fully: bool| {
        let p = program_with(
            ProxierOptions {
                random_fully,
                ..fake_options()
            },
            &node(),
            vec![],
        );
        chain_lines(&p, "KUBE-POSTROUTING")
            .into_iter()
            .filter(|r| r.contains("-j MASQUERADE"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        masquerade(true),
        ["-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully"]
    );
    assert_eq!(
        masquerade(false),
        ["-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE"]
    );
}

/// `--iptables-masquerade-bit` in IPVS mode: the same `%#08x` mark in every mark rule
/// (pkg/proxy/ipvs/proxier.go NewProxier `masqueradeMark`).
#[test]
fn masquerade_bit_sets_the_mark_everywhere() {
    let p = program_with(
        ProxierOptions {
            masquerade_bit: 10,
            ..fake_options()
        },
        &node(),
        vec![],
    );
    let marks: Vec<&str> = [Table::Nat, Table::Filter]
        .iter()
        .filter_map(|t| p.iptables.get(t))
        .flat_map(|t| t.rules.iter())
        .map(String::as_str)
        .filter(|r| r.contains("mark"))
        .collect();
    assert!(marks.len() >= 4, "{marks:?}");
    for r in &marks {
        assert!(r.contains("0x00000400") && !r.contains("0x00004000"), "{r}");
    }
    assert!(
        marks.contains(&"-A KUBE-MARK-MASQ -j MARK --or-mark 0x00000400"),
        "{marks:?}"
    );
}

/// NewProxier calls `ConfigureTimeouts` (ipvsadm --set) only when some timeout is set; 0 keeps
/// the kernel's value for that one.
#[test]
fn ipvs_timeouts_only_when_set() {
    let sp = svc("svc1", "10.20.30.41", Protocol::Tcp, 80);
    assert_eq!(program(vec![sp.clone()]).ipvs_timeouts, None);
    let options = ProxierOptions {
        ipvs_timeouts: crate::scenario::IpvsTimeouts {
            tcp: 0,
            tcp_fin: 30,
            udp: 10,
        },
        ..fake_options()
    };
    let p = program_with(options, &node(), vec![sp]);
    assert_eq!(
        p.ipvs_timeouts,
        Some(ipvs_genl::Timeouts {
            tcp: 0,
            tcp_fin: 30,
            udp: 10
        })
    );
}

/// syncProxyRules' `cleanLegacyService` runs on every sync: the programming deletes the node's
/// other IPVS services, keeping those in `--ipvs-exclude-cidrs`.
#[test]
fn other_ipvs_services_are_deleted_except_excluded_cidrs() {
    let sp = svc("svc1", "10.20.30.41", Protocol::Tcp, 80);
    assert_eq!(
        program(vec![sp.clone()]).ipvs_delete_others,
        BTreeMap::from([(IpFamily::Ipv4, vec![])])
    );
    // `--ipvs-exclude-cidrs` of the other family keep nothing of this one's.
    let options = ProxierOptions {
        ipvs_exclude_cidrs: vec![
            "192.168.1.0/24".parse().unwrap(),
            "fd00:1::/64".parse().unwrap(),
        ],
        ..fake_options()
    };
    let p = program_with(options, &node(), vec![sp]);
    assert_eq!(
        p.ipvs_delete_others,
        BTreeMap::from([(IpFamily::Ipv4, vec!["192.168.1.0/24".parse().unwrap()])])
    );
}
