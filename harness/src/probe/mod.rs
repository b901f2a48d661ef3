//! Probes: one first packet from a source to a destination, and what the kernel made of it.
//!
//! Pod and external sources inject a pnet-crafted frame at L2 on their own interface, as if
//! their kernel had sent it; node and node-localhost sources open real sockets, because only
//! locally generated traffic traverses OUTPUT the way a node process's does. Captures on every
//! pod's veth record where the packet arrived and with which addresses (the observed DNAT and
//! SNAT); a capture on the source records what came back.

mod borrowed_address;
pub mod drop_verdicts;
pub mod packet;
mod sctp;

use crate::capture::{Capture, Flow};
use crate::netfilter::conntrack::Tuple;
use crate::netns::naming::{mac_for, BRIDGE_IF, UNDERLAY_IF};
use crate::netns::Netns;
pub use crate::probe::drop_verdicts::{DropVerdict, VerdictWatch};
use crate::scenario::{
    IpFamily, Node, Probe, ProbeTarget, Protocol, Scenario, ServicePort, TargetPort, Via,
};
use crate::topology::Topology;
use anyhow::{anyhow, bail, Context, Result};
use packet::{Answer, ProbePacket};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a probe waits for its packet to arrive and be answered.
pub fn probe_timeout() -> Duration {
    let ms = std::env::var("KPCT_PROBE_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    Duration::from_millis(ms)
}

/// How a shot that gets no answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropDecision {
    /// At the DROP verdict a node traced for its packet ([`crate::probe::drop_verdicts`]), or at the
    /// timeout where no node traced one.
    AtVerdict,
    /// Always at the timeout.
    AtTimeout,
}

/// How long a shot waits for its answer, and whether a traced DROP verdict ends the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    pub timeout: Duration,
    pub drops: DropDecision,
}

impl Patience {
    /// The verdict watch these shots need in `topo`: none when drops are waited out.
    pub fn verdict_watch(&self, topo: &Topology) -> Result<Option<VerdictWatch>> {
        match self.drops {
            DropDecision::AtVerdict => VerdictWatch::open(topo).map(Some),
            DropDecision::AtTimeout => Ok(None),
        }
    }
}

impl From<Duration> for Patience {
    /// `timeout`, with drops decided at their verdict.
    fn from(timeout: Duration) -> Patience {
        Patience {
            timeout,
            drops: DropDecision::AtVerdict,
        }
    }
}

/// Where a probe starts, resolved against the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Inject a crafted frame on `eth0` of a pod or of the external client.
    Crafted {
        label: String,
        ns_name: String,
        ip: IpAddr,
        mac: [u8; 6],
        next_hop_mac: [u8; 6],
    },
    /// A real socket in a node's namespace, bound to `ip` (node IP, 127.0.0.1 or ::1, or a
    /// load balancer IP the node sends from).
    Socket {
        label: String,
        node: String,
        ip: IpAddr,
        /// `ip` is a load balancer IP, made the node's for the shots
        /// ([`borrowed_address`]).
        borrowed: bool,
    },
}

impl Source {
    pub fn label(&self) -> &str {
        match self {
            Source::Crafted { label, .. } | Source::Socket { label, .. } => label,
        }
    }
}

/// A probe ready to fire.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    pub name: String,
    pub source: Source,
    pub protocol: Protocol,
    /// Of the family of the source's address.
    pub dst: IpAddr,
    pub dport: u16,
    /// Source port of the first repetition; repetition r uses `sport + r`.
    pub sport: u16,
    pub repeat: u32,
    /// The destination is a healthCheckNodePort: kube-proxy's health server there speaks
    /// HTTP and answers a request, not a connection, so a socket shot asks it something.
    pub asks_http: bool,
}

