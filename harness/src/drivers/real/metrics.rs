//! kube-proxy's sync metrics, read from its metrics endpoint inside the node: the only signal
//! that it has synced (its /healthz is healthy before any sync; pkg/proxy/healthcheck).
//!
//! Each family's proxier has its own series (label `ip_family`, pkg/proxy/metrics/metrics.go):
//! - `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds`: when it last took in a change
//!   (`Sync()`, right after its change trackers recorded it);
//! - `kubeproxy_sync_proxy_rules_duration_seconds` (histogram): observed when `syncProxyRules`
//!   returns, after everything the sync does (rules, health servers, conntrack clean-up);
//! - `kubeproxy_sync_proxy_rules_last_timestamp_seconds`: set when a sync succeeded, just
//!   before its housekeeping.

use crate::netns::Netns;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// One family's sync metrics at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SyncMetrics {
    /// When it last took in a change (seconds since the epoch; 0: never).
    pub last_queued: f64,
    /// When a sync last succeeded (0: never).
    pub last_synced: f64,
    /// Syncs that have returned, successful or not.
    pub syncs: u64,
    /// Their summed duration in seconds.
    pub sync_seconds: f64,
    /// Syncs that failed: their restore (iptables, IPVS modes) or transaction (nftables mode)
    /// was refused (`sync_proxy_rules_iptables_restore_failures_total`,
    /// `sync_proxy_rules_nftables_sync_failures_total`, pkg/proxy/metrics/metrics.go).
    pub failed_syncs: u64,
}

/// Every family's sync metrics, by `ip_family` label (`IPv4`, `IPv6`), and the changes its
/// trackers took in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub families: BTreeMap<String, SyncMetrics>,
    pub changes: Changes,
}

/// Changes the change trackers took in, over every family's proxier (the counters have no
/// family label): one Service change per Service event per family's proxier, one EndpointSlice
/// change per event of a slice of that proxier's address type
/// (`ServiceChangeTracker.Update`, `EndpointsChangeTracker.EndpointSliceUpdate`,
/// pkg/proxy/servicechangetracker.go, endpointschangetracker.go). Counted when a tracker
/// starts on the event, before it asks for a sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Changes {
    pub services: u64,
    pub endpoint_slices: u64,
}

impl Changes {
    /// Whether every count is at least `other`'s.
    pub fn covers(&self, other: &Changes) -> bool {
        self.services >= other.services && self.endpoint_slices >= other.endpoint_slices
    }
}

impl std::ops::Add for Changes {
    type Output = Changes;
    fn add(self, o: Changes) -> Changes {
        Changes {
            services: self.services + o.services,
            endpoint_slices: self.endpoint_slices + o.endpoint_slices,
        }
    }
}

const QUEUED: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
const SYNCED: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
const COUNT: &str = "kubeproxy_sync_proxy_rules_duration_seconds_count";
const SUM: &str = "kubeproxy_sync_proxy_rules_duration_seconds_sum";
const RESTORE_FAILURES: &str = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
const NFTABLES_FAILURES: &str = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total";
const SERVICE_CHANGES: &str = "kubeproxy_sync_proxy_rules_service_changes_total";
const ENDPOINT_CHANGES: &str = "kubeproxy_sync_proxy_rules_endpoint_changes_total";

/// Reads the metrics served at `address` inside `netns`. `Ok(None)` while nothing listens there
/// yet (a kube-proxy still starting).
pub fn read(netns: &Netns, address: SocketAddr) -> Result<Option<Metrics>> {
    Ok(fetch(netns, address)?.map(|text| parse(&text)))
}

/// The text exposition served at `http://ADDRESS/metrics` inside `netns`; `Ok(None)` while
/// nothing listens there yet.
pub fn fetch(netns: &Netns, address: SocketAddr) -> Result<Option<String>> {
    let connected = netns
        .run(move || std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)))?;
    let mut stream = match connected {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("connecting to {address}")),
    };
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n")
        .with_context(|| format!("asking {address} for its metrics"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .with_context(|| format!("reading the metrics of {address}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("{address} answered without an HTTP header"))?;
    if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1) != Some("200") {
        bail!(
            "{address}/metrics answered `{}`",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(Some(body.to_string()))
}

/// Every sample of a Prometheus text exposition: its metric's name, its labels as written
/// (without the braces, `""` for none) and its value; comments and unreadable lines left out.
pub fn samples(text: &str) -> impl Iterator<Item = (&str, &str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            Some((name, labels, value.trim().parse::<f64>().ok()?))
        })
}

/// The sync metrics in a Prometheus text exposition.
pub fn parse(text: &str) -> Metrics {
    let mut out = Metrics::default();
    for (name, labels, value) in samples(text) {
        match name {
            SERVICE_CHANGES => out.changes.services = value as u64,
            ENDPOINT_CHANGES => out.changes.endpoint_slices = value as u64,
            _ => {}
        }
        let field: fn(&mut SyncMetrics, f64) = match name {
            QUEUED => |m, v| m.last_queued = v,
            SYNCED => |m, v| m.last_synced = v,
            COUNT => |m, v| m.syncs = v as u64,
            SUM => |m, v| m.sync_seconds = v,
            RESTORE_FAILURES | NFTABLES_FAILURES => |m, v| m.failed_syncs += v as u64,
            _ => continue,
        };
        let family = labels
            .split(',')
            .find_map(|l| l.strip_prefix("ip_family="))
            .map(|f| f.trim_matches('"').to_string())
            .unwrap_or_default();
        field(out.families.entry(family).or_default(), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_familys_series() {
        let text = "\
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1.7650e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv6\"} 1.7651e+09
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 1.76499e+09
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.001\"} 0
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family=\"IPv4\"} 0.25
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 3
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 9
kubeproxy_sync_proxy_rules_service_changes_total 12
kubeproxy_sync_proxy_rules_endpoint_changes_total 7
";
        let parsed = parse(text);
        assert_eq!(
            parsed.changes,
            Changes {
                services: 12,
                endpoint_slices: 7
            }
        );
        let m = parsed.families;
        assert_eq!(m.len(), 2);
        let v4 = m["IPv4"];
        assert_eq!(v4.syncs, 3);
        assert_eq!(v4.sync_seconds, 0.25);
        assert_eq!(v4.last_synced, 1.7650e9);
        assert_eq!(v4.last_queued, 1.76499e9);
        assert_eq!(m["IPv6"].syncs, 0);
        assert_eq!(m["IPv6"].last_synced, 1.7651e9);
    }
}
