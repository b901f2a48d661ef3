//! Proxiers: turn the cluster state into one node's [`Programming`].
//!
//! The reference implementations are pure functions of their input so that what they program is
//! reviewable and unit-testable without a kernel; the kernel then judges the result.

/// The one list of built-in proxiers (also included by `harness/build.rs`).
mod conntrack_cleanup;
mod conntrack_sysctls;
mod endpoints;
pub mod families;
pub mod kube_proxy_iptables;
pub mod kube_proxy_ipvs;
pub mod kube_proxy_nftables;
pub mod node_port_addresses;
pub mod release_view;
pub use crate::builtins::{Builtin, BUILTINS};
pub use crate::release::{Release, ReleaseRange};
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
    /// Stable name used in reports and snapshot file names (a built-in's at a release other
    /// than the newest carries it: `kube-proxy-iptables@v1.34`).
    fn name(&self) -> String;
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

    /// Whether it programs IPVS, so needs IP_VS in the kernel.
    fn programs_ipvs(&self) -> bool {
        false
    }

    /// The kube-proxy release it models: the cluster is handed to it as that release's
    /// informers and caches see it ([`release_view`]).
    fn release(&self) -> crate::release::Release {
        crate::release::Release::NEWEST
    }

    /// Its mode's `--nodeport-addresses` when none is given: every address (iptables and IPVS
    /// modes); nftables mode's is `[primary]`.
    fn default_node_port_addresses(&self) -> Vec<crate::scenario::NodePortAddress> {
        Vec::new()
    }
}

/// A boxed proxier is a proxier, so a chosen built-in can go wherever one is expected.
impl<P: Proxier + ?Sized> Proxier for Box<P> {
    fn name(&self) -> String {
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
    fn programs_ipvs(&self) -> bool {
        (**self).programs_ipvs()
    }
    fn release(&self) -> crate::release::Release {
        (**self).release()
    }
    fn default_node_port_addresses(&self) -> Vec<crate::scenario::NodePortAddress> {
        (**self).default_node_port_addresses()
    }
}

/// The built-in reference proxiers, by name: `kube-proxy-iptables` models the newest release,
/// `kube-proxy-iptables@v1.34` the release named (one the built-ins model, [`Release::MODELLED`]).
pub fn builtin(name: &str) -> Option<Box<dyn Proxier>> {
    let (base, release) = match name.split_once('@') {
        Some((base, release)) => (base, release.parse::<Release>().ok()?),
        None => (name, Release::NEWEST),
    };
    if !release.is_modelled() {
        return None;
    }
    match base {
        "kube-proxy-ipvs" => Some(Box::new(kube_proxy_ipvs::KubeProxyIpvs { release })),
        "kube-proxy-iptables" => Some(Box::new(kube_proxy_iptables::KubeProxyIptables { release })),
        "kube-proxy-nftables" => Some(Box::new(kube_proxy_nftables::KubeProxyNftables { release })),
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

#[cfg(test)]
mod builtin_tests {
    use super::*;

    /// Every built-in of the list is built by its name and names itself so; nothing else is.
    #[test]
    fn the_list_of_built_ins_is_what_builtin_builds() {
        for b in &BUILTINS {
            let built = builtin(b.name).unwrap_or_else(|| panic!("{} is not built", b.name));
            assert_eq!(built.name(), b.name);
            assert_eq!(built.programs_ipvs(), b.needs_ipvs, "{}", b.name);
            for release in Release::MODELLED {
                let at = builtin(&format!("{}@{release}", b.name)).expect("a modelled release");
                assert_eq!(at.name(), crate::release::builtin_label(b.name, release));
            }
            assert_eq!(
                b.needs_ipvs,
                b.tests.starts_with("needs_ipvs_"),
                "{}",
                b.tests
            );
        }
        assert_eq!(BUILTIN.len(), BUILTINS.len());
        assert!(builtin("kube-proxy-userspace").is_none());
        assert!(builtin("kube-proxy-iptables@v1.33").is_none());
        assert!(builtin("kube-proxy-iptables@1.x").is_none());
        assert_eq!(
            builtin("kube-proxy-iptables@v1.37").map(|p| p.name()),
            Some("kube-proxy-iptables".to_string())
        );
    }
}
