//! Reading back what the kernel of a node namespace actually holds, in a normalised,
//! deterministic form for snapshots and comparisons.
//!
//! Normalisation: iptables without `#` comments and counters, built-in chains that only carry
//! the default ACCEPT policy and no rules left out (so a table that was created and flushed reads
//! like one never created), built-in chains in kernel order then user chains by name, rules
//! grouped by chain in kernel order; ipsets by name with entries sorted and the per-boot random
//! `initval` and kernel-chosen `bucketsize` dropped; IPVS exactly as `ipvsadm -Sn` prints it.
//!
//! [`EffectiveState`]'s `Display` is the programming text format (see [`super::text`]), so it can
//! be read back with [`super::parse_text`]. It deliberately leaves out the kind of device that
//! holds the kube-ipvs0 addresses (dummy, or the bridge fallback on kernels without dummy): the
//! same snapshot must hold on both kinds of kernel. The kind is in [`DeviceState::kind`].

use super::kube_ipvs0::{self, DeviceError, DeviceState};
use super::model::pruned_by;
use super::nft::NftTable;
use super::rule_key::rule_key;
use super::text::{render_destination_line, render_service_line, render_timeouts};
use super::tools::{self, IptablesBackend, ToolError, Xtables};
use super::{ChainDecl, Programming, Table, TableRules, VirtualServer};
use crate::netns::Netns;
use ipvs_genl::{format_save, IpvsHandle, Timeouts};
use std::collections::BTreeMap;
use std::fmt::{self, Write};
use std::net::IpAddr;

/// What to read besides the always-read parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub backend: IptablesBackend,
    /// Sysctls to read back (those a programming set).
    pub sysctls: Vec<String>,
}

impl ReadOptions {
    /// Reads back the sysctls `p` sets, with the default iptables backend.
    pub fn for_programming(p: &Programming) -> ReadOptions {
        ReadOptions {
            backend: IptablesBackend::default(),
            sysctls: p.sysctls.keys().cloned().collect(),
        }
    }
}

/// An ipset as read back (its type as ipset names it: it may be one the suite has no enum for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSetState {
    pub name: String,
    pub type_name: String,
    pub create_options: String,
    /// Sorted.
    pub entries: Vec<String>,
}

/// The IPVS table as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsTable {
    /// Services (without the kernel's HASHED flag) and their destinations, sorted by key.
    pub servers: Vec<VirtualServer>,
    /// `ipvsadm -Sn` text of the table, from our client.
    pub save: String,
    /// The connection timeouts (`ipvsadm -L --timeout`).
    pub timeouts: Timeouts,
}

/// A fresh namespace's IPVS timeouts (net/netfilter/ipvs: TCP ESTABLISHED 15 min, FIN_WAIT 2
/// min, UDP 5 min): shown only when something changed them.
pub const KERNEL_IPVS_TIMEOUTS: Timeouts = Timeouts {
    tcp: 900,
    tcp_fin: 120,
    udp: 300,
};

/// A node namespace's proxier-relevant kernel state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveState {
    /// Normalised tables; tables with nothing left after normalisation are absent.
    pub iptables: BTreeMap<Table, TableRules>,
    /// The IPv6 tables (`ip6tables-save`), normalised the same way.
    pub ip6tables: BTreeMap<Table, TableRules>,
    pub ipsets: Vec<IpSetState>,
    /// `None` when the kernel has no IPVS.
    pub ipvs: Option<IpvsTable>,
    pub kube_ipvs0: Option<DeviceState>,
    /// Requested sysctls; `None` for one that does not exist in this kernel.
    pub sysctls: BTreeMap<String, Option<String>>,
    /// Every nftables table iptables does not own, as `nft -s list table` prints it, normalised
    /// ([`super::nft::normalize_listing`]).
    pub nft: BTreeMap<NftTable, Vec<String>>,
}

