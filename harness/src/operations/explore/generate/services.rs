//! Generated Services and their explicit EndpointSlices.

use super::addresses::{cluster_ip, external_ip, load_balancer_ip, source_ranges};
use super::{long_name, Case, POD_PORTS, SCTP_POD_PORT};
use crate::scenario::{selected_pods, service_ip_families};
use crate::scenario::{
    ClientIpConfig, Endpoint, EndpointConditions, EndpointPort, EndpointSlice, IpFamily,
    IpFamilyPolicy, IpMode, LoadBalancerIngress, LoadBalancerStatus, Pod, Protocol, Scenario,
    Service, ServicePort, ServiceSpec, ServiceStatus, ServiceType, SessionAffinity,
    SessionAffinityConfig, TargetPort, TrafficPolicy, LABEL_SERVICE_PROXY_NAME,
};
use std::collections::BTreeMap;

/// `service.kubernetes.io/headless` (pkg/proxy/apis `LabelHeadless`... `v1.IsHeadlessService`'s
/// label): kube-proxy v1.35 and earlier filter Services carrying it, every release filters
/// EndpointSlices carrying it (cmd/kube-proxy/app/server.go).
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";

/// An endpoint's conditions, as the EndpointSlice API writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Condition {
    Ready,
    ServingTerminating,
    Terminating,
    NotReady,
}

impl Condition {
    pub fn conditions(self) -> EndpointConditions {
        let (ready, serving, terminating) = match self {
            Condition::Ready => (None, None, None),
            Condition::ServingTerminating => (Some(false), Some(true), Some(true)),
            Condition::Terminating => (Some(false), Some(false), Some(true)),
            Condition::NotReady => (Some(false), Some(false), None),
        };
        EndpointConditions {
            ready,
            serving,
            terminating,
        }
    }
}

