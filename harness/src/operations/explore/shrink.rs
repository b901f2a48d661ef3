//! A finding reduced to a minimal scenario while the same difference (or broken invariant)
//! persists: delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating
//! Failure-Inducing Input", TSE 2002) over the scenario's structure, never its text.
//!
//! Passes remove steps, probes, Services, nodes, pods, ports, endpoints and slices, then set
//! options and fields back to their defaults. Each candidate is repaired (what it left dangling
//! goes with it) and validated before it costs a run; the first candidate in order that keeps
//! the finding is taken, so the result is the same for the same finding however many run at
//! once. Each run costs seconds, so the number of candidates run is bounded, and every step
//! taken is logged.

use super::compare::Signature;
use super::run::{run_cases, CaseResult, CaseVerdict, Plan};
use crate::scenario::{
    ProxierOptions, Scenario, ServiceType, SessionAffinity, TargetPort, TrafficPolicy,
};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// What must persist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Goal {
    /// The runs still differ at `subject` (`probe NAME`, `step NAME`, `(run)`) as `signature`.
    Differs {
        subject: String,
        signature: Signature,
    },
    /// The run still breaks `invariant` at `probe`.
    Violates { invariant: String, probe: String },
}

impl Goal {
    /// The goal of a case's finding: its first differing probe (else step, else the run), or
    /// its first broken invariant.
    pub fn of(result: &CaseResult) -> Option<Goal> {
        match &result.verdict {
            CaseVerdict::Differs { difference, .. } => {
                let rank = |s: &str| match s.split_whitespace().next() {
                    Some("probe") => 0,
                    Some("step") => 1,
                    _ => 2,
                };
                let (subject, signature) = difference
                    .signatures
                    .iter()
                    .min_by_key(|(s, _)| (rank(s), (*s).clone()))?;
                Some(Goal::Differs {
                    subject: subject.clone(),
                    signature: signature.clone(),
                })
            }
            CaseVerdict::Violates { violations } => violations.first().map(|v| Goal::Violates {
                invariant: v.invariant.clone(),
                probe: v.probe.clone(),
            }),
            _ => None,
        }
    }

    fn holds(&self, result: &CaseResult) -> bool {
        match (self, &result.verdict) {
            (Goal::Differs { subject, signature }, CaseVerdict::Differs { difference, .. }) => {
                difference.signatures.get(subject) == Some(signature)
            }
            (Goal::Violates { invariant, probe }, CaseVerdict::Violates { violations }) => {
                violations
                    .iter()
                    .any(|v| &v.invariant == invariant && &v.probe == probe)
            }
            _ => false,
        }
    }

    /// The probe the finding is at (`STEP/PROBE` in a step), if it is at one.
    fn probe(&self) -> Option<&str> {
        match self {
            Goal::Differs { subject, .. } => subject.strip_prefix("probe "),
            Goal::Violates { probe, .. } => Some(probe),
        }
    }

    /// The step the finding is at (its probe's, or the step itself), if any.
    fn step(&self) -> Option<&str> {
        match self {
            Goal::Differs { subject, .. } if subject.starts_with("step ") => {
                subject.strip_prefix("step ")
            }
            _ => self.probe().and_then(|p| p.split_once('/')).map(|(s, _)| s),
        }
    }
}

/// The result of shrinking.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shrunk {
    pub goal: Goal,
    /// The minimal scenario: the last candidate that kept the finding (the case itself when
    /// none did).
    pub scenario: Scenario,
    /// Its run's result (with both observations).
    pub result: CaseResult,
    /// Candidates run.
    pub runs: usize,
    /// What each step taken removed or simplified, in order.
    pub log: Vec<String>,
    /// Whether the bound on runs stopped it before no candidate kept the finding.
    pub bounded: bool,
}

