//! Tests for the iptables-mode reference proxier. Expectations come from
//! pkg/proxy/iptables/proxier_test.go (v1.32) where it has them.

use super::names::{endpoint_chain, ServiceChains};
use super::service::probability;
use super::*;
use crate::proxier::sha256_base32::base32_std;
use crate::scenario::cluster::{EndpointInfo, ServicePortInfo};
use crate::scenario::{Protocol, ServiceType};
use std::net::Ipv4Addr;

// ---- builders ----------------------------------------------------------------------------

use crate::proxier::test_cluster::{
    cidr, cluster, cluster6, ep, ip, local_ep, node, node6, overall_cluster, svc, With,
};

fn program(c: &ClusterState) -> Programming {
    KubeProxyIptables::default().program(c, &node()).unwrap()
}

fn rules(p: &Programming, t: Table) -> Vec<String> {
    p.iptables[&t].rules.clone()
}

fn chains(p: &Programming, t: Table) -> Vec<String> {
    p.iptables[&t]
        .chains
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

/// Rules of one chain, in order.
fn chain_rules(p: &Programming, t: Table, chain: &str) -> Vec<String> {
    let prefix = format!("-A {chain} ");
    rules(p, t)
        .into_iter()
        .filter(|r| r.starts_with(&prefix))
        .collect()
}

fn chains_with_prefix(p: &Programming, t: Table, prefix: &str) -> Vec<String> {
    chains(p, t)
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

/// iptables-restore input for the whole programming.
fn render(p: &Programming) -> String {
    p.iptables
        .iter()
        .map(|(table, rules)| crate::programming::text::render_table(*table, rules))
        .collect()
}

/// Sorted chain declarations, and each chain's rules in order.
type CanonicalTable = (Vec<String>, BTreeMap<String, Vec<String>>);

/// proxier_test.go's `sortIPTablesRules` view of a dump, restricted to KUBE-* chains: per
/// table, the chain set and each chain's rules in order.
fn canonical(dump: &str) -> BTreeMap<String, CanonicalTable> {
    let mut out: BTreeMap<String, CanonicalTable> = BTreeMap::new();
    let mut table = String::new();
    for line in dump.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split(' ').next().unwrap().to_string();
            if name.starts_with("KUBE-") {
                out.entry(table.clone()).or_default().0.push(name);
            }
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let chain = rule.split(' ').next().unwrap().to_string();
            if chain.starts_with("KUBE-") {
                out.entry(table.clone())
                    .or_default()
                    .1
                    .entry(chain)
                    .or_default()
                    .push(line.to_string());
            }
        }
    }
    for (decls, _) in out.values_mut() {
        decls.sort();
    }
    out
}

// ---- names ----------------------------------------------------------------------------------

#[test]
fn base32_matches_rfc4648_vectors() {
    let vectors = [
        ("", ""),
        ("f", "MY======"),
        ("fo", "MZXQ===="),
        ("foo", "MZXW6==="),
        ("foob", "MZXW6YQ="),
        ("fooba", "MZXW6YTB"),
        ("foobar", "MZXW6YTBOI======"),
    ];
    for (input, want) in vectors {
        assert_eq!(base32_std(input.as_bytes()), want, "{input:?}");
    }
}

/// Chain names appearing in TestOverallIPTablesRules: hash of `ns/name:port` + lower-case
/// protocol (+ `ip:port` for endpoints).
#[test]
fn chain_names_match_proxier_test() {
    let svc1 = ServiceChains::new("ns1/svc1:p80", "tcp");
    assert_eq!(svc1.cluster_policy, "KUBE-SVC-XPGD46QRK7WJZT7O");
    assert_eq!(
        ServiceChains::new("ns2/svc2:p80", "tcp").external,
        "KUBE-EXT-GNZBNJ2PO5MGZ6GT"
    );
    let svc5 = ServiceChains::new("ns5/svc5:p80", "tcp");
    assert_eq!(svc5.firewall, "KUBE-FW-NUKIZ6OKUXPJNT4C");
    assert_eq!(svc5.cluster_policy, "KUBE-SVC-NUKIZ6OKUXPJNT4C");
    assert_eq!(svc1.local_policy, "KUBE-SVL-XPGD46QRK7WJZT7O");
    assert_eq!(
        endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.1:80"),
        "KUBE-SEP-SXIVWICOYRO3J4NJ"
    );
    assert_eq!(
        endpoint_chain("ns5/svc5:p80", "tcp", "10.180.0.3:80"),
        "KUBE-SEP-I77PXRDZVX7PMWMN"
    );
    // The protocol is part of the hash: UDP on the same port name gets another chain.
    assert_ne!(
        ServiceChains::new("ns1/svc1:p80", "udp").cluster_policy,
        svc1.cluster_policy
    );
}

#[test]
fn masquerade_mark_is_go_hash_08x() {
    assert_eq!(go_hex_mark(1 << 14), "0x00004000");
}

// ---- golden dump ----------------------------------------------------------------------------

/// TestOverallIPTablesRules' expected output (proxier_test.go, v1.32), verbatim.
const OVERALL_UPSTREAM: &str = r#"
*filter
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
COMMIT
*nat
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXT-4SW47YFZTEDKD3PK - [0:0]
:KUBE-EXT-GNZBNJ2PO5MGZ6GT - [0:0]
:KUBE-EXT-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]
:KUBE-FW-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
:KUBE-SEP-I77PXRDZVX7PMWMN - [0:0]
:KUBE-SEP-OYPFS5VJICHGATKP - [0:0]
:KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
:KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
:KUBE-SVC-GNZBNJ2PO5MGZ6GT - [0:0]
:KUBE-SVC-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3003 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-X27LE4BHSL4DOUIK
-A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK
-A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3002 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 external IP" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK
-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment "masquerade traffic for ns4/svc4:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment "masquerade traffic for ns5/svc5:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C
-A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment "masquerade traffic for ns3/svc3:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -s 10.180.0.5 -j KUBE-MARK-MASQ
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
-A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
-A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
-A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -s 10.180.0.4 -j KUBE-MARK-MASQ
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-RS4RBKLTHTF2IUXJ
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --rcheck --seconds 10800 --reap -j KUBE-SEP-I77PXRDZVX7PMWMN
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -j KUBE-SEP-I77PXRDZVX7PMWMN
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.180.0.3:80" -j KUBE-SEP-OYPFS5VJICHGATKP
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
COMMIT
"#;

