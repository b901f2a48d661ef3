//! Mutation tests: deliberately broken programming must make the relevant expectation fail with
//! a clear message. They prove the checks can fail; a suite whose checks cannot fail proves
//! nothing.

mod common;

use common::{
    block_health_checks, drop_invalid_rule, drop_postrouting_masquerade, drop_sctp, ignore_ipv6,
    invalid_dropped_anyway, ipv6_endpoint_swapped, ipv6_real_servers_on_wrong_port,
    keep_foreign_ipvs_services, keep_stale_chains, keep_stale_virtual_servers,
    leave_kube_ipvs0_when_nothing_is_bound, nft_drop_invalid, nft_localhost_node_ports,
    no_cluster_ips_reject, no_graceful_termination, no_ipv6_masquerade, pin_one_backend,
    reverse_real_servers, skip_conntrack_cleanup, unbind_ipv6_service_addresses,
    weigh_one_real_server, Mutated,
};
use kpct::kernel_features::require_ipvs;
use kpct::probe::probe_timeout;
use kpct::proxier::{builtin, Proxier};
use kpct::scenario;

const SCENARIO: &str = concat!(
    crate::two_nodes!(),
    r#"  pods:
    - name: web-1
      node: node-b
      ip: 10.244.2.10
      labels: { app: web }
      ports: [{ name: http, containerPort: 8080 }]
  external: { ip: 192.168.1.100 }
services:
  - name: web
    spec:
      type: NodePort
      clusterIP: 10.96.0.10
      selector: { app: web }
      ports: [{ name: http, port: 80, targetPort: http, nodePort: 30080 }]
probes:
  - name: external-to-nodeport
    from: { external: true }
    to: { service: web, port: http, via: nodePort, node: node-a }
    expect: { reaches: [web-1], source: masqueraded, reply: true }
"#
);

async fn violations(proxier: &dyn Proxier) -> Vec<String> {
    let s = scenario::parse(SCENARIO, "mutation.yaml").unwrap();
    kpct::run_scenario(&s, proxier, probe_timeout())
        .await
        .unwrap()
        .violations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_removing_the_postrouting_masquerade_rule_is_caught() {
    require_ipvs();
    let intact = builtin("kube-proxy-ipvs").unwrap();
    assert_eq!(
        violations(intact.as_ref()).await,
        Vec::<String>::new(),
        "the intact programming conforms"
    );

    let broken = Mutated {
        name: "kube-proxy-ipvs",
        inner: "kube-proxy-ipvs",
        mutate: drop_postrouting_masquerade,
    };
    let found = violations(&broken).await;
    assert!(
        found
            .iter()
            .any(|v| v.contains("probe `external-to-nodeport`")
                && v.contains("expected source masqueraded")),
        "the missing MASQUERADE shows up as a source-masquerade violation, got: {found:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_postrouting_masquerade_rule_is_caught_in_iptables_mode_too() {
    let intact = builtin("kube-proxy-iptables").unwrap();
    assert_eq!(
        violations(intact.as_ref()).await,
        Vec::<String>::new(),
        "the intact programming conforms"
    );
    let broken = Mutated {
        name: "kube-proxy-iptables",
        inner: "kube-proxy-iptables",
        mutate: drop_postrouting_masquerade,
    };
    let found = violations(&broken).await;
    assert!(
        found
            .iter()
            .any(|v| v.contains("expected source masqueraded")),
        "got: {found:#?}"
    );
}

/// The library's scenarios whose expectations for `proxier` demand that connections spread over
/// two or more pods.
fn spreading_scenarios(proxier: &str) -> Vec<scenario::Scenario> {
    let files = scenario::files(&[format!(
        "{}/../scenarios/*.yaml",
        env!("CARGO_MANIFEST_DIR")
    )])
    .expect("the scenario library");
    files
        .iter()
        .map(|f| scenario::load(f).expect("a library scenario"))
        .filter(|s| {
            // Two or more pods named by one probe's reaches/sequence/counts, or by the probes of
            // one target entering one node together (a scheduler sending each client to its own
            // pod); a per-node choice (internalTrafficPolicy Local) is no spreading.
            let mut by_target: std::collections::BTreeMap<
                String,
                std::collections::BTreeSet<&String>,
            > = Default::default();
            for p in &s.probes {
                if let Some(e) = p.expectation_for(proxier) {
                    by_target
                        .entry(format!("{:?} via {}", p.to, entry_node(s, p)))
                        .or_default()
                        .extend(
                            e.reaches
                                .iter()
                                .chain(&e.sequence)
                                .chain(&e.cycle)
                                .chain(e.counts.keys()),
                        );
                }
            }
            by_target.values().any(|pods| pods.len() >= 2)
        })
        .collect()
}

/// The node a probe's packets are balanced on: the source's node, or the node an external
/// client enters through.
fn entry_node(s: &scenario::Scenario, p: &scenario::Probe) -> String {
    let from = &p.from;
    from.pod
        .as_ref()
        .and_then(|pod| s.topology.pods.iter().find(|q| &q.name == pod))
        .map(|q| q.node.clone())
        .or_else(|| from.node.clone())
        .or_else(|| from.node_localhost.clone())
        .or_else(|| p.to.node.clone())
        .unwrap_or_default()
}

/// Every spread, scheduler and affinity scenario fails for a proxier that sends all connections
/// to one endpoint: `reaches` is the exact set, `sequence` the exact order, `cycle` a round.
fn pinned_proxier_fails_every_spreading_scenario(proxier: &'static str) {
    let scenarios = spreading_scenarios(proxier);
    let names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "clusterip-spread-across-nodes",
        "nodeport-etp-cluster-spread",
        "ipvs-scheduler-rr",
        "ipvs-scheduler-sh",
        "session-affinity-clientip",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} demands spreading: {names:?}"
        );
    }
    let pinned = Mutated {
        name: proxier,
        inner: proxier,
        mutate: pin_one_backend,
    };
    // One after the other: more runs at once in the emulated VM starve the other tests of this
    // binary, which run beside it (a shot judged under CPU starvation can be misjudged).
    let jobs: Vec<kpct::operations::parallel::Job> = scenarios
        .iter()
        .map(|scenario| kpct::operations::parallel::Job {
            scenario,
            proxier: &pinned,
        })
        .collect();
    let finished = kpct::operations::parallel::run_jobs(&jobs, 1, probe_timeout(), &mut |_| {
        kpct::operations::parallel::After::Continue
    })
    .expect("the runs");
    let mut passed = Vec::new();
    for (s, done) in scenarios.iter().zip(finished) {
        let run = done.outcome.unwrap_or_else(|e| panic!("{}: {e:#}", s.name));
        if !run.violations.iter().any(|v| {
            v.contains("never reached")
                || v.contains("expected the sequence")
                || v.contains("expected a round over")
                || v.contains("expected delivery to one of")
        }) {
            passed.push(format!("{}: {:?}", s.name, run.violations));
        }
    }
    assert!(
        passed.is_empty(),
        "a proxier pinning one backend passed {} of {} spreading scenarios:\n{}",
        passed.len(),
        scenarios.len(),
        passed.join("\n")
    );
}

