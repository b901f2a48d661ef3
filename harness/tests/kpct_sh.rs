//! `ci/kpct.sh` on a kernel without IP_VS runs kpct in a VM that sees only the repository
//! writable: every output path given to `run` must be made writable in the VM (or refused before
//! booting), or the file is written inside the VM and lost. The VM command is checked here
//! without booting (KPCT_VM_DRY_RUN); that a `--rwdir` output comes back from the VM was checked
//! by hand (see the README's "The two commands").

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository")
}

fn kpct_sh(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg(repo().join("ci/kpct.sh"))
        .args(args)
        .env("KPCT_VM", "1")
        .env("KPCT_VM_DRY_RUN", "1")
        .env("KPCT_BIN", env!("CARGO_BIN_EXE_kpct"))
        .output()
        .expect("running ci/kpct.sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_output_directory_is_made_writable_in_the_vm() {
    let base = std::env::temp_dir().join(format!("kpct-sh-test-{}", std::process::id()));
    let reports = base.join("reports");
    let json = base.join("json");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&json).unwrap();
    let obs = base.join("obs"); // does not exist yet: created so the VM can mount it
    let junit = base.join("j.xml");
    let report = reports.join("r.html");
    let (code, stdout, stderr) = kpct_sh(&[
        "run",
        "--junit",
        junit.to_str().unwrap(),
        &format!("--report={}", report.display()),
        "--observations",
        obs.to_str().unwrap(),
        "--json",
        json.join("results.json").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let repo = repo();
    for dir in [&repo, &base, &reports, &obs, &json] {
        assert!(
            stdout.contains(&format!("--rwdir {} ", dir.display())),
            "{} is not writable in the VM: {stdout}",
            dir.display()
        );
    }
    assert!(
        obs.is_dir(),
        "the observations directory is created before the VM boots"
    );
    // The arguments reach kpct unchanged.
    assert!(
        stdout.contains(&format!("--junit {}", junit.display())),
        "{stdout}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn an_output_the_vm_cannot_give_back_is_refused_before_booting() {
    let (code, stdout, stderr) = kpct_sh(&["run", "--junit", "/run/kpct-j.xml"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("--junit /run/kpct-j.xml: the VM has its own run"),
        "{stderr}"
    );
    let (code, _, stderr) = kpct_sh(&["run", "--report", "/nonexistent/r.html"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--report /nonexistent/r.html: directory /nonexistent does not exist"),
        "{stderr}"
    );
}

/// A run boots the VM only when this kernel lacks what its selection needs: the iptables
/// built-in over an iptables scenario runs here, the IPVS built-in goes to the VM (when this
/// kernel has no IP_VS), and so does an SCTP scenario whatever the proxier.
#[test]
fn a_run_goes_to_the_vm_only_when_this_kernel_lacks_what_it_needs() {
    let caps = kpct::caps::detect().unwrap();
    let lacks = |f| !caps.missing(&[f]).is_empty();
    let dry = |args: &[&str]| {
        let out = Command::new("bash")
            .arg(repo().join("ci/kpct.sh"))
            .args(args)
            .env_remove("KPCT_VM")
            .env("KPCT_VM_DRY_RUN", "1")
            .env("KPCT_BIN", env!("CARGO_BIN_EXE_kpct"))
            .current_dir(repo())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let booted = |out: &str| out.contains("ci/vm.sh");
    let iptables = dry(&[
        "run",
        "--proxier",
        "kube-proxy-iptables",
        "--scenario",
        "scenarios/clusterip-udp.yaml",
    ]);
    assert!(!booted(&iptables), "{iptables}");
    assert!(iptables.contains("2 probe(s), 2 passed"), "{iptables}");
    let ipvs = dry(&[
        "run",
        "--proxier",
        "kube-proxy-ipvs",
        "--scenario",
        "scenarios/clusterip-udp.yaml",
    ]);
    assert_eq!(booted(&ipvs), lacks(kpct::caps::Feature::IpVs), "{ipvs}");
    let sctp = dry(&[
        "run",
        "--proxier",
        "kube-proxy-iptables",
        "--scenario",
        "scenarios/sctp-*.yaml",
    ]);
    assert_eq!(booted(&sctp), lacks(kpct::caps::Feature::Sctp), "{sctp}");
}
