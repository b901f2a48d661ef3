//! Writing a [`Programming`] into a node's namespace, all or nothing.
//!
//! Order: sysctls, kube-ipvs0 and its addresses, ipsets (`ipset restore`), iptables
//! (`iptables-restore`, `--noflush` unless [`RestoreMode::Flush`]), nftables (one `nft -f`
//! transaction), IPVS (generic netlink via `ipvs-genl`), conntrack cleanup (ctnetlink). Sets
//! come before the rules that name them, the device before IPVS so service addresses are local
//! when the first packet arrives, and the conntrack cleanup last, as kube-proxy ends its sync with it: a deleted entry cannot be put
//! back, so it only runs once everything else is written, and a failure there rolls the rest
//! back and says how many entries were already gone.
//!
//! Objects the programming names end up exactly as it says (a listed ipset is flushed before its
//! entries are added, a listed IPVS service loses destinations it does not list, kube-ipvs0
//! holds exactly the listed addresses, a declared chain is flushed by `iptables-restore`); a
//! rule for a chain it does not declare (a built-in chain under `--noflush`) is appended only if
//! not already there, like kube-proxy's `EnsureRule`, so applying twice changes nothing; objects
//! it does not name are left alone.
//!
//! Before writing, the applier records what each step will touch; if any step fails, every step
//! started so far is undone in reverse order (IPVS flushed and restored, the touched tables
//! restored from `iptables-save -c`, the `*nft` script's tables put back as `nft list table`
//! printed them, sets it created destroyed and pre-existing ones refilled, kube-ipvs0 deleted
//! or its addresses put back, sysctls reset), so no half-applied state remains. The error names the node, the step, the input line that failed (and the file line it
//! came from when the programming was parsed from text) and the tool's or kernel's message.

use super::kube_ipvs0::{self, DeviceKind, DevicePolicy};
use super::model::pruned_by;
use super::rollback::{self, Before};
use super::rule_key::rule_key;
use super::source::{Item, Origin, SourceMap};
pub use super::step::Step;
use super::step::{open_ipvs_for, StepError};
use super::text::{
    render_conntrack_line, render_delete_others, render_destination_line, render_service_line,
    render_table, render_timeouts,
};
use super::tools::{self, blamed_line, tool_message, IptablesBackend, Xtables};
use super::{Programming, RestoreMode, Table};
use crate::netns::Netns;
use crate::scenario::IpFamily;
use crate::topology::NodeNs;
use ipvs_genl::{Destination, ServiceKey};
use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

/// How to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApplyOptions {
    pub backend: IptablesBackend,
    pub device: DevicePolicy,
}

impl ApplyOptions {
    /// kube-ipvs0 as a dummy device where the kernel has dummy (and then insisting on it), the
    /// bridge fallback where it has not ([`crate::kernel_features::apply_options`] asks the
    /// running kernel).
    pub fn with_dummy(has_dummy: bool) -> ApplyOptions {
        ApplyOptions {
            device: if has_dummy {
                DevicePolicy::RequireDummy
            } else {
                DevicePolicy::Bridge
            },
            ..ApplyOptions::default()
        }
    }
}

/// What an apply wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedReport {
    pub node: String,
    pub backend: IptablesBackend,
    /// The kind of kube-ipvs0 used; `None` when the programming binds no addresses.
    pub device_kind: Option<DeviceKind>,
    pub sysctls: usize,
    pub addresses: usize,
    pub sets: usize,
    pub set_entries: usize,
    pub tables: Vec<Table>,
    pub rules: usize,
    pub services: usize,
    pub destinations: usize,
    /// The tables the `*nft` script wrote, and its length in lines.
    pub nft_tables: Vec<super::nft::NftTable>,
    pub nft_lines: usize,
    /// Conntrack entries the cleanup deleted.
    pub conntrack_deleted: usize,
    /// How long recording the pre-apply state (for rollback) took.
    pub snapshot_time: Duration,
    /// How long each step that ran took, in order (printed by `kpct bench`, never asserted).
    pub step_times: Vec<(Step, Duration)>,
}

