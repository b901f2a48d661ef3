//! The kernel's packet trace, read per node namespace.
//!
//! iptables-nft's `-j TRACE` sets the packet's `nftrace` bit; from then on nf_tables reports
//! every rule the packet hits on that node (on every later hook too, after NAT) as an nfnetlink
//! trace event in that namespace, which `xtables-monitor --trace` prints in iptables syntax.
//! (Legacy iptables' TRACE logs through nf_log instead, which is silent in non-initial
//! namespaces unless a host-wide sysctl is changed — so tracing needs the nft backend.)
//!
//! A trace is bracketed by *sentinel* datagrams the node sends itself on `lo`, traced by their
//! own rule: the first one seen proves the monitor is listening before the probe is fired; the
//! second one seen proves every event of the probe has been read (netlink keeps order).

use crate::netns::Netns;
use anyhow::{anyhow, Context, Result};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The ports the sentinels go to on the node's loopback (nothing listens there).
const SENTINEL_START: u16 = 7;
const SENTINEL_END: u16 = 9;
/// How often a sentinel is re-sent while waiting for the monitor to subscribe.
const SENTINEL_RETRY: Duration = Duration::from_millis(50);
/// Upper bound for the monitor to show a sentinel (an emulated VM can be slow to start it).
const SENTINEL_DEADLINE: Duration = Duration::from_secs(20);

/// One line of `xtables-monitor --trace`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// The packet as it enters a hook (`IN=… OUT=… SRC=… DST=… … SPORT=… DPORT=…`).
    Packet { id: String, summary: String },
    /// A rule, policy or return the packet met in `table`/`chain`.
    Verdict {
        id: String,
        table: String,
        chain: String,
        /// `rule`, `policy` or `return`.
        kind: String,
        /// What happened: `CONTINUE`, `ACCEPT`, `JUMP:KUBE-SERVICES`, `DROP`, …
        verdict: String,
        /// The rule in iptables syntax, without the `-4 -t TABLE` prefix (rules only).
        rule: Option<String>,
    },
}

impl TraceEvent {
    pub fn id(&self) -> &str {
        match self {
            TraceEvent::Packet { id, .. } | TraceEvent::Verdict { id, .. } => id,
        }
    }
}

/// Parses one line; `None` for anything that is not a trace line.
pub fn parse_line(line: &str) -> Option<TraceEvent> {
    let line = line.trim();
    let (tag, rest) = line.split_once(' ')?;
    // "<family> <id> <body>"
    let mut parts = rest.trim_start().splitn(3, ' ');
    let _family = parts.next()?;
    let id = parts.next()?.to_string();
    let body = parts.next().unwrap_or("").trim();
    match tag {
        "PACKET:" => Some(TraceEvent::Packet {
            id,
            summary: body.to_string(),
        }),
        "TRACE:" => {
            let (head, rule) = match body.split_once("  ") {
                Some((h, r)) => (h.trim(), Some(r.trim())),
                None => (body, None),
            };
            // table:chain:kind[:handle]:verdict[:target]
            let fields: Vec<&str> = head.split(':').collect();
            if fields.len() < 3 {
                return None;
            }
            let (table, chain, kind) = (fields[0], fields[1], fields[2]);
            let rest = &fields[3..];
            let verdict = match (kind, rest) {
                ("rule", [handle, v @ ..]) if handle.starts_with("0x") => v.join(":"),
                (_, v) => v.join(":"),
            };
            let rule = rule.map(|r| strip_table_prefix(r, table));
            Some(TraceEvent::Verdict {
                id,
                table: table.to_string(),
                chain: chain.to_string(),
                kind: kind.to_string(),
                verdict,
                rule,
            })
        }
        _ => None,
    }
}

fn strip_table_prefix(rule: &str, table: &str) -> String {
    let prefix = format!("-4 -t {table} ");
    rule.strip_prefix(&prefix).unwrap_or(rule).to_string()
}

/// `xtables-monitor --trace` running in one node namespace, plus the TRACE rules it relies on.
pub struct Monitor {
    node: String,
    child: Child,
    lines: Receiver<String>,
    /// Trace ids of sentinel packets: their events are the harness's, not the probe's.
    sentinel_ids: Vec<String>,
}