/// `scenario`, whose run gave `result`, reduced while `goal` holds, running at most
/// `max_runs` candidates.
pub fn shrink(
    plan: &Plan<'_>,
    scenario: &Scenario,
    result: &CaseResult,
    goal: Goal,
    max_runs: usize,
    log: &mut dyn FnMut(&str),
) -> Result<Shrunk> {
    let mut current = scenario.clone();
    let mut current_result = result.clone();
    let mut taken = Vec::new();
    let mut runs = 0;
    let at_once = (plan.workers / plan.proxiers.len()).max(1);
    let mut bounded = false;
    'fixpoint: loop {
        let mut progressed = false;
        for pass in PASSES {
            let mut i = 0;
            loop {
                let candidates = (pass.candidates)(&current);
                if i >= candidates.len() {
                    break;
                }
                // The next few valid candidates from position i, tried at once.
                let mut batch = Vec::new();
                let mut j = i;
                while j < candidates.len() && batch.len() < at_once {
                    let (what, mut candidate) = candidates[j].clone();
                    repair(&mut candidate);
                    if candidate != current && keeps_target(&candidate, &goal) && valid(&candidate)
                    {
                        batch.push((j, what, candidate));
                    }
                    j += 1;
                }
                if batch.is_empty() {
                    break;
                }
                if runs + batch.len() > max_runs {
                    bounded = true;
                    break 'fixpoint;
                }
                let scenarios: Vec<Scenario> = batch.iter().map(|(_, _, c)| c.clone()).collect();
                let results = run_cases(plan, &scenarios)?;
                runs += batch.len();
                let kept = results.iter().position(|r| goal.holds(r));
                match kept {
                    Some(k) => {
                        let (at, what, candidate) = batch.swap_remove(k);
                        log(&format!("{} ({} runs): {what}", pass.name, runs));
                        taken.push(format!("{}: {what}", pass.name));
                        current = candidate;
                        current_result = results[k].clone();
                        progressed = true;
                        // A removal shifts the rest down to `at`; a simplification is done.
                        i = if pass.removes { at } else { at + 1 };
                    }
                    None => i = j,
                }
            }
        }
        if !progressed {
            break;
        }
    }
    Ok(Shrunk {
        goal,
        scenario: current,
        result: current_result,
        runs,
        log: taken,
        bounded,
    })
}

fn valid(s: &Scenario) -> bool {
    let Ok(text) = serde_yaml_ng::to_string(s) else {
        return false;
    };
    crate::scenario::parse(&text, "candidate.yaml").is_ok()
}

/// Whether `s` still has what the goal is at: its probe and its step.
fn keeps_target(s: &Scenario, goal: &Goal) -> bool {
    let step_ok = goal
        .step()
        .is_none_or(|name| s.steps.iter().any(|st| st.name == name));
    let probe_ok = goal.probe().is_none_or(|full| match full.split_once('/') {
        Some((step, probe)) => s
            .steps
            .iter()
            .any(|st| st.name == step && st.probes.iter().any(|p| p.name == probe)),
        None => s.probes.iter().any(|p| p.name == full),
    });
    step_ok && probe_ok
}

/// One kind of candidate: its name in the log, whether it removes items (so the next item
/// moves into the place of one taken), and the candidates of a scenario, in order.
struct Pass {
    name: &'static str,
    removes: bool,
    candidates: fn(&Scenario) -> Vec<(String, Scenario)>,
}

const PASSES: &[Pass] = &[
    Pass {
        name: "steps",
        removes: true,
        candidates: drop_steps,
    },
    Pass {
        name: "probes",
        removes: true,
        candidates: drop_probes,
    },
    Pass {
        name: "services",
        removes: true,
        candidates: drop_services,
    },
    Pass {
        name: "nodes",
        removes: true,
        candidates: drop_nodes,
    },
    Pass {
        name: "pods",
        removes: true,
        candidates: drop_pods,
    },
    Pass {
        name: "slices",
        removes: true,
        candidates: drop_slices,
    },
    Pass {
        name: "ports",
        removes: true,
        candidates: drop_ports,
    },
    Pass {
        name: "endpoints",
        removes: true,
        candidates: drop_endpoints,
    },
    Pass {
        name: "step changes",
        removes: true,
        candidates: drop_step_changes,
    },
    Pass {
        name: "options",
        removes: false,
        candidates: default_options,
    },
    Pass {
        name: "service fields",
        removes: false,
        candidates: simplify_services,
    },
    Pass {
        name: "step fields",
        removes: false,
        candidates: simplify_steps,
    },
];

