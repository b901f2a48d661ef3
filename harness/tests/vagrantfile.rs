//! The lab's `vagrant/Vagrantfile` passes `vagrant validate` (Vagrant's own check of every
//! setting, for every provider block; no box or hypervisor needed). `ci/install-deps.sh`
//! installs Vagrant, so a missing `vagrant` fails here rather than passing unchecked.

use std::path::Path;
use std::process::Command;

fn validate(dir: &Path) -> (bool, String) {
    validate_with(dir, &[])
}

/// `vagrant validate` in `dir` with the environment variables `env` set.
fn validate_with(dir: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new("vagrant")
        .arg("validate")
        .current_dir(dir)
        // No phone-home for version checks: CI has no general internet access.
        .env("VAGRANT_CHECKPOINT_DISABLE", "1")
        .envs(env.iter().copied())
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

/// `vagrant validate` of the lab with `KPCT_LAB_BOX` set (its box choice).
fn validate_with_box(choice: &str) -> (bool, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vagrant");
    validate_with(&dir, &[("KPCT_LAB_BOX", choice)])
}

/// Both of the lab's boxes validate: the one vagrant/box/build.sh builds from Debian packages,
/// and the registry's; any other choice is refused, naming the two.
#[test]
fn lab_vagrantfile_validates_with_the_local_box_and_the_registry_box() {
    for choice in ["local", "registry"] {
        let (ok, text) = validate_with_box(choice);
        assert!(
            ok,
            "KPCT_LAB_BOX={choice}: vagrant validate failed:\n{text}"
        );
        assert!(
            text.contains("Vagrantfile validated successfully"),
            "{text}"
        );
    }
    let (ok, text) = validate_with_box("cloud");
    assert!(!ok, "KPCT_LAB_BOX=cloud passed validation:\n{text}");
    assert!(text.contains("expected local or registry"), "{text}");
}

/// The Vagrantfile packed inside the box (its kernel, initrd and command line) validates with
/// the provider's own check, and a misspelt setting in it does not.
#[test]
fn the_box_vagrantfile_validates() {
    let boxed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../vagrant/box/Vagrantfile"),
    )
    .expect("vagrant/box/Vagrantfile");
    let check = |text: &str, name: &str| {
        let dir = std::env::temp_dir().join(format!("kpct-box-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        // A box's Vagrantfile is merged under the project's, which names the box.
        let project =
            format!("{text}\nVagrant.configure(\"2\") {{ |c| c.vm.box = \"kpct/debian12\" }}\n");
        std::fs::write(dir.join("Vagrantfile"), project).expect("writing the Vagrantfile");
        let result = validate(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        result
    };
    let (ok, text) = check(&boxed, "as-built");
    assert!(ok, "the box's Vagrantfile failed validation:\n{text}");
    let broken = boxed.replacen("lv.initrd", "lv.initrdd", 1);
    assert_ne!(broken, boxed);
    let (ok, text) = check(&broken, "misspelt");
    assert!(!ok, "a misspelt box setting passed validation:\n{text}");
    assert!(text.contains("initrdd"), "{text}");
}

/// The box builder's inputs: its own packages (a kernel with IP_VS, ssh, sudo, rsync for the
/// synced folder) and exactly the suite's runtime packages from ci/deps.tsv (none that only the
/// tests or the VM runner need), as `build.sh --list` says it installs them; and Vagrant's
/// insecure key from Debian's vagrant package, which the builder puts in the box.
#[test]
fn the_box_builder_inputs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .arg(repo.join("vagrant/box/build.sh"))
        .arg("--list")
        .output()
        .expect("running vagrant/box/build.sh --list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    for needed in [
        "linux-image-amd64",
        "initramfs-tools",
        "openssh-server",
        "sudo",
        "rsync",
        "systemd-sysv",
    ] {
        assert!(
            listed.iter().any(|p| p == needed),
            "the box lacks {needed}: {listed:?}"
        );
    }
    let deps = std::fs::read_to_string(repo.join("ci/deps.tsv")).expect("ci/deps.tsv");
    for line in deps.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() != 5 || cols[1] != "apt" {
            continue;
        }
        let inside = listed.iter().any(|p| p == cols[2]);
        match cols[0] {
            "suite" => assert!(inside, "the box lacks the suite's {}", cols[2]),
            _ if ["vagrant", "chromium", "qemu-system-x86", "libxml2-utils"].contains(&cols[2]) => {
                assert!(
                    !inside,
                    "the box holds {}, which only the {} group needs",
                    cols[2], cols[0]
                )
            }
            _ => {}
        }
    }
    let valid = regex::Regex::new(r"^[a-z0-9][a-z0-9+.-]+$").expect("regex");
    for pkg in &listed {
        assert!(valid.is_match(pkg), "{pkg:?} is not a Debian package name");
    }
    let keys: Vec<_> =
        glob::glob("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub")
            .expect("a glob")
            .flatten()
            .collect();
    let key = keys
        .first()
        .expect("Debian's vagrant package ships keys/vagrant.pub");
    let key = std::fs::read_to_string(key).expect("reading vagrant.pub");
    assert!(
        key.starts_with("ssh-rsa ") && key.trim_end().ends_with("vagrant insecure public key"),
        "{key}"
    );
}