impl Monitor {
    /// Inserts the TRACE rules (probe traffic of `protocol`, and the sentinels) into the node's
    /// raw table and starts the monitor; returns once the monitor has shown a sentinel.
    pub fn start(node: &str, ns: &Netns, protocol: &str) -> Result<Monitor> {
        for chain in ["PREROUTING", "OUTPUT"] {
            let mut rule = vec!["-w", "-t", "raw", "-I", chain, "1", "-p", protocol];
            // The VXLAN carrier is UDP too; its inner packet is traced when it is decapsulated.
            if protocol == "udp" {
                rule.extend(["!", "--dport", "8472"]);
            }
            rule.extend(["-j", "TRACE"]);
            ns.exec("iptables", &rule)
                .with_context(|| format!("adding a TRACE rule on node {node}"))?;
        }
        for port in [SENTINEL_START, SENTINEL_END] {
            let port = port.to_string();
            ns.exec(
                "iptables",
                &[
                    "-w", "-t", "raw", "-I", "OUTPUT", "1", "-o", "lo", "-p", "udp", "--dport",
                    &port, "-j", "TRACE",
                ],
            )
            .with_context(|| format!("adding the sentinel TRACE rule on node {node}"))?;
        }
        let mut child = ns
            .command("xtables-monitor")?
            .arg("--trace")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "starting xtables-monitor --trace on node {node} (is iptables-nft installed?)"
                )
            })?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("xtables-monitor has no stdout"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut monitor = Monitor {
            node: node.to_string(),
            child,
            lines,
            sentinel_ids: Vec::new(),
        };
        monitor.await_sentinel(ns, SENTINEL_START, true)?;
        Ok(monitor)
    }

    /// Sends the closing sentinel and returns every event read before it (probe events only).
    pub fn finish(mut self, ns: &Netns) -> Result<Vec<TraceEvent>> {
        let events = self.await_sentinel(ns, SENTINEL_END, false)?;
        Ok(events
            .into_iter()
            .filter(|e| !self.sentinel_ids.iter().any(|id| id == e.id()))
            .filter(|e| !matches!(e, TraceEvent::Verdict { rule: Some(r), .. } if r.ends_with("-j TRACE")))
            .collect())
    }

    /// Reads lines until a packet to sentinel `port` shows up; returns the events before it.
    /// `retry`: re-send while waiting (the monitor may not have subscribed yet); otherwise one
    /// sentinel suffices, since the monitor is known to be listening.
    fn await_sentinel(&mut self, ns: &Netns, port: u16, retry: bool) -> Result<Vec<TraceEvent>> {
        let deadline = Instant::now() + SENTINEL_DEADLINE;
        let mut events = Vec::new();
        send_sentinel(ns, port)?;
        let mut next_send = Instant::now() + SENTINEL_RETRY;
        loop {
            let now = Instant::now();
            if now >= deadline {
                anyhow::bail!(
                    "xtables-monitor on node {} showed no trace of the sentinel sent to 127.0.0.1:{port} within {:?}",
                    self.node,
                    SENTINEL_DEADLINE
                );
            }
            let wait = if retry {
                next_send.min(deadline)
            } else {
                deadline
            } - now;
            match self.lines.recv_timeout(wait) {
                Ok(line) => match parse_line(&line) {
                    Some(TraceEvent::Packet { id, summary })
                        if sentinel_port(&summary).is_some() =>
                    {
                        let done = sentinel_port(&summary) == Some(port);
                        self.sentinel_ids.push(id);
                        if done {
                            return Ok(events);
                        }
                    }
                    Some(event) => events.push(event),
                    None => {}
                },
                Err(RecvTimeoutError::Timeout) => {
                    if retry {
                        send_sentinel(ns, port)?;
                        next_send = Instant::now() + SENTINEL_RETRY;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.try_wait().ok().flatten();
                    anyhow::bail!(
                        "xtables-monitor on node {} exited ({status:?}) before the trace was complete",
                        self.node
                    );
                }
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sentinel port a traced packet summary is addressed to, if it is a sentinel.
fn sentinel_port(summary: &str) -> Option<u16> {
    let s = format!("{summary} ");
    if !s.contains("DST=127.0.0.1 ") {
        return None;
    }
    [SENTINEL_START, SENTINEL_END]
        .into_iter()
        .find(|p| s.contains(&format!("DPORT={p} ")))
}

fn send_sentinel(ns: &Netns, port: u16) -> Result<()> {
    ns.run(|| -> std::io::Result<()> {
        let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        socket.send_to(
            b"kpct-trace-sentinel",
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
        )?;
        Ok(())
    })?
    .context("sending a trace sentinel")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_xtables_monitor_lines() {
        assert_eq!(
            parse_line("PACKET: 2 3a3c01fb OUT=lo SRC=0.0.0.0 DST=10.96.0.1 LEN=60 SPORT=33482 DPORT=80 SYN "),
            Some(TraceEvent::Packet {
                id: "3a3c01fb".into(),
                summary: "OUT=lo SRC=0.0.0.0 DST=10.96.0.1 LEN=60 SPORT=33482 DPORT=80 SYN".into()
            })
        );
        assert_eq!(
            parse_line(" TRACE: 2 3a3c01fb nat:OUTPUT:rule:0x3:JUMP:KUBE-TEST  -4 -t nat -A OUTPUT -d 10.96.0.1/32 -p tcp -j KUBE-TEST"),
            Some(TraceEvent::Verdict {
                id: "3a3c01fb".into(),
                table: "nat".into(),
                chain: "OUTPUT".into(),
                kind: "rule".into(),
                verdict: "JUMP:KUBE-TEST".into(),
                rule: Some("-A OUTPUT -d 10.96.0.1/32 -p tcp -j KUBE-TEST".into()),
            })
        );
        assert_eq!(
            parse_line(" TRACE: 2 3a3c01fb raw:OUTPUT:policy:ACCEPT "),
            Some(TraceEvent::Verdict {
                id: "3a3c01fb".into(),
                table: "raw".into(),
                chain: "OUTPUT".into(),
                kind: "policy".into(),
                verdict: "ACCEPT".into(),
                rule: None,
            })
        );
        assert_eq!(parse_line("EVENT: something else"), None);
        assert_eq!(parse_line(""), None);
    }

    #[test]
    fn sentinels_are_recognised_only_on_loopback_ports() {
        assert_eq!(
            sentinel_port("OUT=lo SRC=127.0.0.1 DST=127.0.0.1 LEN=47 SPORT=41000 DPORT=7"),
            Some(7)
        );
        assert_eq!(
            sentinel_port("OUT=lo SRC=127.0.0.1 DST=127.0.0.1 LEN=47 SPORT=41000 DPORT=9 "),
            Some(9)
        );
        assert_eq!(
            sentinel_port("IN=eth0 SRC=192.168.1.100 DST=192.168.1.10 SPORT=20000 DPORT=7"),
            None
        );
        assert_eq!(
            sentinel_port("OUT=lo SRC=127.0.0.1 DST=127.0.0.1 SPORT=41000 DPORT=70"),
            None
        );
    }
}
