//! The kernel's packet trace, read per node namespace.
//!
//! iptables-nft's `-j TRACE` sets the packet's `nftrace` bit; from then on nf_tables reports
//! every rule the packet hits on that node (on every later hook too, after NAT) as an nfnetlink
//! trace event in that namespace, which `xtables-monitor --trace` prints in iptables syntax.
//! (Legacy iptables' TRACE logs through nf_log instead, which is silent in non-initial
//! namespaces unless a host-wide sysctl is changed — so tracing needs the nft backend.)
//!
//! Where a node holds nftables tables of its own (kube-proxy's nftables mode), xtables-monitor
//! cannot print their rules: `nft monitor trace` reads the same events instead, the packets
//! marked by a `meta nftrace set 1` rule of a `kpct-trace` table at raw priority, and
//! [`parse_nft_line`] turns its lines into the same events.
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
    Packet {
        id: String,
        summary: String,
        /// The base chain it enters (`kube-proxy:nat-prerouting`), where the tool says it
        /// (`nft monitor trace`); xtables-monitor's hooks are known from the chain names.
        hook: Option<String>,
    },
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
            hook: None,
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

/// Parses one line of `nft monitor trace`; `None` for anything else. `trace id ID FAMILY TABLE
/// CHAIN packet: FIELDS`, `… rule RULE (verdict VERDICT)`, `… policy POLICY`, `… verdict V`.
/// A packet's fields become xtables-monitor's summary (`IN= OUT= SRC= DST= SPORT= DPORT=`
/// and the TCP flags), so both tools' events read alike.
pub fn parse_nft_line(line: &str) -> Option<TraceEvent> {
    let rest = line.trim().strip_prefix("trace id ")?;
    let mut words = rest.splitn(5, ' ');
    let id = words.next()?.to_string();
    let _family = words.next()?;
    let table = words.next()?.to_string();
    let chain = words.next()?.to_string();
    let body = words.next().unwrap_or_default().trim();
    if let Some(fields) = body.strip_prefix("packet:") {
        return Some(TraceEvent::Packet {
            id,
            summary: nft_packet_summary(fields),
            hook: Some(format!("{table}:{chain}")),
        });
    }
    let (kind, rest) = body.split_once(' ').unwrap_or((body, ""));
    let (rule, verdict) = match kind {
        "rule" => {
            let (rule, verdict) = rest.rsplit_once(" (verdict ")?;
            (Some(rule.trim().to_string()), verdict.trim_end_matches(')'))
        }
        // `policy accept meta mark 0x00004000`: the packet's mark follows the verdict.
        "policy" | "verdict" => (None, rest.split_whitespace().next().unwrap_or_default()),
        _ => return None,
    };
    let verdict = match verdict.split_once(' ') {
        Some((v, target)) => format!("{}:{target}", v.to_ascii_uppercase()),
        None => verdict.to_ascii_uppercase(),
    };
    Some(TraceEvent::Verdict {
        id,
        table,
        chain,
        kind: kind.to_string(),
        verdict,
        rule,
    })
}

/// `iif "eth0" … ip saddr A ip daddr B … tcp sport P tcp dport Q … tcp flags == syn` as
/// `IN=eth0 SRC=A DST=B SPORT=P DPORT=Q SYN`.
fn nft_packet_summary(fields: &str) -> String {
    let words: Vec<&str> = fields.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let next = words.get(i + 1).map(|n| n.trim_matches('"'));
        let field = match (*w, next) {
            ("iif", Some(v)) => format!("IN={v}"),
            ("oif", Some(v)) => format!("OUT={v}"),
            ("saddr", Some(v)) if i > 0 && ["ip", "ip6"].contains(&words[i - 1]) => {
                format!("SRC={v}")
            }
            ("daddr", Some(v)) if i > 0 && ["ip", "ip6"].contains(&words[i - 1]) => {
                format!("DST={v}")
            }
            ("sport", Some(v)) => format!("SPORT={v}"),
            ("dport", Some(v)) => format!("DPORT={v}"),
            ("flags", _) if i > 0 && words[i - 1] == "tcp" => words[i + 1..]
                .iter()
                .find(|f| **f != "==")
                .map(|f| {
                    f.split(['|', ','])
                        .map(str::to_ascii_uppercase)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default(),
            _ => continue,
        };
        if !field.is_empty() {
            out.push(field);
        }
    }
    out.join(" ")
}

/// Reads one line of a monitor's output.
type LineParser = fn(&str) -> Option<TraceEvent>;

/// The tool a node's trace is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracer {
    /// `xtables-monitor --trace`, with `-j TRACE` rules in the raw table.
    Xtables,
    /// `nft monitor trace`, with `meta nftrace set 1` rules in a `kpct-trace` table.
    Nft,
}