/// Reading some part of the state failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading iptables/ipset state: {0}")]
    Tool(#[from] ToolError),
    #[error("reading the IPVS table in namespace {namespace}: {cause}")]
    Ipvs {
        namespace: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: ipvs_genl::Error,
    },
    #[error("reading kube-ipvs0: {0}")]
    Device(#[from] DeviceError),
    #[error("reading nftables state: {0}")]
    Nft(#[from] super::nft::NftError),
}

/// Reads the effective state of `ns`.
pub fn effective_state(ns: &Netns, opts: &ReadOptions) -> Result<EffectiveState, ReadError> {
    let save = tools::run(ns, opts.backend.save(), &[], None)?;
    let ipset = tools::run(ns, "ipset", &["save"], None)?;
    let sysctls = opts
        .sysctls
        .iter()
        .map(|k| (k.clone(), ns.get_sysctl(k).ok().map(|v| squash_spaces(&v))))
        .collect();
    Ok(EffectiveState {
        iptables: normalize_iptables_save(&save),
        ip6tables: read_ip6tables(ns, opts.backend)?,
        ipsets: normalize_ipset_save(&ipset),
        ipvs: read_ipvs(ns)?,
        kube_ipvs0: kube_ipvs0::read(ns)?,
        sysctls,
        nft: super::nft::read_tables(ns)?,
    })
}

/// The IPv6 tables. With iptables-nft they live in `ip6` nf_tables tables: where there is none
/// (every node of an IPv4 scenario), the kernel says so and no tool runs.
fn read_ip6tables(
    ns: &Netns,
    backend: IptablesBackend,
) -> Result<BTreeMap<Table, TableRules>, ReadError> {
    if backend == IptablesBackend::Nft
        && super::nft::holds_no_xtables(ns, Xtables::Ip6) == Some(true)
    {
        return Ok(BTreeMap::new());
    }
    let save = tools::run(ns, Xtables::Ip6.save(backend), &[], None)?;
    Ok(normalize_iptables_save(&save))
}

fn read_ipvs(ns: &Netns) -> Result<Option<IpvsTable>, ReadError> {
    let err = |cause| ReadError::Ipvs {
        namespace: ns.name().to_string(),
        cause,
    };
    let mut handle = match IpvsHandle::in_netns(ns.path()) {
        Ok(h) => h,
        Err(ipvs_genl::Error::FamilyMissing) => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let table = handle.table().map_err(err)?;
    // Sorted: the kernel's dump order depends on hash buckets and insertion history.
    let mut servers: Vec<VirtualServer> = table
        .iter()
        .map(|(svc, dests)| {
            let mut destinations: Vec<_> = dests.iter().map(|d| d.destination.clone()).collect();
            destinations.sort_by_key(|d| d.key());
            VirtualServer {
                service: svc.service.normalized(),
                destinations,
            }
        })
        .collect();
    servers.sort_by_key(|vs| vs.service.key);
    Ok(Some(IpvsTable {
        servers,
        save: format_save(&table),
        timeouts: handle.timeouts().map_err(err)?,
    }))
}

fn squash_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The built-in chains of a table, in the order the kernel lists them.
pub fn builtin_chains(table: Table) -> &'static [&'static str] {
    match table {
        Table::Raw => &["PREROUTING", "OUTPUT"],
        Table::Mangle => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
        Table::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        Table::Filter => &["INPUT", "FORWARD", "OUTPUT"],
    }
}

/// Normalises `iptables-save` output (see the module documentation). Tables the suite does not
/// model (`security`) are dropped.
pub fn normalize_iptables_save(save: &str) -> BTreeMap<Table, TableRules> {
    let mut raw: BTreeMap<Table, TableRules> = BTreeMap::new();
    let mut current: Option<Table> = None;
    for line in save.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            current = Table::from_name(name);
            if let Some(t) = current {
                raw.entry(t).or_default();
            }
            continue;
        }
        let Some(table) = current else { continue };
        if line == "COMMIT" {
            current = None;
            continue;
        }
        let Some(rules) = raw.get_mut(&table) else {
            continue;
        };
        if let Some(decl) = line.strip_prefix(':') {
            let mut parts = decl.split_whitespace();
            let name = parts.next().unwrap_or_default().to_string();
            let policy = parts.next().filter(|p| *p != "-").map(str::to_string);
            rules.chains.push(ChainDecl { name, policy });
        } else {
            let rule = match line.split_once(' ') {
                Some((first, rest)) if first.starts_with('[') && first.ends_with(']') => rest,
                _ => line,
            };
            rules.rules.push(rule.to_string());
        }
    }
    raw.into_iter()
        .filter_map(|(table, rules)| {
            let n = normalize_table(table, rules);
            (!n.chains.is_empty()).then_some((table, n))
        })
        .collect()
}

