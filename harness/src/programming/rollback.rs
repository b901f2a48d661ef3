//! Recording what an apply is about to touch, and putting it back when a step fails.

use super::kube_ipvs0::{self, DeviceState};
use super::nft::{self, NftTable};
use super::step::{open_ipvs_for, Step, StepError};
use super::tools::{self, IptablesBackend, Xtables};
use super::{builtin_chains, Programming, Table};
use crate::netns::Netns;
use ipvs_genl::{Destination, Service, Timeouts};
use std::collections::BTreeSet;

/// What the namespace held before, for the parts the programming touches.
#[derive(Default)]
pub(super) struct Before {
    pub(super) sysctls: Vec<(String, Option<String>)>,
    pub(super) device: Option<DeviceState>,
    pub(super) set_names: BTreeSet<String>,
    pub(super) ipset_save: String,
    pub(super) iptables_save: String,
    pub(super) ip6tables_save: String,
    pub(super) ipvs: Vec<(Service, Vec<Destination>)>,
    /// Recorded only when the programming sets timeouts.
    pub(super) ipvs_timeouts: Option<Timeouts>,
    /// Each table the `*nft` script names, as `nft list table` printed it (`None`: absent).
    pub(super) nft_tables: Vec<(NftTable, Option<String>)>,
}

impl Before {
    /// `iptables-save -c` or `ip6tables-save -c` from before, for the tables of `family`.
    pub(super) fn save(&self, family: Xtables) -> &str {
        match family {
            Xtables::Ip => &self.iptables_save,
            Xtables::Ip6 => &self.ip6tables_save,
        }
    }
}