impl fmt::Display for AppliedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}: {} sysctls", self.node, self.sysctls)?;
        match &self.device_kind {
            Some(kind) => write!(f, ", kube-ipvs0 [{kind}] with {} addresses", self.addresses)?,
            None => write!(f, ", no kube-ipvs0")?,
        }
        write!(f, ", {} ipsets ({} entries)", self.sets, self.set_entries)?;
        let tables: Vec<&str> = self.tables.iter().map(|t| t.name()).collect();
        write!(
            f,
            ", iptables-{} [{}] {} rules, IPVS {} services {} destinations",
            self.backend.name(),
            tables.join(","),
            self.rules,
            self.services,
            self.destinations
        )?;
        if !self.nft_tables.is_empty() {
            let tables: Vec<String> = self.nft_tables.iter().map(ToString::to_string).collect();
            write!(f, ", nft [{}] {} lines", tables.join(","), self.nft_lines)?;
        }
        Ok(())
    }
}

/// The input an apply failed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedInput {
    /// E.g. ``table nat line 12: `-A ...` ``.
    pub what: String,
    /// Where that input was read from, if it was read from text.
    pub origin: Option<Origin>,
}

/// An apply failed; the namespace was rolled back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ApplyError {
    pub node: String,
    pub step: Step,
    /// The offending input, when the failure can be pinned to one (boxed: errors stay small).
    pub input: Option<Box<FailedInput>>,
    /// The tool's or kernel's message.
    pub message: String,
    /// Problems while rolling back (empty when the namespace is back as it was).
    pub rollback_problems: Vec<String>,
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}: {} failed", self.node, self.step)?;
        if let Some(input) = &self.input {
            write!(f, " at {}", input.what)?;
            if let Some(origin) = &input.origin {
                write!(f, " (from {origin})")?;
            }
        }
        write!(f, ": {}", self.message)?;
        if self.rollback_problems.is_empty() {
            write!(f, " [rolled back]")
        } else {
            write!(
                f,
                " [ROLLBACK INCOMPLETE: {}]",
                self.rollback_problems.join("; ")
            )
        }
    }
}

/// Applies `p` to a topology node with the default options (nft iptables; dummy kube-ipvs0, or
/// the bridge fallback where the kernel has no dummy).
pub fn apply(node: &NodeNs, p: &Programming) -> Result<AppliedReport, ApplyError> {
    Applier::default().apply(&node.netns, &node.name, p, None)
}

/// Applies programmings with fixed options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Applier {
    pub options: ApplyOptions,
}

impl Applier {
    pub fn new(options: ApplyOptions) -> Applier {
        Applier { options }
    }

