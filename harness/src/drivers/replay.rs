//! `replay:` proxiers: state captured on real nodes, written into the suite's node namespaces.
//!
//! A replay directory holds one subdirectory per node name, each with any of these files:
//!
//! | file | content | applied as |
//! |---|---|---|
//! | `iptables-save` | `iptables-save` output (counters and `#` comments allowed) | full `iptables-restore` of each table present |
//! | `ip6tables-save` | `ip6tables-save` output, the same way (a dual-stack node) | full `ip6tables-restore` of each table present |
//! | `ipset-save` | `ipset save` output | sets created and filled |
//! | `ipvsadm-Sn` | `ipvsadm -Sn` output, plus optionally a `--set TCP TCPFIN UDP` line | virtual and real servers (and connection timeouts) |
//! | `kube-ipvs0` | `ip -o addr show kube-ipvs0` output | the `inet` (/32) and `inet6` (/128, link-local ones left out) addresses bound to kube-ipvs0 |
//! | `sysctl` | `sysctl -a` format (`key = value`), net.* keys only | each key set in the node namespace |
//! | `nft-ruleset` | `nft list ruleset` output | each table iptables does not own (`table ip kube-proxy { … }`) replaces the node's table of that name, in one transaction; iptables-nft's tables are left to `iptables-save` |
//!
//! The `sysctl` file holds the keys to set, not a whole `sysctl -a`: keys naming the real
//! node's devices (`net.ipv4.conf.eth0.*`) do not exist in the suite's namespaces and fail
//! with their line. [`capture`] writes the keys kube-proxy sets ([`KUBE_PROXY_SYSCTLS`]).
//!
//! Problems name the file and line. [`capture`] writes such a directory from a live namespace
//! with the same tools, so a suite run can be replayed.

use crate::netns::Netns;
use crate::programming::effective::{effective_state, EffectiveState, ReadError, ReadOptions};
use crate::programming::nft::{self, NftScript};
use crate::programming::source::SourceMap;
use crate::programming::text::{
    parse_host_address, parse_ipset_body, parse_ipvs_body, parse_sections, parse_sysctl_body,
    Section, TextError,
};
use crate::programming::tools::{self, IptablesBackend, ToolError, Xtables};
use crate::programming::{
    AppliedReport, Applier, ApplyError, Item, Origin, Programming, RestoreMode, Table,
};
use crate::scenario::IpFamily;
use std::path::{Path, PathBuf};

pub const IPTABLES_FILE: &str = "iptables-save";
pub const IP6TABLES_FILE: &str = "ip6tables-save";
pub const IPSET_FILE: &str = "ipset-save";
pub const IPVS_FILE: &str = "ipvsadm-Sn";
pub const ADDRESSES_FILE: &str = "kube-ipvs0";
pub const SYSCTL_FILE: &str = "sysctl";
pub const NFT_FILE: &str = "nft-ruleset";

/// Every file a node's capture may hold.
pub const CAPTURE_FILES: [&str; 7] = [
    IPTABLES_FILE,
    IP6TABLES_FILE,
    IPSET_FILE,
    IPVS_FILE,
    ADDRESSES_FILE,
    SYSCTL_FILE,
    NFT_FILE,
];

/// The sysctls that decide how a proxier's rules behave, which a capture records where the
/// kernel has them: iptables mode's `route_localnet` (pkg/proxy/iptables/proxier.go, for
/// localhost NodePorts), IPVS mode's `sysctlVSConnTrack`, `sysctlExpireNoDestConn`,
/// `sysctlExpireQuiescentTemplate` and, with strict ARP, `sysctlArpIgnore`/`sysctlArpAnnounce`
/// (pkg/proxy/ipvs/proxier.go), and `conn_reuse_mode` (whether a reused source port may reach
/// another real server). `ip_forward` and `bridge-nf-call-iptables` are the topology's: every
/// suite node sets them, so a capture from elsewhere must not turn them off.
pub const KUBE_PROXY_SYSCTLS: [&str; 7] = [
    "net.ipv4.conf.all.route_localnet",
    "net.ipv4.vs.conntrack",
    "net.ipv4.vs.expire_nodest_conn",
    "net.ipv4.vs.expire_quiescent_template",
    "net.ipv4.vs.conn_reuse_mode",
    "net.ipv4.conf.all.arp_ignore",
    "net.ipv4.conf.all.arp_announce",
];

