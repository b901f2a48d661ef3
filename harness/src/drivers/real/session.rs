//! One run of a real proxier: the API server serving the scenario's cluster, and a proxier
//! process on every node (and on each fresh twin the convergence check builds).

use super::api::ApiProxier;
use super::config::KubeProxyConfiguration;
use super::counter::CounterWatch;
use super::metrics::Changes;
use super::process::ProxierProcess;
use super::publisher::{cluster_families, family_label, Publisher};
use super::sync::SyncWatch;
use super::RealProxier;
use crate::document::NodeSummary;
use crate::drivers::programmer::{summarize_effective, RunProgrammer};
use crate::netns::scratch::ScratchDir;
use crate::proxier::Resync;
use crate::scenario::cluster::{ClusterState, NodeContext};
use crate::scenario::{IpCidr, Scenario};
use crate::topology::NodeNs;
use anyhow::{Context, Result};
use apiserver::{self, Publication};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How long a stopping kube-proxy may take to exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The same for an `api:` proxier: kube-router's shutdown takes more than 10 s under emulation.
const API_STOP_GRACE: Duration = Duration::from_secs(30);

/// What runs on every node.
#[derive(Clone, Copy)]
pub enum Program<'a> {
    KubeProxy(&'a RealProxier),
    Api(&'a ApiProxier),
}

impl Program<'_> {
    fn stop_grace(&self) -> Duration {
        match self {
            Program::KubeProxy(_) => STOP_GRACE,
            Program::Api(_) => API_STOP_GRACE,
        }
    }

    fn timeout(&self) -> Duration {
        match self {
            Program::KubeProxy(p) => p.timeout,
            Program::Api(p) => p.timeout,
        }
    }

    /// What its processes are called: `kube-proxy`, or the `api:` command's program.
    fn name(&self) -> String {
        match self {
            Program::KubeProxy(_) => "kube-proxy".to_string(),
            Program::Api(p) => p.program_name(),
        }
    }

    /// Whether it is kube-proxy in nftables mode, whose chain deletion and ServiceCIDR
    /// handling kpct waits out.
    fn is_nftables_kube_proxy(&self) -> bool {
        matches!(self, Program::KubeProxy(p) if p.mode == super::Mode::Nftables)
    }
}

/// The real proxier of every node of one run.
pub struct RealRun<'a> {
    program: Program<'a>,
    server: Publisher,
    /// Where each node's configuration and kubeconfig are written; removed with the run.
    dir: ScratchDir,
    /// The scenario as it stands (the initial one, or the last step's).
    state: Scenario,
    /// The families each node's kube-proxy runs a proxier for.
    families: Vec<&'static str>,
    nodes: BTreeMap<String, ProxierProcess>,
    /// Where each node is served the API.
    addresses: BTreeMap<String, SocketAddr>,
}

