//! Reference proxier: kube-proxy in iptables mode.
//!
//! # Pinned version
//!
//! Kubernetes **v1.33**, identified by features (the source index gives no tag or commit for
//! the copy read): `pkg/proxy/iptables/proxier.go` whose `syncProxyRules` calls
//! `proxy.CategorizeEndpoints(allEndpoints, svcInfo, proxier.nodeName, proxier.nodeLabels)`
//! and whose sync runner is `async.BoundedFrequencyRunner` with `burstSyncs` (older copies call
//! `CategorizeEndpoints` without `nodeName`; a newer one uses `pkg/proxy/runner` and
//! `topologyLabels`). Rule-wise it has the `KUBE-EXT-`/`KUBE-SVL-`/`KUBE-FW-` chains, filter
//! `KUBE-PROXY-FIREWALL`, nfacct counters, no KUBE-MARK-DROP and no `KUBE-XLB-`.
//!
//! Also read: `pkg/proxy/topology.go` (`CategorizeEndpoints`, same era: it takes `nodeName`
//! and knows PreferSameNode), `pkg/proxy/serviceport.go` (`UsesClusterEndpoints` /
//! `UsesLocalEndpoints`), `pkg/proxy/endpointslicecache.go` (an older copy; endpoint dedup and
//! `byEndpoint` ordering) and `pkg/proxy/iptables/proxier_test.go` (`TestOverallIPTablesRules`,
//! ported in `tests.rs`). The ClusterCIDR local detector's `-s CIDR` / `! -s CIDR`
//! (`pkg/proxy/util/localdetector.go`) is as the golden dump shows it; that iptables mode keeps
//! `nodePortAddresses` empty (only nftables defaults to `primary`, `platformApplyDefaults` in
//! `cmd/kube-proxy/app/server_linux.go`) is from /work/shared/reference/kube-proxy-ipvs.md.
//!
//! # Per family
//!
//! One proxier per IP family, as `NewDualStackProxier` runs them: the IPv6 one writes the same
//! rules with IPv6 addresses, into ip6tables (`Programming::ip6tables`, joined by
//! `proxier::families`). Localhost NodePorts never exist on IPv6: `NewProxier` turns them off
//! where `--nodeport-addresses` holds no IPv4 loopback (`ContainsIPv4Loopback`, false for
//! IPv6), so no `route_localnet` and no localnet firewall rule, and the NodePort jump carries
//! `! -d ::1/128` ("For IPv6 they never work", `syncProxyRules`); a loopback node IP is
//! skipped ("localhost NodePorts are not supported on IPv6").
//!
//! # What is programmed
//!
//! The `iptables-restore --noflush` input `syncProxyRules` writes (filter and nat, every
//! `KUBE-*` chain declared, rules in kube-proxy's write order), plus the jump rules kube-proxy
//! installs from the built-in chains with `EnsureRule(Prepend, ...)` before the restore
//! (`iptablesJumpChains` + `iptablesKubeletJumpChains`), expressed as `-A` rules in the order
//! those prepends leave them on a fresh node. kube-proxy runs with its defaults except for the
//! scenario's `ProxierOptions`: `--masquerade-all`, `--cluster-cidr` with detect-local-mode
//! ClusterCIDR (no local detector without it), masquerade bit 14, `localhostNodePorts: true`,
//! `nodePortAddresses` empty (match all: `-m addrtype --dst-type LOCAL`), iptables with
//! `--random-fully` support, and `nf_conntrack_tcp_be_liberal` unset unless
//! `conntrack.tcpBeLiberal` sets it. Sysctls: `net.ipv4.conf.all.route_localnet=1`, which
//! `NewProxier` sets for localhost NodePorts, and `nf_conntrack_tcp_be_liberal=1` under
//! `tcpBeLiberal` (set by `platformSetup` before `NewProxier` reads it, which then writes no
//! INVALID drop).
//!
//! The masquerade mark is written as kube-proxy formats it, `0x00004000` (Go's `%#08x`; the
//! unit tests' fake proxier hard-codes `0x4000`, the kernel stores the same value). Because
//! NodePorts match with `-m addrtype --dst-type LOCAL`, `NodeContext::local_addresses` is not
//! consulted; `NodeContext::node_ip` is (the `allowFromNode` check of the KUBE-FW- chain).
//! Large-cluster mode (over 1000 endpoints: no per-endpoint comments) is reproduced.
//!
//! # Deliberate deviations
//!
//! - **nfacct**: kube-proxy adds `-m nfacct --nfacct-name ct_state_invalid_dropped_pkts` to the
//!   KUBE-FORWARD INVALID rule and writes a `-d 127.0.0.0/8 ... -m nfacct --nfacct-name
//!   localhost_nps_accepted_pkts` twin of each NodePort rule, but only when it managed to create
//!   those nfnetlink_acct counters. A `Programming` cannot create nfacct objects, so we emit what
//!   kube-proxy emits when the counters are unavailable: no nfacct matches and no localhost twin
//!   (the twin only counts; the plain NodePort rule already matches localhost).
//! - **KUBE-PROXY-CANARY** (mangle, nat, filter) is omitted: it is an empty chain used only to
//!   detect that something flushed the tables.
//! - **Conntrack sysctls** (`nf_conntrack_max`, TCP timeouts) are set by `server_linux.go`, not
//!   by the proxier, and `nf_conntrack_max` is not writable from a non-initial namespace; omitted.
//! - **Iteration order**: kube-proxy walks its service map (a Go map) in random order; we walk
//!   `ClusterState::service_ports` in order. When local serving-terminating endpoints are merged
//!   with cluster endpoints, topology.go also goes through a Go map; we sort by `ip:port`.
//!   Only the order of rules of *different* chains (and of chain declarations) is affected.
//! - **Built-in chain jumps**: kube-proxy inserts them with `iptables -I`, outside the restore;
//!   we write them as `-A` lines in the resulting order. With kubelet present (it creates the
//!   KUBE-FIREWALL jumps first) `-j KUBE-FIREWALL` would end up last rather than first.
//! - **Topology hints** are not part of the input, so `CategorizeEndpoints` runs with
//!   `topologyMode == ""`.

