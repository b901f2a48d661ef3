//! From a scenario to what a proxier sees: the service ports and endpoints that kube-proxy's
//! change trackers would hold (pkg/proxy/serviceport.go, pkg/proxy/endpointslicecache.go), with
//! endpoints derived the way the EndpointSlice controller would when the file gives none.

use super::cidr::IpCidr;
use super::family::{of_family, IpFamily};
use super::model::{
    Endpoint, EndpointConditions, EndpointSlice, IpMode, Pod, Scenario, Service, ServicePort,
    ServiceType, SessionAffinity, TargetPort, TrafficPolicy,
};
use super::validate::{named_port, selected_pods};
use crate::scenario::cluster::{
    ClusterState, EndpointInfo, ListedEndpoint, NodeContext, NodeInfo, ServicePortInfo,
};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The API server's default for `sessionAffinityConfig.clientIP.timeoutSeconds`.
const DEFAULT_AFFINITY_TIMEOUT_SECONDS: u32 = 10800;

/// The cluster as every node's proxier of the cluster's first family sees it (IPv4, or IPv6
/// in an IPv6-only cluster), with the IPv6 proxier's view in `ipv6` on a dual-stack cluster.
pub fn cluster_state(s: &Scenario) -> ClusterState {
    let primary = s.topology.cluster_cidr.primary_family();
    let mut state = family_state(s, primary)
        .expect("validation gives every node an address and podCIDR of each cluster family");
    if primary == IpFamily::Ipv4 {
        state.ipv6 = family_state(s, IpFamily::Ipv6).map(Box::new);
    }
    state
}

/// The cluster as every node's proxier of `family` sees it, alone; `None` if the cluster has
/// no range of that family.
fn family_state(s: &Scenario, family: IpFamily) -> Option<ClusterState> {
    let topo = &s.topology;
    let cluster_cidr = topo.cluster_cidr.of(family)?;
    let service_cidr = topo.service_cidr.of(family)?;
    let nodes = topo
        .nodes
        .iter()
        .map(|n| {
            Some(NodeInfo {
                name: n.name.clone(),
                ip: n.ip.of(family)?,
                pod_cidr: n.pod_cidr.of(family)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ClusterState {
        ip_family: family,
        cluster_cidr,
        service_cidr,
        nodes,
        service_ports: service_ports(s, family),
        options: s.proxier.clone(),
        ipv6: None,
        idle: false,
    })
}

/// The node `node` as its own proxier of the cluster's first family sees it, with its IPv6
/// proxier's view in `ipv6` on a dual-stack node; `None` if there is no such node.
pub fn node_context(s: &Scenario, node: &str) -> Option<NodeContext> {
    let primary = s.topology.cluster_cidr.primary_family();
    let mut ctx = node_context_for(s, node, primary)?;
    if primary == IpFamily::Ipv4 {
        ctx.ipv6 = node_context_for(s, node, IpFamily::Ipv6).map(Box::new);
    }
    Some(ctx)
}

/// The node `node` as its own proxier of `family` sees it; `None` if there is no such node or it
/// has no address of that family.
fn node_context_for(s: &Scenario, node: &str, family: IpFamily) -> Option<NodeContext> {
    let n = s.topology.nodes.iter().find(|n| n.name == node)?;
    let ip = n.ip.of(family)?;
    let pod_cidr = n.pod_cidr.of(family)?;
    // The addresses the topology engine puts on eth0 (ip and secondaryIPs), flannel.1 (the
    // podCIDR's network address, as flannel assigns its VTEP) and cni0 (the podCIDR's first
    // host, the pods' gateway). IPv6 link-local addresses are left out, as kube-proxy's
    // `isValidForSet` filters them (pkg/proxy/ipvs/netlink_linux.go).
    let mut local_addresses: Vec<IpAddr> = [Some(ip), Some(pod_cidr.network()), pod_cidr.nth(1)]
        .into_iter()
        .flatten()
        .chain(
            n.secondary_ips
                .iter()
                .copied()
                .filter(|a| IpFamily::of(*a) == family),
        )
        .collect();
    local_addresses.sort();
    local_addresses.dedup();
    Some(NodeContext {
        name: n.name.clone(),
        node_ip: ip,
        pod_cidr,
        local_addresses,
        ipv6: None,
    })
}

fn service_ports(s: &Scenario, family: IpFamily) -> Vec<ServicePortInfo> {
    let mut out: Vec<ServicePortInfo> = s
        .services
        .iter()
        .filter_map(|svc| proxied_cluster_ip(svc, family).map(|ip| (svc, ip)))
        .flat_map(|(svc, ip)| {
            svc.spec
                .ports
                .iter()
                .map(move |port| service_port_info(s, svc, family, ip, port))
        })
        .collect();
    out.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.port_name, a.protocol, a.port).cmp(&(
            &b.namespace,
            &b.name,
            &b.port_name,
            b.protocol,
            b.port,
        ))
    });
    out
}

