//! The steps of an apply, and a step's failure: shared by the applier ([`super::apply`]) and
//! its rollback ([`super::rollback`]), which undoes the steps started.

use super::model::Programming;
use super::source::Item;
use crate::netns::Netns;
use ipvs_genl::IpvsHandle;
use std::fmt;

/// The steps of an apply, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Sysctls,
    KubeIpvs0,
    Ipsets,
    Iptables,
    Ip6tables,
    Nft,
    Ipvs,
    Conntrack,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Sysctls => "sysctls",
            Step::KubeIpvs0 => "kube-ipvs0",
            Step::Ipsets => "ipset restore",
            Step::Iptables => "iptables-restore",
            Step::Ip6tables => "ip6tables-restore",
            Step::Nft => "nft -f",
            Step::Ipvs => "IPVS",
            Step::Conntrack => "conntrack cleanup",
        })
    }
}

/// A step's failure before the node name and rollback outcome are attached.
pub(crate) struct StepError {
    pub(crate) input: Option<String>,
    pub(crate) item: Option<Item>,
    pub(crate) message: String,
}

impl StepError {
    pub(crate) fn plain(message: impl Into<String>) -> StepError {
        StepError {
            input: None,
            item: None,
            message: message.into(),
        }
    }
}

/// A handle on the IPVS of `ns` for applying `p`, its failure as a step's; `None` where the
/// kernel has no IP_VS and `p` only clears it ([`Programming::only_clears_ipvs`]), which leaves
/// nothing to do.
pub(crate) fn open_ipvs_for(ns: &Netns, p: &Programming) -> Result<Option<IpvsHandle>, StepError> {
    match IpvsHandle::in_netns(ns.path()) {
        Err(ipvs_genl::Error::FamilyMissing) if p.only_clears_ipvs() => Ok(None),
        other => other
            .map(Some)
            .map_err(|e| StepError::plain(format!("opening IPVS in namespace {}: {e}", ns.name()))),
    }
}
