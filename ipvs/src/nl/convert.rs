//! Mapping between the typed model and the raw attributes.
//!
//! Encoding follows libipvs (ipvsadm's library) so the kernel sees exactly what it sees from
//! ipvsadm: addresses as 16-byte `union nf_inet_addr`, flags with an all-ones mask, tunnel
//! attributes always present.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::attrs::{CmdAttr, DestAttr, FlagsMask, InetAddrBytes, InfoAttr, SvcAttr, INET_ADDR_LEN};
use super::constants::*;
use crate::types::{
    Destination, DestinationState, ForwardMethod, Info, Protocol, Service, ServiceFlags,
    ServiceKey, ServiceState, Stats, Timeouts, TunnelType,
};

pub fn family_of(addr: &IpAddr) -> u16 {
    match addr {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    }
}

pub fn addr_bytes(addr: &IpAddr) -> InetAddrBytes {
    let mut out = [0u8; INET_ADDR_LEN];
    match addr {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out.copy_from_slice(&a.octets()),
    }
    out
}

pub fn addr_from_bytes(af: u16, bytes: &InetAddrBytes) -> Result<IpAddr, String> {
    match af {
        AF_INET => Ok(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        AF_INET6 => Ok(IpAddr::V6(Ipv6Addr::from(*bytes))),
        other => Err(format!("unknown address family {other}")),
    }
}

/// The value libipvs puts in `IPVS_SVC_ATTR_NETMASK` for a prefix length.
pub fn netmask_value(ipv6: bool, prefix: u8) -> u32 {
    if ipv6 {
        u32::from(prefix)
    } else {
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix.min(32)))
        };
        // The IPv4 mask travels as raw network-order bytes read as a native u32.
        u32::from_ne_bytes(mask.to_be_bytes())
    }
}

/// Inverse of [`netmask_value`]; non-contiguous IPv4 masks have no prefix length (see
/// [`netmask_of`]).
pub fn netmask_prefix(ipv6: bool, value: u32) -> Result<u8, String> {
    if ipv6 {
        return u8::try_from(value)
            .ok()
            .filter(|p| *p <= 128)
            .ok_or_else(|| format!("IPv6 persistence prefix length {value} out of range"));
    }
    let mask = u32::from_be_bytes(value.to_ne_bytes());
    let ones = mask.leading_ones();
    if ones + mask.trailing_zeros() < 32 {
        return Err(format!(
            "persistence netmask {} is not a prefix mask",
            Ipv4Addr::from(mask)
        ));
    }
    Ok(ones as u8)
}

/// The persistence mask the kernel holds: a prefix length, or an IPv4 mask that is none.
pub fn netmask_of(ipv6: bool, value: u32) -> Result<(u8, Option<Ipv4Addr>), String> {
    match netmask_prefix(ipv6, value) {
        Ok(prefix) => Ok((prefix, None)),
        Err(_) if !ipv6 => Ok((0, Some(Ipv4Addr::from(value.to_ne_bytes())))),
        Err(e) => Err(e),
    }
}

pub fn service_key_attrs(key: &ServiceKey) -> Vec<SvcAttr> {
    match key {
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => vec![
            SvcAttr::Af(family_of(addr)),
            SvcAttr::Protocol(protocol.number()),
            SvcAttr::Addr(addr_bytes(addr)),
            SvcAttr::Port(*port),
        ],
        ServiceKey::FwMark { ipv6, mark } => vec![
            SvcAttr::Af(if *ipv6 { AF_INET6 } else { AF_INET }),
            SvcAttr::Fwmark(*mark),
        ],
    }
}

pub fn service_attrs(svc: &Service) -> Vec<SvcAttr> {
    let mut attrs = service_key_attrs(&svc.key);
    attrs.push(SvcAttr::SchedName(svc.scheduler.clone()));
    if let Some(pe) = &svc.pe_name {
        attrs.push(SvcAttr::PeName(pe.clone()));
    }
    attrs.push(SvcAttr::Flags(FlagsMask {
        // The kernel refuses to hash a service that claims to be hashed already.
        flags: svc.flags.0 & !ServiceFlags::HASHED,
        mask: u32::MAX,
    }));
    attrs.push(SvcAttr::Timeout(svc.timeout));
    attrs.push(SvcAttr::Netmask(match svc.odd_netmask {
        Some(mask) if !svc.key.is_ipv6() => u32::from_ne_bytes(mask.octets()),
        _ => netmask_value(svc.key.is_ipv6(), svc.netmask_prefix),
    }));
    attrs
}

