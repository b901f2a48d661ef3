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
    /// An IPv4 persistence mask that is no prefix, as the kernel holds it (it takes any:
    /// kube-router writes the prefix length 32 where an IPv4 mask belongs, which the kernel
    /// reads as 32.0.0.0); `netmask_prefix` is then 0 and means nothing.
    pub odd_netmask: Option<std::net::Ipv4Addr>,
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

// ---------------------------------------------------------------------------------------------
// Helpers over the model (added; the definitions above are the fixed API boundary).

use std::fmt;

impl Protocol {
    /// The name ipvsadm prints in listings ("TCP", "UDP", "SCTP").
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ServiceKey {
    /// Whether the service carries IPv6 traffic.
    pub fn is_ipv6(&self) -> bool {
        match self {
            ServiceKey::Addr { addr, .. } => addr.is_ipv6(),
            ServiceKey::FwMark { ipv6, .. } => *ipv6,
        }
    }

    /// The persistence prefix that means "whole address" for this family (32 or 128).
    pub fn full_prefix(&self) -> u8 {
        if self.is_ipv6() {
            128
        } else {
            32
        }
    }
}

/// Formats an endpoint the way ipvsadm does: `1.2.3.4:80`, `[2001:db8::1]:80`.
pub(crate) struct Endpoint<'a>(pub &'a IpAddr, pub u16);

impl fmt::Display for Endpoint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.1),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.1),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => write!(f, "{protocol} {}", Endpoint(addr, *port)),
            ServiceKey::FwMark { ipv6: false, mark } => write!(f, "FWM {mark}"),
            ServiceKey::FwMark { ipv6: true, mark } => write!(f, "FWM {mark} IPv6"),
        }
    }
}

impl ServiceFlags {
    /// The flags a caller sets, i.e. without the kernel-internal `HASHED` bit that every live
    /// service reports.
    pub fn without_hashed(self) -> ServiceFlags {
        ServiceFlags(self.0 & !ServiceFlags::HASHED)
    }
}

impl Service {
    /// A non-persistent service with no flags, as `ipvsadm -A ... -s SCHED` creates it.
    pub fn new(key: ServiceKey, scheduler: impl Into<String>) -> Service {
        Service {
            key,
            scheduler: scheduler.into(),
            flags: ServiceFlags::default(),
            timeout: 0,
            netmask_prefix: key.full_prefix(),
            odd_netmask: None,
            pe_name: None,
        }
    }

    /// The same service with the kernel-internal `HASHED` flag removed, for comparing what was
    /// read back with what was written.
    pub fn normalized(&self) -> Service {
        Service {
            flags: self.flags.without_hashed(),
            ..self.clone()
        }
    }
}

impl ForwardMethod {
    /// The IP_VS_CONN_F_* value carried by IPVS_DEST_ATTR_FWD_METHOD.
    pub fn conn_flags(self) -> u32 {
        match self {
            ForwardMethod::Masq => 0,
            ForwardMethod::Local => 1,
            ForwardMethod::Tunnel => 2,
            ForwardMethod::Route => 3,
            ForwardMethod::Bypass => 4,
        }
    }

    pub fn from_conn_flags(flags: u32) -> Option<ForwardMethod> {
        match flags & 0x7 {
            0 => Some(ForwardMethod::Masq),
            1 => Some(ForwardMethod::Local),
            2 => Some(ForwardMethod::Tunnel),
            3 => Some(ForwardMethod::Route),
            4 => Some(ForwardMethod::Bypass),
            _ => None,
        }
    }
}

impl TunnelType {
    pub fn number(self) -> u8 {
        match self {
            TunnelType::IpIp => 0,
            TunnelType::Gue => 1,
            TunnelType::Gre => 2,
        }
    }

    pub fn from_number(n: u8) -> Option<TunnelType> {
        match n {
            0 => Some(TunnelType::IpIp),
            1 => Some(TunnelType::Gue),
            2 => Some(TunnelType::Gre),
            _ => None,
        }
    }

    /// The name ipvsadm uses for `--tun-type`.
    pub fn name(self) -> &'static str {
        match self {
            TunnelType::IpIp => "ipip",
            TunnelType::Gue => "gue",
            TunnelType::Gre => "gre",
        }
    }
}

impl Destination {
    /// A direct-routing destination of weight 1, ipvsadm's defaults for `-a`.
    pub fn new(addr: IpAddr, port: u16) -> Destination {
        Destination {
            addr,
            port,
            forward: ForwardMethod::Route,
            weight: 1,
            upper_threshold: 0,
            lower_threshold: 0,
            tunnel_type: TunnelType::IpIp,
            tunnel_port: 0,
            tunnel_flags: 0,
        }
    }
}

impl Info {
    /// (major, minor, patch) of the IPVS version.
    pub fn version_triple(&self) -> (u32, u32, u32) {
        (
            (self.version >> 16) & 0xff,
            (self.version >> 8) & 0xff,
            self.version & 0xff,
        )
    }
}

/// Identifies a destination within a service: its address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DestinationKey {
    pub addr: IpAddr,
    pub port: u16,
}

impl fmt::Display for DestinationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Endpoint(&self.addr, self.port).fmt(f)
    }
}

impl Destination {
    pub fn key(&self) -> DestinationKey {
        DestinationKey {
            addr: self.addr,
            port: self.port,
        }
    }
}
