//! Crafting a probe's first frame, and recognising it (and its reply) on the wire, in either
//! family.
//!
//! Every field is a function of the probe: IP ID (IPv4) or flow label (IPv6), TTL or hop limit,
//! TCP sequence number, ports, payload. The same scenario therefore puts byte-identical frames
//! on the wire on every run, and a captured frame can be matched to its probe by a marker that
//! survives NAT (the TCP sequence number, the UDP payload), not just by addresses that NAT
//! rewrites.

use super::sctp;
use crate::capture::Frame;
use crate::scenario::Protocol;
use pnet::packet::ethernet::{EtherType, EtherTypes, EthernetPacket, MutableEthernetPacket};
use pnet::packet::icmp::{IcmpPacket, IcmpTypes};
use pnet::packet::icmpv6::{Icmpv6Packet, Icmpv6Types};
use pnet::packet::ip::{IpNextHeaderProtocol, IpNextHeaderProtocols};
use pnet::packet::ipv4::{self, Ipv4Flags, Ipv4Packet, MutableIpv4Packet};
use pnet::packet::ipv6::{Ipv6Packet, MutableIpv6Packet};
use pnet::packet::tcp::{self, MutableTcpPacket, TcpFlags, TcpPacket};
use pnet::packet::udp::{self, MutableUdpPacket, UdpPacket};
use pnet::packet::Packet;
use pnet::util::MacAddr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const TCP_LEN: usize = 20;
const UDP_LEN: usize = 8;

/// Identity of one probe packet on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePacket {
    pub protocol: Protocol,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Both addresses are of one family (`probe::plan` refuses a probe that mixes them).
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
    /// TCP initial sequence number; for UDP, folded into the payload marker.
    pub seq: u32,
}

/// The two addresses of a packet, of one family.
enum Addresses {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

impl ProbePacket {
    /// The UDP payload; backends echo it, so it identifies the reply too.
    pub fn udp_payload(&self) -> Vec<u8> {
        format!("kpct-probe {:08x}", self.seq).into_bytes()
    }

    /// IP ID derived from the sequence number: deterministic, and distinct between probes.
    fn ip_id(&self) -> u16 {
        (self.seq & 0xffff) as u16
    }

    /// The addresses as one family. An IPv4 address beside an IPv6 one is written
    /// IPv4-mapped (`::ffff:a.b.c.d`), as a dual-stack socket would; plans never mix them.
    fn addresses(&self) -> Addresses {
        let v6 = |ip: IpAddr| match ip {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Addresses::V4(s, d),
            (s, d) => Addresses::V6(v6(s), v6(d)),
        }
    }

    /// The whole Ethernet frame, checksums included.
    pub fn frame(&self) -> Vec<u8> {
        let l4_len = match self.protocol {
            Protocol::Tcp => TCP_LEN,
            Protocol::Udp => UDP_LEN + self.udp_payload().len(),
            Protocol::Sctp => sctp::INIT_LEN,
        };
        let addresses = self.addresses();
        let (ip_len, ethertype) = match addresses {
            Addresses::V4(..) => (IPV4_LEN, EtherTypes::Ipv4),
            Addresses::V6(..) => (IPV6_LEN, EtherTypes::Ipv6),
        };
        let mut buf = vec![0u8; ETH_LEN + ip_len + l4_len];
        self.write_l4(&mut buf[ETH_LEN + ip_len..], &addresses);
        match addresses {
            Addresses::V4(src, dst) => self.write_ipv4(&mut buf[ETH_LEN..], l4_len, src, dst),
            Addresses::V6(src, dst) => self.write_ipv6(&mut buf[ETH_LEN..], l4_len, src, dst),
        }
        if let Some(mut eth) = MutableEthernetPacket::new(&mut buf[..]) {
            eth.set_source(MacAddr::from(self.src_mac));
            eth.set_destination(MacAddr::from(self.dst_mac));
            eth.set_ethertype(ethertype);
        }
        buf
    }

    fn next_header(&self) -> IpNextHeaderProtocol {
        match self.protocol {
            Protocol::Tcp => IpNextHeaderProtocols::Tcp,
            Protocol::Udp => IpNextHeaderProtocols::Udp,
            Protocol::Sctp => IpNextHeaderProtocols::Sctp,
        }
    }

