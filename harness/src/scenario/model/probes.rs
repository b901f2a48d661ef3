//! Probes, where they come from and go, and what each expects.

use super::*;
use crate::scenario::family::IpFamily;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A probe: one first packet (or one socket connection) from a source to a destination.
/// Fired by the `probe` module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Probe {
    pub name: String,
    /// Required, except for a `continue` probe, which goes the way its flow went.
    #[serde(default)]
    pub from: ProbeSource,
    #[serde(default)]
    pub to: ProbeTarget,
    #[serde(default)]
    pub protocol: Protocol,
    /// Fixed source port so the wire bytes are the same on every run. Defaults to
    /// 20000 + 1000 × the probe's index, so no two probes share a connection entry in IPVS's
    /// table (which, unlike conntrack, cannot be flushed without removing the services), even
    /// when a random-choice proxier makes the harness fire extra shots.
    #[serde(default)]
    pub source_port: Option<u16>,
    /// Send the probe this many times (distinct source ports from `sourcePort` upward) and
    /// record the sequence (IPVS) or set (random schedulers) of backends reached.
    #[serde(default = "one")]
    pub repeat: u32,
    #[serde(default)]
    pub expect: Option<Expectation>,
    /// Per-proxier expectations replacing `expect` for that proxier (by name), where
    /// implementations legitimately differ; the scenario's comments must say why.
    #[serde(default)]
    pub expect_for: BTreeMap<String, Expectation>,
    /// Open the probe's flow with a real socket from its source and keep it across steps
    /// under this name: an established TCP connection, or a UDP socket on its fixed source
    /// port (a DNS-style client). Needs `repeat: 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<String>,
    /// Send the next packet of the flow kept under this name (in an earlier step) and judge
    /// where it goes. Conntrack is not flushed for it: the flow rides on its entry.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<String>,
}

fn one() -> u32 {
    1
}

impl Expectation {
    /// Counts, a sequence or a cycle declare a deterministic choice: the probe's shots are exactly those
    /// the scenario asks for.
    pub fn fixes_shot_count(&self) -> bool {
        !self.counts.is_empty() || !self.sequence.is_empty() || !self.cycle.is_empty()
    }
}

impl Scenario {
    /// The family `probe` is sent in: its literal address's, else the one it picks, else its
    /// Service's primary family (IPv4 for a Service with no ClusterIP).
    pub fn probe_family(&self, probe: &Probe) -> IpFamily {
        if let Some(ip) = probe.to.ip {
            return IpFamily::of(ip);
        }
        let service = probe.to.service.as_deref().and_then(|wanted| {
            let (ns, name) = wanted.split_once('/').unwrap_or(("default", wanted));
            self.services
                .iter()
                .find(|s| s.name == name && s.namespace == ns)
        });
        probe
            .to
            .family
            .or_else(|| {
                service
                    .and_then(|svc| svc.cluster_ips().first().copied())
                    .map(IpFamily::of)
            })
            .unwrap_or_else(|| self.topology.cluster_cidr.primary_family())
    }
}

impl Probe {
    /// The expectation that judges a proxier judged as `proxier` (its label, or the built-in
    /// at the release it stands for): the most specific `expectFor` key that applies
    /// ([`crate::scenario::expect_for`]), else `expect`.
    pub fn expectation_for(&self, proxier: &str) -> Option<&Expectation> {
        crate::scenario::expect_for::key_for(self.expect_for.keys(), proxier)
            .and_then(|key| self.expect_for.get(key))
            .or(self.expect.as_ref())
    }

    /// The source port of the first repetition of the probe at `index` in its scenario.
    pub fn first_source_port(&self, index: usize) -> u32 {
        match self.source_port {
            Some(port) => u32::from(port),
            None => 20000 + 1000 * index as u32,
        }
    }
}

/// Where a probe starts. Exactly one field must be set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSource {
    #[serde(default)]
    pub pod: Option<String>,
    /// The node's own network namespace, sourcing from its node IP (or from `address`).
    #[serde(default)]
    pub node: Option<String>,
    /// With `node`: send from this address instead of the node IP. It must be a load balancer
    /// IP of a Service (`status.loadBalancer.ingress`): a node's connection to its own LB IP
    /// leaves from that IP when something outside kube-proxy SNATs it there, and kube-proxy
    /// admits it wherever `loadBalancerSourceRanges` admit the node IP (TestLoadBalancer's
    /// "same node to LB1, SNATted to LB1", pkg/proxy/iptables/proxier_test.go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<std::net::IpAddr>,
    /// The node's namespace, sourcing from 127.0.0.1.
    #[serde(default)]
    pub node_localhost: Option<String>,
    /// The external client on the underlay.
    #[serde(default)]
    pub external: bool,
}