/// Resolves probe number `index` of `scenario`.
pub fn plan(scenario: &Scenario, topo: &Topology, index: usize) -> Result<ProbePlan> {
    let probe = scenario
        .probes
        .get(index)
        .ok_or_else(|| anyhow!("no probe #{index}"))?;
    let ctx = || format!("probe `{}`", probe.name);
    let (protocol, dst, dport, via_node) = destination(scenario, probe).with_context(ctx)?;
    let source = source(scenario, topo, probe, dst, via_node.as_deref()).with_context(ctx)?;
    let sport = u16::try_from(probe.first_source_port(index))
        .map_err(|_| anyhow!("probe `{}`: source port out of range", probe.name))?;
    Ok(ProbePlan {
        name: probe.name.clone(),
        source,
        protocol,
        dst,
        dport,
        sport,
        repeat: probe.repeat.max(1),
        asks_http: probe.to.ip.is_none()
            && probe.to.via == Some(crate::scenario::Via::HealthCheckNodePort),
    })
}

fn find_port<'a>(ports: &'a [ServicePort], wanted: Option<&TargetPort>) -> Result<&'a ServicePort> {
    match wanted {
        None => ports.first().ok_or_else(|| anyhow!("service has no ports")),
        Some(TargetPort::Number(n)) => ports
            .iter()
            .find(|p| p.port == *n)
            .ok_or_else(|| anyhow!("service has no port {n}")),
        Some(TargetPort::Name(name)) => ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .ok_or_else(|| anyhow!("service has no port named {name}")),
    }
}

/// (protocol, destination IP, destination port, node to enter through).
fn destination(
    scenario: &Scenario,
    probe: &Probe,
) -> Result<(Protocol, IpAddr, u16, Option<String>)> {
    let to = &probe.to;
    if let Some(ip) = to.ip {
        let dport = to
            .dport
            .ok_or_else(|| anyhow!("`to.ip` needs `to.dport`"))?;
        let node = to.node.clone().or_else(|| {
            scenario
                .topology
                .nodes
                .iter()
                .find(|n| n.owns(ip))
                .map(|n| n.name.clone())
        });
        return Ok((probe.protocol, ip, dport, node));
    }
    let wanted = to
        .service
        .as_deref()
        .ok_or_else(|| anyhow!("`to` needs `service` or `ip`"))?;
    let (ns, name) = wanted.split_once('/').unwrap_or(("default", wanted));
    let svc = scenario
        .services
        .iter()
        .find(|s| s.name == name && s.namespace == ns)
        .ok_or_else(|| anyhow!("no service {ns}/{name}"))?;
    let port = find_port(&svc.spec.ports, to.port.as_ref())?;
    let via = to.via.unwrap_or(Via::ClusterIP);
    let cluster_ips = svc.cluster_ips();
    let family = scenario.probe_family(probe);
    let of_family = |ip: &&IpAddr| IpFamily::of(**ip) == family;
    let first_node = || scenario.topology.nodes.first().map(|n| n.name.clone());
    let (ip, dport, node) = match via {
        Via::ClusterIP => {
            let ip = *cluster_ips
                .iter()
                .find(of_family)
                .ok_or_else(|| anyhow!("service {ns}/{name} has no {family} ClusterIP"))?;
            (ip, port.port, None)
        }
        Via::NodePort => {
            // From a node's loopback, its own NodePort.
            let to = &ProbeTarget {
                node: to
                    .node
                    .clone()
                    .or_else(|| probe.from.node_localhost.clone()),
                ..to.clone()
            };
            let (node_name, node) = addressed_node(scenario, to, "nodePort")?;
            let np = port
                .node_port
                .ok_or_else(|| anyhow!("service {ns}/{name} port {} has no nodePort", port.port))?;
            let ip = if probe.from.node_localhost.is_some() {
                family.localhost()
            } else {
                node_address(node, family)?
            };
            (ip, np, Some(node_name))
        }
        Via::HealthCheckNodePort => {
            let (node_name, node) = addressed_node(scenario, to, "healthCheckNodePort")?;
            let hc = svc
                .spec
                .health_check_node_port
                .ok_or_else(|| anyhow!("service {ns}/{name} has no healthCheckNodePort"))?;
            // kube-proxy's health server speaks HTTP: TCP whatever the service's protocol.
            return Ok((
                Protocol::Tcp,
                node_address(node, family)?,
                hc,
                Some(node_name),
            ));
        }
        Via::ExternalIP => {
            let ip = *svc
                .spec
                .external_ips
                .iter()
                .find(of_family)
                .ok_or_else(|| anyhow!("service {ns}/{name} has no {family} externalIPs"))?;
            (ip, port.port, to.node.clone().or_else(first_node))
        }
        Via::LoadBalancer => {
            let ingress: Vec<IpAddr> = svc
                .status
                .load_balancer
                .ingress
                .iter()
                .map(|i| i.ip)
                .collect();
            let ip = *ingress.iter().find(of_family).ok_or_else(|| {
                anyhow!("service {ns}/{name} has no {family} load balancer ingress IP")
            })?;
            (ip, port.port, to.node.clone().or_else(first_node))
        }
    };
    Ok((port.protocol, ip, dport, node))
}