    fn write_ipv4(&self, buf: &mut [u8], l4_len: usize, src: Ipv4Addr, dst: Ipv4Addr) {
        let Some(mut ip) = MutableIpv4Packet::new(buf) else {
            return;
        };
        ip.set_version(4);
        ip.set_header_length(5);
        ip.set_total_length((IPV4_LEN + l4_len) as u16);
        ip.set_identification(self.ip_id());
        ip.set_flags(Ipv4Flags::DontFragment);
        ip.set_ttl(64);
        ip.set_next_level_protocol(self.next_header());
        ip.set_source(src);
        ip.set_destination(dst);
        let checksum = ipv4::checksum(&ip.to_immutable());
        ip.set_checksum(checksum);
    }

    /// The flow label, like IPv4's ID, comes from the sequence number.
    fn write_ipv6(&self, buf: &mut [u8], l4_len: usize, src: Ipv6Addr, dst: Ipv6Addr) {
        let Some(mut ip) = MutableIpv6Packet::new(buf) else {
            return;
        };
        ip.set_version(6);
        ip.set_traffic_class(0);
        ip.set_flow_label(self.seq & 0xf_ffff);
        ip.set_payload_length(l4_len as u16);
        ip.set_next_header(self.next_header());
        ip.set_hop_limit(64);
        ip.set_source(src);
        ip.set_destination(dst);
    }

    fn write_l4(&self, buf: &mut [u8], addresses: &Addresses) {
        match self.protocol {
            Protocol::Tcp => {
                let Some(mut t) = MutableTcpPacket::new(buf) else {
                    return;
                };
                t.set_source(self.sport);
                t.set_destination(self.dport);
                t.set_sequence(self.seq);
                t.set_data_offset(5);
                t.set_flags(TcpFlags::SYN);
                t.set_window(64240);
                let checksum = match addresses {
                    Addresses::V4(s, d) => tcp::ipv4_checksum(&t.to_immutable(), s, d),
                    Addresses::V6(s, d) => tcp::ipv6_checksum(&t.to_immutable(), s, d),
                };
                t.set_checksum(checksum);
            }
            Protocol::Udp => {
                let payload = self.udp_payload();
                let Some(mut u) = MutableUdpPacket::new(buf) else {
                    return;
                };
                u.set_source(self.sport);
                u.set_destination(self.dport);
                u.set_length((UDP_LEN + payload.len()) as u16);
                u.set_payload(&payload);
                let checksum = match addresses {
                    Addresses::V4(s, d) => udp::ipv4_checksum(&u.to_immutable(), s, d),
                    Addresses::V6(s, d) => udp::ipv6_checksum(&u.to_immutable(), s, d),
                };
                u.set_checksum(checksum);
            }
            Protocol::Sctp => sctp::write_init(buf, self.sport, self.dport, self.sctp_tag()),
        }
    }

    /// The INIT's Initiate Tag: the sequence number, made non-zero as SCTP requires.
    fn sctp_tag(&self) -> u32 {
        self.seq.max(1)
    }

    /// Is `frame` this probe's first packet (possibly translated), heading to `to_mac`?
    pub fn is_forward(&self, frame: &Frame, to_mac: [u8; 6]) -> bool {
        let Some((eth_dst, ip)) = ip_of(frame) else {
            return false;
        };
        if eth_dst != to_mac {
            return false;
        }
        // The answer travels back to the client's own ip:port carrying the same UDP marker;
        // that is the return path, not a delivery (even when the client is also a backend).
        let l4 = ip.payload;
        let dport = u16::from_be_bytes([
            l4.get(2).copied().unwrap_or(0),
            l4.get(3).copied().unwrap_or(0),
        ]);
        if ip.dst == self.src && dport == self.sport {
            return false;
        }
        match self.protocol {
            Protocol::Tcp => TcpPacket::new(ip.payload).is_some_and(|t| {
                ip.next == IpNextHeaderProtocols::Tcp
                    && t.get_flags() & (TcpFlags::SYN | TcpFlags::ACK) == TcpFlags::SYN
                    && t.get_sequence() == self.seq
            }),
            Protocol::Udp => UdpPacket::new(ip.payload).is_some_and(|u| {
                ip.next == IpNextHeaderProtocols::Udp
                    && u.payload() == self.udp_payload().as_slice()
            }),
            Protocol::Sctp => {
                ip.next == IpNextHeaderProtocols::Sctp
                    && sctp::parse(ip.payload).is_some_and(|s| {
                        s.first_chunk
                            == sctp::Chunk::Init {
                                initiate_tag: self.sctp_tag(),
                            }
                    })
            }
        }
    }

