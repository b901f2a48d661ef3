//! Synchronous generic netlink transport: one request at a time, replies collected until the
//! kernel's ACK (plain requests) or NLMSG_DONE (dumps).

use std::fmt::Debug;
use std::io;

use netlink_packet_core::{
    Emitable, NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlMessage};
use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

use crate::error::{Error, Operation, Result};

/// Big enough for any single datagram the kernel sends for a dump (it caps dump skbs at 32 KiB).
const RECV_BUF_LEN: usize = 64 * 1024;

/// How a request wants its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Replies (if any) then an ACK.
    Ack,
    /// Multipart replies terminated by NLMSG_DONE.
    Dump,
}

/// Why a request failed below the IPVS layer; the caller maps errnos with its own context.
#[derive(Debug)]
pub(crate) enum Failure {
    Errno(i32),
    Io(io::Error),
    Decode(String),
}

impl Failure {
    pub(crate) fn into_error(self, op: Operation, scheduler: Option<&str>) -> Error {
        match self {
            Failure::Errno(errno) => Error::from_errno(op, errno, scheduler),
            Failure::Io(source) => Error::Io { op, source },
            Failure::Decode(reason) => Error::Decode { op, reason },
        }
    }
}

pub(crate) struct GenlSocket {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl GenlSocket {
    /// Opens a socket in the calling thread's network namespace; it stays tied to that namespace.
    pub(crate) fn open() -> Result<Self> {
        let io_err = |source| Error::Io {
            op: Operation::OpenSocket,
            source,
        };
        let mut socket = Socket::new(NETLINK_GENERIC).map_err(io_err)?;
        socket.bind_auto().map_err(io_err)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(io_err)?;
        Ok(GenlSocket {
            socket,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF_LEN),
        })
    }

    /// Looks up a generic netlink family id by name via the controller.
    pub(crate) fn resolve_family(&mut self, name: &str) -> std::result::Result<u16, Failure> {
        let mut genl = GenlMessage::from_payload(GenlCtrl {
            cmd: GenlCtrlCmd::GetFamily,
            nlas: vec![GenlCtrlAttrs::FamilyName(name.to_owned())],
        });
        genl.finalize();
        let replies = self.request(genl, Mode::Ack)?;
        replies
            .iter()
            .flat_map(|ctrl| ctrl.nlas.iter())
            .find_map(|nla| match nla {
                GenlCtrlAttrs::FamilyId(id) => Some(*id),
                _ => None,
            })
            .ok_or_else(|| Failure::Decode("controller reply has no family id".into()))
    }

    /// Sends one request and collects the payloads of its replies.
    pub(crate) fn request<F>(
        &mut self,
        genl: GenlMessage<F>,
        mode: Mode,
    ) -> std::result::Result<Vec<F>, Failure>
    where
        F: GenlFamily + Emitable + Debug,
        GenlMessage<F>: NetlinkDeserializable + NetlinkSerializable,
    {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST
            | match mode {
                Mode::Ack => NLM_F_ACK,
                Mode::Dump => NLM_F_DUMP,
            };
        header.sequence_number = seq;
        let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(genl));
        msg.finalize();
        let mut out = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut out);
        self.send(&out)?;
        self.collect(seq)
    }

    fn send(&self, bytes: &[u8]) -> std::result::Result<(), Failure> {
        loop {
            match self.socket.send(bytes, 0) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Failure::Io(e)),
            }
        }
    }

    fn recv(&mut self) -> std::result::Result<usize, Failure> {
        loop {
            self.buf.clear();
            // MSG_TRUNC makes recv return the datagram's real size, so truncation is visible.
            match self.socket.recv(&mut self.buf, libc::MSG_TRUNC) {
                Ok(n) if n > RECV_BUF_LEN => {
                    return Err(Failure::Decode(format!(
                        "netlink datagram of {n} bytes exceeds the {RECV_BUF_LEN}-byte buffer"
                    )))
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Failure::Io(e)),
            }
        }
    }

    fn collect<F>(&mut self, seq: u32) -> std::result::Result<Vec<F>, Failure>
    where
        F: Debug,
        GenlMessage<F>: NetlinkDeserializable,
    {
        let mut replies = Vec::new();
        loop {
            let n = self.recv()?;
            let mut off = 0;
            while off < n {
                let data = &self.buf[off..n];
                let len = NetlinkBuffer::new_checked(data)
                    .map_err(|e| Failure::Decode(e.to_string()))?
                    .length() as usize;
                let msg = NetlinkMessage::<GenlMessage<F>>::deserialize(&data[..len])
                    .map_err(|e| Failure::Decode(e.to_string()))?;
                off += (len + 3) & !3;
                // Leftovers of an earlier, abandoned request are not ours to interpret.
                if msg.header.sequence_number != seq {
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::InnerMessage(genl) => replies.push(genl.payload),
                    NetlinkPayload::Error(err) => {
                        return match err.code {
                            None => Ok(replies),
                            Some(code) => Err(Failure::Errno(-code.get())),
                        }
                    }
                    NetlinkPayload::Done(done) => {
                        return if done.code < 0 {
                            Err(Failure::Errno(-done.code))
                        } else {
                            Ok(replies)
                        }
                    }
                    NetlinkPayload::Overrun(_) => {
                        return Err(Failure::Decode("netlink overrun".into()))
                    }
                    _ => {}
                }
            }
        }
    }
}
