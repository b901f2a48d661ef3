//! The applier and the effective-state readback against the real kernel (needs root). Each test
//! builds its own namespaces; tests named `needs_ipvs_*` need a kernel with IP_VS.

use ipvs_genl::{Destination, ForwardMethod, Protocol, Service, ServiceKey};
use kpct::kernel_features;
use kpct::netns::naming::RunPrefix;
use kpct::netns::{install_signal_cleanup, Netns};
use kpct::programming::kube_ipvs0::{DeviceKind, DevicePolicy};
use kpct::programming::text::{parse_text_with_sources, render_text};
use kpct::programming::{
    effective_state, Applier, ApplyOptions, ChainDecl, EffectiveState, IpSet, IpSetType,
    Programming, ReadOptions, Step, Table, TableRules, VirtualServer,
};
use kpct::scenario::IpFamily;
use std::collections::BTreeMap;

fn netns(role: &str) -> Netns {
    install_signal_cleanup();
    Netns::create(&format!("{}{role}", RunPrefix::next().as_str())).expect("create namespace")
}

fn kernel() -> kernel_features::Capabilities {
    kernel_features::detect().expect("probe kernel capabilities")
}

fn applier() -> Applier {
    Applier::new(kpct::kernel_features::apply_options().expect("probe kernel capabilities"))
}

fn dummy_expected() -> bool {
    kernel().get(kernel_features::Feature::Dummy).ok()
}

fn chain(name: &str) -> ChainDecl {
    ChainDecl {
        name: name.into(),
        policy: None,
    }
}

fn set(name: &str, set_type: IpSetType, entries: &[&str]) -> IpSet {
    IpSet {
        name: name.into(),
        set_type,
        create_options: if set_type == IpSetType::BitmapPort {
            "range 0-65535".into()
        } else {
            "family inet hashsize 1024 maxelem 65536".into()
        },
        entries: entries.iter().map(|e| e.to_string()).collect(),
    }
}

/// A kube-proxy-IPVS-like programming: every ipset type kube-proxy uses, nat and filter rules
/// matching them, kube-ipvs0 addresses and sysctls; no IPVS.
fn hand_made() -> Programming {
    let mut p = Programming {
        ipsets: vec![
            set(
                "KUBE-CLUSTER-IP",
                IpSetType::HashIpPort,
                &["10.96.0.10,tcp:80", "10.96.0.1,tcp:443"],
            ),
            set(
                "KUBE-LOOP-BACK",
                IpSetType::HashIpPortIp,
                &["10.244.1.10,tcp:8080,10.244.1.10"],
            ),
            set(
                "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                IpSetType::HashIpPortNet,
                &["203.0.113.5,tcp:80,198.51.100.0/24"],
            ),
            set("KUBE-NODE-PORT-TCP", IpSetType::BitmapPort, &["30080"]),
            set(
                "KUBE-IPVS-IPS",
                IpSetType::HashIp,
                &["10.96.0.1", "10.96.0.10", "203.0.113.5"],
            ),
            set(
                "KPCT-SOURCE-NETS",
                IpSetType::HashNet,
                &["198.51.100.0/24", "10.0.0.0/8"],
            ),
        ],
        ipvs_addresses: Some(vec![
            "10.96.0.1".parse().unwrap(),
            "10.96.0.10".parse().unwrap(),
            "203.0.113.5".parse().unwrap(),
            // An IPv6 proxier's ClusterIP: bound as /128, local at once (NOARP: no DAD).
            "fd00:10:96::a".parse().unwrap(),
        ]),
        ..Programming::default()
    };
    p.iptables.insert(
        Table::Nat,
        TableRules {
            chains: vec![
                chain("KUBE-SERVICES"),
                chain("KUBE-POSTROUTING"),
                chain("KUBE-NODE-PORT"),
                chain("KUBE-MARK-MASQ"),
            ],
            rules: vec![
                "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES".into(),
                "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES".into(),
                "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING".into(),
                "-A KUBE-POSTROUTING -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose\" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE".into(),
                "-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN".into(),
                "-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000".into(),
                "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully".into(),
                "-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000".into(),
                "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ".into(),
                "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT".into(),
                "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT".into(),
                "-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ".into(),
            ],
        },
    );
    p.iptables.insert(
        Table::Filter,
        TableRules {
            chains: vec![chain("KUBE-FORWARD"), chain("KUBE-SOURCE-RANGES-FIREWALL"), chain("KUBE-IPVS-FILTER")],
            rules: vec![
                "-A INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER".into(),
                "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD".into(),
                "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP".into(),
                "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x00004000/0x00004000 -j ACCEPT".into(),
                "-A KUBE-SOURCE-RANGES-FIREWALL -j DROP".into(),
                "-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN".into(),
                "-A KUBE-IPVS-FILTER -m set --match-set KPCT-SOURCE-NETS src -j RETURN".into(),
                "-A KUBE-IPVS-FILTER -m set --match-set KUBE-IPVS-IPS dst -m conntrack --ctstate NEW -j REJECT".into(),
            ],
        },
    );
    p.sysctls
        .insert("net.ipv4.conf.all.route_localnet".into(), "1".into());
    p.sysctls.insert("net.ipv4.ip_forward".into(), "1".into());
    p
}