/// The upstream dump with our documented deviations applied: the fake proxier's `0x4000` mark
/// becomes real kube-proxy's `%#08x` spelling, the fake iptables' missing `--random-fully` is
/// present, and nfacct matches / localhost-NodePort nfacct twins are absent.
fn overall_adapted() -> String {
    OVERALL_UPSTREAM
        .lines()
        .filter(|l| !l.contains("--nfacct-name localhost_nps_accepted_pkts"))
        .map(|l| {
            let l = l.replace(" -m nfacct --nfacct-name ct_state_invalid_dropped_pkts", "");
            let l = l.replace("0x4000", "0x00004000");
            if l.ends_with("-j MASQUERADE") {
                format!("{l} --random-fully")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn overall_iptables_rules_match_upstream_golden() {
    let ours = canonical(&render(&program(&overall_cluster())));
    let want = canonical(&overall_adapted());
    for table in ["filter", "nat"] {
        let (our_chains, our_rules) = &ours[table];
        let (want_chains, want_rules) = &want[table];
        assert_eq!(our_chains, want_chains, "{table} chains");
        for chain in want_rules.keys().chain(our_rules.keys()) {
            assert_eq!(
                our_rules.get(chain),
                want_rules.get(chain),
                "{table} {chain}"
            );
        }
    }
}

#[test]
fn full_programming_snapshot() {
    let p = program(&overall_cluster());
    let sysctls: Vec<String> = p.sysctls.iter().map(|(k, v)| format!("{k}={v}")).collect();
    insta::assert_snapshot!(format!(
        "# restore mode: {:?}\n# sysctls: {}\n{}",
        p.restore_mode,
        sysctls.join(", "),
        render(&p)
    ));
}

// ---- fixed parts ----------------------------------------------------------------------------

#[test]
fn builtin_jumps_in_fresh_node_order() {
    let p = program(&cluster(vec![]));
    let filter: Vec<String> = rules(&p, Table::Filter)
        .into_iter()
        .filter(|r| !r.starts_with("-A KUBE-"))
        .collect();
    assert_eq!(
        filter,
        [
            "-A INPUT -j KUBE-FIREWALL",
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL",
            "-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS",
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES",
            "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL",
            "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD",
            "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES",
            "-A OUTPUT -j KUBE-FIREWALL",
            "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL",
            "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
        ]
    );
    let nat: Vec<String> = rules(&p, Table::Nat)
        .into_iter()
        .filter(|r| !r.starts_with("-A KUBE-"))
        .collect();
    assert_eq!(
        nat,
        [
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
        ]
    );
    let builtin: Vec<(String, Option<String>)> = p.iptables[&Table::Nat]
        .chains
        .iter()
        .filter(|c| c.policy.is_some())
        .map(|c| (c.name.clone(), c.policy.clone()))
        .collect();
    assert_eq!(
        builtin,
        [
            ("PREROUTING", "ACCEPT"),
            ("OUTPUT", "ACCEPT"),
            ("POSTROUTING", "ACCEPT")
        ]
        .map(|(n, pol)| (n.to_string(), Some(pol.to_string())))
    );
}

#[test]
fn restore_mode_sysctls_and_nothing_ipvs() {
    let p = program(&overall_cluster());
    assert_eq!(p.restore_mode, RestoreMode::NoFlush);
    assert_eq!(p.sysctls.len(), 1);
    assert_eq!(p.sysctls["net.ipv4.conf.all.route_localnet"], "1");
    assert!(p.ipsets.is_empty() && p.ipvs.is_empty() && p.ipvs_addresses.is_none());
    assert_eq!(
        p.iptables.keys().copied().collect::<Vec<_>>(),
        [Table::Nat, Table::Filter]
    );
    assert_eq!(KubeProxyIptables::default().name(), "kube-proxy-iptables");
}

// ---- load balancing -------------------------------------------------------------------------

#[test]
fn statistic_probabilities_for_one_to_five_endpoints() {
    let expected: [&[&str]; 5] = [
        &[],
        &["0.5000000000"],
        &["0.3333333333", "0.5000000000"],
        &["0.2500000000", "0.3333333333", "0.5000000000"],
        &[
            "0.2000000000",
            "0.2500000000",
            "0.3333333333",
            "0.5000000000",
        ],
    ];
    for (i, want) in expected.iter().enumerate() {
        let n = i + 1;
        let eps = (1..=n).map(|k| ep(&format!("10.180.0.{k}"))).collect();
        let p = program(&cluster(vec![
            svc("ns1", "svc1", "172.30.0.41").with(|s| s.endpoints = eps)
        ]));
        let svc_rules = chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O");
        let dispatch: Vec<&String> = svc_rules.iter().filter(|r| r.contains(" -> ")).collect();
        assert_eq!(dispatch.len(), n);
        let got: Vec<&str> = dispatch
            .iter()
            .filter_map(|r| r.split("--probability ").nth(1))
            .map(|rest| rest.split(' ').next().unwrap())
            .collect();
        assert_eq!(&got, want, "{n} endpoints");
        assert!(
            !dispatch[n - 1].contains("statistic"),
            "last rule always matches"
        );
    }
    assert_eq!(probability(6), "0.1666666667");
    assert_eq!(probability(7), "0.1428571429");
}

/// The endpoints map is sorted by `ip:port` as a string, not numerically.
#[test]
fn endpoints_sorted_as_strings_and_deduplicated() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.endpoints = vec![ep("10.180.0.2"), ep("10.180.0.10"), ep("10.180.0.2")];
        },
    )]));
    let dispatch: Vec<String> = chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O")
        .into_iter()
        .filter(|r| r.contains(" -> "))
        .collect();
    assert_eq!(dispatch.len(), 2);
    assert!(dispatch[0].contains("-> 10.180.0.10:80"));
    assert!(dispatch[1].contains("-> 10.180.0.2:80"));
}

