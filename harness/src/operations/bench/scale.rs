//! `kpct bench scale`: a synthetic cluster of N ClusterIP+NodePort services × E endpoints on a
//! few nodes, per proxier and per N: how long computing ([`Proxier::program`]) and applying
//! ([`crate::programming::apply`]) each node's programming takes, how much the node then
//! holds, and the latency of new connections from a pod to the ClusterIP of the first, middle
//! and last service.
//!
//! The latency is the interesting number: in iptables mode the first packet of a connection
//! walks `KUBE-SERVICES` rule by rule (the last service is matched after every other one),
//! while IPVS finds the virtual server in a hash table. It is measured with real sockets: the
//! time `connect()` takes (SYN out, DNAT, backend, SYN-ACK back through reverse NAT) from a
//! dedicated client pod, with conntrack flushed in every node before each connection so every
//! probe is a new flow that traverses the rules. Each probe also reads the backend's answer
//! (`client=… pod=…`), so a delivery failure is counted, not timed.
//!
//! Each (proxier, N) gets a fresh topology, torn down afterwards.

use super::{human, median, percentile};
use crate::backends::Backends;
use crate::probe;
use crate::programming::tools::IptablesBackend;
use crate::programming::{self, Programming, Step};
use crate::proxier::Proxier;
use crate::scenario::{
    self, ContainerPort, DualIp, Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
    IpFamily, Protocol, Scenario, Service, ServicePort, ServiceSpec, ServiceType, SessionAffinity,
    TargetPort,
};
use crate::topology::Topology;
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::BufRead;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// The service port every synthetic service exposes, and the port its endpoints listen on.
pub const SERVICE_PORT: u16 = 80;
pub const TARGET_PORT: u16 = 8080;
/// NodePorts are `FIRST_NODE_PORT + service index` (the default NodePort range is 30000-32767).
pub const FIRST_NODE_PORT: u16 = 30000;
const MAX_SERVICES: usize = 32767 - FIRST_NODE_PORT as usize + 1;
/// The pod that connects to the services (on the first node, no endpoints).
pub const CLIENT_POD: &str = "client";

/// What `kpct bench scale` runs.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// Service counts, one fresh cluster each (e.g. 10, 100, 1000).
    pub services: Vec<usize>,
    /// Endpoints per service.
    pub endpoints: usize,
    pub nodes: u8,
    /// Backend pods per node; endpoints are spread over them.
    pub pods_per_node: u8,
    /// Connections timed per probed service.
    pub probes: usize,
    pub probe_timeout: Duration,
    /// The iptables flavours a proxier that writes iptables is run with, each in turn.
    pub iptables_backends: Vec<IptablesBackend>,
}

impl Default for ScaleOptions {
    fn default() -> Self {
        ScaleOptions {
            services: vec![10, 100, 1000],
            endpoints: 10,
            nodes: 3,
            pods_per_node: 10,
            probes: 30,
            probe_timeout: Duration::from_secs(2),
            iptables_backends: vec![IptablesBackend::Nft],
        }
    }
}

fn pod_name(node: u8, slot: u8) -> String {
    format!("pod-{node}-{slot}")
}

/// The name of service number `index`; zero-padded so name order (the order proxiers write
/// services in) is index order.
pub fn service_name(index: usize) -> String {
    format!("svc-{index:04}")
}

