//! Semantic checks of a parsed scenario: everything serde cannot see, such as references between
//! objects, addresses outside their subnets and clashes. Each check mirrors an API-server
//! validation or a property the topology engine relies on; all problems are collected so a file
//! is fixed in one round.

use super::family::IpFamily;
use super::model::{
    EndpointSlice, Expectation, NodePortAddress, OutcomeExpectation, Pod, Probe, ProbeTarget,
    Protocol, Scenario, Service, ServicePort, ServiceType, SessionAffinity, TargetPort,
    TrafficPolicy, Via,
};
use crate::proxier::BUILTIN;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

mod metadata;
mod service_families;
pub(crate) use service_families::service_ip_families;
mod topology;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A field path such as `services[1].spec.ports[0]`, with the YAML (camelCase) field names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldPath(Vec<Seg>);

impl FieldPath {
    pub(crate) fn from_segments(segments: Vec<Seg>) -> Self {
        Self(segments)
    }

    pub(crate) fn root(key: &str) -> Self {
        Self(vec![Seg::Key(key.to_owned())])
    }

    pub(crate) fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Seg::Key(key.to_owned()));
        Self(segments)
    }

    pub(crate) fn idx(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Seg::Index(index));
        Self(segments)
    }

    pub(crate) fn segments(&self) -> &[Seg] {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Seg::Key(key) if i == 0 => f.write_str(key)?,
                Seg::Key(key) => write!(f, ".{key}")?,
                Seg::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A semantic problem, located by field path (lines are added by the loader, which has the text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issue {
    pub(crate) path: FieldPath,
    pub(crate) message: String,
}

/// Which proxier names `expectFor` may use: a key that names no proxier would silently never
/// apply.
#[derive(Debug, Clone, Copy)]
pub enum KnownProxiers<'a> {
    /// The built-ins and any `exec:`/`replay:` spec: a file read outside a run.
    Any,
    /// The built-ins and exactly these labels: the `--proxier`s of a run.
    Run(&'a [String]),
}

impl KnownProxiers<'_> {
    fn problem(&self, key: &str) -> Option<String> {
        if BUILTIN.contains(&key) {
            return None;
        }
        let external = ["exec:", "replay:"].iter().any(|p| {
            key.strip_prefix(p)
                .is_some_and(|rest| !rest.trim().is_empty())
        });
        let builtins = BUILTIN.join(", ");
        match self {
            KnownProxiers::Any if external => None,
            KnownProxiers::Any => Some(format!(
                "unknown proxier `{key}`: expected a built-in ({builtins}) or an \
                 `exec:PROGRAM` / `replay:DIRECTORY` label"
            )),
            KnownProxiers::Run(labels) if labels.iter().any(|l| l == key) => None,
            KnownProxiers::Run(labels) => Some(format!(
                "`{key}` is not a proxier of this run (built-ins: {builtins}; --proxier: {})",
                if labels.is_empty() {
                    "none".to_owned()
                } else {
                    labels.join(", ")
                }
            )),
        }
    }
}

/// Every semantic problem of `s`, in check order.
pub(crate) fn check(s: &Scenario, known: KnownProxiers<'_>) -> Vec<Issue> {
    let mut c = Checker {
        s,
        known,
        issues: Vec::new(),
    };
    // The scenario's name becomes file names (observations, snapshots) and namespace names.
    c.dns_label(FieldPath::root("name"), "scenario name", &s.name);
    c.topology_cidrs();
    c.nodes();
    c.pods();
    c.external();
    c.services();
    c.endpoint_slices();
    c.probes();
    c.proxier_options();
    let mut issues = c.issues;
    steps_issues(s, known, &mut issues);
    issues
}

/// Problems of the steps: their own fields, kept flows, and every check above run again on
/// the state after each step, located where the offending object was written. A problem of an
/// object the steps did not touch is reported once, for the initial state.
fn steps_issues(s: &Scenario, known: KnownProxiers<'_>, issues: &mut Vec<Issue>) {
    let push = |issues: &mut Vec<Issue>, issue: Issue| {
        if !issues.contains(&issue) {
            issues.push(issue);
        }
    };
    for issue in kept_flow_issues(s) {
        push(issues, issue);
    }
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (k, step) in s.steps.iter().enumerate() {
        let here = FieldPath::root("steps").idx(k);
        let name = super::steps::step_name(step, k);
        let mut own = Checker {
            s,
            known,
            issues: Vec::new(),
        };
        own.dns_label(here.key("name"), "step name", &name);
        if step.wait_seconds > super::model::MAX_WAIT_SECONDS {
            own.err(
                here.key("waitSeconds"),
                format!(
                    "waitSeconds {} is more than {} s: a step waits real time, and a scenario \
                     should run in seconds (set the timeout being waited out shorter instead)",
                    step.wait_seconds,
                    super::model::MAX_WAIT_SECONDS
                ),
            );
        }
        if let Some(first) = names.insert(name.clone(), k) {
            own.err(
                here.key("name"),
                format!("duplicate step name `{name}` (also steps[{first}])"),
            );
        }
        let before = super::steps::state_at(s, k.checked_sub(1));
        deletion_issues(&mut own, &before.scenario, &here, step);
        for issue in own.issues {
            push(issues, issue);
        }
        let after = super::steps::state_at(s, Some(k));
        let mut c = Checker {
            s: &after.scenario,
            known,
            issues: Vec::new(),
        };
        c.topology_cidrs();
        c.nodes();
        c.pods();
        c.external();
        c.services();
        c.endpoint_slices();
        c.probes();
        for issue in c.issues {
            push(issues, relocate(issue, &after, &here));
        }
    }
}

/// Maps a path into the state after a step back to where the file wrote the object.
fn relocate(issue: Issue, state: &super::steps::StepState, step: &FieldPath) -> Issue {
    let segments = issue.path.segments();
    let origin = |origins: &[FieldPath], at: usize, rest: &[Seg]| {
        origins.get(at).map(|o| {
            let mut segs = o.segments().to_vec();
            segs.extend_from_slice(rest);
            FieldPath::from_segments(segs)
        })
    };
    let moved = match segments {
        [Seg::Key(k), Seg::Index(i), rest @ ..] if k == "services" => {
            origin(&state.service_origins, *i, rest)
        }
        [Seg::Key(k), Seg::Index(i), rest @ ..] if k == "endpointSlices" => {
            origin(&state.slice_origins, *i, rest)
        }
        [Seg::Key(t), Seg::Key(k), Seg::Index(i), rest @ ..] if t == "topology" && k == "pods" => {
            origin(&state.pod_origins, *i, rest)
        }
        [Seg::Key(k), rest @ ..] if k == "probes" => {
            let mut segs = step.key("probes").segments().to_vec();
            segs.extend_from_slice(rest);
            Some(FieldPath::from_segments(segs))
        }
        _ => None,
    };
    Issue {
        path: moved.unwrap_or(issue.path),
        message: issue.message,
    }
}

/// A step may only delete what the state before it holds.
fn deletion_issues(
    c: &mut Checker<'_>,
    before: &Scenario,
    here: &FieldPath,
    step: &super::model::Step,
) {
    let path = here.key("delete");
    for (j, reference) in step.delete.services.iter().enumerate() {
        let (ns, name) = split_ref(reference);
        if !before
            .services
            .iter()
            .any(|x| x.namespace == ns && x.name == name)
        {
            c.err(
                path.key("services").idx(j),
                format!("no service {ns}/{name} to delete at this step"),
            );
        }
    }
    for (j, reference) in step.delete.endpoint_slices.iter().enumerate() {
        let (ns, name) = split_ref(reference);
        if !before
            .endpoint_slices
            .iter()
            .any(|x| x.namespace == ns && x.service == name)
        {
            c.err(
                path.key("endpointSlices").idx(j),
                format!(
                    "service {ns}/{name} has no explicit endpointSlices to delete at this step"
                ),
            );
        }
    }
    for (j, reference) in step.delete.pods.iter().enumerate() {
        let (ns, name) = split_ref(reference);
        if !before
            .topology
            .pods
            .iter()
            .any(|p| p.namespace == ns && p.name == name)
        {
            c.err(
                path.key("pods").idx(j),
                format!("no pod {ns}/{name} to delete at this step"),
            );
        }
    }
    // A pod is created, never replaced: its name (unique across namespaces, like every pod's
    // here) must be free once the step's deletions are done.
    let deleted: Vec<(&str, &str)> = step.delete.pods.iter().map(|r| split_ref(r)).collect();
    let mut created: BTreeMap<&str, usize> = BTreeMap::new();
    for (j, pod) in step.apply.pods.iter().enumerate() {
        let at = here.key("apply").key("pods").idx(j).key("name");
        let still_there = before.topology.pods.iter().find(|p| {
            p.name == pod.name && !deleted.contains(&(p.namespace.as_str(), p.name.as_str()))
        });
        if let Some(existing) = still_there {
            c.err(
                at,
                format!(
                    "pod `{}` already exists at this step (in namespace {}): a pod is not \
                     replaced; delete it first, in this step or an earlier one",
                    pod.name, existing.namespace
                ),
            );
        } else if let Some(first) = created.insert(&pod.name, j) {
            created.insert(&pod.name, first);
            c.err(
                at,
                format!(
                    "duplicate pod name `{}` (also apply.pods[{first}] of this step)",
                    pod.name
                ),
            );
        }
    }
}

/// `keep` / `continue`: a kept flow is one real socket, opened once and continued in later
/// steps.
fn kept_flow_issues(s: &Scenario) -> Vec<Issue> {
    let mut c = Checker {
        s,
        known: KnownProxiers::Any,
        issues: Vec::new(),
    };
    // Kept flow name -> the step it was opened in (None: the initial probes).
    let mut kept: BTreeMap<&str, Option<usize>> = BTreeMap::new();
    let groups = std::iter::once((None, FieldPath::root("probes"), &s.probes)).chain(
        s.steps.iter().enumerate().map(|(k, st)| {
            (
                Some(k),
                FieldPath::root("steps").idx(k).key("probes"),
                &st.probes,
            )
        }),
    );
    for (step, base, probes) in groups {
        for (i, probe) in probes.iter().enumerate() {
            let path = base.idx(i);
            if let Some(name) = &probe.continues {
                continue_issues(&mut c, &path, probe, name, step, &kept);
            }
            if let Some(name) = &probe.keep {
                c.dns_label(path.key("keep"), "kept flow name", name);
                if kept.insert(name, step).is_some() {
                    c.err(
                        path.key("keep"),
                        format!("a flow named `{name}` is already kept"),
                    );
                }
                if probe.continues.is_some() {
                    c.err(
                        path.key("keep"),
                        "a `continue` probe goes on with its flow; it cannot keep another",
                    );
                }
                if probe.repeat != 1 {
                    c.err(
                        path.key("repeat"),
                        "a kept flow is one connection: repeat must be 1",
                    );
                }
                if probe.protocol == Protocol::Sctp {
                    c.err(
                        path.key("protocol"),
                        "kept flows are TCP connections or UDP sockets, not SCTP",
                    );
                }
            }
        }
    }
    c.issues
}

fn continue_issues(
    c: &mut Checker<'_>,
    path: &FieldPath,
    probe: &Probe,
    name: &str,
    step: Option<usize>,
    kept: &BTreeMap<&str, Option<usize>>,
) {
    match kept.get(name) {
        None => c.err(
            path.key("continue"),
            format!("no flow `{name}` is kept by an earlier probe (set `keep: {name}` on one)"),
        ),
        Some(opened) if *opened == step => c.err(
            path.key("continue"),
            format!("flow `{name}` is kept in this same step: continue it in a later one"),
        ),
        Some(_) => {}
    }
    let unset = [
        ("from", probe.from != super::model::ProbeSource::default()),
        ("to", probe.to != ProbeTarget::default()),
        ("sourcePort", probe.source_port.is_some()),
        ("repeat", probe.repeat != 1),
    ];
    for (field, set) in unset {
        if set {
            c.err(
                path.key(field),
                format!("a `continue` probe goes the way flow `{name}` went: drop `{field}`"),
            );
        }
    }
}

/// The most shots one probe may fire: each can take the probe timeout (2 s) when dropped, so
/// more would run for many minutes; no expectation needs nearly as many.
const MAX_REPEAT: u32 = 1000;

/// `namespace/name` or `name` (in `default`), as probes and expectations refer to objects.
pub(crate) fn split_ref(reference: &str) -> (&str, &str) {
    reference.split_once('/').unwrap_or(("default", reference))
}

/// Pods whose labels include every selector label, in file order. A missing or empty selector
/// selects nothing: Kubernetes drops an empty selector map, and the EndpointSlice controller
/// ignores services without one.
pub(crate) fn selected_pods<'a>(s: &'a Scenario, svc: &Service) -> Vec<&'a Pod> {
    let Some(selector) = svc.spec.selector.as_ref().filter(|sel| !sel.is_empty()) else {
        return Vec::new();
    };
    s.topology
        .pods
        .iter()
        .filter(|pod| pod.namespace == svc.namespace)
        .filter(|pod| selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v)))
        .collect()
}

