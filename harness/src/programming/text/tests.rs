use super::*;
use ipvs_genl::{ForwardMethod, Protocol, ServiceKey};

fn sample() -> Programming {
    let key = ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: "10.96.0.1".parse().unwrap(),
        port: 443,
    };
    let mut dest = Destination::new("192.168.1.10".parse().unwrap(), 6443);
    dest.forward = ForwardMethod::Masq;
    let mut p = Programming {
        ipsets: vec![IpSet {
            name: "KUBE-CLUSTER-IP".into(),
            set_type: IpSetType::HashIpPort,
            create_options: "family inet hashsize 1024 maxelem 65536".into(),
            entries: vec!["10.96.0.1,tcp:443".into()],
        }],
        ipvs: vec![VirtualServer {
            service: Service::new(key, "rr"),
            destinations: vec![dest],
        }],
        ipvs_addresses: Some(vec!["10.96.0.1".parse().unwrap()]),
        restore_mode: RestoreMode::Flush,
        ..Default::default()
    };
    p.iptables.insert(
        Table::Nat,
        TableRules {
            chains: vec![
                ChainDecl {
                    name: "PREROUTING".into(),
                    policy: Some("ACCEPT".into()),
                },
                ChainDecl {
                    name: "KUBE-SERVICES".into(),
                    policy: None,
                },
            ],
            rules: vec!["-A PREROUTING -m comment --comment \"kube svc\" -j KUBE-SERVICES".into()],
        },
    );
    p.sysctls.insert("net.ipv4.vs.conntrack".into(), "1".into());
    p
}

#[test]
fn documented_example_parses() {
    let source = include_str!("mod.rs");
    let start = source.find("//! ```text\n").unwrap() + "//! ```text\n".len();
    let end = start + source[start..].find("//! ```\n").unwrap();
    let example: String = source[start..end]
        .lines()
        .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
        .collect();
    let p = parse_text(&example, "doc").unwrap();
    assert_eq!(
        (
            p.sysctls.len(),
            p.kube_ipvs0_addresses().len(),
            p.ipsets.len()
        ),
        (1, 1, 1)
    );
    assert_eq!((p.iptables.len(), p.ipvs.len()), (1, 1));
}

#[test]
fn round_trips() {
    let p = sample();
    let text = render_text(&p);
    assert_eq!(parse_text(&text, "t").unwrap(), p, "{text}");
    assert!(
        text.contains("-a -t 10.96.0.1:443 -r 192.168.1.10:6443 -m -w 1\n"),
        "{text}"
    );
}

#[test]
fn ipvs_timeouts_round_trip_and_are_checked() {
    let mut p = sample();
    p.ipvs_timeouts = Some(Timeouts {
        tcp: 7200,
        tcp_fin: 0,
        udp: 30,
    });
    let text = render_text(&p);
    assert!(text.contains("*ipvs\n--set 7200 0 30\n-A -t"), "{text}");
    let parsed = parse_text_with_sources(&text, "t").unwrap();
    assert_eq!(parsed.programming, p);
    let line = text.lines().position(|l| l.starts_with("--set")).unwrap() + 1;
    assert_eq!(parsed.sources.get(&Item::IpvsTimeouts).unwrap().line, line);
    refused_in_ipvs_section(&[
        ("--set 1 2", "expected `--set TCP TCPFIN UDP`"),
        ("--set 1 two 3", "`two` is not a number of seconds"),
        ("--set 1 2 3\n--set 1 2 3", "`--set` appears twice"),
    ]);
}

/// Each `*ipvs` body is refused with an error containing its message.
fn refused_in_ipvs_section(cases: &[(&str, &str)]) {
    for (bad, message) in cases {
        let err = parse_text(&format!("*ipvs\n{bad}\nCOMMIT\n"), "t").unwrap_err();
        assert!(err.to_string().contains(message), "{bad}: {err}");
    }
}

/// Both families' host addresses; an empty section still asks for the device (IPVS mode
/// keeps it when its last address goes); a wider prefix is refused.
#[test]
fn addresses_of_both_families_and_an_empty_device() {
    let p = parse_text("*addresses\n10.96.0.1/32\nfd00:10:96::a\nCOMMIT\n", "t").unwrap();
    assert_eq!(
        p.kube_ipvs0_addresses(),
        [
            "10.96.0.1".parse::<IpAddr>().unwrap(),
            "fd00:10:96::a".parse().unwrap()
        ]
    );
    assert_eq!(parse_text(&render_text(&p), "t").unwrap(), p);
    let empty = parse_text("*addresses\nCOMMIT\n", "t").unwrap();
    assert_eq!(empty.ipvs_addresses, Some(vec![]));
    assert_eq!(render_text(&empty), "*addresses\nCOMMIT\n");
    assert_eq!(parse_text("", "t").unwrap().ipvs_addresses, None);
    for (bad, message) in [
        ("fd00::1/64", "kube-ipvs0 addresses are /128, not /64"),
        ("10.0.0.1/24", "kube-ipvs0 addresses are /32, not /24"),
    ] {
        let err = parse_text(&format!("*addresses\n{bad}\nCOMMIT\n"), "t").unwrap_err();
        assert!(err.to_string().contains(message), "{bad}: {err}");
    }
}

