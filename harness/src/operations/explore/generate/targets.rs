//! Generated probes: a source of every kind to a destination of every kind the cluster state
//! offers, and flows kept across steps.

use super::{Case, NODE_NAMES};
use crate::scenario::{
    service_ip_families, IpFamily, Probe, ProbeSource, ProbeTarget, Protocol, Scenario, Service,
    ServiceType, TargetPort, Via,
};
use std::net::IpAddr;

/// Where a probe can go in a cluster state.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub to: ProbeTarget,
    pub protocol: Protocol,
    pub family: IpFamily,
    /// Whether a flow to it may be kept: a Service address (no health check) whose Service has
    /// at most one endpoint address of the family, so that where the flow goes, and so what
    /// happens to it later, is not the proxier's choice among several.
    pub keepable: bool,
}

/// Where a probe starts.
#[derive(Debug, Clone)]
enum Source {
    Pod {
        name: String,
        families: Vec<IpFamily>,
    },
    Node(String),
    Localhost(String),
    External,
}

impl Source {
    fn probe_source(&self) -> ProbeSource {
        let mut from = ProbeSource::default();
        match self {
            Source::Pod { name, .. } => from.pod = Some(name.clone()),
            Source::Node(n) => from.node = Some(n.clone()),
            Source::Localhost(n) => from.node_localhost = Some(n.clone()),
            Source::External => from.external = true,
        }
        from
    }

    fn has(&self, family: IpFamily, state: &Scenario) -> bool {
        match self {
            Source::Pod { families, .. } => families.contains(&family),
            _ => state.topology.cluster_cidr.has(family),
        }
    }
}

/// A Service as probes name it: `name`, or `namespace/name` outside `default`.
fn service_ref(svc: &Service) -> String {
    if svc.namespace == "default" {
        svc.name.clone()
    } else {
        format!("{}/{}", svc.namespace, svc.name)
    }
}

/// The endpoint addresses of `family` behind `svc` in `state`: its explicit slices', else the
/// pods its selector picks.
pub(crate) fn endpoint_addresses(state: &Scenario, svc: &Service, family: IpFamily) -> Vec<IpAddr> {
    let explicit: Vec<IpAddr> = super::slices_of(&state.endpoint_slices, svc)
        .filter(|sl| sl.address_type == family)
        .flat_map(|sl| {
            sl.endpoints
                .iter()
                .flat_map(|e| e.addresses.iter().copied())
        })
        .collect();
    let has_slices = super::slices_of(&state.endpoint_slices, svc)
        .next()
        .is_some();
    let mut out = if has_slices {
        explicit
    } else {
        crate::scenario::selected_pods(state, svc)
            .iter()
            .filter_map(|p| p.ip.of(family))
            .collect()
    };
    out.sort();
    out.dedup();
    out
}

/// Every destination a probe of `state` can have.
pub(crate) fn targets(state: &Scenario) -> Vec<Target> {
    let nodes: Vec<String> = state
        .topology
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    let mut out = Vec::new();
    for svc in &state.services {
        if svc.spec.type_ == ServiceType::ExternalName || svc.is_headless() {
            continue;
        }
        let families = service_ip_families(state, svc);
        let dual = families.len() > 1;
        for port in &svc.spec.ports {
            let port_ref = match &port.name {
                Some(name) => TargetPort::Name(name.clone()),
                None => TargetPort::Number(port.port),
            };
            for &family in &families {
                let keepable = endpoint_addresses(state, svc, family).len() <= 1;
                let base = ProbeTarget {
                    service: Some(service_ref(svc)),
                    port: Some(port_ref.clone()),
                    family: dual.then_some(family),
                    ..ProbeTarget::default()
                };
                let target = |via: Via, node: Option<&String>, keepable: bool| Target {
                    to: ProbeTarget {
                        via: Some(via),
                        node: node.cloned(),
                        ..base.clone()
                    },
                    protocol: port.protocol,
                    family,
                    keepable,
                };
                out.push(target(Via::ClusterIP, None, keepable));
                if port.node_port.is_some() {
                    for node in &nodes {
                        out.push(target(Via::NodePort, Some(node), keepable));
                    }
                }
                if svc
                    .spec
                    .external_ips
                    .iter()
                    .any(|ip| IpFamily::of(*ip) == family)
                {
                    out.push(target(Via::ExternalIP, None, keepable));
                }
                let lb = &svc.status.load_balancer.ingress;
                if lb.iter().any(|i| IpFamily::of(i.ip) == family) {
                    out.push(target(Via::LoadBalancer, None, keepable));
                }
                if svc.spec.health_check_node_port.is_some() && port.protocol == Protocol::Tcp {
                    for node in &nodes {
                        out.push(target(Via::HealthCheckNodePort, Some(node), false));
                    }
                }
            }
        }
        // A port the Service does not define, on its ClusterIP: rejected (or dropped) by
        // kube-proxy, never delivered.
        for ip in svc.cluster_ips() {
            out.push(Target {
                to: ProbeTarget {
                    ip: Some(ip),
                    dport: Some(8),
                    ..ProbeTarget::default()
                },
                protocol: Protocol::Tcp,
                family: IpFamily::of(ip),
                keepable: false,
            });
        }
    }
    out
}