/// The underlay address of `family` of a node a probe is sent to.
fn node_address(node: &Node, family: IpFamily) -> Result<IpAddr> {
    node.ip
        .of(family)
        .ok_or_else(|| anyhow!("node {} has no {family} address", node.name))
}

/// The node whose IP a `via: nodePort` / `via: healthCheckNodePort` probe is sent to.
fn addressed_node<'s>(
    scenario: &'s Scenario,
    to: &ProbeTarget,
    via: &str,
) -> Result<(String, &'s Node)> {
    let name = to
        .node
        .clone()
        .ok_or_else(|| anyhow!("`via: {via}` needs `to.node`"))?;
    let node = scenario
        .topology
        .nodes
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| anyhow!("no node {name}"))?;
    Ok((name, node))
}

/// The probe's source, sending from its address of `dst`'s family.
fn source(
    scenario: &Scenario,
    topo: &Topology,
    probe: &Probe,
    dst: IpAddr,
    via_node: Option<&str>,
) -> Result<Source> {
    let from = &probe.from;
    let family = IpFamily::of(dst);
    let no_address = |who: &str| anyhow!("{who} has no {family} address to reach {dst} from");
    if let Some(pod_name) = &from.pod {
        let pod = topo.pod(pod_name)?;
        return Ok(Source::Crafted {
            label: format!("pod {pod_name}"),
            ns_name: pod.netns.name().to_string(),
            ip: pod
                .ip_of(family)
                .ok_or_else(|| no_address(&format!("pod {pod_name}")))?,
            mac: pod.mac,
            next_hop_mac: mac_for(&format!("node/{}/{BRIDGE_IF}", pod.node)),
        });
    }
    if from.external {
        let ext = topo.external()?;
        // An external client reaches node IPs directly and VIPs through a node acting as the
        // next hop (as an upstream router would route them).
        let node = scenario
            .topology
            .nodes
            .iter()
            .find(|n| n.owns(dst))
            .map(|n| n.name.as_str())
            .or(via_node)
            .ok_or_else(|| {
                anyhow!("cannot tell which node an external packet to {dst} enters; set `to.node`")
            })?;
        return Ok(Source::Crafted {
            label: format!("external {}", ext.name),
            ns_name: ext.netns.name().to_string(),
            ip: ext
                .ip_of(family)
                .ok_or_else(|| no_address(&format!("external client {}", ext.name)))?,
            mac: ext.mac,
            next_hop_mac: mac_for(&format!("node/{node}/{UNDERLAY_IF}")),
        });
    }
    if let Some(node) = &from.node {
        if let Some(address) = from.address {
            topo.node(node)?;
            if IpFamily::of(address) != family {
                bail!("node {node} cannot send from {address} to {dst}: the families differ");
            }
            return Ok(Source::Socket {
                label: format!("node {node} from {address}"),
                node: node.clone(),
                ip: address,
                borrowed: true,
            });
        }
        return Ok(Source::Socket {
            label: format!("node {node}"),
            node: node.clone(),
            ip: topo
                .node(node)?
                .ip_of(family)
                .ok_or_else(|| no_address(&format!("node {node}")))?,
            borrowed: false,
        });
    }
    if let Some(node) = &from.node_localhost {
        topo.node(node)?;
        return Ok(Source::Socket {
            label: format!("node {node} localhost"),
            node: node.clone(),
            ip: family.localhost(),
            borrowed: false,
        });
    }
    bail!("`from` names no source")
}

