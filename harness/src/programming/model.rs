//! What a proxier wants a node's network namespace to contain.
//!
//! A `Programming` is data only: proxiers produce it, the applier writes it into the kernel, and
//! the effective state read back afterwards is compared against it and snapshotted.

use crate::scenario::{IpCidr, IpFamily};
use ipvs_genl::{Destination, Service, ServiceKey};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The iptables tables a proxier may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Raw,
    Mangle,
    Nat,
    Filter,
}

impl Table {
    pub const ALL: [Table; 4] = [Table::Raw, Table::Mangle, Table::Nat, Table::Filter];

    pub fn name(self) -> &'static str {
        match self {
            Table::Raw => "raw",
            Table::Mangle => "mangle",
            Table::Nat => "nat",
            Table::Filter => "filter",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// One table's content in `iptables-restore` syntax, without the `*table` header and `COMMIT`:
/// chain declarations (`:CHAIN POLICY [0:0]`) followed by `-A`/`-I` rule lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableRules {
    pub chains: Vec<ChainDecl>,
    pub rules: Vec<String>,
}

impl TableRules {
    /// Chains a `-X CHAIN` line deletes: kube-proxy removes a stale chain by declaring it (which
    /// flushes it) and writing `-X` for it in the same restore (pkg/proxy/iptables/proxier.go).
    pub fn deleted_chains(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .filter_map(|r| r.strip_prefix("-X "))
            .map(str::trim)
    }

    /// The rule lines that put a rule into a chain (every line but `-X` deletions).
    pub fn rule_lines(&self) -> impl Iterator<Item = &String> {
        self.rules.iter().filter(|r| !r.starts_with("-X "))
    }
}

/// `:NAME POLICY [0:0]`; built-in chains carry their policy, user chains `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainDecl {
    pub name: String,
    pub policy: Option<String>,
}

/// How the applier writes iptables: `--noflush` keeps chains the proxier did not declare (as
/// kube-proxy does), a full restore replaces each listed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestoreMode {
    #[default]
    NoFlush,
    Flush,
}

/// ipset types the suite understands (those kube-proxy uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpSetType {
    HashIp,
    HashIpPort,
    HashIpPortIp,
    HashIpPortNet,
    HashNet,
    BitmapPort,
}

impl IpSetType {
    pub const ALL: [IpSetType; 6] = [
        IpSetType::HashIp,
        IpSetType::HashIpPort,
        IpSetType::HashIpPortIp,
        IpSetType::HashIpPortNet,
        IpSetType::HashNet,
        IpSetType::BitmapPort,
    ];

    /// The type name `ipset create` takes.
    pub fn name(self) -> &'static str {
        match self {
            IpSetType::HashIp => "hash:ip",
            IpSetType::HashIpPort => "hash:ip,port",
            IpSetType::HashIpPortIp => "hash:ip,port,ip",
            IpSetType::HashIpPortNet => "hash:ip,port,net",
            IpSetType::HashNet => "hash:net",
            IpSetType::BitmapPort => "bitmap:port",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// One ipset with its entries in `ipset` syntax (`10.0.0.1,tcp:80`, `30080`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSet {
    pub name: String,
    pub set_type: IpSetType,
    /// Extra options after the type, as passed to `ipset create` (e.g. `family inet hashsize
    /// 1024 maxelem 65536`, `range 0-65535`). `ipset save` prints more (`bucketsize`, a random
    /// `initval`), which effective-state readback normalises away.
    pub create_options: String,
    pub entries: Vec<String>,
}

/// A virtual service with its real servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualServer {
    pub service: Service,
    pub destinations: Vec<Destination>,
}

/// A proxier's stale-conntrack cleanup for one Service frontend: delete the entries of
/// `protocol` to `orig_dst` (any address when `None`: a NodePort) port `orig_dport` whose reply
/// comes from none of `serving` (the DNAT target is no serving endpoint), as kube-proxy's
/// `conntrack.CleanStaleEntries` filters them (pkg/proxy/conntrack/cleanup.go: reply source
/// IP *and* port against the serving endpoints' `IP:port`). `serving` may be empty (kube-proxy
/// v1.37 clears every entry to a frontend of a Service left without a serving endpoint); the
/// frontend address then says the family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackCleanup {
    pub protocol: crate::scenario::Protocol,
    pub orig_dst: Option<IpAddr>,
    pub orig_dport: u16,
    pub serving: Vec<Serving>,
}

/// A serving endpoint a cleanup spares: its address, and its port (any port when `None`, as
/// an `exec:` proxier may write it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Serving {
    pub ip: IpAddr,
    pub port: Option<u16>,
}

impl ConntrackCleanup {
    /// The family of the entries it deletes: each family's proxier lists only its family's
    /// table (`ListEntries(ipFamily)`).
    fn ipv4(&self) -> Option<bool> {
        self.orig_dst
            .or_else(|| self.serving.first().map(|s| s.ip))
            .map(|a| a.is_ipv4())
    }

    /// Whether the entry is one this cleanup deletes.
    pub fn deletes(&self, e: &crate::netfilter::conntrack::Entry) -> bool {
        self.ipv4() == Some(e.original.dst.is_ipv4())
            && e.original.protocol == self.protocol.number()
            && e.original.dport == self.orig_dport
            && self.orig_dst.is_none_or(|d| e.original.dst == d)
            && !self
                .serving
                .iter()
                .any(|s| s.ip == e.reply.src && s.port.is_none_or(|p| p == e.reply.sport))
    }
}

