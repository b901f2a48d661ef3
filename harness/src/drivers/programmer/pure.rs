//! A pure [`Proxier`]: the harness computes each family's programming and applies it.

use super::{summarize, NodeProgrammer, RunProgrammer};
use crate::document::NodeSummary;
use crate::proxier::{families, Proxier, Resync};
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::Scenario;
use crate::topology::NodeNs;
use anyhow::{Context, Result};

impl<P: Proxier + ?Sized> NodeProgrammer for P {
    fn label(&self) -> String {
        self.name()
    }
    fn random_choice(&self) -> bool {
        self.random_backend_choice()
    }
    fn needs_ipvs(&self) -> bool {
        self.programs_ipvs()
    }
    /// As the release's health server would: on the addresses `--nodeport-addresses` selects.
    fn health_check_addresses(
        &self,
        ctx: &NodeContext,
        options: &crate::scenario::ProxierOptions,
    ) -> Option<Vec<std::net::IpAddr>> {
        Some(
            crate::proxier::node_port_addresses::health_server_addresses(
                &options.node_port_addresses,
                &self.default_node_port_addresses(),
                ctx,
            ),
        )
    }
    fn begin<'a>(&'a self, _scenario: &Scenario) -> Result<Box<dyn RunProgrammer + 'a>> {
        Ok(Box::new(Pure(self)))
    }
}

/// A pure proxier keeps nothing between syncs but what it reads from the node.
struct Pure<'a, P: ?Sized>(&'a P);

impl<P: Proxier + ?Sized> RunProgrammer for Pure<'_, P> {
    fn program_node(
        &mut self,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let name = self.0.name();
        let programming = families::program_node(self.0, cluster, ctx)
            .with_context(|| format!("{name} programming node {}", node.name))?;
        crate::programming::apply(node, &programming)
            .with_context(|| format!("applying {name}'s programming to node {}", node.name))?;
        Ok(summarize(node, &programming))
    }

    fn resync_node(
        &mut self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let name = self.0.name();
        let programming = families::resync_node(self.0, resync, cluster, ctx)
            .with_context(|| format!("{name} re-syncing node {}", node.name))?;
        crate::programming::apply(node, &programming)
            .with_context(|| format!("applying {name}'s update to node {}", node.name))?;
        Ok(summarize(node, &programming))
    }
}
