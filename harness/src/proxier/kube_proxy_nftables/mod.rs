//! Reference proxier: kube-proxy in nftables mode (GA in v1.33), one per IP family.
//!
//! # Pinned version
//!
//! `pkg/proxy/nftables/proxier.go` at kubernetes/kubernetes 531be81208e2 (the v1.33 layout:
//! `filter-prerouting-pre-dnat` / `filter-output-pre-dnat` at dstnat-10, the filter chains at
//! filter priority, `cluster-ips-check`, `nodeport-endpoints-check` and
//! `service-endpoints-check`), read with the search tool; the facts and their sources are
//! gathered in `shared/reference/kube-proxy-nftables.md`. The family is a parameter
//! ([`Family`]) as upstream's `ipX` / `ipvX_addr` / `noLocalhost` are: the proxier of an IPv6
//! state writes the `ip6 kube-proxy` table, as the IPv6 half of `NewDualStackProxier` does.
//!
//! # What is programmed
//!
//! One `nft -f` transaction per sync (the programming's `*nft` section), written as knftables
//! writes kube-proxy's `tx.Add` / `tx.Flush` / `tx.Delete` calls, in `syncProxyRules`'
//! order: `setupNFTables` (the table, its eight base chains, the top-level chains and their
//! fixed rules, the sets and verdict maps), then per service port its elements and chains. The
//! settings are kube-proxy's defaults but for the scenario's options: `--masquerade-all`,
//! `--cluster-cidr` (the ClusterCIDR local detector: `ip saddr 10.244.0.0/16`), the masquerade
//! bit, `nodePortAddresses` (empty means `primary` in nftables mode,
//! `platformApplyDefaults` in cmd/kube-proxy/app/server_linux.go), and the cluster's service
//! CIDR, which kube-proxy learns from the ServiceCIDR objects (`OnServiceCIDRsChanged`). No
//! sysctl: nftables mode sets no `route_localnet` (no localhost NodePorts).
//!
//! # Deliberate deviations
//!
//! - **Priorities** are written as numbers (-110, 0, -100, 100): nft 1.0.6 refuses
//!   `dstnat-10` on a filter chain, and the kernel holds numbers either way (it lists them as
//!   `dstnat - 10`, `filter`, `dstnat`, `srcnat`).
//! - **Element updates**: a later sync flushes and refills the six maps and sets (seven from v1.36, with hairpin-connections) in the same
//!   transaction, where kube-proxy's `nftElementStorage` adds and deletes only the elements
//!   that changed; what the transaction commits is the same.
//! - **Stale chains** are flushed in the sync that finds them and deleted at the start of the
//!   next sync's transaction; kube-proxy deletes them in a transaction of their own before it,
//!   once they have been stale for a second (kernels before 6.2 notice a chain is unreferenced
//!   only a moment after its map element goes).
//! - **Partial syncs** are not modelled: every sync writes every service (`doFullSync`), which
//!   commits the same state as kube-proxy's partial sync.
//! - **Iteration order** is `ClusterState::service_ports`' order, where kube-proxy walks a Go
//!   map; only the order of commands in the transaction differs, not what it commits.

mod names;
mod service;
#[cfg(test)]
mod tests;

use crate::programming::nft::NftScript;
use crate::programming::Programming;
use crate::proxier::node_port_addresses::NodePortAddresses;
use crate::proxier::{conntrack_cleanup, Proxier, Resync};
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::{IpCidr, IpFamily, NodePortAddress};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// `kubeProxyTable`.
const TABLE: &str = "kube-proxy";

// Chain, set and map names: the constants at the top of pkg/proxy/nftables/proxier.go.
const SERVICES_CHAIN: &str = "services";
const SERVICE_IPS_MAP: &str = "service-ips";
const SERVICE_NODE_PORTS_MAP: &str = "service-nodeports";
const NODE_PORT_IPS_SET: &str = "nodeport-ips";
const CLUSTER_IPS_SET: &str = "cluster-ips";
/// The local endpoints whose own traffic is masqueraded (v1.36 and later).
const HAIRPIN_SET: &str = "hairpin-connections";
const SERVICE_ENDPOINTS_CHECK_CHAIN: &str = "service-endpoints-check";
const NODE_PORT_ENDPOINTS_CHECK_CHAIN: &str = "nodeport-endpoints-check";
const NO_ENDPOINT_SERVICES_MAP: &str = "no-endpoint-services";
const NO_ENDPOINT_NODE_PORTS_MAP: &str = "no-endpoint-nodeports";
const REJECT_CHAIN: &str = "reject-chain";
const CLUSTER_IPS_CHECK_CHAIN: &str = "cluster-ips-check";
const FIREWALL_IPS_MAP: &str = "firewall-ips";
const FIREWALL_CHECK_CHAIN: &str = "firewall-check";
const MARK_MASQ_CHAIN: &str = "mark-for-masquerade";
const MASQUERADING_CHAIN: &str = "masquerading";

