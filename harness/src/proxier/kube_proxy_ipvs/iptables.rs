//! iptables of the IPVS proxier: chain declarations (`iptablesChains`), the jumps from built-in
//! chains (`iptablesJumpChain`, installed by `createAndLinkKubeChain`), and the restore lines of
//! `writeIptablesRules` / `acceptIPVSTraffic` (pkg/proxy/ipvs/proxier.go).
//!
//! Lines are built like kube-proxy's `LineBuffer.Write`: arguments joined by single spaces,
//! comments already wrapped in double quotes.

use super::ipsets::{IpSets, SetName};
use super::{Config, LbNoNodeAccess};
use crate::programming::{ChainDecl, Table, TableRules};
use crate::scenario::IpFamily;
use std::collections::BTreeMap;

const KUBE_SERVICES: &str = "KUBE-SERVICES";
const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
const KUBE_NODE_PORT: &str = "KUBE-NODE-PORT";
const KUBE_LOAD_BALANCER: &str = "KUBE-LOAD-BALANCER";
const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
const KUBE_FORWARD: &str = "KUBE-FORWARD";
const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
const KUBE_SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
const KUBE_IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
const KUBE_IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";

/// `masqueradeMark := fmt.Sprintf("%#08x", 1<<masqueradeBit)` (pkg/proxy/ipvs/proxier.go
/// NewProxier; `--iptables-masquerade-bit`, default 14). Go's `%#08x` zero-pads the digits to
/// eight, so kube-proxy writes `0x00004000` for bit 14 (as its "Restoring iptables" logs show);
/// `iptables-save` prints it back as `0x4000`.
pub(super) fn masquerade_mark(bit: u8) -> String {
    format!("0x{:08x}", 1u32 << bit)
}

/// `iptablesChains`: the chains every sync declares (and so flushes) in the restore input.
const KUBE_CHAINS: [(Table, &str); 11] = [
    (Table::Nat, KUBE_SERVICES),
    (Table::Nat, KUBE_POSTROUTING),
    (Table::Nat, KUBE_NODE_PORT),
    (Table::Nat, KUBE_LOAD_BALANCER),
    (Table::Nat, KUBE_MARK_MASQ),
    (Table::Filter, KUBE_FORWARD),
    (Table::Filter, KUBE_NODE_PORT),
    (Table::Filter, KUBE_PROXY_FIREWALL),
    (Table::Filter, KUBE_SOURCE_RANGES_FIREWALL),
    (Table::Filter, KUBE_IPVS_FILTER),
    (Table::Filter, KUBE_IPVS_OUT_FILTER),
];

/// Built-in chains that get kube-proxy jumps, in `iptables-save` order per table.
const BUILTIN_CHAINS: [(Table, &str); 6] = [
    (Table::Nat, "PREROUTING"),
    (Table::Nat, "OUTPUT"),
    (Table::Nat, "POSTROUTING"),
    (Table::Filter, "INPUT"),
    (Table::Filter, "FORWARD"),
    (Table::Filter, "OUTPUT"),
];

/// One `iptablesJumpChain` row.
struct JumpChain {
    table: Table,
    from: &'static str,
    to: &'static str,
    comment: &'static str,
}

/// `iptablesJumpChain`, in its source order. Each row is `EnsureRule(Prepend, ...)`: checked, then
/// inserted at position 1 with `iptables -I`, outside the restore.
const JUMP_CHAINS: [JumpChain; 9] = [
    JumpChain {
        table: Table::Nat,
        from: "OUTPUT",
        to: KUBE_SERVICES,
        comment: "kubernetes service portals",
    },
    JumpChain {
        table: Table::Nat,
        from: "PREROUTING",
        to: KUBE_SERVICES,
        comment: "kubernetes service portals",
    },
    JumpChain {
        table: Table::Nat,
        from: "POSTROUTING",
        to: KUBE_POSTROUTING,
        comment: "kubernetes postrouting rules",
    },
    JumpChain {
        table: Table::Filter,
        from: "FORWARD",
        to: KUBE_FORWARD,
        comment: "kubernetes forwarding rules",
    },
    JumpChain {
        table: Table::Filter,
        from: "INPUT",
        to: KUBE_NODE_PORT,
        comment: "kubernetes health check rules",
    },
    JumpChain {
        table: Table::Filter,
        from: "INPUT",
        to: KUBE_PROXY_FIREWALL,
        comment: "kube-proxy firewall rules",
    },
    JumpChain {
        table: Table::Filter,
        from: "FORWARD",
        to: KUBE_PROXY_FIREWALL,
        comment: "kube-proxy firewall rules",
    },
    JumpChain {
        table: Table::Filter,
        from: "INPUT",
        to: KUBE_IPVS_FILTER,
        comment: "kubernetes ipvs access filter",
    },
    JumpChain {
        table: Table::Filter,
        from: "OUTPUT",
        to: KUBE_IPVS_OUT_FILTER,
        comment: "kubernetes ipvs access filter",
    },
];