    /// Classifies `frame`, seen at the source interface, as this probe's answer.
    pub fn answer(&self, frame: &Frame) -> Option<Answer> {
        let (eth_dst, ip) = ip_of(frame)?;
        if eth_dst != self.src_mac || ip.dst != self.src {
            return None;
        }
        match ip.next {
            IpNextHeaderProtocols::Tcp if self.protocol == Protocol::Tcp => {
                let t = TcpPacket::new(ip.payload)?;
                if t.get_destination() != self.sport
                    || t.get_acknowledgement() != self.seq.wrapping_add(1)
                {
                    return None;
                }
                let flags = t.get_flags();
                if flags & TcpFlags::RST != 0 {
                    Some(Answer::Reset)
                } else if flags & (TcpFlags::SYN | TcpFlags::ACK) == TcpFlags::SYN | TcpFlags::ACK {
                    Some(Answer::Reply {
                        from: ip.src,
                        sport: t.get_source(),
                    })
                } else {
                    None
                }
            }
            IpNextHeaderProtocols::Udp if self.protocol == Protocol::Udp => {
                let u = UdpPacket::new(ip.payload)?;
                (u.get_destination() == self.sport && u.payload() == self.udp_payload().as_slice())
                    .then_some(Answer::Reply {
                        from: ip.src,
                        sport: u.get_source(),
                    })
            }
            IpNextHeaderProtocols::Sctp if self.protocol == Protocol::Sctp => {
                let s = sctp::parse(ip.payload)?;
                // Answers to our INIT carry its Initiate Tag as their verification tag.
                if s.dport != self.sport || s.vtag != self.sctp_tag() {
                    return None;
                }
                match s.first_chunk {
                    sctp::Chunk::InitAck => Some(Answer::Reply {
                        from: ip.src,
                        sport: s.sport,
                    }),
                    sctp::Chunk::Abort => Some(Answer::Reset),
                    _ => None,
                }
            }
            IpNextHeaderProtocols::Icmp => {
                let icmp = IcmpPacket::new(ip.payload)?;
                if icmp.get_icmp_type() != IcmpTypes::DestinationUnreachable {
                    return None;
                }
                // ICMP error: 4 bytes unused, then the offending IP header + 8 bytes of L4.
                let inner = Ipv4Packet::new(icmp.payload().get(4..)?)?;
                self.is_ours(IpAddr::V4(inner.get_source()), inner.payload())
                    .then_some(Answer::Unreachable {
                        from: ip.src,
                        code: icmp.get_icmp_code().0,
                    })
            }
            IpNextHeaderProtocols::Icmpv6 => {
                let icmp = Icmpv6Packet::new(ip.payload)?;
                if icmp.get_icmpv6_type() != Icmpv6Types::DestinationUnreachable {
                    return None;
                }
                // ICMPv6 error (RFC 4443): 4 bytes unused, then as much of the offending
                // packet as fits, its IPv6 header first.
                let inner = Ipv6Packet::new(icmp.payload().get(4..)?)?;
                self.is_ours(IpAddr::V6(inner.get_source()), inner.payload())
                    .then_some(Answer::Unreachable {
                        from: ip.src,
                        code: icmp.get_icmpv6_code().0,
                    })
            }
            _ => None,
        }
    }

    /// Whether the packet an ICMP error quotes (its source and transport header) is ours.
    fn is_ours(&self, inner_src: IpAddr, inner_l4: &[u8]) -> bool {
        let inner_sport = match inner_l4 {
            [a, b, ..] => u16::from_be_bytes([*a, *b]),
            _ => return false,
        };
        inner_src == self.src && inner_sport == self.sport
    }
}

/// What came back to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// SYN-ACK or UDP echo, from this address:port (after reverse translation).
    Reply { from: IpAddr, sport: u16 },
    /// TCP RST.
    Reset,
    /// ICMP or ICMPv6 destination unreachable (REJECT's default answer), with its code; the
    /// family is that of `from`.
    Unreachable { from: IpAddr, code: u8 },
}

/// The IP layer of a frame, of either family.
struct IpView<'a> {
    src: IpAddr,
    dst: IpAddr,
    next: IpNextHeaderProtocol,
    payload: &'a [u8],
}

