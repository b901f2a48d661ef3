//! Chain names, as `pkg/proxy/iptables/proxier.go` derives them (`portProtoHash`,
//! `servicePortPolicyClusterChain`, `servicePortPolicyLocalChainName`,
//! `serviceFirewallChainName`, `serviceExternalChainName`, `servicePortEndpointChainName`).
//!
//! The formula: `base32(sha256(servicePortName + protocol [+ endpoint]))[..16]`, where
//! `servicePortName` is `ServicePortName.String()` (`ns/name` or `ns/name:port`, no protocol),
//! `protocol` is lower-cased (`strings.ToLower(string(svcPort.Protocol()))` in `newServiceInfo`,
//! and the same for `svcPortName.Protocol` in `newEndpointInfo`), `endpoint` is
//! `BaseEndpointInfo.String()` (`ip:port`), and base32 is RFC 4648's standard alphabet
//! (`base32.StdEncoding`). Chain names must stay within iptables' 28 characters.

use crate::proxier::sha256_base32::sha256_base32;

/// `KUBE-SVC-`: the Cluster-traffic-policy chain of a service port.
pub(super) const SVC_PREFIX: &str = "KUBE-SVC-";
/// `KUBE-SVL-`: the Local-traffic-policy chain.
pub(super) const SVL_PREFIX: &str = "KUBE-SVL-";
/// `KUBE-FW-`: loadBalancerSourceRanges filtering.
pub(super) const FW_PREFIX: &str = "KUBE-FW-";
/// `KUBE-EXT-`: entry chain for external destinations (NodePort, external IP, LB).
pub(super) const EXT_PREFIX: &str = "KUBE-EXT-";
/// `KUBE-SEP-`: one endpoint of one service port.
pub(super) const SEP_PREFIX: &str = "KUBE-SEP-";

/// The 16-character hash all per-service chain names share (`portProtoHash`); for endpoints the
/// endpoint string is appended to the hashed input (`servicePortEndpointChainName`).
fn hash16(input: &str) -> String {
    sha256_base32(input).chars().take(16).collect()
}

/// The chain names of one service port, computed once as `newServiceInfo` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServiceChains {
    pub cluster_policy: String,
    pub local_policy: String,
    pub firewall: String,
    pub external: String,
}

impl ServiceChains {
    /// `service_port_name` is `ServicePortName.String()`, `protocol` lower-case.
    pub fn new(service_port_name: &str, protocol: &str) -> Self {
        let hash = hash16(&format!("{service_port_name}{protocol}"));
        Self {
            cluster_policy: format!("{SVC_PREFIX}{hash}"),
            local_policy: format!("{SVL_PREFIX}{hash}"),
            firewall: format!("{FW_PREFIX}{hash}"),
            external: format!("{EXT_PREFIX}{hash}"),
        }
    }
}

/// `servicePortEndpointChainName(svcPortName.String(), protocol, ep.String())`.
pub(super) fn endpoint_chain(service_port_name: &str, protocol: &str, endpoint: &str) -> String {
    format!(
        "{SEP_PREFIX}{}",
        hash16(&format!("{service_port_name}{protocol}{endpoint}"))
    )
}