/// The container port a named targetPort resolves to on `pod`, as the EndpointSlice controller's
/// `FindPort` does: same name and same protocol.
pub(crate) fn named_port(pod: &Pod, name: &str, protocol: Protocol) -> Option<u16> {
    pod.ports
        .iter()
        .find(|p| p.name.as_deref() == Some(name) && p.protocol == protocol)
        .map(|p| p.container_port)
}

/// The YAML spelling of `via`.
fn via_name(via: Via) -> &'static str {
    match via {
        Via::ClusterIP => "clusterIP",
        Via::NodePort => "nodePort",
        Via::ExternalIP => "externalIP",
        Via::LoadBalancer => "loadBalancer",
        Via::HealthCheckNodePort => "healthCheckNodePort",
    }
}

/// The YAML spelling of `outcome`.
fn outcome_name(outcome: Option<OutcomeExpectation>) -> &'static str {
    match outcome {
        None | Some(OutcomeExpectation::Delivered) => "delivered",
        Some(OutcomeExpectation::Dropped) => "dropped",
        Some(OutcomeExpectation::Rejected) => "rejected",
        Some(OutcomeExpectation::NotDelivered) => "notDelivered",
        Some(OutcomeExpectation::AnsweredByNode) => "answeredByNode",
    }
}

fn port_label(port: &ServicePort) -> String {
    match &port.name {
        Some(name) => format!("{name} ({}/{})", port.port, port.protocol.upper()),
        None => format!("{}/{}", port.port, port.protocol.upper()),
    }
}