/// Where one repetition of a probe was delivered, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub pod: String,
    /// The packet as the backend received it.
    pub flow: Flow,
}

/// The raw outcome of one repetition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    pub sport: u16,
    pub delivered: Option<Delivery>,
    pub answer: Option<Answer>,
    /// For socket probes: what the backend said it saw (`client=IP:PORT pod=NAME port=N`).
    pub app_answer: Option<String>,
    /// For a flow kept across steps: the backend port that answered it (its answer's `port=`),
    /// which its observation records. `None` for every other shot.
    pub kept_backend_port: Option<u16>,
    /// For socket probes: the error the connecting socket got (refused, timed out, …).
    pub socket_error: Option<String>,
    /// Where the kernel dropped the packet, when that ended the wait before the timeout.
    pub dropped_at: Option<DropVerdict>,
}

/// Empties conntrack in every node, so no probe rides on state left by another.
pub fn flush_conntrack(topo: &Topology) -> Result<()> {
    for node in topo.nodes() {
        crate::netfilter::conntrack::flush(&node.netns)
            .with_context(|| format!("on node {}", node.name))?;
    }
    Ok(())
}

/// Conntrack entries a flush must leave alone, by node: those of the flows a scenario keeps
/// across steps (their original-direction tuples, which identify an entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptEntries(pub std::collections::BTreeMap<String, std::collections::BTreeSet<Tuple>>);

impl KeptEntries {
    pub fn is_empty(&self) -> bool {
        self.0.values().all(|s| s.is_empty())
    }

    fn keeps(&self, node: &str, entry: &crate::netfilter::conntrack::Entry) -> bool {
        self.0
            .get(node)
            .is_some_and(|s| s.contains(&entry.original))
    }
}

/// Empties conntrack in every node but for the kept entries: a probe that opens new flows
/// starts clean, and a flow kept across steps still rides on its entries.
pub fn flush_conntrack_keeping(topo: &Topology, kept: &KeptEntries) -> Result<()> {
    if kept.is_empty() {
        return flush_conntrack(topo);
    }
    for node in topo.nodes() {
        crate::netfilter::conntrack::delete_where(&node.netns, |e| !kept.keeps(&node.name, e))
            .with_context(|| format!("flushing conntrack on node {}", node.name))?;
    }
    Ok(())
}

/// Fires every repetition of `plan` and returns what each observed. Conntrack is flushed once
/// per probe: every shot uses its own source port, so each is a new flow anyway, while state
/// that is *meant* to carry over between a client's connections (session affinity) does.
pub fn fire(topo: &Topology, plan: &ProbePlan, patience: impl Into<Patience>) -> Result<Vec<Shot>> {
    let patience = patience.into();
    let mut verdicts = patience.verdict_watch(topo)?;
    let shots = fire_keeping(
        topo,
        plan,
        patience.timeout,
        &KeptEntries::default(),
        verdicts.as_mut(),
    )?;
    if let Some(v) = verdicts {
        v.close()?;
    }
    Ok(shots)
}

