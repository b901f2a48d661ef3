//! What a scenario needs of the kernel whatever the proxier (`kernel_features::needed_by`): the
//! library routes such scenarios by file name (`sctp-*`, `ipvs-existing-*`) to a kernel that has
//! it, and `kpct run` reports them as not run on one that does not.

use super::{Protocol, Scenario};

impl Scenario {
    /// Whether a probe or a pod port uses SCTP.
    pub fn uses_sctp(&self) -> bool {
        let sctp = |p: Protocol| p == Protocol::Sctp;
        self.probes.iter().any(|p| sctp(p.protocol))
            || self
                .topology
                .pods
                .iter()
                .any(|p| p.ports.iter().any(|c| sctp(c.protocol)))
    }

    /// Whether a node starts with IPVS services of its own (`existingIPVS`).
    pub fn has_existing_ipvs(&self) -> bool {
        self.topology
            .nodes
            .iter()
            .any(|n| !n.existing_ipvs.is_empty())
    }
}
