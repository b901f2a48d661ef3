//! Services as kube-apiserver stores them after defaulting (pkg/apis/core/v1/defaults.go
//! `SetDefaults_Service`) and IP family allocation (pkg/registry/core/service/storage/alloc.go
//! `initIPFamilyFields`).

use super::cluster::protocol;
use super::namespaced_meta;
use crate::scenario::model::{self, IpMode, ServiceType, SessionAffinity, TargetPort};
use crate::scenario::{
    affinity_timeout, externally_accessible, service_ip_families, IpFamily, IpFamilyPolicy,
    Scenario, TrafficPolicy,
};
use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// A scenario Service with what the API server decides about it when storing it.
#[derive(Debug, Clone)]
pub(super) struct Stored<'a> {
    pub svc: &'a model::Service,
    /// `spec.ipFamilies`, primary first; empty for ExternalName.
    pub families: Vec<IpFamily>,
    /// `spec.ipFamilyPolicy`; `None` for ExternalName.
    pub policy: Option<IpFamilyPolicy>,
    /// The scenario gives the Service explicit EndpointSlices, which replace its selector's.
    pub explicit_slices: bool,
}

impl Stored<'_> {
    /// `spec.selector` as stored: none when empty (the API server drops an empty map) or when
    /// the scenario's explicit slices stand for the Service's endpoints (see the module docs
    /// of [`super`]).
    pub fn selector(&self) -> Option<&BTreeMap<String, String>> {
        self.svc
            .spec
            .selector
            .as_ref()
            .filter(|sel| !sel.is_empty() && !self.explicit_slices)
    }

    /// Whether the EndpointSlice and endpoints controllers publish the Service's endpoints:
    /// it has a selector and is not ExternalName (both controllers' `syncService`).
    pub fn controller_managed(&self) -> bool {
        self.selector().is_some() && self.svc.spec.type_ != ServiceType::ExternalName
    }

    /// No ClusterIP (`clusterIP: None`): the controllers label its slices and Endpoints
    /// headless (`isServiceIPSet`).
    pub fn headless(&self) -> bool {
        self.svc.is_headless()
    }

    /// `metadata.labels`, as the scenario writes them; the controllers copy them onto the
    /// Service's slices and Endpoints (`setEndpointSliceLabels`: all but the reserved
    /// `kubernetes.io/service-name`, `endpointslice.kubernetes.io/managed-by` and
    /// `service.kubernetes.io/headless`, so `service.kubernetes.io/service-proxy-name` too;
    /// the endpoints controller's `Labels: service.Labels`).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.svc.labels.clone()
    }

    /// `metadata.annotations`, as the scenario writes them.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.svc.annotations.clone()
    }
}

/// Every Service of `s`, in file order, with its families and policy as stored.
pub(super) fn stored_services(s: &Scenario) -> Vec<Stored<'_>> {
    s.services
        .iter()
        .map(|svc| {
            let explicit_slices = s
                .endpoint_slices
                .iter()
                .any(|sl| sl.namespace == svc.namespace && sl.service == svc.name);
            let mut stored = Stored {
                svc,
                families: Vec::new(),
                policy: None,
                explicit_slices,
            };
            if svc.spec.type_ != ServiceType::ExternalName {
                let (families, policy) = families(s, &stored);
                stored.families = families;
                stored.policy = Some(policy);
            }
            stored
        })
        .collect()
}

/// `initIPFamilyFields`: the validated families (`scenario::service_ip_families`), except for
/// the special case of a headless Service without a selector, whose policy defaults to
/// RequireDualStack and which gets the other family even on a single-stack cluster.
fn families(s: &Scenario, stored: &Stored<'_>) -> (Vec<IpFamily>, IpFamilyPolicy) {
    let spec = &stored.svc.spec;
    if stored.headless() && stored.selector().is_none() {
        let policy = spec
            .ip_family_policy
            .unwrap_or(IpFamilyPolicy::RequireDualStack);
        let mut families = spec.ip_families.clone();
        if families.is_empty() {
            families.push(s.topology.service_cidr.primary_family());
        }
        if families.len() < 2 && policy != IpFamilyPolicy::SingleStack {
            families.push(families[0].other());
        }
        return (families, policy);
    }
    (
        service_ip_families(s, stored.svc),
        spec.ip_family_policy.unwrap_or_default(),
    )
}

fn family_name(f: IpFamily) -> String {
    f.to_string()
}

fn policy_name(p: IpFamilyPolicy) -> String {
    match p {
        IpFamilyPolicy::SingleStack => "SingleStack",
        IpFamilyPolicy::PreferDualStack => "PreferDualStack",
        IpFamilyPolicy::RequireDualStack => "RequireDualStack",
    }
    .to_owned()
}

fn type_name(t: ServiceType) -> String {
    match t {
        ServiceType::ClusterIP => "ClusterIP",
        ServiceType::NodePort => "NodePort",
        ServiceType::LoadBalancer => "LoadBalancer",
        ServiceType::ExternalName => "ExternalName",
    }
    .to_owned()
}