/// An address family, as the words of upstream's family-dependent text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    V4,
    V6,
}

impl Family {
    fn of(family: IpFamily) -> Family {
        match family {
            IpFamily::Ipv4 => Family::V4,
            IpFamily::Ipv6 => Family::V6,
        }
    }

    /// The nftables family and the match keyword (`ipX`).
    fn ip(self) -> &'static str {
        match self {
            Family::V4 => "ip",
            Family::V6 => "ip6",
        }
    }

    /// `ipvX_addr`.
    fn addr_type(self) -> &'static str {
        match self {
            Family::V4 => "ipv4_addr",
            Family::V6 => "ipv6_addr",
        }
    }

    /// `noLocalhost`.
    fn no_localhost(self) -> &'static str {
        match self {
            Family::V4 => "ip daddr != 127.0.0.0/8",
            Family::V6 => "ip6 daddr != ::1",
        }
    }

    fn nft(self) -> crate::programming::nft::NftFamily {
        match self {
            Family::V4 => crate::programming::nft::NftFamily::Ip,
            Family::V6 => crate::programming::nft::NftFamily::Ip6,
        }
    }
}

/// kube-proxy in nftables mode (see the module documentation for the pinned version).
///
/// At the [`Release`](crate::proxier::Release) it models: by default the newest, where the
/// releases differ ([`crate::proxier::release`]) the one it is built for
/// (`kube-proxy-nftables@v1.34`).
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeProxyNftables {
    pub release: crate::proxier::Release,
}

impl Proxier for KubeProxyNftables {
    fn name(&self) -> String {
        crate::release::builtin_label("kube-proxy-nftables", self.release)
    }

    fn release(&self) -> crate::release::Release {
        self.release
    }

    /// `platformApplyDefaults` (cmd/kube-proxy/app/server_linux.go): "if config.Mode ==
    /// ProxyModeNFTables && len(config.NodePortAddresses) == 0 { … = []string{primary} }".
    fn default_node_port_addresses(&self) -> Vec<NodePortAddress> {
        vec![NodePortAddress::Primary]
    }

    /// The first sync of a new kube-proxy on a fresh node.
    fn program(&self, cluster: &ClusterState, node: &NodeContext) -> anyhow::Result<Programming> {
        let existing = Existing::default();
        sync(self.release, cluster, node, &existing, None)
    }

    /// A later sync over what the node holds: the chains it finds stale are flushed (and those
    /// it flushed in its previous sync deleted), stale affinity sets deleted; after a restart
    /// it also re-creates its base chains (`!proxier.flushed`) and deletes nothing it did not
    /// flush itself.
    fn resync(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        node: &NodeContext,
    ) -> anyhow::Result<Programming> {
        let existing = Existing::read(resync, Family::of(cluster.ip_family));
        sync(self.release, cluster, node, &existing, Some(resync))
    }

    /// Service chains pick an endpoint with `numgen random`.
    fn random_backend_choice(&self) -> bool {
        true
    }
}

/// The objects of the node's `kube-proxy` table that a sync looks at (`nftables.List`).
#[derive(Debug, Default)]
struct Existing {
    /// Chain name and whether it holds no rule.
    chains: Vec<(String, bool)>,
    sets: Vec<String>,
}

impl Existing {
    fn read(resync: &Resync<'_>, family: Family) -> Existing {
        let table = crate::programming::nft::NftTable {
            family: family.nft(),
            name: TABLE.to_string(),
        };
        let mut out = Existing::default();
        let Some(listing) = resync.nft.get(&table) else {
            return out;
        };
        for block in crate::programming::nft::blocks(listing) {
            match block.kind.as_str() {
                "chain" => out.chains.push((block.name, block.lines.is_empty())),
                "set" => out.sets.push(block.name),
                _ => {}
            }
        }
        out
    }
}