/// [`hand_made`] plus IPVS services, their destinations and the IPVS sysctls.
fn hand_made_ipvs() -> Programming {
    let mut p = hand_made();
    let masq = |addr: &str, port| Destination {
        forward: ForwardMethod::Masq,
        ..Destination::new(addr.parse().unwrap(), port)
    };
    let svc = |addr: &str, port| {
        Service::new(
            ServiceKey::Addr {
                protocol: Protocol::Tcp,
                addr: addr.parse().unwrap(),
                port,
            },
            "rr",
        )
    };
    let mut sticky = svc("203.0.113.5", 80);
    sticky.flags.0 |= ipvs_genl::ServiceFlags::PERSISTENT;
    sticky.timeout = 10800;
    p.ipvs = vec![
        VirtualServer {
            service: svc("10.96.0.10", 80),
            destinations: vec![masq("10.244.1.10", 8080), masq("10.244.2.10", 8080)],
        },
        VirtualServer {
            service: svc("10.96.0.1", 443),
            destinations: vec![masq("192.168.1.10", 6443)],
        },
        VirtualServer {
            service: sticky,
            destinations: vec![masq("10.244.2.11", 8080)],
        },
    ];
    p.sysctls.insert("net.ipv4.vs.conntrack".into(), "1".into());
    p.sysctls
        .insert("net.ipv4.vs.expire_nodest_conn".into(), "1".into());
    p
}

fn read(ns: &Netns, p: &Programming) -> EffectiveState {
    effective_state(ns, &ReadOptions::for_programming(p)).expect("read effective state")
}

