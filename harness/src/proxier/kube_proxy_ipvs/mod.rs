//! Reference proxier: kube-proxy in IPVS mode (`--proxy-mode=ipvs`), one proxier per IP family
//! (a dual-stack node runs an IPv4 and an IPv6 one, [`crate::proxier::families`]).
//!
//! # Pinned version
//!
//! This module follows kubernetes/kubernetes `pkg/proxy/ipvs/proxier.go` of the v1.31–v1.33 era:
//! the revision that has both `KUBE-IPVS-FILTER` (PR #108460) and `KUBE-IPVS-OUT-FILTER`
//! (PR #119791), `initOnly`, `OnServiceCIDRsChanged`, `conntrack.CleanStaleEntries`, the
//! `CanUseIPVSProxier` dummy-VS probe instead of the kernel-module check, and cleanup code still
//! inside proxier.go (before the split into cleanup.go). Files read for it:
//!
//! - `pkg/proxy/ipvs/proxier.go` — `NewProxier` (sysctls, masquerade mark), `iptablesJumpChain`,
//!   `iptablesChains`, `ipsetInfo`, `ipsetWithIptablesChain`, `syncProxyRules`,
//!   `writeIptablesRules`, `acceptIPVSTraffic`, `createAndLinkKubeChain`, `syncService`,
//!   `syncEndpoint`;
//! - `pkg/proxy/ipvs/ipset.go` — set names and their comment strings, `getComment`;
//! - `pkg/proxy/ipvs/ipset/ipset.go` — `createSet` arguments, `Entry.String`;
//! - `pkg/proxy/ipvs/util/ipvs.go` and `util/ipvs_linux.go` — `VirtualServer` flags and
//!   `toIPVSService`/`toIPVSDestination`;
//! - `pkg/proxy/topology.go` — `CategorizeEndpoints`;
//! - `pkg/proxy/util/localdetector.go` — `NewDetectLocalByCIDR`, `NewNoOpLocalDetector`;
//! - `pkg/proxy/ipvs/proxier_test.go` — the expectations ported in `tests.rs`.
//!
//! # What this function stands for
//!
//! [`KubeProxyIpvs::program`] is the end state of one `syncProxyRules()` on a fresh node: every
//! `ipset create`/`ipset add`, the `iptables-restore --noflush` input (plus the jump rules kube-proxy
//! inserts into built-in chains with `iptables -I`), every IPVS virtual and real server, the
//! addresses bound on `kube-ipvs0`, and the sysctls `NewProxier` sets.
//!
//! Rule lines are kube-proxy's restore input byte for byte (interleaved across chains in the
//! order `writeIptablesRules` writes them, mark spelled `0x00004000`), not `iptables-save`'s
//! normalised print-back; comparisons against the kernel must go through the kernel. Read back
//! with iptables 1.8.9 they differ only in spelling: `0x00004000` → `0x4000`, `--or-mark M` →
//! `--set-xmark M/M`, `--xor-mark M` → `--set-xmark M/0x0`, `! -s CIDR` moved before the `-m`
//! matches, `-j REJECT` → `-j REJECT --reject-with icmp-port-unreachable`, and chains listed in
//! name order.
//!
//! # Deliberate differences from a running kube-proxy
//!
//! - Go map iteration order (service ports, node IPs, sets) is replaced by input order / sorted
//!   order; only KUBE-IPVS-OUT-FILTER rule order and duplicate-VIP resolution could observe it.
//! - Kernel state a fresh node does not have is not modelled: graceful termination (weight 0),
//!   stale-service cleanup, `ipvs-exclude-cidrs`, `--ipvs-tcp-timeout` and friends.
//! - Topology hints are not in the cluster state, so `CategorizeEndpoints` never filters by zone.
//! - The jumps from built-in chains are `iptables -I` calls in kube-proxy; here they are `-A`
//!   lines on declared built-in chains, in the order the `-I` sequence leaves them.

mod endpoints;
mod graceful;
mod ipsets;
mod iptables;
mod services;

#[cfg(test)]
mod netns_tests;
#[cfg(test)]
mod tests;

use crate::programming::{Programming, RestoreMode, VirtualServer};
use crate::proxier::node_port_addresses::NodePortAddresses;
use crate::proxier::{conntrack_cleanup, Proxier, Resync};
use crate::scenario::cluster::{ClusterState, NodeContext, ServicePortInfo};
use crate::scenario::{IpFamily, ServiceType};
use ipsets::IpSets;
use ipvs_genl::{ServiceKey, Timeouts};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// kube-proxy's IPVS proxier as a pure function of the cluster state.
///
/// At the [`Release`](crate::proxier::Release) it models: by default the newest, where the
/// releases differ ([`crate::proxier::release`]) the one it is built for
/// (`kube-proxy-ipvs@v1.34`).
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeProxyIpvs {
    pub release: crate::proxier::Release,
}