mod endpoints;
mod names;
mod service;
#[cfg(test)]
mod tests;

use crate::programming::{ChainDecl, Programming, RestoreMode, Table, TableRules};
use crate::proxier::node_port_addresses::NodePortAddresses;
use crate::proxier::{conntrack_cleanup, Proxier, Resync};
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::IpCidr;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

// Chain names, from the constants at the top of pkg/proxy/iptables/proxier.go.
const KUBE_SERVICES: &str = "KUBE-SERVICES";
const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
const KUBE_FORWARD: &str = "KUBE-FORWARD";
const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// kubelet's chain, duplicated by kube-proxy for the anti-martian rule (`kubeletFirewallChain`).
const KUBE_FIREWALL: &str = "KUBE-FIREWALL";

/// `largeClusterEndpointsThreshold`: above this many endpoints, per-endpoint comments go.
const LARGE_CLUSTER_ENDPOINTS_THRESHOLD: usize = 1000;

/// kube-proxy in iptables mode (see the module documentation for the pinned version).
///
/// At the [`Release`](crate::proxier::Release) it models: by default the newest, where the
/// releases differ ([`crate::proxier::release`]) the one it is built for
/// (`kube-proxy-iptables@v1.34`).
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeProxyIptables {
    pub release: crate::proxier::Release,
}

impl Proxier for KubeProxyIptables {
    fn name(&self) -> String {
        crate::release::builtin_label("kube-proxy-iptables", self.release)
    }

    fn release(&self) -> crate::release::Release {
        self.release
    }

    fn program(&self, cluster: &ClusterState, node: &NodeContext) -> anyhow::Result<Programming> {
        let mut p = program_with(cluster, node, &Config::new(cluster, node), None);
        p.conntrack_cleanup = conntrack_cleanup::after_sync(None, cluster, self.release);
        Ok(p)
    }