#[test]
fn session_affinity_uses_recent_module() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.session_affinity_timeout_seconds = Some(300);
            s.endpoints = vec![ep("10.180.0.1"), ep("10.180.0.2")];
        },
    )]));
    let sep1 = endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.1:80");
    let sep2 = endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.2:80");
    assert_eq!(
        chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O"),
        [
            "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ".to_string(),
            format!("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -m recent --name {sep1} --rcheck --seconds 300 --reap -j {sep1}"),
            format!("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.2:80\" -m recent --name {sep2} --rcheck --seconds 300 --reap -j {sep2}"),
            format!("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -m statistic --mode random --probability 0.5000000000 -j {sep1}"),
            format!("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.2:80\" -j {sep2}"),
        ]
    );
    assert_eq!(
        chain_rules(&p, Table::Nat, &sep2),
        [
            format!("-A {sep2} -m comment --comment ns1/svc1:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ"),
            format!("-A {sep2} -m comment --comment ns1/svc1:p80 -m recent --name {sep2} --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80"),
        ]
    );
}

#[test]
fn udp_and_sctp_use_their_protocol_match() {
    let p = program(&cluster(vec![
        svc("ns1", "dns", "172.30.0.10").with(|s| {
            s.protocol = Protocol::Udp;
            s.port = 53;
            s.port_name = String::new();
            s.endpoints = vec![ep("10.180.0.1").with(|e| e.port = 53)];
        }),
        svc("ns1", "sctp", "172.30.0.11").with(|s| {
            s.protocol = Protocol::Sctp;
            s.endpoints = vec![ep("10.180.0.1")];
        }),
    ]));
    let udp = ServiceChains::new("ns1/dns", "udp");
    let services = chain_rules(&p, Table::Nat, KUBE_SERVICES);
    assert_eq!(
        services[0],
        format!("-A KUBE-SERVICES -m comment --comment \"ns1/dns cluster IP\" -m udp -p udp -d 172.30.0.10 --dport 53 -j {}", udp.cluster_policy)
    );
    assert!(services[1].contains("-m sctp -p sctp -d 172.30.0.11 --dport 80"));
    let sep = endpoint_chain("ns1/dns", "udp", "10.180.0.1:53");
    assert!(chain_rules(&p, Table::Nat, &sep)[1]
        .ends_with("-m udp -p udp -j DNAT --to-destination 10.180.0.1:53"));
}

// ---- endpoint selection ---------------------------------------------------------------------

#[test]
fn terminating_endpoints_are_a_fallback_only() {
    let terminating = |a: &str, serving: bool| {
        ep(a).with(|e| {
            e.ready = false;
            e.serving = serving;
            e.terminating = true;
        })
    };
    // With a ready endpoint, terminating ones are unused.
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.endpoints = vec![ep("10.180.0.1"), terminating("10.180.0.2", true)];
        },
    )]));
    assert_eq!(chains_with_prefix(&p, Table::Nat, "KUBE-SEP-").len(), 1);
    // Without, serving+terminating ones are used and non-serving ones are not.
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.endpoints = vec![
                terminating("10.180.0.2", true),
                terminating("10.180.0.3", false),
            ];
        },
    )]));
    assert_eq!(
        chains_with_prefix(&p, Table::Nat, "KUBE-SEP-"),
        [endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.2:80")]
    );
    // Only non-serving endpoints: no endpoints at all.
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.endpoints = vec![
                terminating("10.180.0.3", false),
                ep("10.180.0.4").with(|e| e.ready = false),
            ];
        },
    )]));
    assert!(chain_rules(&p, Table::Filter, KUBE_SERVICES)[0].ends_with("-j REJECT"));
}

fn etp_local_lb(endpoints: Vec<EndpointInfo>) -> ServicePortInfo {
    svc("ns2", "svc2", "172.30.0.42").with(|s| {
        s.type_ = ServiceType::LoadBalancer;
        s.external_policy_local = true;
        s.node_port = Some(3001);
        s.load_balancer_vips = vec![ip("1.2.3.4")];
        s.health_check_node_port = Some(30000);
        s.endpoints = endpoints;
    })
}

#[test]
fn etp_local_with_local_endpoints() {
    let p = program(&cluster(vec![etp_local_lb(vec![
        ep("10.180.0.1"),
        local_ep("10.180.0.2"),
    ])]));
    let c = ServiceChains::new("ns2/svc2:p80", "tcp");
    let sep_local = endpoint_chain("ns2/svc2:p80", "tcp", "10.180.0.2:80");
    assert_eq!(
        chain_rules(&p, Table::Nat, &c.external),
        [
            format!("-A {} -m comment --comment \"pod traffic for ns2/svc2:p80 external destinations\" -s 10.0.0.0/8 -j {}", c.external, c.cluster_policy),
            format!("-A {} -m comment --comment \"masquerade LOCAL traffic for ns2/svc2:p80 external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ", c.external),
            format!("-A {} -m comment --comment \"route LOCAL traffic for ns2/svc2:p80 external destinations\" -m addrtype --src-type LOCAL -j {}", c.external, c.cluster_policy),
            format!("-A {} -j {}", c.external, c.local_policy),
        ]
    );
    assert_eq!(
        chain_rules(&p, Table::Nat, &c.local_policy),
        [format!(
            "-A {} -m comment --comment \"ns2/svc2:p80 -> 10.180.0.2:80\" -j {sep_local}",
            c.local_policy
        )]
    );
    // The SVL chain has no masquerade rule (only the internal policy chain gets one).
    assert_eq!(chain_rules(&p, Table::Nat, &c.cluster_policy).len(), 3);
    assert!(chain_rules(&p, Table::Filter, KUBE_EXTERNAL_SERVICES).is_empty());
    assert_eq!(
        chain_rules(&p, Table::Filter, KUBE_NODEPORTS),
        ["-A KUBE-NODEPORTS -m comment --comment \"ns2/svc2:p80 health check node port\" -m tcp -p tcp --dport 30000 -j ACCEPT"]
    );
    assert_eq!(chains_with_prefix(&p, Table::Nat, "KUBE-SEP-").len(), 2);
}

