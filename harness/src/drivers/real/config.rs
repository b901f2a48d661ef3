//! The KubeProxyConfiguration kpct writes for a real kube-proxy: the scenario's proxier options
//! in kube-proxy's own configuration file (`kubeproxy.config.k8s.io/v1alpha1`, unchanged from
//! v1.33 to v1.37: k8s.io/kube-proxy config/v1alpha1/types.go), plus what keeps kube-proxy
//! inside its node's network namespace.
//!
//! Component configuration is not an API object, so k8s-openapi has no type for it: the
//! fields kpct sets are typed here, with the upstream field names.

use crate::scenario::{IpCidr, NodePortAddress, ProxierOptions};
use serde::Serialize;

/// kube-proxy's proxy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Iptables,
    Ipvs,
    Nftables,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Ipvs => "ipvs",
            Mode::Nftables => "nftables",
        }
    }

    /// The built-in reference proxier of the same mode, whose expectations (`expectFor`) and
    /// observations the real one is judged by.
    pub fn builtin(self) -> &'static str {
        match self {
            Mode::Iptables => "kube-proxy-iptables",
            Mode::Ipvs => "kube-proxy-ipvs",
            Mode::Nftables => "kube-proxy-nftables",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        [Mode::Iptables, Mode::Ipvs, Mode::Nftables]
            .into_iter()
            .find(|m| m.name() == s)
    }
}