    /// Applies `p` into `ns` (the namespace of node `node`). `sources` maps items to the text
    /// lines they were parsed from, for error messages.
    pub fn apply(
        &self,
        ns: &Netns,
        node: &str,
        p: &Programming,
        sources: Option<&SourceMap>,
    ) -> Result<AppliedReport, ApplyError> {
        let fail = |step: Step, e: StepError, rollback_problems: Vec<String>| ApplyError {
            node: node.to_string(),
            step,
            input: e.input.map(|what| {
                Box::new(FailedInput {
                    what,
                    origin: e
                        .item
                        .as_ref()
                        .and_then(|i| sources.and_then(|s| s.get(i)))
                        .cloned(),
                })
            }),
            message: e.message,
            rollback_problems,
        };
        let started = Instant::now();
        let before = rollback::record(ns, p, self.options.backend)
            .map_err(|(step, e)| fail(step, e, Vec::new()))?;
        let snapshot_time = started.elapsed();
        let mut report = AppliedReport {
            node: node.to_string(),
            backend: self.options.backend,
            device_kind: None,
            sysctls: 0,
            addresses: 0,
            sets: 0,
            set_entries: 0,
            tables: Vec::new(),
            rules: 0,
            services: 0,
            destinations: 0,
            nft_tables: Vec::new(),
            nft_lines: 0,
            conntrack_deleted: 0,
            snapshot_time,
            step_times: Vec::new(),
        };
        let mut started = Vec::new();
        let result = (|| -> Result<(), (Step, StepError)> {
            let steps: [(Step, bool); 8] = [
                (Step::Sysctls, !p.sysctls.is_empty()),
                (Step::KubeIpvs0, p.ipvs_addresses.is_some()),
                (Step::Ipsets, !p.ipsets.is_empty()),
                (Step::Iptables, !p.iptables.is_empty()),
                (Step::Ip6tables, !p.ip6tables.is_empty()),
                (Step::Nft, !p.nft.is_empty()),
                (Step::Ipvs, p.touches_ipvs()),
                (Step::Conntrack, !p.conntrack_cleanup.is_empty()),
            ];
            for (step, needed) in steps {
                if !needed {
                    continue;
                }
                started.push(step);
                let step_started = Instant::now();
                let done = match step {
                    Step::Sysctls => apply_sysctls(ns, p),
                    Step::KubeIpvs0 => self
                        .apply_device(ns, p)
                        .map(|kind| report.device_kind = Some(kind)),
                    Step::Ipsets => apply_ipsets(ns, p),
                    Step::Iptables => self.apply_iptables(ns, p, Xtables::Ip, &before),
                    Step::Ip6tables => self.apply_iptables(ns, p, Xtables::Ip6, &before),
                    Step::Nft => apply_nft(ns, p),
                    Step::Ipvs => apply_ipvs(ns, p),
                    Step::Conntrack => apply_conntrack(ns, p).map(|n| report.conntrack_deleted = n),
                };
                done.map_err(|e| (step, e))?;
                report.step_times.push((step, step_started.elapsed()));
            }
            Ok(())
        })();
        if let Err((step, e)) = result {
            let problems = rollback::roll_back(ns, p, &before, &started, self.options.backend);
            return Err(fail(step, e, problems));
        }
        report.sysctls = p.sysctls.len();
        report.addresses = p.kube_ipvs0_addresses().len();
        report.sets = p.ipsets.len();
        report.set_entries = p.ipsets.iter().map(|s| s.entries.len()).sum();
        report.tables = p.iptables.keys().copied().collect();
        report.rules = Xtables::ALL
            .iter()
            .flat_map(|f| p.xtables(*f).values())
            .map(|t| t.rules.len())
            .sum();
        report.services = p.ipvs.len();
        report.destinations = p.ipvs.iter().map(|v| v.destinations.len()).sum();
        report.nft_tables = p.nft.tables.clone();
        report.nft_lines = p.nft.lines.len();
        Ok(report)
    }

    fn apply_device(&self, ns: &Netns, p: &Programming) -> Result<DeviceKind, StepError> {
        let addresses = p.kube_ipvs0_addresses();
        let ensured = kube_ipvs0::ensure(ns, addresses, self.options.device).map_err(|e| {
            let item = addresses
                .iter()
                .position(|a| {
                    e.what
                        .contains(&format!("{a}/{}", kube_ipvs0::host_prefix_len(*a)))
                })
                .map(|index| Item::Address { index });
            StepError {
                input: item.as_ref().map(|i| match i {
                    Item::Address { index } => format!("address {}", addresses[*index]),
                    _ => String::new(),
                }),
                item,
                message: e.to_string(),
            }
        })?;
        // The point of the device: each address must now be local (a route in table local).
        let deadline = Instant::now() + Duration::from_secs(2);
        let state = kube_ipvs0::await_local_routes(ns, addresses, deadline)
            .map_err(|e| StepError::plain(e.to_string()))?
            .ok_or_else(|| {
                StepError::plain(format!(
                    "{} vanished after it was programmed",
                    kube_ipvs0::DEVICE
                ))
            })?;
        if let Some((index, a)) = addresses
            .iter()
            .enumerate()
            .find(|(_, a)| !state.local_routes.contains(a))
        {
            return Err(StepError {
                input: Some(format!("address {a}")),
                item: Some(Item::Address { index }),
                message: format!(
                    "{a} has no local route in table local 2 s after binding it to {}",
                    kube_ipvs0::DEVICE
                ),
            });
        }
        Ok(ensured.kind)
    }