    /// A sync over the node's current state: a partial one (MinimizeIPTablesRestore, GA in
    /// v1.30) that leaves the chains of services whose ports and endpoints did not change out
    /// of the restore, a full one after a restart (`needFullSync`); plus a flush and `-X` for
    /// every stale service chain it finds in the nat table, then the UDP conntrack cleanup if a
    /// UDP service's endpoints changed.
    fn resync(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        node: &NodeContext,
    ) -> anyhow::Result<Programming> {
        let stale = StaleChains {
            existing: resync
                .existing_chains
                .get(&Table::Nat)
                .cloned()
                .unwrap_or_default(),
            restarted: resync.previous.is_none(),
            unchanged: resync
                .previous
                .map(|previous| unchanged_services(previous, cluster))
                .unwrap_or_default(),
        };
        let mut p = program_with(cluster, node, &Config::new(cluster, node), Some(&stale));
        p.conntrack_cleanup = conntrack_cleanup::after_sync(resync.previous, cluster, self.release);
        Ok(p)
    }

    /// KUBE-SVC chains pick endpoints with `statistic --mode random`.
    fn random_backend_choice(&self) -> bool {
        true
    }
}

/// The kube-proxy settings that shape the output: scenario options plus kube-proxy defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Config {
    /// The proxier serves IPv6 (its rules go to ip6tables).
    ipv6: bool,
    masquerade_all: bool,
    /// detect-local-mode ClusterCIDR; `None` is kube-proxy's no-op detector.
    local_cidr: Option<IpCidr>,
    /// `--iptables-localhost-nodeports` (default true), which `NewProxier` turns off when
    /// nodePortAddresses holds no loopback address.
    localhost_node_ports: bool,
    /// Where KUBE-SERVICES hands over to KUBE-NODEPORTS.
    node_port_destinations: NodePortDestinations,
    /// `ipt.HasRandomFully()`: iptables >= 1.6.2.
    random_fully: bool,
    /// `nf_conntrack_tcp_be_liberal` read as non-zero: no INVALID DROP rule. kube-proxy sets
    /// it itself under `conntrack.tcpBeLiberal`, before `NewProxier` reads it ("if val, err :=
    /// sysctl.GetSysctl(sysctlNFConntrackTCPBeLiberal); err == nil && val != 0 {
    /// conntrackTCPLiberal = true }"), and a fresh node's namespace holds 0.
    conntrack_tcp_liberal: bool,
    /// `fmt.Sprintf("%#08x", 1<<masqueradeBit)`.
    masquerade_mark: String,
}

impl Config {
    fn new(cluster: &ClusterState, node: &NodeContext) -> Self {
        let options = &cluster.options;
        let npa = NodePortAddresses::new(&options.node_port_addresses, node.node_ip);
        // NewProxier: "if !nodePortAddresses.ContainsIPv4Loopback() { localhostNodePorts = false }".
        let localhost_node_ports = options.localhost_node_ports && npa.contains_ipv4_loopback();
        let node_port_destinations = if npa.match_all() {
            NodePortDestinations::Local
        } else {
            // syncProxyRules skips a loopback node IP when localhost NodePorts are off
            // ("--nodeport-addresses includes localhost but --iptables-localhost-nodeports=false").
            NodePortDestinations::NodeIps(
                npa.node_ips(node)
                    .into_iter()
                    .filter(|ip| localhost_node_ports || !ip.is_loopback())
                    .collect(),
            )
        };
        Self {
            ipv6: cluster.ip_family == crate::scenario::IpFamily::Ipv6,
            masquerade_all: options.masquerade_all,
            local_cidr: options.cluster_cidr.then_some(cluster.cluster_cidr),
            localhost_node_ports,
            node_port_destinations,
            random_fully: options.random_fully,
            conntrack_tcp_liberal: options.tcp_be_liberal,
            masquerade_mark: go_hex_mark(1u32 << options.masquerade_bit),
        }
    }