/// The kube-proxy settings that shape the transaction.
#[derive(Debug, Clone)]
pub(super) struct Config {
    family: Family,
    masquerade_all: bool,
    /// The ClusterCIDR local detector; `None` is kube-proxy's no-op detector.
    local_cidr: Option<IpCidr>,
    /// `fmt.Sprintf("%#08x", 1<<masqueradeBit)`.
    masquerade_mark: String,
    node_port_addresses: NodePortAddresses,
    node_ip: IpAddr,
    /// `proxier.serviceCIDRs`: the comma-joined ServiceCIDRs of this family (none for the idle
    /// proxier of a family the cluster has no range of, [`ClusterState::idle`]).
    service_cidrs: String,
    /// The release modelled, where releases differ.
    release: crate::release::Release,
}

impl Config {
    /// A rule or element comment as the release writes it: v1.37 cuts it to nft's 128
    /// characters (`truncateNFTablesComment`, pkg/proxy/nftables/proxier.go l.969-974 in
    /// v1.37.2, `knftables.CommentLengthMax`); v1.34-v1.36 write it whole, and `nft` refuses a
    /// longer one ("comment too long"), failing the whole transaction (`proxier.nftables.Run`,
    /// l.1721 in v1.36.3): a Service whose `namespace/name:port` is over 128 characters and has
    /// no endpoints leaves the node unsynced.
    fn comment(&self, text: &str) -> String {
        const COMMENT_LENGTH_MAX: usize = 128;
        if self.release >= crate::release::Release::V1_37 && text.len() > COMMENT_LENGTH_MAX {
            text[..COMMENT_LENGTH_MAX].to_string()
        } else {
            text.to_string()
        }
    }

    fn new(cluster: &ClusterState, node: &NodeContext, release: crate::release::Release) -> Config {
        let options = &cluster.options;
        // platformApplyDefaults: "if config.Mode == ProxyModeNFTables &&
        // len(config.NodePortAddresses) == 0 { config.NodePortAddresses = []string{primary} }".
        let addresses = if options.node_port_addresses.is_empty() {
            vec![NodePortAddress::Primary]
        } else {
            options.node_port_addresses.clone()
        };
        Config {
            family: Family::of(cluster.ip_family),
            masquerade_all: options.masquerade_all,
            local_cidr: options.cluster_cidr.then_some(cluster.cluster_cidr),
            masquerade_mark: format!("0x{:08x}", 1u32 << options.masquerade_bit),
            node_port_addresses: NodePortAddresses::new(&addresses, node.node_ip),
            node_ip: node.node_ip,
            service_cidrs: if cluster.idle {
                String::new()
            } else {
                cluster.service_cidr.normalized().to_string()
            },
            release,
        }
    }

    /// `LocalTrafficDetector.IfLocalNFT()` / `IfNotLocalNFT()` for the ClusterCIDR detector.
    fn if_local(&self, local: bool) -> Option<String> {
        let op = if local { "" } else { "!= " };
        self.local_cidr
            .map(|c| format!("{} saddr {op}{}", self.family.ip(), c.normalized()))
    }
}

/// A transaction being written: knftables' text for each `tx.Add` / `Flush` / `Delete`.
pub(super) struct Tx {
    family: Family,
    lines: Vec<String>,
    /// `createdChains` / `activeChains`: chains already ensured in this transaction.
    ensured: BTreeSet<String>,
}

impl Tx {
    fn new(family: Family) -> Tx {
        Tx {
            family,
            lines: Vec::new(),
            ensured: BTreeSet::new(),
        }
    }

    /// `add|flush|delete OBJECT ip kube-proxy REST`.
    fn op(&mut self, verb: &str, object: &str, rest: &str) {
        let family = self.family.ip();
        if rest.is_empty() {
            self.lines.push(format!("{verb} {object} {family} {TABLE}"));
        } else {
            self.lines
                .push(format!("{verb} {object} {family} {TABLE} {rest}"));
        }
    }

    /// `ensureChain`: add and flush a chain once per transaction, noting it as active.
    fn ensure_chain(&mut self, chain: &str) {
        if self.ensured.insert(chain.to_string()) {
            self.op("add", "chain", chain);
            self.op("flush", "chain", chain);
        }
    }

    fn rule(&mut self, chain: &str, rule: &str) {
        self.op("add", "rule", &format!("{chain} {rule}"));
    }

    fn rule_commented(&mut self, chain: &str, rule: &str, comment: &str) {
        self.op(
            "add",
            "rule",
            &format!("{chain} {rule} comment \"{comment}\""),
        );
    }