impl Case<'_> {
    pub fn condition(&mut self) -> Condition {
        self.choose(
            "endpoint",
            &[
                ("ready", Condition::Ready),
                ("serving-terminating", Condition::ServingTerminating),
                ("terminating", Condition::Terminating),
                ("not-ready", Condition::NotReady),
            ],
        )
    }

    /// Service `i` of `state` (the scenario so far) and its explicit slices, if it has any.
    pub fn service(&mut self, state: &Scenario, i: usize) -> (Service, Vec<EndpointSlice>) {
        let app = self.d.below(self.apps.len());
        let namespace = self.apps[app].namespace.clone();
        let long = namespace != "default";
        let name = if long {
            long_name(&format!("s{i}"))
        } else {
            format!("s{i}")
        };
        let type_ = self.choose(
            "type",
            &[
                ("clusterip", Kind::ClusterIP),
                ("nodeport", Kind::NodePort),
                ("loadbalancer", Kind::LoadBalancer),
                ("headless", Kind::Headless),
                ("externalname", Kind::ExternalName),
            ],
        );
        let families = self.service_families();
        // kpct refuses a named targetPort no pod resolves (a typo, most often).
        let label = self.apps[app].label.clone();
        let has_pods = state
            .topology
            .pods
            .iter()
            .any(|p| p.namespace == namespace && p.labels.get("app") == Some(&label));
        let ports = self.ports(type_, long, has_pods);
        let mut spec = ServiceSpec {
            type_: type_.api_type(),
            cluster_ip: None,
            cluster_ips: Vec::new(),
            ip_families: Vec::new(),
            ip_family_policy: None,
            selector: None,
            ports,
            external_ips: Vec::new(),
            external_traffic_policy: None,
            internal_traffic_policy: None,
            load_balancer_source_ranges: Vec::new(),
            session_affinity: SessionAffinity::None,
            session_affinity_config: None,
            health_check_node_port: None,
        };
        let mut status = ServiceStatus::default();
        let mut labels = BTreeMap::new();
        if type_ == Kind::ExternalName {
            return (
                Service {
                    name,
                    namespace,
                    labels,
                    annotations: BTreeMap::new(),
                    spec,
                    status,
                },
                Vec::new(),
            );
        }
        spec.selector = Some(BTreeMap::from([(
            "app".to_string(),
            self.apps[app].label.clone(),
        )]));
        match type_ {
            Kind::Headless => {
                spec.cluster_ip = Some("None".into());
                if self.families.v4 && self.families.v6 {
                    spec.ip_families = families.families.clone();
                    spec.ip_family_policy = families.policy;
                }
            }
            _ => {
                let ips: Vec<String> = families
                    .families
                    .iter()
                    .map(|f| cluster_ip(*f, i).to_string())
                    .collect();
                spec.cluster_ip = ips.first().cloned();
                if ips.len() > 1 || families.policy.is_some() {
                    spec.cluster_ips = ips;
                    spec.ip_families = families.families.clone();
                    spec.ip_family_policy = families.policy;
                }
            }
        }
        let external = matches!(type_, Kind::NodePort | Kind::LoadBalancer);
        if type_ != Kind::Headless && self.chance("external-ips") {
            spec.external_ips = families
                .families
                .iter()
                .map(|f| external_ip(*f, i))
                .collect();
        }
        if type_ == Kind::LoadBalancer {
            let proxy = self.chance("ipmode-proxy");
            status.load_balancer = LoadBalancerStatus {
                ingress: families
                    .families
                    .iter()
                    .map(|f| LoadBalancerIngress {
                        ip: load_balancer_ip(*f, i),
                        ip_mode: proxy.then_some(IpMode::Proxy),
                    })
                    .collect(),
            };
            if self.chance("source-ranges") {
                let which = self.d.below(3);
                spec.load_balancer_source_ranges = families
                    .families
                    .iter()
                    .map(|f| source_ranges(*f)[which])
                    .collect();
            }
        }
        if (external || !spec.external_ips.is_empty()) && self.chance("etp-local") {
            spec.external_traffic_policy = Some(TrafficPolicy::Local);
            if type_ == Kind::LoadBalancer && self.chance("health-check") {
                spec.health_check_node_port = Some(32000 + i as u16);
            }
        }
        if type_ != Kind::Headless && self.chance("itp-local") {
            spec.internal_traffic_policy = Some(TrafficPolicy::Local);
        }
        if type_ != Kind::Headless && self.chance("affinity") {
            spec.session_affinity = SessionAffinity::ClientIP;
            // Short timeouts let a `waitSeconds` step outlast them; long ones never run out.
            let timeout = *self.d.pick(&[1, 2, 10800]);
            spec.session_affinity_config = Some(SessionAffinityConfig {
                client_ip: ClientIpConfig {
                    timeout_seconds: timeout,
                },
            });
        }
        if self.chance("label.proxy-name") {
            labels.insert(LABEL_SERVICE_PROXY_NAME.to_string(), "other-proxy".into());
        }
        if type_ != Kind::Headless && self.chance("label.headless") {
            labels.insert(LABEL_HEADLESS.to_string(), String::new());
        }
        let service = Service {
            name,
            namespace,
            labels,
            annotations: BTreeMap::new(),
            spec,
            status,
        };
        let slices = if self.chance("explicit-slices") {
            let pods: Vec<Pod> = selected_pods(state, &service)
                .into_iter()
                .cloned()
                .collect();
            self.slices(state, &service, &pods)
        } else {
            Vec::new()
        };
        (service, slices)
    }

    /// The families of a Service (primary first) and the policy written, in this cluster.
    fn service_families(&mut self) -> ServiceFamilies {
        let f = self.families;
        if !(f.v4 && f.v6) {
            return ServiceFamilies {
                families: f.list(),
                policy: None,
            };
        }
        match self.d.below(4) {
            0 => ServiceFamilies {
                families: vec![IpFamily::Ipv4],
                policy: None,
            },
            1 => ServiceFamilies {
                families: vec![IpFamily::Ipv6],
                policy: Some(IpFamilyPolicy::SingleStack),
            },
            2 => ServiceFamilies {
                families: vec![IpFamily::Ipv4, IpFamily::Ipv6],
                policy: Some(IpFamilyPolicy::PreferDualStack),
            },
            _ => ServiceFamilies {
                families: vec![IpFamily::Ipv6, IpFamily::Ipv4],
                policy: Some(IpFamilyPolicy::RequireDualStack),
            },
        }
    }

    fn ports(&mut self, type_: Kind, long: bool, named_targets: bool) -> Vec<ServicePort> {
        let count = self.choose("ports", &[("1", 1), ("2", 2)]);
        let mut used: Vec<(u16, Protocol)> = Vec::new();
        (0..count)
            .map(|j| {
                let protocol = if self.sctp {
                    self.choose(
                        "protocol",
                        &[
                            ("tcp", Protocol::Tcp),
                            ("udp", Protocol::Udp),
                            ("sctp", Protocol::Sctp),
                        ],
                    )
                } else {
                    self.choose(
                        "protocol",
                        &[("tcp", Protocol::Tcp), ("udp", Protocol::Udp)],
                    )
                };
                let base = match protocol {
                    Protocol::Tcp => 80,
                    Protocol::Udp => 53,
                    Protocol::Sctp => 7000,
                };
                let port = (base..)
                    .find(|p| !used.contains(&(*p, protocol)))
                    .expect("a free port");
                used.push((port, protocol));
                let name = if long && count > 1 {
                    // With the 63-character namespace and name, `ns/name:port` is past 128.
                    Some(format!("long-portname-{j}"))
                } else if count > 1 || self.d.chance(50) {
                    Some(format!("p{j}"))
                } else {
                    None
                };
                let pod_ports: Vec<&(&str, u16, Protocol)> = POD_PORTS
                    .iter()
                    .chain(std::iter::once(&SCTP_POD_PORT))
                    .filter(|(_, _, p)| *p == protocol)
                    .collect();
                let (pod_port_name, pod_port, _) = **self.d.pick(&pod_ports);
                let target = self.choose("target", &[("number", 0), ("name", 1), ("none", 2)]);
                let target_port = match target {
                    1 if named_targets => Some(TargetPort::Name(pod_port_name.into())),
                    0 | 1 => Some(TargetPort::Number(pod_port)),
                    _ => None,
                };
                let node_port = matches!(type_, Kind::NodePort | Kind::LoadBalancer).then(|| {
                    self.node_ports += 1;
                    30000 + self.node_ports
                });
                ServicePort {
                    name,
                    protocol,
                    port,
                    target_port,
                    node_port,
                }
            })
            .collect()
    }

    /// Explicit slices of `service` (one per family) over `pods`, each pod in with 80 %
    /// probability and conditions drawn; now and then a pod's address again in a second slice
    /// with other conditions.
    pub fn slices(
        &mut self,
        state: &Scenario,
        service: &Service,
        pods: &[Pod],
    ) -> Vec<EndpointSlice> {
        let mut out = Vec::new();
        for family in service_ip_families(state, service) {
            let ports = endpoint_ports(service);
            let mut endpoints = Vec::new();
            for pod in pods {
                let Some(ip) = pod.ip.of(family) else {
                    continue;
                };
                if self.d.chance(80) {
                    endpoints.push(Endpoint {
                        addresses: vec![ip],
                        conditions: self.condition().conditions(),
                        node_name: None,
                    });
                }
            }
            let labels = if self.chance("slice-label.headless") {
                BTreeMap::from([(LABEL_HEADLESS.to_string(), String::new())])
            } else if self.chance("label.proxy-name") {
                BTreeMap::from([(LABEL_SERVICE_PROXY_NAME.to_string(), "other-proxy".into())])
            } else {
                BTreeMap::new()
            };
            // A pod's address again, later in the same slice, with other conditions: which
            // copy a release keeps differs (pkg/proxy/endpointslicecache.go), and only within
            // one slice is the order one every release sees (slices come in map order).
            let duplicate = endpoints
                .first()
                .cloned()
                .filter(|_| self.chance("duplicate-endpoint"));
            if let Some(mut twin) = duplicate {
                let first = twin.conditions;
                twin.conditions = if first == Condition::Ready.conditions() {
                    Condition::ServingTerminating.conditions()
                } else {
                    Condition::Ready.conditions()
                };
                endpoints.push(twin);
            }
            out.push(EndpointSlice {
                service: service.name.clone(),
                namespace: service.namespace.clone(),
                address_type: family,
                labels,
                ports,
                endpoints,
            });
        }
        out
    }
}