    /// `LocalTrafficDetector.IfLocal()` for detect-local-mode ClusterCIDR.
    fn if_local(&self) -> Option<String> {
        self.local_cidr.map(|c| format!("-s {}", cidr_string(c)))
    }

    /// `LocalTrafficDetector.IfNotLocal()`.
    fn if_not_local(&self) -> Option<String> {
        self.local_cidr.map(|c| format!("! -s {}", cidr_string(c)))
    }
}

/// Go's `%#08x`: the zero padding to 8 applies to the digits, the `0x` comes on top, so
/// `1<<14` prints as `0x00004000` (the "Using iptables mark for masquerade" log line shows it).
fn go_hex_mark(value: u32) -> String {
    format!("0x{value:08x}")
}

/// A CIDR as Go prints a parsed `*net.IPNet`: the masked network address.
fn cidr_string(c: IpCidr) -> String {
    c.normalized().to_string()
}

/// kube-proxy's four line buffers (`filterChains`, `filterRules`, `natChains`, `natRules`).
#[derive(Debug, Default)]
struct Buffers {
    filter_chains: Vec<String>,
    filter_rules: Vec<String>,
    nat_chains: Vec<String>,
    nat_rules: Vec<String>,
    /// Chains of unchanged services a partial sync leaves out of the restore: still in use.
    skipped_nat_chains: Vec<String>,
}

/// What a sync over an already programmed node knows.
struct StaleChains {
    /// The nat table's chains before the sync (`iptables-save -t nat`).
    existing: BTreeSet<String>,
    /// The first sync of a (re)started kube-proxy, which always cleans up and is a full sync.
    restarted: bool,
    /// Services (namespace, name) whose ports and endpoints did not change since the previous
    /// sync: a partial sync leaves their chains out of the restore.
    unchanged: BTreeSet<(String, String)>,
}

/// The whole `syncProxyRules` output for `node`, under `cfg`.
fn program_with(
    cluster: &ClusterState,
    node: &NodeContext,
    cfg: &Config,
    stale: Option<&StaleChains>,
) -> Programming {
    let mut b = Buffers::default();
    write_top_level(&mut b, cfg);
    let large_cluster = total_endpoints(cluster, node) > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;
    for sp in &cluster.service_ports {
        let unchanged = stale.is_some_and(|s| {
            s.unchanged
                .contains(&(sp.namespace.clone(), sp.name.clone()))
        });
        service::write_service_port(&mut b, sp, node, cfg, large_cluster, unchanged);
    }
    // "Delete chains no longer in use. Since "iptables-save" can take several seconds to run on
    // hosts with lots of iptables rules, we don't bother to do this on every sync in large
    // clusters": only once per syncPeriod (30 s), which the steps of a scenario never span.
    if let Some(stale) = stale.filter(|s| !large_cluster || s.restarted) {
        delete_stale_chains(&mut b, &stale.existing);
    }
    write_nodeports_jump(&mut b, cfg);
    write_forward_rules(&mut b, cfg);
    assemble(b, cfg)
}