pub fn dest_key_attrs(addr: &IpAddr, port: u16) -> Vec<DestAttr> {
    vec![
        DestAttr::AddrFamily(family_of(addr)),
        DestAttr::Addr(addr_bytes(addr)),
        DestAttr::Port(port),
    ]
}

pub fn dest_attrs(dest: &Destination) -> Vec<DestAttr> {
    let mut attrs = dest_key_attrs(&dest.addr, dest.port);
    attrs.extend([
        DestAttr::FwdMethod(dest.forward.conn_flags()),
        DestAttr::Weight(dest.weight),
        DestAttr::TunType(dest.tunnel_type.number()),
        DestAttr::TunPort(dest.tunnel_port),
        DestAttr::TunFlags(dest.tunnel_flags),
        DestAttr::UThresh(dest.upper_threshold),
        DestAttr::LThresh(dest.lower_threshold),
    ]);
    attrs
}

pub fn timeout_attrs(t: &Timeouts) -> Vec<CmdAttr> {
    vec![
        CmdAttr::TimeoutTcp(t.tcp),
        CmdAttr::TimeoutTcpFin(t.tcp_fin),
        CmdAttr::TimeoutUdp(t.udp),
    ]
}

fn missing(what: &str) -> String {
    format!("kernel reply lacks {what}")
}

pub fn service_from_attrs(attrs: &[SvcAttr]) -> Result<ServiceState, String> {
    let mut af = None;
    let mut protocol = None;
    let mut addr = None;
    let mut port = None;
    let mut fwmark = 0u32;
    let mut sched = None;
    let mut flags = None;
    let mut timeout = 0u32;
    let mut netmask = None;
    let mut pe_name = None;
    let mut stats = None;
    let mut stats64 = None;
    for attr in attrs {
        match attr {
            SvcAttr::Af(v) => af = Some(*v),
            SvcAttr::Protocol(v) => protocol = Some(*v),
            SvcAttr::Addr(v) => addr = Some(*v),
            SvcAttr::Port(v) => port = Some(*v),
            SvcAttr::Fwmark(v) => fwmark = *v,
            SvcAttr::SchedName(v) => sched = Some(v.clone()),
            SvcAttr::Flags(f) => flags = Some(f.flags & f.mask),
            SvcAttr::Timeout(v) => timeout = *v,
            SvcAttr::Netmask(v) => netmask = Some(*v),
            SvcAttr::PeName(v) => pe_name = Some(v.clone()),
            SvcAttr::Stats(n) => stats = Some(n.stats),
            SvcAttr::Stats64(n) => stats64 = Some(n.stats),
            SvcAttr::Other(_) => {}
        }
    }
    let af = af.ok_or_else(|| missing("IPVS_SVC_ATTR_AF"))?;
    let ipv6 = match af {
        AF_INET => false,
        AF_INET6 => true,
        other => return Err(format!("service has unknown address family {other}")),
    };
    let key = if fwmark != 0 {
        ServiceKey::FwMark { ipv6, mark: fwmark }
    } else {
        let number = protocol.ok_or_else(|| missing("IPVS_SVC_ATTR_PROTOCOL"))?;
        ServiceKey::Addr {
            protocol: Protocol::from_number(number)
                .ok_or_else(|| format!("service has unknown protocol {number}"))?,
            addr: addr_from_bytes(af, &addr.ok_or_else(|| missing("IPVS_SVC_ATTR_ADDR"))?)?,
            port: port.ok_or_else(|| missing("IPVS_SVC_ATTR_PORT"))?,
        }
    };
    let (netmask_prefix, odd_netmask) = match netmask {
        Some(v) => netmask_of(ipv6, v)?,
        None => (if ipv6 { 128 } else { 32 }, None),
    };
    Ok(ServiceState {
        service: Service {
            key,
            scheduler: sched.ok_or_else(|| missing("IPVS_SVC_ATTR_SCHED_NAME"))?,
            flags: ServiceFlags(flags.ok_or_else(|| missing("IPVS_SVC_ATTR_FLAGS"))?),
            timeout,
            netmask_prefix,
            odd_netmask,
            pe_name,
        },
        stats: stats64.or(stats).unwrap_or_default(),
    })
}