    /// One restore of the tables of `family` (`iptables-restore` or `ip6tables-restore`).
    /// Only IPv4 tables can come from a text programming, so only their lines name an item in
    /// an error.
    fn apply_iptables(
        &self,
        ns: &Netns,
        p: &Programming,
        family: Xtables,
        before: &Before,
    ) -> Result<(), StepError> {
        let mut input = String::new();
        // Per input line: (table, line within the programming's section, item).
        let mut lines: Vec<(Table, usize, Option<Item>)> = Vec::new();
        let tables = p.xtables(family);
        for (table, rules) in tables {
            let mut already = self.ensured_rules(p, family, *table, before.save(family));
            input.push_str(&format!("*{}\n", table.name()));
            lines.push((*table, 1, None));
            let section = render_table(*table, rules);
            let section: Vec<&str> = section.lines().collect();
            for (index, decl) in section[1..=rules.chains.len()].iter().enumerate() {
                input.push_str(decl);
                input.push('\n');
                lines.push((
                    *table,
                    2 + index,
                    Some(Item::Chain {
                        table: *table,
                        index,
                    }),
                ));
            }
            for (index, rule) in rules.rules.iter().enumerate() {
                // kube-proxy's EnsureRule: a rule in a chain the restore does not flush is only
                // appended if it is not there yet, so applying twice changes nothing.
                if let Some(pos) = rule_key(rule).and_then(|k| already.iter().position(|a| *a == k))
                {
                    already.swap_remove(pos);
                    continue;
                }
                input.push_str(rule);
                input.push('\n');
                lines.push((
                    *table,
                    2 + rules.chains.len() + index,
                    Some(Item::Rule {
                        table: *table,
                        index,
                    }),
                ));
            }
            input.push_str("COMMIT\n");
            lines.push((*table, 2 + rules.chains.len() + rules.rules.len(), None));
        }
        let mut args = vec!["-w"];
        if p.restore_mode == RestoreMode::NoFlush {
            args.push("--noflush");
        }
        let restore = family.restore(self.options.backend);
        tools::run(ns, restore, &args, Some(&input)).map_err(|e| {
            let input_lines: Vec<&str> = input.lines().collect();
            let Some(mut n) = blamed_line(&e.stderr).filter(|n| (1..=lines.len()).contains(n))
            else {
                return StepError::plain(e.to_string());
            };
            // nf_tables checks jumps when the table is committed and blames `COMMIT`; the
            // rule that names the missing object is the useful line.
            if lines[n - 1].2.is_none() {
                if let Some(rule) = rule_naming(&e.stderr, &input_lines, &lines, lines[n - 1].0) {
                    n = rule;
                }
            }
            let (table, in_section, item) = &lines[n - 1];
            StepError {
                input: Some(format!(
                    "{}table {} line {in_section}: `{}`",
                    if family == Xtables::Ip6 {
                        "ip6tables "
                    } else {
                        ""
                    },
                    table.name(),
                    crate::quote::quote(input_lines[n - 1])
                )),
                item: item.clone().filter(|_| family == Xtables::Ip),
                message: tool_message(&e.stderr),
            }
        })?;
        Ok(())
    }