#[test]
fn etp_local_without_local_endpoints_drops_external_traffic() {
    let p = program(&cluster(vec![etp_local_lb(vec![ep("10.180.0.1")])]));
    let c = ServiceChains::new("ns2/svc2:p80", "tcp");
    assert!(chains_with_prefix(&p, Table::Nat, "KUBE-SVL-").is_empty());
    let ext = chain_rules(&p, Table::Nat, &c.external);
    assert_eq!(
        ext.len(),
        3,
        "short-circuit rules only, no fall-through: {ext:?}"
    );
    assert_eq!(
        chain_rules(&p, Table::Filter, KUBE_EXTERNAL_SERVICES),
        [
            "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns2/svc2:p80 has no local endpoints\" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP",
            "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns2/svc2:p80 has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP",
        ]
    );
    // ClusterIP traffic still works (internal policy Cluster).
    assert!(chain_rules(&p, Table::Nat, KUBE_SERVICES)[0]
        .ends_with(&format!("-j {}", c.cluster_policy)));
}

/// eTP Local with only a serving-terminating local endpoint: SVL uses it while SVC keeps the
/// ready remote one, and both get SEP chains (the merged `allReachableEndpoints`).
#[test]
fn etp_local_falls_back_to_local_terminating_endpoint() {
    let terminating = local_ep("10.180.0.2").with(|e| {
        e.ready = false;
        e.terminating = true;
    });
    let p = program(&cluster(vec![etp_local_lb(vec![
        ep("10.180.0.1"),
        terminating,
    ])]));
    let c = ServiceChains::new("ns2/svc2:p80", "tcp");
    let sep1 = endpoint_chain("ns2/svc2:p80", "tcp", "10.180.0.1:80");
    let sep2 = endpoint_chain("ns2/svc2:p80", "tcp", "10.180.0.2:80");
    assert!(chain_rules(&p, Table::Nat, &c.local_policy)[0].ends_with(&format!("-j {sep2}")));
    assert!(chain_rules(&p, Table::Nat, &c.cluster_policy)[1].ends_with(&format!("-j {sep1}")));
    assert_eq!(
        chains_with_prefix(&p, Table::Nat, "KUBE-SEP-"),
        [sep1, sep2]
    );
    assert!(chain_rules(&p, Table::Filter, KUBE_EXTERNAL_SERVICES).is_empty());
}

#[test]
fn itp_local_without_local_endpoints_drops_cluster_ip() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.internal_policy_local = true;
            s.endpoints = vec![ep("10.180.0.1")];
        },
    )]));
    assert_eq!(
        chain_rules(&p, Table::Filter, KUBE_SERVICES),
        ["-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 has no local endpoints\" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j DROP"]
    );
    assert!(chains_with_prefix(&p, Table::Nat, "KUBE-S")
        .iter()
        .all(|c| c == KUBE_SERVICES));
}

#[test]
fn itp_local_with_local_endpoint_uses_svl_with_masquerade_rule() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.internal_policy_local = true;
            s.endpoints = vec![ep("10.180.0.1"), local_ep("10.180.0.2")];
        },
    )]));
    let c = ServiceChains::new("ns1/svc1:p80", "tcp");
    assert!(
        chain_rules(&p, Table::Nat, KUBE_SERVICES)[0].ends_with(&format!("-j {}", c.local_policy))
    );
    let svl = chain_rules(&p, Table::Nat, &c.local_policy);
    assert_eq!(svl.len(), 2);
    assert!(svl[0].ends_with("! -s 10.0.0.0/8 -j KUBE-MARK-MASQ"));
    assert!(chains_with_prefix(&p, Table::Nat, "KUBE-SVC-").is_empty());
    assert_eq!(
        chains_with_prefix(&p, Table::Nat, "KUBE-SEP-"),
        [endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.2:80")]
    );
}

// ---- no endpoints ---------------------------------------------------------------------------

/// TestNoEndpointsReject: ClusterIP, external IP, NodePort and LB IP all REJECT.
#[test]
fn no_endpoints_reject_every_destination() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.type_ = ServiceType::LoadBalancer;
            s.external_ips = vec![ip("192.168.99.11")];
            s.node_port = Some(3001);
            s.load_balancer_vips = vec![ip("1.2.3.4")];
            s.load_balancer_source_ranges = vec![cidr("203.0.113.0/25")];
        },
    )]));
    let comment = "-m comment --comment \"ns1/svc1:p80 has no endpoints\"";
    assert_eq!(
        chain_rules(&p, Table::Filter, KUBE_SERVICES),
        [format!(
            "-A KUBE-SERVICES {comment} -m tcp -p tcp -d 172.30.0.41 --dport 80 -j REJECT"
        )]
    );
    assert_eq!(
        chain_rules(&p, Table::Filter, KUBE_EXTERNAL_SERVICES),
        [
            format!("-A KUBE-EXTERNAL-SERVICES {comment} -m tcp -p tcp -d 192.168.99.11 --dport 80 -j REJECT"),
            format!("-A KUBE-EXTERNAL-SERVICES {comment} -m tcp -p tcp -d 1.2.3.4 --dport 80 -j REJECT"),
            format!("-A KUBE-EXTERNAL-SERVICES {comment} -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j REJECT"),
        ]
    );
    // No nat chains or rules at all for the service, and no firewall (usesFWChain needs endpoints).
    let nat_kube: Vec<String> = chains(&p, Table::Nat)
        .into_iter()
        .filter(|c| c.starts_with("KUBE-"))
        .collect();
    assert_eq!(
        nat_kube,
        [
            KUBE_SERVICES,
            KUBE_NODEPORTS,
            KUBE_POSTROUTING,
            KUBE_MARK_MASQ
        ]
    );
    assert!(chain_rules(&p, Table::Filter, KUBE_PROXY_FIREWALL).is_empty());
    assert_eq!(
        chain_rules(&p, Table::Nat, KUBE_SERVICES).len(),
        1,
        "only the nodeports tail rule"
    );
}

