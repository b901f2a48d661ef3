//! The probes of the initial state or of one step: planned, fired, observed and judged.

use super::{Judged, Timing};
use crate::document::ProbeObservation;
use crate::drivers::programmer::{NodeProgrammer, RunProgrammer};
use crate::evidence::Collector;
use crate::kept_flows::KeptFlows;
use crate::observe;
use crate::observe::node_addresses;
use crate::probe;
use crate::scenario::cluster::ClusterState;
use crate::scenario::{Probe, Scenario, TargetPort};
use crate::topology::Topology;
use anyhow::{Context, Result};
use std::time::Duration;

/// How many endpoints a probe's target could be answered by (an upper bound over nodes and
/// traffic policies: every usable endpoint of the service port). A literal `ip`/`dport` is
/// looked up among the Service addresses (ClusterIP, externalIPs, LB VIPs, NodePorts on any
/// node address), so a probe naming an address rather than a Service is judged the same way.
fn candidate_backends(cluster: &ClusterState, scenario: &Scenario, probe: &Probe) -> usize {
    // The state of the probe's family: that family's proxier is the one that answers it.
    let Some(cluster) = cluster.of(scenario.probe_family(probe)) else {
        return 1;
    };
    let port = match (&probe.to.service, probe.to.ip, probe.to.dport) {
        (Some(wanted), _, _) => {
            let (ns, name) = wanted.split_once('/').unwrap_or(("default", wanted));
            cluster
                .service_ports
                .iter()
                .filter(|sp| sp.namespace == ns && sp.name == name)
                .find(|sp| match &probe.to.port {
                    None => true,
                    Some(TargetPort::Number(n)) => sp.port == *n,
                    Some(TargetPort::Name(n)) => sp.port_name == *n,
                })
        }
        (None, Some(ip), Some(dport)) => {
            let node_ip = scenario.topology.nodes.iter().any(|n| n.owns(ip));
            cluster.service_ports.iter().find(|sp| {
                sp.protocol == probe.protocol
                    && ((sp.port == dport
                        && (sp.cluster_ip == Some(ip)
                            || sp.external_ips.contains(&ip)
                            || sp.load_balancer_vips.contains(&ip)))
                        || (node_ip && sp.node_port == Some(dport)))
            })
        }
        _ => None,
    };
    port.map(|sp| {
        // Only endpoints a proxier may pick: ready ones, else serving+terminating ones, and
        // that per traffic policy: a node without a ready local endpoint serves an eTP/iTP
        // Local Service from its serving-terminating ones although others are ready
        // elsewhere (`CategorizeEndpoints`, pkg/proxy/topology.go). The larger of the two
        // sets bounds either pick; extra shots at a Service with none would only feed the
        // kernel's ICMP rate limit and turn REJECTs into apparent drops.
        let ready = sp.endpoints.iter().filter(|e| e.ready).count();
        let terminating = sp
            .endpoints
            .iter()
            .filter(|e| e.serving && e.terminating)
            .count();
        ready.max(terminating)
    })
    .unwrap_or(1)
}

/// Shots needed so that, when each picks one of `n` backends uniformly at random, the chance
/// that some backend is never picked is below 1e-12 (union bound: n·(1−1/n)^k). Fixed by `n`
/// alone, so the number of shots — and so the recorded set — is the same on every run.
pub fn shots_to_reach_all(n: usize) -> u32 {
    if n <= 1 {
        return 1;
    }
    let miss = 1.0 - 1.0 / n as f64;
    let k = ((1e-12 / n as f64).ln() / miss.ln()).ceil();
    (k as u32).clamp(1, 900)
}

/// The probes of the initial state or of one step.
pub(super) struct ProbeGroup<'a> {
    /// The scenario as it stands (its `probes` are the group's).
    pub(super) state: &'a Scenario,
    pub(super) cluster: &'a ClusterState,
    /// The step's name; observations of its probes are named `STEP/PROBE`.
    pub(super) step: Option<&'a str>,
    /// How long a shot waits for its answer (or for its drop, with a verdict watch).
    pub(super) timeout: Duration,
    /// What programs the nodes, for what a proxier says of a node in the evidence.
    pub(super) programmer: &'a dyn RunProgrammer,
}