/// The ClusterIP of `family` of a service kube-proxy programs; `None` for those it skips and
/// those with no ClusterIP of the family (`GetClusterIPByFamily` is empty,
/// `serviceToServiceMap`). It skips those its Service informer never delivers (labelled
/// `service.kubernetes.io/service-proxy-name`, any value: another proxy's; headless ones,
/// field selector `spec.clusterIP!=None`: cmd/kube-proxy/app/server.go) and those
/// `ShouldSkipService` refuses (no ClusterIP, ExternalName: pkg/proxy/util/utils.go). A
/// headless Service's slices, labelled `service.kubernetes.io/headless`, its EndpointSlice
/// informer never delivers either; kpct reads a slice only through its Service.
fn proxied_cluster_ip(svc: &Service, family: IpFamily) -> Option<IpAddr> {
    if svc.spec.type_ == ServiceType::ExternalName || svc.is_for_another_proxy() {
        return None;
    }
    svc.cluster_ips()
        .into_iter()
        .find(|ip| IpFamily::of(*ip) == family)
}

/// `apiservice.ExternallyAccessible`: the condition under which externalTrafficPolicy applies.
pub(crate) fn externally_accessible(svc: &Service) -> bool {
    match svc.spec.type_ {
        ServiceType::NodePort | ServiceType::LoadBalancer => true,
        ServiceType::ClusterIP => !svc.spec.external_ips.is_empty(),
        ServiceType::ExternalName => false,
    }
}

fn service_port_info(
    s: &Scenario,
    svc: &Service,
    family: IpFamily,
    cluster_ip: IpAddr,
    port: &ServicePort,
) -> ServicePortInfo {
    let spec = &svc.spec;
    let listed = listed_endpoints(s, svc, family, port);
    let exposed_on_nodes = matches!(
        spec.type_,
        ServiceType::NodePort | ServiceType::LoadBalancer
    );
    let external_policy_local =
        externally_accessible(svc) && spec.external_traffic_policy == Some(TrafficPolicy::Local);
    let needs_health_check = spec.type_ == ServiceType::LoadBalancer && external_policy_local;
    ServicePortInfo {
        namespace: svc.namespace.clone(),
        name: svc.name.clone(),
        port_name: port.name.clone().unwrap_or_default(),
        type_: spec.type_,
        protocol: port.protocol,
        cluster_ip: Some(cluster_ip),
        port: port.port,
        node_port: port.node_port.filter(|_| exposed_on_nodes),
        // newBaseServiceInfo filters these to the proxier's family.
        external_ips: of_family(&spec.external_ips, family),
        load_balancer_vips: of_family(&load_balancer_vips(svc), family),
        load_balancer_source_ranges: source_ranges(svc, family),
        external_policy_local,
        internal_policy_local: spec.internal_traffic_policy == Some(TrafficPolicy::Local),
        session_affinity_timeout_seconds: affinity_timeout(svc),
        health_check_node_port: spec.health_check_node_port.filter(|_| needs_health_check),
        endpoints: newest_cache(&listed),
        headless_label: svc.labels.contains_key(LABEL_HEADLESS),
        listed,
    }
}