fn chain_of(rule: &str) -> &str {
    rule.split_whitespace().nth(1).unwrap_or_default()
}

fn normalize_table(table: Table, t: TableRules) -> TableRules {
    let builtins = builtin_chains(table);
    let has_rules = |chain: &str| t.rules.iter().any(|r| chain_of(r) == chain);
    let mut chains: Vec<ChainDecl> = Vec::new();
    for b in builtins {
        if let Some(c) = t.chains.iter().find(|c| c.name == *b) {
            let default_policy = c.policy.as_deref() == Some("ACCEPT");
            if !default_policy || has_rules(b) {
                chains.push(c.clone());
            }
        }
    }
    let mut user: Vec<ChainDecl> = t
        .chains
        .iter()
        .filter(|c| !builtins.contains(&c.name.as_str()))
        .cloned()
        .collect();
    user.sort_by(|a, b| a.name.cmp(&b.name));
    chains.extend(user);
    let rules = chains
        .iter()
        .flat_map(|c| t.rules.iter().filter(|r| chain_of(r) == c.name).cloned())
        .collect();
    TableRules { chains, rules }
}

/// `ipset create` options as `ipset save` prints them, without what the kernel chose: a random
/// `initval` per set and a `bucketsize` that depends on the kernel version.
pub fn without_kernel_chosen_options(options: &str) -> String {
    let mut kept = Vec::new();
    let mut it = options.split_whitespace();
    while let Some(opt) = it.next() {
        if matches!(opt, "initval" | "bucketsize") {
            it.next();
        } else {
            kept.push(opt);
        }
    }
    kept.join(" ")
}

/// Normalises `ipset save` output (see the module documentation).
pub fn normalize_ipset_save(save: &str) -> Vec<IpSetState> {
    let mut sets: BTreeMap<String, IpSetState> = BTreeMap::new();
    for line in save.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["create", name, type_name, options @ ..] => {
                sets.insert(
                    name.to_string(),
                    IpSetState {
                        name: name.to_string(),
                        type_name: type_name.to_string(),
                        create_options: without_kernel_chosen_options(&options.join(" ")),
                        entries: Vec::new(),
                    },
                );
            }
            ["add", name, entry @ ..] => {
                if let Some(s) = sets.get_mut(*name) {
                    s.entries.push(entry.join(" "));
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<IpSetState> = sets.into_values().collect();
    for s in &mut out {
        s.entries.sort();
    }
    out
}

/// One thing a programming asked for that the kernel does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Chain {
        table: Table,
        chain: String,
    },
    /// A chain a `-X` line deletes is still there.
    ChainDeletion {
        table: Table,
        chain: String,
    },
    ChainPolicy {
        table: Table,
        chain: String,
        wanted: String,
        found: Option<String>,
    },
    Rule {
        table: Table,
        rule: String,
    },
    /// Something of the IPv6 tables (`ip6tables`).
    Ip6tables(Box<Missing>),
    Set {
        name: String,
    },
    SetType {
        name: String,
        wanted: String,
        found: String,
    },
    SetEntry {
        set: String,
        entry: String,
    },
    Ipvs,
    IpvsTimeouts {
        wanted: String,
        found: String,
    },
    /// A service `--delete-others` should have removed is still there.
    Deletion {
        service: String,
    },
    Service {
        service: String,
    },
    Destination {
        service: String,
        destination: String,
    },
    Device,
    Address(IpAddr),
    LocalRoute(IpAddr),
    Sysctl {
        key: String,
        wanted: String,
        found: Option<String>,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Chain { table, chain } => write!(f, "table {}: chain {chain}", table.name()),
            Missing::ChainDeletion { table, chain } => {
                write!(f, "table {}: deletion of chain {chain}", table.name())
            }
            Missing::ChainPolicy {
                table,
                chain,
                wanted,
                found,
            } => write!(
                f,
                "table {}: chain {chain} has policy {} instead of {wanted}",
                table.name(),
                found.as_deref().unwrap_or("ACCEPT (not listed)")
            ),
            Missing::Rule { table, rule } => write!(f, "table {}: rule `{rule}`", table.name()),
            Missing::Ip6tables(inner) => write!(f, "ip6tables {inner}"),
            Missing::Set { name } => write!(f, "ipset {name}"),
            Missing::SetType {
                name,
                wanted,
                found,
            } => write!(f, "ipset {name} is {found}, not {wanted}"),
            Missing::SetEntry { set, entry } => write!(f, "ipset {set}: entry {entry}"),
            Missing::Ipvs => write!(f, "IPVS (the kernel has none)"),
            Missing::Deletion { service } => {
                write!(f, "deletion of IPVS service `{}`", service.trim())
            }
            Missing::IpvsTimeouts { wanted, found } => {
                write!(f, "IPVS timeouts `{wanted}` (found `{found}`)")
            }
            Missing::Service { service } => write!(f, "IPVS service `{}`", service.trim()),
            Missing::Destination {
                service,
                destination,
            } => {
                write!(
                    f,
                    "IPVS destination `{}` (of `{}`)",
                    destination.trim(),
                    service.trim()
                )
            }
            Missing::Device => write!(f, "device {}", kube_ipvs0::DEVICE),
            Missing::Address(a) => write!(
                f,
                "address {a}/{} on {}",
                kube_ipvs0::host_prefix_len(*a),
                kube_ipvs0::DEVICE
            ),
            Missing::LocalRoute(a) => write!(f, "local route for {a} (table local)"),
            Missing::Sysctl { key, wanted, found } => {
                write!(
                    f,
                    "sysctl {key}={wanted} (found {})",
                    found.as_deref().unwrap_or("no such sysctl")
                )
            }
        }
    }
}