    /// `add element … { KEY [comment "…"] [: VALUE] }`.
    fn element(&mut self, container: &str, key: &str, comment: Option<&str>, value: Option<&str>) {
        let mut body = key.to_string();
        if let Some(c) = comment {
            body.push_str(&format!(" comment \"{c}\""));
        }
        if let Some(v) = value {
            body.push_str(&format!(" : {v}"));
        }
        self.op("add", "element", &format!("{container} {{ {body} }}"));
    }
}

/// A base chain: (name, type, hook, priority as the kernel stores it).
const BASE_CHAINS: [(&str, &str, &str, i32); 8] = [
    // "filter base chains (pre-dnat priority) to operate on pre-DNAT dest IPs and Port for
    // filtering load-balancer source ranges"
    ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
    ("filter-output-pre-dnat", "filter", "output", -110),
    ("filter-input", "filter", "input", 0),
    ("filter-forward", "filter", "forward", 0),
    ("filter-output", "filter", "output", 0),
    ("nat-prerouting", "nat", "prerouting", -100),
    ("nat-output", "nat", "output", -100),
    ("nat-postrouting", "nat", "postrouting", 100),
];

/// `nftablesJumpChains`: (destination, source, extra match), in order.
const JUMP_CHAINS: [(&str, &str, &str); 11] = [
    (
        NODE_PORT_ENDPOINTS_CHECK_CHAIN,
        "filter-input",
        "ct state new",
    ),
    (
        SERVICE_ENDPOINTS_CHECK_CHAIN,
        "filter-input",
        "ct state new",
    ),
    (
        SERVICE_ENDPOINTS_CHECK_CHAIN,
        "filter-forward",
        "ct state new",
    ),
    (
        SERVICE_ENDPOINTS_CHECK_CHAIN,
        "filter-output",
        "ct state new",
    ),
    (
        FIREWALL_CHECK_CHAIN,
        "filter-prerouting-pre-dnat",
        "ct state new",
    ),
    (
        FIREWALL_CHECK_CHAIN,
        "filter-output-pre-dnat",
        "ct state new",
    ),
    (SERVICES_CHAIN, "nat-output", ""),
    (SERVICES_CHAIN, "nat-prerouting", ""),
    (MASQUERADING_CHAIN, "nat-postrouting", ""),
    (CLUSTER_IPS_CHECK_CHAIN, "filter-forward", "ct state new"),
    (CLUSTER_IPS_CHECK_CHAIN, "filter-output", "ct state new"),
];

/// One `syncProxyRules`: the stale-chain deletion of the previous sync's leftovers, then the
/// full transaction.
fn sync(
    release: crate::release::Release,
    cluster: &ClusterState,
    node: &NodeContext,
    existing: &Existing,
    resync: Option<&Resync<'_>>,
) -> anyhow::Result<Programming> {
    let cfg = Config::new(cluster, node, release);
    // The per-service part first: which chains it uses decides what is stale.
    let mut services = Tx::new(cfg.family);
    let mut active_affinity_sets = BTreeSet::new();
    for sp in &cluster.service_ports {
        service::write_service_port(&mut services, sp, node, &cfg, &mut active_affinity_sets);
    }
    let active = std::mem::take(&mut services.ensured);
    let stale: Vec<&(String, bool)> = existing
        .chains
        .iter()
        .filter(|(chain, _)| names::is_service_chain_name(chain) && !active.contains(chain))
        .collect();
    let mut tx = Tx::new(cfg.family);
    let restarted = resync.is_none_or(|r| r.previous.is_none());
    // The chains the previous sync flushed as stale are empty; a restarted kube-proxy has
    // forgotten them (`staleChains` starts empty) and flushes them once more instead.
    let deleted: BTreeSet<&str> = if restarted {
        BTreeSet::new()
    } else {
        stale
            .iter()
            .filter(|(_, empty)| *empty)
            .map(|(chain, _)| chain.as_str())
            .collect()
    };
    for chain in &deleted {
        tx.op("delete", "chain", chain);
    }
    setup(&mut tx, &cfg, node, restarted);
    tx.lines.append(&mut services.lines);
    // "Figure out which chains are now stale": flushed now, deleted by the next sync.
    for (chain, _) in stale {
        if !deleted.contains(chain.as_str()) {
            tx.op("flush", "chain", chain);
        }
    }
    // "OTOH, we can immediately delete any stale affinity sets".
    for set in &existing.sets {
        if names::is_affinity_set_name(set) && !active_affinity_sets.contains(set) {
            tx.op("delete", "set", set);
        }
    }
    let nft = NftScript::new(tx.lines).map_err(|problems| {
        anyhow::anyhow!(
            "kube-proxy-nftables wrote a script the suite refuses: {}",
            crate::programming::nft::describe(&problems)
        )
    })?;
    Ok(Programming {
        nft,
        conntrack_cleanup: conntrack_cleanup::after_sync(
            resync.and_then(|r| r.previous),
            cluster,
            release,
        ),
        // `platformSetup`'s: nftables mode writes no `ct state invalid drop` either way.
        sysctls: super::conntrack_sysctls::of(&cluster.options),
        // A kube-proxy starting in nftables mode first cleans up after the other modes
        // (`platformCleanup`, cmd/kube-proxy/app/server_linux.go), and IPVS mode's cleanup
        // begins with `ipvs.Flush()` (pkg/proxy/ipvs/cleanup.go): every IPVS service of the
        // node goes, another load balancer's too. Only when it starts: first sync, restart.
        ipvs_clear: restarted,
        ..Programming::default()
    })
}