    /// Keys of the rules already in `table` that a `--noflush` restore keeps: those of chains
    /// the programming does not declare, and of every built-in chain (a `:INPUT ACCEPT` line
    /// under `--noflush` sets the policy but does not flush the chain, unlike a user chain's
    /// line). Empty for a flushing restore.
    fn ensured_rules(
        &self,
        p: &Programming,
        family: Xtables,
        table: Table,
        save: &str,
    ) -> Vec<(String, Vec<String>)> {
        if p.restore_mode == RestoreMode::Flush {
            return Vec::new();
        }
        let declared: BTreeSet<&str> = p
            .xtables(family)
            .get(&table)
            .map(|t| t.chains.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        let Some(section) = rollback::save_section(save, table) else {
            return Vec::new();
        };
        section
            .lines()
            .map(|l| match l.split_once(' ') {
                Some((counters, rest)) if counters.starts_with('[') => rest,
                _ => l,
            })
            .filter_map(rule_key)
            .filter(|(chain, _)| {
                !declared.contains(chain.as_str())
                    || super::builtin_chains(table).contains(&chain.as_str())
            })
            .collect()
    }
}

/// The 1-based input line of the first rule of `table` that mentions the name the tool's message
/// quotes (`Chain 'X' does not exist`, `Set X doesn't exist`).
fn rule_naming(
    stderr: &str,
    input: &[&str],
    lines: &[(Table, usize, Option<Item>)],
    table: Table,
) -> Option<usize> {
    let quoted = stderr.split(['\'', '`']).nth(1)?;
    let names: Vec<&str> = std::iter::once(quoted)
        .chain(stderr.split_whitespace().skip_while(|w| *w != "Set").nth(1))
        .filter(|n| !n.is_empty())
        .collect();
    lines
        .iter()
        .zip(input)
        .position(|((t, _, item), text)| {
            *t == table
                && matches!(item, Some(Item::Rule { .. }))
                && text.split_whitespace().any(|w| names.contains(&w))
        })
        .map(|i| i + 1)
}

/// One `nft -f` transaction: all of the script or none of it. nft names the failing line
/// (`/dev/stdin:LINE:COLUMNS: Error: …`).
fn apply_nft(ns: &Netns, p: &Programming) -> Result<(), StepError> {
    tools::run(ns, "nft", &["-f", "-"], Some(&p.nft.text())).map_err(|e| {
        let located: Vec<(usize, &str)> = e
            .stderr
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("/dev/stdin:")?;
                let (line, rest) = rest.split_once(':')?;
                let message = rest.split_once(": ").map_or(rest, |(_, m)| m);
                Some((line.parse().ok()?, message))
            })
            .collect();
        let Some(&(n, _)) = located
            .first()
            .filter(|(n, _)| (1..=p.nft.lines.len()).contains(n))
        else {
            return StepError::plain(e.to_string());
        };
        StepError {
            input: Some(format!(
                "nft line {n}: `{}`",
                crate::quote::quote(&p.nft.lines[n - 1])
            )),
            item: Some(Item::NftLine { index: n - 1 }),
            message: located
                .iter()
                .map(|(_, m)| m.trim())
                .collect::<Vec<_>>()
                .join("; "),
        }
    })?;
    Ok(())
}

fn apply_sysctls(ns: &Netns, p: &Programming) -> Result<(), StepError> {
    for (key, value) in &p.sysctls {
        ns.set_sysctl(key, value).map_err(|e| StepError {
            input: Some(format!("sysctl {key}={value}")),
            item: Some(Item::Sysctl { key: key.clone() }),
            message: format!("{e:#}"),
        })?;
    }
    Ok(())
}

fn apply_ipsets(ns: &Netns, p: &Programming) -> Result<(), StepError> {
    let mut input = String::new();
    let mut items: Vec<Item> = Vec::new();
    for (set, s) in p.ipsets.iter().enumerate() {
        input.push_str(&format!("create {} {}", s.name, s.set_type.name()));
        if !s.create_options.is_empty() {
            input.push_str(&format!(" {}", s.create_options));
        }
        input.push('\n');
        items.push(Item::Set { set });
        // `create -exist` keeps a pre-existing set's entries; the programming defines them all.
        input.push_str(&format!("flush {}\n", s.name));
        items.push(Item::Set { set });
        for (entry, e) in s.entries.iter().enumerate() {
            input.push_str(&format!("add {} {e}\n", s.name));
            items.push(Item::SetEntry { set, entry });
        }
    }
    tools::run(ns, "ipset", &["restore", "-exist"], Some(&input)).map_err(
        |e| match blamed_line(&e.stderr).and_then(|n| Some((n, items.get(n.checked_sub(1)?)?))) {
            Some((n, item)) => StepError {
                // Our restore input has extra `flush` lines: name the set, not its line.
                input: Some(match item {
                    Item::SetEntry { set, entry } => format!(
                        "set {} entry `{}`",
                        p.ipsets[*set].name,
                        crate::quote::quote(&p.ipsets[*set].entries[*entry])
                    ),
                    _ => format!(
                        "`{}`",
                        crate::quote::quote(input.lines().nth(n - 1).unwrap_or_default())
                    ),
                }),
                item: Some(item.clone()),
                message: tool_message(&e.stderr),
            },
            None => StepError::plain(e.to_string()),
        },
    )?;
    Ok(())
}