fn snapshot(name: &str, text: &str) {
    insta::with_settings!({snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots")}, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn apply_and_read_back() {
    let ns = netns("apply");
    let p = hand_made();
    let report = applier().apply(&ns, "node-a", &p, None).expect("apply");
    eprintln!("{report}");
    let kind = report.device_kind.clone().expect("kube-ipvs0 was made");
    assert_eq!(
        kind,
        if dummy_expected() {
            DeviceKind::Dummy
        } else {
            DeviceKind::Bridge
        }
    );

    let state = read(&ns, &p);
    assert_eq!(
        state.diff_against(&p),
        vec![],
        "everything programmed is in the kernel:\n{state}"
    );
    let dev = state.kube_ipvs0.as_ref().expect("kube-ipvs0 exists");
    assert_eq!(dev.kind, kind);
    assert!(
        !dev.up && dev.noarp,
        "kube-ipvs0 is DOWN and NOARP like kube-proxy's: {dev:?}"
    );
    let local = ["-4", "-6"]
        .map(|family| {
            ns.exec(
                "ip",
                &[
                    family,
                    "route",
                    "show",
                    "table",
                    "local",
                    "dev",
                    "kube-ipvs0",
                ],
            )
            .unwrap()
        })
        .concat();
    for a in p.kube_ipvs0_addresses() {
        assert!(
            local.contains(&format!("local {a} ")),
            "{a} is a local route:\n{local}"
        );
    }
    // The effective state text is itself a programming: it parses.
    kpct::programming::parse_text(&state.to_string(), "effective").expect("effective state parses");
    snapshot("apply_hand_made", &state.to_string());

    // Applying again changes nothing (objects named are set, not appended to).
    applier()
        .apply(&ns, "node-a", &p, None)
        .expect("second apply");
    assert_eq!(read(&ns, &p), state);
}

#[test]
fn auto_policy_falls_back_to_a_bridge_only_without_dummy() {
    let ns = netns("auto");
    let p = Programming {
        ipvs_addresses: Some(vec!["10.96.0.1".parse().unwrap()]),
        ..Programming::default()
    };
    let report = Applier::new(ApplyOptions {
        device: DevicePolicy::Auto,
        ..ApplyOptions::default()
    })
    .apply(&ns, "node-a", &p, None)
    .expect("apply");
    let expected = if dummy_expected() {
        DeviceKind::Dummy
    } else {
        DeviceKind::Bridge
    };
    assert_eq!(report.device_kind, Some(expected));
    assert!(report.to_string().contains("kube-ipvs0 ["), "{report}");
}

/// Applies `bad` on top of `ns`'s current state, expects failure at `step`, and checks the
/// namespace reads exactly as before. Returns the error text.
fn fails_and_rolls_back(
    ns: &Netns,
    bad: &Programming,
    sources: Option<&kpct::programming::SourceMap>,
    step: Step,
) -> String {
    let before = read(ns, bad);
    let err = applier()
        .apply(ns, "node-a", bad, sources)
        .expect_err("the bad programming is refused");
    assert_eq!(err.step, step, "{err}");
    assert!(err.rollback_problems.is_empty(), "{err}");
    assert_eq!(err.node, "node-a");
    eprintln!("refused as expected: {err}");
    let after = read(ns, bad);
    assert_eq!(
        after, before,
        "nothing is left behind by: {err}\nbefore:\n{before}\nafter:\n{after}"
    );
    err.to_string()
}

#[test]
fn malformed_iptables_rule_is_reported_and_rolled_back() {
    let ns = netns("badrule");
    let mut bad = hand_made();
    let nat = bad.iptables.get_mut(&Table::Nat).unwrap();
    nat.rules
        .insert(3, "-A KUBE-SERVICES -m bogus --what -j ACCEPT".into());
    let err = fails_and_rolls_back(&ns, &bad, None, Step::Iptables);
    // `*nat` + 4 chain declarations + 3 rules: the bad rule is line 9 of the nat section.
    assert!(
        err.contains("at table nat line 9: `-A KUBE-SERVICES -m bogus --what -j ACCEPT`"),
        "{err}"
    );
    assert!(err.contains("bogus"), "{err}");
    assert!(
        err.starts_with("node node-a: iptables-restore failed"),
        "{err}"
    );

    // From text the error also names the line the proxier printed it on.
    let text = render_text(&bad);
    let parsed = parse_text_with_sources(&text, "proxier.out").unwrap();
    let line = text.lines().position(|l| l.contains("-m bogus")).unwrap() + 1;
    let err = fails_and_rolls_back(
        &ns,
        &parsed.programming,
        Some(&parsed.sources),
        Step::Iptables,
    );
    assert!(err.contains(&format!("(from proxier.out:{line})")), "{err}");
}

/// ip6tables are written as iptables are: applied with `ip6tables-restore --noflush`, read
/// back (the readback holds them, and a diff against the programming is empty), and, when a
/// rule is refused, rolled back with the IPv4 tables written before them.
#[test]
fn ip6tables_apply_read_back_and_roll_back() {
    let ns = netns("ip6tables");
    let mut good = hand_made();
    good.ip6tables.insert(
        Table::Nat,
        TableRules {
            chains: vec![chain("KPCT-SERVICES6")],
            rules: vec![
                "-A KPCT-SERVICES6 -d fd00:10:96::a -p tcp --dport 80 -j DNAT --to-destination [fd00:10:244:2::20]:8080".into(),
                "-A KPCT-SERVICES6 -d fd00:10:96::b -p tcp --dport 80 -j RETURN".into(),
            ],
        },
    );
    let report = applier().apply(&ns, "node-a", &good, None).expect("apply");
    assert!(
        report
            .step_times
            .iter()
            .any(|(step, _)| *step == Step::Ip6tables),
        "{report}"
    );
    let state = read(&ns, &good);
    assert_eq!(state.diff_against(&good), vec![]);
    assert!(
        state.to_string().contains("*ip6:nat\n:KPCT-SERVICES6 -\n"),
        "{state}"
    );
    assert!(
        !state.iptables[&Table::Nat]
            .chains
            .iter()
            .any(|c| c.name == "KPCT-SERVICES6"),
        "the IPv6 chain is in ip6tables only"
    );
    let mut bad = good.clone();
    bad.iptables
        .get_mut(&Table::Nat)
        .unwrap()
        .rules
        .push("-A KUBE-SERVICES -j ACCEPT".into());
    bad.ip6tables
        .get_mut(&Table::Nat)
        .unwrap()
        .rules
        .push("-A KPCT-SERVICES6 -j NO-SUCH-CHAIN6".into());
    let err = fails_and_rolls_back(&ns, &bad, None, Step::Ip6tables);
    assert!(
        err.contains("ip6tables table nat line") && err.contains("NO-SUCH-CHAIN6"),
        "{err}"
    );
    assert_eq!(read(&ns, &good).diff_against(&good), vec![]);
}

#[test]
fn ipset_entry_not_matching_its_type_is_reported_and_rolled_back() {
    let ns = netns("badentry");
    let mut bad = hand_made();
    bad.ipsets[4].entries.push("10.96.0.1,tcp:80".into());
    let text = render_text(&bad);
    let parsed = parse_text_with_sources(&text, "proxier.out").unwrap();
    let line = text
        .lines()
        .position(|l| l == "add KUBE-IPVS-IPS 10.96.0.1,tcp:80")
        .unwrap()
        + 1;
    let err = fails_and_rolls_back(
        &ns,
        &parsed.programming,
        Some(&parsed.sources),
        Step::Ipsets,
    );
    assert!(
        err.contains("at set KUBE-IPVS-IPS entry `10.96.0.1,tcp:80`"),
        "{err}"
    );
    assert!(err.contains(&format!("(from proxier.out:{line})")), "{err}");
    assert!(
        err.contains("hash:ip"),
        "ipset's own explanation is kept: {err}"
    );
}

#[test]
fn text_errors_apply_nothing() {
    let ns = netns("badtext");
    let before = read(&ns, &hand_made());
    let unknown_type = "*ipset\ncreate KUBE-X hash:ip\ncreate KUBE-Y hash:mac\nCOMMIT\n";
    let e = parse_text_with_sources(unknown_type, "out.txt")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("out.txt:3: unknown ipset type `hash:mac`"),
        "{e}"
    );
    let orphan = "*ipvs\n-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.11:80 -r 10.244.1.10:8080 -m -w 1\nCOMMIT\n";
    let e = parse_text_with_sources(orphan, "out.txt")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("out.txt:3: destination for service TCP 10.96.0.11:80"),
        "{e}"
    );
    let address = "*addresses\n10.96.0.1\n10.96.0/32\nCOMMIT\n";
    let e = parse_text_with_sources(address, "out.txt")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "out.txt:3: malformed IP address `10.96.0/32`");
    assert_eq!(read(&ns, &hand_made()), before);
}