/// [`fire`], leaving the `kept` conntrack entries in place, with drops decided by `verdicts`
/// (a run opens one for all its probes: creating and deleting its table costs ~70 ms in the
/// emulated VM) or at `timeout`.
pub fn fire_keeping(
    topo: &Topology,
    plan: &ProbePlan,
    timeout: Duration,
    kept: &KeptEntries,
    verdicts: Option<&mut VerdictWatch>,
) -> Result<Vec<Shot>> {
    flush_conntrack_keeping(topo, kept)?;
    let sport_of = |rep: u32| {
        plan.sport
            .checked_add(u16::try_from(rep).unwrap_or(u16::MAX))
            .ok_or_else(|| anyhow!("probe {}: source ports run past 65535", plan.name))
    };
    let mut shots = Vec::new();
    match &plan.source {
        Source::Crafted {
            ns_name,
            ip,
            mac,
            next_hop_mac,
            ..
        } => {
            let ns = topo
                .namespaces()
                .into_iter()
                .find(|n| n.name() == ns_name)
                .ok_or_else(|| anyhow!("namespace {ns_name} is gone"))?;
            // Captures stay open for all shots of the probe: frames of earlier shots cannot be
            // mistaken for later ones, since each shot carries its own marker.
            let mut captures = Captures::open(topo, ns)?;
            let mut verdicts = verdicts;
            for rep in 0..plan.repeat {
                let packet = ProbePacket {
                    protocol: plan.protocol,
                    src_mac: *mac,
                    dst_mac: *next_hop_mac,
                    src: *ip,
                    sport: sport_of(rep)?,
                    dst: plan.dst,
                    dport: plan.dport,
                    seq: sequence_number(&plan.name, rep),
                };
                shots.push(captures.shoot(&packet, timeout, verdicts.as_deref_mut())?);
            }
        }
        Source::Socket {
            node, ip, borrowed, ..
        } => {
            let ns = &topo.node(node)?.netns;
            let borrowed = match borrowed {
                true => Some(borrowed_address::BorrowedAddress::hold(ns, *ip)?),
                false => None,
            };
            for rep in 0..plan.repeat {
                let local = SocketAddr::new(*ip, sport_of(rep)?);
                let remote = SocketAddr::new(plan.dst, plan.dport);
                shots.push(fire_socket(
                    ns,
                    plan.protocol,
                    plan.asks_http,
                    local,
                    remote,
                    timeout,
                )?);
            }
            if let Some(address) = borrowed {
                address.release()?;
            }
        }
    }
    Ok(shots)
}