impl<'a> RealRun<'a> {
    pub fn start(program: Program<'a>, scenario: &Scenario) -> Result<RealRun<'a>> {
        let families = crate::scenario::cluster_state(scenario)
            .families()
            .map(|c| family_label(c.ip_family))
            .collect();
        Ok(RealRun {
            program,
            server: Publisher::start(scenario)?,
            dir: ScratchDir::new("real")?,
            state: scenario.clone(),
            families,
            nodes: BTreeMap::new(),
            addresses: BTreeMap::new(),
        })
    }

    /// Serves the API inside `node`'s namespace, its requests recorded as `client`'s: once per
    /// namespace, for every proxier started there.
    fn listen(&self, node: &NodeNs, client: &str) -> Result<SocketAddr> {
        let addr = SocketAddr::from(([127, 0, 0, 1], apiserver::API_PORT));
        // Made by a thread inside the node's namespace: a socket stays in the namespace it was
        // made in, where the node's proxier reaches it without any route off the node.
        let listener = node
            .netns
            .run(|| -> std::io::Result<std::net::TcpListener> {
                apiserver::loopback_up()?;
                apiserver::bind(addr)
            })?
            .with_context(|| format!("listening on {addr} in namespace {}", node.netns.name()))?;
        self.server
            .serve_on(listener, client)
            .with_context(|| format!("serving the API to {client}"))
    }

    /// Starts a proxier in `node`'s namespace as node `name`, reaching the API at `address`
    /// as `client`; waits for nothing.
    fn launch(&self, node: &NodeNs, client: &str, address: SocketAddr) -> Result<ProxierProcess> {
        let dir = self.dir.path().join(client.replace([' ', '(', ')'], "_"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let kubeconfig = dir.join("kubeconfig");
        write(
            &kubeconfig,
            &apiserver::kubeconfig(address, "system:kube-proxy"),
        )?;
        let proxier = match self.program {
            Program::KubeProxy(p) => p,
            Program::Api(api) => {
                let own = dir.join("own");
                std::fs::create_dir_all(&own)
                    .with_context(|| format!("creating {}", own.display()))?;
                let command = api.command_for(&self.state, node, &kubeconfig, &own);
                let (program, args) = command.split_first().context("an empty command")?;
                let kubeconfig = kubeconfig.display().to_string();
                return ProxierProcess::start(
                    &node.netns,
                    &format!("{} on {client}", self.program.name()),
                    &own,
                    Path::new(program),
                    args,
                    &[("KUBECONFIG", &kubeconfig), ("NODE_NAME", &node.name)],
                );
            }
        };
        let cluster_cidrs: Vec<IpCidr> = cluster_families(&self.state)
            .filter_map(|f| self.state.topology.cluster_cidr.of(f))
            .collect();
        let config = KubeProxyConfiguration::new(
            proxier.mode,
            &node.name,
            &kubeconfig,
            &cluster_cidrs,
            &self.state.proxier,
        );
        let config_file = dir.join("config.json");
        write(
            &config_file,
            &config.to_text(proxier.config_patch.as_ref())?,
        )?;
        let own = dir.join("own");
        std::fs::create_dir_all(&own).with_context(|| format!("creating {}", own.display()))?;
        ProxierProcess::start(
            &node.netns,
            &format!("kube-proxy on {client}"),
            &own,
            &proxier.binary,
            &[format!("--config={}", config_file.display())],
            &[],
        )
    }

    fn watch<'p>(&self, node: &'p NodeNs, process: &'p ProxierProcess) -> SyncWatch<'p> {
        SyncWatch {
            netns: &node.netns,
            address: metrics_address(),
            process,
            timeout: self.program.timeout(),
        }
    }

    /// What the trackers of `client`'s kube-proxy take in of `publications`: each Service event
    /// once per family's proxier, each EndpointSlice event once if its address type is one
    /// of theirs.
    fn delivered(&self, client: &str, publications: &[Publication]) -> Result<Changes> {
        let mut changes = Changes::default();
        for publication in publications {
            for event in self.server.delivered(client, publication)? {
                match event.kind {
                    "Service" => changes.services += self.families.len() as u64,
                    "EndpointSlice" => {
                        let address_type = event
                            .object
                            .pointer("/addressType")
                            .and_then(|v| v.as_str())
                            .unwrap_or_default();
                        let named = event
                            .object
                            .pointer("/metadata/labels/kubernetes.io~1service-name")
                            .is_some();
                        if named && self.families.contains(&address_type) {
                            changes.endpoint_slices += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(changes)
    }
}

impl RunProgrammer for RealRun<'_> {
    fn program_node(
        &mut self,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        let address = self.listen(node, &node.name)?;
        self.addresses.insert(node.name.clone(), address);
        let process = self.start_synced(node, &node.name, address)?;
        self.nodes.insert(node.name.clone(), process);
        read_back(node)
    }

    /// Every node's proxier started at once, then each waited for.
    fn program_nodes(
        &mut self,
        _cluster: &ClusterState,
        nodes: &[(&NodeContext, &NodeNs)],
    ) -> Result<Vec<NodeSummary>> {
        let mut addresses = Vec::new();
        for (_, node) in nodes {
            let address = self.listen(node, &node.name)?;
            self.addresses.insert(node.name.clone(), address);
            addresses.push(address);
        }
        let this = &*self;
        let started: Vec<Result<ProxierProcess>> = std::thread::scope(|scope| {
            let handles: Vec<_> = nodes
                .iter()
                .zip(addresses)
                .map(|((_, node), address)| {
                    scope.spawn(move || this.start_synced(node, &node.name, address))
                })
                .collect();
            handles.into_iter().map(joined).collect()
        });
        let mut summaries = Vec::new();
        for ((_, node), process) in nodes.iter().zip(started) {
            self.nodes.insert(node.name.clone(), process?);
            summaries.push(read_back(node)?);
        }
        Ok(summaries)
    }

    /// Publishes the step's state and waits until every node's proxier has synced it, all
    /// nodes at once: a node waited for later would be sampled too late to tell its syncs
    /// apart. A restart stops every proxier first and starts new ones after.
    fn advance(
        &mut self,
        nodes: &[NodeNs],
        state: &Scenario,
        _step: &str,
        restart: bool,
    ) -> Result<()> {
        if restart {
            for process in self.nodes.values_mut() {
                process.stop(self.program.stop_grace())?;
            }
            self.nodes.clear();
            self.state = state.clone();
            self.server.update(state)?;
            let this = &*self;
            let started: Vec<Result<ProxierProcess>> = std::thread::scope(|scope| {
                let handles: Vec<_> = nodes
                    .iter()
                    .map(|node| {
                        scope.spawn(move || {
                            let address = *this
                                .addresses
                                .get(&node.name)
                                .with_context(|| format!("node {} was never served", node.name))?;
                            this.start_synced(node, &node.name, address)
                        })
                    })
                    .collect();
                handles.into_iter().map(joined).collect()
            });
            for (node, process) in nodes.iter().zip(started) {
                self.nodes.insert(node.name.clone(), process?);
            }
            return Ok(());
        }
        if let Program::Api(api) = self.program {
            return self.advance_api(api, nodes, state);
        }
        // A Service deleted goes before its slices, as in a cluster, and the proxier syncs
        // each: which of them it sees first decides what it does (from v1.37 a UDP Service
        // left without endpoints has its flows cleared; one deleted keeps them), and two
        // watches race.
        let orphans = super::publisher::orphaned_slices(&self.state, state);
        if !orphans.is_empty() {
            self.server.keep_orphans(orphans);
            let published = self.publish_synced(nodes, state);
            self.server.keep_orphans(Vec::new());
            published?;
        }
        self.publish_synced(nodes, state)
    }

    /// [`RunProgrammer::advance`] synced every node: what it holds now.
    fn resync_node(
        &mut self,
        _resync: &Resync<'_>,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        self.process_of(&node.name)?;
        read_back(node)
    }

    /// kube-proxy deletes drained real servers in its own loop, once a minute
    /// (`rsCheckDeleteInterval`, pkg/proxy/ipvs/graceful_termination.go), not at a sync: wait
    /// for that, then read the node back. A proxier that keeps them longer keeps them: what it
    /// holds then is what the step shows.
    fn drained(
        &mut self,
        _resync: &Resync<'_>,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        self.process_of(&node.name)?;
        let deadline = std::time::Instant::now() + DRAINED_DELETION;
        while std::time::Instant::now() < deadline {
            let table = crate::ipvs_connections::ipvs_table(node)?;
            if crate::draining::drained_lines(&table).is_empty() {
                break;
            }
            // IPVS tells no one when a real server goes: read its table again shortly.
            std::thread::sleep(Duration::from_millis(250));
        }
        read_back(node)
    }

    fn program_fresh(
        &mut self,
        _step: &str,
        _cluster: &ClusterState,
        _ctx: &NodeContext,
        node: &NodeNs,
    ) -> Result<NodeSummary> {
        self.sync_twin(node)?;
        read_back(node)
    }

    /// Every twin at once: a first sync takes long (minutes for IPVS mode under emulation).
    fn program_fresh_all(
        &mut self,
        _step: &str,
        _cluster: &ClusterState,
        twins: &[(&NodeContext, &NodeNs)],
    ) -> Result<()> {
        let this = &*self;
        std::thread::scope(|scope| {
            let handles: Vec<_> = twins
                .iter()
                .map(|(_, twin)| scope.spawn(move || this.sync_twin(twin)))
                .collect();
            handles.into_iter().try_for_each(joined)
        })
    }

    fn serves_health_checks(&self) -> bool {
        true
    }

    /// The last lines of its log, every request it made of the API server (and the answer's
    /// status), and every event it reported.
    fn evidence(&self, node: &str) -> Option<String> {
        let process = self.nodes.get(node)?;
        let mut out = format!(
            "{} ({}), its log ends:\n{}\n\nits requests:\n",
            process.label(),
            match process.exit_status() {
                Some(status) => format!("exited: {status}"),
                None => "running".to_string(),
            },
            process.log_tail(EVIDENCE_LOG_LINES)
        );
        for r in self.server.requests().iter().filter(|r| r.client == node) {
            out.push_str(&format!("  {} {} -> {}\n", r.method, r.path, r.status));
        }
        let events: Vec<String> = self
            .server
            .events()
            .iter()
            .filter(|e| e.client == node)
            .map(|e| {
                let field = |f: &str| {
                    e.body
                        .pointer(f)
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_string()
                };
                format!(
                    "  {} {} {}: {}\n",
                    e.method,
                    field("/type"),
                    field("/reason"),
                    field("/note")
                )
            })
            .collect();
        if !events.is_empty() {
            out.push_str("its events:\n");
            out.extend(events);
        }
        Some(out)
    }

    /// Every node's proxier is still running: one that exited during the run failed it.
    fn finish(&mut self) -> Result<()> {
        for process in self.nodes.values() {
            if let Some(status) = process.exit_status() {
                anyhow::bail!(
                    "{} exited ({status}) during the run; its log ends:\n{}",
                    process.label(),
                    process.log_tail(EVIDENCE_LOG_LINES)
                );
            }
        }
        Ok(())
    }

    fn twins_need_addresses(&self) -> bool {
        true
    }
}

impl RealRun<'_> {
    /// A proxier started on the fresh twin `node` until it has synced, then stopped (its rules
    /// stay, as a stopped kube-proxy leaves them).
    fn sync_twin(&self, node: &NodeNs) -> Result<()> {
        let client = format!("{} (fresh)", node.name);
        let address = self.listen(node, &client)?;
        let started = self.start_synced(node, &client, address);
        self.server.stop_listening(&client);
        started?.stop(self.program.stop_grace())?;
        Ok(())
    }

    fn process_of(&self, node: &str) -> Result<&ProxierProcess> {
        self.nodes
            .get(node)
            .with_context(|| format!("no {} runs on node {node}", self.program.name()))
    }

    /// Starts a proxier on `node` as `client` and waits until it has synced a state it has
    /// settled in. kube-proxy's nftables proxier writes its "Drop traffic to unallocated
    /// ClusterIPs" rule from the ServiceCIDRs it knows at a full sync, and a ServiceCIDR that
    /// reaches it after its first sync queues none (`OnServiceCIDRsChanged`,
    /// pkg/proxy/nftables/proxier.go), leaving the rule out until the next full sync, up to
    /// an hour later (`FullSyncPeriod`): such a start is restarted.
    fn start_synced(
        &self,
        node: &NodeNs,
        client: &str,
        address: SocketAddr,
    ) -> Result<ProxierProcess> {
        if let Program::Api(api) = self.program {
            let process = self.launch(node, client, address)?;
            let started = std::time::Instant::now();
            self.sent(
                client,
                &process,
                self.server.resource_version(),
                "its first sync",
            )?;
            self.counter(api, node, &process)
                .two_syncs("its first sync", started, &mut || self.kick())?;
            return Ok(process);
        }
        let mut tries = 0;
        loop {
            let mut process = self.launch(node, client, address)?;
            self.watch(node, &process).first_sync(&self.families)?;
            if !self.program.is_nftables_kube_proxy() || self.knows_service_cidrs(node)? {
                return Ok(process);
            }
            tries += 1;
            if tries >= SETTLE_TRIES {
                anyhow::bail!(
                    "{} synced {tries} times without the ServiceCIDRs (no \"Drop traffic to \
                     unallocated ClusterIPs\" rule); its log ends:\n{}",
                    process.label(),
                    process.log_tail(20)
                );
            }
            process.stop(self.program.stop_grace())?;
        }
    }

    /// Publishes `state` and waits until every node's proxier has synced it.
    fn publish_synced(&mut self, nodes: &[NodeNs], state: &Scenario) -> Result<()> {
        let mut baselines = Vec::new();
        for node in nodes {
            let process = self.process_of(&node.name)?;
            baselines.push(self.watch(node, process).before_publication()?);
        }
        if self.program.is_nftables_kube_proxy() {
            let mut last_synced = 0.0f64;
            for (node, baseline) in nodes.iter().zip(&baselines) {
                if holds_flushed_chains(node)? {
                    last_synced = last_synced.max(baseline.last_synced());
                }
            }
            wait_out_stale_chain_delay(last_synced);
        }
        self.state = state.clone();
        let (published_at, publications) = self.server.update(state)?;
        let this = &*self;
        let synced: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = nodes
                .iter()
                .zip(baselines)
                .map(|(node, baseline)| {
                    let publications = &publications;
                    scope.spawn(move || -> Result<()> {
                        let delivered = this.delivered(&node.name, publications)?;
                        let mut kick = || -> Result<(f64, Changes)> {
                            let (at, publications) = this.server.kick(&this.state)?;
                            Ok((at, this.delivered(&node.name, &publications)?))
                        };
                        this.watch(node, this.process_of(&node.name)?)
                            .synced_after(published_at, baseline, delivered, &mut kick)?;
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().map(joined).collect()
        });
        synced.into_iter().collect()
    }

    /// An `api:` proxier's step: the state published, then on every node (at once) the
    /// proxier sent all of it and synced twice since ([`super::counter`]).
    fn advance_api(&mut self, api: &ApiProxier, nodes: &[NodeNs], state: &Scenario) -> Result<()> {
        self.state = state.clone();
        let (_, publications) = self.server.update(state)?;
        let rv = publications
            .last()
            .map_or_else(|| self.server.resource_version(), |p| p.resource_version);
        let this = &*self;
        let synced: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = nodes
                .iter()
                .map(|node| {
                    scope.spawn(move || -> Result<()> {
                        let process = this.process_of(&node.name)?;
                        let started = std::time::Instant::now();
                        this.sent(&node.name, process, rv, "a sync of the update")?;
                        this.counter(api, node, process).two_syncs(
                            "a sync of the update",
                            started,
                            &mut || this.kick(),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(joined).collect()
        });
        synced.into_iter().collect()
    }

    /// A kick of every node's proxier ([`super::counter`]).
    fn kick(&self) -> Result<()> {
        self.server.kick(&self.state).map(|_| ())
    }

    /// Waits until every watch `client` has open was sent everything up to `rv`.
    fn sent(&self, client: &str, process: &ProxierProcess, rv: u64, what: &str) -> Result<()> {
        let limit = self.program.timeout();
        let started = std::time::Instant::now();
        // Woken by the proxier's output too, so that one that exits is told at once.
        loop {
            let left = limit.saturating_sub(started.elapsed());
            let behind =
                match self
                    .server
                    .wait_sent(client, rv, left.min(Duration::from_millis(200)))
                {
                    Ok(()) => return Ok(()),
                    Err(behind) => behind,
                };
            process.still_running(what)?;
            if left.is_zero() {
                anyhow::bail!(
                    "{} was not sent resourceVersion {rv} within {} s, for {what}: {}; its log \
                     ends:\n{}",
                    process.label(),
                    limit.as_secs(),
                    if behind.streams.is_empty() {
                        "it has no watch open".to_string()
                    } else {
                        format!("its open watches are past {:?}", behind.streams)
                    },
                    process.log_tail(EVIDENCE_LOG_LINES)
                );
            }
        }
    }

    fn counter<'p>(
        &self,
        api: &'p ApiProxier,
        node: &'p NodeNs,
        process: &'p ProxierProcess,
    ) -> CounterWatch<'p> {
        CounterWatch {
            netns: &node.netns,
            address: SocketAddr::from(([127, 0, 0, 1], api.metrics_port)),
            metric: &api.sync_metric,
            process,
            timeout: api.timeout,
        }
    }

    /// Whether every family's `kube-proxy` nftables table drops traffic to unallocated
    /// ClusterIPs, the rule only the ServiceCIDRs make.
    fn knows_service_cidrs(&self, node: &NodeNs) -> Result<bool> {
        let tables = crate::programming::nft::read_tables(&node.netns)
            .with_context(|| format!("reading the nftables tables of {}", node.name))?;
        Ok(self.families.iter().all(|family| {
            let wanted = if *family == "IPv6" { "ip6" } else { "ip" };
            tables.iter().any(|(table, listing)| {
                table.name == "kube-proxy"
                    && table.family.name() == wanted
                    && listing
                        .iter()
                        .any(|l| l.contains("Drop traffic to unallocated ClusterIPs"))
            })
        }))
    }
}

/// How many lines of a proxier's log the evidence of a failure shows.
const EVIDENCE_LOG_LINES: usize = 40;

/// How many times a proxier is started before kpct gives up on its settling.
const SETTLE_TRIES: usize = 5;

/// What a scoped thread returned, or its panic as an error.
/// Whether nftables mode left service chains flushed on `node`, to delete at a later sync.
fn holds_flushed_chains(node: &NodeNs) -> Result<bool> {
    let state = crate::programming::effective_state(
        &node.netns,
        &crate::programming::ReadOptions::default(),
    )
    .with_context(|| format!("reading back node {}", node.name))?;
    Ok(!crate::convergence::flushed_chains(&state).is_empty())
}

/// nftables mode deletes a chain it flushed only in a sync that starts more than a second
/// after the sync that last flushed it, and every sync flushes again the stale chains it
/// lists, renewing their time (`staleChains`, pkg/proxy/nftables/proxier.go): syncs less than
/// a second apart, as a scenario's steps make them, keep flushed chains for good. So before
/// a step, a node holding some is given that second since its last sync returned (which
/// ended after the stamping sync started): the step's sync then deletes them, and what the
/// convergence check sees flushed after it is what that sync flushed, as a kube-proxy on a
/// cluster whose changes come less often leaves it. A wait on the proxier's own clock, not a
/// guess: nothing signals that a second has passed.
fn wait_out_stale_chain_delay(last_synced: f64) {
    if last_synced <= 0.0 {
        return;
    }
    let due = last_synced + 1.0 + STALE_CHAIN_MARGIN;
    let left = due - super::sync::now();
    if left > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(left));
    }
}

/// Beyond the second: the metrics' timestamps and this clock are read at different moments.
const STALE_CHAIN_MARGIN: f64 = 0.05;

fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    handle
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a thread waiting for a proxier panicked")))
}

/// What the node holds now.
fn read_back(node: &NodeNs) -> Result<NodeSummary> {
    let state = crate::programming::effective_state(
        &node.netns,
        &crate::programming::ReadOptions::default(),
    )
    .with_context(|| format!("reading back node {}", node.name))?;
    Ok(summarize_effective(node, &state))
}

/// kube-proxy's `rsCheckDeleteInterval` and a margin for the emulated VM.
const DRAINED_DELETION: Duration = Duration::from_secs(75);

fn metrics_address() -> SocketAddr {
    super::config::METRICS_ADDRESS
        .parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 10249)))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