/// A replay directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("replay spec `{0}`: expected `replay:DIRECTORY`")]
    Spec(String),
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: std::io::Error,
    },
    #[error("no capture for node {node}: {path} is not a directory")]
    NoNode { node: String, path: PathBuf },
    #[error(
        "no capture for node {node}: {path} holds none of the capture files ({})",
        CAPTURE_FILES.join(", ")
    )]
    EmptyNode { node: String, path: PathBuf },
    #[error("replay: {path} is not a directory (expected one subdirectory per node)")]
    NoDirectory { path: PathBuf },
    #[error(transparent)]
    Text(#[from] TextError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("capturing {file}: {cause}")]
    Capture {
        file: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: ToolError,
    },
    #[error("capturing sysctl {key}: {message}")]
    CaptureSysctl { key: String, message: String },
    #[error("capturing the nftables tables: {message}")]
    CaptureTables { message: String },
    #[error("node {node}: reading the effective state: {cause}")]
    Read {
        node: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: Box<ReadError>,
    },
}

/// A node's capture as a programming, with the file line of every item.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Loaded {
    pub programming: Programming,
    pub sources: SourceMap,
}

impl Replay {
    /// Whether some node's capture holds an IPVS virtual service (an `-A` line).
    pub fn captures_ipvs(&self) -> bool {
        self.nodes().unwrap_or_default().iter().any(|node| {
            read_optional(&self.dir.join(node).join(IPVS_FILE))
                .ok()
                .flatten()
                .is_some_and(|(text, _)| text.lines().any(|l| l.trim_start().starts_with("-A ")))
        })
    }

    pub fn new(dir: impl Into<PathBuf>) -> Replay {
        Replay { dir: dir.into() }
    }

    /// The capture of the node states after scenario step `step`: `DIR/<step>/`.
    pub fn at_step(&self, step: &str) -> Replay {
        Replay::new(self.dir.join(step))
    }

    /// `replay:DIR` as a proxier spec.
    pub fn label(&self) -> String {
        format!("replay:{}", self.dir.display())
    }

    /// The DIRECTORY of `replay:DIRECTORY`.
    pub fn parse(dir: &str) -> Result<Replay, ReplayError> {
        if dir.trim().is_empty() {
            return Err(ReplayError::Spec(dir.to_string()));
        }
        Ok(Replay::new(dir.trim()))
    }

    /// Its directory is there: checked before anything is built (the spec's `build`), so a
    /// mistyped directory fails at once.
    pub fn check(&self) -> Result<(), ReplayError> {
        if self.dir.is_dir() {
            Ok(())
        } else {
            Err(ReplayError::NoDirectory {
                path: self.dir.clone(),
            })
        }
    }

