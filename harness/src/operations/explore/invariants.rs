//! What any conformant proxier does, whatever it is: invariants of Kubernetes' Service
//! semantics, each from the documentation or KEP that states it, checked over one run of a
//! generated case. Explore with one proxier reports every run that breaks one.
//!
//! Each invariant is only asserted where Kubernetes decides the outcome. A kept flow continued
//! after a step is left out (an established connection may stay on an endpoint that left,
//! KEP-1669); so are a Service kube-proxy does not serve (labelled for another proxy) and a
//! literal destination that is no Service's address.

use crate::document::ScenarioObservation;
use crate::document::{ProbeObservation, ShotObservation, Verdict};
use crate::scenario::cluster::{EndpointInfo, ServicePortInfo};
use crate::scenario::{
    cluster_state, state_at, IpFamily, Probe, Scenario, ServiceType, TargetPort, Via,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// One invariant: what it says and where Kubernetes says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invariant {
    pub id: &'static str,
    pub statement: &'static str,
    pub source: &'static str,
}

/// Every invariant explore checks.
pub const INVARIANTS: &[Invariant] = &[
    Invariant {
        id: "endpoints-only",
        statement: "a connection to a Service is delivered only to one of its endpoints",
        source: "https://kubernetes.io/docs/concepts/services-networking/service/ (a Service \
                 routes to the Pods of its EndpointSlices); \
                 https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/",
    },
    Invariant {
        id: "no-usable-endpoint-no-delivery",
        statement: "a Service port with no endpoint that is ready or serving delivers no new \
                    connection",
        source: "KEP-1669 Proxy Terminating Endpoints (only ready, else serving-terminating \
                 endpoints are used); https://kubernetes.io/docs/reference/networking/virtual-ips/",
    },
    Invariant {
        id: "reply-from-dialed-address",
        statement: "the reply to a delivered connection comes from the address and port the \
                    client dialed",
        source: "https://kubernetes.io/docs/reference/networking/virtual-ips/ (clients connect \
                 to the Service's virtual IP and port; the proxy's translation is transparent)",
    },
    Invariant {
        id: "ready-before-terminating",
        statement: "while a Service port has a ready endpoint, a new connection under the \
                    Cluster traffic policy goes to a ready one, never to a terminating one",
        source: "KEP-1669 Proxy Terminating Endpoints; \
                 https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/#conditions",
    },
    Invariant {
        id: "internal-traffic-local",
        statement: "with internalTrafficPolicy Local, traffic from a pod or node to the \
                    ClusterIP goes only to endpoints on the same node",
        source: "KEP-2086 Service Internal Traffic Policy; \
                 https://kubernetes.io/docs/concepts/services-networking/service-traffic-policy/",
    },
    Invariant {
        id: "external-traffic-local",
        statement: "with externalTrafficPolicy Local, an external client's connection to a \
                    NodePort, external IP or load balancer IP goes only to endpoints on the \
                    node it entered, with its source address preserved",
        source: "https://kubernetes.io/docs/tasks/access-application-cluster/create-external-load-balancer/#preserving-the-client-source-ip; \
                 https://kubernetes.io/docs/reference/networking/virtual-ips/#external-traffic-policy",
    },
    Invariant {
        id: "session-affinity",
        statement: "with sessionAffinity ClientIP, connections from one client address go to \
                    one endpoint",
        source: "https://kubernetes.io/docs/reference/networking/virtual-ips/#session-affinity",
    },
    Invariant {
        id: "source-ranges",
        statement: "a load balancer IP with loadBalancerSourceRanges does not deliver a \
                    connection from a client outside them",
        source: "https://kubernetes.io/docs/tasks/access-application-cluster/configure-cloud-provider-firewall/",
    },
    Invariant {
        id: "undefined-port",
        statement: "a ClusterIP delivers nothing on a port its Service does not define",
        source: "https://kubernetes.io/docs/reference/networking/virtual-ips/ (a Service's \
                 virtual IP serves its ports only)",
    },
];

/// A run that broke an invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: String,
    /// The probe, `STEP/PROBE` in a step.
    pub probe: String,
    pub detail: String,
}

/// Every invariant `observation` (a run of `scenario`) breaks.
pub fn check(scenario: &Scenario, observation: &ScenarioObservation) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut group =
        |state: &Scenario, probes: &[Probe], observed: &[ProbeObservation], prefix: &str| {
            for probe in probes {
                let name = format!("{prefix}{}", probe.name);
                let Some(obs) = observed.iter().find(|o| o.probe == name) else {
                    continue;
                };
                out.extend(probe_violations(state, probe, obs));
            }
        };
    group(scenario, &scenario.probes, &observation.probes, "");
    for (k, step) in scenario.steps.iter().enumerate() {
        let Some(observed) = observation.steps.get(k) else {
            break;
        };
        let state = state_at(scenario, Some(k)).scenario;
        let prefix = format!("{}/", crate::scenario::step_name(step, k));
        group(&state, &step.probes, &observed.probes, &prefix);
    }
    out.sort();
    out
}

