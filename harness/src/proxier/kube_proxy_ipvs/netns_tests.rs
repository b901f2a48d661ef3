//! Kernel validation of the IPVS proxier's output (needs root): the ipsets are restored and the
//! iptables tables parsed and loaded by `iptables-restore` (nf_tables) and checked by
//! `iptables-legacy-restore --test`, in a throwaway network namespace that [`Netns`]'s `Drop`
//! removes even when an assertion panics.

use super::tests::{restore_input, small_cluster};
use super::KubeProxyIpvs;
use crate::netns::Netns;
use crate::programming::Programming;
use crate::proxier::Proxier;

fn ipset_restore_input(p: &Programming) -> String {
    let mut out = String::new();
    for s in &p.ipsets {
        out.push_str(&format!(
            "create {} {} {}\n",
            s.name,
            s.set_type.name(),
            s.create_options
        ));
        for e in &s.entries {
            out.push_str(&format!("add {} {e}\n", s.name));
        }
    }
    out
}

/// `-m ipvs` (xt_ipvs) needs IPVS in the kernel; where it is missing the KUBE-IPVS-OUT-FILTER
/// rules cannot be loaded, so they are left out of the check (and reported).
fn without_ipvs_match(input: &str, ns: &Netns) -> String {
    let has_ipvs = ns.exec("test", &["-e", "/proc/net/ip_vs"]).is_ok();
    if has_ipvs {
        return input.to_string();
    }
    eprintln!("kernel without IPVS: not loading the `-m ipvs` rules of KUBE-IPVS-OUT-FILTER");
    input
        .lines()
        .filter(|l| !l.contains(" -m ipvs "))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn netns_ipsets_and_iptables_restore() {
    if !is_root() {
        eprintln!("skipping netns_ipsets_and_iptables_restore: needs root");
        return;
    }
    let (cluster, node) = small_cluster();
    let p = KubeProxyIpvs::default()
        .program(&cluster, &node)
        .expect("program");
    let restore = restore_input(&p);
    assert!(
        restore.contains(" -m ipvs "),
        "the sample must exercise KUBE-IPVS-OUT-FILTER"
    );

    let ns = Netns::create(&format!("kpct-kpipvs-{}", std::process::id())).expect("create netns");
    ns.exec_with_stdin("ipset", &["restore"], Some(&ipset_restore_input(&p)))
        .expect("ipset restore");
    let saved_sets = ns.exec("ipset", &["save"]).expect("ipset save");
    for s in &p.ipsets {
        assert!(saved_sets.contains(&format!("create {} {}", s.name, s.set_type.name())));
    }

    let loadable = without_ipvs_match(&restore, &ns);
    ns.exec_with_stdin(
        "iptables-legacy-restore",
        &["--test", "--noflush"],
        Some(&loadable),
    )
    .expect("iptables-legacy-restore --test");
    ns.exec_with_stdin(
        "iptables-restore",
        &["--test", "--noflush"],
        Some(&loadable),
    )
    .expect("iptables-restore --test");
    ns.exec_with_stdin("iptables-restore", &["--noflush"], Some(&loadable))
        .expect("iptables-restore");

    // Read back: every declared chain exists and holds as many rules as we wrote into it.
    for (table, rules) in &p.iptables {
        let saved = ns
            .exec("iptables-save", &["-t", table.name()])
            .expect("iptables-save");
        for c in &rules.chains {
            assert!(
                saved.contains(&format!(":{} ", c.name)),
                "{} missing from {saved}",
                c.name
            );
            let prefix = format!("-A {} ", c.name);
            let count = |text: &str| text.lines().filter(|l| l.starts_with(&prefix)).count();
            assert_eq!(
                count(&saved),
                count(&loadable_table(&loadable, table.name())),
                "rule count of {} {}:\n{saved}",
                table.name(),
                c.name
            );
        }
    }
}

/// The lines of one `*table` block of a restore document.
fn loadable_table(input: &str, table: &str) -> String {
    let header = format!("*{table}");
    input
        .lines()
        .skip_while(|l| *l != header)
        .take_while(|l| *l != "COMMIT")
        .map(|l| format!("{l}\n"))
        .collect()
}
