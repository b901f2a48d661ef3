// The built-in reference proxiers: the one list of them. `harness/build.rs` includes this file
// (it depends on nothing) to generate each scenario's tests against each built-in, so a
// built-in added here gets its tests and goldens; `proxier::builtin` builds it by name, and the
// scenario validator knows the names `expectFor` may use without a run.

/// A built-in reference proxier.
pub struct Builtin {
    pub name: &'static str,
    /// The module of its generated scenario tests (`scenarios_iptables`, each test named after
    /// its scenario). A scenario that needs SCTP or IP_VS goes to `needs_sctp_`/`needs_ipvs_` +
    /// this module, which `ci/test.sh` runs in the VM where the kernel lacks them.
    pub tests: &'static str,
    /// It programs IPVS: all its tests need IP_VS (its module starts with `needs_ipvs_`).
    pub needs_ipvs: bool,
}

pub const BUILTINS: [Builtin; 3] = [
    Builtin {
        name: "kube-proxy-ipvs",
        tests: "needs_ipvs_scenarios",
        needs_ipvs: true,
    },
    Builtin {
        name: "kube-proxy-iptables",
        tests: "scenarios_iptables",
        needs_ipvs: false,
    },
    Builtin {
        name: "kube-proxy-nftables",
        tests: "scenarios_nftables",
        needs_ipvs: false,
    },
];
