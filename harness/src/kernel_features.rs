//! What the running kernel offers the suite, found by trying each feature in a throwaway
//! namespace (config files lie about modules; a failed `create` does not).

use crate::netns::naming::RunPrefix;
use crate::netns::Netns;
use crate::programming::{ApplyOptions, IpSetType};
use anyhow::Result;
use std::fmt;

/// One kernel feature: available, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cap {
    Yes,
    No(String),
}

impl Cap {
    pub fn ok(&self) -> bool {
        matches!(self, Cap::Yes)
    }
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cap::Yes => f.write_str("yes"),
            Cap::No(why) => write!(f, "no ({why})"),
        }
    }
}

/// A feature the suite can require by name (`kpct caps --require ip_vs,dummy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    IpVs,
    Dummy,
    Vxlan,
    Bridge,
    XtIpvs,
    IpSet,
    Iptables,
    BrNetfilter,
    Sctp,
}

impl Feature {
    pub const ALL: [Feature; 9] = [
        Feature::IpVs,
        Feature::Dummy,
        Feature::Vxlan,
        Feature::Bridge,
        Feature::XtIpvs,
        Feature::IpSet,
        Feature::Iptables,
        Feature::BrNetfilter,
        Feature::Sctp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::IpVs => "ip_vs",
            Feature::Dummy => "dummy",
            Feature::Vxlan => "vxlan",
            Feature::Bridge => "bridge",
            Feature::XtIpvs => "xt_ipvs",
            Feature::IpSet => "ipset",
            Feature::Iptables => "iptables",
            Feature::BrNetfilter => "br_netfilter",
            Feature::Sctp => "sctp",
        }
    }

    pub fn parse(s: &str) -> Option<Feature> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }
}

#[derive(Debug, Clone)]
pub struct Capabilities {
    pub kernel: String,
    pub features: Vec<(Feature, Cap)>,
    pub ipset_types: Vec<(IpSetType, Cap)>,
}

impl Capabilities {
    pub fn get(&self, feature: Feature) -> &Cap {
        self.features
            .iter()
            .find(|(f, _)| *f == feature)
            .map(|(_, c)| c)
            .unwrap_or(&Cap::Yes)
    }

    /// Features among `wanted` that are missing, with the reason.
    pub fn missing(&self, wanted: &[Feature]) -> Vec<(Feature, String)> {
        wanted
            .iter()
            .filter_map(|f| match self.get(*f) {
                Cap::Yes => None,
                Cap::No(why) => Some((*f, why.clone())),
            })
            .collect()
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {}", self.kernel)?;
        for (feature, cap) in &self.features {
            writeln!(f, "  {:<10} {cap}", feature.name())?;
        }
        for (t, cap) in &self.ipset_types {
            writeln!(f, "  ipset {:<18} {cap}", t.name())?;
        }
        Ok(())
    }
}

/// Loads the modules kube-proxy's IPVS mode needs, as kube-proxy's cleanup does
/// (`modprobe -va ip_vs`), so that module-based kernels report what they really can do.
/// Failures are fine: the feature probes say what is missing. `br_netfilter` is deliberately
/// not loaded: loading it switches the host's own bridges to pass through iptables. Kubernetes
/// nodes load it (kubeadm's preflight requires it); the suite's VM runner loads it in its VM.
fn load_modules() {
    for module in [
        "ip_vs",
        "ip_vs_rr",
        "ip_vs_wrr",
        "ip_vs_lc",
        "ip_vs_wlc",
        "ip_vs_sh",
        "ip_vs_dh",
        "ip_vs_mh",
        "ip_vs_sed",
        "ip_vs_nq",
        "xt_ipvs",
        "dummy",
        "vxlan",
        "nf_conntrack",
        "sctp",
    ] {
        let _ = std::process::Command::new("modprobe")
            .args(["-q", module])
            .status();
    }
}

fn probe_cmd(ns: &Netns, program: &str, args: &[&str]) -> Cap {
    match ns.exec(program, args) {
        Ok(_) => Cap::Yes,
        Err(e) => Cap::No(format!("{e:#}")),
    }
}

/// Bridged pod-to-pod replies only pass IPVS/conntrack reverse NAT when bridged IPv4 goes
/// through netfilter (`net.bridge.bridge-nf-call-iptables`, per namespace since Linux 5.3).
fn br_netfilter(ns: &Netns) -> Result<Cap> {
    let present =
        ns.run(|| std::path::Path::new(crate::topology::BRIDGE_NF_CALL_IPTABLES).exists())?;
    Ok(if present {
        Cap::Yes
    } else {
        Cap::No("br_netfilter is not loaded (no net.bridge.bridge-nf-call-iptables): replies between pods on one bridge bypass service reverse-NAT; `modprobe br_netfilter`, as every Kubernetes node does".into())
    })
}

