//! One conversation with netfilter over nfnetlink, in a namespace: a request (or an nf_tables
//! transaction) out, its replies back, typed by `netlink-packet-netfilter`.

use super::guard;
use crate::netns::Netns;
use anyhow::{anyhow, bail, Result};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_netfilter::{
    nftables::NfTablesMessage, none::ControlMessage, NetfilterHeader, NetfilterMessage,
    NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

pub(crate) type Message = NetlinkMessage<NetfilterMessage>;

/// `include/uapi/linux/netfilter/nfnetlink.h`: the subsystem a batch's `res_id` names.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `struct nlmsghdr`'s size.
const NLMSG_HDRLEN: usize = 16;
/// Room for one read of replies; the kernel fills a dump's reads to about a page's worth.
const READ_BUFFER: usize = 32 * 1024;

/// A netlink message carrying `inner` with its `struct nfgenmsg` (`family`, NFNETLINK_V0,
/// `res_id`).
pub(crate) fn message(
    family: NetfilterProtoFamily,
    res_id: u16,
    inner: impl Into<NetfilterMessageInner>,
    flags: u16,
    sequence: u32,
) -> Message {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = sequence;
    let mut message = NetlinkMessage::new(
        header,
        NetlinkPayload::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, res_id),
            inner,
        )),
    );
    message.finalize();
    message
}

/// The bytes of `messages`, one after the other.
pub(crate) fn encode(messages: &[Message]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        let at = out.len();
        out.resize(at + m.buffer_len(), 0);
        m.serialize(&mut out[at..]);
    }
    out
}

/// The netlink messages of a read, whole: each `(type, bytes)`, or, for one whose length cannot
/// be trusted (which ends the read), the length it claims.
fn frames(mut buf: &[u8]) -> impl Iterator<Item = std::result::Result<(u16, &[u8]), usize>> {
    std::iter::from_fn(move || {
        if buf.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            buf = &[];
            return Some(Err(len));
        }
        let frame = (u16::from_ne_bytes([buf[4], buf[5]]), &buf[..len]);
        buf = &buf[((len + 3) & !3).min(buf.len())..];
        Some(Ok(frame))
    })
}

/// Bytes as lowercase hex: how the tests write the encodings they hold requests to.
#[cfg(test)]
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Each netlink message of a buffer the kernel sent that kpct reads, decoded; a message that
/// does not decode is an error naming what failed (and one whose length cannot be trusted ends
/// the buffer). Messages of kinds kpct never reads are passed over.
pub(crate) fn decode(buf: &[u8]) -> Vec<Result<Message>> {
    frames(buf)
        .filter(|frame| frame.map_or(true, |(kind, _)| guard::read(kind)))
        .map(|frame| {
            let (kind, bytes) = frame.map_err(|len| {
                anyhow!(
                    "a netlink message of {len} bytes in a read of {}",
                    buf.len()
                )
            })?;
            if let Some(why) = guard::refusal(kind, &bytes[NLMSG_HDRLEN..]) {
                return Err(anyhow!("decoding a netfilter message: {why}"));
            }
            Message::deserialize(bytes).map_err(|e| anyhow!("decoding a netfilter message: {e}"))
        })
        .collect()
}

/// The family and the netfilter message `message` carries, if it carries one (not an
/// acknowledgement, an error or the end of a dump).
pub(crate) fn carried(message: &Message) -> Option<(u8, &NetfilterMessageInner)> {
    match &message.payload {
        NetlinkPayload::InnerMessage(m) => Some((u8::from(m.header.family), &m.inner)),
        _ => None,
    }
}

/// The errno of an NLMSG_ERROR reply: `Some(0)` for an acknowledgement.
pub(crate) fn errno(message: &Message) -> Option<i32> {
    match &message.payload {
        // saturating: a reply claiming i32::MIN (fuzzing found it) is no errno to negate.
        NetlinkPayload::Error(e) => Some(e.raw_code().saturating_neg()),
        _ => None,
    }
}

/// Sends `request` from inside `ns` and reads replies until the dump ends (or an error or an
/// acknowledgement comes), returning them.
pub(crate) fn exchange(ns: &Netns, request: &Message, dump: bool) -> Result<Vec<Message>> {
    let bytes = encode(std::slice::from_ref(request));
    let replies = ns.run(move || -> std::io::Result<Vec<Vec<u8>>> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        socket.send(&bytes, 0)?;
        let mut reads = Vec::new();
        let mut buf = vec![0u8; READ_BUFFER];
        loop {
            let n = socket.recv(&mut &mut buf[..], 0)?;
            let read = buf[..n].to_vec();
            let end = !dump || n == 0 || ends_dump(&read);
            reads.push(read);
            if end {
                return Ok(reads);
            }
        }
    })??;
    replies.iter().flat_map(|read| decode(read)).collect()
}

/// Whether a read holds the end of a dump (NLMSG_DONE) or an error ending it, judged from the
/// message types alone, so that a message that does not decode cannot keep the read going.
fn ends_dump(buf: &[u8]) -> bool {
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    frames(buf).any(|frame| match frame {
        Ok((kind, _)) => kind == NLMSG_DONE || kind == NLMSG_ERROR,
        // A length below a header's ends it; one past the read's end leaves it to the next.
        Err(len) => len < NLMSG_HDRLEN,
    })
}

/// The replies to the dump `request` in `ns`; an error if the kernel refused it (e.g. the
/// subsystem's module is not loaded).
pub(crate) fn dump(ns: &Netns, request: &Message) -> Result<Vec<Message>> {
    let replies = exchange(ns, request, true)?;
    if let Some(e) = replies.iter().filter_map(errno).find(|e| *e != 0) {
        bail!("{}", std::io::Error::from_raw_os_error(e));
    }
    Ok(replies)
}

/// One nf_tables transaction: `messages` (each with its flags) between BATCH_BEGIN and
/// BATCH_END, each acknowledged, in `family`. Returns the batch and the sequence numbers the
/// kernel acknowledges.
pub(crate) fn transaction(
    family: NetfilterProtoFamily,
    messages: Vec<(NfTablesMessage, u16)>,
) -> (Vec<u8>, Vec<u32>) {
    let control = |inner: ControlMessage, sequence| {
        message(
            NetfilterProtoFamily::Unspec,
            NFNL_SUBSYS_NFTABLES,
            inner,
            NLM_F_REQUEST,
            sequence,
        )
    };
    let mut batch = vec![control(ControlMessage::BatchBegin, 0)];
    let mut acked = Vec::new();
    for (sequence, (inner, flags)) in (1..).zip(messages) {
        batch.push(message(
            family,
            0,
            inner,
            flags | NLM_F_REQUEST | NLM_F_ACK,
            sequence,
        ));
        acked.push(sequence);
    }
    let end = u32::try_from(acked.len() + 1).unwrap_or(u32::MAX);
    batch.push(control(ControlMessage::BatchEnd, end));
    (encode(&batch), acked)
}