/// One `ipsetWithIptablesChain` row: `-A <from> [-p proto] -m comment --comment <c> -m set
/// --match-set <set> <match> -j <to>`, written only when the set is non-empty.
struct SetRule {
    set: SetName,
    table: Table,
    from: &'static str,
    to: &'static str,
    match_type: &'static str,
    protocol: Option<&'static str>,
}

/// `ipsetWithIptablesChain`, in its source order ("kubeNodePortLocalSetTCP must be prior to
/// kubeNodePortSetTCP, the same for UDP").
const SET_RULES: [SetRule; 12] = [
    SetRule {
        set: SetName::LoopBack,
        table: Table::Nat,
        from: KUBE_POSTROUTING,
        to: "MASQUERADE",
        match_type: "dst,dst,src",
        protocol: None,
    },
    SetRule {
        set: SetName::LoadBalancer,
        table: Table::Nat,
        from: KUBE_SERVICES,
        to: KUBE_LOAD_BALANCER,
        match_type: "dst,dst",
        protocol: None,
    },
    SetRule {
        set: SetName::LoadBalancerLocal,
        table: Table::Nat,
        from: KUBE_LOAD_BALANCER,
        to: "RETURN",
        match_type: "dst,dst",
        protocol: None,
    },
    SetRule {
        set: SetName::NodePortLocalTcp,
        table: Table::Nat,
        from: KUBE_NODE_PORT,
        to: "RETURN",
        match_type: "dst",
        protocol: Some("tcp"),
    },
    SetRule {
        set: SetName::NodePortTcp,
        table: Table::Nat,
        from: KUBE_NODE_PORT,
        to: KUBE_MARK_MASQ,
        match_type: "dst",
        protocol: Some("tcp"),
    },
    SetRule {
        set: SetName::NodePortLocalUdp,
        table: Table::Nat,
        from: KUBE_NODE_PORT,
        to: "RETURN",
        match_type: "dst",
        protocol: Some("udp"),
    },
    SetRule {
        set: SetName::NodePortUdp,
        table: Table::Nat,
        from: KUBE_NODE_PORT,
        to: KUBE_MARK_MASQ,
        match_type: "dst",
        protocol: Some("udp"),
    },
    SetRule {
        set: SetName::NodePortLocalSctp,
        table: Table::Nat,
        from: KUBE_NODE_PORT,
        to: "RETURN",
        match_type: "dst,dst",
        protocol: Some("sctp"),
    },
    SetRule {
        set: SetName::NodePortSctp,
        table: Table::Nat,
        from: KUBE_NODE_PORT,
        to: KUBE_MARK_MASQ,
        match_type: "dst,dst",
        protocol: Some("sctp"),
    },
    SetRule {
        set: SetName::LoadBalancerFw,
        table: Table::Filter,
        from: KUBE_PROXY_FIREWALL,
        to: KUBE_SOURCE_RANGES_FIREWALL,
        match_type: "dst,dst",
        protocol: None,
    },
    SetRule {
        set: SetName::LoadBalancerSourceCidr,
        table: Table::Filter,
        from: KUBE_SOURCE_RANGES_FIREWALL,
        to: "RETURN",
        match_type: "dst,dst,src",
        protocol: None,
    },
    SetRule {
        set: SetName::LoadBalancerSourceIp,
        table: Table::Filter,
        from: KUBE_SOURCE_RANGES_FIREWALL,
        to: "RETURN",
        match_type: "dst,dst,src",
        protocol: None,
    },
];

/// The restore lines of both tables, in write order (`proxier.natRules` / `proxier.filterRules`).
#[derive(Debug, Default)]
struct Lines {
    nat: Vec<String>,
    filter: Vec<String>,
}

impl Lines {
    fn write(&mut self, table: Table, args: &[&str]) {
        let line = args.join(" ");
        match table {
            Table::Filter => self.filter.push(line),
            _ => self.nat.push(line),
        }
    }
}