fn each<T>(
    s: &Scenario,
    items: impl Fn(&Scenario) -> Vec<T>,
    describe: impl Fn(&T) -> String,
    cut: impl Fn(&mut Scenario, usize),
) -> Vec<(String, Scenario)> {
    let list = items(s);
    (0..list.len())
        .map(|i| {
            let mut c = s.clone();
            cut(&mut c, i);
            (describe(&list[i]), c)
        })
        .collect()
}

fn drop_steps(s: &Scenario) -> Vec<(String, Scenario)> {
    each(
        s,
        |s| s.steps.iter().map(|st| st.name.clone()).collect(),
        |n| format!("step {n} removed"),
        |c, i| {
            c.steps.remove(i);
        },
    )
}

/// Every probe as (step index or `None`, probe index).
fn probe_places(s: &Scenario) -> Vec<(Option<usize>, usize, String)> {
    let mut out: Vec<_> = s
        .probes
        .iter()
        .enumerate()
        .map(|(j, p)| (None, j, p.name.clone()))
        .collect();
    for (k, st) in s.steps.iter().enumerate() {
        out.extend(
            st.probes
                .iter()
                .enumerate()
                .map(|(j, p)| (Some(k), j, format!("{}/{}", st.name, p.name))),
        );
    }
    out
}

fn drop_probes(s: &Scenario) -> Vec<(String, Scenario)> {
    each(
        s,
        probe_places,
        |(_, _, n)| format!("probe {n} removed"),
        |c, i| {
            let (step, j, _) = probe_places(c)[i].clone();
            match step {
                None => {
                    c.probes.remove(j);
                }
                Some(k) => {
                    c.steps[k].probes.remove(j);
                }
            }
        },
    )
}

fn drop_services(s: &Scenario) -> Vec<(String, Scenario)> {
    each(
        s,
        |s| {
            s.services
                .iter()
                .map(|x| (x.namespace.clone(), x.name.clone()))
                .collect()
        },
        |(_, n)| format!("Service {n} removed"),
        |c, i| {
            let (ns, name) = (c.services[i].namespace.clone(), c.services[i].name.clone());
            c.services.remove(i);
            for st in &mut c.steps {
                st.apply
                    .services
                    .retain(|x| !(x.namespace == ns && x.name == name));
            }
            // Everything else that names it goes in `repair`.
            c.endpoint_slices
                .retain(|sl| !(sl.namespace == ns && sl.service == name));
        },
    )
}

fn drop_nodes(s: &Scenario) -> Vec<(String, Scenario)> {
    each(
        s,
        |s| s.topology.nodes.iter().map(|n| n.name.clone()).collect(),
        |n| format!("node {n} removed"),
        |c, i| {
            let name = c.topology.nodes.remove(i).name;
            c.topology.pods.retain(|p| p.node != name);
            for st in &mut c.steps {
                st.apply.pods.retain(|p| p.node != name);
            }
        },
    )
}

/// Every item of the initial state and of each step's `apply`, as (step index or `None`,
/// index, name).
fn places<T>(
    s: &Scenario,
    initial: &[T],
    in_step: impl Fn(&crate::scenario::Step) -> &[T],
    name: impl Fn(&T) -> String,
) -> Vec<(Option<usize>, usize, String)> {
    let mut out: Vec<_> = initial
        .iter()
        .enumerate()
        .map(|(j, x)| (None, j, name(x)))
        .collect();
    for (k, st) in s.steps.iter().enumerate() {
        out.extend(
            in_step(st)
                .iter()
                .enumerate()
                .map(|(j, x)| (Some(k), j, name(x))),
        );
    }
    out
}

/// Every pod as (step index or `None`, index, name).
fn pod_places(s: &Scenario) -> Vec<(Option<usize>, usize, String)> {
    places(s, &s.topology.pods, |st| &st.apply.pods, |p| p.name.clone())
}