/// `10.0.0.0/32` -> `10.0.0.0` in every comma-separated part: ipset prints host nets bare.
fn entry_key(entry: &str) -> String {
    entry
        .split(',')
        .map(|p| p.strip_suffix("/32").unwrap_or(p).to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(",")
}

impl EffectiveState {
    /// Everything of `p` that is not in this state; empty when the kernel holds all of it.
    /// An `*nft` script is not compared line by line: nft applies it as one transaction, so a
    /// script that applied is held whole (the convergence check compares the tables).
    pub fn diff_against(&self, p: &Programming) -> Vec<Missing> {
        let mut missing = Vec::new();
        diff_tables(&self.iptables, &p.iptables, &mut missing);
        let mut missing6 = Vec::new();
        diff_tables(&self.ip6tables, &p.ip6tables, &mut missing6);
        missing.extend(
            missing6
                .into_iter()
                .map(|m| Missing::Ip6tables(Box::new(m))),
        );
        self.diff_ipsets(p, &mut missing);
        self.diff_ipvs(p, &mut missing);
        self.diff_device(p, &mut missing);
        for (key, wanted) in &p.sysctls {
            let found = self.sysctls.get(key).cloned().flatten();
            if found.as_deref() != Some(squash_spaces(wanted).as_str()) {
                missing.push(Missing::Sysctl {
                    key: key.clone(),
                    wanted: wanted.clone(),
                    found,
                });
            }
        }
        missing
    }

    fn diff_ipsets(&self, p: &Programming, missing: &mut Vec<Missing>) {
        for set in &p.ipsets {
            let Some(have) = self.ipsets.iter().find(|s| s.name == set.name) else {
                missing.push(Missing::Set {
                    name: set.name.clone(),
                });
                continue;
            };
            if have.type_name != set.set_type.name() {
                missing.push(Missing::SetType {
                    name: set.name.clone(),
                    wanted: set.set_type.name().to_string(),
                    found: have.type_name.clone(),
                });
                continue;
            }
            let have_entries: Vec<String> = have.entries.iter().map(|e| entry_key(e)).collect();
            for entry in &set.entries {
                if !have_entries.contains(&entry_key(entry)) {
                    missing.push(Missing::SetEntry {
                        set: set.name.clone(),
                        entry: entry.clone(),
                    });
                }
            }
        }
    }

    fn diff_ipvs(&self, p: &Programming, missing: &mut Vec<Missing>) {
        if !p.touches_ipvs() {
            return;
        }
        let Some(table) = &self.ipvs else {
            // A kernel without IP_VS holds nothing a clear would delete.
            if !p.only_clears_ipvs() {
                missing.push(Missing::Ipvs);
            }
            return;
        };
        for other in table
            .servers
            .iter()
            .filter(|vs| pruned_by(p, &vs.service.key))
        {
            missing.push(Missing::Deletion {
                service: render_service_line(&other.service),
            });
        }
        if let Some(wanted) = &p.ipvs_timeouts {
            // 0 leaves a timeout as it was, so only the others must show.
            let have = &table.timeouts;
            let differs = |w: u32, h: u32| w != 0 && w != h;
            if differs(wanted.tcp, have.tcp)
                || differs(wanted.tcp_fin, have.tcp_fin)
                || differs(wanted.udp, have.udp)
            {
                missing.push(Missing::IpvsTimeouts {
                    wanted: render_timeouts(wanted),
                    found: render_timeouts(have),
                });
            }
        }
        for vs in &p.ipvs {
            let line = render_service_line(&vs.service);
            let Some(have) = table
                .servers
                .iter()
                .find(|h| h.service.key == vs.service.key)
            else {
                missing.push(Missing::Service { service: line });
                continue;
            };
            if have.service != vs.service.normalized() {
                missing.push(Missing::Service {
                    service: line.clone(),
                });
            }
            for d in &vs.destinations {
                if !have.destinations.contains(d) {
                    missing.push(Missing::Destination {
                        service: line.clone(),
                        destination: render_destination_line(&vs.service, d),
                    });
                }
            }
        }
    }

    fn diff_device(&self, p: &Programming, missing: &mut Vec<Missing>) {
        let Some(addresses) = &p.ipvs_addresses else {
            return;
        };
        let Some(dev) = &self.kube_ipvs0 else {
            missing.push(Missing::Device);
            return;
        };
        for a in addresses {
            if !dev
                .addresses
                .contains(&(*a, kube_ipvs0::host_prefix_len(*a)))
            {
                missing.push(Missing::Address(*a));
            } else if !dev.local_routes.contains(a) {
                missing.push(Missing::LocalRoute(*a));
            }
        }
    }

    /// The deterministic text used for snapshots (same as `Display`).
    pub fn to_text(&self) -> String {
        self.to_string()
    }
}

/// Every chain, policy, rule and deletion of `wanted` that `held` lacks.
fn diff_tables(
    held: &BTreeMap<Table, TableRules>,
    wanted: &BTreeMap<Table, TableRules>,
    missing: &mut Vec<Missing>,
) {
    let empty = TableRules::default();
    for (table, wanted) in wanted {
        let have = held.get(table).unwrap_or(&empty);
        let deleted: Vec<&str> = wanted.deleted_chains().collect();
        for chain in &deleted {
            if have.chains.iter().any(|h| h.name == *chain) {
                missing.push(Missing::ChainDeletion {
                    table: *table,
                    chain: chain.to_string(),
                });
            }
        }
        for c in wanted
            .chains
            .iter()
            .filter(|c| !deleted.contains(&c.name.as_str()))
        {
            let found = have.chains.iter().find(|h| h.name == c.name);
            let builtin = builtin_chains(*table).contains(&c.name.as_str());
            match (found, &c.policy) {
                // Built-in chains with the default policy and no rules are normalised away.
                (None, _) if builtin => {
                    if let Some(policy) = c.policy.as_ref().filter(|p| *p != "ACCEPT") {
                        missing.push(Missing::ChainPolicy {
                            table: *table,
                            chain: c.name.clone(),
                            wanted: policy.clone(),
                            found: None,
                        });
                    }
                }
                (None, _) => missing.push(Missing::Chain {
                    table: *table,
                    chain: c.name.clone(),
                }),
                (Some(h), Some(policy)) if h.policy.as_ref() != Some(policy) => {
                    missing.push(Missing::ChainPolicy {
                        table: *table,
                        chain: c.name.clone(),
                        wanted: policy.clone(),
                        found: h.policy.clone(),
                    })
                }
                _ => {}
            }
        }
        let mut available: Vec<Option<(String, Vec<String>)>> =
            have.rules.iter().map(|r| rule_key(r)).collect();
        for rule in wanted.rule_lines() {
            let key = rule_key(rule);
            match available.iter().position(|a| a.is_some() && *a == key) {
                Some(i) => available[i] = None,
                None => missing.push(Missing::Rule {
                    table: *table,
                    rule: rule.clone(),
                }),
            }
        }
    }
}

impl fmt::Display for EffectiveState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        if !self.sysctls.is_empty() {
            out.push_str("*sysctl\n");
            for (k, v) in &self.sysctls {
                match v {
                    Some(v) => {
                        let _ = writeln!(out, "{k}={v}");
                    }
                    None => {
                        let _ = writeln!(out, "# {k}: no such sysctl");
                    }
                }
            }
            out.push_str("COMMIT\n");
        }
        if let Some(dev) = &self.kube_ipvs0 {
            out.push_str("*addresses\n");
            let _ = writeln!(
                out,
                "# {}: {}, {}",
                kube_ipvs0::DEVICE,
                if dev.up { "UP" } else { "DOWN" },
                if dev.noarp { "NOARP" } else { "ARP" }
            );
            for (a, prefix) in &dev.addresses {
                let _ = write!(out, "{a}");
                if *prefix != kube_ipvs0::host_prefix_len(*a) {
                    let _ = write!(out, "/{prefix}");
                }
                if !dev.local_routes.contains(a) {
                    out.push_str(" # no local route");
                }
                out.push('\n');
            }
            out.push_str("COMMIT\n");
        }
        if !self.ipsets.is_empty() {
            out.push_str("*ipset\n");
            for s in &self.ipsets {
                let _ = write!(out, "create {} {}", s.name, s.type_name);
                if !s.create_options.is_empty() {
                    let _ = write!(out, " {}", s.create_options);
                }
                out.push('\n');
                for e in &s.entries {
                    let _ = writeln!(out, "add {} {e}", s.name);
                }
            }
            out.push_str("COMMIT\n");
        }
        let families = [("", &self.iptables), ("ip6:", &self.ip6tables)];
        for (table, rules) in families
            .iter()
            .flat_map(|(prefix, tables)| tables.iter().map(move |t| (prefix, t)))
            .map(|(prefix, (table, rules))| (format!("{prefix}{}", table.name()), rules))
        {
            let _ = writeln!(out, "*{table}");
            for c in &rules.chains {
                let _ = writeln!(out, ":{} {}", c.name, c.policy.as_deref().unwrap_or("-"));
            }
            for r in &rules.rules {
                let _ = writeln!(out, "{r}");
            }
            out.push_str("COMMIT\n");
        }
        if let Some(ipvs) = &self.ipvs {
            let changed = (ipvs.timeouts != KERNEL_IPVS_TIMEOUTS).then_some(ipvs.timeouts);
            if !ipvs.save.is_empty() || changed.is_some() {
                out.push_str("*ipvs\n");
                if let Some(t) = changed {
                    let _ = writeln!(out, "{}", render_timeouts(&t));
                }
                out.push_str(&ipvs.save);
                out.push_str("COMMIT\n");
            }
        }
        if !self.nft.is_empty() {
            out.push_str("*nft\n");
            for line in self.nft.values().flatten() {
                let _ = writeln!(out, "{line}");
            }
            out.push_str("COMMIT\n");
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_iptables_save() {
        let save = "# Generated by iptables-save v1.8.9 (nf_tables)\n*filter\n:INPUT ACCEPT [3:4]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:ZED - [0:0]\n:ALPHA - [0:0]\n-A ZED -j ACCEPT\n-A ALPHA -j ZED\n-A OUTPUT -j ALPHA\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n*security\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n";
        let t = normalize_iptables_save(save);
        assert_eq!(t.keys().copied().collect::<Vec<_>>(), vec![Table::Filter]);
        let f = &t[&Table::Filter];
        let names: Vec<&str> = f.chains.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["FORWARD", "OUTPUT", "ALPHA", "ZED"]);
        assert_eq!(
            f.rules,
            ["-A OUTPUT -j ALPHA", "-A ALPHA -j ZED", "-A ZED -j ACCEPT"]
        );
    }

    #[test]
    fn normalizes_ipset_save() {
        let save = "create B hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xf742879b\nadd B 10.0.0.2\nadd B 10.0.0.1\ncreate A bitmap:port range 0-65535\n";
        let sets = normalize_ipset_save(save);
        assert_eq!(sets[0].name, "A");
        assert_eq!(
            sets[1].create_options,
            "family inet hashsize 1024 maxelem 65536"
        );
        assert_eq!(sets[1].entries, ["10.0.0.1", "10.0.0.2"]);
    }
}
