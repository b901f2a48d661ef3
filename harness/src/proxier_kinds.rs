//! The kinds of proxier a `--proxier` spec names, told apart by their prefix: the one place
//! that spelling is matched. `drivers::spec` builds each kind from what follows its prefix; the
//! scenario validator reads `expectFor` keys with it (an `exec:`/`replay:` label).

/// A proxier kind spelled with a prefix (everything else names a built-in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefixed {
    /// `kube-proxy:MODE[:PATH|:VERSION] [--config-patch=FILE]`
    KubeProxy,
    /// `api:--sync-metric=NAME@PORT [--judged-as=NAME] COMMAND [ARGS…]`
    Api,
    /// `exec:PROGRAM [ARGS…]`
    Exec,
    /// `replay:DIR`
    Replay,
}

impl Prefixed {
    const ALL: [(Prefixed, &'static str); 4] = [
        (Prefixed::KubeProxy, "kube-proxy:"),
        (Prefixed::Api, "api:"),
        (Prefixed::Exec, "exec:"),
        (Prefixed::Replay, "replay:"),
    ];

    /// The kind `spec` names by its prefix, and what follows the prefix.
    pub fn split(spec: &str) -> Option<(Prefixed, &str)> {
        Self::ALL
            .iter()
            .find_map(|(kind, prefix)| Some((*kind, spec.strip_prefix(prefix)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::Prefixed;

    #[test]
    fn each_prefix_names_its_kind_and_a_built_in_none() {
        assert_eq!(
            Prefixed::split("exec:./p -x"),
            Some((Prefixed::Exec, "./p -x"))
        );
        assert_eq!(
            Prefixed::split("replay:dir"),
            Some((Prefixed::Replay, "dir"))
        );
        assert_eq!(
            Prefixed::split("kube-proxy:ipvs:v1.37.2"),
            Some((Prefixed::KubeProxy, "ipvs:v1.37.2"))
        );
        assert_eq!(
            Prefixed::split("api:--x cmd"),
            Some((Prefixed::Api, "--x cmd"))
        );
        assert_eq!(Prefixed::split("kube-proxy-ipvs"), None);
    }
}
