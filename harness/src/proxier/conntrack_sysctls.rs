//! The conntrack sysctls kube-proxy sets before it creates its proxiers, whatever the mode:
//! `platformSetup` (cmd/kube-proxy/app/server_linux.go) calls `conntrack.SetSysctls`
//! (pkg/proxy/conntrack/sysctls.go; in v1.34 the same code in cmd/kube-proxy/app/conntrack.go
//! and server_linux.go). Of those, only `nf_conntrack_tcp_be_liberal` is the scenario's to set:
//! `nf_conntrack_max` and the hash size are host-wide (refused from a node's namespace, and
//! left alone with `maxPerCore: 0`), and the timeouts keep the kernel's.

use crate::scenario::ProxierOptions;
use std::collections::BTreeMap;

/// `net/netfilter/nf_conntrack_tcp_be_liberal`, per network namespace: with it, conntrack
/// marks only out-of-window RSTs INVALID, not other out-of-window segments.
pub(crate) const TCP_BE_LIBERAL: &str = "net.netfilter.nf_conntrack_tcp_be_liberal";

/// The sysctls `conntrack.SetSysctls` writes for `options`: `nf_conntrack_tcp_be_liberal=1`
/// under `conntrack.tcpBeLiberal` ("if config.TCPBeLiberal { ct.SetTCPBeLiberal(ctx, 1) }");
/// nothing otherwise (kube-proxy never writes 0).
pub(crate) fn of(options: &ProxierOptions) -> BTreeMap<String, String> {
    let mut sysctls = BTreeMap::new();
    if options.tcp_be_liberal {
        sysctls.insert(TCP_BE_LIBERAL.to_string(), "1".to_string());
    }
    sysctls
}
