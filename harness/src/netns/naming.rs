//! Deterministic names and MAC addresses.
//!
//! Interface names and MACs depend only on the scenario (never on the run), so the same scenario
//! puts the same bytes on the wire every time. Namespace names carry a per-run prefix
//! (`kpct-<pid>_<start>-<seq>-`) so parallel tests and concurrent runs never collide, and so
//! `cleanup` can tell a crashed run's leftovers (that process is gone) from a live one's.

use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every name the suite gives a namespace (and a run's scratch directory).
pub const SUITE_PREFIX: &str = "kpct-";

/// After [`SUITE_PREFIX`]: namespaces of a lab (`kpct lab up`), kept until `kpct lab down`.
pub const LAB_PREFIX: &str = "lab-";

/// Interface names inside namespaces: fixed, like on a real flannel node.
pub const UNDERLAY_IF: &str = "eth0";
pub const BRIDGE_IF: &str = "cni0";
pub const VXLAN_IF: &str = "flannel.1";
pub const POD_IF: &str = "eth0";
pub const FABRIC_BRIDGE: &str = "underlay0";
/// flannel's VXLAN defaults: VNI 1 on the Linux-assigned port 8472.
pub const VXLAN_VNI: u32 = 1;
pub const VXLAN_PORT: u16 = 8472;

/// `kpct-<pid>_<start>-`: what every namespace of process `pid` begins with. The start time
/// (clock ticks after boot, `/proc/PID/stat` field 22) tells the process from a later one that
/// got the same pid, so `kpct cleanup` never mistakes a dead run's leftovers for a live run's.
pub fn owner_prefix(pid: u32) -> String {
    let start = process_start(pid).unwrap_or(0);
    format!("{SUITE_PREFIX}{pid}_{start}-")
}

/// When process `pid` started (clock ticks after boot), if it exists.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses (which may hold spaces): field 3 onwards.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()
}

/// Ends a lab's prefix: not in any DNS label.
pub const LAB_SEPARATOR: char = '.';

/// The per-run prefix of namespace names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPrefix(String);

impl RunPrefix {
    /// A prefix unique within this machine for the life of this process.
    pub fn next() -> RunPrefix {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        RunPrefix(format!("{}{seq}-", owner_prefix(std::process::id())))
    }

    /// The fixed prefix of a lab: stable, so `ip netns exec` commands can be written down. It
    /// ends in `.`, which no scenario name (a DNS label) contains, so one lab's prefix never
    /// matches another's namespaces (`rke2` and `rke2-ipvs-node`).
    pub fn lab(scenario: &str) -> RunPrefix {
        RunPrefix(format!(
            "{SUITE_PREFIX}{}{scenario}{LAB_SEPARATOR}",
            LAB_PREFIX
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn fabric(&self) -> String {
        format!("{}fabric", self.0)
    }

    pub fn node(&self, node: &str) -> String {
        format!("{}node-{node}", self.0)
    }

    pub fn pod(&self, pod: &str) -> String {
        format!("{}pod-{pod}", self.0)
    }

    pub fn external(&self, name: &str) -> String {
        format!("{}ext-{name}", self.0)
    }

    /// A fresh node's stand-in, programmed to compare a stepped node against.
    pub fn twin(&self, node: &str) -> String {
        format!("{}twin-{node}", self.0)
    }
}

/// Name of the fabric-side veth of node number `index` (interface names max 15 bytes).
pub fn fabric_port_for_node(index: usize) -> String {
    format!("ul-n{index}")
}

pub fn fabric_port_for_external() -> String {
    "ul-ext".to_string()
}

/// Node-side veth of pod number `index` on that node, as CNI's `vethXXXXXXXX` but stable.
pub fn node_port_for_pod(index: usize) -> String {
    format!("veth{index:04}")
}

/// A locally administered unicast MAC derived from a stable role string (FNV-1a), e.g.
/// `node/node-a/eth0`. Distinct roles give distinct MACs with overwhelming probability; the
/// topology checks for collisions anyway.
pub fn mac_for(role: &str) -> [u8; 6] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in role.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    // 0x02: locally administered, unicast.
    [0x02, b[3], b[4], b[5], b[6], b[7]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_stable_local_unicast_and_distinct() {
        let a = mac_for("node/node-a/eth0");
        assert_eq!(a, mac_for("node/node-a/eth0"));
        assert_ne!(a, mac_for("node/node-b/eth0"));
        assert_eq!(a[0] & 0x03, 0x02, "locally administered unicast");
    }

    #[test]
    fn prefixes_are_unique_and_carry_the_pid() {
        let a = RunPrefix::next();
        let b = RunPrefix::next();
        assert_ne!(a, b);
        assert!(a
            .as_str()
            .starts_with(&format!("kpct-{}_", std::process::id())));
        assert!(a.as_str().starts_with(&owner_prefix(std::process::id())));
        assert!(process_start(std::process::id()).is_some_and(|t| t > 0));
        assert!(fabric_port_for_node(12).len() <= 15);
    }
}
