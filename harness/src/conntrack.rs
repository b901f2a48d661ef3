//! Flushing a namespace's conntrack table over ctnetlink (what `conntrack -F` does), without
//! forking a process per node per probe.

use crate::netns::Netns;
use anyhow::{bail, Context, Result};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLMSG_ERROR: u16 = 0x2;
const NLMSG_HDRLEN: usize = 16;

/// IPCTNL_MSG_CT_DELETE with no tuple: the kernel flushes the whole table (of every family,
/// with AF_UNSPEC).
fn flush_request(seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDRLEN + 4) as u32;
    let mut msg = Vec::with_capacity(len as usize);
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE).to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // struct nfgenmsg: family AF_UNSPEC, version NFNETLINK_V0, res_id 0 (big endian).
    msg.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    msg
}

/// The errno carried by an NLMSG_ERROR acknowledgement (0 = success).
fn ack_errno(reply: &[u8]) -> Option<i32> {
    let kind = u16::from_ne_bytes([*reply.get(4)?, *reply.get(5)?]);
    if kind != NLMSG_ERROR {
        return None;
    }
    let e = reply.get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)?;
    Some(-i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
}

/// Removes every conntrack entry in `ns`.
pub fn flush(ns: &Netns) -> Result<()> {
    let outcome = ns.run(|| -> std::io::Result<Option<i32>> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        socket.send(&flush_request(1), 0)?;
        let mut buf = vec![0u8; 4096];
        let n = socket.recv(&mut &mut buf[..], 0)?;
        Ok(ack_errno(&buf[..n]))
    })?;
    match outcome.with_context(|| format!("flushing conntrack in {}", ns.name()))? {
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
    fn ack_errno_reads_nlmsgerr() {
        let mut ack = vec![0u8; 36];
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(ack_errno(&ack), Some(1));
        ack[4..6].copy_from_slice(&3u16.to_ne_bytes());
        assert_eq!(ack_errno(&ack), None);
    }
}
