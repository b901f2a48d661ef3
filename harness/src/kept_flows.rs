//! Flows kept across the steps of a scenario: a real socket in the probe's source namespace (an
//! established TCP connection, or a UDP socket on its fixed source port, as a DNS client
//! keeps), continued by later probes to see where its next packet goes after the cluster
//! changed.
//!
//! Each flow remembers the conntrack entries it left on every node right after it last sent,
//! so flushes for other probes leave them alone: a kept flow is never judged on a conntrack
//! table the harness emptied under it.

use crate::netfilter::conntrack;
use crate::netns::Netns;
use crate::probe::{self, KeptEntries, ProbePlan, Shot, Source};
use crate::scenario::Protocol;
use crate::topology::Topology;
use anyhow::{anyhow, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

enum Socket {
    Tcp(std::io::BufReader<TcpStream>),
    Udp(UdpSocket),
}

struct KeptFlow {
    plan: ProbePlan,
    socket: Socket,
    entries: BTreeMap<String, BTreeSet<conntrack::Tuple>>,
}

/// The flows a scenario run keeps, by name.
#[derive(Default)]
pub struct KeptFlows {
    flows: BTreeMap<String, KeptFlow>,
    /// Flows whose opening the proxier refused or dropped, with the plan they were opened
    /// with: their probes are judged as any probe is, and a later `continue` finds no flow.
    never_opened: BTreeMap<String, ProbePlan>,
}

/// What the client asks on a kept connection; the backend answers with who it is.
const ASK: &[u8] = b"clientip\n";

impl KeptFlows {
    /// Every kept flow's conntrack entries, for flushes that must spare them.
    pub fn entries(&self) -> KeptEntries {
        self.entries_except(None)
    }

    fn entries_except(&self, skip: Option<&str>) -> KeptEntries {
        let mut all = KeptEntries::default();
        for (name, flow) in &self.flows {
            if Some(name.as_str()) == skip {
                continue;
            }
            for (node, tuples) in &flow.entries {
                all.0.entry(node.clone()).or_default().extend(tuples);
            }
        }
        all
    }

    /// The plan of the flow kept as `name` (opened or not).
    pub fn plan(&self, name: &str) -> Option<&ProbePlan> {
        self.flows
            .get(name)
            .map(|f| &f.plan)
            .or_else(|| self.never_opened.get(name))
    }

    /// Opens `plan` as a flow kept under `name` and returns its first exchange.
    pub fn open(
        &mut self,
        topo: &Topology,
        name: &str,
        plan: &ProbePlan,
        timeout: Duration,
    ) -> Result<Shot> {
        probe::flush_conntrack_keeping(topo, &self.entries())?;
        let ns = source_namespace(topo, &plan.source)?;
        let (ip, protocol) = (source_ip(&plan.source), plan.protocol);
        let local = SocketAddr::new(ip, plan.sport);
        let remote = SocketAddr::new(plan.dst, plan.dport);
        let opened = ns.run(move || -> std::io::Result<Socket> {
            match protocol {
                Protocol::Tcp => Ok(Socket::Tcp(std::io::BufReader::new(probe::connect_tcp(
                    local, remote, timeout,
                )?))),
                Protocol::Udp => {
                    let s = UdpSocket::bind(local)?;
                    s.set_read_timeout(Some(timeout))?;
                    s.connect(remote)?;
                    Ok(Socket::Udp(s))
                }
                Protocol::Sctp => Err(std::io::Error::other("SCTP flows cannot be kept")),
            }
        })?;
        let mut socket = match opened {
            Ok(socket) => socket,
            // The proxier refused or dropped the connection: that is the probe's outcome, and
            // the flow's later steps find none.
            Err(e) => {
                self.never_opened.insert(name.to_string(), plan.clone());
                return Ok(Shot {
                    sport: plan.sport,
                    delivered: None,
                    answer: None,
                    app_answer: None,
                    kept_backend_port: None,
                    socket_error: Some(probe::socket_error_kind(&e)),
                    dropped_at: None,
                });
            }
        };
        // A TCP backend greets each connection with its answer; a UDP one answers a datagram.
        let shot = exchange(&mut socket, plan.sport, protocol == Protocol::Udp);
        self.flows.insert(
            name.to_string(),
            KeptFlow {
                plan: plan.clone(),
                socket,
                entries: BTreeMap::new(),
            },
        );
        self.note_entries(topo, name)?;
        Ok(shot)
    }

    /// Sends the next request of the flow kept as `name` and returns what came of it.
    pub fn continue_flow(&mut self, topo: &Topology, name: &str) -> Result<(ProbePlan, Shot)> {
        if let Some(plan) = self.never_opened.get(name) {
            let shot = Shot {
                sport: plan.sport,
                delivered: None,
                answer: None,
                app_answer: None,
                kept_backend_port: None,
                socket_error: Some(probe::NEVER_OPENED.to_string()),
                dropped_at: None,
            };
            return Ok((plan.clone(), shot));
        }
        probe::flush_conntrack_keeping(topo, &self.entries())?;
        let flow = self
            .flows
            .get_mut(name)
            .ok_or_else(|| anyhow!("no flow is kept as `{name}`"))?;
        let shot = exchange(&mut flow.socket, flow.plan.sport, true);
        let plan = flow.plan.clone();
        self.note_entries(topo, name)?;
        Ok((plan, shot))
    }

    /// Records the entries the flow `name` holds now: every entry on the nodes that no other
    /// kept flow owns (every other probe's were flushed before this one sent).
    fn note_entries(&mut self, topo: &Topology, name: &str) -> Result<()> {
        let others = self.entries_except(Some(name));
        let mut mine = BTreeMap::new();
        for node in topo.nodes() {
            let theirs = others.0.get(&node.name);
            let tuples: BTreeSet<conntrack::Tuple> = conntrack::entries(&node.netns)
                .with_context(|| format!("on node {}", node.name))?
                .into_iter()
                .map(|e| e.original)
                .filter(|t| !theirs.is_some_and(|s| s.contains(t)))
                .collect();
            mine.insert(node.name.clone(), tuples);
        }
        if let Some(flow) = self.flows.get_mut(name) {
            flow.entries = mine;
        }
        Ok(())
    }
}

/// One request (unless `ask` is false: the answer comes unasked) and its answer on a kept
/// socket, as a socket probe's shot.
fn exchange(socket: &mut Socket, sport: u16, ask: bool) -> Shot {
    let answer = match socket {
        Socket::Tcp(stream) => {
            let asked = if ask {
                stream.get_mut().write_all(ASK)
            } else {
                Ok(())
            };
            asked.and_then(|()| {
                let mut line = String::new();
                match stream.read_line(&mut line)? {
                    0 => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
                    _ => Ok(line),
                }
            })
        }
        // An error the last exchange left pending (the ICMP port-unreachable of a REJECT) would
        // fail this send before anything goes out: it was that exchange's answer, already
        // judged, so it is read and cleared (SO_ERROR) and the request goes out.
        Socket::Udp(s) => s.take_error().and_then(|_| s.send(ASK)).and_then(|_| {
            let mut buf = [0u8; 512];
            let n = s.recv(&mut buf)?;
            Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
        }),
    };
    match answer {
        Ok(line) => Shot {
            sport,
            delivered: None,
            answer: None,
            kept_backend_port: answered_port(&line),
            app_answer: Some(line.trim().to_string()),
            socket_error: None,
            dropped_at: None,
        },
        Err(e) => Shot {
            sport,
            delivered: None,
            answer: None,
            app_answer: None,
            kept_backend_port: None,
            socket_error: Some(probe::socket_error_kind(&e)),
            dropped_at: None,
        },
    }
}

/// The backend port an answer names (`port=N`, see [`crate::backends::client_ip_answer`]): the
/// flow's target port, as the backend's socket has it.
fn answered_port(answer: &str) -> Option<u16> {
    answer
        .split_whitespace()
        .find_map(|field| field.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
}

fn source_namespace<'t>(topo: &'t Topology, source: &Source) -> Result<&'t Netns> {
    match source {
        Source::Crafted { ns_name, .. } => topo
            .namespaces()
            .into_iter()
            .find(|n| n.name() == ns_name)
            .ok_or_else(|| anyhow!("namespace {ns_name} is gone")),
        Source::Socket { node, .. } => Ok(&topo.node(node)?.netns),
    }
}

fn source_ip(source: &Source) -> std::net::IpAddr {
    match source {
        Source::Crafted { ip, .. } | Source::Socket { ip, .. } => *ip,
    }
}
