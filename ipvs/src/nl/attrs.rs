//! Netlink attributes of the IPVS family, one enum per nesting level.
//!
//! These mirror the wire format exactly (raw numbers, raw address bytes); the mapping to the
//! typed model in [`crate::types`] lives in `nl::convert`, so that decoding never has to guess
//! what a caller meant and the golden-byte tests can pin the layout.

use netlink_packet_core::{
    emit_u16, emit_u32, emit_u64, parse_string, parse_u16, parse_u16_be, parse_u32, parse_u64,
    parse_u8, DecodeError, DefaultNla, Emitable, ErrorContext, Nla, NlaBuffer, NlasIterator,
    Parseable, NLA_F_NESTED,
};

use super::constants::*;
use crate::types::Stats;

/// Size of `union nf_inet_addr`: the kernel always reports addresses in this form, IPv4 in the
/// first four bytes.
pub const INET_ADDR_LEN: usize = 16;

/// Raw `union nf_inet_addr` bytes.
pub type InetAddrBytes = [u8; INET_ADDR_LEN];

fn parse_inet_addr(payload: &[u8]) -> Result<InetAddrBytes, DecodeError> {
    // Clients may send 4 bytes for IPv4 (the kernel zero-fills); accept any length up to 16 the
    // same way nla_memcpy does.
    if payload.len() > INET_ADDR_LEN {
        return Err(DecodeError::from(format!(
            "address attribute is {} bytes, at most {INET_ADDR_LEN} expected",
            payload.len()
        )));
    }
    let mut out = [0u8; INET_ADDR_LEN];
    out[..payload.len()].copy_from_slice(payload);
    Ok(out)
}

/// Kernel strings are NUL-terminated; `parse_string` strips one trailing NUL.
fn parse_nul_string(payload: &[u8]) -> Result<String, DecodeError> {
    let end = payload
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(payload.len());
    parse_string(&payload[..end])
}

fn emit_nul_string(buf: &mut [u8], s: &str) {
    buf[..s.len()].copy_from_slice(s.as_bytes());
    buf[s.len()] = 0;
}

fn parse_nested<T, F>(payload: &[u8], what: &str, parse: F) -> Result<Vec<T>, DecodeError>
where
    F: Fn(&NlaBuffer<&[u8]>) -> Result<T, DecodeError>,
{
    NlasIterator::new(payload)
        .map(|nla| nla.and_then(|nla| parse(&nla)))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("failed to parse {what} attributes"))
}

/// `struct ip_vs_flags`: `flags` are applied under `mask`, so a partial update is possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagsMask {
    pub flags: u32,
    pub mask: u32,
}

/// Which statistics set a [`StatsAttr`] list belongs to: the legacy one mixes u32 and u64
/// counters, the `*_STATS64` one is all u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsWidth {
    Legacy,
    Wide,
}

/// A statistics nest (`IPVS_SVC_ATTR_STATS[64]`, `IPVS_DEST_ATTR_STATS[64]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsNest {
    pub width: StatsWidth,
    pub stats: Stats,
}

impl StatsNest {
    fn counters(&self) -> [(u16, u64); 10] {
        let s = &self.stats;
        [
            (IPVS_STATS_ATTR_CONNS, s.conns),
            (IPVS_STATS_ATTR_INPKTS, s.inpkts),
            (IPVS_STATS_ATTR_OUTPKTS, s.outpkts),
            (IPVS_STATS_ATTR_INBYTES, s.inbytes),
            (IPVS_STATS_ATTR_OUTBYTES, s.outbytes),
            (IPVS_STATS_ATTR_CPS, s.cps),
            (IPVS_STATS_ATTR_INPPS, s.inpps),
            (IPVS_STATS_ATTR_OUTPPS, s.outpps),
            (IPVS_STATS_ATTR_INBPS, s.inbps),
            (IPVS_STATS_ATTR_OUTBPS, s.outbps),
        ]
    }

    fn counter_len(&self, kind: u16) -> usize {
        match (self.width, kind) {
            (StatsWidth::Wide, _) => 8,
            (StatsWidth::Legacy, IPVS_STATS_ATTR_INBYTES | IPVS_STATS_ATTR_OUTBYTES) => 8,
            (StatsWidth::Legacy, _) => 4,
        }
    }

