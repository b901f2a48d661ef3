//! Drops decided when the kernel says so: a shot whose packet a netfilter rule (or a base
//! chain's policy) dropped ends there, instead of waiting out the probe timeout.
//!
//! From a scenario run's first probe on, each node holds a `kpct-verdicts` nf_tables table owned
//! by one of our netlink sockets (`NFT_TABLE_F_OWNER`: the kernel deletes it when that socket
//! closes, so it cannot outlive the run, even if the suite dies; `nft flush ruleset` leaves an
//! owned table alone, and the suite's readers of a node's nftables state leave it out). Before
//! each shot, its chains get rules setting the `nftrace` bit on that shot's first packet (its
//! TCP sequence number or UDP source port) and on ICMP errors, entering (prerouting, priority
//! -500) or leaving (output, -500) the node, before any other chain; an empty output chain at
//! 500 makes every marked locally sent packet show up in the trace. After the last probe of a
//! group (nothing programs the nodes during one) the rules go, and the table is inert.
//! nf_tables reports each rule and policy a marked packet meets as a trace event to our socket —
//! for iptables-nft's rules and nftables' alike (legacy iptables and IPVS decide outside
//! nf_tables: those drops are still waited out).
//!
//! A shot is decided as dropped when a node traced a DROP for the shot's own first packet
//! (recognised by its marker: the TCP initial sequence number, the UDP payload, which NAT leaves
//! alone), that DROP is a plain one, and no node traced anything that could be the shot's answer.
//! That is as certain as waiting:
//! - a DROP verdict is final: `nf_hook_slow` frees the packet, and the pnet-crafted first
//!   packet is never retransmitted (no socket sent it);
//! - a plain DROP sends nothing: the rule is read back, and must end in an `immediate` DROP
//!   (iptables' `-j DROP`, nftables' `drop`) or look its verdict up in a verdict map (whose
//!   `drop` element gave it: nftables mode's `no-endpoint-services`), with no expression that
//!   sends or copies a packet.
//!   A REJECT also reports its verdict as DROP, after its answer was sent — and for a frame
//!   that came through a bridge port the kernel sends the RST straight out of that port,
//!   through no hook, so the trace never shows it (`nf_send_reset`). A chain's drop policy is
//!   plain;
//! - anything traced that could be the answer keeps the shot waiting for it, as before;
//! - a shot whose trace lost events (the socket overflowed) is never decided early.
//!
//! What the shot then records (no answer, delivered nowhere) is what the timeout would have
//! recorded. `kpct run --wait-out-drops` turns this off, to compare.

use crate::netfilter::socket::{carried, decode, encode, errno};
use crate::netfilter::trace_event::{self, TraceEvent};
use crate::netfilter::verdict_table::{self as table, Marking, CHAINS, TABLE};
use crate::netns::Netns;
use crate::probe::packet::ProbePacket;
use crate::scenario::Protocol;
use crate::topology::Topology;
use anyhow::{anyhow, bail, Context, Result};
use netlink_packet_netfilter::nftables::NfTablesMessage;
use netlink_packet_netfilter::NetfilterMessageInner;
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

/// `include/uapi/linux/netfilter/nfnetlink.h`: the multicast group of nf_tables trace events.
const NFNLGRP_NFTRACE: u32 = 9;

/// Room for the events of a burst of traced packets (each rule a packet meets is one event).
const RECEIVE_BUFFER: usize = 4 << 20;
/// How long a node may take to acknowledge the table (an emulated VM can be slow).
const SETUP_DEADLINE: Duration = Duration::from_secs(10);
/// Where a shot's first packet was dropped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DropVerdict {
    pub node: String,
    pub table: String,
    pub chain: String,
    /// The rule's handle; `None` when the chain's policy dropped it.
    pub rule_handle: Option<u64>,
}

impl std::fmt::Display for DropVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "dropped on {} in {}:{}",
            self.node, self.table, self.chain
        )?;
        match self.rule_handle {
            Some(handle) => write!(f, " (rule handle {handle})"),
            None => write!(f, " (policy)"),
        }
    }
}

/// What a traced packet is to the shot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The shot's first packet, possibly translated.
    Forward,
    /// Something that may be the shot's answer: its SYN-ACK or RST, its UDP echo, or any ICMP
    /// error (whose quote the trace does not carry far enough to tell whose it is).
    Answer,
    Other,
}

