//! The conntrack table of a namespace over ctnetlink: list the entries of both families, delete chosen
//! ones. Used to flush every flow but the ones a scenario keeps across steps, and to apply a
//! proxier's stale-entry cleanup (kube-proxy's `conntrack.CleanStaleEntries`, which also
//! lists the table and deletes by filter, pkg/proxy/conntrack/cleanup.go).

use crate::netns::Netns;
use crate::nfnetlink::{
    exchange, request, IPCTNL_MSG_CT_DELETE, NFNL_SUBSYS_CTNETLINK, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use anyhow::{bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// include/uapi/linux/netfilter/nfnetlink_conntrack.h
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `struct nfgenmsg` precedes the attributes.
const NFGENMSG_LEN: usize = 4;

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

/// Netlink attributes of `buf`: (type without flags, payload).
fn attributes(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            break;
        }
        out.push((kind, &buf[4..len]));
        let padded = (len + 3) & !3;
        buf = &buf[padded.min(buf.len())..];
    }
    out
}

fn find(attrs: &[(u16, &[u8])], kind: u16) -> Option<Vec<(u16, Vec<u8>)>> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, p)| {
        attributes(p)
            .into_iter()
            .map(|(k, v)| (k, v.to_vec()))
            .collect()
    })
}

fn value(attrs: &[(u16, Vec<u8>)], kind: u16) -> Option<&[u8]> {
    attrs
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, v)| v.as_slice())
}

fn parse_tuple(payload: &[u8]) -> Option<Tuple> {
    let attrs = attributes(payload);
    let ip = find(&attrs, CTA_TUPLE_IP)?;
    let proto = find(&attrs, CTA_TUPLE_PROTO)?;
    let addr = |v4: u16, v6: u16| -> Option<IpAddr> {
        if let Some(b) = value(&ip, v4) {
            return Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?)));
        }
        let b: [u8; 16] = value(&ip, v6)?.try_into().ok()?;
        Some(IpAddr::V6(Ipv6Addr::from(b)))
    };
    let port = |k| -> u16 {
        value(&proto, k)
            .and_then(|b| <[u8; 2]>::try_from(b).ok())
            .map_or(0, u16::from_be_bytes)
    };
    Some(Tuple {
        protocol: *value(&proto, CTA_PROTO_NUM)?.first()?,
        src: addr(CTA_IP_V4_SRC, CTA_IP_V6_SRC)?,
        dst: addr(CTA_IP_V4_DST, CTA_IP_V6_DST)?,
        sport: port(CTA_PROTO_SRC_PORT),
        dport: port(CTA_PROTO_DST_PORT),
    })
}

fn parse_entry(payload: &[u8]) -> Option<Entry> {
    let attrs = attributes(payload.get(NFGENMSG_LEN..)?);
    let tuple = |kind| {
        attrs
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, p)| parse_tuple(p))
    };
    Some(Entry {
        original: tuple(CTA_TUPLE_ORIG)?,
        reply: tuple(CTA_TUPLE_REPLY)?,
    })
}

fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut a = Vec::with_capacity((len + 3) & !3);
    a.extend_from_slice(&(len as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize((len + 3) & !3, 0);
    a
}

/// `CTA_TUPLE_ORIG` for `t`: the key the kernel looks an entry up by.
fn tuple_attribute(t: &Tuple) -> Vec<u8> {
    let address = |v4: u16, v6: u16, ip: IpAddr| match ip {
        IpAddr::V4(a) => attribute(v4, &a.octets()),
        IpAddr::V6(a) => attribute(v6, &a.octets()),
    };
    let ip = [
        address(CTA_IP_V4_SRC, CTA_IP_V6_SRC, t.src),
        address(CTA_IP_V4_DST, CTA_IP_V6_DST, t.dst),
    ]
    .concat();
    let proto = [
        attribute(CTA_PROTO_NUM, &[t.protocol]),
        attribute(CTA_PROTO_SRC_PORT, &t.sport.to_be_bytes()),
        attribute(CTA_PROTO_DST_PORT, &t.dport.to_be_bytes()),
    ]
    .concat();
    let body = [
        attribute(CTA_TUPLE_IP | NLA_F_NESTED, &ip),
        attribute(CTA_TUPLE_PROTO | NLA_F_NESTED, &proto),
    ]
    .concat();
    attribute(CTA_TUPLE_ORIG | NLA_F_NESTED, &body)
}

/// Every entry of `ns`'s conntrack table, IPv4 and IPv6, sorted.
pub fn entries(ns: &Netns) -> Result<Vec<Entry>> {
    // AF_UNSPEC: ctnetlink_dump_table filters by family only when one is given.
    let req = request(
        (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET,
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
        libc::AF_UNSPEC as u8,
        &[],
    );
    let replies = exchange(ns, req, true)
        .with_context(|| format!("listing conntrack entries in {}", ns.name()))?;
    if let Some(errno) = replies.iter().find_map(|m| m.errno.filter(|e| *e != 0)) {
        bail!(
            "listing conntrack entries in {}: {}",
            ns.name(),
            std::io::Error::from_raw_os_error(errno)
        );
    }
    let mut out: Vec<Entry> = replies
        .iter()
        .filter(|m| m.kind == (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW)
        .filter_map(|m| parse_entry(&m.payload))
        .collect();
    out.sort();
    Ok(out)
}

/// Deletes the entry whose original direction is `original`. One that is already gone
/// (ENOENT: it expired, or a reply to another deletion took it) is not an error.
pub fn delete(ns: &Netns, original: &Tuple) -> Result<()> {
    let req = request(
        (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
        NLM_F_REQUEST | NLM_F_ACK,
        1,
        match original.src {
            IpAddr::V4(_) => libc::AF_INET as u8,
            IpAddr::V6(_) => libc::AF_INET6 as u8,
        },
        &tuple_attribute(original),
    );
    let replies = exchange(ns, req, false)
        .with_context(|| format!("deleting a conntrack entry in {}", ns.name()))?;
    match replies.iter().find_map(|m| m.errno) {
        Some(0) | Some(libc::ENOENT) => Ok(()),
        Some(errno) => bail!(
            "deleting conntrack entry {original:?} in {}: {}",
            ns.name(),
            std::io::Error::from_raw_os_error(errno)
        ),
        None => bail!(
            "deleting a conntrack entry in {}: no acknowledgement from ctnetlink",
            ns.name()
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tuple_attribute_parses_back_in_either_family() {
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
            let a = tuple_attribute(&t);
            let attrs = attributes(&a);
            assert_eq!(attrs.len(), 1);
            assert_eq!(attrs[0].0, CTA_TUPLE_ORIG);
            assert_eq!(parse_tuple(attrs[0].1), Some(t));
        }
    }
}