fn drop_pods(s: &Scenario) -> Vec<(String, Scenario)> {
    each(
        s,
        pod_places,
        |(_, _, n)| format!("pod {n} removed"),
        |c, i| {
            let (step, j, _) = pod_places(c)[i].clone();
            let pod = match step {
                None => c.topology.pods.remove(j),
                Some(k) => c.steps[k].apply.pods.remove(j),
            };
            let owned = |a: &std::net::IpAddr| pod.ip.all().any(|ip| ip == *a);
            let slices = c.endpoint_slices.iter_mut().chain(
                c.steps
                    .iter_mut()
                    .flat_map(|st| st.apply.endpoint_slices.iter_mut()),
            );
            for sl in slices {
                sl.endpoints.retain(|e| !e.addresses.iter().any(owned));
            }
        },
    )
}

/// Every explicit slice as (step index or `None`, index, its Service).
fn slice_places(s: &Scenario) -> Vec<(Option<usize>, usize, String)> {
    places(
        s,
        &s.endpoint_slices,
        |st| &st.apply.endpoint_slices,
        |sl| sl.service.clone(),
    )
}

fn drop_slices(s: &Scenario) -> Vec<(String, Scenario)> {
    each(
        s,
        slice_places,
        |(_, _, svc)| format!("a slice of {svc} removed"),
        |c, i| {
            let (step, j, _) = slice_places(c)[i].clone();
            match step {
                None => {
                    c.endpoint_slices.remove(j);
                }
                Some(k) => {
                    c.steps[k].apply.endpoint_slices.remove(j);
                }
            }
        },
    )
}

fn drop_ports(s: &Scenario) -> Vec<(String, Scenario)> {
    let places = |s: &Scenario| -> Vec<(usize, usize, String)> {
        s.services
            .iter()
            .enumerate()
            .filter(|(_, svc)| svc.spec.ports.len() > 1)
            .flat_map(|(i, svc)| {
                svc.spec.ports.iter().enumerate().map(move |(j, p)| {
                    (
                        i,
                        j,
                        format!("{}:{}", svc.name, p.name.clone().unwrap_or_default()),
                    )
                })
            })
            .collect()
    };
    each(
        s,
        places,
        |(_, _, n)| format!("port {n} removed"),
        |c, k| {
            let (i, j, _) = places(c)[k].clone();
            let port = c.services[i].spec.ports.remove(j);
            let (ns, name) = (c.services[i].namespace.clone(), c.services[i].name.clone());
            for sl in c
                .endpoint_slices
                .iter_mut()
                .filter(|sl| sl.namespace == ns && sl.service == name)
            {
                sl.ports.retain(|p| p.name != port.name);
            }
            if c.services[i].spec.ports.len() == 1 {
                // One port left: probes may name it by its number, as the rest of the file does.
                let left = &c.services[i].spec.ports[0];
                let number = TargetPort::Number(left.port);
                let name_ref = left.name.clone().map(TargetPort::Name);
                for p in c
                    .probes
                    .iter_mut()
                    .chain(c.steps.iter_mut().flat_map(|st| st.probes.iter_mut()))
                {
                    if p.to.port.is_some() && p.to.port == name_ref {
                        p.to.port = Some(number.clone());
                    }
                }
            }
        },
    )
}

fn drop_endpoints(s: &Scenario) -> Vec<(String, Scenario)> {
    let places = |s: &Scenario| -> Vec<(Option<usize>, usize, usize, String)> {
        slice_places(s)
            .into_iter()
            .flat_map(|(step, j, svc)| {
                let slice = match step {
                    None => &s.endpoint_slices[j],
                    Some(k) => &s.steps[k].apply.endpoint_slices[j],
                };
                (0..slice.endpoints.len()).map(move |e| (step, j, e, svc.clone()))
            })
            .collect()
    };
    each(
        s,
        places,
        |(_, _, _, svc)| format!("an endpoint of {svc} removed"),
        |c, k| {
            let (step, j, e, _) = places(c)[k].clone();
            let slice = match step {
                None => &mut c.endpoint_slices[j],
                Some(st) => &mut c.steps[st].apply.endpoint_slices[j],
            };
            slice.endpoints.remove(e);
        },
    )
}