    /// Node names with a capture, sorted.
    pub fn nodes(&self) -> Result<Vec<String>, ReplayError> {
        let io = |source| ReplayError::Io {
            path: self.dir.clone(),
            cause: source,
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            if entry.path().is_dir() {
                out.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        out.sort();
        Ok(out)
    }

    /// Reads one node's capture.
    pub fn load(&self, node: &str) -> Result<Loaded, ReplayError> {
        let dir = self.dir.join(node);
        if !dir.is_dir() {
            return Err(ReplayError::NoNode {
                node: node.to_string(),
                path: dir,
            });
        }
        // A node directory that holds none of them is a mistake (a typo, a link to the wrong
        // place), not a node without programming: every real node has an iptables-save.
        if !CAPTURE_FILES.iter().any(|f| dir.join(f).exists()) {
            return Err(ReplayError::EmptyNode {
                node: node.to_string(),
                path: dir,
            });
        }
        parse_capture(|file| read_optional(&dir.join(file)))
    }

    /// Loads and applies one node's capture.
    pub fn apply(
        &self,
        ns: &Netns,
        node: &str,
        applier: &Applier,
    ) -> Result<AppliedReport, ReplayError> {
        let loaded = self.load(node)?;
        Ok(applier.apply(ns, node, &loaded.programming, Some(&loaded.sources))?)
    }

    /// Applies one node's capture and reads the namespace back.
    pub fn sync_node(
        &self,
        ns: &Netns,
        node: &str,
        applier: &Applier,
    ) -> Result<(AppliedReport, EffectiveState), ReplayError> {
        self.sync(ns, node, applier, false)
    }

    /// [`Replay::sync_node`] over a node that holds earlier programming: the capture's tables
    /// replace the node's (a full `iptables-restore`) and IPVS services it does not list are
    /// deleted, so the node holds what the real one did.
    pub fn sync_node_replacing(
        &self,
        ns: &Netns,
        node: &str,
        applier: &Applier,
    ) -> Result<(AppliedReport, EffectiveState), ReplayError> {
        self.sync(ns, node, applier, true)
    }

    fn sync(
        &self,
        ns: &Netns,
        node: &str,
        applier: &Applier,
        replacing: bool,
    ) -> Result<(AppliedReport, EffectiveState), ReplayError> {
        let mut loaded = self.load(node)?;
        if replacing {
            loaded.programming.restore_mode = crate::programming::RestoreMode::Flush;
            // Only where the capture has an IPVS table (even an empty one): a node captured
            // without one says nothing about IPVS.
            if self.dir.join(node).join(IPVS_FILE).exists() {
                for family in IpFamily::ALL {
                    loaded
                        .programming
                        .ipvs_delete_others
                        .entry(family)
                        .or_default();
                }
            }
        }
        if replacing && self.dir.join(node).join(NFT_FILE).exists() {
            // The capture lists every table the real node held: the node's others go.
            let held = nft::list_tables(ns).map_err(|e| ReplayError::Read {
                node: node.to_string(),
                cause: Box::new(ReadError::Nft(e)),
            })?;
            let p = &mut loaded.programming;
            let mut lines = std::mem::take(&mut p.nft.lines);
            for table in held
                .iter()
                .filter(|t| !t.owned_by_iptables() && !p.nft.tables.contains(t))
            {
                lines.push(format!("add table {table}"));
                lines.push(format!("delete table {table}"));
            }
            p.nft = NftScript::new(lines).map_err(|problems| TextError {
                origin: NFT_FILE.to_string(),
                line: 0,
                message: problems[0].message.clone(),
            })?;
        }
        let report = applier.apply(ns, node, &loaded.programming, Some(&loaded.sources))?;
        let opts = ReadOptions {
            backend: applier.options.backend,
            sysctls: loaded.programming.sysctls.keys().cloned().collect(),
        };
        let effective = effective_state(ns, &opts).map_err(|source| ReplayError::Read {
            node: node.to_string(),
            cause: Box::new(source),
        })?;
        Ok((report, effective))
    }
}

/// One node's capture from its files' texts: `read` gives the text of a capture file (one of
/// [`CAPTURE_FILES`]) and the name its problems are reported under, or `None` when the node has
/// no such file. Every problem names its file and line.
pub fn parse_capture(
    mut read: impl FnMut(&str) -> Result<Option<(String, String)>, ReplayError>,
) -> Result<Loaded, ReplayError> {
    let mut loaded = Loaded::default();
    let p = &mut loaded.programming;
    if let Some((text, origin)) = read(IPTABLES_FILE)? {
        let tables = Table::ALL.map(Section::Table);
        let parsed = parse_sections(&text, &origin, &tables)?;
        p.iptables = parsed.programming.iptables;
        loaded.sources.extend(parsed.sources);
    }
    // Problems in it name its file and line; its items are not traced (the source map
    // traces the IPv4 tables' items).
    if let Some((text, origin)) = read(IP6TABLES_FILE)? {
        let tables = Table::ALL.map(Section::Table);
        p.ip6tables = parse_sections(&text, &origin, &tables)?
            .programming
            .iptables;
    }
    // A capture is the whole truth of each table it lists, as `iptables-restore` of a save.
    p.restore_mode = RestoreMode::Flush;
    // Each file is the body of its section, parsed as one: a line of it that would end a
    // section in programming text (`COMMIT`) is an error at that line, like any other.
    if let Some((text, origin)) = read(IPSET_FILE)? {
        p.ipsets = parse_ipset_body(&body_lines(&text), &origin, &mut loaded.sources)?;
    }
    if let Some((text, origin)) = read(IPVS_FILE)? {
        let section = parse_ipvs_body(&body_lines(&text), &origin, &mut loaded.sources)?;
        p.ipvs = section.servers;
        p.ipvs_timeouts = section.timeouts;
        p.ipvs_delete_others = section.delete_others;
    }
    if let Some((text, origin)) = read(ADDRESSES_FILE)? {
        // The capture has the file where the node has the device, addresses or not.
        let addresses = p.ipvs_addresses.insert(Vec::new());
        for (idx, line) in text.lines().enumerate() {
            if let Some(addr) = parse_ip_addr_line(line).map_err(|message| TextError {
                origin: origin.clone(),
                line: idx + 1,
                message,
            })? {
                loaded.sources.insert(
                    Item::Address {
                        index: addresses.len(),
                    },
                    Origin {
                        file: origin.clone(),
                        line: idx + 1,
                    },
                );
                addresses.push(addr);
            }
        }
    }
    if let Some((text, origin)) = read(NFT_FILE)? {
        let (script, lines) = ruleset_script(&text, &origin)?;
        for (index, line) in lines.into_iter().enumerate() {
            if let Some(line) = line {
                loaded.sources.insert(
                    Item::NftLine { index },
                    Origin {
                        file: origin.clone(),
                        line,
                    },
                );
            }
        }
        p.nft = script;
    }
    if let Some((text, origin)) = read(SYSCTL_FILE)? {
        p.sysctls = parse_sysctl_body(&body_lines(&text), &origin, &mut loaded.sources)?;
    }
    Ok(loaded)
}

/// A capture file's lines that say something, numbered from 1, trimmed.
fn body_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

fn read_optional(path: &Path) -> Result<Option<(String, String)>, ReplayError> {
    use crate::input_file::{read_text, CAPTURE_LIMIT};
    match read_text(path, CAPTURE_LIMIT, "capture") {
        Ok(text) => Ok(Some((text, path.display().to_string()))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(ReplayError::Io {
            path: path.to_path_buf(),
            cause: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        }),
    }
}

/// The tables of an `nft list ruleset` capture that iptables does not own, as a script that
/// replaces each (`add table` + `delete table`, then the table as listed), and the file line of
/// each script line (`None`: written by the suite).
fn ruleset_script(
    text: &str,
    origin: &str,
) -> Result<(NftScript, Vec<Option<usize>>), ReplayError> {
    let mut lines: Vec<String> = Vec::new();
    let mut from: Vec<Option<usize>> = Vec::new();
    let mut depth = 0usize;
    let mut keep = false;
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if depth == 0 {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let table = match words.as_slice() {
                ["table", family, name, "{"] => {
                    nft::NftFamily::from_name(family).map(|family| nft::NftTable {
                        family,
                        name: name.to_string(),
                    })
                }
                _ => None,
            };
            let Some(table) = table else {
                return Err(TextError {
                    origin: origin.to_string(),
                    line: idx + 1,
                    message: format!(
                        "`{}` is not the start of a table as `nft list ruleset` prints it \
                         (`table FAMILY NAME {{`)",
                        crate::quote::quote(line)
                    ),
                }
                .into());
            };
            keep = !table.owned_by_iptables();
            if keep {
                for suite_line in [
                    format!("add table {table}"),
                    format!("delete table {table}"),
                ] {
                    lines.push(suite_line);
                    from.push(None);
                }
            }
        }
        let (opened, closed) = braces(line);
        depth = (depth + opened).saturating_sub(closed);
        if keep {
            lines.push(line.to_string());
            from.push(Some(idx + 1));
        }
    }
    let script = NftScript::new(lines).map_err(|problems| {
        let first = &problems[0];
        TextError {
            origin: origin.to_string(),
            line: from.get(first.index).copied().flatten().unwrap_or(0),
            message: first.message.clone(),
        }
    })?;
    Ok((script, from))
}

/// The `{` and `}` of a listing line outside its quoted strings (comments).
fn braces(line: &str) -> (usize, usize) {
    let (mut quoted, mut opened, mut closed) = (false, 0, 0);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => opened += 1,
            '}' if !quoted => closed += 1,
            _ => {}
        }
    }
    (opened, closed)
}