/// Services whose every port, with its endpoints, is the same in `previous` and `current`:
/// neither the service nor the endpoints change tracker lists them as updated
/// (`UpdatedServices`, pkg/proxy/servicechangetracker.go, endpointschangetracker.go). The
/// tracker compares endpoint lists sorted (`endpointsMapFromEndpointInfo` sorts them "to
/// simplify diffing", pkg/proxy/endpointslicecache.go), so the order the slices list them in
/// (`ServicePortInfo::listed`, which only says how an older release resolves copies, already
/// in `endpoints`) is no change.
pub(crate) fn unchanged_services(
    previous: &ClusterState,
    current: &ClusterState,
) -> BTreeSet<(String, String)> {
    let ports = |c: &ClusterState,
                 ns: &str,
                 name: &str|
     -> Vec<crate::scenario::cluster::ServicePortInfo> {
        c.service_ports
            .iter()
            .filter(|sp| sp.namespace == ns && sp.name == name)
            .map(|sp| crate::scenario::cluster::ServicePortInfo {
                listed: Vec::new(),
                ..sp.clone()
            })
            .collect()
    };
    current
        .service_ports
        .iter()
        .map(|sp| (sp.namespace.clone(), sp.name.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|(ns, name)| ports(previous, ns, name) == ports(current, ns, name))
        .collect()
}

/// "We must (as per iptables) write a chain-line for it, which has the nice effect of flushing
/// the chain. Then we can remove the chain.": for every existing nat chain this sync does not
/// write that `isServiceChainName` calls ours (pkg/proxy/iptables/proxier.go).
fn delete_stale_chains(b: &mut Buffers, existing: &BTreeSet<String>) {
    const SERVICE_CHAIN_PREFIXES: [&str; 5] = [
        "KUBE-SVC-",
        "KUBE-SVL-",
        "KUBE-SEP-",
        "KUBE-FW-",
        "KUBE-EXT-",
    ];
    let active: BTreeSet<&str> = b
        .nat_chains
        .iter()
        .chain(&b.skipped_nat_chains)
        .map(String::as_str)
        .collect();
    let stale: Vec<String> = existing
        .iter()
        .filter(|c| !active.contains(c.as_str()))
        .filter(|c| SERVICE_CHAIN_PREFIXES.iter().any(|p| c.starts_with(p)))
        .cloned()
        .collect();
    for chain in stale {
        b.nat_rules.push(format!("-X {chain}"));
        b.nat_chains.push(chain);
    }
}

/// `totalEndpoints`: endpoints (any condition) of every proxied service port.
fn total_endpoints(cluster: &ClusterState, node: &NodeContext) -> usize {
    cluster
        .service_ports
        .iter()
        .filter(|sp| service::is_proxied(sp))
        .map(|sp| crate::proxier::endpoints::endpoints_map_entry(sp, node).len())
        .sum()
}

/// The top-level chains and the rules that do not depend on services: KUBE-POSTROUTING,
/// KUBE-MARK-MASQ and the localnet KUBE-FIREWALL rule (proxier.go, before the service loop).
fn write_top_level(b: &mut Buffers, cfg: &Config) {
    for chain in [
        KUBE_SERVICES,
        KUBE_EXTERNAL_SERVICES,
        KUBE_FORWARD,
        KUBE_NODEPORTS,
        KUBE_PROXY_FIREWALL,
    ] {
        b.filter_chains.push(chain.to_string());
    }
    for chain in [
        KUBE_SERVICES,
        KUBE_NODEPORTS,
        KUBE_POSTROUTING,
        KUBE_MARK_MASQ,
    ] {
        b.nat_chains.push(chain.to_string());
    }
    let mark = &cfg.masquerade_mark;
    b.nat_rules.push(format!(
        "-A {KUBE_POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN"
    ));
    // Clear the mark so a packet re-traversing the stack is not masqueraded twice.
    b.nat_rules
        .push(format!("-A {KUBE_POSTROUTING} -j MARK --xor-mark {mark}"));
    let random_fully = if cfg.random_fully {
        " --random-fully"
    } else {
        ""
    };
    b.nat_rules.push(format!(
        "-A {KUBE_POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE{random_fully}"
    ));
    b.nat_rules
        .push(format!("-A {KUBE_MARK_MASQ} -j MARK --or-mark {mark}"));
    // KUBE-FIREWALL exists either way: syncProxyRules creates it with EnsureChain for the
    // kubelet's INPUT/OUTPUT jumps (iptablesKubeletJumpChains); only its rule depends on the
    // option.
    b.filter_chains.push(KUBE_FIREWALL.to_string());
    if cfg.localhost_node_ports {
        // route_localnet opens a hole (https://issue.k8s.io/90259) this rule closes.
        b.filter_rules.push(format!(
            "-A {KUBE_FIREWALL} -m comment --comment \"block incoming localnet connections\" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"
        ));
    }
}

/// Where KUBE-SERVICES jumps to KUBE-NODEPORTS, by `nodePortAddresses.MatchAll()`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodePortDestinations {
    /// Every local address: one `addrtype LOCAL` rule (the iptables-mode default).
    Local,
    /// `GetNodeIPs`: one `-d IP` rule per node address inside the CIDRs.
    NodeIps(Vec<IpAddr>),
}