#[test]
fn failure_on_top_of_existing_state_restores_it() {
    let ns = netns("ontop");
    let good = hand_made();
    applier().apply(&ns, "node-a", &good, None).expect("apply");
    // Same objects with other content, then a rule the kernel refuses: every touched object
    // (sets, chains, addresses, sysctls) must come back as the first apply left it.
    let mut bad = good.clone();
    bad.ipsets[0].entries = vec!["10.96.0.99,udp:53".into()];
    bad.ipsets
        .push(set("KPCT-NEW", IpSetType::HashIp, &["10.0.0.1"]));
    bad.ipvs_addresses = Some(vec!["10.96.0.99".parse().unwrap()]);
    bad.sysctls
        .insert("net.ipv4.conf.all.route_localnet".into(), "0".into());
    bad.iptables
        .get_mut(&Table::Filter)
        .unwrap()
        .rules
        .push("-A KUBE-FORWARD -j NO-SUCH-CHAIN".into());
    bad.iptables.insert(
        Table::Mangle,
        TableRules {
            chains: vec![chain("KPCT-MANGLE")],
            rules: vec!["-A KPCT-MANGLE -j ACCEPT".into()],
        },
    );
    let err = fails_and_rolls_back(&ns, &bad, None, Step::Iptables);
    assert!(
        err.contains("at table filter line 13: `-A KUBE-FORWARD -j NO-SUCH-CHAIN`"),
        "{err}"
    );
    assert_eq!(read(&ns, &good).diff_against(&good), vec![]);
}

#[test]
fn needs_ipvs_apply_and_read_back() {
    kernel_features::require_ipvs();
    let ns = netns("apply-ipvs");
    let p = hand_made_ipvs();
    let report = applier().apply(&ns, "node-a", &p, None).expect("apply");
    assert_eq!(
        report.device_kind,
        Some(DeviceKind::Dummy),
        "kernels with IPVS here have dummy: {report}"
    );
    assert_eq!((report.services, report.destinations), (3, 4));
    let state = read(&ns, &p);
    assert_eq!(state.diff_against(&p), vec![], "{state}");
    let ours = &state.ipvs.as_ref().expect("IPVS table read").save;
    // Other tests of this binary change IPVS services meanwhile, which would shift ipvsadm's
    // dump (ipvs_genl::IpvsHandle::services).
    let theirs = {
        let _quiet = ipvs_genl::hold_service_changes();
        ns.exec("ipvsadm", &["-Sn"]).expect("ipvsadm -Sn")
    };
    assert_eq!(ours, &theirs, "our client prints what ipvsadm prints");
    snapshot("apply_hand_made_ipvs", &state.to_string());
    applier()
        .apply(&ns, "node-a", &p, None)
        .expect("second apply");
    assert_eq!(read(&ns, &p), state);
}

#[test]
fn needs_ipvs_failure_at_ipvs_rolls_everything_back() {
    kernel_features::require_ipvs();
    let ns = netns("bad-ipvs");
    let mut bad = hand_made_ipvs();
    bad.ipvs[1].service.scheduler = "no-such-scheduler".into();
    let text = render_text(&bad);
    let parsed = parse_text_with_sources(&text, "proxier.out").unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("no-such-scheduler"))
        .unwrap()
        + 1;
    let err = fails_and_rolls_back(&ns, &parsed.programming, Some(&parsed.sources), Step::Ipvs);
    assert!(err.contains("no-such-scheduler"), "{err}");
    assert!(err.contains(&format!("(from proxier.out:{line})")), "{err}");

    // On top of a programmed node, a failing IPVS update restores the old table.
    applier()
        .apply(&ns, "node-a", &hand_made_ipvs(), None)
        .expect("apply");
    let mut bad = hand_made_ipvs();
    bad.ipvs[0].destinations.pop();
    bad.ipvs.push(VirtualServer {
        service: Service::new(
            ServiceKey::Addr {
                protocol: Protocol::Udp,
                addr: "10.96.0.10".parse().unwrap(),
                port: 53,
            },
            "no-such-scheduler",
        ),
        destinations: vec![],
    });
    // Timeouts are set before the services: rolling back puts them back too.
    bad.ipvs_timeouts = Some(ipvs_genl::Timeouts {
        tcp: 60,
        tcp_fin: 6,
        udp: 3,
    });
    fails_and_rolls_back(&ns, &bad, None, Step::Ipvs);
}

/// `--clear` alone asks nothing of a kernel without IP_VS (kube-proxy's nftables mode skips its
/// IPVS clean-up where `modprobe ip_vs` fails), and of a node with no IPVS service.
#[test]
fn a_clear_alone_applies_anywhere() {
    let ns = netns("ipvs-clear");
    let p = Programming {
        ipvs_clear: true,
        ..Programming::default()
    };
    applier().apply(&ns, "node-a", &p, None).expect("apply");
    assert_eq!(read(&ns, &p).diff_against(&p), vec![]);
}

