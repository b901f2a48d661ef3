//! One scenario against one proxier: build the topology, program every node, fire every probe,
//! and produce the observation document plus the list of violated expectations.
//!
//! The stages, each in its own file: [`stage`] (namespaces built, nodes programmed, a step
//! applied), [`drain`] (real servers that ended connections hold waited out after a step),
//! [`probes`] (a group of probes fired and judged), [`converge`] (a re-synced node against a
//! fresh one). What a run observes is [`crate::document`].

mod converge;
mod drain;
mod probes;
mod stage;

pub use crate::drivers::programmer::{NodeProgrammer, RunProgrammer};
pub use probes::shots_to_reach_all;
pub use stage::{stage, stage_with_prefix, Advanced, Staged};

use crate::document::{ScenarioObservation, StepObservation};
use crate::evidence::ProbeEvidence;
use crate::kept_flows::KeptFlows;
use crate::probe::{self, Patience};
use crate::scenario::{self, Scenario};
use anyhow::{Context, Result};
use probes::ProbeGroup;
use std::time::Duration;

/// How a violation of a step's convergence check ends: `… after step `NAME` ` and this.
pub const NOT_CONVERGED: &str = "(a fresh node synced to the same state differs)";

/// The outcome of running a scenario: what was observed, and which expectations failed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ScenarioRun {
    pub observation: ScenarioObservation,
    /// One line per violated expectation (empty when the proxier conforms).
    pub violations: Vec<String>,
    /// For each probe with a violated expectation: its spec and the relevant kernel state of
    /// the nodes involved, read before teardown (empty, and nothing read, when all pass).
    pub evidence: Vec<ProbeEvidence>,
    /// How long it took; not part of the observation, which must not vary from run to run.
    pub timing: Timing,
    /// The shots that ended at a traced DROP verdict instead of the timeout, as (probe, where
    /// the kernel dropped it); not part of the observation, which is the same either way.
    pub drops_at_verdict: Vec<(String, probe::DropVerdict)>,
}

/// Wall-clock time of a scenario run's parts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timing {
    /// When the run began.
    pub started: std::time::SystemTime,
    /// Building the namespaces, programming the nodes and starting the backends.
    pub setup: Duration,
    /// Each probe, in the scenario's order (the same order as the observation's
    /// [`ScenarioObservation::all_probes`]).
    pub probes: Vec<Duration>,
    /// Each step's re-sync of every node (the convergence check excluded).
    pub step_syncs: Vec<Duration>,
    /// For each step, programming the same state into a fresh twin of every node (the
    /// convergence check's reference): a first sync of the state, to compare the update with.
    pub fresh_syncs: Vec<Duration>,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            started: std::time::SystemTime::UNIX_EPOCH,
            setup: Duration::ZERO,
            probes: Vec::new(),
            step_syncs: Vec::new(),
            fresh_syncs: Vec::new(),
        }
    }
}

impl Timing {
    /// Setup, every probe and every step's sync (teardown, after the run, is not counted).
    pub fn total(&self) -> Duration {
        self.setup + self.probes.iter().sum::<Duration>() + self.step_syncs.iter().sum::<Duration>()
    }
}

/// Refuses `scenario` before anything is built when `proxier` cannot take it, or cannot take
/// its steps, with the reason.
pub fn refusal<P: NodeProgrammer + ?Sized>(scenario: &Scenario, proxier: &P) -> Result<()> {
    if let Some(why) = proxier.scenario_problem(scenario) {
        anyhow::bail!(
            "{} cannot run against {}: {why}",
            scenario.name,
            proxier.label()
        );
    }
    if !scenario.steps.is_empty() {
        if let Some(why) = proxier.steps_problem(scenario) {
            anyhow::bail!("{}: {why}", scenario.name);
        }
    }
    Ok(())
}

/// Runs `scenario` against `proxier` in freshly built namespaces, removed afterwards: the
/// initial probes, then each step (its changes, a re-sync of every node, the convergence
/// check, its probes).
pub async fn run_scenario<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &P,
    patience: impl Into<Patience>,
) -> Result<ScenarioRun> {
    let patience = patience.into();
    refusal(scenario, proxier)?;
    let (started_at, started) = (std::time::SystemTime::now(), std::time::Instant::now());
    let mut staged = stage(scenario, proxier).await?;
    let mut timing = Timing {
        started: started_at,
        setup: started.elapsed(),
        probes: Vec::new(),
        step_syncs: Vec::new(),
        fresh_syncs: Vec::new(),
    };
    let mut judged = Judged::default();
    let mut flows = KeptFlows::default();
    // One verdict table for the run (creating and deleting it costs ~70 ms in the emulated
    // VM), marking only while a group's probes fire.
    let mut verdicts = patience.verdict_watch(&staged.topo)?;
    let probes = ProbeGroup {
        state: scenario,
        cluster: &staged.cluster,
        step: None,
        timeout: patience.timeout,
        programmer: staged.programmer.as_ref(),
    }
    .run(
        &staged.topo,
        proxier,
        verdicts.as_mut(),
        &mut flows,
        &mut judged,
        &mut timing,
    )?;
    let mut steps = Vec::new();
    let mut flushed_before = std::collections::BTreeMap::new();
    for (k, step) in scenario.steps.iter().enumerate() {
        let name = scenario::step_name(step, k);
        let context = || format!("{} step `{name}`", scenario.name);
        let advanced = staged.advance(scenario, k).await.with_context(context)?;
        timing.step_syncs.push(advanced.sync);
        if step.restart_proxier {
            // A restarted kube-proxy has forgotten the chains it flushed and flushes them again.
            flushed_before.clear();
        }
        let state = &advanced.state.scenario;
        let (not_converged, fresh_sync) = converge::convergence_check(
            &staged.topo,
            state,
            &staged.cluster,
            &name,
            staged.programmer.as_mut(),
            &mut flushed_before,
        )
        .await
        .with_context(context)?;
        timing.fresh_syncs.push(fresh_sync);
        judged.violations.extend(not_converged.iter().map(|d| {
            format!(
                "{} [{}]: {d} after step `{name}` {NOT_CONVERGED}",
                scenario.name,
                proxier.label()
            )
        }));
        let probes = ProbeGroup {
            state,
            cluster: &staged.cluster,
            step: Some(&name),
            timeout: patience.timeout,
            programmer: staged.programmer.as_ref(),
        }
        .run(
            &staged.topo,
            proxier,
            verdicts.as_mut(),
            &mut flows,
            &mut judged,
            &mut timing,
        )
        .with_context(context)?;
        steps.push(StepObservation {
            step: name,
            nodes: advanced.nodes,
            converged: not_converged.is_empty(),
            not_converged,
            probes,
        });
    }
    staged
        .programmer
        .finish()
        .with_context(|| format!("{} against {}", scenario.name, proxier.label()))?;
    Ok(ScenarioRun {
        observation: ScenarioObservation {
            scenario: scenario.name.clone(),
            proxier: proxier.label(),
            nodes: staged.nodes.clone(),
            probes,
            steps,
        },
        violations: judged.violations,
        evidence: judged.evidence,
        timing,
        drops_at_verdict: judged.drops_at_verdict,
    })
}

/// Violations and evidence gathered over a run, and how its shots ended.
#[derive(Default)]
struct Judged {
    violations: Vec<String>,
    evidence: Vec<ProbeEvidence>,
    drops_at_verdict: Vec<(String, probe::DropVerdict)>,
}
