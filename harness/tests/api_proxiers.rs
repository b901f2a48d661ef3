//! `api:` proxiers: any API-watching program, given by its command line and a counter of its
//! syncs. Real kube-proxy v1.37.2, run as an `api:` proxier with nothing kpct knows of it but
//! that counter, must pass what kube-proxy-iptables passes; configured wrong, it must fail.

mod common;

use common::{kube_proxy_binary, library_scenario as scenario};
use kpct::drivers::real::ApiProxier;
use kpct::netns::install_signal_cleanup;
use std::path::Path;
use std::time::Duration;

/// kube-proxy in iptables mode from flags alone, with `cluster_cidr` as its idea of the pod
/// ranges. It syncs only on changes (its periodic sync is hourly whatever
/// `--iptables-sync-period` says, pkg/proxy/iptables/proxier.go), so kpct's kicks give the
/// `api:` rule its second sync.
fn kube_proxy_by_api(cluster_cidr: &str, metric: &str, timeout: Duration) -> ApiProxier {
    let mut p = kpct::ProxierSpec::parse_as::<kpct::drivers::ApiProxier>(&format!(
        "api: --sync-metric={metric}@10249 --judged-as=kube-proxy-iptables {} \
         --kubeconfig={{kubeconfig}} --hostname-override={{node}} --proxy-mode=iptables \
         --cluster-cidr={cluster_cidr} --detect-local-mode=ClusterCIDR \
         --iptables-min-sync-period=0s --conntrack-max-per-core=0 \
         --conntrack-tcp-timeout-established=0s --conntrack-tcp-timeout-close-wait=0s \
         --conntrack-udp-timeout=0s --conntrack-udp-timeout-stream=0s \
         --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=0.0.0.0:10256 \
         --oom-score-adj=0 --kube-api-content-type=application/json",
        kube_proxy_binary().display()
    ))
    .unwrap_or_else(|e| panic!("{e:#}"));
    p.timeout = timeout;
    p
}

const SYNCS: &str = "kubeproxy_sync_proxy_rules_duration_seconds_count";

fn run(s: &kpct::Scenario, p: &ApiProxier) -> anyhow::Result<kpct::ScenarioRun> {
    install_signal_cleanup();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(kpct::run_scenario(s, p, kpct::probe::probe_timeout()))
}

/// Through every step of a transition (endpoints scaled to zero and back), judged as the
/// built-in of its mode: every expectation and convergence check holds.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn kube_proxy_as_an_api_proxier_passes_a_transition() {
    let p = kube_proxy_by_api("{cluster-cidr}", SYNCS, Duration::from_secs(120));
    let file = "transition-scale-down-up.yaml";
    let run = run(&scenario(file), &p).unwrap_or_else(|e| panic!("{file}: {e:#}"));
    assert!(run.violations.is_empty(), "{file}: {:#?}", run.violations);
    let stuck: Vec<&str> = run
        .observation
        .steps
        .iter()
        .filter(|step| kpct::report::not_converged(&run, step))
        .map(|step| step.step.as_str())
        .collect();
    assert!(stuck.is_empty(), "{file}: not converged at {stuck:?}");
}

/// The mutation: told the wrong pod range, it masquerades pod traffic to a ClusterIP, and
/// the scenario's `source: preserved` fails it.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn an_api_proxier_with_the_wrong_cluster_cidr_fails() {
    let p = kube_proxy_by_api("10.250.0.0/16", SYNCS, Duration::from_secs(120));
    let run = run(&scenario("clusterip-cross-node.yaml"), &p).unwrap();
    assert!(
        run.violations
            .iter()
            .any(|v| v.contains("expected source preserved")),
        "{:#?}",
        run.violations
    );
}

/// A counter that never moves (a wrong metric name) and a program that never watches: each
/// a clear error, in bounded time, naming what kpct waited for.
#[test]
#[serial_test::serial(real_proxier_processes)]
fn an_api_proxier_that_never_syncs_is_a_clear_error() {
    let s = scenario("clusterip-cross-node.yaml");
    let started = std::time::Instant::now();
    let wrong_metric = kube_proxy_by_api("{cluster-cidr}", "no_such_syncs", Duration::from_secs(5));
    let text = format!("{:#}", run(&s, &wrong_metric).unwrap_err());
    assert!(
        text.contains("did not complete its first sync within 5 s")
            && text.contains("`no_such_syncs` went from {} to {}")
            && text.contains("must sync at least twice"),
        "{text}"
    );
    let mut deaf = kpct::ProxierSpec::parse_as::<kpct::drivers::ApiProxier>(
        "api:--sync-metric=syncs@9000 sleep 3600",
    )
    .unwrap();
    deaf.timeout = Duration::from_secs(3);
    let text = format!("{:#}", run(&s, &deaf).unwrap_err());
    assert!(
        text.contains("sleep on node-a was not sent resourceVersion")
            && text.contains("it has no watch open"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// kube-router's service proxy, the second real proxier: v2.10.0, built by
/// `ci/real-proxiers.sh --all` (not CI's set: its cold build costs CI minutes it has not got).
fn kube_router() -> ApiProxier {
    let binary =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/real-proxiers/kube-router-v2.10.0");
    assert!(
        binary.is_file(),
        "{} is missing: run `ci/real-proxiers.sh --all`",
        binary.display()
    );
    let mut p = kpct::ProxierSpec::parse_as::<kpct::drivers::ApiProxier>(&format!(
        "api: --sync-metric=kube_router_controller_ipvs_services_sync_time_count@20241 {} \
         --run-service-proxy=true --run-router=false --run-firewall=false \
         --kubeconfig={{kubeconfig}} --hostname-override={{node}} --health-port=0 \
         --metrics-port=20241 --metrics-addr=127.0.0.1 --ipvs-sync-period=1s \
         --service-cluster-ip-range={{service-cidr}}",
        binary.display()
    ))
    .unwrap_or_else(|e| panic!("{e:#}"));
    p.timeout = Duration::from_secs(300);
    p
}

/// kube-router reaches the pods behind a ClusterIP from a pod, and its session affinity
/// carries the IPVS persistence mask it writes: 32, a prefix length, where the kernel takes an
/// IPv4 mask (32.0.0.0), which kpct reads back as the kernel holds it. (The scenario fails
/// kube-router where it does not masquerade an external client, so its evidence is read.)
#[test]
#[ignore = "needs kube-router (`ci/real-proxiers.sh --all`) and IP_VS: `ci/vm.sh -- cargo test \
            -p kpct --test api_proxiers -- --ignored needs_ipvs_kube_router`"]
fn needs_ipvs_kube_router_serves_clusterips_with_its_own_persistence_mask() {
    let p = kube_router();
    let plain = run(&scenario("clusterip-cross-node.yaml"), &p).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(plain.violations.is_empty(), "{:#?}", plain.violations);
    let affinity =
        run(&scenario("session-affinity-clientip.yaml"), &p).unwrap_or_else(|e| panic!("{e:#}"));
    let evidence = format!("{:?}", affinity.evidence);
    assert!(
        evidence.contains("persistent 600 mask 32.0.0.0"),
        "{evidence}"
    );
}