/// `--clear` deletes every service it does not list, a foreign fwmark one too, as `ipvs.Flush()`
/// does; a failure in the same section puts the table back.
#[test]
fn needs_ipvs_clear_deletes_every_other_service() {
    kernel_features::require_ipvs();
    let ns = netns("ipvs-clear-others");
    applier()
        .apply(&ns, "node-a", &hand_made_ipvs(), None)
        .expect("apply");
    ns.exec("ipvsadm", &["-A", "-f", "7", "-s", "rr"])
        .expect("a foreign fwmark service");
    let mut p = Programming {
        ipvs_clear: true,
        ..Programming::default()
    };
    p.ipvs.push(hand_made_ipvs().ipvs.remove(0));
    let mut bad = p.clone();
    bad.ipvs[0].service.scheduler = "no-such-scheduler".into();
    fails_and_rolls_back(&ns, &bad, None, Step::Ipvs);
    let before = read(&ns, &p);
    assert!(before.diff_against(&p).len() >= 3, "{before}");
    applier().apply(&ns, "node-a", &p, None).expect("clear");
    let after = read(&ns, &p);
    assert_eq!(after.diff_against(&p), vec![], "{after}");
    let table = after.ipvs.as_ref().expect("IPVS table read");
    assert_eq!(table.servers.len(), 1, "{after}");
}

/// `ipvsadm --set` as a programming: applied, read back by our client as ipvsadm reads it, a 0
/// keeping the kernel's value; a programming of timeouts alone leaves the table alone.
#[test]
fn needs_ipvs_timeouts_apply_and_read_back() {
    kernel_features::require_ipvs();
    let ns = netns("ipvs-timeouts");
    applier()
        .apply(&ns, "node-a", &hand_made_ipvs(), None)
        .expect("apply");
    let table_before = read(&ns, &hand_made_ipvs()).ipvs.expect("IPVS").save;
    let p = Programming {
        ipvs_timeouts: Some(ipvs_genl::Timeouts {
            tcp: 7200,
            tcp_fin: 0,
            udp: 30,
        }),
        ..Programming::default()
    };
    applier().apply(&ns, "node-a", &p, None).expect("apply");
    let state = read(&ns, &p);
    assert_eq!(state.diff_against(&p), vec![], "{state}");
    let ipvs = state.ipvs.as_ref().expect("IPVS");
    assert_eq!(
        ipvs.timeouts,
        ipvs_genl::Timeouts {
            tcp: 7200,
            tcp_fin: 120,
            udp: 30
        }
    );
    assert_eq!(ipvs.save, table_before, "the table is untouched");
    let theirs = ns.exec("ipvsadm", &["-L", "--timeout"]).expect("ipvsadm");
    assert_eq!(theirs.trim(), "Timeout (tcp tcpfin udp): 7200 120 30");
    assert!(
        state.to_string().contains("*ipvs\n--set 7200 120 30\n"),
        "{state}"
    );
}

#[test]
fn legacy_iptables_backend_applies_and_rolls_back() {
    use kpct::programming::tools::IptablesBackend;
    let ns = netns("legacy");
    let legacy = Applier::new(ApplyOptions {
        backend: IptablesBackend::Legacy,
        ..applier().options
    });
    let opts = ReadOptions {
        backend: IptablesBackend::Legacy,
        ..ReadOptions::for_programming(&hand_made())
    };
    let before = effective_state(&ns, &opts).unwrap();
    let mut bad = hand_made();
    bad.iptables
        .get_mut(&Table::Filter)
        .unwrap()
        .rules
        .push("-A KUBE-FORWARD -p tcp --dport 99999 -j ACCEPT".into());
    let err = legacy
        .apply(&ns, "node-a", &bad, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("(legacy)") && err.contains("99999"), "{err}");
    assert_eq!(effective_state(&ns, &opts).unwrap(), before, "{err}");

    let p = hand_made();
    let report = legacy
        .apply(&ns, "node-a", &p, None)
        .expect("apply with iptables-legacy");
    assert!(report.to_string().contains("iptables-legacy"), "{report}");
    let state = effective_state(&ns, &opts).unwrap();
    assert_eq!(state.diff_against(&p), vec![]);
    // The nf_tables view of the namespace holds none of it.
    assert!(read(&ns, &p).iptables.is_empty());
}

