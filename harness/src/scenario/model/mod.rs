//! The scenario file schema, as deserialized from `scenarios/*.yaml`.
//!
//! Field names follow Kubernetes (camelCase, `spec`/`status` for Services, EndpointSlice-like
//! endpoints) so operators can paste from `kubectl get -o yaml` with little editing. Every struct
//! rejects unknown fields: a typo must be an error, never a silently ignored setting.

use serde::{Deserialize, Serialize};

pub use super::cidr::{Dual, DualCidr, DualIp, Ipv4Cidr, Ipv6Cidr, IPV4_FORM};

mod probes;
mod proxier_options;
mod services;
mod topology;

pub use probes::*;
pub use proxier_options::*;
pub use services::*;
pub use topology::*;

/// A port range as the API server's `--service-node-port-range` takes it: `30000-32767` (or
/// `BASE+SIZE`, e.g. `3000+100` for 3000-3100, as in k8s.io/apimachinery/pkg/util/net ParsePortRange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// Kubernetes' default `--service-node-port-range`.
    pub const DEFAULT_NODE_PORTS: PortRange = PortRange {
        first: 30000,
        last: 32767,
    };

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "`{s}` is not a port range (expected FIRST-LAST or BASE+SIZE, e.g. 30000-32767)"
            )
        };
        let port = |t: &str| t.trim().parse::<u16>().map_err(|_| bad());
        let (first, last) = if let Some((a, b)) = s.split_once('-') {
            (port(a)?, port(b)?)
        } else if let Some((a, n)) = s.split_once('+') {
            let first = port(a)?;
            (first, first.checked_add(port(n)?).ok_or_else(bad)?)
        } else {
            return Err(bad());
        };
        if first == 0 || first > last {
            return Err(format!("port range `{s}` is empty or starts at 0"));
        }
        Ok(PortRange { first, last })
    }
}

serde_as_string!(PortRange);

/// Fields that a file may also spell with their alias (`field`, `alias`): the plural that
/// Kubernetes uses for a value per family. Locating a problem in the file tries both.
pub(crate) const ALIASES: &[(&str, &str)] = &[
    ("ip", "ips"),
    ("podCIDR", "podCIDRs"),
    ("clusterCIDR", "clusterCIDRs"),
    ("serviceCIDR", "serviceCIDRs"),
];

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Defaults to the file stem when absent.
    #[serde(default)]
    pub name: String,
    /// One line: which Kubernetes behaviour this scenario checks.
    #[serde(default)]
    pub description: String,
    pub topology: Topology,
    #[serde(default)]
    pub services: Vec<Service>,
    /// Explicit endpoint slices. A service with a selector and no slice here gets one derived
    /// from the pods its selector matches (all ready), see `cluster::ClusterState`.
    #[serde(default)]
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Options handed to every proxier (the kube-proxy flags that change programming).
    #[serde(default)]
    pub proxier: ProxierOptions,
    #[serde(default)]
    pub probes: Vec<Probe>,
    /// Changes to the cluster after the initial state, in order; after each, the proxier
    /// re-syncs every node and the step's probes run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
}

/// One change of the cluster, then a re-sync of every node, then probes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Defaults to `step-N` (1-based); names the step in reports and snapshots.
    #[serde(default)]
    pub name: String,
    /// Seconds of real time to let pass before the step's changes, its re-sync and its probes
    /// (at most [`MAX_WAIT_SECONDS`]): for what only time does, such as a ClientIP affinity's
    /// `timeoutSeconds` running out, an IPVS real server draining or a conntrack entry ageing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_seconds: u32,
    /// Objects created or replaced, as `kubectl apply` of whole manifests does: a Service
    /// replaces the one of the same namespace/name, an EndpointSlice every explicit slice of
    /// its Service; a pod is created (after the step's deletions).
    #[serde(default)]
    pub apply: Objects,
    /// Objects removed, by reference.
    #[serde(default)]
    pub delete: Deletions,
    /// Restart the proxier before it syncs: it programs the new state from scratch over
    /// what the node holds, as a restarted kube-proxy does, knowing nothing of earlier states.
    #[serde(default)]
    pub restart_proxier: bool,
    #[serde(default)]
    pub probes: Vec<Probe>,
}

/// The longest a step may wait (`waitSeconds`): a run is meant to take seconds, and every
/// timeout worth waiting out in a scenario can be set shorter (ClientIP affinity takes 1 s).
pub const MAX_WAIT_SECONDS: u32 = 60;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Services, EndpointSlices and pods a step applies.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Objects {
    #[serde(default)]
    pub services: Vec<Service>,
    #[serde(default)]
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Pods created by the step, written as `topology.pods` are: each gets its network
    /// namespace on its node and its echo servers, and joins every Service whose selector
    /// matches it. A pod is never replaced: one of the same name must be gone first (deleted
    /// by this step or an earlier one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<Pod>,
}

/// What a step deletes: `namespace/name` or `name` (in `default`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deletions {
    /// Services; their explicit EndpointSlices go with them, as the garbage collector does.
    #[serde(default)]
    pub services: Vec<String>,
    /// The explicit EndpointSlices of these Services.
    #[serde(default)]
    pub endpoint_slices: Vec<String>,
    /// Pods: the pod's network namespace is removed, and it leaves every Service whose
    /// endpoints come from its selector.
    #[serde(default)]
    pub pods: Vec<String>,
}

#[cfg(test)]
mod tests;