/// "Finally, tail-call to the nodePorts chain." With nodePortAddresses matching all addresses
/// loopback is excluded on IPv6 ("For IPv6 they never work") and on IPv4 when localhost
/// NodePorts are off; otherwise each selected node IP gets its own rule (a loopback one only on
/// IPv4 with localhost NodePorts on: `Config::new` leaves it out otherwise).
fn write_nodeports_jump(b: &mut Buffers, cfg: &Config) {
    const COMMENT: &str =
        "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
    match &cfg.node_port_destinations {
        NodePortDestinations::Local => {
            let not_loopback = if cfg.ipv6 {
                " ! -d ::1/128"
            } else if cfg.localhost_node_ports {
                ""
            } else {
                " ! -d 127.0.0.0/8"
            };
            b.nat_rules.push(format!(
                "-A {KUBE_SERVICES} -m comment --comment {COMMENT} -m addrtype --dst-type LOCAL{not_loopback} -j {KUBE_NODEPORTS}"
            ));
        }
        NodePortDestinations::NodeIps(ips) => {
            for ip in ips {
                b.nat_rules.push(format!(
                    "-A {KUBE_SERVICES} -m comment --comment {COMMENT} -d {ip} -j {KUBE_NODEPORTS}"
                ));
            }
        }
    }
}

