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

use sha2::{Digest, Sha256};

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

/// RFC 4648 base32 alphabet, as Go's `base32.StdEncoding`.
const BASE32_ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// RFC 4648 base32 with `=` padding, as `base32.StdEncoding.EncodeToString`. Only the first 16
/// characters are ever used for chain names, but the full encoding keeps this testable against
/// the RFC's vectors.
pub(super) fn base32_std(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
    for chunk in data.chunks(5) {
        let mut block = [0u8; 5];
        block[..chunk.len()].copy_from_slice(chunk);
        let bits = block.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        // Number of output characters carrying data for a partial block (RFC 4648 §6).
        let used = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < used {
                let index = ((bits >> (35 - 5 * i)) & 0x1f) as usize;
                out.push(char::from(BASE32_ALPHABET[index]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The 16-character hash all per-service chain names share (`portProtoHash`); for endpoints the
/// endpoint string is appended to the hashed input (`servicePortEndpointChainName`).
fn hash16(input: &str) -> String {
    let digest = Sha256::digest(input.as_bytes());
    base32_std(&digest).chars().take(16).collect()
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