// ---- external destinations ------------------------------------------------------------------

#[test]
fn external_ips_with_cluster_policy_masquerade() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.external_ips = vec![ip("192.168.99.33"), ip("192.168.99.34")];
            s.endpoints = vec![ep("10.180.0.1")];
        },
    )]));
    let c = ServiceChains::new("ns1/svc1:p80", "tcp");
    let services = chain_rules(&p, Table::Nat, KUBE_SERVICES);
    assert_eq!(
        services[1..3],
        [
            format!("-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 external IP\" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j {}", c.external),
            format!("-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 external IP\" -m tcp -p tcp -d 192.168.99.34 --dport 80 -j {}", c.external),
        ]
    );
    assert_eq!(
        chain_rules(&p, Table::Nat, &c.external),
        [
            format!("-A {} -m comment --comment \"masquerade traffic for ns1/svc1:p80 external destinations\" -j KUBE-MARK-MASQ", c.external),
            format!("-A {} -j {}", c.external, c.cluster_policy),
        ]
    );
    assert!(chain_rules(&p, Table::Nat, KUBE_NODEPORTS).is_empty());
}

/// TestLoadBalancer: several source ranges, one of which contains the node IP, so traffic
/// sourced from the LB IPs (hairpinned VIP traffic) is accepted too.
#[test]
fn load_balancer_source_ranges_use_fw_chain() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.type_ = ServiceType::LoadBalancer;
            s.node_port = Some(3001);
            s.load_balancer_vips = vec![ip("1.2.3.4"), ip("5.6.7.8")];
            // Host bits set: kube-proxy prints the masked network.
            s.load_balancer_source_ranges = vec![cidr("192.168.0.1/24"), cidr("203.0.113.0/25")];
            s.endpoints = vec![ep("10.180.0.1")];
        },
    )]));
    let c = ServiceChains::new("ns1/svc1:p80", "tcp");
    let fw = &c.firewall;
    let ext = &c.external;
    let head = format!("-A {fw} -m comment --comment \"ns1/svc1:p80 loadbalancer IP\"");
    assert_eq!(
        chain_rules(&p, Table::Nat, fw),
        [
            format!("{head} -s 192.168.0.0/24 -j {ext}"),
            format!("{head} -s 203.0.113.0/25 -j {ext}"),
            format!("{head} -s 1.2.3.4 -j {ext}"),
            format!("{head} -s 5.6.7.8 -j {ext}"),
            format!("-A {fw} -m comment --comment \"other traffic to ns1/svc1:p80 will be dropped by KUBE-PROXY-FIREWALL\""),
        ]
    );
    assert_eq!(
        chain_rules(&p, Table::Filter, KUBE_PROXY_FIREWALL),
        [
            format!("-A KUBE-PROXY-FIREWALL -m comment --comment \"ns1/svc1:p80 traffic not accepted by {fw}\" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP"),
            format!("-A KUBE-PROXY-FIREWALL -m comment --comment \"ns1/svc1:p80 traffic not accepted by {fw}\" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP"),
        ]
    );
    let services = chain_rules(&p, Table::Nat, KUBE_SERVICES);
    assert!(services[1].ends_with(&format!("-d 1.2.3.4 --dport 80 -j {fw}")));
    // NodePorts bypass source ranges.
    assert_eq!(
        chain_rules(&p, Table::Nat, KUBE_NODEPORTS),
        [format!("-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j {ext}")]
    );
}

#[test]
fn load_balancer_without_source_ranges_goes_to_ext() {
    let p = program(&cluster(vec![svc("ns1", "svc1", "172.30.0.41").with(
        |s| {
            s.type_ = ServiceType::LoadBalancer;
            s.load_balancer_vips = vec![ip("1.2.3.4")];
            s.endpoints = vec![ep("10.180.0.1")];
        },
    )]));
    let c = ServiceChains::new("ns1/svc1:p80", "tcp");
    assert!(chain_rules(&p, Table::Nat, KUBE_SERVICES)[1].ends_with(&format!("-j {}", c.external)));
    assert!(chains_with_prefix(&p, Table::Nat, "KUBE-FW-").is_empty());
}

// ---- options --------------------------------------------------------------------------------

#[test]
fn masquerade_all_masquerades_every_cluster_ip_packet() {
    let mut c = cluster(vec![
        svc("ns1", "svc1", "172.30.0.41").with(|s| s.endpoints = vec![ep("10.180.0.1")])
    ]);
    c.options.masquerade_all = true;
    let p = program(&c);
    assert_eq!(
        chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O")[0],
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-MARK-MASQ"
    );
}

#[test]
fn without_cluster_cidr_there_is_no_local_detector() {
    let mut c = cluster(vec![
        svc("ns1", "svc1", "172.30.0.41").with(|s| s.endpoints = vec![ep("10.180.0.1")]),
        etp_local_lb(vec![local_ep("10.180.0.2")]),
    ]);
    c.options.cluster_cidr = false;
    let p = program(&c);
    // No off-cluster masquerade rule: the SVC chain only dispatches.
    assert_eq!(
        chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O").len(),
        1
    );
    // No "pod traffic" short-circuit in the EXT chain.
    let ext = chain_rules(
        &p,
        Table::Nat,
        &ServiceChains::new("ns2/svc2:p80", "tcp").external,
    );
    assert_eq!(ext.len(), 3);
    assert!(ext.iter().all(|r| !r.contains("pod traffic")));
}