fn drop_step_changes(s: &Scenario) -> Vec<(String, Scenario)> {
    let mut out = Vec::new();
    for (k, st) in s.steps.iter().enumerate() {
        for j in 0..st.apply.services.len() {
            let mut c = s.clone();
            let gone = c.steps[k].apply.services.remove(j);
            out.push((
                format!("step {}: apply of Service {} removed", st.name, gone.name),
                c,
            ));
        }
        for j in 0..st.delete.services.len() {
            let mut c = s.clone();
            let gone = c.steps[k].delete.services.remove(j);
            out.push((
                format!("step {}: deletion of Service {gone} removed", st.name),
                c,
            ));
        }
        for j in 0..st.delete.pods.len() {
            let mut c = s.clone();
            let gone = c.steps[k].delete.pods.remove(j);
            out.push((
                format!("step {}: deletion of pod {gone} removed", st.name),
                c,
            ));
        }
        for j in 0..st.delete.endpoint_slices.len() {
            let mut c = s.clone();
            let gone = c.steps[k].delete.endpoint_slices.remove(j);
            out.push((
                format!("step {}: deletion of {gone}'s slices removed", st.name),
                c,
            ));
        }
    }
    out
}

fn default_options(s: &Scenario) -> Vec<(String, Scenario)> {
    let d = ProxierOptions::default();
    let mut out = Vec::new();
    let mut option = |name: &str, set: &dyn Fn(&mut ProxierOptions)| {
        let mut c = s.clone();
        set(&mut c.proxier);
        out.push((format!("proxier.{name} at its default"), c));
    };
    option("masqueradeAll", &|o| o.masquerade_all = d.masquerade_all);
    option("clusterCIDR", &|o| o.cluster_cidr = d.cluster_cidr);
    option("localhostNodePorts", &|o| {
        o.localhost_node_ports = d.localhost_node_ports
    });
    option("masqueradeBit", &|o| o.masquerade_bit = d.masquerade_bit);
    option("nodePortAddresses", &|o| o.node_port_addresses.clear());
    option("tcpBeLiberal", &|o| o.tcp_be_liberal = d.tcp_be_liberal);
    option("ipvsScheduler", &|o| {
        o.ipvs_scheduler = d.ipvs_scheduler.clone()
    });
    option("strictARP", &|o| o.strict_arp = d.strict_arp);
    out
}

