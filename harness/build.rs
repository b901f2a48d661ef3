//! Generates one test per scenario file for tests/scenarios.rs, named after the scenario
//! (`scenarios_iptables::clusterip_same_node`), so test names stay the same when files are added
//! (rstest's `#[files]` numbers them by position). Dropping a YAML file into `scenarios/` adds
//! its tests at the next build. Also records the commit being built (`KPCT_COMMIT`).

use std::fmt::Write as _;
use std::path::Path;

// The one list of built-in proxiers (`BUILTINS`), shared with the crate.
include!("src/builtins.rs");

/// Which test modules a scenario file's tests go into, for each built-in: its module, its name
/// and what the test requires of the kernel. The `needs_ipvs`/`needs_sctp` prefixes are what
/// ci/test.sh routes to the VM; the file prefixes are the library's naming rules
/// (`kpct::scenario::conventions` enforces them): `sctp-*` need SCTP in the kernel,
/// `ipvs-existing-*` need IP_VS even in iptables mode.
fn modules(stem: &str) -> Vec<(String, &'static str, &'static str)> {
    BUILTINS
        .iter()
        .map(|b| {
            if b.needs_ipvs {
                (b.tests.to_string(), b.name, "require_ipvs();")
            } else if stem.starts_with("sctp-") {
                (format!("needs_sctp_{}", b.tests), b.name, "require_sctp();")
            } else if stem.starts_with("ipvs-existing-") {
                (format!("needs_ipvs_{}", b.tests), b.name, "require_ipvs();")
            } else {
                (b.tests.to_string(), b.name, "")
            }
        })
        .collect()
}

/// The older kube-proxy releases a scenario's expectations name (`expectFor` keys of release
/// ranges: `"@..v1.35"`, `kube-proxy-iptables@..v1.36`, `@v1.34`), as the last release of each
/// range: each built-in gets a test (and a golden) at each, which real kube-proxies of that
/// range and older are compared with. A range open at its end reaches the newest release,
/// whose golden every scenario has. Read from the file's text: the build script cannot parse
/// scenarios, and `kpct validate` checks the keys.
fn older_releases(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start();
        let key = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        let Some((_, range)) = key.split_once('@') else {
            continue;
        };
        let last = match range.split_once("..") {
            Some((_, last)) => last,
            None => range,
        };
        if last.starts_with("v1.") && last[3..].chars().all(|c| c.is_ascii_digit()) {
            out.insert(last.to_string());
        }
    }
    out
}

/// The real kube-proxy versions `ci/real-proxiers.sh` can build, each run against the library
/// in iptables and nftables mode (natively; in the VM where a scenario needs IP_VS or SCTP) and
/// in IPVS mode (in the VM). Only the newest is in the CI set of `ci/real-proxiers.sh`: each
/// cold Go build costs 5-7 of CI's 40 minutes. The older ones' tests, and every one in the VM
/// but [`REAL_IPVS`], are ignored (`ci/real-proxiers.sh --all`, then `cargo test --test
/// real_scenarios -- --ignored`, or `ci/test.sh --vm -- … --include-ignored`).
const REAL_VERSIONS: [&str; 4] = ["v1.37.2", "v1.36.3", "v1.35.4", "v1.34.4"];

/// The scenarios a real kube-proxy in IPVS mode runs in CI: IPVS mode needs the emulated VM,
/// where a real kube-proxy's sync takes seconds and its first one minutes (transition-scale-
/// down-up, 600 s there, passes too but is left to `kpct run`).
const REAL_IPVS: [&str; 1] = ["clusterip-cross-node"];

/// A real-proxier test: its module, the proxier spec, and whether it is ignored by default.
struct RealTest {
    module: String,
    spec: String,
    ignored: bool,
}

impl RealTest {
    /// Whether it runs in the emulated VM, where real proxiers run one scenario at a time
    /// (several at once starve each other's first sync past any bound).
    fn in_vm(&self) -> bool {
        self.module.starts_with("needs_")
    }
}