#[test]
fn cluster_cidr_is_printed_as_its_network() {
    let mut c = cluster(vec![
        svc("ns1", "svc1", "172.30.0.41").with(|s| s.endpoints = vec![ep("10.180.0.1")])
    ]);
    c.cluster_cidr = cidr("10.244.7.9/16");
    let p = program(&c);
    assert!(chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O")[0]
        .contains("! -s 10.244.0.0/16 -j KUBE-MARK-MASQ"));
}

#[test]
fn headless_and_external_name_services_are_skipped() {
    let p = program(&cluster(vec![
        svc("ns1", "headless", "172.30.0.1").with(|s| {
            s.cluster_ip = None;
            s.endpoints = vec![ep("10.180.0.1")];
        }),
        svc("ns1", "extname", "172.30.0.2").with(|s| s.type_ = ServiceType::ExternalName),
    ]));
    let empty = program(&cluster(vec![]));
    assert_eq!(p, empty);
}

#[test]
fn large_cluster_mode_drops_endpoint_comments() {
    let eps: Vec<EndpointInfo> = (0..1001u32)
        .map(|i| ep(&Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 180, 0, 0)) + i).to_string()))
        .collect();
    let p = program(&cluster(vec![
        svc("ns1", "svc1", "172.30.0.41").with(|s| s.endpoints = eps)
    ]));
    let svc_rules = chain_rules(&p, Table::Nat, "KUBE-SVC-XPGD46QRK7WJZT7O");
    // The "cluster IP" masquerade rule keeps its comment; dispatch rules lose theirs.
    assert!(svc_rules[0].contains("cluster IP"));
    assert!(svc_rules[1].starts_with("-A KUBE-SVC-XPGD46QRK7WJZT7O -m statistic --mode random --probability 0.0009990010 -j KUBE-SEP-"));
    let sep = endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.0:80");
    assert_eq!(
        chain_rules(&p, Table::Nat, &sep)[0],
        format!("-A {sep} -s 10.180.0.0 -j KUBE-MARK-MASQ")
    );
}

// ---- kernel ---------------------------------------------------------------------------------

/// The rendered programming parses: `iptables-restore --test --noflush` in a throwaway
/// namespace (never the host's), for a scenario exercising every rule shape.
#[test]
fn netns_iptables_restore_accepts_output() {
    let mut c = overall_cluster();
    c.service_ports.push(
        etp_local_lb(vec![ep("10.180.1.1"), local_ep("10.180.1.2")])
            .with(|s| s.name = "svc7".into()),
    );
    c.service_ports
        .push(svc("ns8", "svc8", "172.30.0.48").with(|s| {
            s.protocol = Protocol::Udp;
            s.internal_policy_local = true;
            s.endpoints = vec![
                local_ep("10.180.2.1"),
                local_ep("10.180.2.2"),
                ep("10.180.2.3"),
            ];
        }));
    let p = program(&c);
    let input = render(&p);
    // Removed on drop, panics included.
    let ns = crate::netns::Netns::create(&format!("kpipt-test-{}", std::process::id())).unwrap();
    let restore = |extra: &[&str]| {
        let args: Vec<&str> = ["--noflush"].iter().chain(extra).copied().collect();
        if let Err(e) = ns.exec_with_stdin("iptables-restore", &args, Some(&input)) {
            panic!("iptables-restore {extra:?} rejected:\n{e:#}\n---\n{input}");
        }
    };
    restore(&["--test"]);
    // The nf_tables backend's --test does not resolve jump targets, so also commit it (to the
    // throwaway namespace only) and check every rule landed.
    restore(&[]);
    let saved = ns.exec("iptables-save", &[]).unwrap();
    let saved_rules = saved.lines().filter(|l| l.starts_with("-A ")).count();
    let our_rules: usize = p.iptables.values().map(|t| t.rules.len()).sum();
    assert_eq!(saved_rules, our_rules);
}

/// `conntrack.tcpBeLiberal`: kube-proxy sets `nf_conntrack_tcp_be_liberal=1` before creating
/// the proxier, whose `NewProxier` then finds it set and `syncProxyRules` writes no KUBE-FORWARD
/// drop of INVALID packets (proxier_test.go TestOverallIPTablesRules has the rule with the
/// default `conntrackTCPLiberal: false`); every other rule stays.
#[test]
fn tcp_be_liberal_sets_the_sysctl_and_drops_no_invalid_packets() {
    let mut c = overall_cluster();
    let strict = program(&c);
    let invalid = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP";
    assert!(rules(&strict, Table::Filter).contains(&invalid.to_string()));
    assert!(!strict
        .sysctls
        .contains_key(crate::proxier::conntrack_sysctls::TCP_BE_LIBERAL));
    c.options.tcp_be_liberal = true;
    let liberal = program(&c);
    assert_eq!(
        liberal.sysctls["net.netfilter.nf_conntrack_tcp_be_liberal"],
        "1"
    );
    let mut without: Vec<String> = rules(&strict, Table::Filter);
    without.retain(|r| r != invalid);
    assert_eq!(rules(&liberal, Table::Filter), without);
    assert_eq!(rules(&liberal, Table::Nat), rules(&strict, Table::Nat));
    // The IPv6 proxier reads the same sysctl.
    let mut c6 = cluster6(vec![]);
    c6.options.tcp_be_liberal = true;
    let p6 = KubeProxyIptables::default().program(&c6, &node6()).unwrap();
    assert!(!rules(&p6, Table::Filter)
        .iter()
        .any(|r| r.contains("INVALID")));
}