pub fn destination_from_attrs(
    attrs: &[DestAttr],
    service_ipv6: bool,
) -> Result<DestinationState, String> {
    let mut af = None;
    let mut addr = None;
    let mut port = None;
    let mut fwd = None;
    let mut weight = None;
    let mut state = DestinationState {
        destination: Destination {
            addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 0,
            forward: ForwardMethod::Masq,
            weight: 0,
            upper_threshold: 0,
            lower_threshold: 0,
            tunnel_type: TunnelType::IpIp,
            tunnel_port: 0,
            tunnel_flags: 0,
        },
        active_conns: 0,
        inactive_conns: 0,
        persistent_conns: 0,
        stats: Stats::default(),
    };
    let mut stats = None;
    let mut stats64 = None;
    let d = &mut state.destination;
    for attr in attrs {
        match attr {
            DestAttr::Addr(v) => addr = Some(*v),
            DestAttr::Port(v) => port = Some(*v),
            DestAttr::FwdMethod(v) => fwd = Some(*v),
            DestAttr::Weight(v) => weight = Some(*v),
            DestAttr::UThresh(v) => d.upper_threshold = *v,
            DestAttr::LThresh(v) => d.lower_threshold = *v,
            DestAttr::ActiveConns(v) => state.active_conns = *v,
            DestAttr::InactConns(v) => state.inactive_conns = *v,
            DestAttr::PersistConns(v) => state.persistent_conns = *v,
            DestAttr::Stats(n) => stats = Some(n.stats),
            DestAttr::AddrFamily(v) => af = Some(*v),
            DestAttr::Stats64(n) => stats64 = Some(n.stats),
            DestAttr::TunType(v) => {
                d.tunnel_type = TunnelType::from_number(*v)
                    .ok_or_else(|| format!("destination has unknown tunnel type {v}"))?
            }
            DestAttr::TunPort(v) => d.tunnel_port = *v,
            DestAttr::TunFlags(v) => d.tunnel_flags = *v,
            DestAttr::Other(_) => {}
        }
    }
    // Kernels before 4.x have no per-destination family: it is the service's.
    let af = af.unwrap_or(if service_ipv6 { AF_INET6 } else { AF_INET });
    d.addr = addr_from_bytes(af, &addr.ok_or_else(|| missing("IPVS_DEST_ATTR_ADDR"))?)?;
    d.port = port.ok_or_else(|| missing("IPVS_DEST_ATTR_PORT"))?;
    let fwd = fwd.ok_or_else(|| missing("IPVS_DEST_ATTR_FWD_METHOD"))?;
    d.forward = ForwardMethod::from_conn_flags(fwd)
        .ok_or_else(|| format!("destination has unknown forwarding method {fwd:#x}"))?;
    d.weight = weight.ok_or_else(|| missing("IPVS_DEST_ATTR_WEIGHT"))?;
    state.stats = stats64.or(stats).unwrap_or_default();
    Ok(state)
}

pub fn info_from_attrs(attrs: &[CmdAttr]) -> Result<Info, String> {
    let mut version = None;
    let mut size = None;
    for attr in attrs {
        match attr {
            CmdAttr::Info(InfoAttr::Version(v)) => version = Some(*v),
            CmdAttr::Info(InfoAttr::ConnTabSize(v)) => size = Some(*v),
            _ => {}
        }
    }
    Ok(Info {
        version: version.ok_or_else(|| missing("IPVS_INFO_ATTR_VERSION"))?,
        conn_table_size: size.ok_or_else(|| missing("IPVS_INFO_ATTR_CONN_TAB_SIZE"))?,
    })
}

pub fn timeouts_from_attrs(attrs: &[CmdAttr]) -> Timeouts {
    let mut t = Timeouts::default();
    for attr in attrs {
        match attr {
            CmdAttr::TimeoutTcp(v) => t.tcp = *v,
            CmdAttr::TimeoutTcpFin(v) => t.tcp_fin = *v,
            CmdAttr::TimeoutUdp(v) => t.udp = *v,
            _ => {}
        }
    }
    t
}