fn ip_of(frame: &Frame) -> Option<([u8; 6], IpView<'_>)> {
    let eth = EthernetPacket::new(&frame.bytes)?;
    let dst: [u8; 6] = eth.get_destination().octets();
    let ethertype: EtherType = eth.get_ethertype();
    let l3 = frame.bytes.get(ETH_LEN..)?;
    let view = match ethertype {
        EtherTypes::Ipv4 => {
            let ip = Ipv4Packet::new(l3)?;
            let header = usize::from(ip.get_header_length()) * 4;
            let total = usize::from(ip.get_total_length()).min(l3.len());
            IpView {
                src: IpAddr::V4(ip.get_source()),
                dst: IpAddr::V4(ip.get_destination()),
                next: ip.get_next_level_protocol(),
                payload: l3.get(header..total)?,
            }
        }
        EtherTypes::Ipv6 => {
            let ip = Ipv6Packet::new(l3)?;
            let total = (IPV6_LEN + usize::from(ip.get_payload_length())).min(l3.len());
            IpView {
                src: IpAddr::V6(ip.get_source()),
                dst: IpAddr::V6(ip.get_destination()),
                next: ip.get_next_header(),
                payload: l3.get(IPV6_LEN..total)?,
            }
        }
        _ => return None,
    };
    Some((dst, view))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(protocol: Protocol) -> ProbePacket {
        ProbePacket {
            protocol,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: IpAddr::V4(Ipv4Addr::new(10, 244, 1, 10)),
            sport: 40000,
            dst: IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10)),
            dport: 80,
            seq: 0x1000_0001,
        }
    }

    #[test]
    fn frames_are_byte_identical_across_builds() {
        assert_eq!(probe(Protocol::Tcp).frame(), probe(Protocol::Tcp).frame());
        assert_eq!(probe(Protocol::Tcp).frame().len(), 54);
        assert_eq!(probe(Protocol::Udp).frame(), probe(Protocol::Udp).frame());
    }

    #[test]
    fn checksums_verify() {
        let f = probe(Protocol::Tcp).frame();
        let ip = Ipv4Packet::new(&f[ETH_LEN..]).unwrap();
        assert_eq!(ip.get_checksum(), ipv4::checksum(&ip));
        let t = TcpPacket::new(ip.payload()).unwrap();
        assert_eq!(
            t.get_checksum(),
            tcp::ipv4_checksum(&t, &ip.get_source(), &ip.get_destination())
        );
        let f = probe(Protocol::Udp).frame();
        let ip = Ipv4Packet::new(&f[ETH_LEN..]).unwrap();
        let u = UdpPacket::new(ip.payload()).unwrap();
        assert_eq!(
            u.get_checksum(),
            udp::ipv4_checksum(&u, &ip.get_source(), &ip.get_destination())
        );
    }

    /// A frame from `src` to the probe's source carrying an SCTP packet with `vtag` whose
    /// first chunk is `chunk`.
    fn sctp_answer(p: &ProbePacket, src: IpAddr, vtag: u32, chunk: u8) -> Frame {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (src, p.src) else {
            panic!("an IPv4 probe");
        };
        let mut bytes = vec![0u8; ETH_LEN + IPV4_LEN + sctp::HEADER_LEN + 4];
        {
            let l4 = &mut bytes[ETH_LEN + IPV4_LEN..];
            l4[0..2].copy_from_slice(&9999u16.to_be_bytes());
            l4[2..4].copy_from_slice(&p.sport.to_be_bytes());
            l4[4..8].copy_from_slice(&vtag.to_be_bytes());
            l4[sctp::HEADER_LEN] = chunk;
        }
        let mut eth = MutableEthernetPacket::new(&mut bytes[..]).unwrap();
        eth.set_destination(MacAddr::from(p.src_mac));
        eth.set_ethertype(EtherTypes::Ipv4);
        let mut ip = MutableIpv4Packet::new(&mut bytes[ETH_LEN..]).unwrap();
        ip.set_version(4);
        ip.set_header_length(5);
        ip.set_total_length((IPV4_LEN + sctp::HEADER_LEN + 4) as u16);
        ip.set_next_level_protocol(IpNextHeaderProtocols::Sctp);
        ip.set_source(src);
        ip.set_destination(dst);
        Frame { bytes }
    }

    #[test]
    fn sctp_init_is_recognised_and_answered_by_init_ack_or_abort() {
        let p = ProbePacket {
            dport: 9999,
            ..probe(Protocol::Sctp)
        };
        let frame = p.frame();
        assert_eq!(frame.len(), ETH_LEN + IPV4_LEN + sctp::INIT_LEN);
        assert!(p.is_forward(&Frame { bytes: frame }, p.dst_mac));
        let tag = p.seq;
        assert_eq!(
            p.answer(&sctp_answer(&p, p.dst, tag, 2)),
            Some(Answer::Reply {
                from: p.dst,
                sport: 9999
            })
        );
        assert_eq!(
            p.answer(&sctp_answer(&p, p.dst, tag, 6)),
            Some(Answer::Reset)
        );
        assert_eq!(
            p.answer(&sctp_answer(&p, p.dst, tag + 1, 2)),
            None,
            "another probe's"
        );
        let other = ProbePacket {
            seq: tag + 1,
            ..p.clone()
        };
        assert!(!other.is_forward(&Frame { bytes: p.frame() }, p.dst_mac));
    }

    #[test]
    fn recognises_its_own_translated_syn_and_not_others() {
        let p = probe(Protocol::Tcp);
        let mut translated = p.clone();
        translated.dst = IpAddr::V4(Ipv4Addr::new(10, 244, 2, 10));
        translated.dport = 8080;
        translated.dst_mac = [2, 0, 0, 0, 0, 9];
        let frame = Frame {
            bytes: translated.frame(),
        };
        assert!(p.is_forward(&frame, [2, 0, 0, 0, 0, 9]));
        assert!(!p.is_forward(&frame, [2, 0, 0, 0, 0, 8]), "other MAC");
        let mut other = translated.clone();
        other.seq += 1;
        assert!(!p.is_forward(
            &Frame {
                bytes: other.frame()
            },
            [2, 0, 0, 0, 0, 9]
        ));
    }

    fn probe6(protocol: Protocol) -> ProbePacket {
        ProbePacket {
            src: "fd00:10:244:1::10".parse().unwrap(),
            dst: "fd00:10:96::a".parse().unwrap(),
            ..probe(protocol)
        }
    }

    #[test]
    fn ipv6_frames_carry_a_fixed_flow_label_and_valid_checksums() {
        let tcp = probe6(Protocol::Tcp);
        let frame = tcp.frame();
        assert_eq!(frame, probe6(Protocol::Tcp).frame());
        assert_eq!(frame.len(), ETH_LEN + IPV6_LEN + TCP_LEN);
        let ip = Ipv6Packet::new(&frame[ETH_LEN..]).unwrap();
        assert_eq!(
            (ip.get_version(), ip.get_hop_limit(), ip.get_flow_label()),
            (6, 64, tcp.seq & 0xf_ffff)
        );
        let t = TcpPacket::new(ip.payload()).unwrap();
        assert_eq!(
            t.get_checksum(),
            tcp::ipv6_checksum(&t, &ip.get_source(), &ip.get_destination())
        );
        let udp = probe6(Protocol::Udp).frame();
        let ip = Ipv6Packet::new(&udp[ETH_LEN..]).unwrap();
        let u = UdpPacket::new(ip.payload()).unwrap();
        assert_eq!(
            u.get_checksum(),
            udp::ipv6_checksum(&u, &ip.get_source(), &ip.get_destination())
        );
        assert!(probe6(Protocol::Udp).is_forward(&Frame { bytes: udp }, tcp.dst_mac));
    }

    /// An ICMPv6 destination unreachable from `from` quoting `quoted` (as a router or a
    /// REJECT sends it back to the probe's source).
    fn icmpv6_unreachable(p: &ProbePacket, from: Ipv6Addr, code: u8, quoted: &[u8]) -> Frame {
        let IpAddr::V6(to) = p.src else {
            panic!("an IPv6 probe");
        };
        let body_len = 8 + quoted.len();
        let mut bytes = vec![0u8; ETH_LEN + IPV6_LEN + body_len];
        let mut eth = MutableEthernetPacket::new(&mut bytes[..]).unwrap();
        eth.set_destination(MacAddr::from(p.src_mac));
        eth.set_ethertype(EtherTypes::Ipv6);
        let mut ip = MutableIpv6Packet::new(&mut bytes[ETH_LEN..]).unwrap();
        ip.set_version(6);
        ip.set_payload_length(body_len as u16);
        ip.set_next_header(IpNextHeaderProtocols::Icmpv6);
        ip.set_hop_limit(64);
        ip.set_source(from);
        ip.set_destination(to);
        let icmp = &mut bytes[ETH_LEN + IPV6_LEN..];
        icmp[0] = 1; // destination unreachable
        icmp[1] = code;
        icmp[8..].copy_from_slice(quoted);
        Frame { bytes }
    }

    #[test]
    fn an_icmpv6_unreachable_quoting_the_probe_is_its_answer() {
        let p = probe6(Protocol::Udp);
        let sent = p.frame();
        let quoted = &sent[ETH_LEN..];
        let router: Ipv6Addr = "fd00:10:244:1::1".parse().unwrap();
        assert_eq!(
            p.answer(&icmpv6_unreachable(&p, router, 4, quoted)),
            Some(Answer::Unreachable {
                from: IpAddr::V6(router),
                code: 4
            })
        );
        let other = ProbePacket {
            sport: p.sport + 1,
            ..p.clone()
        };
        assert_eq!(
            p.answer(&icmpv6_unreachable(
                &p,
                router,
                4,
                &other.frame()[ETH_LEN..]
            )),
            None,
            "another probe's packet quoted"
        );
    }
}