/// `--delete-others` removes the node's other address services of its family except those in
/// the kept CIDRs (and fwmark ones), as each family's kube-proxy cleanLegacyService; a failure
/// restores them. An IPv4 clean-up leaves IPv6 services ("Not our family"), and the other way
/// round.
#[test]
fn needs_ipvs_delete_others_keeps_only_the_excluded_foreign_services() {
    kernel_features::require_ipvs();
    let ns = netns("ipvs-delete-others");
    let foreign = |addr: &str| VirtualServer {
        service: Service::new(
            ServiceKey::Addr {
                protocol: Protocol::Tcp,
                addr: addr.parse().unwrap(),
                port: 8080,
            },
            "rr",
        ),
        destinations: vec![],
    };
    let fwmark = |ipv6| VirtualServer {
        service: Service::new(ServiceKey::FwMark { mark: 7, ipv6 }, "rr"),
        destinations: vec![],
    };
    let others = Programming {
        ipvs: vec![
            foreign("192.168.1.50"),
            foreign("192.168.1.60"),
            foreign("fd00:1::50"),
            foreign("fd00:2::60"),
            fwmark(false),
            fwmark(true),
        ],
        ..Programming::default()
    };
    applier()
        .apply(&ns, "node-a", &others, None)
        .expect("foreign services");
    let mut p = hand_made_ipvs();
    p.ipvs_delete_others =
        BTreeMap::from([(IpFamily::Ipv4, vec!["192.168.1.50/32".parse().unwrap()])]);

    let mut bad = p.clone();
    bad.ipvs[0].service.scheduler = "no-such-scheduler".into();
    fails_and_rolls_back(&ns, &bad, None, Step::Ipvs);

    applier().apply(&ns, "node-a", &p, None).expect("apply");
    let state = read(&ns, &p);
    assert_eq!(state.diff_against(&p), vec![], "{state}");
    let save = &state.ipvs.as_ref().expect("IPVS").save;
    assert!(save.contains("-A -t 192.168.1.50:8080"), "{save}");
    assert!(!save.contains("192.168.1.60"), "{save}");
    assert!(save.contains("-A -f 7"), "fwmark services stay: {save}");
    assert!(
        save.contains("[fd00:2::60]:8080"),
        "IPv6 is not IPv4's: {save}"
    );

    // The IPv6 proxier's clean-up, with its own kept prefix.
    p.ipvs_delete_others
        .insert(IpFamily::Ipv6, vec!["fd00:1::/64".parse().unwrap()]);
    applier().apply(&ns, "node-a", &p, None).expect("apply");
    let state = read(&ns, &p);
    assert_eq!(state.diff_against(&p), vec![], "{state}");
    let save = &state.ipvs.as_ref().expect("IPVS").save;
    assert!(save.contains("[fd00:1::50]:8080"), "kept: {save}");
    assert!(!save.contains("fd00:2::60"), "{save}");
    assert_eq!(
        save.matches("-A -f 7").count(),
        2,
        "both fwmark services: {save}"
    );
}

/// The rollback snapshot skips `iptables-save` / `ipset save` when the kernel says over netlink
/// that there is nothing to save: that answer must follow what the namespace really holds.
#[test]
fn netlink_says_whether_a_namespace_holds_tables_and_sets() {
    use kpct::netfilter::{ipset::holds_no_ipsets, tables::holds_no_ip_tables};
    let ns = netns("presence");
    assert_eq!(holds_no_ip_tables(&ns), Some(true), "a fresh namespace");
    assert_eq!(holds_no_ipsets(&ns), Some(true), "a fresh namespace");
    assert_eq!(ns.output_of("iptables-save", &[], None).unwrap(), "");
    ns.output_of("iptables", &["-w", "-t", "nat", "-N", "KUBE-TEST"], None)
        .unwrap();
    assert_eq!(
        holds_no_ip_tables(&ns),
        Some(false),
        "after iptables -t nat -N"
    );
    assert_eq!(holds_no_ipsets(&ns), Some(true), "tables are not sets");
    ns.output_of("ipset", &["create", "KUBE-TEST", "hash:ip"], None)
        .unwrap();
    assert_eq!(holds_no_ipsets(&ns), Some(false), "after ipset create");
    // Other families' tables are not iptables-save's (ip6tables-save's, nft's own).
    let other = netns("presence-ip6");
    other
        .output_of("nft", &["add", "table", "ip6", "t"], None)
        .unwrap();
    assert_eq!(holds_no_ip_tables(&other), Some(true), "an ip6 table only");
    other
        .output_of("nft", &["add", "table", "ip", "t"], None)
        .unwrap();
    assert_eq!(holds_no_ip_tables(&other), Some(false), "an ip table");
}

/// A sysctl the kernel will not let anyone write (read-only) fails the apply, but changed
/// nothing: undoing it must not report an incomplete rollback. The sysctl written before it is
/// put back.
#[test]
fn a_refused_sysctl_rolls_back_cleanly() {
    let ns = netns("badsysctl");
    let mut bad = Programming::default();
    bad.sysctls.insert("net.ipv4.ip_forward".into(), "1".into());
    bad.sysctls.insert(
        "net.ipv4.tcp_available_congestion_control".into(),
        "reno".into(),
    );
    let err = fails_and_rolls_back(&ns, &bad, None, Step::Sysctls);
    assert!(
        err.contains("sysctl net.ipv4.tcp_available_congestion_control=reno"),
        "{err}"
    );
    assert!(!err.contains("ROLLBACK INCOMPLETE"), "{err}");
    assert_eq!(ns.get_sysctl("net.ipv4.ip_forward").unwrap(), "0");
}

fn nat_with(chains: &[&str], rules: &[&str]) -> Programming {
    let mut p = Programming::default();
    p.iptables.insert(
        Table::Nat,
        TableRules {
            chains: chains.iter().map(|c| chain_or_builtin(c)).collect(),
            rules: rules.iter().map(|r| r.to_string()).collect(),
        },
    );
    p
}

fn chain_or_builtin(name: &str) -> ChainDecl {
    match name {
        "PREROUTING" | "INPUT" | "OUTPUT" | "POSTROUTING" => ChainDecl {
            name: name.into(),
            policy: Some("ACCEPT".into()),
        },
        _ => chain(name),
    }
}