/// The table the nft tracer marks packets from (its events are the harness's own).
const NFT_TRACE_TABLE: &str = "kpct-trace";

impl Tracer {
    /// nft where the node holds nftables tables other than iptables-nft's, or for an IPv6
    /// probe (`ipv6`): xtables-monitor 1.8.9 stops at the first ip6tables-nft rule with `-p tcp
    /// -m tcp` it must print ("unsupported layer 4 protocol value"), while `nft monitor trace`
    /// shows those rules in nft syntax. Else xtables.
    pub fn for_node(ns: &Netns, ipv6: bool) -> Result<Tracer> {
        let tables = crate::programming::nft::list_tables(ns)?;
        Ok(if ipv6 || tables.iter().any(|t| !t.owned_by_iptables()) {
            Tracer::Nft
        } else {
            Tracer::Xtables
        })
    }
}

fn strip_table_prefix(rule: &str, table: &str) -> String {
    let prefix = format!("-4 -t {table} ");
    rule.strip_prefix(&prefix).unwrap_or(rule).to_string()
}

/// `xtables-monitor --trace` running in one node namespace, plus the TRACE rules it relies on.
pub struct Monitor {
    node: String,
    /// The tool, for messages.
    program: &'static str,
    parse: LineParser,
    child: Child,
    tied: crate::process_groups::Tied,
    lines: Receiver<String>,
    /// Trace ids of sentinel packets: their events are the harness's, not the probe's.
    sentinel_ids: Vec<String>,
}

impl Monitor {
    /// Inserts the trace rules (probe traffic of `protocol`, and the sentinels) and starts the
    /// monitor; returns once the monitor has shown a sentinel.
    pub fn start(node: &str, ns: &Netns, protocol: &str, tracer: Tracer) -> Result<Monitor> {
        let (program, args, parse): (&str, &[&str], LineParser) = match tracer {
            Tracer::Xtables => {
                insert_trace_rules(node, ns, protocol)?;
                ("xtables-monitor", &["--trace"], parse_line)
            }
            Tracer::Nft => {
                insert_nft_trace_rules(node, ns, protocol)?;
                ("nft", &["monitor", "trace"], parse_nft_line)
            }
        };
        let mut cmd = ns.command(program)?;
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::null());
        // It runs until the trace is read: it must not outlive a killed kpct either.
        let (mut child, tied) = crate::process_groups::spawn_tied(cmd)
            .with_context(|| format!("starting {program} {} on node {node}", args.join(" ")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("{program} has no stdout"))?;
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
            program,
            parse,
            child,
            tied,
            lines,
            sentinel_ids: Vec::new(),
        };
        monitor.await_sentinel(ns, SENTINEL_START, true)?;
        Ok(monitor)
    }
}

/// `-j TRACE` in the raw table for the probe's protocol and the sentinels (IPv4: an IPv6 probe
/// is traced with nft, [`Tracer::for_node`]).
fn insert_trace_rules(node: &str, ns: &Netns, protocol: &str) -> Result<()> {
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
                "-w", "-t", "raw", "-I", "OUTPUT", "1", "-o", "lo", "-p", "udp", "--dport", &port,
                "-j", "TRACE",
            ],
        )
        .with_context(|| format!("adding the sentinel TRACE rule on node {node}"))?;
    }
    Ok(())
}

