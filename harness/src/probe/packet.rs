//! Crafting a probe's first frame, and recognising it (and its reply) on the wire.
//!
//! Every field is a function of the probe: IP ID, TTL, TCP sequence number, ports, payload. The
//! same scenario therefore puts byte-identical frames on the wire on every run, and a captured
//! frame can be matched to its probe by a marker that survives NAT (the TCP sequence number, the
//! UDP payload), not just by addresses that NAT rewrites.

use super::sctp;
use crate::capture::Frame;
use crate::scenario::Protocol;
use pnet::packet::ethernet::{EtherTypes, EthernetPacket, MutableEthernetPacket};
use pnet::packet::icmp::{IcmpPacket, IcmpTypes};
use pnet::packet::ip::IpNextHeaderProtocols;
use pnet::packet::ipv4::{self, Ipv4Flags, Ipv4Packet, MutableIpv4Packet};
use pnet::packet::tcp::{self, MutableTcpPacket, TcpFlags, TcpPacket};
use pnet::packet::udp::{self, MutableUdpPacket, UdpPacket};
use pnet::packet::Packet;
use pnet::util::MacAddr;
use std::net::Ipv4Addr;

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const TCP_LEN: usize = 20;
const UDP_LEN: usize = 8;

/// Identity of one probe packet on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePacket {
    pub protocol: Protocol,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: Ipv4Addr,
    pub sport: u16,
    pub dst: Ipv4Addr,
    pub dport: u16,
    /// TCP initial sequence number; for UDP, folded into the payload marker.
    pub seq: u32,
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

    /// The whole Ethernet frame, checksums included.
    pub fn frame(&self) -> Vec<u8> {
        let l4_len = match self.protocol {
            Protocol::Tcp => TCP_LEN,
            Protocol::Udp => UDP_LEN + self.udp_payload().len(),
            Protocol::Sctp => sctp::INIT_LEN,
        };
        let mut buf = vec![0u8; ETH_LEN + IPV4_LEN + l4_len];
        self.write_l4(&mut buf[ETH_LEN + IPV4_LEN..]);
        self.write_ipv4(&mut buf[ETH_LEN..], l4_len);
        if let Some(mut eth) = MutableEthernetPacket::new(&mut buf[..]) {
            eth.set_source(MacAddr::from(self.src_mac));
            eth.set_destination(MacAddr::from(self.dst_mac));
            eth.set_ethertype(EtherTypes::Ipv4);
        }
        buf
    }

    fn write_ipv4(&self, buf: &mut [u8], l4_len: usize) {
        let Some(mut ip) = MutableIpv4Packet::new(buf) else {
            return;
        };
        ip.set_version(4);
        ip.set_header_length(5);
        ip.set_total_length((IPV4_LEN + l4_len) as u16);
        ip.set_identification(self.ip_id());
        ip.set_flags(Ipv4Flags::DontFragment);
        ip.set_ttl(64);
        ip.set_next_level_protocol(match self.protocol {
            Protocol::Tcp => IpNextHeaderProtocols::Tcp,
            Protocol::Udp => IpNextHeaderProtocols::Udp,
            Protocol::Sctp => IpNextHeaderProtocols::Sctp,
        });
        ip.set_source(self.src);
        ip.set_destination(self.dst);
        let checksum = ipv4::checksum(&ip.to_immutable());
        ip.set_checksum(checksum);
    }

    fn write_l4(&self, buf: &mut [u8]) {
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
                let checksum = tcp::ipv4_checksum(&t.to_immutable(), &self.src, &self.dst);
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
                let checksum = udp::ipv4_checksum(&u.to_immutable(), &self.src, &self.dst);
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
        let Some((eth_dst, ip)) = ipv4_of(frame) else {
            return false;
        };
        if eth_dst != to_mac {
            return false;
        }
        // The answer travels back to the client's own ip:port carrying the same UDP marker;
        // that is the return path, not a delivery (even when the client is also a backend).
        let l4 = ip.payload();
        let dport = u16::from_be_bytes([
            l4.get(2).copied().unwrap_or(0),
            l4.get(3).copied().unwrap_or(0),
        ]);
        if ip.get_destination() == self.src && dport == self.sport {
            return false;
        }
        match self.protocol {
            Protocol::Tcp => TcpPacket::new(ip.payload()).is_some_and(|t| {
                ip.get_next_level_protocol() == IpNextHeaderProtocols::Tcp
                    && t.get_flags() & (TcpFlags::SYN | TcpFlags::ACK) == TcpFlags::SYN
                    && t.get_sequence() == self.seq
            }),
            Protocol::Udp => UdpPacket::new(ip.payload()).is_some_and(|u| {
                ip.get_next_level_protocol() == IpNextHeaderProtocols::Udp
                    && u.payload() == self.udp_payload().as_slice()
            }),
            Protocol::Sctp => {
                ip.get_next_level_protocol() == IpNextHeaderProtocols::Sctp
                    && sctp::parse(ip.payload()).is_some_and(|s| {
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
        let (eth_dst, ip) = ipv4_of(frame)?;
        if eth_dst != self.src_mac || ip.get_destination() != self.src {
            return None;
        }
        match ip.get_next_level_protocol() {
            IpNextHeaderProtocols::Tcp if self.protocol == Protocol::Tcp => {
                let t = TcpPacket::new(ip.payload())?;
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
                        from: ip.get_source(),
                        sport: t.get_source(),
                    })
                } else {
                    None
                }
            }
            IpNextHeaderProtocols::Udp if self.protocol == Protocol::Udp => {
                let u = UdpPacket::new(ip.payload())?;
                (u.get_destination() == self.sport && u.payload() == self.udp_payload().as_slice())
                    .then_some(Answer::Reply {
                        from: ip.get_source(),
                        sport: u.get_source(),
                    })
            }
            IpNextHeaderProtocols::Sctp if self.protocol == Protocol::Sctp => {
                let s = sctp::parse(ip.payload())?;
                // Answers to our INIT carry its Initiate Tag as their verification tag.
                if s.dport != self.sport || s.vtag != self.sctp_tag() {
                    return None;
                }
                match s.first_chunk {
                    sctp::Chunk::InitAck => Some(Answer::Reply {
                        from: ip.get_source(),
                        sport: s.sport,
                    }),
                    sctp::Chunk::Abort => Some(Answer::Reset),
                    _ => None,
                }
            }
            IpNextHeaderProtocols::Icmp => {
                let icmp = IcmpPacket::new(ip.payload())?;
                if icmp.get_icmp_type() != IcmpTypes::DestinationUnreachable {
                    return None;
                }
                // ICMP error: 4 bytes unused, then the offending IP header + 8 bytes of L4.
                let inner = Ipv4Packet::new(icmp.payload().get(4..)?)?;
                let ports = inner.payload();
                let inner_sport = u16::from_be_bytes([*ports.first()?, *ports.get(1)?]);
                (inner.get_source() == self.src && inner_sport == self.sport).then_some(
                    Answer::Unreachable {
                        from: ip.get_source(),
                        code: icmp.get_icmp_code().0,
                    },
                )
            }
            _ => None,
        }
    }
}

/// What came back to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// SYN-ACK or UDP echo, from this address:port (after reverse translation).
    Reply { from: Ipv4Addr, sport: u16 },
    /// TCP RST.
    Reset,
    /// ICMP destination unreachable (REJECT's default answer), with its code.
    Unreachable { from: Ipv4Addr, code: u8 },
}

fn ipv4_of(frame: &Frame) -> Option<([u8; 6], Ipv4Packet<'_>)> {
    let eth = EthernetPacket::new(&frame.bytes)?;
    if eth.get_ethertype() != EtherTypes::Ipv4 {
        return None;
    }
    let dst: [u8; 6] = eth.get_destination().octets();
    let ip = Ipv4Packet::new(&frame.bytes[ETH_LEN..])?;
    Some((dst, ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(protocol: Protocol) -> ProbePacket {
        ProbePacket {
            protocol,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(10, 244, 1, 10),
            sport: 40000,
            dst: Ipv4Addr::new(10, 96, 0, 10),
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
    fn sctp_answer(p: &ProbePacket, src: Ipv4Addr, vtag: u32, chunk: u8) -> Frame {
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
        ip.set_destination(p.src);
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
        translated.dst = Ipv4Addr::new(10, 244, 2, 10);
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
}