/// What the events of one shot, read so far from every node, decide.
#[derive(Debug, Default)]
pub struct Judge {
    /// Something that may be the answer was traced.
    answered: bool,
    /// Some node's trace lost events.
    lost: bool,
    /// The rule that dropped the shot's packet may have sent something (a REJECT).
    not_plain: bool,
    /// The first DROP verdict traced for the shot's own packet, with its table's family.
    dropped: Option<(DropVerdict, u8)>,
}

impl Judge {
    fn see(&mut self, node: &str, event: &TraceEvent, role: Role) {
        self.answered |= role == Role::Answer;
        if event.drop && role == Role::Forward && self.dropped.is_none() {
            let verdict = DropVerdict {
                node: node.to_string(),
                table: event.table.clone(),
                chain: event.chain.clone(),
                rule_handle: event.rule_handle,
            };
            self.dropped = Some((verdict, event.family));
        }
    }

    /// The drop and its table's family, when it may decide the shot: nothing answered, nothing
    /// lost, and its rule not known to send anything.
    fn candidate(&self) -> Option<&(DropVerdict, u8)> {
        self.dropped
            .as_ref()
            .filter(|_| !self.answered && !self.lost && !self.not_plain)
    }
}

/// The trace of one node, and what its packets were to the current shot.
struct NodeWatch {
    node: String,
    socket: Socket,
    /// For reading a dropping rule back (its replies must not mix with the trace).
    query: Socket,
    roles: HashMap<u32, Role>,
}

/// Every node's trace, for the shots of one probe.
pub struct VerdictWatch {
    nodes: Vec<NodeWatch>,
}