/// Every shot of a probe's observation (distinct outcomes for a random-choice proxier).
fn shots(obs: &ProbeObservation) -> Vec<&ShotObservation> {
    obs.shots
        .iter()
        .chain(obs.outcomes.iter().flatten())
        .collect()
}

/// What a probe goes to, resolved in the state it runs in.
struct Resolved<'a> {
    service: Option<&'a crate::scenario::Service>,
    port: &'a ServicePortInfo,
    via: Via,
    family: IpFamily,
}

fn probe_violations(state: &Scenario, probe: &Probe, obs: &ProbeObservation) -> Vec<Violation> {
    let mut out = Vec::new();
    if probe.continues.is_some() {
        return out;
    }
    let violation = |id: &str, detail: String| Violation {
        invariant: id.to_string(),
        probe: obs.probe.clone(),
        detail,
    };
    let shots = shots(obs);
    let delivered: Vec<&&ShotObservation> =
        shots.iter().filter(|s| s.verdict.delivered()).collect();
    let untranslated = shots
        .iter()
        .find(|s| s.verdict == Verdict::DeliveredReplyUntranslated)
        .filter(|_| !short_circuited_elsewhere(state, probe));
    if let Some(s) = untranslated {
        out.push(violation(
            "reply-from-dialed-address",
            format!("answered as {}", s.reply.as_deref().unwrap_or("?")),
        ));
    }
    if undefined_port(state, probe) && !delivered.is_empty() {
        out.push(violation(
            "undefined-port",
            format!("delivered to {}", backends(&delivered)),
        ));
    }
    let cluster = cluster_state(state);
    let family = state.probe_family(probe);
    let Some(family_state) = cluster.of(family) else {
        return out;
    };
    let Some(resolved) = resolve(state, probe, family, &family_state.service_ports) else {
        return out;
    };
    let sp = resolved.port;
    let pods_of = |eps: &mut dyn Iterator<Item = &EndpointInfo>| -> BTreeSet<String> {
        eps.filter_map(|e| pod_of(state, e.ip)).collect()
    };
    // Every endpoint any slice of the Service lists, whatever its labels or conditions: where
    // a proxier may send a connection at all.
    let endpoints: BTreeSet<String> = resolved
        .service
        .map(|svc| crate::operations::explore::generate::endpoint_addresses(state, svc, family))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|ip| pod_of(state, ip))
        .chain(pods_of(&mut sp.endpoints.iter()))
        .collect();
    if let Some(s) = delivered
        .iter()
        .find(|s| s.backend.as_ref().is_some_and(|b| !endpoints.contains(b)))
    {
        out.push(violation(
            "endpoints-only",
            format!(
                "delivered to {} (endpoints: {})",
                s.backend.as_deref().unwrap_or("?"),
                list(&endpoints)
            ),
        ));
    }
    let usable = sp.endpoints.iter().any(|e| e.ready || e.serving);
    if !usable && !delivered.is_empty() {
        out.push(violation(
            "no-usable-endpoint-no-delivery",
            format!(
                "delivered to {} with no ready or serving endpoint",
                backends(&delivered)
            ),
        ));
    }
    let external = resolved.via != Via::ClusterIP;
    let local_policy = if external {
        sp.external_policy_local
    } else {
        sp.internal_policy_local
    };
    let ready = pods_of(&mut sp.endpoints.iter().filter(|e| e.ready));
    if !local_policy && !ready.is_empty() {
        if let Some(s) = delivered.iter().find(|s| {
            s.backend
                .as_ref()
                .is_some_and(|b| endpoints.contains(b) && !ready.contains(b))
        }) {
            out.push(violation(
                "ready-before-terminating",
                format!(
                    "delivered to {} while {} ready",
                    s.backend.as_deref().unwrap_or("?"),
                    list(&ready)
                ),
            ));
        }
    }
    let on_node = |node: &str| -> BTreeSet<String> {
        state
            .topology
            .pods
            .iter()
            .filter(|p| p.node == node)
            .map(|p| p.name.clone())
            .collect()
    };
    if !external && sp.internal_policy_local {
        if let Some(node) = source_node(state, probe) {
            let local = on_node(&node);
            if let Some(s) = delivered
                .iter()
                .find(|s| s.backend.as_ref().is_some_and(|b| !local.contains(b)))
            {
                out.push(violation(
                    "internal-traffic-local",
                    format!("from {node} to {}", s.backend.as_deref().unwrap_or("?")),
                ));
            }
        }
    }
    if external && sp.external_policy_local && probe.from.external {
        if let Some(node) = probe.to.node.clone() {
            let local = on_node(&node);
            for s in &delivered {
                if s.backend.as_ref().is_some_and(|b| !local.contains(b)) {
                    out.push(violation(
                        "external-traffic-local",
                        format!(
                            "entered {node}, delivered to {}",
                            s.backend.as_deref().unwrap_or("?")
                        ),
                    ));
                    break;
                }
                if s.source.as_deref().is_some_and(|src| src != "preserved") {
                    out.push(violation(
                        "external-traffic-local",
                        format!("source {}", s.source.as_deref().unwrap_or("?")),
                    ));
                    break;
                }
            }
        }
    }
    if sp.session_affinity_timeout_seconds.is_some() {
        let reached: BTreeSet<&String> = delivered
            .iter()
            .filter_map(|s| s.backend.as_ref())
            .collect();
        if reached.len() > 1 {
            out.push(violation(
                "session-affinity",
                format!(
                    "one client reached {}",
                    reached.into_iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    if resolved.via == Via::LoadBalancer
        && probe.from.external
        && !sp.load_balancer_source_ranges.is_empty()
    {
        let client = state
            .topology
            .external
            .as_ref()
            .and_then(|e| e.ip.of(resolved.family));
        let allowed = client.is_some_and(|ip| {
            sp.load_balancer_source_ranges
                .iter()
                .any(|r| r.contains(ip))
        });
        if !allowed && !delivered.is_empty() {
            out.push(violation(
                "source-ranges",
                format!(
                    "delivered to {} from outside the ranges",
                    backends(&delivered)
                ),
            ));
        }
    }
    out
}

/// The service port a probe goes to, and how, where it is one kube-proxy serves.
fn resolve<'a>(
    state: &'a Scenario,
    probe: &Probe,
    family: IpFamily,
    ports: &'a [ServicePortInfo],
) -> Option<Resolved<'a>> {
    let reference = probe.to.service.as_deref()?;
    let (namespace, name) = reference.split_once('/').unwrap_or(("default", reference));
    let svc = state
        .services
        .iter()
        .find(|s| s.namespace == namespace && s.name == name)?;
    if svc.spec.type_ == ServiceType::ExternalName {
        return None;
    }
    let port = match &probe.to.port {
        None => svc.spec.ports.first()?,
        Some(TargetPort::Name(n)) => svc
            .spec
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some(n))?,
        Some(TargetPort::Number(n)) => svc.spec.ports.iter().find(|p| p.port == *n)?,
    };
    let via = probe.to.via?;
    if via == Via::HealthCheckNodePort {
        return None;
    }
    let sp = ports.iter().find(|sp| {
        sp.namespace == namespace
            && sp.name == name
            && sp.port == port.port
            && sp.protocol == port.protocol
    })?;
    Some(Resolved {
        service: Some(svc),
        port: sp,
        via,
        family,
    })
}

/// Whether `probe` is a pod's connection to another node's NodePort of a Service with
/// `externalTrafficPolicy: Local`. kube-proxy treats "locally-originated pod -> external
/// destination traffic" as going "up-and-out to an external load-balancer and coming back in"
/// (pkg/proxy/iptables/proxier.go l.1116-1124 in v1.37.2, nftables mode alike): it is sent to
/// any endpoint, unmasqueraded, so an endpoint on the pod's own node answers the pod directly
/// and the reply never passes the node that translated it. Every release does this; Kubernetes
/// does not promise the reply there.
fn short_circuited_elsewhere(state: &Scenario, probe: &Probe) -> bool {
    let Some(pod_node) = probe
        .from
        .pod
        .as_ref()
        .and_then(|_| source_node(state, probe))
    else {
        return false;
    };
    let local_policy = probe.to.service.as_deref().is_some_and(|r| {
        let (ns, name) = r.split_once('/').unwrap_or(("default", r));
        state.services.iter().any(|s| {
            s.namespace == ns
                && s.name == name
                && s.spec.external_traffic_policy == Some(crate::scenario::TrafficPolicy::Local)
        })
    });
    probe.to.via == Some(Via::NodePort)
        && local_policy
        && probe.to.node.as_ref().is_some_and(|n| *n != pod_node)
}

/// Whether `probe` goes to a Service's ClusterIP on a port that Service does not define.
fn undefined_port(state: &Scenario, probe: &Probe) -> bool {
    let (Some(ip), Some(dport)) = (probe.to.ip, probe.to.dport) else {
        return false;
    };
    state.services.iter().any(|svc| {
        svc.cluster_ips().contains(&ip)
            && !svc.is_for_another_proxy()
            && !svc
                .spec
                .ports
                .iter()
                .any(|p| p.port == dport && p.protocol == probe.protocol)
    })
}

/// The node a probe starts on, for a pod or node source.
fn source_node(state: &Scenario, probe: &Probe) -> Option<String> {
    if let Some(pod) = &probe.from.pod {
        let name = pod.rsplit('/').next().unwrap_or(pod);
        return state
            .topology
            .pods
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.node.clone());
    }
    probe
        .from
        .node
        .clone()
        .or_else(|| probe.from.node_localhost.clone())
}

/// The pod that owns `ip`.
fn pod_of(state: &Scenario, ip: IpAddr) -> Option<String> {
    state
        .topology
        .pods
        .iter()
        .find(|p| p.ip.all().any(|a| a == ip))
        .map(|p| p.name.clone())
}

fn backends(shots: &[&&ShotObservation]) -> String {
    let names: BTreeSet<&str> = shots.iter().filter_map(|s| s.backend.as_deref()).collect();
    names.into_iter().collect::<Vec<_>>().join(", ")
}

fn list(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}
