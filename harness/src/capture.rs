//! Packet capture on one interface of one namespace, with pnet's AF_PACKET channel.
//!
//! The capture socket is opened (and so bound to the namespace) before anything is sent, so a
//! probe never races its own first packet; waiting is bounded by a deadline, never a sleep.

use crate::netns::Netns;
use anyhow::{anyhow, Context, Result};
use pnet::datalink::{self, Channel, Config, DataLinkReceiver, DataLinkSender};
use pnet::packet::ethernet::{EtherTypes, EthernetPacket};
use pnet::packet::ip::{IpNextHeaderProtocol, IpNextHeaderProtocols};
use pnet::packet::ipv4::Ipv4Packet;
use pnet::packet::ipv6::Ipv6Packet;
use pnet::packet::udp::UdpPacket;
use pnet::packet::Packet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How often a blocked read wakes up to check the deadline; also how long a drain of an
/// already-quiet capture takes, which every probe shot pays once per pod.
const READ_SLICE: Duration = Duration::from_millis(5);

/// How many unrelated frames a wait reads past its deadline before it gives up on a queue that
/// never empties. The suite's namespaces carry only its own probes, a few frames a shot.
const LATE_FRAMES: usize = 4096;

/// The L3/L4 identity of a packet of either family: what translations change. Ports are 0 for
/// protocols without them (ICMP, ICMPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    pub protocol: u8,
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
}

impl std::fmt::Display for Flow {
    /// `tcp 10.244.1.10:20000 -> 10.96.0.10:80`, `tcp [fd00::a]:20000 -> [fd00::1]:80`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.protocol {
            6 => "tcp",
            17 => "udp",
            1 => "icmp",
            58 => "icmpv6",
            132 => "sctp",
            _ => "ip",
        };
        write!(
            f,
            "{proto} {} -> {}",
            SocketAddr::new(self.src, self.sport),
            SocketAddr::new(self.dst, self.dport)
        )
    }
}

/// A captured Ethernet frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub bytes: Vec<u8>,
}

impl Frame {
    /// The flow of this frame, if it is IPv4 or IPv6 (IPv6 with no extension header: its
    /// next header is the transport's).
    pub fn flow(&self) -> Option<Flow> {
        self.with_ip_layer(flow_of)
    }

    /// `f` of the IPv4 or IPv6 header's transport protocol and addresses, and its payload
    /// (borrowed: frames are scanned by the thousand while a probe waits).
    fn with_ip_layer<T>(
        &self,
        f: impl FnOnce(IpNextHeaderProtocol, IpAddr, IpAddr, &[u8]) -> Option<T>,
    ) -> Option<T> {
        let eth = EthernetPacket::new(&self.bytes)?;
        match eth.get_ethertype() {
            EtherTypes::Ipv4 => {
                let ip = Ipv4Packet::new(eth.payload())?;
                f(
                    ip.get_next_level_protocol(),
                    IpAddr::V4(ip.get_source()),
                    IpAddr::V4(ip.get_destination()),
                    ip.payload(),
                )
            }
            EtherTypes::Ipv6 => {
                let ip = Ipv6Packet::new(eth.payload())?;
                f(
                    ip.get_next_header(),
                    IpAddr::V6(ip.get_source()),
                    IpAddr::V6(ip.get_destination()),
                    ip.payload(),
                )
            }
            _ => None,
        }
    }

    /// For a VXLAN-encapsulated frame (UDP to `vxlan_port`), the inner frame's flow.
    pub fn vxlan_inner_flow(&self, vxlan_port: u16) -> Option<Flow> {
        self.vxlan_inner(vxlan_port)?.flow()
    }