/// nat and filter as one `iptables-restore --noflush` would leave them on a fresh node: the
/// built-in chains with their kube-proxy jumps first, then the kube chains and rules.
pub(super) fn tables(
    cfg: &Config,
    sets: &IpSets,
    lb_no_node_access: &[LbNoNodeAccess],
) -> BTreeMap<Table, TableRules> {
    let lines = write_iptables_rules(cfg, sets, lb_no_node_access);
    let mut out = BTreeMap::new();
    for (table, restore_lines) in [(Table::Nat, lines.nat), (Table::Filter, lines.filter)] {
        let mut chains: Vec<ChainDecl> = BUILTIN_CHAINS
            .iter()
            .filter(|(t, _)| *t == table)
            .map(|(_, name)| ChainDecl {
                name: (*name).to_string(),
                policy: Some("ACCEPT".to_string()),
            })
            .collect();
        chains.extend(
            KUBE_CHAINS
                .iter()
                .filter(|(t, _)| *t == table)
                .map(|(_, name)| ChainDecl {
                    name: (*name).to_string(),
                    policy: None,
                }),
        );
        let mut rules = jump_rules(table);
        rules.extend(restore_lines);
        out.insert(table, TableRules { chains, rules });
    }
    out
}

/// The `iptablesJumpChain` rules of `table` in the order they end up in on a fresh node. Every row
/// is prepended, so within one built-in chain the last row comes first: INPUT ends up
/// KUBE-IPVS-FILTER, KUBE-PROXY-FIREWALL, KUBE-NODE-PORT; FORWARD KUBE-PROXY-FIREWALL,
/// KUBE-FORWARD. Written as `-A` so a restore into empty built-in chains reproduces that order.
fn jump_rules(table: Table) -> Vec<String> {
    BUILTIN_CHAINS
        .iter()
        .filter(|(t, _)| *t == table)
        .flat_map(|&(_, chain)| {
            JUMP_CHAINS
                .iter()
                .rev()
                .filter(move |jc| jc.table == table && jc.from == chain)
                .map(|jc| {
                    format!(
                        "-A {} -m comment --comment \"{}\" -j {}",
                        jc.from, jc.comment, jc.to
                    )
                })
        })
        .collect()
}

/// `writeIptablesRules`, section by section in kube-proxy's order.
fn write_iptables_rules(
    cfg: &Config,
    sets: &IpSets,
    lb_no_node_access: &[LbNoNodeAccess],
) -> Lines {
    let mut lines = Lines::default();
    // "Dismiss connects to localhost early in the service chain": `loAddr`, 127.0.0.0/8 or, for
    // the IPv6 proxier, ::1/128.
    let lo_addr = match cfg.family {
        IpFamily::Ipv4 => "127.0.0.0/8",
        IpFamily::Ipv6 => "::1/128",
    };
    lines.write(
        Table::Nat,
        &["-A", KUBE_SERVICES, "-s", lo_addr, "-j", "RETURN"],
    );
    set_rules(&mut lines, sets);
    cluster_ip_masquerade(&mut lines, cfg, sets);
    external_ip_rules(&mut lines, sets);
    // -A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT (always).
    lines.write(
        Table::Nat,
        &[
            "-A",
            KUBE_SERVICES,
            "-m",
            "addrtype",
            "--dst-type",
            "LOCAL",
            "-j",
            KUBE_NODE_PORT,
        ],
    );
    // "mark for masquerading for KUBE-LOAD-BALANCER".
    lines.write(
        Table::Nat,
        &["-A", KUBE_LOAD_BALANCER, "-j", KUBE_MARK_MASQ],
    );
    // "drop packets filtered by KUBE-SOURCE-RANGES-FIREWALL".
    lines.write(
        Table::Filter,
        &["-A", KUBE_SOURCE_RANGES_FIREWALL, "-j", "DROP"],
    );
    ipvs_out_filter(&mut lines, lb_no_node_access);
    accept_ipvs_traffic(&mut lines, sets);
    forward_rules(&mut lines, &cfg.masquerade_mark);
    health_check_accept(&mut lines, cfg.family);
    ipvs_filter(&mut lines, cfg.family);
    postrouting(&mut lines, &cfg.masquerade_mark, cfg.random_fully);
    // The masquerade mark rule.
    lines.write(
        Table::Nat,
        &[
            "-A",
            KUBE_MARK_MASQ,
            "-j",
            "MARK",
            "--or-mark",
            &cfg.masquerade_mark,
        ],
    );
    lines
}