/// Where a probe goes: a service address of a given kind, or a literal address.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeTarget {
    /// `namespace/name` or `name` (default namespace).
    #[serde(default)]
    pub service: Option<String>,
    /// Service port name or number.
    #[serde(default)]
    pub port: Option<TargetPort>,
    #[serde(default)]
    pub via: Option<Via>,
    /// For `via: nodePort`: which node's IP to hit (or localhost for nodeLocalhost sources).
    #[serde(default)]
    pub node: Option<String>,
    /// A literal destination instead of a service, of either family.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Which of the Service's families to reach it by (its ClusterIP, external IP or load
    /// balancer IP of that family, a node's address of that family for a NodePort); the
    /// Service's primary family when absent. The source then sends from its own address of
    /// that family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<IpFamily>,
    #[serde(default)]
    pub dport: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Via {
    ClusterIP,
    NodePort,
    #[serde(rename = "externalIP")]
    ExternalIP,
    LoadBalancer,
    /// The Service's `healthCheckNodePort` on `node`'s IP (TCP, whatever the port's protocol):
    /// answered by the node itself, where kube-proxy's health server listens.
    HealthCheckNodePort,
}

/// What Kubernetes requires of a probe's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expectation {
    /// Exactly this set of pods (by name): every shot lands on one of them and each of them is
    /// reached by at least one shot. A proxier that pins one backend cannot pass it.
    #[serde(default)]
    pub reaches: Vec<String>,
    /// Every shot lands on one of these pods; which, and whether all are used, is the proxier's
    /// choice (e.g. one connection to a Service with several endpoints).
    #[serde(default)]
    pub reaches_one_of: Vec<String>,
    /// Exactly this many shots land on each listed pod and none elsewhere: for deterministic
    /// schedulers. The probe then fires exactly `repeat` shots (their sum), even for a proxier
    /// whose choice is random.
    #[serde(default)]
    pub counts: BTreeMap<String, u32>,
    /// The backends in the order the shots reach them, repeated from the start while shots
    /// remain (`[web-3, web-2, web-1]` for a round robin over 45 shots). Like `counts`, fixes the
    /// shot count at `repeat`.
    #[serde(default)]
    pub sequence: Vec<String>,
    /// These backends, each once in every round of as many shots, in one order that every round
    /// keeps, whichever order that is: a round robin whose order the proxier does not fix (real
    /// kube-proxy IPVS adds its real servers in Go map order, pkg/proxy/ipvs/proxier.go
    /// `syncEndpoint`: `newEndpoints.UnsortedList()`). Like `sequence`, fixes the shot count at
    /// `repeat`.
    #[serde(default)]
    pub cycle: Vec<String>,
    /// `true`: every shot lands on one and the same backend, whichever it is (session affinity,
    /// source hashing).
    #[serde(default)]
    pub same_backend: bool,
    #[serde(default)]
    pub source: Option<SourceExpectation>,
    /// The reply arrives at the client from the address it sent to.
    #[serde(default)]
    pub reply: Option<bool>,
    /// Not delivered at all: dropped, rejected or timed out.
    #[serde(default)]
    pub outcome: Option<OutcomeExpectation>,
    /// Every delivered shot reaches its backend on this port: where an endpoint's port is what
    /// a behaviour decides (a kept flow still on a pod's old target port, or moved to the new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_port: Option<u16>,
}

impl Expectation {
    /// The expectation with every pod reference (`namespace/name` or `name`) written as the pod's
    /// name, as observations name backends: pod names are unique across namespaces.
    pub fn by_pod_name(&self) -> Expectation {
        let name = |r: &String| r.rsplit('/').next().unwrap_or(r).to_string();
        Expectation {
            reaches: self.reaches.iter().map(name).collect(),
            reaches_one_of: self.reaches_one_of.iter().map(name).collect(),
            counts: self.counts.iter().map(|(k, v)| (name(k), *v)).collect(),
            sequence: self.sequence.iter().map(name).collect(),
            cycle: self.cycle.iter().map(name).collect(),
            ..self.clone()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceExpectation {
    Preserved,
    Masqueraded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OutcomeExpectation {
    Delivered,
    Dropped,
    Rejected,
    NotDelivered,
    /// Answered by the node the packet was sent to, from the address it was sent to, and
    /// delivered to no pod (a node-local server such as kube-proxy's health server).
    AnsweredByNode,
}