/// The synthetic cluster: `nodes` nodes with `pods_per_node` backend pods each, all listening on
/// [`TARGET_PORT`], a client pod on the first node, and `services` NodePort services (ClusterIP
/// `10.96.0.10` upward, NodePort 30000 upward), each with an EndpointSlice of `endpoints`
/// distinct backend pods. Backend pods are numbered across nodes in turn (pod k is on node
/// k mod nodes) and service s takes pods s, s+1, …, s+endpoints−1 (modulo the pod count), so
/// every service's endpoints are spread over the nodes and consecutive services share most pods.
pub fn scale_scenario(
    services: usize,
    endpoints: usize,
    nodes: u8,
    pods_per_node: u8,
) -> Result<Scenario> {
    let pod_count = usize::from(nodes) * usize::from(pods_per_node);
    if nodes == 0 || pods_per_node == 0 {
        bail!("need at least one node and one pod per node");
    }
    if pods_per_node > 200 || nodes > 200 {
        bail!("at most 200 nodes and 200 pods per node");
    }
    if endpoints == 0 || endpoints > pod_count {
        bail!("{endpoints} endpoints per service need as many distinct pods; there are {pod_count} ({nodes} nodes × {pods_per_node} pods)");
    }
    if services == 0 || services > MAX_SERVICES {
        bail!("between 1 and {MAX_SERVICES} services (one NodePort each)");
    }
    let mut scenario = super::synthetic_scenario(nodes, pods_per_node);
    scenario.name = format!("bench-scale-{services}x{endpoints}");
    for pod in &mut scenario.topology.pods {
        pod.ports = vec![ContainerPort {
            name: Some("http".into()),
            container_port: TARGET_PORT,
            protocol: Protocol::Tcp,
        }];
    }
    let first_node = &scenario.topology.nodes[0];
    let client = crate::scenario::Pod {
        name: CLIENT_POD.into(),
        namespace: "default".into(),
        node: first_node.name.clone(),
        ip: DualIp::v4(
            ipv4(first_node.pod_cidr.v4)?
                .nth(250)
                .context("the first node's podCIDR has no .250")?,
        ),
        labels: Default::default(),
        ports: Vec::new(),
    };
    scenario.topology.pods.push(client);
    // Backend pod k, with pods taken from the nodes in turn.
    let backend = |k: usize| {
        let node = (k % usize::from(nodes)) as u8;
        let slot = (k / usize::from(nodes)) as u8;
        let pod = scenario
            .topology
            .pods
            .iter()
            .find(|p| p.name == pod_name(node, slot))
            .expect("synthetic_scenario names its pods pod-NODE-SLOT");
        (ipv4(pod.ip.v4), pod.node.clone())
    };
    let mut service_list = Vec::with_capacity(services);
    let mut slices = Vec::with_capacity(services);
    for s in 0..services {
        let cluster_ip = ipv4(scenario.topology.service_cidr.v4)?
            .nth(10 + s as u32)
            .context("service CIDR too small")?;
        service_list.push(Service {
            name: service_name(s),
            namespace: "default".into(),
            labels: Default::default(),
            annotations: Default::default(),
            spec: ServiceSpec {
                type_: ServiceType::NodePort,
                cluster_ip: Some(cluster_ip.to_string()),
                cluster_ips: Vec::new(),
                ip_families: Vec::new(),
                ip_family_policy: None,
                selector: None,
                ports: vec![ServicePort {
                    name: Some("http".into()),
                    protocol: Protocol::Tcp,
                    port: SERVICE_PORT,
                    target_port: Some(TargetPort::Number(TARGET_PORT)),
                    node_port: Some(FIRST_NODE_PORT + s as u16),
                }],
                external_ips: Vec::new(),
                external_traffic_policy: None,
                internal_traffic_policy: None,
                load_balancer_source_ranges: Vec::new(),
                session_affinity: SessionAffinity::None,
                session_affinity_config: None,
                health_check_node_port: None,
            },
            status: Default::default(),
        });
        slices.push(EndpointSlice {
            labels: Default::default(),
            service: service_name(s),
            namespace: "default".into(),
            address_type: IpFamily::Ipv4,
            ports: vec![EndpointPort {
                name: Some("http".into()),
                port: TARGET_PORT,
                protocol: Protocol::Tcp,
            }],
            endpoints: (0..endpoints)
                .map(|e| {
                    let (ip, node) = backend((s + e) % pod_count);
                    Ok(Endpoint {
                        addresses: vec![ip?.into()],
                        conditions: EndpointConditions::default(),
                        node_name: Some(node),
                    })
                })
                .collect::<Result<_>>()?,
        });
    }
    scenario.services = service_list;
    scenario.endpoint_slices = slices;
    Ok(scenario)
}