impl Case<'_> {
    /// A probe of `state` named `name` (a kept flow when `keep`), or `None` when no source and
    /// destination fit together.
    pub fn probe(&mut self, state: &Scenario, name: &str, keep: bool) -> Option<Probe> {
        let mut targets = targets(state);
        targets.extend(self.gone_targets(state));
        for _ in 0..8 {
            let source = self.source(state)?;
            let fits: Vec<&Target> = targets
                .iter()
                .filter(|t| source.has(t.family, state))
                .filter(|t| match &source {
                    // SCTP probes are crafted INITs, from pods and the external client only.
                    Source::Node(_) | Source::Localhost(_) => t.protocol != Protocol::Sctp,
                    _ => true,
                })
                .filter(|t| match &source {
                    // From a node's loopback only its own NodePorts are reached.
                    Source::Localhost(_) => t.to.via == Some(Via::NodePort),
                    // ClusterIPs are reached from inside the cluster.
                    Source::External => t.to.via != Some(Via::ClusterIP),
                    _ => true,
                })
                .filter(|t| !keep || (t.keepable && !matches!(source, Source::Localhost(_))))
                .collect();
            if fits.is_empty() {
                continue;
            }
            let target = (*self.d.pick(&fits)).clone();
            let mut to = target.to.clone();
            match &source {
                // Its own node's loopback: the NodePort, with no node to name.
                Source::Localhost(_) => to.node = None,
                // The node an external packet to an address no node owns enters through.
                Source::External
                    if to.ip.is_some()
                        || matches!(to.via, Some(Via::ExternalIP | Via::LoadBalancer)) =>
                {
                    let k = self.d.below(state.topology.nodes.len());
                    to.node = Some(NODE_NAMES[k].to_string());
                }
                _ => {}
            }
            let protocol = if to.via == Some(Via::HealthCheckNodePort) {
                Protocol::Tcp
            } else {
                target.protocol
            };
            return Some(Probe {
                name: name.to_string(),
                from: source.probe_source(),
                to,
                protocol,
                source_port: None,
                repeat: 1,
                expect: None,
                expect_for: Default::default(),
                keep: keep.then(|| name.to_string()),
                continues: None,
            });
        }
        None
    }

    /// Literal destinations that were a Service's before a step deleted it (its ClusterIPs on
    /// its first port), which `state` no longer holds.
    fn gone_targets(&mut self, _state: &Scenario) -> Vec<Target> {
        self.gone
            .iter()
            .map(|(ip, port, protocol)| Target {
                to: ProbeTarget {
                    ip: Some(*ip),
                    dport: Some(*port),
                    ..ProbeTarget::default()
                },
                protocol: *protocol,
                family: IpFamily::of(*ip),
                keepable: false,
            })
            .collect()
    }

    fn source(&mut self, state: &Scenario) -> Option<Source> {
        #[derive(Clone, Copy)]
        enum K {
            Pod,
            Node,
            Localhost,
            External,
        }
        let kind = self.choose(
            "from",
            &[
                ("pod", K::Pod),
                ("node", K::Node),
                ("localhost", K::Localhost),
                ("external", K::External),
            ],
        );
        let topo = &state.topology;
        let node = |c: &mut Self| topo.nodes[c.d.below(topo.nodes.len())].name.clone();
        Some(match kind {
            K::Pod if !topo.pods.is_empty() => {
                let pod = &topo.pods[self.d.below(topo.pods.len())];
                Source::Pod {
                    name: if pod.namespace == "default" {
                        pod.name.clone()
                    } else {
                        format!("{}/{}", pod.namespace, pod.name)
                    },
                    families: pod.ip.all().map(IpFamily::of).collect(),
                }
            }
            K::Pod | K::Node => Source::Node(node(self)),
            K::Localhost => Source::Localhost(node(self)),
            K::External => Source::External,
        })
    }
}
