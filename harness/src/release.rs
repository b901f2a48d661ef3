//! kube-proxy releases: which one a built-in models (`kube-proxy-iptables@v1.34`), which one a
//! real binary is, and the ranges of releases a scenario's `expectFor` keys name
//! (`kube-proxy-iptables@..v1.36`, `@v1.37`).

use std::fmt;
use std::str::FromStr;

/// A kube-proxy minor release, `v1.MINOR`: behaviour changes between minors, not patches (the
/// patches kpct builds are the newest of each minor, `ci/real-proxiers.sh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    minor: u16,
}

impl Release {
    pub const V1_34: Release = Release { minor: 34 };
    pub const V1_35: Release = Release { minor: 35 };
    pub const V1_36: Release = Release { minor: 36 };
    pub const V1_37: Release = Release { minor: 37 };

    /// Every release the built-ins model: the minors whose newest patch the Go module proxy
    /// serves and `ci/real-proxiers.sh --all` builds (v1.34.4, v1.35.4, v1.36.3, v1.37.2).
    pub const MODELLED: [Release; 4] = [Self::V1_34, Self::V1_35, Self::V1_36, Self::V1_37];

    /// What a built-in models unless told otherwise: the newest release served.
    pub const NEWEST: Release = Self::V1_37;

    pub fn minor(self) -> u16 {
        self.minor
    }

    /// Whether a built-in can model it.
    pub fn is_modelled(self) -> bool {
        Self::MODELLED.contains(&self)
    }

    /// The release of a version string as kube-proxy prints it or kpct names its binaries
    /// (`Kubernetes v1.34.4`, `kube-proxy-v1.37.2`, `v1.38.0-beta.0`).
    pub fn of_version_text(text: &str) -> Option<Release> {
        text.split(|c: char| c.is_whitespace() || c == '-')
            .filter_map(|word| word.strip_prefix('v'))
            .find_map(|v| {
                let mut parts = v.split('.');
                let major = parts.next()?;
                let minor = parts.next()?.parse().ok()?;
                (major == "1").then_some(Release { minor })
            })
    }
}

impl Default for Release {
    fn default() -> Release {
        Release::NEWEST
    }
}

/// How a built-in named `base` at `release` is labelled: `base` at the newest release (the
/// goldens' name), `base@v1.MINOR` at another.
pub fn builtin_label(base: &str, release: Release) -> String {
    if release == Release::NEWEST {
        base.to_string()
    } else {
        format!("{base}@{release}")
    }
}

/// The goldens that record how the built-in `judged` (`kube-proxy-iptables@v1.34`, or a
/// built-in at the newest release) behaves, most fitting first: its own release's, then each
/// newer release's up to the newest's (`…@kube-proxy-iptables.snap`). A release differs from
/// the newest only in scenarios that say so, and those have a golden at the last release of
/// each range their `expectFor` keys name (`..v1.36`: `@v1.36`).
pub fn golden_names(scenario: &str, judged: &str) -> Vec<String> {
    let (base, release) = match judged.split_once('@') {
        Some((base, r)) => (base, r.parse::<Release>().ok()),
        None => (judged, None),
    };
    let mut out: Vec<String> = Release::MODELLED
        .iter()
        .filter(|r| release.is_some_and(|mine| mine <= **r) && **r != Release::NEWEST)
        .map(|r| format!("{scenario}@{base}@{r}.snap"))
        .collect();
    out.push(format!("{scenario}@{base}.snap"));
    out
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v1.{}", self.minor)
    }
}

impl FromStr for Release {
    type Err = String;
    /// `v1.34` or `1.34`; a patch (`v1.34.4`) is accepted and dropped.
    fn from_str(s: &str) -> Result<Release, String> {
        let bad = || format!("`{s}` is not a kube-proxy release (expected v1.MINOR, e.g. v1.34)");
        let v = s.strip_prefix('v').unwrap_or(s);
        let mut parts = v.split('.');
        if parts.next() != Some("1") {
            return Err(bad());
        }
        let minor = parts.next().and_then(|m| m.parse().ok()).ok_or_else(bad)?;
        match parts.next() {
            None => {}
            Some(patch) if patch.parse::<u16>().is_ok() && parts.next().is_none() => {}
            Some(_) => return Err(bad()),
        }
        Ok(Release { minor })
    }
}

/// Releases from `first` to `last`, both included; either end open. Written `v1.34`,
/// `v1.34..v1.36`, `..v1.36` or `v1.35..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseRange {
    pub first: Option<Release>,
    pub last: Option<Release>,
}

