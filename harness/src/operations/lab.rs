//! Labs: a scenario's topology and programming left running for hands-on debugging.
//!
//! `lab up` builds under the stable prefix `kpct-lab-<scenario>.`, applies the proxier's
//! programming to every node and persists the namespaces; `lab down` removes them. Everything
//! stays inside those namespaces, reachable with `ip netns exec`.

use crate::netns::naming::RunPrefix;
use crate::netns::{self, NETNS_DIR, SUITE_PREFIX};
use crate::run::NodeProgrammer;
use crate::scenario::{IpFamily, Scenario};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;

/// A running lab: which namespace plays which role.
#[derive(Debug, Clone)]
pub struct Lab {
    pub scenario: String,
    pub proxier: String,
    /// (role, namespace), e.g. ("node node-a", "kpct-lab-rke2-ipvs-node.node-node-a").
    pub namespaces: Vec<(String, String)>,
    /// The families kube-proxy runs a proxier for: which tables the troubleshooting commands
    /// look at.
    pub families: Vec<IpFamily>,
    /// Whether kpct's echo backends (and health-check listeners) serve in it: only while the
    /// `lab up --backends` that started them runs.
    pub serving: bool,
    /// What the proxier programmed, so which troubleshooting commands fit.
    pub dataplane: Dataplane,
}

/// The dataplane a lab's proxier programmed, read from what its nodes hold (so an `exec:` or
/// real proxier is told apart as a built-in is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataplane {
    /// IPVS virtual servers (with kube-proxy's iptables rules and ipsets beside them).
    Ipvs,
    /// An nftables table of its own.
    Nftables,
    /// iptables rules only.
    Iptables,
}

impl Dataplane {
    /// What `proxier` programmed into nodes that now hold `nodes`.
    pub fn of<P: NodeProgrammer + ?Sized>(
        proxier: &P,
        nodes: &[crate::document::NodeSummary],
    ) -> Dataplane {
        if proxier.needs_ipvs() || nodes.iter().any(|n| n.ipvs_virtual_servers > 0) {
            Dataplane::Ipvs
        } else if nodes.iter().any(|n| n.nft_lines > 0) {
            Dataplane::Nftables
        } else {
            Dataplane::Iptables
        }
    }
}

/// What `lab up` serves in the lab besides the programming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    Nothing,
    /// The scenario's echo backends, until the returned [`crate::backends::Backends`] is
    /// dropped (the process ends).
    Backends,
}

fn prefix(scenario: &str) -> String {
    RunPrefix::lab(scenario).as_str().to_string()
}

/// Namespaces of the lab for `scenario` that exist now.
pub fn existing(scenario: &str) -> Result<Vec<String>> {
    existing_all(&prefix(scenario))
}

/// Builds and programs the lab of `scenario`, leaving it up.
pub async fn up<P: NodeProgrammer + ?Sized>(scenario: &Scenario, proxier: &P) -> Result<Lab> {
    Ok(up_with(scenario, proxier, Serving::Nothing, None).await?.0)
}

/// [`up`], and with [`Serving::Backends`] the scenario's echo backends and health-check
/// listeners, as a run starts them; they serve for as long as the returned value lives. With
/// `step` (1-based), the lab is left as the scenario stands after that step: every step up to
/// it applied and synced by the proxier, as a run does.
pub async fn up_with<P: NodeProgrammer + ?Sized>(
    scenario: &Scenario,
    proxier: &P,
    serving: Serving,
    step: Option<usize>,
) -> Result<(Lab, Option<crate::backends::Backends>)> {
    if !existing(&scenario.name)?.is_empty() {
        bail!(
            "a lab for {} is already up; `kpct lab down {}` first",
            scenario.name,
            scenario.name
        );
    }
    if let Some(n) = step.filter(|n| *n == 0 || *n > scenario.steps.len()) {
        bail!(
            "scenario {} has no step {n} (it has {}; steps count from 1)",
            scenario.name,
            scenario.steps.len()
        );
    }
    let mut staged =
        crate::run::stage_with_prefix(scenario, proxier, RunPrefix::lab(&scenario.name)).await?;
    for k in 0..step.unwrap_or(0) {
        staged
            .advance(scenario, k)
            .await
            .with_context(|| format!("applying step {} of {}", k + 1, scenario.name))?;
    }
    let dataplane = Dataplane::of(proxier, &staged.nodes);
    let crate::run::Staged { backends, topo, .. } = staged;
    let serving = match serving {
        Serving::Nothing => {
            drop(backends);
            None
        }
        Serving::Backends => Some(backends),
    };
    // Only once everything applied: a failure above drops (removes) the half-built lab.
    Ok((
        Lab {
            scenario: scenario.name.clone(),
            proxier: proxier.label(),
            namespaces: topo.persist(),
            families: crate::scenario::cluster_state(scenario)
                .families()
                .map(|c| c.ip_family)
                .collect(),
            serving: serving.is_some(),
            dataplane,
        },
        serving,
    ))
}

