//! What the runner points at nodes: a [`NodeProgrammer`] (one per proxier, shared by the
//! workers of a parallel run) begins a [`RunProgrammer`] for each run, which programs that
//! run's nodes and lives as long as the run.
//!
//! The kinds: a pure [`Proxier`](super::Proxier) whose programming the harness computes and
//! applies ([`pure`]), an `exec:` program that syncs a node itself ([`exec`]), a `replay:`
//! capture ([`replay`]). A real proxier process per node, fed by an API server, is one more.

mod exec;
mod named;
mod pure;
mod replay;
mod summary;

use crate::document::NodeSummary;
pub use named::Named;
pub(crate) use summary::{summarize, summarize_effective};

use crate::programming::Applier;
use crate::proxier::Resync;
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::Scenario;
use crate::topology::NodeNs;
use anyhow::{Context, Result};

/// Whatever the runner can point at a node. Shared by the workers of a parallel run
/// ([`crate::operations::parallel`]), so `Send + Sync`; what one run needs it keeps in the
/// [`RunProgrammer`] it begins.
pub trait NodeProgrammer: Send + Sync {
    /// How every output names it.
    fn label(&self) -> String;
    /// What `--proxier` takes to build it again (the label, unless named: `NAME=SPEC`), for
    /// the commands an output suggests.
    fn spec(&self) -> String {
        self.label()
    }
    /// Backend choice random by design: record sets of backends, not sequences.
    fn random_choice(&self) -> bool;

    /// Whether it needs IP_VS (and the dummy device kube-ipvs0 is) in the kernel: decided
    /// from what it is, not from its spelling. An `exec:` or `api:` proxier is only known by
    /// what it programs: one that writes IPVS services on a kernel without IP_VS fails when
    /// they are applied, saying so.
    fn needs_ipvs(&self) -> bool {
        false
    }

    /// Why this proxier cannot run `scenario`'s steps, if it cannot (checked before anything
    /// is built).
    fn steps_problem(&self, scenario: &Scenario) -> Option<String> {
        let _ = scenario;
        None
    }

    /// The name whose `expectFor` expectations judge this proxier (by default its label): a
    /// real kube-proxy is judged as the built-in of its mode.
    fn expectations_of(&self) -> String {
        self.label()
    }

    /// Why this proxier cannot run `scenario` at all, if it cannot (checked before anything is
    /// built): a setting it has no way to take, say.
    fn scenario_problem(&self, scenario: &Scenario) -> Option<String> {
        let _ = scenario;
        None
    }

    /// Where the harness's stand-in for the proxier's health server listens on the node `ctx`
    /// (given the scenario's proxier `options`), for a proxier that does not serve
    /// healthCheckNodePorts itself; `None`: the IPv4 wildcard and the node's IPv6 address.
    fn health_check_addresses(
        &self,
        ctx: &crate::scenario::cluster::NodeContext,
        options: &crate::scenario::ProxierOptions,
    ) -> Option<Vec<std::net::IpAddr>> {
        let _ = (ctx, options);
        None
    }

    /// Begins one run of `scenario` (as it stands initially): what programs its nodes until
    /// the run ends.
    fn begin<'a>(&'a self, scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>>;
}

/// Programs the nodes of one run: their first sync, each step's re-sync, and the fresh twins
/// the convergence check compares them with. Dropped when the run ends, before its
/// namespaces go.
pub trait RunProgrammer {
    /// The first sync of `node`.
    fn program_node(
        &mut self,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary>;

    /// [`RunProgrammer::program_node`] of every one of `nodes`, in their order. By default one
    /// after the other; a proxier whose first sync takes long programs them at once.
    fn program_nodes(
        &mut self,
        cluster: &ClusterState,
        nodes: &[(&NodeContext, &NodeNs)],
    ) -> Result<Vec<NodeSummary>> {
        nodes
            .iter()
            .map(|(ctx, node)| self.program_node(cluster, ctx, node))
            .collect()
    }

    /// The cluster is now `state`, after step `step`; called once per step, before any of
    /// `nodes` re-syncs. With `restart`, the proxier restarts before it syncs and remembers
    /// nothing.
    fn advance(
        &mut self,
        nodes: &[NodeNs],
        state: &Scenario,
        step: &str,
        restart: bool,
    ) -> Result<()> {
        let _ = (nodes, state, step, restart);
        Ok(())
    }

    /// A later sync of a node programmed before (a step of a scenario). By default a full sync
    /// as the first one, over whatever the node holds.
    fn resync_node(
        &mut self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let _ = resync;
        self.program_node(cluster, ctx, node)
    }

    /// The connections that held some of `node`'s real servers at weight 0 after a re-sync
    /// (graceful termination) have ended and expired: what the node holds once the proxier has
    /// seen it. By default one more sync of the same state, which is what kube-proxy's
    /// graceful-termination loop does for such real servers (`tryDeleteRs`,
    /// pkg/proxy/ipvs/graceful_termination.go).
    fn drained(
        &mut self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        self.resync_node(resync, cluster, ctx, node)
    }

    /// What this proxier programs into a fresh node for the state after step `step`: the
    /// convergence check's reference. By default its first sync of that state.
    fn program_fresh(
        &mut self,
        step: &str,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let _ = step;
        self.program_node(cluster, ctx, node)
    }

    /// [`RunProgrammer::program_fresh`] of every one of `twins` (fresh nodes standing for the
    /// nodes named in their contexts). By default one after the other; a proxier whose first
    /// sync takes long programs them at once.
    fn program_fresh_all(
        &mut self,
        step: &str,
        cluster: &ClusterState,
        twins: &[(&NodeContext, &NodeNs)],
    ) -> Result<()> {
        for (ctx, twin) in twins {
            self.program_fresh(step, cluster, ctx, twin)
                .with_context(|| format!("programming a fresh node {}", twin.name))?;
        }
        Ok(())
    }

    /// What the proxier of `node` said and did, for the evidence of a failing probe there (a
    /// real proxier's log tail, API requests and events); `None` for one that says nothing.
    fn evidence(&self, node: &str) -> Option<String> {
        let _ = node;
        None
    }

    /// The run is over: whatever should have lived through it, did (a real proxier that exited
    /// during the run is an error).
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }

    /// Whether the fresh twins this proxier programs need the node's devices and addresses
    /// (it reads them from the interfaces, not from the scenario).
    fn twins_need_addresses(&self) -> bool {
        false
    }

    /// Whether the proxier answers healthCheckNodePorts itself (a real kube-proxy's health
    /// server); otherwise the harness stands in for it with a listener on every node.
    fn serves_health_checks(&self) -> bool {
        false
    }
}

/// The applier settings an external proxier's output is applied with.
fn applier() -> Result<Applier> {
    Ok(Applier::new(crate::kernel_features::apply_options()?))
}
