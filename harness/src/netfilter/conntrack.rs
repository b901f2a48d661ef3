//! The conntrack table of a namespace over ctnetlink: list the entries of both families, delete
//! chosen ones, flush it. Used to flush every flow but the ones a scenario keeps across steps,
//! and to apply a proxier's stale-entry cleanup (kube-proxy's `conntrack.CleanStaleEntries`,
//! which also lists the table and deletes by filter, pkg/proxy/conntrack/cleanup.go).

use super::socket::{carried, dump, errno, exchange, message, Message};
use crate::netns::Netns;
use anyhow::{bail, Context, Result};
use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol, Tuple as TupleAttribute,
};
use netlink_packet_netfilter::{NetfilterMessageInner, NetfilterProtoFamily};
use std::net::IpAddr;

/// One direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tuple {
    pub protocol: u8,
    /// Both addresses are of one family.
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
}

/// A conntrack entry: what the client sent, and what the reply direction expects (its source
/// is the DNAT target, its destination the SNAT address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub original: Tuple,
    pub reply: Tuple,
}

impl Tuple {
    /// The tuple's attributes (`CTA_TUPLE_IP`, `CTA_TUPLE_PROTO`): the key the kernel looks an
    /// entry up by.
    fn attributes(&self) -> Vec<TupleAttribute> {
        vec![
            TupleAttribute::Ip(vec![
                IPTuple::SourceAddress(self.src),
                IPTuple::DestinationAddress(self.dst),
            ]),
            TupleAttribute::Proto(vec![
                ProtoTuple::Protocol(Protocol::from(self.protocol)),
                ProtoTuple::SourcePort(self.sport),
                ProtoTuple::DestinationPort(self.dport),
            ]),
        ]
    }