impl VerdictWatch {
    /// Creates the table in every node of `topo` and subscribes to its trace.
    pub fn open(topo: &Topology) -> Result<VerdictWatch> {
        let nodes = topo
            .nodes()
            .iter()
            .map(|node| {
                let (socket, query) = open_node(&node.netns).with_context(|| {
                    format!(
                        "tracing verdicts on node {} (nf_tables table `{TABLE}`; \
                         `--wait-out-drops` does without)",
                        node.name
                    )
                })?;
                Ok(NodeWatch {
                    node: node.name.clone(),
                    socket,
                    query,
                    roles: HashMap::new(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(VerdictWatch { nodes })
    }

    /// Deletes the table from every node. The kernel would delete it when the socket closes,
    /// but a process forked meanwhile (any thread's tool run) holds the socket until it execs,
    /// and the next group's table must not meet this one.
    pub fn close(mut self) -> Result<()> {
        for node in &mut self.nodes {
            // Events nobody read (a node-socket probe's, say) may fill the socket, and the
            // kernel drops an acknowledgement that does not fit: stop them, then empty it.
            node.socket
                .drop_membership(NFNLGRP_NFTRACE)
                .with_context(|| format!("leaving the trace of node {}", node.node))?;
            node.read(&mut |_| {})?;
            let (batch, acked) = table::delete_table(TABLE);
            let deleted = node
                .socket
                .send_to(&batch, &SocketAddr::new(0, 0), 0)
                .map_err(anyhow::Error::from)
                .and_then(|_| acknowledged(&node.socket, acked));
            deleted.with_context(|| format!("deleting table `{TABLE}` on node {}", node.node))?;
        }
        Ok(())
    }

    /// Marks `packet`'s shot for tracing in every node, and forgets what earlier shots left
    /// queued; call before sending it.
    pub fn start_shot(&mut self, packet: &ProbePacket) -> Result<()> {
        let shot = match packet.protocol {
            Protocol::Tcp => Some(Marking::TcpSequence(packet.seq)),
            Protocol::Udp => Some(Marking::UdpSourcePort(packet.sport)),
            // Its marker (the INIT's tag) lies past the 20 bytes of transport header traced.
            Protocol::Sctp => None,
        };
        let marks: Vec<Marking> = shot.into_iter().chain([Marking::Icmp]).collect();
        self.mark(&marks)
    }

    /// Marks nothing more for tracing (the table stays, inert): call when a group of probes is
    /// done, before anything programs the nodes again.
    pub fn disarm(&mut self) -> Result<()> {
        self.mark(&[])
    }

    /// Replaces every node's marking rules by those of `marks`, emptying what is queued.
    fn mark(&mut self, marks: &[Marking]) -> Result<()> {
        let (batch, acked) = table::set_shot(TABLE, &CHAINS, marks);
        for node in &mut self.nodes {
            node.roles.clear();
            node.read(&mut |_| {})?;
            let marked = node
                .socket
                .send_to(&batch, &SocketAddr::new(0, 0), 0)
                .map_err(anyhow::Error::from)
                .and_then(|_| acknowledged(&node.socket, acked.clone()));
            marked.with_context(|| format!("marking for tracing on node {}", node.node))?;
        }
        Ok(())
    }

    /// Reads what the nodes traced since [`VerdictWatch::start_shot`] (or the last call) and
    /// says whether it decides `packet`'s shot as dropped: a plain DROP of its own packet, with
    /// nothing traced that could be its answer. `judge` carries what earlier calls of the same
    /// shot read.
    pub fn shot_verdict(
        &mut self,
        packet: &ProbePacket,
        judge: &mut Judge,
    ) -> Result<Option<DropVerdict>> {
        if packet.protocol == Protocol::Sctp {
            return Ok(None);
        }
        for node in &mut self.nodes {
            let name = node.node.clone();
            let mut roles = std::mem::take(&mut node.roles);
            let lost = node.read(&mut |event| {
                let role = match (&event.network, &event.transport) {
                    (Some(network), Some(transport)) => {
                        let role = role(packet, network, transport);
                        roles.insert(event.id, role);
                        role
                    }
                    _ => roles.get(&event.id).copied().unwrap_or(Role::Other),
                };
                judge.see(&name, event, role);
            })?;
            judge.lost |= lost;
            node.roles = roles;
        }
        let Some((verdict, family)) = judge.candidate() else {
            return Ok(None);
        };
        let plain = match verdict.rule_handle {
            None => true,
            Some(handle) => self
                .nodes
                .iter()
                .find(|n| n.node == verdict.node)
                .ok_or_else(|| anyhow!("no node {}", verdict.node))?
                .is_plain_drop(*family, verdict, handle)?,
        };
        if plain {
            return Ok(Some(verdict.clone()));
        }
        judge.not_plain = true;
        Ok(None)
    }
}

impl NodeWatch {
    /// Reads the rule `handle` of `verdict`'s chain back: does it drop plainly?
    fn is_plain_drop(&self, family: u8, verdict: &DropVerdict, handle: u64) -> Result<bool> {
        let request = table::get_rule(family, &verdict.table, &verdict.chain, handle, 1);
        self.query
            .send_to(&encode(&[request]), &SocketAddr::new(0, 0), 0)
            .with_context(|| format!("asking node {} for a rule", self.node))?;
        let deadline = Instant::now() + SETUP_DEADLINE;
        let mut buf = vec![0u8; 64 * 1024];
        let mut plain = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("node {}: no answer from nf_tables about a rule", self.node);
            }
            let mut fd = [nix::poll::PollFd::new(
                self.query.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            nix::poll::poll(&mut fd, nix::poll::PollTimeout::from(ms))?;
            let n = match self.query.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            };
            for message in decode(&buf[..n]) {
                // A rule that does not decode is not known to be plain: its shot waits.
                let Ok(message) = message else { continue };
                if let Some((_, NetfilterMessageInner::NfTables(NfTablesMessage::NewRule(rule)))) =
                    carried(&message)
                {
                    plain = table::is_plain_drop(rule);
                } else if errno(&message).is_some() {
                    // The acknowledgement ends the reply; a rule gone meanwhile is not plain.
                    return Ok(plain);
                }
            }
        }
    }

    /// Hands every queued trace event to `each`, without blocking. Returns whether the kernel
    /// dropped events because the socket was full (ENOBUFS).
    fn read(&mut self, each: &mut dyn FnMut(&TraceEvent)) -> Result<bool> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut lost = false;
        loop {
            match self.socket.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
                Ok(n) => {
                    for message in decode(&buf[..n]) {
                        let Ok(message) = message else { continue };
                        if let Some((
                            family,
                            NetfilterMessageInner::NfTables(NfTablesMessage::Trace(a)),
                        )) = carried(&message)
                        {
                            if let Some(event) = trace_event::parse(family, a) {
                                each(&event);
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(lost),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => lost = true,
                Err(e) => {
                    return Err(e).with_context(|| format!("reading the trace of {}", self.node))
                }
            }
        }
    }
}

/// Two netfilter netlink sockets in `ns`: one subscribed to trace events and owning the table,
/// one for questions.
fn open_node(ns: &Netns) -> Result<(Socket, Socket)> {
    let (batch, acked) = table::create_table(TABLE, &CHAINS);
    let (socket, query) = ns.run(move || -> std::io::Result<(Socket, Socket)> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        force_receive_buffer(&socket, RECEIVE_BUFFER)?;
        socket.add_membership(NFNLGRP_NFTRACE)?;
        socket.send_to(&batch, &SocketAddr::new(0, 0), 0)?;
        let mut query = Socket::new(NETLINK_NETFILTER)?;
        query.bind_auto()?;
        Ok((socket, query))
    })??;
    acknowledged(&socket, acked).context("creating the table")?;
    Ok((socket, query))
}

/// Waits until the kernel acknowledged every message of `acked` on `socket`.
fn acknowledged(socket: &Socket, acked: Vec<u32>) -> Result<()> {
    let deadline = Instant::now() + SETUP_DEADLINE;
    let mut waiting = acked;
    let mut buf = vec![0u8; 64 * 1024];
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no acknowledgement from nf_tables within {SETUP_DEADLINE:?}");
        }
        let mut fd = [nix::poll::PollFd::new(
            socket.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        nix::poll::poll(&mut fd, nix::poll::PollTimeout::from(ms))?;
        let n = match socket.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            // Trace events overflowed the buffer; acknowledgements still come.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
            Err(e) => return Err(e.into()),
        };
        for message in decode(&buf[..n]) {
            // Trace events the crate cannot read are no acknowledgement either.
            let Ok(message) = message else { continue };
            let Some(errno) = errno(&message) else {
                continue;
            };
            if errno != 0 {
                bail!(
                    "nf_tables refused: {}",
                    std::io::Error::from_raw_os_error(errno)
                );
            }
            waiting.retain(|s| *s != message.header.sequence_number);
        }
    }
    Ok(())
}

/// SO_RCVBUFFORCE: a buffer beyond `net.core.rmem_max` (we are root), so a burst of trace
/// events is not lost.
fn force_receive_buffer(socket: &Socket, bytes: usize) -> std::io::Result<()> {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: a valid socket descriptor and a c_int option value of the stated length.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            std::ptr::addr_of!(size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What the traced packet (its IP header and the start of its transport header) is to the shot
/// of `packet`.
fn role(packet: &ProbePacket, network: &[u8], transport: &[u8]) -> Role {
    let protocol = match network.first().map(|b| b >> 4) {
        Some(4) => network.get(9).copied(),
        Some(6) => network.get(6).copied(),
        _ => None,
    };
    let port = |at: usize| {
        transport
            .get(at..at + 2)
            .map(|p| u16::from_be_bytes([p[0], p[1]]))
    };
    let word = |at: usize| {
        transport
            .get(at..at + 4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    };
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    match (protocol, packet.protocol) {
        (Some(6), Protocol::Tcp) => {
            let flags = transport.get(13).copied().unwrap_or(0);
            if flags & (SYN | ACK) == SYN && word(4) == Some(packet.seq) {
                Role::Forward
            } else if flags & ACK != 0
                && port(2) == Some(packet.sport)
                && word(8) == Some(packet.seq.wrapping_add(1))
            {
                Role::Answer
            } else {
                Role::Other
            }
        }
        (Some(17), Protocol::Udp) => {
            let marker = packet.udp_payload();
            let seen = transport.get(8..).unwrap_or_default();
            let ours = !seen.is_empty() && marker.starts_with(seen);
            if ours && port(0) == Some(packet.sport) {
                Role::Forward
            } else if ours && port(2) == Some(packet.sport) {
                Role::Answer
            } else {
                Role::Other
            }
        }
        // ICMP destination unreachable, time exceeded, parameter problem; ICMPv6 errors.
        (Some(1), _) if matches!(transport.first(), Some(3 | 11 | 12)) => Role::Answer,
        (Some(58), _) if matches!(transport.first(), Some(1..=4)) => Role::Answer,
        _ => Role::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn probe(protocol: Protocol) -> ProbePacket {
        ProbePacket {
            protocol,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.244.1.10".parse::<IpAddr>().unwrap(),
            sport: 20000,
            dst: "10.96.0.10".parse::<IpAddr>().unwrap(),
            dport: 80,
            seq: 0x1234_5678,
        }
    }

    fn ipv4(protocol: u8) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[9] = protocol;
        h
    }

    fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[13] = flags;
        t
    }

    #[test]
    fn the_syn_is_recognised_by_its_sequence_number_whatever_its_ports() {
        let p = probe(Protocol::Tcp);
        // DNAT and SNAT changed ports and addresses; the ISN stays.
        let syn = tcp(31000, 8080, p.seq, 0, 0x02);
        assert_eq!(role(&p, &ipv4(6), &syn), Role::Forward);
        let other_syn = tcp(20000, 80, p.seq + 1, 0, 0x02);
        assert_eq!(role(&p, &ipv4(6), &other_syn), Role::Other);
        let rst = tcp(80, 20000, 0, p.seq + 1, 0x14);
        assert_eq!(role(&p, &ipv4(6), &rst), Role::Answer);
        let syn_ack = tcp(80, 20000, 99, p.seq + 1, 0x12);
        assert_eq!(role(&p, &ipv4(6), &syn_ack), Role::Answer);
        let not_ours = tcp(80, 20001, 99, p.seq + 1, 0x12);
        assert_eq!(role(&p, &ipv4(6), &not_ours), Role::Other);
    }

    #[test]
    fn udp_is_recognised_by_the_start_of_its_marker_and_its_direction() {
        let p = probe(Protocol::Udp);
        let datagram = |sport: u16, dport: u16, payload: &[u8]| {
            let mut t = vec![0u8; 8];
            t[0..2].copy_from_slice(&sport.to_be_bytes());
            t[2..4].copy_from_slice(&dport.to_be_bytes());
            t.extend_from_slice(&payload[..12]);
            t
        };
        let marker = p.udp_payload();
        assert_eq!(
            role(&p, &ipv4(17), &datagram(20000, 53, &marker)),
            Role::Forward
        );
        assert_eq!(
            role(&p, &ipv4(17), &datagram(53, 20000, &marker)),
            Role::Answer
        );
        assert_eq!(
            role(&p, &ipv4(17), &datagram(20000, 53, b"something else")),
            Role::Other
        );
    }

    #[test]
    fn a_drop_decides_only_with_no_answer_and_no_lost_event() {
        let drop = TraceEvent {
            table: "filter".into(),
            chain: "FORWARD".into(),
            drop: true,
            ..TraceEvent::default()
        };
        let pass = TraceEvent::default();
        let decided = |events: &[(&TraceEvent, Role)], lost: bool| {
            let mut judge = Judge {
                lost,
                ..Judge::default()
            };
            for (event, role) in events {
                judge.see("node-a", event, *role);
            }
            judge.candidate().map(|(v, _)| v.to_string())
        };
        assert_eq!(
            decided(&[(&pass, Role::Forward), (&drop, Role::Forward)], false).as_deref(),
            Some("dropped on node-a in filter:FORWARD (policy)")
        );
        // A REJECT: its answer is traced before the DROP that follows it.
        assert_eq!(
            decided(&[(&pass, Role::Answer), (&drop, Role::Forward)], false),
            None
        );
        // An answer traced on any node after the drop was read keeps the shot waiting too.
        assert_eq!(
            decided(&[(&drop, Role::Forward), (&pass, Role::Answer)], false),
            None
        );
        assert_eq!(
            decided(&[(&drop, Role::Answer)], false),
            None,
            "a dropped answer"
        );
        assert_eq!(
            decided(&[(&drop, Role::Other)], false),
            None,
            "someone else's"
        );
        assert_eq!(
            decided(&[(&drop, Role::Forward)], true),
            None,
            "events were lost"
        );
    }

    #[test]
    fn any_icmp_error_may_be_the_answer() {
        let p = probe(Protocol::Tcp);
        assert_eq!(role(&p, &ipv4(1), &[3, 3, 0, 0]), Role::Answer);
        assert_eq!(
            role(&p, &ipv4(1), &[8, 0, 0, 0]),
            Role::Other,
            "echo request"
        );
        let mut ipv6 = vec![0u8; 40];
        ipv6[0] = 0x60;
        ipv6[6] = 58;
        assert_eq!(role(&p, &ipv6, &[1, 4, 0, 0]), Role::Answer);
        assert_eq!(
            role(&p, &ipv6, &[135, 0, 0, 0]),
            Role::Other,
            "neighbour solicitation"
        );
    }
}
