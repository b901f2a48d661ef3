//! Generated steps: endpoint churn, pods created and deleted, a Service changed, deleted or
//! relabelled, time passing, a proxier restart; each followed by its probes, the kept flows
//! continued among them.

use super::services::{endpoint_ports, target_number, Condition, LABEL_HEADLESS};
use super::{Case, POD_PORTS, SCTP_POD_PORT};
use crate::scenario::{
    selected_pods, state_at, Endpoint, EndpointSlice, Probe, Protocol, Scenario, Service,
    ServiceType, SessionAffinity, Step, TargetPort, TrafficPolicy, LABEL_SERVICE_PROXY_NAME,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Churn,
    PodDelete,
    PodCreate,
    ServiceChange,
    ServiceDelete,
    LabelToggle,
    Wait,
    Restart,
}

/// How probes and deletions name an object: `name`, or `namespace/name` outside `default`.
fn reference(namespace: &str, name: &str) -> String {
    if namespace == "default" {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// The Services a step may change: proxied ones (not ExternalName, not headless).
fn changeable(state: &Scenario) -> Vec<Service> {
    state
        .services
        .iter()
        .filter(|s| s.spec.type_ != ServiceType::ExternalName && !s.is_headless())
        .cloned()
        .collect()
}

impl Case<'_> {
    /// Step `k` (0-based) of `scenario`, whose earlier steps are already in it.
    pub fn step(&mut self, scenario: &Scenario, k: usize) -> Step {
        let before = state_at(scenario, k.checked_sub(1)).scenario;
        let mut step = Step {
            name: format!("s{}", k + 1),
            ..Step::default()
        };
        let kept: Vec<String> = scenario
            .probes
            .iter()
            .chain(scenario.steps.iter().flat_map(|s| s.probes.iter()))
            .filter_map(|p| p.keep.clone())
            .collect();
        let kind = self.step_kind(&before, scenario);
        match kind {
            Kind::Churn => self.churn(&before, &mut step),
            Kind::PodDelete => self.pod_delete(&before, scenario, &mut step),
            Kind::PodCreate => {
                let app = self.d.below(self.apps.len());
                let node = self.d.below(before.topology.nodes.len());
                let pod = self.server_pod(app, node);
                step.apply.pods.push(pod);
            }
            Kind::ServiceChange => self.service_change(&before, &mut step),
            Kind::ServiceDelete => {
                let services = changeable(&before);
                let svc = self.d.pick(&services).clone();
                if let Some(port) = svc.spec.ports.first() {
                    for ip in svc.cluster_ips() {
                        self.gone.push((ip, port.port, port.protocol));
                    }
                }
                step.delete
                    .services
                    .push(reference(&svc.namespace, &svc.name));
            }
            Kind::LabelToggle => {
                let services = changeable(&before);
                let mut svc = self.d.pick(&services).clone();
                let label = *self.d.pick(&[LABEL_SERVICE_PROXY_NAME, LABEL_HEADLESS]);
                if svc.labels.remove(label).is_none() {
                    let value = if label == LABEL_HEADLESS {
                        ""
                    } else {
                        "other-proxy"
                    };
                    svc.labels.insert(label.to_string(), value.to_string());
                }
                step.apply.services.push(svc);
            }
            Kind::Wait => {
                // Past the shortest affinity timeout, so the next shot may choose again.
                let shortest = before
                    .services
                    .iter()
                    .filter_map(|s| s.spec.session_affinity_config.as_ref())
                    .map(|c| c.client_ip.timeout_seconds)
                    .filter(|t| *t <= 2)
                    .min();
                step.wait_seconds = shortest.map_or(1, |t| t + 1);
            }
            Kind::Restart => step.restart_proxier = true,
        }
        let mut with = scenario.clone();
        with.steps.push(step.clone());
        let after = state_at(&with, Some(k)).scenario;
        let mut probes: Vec<Probe> = kept
            .iter()
            .filter(|_| self.d.chance(80))
            .map(|flow| Probe {
                name: format!("c-{flow}"),
                from: Default::default(),
                to: Default::default(),
                protocol: Protocol::Tcp,
                source_port: None,
                repeat: 1,
                expect: None,
                expect_for: Default::default(),
                keep: None,
                continues: Some(flow.clone()),
            })
            .collect();
        let fresh = self.d.between(1, 2);
        let more_steps = k + 1 < self.steps_planned;
        probes.extend(self.probes(&after, &format!("{}q", step.name), fresh, more_steps));
        step.probes = probes;
        step
    }

    fn step_kind(&mut self, state: &Scenario, scenario: &Scenario) -> Kind {
        let sliced = !changeable(state).is_empty()
            && changeable(state)
                .iter()
                .any(|s| super::slices_of(&state.endpoint_slices, s).next().is_some());
        let servers = !self.deletable_pods(state, scenario).is_empty();
        let services = !changeable(state).is_empty();
        let mut choices = vec![
            (Kind::PodCreate, self.w.get("step.pod-create")),
            (Kind::Wait, self.w.get("step.wait")),
            (Kind::Restart, self.w.get("step.restart")),
        ];
        if sliced {
            choices.push((Kind::Churn, self.w.get("step.churn")));
        }
        if servers {
            choices.push((Kind::PodDelete, self.w.get("step.pod-delete")));
        }
        if services {
            choices.push((Kind::ServiceChange, self.w.get("step.service-change")));
            choices.push((Kind::ServiceDelete, self.w.get("step.service-delete")));
            choices.push((Kind::LabelToggle, self.w.get("step.label-toggle")));
        }
        self.d.weighted(&choices)
    }

    /// Server pods that no kept flow starts from (a flow's source stays for its later steps) and
    /// that are not the last pod to resolve a named targetPort of a Service without explicit
    /// slices (kpct refuses a name no pod resolves).
    fn deletable_pods(&self, state: &Scenario, scenario: &Scenario) -> Vec<(String, String)> {
        let last_resolvers: Vec<String> = state
            .services
            .iter()
            .filter(|s| super::slices_of(&state.endpoint_slices, s).next().is_none())
            .filter(|s| {
                s.spec
                    .ports
                    .iter()
                    .any(|p| matches!(p.target_port, Some(TargetPort::Name(_))))
            })
            .filter_map(|s| match selected_pods(state, s).as_slice() {
                [only] => Some(reference(&only.namespace, &only.name)),
                _ => None,
            })
            .collect();
        let sources: Vec<&str> = scenario
            .probes
            .iter()
            .chain(scenario.steps.iter().flat_map(|s| s.probes.iter()))
            .filter(|p| p.keep.is_some())
            .filter_map(|p| p.from.pod.as_deref())
            .collect();
        state
            .topology
            .pods
            .iter()
            .filter(|p| p.labels.contains_key("app"))
            .filter(|p| !sources.contains(&reference(&p.namespace, &p.name).as_str()))
            .filter(|p| !last_resolvers.contains(&reference(&p.namespace, &p.name)))
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect()
    }

    /// New explicit slices of a sliced Service: endpoints dropped, their conditions drawn again,
    /// pods added; now and then every endpoint stops serving.
    fn churn(&mut self, state: &Scenario, step: &mut Step) {
        let services: Vec<Service> = changeable(state)
            .into_iter()
            .filter(|s| super::slices_of(&state.endpoint_slices, s).next().is_some())
            .collect();
        let svc = self.d.pick(&services).clone();
        let none_serving = self.d.chance(25);
        let pods = selected_pods(state, &svc);
        let slices: Vec<EndpointSlice> = super::slices_of(&state.endpoint_slices, &svc)
            .cloned()
            .collect();
        for mut slice in slices {
            let mut endpoints = Vec::new();
            for ep in &slice.endpoints {
                if none_serving {
                    if self.d.chance(50) {
                        let c = *self.d.pick(&[Condition::Terminating, Condition::NotReady]);
                        endpoints.push(Endpoint {
                            conditions: c.conditions(),
                            ..ep.clone()
                        });
                    }
                    continue;
                }
                match self.d.below(5) {
                    0 => {}
                    1 | 2 => endpoints.push(Endpoint {
                        conditions: self.condition().conditions(),
                        ..ep.clone()
                    }),
                    _ => endpoints.push(ep.clone()),
                }
            }
            if !none_serving && self.d.chance(30) {
                let present: Vec<std::net::IpAddr> =
                    endpoints.iter().flat_map(|e| e.addresses.clone()).collect();
                let missing: Vec<std::net::IpAddr> = pods
                    .iter()
                    .filter_map(|p| p.ip.of(slice.address_type))
                    .filter(|ip| !present.contains(ip))
                    .collect();
                if !missing.is_empty() {
                    let ip = *self.d.pick(&missing);
                    endpoints.push(Endpoint {
                        addresses: vec![ip],
                        conditions: self.condition().conditions(),
                        node_name: None,
                    });
                }
            }
            slice.endpoints = endpoints;
            step.apply.endpoint_slices.push(slice);
        }
    }

    fn pod_delete(&mut self, state: &Scenario, scenario: &Scenario, step: &mut Step) {
        let pods = self.deletable_pods(state, scenario);
        let (namespace, name) = self.d.pick(&pods).clone();
        step.delete.pods.push(reference(&namespace, &name));
        let Some(pod) = state
            .topology
            .pods
            .iter()
            .find(|p| p.name == name && p.namespace == namespace)
        else {
            return;
        };
        // Hand-made slices keep a deleted pod's address unless someone takes it out: most
        // often someone does.
        if !self.d.chance(70) {
            return;
        }
        for svc in changeable(state) {
            let slices: Vec<EndpointSlice> = super::slices_of(&state.endpoint_slices, &svc)
                .cloned()
                .collect();
            let holds = slices.iter().any(|sl| {
                sl.endpoints
                    .iter()
                    .any(|e| e.addresses.iter().any(|a| pod.ip.all().any(|ip| ip == *a)))
            });
            if !holds {
                continue;
            }
            for mut slice in slices {
                slice
                    .endpoints
                    .retain(|e| !e.addresses.iter().any(|a| pod.ip.all().any(|ip| ip == *a)));
                step.apply.endpoint_slices.push(slice);
            }
        }
    }

    fn service_change(&mut self, state: &Scenario, step: &mut Step) {
        let services = changeable(state);
        let mut svc = self.d.pick(&services).clone();
        let svc_before = svc.clone();
        let spec = &mut svc.spec;
        let external = matches!(
            spec.type_,
            ServiceType::NodePort | ServiceType::LoadBalancer
        );
        match self.d.below(6) {
            // The target port moves to the pods' other port of its protocol: a flow kept on
            // the old one meets conntrack's clean-up (pkg/proxy/conntrack/cleanup.go compares
            // IP:port).
            0 => {
                let j = self.d.below(spec.ports.len());
                let port = &mut spec.ports[j];
                let now = target_number(port);
                let other = POD_PORTS
                    .iter()
                    .chain(std::iter::once(&SCTP_POD_PORT))
                    .find(|(_, n, p)| *p == port.protocol && *n != now);
                let resolvable = !selected_pods(state, &svc_before).is_empty();
                if let Some((name, number, _)) = other {
                    port.target_port = Some(if !resolvable || self.d.chance(50) {
                        TargetPort::Number(*number)
                    } else {
                        TargetPort::Name((*name).into())
                    });
                }
                let slices: Vec<EndpointSlice> = super::slices_of(&state.endpoint_slices, &svc)
                    .cloned()
                    .collect();
                if !slices.is_empty() && self.d.chance(50) {
                    let ports = endpoint_ports(&svc);
                    for mut slice in slices {
                        slice.ports = ports.clone();
                        step.apply.endpoint_slices.push(slice);
                    }
                }
            }
            1 if external || !spec.external_ips.is_empty() => {
                if spec.external_traffic_policy == Some(TrafficPolicy::Local) {
                    spec.external_traffic_policy = None;
                    spec.health_check_node_port = None;
                } else {
                    spec.external_traffic_policy = Some(TrafficPolicy::Local);
                }
            }
            2 => {
                spec.internal_traffic_policy = match spec.internal_traffic_policy {
                    Some(TrafficPolicy::Local) => None,
                    _ => Some(TrafficPolicy::Local),
                };
            }
            3 => {
                if spec.session_affinity == SessionAffinity::ClientIP {
                    spec.session_affinity = SessionAffinity::None;
                    spec.session_affinity_config = None;
                } else {
                    spec.session_affinity = SessionAffinity::ClientIP;
                }
            }
            4 => match spec.type_ {
                ServiceType::ClusterIP => {
                    spec.type_ = ServiceType::NodePort;
                    for port in &mut spec.ports {
                        self.node_ports += 1;
                        port.node_port = Some(30000 + self.node_ports);
                    }
                }
                ServiceType::NodePort => {
                    spec.type_ = ServiceType::ClusterIP;
                    for port in &mut spec.ports {
                        port.node_port = None;
                    }
                    if spec.external_ips.is_empty() {
                        spec.external_traffic_policy = None;
                    }
                }
                _ => {
                    spec.type_ = ServiceType::NodePort;
                    spec.load_balancer_source_ranges.clear();
                    spec.health_check_node_port = None;
                    svc.status = Default::default();
                }
            },
            _ => {
                if spec.external_ips.is_empty() {
                    let families = crate::scenario::service_ip_families(state, &svc);
                    let i = state
                        .services
                        .iter()
                        .position(|s| s.name == svc.name)
                        .unwrap_or(0);
                    svc.spec.external_ips = families
                        .iter()
                        .map(|f| super::addresses::external_ip(*f, i))
                        .collect();
                } else {
                    spec.external_ips.clear();
                    if !external {
                        spec.external_traffic_policy = None;
                    }
                }
            }
        }
        step.apply.services.push(svc);
    }
}