impl Proxier for KubeProxyIpvs {
    fn name(&self) -> String {
        crate::release::builtin_label("kube-proxy-ipvs", self.release)
    }

    fn release(&self) -> crate::release::Release {
        self.release
    }

    fn programs_ipvs(&self) -> bool {
        true
    }

    fn program(&self, cluster: &ClusterState, node: &NodeContext) -> anyhow::Result<Programming> {
        let mut p = sync_proxy_rules(&Config::new(cluster, node), cluster, node);
        p.conntrack_cleanup = conntrack_cleanup::after_sync(None, cluster, self.release);
        Ok(p)
    }

    /// Every sync writes the whole state: the IPVS services with their real servers (those
    /// that left kept at weight 0 while they hold connections, [`graceful`]),
    /// `cleanLegacyService` for the rest, kube-ipvs0 with exactly the bound addresses, the
    /// sets refilled. The UDP conntrack cleanup depends on what changed.
    fn resync(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        node: &NodeContext,
    ) -> anyhow::Result<Programming> {
        let mut p = sync_proxy_rules(&Config::new(cluster, node), cluster, node);
        graceful::keep_draining(&mut p.ipvs, resync.ipvs);
        p.conntrack_cleanup = conntrack_cleanup::after_sync(resync.previous, cluster, self.release);
        Ok(p)
    }
}

/// `defaultScheduler` in proxier.go: used when `--ipvs-scheduler` is empty.
const DEFAULT_SCHEDULER: &str = "rr";

/// The kube-proxy settings that shape programming (the `NewProxier` arguments).
#[derive(Debug, Clone)]
struct Config {
    /// `proxier.ipFamily`: the family this proxier serves.
    family: IpFamily,
    /// `--masquerade-all`.
    masquerade_all: bool,
    /// The `--cluster-cidr` handed to `NewDetectLocalByCIDR` (detect-local-mode ClusterCIDR, the
    /// default in cmd/kube-proxy/app/server_linux.go); `None` is `NewNoOpLocalDetector()`.
    local_detector_cidr: Option<String>,
    /// `--ipvs-scheduler`, defaulted to `rr` as `NewProxier` does.
    scheduler: String,
    /// `--ipvs-strict-arp`.
    strict_arp: bool,
    /// `proxier.nodeIP`: used for the LoadBalancerSourceRanges "allowFromNode" check.
    node_ip: IpAddr,
    /// `iptables.HasRandomFully()`: MASQUERADE gets `--random-fully`.
    random_fully: bool,
    /// The `--iptables-masquerade-bit` mark, as kube-proxy prints it.
    masquerade_mark: String,
    /// NewProxier: "Configure IPVS timeouts if any one of the timeout parameters have been
    /// set. This is the equivalent to running ipvsadm --set".
    timeouts: Option<Timeouts>,
}

impl Config {
    fn new(cluster: &ClusterState, node: &NodeContext) -> Self {
        let options = &cluster.options;
        let scheduler = if options.ipvs_scheduler.is_empty() {
            DEFAULT_SCHEDULER.to_string()
        } else {
            options.ipvs_scheduler.clone()
        };
        Self {
            family: cluster.ip_family,
            masquerade_all: options.masquerade_all,
            // server_linux.go maps the cluster CIDRs by family and passes `cidrs[0].String()`,
            // i.e. the network address form of the prefix.
            local_detector_cidr: options
                .cluster_cidr
                .then(|| cluster.cluster_cidr.normalized().to_string()),
            scheduler,
            strict_arp: options.strict_arp,
            node_ip: node.node_ip,
            random_fully: options.random_fully,
            masquerade_mark: iptables::masquerade_mark(options.masquerade_bit),
            timeouts: options.ipvs_timeouts.any().then_some(Timeouts {
                tcp: options.ipvs_timeouts.tcp,
                tcp_fin: options.ipvs_timeouts.tcp_fin,
                udp: options.ipvs_timeouts.udp,
            }),
        }
    }
}

/// An LB VIP that the node itself must not reach because `proxier.nodeIP` is outside every
/// source range (`lbNoNodeAccessIPPortProtocolEntries` in proxier.go, issue #119656).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LbNoNodeAccess {
    ip: IpAddr,
    protocol: &'static str,
    port: u16,
}

/// What one `syncProxyRules` accumulates before writing iptables.
#[derive(Debug, Default)]
struct SyncState {
    sets: IpSets,
    /// Virtual servers in the order `syncProxyRules` creates them.
    virtual_servers: Vec<VirtualServer>,
    /// `activeIPVSServices`: a set in kube-proxy, so one kernel service per key.
    active_services: BTreeSet<ServiceKey>,
    /// `activeBindAddrs`: what ends up on kube-ipvs0 and in KUBE-IPVS-IPS.
    bind_addrs: BTreeSet<IpAddr>,
    lb_no_node_access: Vec<LbNoNodeAccess>,
}