/// A declared built-in chain is not flushed by `iptables-restore --noflush` (only a user
/// chain's line flushes it), so its rules are ensured, not appended again: applying the same
/// programming twice leaves one copy of each.
#[test]
fn applying_twice_leaves_one_copy_of_built_in_chain_rules() {
    let ns = netns("twice");
    let p = nat_with(
        &["OUTPUT", "KUBE-SERVICES"],
        &["-A OUTPUT -j KUBE-SERVICES", "-A KUBE-SERVICES -j RETURN"],
    );
    applier()
        .apply(&ns, "twice", &p, None)
        .expect("first apply");
    applier()
        .apply(&ns, "twice", &p, None)
        .expect("second apply");
    let nat = read(&ns, &p).iptables[&Table::Nat].clone();
    assert_eq!(
        nat.rules,
        ["-A OUTPUT -j KUBE-SERVICES", "-A KUBE-SERVICES -j RETURN"],
        "{nat:?}"
    );
}

/// `-X CHAIN` after the chain's declaration deletes it, as kube-proxy removes stale chains; the
/// readback check flags a chain such a line should have deleted.
#[test]
fn chain_deletion_lines_delete_stale_chains() {
    let ns = netns("delete-chain");
    let before = nat_with(
        &["KUBE-SVC-STALE", "KUBE-SVC-KEPT"],
        &["-A KUBE-SVC-STALE -j RETURN", "-A KUBE-SVC-KEPT -j RETURN"],
    );
    applier().apply(&ns, "n", &before, None).expect("apply");
    let after = nat_with(
        &["KUBE-SVC-KEPT", "KUBE-SVC-STALE"],
        &["-A KUBE-SVC-KEPT -j RETURN", "-X KUBE-SVC-STALE"],
    );
    applier()
        .apply(&ns, "n", &after, None)
        .expect("apply the deletion");
    let state = read(&ns, &after);
    let chains: Vec<&str> = state.iptables[&Table::Nat]
        .chains
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(chains, ["KUBE-SVC-KEPT"]);
    assert!(state.diff_against(&after).is_empty());
    // Read against the state before the deletion, the same programming names what is left.
    let stale = read(&ns, &before);
    applier().apply(&ns, "n", &before, None).expect("re-create");
    let missing = read(&ns, &before).diff_against(&after);
    assert_eq!(
        missing.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
        ["table nat: deletion of chain KUBE-SVC-STALE"],
        "{stale:?}"
    );
}

/// A UDP flow on loopback, tracked (a conntrack match makes the namespace track connections): the
/// conntrack cleanup deletes it when its reply source is not listed as serving, and keeps it
/// when it is.
#[test]
fn conntrack_cleanup_deletes_entries_whose_reply_source_is_not_serving() {
    use kpct::programming::ConntrackCleanup;
    use kpct::scenario::Protocol as P;
    let ns = netns("conntrack");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { kpct::topology::NetlinkNs::open(&ns)?.set_up("lo").await })
        .expect("lo up");
    let mut track = Programming::default();
    track.iptables.insert(
        Table::Filter,
        TableRules {
            chains: Vec::new(),
            rules: vec!["-A OUTPUT -m conntrack --ctstate NEW -j ACCEPT".into()],
        },
    );
    applier().apply(&ns, "n", &track, None).expect("apply");
    let send = || {
        ns.run(|| {
            let s = std::net::UdpSocket::bind("127.0.0.1:4053").unwrap();
            s.send_to(b"x", "127.0.0.1:53").unwrap();
        })
        .unwrap()
    };
    let udp_53 = || {
        kpct::netfilter::conntrack::entries(&ns)
            .unwrap()
            .into_iter()
            .filter(|e| e.original.protocol == 17 && e.original.dport == 53)
            .count()
    };
    send();
    assert_eq!(
        udp_53(),
        1,
        "the datagram left an entry: {:?}",
        kpct::netfilter::conntrack::entries(&ns)
    );
    let cleanup = |serving: &str| {
        let mut p = track.clone();
        p.conntrack_cleanup = vec![ConntrackCleanup {
            protocol: P::Udp,
            orig_dst: Some("127.0.0.1".parse().unwrap()),
            orig_dport: 53,
            serving: vec![kpct::programming::Serving {
                ip: serving.parse().unwrap(),
                port: None,
            }],
        }];
        p
    };
    let report = applier()
        .apply(&ns, "n", &cleanup("127.0.0.1"), None)
        .expect("apply");
    assert_eq!(
        (report.conntrack_deleted, udp_53()),
        (0, 1),
        "a serving reply source stays"
    );
    let report = applier()
        .apply(&ns, "n", &cleanup("10.244.2.53"), None)
        .expect("apply");
    assert_eq!(
        (report.conntrack_deleted, udp_53()),
        (1, 0),
        "a stale one goes"
    );
    // The text format carries the cleanup both ways.
    let text = render_text(&cleanup("10.244.2.53"));
    assert!(
        text.contains(
            "*conntrack\n-p udp --orig-dst 127.0.0.1 --orig-port-dst 53 --reply-src-not 10.244.2.53\nCOMMIT\n"
        ),
        "{text}"
    );
    assert_eq!(
        parse_text_with_sources(&text, "t").unwrap().programming,
        cleanup("10.244.2.53")
    );
}

