//! The typed model of IPVS state: what `ipvsadm` calls virtual services and real servers.
//!
//! Values mirror include/uapi/linux/ip_vs.h; field names follow the kernel's attribute names
//! (IPVS_SVC_ATTR_*, IPVS_DEST_ATTR_*) so the netlink mapping stays obvious.

use std::net::IpAddr;

/// Transport protocol of an address-based virtual service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The IPPROTO_* number the kernel uses.
    pub fn number(self) -> u16 {
        match self {
            Protocol::Tcp => libc::IPPROTO_TCP as u16,
            Protocol::Udp => libc::IPPROTO_UDP as u16,
            Protocol::Sctp => libc::IPPROTO_SCTP as u16,
        }
    }

    pub fn from_number(n: u16) -> Option<Self> {
        match i32::from(n) {
            libc::IPPROTO_TCP => Some(Protocol::Tcp),
            libc::IPPROTO_UDP => Some(Protocol::Udp),
            libc::IPPROTO_SCTP => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

/// How a virtual service is addressed: by (protocol, address, port) or by firewall mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceKey {
    Addr {
        protocol: Protocol,
        addr: IpAddr,
        port: u16,
    },
    FwMark {
        /// AF_INET or AF_INET6 traffic.
        ipv6: bool,
        mark: u32,
    },
}

/// IP_VS_SVC_F_* flags. `HASHED` is set by the kernel on every live service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ServiceFlags(pub u32);

impl ServiceFlags {
    pub const PERSISTENT: u32 = 0x0001;
    pub const HASHED: u32 = 0x0002;
    pub const ONEPACKET: u32 = 0x0004;
    /// IP_VS_SVC_F_SCHED1: sh-fallback / mh-fallback.
    pub const SCHED1: u32 = 0x0008;
    /// IP_VS_SVC_F_SCHED2: sh-port / mh-port.
    pub const SCHED2: u32 = 0x0010;
    /// IP_VS_SVC_F_SCHED3.
    pub const SCHED3: u32 = 0x0020;

    pub fn contains(self, bit: u32) -> bool {
        self.0 & bit == bit
    }
}

/// A virtual service (`ipvsadm -A`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Service {
    pub key: ServiceKey,
    /// Scheduler name: rr, wrr, lc, wlc, sh, dh, mh, sed, nq, lblc, lblcr, fo, ovf, twos.
    pub scheduler: String,
    pub flags: ServiceFlags,
    /// Persistence timeout in seconds (meaningful with `PERSISTENT`).
    pub timeout: u32,
    /// Persistence netmask as a prefix length (32 / 128 for none).
    pub netmask_prefix: u8,
    /// Persistence engine (e.g. "sip"), rarely used.
    pub pe_name: Option<String>,
}

/// Forwarding method of a real server (IP_VS_CONN_F_FWD_MASK values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ForwardMethod {
    /// NAT (`-m`), IP_VS_CONN_F_MASQ = 0.
    Masq,
    /// IP_VS_CONN_F_LOCALNODE = 1.
    Local,
    /// IP-in-IP / GUE / GRE tunnel (`-i`), IP_VS_CONN_F_TUNNEL = 2.
    Tunnel,
    /// Direct routing (`-g`), IP_VS_CONN_F_DROUTE = 3.
    Route,
    /// IP_VS_CONN_F_BYPASS = 4.
    Bypass,
}

/// IP_VS_CONN_F_TUNNEL_TYPE_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TunnelType {
    #[default]
    IpIp,
    Gue,
    Gre,
}

/// A real server of a virtual service (`ipvsadm -a`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Destination {
    pub addr: IpAddr,
    pub port: u16,
    pub forward: ForwardMethod,
    /// 0 quiesces the server (graceful termination): no new connections.
    pub weight: i32,
    pub upper_threshold: u32,
    pub lower_threshold: u32,
    pub tunnel_type: TunnelType,
    pub tunnel_port: u16,
    /// IP_VS_TUNNEL_ENCAP_FLAG_* (checksum options for GUE/GRE).
    pub tunnel_flags: u16,
}

/// Traffic counters (IPVS_STATS_ATTR_*), from the 64-bit attribute set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    pub conns: u64,
    pub inpkts: u64,
    pub outpkts: u64,
    pub inbytes: u64,
    pub outbytes: u64,
    pub cps: u64,
    pub inpps: u64,
    pub outpps: u64,
    pub inbps: u64,
    pub outbps: u64,
}

/// A destination as read back from the kernel, with its connection counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationState {
    pub destination: Destination,
    pub active_conns: u32,
    pub inactive_conns: u32,
    pub persistent_conns: u32,
    pub stats: Stats,
}

/// A service as read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceState {
    pub service: Service,
    pub stats: Stats,
}

/// Global IPVS info (`ipvsadm --version` / `-Ln` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// Encoded as (major << 16) | (minor << 8) | patch.
    pub version: u32,
    pub conn_table_size: u32,
}

/// Connection timeouts in seconds (`ipvsadm --set tcp tcpfin udp`); 0 leaves a value unchanged
/// when setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub tcp: u32,
    pub tcp_fin: u32,
    pub udp: u32,
}