struct Checker<'a> {
    s: &'a Scenario,
    known: KnownProxiers<'a>,
    issues: Vec<Issue>,
}

impl<'a> Checker<'a> {
    fn err(&mut self, path: FieldPath, message: impl Into<String>) {
        self.issues.push(Issue {
            path,
            message: message.into(),
        });
    }

    /// Kubernetes object names here must be DNS-1123 labels; the topology also builds network
    /// namespace names from them, so a `/` or a space would break it.
    fn dns_label(&mut self, path: FieldPath, what: &str, name: &str) {
        let valid_chars = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let valid = !name.is_empty()
            && name.len() <= 63
            && valid_chars
            && !name.starts_with('-')
            && !name.ends_with('-');
        if !valid {
            self.err(
                path,
                format!(
                    "{what} `{}` is not a DNS label (1-63 characters: lower-case letters, \
                     digits and '-', starting and ending with a letter or digit)",
                    crate::quote::quote(name)
                ),
            );
        }
    }

    fn topo() -> FieldPath {
        FieldPath::root("topology")
    }

    fn node(&self, name: &str) -> Option<&'a super::model::Node> {
        self.s.topology.nodes.iter().find(|n| n.name == name)
    }

    fn pod(&self, reference: &str) -> Option<&'a Pod> {
        let (namespace, name) = split_ref(reference);
        self.s
            .topology
            .pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
    }

    fn pod_by_ip(&self, ip: IpAddr) -> Option<&'a Pod> {
        self.s
            .topology
            .pods
            .iter()
            .find(|p| p.ip.all().any(|a| a == ip))
    }

    fn service(&self, namespace: &str, name: &str) -> Option<&'a Service> {
        self.s
            .services
            .iter()
            .find(|svc| svc.namespace == namespace && svc.name == name)
    }

    // ---- services ----

    fn services(&mut self) {
        let mut names: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut cluster_ips: BTreeMap<IpAddr, usize> = BTreeMap::new();
        let mut node_ports: BTreeMap<(u16, Protocol), String> = BTreeMap::new();
        for (i, svc) in self.s.services.iter().enumerate() {
            let path = FieldPath::root("services").idx(i);
            let key = (svc.namespace.as_str(), svc.name.as_str());
            self.dns_label(path.key("namespace"), "namespace", &svc.namespace);
            self.dns_label(path.key("name"), "service name", &svc.name);
            if let Some(first) = names.insert(key, i) {
                names.insert(key, first);
                self.err(
                    path.key("name"),
                    format!(
                        "duplicate service `{}/{}` (also services[{first}])",
                        svc.namespace, svc.name
                    ),
                );
            }
            self.labels(&path.key("labels"), &svc.labels);
            self.annotations(&path.key("annotations"), &svc.annotations);
            let spec = path.key("spec");
            self.service_families(&spec, svc, i, &mut cluster_ips);
            self.service_ports(&spec, svc, &mut node_ports);
            self.service_options(&path, svc, &mut node_ports);
        }
    }

    fn service_ports(
        &mut self,
        spec: &FieldPath,
        svc: &Service,
        node_ports: &mut BTreeMap<(u16, Protocol), String>,
    ) {
        let ports = &svc.spec.ports;
        let headless = svc.is_headless();
        if ports.is_empty() && !headless && svc.spec.type_ != ServiceType::ExternalName {
            self.err(spec.key("ports"), "a service needs at least one port");
        }
        let mut names = BTreeSet::new();
        let mut numbers = BTreeSet::new();
        for (j, port) in ports.iter().enumerate() {
            let path = spec.key("ports").idx(j);
            match &port.name {
                None if ports.len() > 1 => self.err(
                    path.clone(),
                    "every port needs a `name` when a service has more than one",
                ),
                Some(name) if !names.insert(name.as_str()) => {
                    self.err(path.key("name"), format!("duplicate port name `{name}`"))
                }
                _ => {}
            }
            if port.port == 0 {
                self.err(path.key("port"), "port must be 1-65535");
            } else if !numbers.insert((port.port, port.protocol)) {
                self.err(
                    path.key("port"),
                    format!("duplicate port {}/{}", port.port, port.protocol.upper()),
                );
            }
            self.node_port(&path, svc, port, node_ports);
            self.target_port(&path, svc, port);
        }
    }

    fn node_port(
        &mut self,
        path: &FieldPath,
        svc: &Service,
        port: &ServicePort,
        seen: &mut BTreeMap<(u16, Protocol), String>,
    ) {
        let path = path.key("nodePort");
        let exposed = matches!(
            svc.spec.type_,
            ServiceType::NodePort | ServiceType::LoadBalancer
        );
        let Some(node_port) = port.node_port else {
            if exposed {
                self.err(
                    path,
                    format!(
                        "type {:?} needs a nodePort in {} (kpct does not allocate one)",
                        svc.spec.type_, self.s.topology.service_node_port_range
                    ),
                );
            }
            return;
        };
        if !exposed {
            self.err(
                path,
                format!(
                    "nodePort is only allowed for NodePort and LoadBalancer services, not {:?}",
                    svc.spec.type_
                ),
            );
            return;
        }
        let range = self.s.topology.service_node_port_range;
        if !range.contains(node_port) {
            self.err(
                path,
                format!("nodePort {node_port} is outside the node port range {range} (topology.serviceNodePortRange)"),
            );
            return;
        }
        let owner = format!("{}/{}:{}", svc.namespace, svc.name, port_label(port));
        if let Some(first) = seen.get(&(node_port, port.protocol)) {
            self.err(
                path,
                format!(
                    "nodePort {node_port}/{} is already used by {first}",
                    port.protocol.upper()
                ),
            );
        } else {
            seen.insert((node_port, port.protocol), owner);
        }
    }

    fn target_port(&mut self, path: &FieldPath, svc: &Service, port: &ServicePort) {
        let path = path.key("targetPort");
        let name = match &port.target_port {
            Some(TargetPort::Number(0)) => {
                self.err(path, "targetPort must be 1-65535");
                return;
            }
            Some(TargetPort::Name(name)) => name,
            _ => return,
        };
        if name.is_empty() {
            self.err(path, "targetPort name must not be empty");
            return;
        }
        let has_slice = self
            .s
            .endpoint_slices
            .iter()
            .any(|sl| sl.namespace == svc.namespace && sl.service == svc.name);
        if has_slice || svc.spec.type_ == ServiceType::ExternalName {
            return;
        }
        let pods = selected_pods(self.s, svc);
        if pods
            .iter()
            .any(|pod| named_port(pod, name, port.protocol).is_some())
        {
            return;
        }
        let message = if pods.is_empty() {
            format!(
                "targetPort `{name}` cannot be resolved: the selector matches no pod \
                 (and no endpoint slice is given for the service)"
            )
        } else {
            let pod_names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            format!(
                "targetPort `{name}` names no {} container port on any selected pod ({})",
                port.protocol.upper(),
                pod_names.join(", ")
            )
        };
        self.err(path, message);
    }

    fn service_options(
        &mut self,
        path: &FieldPath,
        svc: &Service,
        node_ports: &mut BTreeMap<(u16, Protocol), String>,
    ) {
        let spec = path.key("spec");
        let lb = svc.spec.type_ == ServiceType::LoadBalancer;
        if let Some(hc) = svc.spec.health_check_node_port {
            let path = spec.key("healthCheckNodePort");
            if !lb || svc.spec.external_traffic_policy != Some(TrafficPolicy::Local) {
                self.err(
                    path,
                    "healthCheckNodePort needs type LoadBalancer with externalTrafficPolicy Local",
                );
            } else if !self.s.topology.service_node_port_range.contains(hc) {
                self.err(
                    path,
                    format!(
                        "healthCheckNodePort {hc} is outside the node port range {} (topology.serviceNodePortRange)",
                        self.s.topology.service_node_port_range
                    ),
                );
            } else if let Some(first) = node_ports.get(&(hc, Protocol::Tcp)) {
                self.err(
                    path,
                    format!("healthCheckNodePort {hc} is already used by {first}"),
                );
            } else {
                let owner = format!("{}/{} (healthCheckNodePort)", svc.namespace, svc.name);
                node_ports.insert((hc, Protocol::Tcp), owner);
            }
        }
        if let Some(config) = &svc.spec.session_affinity_config {
            if svc.spec.session_affinity != SessionAffinity::ClientIP {
                self.err(
                    spec.key("sessionAffinityConfig"),
                    "sessionAffinityConfig needs sessionAffinity: ClientIP",
                );
            }
            let timeout = config.client_ip.timeout_seconds;
            if !(1..=86400).contains(&timeout) {
                self.err(
                    spec.key("sessionAffinityConfig")
                        .key("clientIP")
                        .key("timeoutSeconds"),
                    format!("timeoutSeconds {timeout} must be 1-86400"),
                );
            }
        }
        if !lb && !svc.spec.load_balancer_source_ranges.is_empty() {
            self.err(
                spec.key("loadBalancerSourceRanges"),
                "loadBalancerSourceRanges may only be used with type LoadBalancer",
            );
        }
        if !lb && !svc.status.load_balancer.ingress.is_empty() {
            self.err(
                path.key("status").key("loadBalancer").key("ingress"),
                "status.loadBalancer.ingress may only be set for type LoadBalancer",
            );
        }
    }

    // ---- endpoint slices ----

    fn endpoint_slices(&mut self) {
        for (i, slice) in self.s.endpoint_slices.iter().enumerate() {
            let path = FieldPath::root("endpointSlices").idx(i);
            match self.service(&slice.namespace, &slice.service) {
                None => self.err(
                    path.key("service"),
                    format!(
                        "unknown service `{}/{}` (an endpoint slice belongs to a service in its \
                         own namespace)",
                        slice.namespace, slice.service
                    ),
                ),
                Some(svc) => self.slice_ports(&path, slice, svc),
            }
            let family = slice.address_type;
            if !self.s.topology.cluster_cidr.has(family) {
                self.err(
                    path.key("addressType"),
                    format!(
                        "the cluster has no {family} range (topology.clusterCIDR): no proxier \
                         reads an {family} slice{}",
                        if family == IpFamily::Ipv4 {
                            " (addressType is IPv4 unless written: write `addressType: IPv6`)"
                        } else {
                            ""
                        }
                    ),
                );
            }
            for (j, endpoint) in slice.endpoints.iter().enumerate() {
                let path = path.key("endpoints").idx(j);
                self.endpoint(
                    &path,
                    slice.address_type,
                    &endpoint.addresses,
                    endpoint.node_name.as_deref(),
                );
            }
        }
    }

    /// kube-proxy joins slice ports to service ports by (name, protocol); a slice port that
    /// matches none is silently unused there, which in a scenario is always a mistake.
    fn slice_ports(&mut self, path: &FieldPath, slice: &EndpointSlice, svc: &Service) {
        let mut seen = BTreeSet::new();
        for (j, port) in slice.ports.iter().enumerate() {
            let path = path.key("ports").idx(j);
            let name = port.name.as_deref().unwrap_or("");
            if port.port == 0 {
                self.err(path.key("port"), "port must be 1-65535");
            }
            if !seen.insert((name, port.protocol)) {
                self.err(
                    path.clone(),
                    format!("duplicate port name `{name}` for {}", port.protocol.upper()),
                );
            }
            let matched =
                svc.spec.ports.iter().any(|sp| {
                    sp.name.as_deref().unwrap_or("") == name && sp.protocol == port.protocol
                });
            if !matched {
                self.err(
                    path,
                    format!(
                        "port name `{name}` ({}) matches no port of service `{}/{}` \
                         (ports are matched by name and protocol)",
                        port.protocol.upper(),
                        svc.namespace,
                        svc.name
                    ),
                );
            }
        }
    }

    fn endpoint(
        &mut self,
        path: &FieldPath,
        address_type: IpFamily,
        addresses: &[IpAddr],
        node_name: Option<&str>,
    ) {
        let clusters = self.s.topology.cluster_cidr;
        match addresses {
            [] => self.err(path.key("addresses"), "an endpoint needs an address"),
            [_] => {}
            _ => self.err(
                path.key("addresses").idx(1),
                "kube-proxy only uses the first address of an endpoint: list one endpoint per \
                 address",
            ),
        }
        for (k, ip) in addresses.iter().enumerate() {
            let path = path.key("addresses").idx(k);
            // EndpointSlice validation (pkg/apis/discovery/validation): every address is of the
            // slice's addressType.
            if IpFamily::of(*ip) != address_type {
                self.err(
                    path,
                    format!(
                        "{ip} must be a valid {address_type} address (the slice's addressType)"
                    ),
                );
                continue;
            }
            // An IPv6 address where the cluster has no IPv6 range: its slice is refused above.
            if let Some(range) = clusters.of(address_type) {
                if self.pod_by_ip(*ip).is_none() && !range.contains(*ip) {
                    self.err(
                        path,
                        format!("address {ip} is neither a pod IP nor inside clusterCIDR {range}"),
                    );
                }
            }
        }
        let Some(node_name) = node_name else {
            return;
        };
        if self.node(node_name).is_none() {
            self.err(path.key("nodeName"), format!("unknown node `{node_name}`"));
            return;
        }
        let owner = addresses.first().and_then(|ip| self.pod_by_ip(*ip));
        if let Some(pod) = owner.filter(|pod| pod.node != node_name) {
            self.err(
                path.key("nodeName"),
                format!(
                    "nodeName `{node_name}` contradicts pod `{}` with this address, which runs \
                     on `{}`",
                    pod.name, pod.node
                ),
            );
        }
    }

    // ---- probes ----

    fn probes(&mut self) {
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, probe) in self.s.probes.iter().enumerate() {
            let path = FieldPath::root("probes").idx(i);
            // Probe names are printed in tables and reports and typed into `--probe` and
            // `kpct trace`: the same alphabet as object names.
            self.dns_label(path.key("name"), "probe name", &probe.name);
            if let Some(first) = names.insert(&probe.name, i) {
                names.insert(&probe.name, first);
                self.err(
                    path.key("name"),
                    format!(
                        "duplicate probe name `{}` (also probes[{first}])",
                        probe.name
                    ),
                );
            }
            if probe.protocol == Protocol::Sctp
                && (probe.from.node.is_some() || probe.from.node_localhost.is_some())
            {
                self.err(
                    path.key("protocol"),
                    "SCTP probes are crafted INITs: send them from a `pod` or the `external` \
                     client (node probes are sockets, and the suite makes no SCTP client socket)",
                );
            }
            // A continued flow's source, target and ports are its kept probe's.
            if probe.continues.is_none() {
                self.probe_source(&path, probe);
                self.probe_target(&path, probe);
                self.probe_ports(&path, probe, i);
            }
            self.expectations(&path, probe);
        }
    }

    fn probe_source(&mut self, path: &FieldPath, probe: &Probe) {
        let path = path.key("from");
        let from = &probe.from;
        let set: Vec<&str> = [
            ("pod", from.pod.is_some()),
            ("node", from.node.is_some()),
            ("nodeLocalhost", from.node_localhost.is_some()),
            ("external", from.external),
        ]
        .into_iter()
        .filter_map(|(field, is_set)| is_set.then_some(field))
        .collect();
        if set.len() != 1 {
            let found = if set.is_empty() {
                "none".to_owned()
            } else {
                set.iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.err(
                path.clone(),
                format!(
                    "exactly one of `pod`, `node`, `nodeLocalhost`, `external` must be set \
                     (found {found})"
                ),
            );
        }
        if let Some(pod) = &from.pod {
            if self.pod(pod).is_none() {
                self.err(path.key("pod"), format!("unknown pod `{pod}`"));
            }
        }
        for (field, node) in [
            ("node", &from.node),
            ("nodeLocalhost", &from.node_localhost),
        ] {
            if let Some(node) = node {
                if self.node(node).is_none() {
                    self.err(path.key(field), format!("unknown node `{node}`"));
                }
            }
        }
        if from.external && self.s.topology.external.is_none() {
            self.err(
                path.key("external"),
                "no external client: set topology.external",
            );
        }
        if let Some(address) = from.address {
            self.source_address(&path.key("address"), probe, address);
        }
    }

    /// `from.address`: a load balancer IP a node sends from, of the family of the target.
    fn source_address(&mut self, path: &FieldPath, probe: &Probe, address: IpAddr) {
        if probe.from.node.is_none() {
            self.err(path.clone(), "`address` is only for a `node` source");
        }
        if probe.keep.is_some() {
            // The address is the node's only while the probe's own shots are fired.
            self.err(
                path.clone(),
                "a probe with `address` cannot `keep` its flow",
            );
        }
        let lb_ip = self.s.services.iter().any(|svc| {
            svc.status
                .load_balancer
                .ingress
                .iter()
                .any(|i| i.ip == address)
        });
        if !lb_ip {
            self.err(
                path.clone(),
                format!(
                    "{address} is no Service's load balancer IP (status.loadBalancer.ingress): \
                     a node sends only from its own addresses or from such an IP"
                ),
            );
        }
        let target = probe.to.ip.map(IpFamily::of).or(probe.to.family);
        if let Some(family) = target.filter(|f| *f != IpFamily::of(address)) {
            self.err(
                path.clone(),
                format!("{address} cannot send to the probe's {family} destination"),
            );
        }
    }

    fn probe_target(&mut self, path: &FieldPath, probe: &Probe) {
        let path = path.key("to");
        let to = &probe.to;
        if let Some(node) = &to.node {
            if self.node(node).is_none() {
                self.err(path.key("node"), format!("unknown node `{node}`"));
            }
        }
        match (&to.service, to.ip) {
            (Some(_), Some(_)) => {
                self.err(path, "set either `service` or `ip`, not both");
            }
            (None, None) => {
                self.err(
                    path,
                    "set `service` (with `via`) or a literal `ip` and `dport`",
                );
            }
            (None, Some(ip)) => {
                self.literal_target(&path, to);
                self.source_family(path.key("ip"), probe, IpFamily::of(ip));
            }
            (Some(reference), None) => {
                let (namespace, name) = split_ref(reference);
                match self.service(namespace, name) {
                    None => self.err(
                        path.key("service"),
                        format!("unknown service `{namespace}/{name}`"),
                    ),
                    Some(svc) => self.service_target(&path, probe, svc),
                }
            }
        }
    }

    fn literal_target(&mut self, path: &FieldPath, to: &ProbeTarget) {
        if to.dport.is_none() {
            self.err(path.key("dport"), "a literal `ip` target needs `dport`");
        }
        if to.family.is_some() {
            self.err(
                path.key("family"),
                "a literal `ip` target has its own family: `family` picks a Service's address",
            );
        }
        // `node` stays allowed: it names the node an external packet enters through.
        for (field, set) in [("port", to.port.is_some()), ("via", to.via.is_some())] {
            if set {
                self.err(
                    path.key(field),
                    format!("`{field}` is only used with a `service` target"),
                );
            }
        }
    }

    fn service_target(&mut self, path: &FieldPath, probe: &Probe, svc: &'a Service) {
        let to = &probe.to;
        if to.dport.is_some() {
            self.err(
                path.key("dport"),
                "`dport` is only used with a literal `ip` target",
            );
        }
        if svc.spec.type_ == ServiceType::ExternalName {
            self.err(path.key("service"), "ExternalName services are not proxied");
            return;
        }
        let Some(port) = self.probed_port(path, probe, svc) else {
            return;
        };
        let via = to.via.unwrap_or(Via::ClusterIP);
        let cluster_ips = svc.cluster_ips();
        let family = self.s.probe_family(probe);
        let has = |ips: Vec<IpAddr>| ips.into_iter().any(|ip| IpFamily::of(ip) == family);
        let problem = match via {
            Via::ClusterIP if svc.is_headless() => {
                Some("a headless service has no ClusterIP".to_string())
            }
            Via::ClusterIP => (!has(cluster_ips.clone()))
                .then(|| format!("the service has no {family} ClusterIP")),
            Via::NodePort => port
                .node_port
                .is_none()
                .then(|| "the service port has no nodePort".to_string()),
            Via::ExternalIP => (!has(svc.spec.external_ips.clone()))
                .then(|| format!("the service has no {family} externalIPs")),
            Via::LoadBalancer => (!has(svc
                .status
                .load_balancer
                .ingress
                .iter()
                .map(|i| i.ip)
                .collect()))
            .then(|| format!("the service has no {family} status.loadBalancer.ingress")),
            Via::HealthCheckNodePort => svc
                .spec
                .health_check_node_port
                .is_none()
                .then(|| "the service has no healthCheckNodePort".to_string()),
        };
        if let Some(problem) = problem {
            let at = if to.family.is_some() && problem.contains(&family.to_string()) {
                path.key("family")
            } else {
                path.key("via")
            };
            self.err(at, format!("via {}: {problem}", via_name(via)));
        }
        self.target_node(path, probe, via);
        self.source_family(path.key("family"), probe, family);
    }

    /// A probe's source sends from its address of the target's family: it must have one.
    /// The probe's source has an address of the family it sends (`at`: the field that picks it).
    fn source_family(&mut self, at: FieldPath, probe: &Probe, family: IpFamily) {
        let from = &probe.from;
        let lacking = if let Some(pod) = from.pod.as_deref().and_then(|p| self.pod(p)) {
            (!pod.ip.has(family)).then(|| format!("pod `{}`", pod.name))
        } else if let Some(node) = from.node.as_deref().and_then(|n| self.node(n)) {
            (!node.ip.has(family)).then(|| format!("node `{}`", node.name))
        } else if from.external {
            self.s
                .topology
                .external
                .as_ref()
                .filter(|e| !e.ip.has(family))
                .map(|e| format!("the external client `{}`", e.name))
        } else {
            None
        };
        if let Some(who) = lacking {
            self.err(
                at,
                format!("{who} has no {family} address to send an {family} probe from"),
            );
        }
    }

    /// The service port a probe aims at: by name or number, else the only port.
    fn probed_port(
        &mut self,
        path: &FieldPath,
        probe: &Probe,
        svc: &'a Service,
    ) -> Option<&'a ServicePort> {
        let ports = &svc.spec.ports;
        let found = match &probe.to.port {
            None if ports.len() == 1 => ports.first(),
            None => {
                self.err(
                    path.key("port"),
                    format!(
                        "service `{}/{}` has {} ports: say which with `port`",
                        svc.namespace,
                        svc.name,
                        ports.len()
                    ),
                );
                return None;
            }
            Some(TargetPort::Name(name)) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str())),
            Some(TargetPort::Number(n)) => ports
                .iter()
                .find(|p| p.port == *n && p.protocol == probe.protocol)
                .or_else(|| ports.iter().find(|p| p.port == *n)),
        };
        let Some(port) = found else {
            self.err(
                path.key("port"),
                format!("service `{}/{}` has no such port", svc.namespace, svc.name),
            );
            return None;
        };
        if port.protocol != probe.protocol {
            self.err(
                path.key("port"),
                format!(
                    "probe protocol {} does not match the service port's {}",
                    probe.protocol.upper(),
                    port.protocol.upper()
                ),
            );
        }
        Some(port)
    }

    fn target_node(&mut self, path: &FieldPath, probe: &Probe, via: Via) {
        match (&probe.to.node, via) {
            // nodePort: whose node IP to send to; externalIP / loadBalancer: which node an
            // external packet enters through (as an upstream router would pick).
            // Whether it exists is checked for every target, in `probe_target`.
            (
                Some(_),
                Via::NodePort | Via::ExternalIP | Via::LoadBalancer | Via::HealthCheckNodePort,
            ) => {}
            (Some(_), Via::ClusterIP) => self.err(
                path.key("node"),
                "`node` is not used with `via: clusterIP` (ClusterIPs are reached from inside the cluster)",
            ),
            (None, Via::NodePort) if probe.from.node_localhost.is_none() => self.err(
                path.key("node"),
                "via nodePort needs `node`: the node whose IP to send to",
            ),
            (None, Via::HealthCheckNodePort) => self.err(
                path.key("node"),
                "via healthCheckNodePort needs `node`: the node whose IP to send to",
            ),
            (None, _) => {}
        }
    }

    fn probe_ports(&mut self, path: &FieldPath, probe: &Probe, index: usize) {
        if probe.repeat == 0 {
            self.err(path.key("repeat"), "repeat must be at least 1");
        } else if probe.repeat > MAX_REPEAT {
            self.err(
                path.key("repeat"),
                format!(
                    "repeat {} is more than {MAX_REPEAT} shots (each may wait the probe \
                     timeout)",
                    probe.repeat
                ),
            );
        }
        let first = probe.first_source_port(index);
        if first == 0 {
            self.err(path.key("sourcePort"), "sourcePort must be 1-65535");
        } else if first.saturating_add(probe.repeat.saturating_sub(1)) > 65535 {
            self.err(
                path.key("repeat"),
                format!(
                    "sourcePort {first} + repeat {} runs past port 65535",
                    probe.repeat
                ),
            );
        }
    }

    fn expectations(&mut self, path: &FieldPath, probe: &Probe) {
        if let Some(expect) = &probe.expect {
            self.expectation(&path.key("expect"), expect, probe.repeat);
        }
        for (proxier, expect) in &probe.expect_for {
            if let Some(problem) = self.known.problem(proxier) {
                self.err(path.key("expectFor").key(proxier), problem);
            }
            self.expectation(&path.key("expectFor").key(proxier), expect, probe.repeat);
        }
    }

    fn expectation(&mut self, path: &FieldPath, expect: &Expectation, repeat: u32) {
        let path = path.clone();
        for (field, pods) in [
            ("reaches", &expect.reaches),
            ("reachesOneOf", &expect.reaches_one_of),
            ("sequence", &expect.sequence),
        ] {
            for (k, pod) in pods.iter().enumerate() {
                if self.pod(pod).is_none() {
                    self.err(path.key(field).idx(k), format!("unknown pod `{pod}`"));
                }
            }
        }
        for pod in expect.counts.keys() {
            if self.pod(pod).is_none() {
                self.err(path.key("counts").key(pod), format!("unknown pod `{pod}`"));
            }
        }
        if !expect.reaches.is_empty() && !expect.reaches_one_of.is_empty() {
            self.err(
                path.key("reachesOneOf"),
                "give `reaches` (exactly these pods) or `reachesOneOf` (each shot on one of them), not both",
            );
        }
        if expect.reaches.len() > 1 && repeat < expect.reaches.len() as u32 {
            self.err(
                path.key("reaches"),
                format!(
                    "{} pods cannot all be reached by {repeat} shot(s): raise `repeat`, or use `reachesOneOf` if any one of them will do",
                    expect.reaches.len()
                ),
            );
        }
        let counted: u64 = expect.counts.values().map(|c| u64::from(*c)).sum();
        if !expect.counts.is_empty() && counted != u64::from(repeat) {
            self.err(
                path.key("counts"),
                format!("the counts add up to {counted}, but the probe fires `repeat: {repeat}` shot(s)"),
            );
        }
        if expect.sequence.len() > repeat as usize {
            self.err(
                path.key("sequence"),
                format!(
                    "a sequence of {} backends is longer than the probe's `repeat: {repeat}` shot(s)",
                    expect.sequence.len()
                ),
            );
        }
        let undelivered = matches!(
            expect.outcome,
            Some(
                OutcomeExpectation::Dropped
                    | OutcomeExpectation::Rejected
                    | OutcomeExpectation::NotDelivered
                    | OutcomeExpectation::AnsweredByNode
            )
        );
        // The node's own answer comes from the address the client used.
        let answered = expect.outcome == Some(OutcomeExpectation::AnsweredByNode);
        if !undelivered {
            return;
        }
        for (field, set) in [
            ("reaches", !expect.reaches.is_empty()),
            ("reachesOneOf", !expect.reaches_one_of.is_empty()),
            ("counts", !expect.counts.is_empty()),
            ("sequence", !expect.sequence.is_empty()),
            ("sameBackend", expect.same_backend),
            ("source", expect.source.is_some()),
            ("reply", expect.reply == Some(true) && !answered),
        ] {
            if set {
                self.err(
                    path.key(field),
                    format!(
                        "`{field}` contradicts `outcome: {}` ({})",
                        outcome_name(expect.outcome),
                        if answered {
                            "the node answers itself; no pod is reached"
                        } else {
                            "nothing is delivered"
                        }
                    ),
                );
            }
        }
    }

    /// The kube-proxy flags a scenario sets, checked as kube-proxy's validation does
    /// (pkg/proxy/apis/config/validation: masquerade bit 0-31; the IPVS schedulers the kernel has).
    fn proxier_options(&mut self) {
        let options = &self.s.proxier;
        let path = FieldPath::root("proxier");
        if options.masquerade_bit > 31 {
            self.err(
                path.key("masqueradeBit"),
                format!(
                    "masqueradeBit {} is not a bit of a 32-bit mark (0-31)",
                    options.masquerade_bit
                ),
            );
        }
        const SCHEDULERS: [&str; 9] = ["rr", "wrr", "lc", "wlc", "sh", "dh", "mh", "sed", "nq"];
        if !SCHEDULERS.contains(&options.ipvs_scheduler.as_str()) {
            self.err(
                path.key("ipvsScheduler"),
                format!(
                    "unknown IPVS scheduler `{}`, expected one of {}",
                    options.ipvs_scheduler,
                    SCHEDULERS.join(", ")
                ),
            );
        }
        // ip_vs_set_timeout refuses more than INT_MAX / HZ seconds; HZ is at most 1000.
        const MAX_TIMEOUT: u32 = i32::MAX as u32 / 1000;
        let t = &options.ipvs_timeouts;
        for (field, value) in [("tcp", t.tcp), ("tcpFin", t.tcp_fin), ("udp", t.udp)] {
            if value > MAX_TIMEOUT {
                self.err(
                    path.key("ipvsTimeouts").key(field),
                    format!("{value} s is more than the kernel takes ({MAX_TIMEOUT} s)"),
                );
            }
        }
        // validateKubeProxyNodePortAddress (pkg/proxy/apis/config/validation): `primary` alone.
        let entries = &options.node_port_addresses;
        if entries.len() > 1 {
            for (i, entry) in entries.iter().enumerate() {
                if *entry == NodePortAddress::Primary {
                    self.err(
                        path.key("nodePortAddresses").idx(i),
                        "`primary` stands alone: it cannot be combined with CIDRs",
                    );
                }
            }
        }
    }
}