    fn value_len(&self) -> usize {
        self.counters()
            .iter()
            .map(|(kind, _)| 4 + self.counter_len(*kind))
            .sum()
    }

    fn emit_value(&self, buf: &mut [u8]) {
        let mut off = 0;
        for (kind, value) in self.counters() {
            let len = self.counter_len(kind);
            let mut nla = NlaBuffer::new(&mut buf[off..off + 4 + len]);
            nla.set_kind(kind);
            nla.set_length((4 + len) as u16);
            let v = nla.value_mut();
            if len == 8 {
                // Checked above: the slice is exactly 8 bytes.
                let _ = emit_u64(v, value);
            } else {
                let _ = emit_u32(v, value as u32);
            }
            off += 4 + len;
        }
    }

    fn parse(payload: &[u8], width: StatsWidth) -> Result<Self, DecodeError> {
        let mut stats = Stats::default();
        for nla in NlasIterator::new(payload) {
            let nla = nla.context("failed to parse statistics attribute")?;
            let v = nla.value();
            // Width is decided by the payload size: the kernel pads 64-bit values with
            // IPVS_STATS_ATTR_PAD, which we skip below.
            let n = match v.len() {
                4 => u64::from(parse_u32(v)?),
                8 => parse_u64(v)?,
                _ => continue,
            };
            let slot = match nla.kind() {
                IPVS_STATS_ATTR_CONNS => &mut stats.conns,
                IPVS_STATS_ATTR_INPKTS => &mut stats.inpkts,
                IPVS_STATS_ATTR_OUTPKTS => &mut stats.outpkts,
                IPVS_STATS_ATTR_INBYTES => &mut stats.inbytes,
                IPVS_STATS_ATTR_OUTBYTES => &mut stats.outbytes,
                IPVS_STATS_ATTR_CPS => &mut stats.cps,
                IPVS_STATS_ATTR_INPPS => &mut stats.inpps,
                IPVS_STATS_ATTR_OUTPPS => &mut stats.outpps,
                IPVS_STATS_ATTR_INBPS => &mut stats.inbps,
                IPVS_STATS_ATTR_OUTBPS => &mut stats.outbps,
                _ => continue,
            };
            *slot = n;
        }
        Ok(StatsNest { width, stats })
    }
}

/// `IPVS_SVC_ATTR_*`, nested in `IPVS_CMD_ATTR_SERVICE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SvcAttr {
    Af(u16),
    Protocol(u16),
    Addr(InetAddrBytes),
    /// Host-order value; network order on the wire.
    Port(u16),
    Fwmark(u32),
    SchedName(String),
    Flags(FlagsMask),
    /// Seconds.
    Timeout(u32),
    /// The four raw bytes read as a native u32, exactly as libipvs does: for IPv4 these bytes are
    /// the dotted mask in network order, for IPv6 they hold the prefix length.
    Netmask(u32),
    Stats(StatsNest),
    PeName(String),
    Stats64(StatsNest),
    Other(DefaultNla),
}