/// `setupNFTables`.
fn setup(tx: &mut Tx, cfg: &Config, node: &NodeContext, first_sync: bool) {
    let ip = cfg.family.ip();
    let addr = cfg.family.addr_type();
    tx.op("add", "table", "{ comment \"rules for kube-proxy\" ; }");
    // "Do an extra "add+delete" once to ensure all previous base chains in the table will be
    // recreated."
    if first_sync {
        for (name, ..) in BASE_CHAINS {
            tx.op("add", "chain", name);
            tx.op("delete", "chain", name);
        }
    }
    for (name, kind, hook, priority) in BASE_CHAINS {
        tx.op(
            "add",
            "chain",
            &format!("{name} {{ type {kind} hook {hook} priority {priority} ; }}"),
        );
        tx.op("flush", "chain", name);
    }
    for (dst, src, extra) in JUMP_CHAINS {
        tx.ensure_chain(dst);
        let rule = if extra.is_empty() {
            format!("jump {dst}")
        } else {
            format!("{extra} jump {dst}")
        };
        tx.rule(src, &rule);
    }
    for chain in [
        SERVICES_CHAIN,
        CLUSTER_IPS_CHECK_CHAIN,
        MASQUERADING_CHAIN,
        MARK_MASQ_CHAIN,
    ] {
        tx.ensure_chain(chain);
    }
    let mark = &cfg.masquerade_mark;
    tx.rule(MARK_MASQ_CHAIN, &format!("mark set mark or {mark}"));
    if cfg.release >= crate::release::Release::V1_36 {
        // From v1.36 a hairpin (a pod reaching itself through a Service) is masqueraded by
        // the connection, not by a per-endpoint saddr rule: the set holds each local
        // endpoint as `IP . IP . proto . port`, so a remote endpoint's own traffic, DNATed on
        // another node, is not (pkg/proxy/nftables/proxier.go l.521-544 and l.1347-1358 in
        // v1.37.2, l.468-491 in v1.36.3).
        tx.op(
            "add",
            "set",
            &format!(
                "{HAIRPIN_SET} {{ type {addr} . {addr} . inet_proto . inet_service ; comment \"service hairpin connections\" ; }}"
            ),
        );
        tx.rule(
            MASQUERADING_CHAIN,
            &format!("mark and {mark} != 0 mark set mark xor {mark} masquerade fully-random"),
        );
        tx.rule(
            MASQUERADING_CHAIN,
            &format!(
                "ct status dnat {ip} saddr . {ip} daddr . meta l4proto . th dport @{HAIRPIN_SET} masquerade fully-random"
            ),
        );
    } else {
        tx.rule(MASQUERADING_CHAIN, &format!("mark and {mark} == 0 return"));
        tx.rule(MASQUERADING_CHAIN, &format!("mark set mark xor {mark}"));
        tx.rule(MASQUERADING_CHAIN, "masquerade fully-random");
    }

    tx.op(
        "add",
        "set",
        &format!("{CLUSTER_IPS_SET} {{ type {addr} ; comment \"Active ClusterIPs\" ; }}"),
    );
    tx.rule_commented(
        CLUSTER_IPS_CHECK_CHAIN,
        &format!("{ip} daddr @{CLUSTER_IPS_SET} reject"),
        "Reject traffic to invalid ports of ClusterIPs",
    );
    if !cfg.service_cidrs.is_empty() {
        tx.rule_commented(
            CLUSTER_IPS_CHECK_CHAIN,
            &format!("{ip} daddr {{ {} }} drop", cfg.service_cidrs),
            "Drop traffic to unallocated ClusterIPs",
        );
    }

    // "Fill in nodeport-ips set if needed (or delete it if not)."
    tx.op(
        "add",
        "set",
        &format!(
            "{NODE_PORT_IPS_SET} {{ type {addr} ; comment \"IPs that accept NodePort traffic\" ; }}"
        ),
    );
    let match_all = cfg.node_port_addresses.match_all();
    if match_all {
        tx.op("delete", "set", NODE_PORT_IPS_SET);
    } else {
        tx.op("flush", "set", NODE_PORT_IPS_SET);
        // "--nodeport-addresses includes localhost but localhost NodePorts are not supported"
        for ip in cfg.node_port_addresses.node_ips(node) {
            if !ip.is_loopback() {
                tx.element(NODE_PORT_IPS_SET, &ip.to_string(), None, None);
            }
        }
    }

    tx.op(
        "add",
        "map",
        &format!(
            "{NO_ENDPOINT_SERVICES_MAP} {{ type {addr} . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }}"
        ),
    );
    tx.op(
        "add",
        "map",
        &format!(
            "{NO_ENDPOINT_NODE_PORTS_MAP} {{ type inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to service nodeports with no endpoints\" ; }}"
        ),
    );
    tx.op(
        "add",
        "chain",
        &format!(
            "{REJECT_CHAIN} {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}"
        ),
    );
    tx.op("flush", "chain", REJECT_CHAIN);
    tx.rule(REJECT_CHAIN, "reject");
    tx.rule(
        SERVICE_ENDPOINTS_CHECK_CHAIN,
        &format!("{ip} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES_MAP}"),
    );
    let node_port_match = if match_all {
        cfg.family.no_localhost().to_string()
    } else {
        format!("{ip} daddr @{NODE_PORT_IPS_SET}")
    };
    tx.rule(
        NODE_PORT_ENDPOINTS_CHECK_CHAIN,
        &format!("{node_port_match} meta l4proto . th dport vmap @{NO_ENDPOINT_NODE_PORTS_MAP}"),
    );

    tx.op(
        "add",
        "map",
        &format!(
            "{FIREWALL_IPS_MAP} {{ type {addr} . inet_proto . inet_service : verdict ; comment \"destinations that are subject to LoadBalancerSourceRanges\" ; }}"
        ),
    );
    tx.ensure_chain(FIREWALL_CHECK_CHAIN);
    tx.rule(
        FIREWALL_CHECK_CHAIN,
        &format!("{ip} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS_MAP}"),
    );

    tx.op(
        "add",
        "map",
        &format!(
            "{SERVICE_IPS_MAP} {{ type {addr} . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }}"
        ),
    );
    tx.op(
        "add",
        "map",
        &format!(
            "{SERVICE_NODE_PORTS_MAP} {{ type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }}"
        ),
    );
    tx.rule(
        SERVICES_CHAIN,
        &format!("{ip} daddr . meta l4proto . th dport vmap @{SERVICE_IPS_MAP}"),
    );
    let dispatch = if match_all {
        format!("fib daddr type local {}", cfg.family.no_localhost())
    } else {
        format!("{ip} daddr @{NODE_PORT_IPS_SET}")
    };
    tx.rule(
        SERVICES_CHAIN,
        &format!("{dispatch} meta l4proto . th dport vmap @{SERVICE_NODE_PORTS_MAP}"),
    );
    // readOrReset: the maps' elements are rewritten below (see the module documentation).
    tx.op("flush", "set", CLUSTER_IPS_SET);
    if cfg.release >= crate::release::Release::V1_36 {
        // `hairpinConnections.readOrReset` / `cleanupLeftoverKeys`: a gone endpoint's
        // element goes with it.
        tx.op("flush", "set", HAIRPIN_SET);
    }
    for map in [
        SERVICE_IPS_MAP,
        FIREWALL_IPS_MAP,
        NO_ENDPOINT_SERVICES_MAP,
        NO_ENDPOINT_NODE_PORTS_MAP,
        SERVICE_NODE_PORTS_MAP,
    ] {
        tx.op("flush", "map", map);
    }
}