/// The `ipsetWithIptablesChain` loop.
fn set_rules(lines: &mut Lines, sets: &IpSets) {
    for rule in SET_RULES.iter().filter(|r| !sets.is_empty(r.set)) {
        let comment = rule.set.quoted_comment();
        let mut args = vec!["-A", rule.from];
        if let Some(proto) = rule.protocol {
            args.extend(["-p", proto]);
        }
        args.extend(["-m", "comment", "--comment", comment.as_str()]);
        args.extend([
            "-m",
            "set",
            "--match-set",
            sets.name(rule.set),
            rule.match_type,
        ]);
        args.extend(["-j", rule.to]);
        lines.write(rule.table, &args);
    }
}

/// The KUBE-CLUSTER-IP masquerade rule, one of three variants: `--masquerade-all` marks all
/// ClusterIP traffic; with a local detector, traffic not from the cluster CIDR ("masquerades
/// off-cluster traffic to a service VIP"); without one, node-originated traffic whose source is a
/// VIP on kube-ipvs0 (`src,dst`).
fn cluster_ip_masquerade(lines: &mut Lines, cfg: &Config, sets: &IpSets) {
    if sets.is_empty(SetName::ClusterIp) {
        return;
    }
    let set = SetName::ClusterIp;
    let comment = set.quoted_comment();
    let mut args = vec![
        "-A",
        KUBE_SERVICES,
        "-m",
        "comment",
        "--comment",
        comment.as_str(),
    ];
    args.extend(["-m", "set", "--match-set", sets.name(set)]);
    if cfg.masquerade_all {
        args.push("dst,dst");
    } else if let Some(cidr) = cfg.local_detector_cidr.as_deref() {
        // localDetector.IfNotLocal() of NewDetectLocalByCIDR: `! -s <cidr>`.
        args.extend(["dst,dst", "!", "-s", cidr]);
    } else {
        args.push("src,dst");
    }
    args.extend(["-j", KUBE_MARK_MASQ]);
    lines.write(Table::Nat, &args);
}

/// ExternalIP rules: KUBE-EXTERNAL-IP gets a masquerade rule, both sets get the two ACCEPT rules
/// of `externalIPRules` ("all traffic from off-machine" and "external IPs that happen to be
/// recognized as local IPs").
fn external_ip_rules(lines: &mut Lines, sets: &IpSets) {
    for (set, masquerade) in [
        (SetName::ExternalIp, true),
        (SetName::ExternalIpLocal, false),
    ] {
        if sets.is_empty(set) {
            continue;
        }
        let comment = set.quoted_comment();
        let base = [
            "-A",
            KUBE_SERVICES,
            "-m",
            "comment",
            "--comment",
            comment.as_str(),
            "-m",
            "set",
            "--match-set",
            sets.name(set),
            "dst,dst",
        ];
        if masquerade {
            lines.write(Table::Nat, &[&base[..], &["-j", KUBE_MARK_MASQ]].concat());
        }
        let off_machine = [
            "-m",
            "physdev",
            "!",
            "--physdev-is-in",
            "-m",
            "addrtype",
            "!",
            "--src-type",
            "LOCAL",
        ];
        lines.write(
            Table::Nat,
            &[&base[..], &off_machine, &["-j", "ACCEPT"]].concat(),
        );
        let dst_local = ["-m", "addrtype", "--dst-type", "LOCAL"];
        lines.write(
            Table::Nat,
            &[&base[..], &dst_local, &["-j", "ACCEPT"]].concat(),
        );
    }
}

/// "disable LB access from node / for IPVS src and dst both would be lbIP" (needs xt_ipvs).
fn ipvs_out_filter(lines: &mut Lines, lb_no_node_access: &[LbNoNodeAccess]) {
    for entry in lb_no_node_access {
        let ip = entry.ip.to_string();
        let port = entry.port.to_string();
        lines.write(
            Table::Filter,
            &[
                "-A",
                KUBE_IPVS_OUT_FILTER,
                "-s",
                &ip,
                "-m",
                "ipvs",
                "--vaddr",
                &ip,
                "--vproto",
                entry.protocol,
                "--vport",
                &port,
                "-j",
                "DROP",
            ],
        );
    }
}