/// The services probed for `n` services: first, middle and last (fewer when they coincide).
pub fn probe_targets(n: usize) -> Vec<(&'static str, usize)> {
    let mut out: Vec<(&'static str, usize)> = Vec::new();
    for (label, index) in [
        ("first", 0),
        ("middle", n / 2),
        ("last", n.saturating_sub(1)),
    ] {
        if n > 0 && !out.iter().any(|(_, i)| *i == index) {
            out.push((label, index));
        }
    }
    out
}

/// What one node holds after applying, counted from the programming.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub iptables_rules: usize,
    pub iptables_chains: usize,
    pub ipsets: usize,
    pub ipset_entries: usize,
    pub ipvs_services: usize,
    pub ipvs_destinations: usize,
    pub addresses: usize,
    /// Lines of the `nft -f` transaction.
    pub nft_lines: usize,
}

impl Counts {
    pub fn of(p: &Programming) -> Counts {
        Counts {
            iptables_rules: p.iptables.values().map(|t| t.rules.len()).sum(),
            iptables_chains: p.iptables.values().map(|t| t.chains.len()).sum(),
            ipsets: p.ipsets.len(),
            ipset_entries: p.ipsets.iter().map(|s| s.entries.len()).sum(),
            ipvs_services: p.ipvs.len(),
            ipvs_destinations: p.ipvs.iter().map(|v| v.destinations.len()).sum(),
            addresses: p.kube_ipvs0_addresses().len(),
            nft_lines: p.nft.lines.len(),
        }
    }
}

/// Cost of one node's programming.
#[derive(Debug, Clone)]
pub struct NodeCost {
    pub node: String,
    pub program: Duration,
    /// The whole `programming::apply` call.
    pub apply: Duration,
    /// Of which: recording the pre-apply state for rollback.
    pub snapshot: Duration,
    /// Of which: each step that ran.
    pub steps: Vec<(Step, Duration)>,
    pub counts: Counts,
}

/// Connection latency to one service.
#[derive(Debug, Clone)]
pub struct TargetLatency {
    /// first / middle / last.
    pub label: &'static str,
    pub service: String,
    /// Time of each successful `connect()`.
    pub rtts: Vec<Duration>,
    /// Connections that failed or got no answer, with the first error.
    pub failures: usize,
    pub first_error: Option<String>,
    /// The backend pods that answered.
    pub reached: BTreeSet<String>,
}

/// One proxier at one size.
#[derive(Debug, Clone)]
pub struct ScaleRun {
    pub proxier: String,
    pub services: usize,
    pub endpoints: usize,
    pub topology_setup: Duration,
    pub teardown: Duration,
    pub nodes: Vec<NodeCost>,
    pub targets: Vec<TargetLatency>,
}

impl ScaleRun {
    fn mean_node<F: Fn(&NodeCost) -> Duration>(&self, f: F) -> Duration {
        if self.nodes.is_empty() {
            return Duration::ZERO;
        }
        self.nodes.iter().map(f).sum::<Duration>() / self.nodes.len() as u32
    }

    /// Mean over nodes of one apply step; `None` if no node ran it.
    fn mean_step(&self, step: Step) -> Option<Duration> {
        let times: Vec<Duration> = self
            .nodes
            .iter()
            .filter_map(|n| n.steps.iter().find(|(s, _)| *s == step).map(|(_, d)| *d))
            .collect();
        (!times.is_empty()).then(|| times.iter().sum::<Duration>() / times.len() as u32)
    }
}

