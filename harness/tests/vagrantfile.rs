//! The lab's `vagrant/Vagrantfile` passes `vagrant validate` (Vagrant's own check of every
//! setting, for every provider block; no box or hypervisor needed). `ci/install-deps.sh`
//! installs Vagrant, so a missing `vagrant` fails here rather than passing unchecked.

use std::path::Path;
use std::process::Command;

fn validate(dir: &Path) -> (bool, String) {
    let out = Command::new("vagrant")
        .arg("validate")
        .current_dir(dir)
        // No phone-home for version checks: CI has no general internet access.
        .env("VAGRANT_CHECKPOINT_DISABLE", "1")
        .output()
        .unwrap_or_else(|e| {
            panic!("running `vagrant validate` (install it: `sudo ci/install-deps.sh`): {e}")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn lab_vagrantfile_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vagrant");
    let (ok, text) = validate(&dir);
    assert!(ok, "vagrant validate failed in {}:\n{text}", dir.display());
    assert!(
        text.contains("Vagrantfile validated successfully"),
        "{text}"
    );
}

/// The check above can fail: the same file with one misspelt setting is rejected.
#[test]
fn vagrant_validate_rejects_a_misspelt_setting() {
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../vagrant/Vagrantfile"),
    )
    .expect("vagrant/Vagrantfile");
    let broken = original.replacen("config.vm.hostname", "config.vm.hostnme", 1);
    assert_ne!(broken, original, "the Vagrantfile sets config.vm.hostname");
    let dir = std::env::temp_dir().join(format!("kpct-vagrant-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    std::fs::write(dir.join("Vagrantfile"), broken).expect("writing the broken copy");
    let (ok, text) = validate(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ok, "a misspelt setting passed validation:\n{text}");
    assert!(text.contains("hostnme"), "{text}");
}