/// The ports of a Service's explicit slices: each Service port's target, as a number (a name
/// resolved as every server pod resolves it), its own port when it has none.
pub(crate) fn endpoint_ports(service: &Service) -> Vec<EndpointPort> {
    service
        .spec
        .ports
        .iter()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            port: target_number(p),
            protocol: p.protocol,
        })
        .collect()
}

/// The port a Service port's traffic goes to on every server pod.
pub(crate) fn target_number(p: &ServicePort) -> u16 {
    match &p.target_port {
        Some(TargetPort::Number(n)) => *n,
        Some(TargetPort::Name(name)) => POD_PORTS
            .iter()
            .chain(std::iter::once(&SCTP_POD_PORT))
            .find(|(n, _, _)| n == name)
            .map_or(p.port, |(_, port, _)| *port),
        None => p.port,
    }
}

/// What a Service is made as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ClusterIP,
    NodePort,
    LoadBalancer,
    Headless,
    ExternalName,
}

impl Kind {
    fn api_type(self) -> ServiceType {
        match self {
            Kind::ClusterIP | Kind::Headless => ServiceType::ClusterIP,
            Kind::NodePort => ServiceType::NodePort,
            Kind::LoadBalancer => ServiceType::LoadBalancer,
            Kind::ExternalName => ServiceType::ExternalName,
        }
    }
}

struct ServiceFamilies {
    families: Vec<IpFamily>,
    policy: Option<IpFamilyPolicy>,
}
