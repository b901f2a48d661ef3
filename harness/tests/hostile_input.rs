//! Input kpct cannot trust, as a user's proxier may give it: each ends in a clear error with
//! bounded memory.

mod common;

/// An `exec:` proxier that prints 100 MiB on stdout (one line without end) is refused with the
/// reason, and kpct's memory stays far below what it printed: it keeps at most 64 MiB.
#[test]
fn a_proxier_printing_without_end_is_refused_in_bounded_memory() {
    let dir = std::env::temp_dir().join(format!("kpct-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("flood");
    std::fs::write(
        &script,
        "#!/bin/sh\nhead -c 104857600 /dev/zero | tr '\\0' x\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let spec = format!("exec:{}", script.display());
    let out = common::kpct(&[
        "run",
        "--proxier",
        &spec,
        "--scenario",
        "scenarios/clusterip-udp.yaml",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("printed more than 64 MiB on stdout, more than any programming needs"),
        "{text}"
    );
    // The largest resident set of any child this test waited for: kpct's.
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        assert_eq!(
            libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()),
            0
        );
        usage.assume_init()
    };
    let max_mib = usage.ru_maxrss / 1024;
    assert!(max_mib < 120, "kpct's resident set reached {max_mib} MiB");
    std::fs::remove_dir_all(&dir).unwrap();
}