/// Which real-proxier tests a scenario file gets.
fn real_tests(stem: &str) -> Vec<RealTest> {
    let needs = if stem.starts_with("sctp-") {
        Some("needs_sctp_")
    } else if stem.starts_with("ipvs-existing-") {
        Some("needs_ipvs_")
    } else {
        None
    };
    let mut out = Vec::new();
    for (i, version) in REAL_VERSIONS.iter().enumerate() {
        let v = version.replace('.', "_");
        let newest = i == 0;
        for mode in ["iptables", "nftables"] {
            let spec = format!("kube-proxy:{mode}:{version}");
            match needs {
                None => out.push(RealTest {
                    module: format!("real_{v}_{mode}"),
                    spec,
                    ignored: !newest,
                }),
                Some(prefix) => out.push(RealTest {
                    module: format!("{prefix}real_{v}_{mode}"),
                    spec,
                    // Minutes of the emulated VM each (a real first sync under TCG): CI's
                    // real run in the VM is IPVS mode's ([`REAL_IPVS`]).
                    ignored: true,
                }),
            }
        }
        // Every scenario in IPVS mode for every version, so that the whole library runs
        // against a real IPVS mode with one command (`ci/test.sh --vm --
        // needs_ipvs_real_v1_37_2_ipvs --include-ignored`); in CI only [`REAL_IPVS`] of the
        // newest.
        out.push(RealTest {
            module: format!("needs_ipvs_real_{v}_ipvs"),
            spec: format!("kube-proxy:ipvs:{version}"),
            ignored: !(newest && REAL_IPVS.contains(&stem)),
        });
    }
    out
}

/// The commit being built, for `kpct --version`-like reports (`KPCT_COMMIT`), and the git files
/// whose change means a new commit. Nothing when this is not a git checkout.
fn commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    println!("cargo:rustc-env=KPCT_COMMIT={head}");
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for file in watched {
        // Only files that exist: a missing one would rerun this script at every build.
        if let Some(path) =
            git(&["rev-parse", "--git-path", &file]).filter(|p| Path::new(p).exists())
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// The stems of the YAML files in `dir`, sorted; none if it does not exist.
fn yaml_stems(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut stems: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    stems.sort();
    stems
}

/// A scenario's test function name: its stem with every other character than a letter or a
/// digit as `_`.
fn test_name(stem: &str) -> String {
    stem.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn main() {
    commit();
    println!("cargo:rerun-if-changed=../scenarios");
    let stems = yaml_stems(Path::new("../scenarios"));
    assert!(!stems.is_empty(), "no scenarios in ../scenarios");
    let mut by_module: std::collections::BTreeMap<String, String> = Default::default();
    for stem in &stems {
        let name = test_name(stem);
        let text = std::fs::read_to_string(format!("../scenarios/{stem}.yaml"))
            .expect("reading a scenario file");
        let releases = older_releases(&text);
        for (module, proxier, require) in modules(stem) {
            let _ = write!(
                by_module.entry(module.clone()).or_default(),
                "    #[test]\n    fn r#{name}() {{\n        {require}\n        super::run(\"{stem}.yaml\", \"{proxier}\");\n    }}\n"
            );
            for release in &releases {
                let module = format!("{module}_{}", release.replace('.', "_"));
                let _ = write!(
                    by_module.entry(module).or_default(),
                    "    #[test]\n    fn r#{name}() {{\n        {require}\n        super::run(\"{stem}.yaml\", \"{proxier}@{release}\");\n    }}\n"
                );
            }
        }
    }
    let mut out = String::new();
    for (module, tests) in by_module {
        let _ = write!(
            out,
            "mod {module} {{\n    #[allow(unused_imports)]\n    use kpct::kernel_features::{{require_ipvs, require_sctp}};\n{tests}}}\n"
        );
    }
    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    let target = Path::new(&out_dir).join("scenario_tests.rs");
    std::fs::write(target, out).expect("writing the generated scenario tests");

    let mut by_module: std::collections::BTreeMap<String, String> = Default::default();
    for stem in &stems {
        let name = test_name(stem);
        for t in real_tests(stem) {
            let ignore = match (t.ignored, t.in_vm()) {
                (false, _) => "",
                (true, false) => {
                    "    #[ignore = \"not in ci/real-proxiers.sh's CI set: --all builds it\"]\n"
                }
                (true, true) => "    #[ignore = \"minutes of the emulated VM; run by hand\"]\n",
            };
            let _ = write!(
                by_module.entry(t.module.clone()).or_default(),
                "    #[test]\n{ignore}    fn r#{name}() {{\n        super::run(\"{stem}.yaml\", \"{}\", {});\n    }}\n",
                t.spec,
                t.in_vm()
            );
        }
    }
    let mut out = String::new();
    for (module, tests) in by_module {
        let _ = write!(out, "mod {module} {{\n{tests}}}\n");
    }
    let target = Path::new(&out_dir).join("real_scenario_tests.rs");
    std::fs::write(target, out).expect("writing the generated real scenario tests");
}
