//! The per-service-port body of `syncProxyRules` (pkg/proxy/ipvs/proxier.go): ipset entries,
//! virtual servers with their real servers (`syncService` + `syncEndpoint`), kube-ipvs0 bindings.

use super::endpoints::{self, Categorized};
use super::ipsets::{self, SetName};
use super::{Config, LbNoNodeAccess, SyncState};
use crate::programming::VirtualServer;
use crate::scenario::cluster::{NodeContext, ServicePortInfo};
use crate::scenario::Protocol;
use ipvs_genl::{Service, ServiceFlags, ServiceKey};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Inputs shared by every service port of one sync.
pub(super) struct SyncContext<'a> {
    pub(super) cfg: &'a Config,
    pub(super) node: &'a NodeContext,
    /// NodePort addresses (empty when no service has a NodePort).
    pub(super) node_ips: &'a [IpAddr],
    /// `nodeAddressSet`: addresses on interfaces other than kube-ipvs0.
    pub(super) node_addresses: &'a BTreeSet<IpAddr>,
}

/// One iteration of the `for svcPortName, svcPort := range proxier.svcPortMap` loop.
pub(super) fn sync_service_port(
    ctx: &SyncContext<'_>,
    state: &mut SyncState,
    sp: &ServicePortInfo,
) {
    let Some(cluster_ip) = sp.cluster_ip else {
        return;
    };
    let cat = endpoints::categorize(sp, ctx.node);
    loop_back_entries(ctx, state, sp);
    cluster_ip_service(ctx, state, sp, &cat, cluster_ip);
    external_ip_services(ctx, state, sp, &cat);
    load_balancer_services(ctx, state, sp, &cat);
    if sp.node_port.is_some_and(|p| p != 0) && ctx.node_ips.is_empty() {
        // "Skip nodePort configuration since an error occurred when computing nodeAddresses or
        // nodeIPs": a `continue` that also skips the health-check node port below.
        return;
    }
    node_port_services(ctx, state, sp, &cat);
    health_check_node_port(state, sp);
}

/// "Handle traffic that loops back to the originator with SNAT": every local endpoint in the
/// endpoints map, whatever its conditions (the map holds not-ready ones too; proxier_test.go
/// expects `10.0.1.4,tcp:80,10.0.1.4` for a terminating, not-serving endpoint).
fn loop_back_entries(ctx: &SyncContext<'_>, state: &mut SyncState, sp: &ServicePortInfo) {
    for ep in sp.endpoints.iter().filter(|ep| ep.is_local(ctx.node)) {
        if ep.port == 0 {
            continue;
        }
        state.sets.insert(
            SetName::LoopBack,
            ipsets::ip_port_ip(ep.ip, sp.protocol, ep.port, ep.ip),
        );
    }
}

/// ClusterIP: KUBE-CLUSTER-IP entry, VS bound to kube-ipvs0, real servers per
/// internalTrafficPolicy ("ExternalTrafficPolicy only works for NodePort and external LB traffic,
/// does not affect ClusterIP").
fn cluster_ip_service(
    ctx: &SyncContext<'_>,
    state: &mut SyncState,
    sp: &ServicePortInfo,
    cat: &Categorized<'_>,
    cluster_ip: IpAddr,
) {
    state.sets.insert(
        SetName::ClusterIp,
        ipsets::ip_port(cluster_ip, sp.protocol, sp.port),
    );
    let service = virtual_server(ctx.cfg, sp, cluster_ip, sp.port);
    add_virtual_server(
        state,
        service,
        Some(cluster_ip),
        cat,
        sp.internal_policy_local,
    );
}