/// Where kube-proxy serves its metrics inside the node: loopback, so nothing outside the node
/// reaches them (the default, `127.0.0.1:10249`).
pub const METRICS_ADDRESS: &str = "127.0.0.1:10249";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyConfiguration {
    api_version: &'static str,
    kind: &'static str,
    client_connection: ClientConnection,
    hostname_override: String,
    healthz_bind_address: &'static str,
    metrics_bind_address: &'static str,
    mode: Mode,
    iptables: IptablesConfiguration,
    ipvs: IpvsConfiguration,
    nftables: NftablesConfiguration,
    detect_local_mode: &'static str,
    #[serde(rename = "clusterCIDR")]
    cluster_cidr: String,
    node_port_addresses: Vec<String>,
    oom_score_adj: i32,
    conntrack: ConntrackConfiguration,
    logging: Logging,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientConnection {
    kubeconfig: String,
    /// JSON: kpct's API server speaks no protobuf (kube-proxy's default), and with it kube-proxy
    /// would POST its events in protobuf.
    content_type: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct IptablesConfiguration {
    masquerade_bit: u8,
    masquerade_all: bool,
    localhost_node_ports: bool,
    sync_period: &'static str,
    min_sync_period: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct IpvsConfiguration {
    sync_period: &'static str,
    min_sync_period: &'static str,
    scheduler: String,
    #[serde(rename = "excludeCIDRs")]
    exclude_cidrs: Vec<String>,
    #[serde(rename = "strictARP")]
    strict_arp: bool,
    tcp_timeout: String,
    tcp_fin_timeout: String,
    udp_timeout: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NftablesConfiguration {
    masquerade_bit: u8,
    masquerade_all: bool,
    sync_period: &'static str,
    min_sync_period: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConntrackConfiguration {
    max_per_core: u32,
    tcp_established_timeout: &'static str,
    tcp_close_wait_timeout: &'static str,
    tcp_be_liberal: bool,
    udp_timeout: &'static str,
    udp_stream_timeout: &'static str,
}

#[derive(Debug, Serialize)]
struct Logging {
    /// 2: kube-proxy logs each sync ("SyncProxyRules complete"), which the evidence of a
    /// failure shows.
    verbosity: u32,
}

/// The periodic full resync: long, so that between a scenario's own changes kube-proxy syncs
/// only when they make it (a periodic sync rewrites the same rules, but at no chosen moment).
const SYNC_PERIOD: &str = "1h";

/// The shortest interval between syncs. `0s` cannot be written: SetDefaults_KubeProxyConfiguration
/// (pkg/proxy/apis/config/v1alpha1/defaults.go) takes 0 for unset and makes it 1 s in iptables
/// and nftables mode; 1 ms lets every change sync at once.
const MIN_SYNC_PERIOD: &str = "1ms";

/// Zero leaves the sysctl alone: `conntrack.maxPerCore: 0` the host-wide `nf_conntrack_max`
/// (read-only outside the initial namespace, so writing it would abort kube-proxy:
/// cmd/kube-proxy/app/conntrack.go), the timeouts their per-namespace values.
const KEEP: &str = "0s";

impl KubeProxyConfiguration {
    /// The configuration of the kube-proxy on `node` in `mode`, reading `kubeconfig`.
    pub fn new(
        mode: Mode,
        node: &str,
        kubeconfig: &std::path::Path,
        cluster_cidrs: &[IpCidr],
        options: &ProxierOptions,
    ) -> KubeProxyConfiguration {
        let seconds = |s: u32| format!("{s}s");
        KubeProxyConfiguration {
            api_version: "kubeproxy.config.k8s.io/v1alpha1",
            kind: "KubeProxyConfiguration",
            client_connection: ClientConnection {
                kubeconfig: kubeconfig.display().to_string(),
                content_type: "application/json",
            },
            hostname_override: node.to_string(),
            healthz_bind_address: "0.0.0.0:10256",
            metrics_bind_address: METRICS_ADDRESS,
            mode,
            iptables: IptablesConfiguration {
                masquerade_bit: options.masquerade_bit,
                masquerade_all: options.masquerade_all,
                localhost_node_ports: options.localhost_node_ports,
                sync_period: SYNC_PERIOD,
                min_sync_period: MIN_SYNC_PERIOD,
            },
            ipvs: IpvsConfiguration {
                sync_period: SYNC_PERIOD,
                min_sync_period: MIN_SYNC_PERIOD,
                scheduler: options.ipvs_scheduler.clone(),
                exclude_cidrs: options
                    .ipvs_exclude_cidrs
                    .iter()
                    .map(|c| c.to_string())
                    .collect(),
                strict_arp: options.strict_arp,
                tcp_timeout: seconds(options.ipvs_timeouts.tcp),
                tcp_fin_timeout: seconds(options.ipvs_timeouts.tcp_fin),
                udp_timeout: seconds(options.ipvs_timeouts.udp),
            },
            nftables: NftablesConfiguration {
                masquerade_bit: options.masquerade_bit,
                masquerade_all: options.masquerade_all,
                sync_period: SYNC_PERIOD,
                min_sync_period: MIN_SYNC_PERIOD,
            },
            detect_local_mode: "ClusterCIDR",
            cluster_cidr: if options.cluster_cidr {
                cluster_cidrs
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                String::new()
            },
            node_port_addresses: options
                .node_port_addresses
                .iter()
                .map(|a| match a {
                    NodePortAddress::Primary => "primary".to_string(),
                    NodePortAddress::Cidr(c) => c.to_string(),
                })
                .collect(),
            oom_score_adj: 0,
            conntrack: ConntrackConfiguration {
                max_per_core: 0,
                tcp_established_timeout: KEEP,
                tcp_close_wait_timeout: KEEP,
                tcp_be_liberal: options.tcp_be_liberal,
                udp_timeout: KEEP,
                udp_stream_timeout: KEEP,
            },
            logging: Logging {
                verbosity: verbosity(mode),
            },
        }
    }

    /// The file's text (JSON, which kube-proxy's YAML reader takes), with `patch` merged over
    /// it (RFC 7386: an object merges key by key, `null` removes, anything else replaces).
    pub fn to_text(&self, patch: Option<&serde_json::Value>) -> anyhow::Result<String> {
        let mut config = serde_json::to_value(self)?;
        if let Some(patch) = patch {
            json_patch::merge(&mut config, patch);
        }
        Ok(serde_json::to_string_pretty(&config)?)
    }
}

/// Where a higher log verbosity can be asked for, to see more of what a real proxier does.
pub const VERBOSITY_VARIABLE: &str = "KPCT_REAL_VERBOSITY";

/// kube-proxy's log verbosity: what [`VERBOSITY_VARIABLE`] asks for, else the lowest at which
/// it logs each sync (2; IPVS mode logs its syncs at 3 and 4, pkg/proxy/ipvs/proxier.go).
fn verbosity(mode: Mode) -> u32 {
    std::env::var(VERBOSITY_VARIABLE)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(if mode == Mode::Ipvs { 4 } else { 2 })
}

/// The scenario options a real kube-proxy in `mode` has no setting for, each with why: such a
/// scenario cannot be run against it.
pub fn unexpressible(mode: Mode, options: &ProxierOptions) -> Vec<String> {
    let mut out = Vec::new();
    // nftables mode masquerades with `fully-random` whatever the iptables (proxier.go).
    if !options.random_fully && mode != Mode::Nftables {
        out.push(
            "`proxier.randomFully: false` models an iptables older than 1.6.2; kube-proxy has no \
             option for it and masquerades with --random-fully whenever the node's iptables \
             supports it (pkg/util/iptables HasRandomFully)"
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_replaces_adds_and_removes_at_any_depth() {
        let config = KubeProxyConfiguration::new(
            Mode::Iptables,
            "node-a",
            std::path::Path::new("/kubeconfig"),
            &[],
            &ProxierOptions::default(),
        );
        let patch = serde_json::json!({
            "clusterCIDR": null,
            "bindAddress": "0.0.0.0",
            // A null inside an object the configuration lacks is dropped there too (RFC 7386
            // §2: the patch's nulls never reach the result).
            "featureGates": {"Gone": null, "Kept": true},
        });
        let text = config.to_text(Some(&patch)).unwrap();
        let merged: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(merged.get("clusterCIDR").is_none(), "{merged}");
        assert_eq!(merged["bindAddress"], "0.0.0.0");
        assert_eq!(merged["featureGates"], serde_json::json!({"Kept": true}));
    }
}