#[test]
fn a_proxier_pinning_one_backend_fails_every_spreading_scenario_in_iptables_mode() {
    pinned_proxier_fails_every_spreading_scenario("kube-proxy-iptables");
}

/// Also a `numgen` map missing every endpoint but one.
#[test]
fn a_proxier_pinning_one_backend_fails_every_spreading_scenario_in_nftables_mode() {
    pinned_proxier_fails_every_spreading_scenario("kube-proxy-nftables");
}

#[test]
fn needs_ipvs_a_proxier_pinning_one_backend_fails_every_spreading_scenario() {
    require_ipvs();
    pinned_proxier_fails_every_spreading_scenario("kube-proxy-ipvs");
}

/// Programs like the built-in `inner` but as if the scenario had not set one option: a proxier
/// that ignores a kube-proxy flag.
struct OptionIgnored {
    inner: &'static str,
    ignore: fn(&mut scenario::ProxierOptions),
}

impl Proxier for OptionIgnored {
    fn name(&self) -> String {
        self.inner.to_string()
    }
    fn program(
        &self,
        cluster: &kpct::scenario::cluster::ClusterState,
        node: &kpct::scenario::cluster::NodeContext,
    ) -> anyhow::Result<kpct::programming::Programming> {
        let mut cluster = cluster.clone();
        (self.ignore)(&mut cluster.options);
        builtin(self.inner)
            .expect("a built-in")
            .program(&cluster, node)
    }
    fn random_backend_choice(&self) -> bool {
        builtin(self.inner)
            .expect("a built-in")
            .random_backend_choice()
    }
}

/// Programs like the built-in `inner`, but each state of `scenario` as if no Service had labels:
/// a proxier that serves Services labelled `service.kubernetes.io/service-proxy-name`, which
/// belong to another proxy (as kube-proxy would with an API server ignoring its label selector).
struct LabelBlind {
    inner: &'static str,
    /// Each state of the scenario as the harness hands it over, and the same with every Service
    /// label dropped.
    states: Vec<(
        kpct::scenario::cluster::ClusterState,
        kpct::scenario::cluster::ClusterState,
    )>,
}

impl LabelBlind {
    fn new(inner: &'static str, s: &scenario::Scenario) -> LabelBlind {
        let states = std::iter::once(None)
            .chain((0..s.steps.len()).map(Some))
            .map(|k| {
                let state = scenario::state_at(s, k).scenario;
                let mut blind = state.clone();
                for svc in &mut blind.services {
                    svc.labels.clear();
                }
                (
                    scenario::cluster_state(&state),
                    scenario::cluster_state(&blind),
                )
            })
            .collect();
        LabelBlind { inner, states }
    }

    fn blind(
        &self,
        cluster: &kpct::scenario::cluster::ClusterState,
    ) -> kpct::scenario::cluster::ClusterState {
        self.states
            .iter()
            .find(|(seen, _)| seen == cluster)
            .map(|(_, blind)| blind.clone())
            .expect("a state of the scenario")
    }
}

impl Proxier for LabelBlind {
    fn name(&self) -> String {
        self.inner.to_string()
    }
    fn program(
        &self,
        cluster: &kpct::scenario::cluster::ClusterState,
        node: &kpct::scenario::cluster::NodeContext,
    ) -> anyhow::Result<kpct::programming::Programming> {
        builtin(self.inner)
            .expect("a built-in")
            .program(&self.blind(cluster), node)
    }
    fn resync(
        &self,
        resync: &kpct::proxier::Resync<'_>,
        cluster: &kpct::scenario::cluster::ClusterState,
        node: &kpct::scenario::cluster::NodeContext,
    ) -> anyhow::Result<kpct::programming::Programming> {
        let previous = resync.previous.map(|p| self.blind(p));
        let resync = kpct::proxier::Resync {
            previous: previous.as_ref(),
            ..*resync
        };
        builtin(self.inner)
            .expect("a built-in")
            .resync(&resync, &self.blind(cluster), node)
    }
    fn random_backend_choice(&self) -> bool {
        builtin(self.inner)
            .expect("a built-in")
            .random_backend_choice()
    }
}