/// Removes the lab of `scenario`; returns the namespaces removed.
pub fn down(scenario: &str) -> Result<Vec<String>> {
    let names = existing(scenario)?;
    netns::remove_leftovers(&names);
    Ok(names)
}

/// Every lab that is up, by scenario name.
pub fn list() -> Result<Vec<String>> {
    let marker = format!("{SUITE_PREFIX}{}", netns::LAB_PREFIX);
    let mut labs: Vec<String> = existing_all(&marker)?
        .into_iter()
        .filter_map(|n| {
            n.strip_suffix(&format!("{}fabric", crate::netns::naming::LAB_SEPARATOR))
                .and_then(|n| n.strip_prefix(&marker))
                .map(str::to_string)
        })
        .collect();
    labs.sort();
    Ok(labs)
}

/// Namespaces in /run/netns starting with `prefix`, sorted.
fn existing_all(prefix: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = match std::fs::read_dir(NETNS_DIR) {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).context("listing /run/netns"),
    };
    names.sort();
    Ok(names)
}

/// The design notes' troubleshooting commands that fit `dataplane` for each of `families`:
/// IPVS mode's virtual servers, ipsets and kube-ipvs0, nftables mode's table and verdict maps,
/// or iptables mode's chains (in the `ip6` table, ip6tables and the `KUBE-6-` sets for IPv6).
pub fn troubleshooting(dataplane: Dataplane, families: &[IpFamily]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let ipvs = dataplane == Dataplane::Ipvs;
    if ipvs {
        out.push("ipvsadm -Ln".into());
    }
    for &family in families {
        let (nft, xtables, set_prefix) = match family {
            IpFamily::Ipv4 => ("ip", "iptables", "KUBE-"),
            IpFamily::Ipv6 => ("ip6", "ip6tables", "KUBE-6-"),
        };
        if dataplane == Dataplane::Nftables {
            out.extend([
                format!("nft list table {nft} kube-proxy"),
                format!("nft list map {nft} kube-proxy service-ips"),
                format!("nft list map {nft} kube-proxy service-nodeports"),
                format!("nft list chain {nft} kube-proxy masquerading"),
            ]);
        } else if ipvs {
            out.extend([
                format!("{xtables} -t nat -L KUBE-SERVICES -n -v"),
                format!("{xtables} -t nat -L KUBE-POSTROUTING -n -v"),
                format!("ipset list {set_prefix}CLUSTER-IP"),
            ]);
        } else {
            out.extend([
                format!("{xtables} -t nat -L KUBE-SERVICES -n -v"),
                format!("{xtables} -t nat -L KUBE-NODEPORTS -n -v"),
                format!("{xtables} -t nat -L KUBE-POSTROUTING -n -v"),
                format!("{xtables} -t filter -L KUBE-FORWARD -n -v"),
            ]);
        }
    }
    if ipvs {
        out.push("ip addr show kube-ipvs0".into());
    }
    // Both families' entries.
    out.push("conntrack -L".into());
    out
}

pub fn instructions(lab: &Lab) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "lab {} is up, programmed by {}:",
        lab.scenario, lab.proxier
    );
    for (role, ns) in &lab.namespaces {
        let _ = writeln!(out, "  {role:<24} ip netns exec {ns} bash");
    }
    if let Some((_, node)) = lab.namespaces.iter().find(|(r, _)| r.starts_with("node ")) {
        let _ = writeln!(out, "\ntroubleshooting, inside a node:");
        for cmd in troubleshooting(lab.dataplane, &lab.families) {
            let _ = writeln!(out, "  ip netns exec {node} {cmd}");
        }
    }
    // `kpct run` serves the echo backends only while its probes run; a lab outlives kpct.
    if lab.serving {
        let _ = writeln!(
            out,
            "\nbackends are serving: every pod port answers (TCP with `client=ADDR pod=NAME port=N`, UDP \
             echoes), and the nodes' healthCheckNodePorts listen, until you stop this command \
             (Ctrl-C); the lab stays up after that, without them"
        );
    } else {
        let _ = writeln!(
            out,
            "\nno backends are running: the pods have their addresses and routes but nothing \
             listens in them (kpct serves its echo backends only during a run, or while `kpct lab \
             up --backends` runs); start a server in a pod's namespace to try connections"
        );
    }
    let _ = writeln!(out, "\nremove it with: kpct lab down {}", lab.scenario);
    out
}