    /// The tuple of `attributes`; `None` without both addresses and a protocol (ports absent,
    /// as for ICMP, read as 0).
    fn from_attributes(attributes: &[TupleAttribute]) -> Option<Tuple> {
        let (mut src, mut dst, mut protocol, mut sport, mut dport) = (None, None, None, 0, 0);
        for attribute in attributes {
            match attribute {
                TupleAttribute::Ip(ip) => {
                    for a in ip {
                        match a {
                            IPTuple::SourceAddress(a) => src = Some(*a),
                            IPTuple::DestinationAddress(a) => dst = Some(*a),
                            _ => {}
                        }
                    }
                }
                TupleAttribute::Proto(proto) => {
                    for p in proto {
                        match p {
                            ProtoTuple::Protocol(p) => protocol = Some(u8::from(*p)),
                            ProtoTuple::SourcePort(p) => sport = *p,
                            ProtoTuple::DestinationPort(p) => dport = *p,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(Tuple {
            protocol: protocol?,
            src: src?,
            dst: dst?,
            sport,
            dport,
        })
    }
}

/// The entry a NEW message (a dump's reply) describes.
pub(crate) fn entry(message: &Message) -> Option<Entry> {
    let Some((_, NetfilterMessageInner::Conntrack(ConntrackMessage::New(attributes)))) =
        carried(message)
    else {
        return None;
    };
    let (mut original, mut reply) = (None, None);
    for attribute in attributes {
        match attribute {
            ConntrackAttribute::CtaTupleOrig(t) => original = Tuple::from_attributes(t),
            ConntrackAttribute::CtaTupleReply(t) => reply = Tuple::from_attributes(t),
            _ => {}
        }
    }
    Some(Entry {
        original: original?,
        reply: reply?,
    })
}

/// The errno the replies end in, as a failure of `what`; ENOENT (nothing to delete: it
/// expired, or the table was already empty on some kernels) is success.
fn acknowledged(replies: &[Message], what: &str) -> Result<()> {
    match replies.iter().find_map(errno) {
        Some(0) | Some(libc::ENOENT) => Ok(()),
        Some(e) => bail!("{what}: {}", std::io::Error::from_raw_os_error(e)),
        None => bail!("{what}: no acknowledgement from ctnetlink"),
    }
}

/// The dump of every entry: AF_UNSPEC, as ctnetlink_dump_table filters by family only when one
/// is given.
fn dump_request() -> Message {
    message(
        NetfilterProtoFamily::Unspec,
        0,
        ConntrackMessage::Get(Vec::new()),
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
    )
}

/// The deletion of the entry whose original direction is `original` (the key the kernel looks
/// an entry up by).
fn delete_request(original: &Tuple) -> Message {
    message(
        match original.src {
            IpAddr::V4(_) => NetfilterProtoFamily::IPv4,
            IpAddr::V6(_) => NetfilterProtoFamily::IPv6,
        },
        0,
        ConntrackMessage::Delete(vec![ConntrackAttribute::CtaTupleOrig(
            original.attributes(),
        )]),
        NLM_F_REQUEST | NLM_F_ACK,
        1,
    )
}

/// A DELETE with no tuple: the kernel flushes the whole table, of every family with AF_UNSPEC.
fn flush_request() -> Message {
    message(
        NetfilterProtoFamily::Unspec,
        0,
        ConntrackMessage::Delete(Vec::new()),
        NLM_F_REQUEST | NLM_F_ACK,
        1,
    )
}

/// Every entry of `ns`'s conntrack table, IPv4 and IPv6, sorted.
pub fn entries(ns: &Netns) -> Result<Vec<Entry>> {
    let replies = dump(ns, &dump_request())
        .with_context(|| format!("listing conntrack entries in {}", ns.name()))?;
    let mut out: Vec<Entry> = replies.iter().filter_map(entry).collect();
    out.sort();
    Ok(out)
}

/// Deletes the entry whose original direction is `original`. One that is already gone
/// (ENOENT: it expired, or a reply to another deletion took it) is not an error.
pub fn delete(ns: &Netns, original: &Tuple) -> Result<()> {
    let replies = exchange(ns, &delete_request(original), false)
        .with_context(|| format!("deleting a conntrack entry in {}", ns.name()))?;
    acknowledged(
        &replies,
        &format!("deleting conntrack entry {original:?} in {}", ns.name()),
    )
}

/// Deletes every entry of `ns` for which `doomed` holds; returns how many.
pub fn delete_where(ns: &Netns, doomed: impl Fn(&Entry) -> bool) -> Result<usize> {
    let mut n = 0;
    for entry in entries(ns)?.iter().filter(|e| doomed(e)) {
        delete(ns, &entry.original)?;
        n += 1;
    }
    Ok(n)
}

/// Removes every conntrack entry in `ns` (what `conntrack -F` does).
pub fn flush(ns: &Netns) -> Result<()> {
    let replies = exchange(ns, &flush_request(), false)
        .with_context(|| format!("flushing conntrack in {}", ns.name()))?;
    acknowledged(&replies, &format!("flushing conntrack in {}", ns.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::socket::{decode, encode, hex};

    /// The requests are byte for byte those of the hand-written codec this replaced (its
    /// encodings captured before it went).
    #[test]
    fn requests_are_the_bytes_ctnetlink_was_always_sent() {
        let t4 = Tuple {
            protocol: 6,
            src: "10.244.1.5".parse().unwrap(),
            dst: "10.96.0.10".parse().unwrap(),
            sport: 40000,
            dport: 80,
        };
        let t6 = Tuple {
            protocol: 17,
            src: "fd00:10:244:1::5".parse().unwrap(),
            dst: "fd00:10:96::a".parse().unwrap(),
            sport: 5353,
            dport: 53,
        };
        assert_eq!(hex(&encode(&[delete_request(&t4)])), DELETE_V4);
        assert_eq!(hex(&encode(&[delete_request(&t6)])), DELETE_V6);
        assert_eq!(hex(&encode(&[dump_request()])), DUMP);
        assert_eq!(hex(&encode(&[flush_request()])), FLUSH);
    }

    #[test]
    fn an_entry_reads_back_in_either_family() {
        for (src, dst) in [
            ("10.244.1.5", "10.96.0.10"),
            ("fd00:10:244:1::5", "fd00:10:96::a"),
        ] {
            let t = Tuple {
                protocol: 17,
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                sport: 5353,
                dport: 53,
            };
            let reply = Tuple {
                src: t.dst,
                dst: t.src,
                sport: t.dport,
                dport: t.sport,
                ..t
            };
            let new = message(
                NetfilterProtoFamily::Unspec,
                0,
                ConntrackMessage::New(vec![
                    ConntrackAttribute::CtaTupleOrig(t.attributes()),
                    ConntrackAttribute::CtaTupleReply(reply.attributes()),
                    ConntrackAttribute::CtaMark(0),
                ]),
                0,
                1,
            );
            let decoded = decode(&encode(&[new]));
            assert_eq!(decoded.len(), 1);
            let back = entry(decoded[0].as_ref().unwrap());
            assert_eq!(back, Some(Entry { original: t, reply }));
        }
    }

    const DELETE_V4: &str = "48000000020105000100000000000000020000003400018014000180080001000af40105080002000a60000a1c0002800500010006000000060002009c4000000600030000500000";
    const DELETE_V6: &str = "600000000201050001000000000000000a0000004c0001802c00018014000300fd00001002440001000000000000000514000400fd00001000960000000000000000000a1c00028005000100110000000600020014e900000600030000350000";
    const DUMP: &str = "1400000001010103010000000000000000000000";
    const FLUSH: &str = "1400000002010500010000000000000000000000";
}
