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

/// `ci/kpct.sh run` runs natively and hands only the runs this kernel cannot hold to the VM
/// runner (`KPCT_VM_RUNNER`, here a stand-in that logs how it was called and runs the command
/// on this machine), at the same time, into one table and exit status:
/// - the iptables built-in over an iptables scenario boots no VM;
/// - an SCTP scenario goes to the runner (when this kernel lacks SCTP), and what the child
///   gives back joins the table: here the stand-in's kernel lacks SCTP too, so it comes back
///   "not run here" (exit 3) beside the scenario that passed here;
/// - a child that gives nothing back (the stand-in cannot hold IPVS either, and the child
///   refuses it) makes each of its runs an error carrying the child's last output, while the
///   runs made here keep their results.
#[test]
fn a_run_hands_only_what_this_kernel_lacks_to_the_vm() {
    let caps = kpct::kernel_features::detect().unwrap();
    let lacks = |f| !caps.missing(&[f]).is_empty();
    let dir = std::env::temp_dir().join(format!(
        "{}vm-runner",
        kpct::netns::naming::RunPrefix::next().as_str()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("calls");
    let runner = dir.join("runner.sh");
    std::fs::write(
        &runner,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&runner, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = |args: &[&str]| {
        let _ = std::fs::remove_file(&log);
        let out = Command::new("bash")
            .arg(repo().join("ci/kpct.sh"))
            .arg("run")
            .args(args)
            .env_remove("KPCT_VM")
            .env("KPCT_VM_RUNNER", &runner)
            .env("KPCT_BIN", env!("CARGO_BIN_EXE_kpct"))
            .current_dir(repo())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            std::fs::read_to_string(&log).unwrap_or_default(),
        )
    };

    let (code, stdout, stderr, calls) = run(&[
        "--proxier",
        "kube-proxy-iptables",
        "--scenario",
        "scenarios/clusterip-udp.yaml",
    ]);
    assert_eq!((code, calls.as_str()), (0, ""), "{stdout}{stderr}");
    assert!(stdout.contains("2 probe(s), 2 passed"), "{stdout}");

    let (code, stdout, stderr, calls) = run(&[
        "--proxier",
        "kube-proxy-iptables",
        "--scenario",
        "scenarios/clusterip-udp.yaml",
        "--scenario",
        "scenarios/sctp-services.yaml",
    ]);
    if lacks(kpct::kernel_features::Feature::Sctp) {
        assert!(
            calls.contains(" --only-run sctp-services=kube-proxy-iptables")
                && !calls.contains("clusterip-udp")
                && calls.starts_with("--rwdir /")
                && calls.contains(" -- "),
            "{calls}"
        );
        assert_eq!(code, 3, "{stdout}{stderr}");
        assert!(
            stdout.contains("NOT RUN HERE sctp-services × kube-proxy-iptables: needs sctp"),
            "{stdout}"
        );
    } else {
        assert_eq!((code, calls.as_str()), (0, ""), "{stdout}{stderr}");
    }
    assert!(
        stdout.contains("clusterip-udp × kube-proxy-iptables"),
        "{stdout}"
    );
    assert!(stdout.contains("2 passed"), "{stdout}");

    let (code, stdout, stderr, calls) = run(&[
        "--proxier",
        "kube-proxy-iptables",
        "--proxier",
        "kube-proxy-ipvs",
        "--scenario",
        "scenarios/clusterip-udp.yaml",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    if lacks(kpct::kernel_features::Feature::IpVs) {
        assert!(
            calls.contains(" --only-run clusterip-udp=kube-proxy-ipvs"),
            "{calls}"
        );
        assert_eq!(code, 1, "{stdout}{stderr}");
        let error = stdout
            .lines()
            .find(|l| l.contains("ERROR clusterip-udp × kube-proxy-ipvs"))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(error.contains("the VM run gave no results"), "{error}");
        assert!(stdout.contains("IP_VS"), "the child's own words: {stdout}");
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("  vm │ ") && l.contains("IP_VS")),
            "the child's output is shown as it comes: {stderr}"
        );
        assert!(stdout.contains("2 probe(s), 2 passed"), "{stdout}");
    } else {
        assert_eq!((code, calls.as_str()), (0, ""), "{stdout}{stderr}");
    }
}

/// A fake `vng` on PATH that starts its "VM" as a grandchild (as vng starts QEMU through a
/// shell), writes the grandchild's pid to `pid`, prints a line and waits for it.
fn fake_vng(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let vng = bin.join("vng");
    std::fs::write(
        &vng,
        format!(
            "#!/bin/sh\necho booting\nsh -c 'echo $$ > {}; exec sleep 600' &\nwait\n",
            dir.join("pid").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&vng, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn vm_sh(dir: &Path, timeout_s: &str) -> std::process::Child {
    let path = format!(
        "{}:{}",
        fake_vng(dir).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .arg(repo().join("ci/vm.sh"))
        .args(["--", "true"])
        .env("PATH", path)
        .env("KPCT_VM_KERNEL", "/boot/fake-vmlinuz")
        .env("KPCT_VM_TIMEOUT", timeout_s)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("running ci/vm.sh")
}

/// The pid the fake VM wrote, once it has.
fn vm_pid(dir: &Path) -> i32 {
    let file = dir.join("pid");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the fake VM never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `child`'s exit status and stdout, or a failure (with the fake VM `vm` killed) when it has
/// not ended, output and all, within 60 s: the old ci/vm.sh waited for its VM however long
/// that ran, and a VM left behind kept its output open.
fn ended(mut child: std::process::Child, vm: i32) -> (std::process::ExitStatus, String) {
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        use std::io::Read;
        let _ = stdout.read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let stuck = |what: &str| -> ! {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(vm),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!("{what} 60 s on");
    };
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            stuck("ci/vm.sh still waits for its VM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    match rx.recv_timeout(left) {
        Ok(out) => (status, out),
        Err(_) => stuck("ci/vm.sh ended, but its VM still holds its output"),
    }
}

/// Whether `pid` still runs (a zombie, about to be reaped by init, does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// At `KPCT_VM_TIMEOUT` the whole VM goes, not only the launcher: with `timeout --foreground`
/// QEMU, started by vng through a shell, ran on past the deadline.
#[test]
fn the_vm_timeout_ends_the_whole_vm() {
    let dir = std::env::temp_dir().join(format!("vm-sh-timeout-{}", std::process::id()));
    let child = vm_sh(&dir, "2");
    let pid = vm_pid(&dir);
    let (status, stdout) = ended(child, pid);
    assert_eq!(status.code(), Some(124), "timeout's status");
    assert!(stdout.contains("booting"), "{stdout}");
    assert!(!running(pid), "the VM process {pid} outlived the timeout");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A signal to ci/vm.sh (Ctrl-C, or ci/test.sh stopping its VM half) ends the VM too, though
/// `timeout` keeps the VM in a process group of its own.
#[test]
fn a_signal_to_vm_sh_ends_the_vm() {
    let dir = std::env::temp_dir().join(format!("vm-sh-signal-{}", std::process::id()));
    let child = vm_sh(&dir, "600");
    let pid = vm_pid(&dir);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (status, _) = ended(child, pid);
    assert!(!status.success());
    assert!(
        !running(pid),
        "the VM process {pid} outlived ci/vm.sh's SIGTERM"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A command of any length reaches the VM whole: vng hands `--exec` to the guest on the kernel
/// command line, which holds 2048 bytes, and a test filter with twenty `--skip`s was cut off
/// there, leaving the VM idle for an hour. ci/vm.sh now passes a short `--exec` that runs the
/// command from a script file; a stand-in vng runs that `--exec` as the guest would.
#[test]
fn a_long_command_reaches_the_vm_whole() {
    let dir = std::env::temp_dir().join(format!(
        "{}long-exec",
        kpct::netns::naming::RunPrefix::next().as_str()
    ));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("vng"),
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --exec ]; then echo \"exec: ${#2} bytes\"; sh -c \"$2\"; exit $?; fi\n  shift\ndone\nexit 99\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("vng"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut args: Vec<String> = vec!["a b".into(), "it's".into(), "$HOME".into()];
    args.extend((0..800).map(|i| format!("--skip=t{i}")));
    let out = Command::new("bash")
        .arg(repo().join("ci/vm.sh"))
        .arg("--")
        .arg("printf")
        .arg("%s\\n")
        .args(&args)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("KPCT_VM_KERNEL", "/boot/fake-vmlinuz")
        .current_dir(&dir)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let mut lines = stdout.lines();
    let exec_bytes: usize = lines
        .next()
        .and_then(|l| l.strip_prefix("exec: "))
        .and_then(|l| l.strip_suffix(" bytes"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(exec_bytes < 200, "a short --exec: {exec_bytes} bytes");
    assert_eq!(lines.collect::<Vec<_>>(), args, "every argument, as given");
}