/// SCTP probes need the protocol in the kernel: an SCTP socket can be made.
fn sctp(ns: &Netns) -> Result<Cap> {
    let made = ns.run(|| crate::backends::sctp_socket().map(drop))?;
    Ok(match made {
        Ok(()) => Cap::Yes,
        Err(e) => Cap::No(format!(
            "socket(IPPROTO_SCTP) fails ({e}): this kernel has no SCTP (CONFIG_IP_SCTP) or the module could not be loaded"
        )),
    })
}

/// The running kernel's capabilities, probed on the first call of a process and remembered:
/// probing loads modules and builds a namespace (slow under TCG), and a kernel's features do not
/// change while the suite runs.
pub fn detect() -> Result<Capabilities> {
    static DETECTED: std::sync::OnceLock<Capabilities> = std::sync::OnceLock::new();
    if let Some(caps) = DETECTED.get() {
        return Ok(caps.clone());
    }
    let caps = probe()?;
    Ok(DETECTED.get_or_init(|| caps).clone())
}

/// Probes the kernel. Creates and removes one namespace; never touches the root namespace.
fn probe() -> Result<Capabilities> {
    load_modules();
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let ns = Netns::create(&format!("{}caps", RunPrefix::next().as_str()))?;
    let ipvs = if ns.run(|| std::path::Path::new("/proc/net/ip_vs").exists())? {
        Cap::Yes
    } else {
        Cap::No("no /proc/net/ip_vs: this kernel has no IP_VS (CONFIG_IP_VS) or the module could not be loaded".into())
    };
    let features = vec![
        (Feature::IpVs, ipvs),
        (
            Feature::Dummy,
            probe_cmd(&ns, "ip", &["link", "add", "kpct-d0", "type", "dummy"]),
        ),
        (
            Feature::Vxlan,
            probe_cmd(
                &ns,
                "ip",
                &[
                    "link", "add", "kpct-vx0", "type", "vxlan", "id", "1", "dstport", "8472",
                ],
            ),
        ),
        (
            Feature::Bridge,
            probe_cmd(&ns, "ip", &["link", "add", "kpct-br0", "type", "bridge"]),
        ),
        (
            Feature::XtIpvs,
            probe_cmd(
                &ns,
                "iptables",
                &[
                    "-w",
                    "-A",
                    "OUTPUT",
                    "-m",
                    "ipvs",
                    "--vaddr",
                    "198.51.100.1/32",
                    "-j",
                    "ACCEPT",
                ],
            ),
        ),
        (
            Feature::IpSet,
            probe_cmd(&ns, "ipset", &["create", "kpct-probe", "hash:ip"]),
        ),
        (
            Feature::Iptables,
            probe_cmd(&ns, "iptables", &["-w", "-t", "nat", "-S"]),
        ),
        (Feature::BrNetfilter, br_netfilter(&ns)?),
        (Feature::Sctp, sctp(&ns)?),
    ];
    let ipset_types = IpSetType::ALL
        .into_iter()
        .map(|t| {
            let name = format!("kpct-{}", t.name().replace([':', ','], "-"));
            let mut args = vec!["create", name.as_str(), t.name()];
            if t == IpSetType::BitmapPort {
                args.extend(["range", "0-65535"]);
            }
            (t, probe_cmd(&ns, "ipset", &args))
        })
        .collect();
    Ok(Capabilities {
        kernel,
        features,
        ipset_types,
    })
}

/// For tests that need IP_VS: panics with the reason and the way to get a kernel that has it.
/// Tests calling this are named `needs_ipvs_*`, which the documented native-only quick mode
/// (`ci/test.sh --quick`) deselects; everywhere else they must run and pass.
pub fn require_ipvs() {
    require(Feature::IpVs, "IP_VS");
}

/// For tests that need SCTP (probes with crafted INITs, pods serving SCTP), named
/// `needs_sctp_*`; as [`require_ipvs`].
pub fn require_sctp() {
    require(Feature::Sctp, "SCTP");
}

fn require(feature: Feature, what: &str) {
    let caps = match detect() {
        Ok(c) => c,
        Err(e) => panic!("cannot probe kernel capabilities: {e:#}"),
    };
    if let Some((_, why)) = caps.missing(&[feature]).into_iter().next() {
        panic!(
            "this test needs {what} but kernel {} has none: {why}.\n\
             Run the suite with `sudo ci/test.sh`, which boots a kernel that has {what} in a VM \
             when this one lacks it (or `ci/test.sh --quick` to leave such tests out).",
            caps.kernel
        );
    }
}

/// The kernel features a run of `scenario` needs, whatever the proxier (a proxier's own needs,
/// IP_VS for IPVS mode, are the proxier's).
pub fn needed_by(scenario: &crate::scenario::Scenario) -> Vec<Feature> {
    let mut out = Vec::new();
    if scenario.uses_sctp() {
        out.push(Feature::Sctp);
    }
    if scenario.has_existing_ipvs() {
        out.push(Feature::IpVs);
    }
    out
}

/// How the applier puts programming into a node of the kernel this process runs on: see
/// [`ApplyOptions::with_dummy`].
pub fn apply_options() -> Result<ApplyOptions> {
    Ok(ApplyOptions::with_dummy(detect()?.get(Feature::Dummy).ok()))
}
