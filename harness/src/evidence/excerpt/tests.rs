use super::*;
use crate::programming::effective::{normalize_ipset_save, normalize_iptables_save};

/// kube-proxy iptables mode, two services: web (ClusterIP 10.96.0.10:80, NodePort 30080)
/// and other (10.96.0.11:80, no endpoints).
const IPTABLES: &str = r#"*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-EXT-WEB - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-WEB1 - [0:0]
:KUBE-SEP-OTHER1 - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-OTHER - [0:0]
:KUBE-SVC-WEB - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-EXT-WEB -m comment --comment "masquerade traffic for default/web:http external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-WEB -j KUBE-SVC-WEB
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-EXT-WEB
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-WEB1 -s 10.244.2.10/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-WEB1 -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.244.2.10:8080
-A KUBE-SEP-OTHER1 -s 10.244.2.11/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-OTHER1 -p tcp -m tcp -j DNAT --to-destination 10.244.2.11:8080
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-WEB
-A KUBE-SERVICES -d 10.96.0.11/32 -p tcp -m comment --comment "default/other cluster IP" -m tcp --dport 80 -j KUBE-SVC-OTHER
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-OTHER -j KUBE-SEP-OTHER1
-A KUBE-SVC-WEB ! -s 10.244.0.0/16 -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-WEB -m comment --comment "default/web:http -> 10.244.2.10:8080" -j KUBE-SEP-WEB1
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.12/32 -p tcp -m comment --comment "default/none has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
"#;

fn tcp(addr: Option<[u8; 4]>, port: u16) -> Target {
    Target {
        protocol: Protocol::Tcp,
        addr: addr.map(|a| IpAddr::V4(a.into())),
        port,
    }
}

#[test]
fn nodeport_excerpt_follows_the_path_and_keeps_masquerade_chains() {
    let tables = normalize_iptables_save(IPTABLES);
    let got = iptables_excerpt(
        &tables,
        &[],
        &[tcp(Some([192, 168, 1, 10]), 30080), tcp(None, 30080)],
    );
    // The nodePort rule, how packets get to it, what it leads to, and masquerading.
    for wanted in [
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
        "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
        "--dst-type LOCAL -j KUBE-NODEPORTS",
        "--dport 30080 -j KUBE-EXT-WEB",
        "-A KUBE-EXT-WEB -j KUBE-SVC-WEB",
        "-A KUBE-SVC-WEB ! -s 10.244.0.0/16",
        "--to-destination 10.244.2.10:8080",
        "-j MASQUERADE --random-fully",
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "# … 2 other rules of KUBE-SERVICES not shown",
    ] {
        assert!(got.contains(wanted), "missing {wanted:?} in\n{got}");
    }
    // Another service's chains and the filter table (nothing there mentions a target).
    for unwanted in ["KUBE-SVC-OTHER", "KUBE-SEP-OTHER1", "10.96.0.11", "*filter"] {
        assert!(!got.contains(unwanted), "{unwanted:?} in\n{got}");
    }
}

#[test]
fn clusterip_excerpt_matches_address_and_port_together() {
    let tables = normalize_iptables_save(IPTABLES);
    let got = iptables_excerpt(&tables, &[], &[tcp(Some([10, 96, 0, 10]), 80)]);
    assert!(got.contains("-A KUBE-SERVICES -d 10.96.0.10/32"), "{got}");
    assert!(!got.contains("KUBE-NODEPORTS"), "{got}");
    assert!(!got.contains("10.96.0.11"), "{got}");
    // Same address, another port: no rule mentions it, only the masquerade chains remain.
    let other_port = iptables_excerpt(&tables, &[], &[tcp(Some([10, 96, 0, 10]), 9376)]);
    assert!(!other_port.contains("KUBE-SVC-WEB"), "{other_port}");
    assert!(other_port.contains(":KUBE-POSTROUTING -"), "{other_port}");
    // A REJECT for a service without endpoints, in filter.
    let reject = iptables_excerpt(&tables, &[], &[tcp(Some([10, 96, 0, 12]), 80)]);
    assert!(
        reject.contains("*filter\n:INPUT ACCEPT\n:KUBE-SERVICES -\n-A INPUT -m conntrack"),
        "{reject}"
    );
    assert!(reject.contains("-j REJECT"), "{reject}");
}

