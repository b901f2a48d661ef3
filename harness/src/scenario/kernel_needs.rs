//! What a scenario needs of the kernel whatever the proxier: the library routes such scenarios
//! by file name (`sctp-*`, `ipvs-existing-*`) to a kernel that has it, and `kpct run` reports
//! them as not run on one that does not.

use super::{Protocol, Scenario};
use crate::kernel_features::Feature;

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

    /// The kernel features a run of it needs, whatever the proxier (a proxier's own needs, IP_VS
    /// for IPVS mode, are the proxier's).
    pub fn kernel_needs(&self) -> Vec<Feature> {
        let mut out = Vec::new();
        if self.uses_sctp() {
            out.push(Feature::Sctp);
        }
        if self.has_existing_ipvs() {
            out.push(Feature::IpVs);
        }
        out
    }
}
