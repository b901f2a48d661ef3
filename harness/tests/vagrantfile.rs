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

/// A copy of the lab (Vagrantfile and its provisioning scripts) with one edit, validated.
fn validate_edited(name: &str, from: &str, to: &str) -> (bool, String) {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vagrant");
    let original = std::fs::read_to_string(lab.join("Vagrantfile")).expect("vagrant/Vagrantfile");
    let broken = original.replacen(from, to, 1);
    assert_ne!(broken, original, "the Vagrantfile has {from:?}");
    let dir = std::env::temp_dir().join(format!("kpct-vagrant-{name}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("provision")).expect("a temp dir");
    std::fs::write(dir.join("Vagrantfile"), broken).expect("writing the broken copy");
    for entry in std::fs::read_dir(lab.join("provision")).expect("vagrant/provision") {
        let path = entry.expect("a provisioning script").path();
        std::fs::copy(&path, dir.join("provision").join(path.file_name().unwrap()))
            .expect("copying a provisioning script");
    }
    let result = validate(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The check above can fail: the same file with one misspelt setting is rejected.
#[test]
fn vagrant_validate_rejects_a_misspelt_setting() {
    let (ok, text) = validate_edited("hostname", "config.vm.hostname", "config.vm.hostnme");
    assert!(!ok, "a misspelt setting passed validation:\n{text}");
    assert!(text.contains("hostnme"), "{text}");
}

/// With a provider installed (vagrant-libvirt), its block is checked too.
#[test]
fn vagrant_validate_rejects_a_misspelt_libvirt_setting() {
    let (ok, text) = validate_edited("libvirt", "lv.cpus", "lv.cpuz");
    assert!(!ok, "a misspelt libvirt setting passed validation:\n{text}");
    assert!(
        text.contains("Libvirt Provider") && text.contains("cpuz"),
        "{text}"
    );
}

/// A provisioning script the Vagrantfile names must exist (vagrant validate checks the path).
#[test]
fn vagrant_validate_rejects_a_missing_provisioning_script() {
    let (ok, text) = validate_edited("script", "provision/build.sh", "provision/biuld.sh");
    assert!(
        !ok,
        "a missing provisioning script passed validation:\n{text}"
    );
    assert!(text.contains("biuld.sh"), "{text}");
}