    /// For a VXLAN-encapsulated frame (UDP to `vxlan_port`, over IPv4 or IPv6), the inner
    /// Ethernet frame.
    pub fn vxlan_inner(&self, vxlan_port: u16) -> Option<Frame> {
        self.with_ip_layer(|protocol, _, _, l4| {
            if protocol != IpNextHeaderProtocols::Udp {
                return None;
            }
            let udp = UdpPacket::new(l4)?;
            if udp.get_destination() != vxlan_port {
                return None;
            }
            // 8-byte VXLAN header, then the inner Ethernet frame.
            Some(Frame {
                bytes: udp.payload().get(8..)?.to_vec(),
            })
        })
    }
}

/// The source and destination ports of a TCP, UDP or SCTP header; 0, 0 for other protocols.
fn ports(protocol: IpNextHeaderProtocol, l4: &[u8]) -> Option<(u16, u16)> {
    let port = |i: usize| Some(u16::from_be_bytes([*l4.get(i)?, *l4.get(i + 1)?]));
    match protocol {
        // SCTP's common header starts with the two ports too.
        IpNextHeaderProtocols::Tcp | IpNextHeaderProtocols::Udp | IpNextHeaderProtocols::Sctp => {
            Some((port(0)?, port(2)?))
        }
        _ => Some((0, 0)),
    }
}

fn flow_of(protocol: IpNextHeaderProtocol, src: IpAddr, dst: IpAddr, l4: &[u8]) -> Option<Flow> {
    let (sport, dport) = ports(protocol, l4)?;
    Some(Flow {
        protocol: protocol.0,
        src,
        sport,
        dst,
        dport,
    })
}

/// A live capture (and injection point) on one interface.
pub struct Capture {
    rx: Box<dyn DataLinkReceiver>,
    tx: Box<dyn DataLinkSender>,
    label: String,
}

impl Capture {
    /// Opens an AF_PACKET channel on `iface` inside `ns`.
    pub fn open(ns: &Netns, iface: &str) -> Result<Capture> {
        let label = format!("{iface} in {}", ns.name());
        let wanted = iface.to_string();
        let (tx, rx) = ns
            .run(move || -> Result<_> {
                let interface = datalink::interfaces()
                    .into_iter()
                    .find(|i| i.name == wanted)
                    .ok_or_else(|| anyhow!("no interface {wanted}"))?;
                let config = Config {
                    read_timeout: Some(READ_SLICE),
                    ..Config::default()
                };
                match datalink::channel(&interface, config).context("opening AF_PACKET channel")? {
                    Channel::Ethernet(tx, rx) => Ok((tx, rx)),
                    _ => Err(anyhow!("unexpected channel type")),
                }
            })?
            .with_context(|| format!("capturing on {label}"))?;
        Ok(Capture { rx, tx, label })
    }

    /// Sends one raw Ethernet frame out of the interface.
    pub fn send(&mut self, frame: &[u8]) -> Result<()> {
        match self.tx.send_to(frame, None) {
            Some(r) => r.with_context(|| format!("sending a frame on {}", self.label)),
            None => Err(anyhow!("sending a frame on {}: no buffer", self.label)),
        }
    }

    /// Waits until a frame satisfying `pred` arrives, or `timeout` passes (then `None`).
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&Frame) -> bool,
    ) -> Result<Option<Frame>> {
        let deadline = Instant::now() + timeout;
        // Whatever is queued is read, also past the deadline: it arrived in time, however late
        // this thread runs. A bound on the clock here (100 ms past the deadline, once) let a
        // starved watcher stop after an unrelated frame with the one it waited for still
        // queued behind it (seen in the emulated VM beside other work: a shot judged answered
        // but never delivered). Only an empty queue, or a flood of unrelated frames, ends it.
        let mut late = 0;
        loop {
            match self.rx.next() {
                Ok(bytes) => {
                    let frame = Frame {
                        bytes: bytes.to_vec(),
                    };
                    if pred(&frame) {
                        return Ok(Some(frame));
                    }
                    if Instant::now() >= deadline {
                        late += 1;
                        if late >= LATE_FRAMES {
                            break;
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                    ) =>
                {
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                Err(e) => return Err(e).with_context(|| format!("reading from {}", self.label)),
            }
        }
        Ok(None)
    }
}
