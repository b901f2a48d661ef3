//! Chain and set names, as `pkg/proxy/nftables/proxier.go` derives them
//! (`servicePortChainNameBase`, `servicePortEndpointChainNameBase`, `hashAndTruncate`): the
//! readable `ns/svc/proto/port` behind 8 characters of its hash, so names say what they serve.

use crate::proxier::sha256_base32::sha256_base32;

/// `knftables.NameLengthMax` (256) less `chainNamePrefixLengthMax` (16).
const CHAIN_NAME_BASE_LENGTH_MAX: usize = 240;

/// `hashAndTruncate`: `base32(sha256(name))[:8] + "-" + name`, cut to 240 characters with a
/// trailing `...` (never reached by valid Kubernetes names, as upstream notes).
fn hash_and_truncate(name: &str) -> String {
    let hashed = format!("{}-{name}", &sha256_base32(name)[..8]);
    if hashed.len() > CHAIN_NAME_BASE_LENGTH_MAX {
        format!("{}...", &hashed[..CHAIN_NAME_BASE_LENGTH_MAX - 3])
    } else {
        hashed
    }
}

/// The chains of one service port (`newServiceInfo`): prefixes `service-`, `local-`,
/// `external-`, `firewall-` on `hashAndTruncate("ns/svc/proto/portName")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServiceChains {
    pub cluster_policy: String,
    pub local_policy: String,
    pub external: String,
    pub firewall: String,
}

impl ServiceChains {
    pub fn new(namespace: &str, name: &str, protocol: &str, port_name: &str) -> Self {
        let base = hash_and_truncate(&format!("{namespace}/{name}/{protocol}/{port_name}"));
        Self {
            cluster_policy: format!("service-{base}"),
            local_policy: format!("local-{base}"),
            external: format!("external-{base}"),
            firewall: format!("firewall-{base}"),
        }
    }
}

/// An endpoint's chain and affinity set (`newEndpointInfo`): `endpoint-` / `affinity-` on
/// `hashAndTruncate("ns/svc/proto/portName__IP/port")`.
pub(super) fn endpoint_names(
    namespace: &str,
    name: &str,
    protocol: &str,
    port_name: &str,
    ip: &str,
    port: u16,
) -> (String, String) {
    let base = hash_and_truncate(&format!(
        "{namespace}/{name}/{protocol}/{port_name}__{ip}/{port}"
    ));
    (format!("endpoint-{base}"), format!("affinity-{base}"))
}

/// `isServiceChainName`: only service and endpoint chains hold a `/`, so only they are ever
/// found stale.
pub(super) fn is_service_chain_name(chain: &str) -> bool {
    chain.contains('/')
}

/// `isAffinitySetName`.
pub(super) fn is_affinity_set_name(set: &str) -> bool {
    set.starts_with("affinity-")
}