/// ExternalIPs: KUBE-EXTERNAL-IP (eTP Cluster, "We have to SNAT packets to external IPs") or
/// KUBE-EXTERNAL-IP-LOCAL (eTP Local); bound unless the address already is on another interface.
fn external_ip_services(
    ctx: &SyncContext<'_>,
    state: &mut SyncState,
    sp: &ServicePortInfo,
    cat: &Categorized<'_>,
) {
    for &ip in &sp.external_ips {
        let set = if sp.external_policy_local {
            SetName::ExternalIpLocal
        } else {
            SetName::ExternalIp
        };
        state
            .sets
            .insert(set, ipsets::ip_port(ip, sp.protocol, sp.port));
        let service = virtual_server(ctx.cfg, sp, ip, sp.port);
        // "We must not add the address to the dummy device if it exist on another interface".
        let bind = (!ctx.node_addresses.contains(&ip)).then_some(ip);
        add_virtual_server(state, service, bind, cat, sp.external_policy_local);
    }
}

/// LoadBalancer VIPs (ipMode VIP only; Proxy-mode ingress is dropped upstream as in
/// pkg/proxy/serviceport.go): KUBE-LOAD-BALANCER (+ -LOCAL for eTP Local), the source-range sets,
/// and the VS.
fn load_balancer_services(
    ctx: &SyncContext<'_>,
    state: &mut SyncState,
    sp: &ServicePortInfo,
    cat: &Categorized<'_>,
) {
    for &ip in &sp.load_balancer_vips {
        let entry = ipsets::ip_port(ip, sp.protocol, sp.port);
        state.sets.insert(SetName::LoadBalancer, entry.clone());
        if sp.external_policy_local {
            state.sets.insert(SetName::LoadBalancerLocal, entry.clone());
        }
        if !sp.load_balancer_source_ranges.is_empty() {
            source_ranges(ctx, state, sp, ip, entry);
        }
        let service = virtual_server(ctx.cfg, sp, ip, sp.port);
        let bind = (!ctx.node_addresses.contains(&ip)).then_some(ip);
        add_virtual_server(state, service, bind, cat, sp.external_policy_local);
    }
}

/// loadBalancerSourceRanges of one LB VIP: KUBE-LOAD-BALANCER-FW, one SOURCE-CIDR entry per range,
/// and either the SOURCE-IP entry (the node IP is inside a range: "ip route rule was added to
/// intercept request to loadbalancer vip from the loadbalancer's backend hosts") or a
/// KUBE-IPVS-OUT-FILTER drop (it is not: issue #119656).
fn source_ranges(
    ctx: &SyncContext<'_>,
    state: &mut SyncState,
    sp: &ServicePortInfo,
    ip: IpAddr,
    entry: String,
) {
    state.sets.insert(SetName::LoadBalancerFw, entry);
    let mut allow_from_node = false;
    for &cidr in &sp.load_balancer_source_ranges {
        state.sets.insert(
            SetName::LoadBalancerSourceCidr,
            ipsets::ip_port_net(ip, sp.protocol, sp.port, cidr),
        );
        if cidr.contains(ctx.cfg.node_ip) {
            allow_from_node = true;
        }
    }
    if allow_from_node {
        state.sets.insert(
            SetName::LoadBalancerSourceIp,
            ipsets::ip_port_ip(ip, sp.protocol, sp.port, ip),
        );
    } else {
        state.lb_no_node_access.push(LbNoNodeAccess {
            ip,
            protocol: sp.protocol.lower(),
            port: sp.port,
        });
    }
}

