//! An `exec:` program syncs a node itself, or prints what the harness applies.

use super::{applier, summarize_effective, NodeProgrammer, RunProgrammer};
use crate::document::NodeSummary;
use crate::drivers::exec::{input_for, step_input_for, ExecProxier, NodeSync};
use crate::proxier::Resync;
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::Scenario;
use crate::topology::NodeNs;
use anyhow::{Context, Result};

impl NodeProgrammer for ExecProxier {
    fn label(&self) -> String {
        // The whole command line: two versions that differ by a flag are two proxiers.
        format!("exec:{}", self.command_line())
    }
    /// Unknown: an external proxier may balance at random, so only sets are recorded.
    fn random_choice(&self) -> bool {
        true
    }
    fn begin<'a>(&'a self, _scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>> {
        Ok(Box::new(ExecRun(self)))
    }
}

/// The program runs afresh for every sync; nothing of it lives between them.
struct ExecRun<'a>(&'a ExecProxier);

impl ExecRun<'_> {
    /// What the node holds after `sync`, or which of its printed items the kernel lacks.
    fn held(&self, node: &NodeNs, sync: NodeSync, at: Option<&str>) -> Result<NodeSummary> {
        if let Some(first) = sync.missing.first() {
            let at = at.map(|s| format!(" at step `{s}`")).unwrap_or_default();
            anyhow::bail!(
                "{} on node {}{at}: the kernel does not hold {} item(s) of its programming, \
                 e.g. {first}",
                self.0.label(),
                node.name,
                sync.missing.len(),
            );
        }
        Ok(summarize_effective(node, &sync.effective))
    }
}

impl RunProgrammer for ExecRun<'_> {
    fn program_node(
        &mut self,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        // Not labelled: every output already names the run's proxier beside its errors.
        let sync = self
            .0
            .sync_node(&node.netns, &input_for(cluster, ctx), &applier()?)?;
        self.held(node, sync, None)
    }

    /// Runs the program again with the new state and what changed (input version 2); what it
    /// prints is applied over the node as it is.
    fn resync_node(
        &mut self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let input = step_input_for(cluster, ctx, resync.step, resync.previous);
        let sync = self
            .0
            .sync_node(&node.netns, &input, &applier()?)
            .with_context(|| format!("at step `{}`", resync.step))?;
        self.held(node, sync, Some(resync.step))
    }
}