#[test]
fn ipset_members_select_the_rules_matching_their_set() {
    let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-NODE-PORT - [0:0]\n:KUBE-SERVICES - [0:0]\n\
-A PREROUTING -j KUBE-SERVICES\n\
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
-A KUBE-NODE-PORT -p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ\n\
-A KUBE-NODE-PORT -p udp -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ\n\
-A KUBE-SERVICES ! -s 10.244.0.0/16 -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ\n\
-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT\n\
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT\nCOMMIT\n";
    let sets = normalize_ipset_save(
        "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n\
add KUBE-CLUSTER-IP 10.96.0.10,tcp:80\nadd KUBE-CLUSTER-IP 10.96.0.11,tcp:80\n\
create KUBE-LOAD-BALANCER hash:ip,port family inet hashsize 1024 maxelem 65536\n\
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-TCP 30080\n\
create KUBE-NODE-PORT-UDP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-UDP 30080\n",
    );
    let targets = [tcp(Some([10, 96, 0, 10]), 80), tcp(None, 30080)];
    let tables = normalize_iptables_save(save);
    let got = iptables_excerpt(&tables, &sets, &targets);
    assert!(
        got.contains("--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"),
        "{got}"
    );
    assert!(
        got.contains("-p tcp -m set --match-set KUBE-NODE-PORT-TCP"),
        "{got}"
    );
    assert!(
        !got.contains("KUBE-NODE-PORT-UDP"),
        "protocol mismatch: {got}"
    );
    assert!(!got.contains("KUBE-LOAD-BALANCER"), "{got}");
    assert_eq!(
        ipset_excerpt(&sets, &targets),
        "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n\
add KUBE-CLUSTER-IP 10.96.0.10,tcp:80\n\
# … 1 other entry of KUBE-CLUSTER-IP not shown\n\
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-TCP 30080\n\
create KUBE-NODE-PORT-UDP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-UDP 30080\n"
    );
}

#[test]
fn ipvs_services_of_the_targets_only() {
    use ipvs_genl::{Destination, Info, Service, ServiceState, Stats};
    let svc = |addr: [u8; 4], port: u16| {
        let key = ServiceKey::Addr {
            protocol: ipvs_genl::Protocol::Tcp,
            addr: IpAddr::V4(addr.into()),
            port,
        };
        let dest = ipvs_genl::DestinationState {
            destination: Destination::new(IpAddr::V4([10, 244, 2, 10].into()), 8080),
            active_conns: 0,
            inactive_conns: 1,
            persistent_conns: 0,
            stats: Stats::default(),
        };
        (
            ServiceState {
                service: Service::new(key, "rr"),
                stats: Stats::default(),
            },
            vec![dest],
        )
    };
    let table = vec![
        svc([10, 96, 0, 10], 80),
        svc([10, 96, 0, 11], 80),
        svc([192, 168, 1, 10], 30080),
        svc([10, 244, 1, 1], 30080),
    ];
    let picked = ipvs_entries(&table, &[tcp(Some([10, 96, 0, 10]), 80), tcp(None, 30080)]);
    assert_eq!(picked.len(), 3);
    let text = ipvs_genl::format_list(
        &Info {
            version: 0x010201,
            conn_table_size: 4096,
        },
        &picked,
    );
    assert!(
        text.contains("TCP  10.96.0.10:80 rr\n  -> 10.244.2.10:8080"),
        "{text}"
    );
    assert!(text.contains("TCP  192.168.1.10:30080 rr"), "{text}");
    assert!(!text.contains("10.96.0.11"), "{text}");
}

#[test]
fn entries_match_address_protocol_and_port() {
    let t = tcp(Some([10, 96, 0, 10]), 80);
    assert!(entry_matches("10.96.0.10,tcp:80", &t));
    assert!(entry_matches("10.96.0.10", &t));
    assert!(entry_matches("10.96.0.10,tcp:80,192.168.1.0/24", &t));
    assert!(!entry_matches("10.96.0.10,udp:80", &t));
    assert!(!entry_matches("10.96.0.10,tcp:81", &t));
    assert!(!entry_matches("10.244.2.10,tcp:80,10.244.2.10", &t));
    assert!(entry_matches("30080", &tcp(None, 30080)));
}