/// A kube-proxy-nftables-like script: its table, a verdict map, a chain on a hook, a timed set
/// and a dynamic one with an element (as a packet would add), written as kube-proxy writes every
/// sync: the table added and flushed, then everything in it.
fn nft_programming(extra: &[&str]) -> Programming {
    let lines: Vec<String> = [
        "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }",
        "flush table ip kube-proxy",
        "add chain ip kube-proxy services",
        "add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }",
        "add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }",
        "add set ip kube-proxy static { type ipv4_addr ; flags timeout ; }",
        "add set ip kube-proxy affinity { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }",
        "add rule ip kube-proxy nat-output jump services",
        "add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
        "add element ip kube-proxy static { 10.0.0.3 timeout 1h }",
        "add element ip kube-proxy affinity { 10.0.0.1 }",
    ]
    .iter()
    .chain(extra)
    .map(|l| l.to_string())
    .collect();
    Programming {
        nft: kpct::programming::nft::NftScript::new(lines).expect("a valid script"),
        ..Programming::default()
    }
}

#[test]
fn nft_script_applies_reads_back_and_applies_again_the_same() {
    let ns = netns("nft");
    let p = nft_programming(&[]);
    let report = applier().apply(&ns, "node-a", &p, None).expect("apply");
    assert!(
        report.to_string().ends_with("nft [ip kube-proxy] 11 lines"),
        "{report}"
    );
    let state = read(&ns, &p);
    let tables: Vec<String> = state.nft.keys().map(ToString::to_string).collect();
    assert_eq!(tables, ["ip kube-proxy"]);
    let listing = &state.nft.values().next().unwrap();
    for line in [
        "comment \"rules for kube-proxy\"",
        "type nat hook output priority -100; policy accept;",
        "ip daddr . meta l4proto . th dport vmap @service-ips",
        // The kernel's spelling of 10800s; the dynamic set's element is the data path's, and
        // the timed element's countdown is left out.
        "timeout 3h",
        "element 10.0.0.3 timeout 1h",
    ] {
        assert!(listing.iter().any(|l| l == line), "{line}: {listing:#?}");
    }
    assert!(
        !listing.iter().any(|l| l.contains("10.0.0.1")),
        "{listing:#?}"
    );
    // The readback is the text format again, and a second sync of the same script changes
    // nothing.
    let text = state.to_text();
    kpct::programming::parse_text(&text, "readback").expect("the readback parses");
    applier()
        .apply(&ns, "node-a", &p, None)
        .expect("apply again");
    assert_eq!(read(&ns, &p), state);
    let rendered = render_text(&p);
    assert_eq!(
        parse_text_with_sources(&rendered, "out")
            .unwrap()
            .programming,
        p
    );
}

#[test]
fn nft_error_names_the_line_and_leaves_the_tables_as_they_were() {
    let ns = netns("nft-bad");
    applier()
        .apply(&ns, "node-a", &nft_programming(&[]), None)
        .expect("apply");
    // The same table with other content, then a rule jumping to a chain that does not exist:
    // one transaction, so nothing of it may stay.
    let bad = nft_programming(&[
        "add chain ip kube-proxy more",
        "add rule ip kube-proxy services jump no-such-chain",
    ]);
    let text = render_text(&bad);
    let parsed = parse_text_with_sources(&text, "proxier.out").unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("no-such-chain"))
        .unwrap()
        + 1;
    let err = fails_and_rolls_back(&ns, &parsed.programming, Some(&parsed.sources), Step::Nft);
    assert!(
        err.contains("at nft line 13: `add rule ip kube-proxy services jump no-such-chain`"),
        "{err}"
    );
    assert!(err.contains(&format!("(from proxier.out:{line})")), "{err}");
    assert!(
        err.contains("No such file or directory"),
        "nft's message: {err}"
    );
}

#[test]
fn nft_scripts_that_do_not_name_their_tables_are_refused_at_their_line() {
    for (text, line, what) in [
        ("*nft\nadd table ip t\nadd chain t c\nCOMMIT\n", 3, "family"),
        (
            "*nft\ninclude \"/etc/nftables.conf\"\nCOMMIT\n",
            2,
            "include",
        ),
        (
            "*nft\nadd table ip t\nflush table ip filter\nCOMMIT\n",
            3,
            "iptables",
        ),
    ] {
        let e = parse_text_with_sources(text, "out.txt")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("out.txt:{line}: ")), "{e}");
        assert!(e.contains(what), "{e}");
    }
}

#[test]
fn needs_ipvs_a_later_failure_rolls_the_nft_tables_back() {
    kernel_features::require_ipvs();
    let ns = netns("nft-ipvs");
    applier()
        .apply(&ns, "node-a", &nft_programming(&[]), None)
        .expect("apply");
    let mut bad = hand_made_ipvs();
    bad.nft = nft_programming(&["add chain ip kube-proxy written-then-undone"]).nft;
    bad.ipvs[1].service.scheduler = "no-such-scheduler".into();
    let err = fails_and_rolls_back(&ns, &bad, None, Step::Ipvs);
    assert!(err.contains("no-such-scheduler"), "{err}");
    // A table the failed apply created is deleted again.
    let fresh = netns("nft-ipvs-fresh");
    let mut bad = hand_made_ipvs();
    bad.nft = nft_programming(&[]).nft;
    bad.ipvs[1].service.scheduler = "no-such-scheduler".into();
    fails_and_rolls_back(&fresh, &bad, None, Step::Ipvs);
    assert!(read(&fresh, &bad).nft.is_empty());
}