/// The Service's `loadBalancerSourceRanges` of `family`, as `newBaseServiceInfo`
/// (pkg/proxy/serviceport.go) keeps them: none at all when one of them is a zero-length prefix
/// (`0.0.0.0/0`, `::/0`): "zero-masked cidr means \"allow any\", which same as the empty
/// loadBalancerSourceRanges" (`slices.ContainsFunc(cidrs, proxyutil.IsZeroCIDR)` clears that
/// family's list; the other family keeps its own).
fn source_ranges(svc: &Service, family: IpFamily) -> Vec<IpCidr> {
    let ranges: Vec<IpCidr> = svc
        .spec
        .load_balancer_source_ranges
        .iter()
        .filter(|c| c.family() == family)
        .copied()
        .collect();
    if ranges.iter().any(IpCidr::is_zero) {
        return Vec::new();
    }
    ranges
}

/// Ingress IPs with `ipMode: Proxy` go to a proxy that forwards to the nodes itself, so
/// kube-proxy must not capture them (KEP-1860).
fn load_balancer_vips(svc: &Service) -> Vec<IpAddr> {
    if svc.spec.type_ != ServiceType::LoadBalancer {
        return Vec::new();
    }
    svc.status
        .load_balancer
        .ingress
        .iter()
        .filter(|ing| ing.ip_mode != Some(IpMode::Proxy))
        .map(|ing| ing.ip)
        .collect()
}

/// The ClientIP affinity timeout, defaulted as the API server does; `None` without affinity.
pub(crate) fn affinity_timeout(svc: &Service) -> Option<u32> {
    (svc.spec.session_affinity == SessionAffinity::ClientIP).then(|| {
        svc.spec
            .session_affinity_config
            .as_ref()
            .map_or(DEFAULT_AFFINITY_TIMEOUT_SECONDS, |c| {
                c.client_ip.timeout_seconds
            })
    })
}

/// `service.kubernetes.io/headless`: every kube-proxy's EndpointSlice informer filters slices
/// carrying it (`noHeadlessEndpoints`, cmd/kube-proxy/app/server.go), v1.35 and earlier their
/// Service informer too.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";

/// Every endpoint of one service port the proxier of `family` is handed, in the slices' order,
/// copies of one address included. Explicit slices replace the selector, as a selector-less
/// Service with hand-made EndpointSlices does in a real cluster; the proxier reads only slices
/// of its address type (`EndpointSliceUpdate`, pkg/proxy/endpointschangetracker.go), and none
/// labelled headless (no release's informer delivers them).
fn listed_endpoints(
    s: &Scenario,
    svc: &Service,
    family: IpFamily,
    port: &ServicePort,
) -> Vec<ListedEndpoint> {
    let slices: Vec<&EndpointSlice> = s
        .endpoint_slices
        .iter()
        .filter(|sl| sl.namespace == svc.namespace && sl.service == svc.name)
        .collect();
    if slices.is_empty() {
        return selector_endpoints(s, svc, family, port)
            .into_iter()
            .map(|endpoint| ListedEndpoint {
                endpoint,
                proxy_name_slice: false,
            })
            .collect();
    }
    let delivered: Vec<&EndpointSlice> = slices
        .into_iter()
        .filter(|sl| sl.address_type == family && !sl.labels.contains_key(LABEL_HEADLESS))
        .collect();
    slice_endpoints(s, &delivered, port)
}

/// The endpoint set kube-proxy v1.36 and later keep of `listed` (`addEndpoints`,
/// pkg/proxy/endpointslicecache.go l.247 in v1.37.2: `if _, exists := endpointSet[key]; !exists
/// || !terminating`: a later copy of an address replaces an earlier one unless it is
/// terminating), keyed and sorted by `IP:port`.
pub fn newest_cache(listed: &[ListedEndpoint]) -> Vec<EndpointInfo> {
    let mut by_addr: BTreeMap<(IpAddr, u16), EndpointInfo> = BTreeMap::new();
    for l in listed {
        let ep = &l.endpoint;
        let key = (ep.ip, ep.port);
        if !by_addr.contains_key(&key) || !ep.terminating {
            by_addr.insert(key, ep.clone());
        }
    }
    by_addr.into_values().collect()
}

