//! IPVS's connections on a node: its virtual services with each real server's connection
//! counts ([`ipvs_table`], over netlink), and its connection table as `/proc/net/ip_vs_conn`
//! shows it: which client reached which real server through which virtual service, and in what
//! TCP state. The netlink interface has no command for that table (`ipvsadm -Lc` reads this
//! file too).

use crate::netns::Netns;
use crate::topology::NodeNs;
use anyhow::{anyhow, bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The IPVS table of `node` with connection counts; empty when the kernel has no IPVS.
pub fn ipvs_table(node: &NodeNs) -> Result<Vec<ipvs_genl::TableEntry>> {
    match ipvs_genl::IpvsHandle::in_netns(node.netns.path()) {
        Ok(mut handle) => handle
            .table()
            .with_context(|| format!("reading the IPVS table of node {}", node.name)),
        Err(ipvs_genl::Error::FamilyMissing) => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("opening IPVS on node {}", node.name)),
    }
}

/// One entry of the connection table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// `TCP`, `UDP`, `SCTP`, … as the kernel names it.
    pub protocol: String,
    pub client: SocketAddr,
    /// The virtual service's address the client sent to.
    pub virtual_addr: SocketAddr,
    pub real_server: SocketAddr,
    /// `ESTABLISHED`, `SYN_RECV`, `TIME_WAIT`, … (`tcp_state_name_table`,
    /// net/netfilter/ipvs/ip_vs_proto_tcp.c; `UDP` for UDP).
    pub state: String,
}

impl Connection {
    /// A TCP connection IPVS sees as established: a live flow, not one that ended.
    pub fn is_established(&self) -> bool {
        self.state == "ESTABLISHED"
    }

    /// A persistence template (ClientIP affinity), not a connection: the only entries with
    /// client port 0 (`ip_vs_sched_persist`, net/netfilter/ipvs/ip_vs_core.c).
    pub fn is_template(&self) -> bool {
        self.client.port() == 0
    }

    /// A TCP connection that never opened or has ended (a probe's half-open SYN, a closed
    /// socket's TIME_WAIT), still in the table until its fixed timeout runs out.
    pub fn lingers(&self) -> bool {
        self.protocol.eq_ignore_ascii_case("TCP") && !self.is_template() && !self.is_established()
    }
}

/// The connection table of `ns`; empty when its kernel has no IPVS.
pub fn read(ns: &Netns) -> Result<Vec<Connection>> {
    // /proc/net follows the process's first thread; /proc/thread-self/net the namespace this
    // thread entered.
    let text = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/ip_vs_conn"))?;
    match text {
        Ok(text) => parse(&text).with_context(|| format!("reading ip_vs_conn of {}", ns.name())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading ip_vs_conn of {}", ns.name())),
    }
}

/// Parses the file: a header line, then `PRO FROMIP FPRT TOIP TPRT DESTIP DPRT STATE EXPIRES
/// [PENAME PEDATA]`, IPv4 addresses and ports in hex, IPv6 addresses in full colon form
/// (`ip_vs_conn_seq_show`, net/netfilter/ipvs/ip_vs_conn.c).
pub fn parse(text: &str) -> Result<Vec<Connection>> {
    let mut out = Vec::new();
    for (k, line) in text.lines().enumerate().skip(1) {
        let line_no = k + 1;
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 9 {
            bail!(
                "line {line_no}: {} fields, expected at least 9: {line}",
                f.len()
            );
        }
        let at = |addr: usize| -> Result<SocketAddr> {
            Ok(SocketAddr::new(address(f[addr])?, port(f[addr + 1])?))
        };
        let parsed = (|| -> Result<Connection> {
            Ok(Connection {
                protocol: f[0].to_string(),
                client: at(1)?,
                virtual_addr: at(3)?,
                real_server: at(5)?,
                state: f[7].to_string(),
            })
        })()
        .with_context(|| format!("line {line_no}: {line}"))?;
        out.push(parsed);
    }
    Ok(out)
}

fn address(text: &str) -> Result<IpAddr> {
    if text.contains(':') {
        return text
            .parse()
            .map_err(|_| anyhow!("`{text}` is not an IPv6 address"));
    }
    let n = u32::from_str_radix(text, 16).map_err(|_| anyhow!("`{text}` is not hex"))?;
    Ok(IpAddr::V4(Ipv4Addr::from(n)))
}

fn port(text: &str) -> Result<u16> {
    u16::from_str_radix(text, 16).map_err(|_| anyhow!("`{text}` is not a hex port"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_and_ipv6_entries() {
        // As a 6.1 kernel printed them for kpct's probes (the IPv6 line in `%pI6` form).
        let text = "\
Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP 0AF4010A 4E20 0A60000A 0050 0AF40115 1F90 SYN_RECV         59
TCP fd00:0010:0244:0001:0000:0000:0000:0010 4E21 fd00:0010:0096:0000:0000:0000:0000:0010 0050 fd00:0010:0244:0001:0000:0000:0000:0021 1F90 ESTABLISHED    899
";
        let conns = parse(text).unwrap();
        assert_eq!(
            conns[0],
            Connection {
                protocol: "TCP".into(),
                client: "10.244.1.10:20000".parse().unwrap(),
                virtual_addr: "10.96.0.10:80".parse().unwrap(),
                real_server: "10.244.1.21:8080".parse().unwrap(),
                state: "SYN_RECV".into(),
            }
        );
        assert!(!conns[0].is_established());
        assert_eq!(
            conns[1].real_server,
            "[fd00:10:244:1::21]:8080".parse().unwrap()
        );
        assert!(conns[1].is_established());
    }

    /// A probe's half-open SYN and a socket's TIME_WAIT linger; an established flow, a
    /// persistence template (client port 0, state NONE) and UDP do not.
    #[test]
    fn what_lingers() {
        let text = "\
Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP 0AF4020A 4E20 C0A8010B 7580 0AF40115 1F90 SYN_RECV         59
TCP C0A8010A 9C40 0A60000A 0050 0AF40115 1F90 TIME_WAIT       119
TCP 0AF4020A 4E21 0A60000A 0050 0AF40115 1F90 ESTABLISHED     899
TCP 0AF4020A 0000 C0A8010B 7580 0AF40115 0000 NONE              5
UDP 0AF4020A 4E22 0A60000A 0035 0AF40115 0035 UDP             299
";
        let lingers: Vec<bool> = parse(text)
            .unwrap()
            .iter()
            .map(Connection::lingers)
            .collect();
        assert_eq!(lingers, [true, true, false, false, false]);
    }

    #[test]
    fn a_malformed_line_is_located() {
        let err =
            parse("header\nTCP 0AF4010A zz 0A60000A 0050 0AF40115 1F90 SYN_RECV 59\n").unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "line 2: TCP 0AF4010A zz 0A60000A 0050 0AF40115 1F90 SYN_RECV 59: `zz` is not a hex port"
        );
    }
}
