//! Proxiers: turn the cluster state into one node's [`Programming`].
//!
//! The reference implementations are pure functions of their input so that what they program is
//! reviewable and unit-testable without a kernel; the kernel then judges the result.

/// The one list of built-in proxiers (also included by `harness/build.rs`).
mod conntrack_cleanup;
mod conntrack_sysctls;
mod endpoints;
pub mod exec;
pub mod families;
pub mod kube_proxy_iptables;
pub mod kube_proxy_ipvs;
pub mod kube_proxy_nftables;
mod node_port_addresses;
pub mod programmer;
pub mod real;
pub mod replay;
pub use crate::builtins::{Builtin, BUILTINS};
mod sha256_base32;
#[cfg(test)]
mod test_cluster;

use crate::programming::{Programming, Table};
use crate::scenario::cluster::{ClusterState, NodeContext};
use std::collections::{BTreeMap, BTreeSet};

/// What a proxier knows when it syncs a node it programmed before.
#[derive(Debug, Clone, Copy)]
pub struct Resync<'a> {
    /// The scenario step that changed the cluster.
    pub step: &'a str,
    /// The cluster state of its previous sync; `None` after a restart, since a restarted
    /// kube-proxy remembers nothing of what it programmed.
    pub previous: Option<&'a ClusterState>,
    /// The chains each iptables table of the node holds now: what kube-proxy reads with
    /// `iptables-save` to find stale chains.
    pub existing_chains: &'a BTreeMap<Table, BTreeSet<String>>,
    /// The same of ip6tables: what the IPv6 proxier of a dual-stack node reads as its
    /// `existing_chains` ([`families::resync_node`] hands it over).
    pub existing_ip6_chains: &'a BTreeMap<Table, BTreeSet<String>>,
    /// The node's nftables tables (other than iptables-nft's), as read back: what nftables mode
    /// lists (`nftables.List`) to find stale chains and affinity sets.
    pub nft: &'a BTreeMap<crate::programming::nft::NftTable, Vec<String>>,
    /// The node's IPVS table with each real server's connection counts (what IPVS mode reads
    /// with `GetRealServers`); empty when the kernel has no IPVS.
    pub ipvs: &'a [ipvs_genl::TableEntry],
}

/// A proxier that computes programming from cluster state without touching the kernel. Shared
/// by the workers of a parallel run, hence `Send + Sync`.
pub trait Proxier: Send + Sync {
    /// Stable name used in reports and snapshot file names.
    fn name(&self) -> &'static str;
    fn program(&self, cluster: &ClusterState, node: &NodeContext) -> anyhow::Result<Programming>;

    /// The programming of a later sync, over what the node holds after earlier ones (by
    /// default the same as a first sync: a proxier whose programming replaces everything it
    /// names and removes nothing).
    fn resync(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        node: &NodeContext,
    ) -> anyhow::Result<Programming> {
        let _ = resync;
        self.program(cluster, node)
    }

    /// Whether backend choice is random by design (iptables `statistic --mode random`), so
    /// observations record the set of backends reached rather than the sequence.
    fn random_backend_choice(&self) -> bool {
        false
    }
}

/// A boxed proxier is a proxier, so a chosen built-in can go wherever one is expected.
impl<P: Proxier + ?Sized> Proxier for Box<P> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn program(&self, cluster: &ClusterState, node: &NodeContext) -> anyhow::Result<Programming> {
        (**self).program(cluster, node)
    }
    fn resync(
        &self,
        resync: &Resync<'_>,
        cluster: &ClusterState,
        node: &NodeContext,
    ) -> anyhow::Result<Programming> {
        (**self).resync(resync, cluster, node)
    }
    fn random_backend_choice(&self) -> bool {
        (**self).random_backend_choice()
    }
}

/// The built-in reference proxiers, by name.
pub fn builtin(name: &str) -> Option<Box<dyn Proxier>> {
    match name {
        "kube-proxy-ipvs" => Some(Box::new(kube_proxy_ipvs::KubeProxyIpvs)),
        "kube-proxy-iptables" => Some(Box::new(kube_proxy_iptables::KubeProxyIptables)),
        "kube-proxy-nftables" => Some(Box::new(kube_proxy_nftables::KubeProxyNftables)),
        _ => None,
    }
}

/// Names accepted by [`builtin`], from [`BUILTINS`].
pub const BUILTIN: [&str; BUILTINS.len()] = {
    let mut names = [""; BUILTINS.len()];
    let mut i = 0;
    while i < BUILTINS.len() {
        names[i] = BUILTINS[i].name;
        i += 1;
    }
    names
};

/// Whether the proxier `spec` names needs IP_VS in the kernel, decided from what it is, not
/// from its spelling: the IPVS built-in, a real kube-proxy in IPVS mode, or a `replay:`
/// capture that holds IPVS services. An
/// `exec:` proxier is only known by what it programs: one that writes IPVS services on a kernel
/// without IP_VS fails when they are applied, saying so.
pub fn needs_ipvs(spec: &str) -> bool {
    let spec = programmer::Named::split(spec).map_or(spec, |(_, inner)| inner);
    if let Some(dir) = spec.strip_prefix("replay:") {
        return replay::Replay::new(dir).captures_ipvs();
    }
    BUILTINS.iter().any(|b| b.needs_ipvs && b.name == spec) || spec.starts_with("kube-proxy:ipvs")
}

#[cfg(test)]
mod builtin_tests {
    use super::*;

    /// Every built-in of the list is built by its name and names itself so; nothing else is.
    #[test]
    fn the_list_of_built_ins_is_what_builtin_builds() {
        for b in &BUILTINS {
            let built = builtin(b.name).unwrap_or_else(|| panic!("{} is not built", b.name));
            assert_eq!(built.name(), b.name);
            assert_eq!(needs_ipvs(b.name), b.needs_ipvs, "{}", b.name);
            assert_eq!(
                b.needs_ipvs,
                b.tests.starts_with("needs_ipvs_"),
                "{}",
                b.tests
            );
        }
        assert_eq!(BUILTIN.len(), BUILTINS.len());
        assert!(builtin("kube-proxy-userspace").is_none());
    }
}
