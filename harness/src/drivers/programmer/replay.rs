//! A `replay:` capture: what a real node held, made to hold again.

use super::{applier, summarize_effective, NodeProgrammer, RunProgrammer};
use crate::document::NodeSummary;
use crate::drivers::replay::Replay;
use crate::proxier::Resync;
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::{self, Scenario};
use crate::topology::NodeNs;
use anyhow::{Context, Result};

impl NodeProgrammer for Replay {
    fn label(&self) -> String {
        format!("replay:{}", self.dir.display())
    }
    /// A replay of a scenario with steps holds one capture per step: `DIR/<step>/<node>/`.
    fn steps_problem(&self, scenario: &Scenario) -> Option<String> {
        let missing: Vec<String> = scenario
            .steps
            .iter()
            .enumerate()
            .map(|(k, st)| scenario::step_name(st, k))
            .filter(|name| !self.at_step(name).dir.is_dir())
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "{} has no capture for step(s) {}: a replay of a scenario with steps holds one \
                 capture per step, {}/<step>/<node>/",
                self.label(),
                missing.join(", "),
                self.dir.display()
            )
        })
    }
    fn random_choice(&self) -> bool {
        true
    }
    fn needs_ipvs(&self) -> bool {
        self.captures_ipvs()
    }
    fn begin<'a>(&'a self, _scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>> {
        Ok(Box::new(ReplayRun(self)))
    }
}

struct ReplayRun<'a>(&'a Replay);

/// A capture of one node, applied to `node`.
fn program_capture(replay: &Replay, node: &NodeNs) -> Result<NodeSummary> {
    // Not labelled: every output already names the run's proxier beside its errors.
    let (_, effective) = replay.sync_node(&node.netns, &node.name, &applier()?)?;
    Ok(summarize_effective(node, &effective))
}

impl RunProgrammer for ReplayRun<'_> {
    fn program_node(
        &mut self,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        program_capture(self.0, node)
    }

    /// Makes the node hold exactly the step's capture: a capture lists everything the real
    /// node held after the step, and cannot say what went, so its tables replace the node's
    /// and IPVS services it does not list are deleted.
    fn resync_node(
        &mut self,
        resync: &Resync<'_>,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let replay = self.0.at_step(resync.step);
        let (_, effective) = replay
            .sync_node_replacing(&node.netns, &node.name, &applier()?)
            .with_context(|| format!("{} at step `{}`", replay.label(), resync.step))?;
        Ok(summarize_effective(node, &effective))
    }

    fn program_fresh(
        &mut self,
        step: &str,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        program_capture(&self.0.at_step(step), node)
    }
}