/// KUBE-FORWARD: drop INVALID (kubernetes#74839) unless conntrack is liberal ("if
/// !proxier.conntrackTCPLiberal" in syncProxyRules), accept marked traffic and its replies
/// even when the FORWARD policy is DROP.
fn write_forward_rules(b: &mut Buffers, cfg: &Config) {
    if !cfg.conntrack_tcp_liberal {
        b.filter_rules.push(format!(
            "-A {KUBE_FORWARD} -m conntrack --ctstate INVALID -j DROP"
        ));
    }
    let mark = &cfg.masquerade_mark;
    b.filter_rules.push(format!(
        "-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT"
    ));
    b.filter_rules.push(format!(
        "-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    ));
}

/// One entry of `iptablesJumpChains` / `iptablesKubeletJumpChains`.
struct Jump {
    table: Table,
    src: &'static str,
    dst: &'static str,
    comment: &'static str,
    ctstate_new: bool,
}

const fn jump(
    table: Table,
    dst: &'static str,
    src: &'static str,
    comment: &'static str,
    ctstate_new: bool,
) -> Jump {
    Jump {
        table,
        src,
        dst,
        comment,
        ctstate_new,
    }
}

/// `iptablesJumpChains` followed by `iptablesKubeletJumpChains`, in proxier.go's order.
const JUMPS: [Jump; 14] = [
    jump(
        Table::Filter,
        KUBE_EXTERNAL_SERVICES,
        "INPUT",
        "kubernetes externally-visible service portals",
        true,
    ),
    jump(
        Table::Filter,
        KUBE_EXTERNAL_SERVICES,
        "FORWARD",
        "kubernetes externally-visible service portals",
        true,
    ),
    jump(
        Table::Filter,
        KUBE_NODEPORTS,
        "INPUT",
        "kubernetes health check service ports",
        false,
    ),
    jump(
        Table::Filter,
        KUBE_SERVICES,
        "FORWARD",
        "kubernetes service portals",
        true,
    ),
    jump(
        Table::Filter,
        KUBE_SERVICES,
        "OUTPUT",
        "kubernetes service portals",
        true,
    ),
    jump(
        Table::Filter,
        KUBE_FORWARD,
        "FORWARD",
        "kubernetes forwarding rules",
        false,
    ),
    jump(
        Table::Filter,
        KUBE_PROXY_FIREWALL,
        "INPUT",
        "kubernetes load balancer firewall",
        true,
    ),
    jump(
        Table::Filter,
        KUBE_PROXY_FIREWALL,
        "OUTPUT",
        "kubernetes load balancer firewall",
        true,
    ),
    jump(
        Table::Filter,
        KUBE_PROXY_FIREWALL,
        "FORWARD",
        "kubernetes load balancer firewall",
        true,
    ),
    jump(
        Table::Nat,
        KUBE_SERVICES,
        "OUTPUT",
        "kubernetes service portals",
        false,
    ),
    jump(
        Table::Nat,
        KUBE_SERVICES,
        "PREROUTING",
        "kubernetes service portals",
        false,
    ),
    jump(
        Table::Nat,
        KUBE_POSTROUTING,
        "POSTROUTING",
        "kubernetes postrouting rules",
        false,
    ),
    jump(Table::Filter, KUBE_FIREWALL, "INPUT", "", false),
    jump(Table::Filter, KUBE_FIREWALL, "OUTPUT", "", false),
];

/// The built-in chains of a table, in iptables-save order.
fn builtin_chains(table: Table) -> &'static [&'static str] {
    match table {
        Table::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        Table::Filter => &["INPUT", "FORWARD", "OUTPUT"],
        Table::Raw => &["PREROUTING", "OUTPUT"],
        Table::Mangle => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
    }
}

/// The rule `EnsureRule` would insert: extra args, then the comment, then the jump.
fn jump_rule(j: &Jump) -> String {
    let mut rule = format!("-A {}", j.src);
    if j.ctstate_new {
        rule.push_str(" -m conntrack --ctstate NEW");
    }
    if !j.comment.is_empty() {
        rule.push_str(&format!(" -m comment --comment \"{}\"", j.comment));
    }
    rule.push_str(&format!(" -j {}", j.dst));
    rule
}

/// Built-in chain declarations (policy ACCEPT) and their jump rules for `table`. Every jump is
/// prepended, so on a fresh node each built-in chain holds its jumps in reverse list order.
fn builtin_jumps(table: Table) -> (Vec<ChainDecl>, Vec<String>) {
    let mut chains = Vec::new();
    let mut rules = Vec::new();
    for &builtin in builtin_chains(table) {
        let jumps: Vec<&Jump> = JUMPS
            .iter()
            .filter(|j| j.table == table && j.src == builtin)
            .collect();
        if jumps.is_empty() {
            continue;
        }
        chains.push(ChainDecl {
            name: builtin.to_string(),
            policy: Some("ACCEPT".to_string()),
        });
        rules.extend(jumps.iter().rev().map(|j| jump_rule(j)));
    }
    (chains, rules)
}

/// Turns the buffers into the `Programming`: built-in jumps first, then kube-proxy's restore
/// input for each table.
fn assemble(b: Buffers, cfg: &Config) -> Programming {
    let table = |t: Table, kube_chains: Vec<String>, kube_rules: Vec<String>| {
        let (mut chains, mut rules) = builtin_jumps(t);
        chains.extend(
            kube_chains
                .into_iter()
                .map(|name| ChainDecl { name, policy: None }),
        );
        rules.extend(kube_rules);
        TableRules { chains, rules }
    };
    let mut iptables = BTreeMap::new();
    iptables.insert(
        Table::Filter,
        table(Table::Filter, b.filter_chains, b.filter_rules),
    );
    iptables.insert(Table::Nat, table(Table::Nat, b.nat_chains, b.nat_rules));
    // What `platformSetup` set before the proxier was created.
    let mut sysctls = BTreeMap::new();
    if cfg.conntrack_tcp_liberal {
        sysctls.insert(
            super::conntrack_sysctls::TCP_BE_LIBERAL.to_string(),
            "1".to_string(),
        );
    }
    if cfg.localhost_node_ports {
        sysctls.insert(
            "net.ipv4.conf.all.route_localnet".to_string(),
            "1".to_string(),
        );
    }
    Programming {
        iptables,
        restore_mode: RestoreMode::NoFlush,
        sysctls,
        ..Programming::default()
    }
}