impl ReleaseRange {
    pub fn contains(&self, r: Release) -> bool {
        self.first.is_none_or(|f| f <= r) && self.last.is_none_or(|l| r <= l)
    }

    /// How many releases the built-ins model lie in it: the narrower of two ranges that both
    /// hold a release is the more specific.
    pub fn width(&self) -> usize {
        Release::MODELLED
            .iter()
            .filter(|r| self.contains(**r))
            .count()
    }
}

impl fmt::Display for ReleaseRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.first, self.last) {
            (Some(a), Some(b)) if a == b => write!(f, "{a}"),
            (a, b) => write!(
                f,
                "{}..{}",
                a.map(|r| r.to_string()).unwrap_or_default(),
                b.map(|r| r.to_string()).unwrap_or_default()
            ),
        }
    }
}

impl FromStr for ReleaseRange {
    type Err = String;
    fn from_str(s: &str) -> Result<ReleaseRange, String> {
        let end = |t: &str| -> Result<Option<Release>, String> {
            if t.is_empty() {
                Ok(None)
            } else {
                t.parse().map(Some)
            }
        };
        let range = match s.split_once("..") {
            Some((a, b)) => ReleaseRange {
                first: end(a)?,
                last: end(b)?,
            },
            None => {
                let r = s.parse()?;
                ReleaseRange {
                    first: Some(r),
                    last: Some(r),
                }
            }
        };
        if range.first.is_none() && range.last.is_none() {
            return Err(format!("`{s}`: a release range names at least one end"));
        }
        if let (Some(a), Some(b)) = (range.first, range.last) {
            if a > b {
                return Err(format!("`{s}`: the range ends before it starts"));
            }
        }
        Ok(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_from_what_users_and_binaries_write() {
        assert_eq!("v1.34".parse(), Ok(Release::V1_34));
        assert_eq!("1.35".parse(), Ok(Release::V1_35));
        assert_eq!("v1.36.3".parse(), Ok(Release::V1_36));
        for bad in ["", "v2.34", "v1", "v1.x", "v1.34.4.1", "v1.34.beta"] {
            assert!(bad.parse::<Release>().is_err(), "{bad} accepted");
        }
        assert_eq!(Release::V1_37.to_string(), "v1.37");
        assert_eq!(
            Release::of_version_text("Kubernetes v1.34.4\n"),
            Some(Release::V1_34)
        );
        assert_eq!(
            Release::of_version_text("kube-proxy-v1.37.2"),
            Some(Release::V1_37)
        );
        assert_eq!(
            Release::of_version_text("v1.38.0-beta.0").map(Release::minor),
            Some(38)
        );
        assert_eq!(Release::of_version_text("kube-router-v2.10.0"), None);
        assert!(Release::NEWEST.is_modelled());
        assert!(!Release::of_version_text("v1.33.0").unwrap().is_modelled());
    }

    #[test]
    fn goldens_go_from_the_release_to_the_newest() {
        assert_eq!(
            golden_names("s", "kube-proxy-ipvs@v1.35"),
            [
                "s@kube-proxy-ipvs@v1.35.snap",
                "s@kube-proxy-ipvs@v1.36.snap",
                "s@kube-proxy-ipvs.snap"
            ]
        );
        assert_eq!(
            golden_names("s", "kube-proxy-ipvs"),
            ["s@kube-proxy-ipvs.snap"]
        );
    }

    #[test]
    fn ranges_hold_their_ends_and_nothing_past_them() {
        let r: ReleaseRange = "v1.35..v1.36".parse().unwrap();
        assert!(!r.contains(Release::V1_34) && r.contains(Release::V1_35));
        assert!(r.contains(Release::V1_36) && !r.contains(Release::V1_37));
        assert_eq!(r.width(), 2);
        let upto: ReleaseRange = "..v1.36".parse().unwrap();
        assert!(upto.contains(Release::V1_34) && !upto.contains(Release::V1_37));
        let one: ReleaseRange = "v1.37".parse().unwrap();
        assert_eq!(one.to_string(), "v1.37");
        assert_eq!(one.width(), 1);
        assert_eq!(upto.to_string(), "..v1.36");
        for bad in ["..", "v1.36..v1.35", "v1.3x.."] {
            assert!(bad.parse::<ReleaseRange>().is_err(), "{bad} accepted");
        }
    }
}
