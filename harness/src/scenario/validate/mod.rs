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
use crate::builtins::BUILTINS;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

mod endpoint_slices;
mod expectations;
mod metadata;
mod probes;
mod service_families;
mod services;
pub(crate) use service_families::service_ip_families;
mod topology;

pub(crate) use super::field_path::{split_ref, FieldPath, Seg};

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
        if BUILTINS.iter().any(|b| b.name == key) || super::expect_for::is_release_key(key) {
            return None;
        }
        use crate::proxier_kinds::Prefixed;
        let external = matches!(
            Prefixed::split(key),
            Some((Prefixed::Exec | Prefixed::Replay, rest)) if !rest.trim().is_empty()
        );
        let builtins = BUILTINS.map(|b| b.name).join(", ");
        match self {
            KnownProxiers::Any if external => None,
            KnownProxiers::Any => Some(format!(
                "unknown proxier `{key}`: expected a built-in ({builtins}), one at a release \
                 range (`kube-proxy-iptables@..v1.36`), a release range alone (`@v1.37`), or an \
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
