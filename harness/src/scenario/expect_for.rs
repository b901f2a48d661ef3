//! Which of a probe's expectations judges a proxier: `expectFor` keys, from the most specific
//! to `expect`.
//!
//! A proxier is judged as a name (its label, or the built-in it stands for: a real kube-proxy
//! v1.34.4 in iptables mode is judged as `kube-proxy-iptables@v1.34`). The keys that apply to
//! it, most specific first:
//!
//! 1. a name that is no built-in's (`exec:./my-proxier`, `NAME`): that name;
//! 2. its built-in at a range of releases that holds its release (`kube-proxy-iptables@v1.34`,
//!    `kube-proxy-iptables@..v1.36`; the narrowest range first);
//! 3. its built-in alone (`kube-proxy-iptables`);
//! 4. a range of releases alone (`@..v1.36`): a behaviour every mode changed in one release;
//! 5. `expect`.
//!
//! A built-in named without a release models the newest ([`Release::NEWEST`]).

use crate::builtins::BUILTINS;
use crate::release::{Release, ReleaseRange};

/// A name split into the built-in it stands for and the release it models, when it is one.
pub fn builtin_and_release(name: &str) -> Option<(&str, Release)> {
    let (base, release) = match name.split_once('@') {
        Some((base, release)) => (base, release.parse().ok()?),
        None => (name, Release::NEWEST),
    };
    BUILTINS
        .iter()
        .any(|b| b.name == base)
        .then_some((base, release))
}

/// The `expectFor` key of those in `keys` that judges a proxier judged as `name`, if any.
pub fn key_for<'k>(
    keys: impl Iterator<Item = &'k String> + Clone,
    name: &str,
) -> Option<&'k String> {
    let Some((base, release)) = builtin_and_release(name) else {
        return keys.clone().find(|k| *k == name);
    };
    let narrowest = |prefix: &str| {
        keys.clone()
            .filter_map(|k| {
                let range: ReleaseRange =
                    k.strip_prefix(prefix)?.strip_prefix('@')?.parse().ok()?;
                range.contains(release).then_some((range.width(), k))
            })
            .min_by_key(|(width, _)| *width)
            .map(|(_, k)| k)
    };
    narrowest(base)
        .or_else(|| keys.clone().find(|k| *k == base))
        .or_else(|| narrowest(""))
}

/// Whether `key` names built-ins at releases: `BUILTIN@RANGE` or `@RANGE`.
pub fn is_release_key(key: &str) -> bool {
    key.split_once('@').is_some_and(|(base, range)| {
        range.parse::<ReleaseRange>().is_ok()
            && (base.is_empty() || BUILTINS.iter().any(|b| b.name == base))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(keys: &[&str], name: &str) -> Option<String> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        key_for(keys.iter(), name).cloned()
    }

    #[test]
    fn the_most_specific_key_judges() {
        let keys = [
            "kube-proxy-iptables",
            "kube-proxy-iptables@..v1.36",
            "kube-proxy-iptables@v1.35..v1.36",
            "kube-proxy-ipvs@v1.37..",
            "@..v1.35",
            "exec:./p",
        ];
        assert_eq!(pick(&keys, "exec:./p").as_deref(), Some("exec:./p"));
        assert_eq!(
            pick(&keys, "kube-proxy-iptables@v1.34").as_deref(),
            Some("kube-proxy-iptables@..v1.36")
        );
        assert_eq!(
            pick(&keys, "kube-proxy-iptables@v1.36").as_deref(),
            Some("kube-proxy-iptables@v1.35..v1.36")
        );
        assert_eq!(
            pick(&keys, "kube-proxy-iptables").as_deref(),
            Some("kube-proxy-iptables"),
            "the newest release, which no range holds"
        );
        assert_eq!(
            pick(&keys, "kube-proxy-nftables@v1.34").as_deref(),
            Some("@..v1.35")
        );
        assert_eq!(pick(&keys, "kube-proxy-nftables"), None);
        assert_eq!(
            pick(&keys, "kube-proxy-ipvs").as_deref(),
            Some("kube-proxy-ipvs@v1.37.."),
            "the built-in without a release models the newest"
        );
        assert_eq!(pick(&keys, "exec:./other"), None);
        assert!(is_release_key("@v1.37") && is_release_key("kube-proxy-ipvs@v1.34.."));
        assert!(!is_release_key("exec:./p@v1.34") && !is_release_key("kube-proxy-ipvs@x"));
    }
}