/// A proxier serving the Service labelled for another proxy fails each probe that must find
/// it unserved, before and after the labels swap.
async fn serving_another_proxys_service_is_caught(proxier: &'static str) {
    let path = format!(
        "{}/../scenarios/service-proxy-name.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    let run = kpct::run_scenario(&s, &LabelBlind::new(proxier, &s), probe_timeout())
        .await
        .expect("run");
    for probe in [
        "pod-to-theirs",
        "external-to-theirs",
        "labels-swapped/pod-to-ours",
        "labels-swapped/external-to-ours",
    ] {
        assert!(
            says(&run.violations, probe, "expected outcome notDelivered"),
            "{probe}: {:#?}",
            run.violations
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_another_proxys_service_is_caught_in_iptables_mode() {
    serving_another_proxys_service_is_caught("kube-proxy-iptables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_another_proxys_service_is_caught_in_nftables_mode() {
    serving_another_proxys_service_is_caught("kube-proxy-nftables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_serving_another_proxys_service_is_caught() {
    require_ipvs();
    serving_another_proxys_service_is_caught("kube-proxy-ipvs").await;
}

/// Programs like the built-in `inner` from a cluster state edited by `edit` (each family's, the
/// previous one's too): a proxier that reads the cluster wrongly.
struct StateEdited {
    inner: &'static str,
    edit: fn(&mut kpct::scenario::cluster::ClusterState),
}

impl StateEdited {
    fn edited(
        &self,
        cluster: &kpct::scenario::cluster::ClusterState,
    ) -> kpct::scenario::cluster::ClusterState {
        let mut cluster = cluster.clone();
        (self.edit)(&mut cluster);
        if let Some(v6) = cluster.ipv6.as_mut() {
            (self.edit)(v6);
        }
        cluster
    }
}

impl Proxier for StateEdited {
    fn name(&self) -> String {
        self.inner.to_string()
    }
    fn program(
        &self,
        cluster: &kpct::scenario::cluster::ClusterState,
        node: &kpct::scenario::cluster::NodeContext,
    ) -> anyhow::Result<kpct::programming::Programming> {
        builtin(self.inner)
            .expect("a built-in")
            .program(&self.edited(cluster), node)
    }
    fn resync(
        &self,
        resync: &kpct::proxier::Resync<'_>,
        cluster: &kpct::scenario::cluster::ClusterState,
        node: &kpct::scenario::cluster::NodeContext,
    ) -> anyhow::Result<kpct::programming::Programming> {
        let previous = resync.previous.map(|p| self.edited(p));
        let resync = kpct::proxier::Resync {
            previous: previous.as_ref(),
            ..*resync
        };
        builtin(self.inner)
            .expect("a built-in")
            .resync(&resync, &self.edited(cluster), node)
    }
    fn random_backend_choice(&self) -> bool {
        builtin(self.inner)
            .expect("a built-in")
            .random_backend_choice()
    }
}

/// The round robin kube-proxy's uniform weights make (`cycle`) fails for a proxier weighing one
/// real server twice, and holds for one listing its real servers in another order, as a real
/// kube-proxy does on some runs (Go map order): the expectation judges the round, not the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_a_weighted_real_server_breaks_the_round_and_another_order_does_not() {
    require_ipvs();
    let weighed = Mutated {
        name: "kube-proxy-ipvs",
        inner: "kube-proxy-ipvs",
        mutate: weigh_one_real_server,
    };
    let run = library_run("ipvs-scheduler-wrr.yaml", &weighed).await;
    assert!(
        run.violations
            .iter()
            .any(|v| v.contains("expected a round over [web-1, web-2, web-3]")),
        "{:?}",
        run.violations
    );
    let reordered = Mutated {
        name: "kube-proxy-ipvs",
        inner: "kube-proxy-ipvs",
        mutate: reverse_real_servers,
    };
    for file in ["ipvs-scheduler-wrr.yaml", "ipvs-scheduler-rr.yaml"] {
        let run = library_run(file, &reordered).await;
        assert!(run.violations.is_empty(), "{file}: {:?}", run.violations);
    }
}

/// Runs the library scenario `file` against `proxier`.
async fn library_run(file: &str, proxier: &dyn Proxier) -> kpct::ScenarioRun {
    let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    kpct::run_scenario(&s, proxier, probe_timeout())
        .await
        .expect("run")
}

/// Every ClientIP affinity with the API server's default timeout (10800 s) instead of its own.
fn affinity_timeout_ignored(c: &mut kpct::scenario::cluster::ClusterState) {
    for sp in &mut c.service_ports {
        if sp.session_affinity_timeout_seconds.is_some() {
            sp.session_affinity_timeout_seconds = Some(10800);
        }
    }
}

/// Affinity that outlives its `timeoutSeconds` keeps the client on web-far after the wait (in
/// IPVS mode too, since the probes' half-open connections that kept its template alive are
/// waited out before the wait); a proxier without affinity spreads the client over both
/// endpoints where it must stay on web-far.
async fn affinity_timeout_mutations_are_caught(proxier: &'static str) {
    let file = "transition-session-affinity-timeout.yaml";
    affinity_outliving_its_timeout_is_caught(proxier, file).await;
    let without = StateEdited {
        inner: proxier,
        edit: |c| {
            for sp in &mut c.service_ports {
                sp.session_affinity_timeout_seconds = None;
            }
        },
    };
    let found = library_run(file, &without).await.violations;
    for probe in [
        "near-replica-after-timeout/node-port-after-timeout",
        "near-replica-after-timeout/node-port-within-timeout",
    ] {
        assert!(
            says(&found, probe, "expected delivery to one of"),
            "{probe}: {found:#?}"
        );
    }
}

/// The 10800 s mutant of [`affinity_timeout_mutations_are_caught`].
async fn affinity_outliving_its_timeout_is_caught(proxier: &'static str, file: &str) {
    let ignored = StateEdited {
        inner: proxier,
        edit: affinity_timeout_ignored,
    };
    let found = library_run(file, &ignored).await.violations;
    assert!(
        says(
            &found,
            "near-replica-after-timeout/node-port-after-timeout",
            "expected delivery to one of [web-near]"
        ),
        "{found:#?}"
    );
    assert!(
        !says(
            &found,
            "near-replica-after-timeout/node-port-within-timeout",
            ""
        ),
        "the long timeout holds either way: {found:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_outliving_its_timeout_is_caught_in_iptables_mode() {
    affinity_timeout_mutations_are_caught("kube-proxy-iptables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_outliving_its_timeout_is_caught_in_nftables_mode() {
    affinity_timeout_mutations_are_caught("kube-proxy-nftables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_affinity_lost_is_caught() {
    require_ipvs();
    affinity_timeout_mutations_are_caught("kube-proxy-ipvs").await;
}

/// The step really lets time pass: without its wait, the 5 s affinity to web-far still holds
/// when the client comes back, and the intact proxier fails the expectation made for after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_affinity_timeout_scenario_needs_its_wait() {
    let path = format!(
        "{}/../scenarios/transition-session-affinity-timeout.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    assert_eq!(s.steps[0].wait_seconds, 20);
    s.steps[0].wait_seconds = 0;
    let run = kpct::run_scenario(
        &s,
        builtin("kube-proxy-iptables").unwrap().as_ref(),
        probe_timeout(),
    )
    .await
    .expect("run");
    assert!(
        says(
            &run.violations,
            "near-replica-after-timeout/node-port-after-timeout",
            "expected delivery to one of [web-near]"
        ),
        "{:#?}",
        run.violations
    );
}

/// A proxier that never learns of endpoints added after it started (only web-1's address,
/// there from the start, is ever programmed) fails where a created pod must be reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_the_endpoints_of_created_pods_is_caught() {
    for proxier in ["kube-proxy-iptables", "kube-proxy-nftables"] {
        missing_the_endpoints_of_created_pods_is_caught_in(proxier).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_missing_the_endpoints_of_created_pods_is_caught() {
    require_ipvs();
    missing_the_endpoints_of_created_pods_is_caught_in("kube-proxy-ipvs").await;
}

async fn missing_the_endpoints_of_created_pods_is_caught_in(proxier: &'static str) {
    {
        let stale = StateEdited {
            inner: proxier,
            edit: |c| {
                let first: std::net::IpAddr = "10.244.2.21".parse().unwrap();
                for sp in &mut c.service_ports {
                    sp.endpoints.retain(|e| e.ip == first);
                }
            },
        };
        let found = library_run("transition-pod-created.yaml", &stale)
            .await
            .violations;
        for (probe, missed) in [
            ("scale-up/pod-to-clusterip", "never reached: web-2"),
            ("scale-up/external-to-nodeport", "never reached: web-2"),
            ("web-1-recreated/pod-to-clusterip", "never reached: web-2"),
            ("web-2-replaced/pod-to-clusterip", "never reached: web-3"),
            (
                "web-2-replaced/external-to-nodeport",
                "never reached: web-3",
            ),
        ] {
            assert!(says(&found, probe, missed), "{proxier} {probe}: {found:#?}");
        }
        // With no endpoint left, web-2's own probe is refused rather than delivered to it.
        assert!(
            says(&found, "web-1-deleted/pod-to-clusterip", ""),
            "{proxier}: {found:#?}"
        );
    }
}

/// The nodePortAddresses scenarios fail for a proxier that serves NodePorts on every address,
/// each on the probe that must be refused.
async fn ignoring_node_port_addresses_is_caught(proxier: &'static str) {
    let ignoring = OptionIgnored {
        inner: proxier,
        ignore: |o| o.node_port_addresses.clear(),
    };
    for (file, refused) in [
        ("nodeport-addresses-cidr", "external-to-node-a-primary"),
        ("nodeport-addresses-primary", "external-to-node-a-secondary"),
    ] {
        let path = format!("{}/../scenarios/{file}.yaml", env!("CARGO_MANIFEST_DIR"));
        let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
        let run = kpct::run_scenario(&s, &ignoring, probe_timeout())
            .await
            .unwrap_or_else(|e| panic!("{file}: {e:#}"));
        assert!(
            run.violations
                .iter()
                .any(|v| v.contains(&format!("probe `{refused}`"))
                    && v.contains("expected outcome rejected")),
            "{file}: {:#?}",
            run.violations
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_node_port_addresses_is_caught_in_iptables_mode() {
    ignoring_node_port_addresses_is_caught("kube-proxy-iptables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_ignoring_node_port_addresses_is_caught() {
    require_ipvs();
    ignoring_node_port_addresses_is_caught("kube-proxy-ipvs").await;
}

/// Runs the library scenario `file` against `proxier` broken by `mutate`.
async fn mutated_run(
    file: &str,
    proxier: &'static str,
    mutate: fn(&mut kpct::programming::Programming) -> anyhow::Result<()>,
) -> kpct::ScenarioRun {
    let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    let broken = Mutated {
        name: proxier,
        inner: proxier,
        mutate,
    };
    kpct::run_scenario(&s, &broken, probe_timeout())
        .await
        .expect("run")
}

/// Runs the library scenario `file` against `proxier` broken by `mutate` and asserts that each
/// of `probes` has a violation containing `violation`.
async fn mutation_is_caught(
    file: &str,
    proxier: &'static str,
    mutate: fn(&mut kpct::programming::Programming) -> anyhow::Result<()>,
    probes: &[&str],
    violation: &str,
) {
    let run = mutated_run(file, proxier, mutate).await;
    for probe in probes {
        assert!(
            run.violations
                .iter()
                .any(|v| v.contains(&format!("probe `{probe}`")) && v.contains(violation)),
            "{probe}: {:#?}",
            run.violations
        );
    }
}

/// A proxier in nftables mode that leaves another load balancer's IPVS services alone fails
/// `ipvs-existing-exclude-cidrs`: the real binary flushes them when it starts (the scenario's
/// header says where), so both of them answer where they must not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_leaving_foreign_ipvs_services_is_caught_in_nftables_mode() {
    require_ipvs();
    mutation_is_caught(
        "ipvs-existing-exclude-cidrs.yaml",
        "kube-proxy-nftables",
        keep_foreign_ipvs_services,
        &["external-to-excluded-service", "external-to-other-service"],
        "expected outcome rejected, observed delivered",
    )
    .await;
}

/// `answeredByNode` on a healthCheckNodePort fails for a proxier that blocks it.
async fn blocking_health_checks_is_caught(proxier: &'static str) {
    mutation_is_caught(
        "loadbalancer-etp-local.yaml",
        proxier,
        block_health_checks,
        &[
            "external-to-health-check-node-a",
            "external-to-health-check-node-b",
        ],
        "expected outcome answeredByNode, observed dropped",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_health_checks_is_caught_in_iptables_mode() {
    blocking_health_checks_is_caught("kube-proxy-iptables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_blocking_health_checks_is_caught() {
    require_ipvs();
    blocking_health_checks_is_caught("kube-proxy-ipvs").await;
}

/// The SCTP scenario fails for a proxier that forgets SCTP Services, on each of its probes.
async fn dropping_sctp_is_caught(proxier: &'static str) {
    mutation_is_caught(
        "sctp-services.yaml",
        proxier,
        drop_sctp,
        &["pod-to-clusterip-sctp", "external-to-nodeport-sctp"],
        "never reached",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_sctp_dropping_sctp_is_caught_in_iptables_mode() {
    kpct::kernel_features::require_sctp();
    dropping_sctp_is_caught("kube-proxy-iptables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_dropping_sctp_is_caught() {
    require_ipvs();
    kpct::kernel_features::require_sctp();
    dropping_sctp_is_caught("kube-proxy-ipvs").await;
}

/// The UDP client pinned to a removed endpoint shows a proxier without conntrack cleanup. Only
/// in iptables mode, where the conntrack entry is what pins the flow: in IPVS mode the flow
/// rides on its IPVS connection, which `net.ipv4.vs.expire_nodest_conn=1` expires once its real
/// server is gone, cleanup or not (the scenario's header says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_conntrack_cleanup_is_caught_in_iptables_mode() {
    mutation_is_caught(
        "transition-udp-endpoint-replaced.yaml",
        "kube-proxy-iptables",
        skip_conntrack_cleanup,
        &["replace-endpoint/resolver-again"],
        "expected every one of [dns-2] to be reached",
    )
    .await;
}

/// Runs the library scenario `file` against `proxier` broken by `mutate` and returns the
/// violations of the convergence check (those naming a step, not a probe).
async fn convergence_violations(
    file: &str,
    proxier: &'static str,
    mutate: fn(&mut kpct::programming::Programming) -> anyhow::Result<()>,
) -> Vec<String> {
    let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    let intact = kpct::run_scenario(&s, builtin(proxier).unwrap().as_ref(), probe_timeout())
        .await
        .expect("run");
    assert_eq!(
        intact.violations,
        Vec::<String>::new(),
        "the intact proxier conforms"
    );
    let broken = Mutated {
        name: proxier,
        inner: proxier,
        mutate,
    };
    kpct::run_scenario(&s, &broken, probe_timeout())
        .await
        .expect("run")
        .violations
        .into_iter()
        .filter(|v| v.contains("a fresh node synced to the same state differs"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_endpoint_chains_fail_the_convergence_check() {
    let found = convergence_violations(
        "transition-scale-down-up.yaml",
        "kube-proxy-iptables",
        keep_stale_chains,
    )
    .await;
    // web-1 (node-a) and web-3 (node-b) left the Service: their KUBE-SEP- chains stay on both
    // nodes.
    for node in ["node-a", "node-b"] {
        assert!(
            found
                .iter()
                .any(|v| v.contains(&format!("{node}: stale chain KUBE-SEP-"))
                    && v.contains("after step `scale-down`")),
            "{node}: {found:#?}"
        );
    }
}

/// The IPv6 proxier of iptables mode deletes stale chains from ip6tables, read from
/// `ip6tables-save`: one that keeps them leaves the gone endpoint's KUBE-SEP- chain in the
/// `ip6:nat` table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_ip6tables_chains_fail_the_convergence_check() {
    let found = convergence_violations(
        "ipv6-transition-scale-down-delete.yaml",
        "kube-proxy-iptables",
        keep_stale_chains,
    )
    .await;
    for node in ["node-a", "node-b"] {
        assert!(
            found
                .iter()
                .any(|v| v.contains(&format!("{node}: stale chain KUBE-SEP-"))
                    && v.contains("(table ip6:nat)")
                    && v.contains("after step `scale-down`")),
            "{node}: {found:#?}"
        );
    }
}

/// nftables mode flushes a stale chain in one sync and deletes it in the next: one that never
/// deletes it is caught at the step after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_chains_never_deleted_fail_the_convergence_check_in_nftables_mode() {
    let found = convergence_violations(
        "transition-many-updates.yaml",
        "kube-proxy-nftables",
        keep_stale_chains,
    )
    .await;
    assert!(
        found
            .iter()
            .any(|v| v.contains("stale nftables `ip kube-proxy › chain endpoint-")),
        "{found:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_stale_virtual_servers_fail_the_convergence_check() {
    require_ipvs();
    let found = convergence_violations(
        "transition-service-deleted.yaml",
        "kube-proxy-ipvs",
        keep_stale_virtual_servers,
    )
    .await;
    for (node, node_ip) in [("node-a", "192.168.1.10"), ("node-b", "192.168.1.11")] {
        let node_port = format!("{node_ip}:30080");
        for vip in ["10.96.0.10:80", "192.168.1.200:80", node_port.as_str()] {
            assert!(
                found.iter().any(|v| v
                    .contains(&format!("{node}: stale IPVS virtual server `-A -t {vip} "))
                    && v.contains("after step `delete-web`")),
                "{node} {vip}: {found:#?}"
            );
        }
    }
}

/// Each family's IPVS proxier unbinds its addresses no Service uses any more, the last one too:
/// one that leaves kube-ipvs0 alone once nothing is bound keeps the deleted IPv6 ClusterIP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_a_stale_ipv6_binding_fails_the_convergence_check() {
    require_ipvs();
    let found = convergence_violations(
        "ipv6-transition-scale-down-delete.yaml",
        "kube-proxy-ipvs",
        leave_kube_ipvs0_when_nothing_is_bound,
    )
    .await;
    for node in ["node-a", "node-b"] {
        assert!(
            found.iter().any(|v| v
                .contains(&format!("{node}: stale kube-ipvs0 address fd00:10:96::a"))
                && v.contains("after step `delete-service`")),
            "{node}: {found:#?}"
        );
    }
}

/// Deleting a real server at once breaks the established connection graceful termination
/// keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_deleting_real_servers_at_once_is_caught() {
    require_ipvs();
    mutation_is_caught(
        "transition-terminating-established.yaml",
        "kube-proxy-ipvs",
        no_graceful_termination,
        &["web-1-terminating/session-continues"],
        "expected every one of [web-1] to be reached",
    )
    .await;
}

/// Without KUBE-FORWARD's INVALID drop the out-of-state packet reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_invalid_packets_is_caught() {
    mutation_is_caught(
        "transition-invalid-dropped.yaml",
        "kube-proxy-iptables",
        drop_invalid_rule,
        &["invalid-packet/out-of-state-syn-from-backend"],
        "expected outcome dropped",
    )
    .await;
}

/// With `tcpBeLiberal` iptables mode writes no INVALID drop: one that drops INVALID packets
/// anyway loses the backend's out-of-state SYN, and the scenario's expectation says so; so does
/// nftables mode with a `ct state invalid drop`. The intact proxiers pass the same scenario.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_invalid_packets_despite_tcp_be_liberal_is_caught() {
    let file = "transition-invalid-tcp-be-liberal.yaml";
    let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    for (proxier, mutate) in [
        (
            "kube-proxy-iptables",
            invalid_dropped_anyway as fn(&mut kpct::programming::Programming) -> anyhow::Result<()>,
        ),
        ("kube-proxy-nftables", nft_drop_invalid),
    ] {
        let intact = kpct::run_scenario(&s, builtin(proxier).unwrap().as_ref(), probe_timeout())
            .await
            .expect("run");
        assert_eq!(
            intact.violations,
            Vec::<String>::new(),
            "{proxier} conforms"
        );
        mutation_is_caught(
            file,
            proxier,
            mutate,
            &["invalid-packet/out-of-state-syn-from-backend"],
            "expected every one of [client] to be reached",
        )
        .await;
    }
}

/// Deletes every TCP conntrack entry to 10.96.0.10:80 at each sync, whatever its reply: a
/// proxier that clears the connections of a Service port that changed, where kube-proxy clears
/// UDP entries only (`CleanStaleEntries`, pkg/proxy/conntrack/cleanup.go).
fn clear_tcp_entries_of_the_old_port(p: &mut kpct::programming::Programming) -> anyhow::Result<()> {
    p.conntrack_cleanup
        .push(kpct::programming::ConntrackCleanup {
            protocol: scenario::Protocol::Tcp,
            orig_dst: Some("10.96.0.10".parse()?),
            orig_dport: 80,
            // No reply comes from this address: every entry goes.
            serving: vec![kpct::programming::Serving {
                ip: "192.0.2.1".parse()?,
                port: None,
            }],
        });
    Ok(())
}

/// A connection opened before a Service's port changes keeps its old target port: one whose
/// conntrack entry the proxier clears is lost, and the kept flow's expectation says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_established_tcp_connections_on_a_port_change_is_caught() {
    for proxier in ["kube-proxy-iptables", "kube-proxy-nftables"] {
        mutation_is_caught(
            "transition-port-change.yaml",
            proxier,
            clear_tcp_entries_of_the_old_port,
            &["change-ports/session-on-old-target-port"],
            "expected every one of [web-b] to be reached",
        )
        .await;
    }
}

/// IPVS mode loses a connection whose virtual server went with a port change; one that keeps
/// the old virtual server (no `cleanLegacyService`) keeps it going, and the scenario's
/// expectation for IPVS says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_keeping_the_old_virtual_server_of_a_port_change_is_caught() {
    require_ipvs();
    mutation_is_caught(
        "transition-port-change.yaml",
        "kube-proxy-ipvs",
        keep_stale_virtual_servers,
        &["change-ports/session-on-old-target-port"],
        "expected outcome dropped",
    )
    .await;
}

/// nftables mode rejects ports and protocols a live ClusterIP does not serve; without the
/// `cluster-ips-check` reject they are lost instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_undefined_cluster_ip_ports_is_caught_in_nftables_mode() {
    mutation_is_caught(
        "clusterip-undefined-port.yaml",
        "kube-proxy-nftables",
        no_cluster_ips_reject,
        &["undefined-port", "udp-to-tcp-only-port"],
        "expected outcome rejected",
    )
    .await;
}

/// nftables mode serves NodePorts on the primary node address only by default; one that serves
/// every address (iptables mode's default) is caught on the secondary one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_node_ports_on_every_address_is_caught_in_nftables_mode() {
    let every = OptionIgnored {
        inner: "kube-proxy-nftables",
        ignore: |o| {
            o.node_port_addresses = vec![scenario::NodePortAddress::Cidr(
                "0.0.0.0/0".parse().expect("a CIDR"),
            )]
        },
    };
    let path = format!(
        "{}/../scenarios/nodeport-secondary-ip.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    let run = kpct::run_scenario(&s, &every, probe_timeout())
        .await
        .expect("run");
    assert!(
        run.violations
            .iter()
            .any(|v| v.contains("probe `external-to-node-a-secondary`")
                && v.contains("expected outcome rejected")),
        "{:#?}",
        run.violations
    );
}

/// nftables mode forwards an INVALID packet as upstream does (no `ct state invalid drop`); the
/// scenario's expectation for it fails for one that drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_invalid_packets_is_caught_in_nftables_mode() {
    mutation_is_caught(
        "transition-invalid-dropped.yaml",
        "kube-proxy-nftables",
        nft_drop_invalid,
        &["invalid-packet/out-of-state-syn-from-backend"],
        "expected every one of [client] to be reached",
    )
    .await;
}

/// nftables mode refuses 127.0.0.1:nodePort; one that serves it is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_localhost_node_ports_is_caught_in_nftables_mode() {
    mutation_is_caught(
        "nodeport-localhost.yaml",
        "kube-proxy-nftables",
        nft_localhost_node_ports,
        &["node-a-localhost-to-nodeport"],
        "expected outcome rejected",
    )
    .await;
}

/// A dual-stack NodePort Service with one backend, so a broken proxier's dropped shots are few.
const DUAL_STACK: &str = r#"
topology:
  underlay: 192.168.1.0/24,fd00:192:168:1::/64
  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
  serviceCIDR: 10.96.0.0/12,fd00:10:96::/112
  nodes:
    - { name: node-a, ips: [192.168.1.10, "fd00:192:168:1::10"], podCIDRs: [10.244.1.0/24, "fd00:10:244:1::/64"] }
    - { name: node-b, ips: [192.168.1.11, "fd00:192:168:1::11"], podCIDRs: [10.244.2.0/24, "fd00:10:244:2::/64"] }
  pods:
    - { name: client, node: node-a, ips: [10.244.1.10, "fd00:10:244:1::10"] }
    - name: web-1
      node: node-b
      ips: [10.244.2.10, "fd00:10:244:2::10"]
      labels: { app: web }
      ports: [{ name: http, containerPort: 8080 }]
  external: { ips: [192.168.1.100, "fd00:192:168:1::100"] }
services:
  - name: web
    spec:
      type: NodePort
      ipFamilyPolicy: RequireDualStack
      clusterIPs: [10.96.0.10, "fd00:10:96::a"]
      selector: { app: web }
      ports: [{ name: http, port: 80, targetPort: http, nodePort: 30080 }]
probes:
  - name: ipv4
    from: { pod: client }
    to: { service: web, family: IPv4 }
    expect: { reaches: [web-1], source: preserved, reply: true }
  - name: ipv6
    from: { pod: client }
    to: { service: web, family: IPv6 }
    expect: { reaches: [web-1], source: preserved, reply: true }
  - name: external-ipv6
    from: { external: true }
    to: { service: web, via: nodePort, node: node-a, family: IPv6 }
    expect: { reaches: [web-1], source: masqueraded, reply: true }
"#;

async fn dual_stack_violations(proxier: &dyn Proxier) -> Vec<String> {
    let s = scenario::parse(DUAL_STACK, "mutation-dual-stack.yaml").unwrap();
    kpct::run_scenario(&s, proxier, probe_timeout())
        .await
        .unwrap()
        .violations
}

/// The violations of the dual-stack scenario against `proxier` broken by `mutate`, once the
/// intact `proxier` is seen to conform.
async fn dual_stack_mutated(
    proxier: &'static str,
    mutate: fn(&mut kpct::programming::Programming) -> anyhow::Result<()>,
) -> Vec<String> {
    let intact = builtin(proxier).unwrap();
    assert_eq!(
        dual_stack_violations(intact.as_ref()).await,
        Vec::<String>::new(),
        "the intact programming of {proxier} conforms"
    );
    let broken = Mutated {
        name: proxier,
        inner: proxier,
        mutate,
    };
    dual_stack_violations(&broken).await
}

/// Whether `found` holds a violation of `probe` saying `what` (any, for an empty `what`).
fn says(found: &[String], probe: &str, what: &str) -> bool {
    found
        .iter()
        .any(|v| v.contains(&format!("probe `{probe}`")) && v.contains(what))
}

/// A proxier that ignores IPv6 fails the IPv6 probes of a dual-stack Service, and only those;
/// one without the IPv6 masquerade fails the external IPv6 probe's source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_ipv6_or_its_masquerade_is_caught_and_ipv4_still_judged() {
    let found = dual_stack_mutated("kube-proxy-nftables", ignore_ipv6).await;
    for probe in ["ipv6", "external-ipv6"] {
        assert!(says(&found, probe, "to be reached"), "{probe}: {found:#?}");
    }
    assert!(
        !says(&found, "ipv4", ""),
        "the IPv4 half is intact: {found:#?}"
    );
    let found = dual_stack_mutated("kube-proxy-nftables", no_ipv6_masquerade).await;
    assert!(
        says(&found, "external-ipv6", "expected source masqueraded"),
        "{found:#?}"
    );
}

/// IPVS mode's IPv6 proxier: without its kube-ipvs0 IPv6 bindings the IPv6 ClusterIP is not
/// reached (and only it: the IPv4 half and the IPv6 NodePort, never bound, still work); with
/// real servers on a closed port every IPv6 probe is reset by the backend; without the ip6tables
/// MASQUERADE the external IPv6 probe keeps its source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_broken_ipv6_ipvs_programming_is_caught() {
    require_ipvs();
    let found = dual_stack_mutated("kube-proxy-ipvs", unbind_ipv6_service_addresses).await;
    assert!(says(&found, "ipv6", "to be reached"), "{found:#?}");
    assert!(
        !says(&found, "ipv4", "") && !says(&found, "external-ipv6", ""),
        "only the IPv6 ClusterIP needs the binding: {found:#?}"
    );
    let found = dual_stack_mutated("kube-proxy-ipvs", ipv6_real_servers_on_wrong_port).await;
    for probe in ["ipv6", "external-ipv6"] {
        assert!(
            says(&found, probe, "observed tcp-reset"),
            "{probe}: {found:#?}"
        );
    }
    assert!(
        !says(&found, "ipv4", ""),
        "the IPv4 half is intact: {found:#?}"
    );
    let found = dual_stack_mutated("kube-proxy-ipvs", drop_postrouting_masquerade).await;
    assert!(
        says(&found, "external-ipv6", "expected source masqueraded"),
        "{found:#?}"
    );
}

/// In an IPv6-only cluster the one proxier is the IPv6 one: a proxier that ignores IPv6
/// programs nothing there, and every probe fails; iptables mode without its (ip6tables)
/// MASQUERADE rule keeps the external client's source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_ipv6_proxiers_are_caught_in_an_ipv6_only_cluster() {
    mutation_is_caught(
        "ipv6-only-hairpin.yaml",
        "kube-proxy-nftables",
        ignore_ipv6,
        &["to-itself"],
        "to be reached",
    )
    .await;
    mutation_is_caught(
        "ipv6-only-nodeport-external.yaml",
        "kube-proxy-iptables",
        drop_postrouting_masquerade,
        &["external-via-node-a"],
        "expected source masqueraded",
    )
    .await;
}

/// iptables mode's IPv6 proxier writes ip6tables: without its MASQUERADE rule (the mutation
/// runs on each family's programming, the IPv6 one's tables being the node's ip6tables), the
/// external IPv6 probe keeps its source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_ip6tables_masquerade_is_caught() {
    let found = dual_stack_mutated("kube-proxy-iptables", drop_postrouting_masquerade).await;
    assert!(
        says(&found, "external-ipv6", "expected source masqueraded"),
        "{found:#?}"
    );
}

/// An IPv6 proxier sending the IPv6 slice's endpoint's connections to the IPv4 slice's pod
/// fails `reaches` on IPv6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_endpoints_of_the_wrong_slice_are_caught() {
    mutation_is_caught(
        "dual-stack-endpoints-per-family.yaml",
        "kube-proxy-nftables",
        ipv6_endpoint_swapped,
        &["ipv6"],
        "web-b1",
    )
    .await;
}

/// kube-proxy's allowFromNode exemption forgotten: a node's connection SNATted to its own LB IP
/// is refused although `loadBalancerSourceRanges` hold the node IP. In iptables mode the KUBE-FW-
/// rule admitting the LB IP as a source goes, in nftables mode the LB IP in the firewall rule's
/// source set, in IPVS mode its KUBE-LOAD-BALANCER-SOURCE-IP entry, replaced by the
/// KUBE-IPVS-OUT-FILTER drop written where the ranges lack the node IP.
fn forget_lb_ip_sources(p: &mut kpct::programming::Programming) -> anyhow::Result<()> {
    // Only a node whose IP a range holds has it (node-a here); the violation the test asserts
    // shows that it went.
    const LB_IP: &str = "192.168.1.200";
    for table in p.iptables.values_mut() {
        table
            .rules
            .retain(|r| !(r.starts_with("-A KUBE-FW-") && r.contains(&format!(" -s {LB_IP} "))));
    }
    let listed = format!(" , {LB_IP} }}");
    for line in &mut p.nft.lines {
        if line.contains("saddr != {") && line.contains(&listed) {
            *line = line.replace(&listed, " }");
        }
    }
    let mut ipvs_allowed = false;
    for set in &mut p.ipsets {
        if set.name == "KUBE-LOAD-BALANCER-SOURCE-IP" {
            let before = set.entries.len();
            set.entries.retain(|e| !e.ends_with(&format!(",{LB_IP}")));
            ipvs_allowed |= set.entries.len() < before;
        }
    }
    if ipvs_allowed {
        // IPVS mode judges a node's own connections in KUBE-IPVS-OUT-FILTER, which drops those
        // from an LB IP whose ranges lack the node IP (`lbNoNodeAccessIPPortProtocolEntries`,
        // pkg/proxy/ipvs/proxier.go): the rule it writes where allowFromNode is false.
        let filter = p
            .iptables
            .get_mut(&kpct::programming::Table::Filter)
            .expect("IPVS mode writes filter");
        filter.rules.push(format!(
            "-A KUBE-IPVS-OUT-FILTER -s {LB_IP} -m ipvs --vaddr {LB_IP} --vproto tcp --vport 80 -j DROP"
        ));
    }
    Ok(())
}

async fn forgetting_lb_ip_sources_is_caught(proxier: &'static str) {
    mutation_is_caught(
        "loadbalancer-source-ranges-from-node.yaml",
        proxier,
        forget_lb_ip_sources,
        &["node-from-lb-ip-to-lb"],
        "expected delivery to one of [web-b], observed dropped",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_lb_ip_sources_is_caught_in_iptables_and_nftables_modes() {
    for proxier in ["kube-proxy-iptables", "kube-proxy-nftables"] {
        forgetting_lb_ip_sources_is_caught(proxier).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_forgetting_lb_ip_sources_is_caught() {
    require_ipvs();
    forgetting_lb_ip_sources_is_caught("kube-proxy-ipvs").await;
}

/// A UDP flow kept on a pod whose target port moves must reach the new port: a proxier whose
/// conntrack cleanup compares the DNAT target's address alone (the built-ins before exploring
/// found it) leaves the flow on the old port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_comparing_addresses_alone_is_caught() {
    for proxier in ["kube-proxy-iptables", "kube-proxy-nftables"] {
        mutation_is_caught(
            "transition-udp-endpoint-port-moved.yaml",
            proxier,
            common::serving_address_alone,
            &["move-target-port/resolver-again"],
            "expected the backend to be reached on port 5354, observed client 10.244.1.10 -> port 5353",
        )
        .await;
    }
}

/// v1.37 cuts a UDP flow to the ClusterIP of a Service left without a serving endpoint: a
/// proxier that keeps such entries (v1.36's cleanup) fails the newest's expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeping_flows_of_a_service_without_endpoints_is_caught() {
    for proxier in ["kube-proxy-iptables", "kube-proxy-nftables"] {
        mutation_is_caught(
            "transition-udp-last-endpoint-gone.yaml",
            proxier,
            common::no_cleanup_without_endpoints,
            &["last-endpoint-terminates/clusterip-flow-again"],
            "expected outcome rejected, observed delivered",
        )
        .await;
    }
}

/// A deleted Service's kept UDP flow goes on (the Service goes before its slices): a proxier
/// that clears it fails the expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_the_flows_of_a_deleted_service_is_caught() {
    for proxier in ["kube-proxy-iptables", "kube-proxy-nftables"] {
        mutation_is_caught(
            "transition-udp-service-deleted.yaml",
            proxier,
            common::clear_flows_of_deleted_service,
            &["delete-dns/flow-again"],
            "expected delivery to one of [dns-1], observed dropped",
        )
        .await;
    }
}

/// A node's own connection to a healthCheckNodePort is the node's health server's: a proxier
/// that serves the port as a NodePort fails the expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_port_served_as_a_node_port_is_caught() {
    mutation_is_caught(
        "health-check-from-node.yaml",
        "kube-proxy-iptables",
        common::health_check_port_as_node_port,
        &["node-a-with-endpoint"],
        "expected outcome answeredByNode, observed delivered",
    )
    .await;
}

/// The release views judged as the newest release: an older built-in labelled as the newest.
async fn older_release_run(
    file: &str,
    newest: &'static str,
    older: &'static str,
) -> kpct::ScenarioRun {
    let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    let broken = Mutated {
        name: newest,
        inner: older,
        mutate: common::unchanged,
    };
    kpct::run_scenario(&s, &broken, probe_timeout())
        .await
        .expect("run")
}

/// From v1.36 nftables mode masquerades a hairpin only for the node's own endpoints: the v1.35
/// model, which masquerades a remote endpoint's own traffic too, fails the newest's
/// expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masquerading_a_remote_hairpin_in_nftables_mode_is_caught() {
    let run = older_release_run(
        "hairpin-etp-local-other-node.yaml",
        "kube-proxy-nftables",
        "kube-proxy-nftables@v1.35",
    )
    .await;
    assert!(
        run.violations
            .iter()
            .any(|v| v.contains("probe `pod-to-other-node-nodeport`")
                && v.contains("expected source preserved")),
        "{:#?}",
        run.violations
    );
}

/// Of an address listed terminating then running, the running copy serves (v1.36 and later):
/// a proxier that keeps the first copy off its node (v1.35's cache) rejects the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeping_the_first_copy_of_an_address_is_caught() {
    for (newest, older) in [
        ("kube-proxy-iptables", "kube-proxy-iptables@v1.35"),
        ("kube-proxy-nftables", "kube-proxy-nftables@v1.35"),
    ] {
        let run =
            older_release_run("terminating-and-running-same-address.yaml", newest, older).await;
        assert!(
            run.violations
                .iter()
                .any(|v| v.contains("probe `from-another-node`")
                    && v.contains("expected delivery to one of [web-1], observed rejected")),
            "{newest}: {:#?}",
            run.violations
        );
        assert!(
            !run.violations.iter().any(|v| v.contains("from-its-node")),
            "on its own node the later, local copy wins in v1.35 too: {:#?}",
            run.violations
        );
    }
}

/// A ClusterIP Service labelled headless is served, and a slice labelled service-proxy-name
/// used (v1.36 and later): a proxier that filters both (v1.35's informers) fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtering_the_headless_label_on_services_is_caught() {
    for (newest, older) in [
        ("kube-proxy-iptables", "kube-proxy-iptables@v1.35"),
        ("kube-proxy-nftables", "kube-proxy-nftables@v1.35"),
    ] {
        let run = older_release_run("service-headless-label.yaml", newest, older).await;
        for probe in ["labelled-service", "proxy-name-slice"] {
            assert!(
                run.violations
                    .iter()
                    .any(|v| v.contains(&format!("probe `{probe}`"))),
                "{newest} {probe}: {:#?}",
                run.violations
            );
        }
    }
}

/// With `--nodeport-addresses` leaving the node IP out, nothing listens for health checks
/// there (kube-proxy's health server binds the addresses it selects): the built-in's program
/// run as an `exec:` proxier, for which kpct's stand-in health server listens on every address,
/// is answered on the node IP, and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_server_on_every_address_is_caught() {
    let path = format!(
        "{}/../scenarios/health-check-node-port-addresses.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = scenario::load(std::path::Path::new(&path)).expect("a library scenario");
    let everywhere = kpct::ProxierSpec::parse_as::<kpct::drivers::ExecProxier>(&format!(
        "exec:{} as-exec kube-proxy-iptables",
        env!("CARGO_BIN_EXE_kpct")
    ))
    .expect("an exec: proxier");
    let run = kpct::run_scenario(&s, &everywhere, probe_timeout())
        .await
        .expect("run");
    assert!(
        run.violations
            .iter()
            .any(|v| v.contains("probe `health-check-on-node-ip`")
                && v.contains("expected outcome rejected, observed answered-by-node")),
        "{:#?}",
        run.violations
    );
    assert!(
        !run.violations
            .iter()
            .any(|v| v.contains("nodeport-on-node-ip")),
        "the programming itself is the built-in's: {:#?}",
        run.violations
    );
}