/// Runs `proxier` against the synthetic cluster of `services` services: builds the topology,
/// programs and applies every node, starts the backends, times the probes, tears down.
pub async fn run_one<P: Proxier + ?Sized>(
    proxier: &P,
    services: usize,
    opts: &ScaleOptions,
    backend: IptablesBackend,
) -> Result<ScaleRun> {
    let scenario = scale_scenario(services, opts.endpoints, opts.nodes, opts.pods_per_node)?;
    let started = Instant::now();
    let topo = Topology::build(&scenario)
        .await
        .with_context(|| format!("building the topology of {}", scenario.name))?;
    let topology_setup = started.elapsed();
    let cluster = scenario::cluster_state(&scenario);
    let mut nodes = Vec::new();
    for node in topo.nodes() {
        let ctx = scenario::node_context(&scenario, &node.name)
            .with_context(|| format!("node {} is not in the scenario", node.name))?;
        let started = Instant::now();
        let programming = proxier
            .program(&cluster, &ctx)
            .with_context(|| format!("{} programming node {}", proxier.name(), node.name))?;
        let program = started.elapsed();
        let started = Instant::now();
        let applier = programming::Applier::new(programming::ApplyOptions {
            backend,
            ..programming::ApplyOptions::default()
        });
        let report = applier
            .apply(&node.netns, &node.name, &programming, None)
            .with_context(|| {
                format!(
                    "applying {}'s programming to node {}",
                    proxier.name(),
                    node.name
                )
            })?;
        let apply = started.elapsed();
        nodes.push(NodeCost {
            node: node.name.clone(),
            program,
            apply,
            snapshot: report.snapshot_time,
            steps: report.step_times.clone(),
            counts: Counts::of(&programming),
        });
    }
    let backends = Backends::start(&topo, &scenario.topology.pods)?;
    let client = topo.pod(CLIENT_POD)?;
    let timeout = opts.probe_timeout;
    // Warm-up: one direct connection to every backend resolves every neighbour on the way, so
    // no timed connection waits for ARP.
    for pod in scenario
        .topology
        .pods
        .iter()
        .filter(|p| p.name != CLIENT_POD)
    {
        let dst = SocketAddrV4::new(ipv4(pod.ip.v4)?, TARGET_PORT);
        client
            .netns
            .run(move || connect_and_read(dst, timeout))?
            .with_context(|| format!("warm-up connection from {CLIENT_POD} to pod {}", pod.name))?;
    }
    let mut targets = Vec::new();
    for (label, index) in probe_targets(services) {
        let service = &scenario.services[index];
        let ip: Ipv4Addr = service
            .spec
            .cluster_ip
            .as_deref()
            .and_then(|c| c.parse().ok())
            .context("synthetic service without ClusterIP")?;
        let dst = SocketAddrV4::new(ip, SERVICE_PORT);
        let mut t = TargetLatency {
            label,
            service: service.name.clone(),
            rtts: Vec::new(),
            failures: 0,
            first_error: None,
            reached: BTreeSet::new(),
        };
        for _ in 0..opts.probes {
            probe::flush_conntrack(&topo)?;
            match client.netns.run(move || connect_and_read(dst, timeout))? {
                Ok((rtt, answer)) => match answer_pod(&answer) {
                    Some(pod) => {
                        t.rtts.push(rtt);
                        t.reached.insert(pod.to_string());
                    }
                    None => {
                        t.failures += 1;
                        t.first_error
                            .get_or_insert_with(|| format!("unexpected answer {answer:?}"));
                    }
                },
                Err(e) => {
                    t.failures += 1;
                    t.first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        targets.push(t);
    }
    drop(backends);
    let teardown = topo.teardown();
    Ok(ScaleRun {
        proxier: proxier.name().to_string(),
        services,
        endpoints: opts.endpoints,
        topology_setup,
        teardown,
        nodes,
        targets,
    })
}

/// Connects (timing `connect()` alone) and reads the backend's answer line (the backend holds
/// the connection open for more requests; closing it is the client's part).
fn connect_and_read(dst: SocketAddrV4, timeout: Duration) -> std::io::Result<(Duration, String)> {
    let started = Instant::now();
    let stream = TcpStream::connect_timeout(&SocketAddr::V4(dst), timeout)?;
    let rtt = started.elapsed();
    stream.set_read_timeout(Some(timeout))?;
    let mut answer = String::new();
    std::io::BufReader::new(stream).read_line(&mut answer)?;
    Ok((rtt, answer))
}

/// The pod name in a backend's `client=IP:PORT pod=NAME` answer.
fn answer_pod(answer: &str) -> Option<&str> {
    answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pod="))
        .filter(|p| !p.is_empty())
}

/// Whether `proxier` writes iptables rules for the scale cluster (asked of its programming for
/// the first node of the smallest size): only then does the iptables flavour matter, and it
/// runs once per flavour asked for; otherwise once.
fn writes_iptables<P: Proxier + ?Sized>(proxier: &P, opts: &ScaleOptions) -> Result<bool> {
    let services = opts.services.iter().copied().min().unwrap_or(1);
    let scenario = scale_scenario(services, opts.endpoints, opts.nodes, opts.pods_per_node)?;
    let cluster = scenario::cluster_state(&scenario);
    let Some(first) = scenario.topology.nodes.first() else {
        return Ok(false);
    };
    let ctx = scenario::node_context(&scenario, &first.name)
        .with_context(|| format!("node {} is not in the scenario", first.name))?;
    Ok(!proxier.program(&cluster, &ctx)?.iptables.is_empty())
}

/// Runs every proxier at every size (progress on stderr) and renders the tables.
pub async fn scale(proxiers: &[Box<dyn Proxier>], opts: &ScaleOptions) -> Result<String> {
    let mut runs = Vec::new();
    for proxier in proxiers {
        let writes_iptables = writes_iptables(proxier.as_ref(), opts)?;
        let backends = if writes_iptables {
            opts.iptables_backends.as_slice()
        } else {
            &[IptablesBackend::Nft]
        };
        for &backend in backends {
            for &n in &opts.services {
                let started = Instant::now();
                let label = if writes_iptables && backend != IptablesBackend::Nft {
                    format!("{} (iptables-{})", proxier.name(), backend.name())
                } else {
                    proxier.name().to_string()
                };
                eprint!("bench scale: {label} × {n} services … ");
                let mut run = run_one(proxier.as_ref(), n, opts, backend)
                    .await
                    .with_context(|| format!("{label} with {n} services"))?;
                run.proxier = label;
                eprintln!("{:.1}s", started.elapsed().as_secs_f64());
                runs.push(run);
            }
        }
    }
    let mut out = format!("tools: {}\n", tool_versions());
    out.push_str(&render(&runs, opts));
    Ok(out)
}

/// `iptables-restore` and `ipset` versions (the iptables backend shows in the first).
fn tool_versions() -> String {
    ["iptables-restore", "ipset"]
        .iter()
        .map(|tool| {
            std::process::Command::new(tool)
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .map(|l| l.trim().to_string())
                })
                .unwrap_or_else(|| format!("{tool} (version unknown)"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A plain text table: first column left-aligned, the others right-aligned.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::from(" ");
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                out.push_str(&format!(" {cell}{}", " ".repeat(pad)));
            } else {
                out.push_str(&format!("  {}{cell}", " ".repeat(pad)));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn opt_human(d: Option<Duration>) -> String {
    d.map(human).unwrap_or_else(|| "-".into())
}

fn ratio(now: Duration, before: Duration) -> String {
    if before.is_zero() {
        "-".into()
    } else {
        format!("×{:.1}", now.as_secs_f64() / before.as_secs_f64())
    }
}

/// Renders the results of [`scale`]: programming time, node contents, probe latency, growth.
pub fn render(runs: &[ScaleRun], opts: &ScaleOptions) -> String {
    let mut out = String::new();
    let nodes = opts.nodes;
    let pods = usize::from(opts.nodes) * usize::from(opts.pods_per_node);
    let _ = writeln!(
        out,
        "bench scale: {nodes} nodes, {pods} backend pods + 1 client pod, N ClusterIP+NodePort \
         services × {} endpoints",
        opts.endpoints
    );
    let _ = writeln!(
        out,
        "\nprogramming, mean per node (apply = rollback snapshot + the steps that ran):"
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.proxier.clone(),
                r.services.to_string(),
                human(r.mean_node(|n| n.program)),
                human(r.mean_node(|n| n.apply)),
                human(r.mean_node(|n| n.snapshot)),
                opt_human(r.mean_step(Step::Sysctls)),
                opt_human(r.mean_step(Step::KubeIpvs0)),
                opt_human(r.mean_step(Step::Ipsets)),
                opt_human(r.mean_step(Step::Iptables)),
                opt_human(r.mean_step(Step::Nft)),
                opt_human(r.mean_step(Step::Ipvs)),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "proxier",
            "services",
            "program",
            "apply",
            "snapshot",
            "sysctls",
            "kube-ipvs0",
            "ipset restore",
            "iptables-restore",
            "nft -f",
            "IPVS netlink",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "\nwhat each node holds (first node; topology = build / teardown of all namespaces):"
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let c = r
                .nodes
                .first()
                .map(|n| n.counts.clone())
                .unwrap_or_default();
            vec![
                r.proxier.clone(),
                r.services.to_string(),
                c.iptables_chains.to_string(),
                c.iptables_rules.to_string(),
                format!("{}/{}", c.ipsets, c.ipset_entries),
                c.ipvs_services.to_string(),
                c.ipvs_destinations.to_string(),
                c.addresses.to_string(),
                c.nft_lines.to_string(),
                format!("{} / {}", human(r.topology_setup), human(r.teardown)),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "proxier",
            "services",
            "iptables chains",
            "rules",
            "ipsets/entries",
            "IPVS services",
            "destinations",
            "kube-ipvs0 addrs",
            "nft lines",
            "topology",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "\npod -> ClusterIP:{SERVICE_PORT}, TCP connect() time, conntrack flushed before each of \
         {} connections per service: min / median / p90 (backends reached, failures)",
        opts.probes
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let mut row = vec![r.proxier.clone(), r.services.to_string()];
            for label in ["first", "middle", "last"] {
                row.push(match r.targets.iter().find(|t| t.label == label) {
                    Some(t) => format!(
                        "{} / {} / {} ({}{})",
                        opt_human(t.rtts.iter().min().copied()),
                        opt_human(median(&t.rtts)),
                        opt_human(percentile(&t.rtts, 90.0)),
                        t.reached.len(),
                        if t.failures > 0 {
                            format!(", {} FAILED", t.failures)
                        } else {
                            String::new()
                        }
                    ),
                    None => "-".into(),
                });
            }
            row
        })
        .collect();
    out.push_str(&table(
        &["proxier", "services", "first", "middle", "last"],
        &rows,
    ));
    for r in runs {
        for t in &r.targets {
            if let Some(e) = &t.first_error {
                let _ = writeln!(
                    out,
                    "  {} × {} services, {} ({}): {} failed, e.g. {e}",
                    r.proxier, r.services, t.label, t.service, t.failures
                );
            }
        }
    }
    let mut proxiers: Vec<&str> = runs.iter().map(|r| r.proxier.as_str()).collect();
    proxiers.dedup();
    if runs.len() > proxiers.len() {
        let _ = writeln!(out, "\ngrowth from one size to the next:");
        for p in proxiers {
            let mine: Vec<&ScaleRun> = runs.iter().filter(|r| r.proxier == p).collect();
            let sizes: Vec<String> = mine.iter().map(|r| r.services.to_string()).collect();
            let steps = |f: &dyn Fn(&ScaleRun) -> Duration| {
                mine.windows(2)
                    .map(|w| ratio(f(w[1]), f(w[0])))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let last_median = |r: &ScaleRun| {
                r.targets
                    .last()
                    .and_then(|t| median(&t.rtts))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                out,
                "  {p} ({} services): program {}, apply {}, last-service connect {}",
                sizes.join(" → "),
                steps(&|r| r.mean_node(|n| n.program)),
                steps(&|r| r.mean_node(|n| n.apply)),
                steps(&last_median),
            );
        }
    }
    out
}

/// The IPv4 value of the synthetic cluster, which is IPv4 single-stack.
fn ipv4<T>(value: Option<T>) -> Result<T> {
    value.context("the scale benchmark's synthetic cluster is IPv4")
}

#[cfg(test)]
mod tests;