#[test]
fn delete_others_round_trips_and_is_checked() {
    let mut p = sample();
    p.ipvs_delete_others =
        BTreeMap::from([(IpFamily::Ipv4, vec!["192.168.1.50/32".parse().unwrap()])]);
    let text = render_text(&p);
    assert!(
        text.contains("*ipvs\n--delete-others 192.168.1.50/32\n"),
        "{text}"
    );
    assert_eq!(parse_text(&text, "t").unwrap(), p);
    p.ipvs_delete_others = BTreeMap::from([(IpFamily::Ipv4, Vec::new())]);
    assert!(render_text(&p).contains("*ipvs\n--delete-others\n"));
    assert_eq!(parse_text(&render_text(&p), "t").unwrap(), p);
    // Each family's proxier cleans up its own family.
    p.ipvs_delete_others = BTreeMap::from([
        (IpFamily::Ipv4, Vec::new()),
        (IpFamily::Ipv6, vec!["fd00:1::/64".parse().unwrap()]),
    ]);
    let text = render_text(&p);
    assert!(
        text.contains("*ipvs\n--delete-others\n--delete-others IPv6 fd00:1::/64\n"),
        "{text}"
    );
    assert_eq!(parse_text(&text, "t").unwrap(), p);
    assert_eq!(
        parse_text("*ipvs\n--delete-others IPv4\nCOMMIT\n", "t")
            .unwrap()
            .ipvs_delete_others,
        BTreeMap::from([(IpFamily::Ipv4, Vec::new())])
    );
    refused_in_ipvs_section(&[
        ("--delete-others 10.0.0.0/33", "prefix length"),
        ("--delete-others a b", "expected `--delete-others"),
        ("--delete-others\n--delete-others", "for IPv4 appears twice"),
        (
            "--delete-others IPv6\n--delete-others IPv6 fd00::/8",
            "for IPv6 appears twice",
        ),
        ("--delete-others IPv6 10.0.0.0/8", "is not an IPv6 CIDR"),
        ("--delete-others fd00::/8", "is not an IPv4 CIDR"),
    ]);
}

#[test]
fn clear_round_trips_and_is_checked() {
    let mut p = Programming {
        ipvs_clear: true,
        ..Programming::default()
    };
    assert_eq!(render_text(&p), "*ipvs\n--clear\nCOMMIT\n");
    assert_eq!(parse_text(&render_text(&p), "t").unwrap(), p);
    p = sample();
    p.ipvs_clear = true;
    assert_eq!(parse_text(&render_text(&p), "t").unwrap(), p);
    let parsed =
        parse_text_with_sources("*ipvs\n-A -t 10.96.0.10:80 -s rr\n--clear\nCOMMIT\n", "t")
            .unwrap();
    assert_eq!(
        parsed.sources.get(&Item::IpvsClear).map(|o| o.line),
        Some(3)
    );
    refused_in_ipvs_section(&[
        ("--clear all", "`--clear` takes nothing"),
        ("--clear\n--clear", "`--clear` appears twice"),
    ]);
}

#[test]
fn records_origins() {
    let text = render_text(&sample());
    let parsed = parse_text_with_sources(&text, "out").unwrap();
    let line_of = |item: Item| parsed.sources.get(&item).map(|o| o.line).unwrap();
    let find = |needle: &str| text.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    assert_eq!(
        line_of(Item::Rule {
            table: Table::Nat,
            index: 0
        }),
        find("-A PREROUTING")
    );
    assert_eq!(
        line_of(Item::Destination {
            service: 0,
            destination: 0
        }),
        find("-a -t")
    );
    assert_eq!(line_of(Item::SetEntry { set: 0, entry: 0 }), find("add "));
}

#[test]
fn errors_name_origin_and_line() {
    let e = |t: &str| parse_text(t, "proxier stdout").unwrap_err().to_string();
    assert_eq!(
        e("*ipset\ncreate S hash:nope\nCOMMIT\n"),
        "proxier stdout:2: unknown ipset type `hash:nope` for set S (supported: hash:ip, hash:ip,port, hash:ip,port,ip, hash:ip,port,net, hash:net, bitmap:port)"
    );
    assert!(e(
        "# x\n*ipvs\n-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.2:80 -r 10.1.1.1:80 -m\nCOMMIT\n"
    )
    .starts_with("proxier stdout:4: destination for service TCP 10.0.0.2:80"),);
    assert_eq!(
        e("*addresses\n10.0.0.300\nCOMMIT\n"),
        "proxier stdout:2: malformed IP address `10.0.0.300`"
    );
    assert_eq!(
        e("*nat\n-A X -j Y\n"),
        "proxier stdout:1: section *nat is not closed by COMMIT"
    );
    assert!(e("*sysctl\nkernel.pid_max=1\nCOMMIT\n").contains(":2: sysctl `kernel.pid_max`"));
    assert!(e("*ipset\nadd S 1.2.3.4\nCOMMIT\n").contains(":2: entry for set S"));
    assert!(e("*nat\nCOMMIT\n*nat\nCOMMIT\n").contains(":3: section `*nat` appears twice"));
}

#[test]
fn accepts_iptables_save_with_counters_and_comments() {
    let text = "# Generated by iptables-save v1.8.9\n*filter\n:INPUT ACCEPT [12:345]\n[1:2] -A INPUT -j ACCEPT\nCOMMIT\n# Completed\n";
    let p = parse_text(text, "f").unwrap();
    let t = &p.iptables[&Table::Filter];
    assert_eq!(t.rules, vec!["-A INPUT -j ACCEPT".to_string()]);
    assert_eq!(t.chains[0].policy.as_deref(), Some("ACCEPT"));
}