/// NodePort: the per-protocol sets ("Nodeports need SNAT, unless they're local") and one VS per
/// node IP, never bound ("There is no need to bind Node IP to dummy interface").
fn node_port_services(
    ctx: &SyncContext<'_>,
    state: &mut SyncState,
    sp: &ServicePortInfo,
    cat: &Categorized<'_>,
) {
    let Some(node_port) = sp.node_port.filter(|&p| p != 0) else {
        return;
    };
    let (set, local_set, entries) = match sp.protocol {
        Protocol::Tcp => (
            SetName::NodePortTcp,
            SetName::NodePortLocalTcp,
            vec![ipsets::port(node_port)],
        ),
        Protocol::Udp => (
            SetName::NodePortUdp,
            SetName::NodePortLocalUdp,
            vec![ipsets::port(node_port)],
        ),
        // "Since hash ip:port is used for SCTP, all the nodeIPs to be used in the SCTP ipset
        // entries."
        Protocol::Sctp => (
            SetName::NodePortSctp,
            SetName::NodePortLocalSctp,
            ctx.node_ips
                .iter()
                .map(|&ip| ipsets::ip_port(ip, Protocol::Sctp, node_port))
                .collect(),
        ),
    };
    for entry in &entries {
        state.sets.insert(set, entry.clone());
    }
    if sp.external_policy_local {
        for entry in entries {
            state.sets.insert(local_set, entry);
        }
    }
    for &node_ip in ctx.node_ips {
        let service = virtual_server(ctx.cfg, sp, node_ip, node_port);
        add_virtual_server(state, service, None, cat, sp.external_policy_local);
    }
}

/// `svcInfo.HealthCheckNodePort() != 0`: KUBE-HEALTH-CHECK-NODE-PORT (accepted in filter
/// KUBE-NODE-PORT, exempted from KUBE-IPVS-FILTER).
fn health_check_node_port(state: &mut SyncState, sp: &ServicePortInfo) {
    if let Some(port) = sp.health_check_node_port.filter(|&p| p != 0) {
        state
            .sets
            .insert(SetName::HealthCheckNodePort, ipsets::port(port));
    }
}

/// The `utilipvs.VirtualServer` kube-proxy builds for every VS of a service port, converted as
/// `toIPVSService` (util/ipvs_linux.go) does: netmask 0xffffffff (IPv4) or 128 (IPv6), no
/// persistence engine.
fn virtual_server(cfg: &Config, sp: &ServicePortInfo, addr: IpAddr, port: u16) -> Service {
    let mut flags = 0;
    let mut timeout = 0;
    // "Set session affinity flag and timeout for IPVS service": FlagPersistent = 0x1.
    if let Some(seconds) = sp.session_affinity_timeout_seconds {
        flags |= ServiceFlags::PERSISTENT;
        timeout = seconds;
    }
    // "Set the source hash flag needed for the distribution method mh": FlagSourceHash = 0x10,
    // which is IP_VS_SVC_F_SCHED2 (mh-port).
    if cfg.scheduler == "mh" {
        flags |= ServiceFlags::SCHED2;
    }
    Service {
        key: ServiceKey::Addr {
            protocol: ipvs_protocol(sp.protocol),
            addr,
            port,
        },
        scheduler: cfg.scheduler.clone(),
        flags: ServiceFlags(flags),
        timeout,
        netmask_prefix: crate::scenario::IpFamily::of(addr).host_prefix_len(),
        odd_netmask: None,
        pe_name: None,
    }
}

fn ipvs_protocol(protocol: Protocol) -> ipvs_genl::Protocol {
    match protocol {
        Protocol::Tcp => ipvs_genl::Protocol::Tcp,
        Protocol::Udp => ipvs_genl::Protocol::Udp,
        Protocol::Sctp => ipvs_genl::Protocol::Sctp,
    }
}

/// `syncService` (+ `activeBindAddrs.Insert`) followed by `syncEndpoint`.
///
/// kube-proxy tracks active services in a string set, so a key produced twice (two service ports
/// claiming the same VIP:port) is one kernel service; its final state there depends on Go map
/// iteration order, here the first one wins.
fn add_virtual_server(
    state: &mut SyncState,
    service: Service,
    bind: Option<IpAddr>,
    cat: &Categorized<'_>,
    only_node_local: bool,
) {
    if let Some(addr) = bind {
        state.bind_addrs.insert(addr);
    }
    if !state.active_services.insert(service.key) {
        return;
    }
    let destinations = endpoints::real_servers(endpoints::selected(cat, only_node_local));
    state.virtual_servers.push(VirtualServer {
        service,
        destinations,
    });
}