/// One line of `ip -o addr show kube-ipvs0`: `N: kube-ipvs0    inet A.B.C.D/32 scope global
/// kube-ipvs0\ ...` or `inet6 X::Y/128 scope global`. Link-local `inet6` lines (the kernel's
/// own, should the device be up) and blank lines are skipped.
fn parse_ip_addr_line(line: &str) -> Result<Option<std::net::IpAddr>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => Ok(None),
        [_, dev, "inet6", _, "scope", "link", ..] if dev.trim_end_matches(':') == "kube-ipvs0" => {
            Ok(None)
        }
        [_, dev, "inet" | "inet6", addr, ..] if dev.trim_end_matches(':') == "kube-ipvs0" => {
            parse_host_address(addr).map(Some)
        }
        _ => Err(format!(
            "`{}` is not a line of `ip -o addr show kube-ipvs0`",
            line.trim()
        )),
    }
}

/// Writes a replay capture of `ns` for `node` under `dir/node/`, with the real tools
/// (`iptables-save`, `ipset save`, `ipvsadm -Sn` where the kernel has IPVS, `ip -o addr show
/// kube-ipvs0` where the device exists) and the [`KUBE_PROXY_SYSCTLS`] the kernel has.
pub fn capture(
    ns: &Netns,
    node: &str,
    dir: &Path,
    backend: IptablesBackend,
) -> Result<(), ReplayError> {
    let node_dir = dir.join(node);
    std::fs::create_dir_all(&node_dir).map_err(|source| ReplayError::Io {
        path: node_dir.clone(),
        cause: source,
    })?;
    let write = |file: &str, text: &str| {
        let path = node_dir.join(file);
        std::fs::write(&path, text).map_err(|source| ReplayError::Io {
            path,
            cause: source,
        })
    };
    let tool = |file: &str, program: &str, args: &[&str]| {
        tools::run(ns, program, args, None).map_err(|source| ReplayError::Capture {
            file: file.to_string(),
            cause: source,
        })
    };
    write(IPTABLES_FILE, &tool(IPTABLES_FILE, backend.save(), &[])?)?;
    // Only a node with IPv6 tables (a dual-stack one) has an ip6tables capture.
    let ip6tables = tool(IP6TABLES_FILE, Xtables::Ip6.save(backend), &[])?;
    if ip6tables.lines().any(|l| l.starts_with('*')) {
        write(IP6TABLES_FILE, &ip6tables)?;
    }
    write(IPSET_FILE, &tool(IPSET_FILE, "ipset", &["save"])?)?;
    if ns
        .run(|| Path::new("/proc/net/ip_vs").exists())
        .unwrap_or(false)
    {
        // ipvsadm's dump, like ours, is shifted by service changes elsewhere: none of this
        // process's meanwhile (a parallel run's other nodes).
        let _quiet = ipvs_genl::hold_service_changes();
        write(IPVS_FILE, &tool(IPVS_FILE, "ipvsadm", &["-Sn"])?)?;
    }
    if let Ok(addrs) = tools::run(ns, "ip", &["-o", "addr", "show", "dev", "kube-ipvs0"], None) {
        write(ADDRESSES_FILE, &addrs)?;
    }
    let mut sysctls = String::new();
    for key in KUBE_PROXY_SYSCTLS {
        // A key this kernel lacks (no IP_VS, no br_netfilter) is not part of the node's state.
        let path = Path::new("/proc/sys").join(key.replace('.', "/"));
        if !ns.run(|| path.exists()).unwrap_or(false) {
            continue;
        }
        let value = ns.get_sysctl(key).map_err(|e| ReplayError::CaptureSysctl {
            key: key.to_string(),
            message: format!("{e:#}"),
        })?;
        sysctls.push_str(&format!("{key} = {value}\n"));
    }
    write(SYSCTL_FILE, &sysctls)?;
    let own_tables = nft::list_tables(ns).map_err(|e| ReplayError::CaptureTables {
        message: e.to_string(),
    })?;
    if own_tables.iter().any(|t| !t.owned_by_iptables()) {
        write(NFT_FILE, &tool(NFT_FILE, "nft", &["list", "ruleset"])?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that shows its cause in its message has no `source()` as well: a chain printed
    /// with `{:#}` (every run error is) would say it twice.
    #[test]
    fn a_cause_is_said_once() {
        let e = anyhow::Error::from(ReplayError::Io {
            path: "capture/node-a/iptables-save".into(),
            cause: std::io::Error::other("stream did not contain valid UTF-8"),
        })
        .context("replaying node-a");
        assert_eq!(
            format!("{e:#}"),
            "replaying node-a: capture/node-a/iptables-save: stream did not contain valid UTF-8"
        );
    }

    #[test]
    fn parses_ip_addr_lines() {
        let line = "5: kube-ipvs0    inet 10.96.0.1/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever";
        assert_eq!(
            parse_ip_addr_line(line),
            Ok(Some("10.96.0.1".parse().unwrap()))
        );
        assert_eq!(
            parse_ip_addr_line("5: kube-ipvs0    inet6 fe80::1/64 scope link"),
            Ok(None)
        );
        assert!(parse_ip_addr_line("5: eth0    inet 10.0.0.1/24").is_err());
        assert!(
            parse_ip_addr_line("5: kube-ipvs0    inet 10.0.0.1/24 scope global")
                .unwrap_err()
                .contains("/32")
        );
    }

    #[test]
    fn sysctl_files_take_net_keys_once_each() {
        let dir = std::env::temp_dir().join(format!("kpct-replay-sysctl-{}", std::process::id()));
        let node = dir.join("node-a");
        std::fs::create_dir_all(&node).unwrap();
        let load = |text: &str| {
            std::fs::write(node.join(SYSCTL_FILE), text).unwrap();
            Replay::new(&dir).load("node-a").map_err(|e| e.to_string())
        };
        let good = load("# from sysctl -a\nnet.ipv4.conf.all.route_localnet = 1\n\nnet.ipv4.ip_local_port_range = 32768\t60999\n");
        let host = load("net.ipv4.ip_forward = 1\nkernel.pid_max = 4096\n");
        let twice = load("net.ipv4.ip_forward = 1\n\nnet.ipv4.ip_forward=0\n");
        std::fs::remove_dir_all(&dir).unwrap();
        let sysctls = good.unwrap().programming.sysctls;
        assert_eq!(sysctls["net.ipv4.conf.all.route_localnet"], "1");
        assert_eq!(sysctls["net.ipv4.ip_local_port_range"], "32768\t60999");
        let host = host.unwrap_err();
        assert!(
            host.ends_with("node-a/sysctl:2: sysctl `kernel.pid_max` is not per network namespace (only net.* keys are allowed)"),
            "{host}"
        );
        let twice = twice.unwrap_err();
        assert!(
            twice.ends_with(
                "node-a/sysctl:3: sysctl `net.ipv4.ip_forward` is set twice (also line 1)"
            ),
            "{twice}"
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let dir = std::env::temp_dir().join(format!("kpct-replay-unit-{}", std::process::id()));
        let node = dir.join("node-a");
        std::fs::create_dir_all(&node).unwrap();
        std::fs::write(
            node.join(IPSET_FILE),
            "create A hash:ip\nadd A 10.0.0.1\ncreate B hash:bogus\n",
        )
        .unwrap();
        let err = Replay::new(&dir).load("node-a").unwrap_err().to_string();
        std::fs::write(node.join(IPSET_FILE), "create A hash:ip\nadd A 10.0.0.1\n").unwrap();
        std::fs::write(
            node.join(IPVS_FILE),
            "-A -t 10.96.0.1:80 -s rr\n-a -t 10.96.0.1:80 -r 10.244.1.1:80 -m -w 1\n",
        )
        .unwrap();
        let loaded = Replay::new(&dir).load("node-a").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.ends_with("node-a/ipset-save:3: unknown ipset type `hash:bogus` for set B (supported: hash:ip, hash:ip,port, hash:ip,port,ip, hash:ip,port,net, hash:net, bitmap:port)"), "{err}");
        let origin = loaded
            .sources
            .get(&Item::Destination {
                service: 0,
                destination: 0,
            })
            .unwrap();
        assert!(
            origin.to_string().ends_with("node-a/ipvsadm-Sn:2"),
            "{origin}"
        );
        assert_eq!(loaded.programming.restore_mode, RestoreMode::Flush);
    }
}
