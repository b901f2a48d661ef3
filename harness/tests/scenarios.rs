//! Every scenario in `scenarios/` against both reference proxiers, in real namespaces: the
//! declared expectations must hold, and the observation must match its golden snapshot in
//! `harness/snapshots/` (`<scenario>@<proxier>.snap`). Dropping a YAML file into `scenarios/` adds a
//! case here; see the README for the review flow.

use kpct::caps::{require_ipvs, require_sctp};
use kpct::probe::probe_timeout;
use rstest::rstest;
use std::path::PathBuf;

fn run(path: PathBuf, proxier_name: &str) {
    let scenario = kpct::scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let proxier = kpct::proxier::builtin(proxier_name).expect("a built-in proxier");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let run = runtime
        .block_on(kpct::run::run_scenario(
            &scenario,
            proxier.as_ref(),
            probe_timeout(),
        ))
        .unwrap_or_else(|e| panic!("{} against {proxier_name}: {e:#}", path.display()));
    let yaml = run.observation.to_yaml().expect("observation renders");
    assert!(
        run.violations.is_empty(),
        "{} violated expectation(s):\n{}\n\nobserved:\n{yaml}",
        run.violations.len(),
        run.violations.join("\n")
    );
    insta::with_settings!({
        snapshot_path => "../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
        // Relative, so a golden file does not carry the path of the machine that wrote it.
        description => format!(
            "scenarios/{} against {proxier_name}",
            path.file_name().map(|f| f.to_string_lossy()).unwrap_or_default()
        ),
    }, {
        insta::assert_snapshot!(format!("{}@{proxier_name}", scenario.name), yaml);
    });
}

#[rstest]
fn needs_ipvs_scenarios(#[files("../scenarios/*.yaml")] path: PathBuf) {
    require_ipvs();
    run(path, "kube-proxy-ipvs");
}

#[rstest]
fn scenarios_iptables(
    #[files("../scenarios/*.yaml")]
    #[exclude("/sctp-[^/]*$")]
    #[exclude("/ipvs-existing-[^/]*$")]
    path: PathBuf,
) {
    run(path, "kube-proxy-iptables");
}

/// Scenarios whose nodes hold IPVS services before the proxier runs (`existingIPVS`, named
/// `ipvs-existing-*`) need IP_VS in the kernel in iptables mode too.
#[rstest]
fn needs_ipvs_scenarios_iptables(#[files("../scenarios/ipvs-existing-*.yaml")] path: PathBuf) {
    require_ipvs();
    run(path, "kube-proxy-iptables");
}

/// Scenarios that use SCTP (named `sctp-*`, which tests/scenario_files.rs enforces) need it in
/// the kernel in iptables mode too.
#[rstest]
fn needs_sctp_scenarios_iptables(#[files("../scenarios/sctp-*.yaml")] path: PathBuf) {
    require_sctp();
    run(path, "kube-proxy-iptables");
}