/// A TCP ISN derived from the probe name and repetition (FNV-1a): fixed per probe, distinct
/// between probes, so a capture can tell probes apart even after NAT.
pub fn sequence_number(name: &str, rep: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes().chain(rep.to_be_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The source's interface and every pod's veth, opened before anything is sent.
struct Captures<'t> {
    at_source: Capture,
    at_pods: Vec<(&'t crate::topology::PodNs, Capture)>,
}

impl<'t> Captures<'t> {
    fn open(topo: &'t Topology, src_ns: &Netns) -> Result<Captures<'t>> {
        let at_source = Capture::open(src_ns, "eth0")?;
        let mut at_pods = Vec::new();
        for pod in topo.pods() {
            let node = topo.node(&pod.node)?;
            at_pods.push((pod, Capture::open(&node.netns, &pod.host_veth)?));
        }
        Ok(Captures { at_source, at_pods })
    }

    /// Sends `packet` and waits for its answer and its delivery, until `timeout`, or until
    /// `verdicts` shows it dropped.
    fn shoot(
        &mut self,
        packet: &ProbePacket,
        timeout: Duration,
        verdicts: Option<&mut VerdictWatch>,
    ) -> Result<Shot> {
        let deadline = Instant::now() + timeout;
        let answered = AtomicBool::new(false);
        let arrived = AtomicBool::new(false);
        let mut verdicts = verdicts;
        if let Some(v) = verdicts.as_deref_mut() {
            v.start_shot(packet)?;
        }
        self.at_source.send(&packet.frame())?;
        let at_source = &mut self.at_source;
        let at_pods = &mut self.at_pods;
        std::thread::scope(|scope| -> Result<Shot> {
            let pod_watchers: Vec<_> = at_pods
                .iter_mut()
                .map(|(pod, cap)| {
                    let (answered, arrived) = (&answered, &arrived);
                    scope.spawn(move || watch_pod(pod, cap, packet, deadline, answered, arrived))
                })
                .collect();
            let (answer, dropped_at) = wait_for_answer(at_source, packet, deadline, verdicts)?;
            answered.store(true, Ordering::SeqCst);
            let mut delivered = None;
            for w in pod_watchers {
                let d = w.join().map_err(|_| anyhow!("capture thread panicked"))??;
                if delivered.is_none() {
                    delivered = d;
                }
            }
            Ok(Shot {
                sport: packet.sport,
                delivered,
                answer: answer.and_then(|f| packet.answer(&f)),
                app_answer: None,
                kept_backend_port: None,
                socket_error: None,
                dropped_at,
            })
        })
    }
}

/// How long a shot waits for its answer before it reads the nodes' trace: most shots are
/// answered well within it, and never pay for reading theirs.
const BEFORE_TRACE: Duration = Duration::from_millis(20);

/// Reads the source's capture until `packet`'s answer comes, the deadline passes, or the trace
/// of `verdicts` decides the shot as dropped (then what the capture already holds is still
/// read).
fn wait_for_answer(
    at_source: &mut Capture,
    packet: &ProbePacket,
    deadline: Instant,
    mut verdicts: Option<&mut VerdictWatch>,
) -> Result<(Option<crate::capture::Frame>, Option<DropVerdict>)> {
    let mut judge = crate::probe::drop_verdicts::Judge::default();
    let answers = |f: &crate::capture::Frame| packet.answer(f).is_some();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = at_source.wait_for(left.min(BEFORE_TRACE), answers)?;
        if answer.is_some() || left.is_zero() {
            return Ok((answer, None));
        }
        if let Some(v) = verdicts.as_deref_mut() {
            if let Some(dropped) = v.shot_verdict(packet, &mut judge)? {
                return Ok((at_source.wait_for(Duration::ZERO, answers)?, Some(dropped)));
            }
        }
    }
}

/// Watches one pod's veth for the probe's forward packet until the deadline, or until the source
/// got its answer (or another pod got the packet) and this capture has nothing left buffered:
/// a forward packet that reached this pod precedes the answer, so it is queued by then.
fn watch_pod(
    pod: &crate::topology::PodNs,
    cap: &mut Capture,
    packet: &ProbePacket,
    deadline: Instant,
    answered: &AtomicBool,
    arrived: &AtomicBool,
) -> Result<Option<Delivery>> {
    let seen = watch_for_forward(cap, packet, pod.mac, deadline, || {
        answered.load(Ordering::SeqCst) || arrived.load(Ordering::SeqCst)
    })?;
    Ok(seen.map(|flow| {
        arrived.store(true, Ordering::SeqCst);
        Delivery {
            pod: pod.name.clone(),
            flow,
        }
    }))
}

/// The flow of `packet`'s forward frame to `mac` on `cap`: read until the deadline or until
/// `settled`, and always once more after either. A watcher that a starved machine (an emulated
/// VM beside other work) schedules only at or after the deadline still reads the frame that
/// arrived in time; without that last read such a shot was judged answered but never delivered.
fn watch_for_forward(
    cap: &mut Capture,
    packet: &ProbePacket,
    mac: [u8; 6],
    deadline: Instant,
    settled: impl Fn() -> bool,
) -> Result<Option<Flow>> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let last = settled() || left.is_zero();
        // Short slices, so a watcher notices promptly that the shot is settled.
        let slice = if last {
            Duration::from_millis(1)
        } else {
            left.min(Duration::from_millis(10))
        };
        match cap.wait_for(slice, |f| packet.is_forward(f, mac))? {
            Some(frame) => return Ok(frame.flow()),
            None if last => return Ok(None),
            None => {}
        }
    }
}

