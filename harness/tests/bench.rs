//! `kpct bench` at a small size against the real kernel (needs root): the numbers are never
//! asserted, only that every step ran and every timed connection reached a backend.

use kpct::builtin;
use kpct::operations::bench::{scale, ScaleOptions, SuiteOptions};
use kpct::programming::tools::IptablesBackend;
use std::time::Duration;

fn small() -> ScaleOptions {
    ScaleOptions {
        services: vec![10],
        probes: 5,
        probe_timeout: Duration::from_secs(5),
        ..ScaleOptions::default()
    }
}

async fn scale_small(proxier: &str, backend: IptablesBackend) {
    let p = builtin(proxier).expect("built-in");
    let opts = small();
    let run = scale::run_one(p.as_ref(), 10, &opts, backend)
        .await
        .expect("bench scale runs");
    let rendered = scale::render(std::slice::from_ref(&run), &opts);
    println!("{rendered}");
    assert_eq!(run.nodes.len(), 3);
    assert_eq!(
        run.targets.len(),
        3,
        "first, middle and last service probed"
    );
    for t in &run.targets {
        assert_eq!(
            (t.failures, t.rtts.len()),
            (0, 5),
            "{}: {:?}",
            t.service,
            t.first_error
        );
        assert!(!t.reached.is_empty());
    }
    assert!(rendered.contains(proxier), "{rendered}");
    // The apply step that wrote this proxier's rules is timed in its own column.
    let step = match proxier {
        "kube-proxy-nftables" => kpct::programming::Step::Nft,
        _ => kpct::programming::Step::Iptables,
    };
    assert!(
        run.nodes
            .iter()
            .all(|n| n.steps.iter().any(|(s, _)| *s == step)),
        "{rendered}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scale_small_iptables() {
    scale_small("kube-proxy-iptables", IptablesBackend::Nft).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scale_small_iptables_legacy() {
    scale_small("kube-proxy-iptables", IptablesBackend::Legacy).await;
}

/// The nftables proxier's apply time shows in its own column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scale_small_nftables() {
    scale_small("kube-proxy-nftables", IptablesBackend::Nft).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_bench_scale_small() {
    scale_small("kube-proxy-ipvs", IptablesBackend::Nft).await;
}

#[test]
fn bench_suite_times_serial_and_parallel_side_by_side_iptables() {
    let scenario = |name: &str| format!("{}/../scenarios/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    let opts = SuiteOptions {
        patterns: vec![scenario("clusterip-same-node"), scenario("clusterip-udp")],
        workers: 2,
        ..SuiteOptions::default()
    };
    let out = kpct::operations::bench::suite(
        &[Box::new(builtin("kube-proxy-iptables").unwrap()) as Box<dyn kpct::NodeProgrammer>],
        &opts,
    )
    .expect("bench suite runs");
    println!("{out}");
    assert!(
        out.contains("2 scenarios × 1 proxier(s)") && out.contains("clusterip-same-node"),
        "{out}"
    );
    assert!(
        out.contains("kube-proxy-iptables  -j 1 ") && out.contains("   -j 2 "),
        "{out}"
    );
    // Each scenario ran twice (once per pass): both observations agreed.
    assert!(
        out.contains("0 scenario(s) observed differently between runs"),
        "{out}"
    );
    assert!(!out.contains("ERROR") && !out.contains("violated"), "{out}");
}

/// A proxier that writes iptables runs once per flavour asked for, side by side; one that does
/// not (nftables mode) runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scale_runs_iptables_writers_per_flavour() {
    let opts = ScaleOptions {
        iptables_backends: vec![IptablesBackend::Nft, IptablesBackend::Legacy],
        probes: 1,
        ..small()
    };
    let proxiers = [
        builtin("kube-proxy-nftables").unwrap(),
        builtin("kube-proxy-iptables").unwrap(),
    ];
    let out = scale::scale(&proxiers, &opts)
        .await
        .expect("bench scale runs");
    println!("{out}");
    assert!(
        out.contains("kube-proxy-iptables (iptables-legacy)"),
        "{out}"
    );
    assert!(
        !out.contains("kube-proxy-nftables (iptables-legacy)"),
        "{out}"
    );
    assert!(out.contains("nft -f"), "{out}");
}