/// Everything one node's namespace should hold after a proxier has synced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Programming {
    /// Applied first: iptables rules reference sets by name.
    pub ipsets: Vec<IpSet>,
    pub iptables: BTreeMap<Table, TableRules>,
    /// The IPv6 tables (`ip6tables-restore`, in the same restore mode): what the IPv6 proxier
    /// of a dual-stack node writes as its `iptables`.
    pub ip6tables: BTreeMap<Table, TableRules>,
    pub restore_mode: RestoreMode,
    pub ipvs: Vec<VirtualServer>,
    /// The `kube-ipvs0` device with exactly these addresses bound (as /32 or /128); `None`
    /// leaves the device as it is (not made). An empty list keeps the device with no address, as
    /// IPVS mode's every sync makes sure of it (`EnsureDummyDevice`) and then unbinds what is no
    /// longer active.
    pub ipvs_addresses: Option<Vec<IpAddr>>,
    /// Sysctls for the node namespace, keyed by dotted name (`net.ipv4.vs.conntrack`).
    pub sysctls: BTreeMap<String, String>,
    /// IPVS connection timeouts (`ipvsadm --set tcp tcpfin udp`, seconds; 0 leaves one as it
    /// is); `None` leaves the kernel's.
    pub ipvs_timeouts: Option<ipvs_genl::Timeouts>,
    /// For each family listed, delete the node's other virtual services of that family (those
    /// not in `ipvs`), except those whose address lies in one of the CIDRs, as IPVS mode's
    /// `cleanLegacyService` does on every sync of each family's proxier. Empty leaves other
    /// services alone.
    pub ipvs_delete_others: BTreeMap<IpFamily, Vec<IpCidr>>,
    /// Delete every virtual service of the node not in `ipvs` (both families, fwmark ones too),
    /// where the kernel has IP_VS; on a kernel without it there is nothing to delete. kube-proxy's
    /// nftables mode does it once when it starts: `platformCleanup` cleans up after the modes
    /// that are not its own (cmd/kube-proxy/app/server_linux.go), and `ipvs.CleanupLeftovers`
    /// begins with `ipvs.Flush()` (pkg/proxy/ipvs/cleanup.go). kpct applies it at every sync; a
    /// foreign service exists only before the first (`existingIPVS`).
    pub ipvs_clear: bool,
    /// An `nft -f` script, applied as one transaction after the iptables rules (kube-proxy's
    /// nftables mode writes all its state this way).
    pub nft: super::nft::NftScript,
    /// Conntrack entries to delete once everything else is written (last, since deleted
    /// entries cannot be put back).
    pub conntrack_cleanup: Vec<ConntrackCleanup>,
}

impl Programming {
    /// Whether applying it writes to IPVS at all.
    pub fn touches_ipvs(&self) -> bool {
        !self.ipvs.is_empty()
            || self.ipvs_timeouts.is_some()
            || !self.ipvs_delete_others.is_empty()
            || self.ipvs_clear
    }

    /// Whether all it asks of IPVS is `ipvs_clear`, which a kernel without IP_VS has done.
    pub fn only_clears_ipvs(&self) -> bool {
        self.ipvs_clear
            && self.ipvs.is_empty()
            && self.ipvs_timeouts.is_none()
            && self.ipvs_delete_others.is_empty()
    }

    /// The addresses bound on `kube-ipvs0`; none when the device is not wanted.
    pub fn kube_ipvs0_addresses(&self) -> &[IpAddr] {
        self.ipvs_addresses.as_deref().unwrap_or_default()
    }

    /// The tables of one xtables family: `iptables` or `ip6tables`.
    pub fn xtables(&self, family: super::tools::Xtables) -> &BTreeMap<Table, TableRules> {
        match family {
            super::tools::Xtables::Ip => &self.iptables,
            super::tools::Xtables::Ip6 => &self.ip6tables,
        }
    }
}

/// Whether `ipvs_clear` or `ipvs_delete_others` removes the kernel service `key`: with
/// `ipvs_clear` any service `p` does not program, else an address service of a pruned family
/// that `p` does not program and no kept CIDR of that family holds.
///
/// `ipvs_delete_others` leaves fwmark services. kube-proxy's `toVirtualServer` (pkg/proxy/ipvs/util/ipvs_linux.go)
/// gives them the zero address of their family, so that family's proxier does try to delete
/// them, but its request (`toIPVSService` carries no mark) names the address service
/// `0.0.0.0:0` or `[::]:0`, which does not exist: the kernel answers ESRCH and the service
/// survives, with an error logged on every sync.
pub fn pruned_by(p: &Programming, key: &ServiceKey) -> bool {
    if p.ipvs_clear {
        return !p.ipvs.iter().any(|vs| vs.service.key == *key);
    }
    let ServiceKey::Addr { addr, .. } = key else {
        return false;
    };
    let Some(keep) = p.ipvs_delete_others.get(&IpFamily::of(*addr)) else {
        return false;
    };
    !p.ipvs.iter().any(|vs| vs.service.key == *key) && !keep.iter().any(|c| c.contains(*addr))
}
