//! Which IPVS real servers kube-proxy drains before deleting them (pkg/util/ipvs
//! `IsRsGracefulTerminationNeeded`): what the IPVS built-in programs and what a run waits out
//! both follow it.

/// `IsRsGracefulTerminationNeeded`: UDP and SCTP real servers are deleted at once ("existing
/// connections will be deleted on the next packet because sysctlExpireNoDestConn=1").
pub fn graceful_termination_needed(key: &ipvs_genl::ServiceKey) -> bool {
    match key {
        ipvs_genl::ServiceKey::Addr { protocol, .. } => !matches!(
            protocol,
            ipvs_genl::Protocol::Udp | ipvs_genl::Protocol::Sctp
        ),
        // fwmark services carry no protocol; kube-proxy makes none.
        ipvs_genl::ServiceKey::FwMark { .. } => true,
    }
}