#[test]
fn nft_excerpt_shows_the_elements_of_a_target_and_where_they_lead() {
    use crate::programming::nft::{normalize_listing, NftFamily, NftTable};
    let listing = normalize_listing(
        "table ip kube-proxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . tcp . 80 : goto service-A-default/web/tcp/http,
			     10.96.0.20 . tcp . 80 : goto service-B-default/api/tcp/http }
	}
	map service-nodeports {
		type inet_proto . inet_service : verdict
		elements = { tcp . 30080 : goto external-A-default/web/tcp/http }
	}
	chain service-A-default/web/tcp/http {
		numgen random mod 1 vmap { 0 : goto endpoint-E-default/web/tcp/http__10.244.2.20/8080 }
	}
	chain endpoint-E-default/web/tcp/http__10.244.2.20/8080 {
		meta l4proto tcp dnat to 10.244.2.20:8080
	}
	chain service-B-default/api/tcp/http {
		jump elsewhere
	}
}
",
    );
    let mut tables = BTreeMap::new();
    tables.insert(
        NftTable {
            family: NftFamily::Ip,
            name: "kube-proxy".into(),
        },
        listing,
    );
    let target = Target {
        protocol: Protocol::Tcp,
        addr: Some("10.96.0.10".parse().unwrap()),
        port: 80,
    };
    let shown = nft_excerpt(&tables, &[target]);
    assert!(
        shown.contains("element 10.96.0.10 . tcp . 80 : goto service-A-default/web/tcp/http"),
        "{shown}"
    );
    assert!(shown.contains("# 1 other element(s) left out"), "{shown}");
    assert!(shown.contains("dnat to 10.244.2.20:8080"), "{shown}");
    assert!(!shown.contains("service-B"), "{shown}");
    assert!(!shown.contains("30080"), "{shown}");
    assert!(
        !shown.contains("chain masquerading"),
        "not in the listing: {shown}"
    );
    let node_port = Target {
        protocol: Protocol::Tcp,
        addr: None,
        port: 30080,
    };
    assert!(nft_excerpt(&tables, &[node_port]).contains("tcp . 30080"));
}

/// A proxier whose nftables rules match inline (no sets, no maps, its own chain names): the
/// rule naming the target is shown with its counter, and the chain that masquerades is
/// found by what it does; rules for other services are counted, not shown.
#[test]
fn nft_excerpt_shows_inline_rules_with_counters_and_what_masquerades() {
    use crate::programming::nft::{normalize_listing, NftFamily, NftTable};
    let listing = normalize_listing(
        "table ip my-proxy {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.96.0.10 tcp dport 80 counter packets 3 bytes 180 dnat to 10.244.2.20:8081
		ip daddr 10.96.0.20 tcp dport 80 counter packets 0 bytes 0 dnat to 10.244.2.30:8080
		ip daddr 10.96.0.10 udp dport 80 dnat to 10.244.2.20:8080
		tcp dport 30080 jump nodeports
	}
	chain nodeports {
		counter packets 1 bytes 60 dnat to 10.244.2.20:8080
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr != 10.244.0.0/16 counter packets 2 bytes 120 masquerade
	}
}
",
    );
    let mut tables = BTreeMap::new();
    tables.insert(
        NftTable {
            family: NftFamily::Ip,
            name: "my-proxy".into(),
        },
        listing,
    );
    let shown = nft_excerpt(&tables, &[tcp(Some([10, 96, 0, 10]), 80)]);
    assert!(
        shown.contains(
            "ip daddr 10.96.0.10 tcp dport 80 counter packets 3 bytes 180 dnat to 10.244.2.20:8081"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("type nat hook prerouting priority dstnat; policy accept;"),
        "{shown}"
    );
    assert!(shown.contains("# 3 other rule(s) left out"), "{shown}");
    assert!(!shown.contains("10.96.0.20"), "{shown}");
    assert!(!shown.contains("udp dport 80"), "another protocol: {shown}");
    assert!(!shown.contains("chain nodeports"), "{shown}");
    assert!(
            shown.contains("chain post {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tip saddr != 10.244.0.0/16 counter packets 2 bytes 120 masquerade"),
            "{shown}"
        );
    // A nodePort target: the rule matching its port, and the chain it jumps to, whole.
    let node_port = nft_excerpt(&tables, &[tcp(None, 30080)]);
    assert!(
        node_port.contains("tcp dport 30080 jump nodeports"),
        "{node_port}"
    );
    assert!(
        node_port.contains("counter packets 1 bytes 60 dnat to 10.244.2.20:8080"),
        "{node_port}"
    );
    assert!(!node_port.contains("10.96.0.10"), "{node_port}");
}

/// A proxier that masquerades in POSTROUTING itself, under no KUBE- chain: its rule is
/// shown, as KUBE-POSTROUTING's would be.
#[test]
fn iptables_excerpt_finds_masquerading_by_what_it_does() {
    let tables = normalize_iptables_save(
        "*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:MY-SERVICES - [0:0]
-A PREROUTING -j MY-SERVICES
-A MY-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.244.2.20:8080
-A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE
COMMIT
",
    );
    let got = iptables_excerpt(&tables, &[], &[tcp(Some([10, 96, 0, 10]), 80)]);
    assert!(got.contains("-A MY-SERVICES -d 10.96.0.10/32"), "{got}");
    assert!(
        got.contains("-A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE"),
        "{got}"
    );
}
