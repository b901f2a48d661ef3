//! `kpct bench` at a small size against the real kernel (needs root): the numbers are never
//! asserted, only that every step ran and every timed connection reached a backend.

use kpct::bench::{scale, ScaleOptions, SuiteOptions};
use kpct::proxier::builtin;
use std::time::Duration;

fn small() -> ScaleOptions {
    ScaleOptions {
        services: vec![10],
        probes: 5,
        probe_timeout: Duration::from_secs(5),
        ..ScaleOptions::default()
    }
}

async fn scale_small(proxier: &str) {
    let p = builtin(proxier).expect("built-in");
    let opts = small();
    let run = scale::run_one(p.as_ref(), 10, &opts)
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scale_small_iptables() {
    scale_small("kube-proxy-iptables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_bench_scale_small() {
    scale_small("kube-proxy-ipvs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_suite_one_scenario_iptables() {
    let scenario = format!(
        "{}/../scenarios/clusterip-same-node.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let opts = SuiteOptions {
        patterns: vec![scenario],
        ..SuiteOptions::default()
    };
    let out = kpct::bench::suite(&[builtin("kube-proxy-iptables").unwrap()], &opts)
        .await
        .expect("bench suite runs");
    println!("{out}");
    assert!(
        out.contains("1 scenarios × 1 proxier(s)") && out.contains("clusterip-same-node"),
        "{out}"
    );
    assert!(!out.contains("ERROR") && !out.contains("violated"), "{out}");
}