/// `acceptIPVSTraffic`: "Accept all traffic with destination of ipvs virtual service, in case
/// other iptables rules block the traffic"; last in KUBE-SERVICES, no comment.
fn accept_ipvs_traffic(lines: &mut Lines, sets: &IpSets) {
    for set in [SetName::ClusterIp, SetName::LoadBalancer] {
        if sets.is_empty(set) {
            continue;
        }
        // Both are hash:ip,port sets, so the match is dst,dst (bitmap:port would be dst).
        lines.write(
            Table::Nat,
            &[
                "-A",
                KUBE_SERVICES,
                "-m",
                "set",
                "--match-set",
                sets.name(set),
                "dst,dst",
                "-j",
                "ACCEPT",
            ],
        );
    }
}

/// filter KUBE-FORWARD: forward marked traffic "even if the default FORWARD policy is not
/// accept", then its replies.
fn forward_rules(lines: &mut Lines, masquerade_mark: &str) {
    let mark = format!("{masquerade_mark}/{masquerade_mark}");
    lines.write(
        Table::Filter,
        &[
            "-A",
            KUBE_FORWARD,
            "-m",
            "comment",
            "--comment",
            "\"kubernetes forwarding rules\"",
            "-m",
            "mark",
            "--mark",
            &mark,
            "-j",
            "ACCEPT",
        ],
    );
    lines.write(
        Table::Filter,
        &[
            "-A",
            KUBE_FORWARD,
            "-m",
            "comment",
            "--comment",
            "\"kubernetes forwarding conntrack rule\"",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
    );
}

/// filter KUBE-NODE-PORT: "accept traffic towards health check node port" (always written).
fn health_check_accept(lines: &mut Lines, family: IpFamily) {
    let set = SetName::HealthCheckNodePort;
    let comment = set.quoted_comment();
    lines.write(
        Table::Filter,
        &[
            "-A",
            KUBE_NODE_PORT,
            "-m",
            "comment",
            "--comment",
            &comment,
            "-m",
            "set",
            "--match-set",
            set.name(family),
            "dst",
            "-j",
            "ACCEPT",
        ],
    );
}

/// filter KUBE-IPVS-FILTER "to prevent access to ports on the host through VIP addresses"
/// (issue #72236): always all six rules, even for empty sets.
fn ipvs_filter(lines: &mut Lines, family: IpFamily) {
    for (set, match_type) in [
        (SetName::LoadBalancer, "dst,dst"),
        (SetName::ClusterIp, "dst,dst"),
        (SetName::ExternalIp, "dst,dst"),
        (SetName::ExternalIpLocal, "dst,dst"),
        (SetName::HealthCheckNodePort, "dst"),
    ] {
        lines.write(
            Table::Filter,
            &[
                "-A",
                KUBE_IPVS_FILTER,
                "-m",
                "set",
                "--match-set",
                set.name(family),
                match_type,
                "-j",
                "RETURN",
            ],
        );
    }
    lines.write(
        Table::Filter,
        &[
            "-A",
            KUBE_IPVS_FILTER,
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "set",
            "--match-set",
            SetName::IpvsIps.name(family),
            "dst",
            "-j",
            "REJECT",
        ],
    );
}

/// nat KUBE-POSTROUTING: return unmarked packets, clear the mark ("to avoid re-masquerading if the
/// packet re-traverses the network stack"), masquerade. `--random-fully` is appended when
/// `iptables.HasRandomFully()` (pkg/proxy/ipvs/proxier.go `writeIptablesRules`), true for any
/// iptables >= 1.6.2; the `randomFully: false` option models an older one.
fn postrouting(lines: &mut Lines, masquerade_mark: &str, random_fully: bool) {
    let mark = format!("{masquerade_mark}/{masquerade_mark}");
    lines.write(
        Table::Nat,
        &[
            "-A",
            KUBE_POSTROUTING,
            "-m",
            "mark",
            "!",
            "--mark",
            &mark,
            "-j",
            "RETURN",
        ],
    );
    lines.write(
        Table::Nat,
        &[
            "-A",
            KUBE_POSTROUTING,
            "-j",
            "MARK",
            "--xor-mark",
            masquerade_mark,
        ],
    );
    lines.write(
        Table::Nat,
        &[
            "-A",
            KUBE_POSTROUTING,
            "-m",
            "comment",
            "--comment",
            "\"kubernetes service traffic requiring SNAT\"",
            "-j",
            "MASQUERADE",
        ]
        .into_iter()
        .chain(random_fully.then_some("--random-fully"))
        .collect::<Vec<_>>(),
    );
}