/// Deletes every entry one of the programming's cleanups names.
fn apply_conntrack(ns: &Netns, p: &Programming) -> Result<usize, StepError> {
    let entries =
        crate::netfilter::conntrack::entries(ns).map_err(|e| StepError::plain(format!("{e:#}")))?;
    let mut deleted = 0;
    for entry in &entries {
        let Some(index) = p.conntrack_cleanup.iter().position(|c| c.deletes(entry)) else {
            continue;
        };
        crate::netfilter::conntrack::delete(ns, &entry.original).map_err(|e| StepError {
            input: Some(format!(
                "conntrack `{}`",
                render_conntrack_line(&p.conntrack_cleanup[index])
            )),
            item: Some(Item::ConntrackCleanup { index }),
            message: format!("{e:#} ({deleted} entries were deleted before)"),
        })?;
        deleted += 1;
    }
    Ok(deleted)
}

fn apply_ipvs(ns: &Netns, p: &Programming) -> Result<(), StepError> {
    let Some(mut handle) = open_ipvs_for(ns, p)? else {
        return Ok(());
    };
    if let Some(t) = &p.ipvs_timeouts {
        handle.set_timeouts(t).map_err(|e| StepError {
            input: Some(format!("IPVS `{}`", render_timeouts(t))),
            item: Some(Item::IpvsTimeouts),
            message: e.to_string(),
        })?;
    }
    let existing = handle
        .table()
        .map_err(|e| StepError::plain(format!("reading the IPVS table: {e}")))?;
    for (service, vs) in p.ipvs.iter().enumerate() {
        let svc_err = |e: ipvs_genl::Error| StepError {
            input: Some(format!(
                "IPVS service `{}`",
                render_service_line(&vs.service).trim()
            )),
            item: Some(Item::Service { service }),
            message: e.to_string(),
        };
        let present = existing
            .iter()
            .find(|(s, _)| s.service.key == vs.service.key);
        match present {
            Some(_) => handle.update_service(&vs.service).map_err(svc_err)?,
            None => handle.add_service(&vs.service).map_err(svc_err)?,
        }
        let present_dests: Vec<Destination> = present
            .map(|(_, d)| d.iter().map(|d| d.destination.clone()).collect())
            .unwrap_or_default();
        for (destination, d) in vs.destinations.iter().enumerate() {
            let dest_err = |e: ipvs_genl::Error| StepError {
                input: Some(format!(
                    "IPVS destination `{}`",
                    render_destination_line(&vs.service, d).trim()
                )),
                item: Some(Item::Destination {
                    service,
                    destination,
                }),
                message: e.to_string(),
            };
            if present_dests.iter().any(|x| x.key() == d.key()) {
                handle
                    .update_destination(&vs.service.key, d)
                    .map_err(dest_err)?;
            } else {
                handle
                    .add_destination(&vs.service.key, d)
                    .map_err(dest_err)?;
            }
        }
        for stale in present_dests
            .iter()
            .filter(|x| !vs.destinations.iter().any(|d| d.key() == x.key()))
        {
            handle
                .delete_destination(&vs.service.key, &stale.key())
                .map_err(svc_err)?;
        }
    }
    for (other, _) in existing
        .iter()
        .filter(|(s, _)| pruned_by(p, &s.service.key))
    {
        // The line that deletes it: `--clear`, else its family's `--delete-others` (which
        // prunes address services only).
        let (line, item) = if p.ipvs_clear {
            ("--clear".to_string(), Item::IpvsClear)
        } else {
            let ServiceKey::Addr { addr, .. } = other.service.key else {
                continue;
            };
            let family = IpFamily::of(addr);
            let keep = p
                .ipvs_delete_others
                .get(&family)
                .map(Vec::as_slice)
                .unwrap_or_default();
            (
                render_delete_others(family, keep),
                Item::IpvsDeleteOthers(family),
            )
        };
        handle
            .delete_service(&other.service.key)
            .map_err(|e| StepError {
                input: Some(format!(
                    "IPVS `{line}` deleting `{}`",
                    render_service_line(&other.service).trim()
                )),
                item: Some(item),
                message: e.to_string(),
            })?;
    }
    Ok(())
}
