//! Small nfnetlink requests the suite makes itself instead of forking a tool: a conntrack flush
//! (what `conntrack -F` does) and "does this namespace hold any iptables-nft table / any
//! ipset?" (what an empty `iptables-save` / `ipset save` would say). Each tool run costs
//! ~0.2 s in the emulated VM; these cost a netlink round trip. Also the names of its nf_tables
//! tables (what `nft list tables` prints).

use crate::netns::Netns;
use anyhow::{bail, Context, Result};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const NFNL_SUBSYS_IPSET: u16 = 6;
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(crate) const IPCTNL_MSG_CT_DELETE: u16 = 2;
/// include/uapi/linux/netfilter/ipset/ip_set.h: IPSET_CMD_LIST, and IPSET_ATTR_PROTOCOL with
/// the oldest protocol the kernel accepts (IPSET_PROTOCOL_MIN; ip_set_core.c refuses a request
/// without it).
const IPSET_CMD_LIST: u16 = 7;
const IPSET_ATTR_PROTOCOL: u16 = 1;
const IPSET_PROTOCOL_MIN: u8 = 6;
/// include/uapi/linux/netfilter/nf_tables.h: NFT_MSG_GETTABLE; tables come back as NEWTABLE.
pub(crate) const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
/// The family iptables-nft's tables live in (`table ip nat`, …).
const NFPROTO_IPV4: u8 = 2;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLMSG_ERROR: u16 = 0x2;
const NLMSG_DONE: u16 = 0x3;
const NLMSG_HDRLEN: usize = 16;

/// A netlink message: header, `struct nfgenmsg` (family, NFNETLINK_V0, res_id 0), attributes.
pub(crate) fn request(kind: u16, flags: u16, seq: u32, family: u8, attributes: &[u8]) -> Vec<u8> {
    let len = (NLMSG_HDRLEN + 4 + attributes.len()) as u32;
    let mut msg = Vec::with_capacity(len as usize);
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&[family, 0, 0, 0]);
    msg.extend_from_slice(attributes);
    msg
}

/// A u8 netlink attribute, padded to 4 bytes.
fn u8_attribute(kind: u16, value: u8) -> [u8; 8] {
    let mut a = [0u8; 8];
    a[..2].copy_from_slice(&5u16.to_ne_bytes());
    a[2..4].copy_from_slice(&kind.to_ne_bytes());
    a[4] = value;
    a
}

/// IPCTNL_MSG_CT_DELETE with no tuple: the kernel flushes the whole table (of every family,
/// with AF_UNSPEC).
fn flush_request(seq: u32) -> Vec<u8> {
    request(
        (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        libc::AF_UNSPEC as u8,
        &[],
    )
}

/// One message of a reply buffer: its type, for NLMSG_ERROR the errno (0 = success), and
/// what follows the netlink header.
pub(crate) struct Message {
    pub(crate) kind: u16,
    pub(crate) errno: Option<i32>,
    pub(crate) payload: Vec<u8>,
}

fn messages(buf: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
        let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        let errno = (kind == NLMSG_ERROR)
            .then(|| buf.get(at + NLMSG_HDRLEN..at + NLMSG_HDRLEN + 4))
            .flatten()
            .map(|e| -i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
        if len < NLMSG_HDRLEN {
            out.push(Message {
                kind,
                errno,
                payload: Vec::new(),
            });
            break;
        }
        let end = (at + len).min(buf.len());
        out.push(Message {
            kind,
            errno,
            payload: buf[at + NLMSG_HDRLEN..end].to_vec(),
        });
        at += (len + 3) & !3;
    }
    out
}

/// Sends `request` from inside `ns` and reads replies until the dump ends (or an error or
/// acknowledgement comes), returning the messages.
pub(crate) fn exchange(ns: &Netns, request: Vec<u8>, dump: bool) -> Result<Vec<Message>> {
    let replies = ns.run(move || -> std::io::Result<Vec<Message>> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        socket.send(&request, 0)?;
        let mut all = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = socket.recv(&mut &mut buf[..], 0)?;
            let batch = messages(&buf[..n]);
            let end = batch.is_empty()
                || batch
                    .iter()
                    .any(|m| m.kind == NLMSG_DONE || m.kind == NLMSG_ERROR)
                || !dump;
            all.extend(batch);
            if end {
                return Ok(all);
            }
        }
    })?;
    Ok(replies?)
}

/// Removes every conntrack entry in `ns`.
pub fn flush_conntrack(ns: &Netns) -> Result<()> {
    let replies = exchange(ns, flush_request(1), false)
        .with_context(|| format!("flushing conntrack in {}", ns.name()))?;
    match replies.iter().find_map(|m| m.errno) {
        // ENOENT: the table was already empty on some kernels.
        Some(0) | Some(libc::ENOENT) => Ok(()),
        Some(errno) => bail!(
            "flushing conntrack in {}: {}",
            ns.name(),
            std::io::Error::from_raw_os_error(errno)
        ),
        None => bail!(
            "flushing conntrack in {}: no acknowledgement from ctnetlink",
            ns.name()
        ),
    }
}

