//! The Vagrant lab, for real (ignored: run by hand, as root, after `cargo build --release -p
//! kpct` and `ci/real-proxiers.sh`; minutes under TCG, which it uses unless KPCT_LAB_DRIVER says
//! kvm):
//!
//! ```sh
//! sudo ci/install-deps.sh --lab
//! cargo test -p kpct --test lab_vagrant -- --ignored --nocapture
//! ```
//!
//! It builds the box from Debian packages (vagrant/box/build.sh), starts the lab's confined
//! libvirt (vagrant/host.sh), `vagrant up`s the box (offline path: the synced repository brings
//! kpct and the real proxiers), runs `rke2-ipvs-node` in IPVS mode natively in the guest, and
//! a lab with real kube-proxy in IPVS mode traced, then `vagrant destroy`s it and checks that
//! nothing is left: no domain, volume, pool, network, daemon or namespace.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs a step, printing how long it took; panics with its output when it fails.
fn step(what: &str, cmd: &mut Command) -> String {
    let start = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{what}: {:.0} s", start.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

fn host(args: &[&str]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("vagrant/host.sh"))
        .args(args)
        .env("KPCT_LAB_BOX", "local")
        // TCG unless told otherwise: KVM guests hang on the machines this was written on.
        .env(
            "KPCT_LAB_DRIVER",
            std::env::var("KPCT_LAB_DRIVER").unwrap_or_else(|_| "qemu".to_string()),
        );
    cmd
}

fn in_guest(script: &str) -> Command {
    host(&["vagrant", "ssh", "-c", script])
}

/// Takes the lab down even when a step panics, so a failed run leaves nothing behind either.
struct Down;
impl Drop for Down {
    fn drop(&mut self) {
        let _ = host(&["down"]).status();
    }
}

#[test]
#[ignore = "builds the box and boots the lab under TCG: minutes; run by hand as root"]
fn the_lab_boots_and_runs_rke2_ipvs_node_natively() {
    assert!(
        repo().join("target/release/kpct").exists(),
        "the offline lab takes target/release/kpct: cargo build --release -p kpct first"
    );
    step(
        "vagrant/box/build.sh",
        Command::new("bash").arg(repo().join("vagrant/box/build.sh")),
    );
    let _down = Down;
    step("vagrant/host.sh up", &mut host(&["up"]));
    let up = step("vagrant up", &mut host(&["vagrant", "up"]));
    assert!(
        up.contains("offline path"),
        "provisioning did not take the offline path:\n{up}"
    );

    let run = step(
        "kpct run rke2-ipvs-node in the guest",
        &mut in_guest("cd /kpct && sudo ci/kpct.sh run --scenario scenarios/rke2-ipvs-node.yaml --proxier kube-proxy-ipvs"),
    );
    assert!(run.contains("rke2-ipvs-node"), "{run}");

    let lab = step(
        "kpct lab up with real kube-proxy in IPVS mode, then trace",
        &mut in_guest(
            "cd /kpct && sudo target/release/kpct lab up scenarios/rke2-ipvs-node.yaml --proxier kube-proxy:ipvs \
             && sudo target/release/kpct trace scenarios/rke2-ipvs-node.yaml external-to-nodeport --proxier kube-proxy:ipvs; \
             rc=$?; sudo target/release/kpct lab down rke2-ipvs-node; exit $rc",
        ),
    );
    assert!(
        lab.contains("IPVS TCP"),
        "the trace shows no IPVS service:\n{lab}"
    );

    drop(_down);
    let left = host(&["leftovers"])
        .output()
        .expect("vagrant/host.sh leftovers");
    let text = String::from_utf8_lossy(&left.stdout);
    assert!(
        left.status.success(),
        "the lab left something behind:\n{text}"
    );
}