/// `--iptables-localhost-nodeports=false` (pkg/proxy/iptables/proxier.go NewProxier and
/// syncProxyRules; proxier_test.go TestNodePorts "localhost nodeports disabled"): no
/// route_localnet, no localnet firewall rule, and the NodePorts jump skips 127.0.0.0/8.
#[test]
fn localhost_node_ports_off() {
    let mut c = cluster(vec![svc("ns1", "svc1", "172.30.0.41")]);
    let on = program(&c);
    assert_eq!(
        on.sysctls
            .get("net.ipv4.conf.all.route_localnet")
            .map(String::as_str),
        Some("1")
    );
    c.options.localhost_node_ports = false;
    let off = program(&c);
    assert!(off.sysctls.is_empty(), "{:?}", off.sysctls);
    assert!(!rules(&off, Table::Filter)
        .iter()
        .any(|r| r.contains("block incoming localnet connections")));
    assert!(rules(&off, Table::Nat)
        .iter()
        .any(|r| r.ends_with("-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS")));
}

/// Without `--random-fully` support (iptables < 1.6.2) the MASQUERADE rule has no flag
/// (pkg/proxy/iptables/proxier.go `if proxier.iptables.HasRandomFully()`).
#[test]
fn masquerade_without_random_fully() {
    let mut c = cluster(vec![]);
    c.options.random_fully = false;
    let masq: Vec<String> = rules(&program(&c), Table::Nat)
        .into_iter()
        .filter(|r| r.contains("-j MASQUERADE"))
        .collect();
    assert_eq!(
        masq,
        ["-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE"]
    );
}

/// `--iptables-masquerade-bit`: every mark rule uses `1<<bit` printed as `%#08x`
/// (pkg/proxy/iptables/proxier.go NewProxier `masqueradeMark`).
#[test]
fn masquerade_bit_sets_the_mark_everywhere() {
    let mut c = cluster(vec![svc("ns1", "svc1", "172.30.0.41")]);
    c.options.masquerade_bit = 10;
    let p = program(&c);
    let marks: Vec<String> = [Table::Nat, Table::Filter]
        .iter()
        .flat_map(|t| rules(&p, *t))
        .filter(|r| r.contains("mark"))
        .collect();
    assert!(!marks.is_empty());
    for r in &marks {
        assert!(r.contains("0x00000400") && !r.contains("0x00004000"), "{r}");
    }
    assert!(marks.contains(&"-A KUBE-MARK-MASQ -j MARK --or-mark 0x00000400".to_string()));
}

/// proxier_test.go's TestNodePorts cases with `nodePortAddresses` (e.g. `192.168.0.0/24`): one
/// `-d IP` jump per matching node address instead of `addrtype LOCAL`; localhost NodePorts (and
/// so route_localnet and the localnet firewall rule) only when a CIDR holds 127.0.0.0.
#[test]
fn node_port_addresses_jump_per_node_ip() {
    let jump = |ip: &str| {
        format!("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -d {ip} -j KUBE-NODEPORTS")
    };
    let with = |entries: &[&str], localhost: bool| {
        let mut c = cluster(vec![svc("ns1", "svc1", "172.30.0.41")]);
        c.options.node_port_addresses = entries.iter().map(|e| e.parse().unwrap()).collect();
        c.options.localhost_node_ports = localhost;
        let mut n = node();
        n.local_addresses.push(ip("192.168.0.7"));
        program_with(&c, &n, &Config::new(&c, &n), None)
    };
    let last = |p: &Programming| -> Vec<String> {
        chain_rules(p, Table::Nat, "KUBE-SERVICES")
            .into_iter()
            .filter(|r| r.contains("KUBE-NODEPORTS"))
            .collect()
    };
    let localnet = |p: &Programming| {
        chain_rules(p, Table::Filter, "KUBE-FIREWALL")
            .iter()
            .any(|r| r.contains("block incoming localnet connections"))
    };

    let cidr = with(&["192.168.0.0/24"], true);
    assert_eq!(last(&cidr), [jump("192.168.0.2"), jump("192.168.0.7")]);
    assert!(cidr.sysctls.is_empty() && !localnet(&cidr));

    let primary = with(&["primary"], true);
    assert_eq!(last(&primary), [jump("192.168.0.2")]);

    let loopback = with(&["192.168.0.2/32", "127.0.0.0/8"], true);
    assert_eq!(last(&loopback), [jump("127.0.0.1"), jump("192.168.0.2")]);
    assert_eq!(loopback.sysctls["net.ipv4.conf.all.route_localnet"], "1");
    assert!(localnet(&loopback));

    let loopback_off = with(&["192.168.0.2/32", "127.0.0.0/8"], false);
    assert_eq!(last(&loopback_off), [jump("192.168.0.2")]);
    assert!(loopback_off.sysctls.is_empty());

    let all = with(&["192.168.0.0/24", "0.0.0.0/0"], true);
    assert_eq!(last(&all).len(), 1);
    assert!(last(&all)[0].contains("-m addrtype --dst-type LOCAL -j"));
}

/// A pod replaced by another at its address (`transition-pod-created`'s last step) lists the
/// same endpoints in another order: no change for the trackers, which compare them sorted.
#[test]
fn endpoints_listed_in_another_order_are_no_change() {
    use crate::scenario::cluster::ListedEndpoint;
    let listed = |ips: &[&str]| {
        ips.iter()
            .map(|ip| ListedEndpoint {
                endpoint: ep(ip),
                proxy_name_slice: false,
            })
            .collect::<Vec<_>>()
    };
    let with = |order: &[&str], endpoints: &[&str]| {
        cluster(vec![svc("ns1", "a", "172.30.0.41").with(|s| {
            s.endpoints = endpoints.iter().map(|ip| ep(ip)).collect();
            s.listed = listed(order);
        })])
    };
    let before = with(&["10.180.0.2", "10.180.0.1"], &["10.180.0.1", "10.180.0.2"]);
    let reordered = with(&["10.180.0.1", "10.180.0.2"], &["10.180.0.1", "10.180.0.2"]);
    let shrunk = with(&["10.180.0.1"], &["10.180.0.1"]);
    let a = ("ns1".to_string(), "a".to_string());
    assert!(unchanged_services(&before, &reordered).contains(&a));
    assert!(!unchanged_services(&before, &shrunk).contains(&a));
}