impl Nla for SvcAttr {
    fn value_len(&self) -> usize {
        match self {
            SvcAttr::Af(_) | SvcAttr::Protocol(_) | SvcAttr::Port(_) => 2,
            SvcAttr::Fwmark(_) | SvcAttr::Timeout(_) | SvcAttr::Netmask(_) => 4,
            SvcAttr::Addr(_) => INET_ADDR_LEN,
            SvcAttr::SchedName(s) | SvcAttr::PeName(s) => s.len() + 1,
            SvcAttr::Flags(_) => 8,
            SvcAttr::Stats(n) | SvcAttr::Stats64(n) => n.value_len(),
            SvcAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            SvcAttr::Af(_) => IPVS_SVC_ATTR_AF,
            SvcAttr::Protocol(_) => IPVS_SVC_ATTR_PROTOCOL,
            SvcAttr::Addr(_) => IPVS_SVC_ATTR_ADDR,
            SvcAttr::Port(_) => IPVS_SVC_ATTR_PORT,
            SvcAttr::Fwmark(_) => IPVS_SVC_ATTR_FWMARK,
            SvcAttr::SchedName(_) => IPVS_SVC_ATTR_SCHED_NAME,
            SvcAttr::Flags(_) => IPVS_SVC_ATTR_FLAGS,
            SvcAttr::Timeout(_) => IPVS_SVC_ATTR_TIMEOUT,
            SvcAttr::Netmask(_) => IPVS_SVC_ATTR_NETMASK,
            SvcAttr::Stats(_) => IPVS_SVC_ATTR_STATS | NLA_F_NESTED,
            SvcAttr::PeName(_) => IPVS_SVC_ATTR_PE_NAME,
            SvcAttr::Stats64(_) => IPVS_SVC_ATTR_STATS64 | NLA_F_NESTED,
            SvcAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        // The `emit_*` helpers only fail on short buffers, and `value_len` sized the buffer.
        let _ = match self {
            SvcAttr::Af(v) | SvcAttr::Protocol(v) => emit_u16(buf, *v),
            SvcAttr::Port(v) => {
                buf[..2].copy_from_slice(&v.to_be_bytes());
                Ok(())
            }
            SvcAttr::Fwmark(v) | SvcAttr::Timeout(v) | SvcAttr::Netmask(v) => emit_u32(buf, *v),
            SvcAttr::Addr(a) => {
                buf[..INET_ADDR_LEN].copy_from_slice(a);
                Ok(())
            }
            SvcAttr::SchedName(s) | SvcAttr::PeName(s) => {
                emit_nul_string(buf, s);
                Ok(())
            }
            SvcAttr::Flags(f) => {
                emit_u32(&mut buf[..4], f.flags).and(emit_u32(&mut buf[4..8], f.mask))
            }
            SvcAttr::Stats(n) | SvcAttr::Stats64(n) => {
                n.emit_value(buf);
                Ok(())
            }
            SvcAttr::Other(nla) => {
                nla.emit_value(buf);
                Ok(())
            }
        };
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for SvcAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            IPVS_SVC_ATTR_AF => SvcAttr::Af(parse_u16(v).context("IPVS_SVC_ATTR_AF")?),
            IPVS_SVC_ATTR_PROTOCOL => {
                SvcAttr::Protocol(parse_u16(v).context("IPVS_SVC_ATTR_PROTOCOL")?)
            }
            IPVS_SVC_ATTR_ADDR => SvcAttr::Addr(parse_inet_addr(v).context("IPVS_SVC_ATTR_ADDR")?),
            IPVS_SVC_ATTR_PORT => SvcAttr::Port(parse_u16_be(v).context("IPVS_SVC_ATTR_PORT")?),
            IPVS_SVC_ATTR_FWMARK => SvcAttr::Fwmark(parse_u32(v).context("IPVS_SVC_ATTR_FWMARK")?),
            IPVS_SVC_ATTR_SCHED_NAME => {
                SvcAttr::SchedName(parse_nul_string(v).context("IPVS_SVC_ATTR_SCHED_NAME")?)
            }
            IPVS_SVC_ATTR_FLAGS => {
                if v.len() < 8 {
                    return Err(DecodeError::from(
                        "IPVS_SVC_ATTR_FLAGS shorter than 8 bytes",
                    ));
                }
                SvcAttr::Flags(FlagsMask {
                    flags: parse_u32(&v[..4])?,
                    mask: parse_u32(&v[4..8])?,
                })
            }
            IPVS_SVC_ATTR_TIMEOUT => {
                SvcAttr::Timeout(parse_u32(v).context("IPVS_SVC_ATTR_TIMEOUT")?)
            }
            IPVS_SVC_ATTR_NETMASK => {
                SvcAttr::Netmask(parse_u32(v).context("IPVS_SVC_ATTR_NETMASK")?)
            }
            IPVS_SVC_ATTR_STATS => SvcAttr::Stats(StatsNest::parse(v, StatsWidth::Legacy)?),
            IPVS_SVC_ATTR_PE_NAME => {
                SvcAttr::PeName(parse_nul_string(v).context("IPVS_SVC_ATTR_PE_NAME")?)
            }
            IPVS_SVC_ATTR_STATS64 => SvcAttr::Stats64(StatsNest::parse(v, StatsWidth::Wide)?),
            _ => SvcAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// `IPVS_DEST_ATTR_*`, nested in `IPVS_CMD_ATTR_DEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestAttr {
    Addr(InetAddrBytes),
    /// Host-order value; network order on the wire.
    Port(u16),
    FwdMethod(u32),
    Weight(i32),
    UThresh(u32),
    LThresh(u32),
    ActiveConns(u32),
    InactConns(u32),
    PersistConns(u32),
    Stats(StatsNest),
    AddrFamily(u16),
    Stats64(StatsNest),
    TunType(u8),
    /// Host-order value; network order on the wire.
    TunPort(u16),
    TunFlags(u16),
    Other(DefaultNla),
}

impl Nla for DestAttr {
    fn value_len(&self) -> usize {
        match self {
            DestAttr::Addr(_) => INET_ADDR_LEN,
            DestAttr::Port(_)
            | DestAttr::AddrFamily(_)
            | DestAttr::TunPort(_)
            | DestAttr::TunFlags(_) => 2,
            DestAttr::TunType(_) => 1,
            DestAttr::FwdMethod(_)
            | DestAttr::Weight(_)
            | DestAttr::UThresh(_)
            | DestAttr::LThresh(_)
            | DestAttr::ActiveConns(_)
            | DestAttr::InactConns(_)
            | DestAttr::PersistConns(_) => 4,
            DestAttr::Stats(n) | DestAttr::Stats64(n) => n.value_len(),
            DestAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            DestAttr::Addr(_) => IPVS_DEST_ATTR_ADDR,
            DestAttr::Port(_) => IPVS_DEST_ATTR_PORT,
            DestAttr::FwdMethod(_) => IPVS_DEST_ATTR_FWD_METHOD,
            DestAttr::Weight(_) => IPVS_DEST_ATTR_WEIGHT,
            DestAttr::UThresh(_) => IPVS_DEST_ATTR_U_THRESH,
            DestAttr::LThresh(_) => IPVS_DEST_ATTR_L_THRESH,
            DestAttr::ActiveConns(_) => IPVS_DEST_ATTR_ACTIVE_CONNS,
            DestAttr::InactConns(_) => IPVS_DEST_ATTR_INACT_CONNS,
            DestAttr::PersistConns(_) => IPVS_DEST_ATTR_PERSIST_CONNS,
            DestAttr::Stats(_) => IPVS_DEST_ATTR_STATS | NLA_F_NESTED,
            DestAttr::AddrFamily(_) => IPVS_DEST_ATTR_ADDR_FAMILY,
            DestAttr::Stats64(_) => IPVS_DEST_ATTR_STATS64 | NLA_F_NESTED,
            DestAttr::TunType(_) => IPVS_DEST_ATTR_TUN_TYPE,
            DestAttr::TunPort(_) => IPVS_DEST_ATTR_TUN_PORT,
            DestAttr::TunFlags(_) => IPVS_DEST_ATTR_TUN_FLAGS,
            DestAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        let _ = match self {
            DestAttr::Addr(a) => {
                buf[..INET_ADDR_LEN].copy_from_slice(a);
                Ok(())
            }
            DestAttr::Port(v) | DestAttr::TunPort(v) => {
                buf[..2].copy_from_slice(&v.to_be_bytes());
                Ok(())
            }
            DestAttr::AddrFamily(v) | DestAttr::TunFlags(v) => emit_u16(buf, *v),
            DestAttr::TunType(v) => {
                buf[0] = *v;
                Ok(())
            }
            DestAttr::Weight(v) => emit_u32(buf, *v as u32),
            DestAttr::FwdMethod(v)
            | DestAttr::UThresh(v)
            | DestAttr::LThresh(v)
            | DestAttr::ActiveConns(v)
            | DestAttr::InactConns(v)
            | DestAttr::PersistConns(v) => emit_u32(buf, *v),
            DestAttr::Stats(n) | DestAttr::Stats64(n) => {
                n.emit_value(buf);
                Ok(())
            }
            DestAttr::Other(nla) => {
                nla.emit_value(buf);
                Ok(())
            }
        };
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for DestAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            IPVS_DEST_ATTR_ADDR => {
                DestAttr::Addr(parse_inet_addr(v).context("IPVS_DEST_ATTR_ADDR")?)
            }
            IPVS_DEST_ATTR_PORT => DestAttr::Port(parse_u16_be(v).context("IPVS_DEST_ATTR_PORT")?),
            IPVS_DEST_ATTR_FWD_METHOD => {
                DestAttr::FwdMethod(parse_u32(v).context("IPVS_DEST_ATTR_FWD_METHOD")?)
            }
            IPVS_DEST_ATTR_WEIGHT => {
                DestAttr::Weight(parse_u32(v).context("IPVS_DEST_ATTR_WEIGHT")? as i32)
            }
            IPVS_DEST_ATTR_U_THRESH => {
                DestAttr::UThresh(parse_u32(v).context("IPVS_DEST_ATTR_U_THRESH")?)
            }
            IPVS_DEST_ATTR_L_THRESH => {
                DestAttr::LThresh(parse_u32(v).context("IPVS_DEST_ATTR_L_THRESH")?)
            }
            IPVS_DEST_ATTR_ACTIVE_CONNS => {
                DestAttr::ActiveConns(parse_u32(v).context("IPVS_DEST_ATTR_ACTIVE_CONNS")?)
            }
            IPVS_DEST_ATTR_INACT_CONNS => {
                DestAttr::InactConns(parse_u32(v).context("IPVS_DEST_ATTR_INACT_CONNS")?)
            }
            IPVS_DEST_ATTR_PERSIST_CONNS => {
                DestAttr::PersistConns(parse_u32(v).context("IPVS_DEST_ATTR_PERSIST_CONNS")?)
            }
            IPVS_DEST_ATTR_STATS => DestAttr::Stats(StatsNest::parse(v, StatsWidth::Legacy)?),
            IPVS_DEST_ATTR_ADDR_FAMILY => {
                DestAttr::AddrFamily(parse_u16(v).context("IPVS_DEST_ATTR_ADDR_FAMILY")?)
            }
            IPVS_DEST_ATTR_STATS64 => DestAttr::Stats64(StatsNest::parse(v, StatsWidth::Wide)?),
            IPVS_DEST_ATTR_TUN_TYPE => {
                DestAttr::TunType(parse_u8(v).context("IPVS_DEST_ATTR_TUN_TYPE")?)
            }
            IPVS_DEST_ATTR_TUN_PORT => {
                DestAttr::TunPort(parse_u16_be(v).context("IPVS_DEST_ATTR_TUN_PORT")?)
            }
            IPVS_DEST_ATTR_TUN_FLAGS => {
                DestAttr::TunFlags(parse_u16(v).context("IPVS_DEST_ATTR_TUN_FLAGS")?)
            }
            _ => DestAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// `IPVS_INFO_ATTR_*`: the top-level attributes of an `IPVS_CMD_SET_INFO` reply. They share
/// numbers with `IPVS_CMD_ATTR_*`, so the command decides which enum applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoAttr {
    Version(u32),
    ConnTabSize(u32),
    Other(DefaultNla),
}

impl Nla for InfoAttr {
    fn value_len(&self) -> usize {
        match self {
            InfoAttr::Version(_) | InfoAttr::ConnTabSize(_) => 4,
            InfoAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            InfoAttr::Version(_) => IPVS_INFO_ATTR_VERSION,
            InfoAttr::ConnTabSize(_) => IPVS_INFO_ATTR_CONN_TAB_SIZE,
            InfoAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            InfoAttr::Version(v) | InfoAttr::ConnTabSize(v) => {
                let _ = emit_u32(buf, *v);
            }
            InfoAttr::Other(nla) => nla.emit_value(buf),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for InfoAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            IPVS_INFO_ATTR_VERSION => {
                InfoAttr::Version(parse_u32(v).context("IPVS_INFO_ATTR_VERSION")?)
            }
            IPVS_INFO_ATTR_CONN_TAB_SIZE => {
                InfoAttr::ConnTabSize(parse_u32(v).context("IPVS_INFO_ATTR_CONN_TAB_SIZE")?)
            }
            _ => InfoAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// `IPVS_CMD_ATTR_*`: the first level of every IPVS message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdAttr {
    Service(Vec<SvcAttr>),
    Dest(Vec<DestAttr>),
    TimeoutTcp(u32),
    TimeoutTcpFin(u32),
    TimeoutUdp(u32),
    /// Only in `IPVS_CMD_SET_INFO` replies (see [`InfoAttr`]).
    Info(InfoAttr),
    Other(DefaultNla),
}

impl Nla for CmdAttr {
    fn value_len(&self) -> usize {
        match self {
            CmdAttr::Service(attrs) => attrs.as_slice().buffer_len(),
            CmdAttr::Dest(attrs) => attrs.as_slice().buffer_len(),
            CmdAttr::TimeoutTcp(_) | CmdAttr::TimeoutTcpFin(_) | CmdAttr::TimeoutUdp(_) => 4,
            CmdAttr::Info(attr) => attr.value_len(),
            CmdAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            CmdAttr::Service(_) => IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED,
            CmdAttr::Dest(_) => IPVS_CMD_ATTR_DEST | NLA_F_NESTED,
            CmdAttr::TimeoutTcp(_) => IPVS_CMD_ATTR_TIMEOUT_TCP,
            CmdAttr::TimeoutTcpFin(_) => IPVS_CMD_ATTR_TIMEOUT_TCP_FIN,
            CmdAttr::TimeoutUdp(_) => IPVS_CMD_ATTR_TIMEOUT_UDP,
            CmdAttr::Info(attr) => attr.kind(),
            CmdAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            CmdAttr::Service(attrs) => attrs.as_slice().emit(buf),
            CmdAttr::Dest(attrs) => attrs.as_slice().emit(buf),
            CmdAttr::TimeoutTcp(v) | CmdAttr::TimeoutTcpFin(v) | CmdAttr::TimeoutUdp(v) => {
                let _ = emit_u32(buf, *v);
            }
            CmdAttr::Info(attr) => attr.emit_value(buf),
            CmdAttr::Other(nla) => nla.emit_value(buf),
        }
    }
}

impl CmdAttr {
    /// Parses one first-level attribute; `info` selects the `IPVS_INFO_ATTR_*` namespace used by
    /// `IPVS_CMD_SET_INFO` replies.
    pub fn parse_in(buf: &NlaBuffer<&[u8]>, info: bool) -> Result<Self, DecodeError> {
        if info {
            return Ok(CmdAttr::Info(InfoAttr::parse(buf)?));
        }
        let v = buf.value();
        Ok(match buf.kind() {
            IPVS_CMD_ATTR_SERVICE => {
                CmdAttr::Service(parse_nested(v, "IPVS_CMD_ATTR_SERVICE", |nla| {
                    SvcAttr::parse(nla)
                })?)
            }
            IPVS_CMD_ATTR_DEST => CmdAttr::Dest(parse_nested(v, "IPVS_CMD_ATTR_DEST", |nla| {
                DestAttr::parse(nla)
            })?),
            IPVS_CMD_ATTR_TIMEOUT_TCP => {
                CmdAttr::TimeoutTcp(parse_u32(v).context("IPVS_CMD_ATTR_TIMEOUT_TCP")?)
            }
            IPVS_CMD_ATTR_TIMEOUT_TCP_FIN => {
                CmdAttr::TimeoutTcpFin(parse_u32(v).context("IPVS_CMD_ATTR_TIMEOUT_TCP_FIN")?)
            }
            IPVS_CMD_ATTR_TIMEOUT_UDP => {
                CmdAttr::TimeoutUdp(parse_u32(v).context("IPVS_CMD_ATTR_TIMEOUT_UDP")?)
            }
            _ => CmdAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// Parses a run of first-level attributes.
pub fn parse_cmd_attrs(payload: &[u8], info: bool) -> Result<Vec<CmdAttr>, DecodeError> {
    parse_nested(payload, "IPVS message", |nla| CmdAttr::parse_in(nla, info))
}