fn simplify_services(s: &Scenario) -> Vec<(String, Scenario)> {
    type Edit = (&'static str, fn(&mut crate::scenario::Service));
    const EDITS: &[Edit] = &[
        ("labels removed", |svc| svc.labels.clear()),
        ("externalIPs removed", |svc| {
            svc.spec.external_ips.clear();
            if svc.spec.type_ == ServiceType::ClusterIP {
                svc.spec.external_traffic_policy = None;
            }
        }),
        ("externalTrafficPolicy at its default", |svc| {
            svc.spec.external_traffic_policy = None;
            svc.spec.health_check_node_port = None;
        }),
        ("healthCheckNodePort removed", |svc| {
            svc.spec.health_check_node_port = None
        }),
        ("internalTrafficPolicy at its default", |svc| {
            svc.spec.internal_traffic_policy = None
        }),
        ("sessionAffinity at its default", |svc| {
            svc.spec.session_affinity = SessionAffinity::None;
            svc.spec.session_affinity_config = None;
        }),
        ("loadBalancerSourceRanges removed", |svc| {
            svc.spec.load_balancer_source_ranges.clear()
        }),
        ("ingress ipMode at its default", |svc| {
            for i in &mut svc.status.load_balancer.ingress {
                i.ip_mode = None;
            }
        }),
        ("LoadBalancer made NodePort", |svc| {
            if svc.spec.type_ == ServiceType::LoadBalancer {
                svc.spec.type_ = ServiceType::NodePort;
                svc.spec.load_balancer_source_ranges.clear();
                svc.spec.health_check_node_port = None;
                svc.status = Default::default();
            }
        }),
        ("NodePort made ClusterIP", |svc| {
            if svc.spec.type_ == ServiceType::NodePort {
                svc.spec.type_ = ServiceType::ClusterIP;
                for p in &mut svc.spec.ports {
                    p.node_port = None;
                }
                if svc.spec.external_ips.is_empty() {
                    svc.spec.external_traffic_policy = None;
                }
            }
        }),
        ("targetPorts by number", |svc| {
            for p in &mut svc.spec.ports {
                if let Some(TargetPort::Name(_)) = p.target_port {
                    p.target_port = Some(TargetPort::Number(super::generate::target_number(p)));
                }
            }
        }),
        ("traffic policies Cluster", |svc| {
            if svc.spec.external_traffic_policy == Some(TrafficPolicy::Cluster) {
                svc.spec.external_traffic_policy = None;
            }
        }),
    ];
    let mut out = Vec::new();
    for (i, svc) in s.services.iter().enumerate() {
        for (what, edit) in EDITS {
            let mut c = s.clone();
            edit(&mut c.services[i]);
            out.push((format!("{}: {what}", svc.name), c));
        }
    }
    for (k, st) in s.steps.iter().enumerate() {
        for (j, svc) in st.apply.services.iter().enumerate() {
            for (what, edit) in EDITS {
                let mut c = s.clone();
                edit(&mut c.steps[k].apply.services[j]);
                out.push((format!("step {}: {}: {what}", st.name, svc.name), c));
            }
        }
    }
    out
}

fn simplify_steps(s: &Scenario) -> Vec<(String, Scenario)> {
    let mut out = Vec::new();
    for (k, st) in s.steps.iter().enumerate() {
        let mut c = s.clone();
        c.steps[k].wait_seconds = 0;
        out.push((format!("step {}: no wait", st.name), c));
        let mut c = s.clone();
        c.steps[k].restart_proxier = false;
        out.push((format!("step {}: no restart", st.name), c));
    }
    out
}

/// What a cut left dangling goes with it: probes from or to what is gone, continues of flows
/// no longer kept, slices of Services gone, step changes of objects gone. Whatever is still
/// wrong, validation refuses before the candidate costs a run.
fn repair(s: &mut Scenario) {
    use std::collections::BTreeSet;
    let nodes: BTreeSet<String> = s.topology.nodes.iter().map(|n| n.name.clone()).collect();
    let pods: BTreeSet<String> = s
        .topology
        .pods
        .iter()
        .chain(s.steps.iter().flat_map(|st| st.apply.pods.iter()))
        .flat_map(|p| [p.name.clone(), format!("{}/{}", p.namespace, p.name)])
        .collect();
    let services: BTreeSet<String> = s
        .services
        .iter()
        .chain(s.steps.iter().flat_map(|st| st.apply.services.iter()))
        .flat_map(|x| [x.name.clone(), format!("{}/{}", x.namespace, x.name)])
        .collect();
    let probe_ok = |p: &crate::scenario::Probe| {
        p.from.pod.as_ref().is_none_or(|x| pods.contains(x))
            && p.from.node.as_ref().is_none_or(|x| nodes.contains(x))
            && p.from
                .node_localhost
                .as_ref()
                .is_none_or(|x| nodes.contains(x))
            && p.to.node.as_ref().is_none_or(|x| nodes.contains(x))
            && p.to.service.as_ref().is_none_or(|x| services.contains(x))
    };
    s.probes.retain(probe_ok);
    for st in &mut s.steps {
        st.probes.retain(probe_ok);
        st.delete.pods.retain(|x| pods.contains(x));
        st.delete.services.retain(|x| services.contains(x));
        st.delete.endpoint_slices.retain(|x| services.contains(x));
        st.apply
            .endpoint_slices
            .retain(|sl| services.contains(&format!("{}/{}", sl.namespace, sl.service)));
    }
    s.endpoint_slices
        .retain(|sl| services.contains(&format!("{}/{}", sl.namespace, sl.service)));
    // Continues of flows whose keeping probe is gone.
    let mut kept: BTreeSet<String> = s.probes.iter().filter_map(|p| p.keep.clone()).collect();
    for st in &mut s.steps {
        st.probes
            .retain(|p| p.continues.as_ref().is_none_or(|f| kept.contains(f)));
        kept.extend(st.probes.iter().filter_map(|p| p.keep.clone()));
    }
}