fn policy(p: TrafficPolicy) -> String {
    match p {
        TrafficPolicy::Cluster => "Cluster",
        TrafficPolicy::Local => "Local",
    }
    .to_owned()
}

/// The Service object:
/// - `clusterIP`/`clusterIPs` as the scenario lists them (`None` for a headless one), with
///   `ipFamilies` and `ipFamilyPolicy` as allocated;
/// - each port's protocol, and `targetPort` defaulting to `port`; `nodePort` only where the
///   type has one;
/// - `externalTrafficPolicy` defaulting to Cluster where the Service is externally accessible
///   (NodePort, LoadBalancer, or external IPs: `service.ExternallyAccessible`) and absent
///   elsewhere, where validation forbids it (`validateServiceExternalTrafficPolicy`);
/// - `internalTrafficPolicy` defaulting to Cluster; `sessionAffinity` to None, and
///   `sessionAffinityConfig.clientIP.timeoutSeconds` to 10800 under ClientIP;
/// - `allocateLoadBalancerNodePorts: true` and each ingress's `ipMode` defaulting to VIP for a
///   LoadBalancer.
pub(super) fn service(stored: &Stored<'_>) -> Service {
    let svc = stored.svc;
    let spec = &svc.spec;
    let lb = spec.type_ == ServiceType::LoadBalancer;
    let external_name = spec.type_ == ServiceType::ExternalName;
    let has_node_ports = matches!(
        spec.type_,
        ServiceType::NodePort | ServiceType::LoadBalancer
    );
    let cluster_ips: Option<Vec<String>> = if external_name {
        None
    } else if stored.headless() {
        Some(vec!["None".to_owned()])
    } else {
        Some(svc.cluster_ips().iter().map(|ip| ip.to_string()).collect())
    };
    let ports: Vec<ServicePort> = spec
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            protocol: Some(protocol(p.protocol)),
            port: i32::from(p.port),
            target_port: Some(match &p.target_port {
                None => IntOrString::Int(i32::from(p.port)),
                Some(TargetPort::Number(n)) => IntOrString::Int(i32::from(*n)),
                Some(TargetPort::Name(name)) => IntOrString::String(name.clone()),
            }),
            node_port: p.node_port.filter(|_| has_node_ports).map(i32::from),
            app_protocol: None,
        })
        .collect();
    let ingress: Vec<LoadBalancerIngress> = svc
        .status
        .load_balancer
        .ingress
        .iter()
        .map(|ing| LoadBalancerIngress {
            ip: Some(ing.ip.to_string()),
            ip_mode: match ing.ip_mode {
                Some(IpMode::Proxy) => Some("Proxy".to_owned()),
                Some(IpMode::VIP) => Some("VIP".to_owned()),
                None => lb.then(|| "VIP".to_owned()),
            },
            ..LoadBalancerIngress::default()
        })
        .collect();
    let annotations = stored.annotations();
    let mut metadata = namespaced_meta(&svc.namespace, &svc.name, stored.labels());
    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(type_name(spec.type_)),
            cluster_ip: cluster_ips.as_ref().and_then(|ips| ips.first().cloned()),
            cluster_ips,
            ip_families: (!stored.families.is_empty())
                .then(|| stored.families.iter().copied().map(family_name).collect()),
            ip_family_policy: stored.policy.map(policy_name),
            selector: stored.selector().cloned(),
            ports: (!ports.is_empty()).then_some(ports),
            external_ips: (!spec.external_ips.is_empty())
                .then(|| spec.external_ips.iter().map(|ip| ip.to_string()).collect()),
            external_traffic_policy: externally_accessible(svc)
                .then(|| policy(spec.external_traffic_policy.unwrap_or_default())),
            internal_traffic_policy: if external_name {
                spec.internal_traffic_policy.map(policy)
            } else {
                Some(policy(spec.internal_traffic_policy.unwrap_or_default()))
            },
            load_balancer_source_ranges: (!spec.load_balancer_source_ranges.is_empty()).then(
                || {
                    spec.load_balancer_source_ranges
                        .iter()
                        .map(|c| c.to_string())
                        .collect()
                },
            ),
            session_affinity: Some(
                match spec.session_affinity {
                    SessionAffinity::None => "None",
                    SessionAffinity::ClientIP => "ClientIP",
                }
                .to_owned(),
            ),
            session_affinity_config: affinity_timeout(svc).map(|timeout| SessionAffinityConfig {
                client_ip: Some(ClientIPConfig {
                    timeout_seconds: Some(i32::try_from(timeout).unwrap_or(i32::MAX)),
                }),
            }),
            health_check_node_port: spec.health_check_node_port.map(i32::from),
            allocate_load_balancer_node_ports: lb.then_some(true),
            ..ServiceSpec::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: (!ingress.is_empty()).then_some(ingress),
            }),
            conditions: None,
        }),
    }
}