/// A `kpct-trace` table whose raw-priority chains set `nftrace` on the probe's protocol (not
/// the VXLAN carrier) and on the sentinels.
fn insert_nft_trace_rules(node: &str, ns: &Netns, protocol: &str) -> Result<()> {
    let carrier = if protocol == "udp" {
        " udp dport != 8472"
    } else {
        ""
    };
    // `inet`: one table marks the probe's packets of either family.
    let script = format!(
        "add table inet {NFT_TRACE_TABLE}\n\
         add chain inet {NFT_TRACE_TABLE} pre {{ type filter hook prerouting priority -350 ; }}\n\
         add chain inet {NFT_TRACE_TABLE} out {{ type filter hook output priority -350 ; }}\n\
         add rule inet {NFT_TRACE_TABLE} pre meta l4proto {protocol}{carrier} meta nftrace set 1\n\
         add rule inet {NFT_TRACE_TABLE} out meta l4proto {protocol}{carrier} meta nftrace set 1\n\
         add rule inet {NFT_TRACE_TABLE} out oif \"lo\" udp dport {{ {SENTINEL_START}, {SENTINEL_END} }} meta nftrace set 1\n"
    );
    crate::programming::tools::run(ns, "nft", &["-f", "-"], Some(&script))
        .with_context(|| format!("adding the nftables trace rules on node {node}"))?;
    Ok(())
}

impl Monitor {
    /// Sends the closing sentinel and returns every event read before it (probe events only).
    pub fn finish(mut self, ns: &Netns) -> Result<Vec<TraceEvent>> {
        let events = self.await_sentinel(ns, SENTINEL_END, false)?;
        Ok(events
            .into_iter()
            .filter(|e| !self.sentinel_ids.iter().any(|id| id == e.id()))
            .filter(|e| !matches!(e, TraceEvent::Verdict { rule: Some(r), .. } if r.ends_with("-j TRACE")))
            .filter(|e| !matches!(e, TraceEvent::Verdict { table, .. } if table == NFT_TRACE_TABLE))
            .filter(|e| {
                !matches!(e, TraceEvent::Packet { hook: Some(h), .. }
                    if h.starts_with(&format!("{NFT_TRACE_TABLE}:")))
            })
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
                    "{} on node {} showed no trace of the sentinel sent to 127.0.0.1:{port} within {:?}",
                    self.program,
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
                Ok(line) => match (self.parse)(&line) {
                    Some(TraceEvent::Packet { id, summary, .. })
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
                        "{} on node {} exited ({status:?}) before the trace was complete",
                        self.program,
                        self.node
                    );
                }
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.tied.kill();
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
                summary: "OUT=lo SRC=0.0.0.0 DST=10.96.0.1 LEN=60 SPORT=33482 DPORT=80 SYN".into(),
                hook: None,
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
    fn parses_nft_monitor_trace_lines() {
        assert_eq!(
            parse_nft_line(
                r#"trace id 8cdb543f ip kube-proxy nat-prerouting packet: iif "eth0" ether saddr 02:00:00:00:00:01 ip saddr 192.168.1.100 ip daddr 192.168.1.10 ip ttl 64 tcp sport 21000 tcp dport 30080 tcp flags == syn tcp window 64240 "#
            ),
            Some(TraceEvent::Packet {
                id: "8cdb543f".into(),
                summary: "IN=eth0 SRC=192.168.1.100 DST=192.168.1.10 SPORT=21000 DPORT=30080 SYN"
                    .into(),
                hook: Some("kube-proxy:nat-prerouting".into()),
            })
        );
        assert_eq!(
            parse_nft_line("trace id 8cdb543f ip kube-proxy services rule ip daddr . meta l4proto . th dport vmap @service-ips (verdict goto external-X-ns/svc/tcp/p)"),
            Some(TraceEvent::Verdict {
                id: "8cdb543f".into(),
                table: "kube-proxy".into(),
                chain: "services".into(),
                kind: "rule".into(),
                verdict: "GOTO:external-X-ns/svc/tcp/p".into(),
                rule: Some("ip daddr . meta l4proto . th dport vmap @service-ips".into()),
            })
        );
        assert_eq!(
            parse_nft_line("trace id 8cdb543f ip kube-proxy nat-prerouting policy accept "),
            Some(TraceEvent::Verdict {
                id: "8cdb543f".into(),
                table: "kube-proxy".into(),
                chain: "nat-prerouting".into(),
                kind: "policy".into(),
                verdict: "ACCEPT".into(),
                rule: None,
            })
        );
        assert_eq!(parse_nft_line("something else"), None);
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