/// Records what `p` is about to touch.
pub(super) fn record(
    ns: &Netns,
    p: &Programming,
    backend: IptablesBackend,
) -> Result<Before, (Step, StepError)> {
    let mut before = Before {
        sysctls: p
            .sysctls
            .keys()
            .map(|k| (k.clone(), ns.get_sysctl(k).ok()))
            .collect(),
        ..Before::default()
    };
    let tool = |step: Step| {
        move |e: tools::ToolError| {
            (
                step,
                StepError::plain(format!("saving the state before applying: {e}")),
            )
        }
    };
    if p.ipvs_addresses.is_some() {
        before.device =
            kube_ipvs0::read(ns).map_err(|e| (Step::KubeIpvs0, StepError::plain(e.to_string())))?;
    }
    if !p.ipsets.is_empty() {
        // A fresh node holds no set: the kernel says so over netlink, sparing a tool run.
        before.ipset_save = if crate::netfilter::ipset::holds_no_ipsets(ns) == Some(true) {
            String::new()
        } else {
            tools::run(ns, "ipset", &["save"], None).map_err(tool(Step::Ipsets))?
        };
        // Every set has its `create NAME …` line in the save: no second tool run (each costs
        // ~0.2 s in the emulated VM).
        before.set_names = before
            .ipset_save
            .lines()
            .filter_map(|l| l.strip_prefix("create "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_string)
            .collect();
    }
    if !p.iptables.is_empty() {
        // iptables-nft prints the `ip` family's nf_tables tables: with none, it prints nothing.
        let none = backend == IptablesBackend::Nft
            && crate::netfilter::tables::holds_no_ip_tables(ns) == Some(true);
        before.iptables_save = if none {
            String::new()
        } else {
            tools::run(ns, backend.save(), &["-c"], None).map_err(tool(Step::Iptables))?
        };
    }
    if !p.ip6tables.is_empty() {
        // The same for the `ip6` family (a fresh dual-stack node has no ip6tables yet).
        let none = backend == IptablesBackend::Nft
            && nft::holds_no_xtables(ns, Xtables::Ip6) == Some(true);
        before.ip6tables_save = if none {
            String::new()
        } else {
            tools::run(ns, Xtables::Ip6.save(backend), &["-c"], None)
                .map_err(tool(Step::Ip6tables))?
        };
    }
    for table in &p.nft.tables {
        let saved = nft::save_table(ns, table).map_err(|e| {
            (
                Step::Nft,
                StepError::plain(format!("saving the state before applying: {e}")),
            )
        })?;
        before.nft_tables.push((table.clone(), saved));
    }
    // The IPVS step puts the whole table back, so it is recorded whenever the step runs.
    let handle = if p.touches_ipvs() {
        open_ipvs_for(ns, p).map_err(|e| (Step::Ipvs, e))?
    } else {
        None
    };
    if let Some(mut handle) = handle {
        if p.ipvs_timeouts.is_some() {
            before.ipvs_timeouts = Some(handle.timeouts().map_err(|e| {
                (
                    Step::Ipvs,
                    StepError::plain(format!("reading the IPVS timeouts: {e}")),
                )
            })?);
        }
        before.ipvs = handle
            .table()
            .map_err(|e| {
                (
                    Step::Ipvs,
                    StepError::plain(format!("reading the IPVS table: {e}")),
                )
            })?
            .into_iter()
            .map(|(s, d)| {
                (
                    s.service.normalized(),
                    d.into_iter().map(|d| d.destination).collect(),
                )
            })
            .collect();
    }
    Ok(before)
}

/// Undoes the started steps, newest first; returns what could not be undone.
pub(super) fn roll_back(
    ns: &Netns,
    p: &Programming,
    before: &Before,
    started: &[Step],
    backend: IptablesBackend,
) -> Vec<String> {
    let mut problems = Vec::new();
    for step in started.iter().rev() {
        let result = match step {
            // Deleted conntrack entries cannot be put back; the error says how far it got.
            Step::Conntrack => Ok(()),
            Step::Ipvs => roll_back_ipvs(ns, p, before),
            Step::Iptables => roll_back_iptables(ns, p, Xtables::Ip, before, backend),
            Step::Ip6tables => roll_back_iptables(ns, p, Xtables::Ip6, before, backend),
            Step::Nft => roll_back_nft(ns, before),
            Step::Ipsets => roll_back_ipsets(ns, p, before),
            Step::KubeIpvs0 => match &before.device {
                None => kube_ipvs0::remove(ns).map_err(|e| e.to_string()),
                Some(dev) => {
                    kube_ipvs0::restore_addresses(ns, &dev.addresses).map_err(|e| e.to_string())
                }
            },
            Step::Sysctls => {
                let mut errs = Vec::new();
                for (k, v) in &before.sysctls {
                    // Only what changed: a sysctl whose write was refused still holds its value,
                    // and writing it again would fail the same way.
                    let Some(v) = v else { continue };
                    if ns.get_sysctl(k).ok().as_ref() == Some(v) {
                        continue;
                    }
                    if let Err(e) = ns.set_sysctl(k, v) {
                        errs.push(format!("{e:#}"));
                    }
                }
                if errs.is_empty() {
                    Ok(())
                } else {
                    Err(errs.join("; "))
                }
            }
        };
        if let Err(e) = result {
            problems.push(format!("undoing {step}: {e}"));
        }
    }
    problems
}

fn roll_back_iptables(
    ns: &Netns,
    p: &Programming,
    family: Xtables,
    before: &Before,
    backend: IptablesBackend,
) -> Result<(), String> {
    let mut input = String::new();
    let mut absent_before = Vec::new();
    for table in p.xtables(family).keys() {
        match save_section(before.save(family), *table) {
            Some(section) => input.push_str(&section),
            None => {
                absent_before.push(*table);
                input.push_str(&format!("*{}\n", table.name()));
                for chain in builtin_chains(*table) {
                    input.push_str(&format!(":{chain} ACCEPT [0:0]\n"));
                }
                input.push_str("COMMIT\n");
            }
        }
    }
    tools::run(ns, family.restore(backend), &["-w", "-c"], Some(&input))
        .map_err(|e| e.to_string())?;
    // With nf_tables a table exists only once something used it; drop the ones this apply
    // brought into existence (best effort: without the nft tool they stay, empty).
    if backend == IptablesBackend::Nft {
        for table in absent_before {
            let _ = tools::run(
                ns,
                "nft",
                &["delete", "table", family.nft_family(), table.name()],
                None,
            );
        }
    }
    Ok(())
}

/// The `*table` ... `COMMIT` section of `iptables-save` output, if the table is listed.
pub(super) fn save_section(save: &str, table: Table) -> Option<String> {
    let header = format!("*{}", table.name());
    let mut out = String::new();
    let mut inside = false;
    for line in save.lines() {
        if line.trim() == header {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
            if line.trim() == "COMMIT" {
                return Some(out);
            }
        }
    }
    None
}

/// Each table the script names goes back to its listing from before, in one transaction (a
/// table that did not exist is deleted).
fn roll_back_nft(ns: &Netns, before: &Before) -> Result<(), String> {
    let present = nft::list_tables(ns).map_err(|e| e.to_string())?;
    let mut script = String::new();
    for (table, saved) in &before.nft_tables {
        if present.contains(table) {
            script.push_str(&format!("delete table {table}\n"));
        }
        if let Some(saved) = saved {
            script.push_str(saved);
            script.push('\n');
        }
    }
    if script.is_empty() {
        return Ok(());
    }
    tools::run(ns, "nft", &["-f", "-"], Some(&script))
        .map(drop)
        .map_err(|e| e.to_string())
}

fn roll_back_ipsets(ns: &Netns, p: &Programming, before: &Before) -> Result<(), String> {
    let mut errs = Vec::new();
    let mut refill = String::new();
    for s in &p.ipsets {
        if before.set_names.contains(&s.name) {
            refill.push_str(&format!("flush {}\n", s.name));
            for line in before.ipset_save.lines() {
                if line.split_whitespace().take(2).eq(["add", s.name.as_str()]) {
                    refill.push_str(line);
                    refill.push('\n');
                }
            }
        } else if let Err(e) = tools::run(ns, "ipset", &["destroy", &s.name], None) {
            // A set the failed restore never reached does not exist: nothing to undo.
            if !e.stderr.contains("does not exist") {
                errs.push(e.to_string());
            }
        }
    }
    if !refill.is_empty() {
        if let Err(e) = tools::run(ns, "ipset", &["restore", "-exist"], Some(&refill)) {
            errs.push(e.to_string());
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

fn roll_back_ipvs(ns: &Netns, p: &Programming, before: &Before) -> Result<(), String> {
    // Where only a clear was asked of a kernel without IP_VS, nothing was changed.
    let Some(mut handle) = open_ipvs_for(ns, p).map_err(|e| e.message)? else {
        return Ok(());
    };
    handle.flush().map_err(|e| e.to_string())?;
    ipvs_genl::apply(&mut handle, &before.ipvs).map_err(|e| e.to_string())?;
    if let Some(t) = &before.ipvs_timeouts {
        handle.set_timeouts(t).map_err(|e| e.to_string())?;
    }
    Ok(())
}