/// kube-proxy joins a slice port to a service port by port name and protocol, never by number.
fn slice_endpoints(
    s: &Scenario,
    slices: &[&EndpointSlice],
    port: &ServicePort,
) -> Vec<ListedEndpoint> {
    let wanted = port.name.as_deref().unwrap_or("");
    slices
        .iter()
        .flat_map(|slice| {
            let proxy_name_slice = slice
                .labels
                .contains_key(super::model::LABEL_SERVICE_PROXY_NAME);
            slice
                .ports
                .iter()
                .filter(|p| {
                    p.name.as_deref().unwrap_or("") == wanted && p.protocol == port.protocol
                })
                .flat_map(move |p| {
                    slice.endpoints.iter().filter_map(move |ep| {
                        endpoint_info(s, ep, p.port).map(|endpoint| ListedEndpoint {
                            endpoint,
                            proxy_name_slice,
                        })
                    })
                })
        })
        .collect()
}

/// Only the first address counts, as in kube-proxy (addresses of one endpoint are fungible).
fn endpoint_info(s: &Scenario, ep: &Endpoint, port: u16) -> Option<EndpointInfo> {
    let ip = *ep.addresses.first()?;
    let (ready, serving, terminating) = conditions(&ep.conditions);
    let node_name = ep.node_name.clone().or_else(|| node_of_pod_ip(s, ip));
    Some(EndpointInfo {
        ip,
        port,
        node_name,
        ready,
        serving,
        terminating,
    })
}

/// The node of the pod owning `ip`: an explicit endpoint's default `nodeName`.
pub(crate) fn node_of_pod_ip(s: &Scenario, ip: IpAddr) -> Option<String> {
    s.topology
        .pods
        .iter()
        .find(|pod| pod.ip.all().any(|a| a == ip))
        .map(|pod| pod.node.clone())
}

/// An endpoint's (ready, serving, terminating) as kube-proxy reads them: a missing `ready` or
/// `serving` is true and a missing `terminating` false, each on its own
/// (`EndpointSliceCache.addEndpoints`, pkg/proxy/endpointslicecache.go: `ready :=
/// endpoint.Conditions.Ready == nil || *endpoint.Conditions.Ready`, likewise `serving`, and
/// `terminating := endpoint.Conditions.Terminating != nil && *…`), as discovery/v1
/// `EndpointConditions` says a nil value "should be interpreted as" true (ready, serving) and
/// false (terminating).
pub(crate) fn conditions(c: &EndpointConditions) -> (bool, bool, bool) {
    let ready = c.ready.unwrap_or(true);
    let serving = c.serving.unwrap_or(true);
    let terminating = c.terminating.unwrap_or(false);
    (ready, serving, terminating)
}

/// What the EndpointSlice controller publishes for a selector, in the slice of `family`: every
/// selected pod with an address of that family, ready, at the numeric targetPort or at the
/// container port the named targetPort resolves to on that pod.
fn selector_endpoints(
    s: &Scenario,
    svc: &Service,
    family: IpFamily,
    port: &ServicePort,
) -> Vec<EndpointInfo> {
    selected_pods(s, svc)
        .into_iter()
        .filter_map(|pod| {
            let ip = pod.ip.of(family)?;
            let target = target_port(pod, port)?;
            Some(EndpointInfo {
                ip,
                port: target,
                node_name: Some(pod.node.clone()),
                ready: true,
                serving: true,
                terminating: false,
            })
        })
        .collect()
}

/// The port `port` sends to on `pod`: its numeric targetPort (`port` when absent), or the
/// container port its named targetPort resolves to there (`FindPort`); `None` when the name
/// resolves to nothing on the pod.
pub(crate) fn target_port(pod: &Pod, port: &ServicePort) -> Option<u16> {
    match &port.target_port {
        None => Some(port.port),
        Some(TargetPort::Number(n)) => Some(*n),
        Some(TargetPort::Name(name)) => named_port(pod, name, port.protocol),
    }
}

#[cfg(test)]
mod tests;