/// How many messages of type `kind` a dump of `request` in `ns` returns; an error if the
/// kernel refused it (e.g. the subsystem's module is not loaded).
fn dump_count(ns: &Netns, request: Vec<u8>, kind: u16) -> Result<usize> {
    let replies = exchange(ns, request, true)?;
    if let Some(errno) = replies.iter().find_map(|m| m.errno.filter(|e| *e != 0)) {
        bail!("{}", std::io::Error::from_raw_os_error(errno));
    }
    Ok(replies.iter().filter(|m| m.kind == kind).count())
}

/// Whether `ns` holds no nf_tables table of family `ip`, so that `iptables-save` (nft) would
/// print nothing. `None` when the kernel could not say (then ask the tool).
pub fn holds_no_ip_tables(ns: &Netns) -> Option<bool> {
    let request = request(
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
        NFPROTO_IPV4,
        &[],
    );
    dump_count(ns, request, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE)
        .ok()
        .map(|n| n == 0)
}

/// Every nf_tables table of `ns`, of any family: (NFPROTO_* family, name), as `nft list
/// tables` would name them.
pub fn nft_tables(ns: &Netns) -> Result<Vec<(u8, String)>> {
    const NFPROTO_UNSPEC: u8 = 0;
    const NFTA_TABLE_NAME: u16 = 1;
    let request = request(
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
        NFPROTO_UNSPEC,
        &[],
    );
    let replies = exchange(ns, request, true)?;
    if let Some(errno) = replies.iter().find_map(|m| m.errno.filter(|e| *e != 0)) {
        bail!("{}", std::io::Error::from_raw_os_error(errno));
    }
    let mut out = Vec::new();
    for m in replies
        .iter()
        .filter(|m| m.kind == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE)
    {
        let Some(&family) = m.payload.first() else {
            continue;
        };
        // Attributes after the 4-byte nfgenmsg: (len u16, type u16, value, padded to 4).
        let mut at = 4;
        while at + 4 <= m.payload.len() {
            let len = u16::from_ne_bytes([m.payload[at], m.payload[at + 1]]) as usize;
            let kind = u16::from_ne_bytes([m.payload[at + 2], m.payload[at + 3]]) & 0x3fff;
            if len < 4 || at + len > m.payload.len() {
                break;
            }
            if kind == NFTA_TABLE_NAME {
                let value = &m.payload[at + 4..at + len];
                let name = value.split(|b| *b == 0).next().unwrap_or_default();
                out.push((family, String::from_utf8_lossy(name).into_owned()));
            }
            at += (len + 3) & !3;
        }
    }
    Ok(out)
}

/// Whether `ns` holds no ipset, so that `ipset save` would print nothing. `None` when the
/// kernel could not say (then ask the tool).
pub fn holds_no_ipsets(ns: &Netns) -> Option<bool> {
    let request = request(
        (NFNL_SUBSYS_IPSET << 8) | IPSET_CMD_LIST,
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
        libc::AF_INET as u8,
        &u8_attribute(IPSET_ATTR_PROTOCOL, IPSET_PROTOCOL_MIN),
    );
    dump_count(ns, request, (NFNL_SUBSYS_IPSET << 8) | IPSET_CMD_LIST)
        .ok()
        .map(|n| n == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_request_layout() {
        let m = flush_request(7);
        assert_eq!(m.len(), 20);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]), 20);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x0102);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x5);
        assert_eq!(&m[16..], &[0, 0, 0, 0]);
    }

    #[test]
    fn replies_are_split_into_messages_with_their_errno() {
        let mut buf = vec![0u8; 36 + 16];
        buf[0..4].copy_from_slice(&36u32.to_ne_bytes());
        buf[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        buf[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        buf[36..40].copy_from_slice(&16u32.to_ne_bytes());
        buf[40..42].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        let m = messages(&buf);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].kind, m[0].errno), (NLMSG_ERROR, Some(1)));
        assert_eq!((m[1].kind, m[1].errno), (NLMSG_DONE, None));
    }

    #[test]
    fn the_ipset_protocol_attribute_is_a_padded_u8() {
        let a = u8_attribute(IPSET_ATTR_PROTOCOL, 6);
        assert_eq!(a[..2], 5u16.to_ne_bytes());
        assert_eq!(a[2..4], IPSET_ATTR_PROTOCOL.to_ne_bytes());
        assert_eq!(a[4..], [6, 0, 0, 0]);
    }
}