impl ProbeGroup<'_> {
    pub(super) fn run<P: NodeProgrammer + ?Sized>(
        &self,
        topo: &Topology,
        proxier: &P,
        verdicts: Option<&mut probe::VerdictWatch>,
        flows: &mut KeptFlows,
        judged: &mut Judged,
        timing: &mut Timing,
    ) -> Result<Vec<ProbeObservation>> {
        let (scenario, cluster) = (self.state, self.cluster);
        let addresses = node_addresses(topo);
        let mut collector = Collector::new(topo);
        let mut observed = Vec::new();
        let mut verdicts = verdicts;
        for (index, spec) in scenario.probes.iter().enumerate() {
            let probe_started = std::time::Instant::now();
            let expectation = spec.expectation_for(&proxier.expectations_of());
            let (plan, shots) = if let Some(flow) = &spec.continues {
                let (plan, shot) = flows
                    .continue_flow(topo, flow)
                    .with_context(|| format!("continuing flow `{flow}` in probe {}", spec.name))?;
                (plan, vec![shot])
            } else {
                let mut plan = probe::plan(scenario, topo, index)?;
                if let Some(flow) = &spec.keep {
                    let shot = flows
                        .open(topo, flow, &plan, self.timeout)
                        .with_context(|| format!("keeping flow `{flow}`"))?;
                    (plan, vec![shot])
                } else {
                    // A random choice needs enough shots to show the whole set reached, unless
                    // the expectation itself declares a deterministic choice (counts, sequence).
                    if proxier.random_choice() && !expectation.is_some_and(|e| e.fixes_shot_count())
                    {
                        let candidates = candidate_backends(cluster, scenario, spec);
                        plan.repeat = plan.repeat.max(shots_to_reach_all(candidates));
                    }
                    let shots = probe::fire_keeping(
                        topo,
                        &plan,
                        self.timeout,
                        &flows.entries(),
                        verdicts.as_deref_mut(),
                    )
                    .with_context(|| format!("firing probe {}", plan.name))?;
                    (plan, shots)
                }
            };
            let mut obs =
                observe::observe_probe(&plan, &shots, &addresses, proxier.random_choice());
            if let Some(step) = self.step {
                obs.probe = format!("{step}/{}", spec.name);
            }
            judged.drops_at_verdict.extend(
                shots
                    .iter()
                    .filter_map(|s| s.dropped_at.clone())
                    .map(|at| (obs.probe.clone(), at)),
            );
            if let Some(expect) = expectation {
                let found = crate::expectation_check::check(expect, &obs, &addresses);
                if !found.is_empty() {
                    let mut evidence = collector.collect(scenario, spec, &plan, expect, &found);
                    evidence.probe = obs.probe.clone();
                    for node in &mut evidence.nodes {
                        node.proxier = self.programmer.evidence(&node.node);
                    }
                    judged.evidence.push(evidence);
                }
                judged.violations.extend(
                    found
                        .into_iter()
                        .map(|v| format!("{} [{}]: {v}", scenario.name, proxier.label())),
                );
            }
            observed.push(obs);
            timing.probes.push(probe_started.elapsed());
        }
        if let Some(v) = verdicts {
            // Inert before anything programs the nodes again.
            v.disarm()?;
        }
        Ok(observed)
    }
}

#[cfg(test)]
mod tests {
    use super::shots_to_reach_all;

    #[test]
    fn shot_counts_make_missing_a_backend_negligible() {
        assert_eq!(shots_to_reach_all(0), 1);
        assert_eq!(shots_to_reach_all(1), 1);
        for n in 2..=8usize {
            let k = shots_to_reach_all(n);
            let p_miss = n as f64 * (1.0 - 1.0 / n as f64).powi(k as i32);
            assert!(p_miss < 1e-12, "n={n} k={k} p={p_miss}");
        }
        assert_eq!(shots_to_reach_all(2), 41);
    }
}