/// `syncProxyRules` in proxier.go, minus everything that reads kernel state (a fresh node has
/// nothing bound, no sets, no virtual servers).
fn sync_proxy_rules(cfg: &Config, cluster: &ClusterState, node: &NodeContext) -> Programming {
    let mut state = SyncState {
        sets: IpSets::new(cfg.family),
        ..SyncState::default()
    };

    // nodeAddressSet = GetAllLocalAddressesExcept("kube-ipvs0"); netlink_linux.go's
    // isValidForSet drops loopback addresses, so do it here too in case the input has any.
    let node_addresses: BTreeSet<IpAddr> = node
        .local_addresses
        .iter()
        .copied()
        .filter(|ip| !ip.is_loopback())
        .collect();

    let proxied: Vec<&ServicePortInfo> = cluster
        .service_ports
        .iter()
        .filter(|sp| is_proxied(sp))
        .collect();

    // proxier.go only computes node IPs when some service has a NodePort: with nodePortAddresses
    // matching all (the default outside nftables mode) they are all of nodeAddressSet, else
    // `GetNodeIPs` (interface addresses inside the CIDRs) without loopback ones.
    let has_node_port = proxied
        .iter()
        .any(|sp| sp.node_port.is_some_and(|p| p != 0));
    let npa = NodePortAddresses::new(&cluster.options.node_port_addresses, node.node_ip);
    let node_ips: Vec<IpAddr> = if !has_node_port {
        Vec::new()
    } else if npa.match_all() {
        node_addresses.iter().copied().collect()
    } else {
        npa.node_ips(node)
            .into_iter()
            .filter(|ip| !ip.is_loopback())
            .collect()
    };

    let ctx = services::SyncContext {
        cfg,
        node,
        node_ips: &node_ips,
        node_addresses: &node_addresses,
    };
    for sp in proxied {
        services::sync_service_port(&ctx, &mut state, sp);
    }

    // "Set the KUBE-IPVS-IPS set to the activeBindAddrs".
    state.sets.set_ipvs_ips(&state.bind_addrs);

    let iptables = iptables::tables(cfg, &state.sets, &state.lb_no_node_access);
    Programming {
        ipsets: state.sets.to_model(),
        iptables,
        // RestoreAll(..., NoFlushTables, RestoreCounters): non-kube chains survive.
        restore_mode: RestoreMode::NoFlush,
        ipvs: state.virtual_servers,
        // "make sure dummy interface exists" on every sync, then "Remove superfluous addresses
        // from the dummy device": the device stays when its last address goes.
        ipvs_addresses: Some(state.bind_addrs.into_iter().collect()),
        sysctls: {
            let mut all = sysctls(cfg);
            all.extend(super::conntrack_sysctls::of(&cluster.options));
            all
        },
        ipvs_timeouts: cfg.timeouts,
        // syncProxyRules ends with `cleanLegacyService`: every IPVS service of this family it
        // did not program goes ("Not our family" skips the others), unless
        // `isIPInExcludeCIDRs`; each proxier gets all of `--ipvs-exclude-cidrs`.
        ipvs_delete_others: BTreeMap::from([(
            cfg.family,
            cluster
                .options
                .ipvs_exclude_cidrs
                .iter()
                .copied()
                .filter(|c| c.family() == cfg.family)
                .collect(),
        )]),
        ..Programming::default()
    }
}

/// Services kube-proxy keeps in its ServicePortMap: headless and ExternalName services are
/// dropped by the service change tracker (pkg/proxy/servicechangetracker.go).
fn is_proxied(sp: &ServicePortInfo) -> bool {
    sp.cluster_ip.is_some() && sp.type_ != ServiceType::ExternalName
}

/// The sysctls `NewProxier` ensures (proxier.go), keyed by dotted name.
///
/// `net/ipv4/vs/conn_reuse_mode` is deliberately absent: kube-proxy sets it to 0 only on kernels
/// in [4.1, 5.9) and leaves it as-is from `IPVSConnReuseModeFixedKernelVersion` = 5.9 on
/// (issue #93297); the suite targets kernels >= 5.9. The conntrack sysctls of
/// `platformSetup`/`conntrack.SetSysctls` (server_linux.go) are not the proxier's: the programming
/// adds the one a scenario sets (`tcpBeLiberal`, [`super::conntrack_sysctls`]); IPVS mode
/// writes no INVALID drop either way.
fn sysctls(cfg: &Config) -> BTreeMap<String, String> {
    let mut sysctls = BTreeMap::new();
    let mut set = |key: &str, value: &str| {
        sysctls.insert(key.to_string(), value.to_string());
    };
    set("net.ipv4.vs.conntrack", "1");
    set("net.ipv4.vs.expire_nodest_conn", "1");
    set("net.ipv4.vs.expire_quiescent_template", "1");
    set("net.ipv4.ip_forward", "1");
    if cfg.strict_arp {
        set("net.ipv4.conf.all.arp_ignore", "1");
        set("net.ipv4.conf.all.arp_announce", "2");
    }
    sysctls
}