/// A resync after only `ns1/b`'s endpoints changed: a partial sync rewrites b's chains and
/// leaves a's out of the restore (they stay in use, so they are not stale either); the chains
/// of b's endpoint that left are flushed and deleted. After a restart it is a full sync again.
#[test]
fn a_partial_sync_writes_only_changed_services_and_deletes_stale_chains() {
    use crate::proxier::Resync;
    let a = svc("ns1", "a", "172.30.0.41").with(|s| s.endpoints = vec![ep("10.180.0.1")]);
    let b_before = svc("ns1", "b", "172.30.0.42")
        .with(|s| s.endpoints = vec![ep("10.180.0.2"), ep("10.180.0.3")]);
    let b_after = svc("ns1", "b", "172.30.0.42").with(|s| s.endpoints = vec![ep("10.180.0.2")]);
    let before = cluster(vec![a.clone(), b_before]);
    let after = cluster(vec![a, b_after]);
    let first = program(&before);
    let existing: BTreeMap<Table, std::collections::BTreeSet<String>> = first
        .iptables
        .iter()
        .map(|(t, r)| (*t, r.chains.iter().map(|c| c.name.clone()).collect()))
        .collect();
    let sep = |ip: &str| super::names::endpoint_chain("ns1/b:p80", "tcp", &format!("{ip}:80"));
    let a_svc = chains_with_prefix(&first, Table::Nat, "KUBE-SVC-")
        .into_iter()
        .find(|c| {
            first.iptables[&Table::Nat]
                .rules
                .iter()
                .any(|r| r.contains(&format!("-A {c} ")) && r.contains("ns1/a:p80"))
        })
        .expect("a's KUBE-SVC chain");
    let resync = |previous| {
        KubeProxyIptables::default()
            .resync(
                &Resync {
                    step: "s",
                    previous,
                    existing_chains: &existing,
                    existing_ip6_chains: &Default::default(),
                    nft: &Default::default(),
                    ipvs: &[],
                },
                &after,
                &node(),
            )
            .unwrap()
    };
    let partial = resync(Some(&before));
    let nat = chains(&partial, Table::Nat);
    assert!(!nat.contains(&a_svc), "unchanged a is left out: {nat:?}");
    assert!(nat.contains(&sep("10.180.0.2")), "{nat:?}");
    assert!(
        nat.contains(&sep("10.180.0.3")),
        "the stale chain is declared to flush it"
    );
    assert_eq!(
        partial.iptables[&Table::Nat]
            .deleted_chains()
            .collect::<Vec<_>>(),
        [sep("10.180.0.3").as_str()]
    );
    // The jump to a's chain is still written: KUBE-SERVICES is rewritten whole.
    assert!(rules(&partial, Table::Nat)
        .iter()
        .any(|r| r.starts_with("-A KUBE-SERVICES") && r.ends_with(&format!("-j {a_svc}"))));
    let full = resync(None);
    assert!(
        chains(&full, Table::Nat).contains(&a_svc),
        "a restart syncs fully"
    );
    assert_eq!(
        full.iptables[&Table::Nat]
            .deleted_chains()
            .collect::<Vec<_>>(),
        [sep("10.180.0.3").as_str()]
    );
}

/// The IPv6 proxier (`NewProxier(v1.IPv6Protocol, …)`): the same rules with IPv6 addresses,
/// endpoints as `[ip]:port` (`BaseEndpointInfo.String()`, `net.JoinHostPort`), and never
/// localhost NodePorts: `ContainsIPv4Loopback` is false for IPv6, so no `route_localnet` and
/// no localnet firewall rule, and the NodePort jump excludes `::1/128` ("For IPv6 they never
/// work", syncProxyRules).
#[test]
fn the_ipv6_proxier_writes_ipv6_rules_without_localhost_node_ports() {
    let c = cluster6(vec![svc("ns1", "svc1", "fd00:10:96::29").with(|s| {
        s.type_ = ServiceType::NodePort;
        s.node_port = Some(3001);
        s.endpoints = vec![ep("fd00:10:180::1")];
    })]);
    let p = KubeProxyIptables::default().program(&c, &node6()).unwrap();
    assert!(p.sysctls.is_empty(), "{:?}", p.sysctls);
    let nat = rules(&p, Table::Nat);
    assert!(
        nat.contains(&format!(
            "-A {KUBE_SERVICES} -m comment --comment \"kubernetes service nodeports; NOTE: this \
             must be the last rule in this chain\" -m addrtype --dst-type LOCAL ! -d ::1/128 -j \
             {KUBE_NODEPORTS}"
        )),
        "{nat:#?}"
    );
    let sep = endpoint_chain("ns1/svc1:p80", "tcp", "[fd00:10:180::1]:80");
    assert!(
        nat.contains(&format!(
            "-A {sep} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination \
             [fd00:10:180::1]:80"
        )),
        "{nat:#?}"
    );
    assert!(
        nat.iter()
            .any(|r| r.contains("-d fd00:10:96::29 --dport 80 ! -s fd00:10::/64 -j KUBE-MARK-MASQ")),
        "the local detector is the IPv6 cluster CIDR: {nat:#?}"
    );
    assert!(
        !rules(&p, Table::Filter)
            .iter()
            .any(|r| r.contains("localnet") || r.contains("127.0.0.0/8")),
        "{:#?}",
        rules(&p, Table::Filter)
    );
}