fn fire_socket(
    ns: &Netns,
    protocol: Protocol,
    asks_http: bool,
    local: SocketAddr,
    remote: SocketAddr,
    timeout: Duration,
) -> Result<Shot> {
    let outcome = ns.run(move || -> std::io::Result<String> {
        use std::io::BufRead;
        match protocol {
            Protocol::Tcp => {
                use std::io::Write;
                let mut stream = connect_tcp(local, remote, timeout)?;
                if asks_http {
                    // kube-proxy's health server answers a request, any path (`hcHandler`,
                    // pkg/proxy/healthcheck/service_health.go); HTTP/1.0 has it close after.
                    stream.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
                }
                // The suite's servers answer one line on connecting and hold the connection
                // until the client closes it: read that line (or the status line) and close.
                let mut answer = String::new();
                std::io::BufReader::new(stream).read_line(&mut answer)?;
                Ok(answer)
            }
            Protocol::Udp => {
                let s = std::net::UdpSocket::bind(local)?;
                s.set_read_timeout(Some(timeout))?;
                report_icmp_errors(&s, local)?;
                s.send_to(b"clientip", remote)?;
                let mut buf = [0u8; 512];
                let (n, _) = s.recv_from(&mut buf)?;
                Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
            }
            Protocol::Sctp => Err(std::io::Error::other(
                "SCTP socket probes are not supported",
            )),
        }
    })?;
    Ok(match outcome {
        Ok(answer) => Shot {
            sport: local.port(),
            delivered: None,
            answer: None,
            app_answer: Some(answer.trim().to_string()),
            kept_backend_port: None,
            socket_error: None,
            dropped_at: None,
        },
        Err(e) => Shot {
            sport: local.port(),
            delivered: None,
            answer: None,
            app_answer: None,
            kept_backend_port: None,
            socket_error: Some(socket_error_kind(&e)),
            dropped_at: None,
        },
    })
}

/// Has an unconnected UDP socket report the ICMP errors its datagrams meet (`IP_RECVERR`,
/// `IPV6_RECVERR`; ip(7)): without it only a connected socket hears of them, so a datagram
/// a REJECT (or a closed port) answered with port-unreachable read as no answer at all, one
/// whole probe timeout per shot. Unconnected, so that an answer from an address other than the
/// one dialed (a reverse translation gone wrong) is still received and judged as such.
fn report_icmp_errors(s: &std::net::UdpSocket, local: SocketAddr) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    match local {
        SocketAddr::V4(_) => setsockopt(s, sockopt::Ipv4RecvErr, &true)?,
        SocketAddr::V6(_) => setsockopt(s, sockopt::Ipv6RecvErr, &true)?,
    }
    Ok(())
}

/// A TCP connection from `local` to `remote`, made in the calling thread's namespace, with
/// `timeout` bounding the connect and every later read and write.
pub(crate) fn connect_tcp(
    local: SocketAddr,
    remote: SocketAddr,
    timeout: Duration,
) -> std::io::Result<std::net::TcpStream> {
    use nix::sys::socket::{
        self as sock, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
    };
    let family = match local {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let socket = sock::socket(family, SockType::Stream, SockFlag::empty(), None)?;
    sock::setsockopt(&socket, sockopt::ReuseAddr, &true)?;
    sock::bind(
        std::os::fd::AsRawFd::as_raw_fd(&socket),
        &SockaddrStorage::from(local),
    )?;
    let stream = std::net::TcpStream::from(socket);
    // SO_SNDTIMEO bounds the blocking connect on Linux.
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    sock::connect(fd, &SockaddrStorage::from(remote))?;
    Ok(stream)
}

/// How the `continue` of a kept flow that never opened (the proxier refused or dropped its
/// first connection) is recorded: no packet goes out, nothing comes back.
pub const NEVER_OPENED: &str = "flow never opened";

pub(crate) fn socket_error_kind(e: &std::io::Error) -> String {
    // A blocking connect whose SO_SNDTIMEO runs out fails with EINPROGRESS (net/ipv4/
    // af_inet.c, `__inet_stream_connect`): no answer came, as for any other timeout.
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        return "timeout".into();
    }
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "refused".into(),
        // A write after the peer reset the connection fails with EPIPE.
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => "reset".into(),
        // The peer closed the connection (FIN) before answering.
        std::io::ErrorKind::UnexpectedEof => "closed".into(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "timeout".into(),
        std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => {
            "unreachable".into()
        }
        _ => format!("error: {e}"),
    }
}

#[cfg(test)]
mod tests;
