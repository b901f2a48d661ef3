//! `--proxier SPEC`, read once: which proxier, under which name, what it needs of the kernel
//! and how it is built. The one place a spec's spelling is matched; every command takes a
//! [`ProxierSpec`] (clap parses it with [`FromStr`]), as cargo's commands take a `PackageIdSpec`.
//!
//! The grammar:
//!
//! | spec | proxier |
//! |---|---|
//! | `kube-proxy-iptables`, `kube-proxy-ipvs`, `kube-proxy-nftables` | a built-in, at the newest release it models |
//! | `BUILTIN@v1.MINOR` | a built-in at another release it models (`kube-proxy-iptables@v1.34`) |
//! | `exec:PROGRAM [ARGS…]` | a program run per node ([`super::exec`]) |
//! | `replay:DIR` | a capture of real nodes ([`super::replay`]) |
//! | `kube-proxy:MODE[:PATH\|:VERSION] [--config-patch=FILE]` | the real kube-proxy ([`super::real`]) |
//! | `api:--sync-metric=NAME@PORT [--judged-as=NAME] COMMAND [ARGS…]` | any API-watching proxier |
//! | `NAME=SPEC` | any of them, labelled NAME in every output |

use super::exec::ExecProxier;
use super::programmer::{Named, NodeProgrammer};
use super::real::{ApiProxier, RealProxier, RealSpec};
use super::replay::Replay;
use crate::kernel_features::Feature;
use crate::proxier::{Release, BUILTIN};
use crate::proxier_kinds::Prefixed;
use anyhow::{bail, Context, Result};
use std::fmt;
use std::str::FromStr;

/// A proxier as `--proxier` names it, parsed: its syntax checked (an unknown kind, mode or
/// release fails here); what it names on the machine (a program, a directory, a built
/// kube-proxy) is looked up when it is built, before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxierSpec {
    /// The NAME of `NAME=SPEC`.
    name: Option<String>,
    /// The spec as written, `NAME=` included: what runs it again.
    text: String,
    kind: Kind,
}

/// What a spec names. Each kind says what it needs of the kernel itself
/// ([`NodeProgrammer::needs_ipvs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A built-in (`BUILTINS`) at a release it models.
    Builtin {
        name: &'static str,
        release: Release,
    },
    Exec(ExecProxier),
    Replay(Replay),
    KubeProxy(RealSpec),
    Api(ApiProxier),
}

impl ProxierSpec {
    /// What it names.
    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// How every output names it: NAME, else the whole spec (an `exec:` proxier with its
    /// arguments, a built-in with its release unless it is the newest).
    pub fn label(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match &self.kind {
            Kind::Builtin { name, release } => crate::release::builtin_label(name, *release),
            _ => self.text.clone(),
        }
    }

    /// The spec as written: what `--proxier` takes to build it again.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The built-in it names, if it names one.
    pub fn builtin(&self) -> Option<Box<dyn crate::proxier::Proxier>> {
        match &self.kind {
            Kind::Builtin { name, release } => {
                crate::proxier::builtin(&format!("{name}@{release}"))
            }
            _ => None,
        }
    }

    /// Whether it needs IP_VS (and the dummy device kube-ipvs0 is): decided from what it is,
    /// not from its spelling — the IPVS built-in, a real kube-proxy in IPVS mode, a `replay:`
    /// capture that holds IPVS services. An `exec:` or `api:` proxier is only known by what it
    /// programs: one that writes IPVS services on a kernel without IP_VS fails when they are
    /// applied, saying so.
    pub fn needs_ipvs(&self) -> bool {
        self.build().is_ok_and(|p| p.needs_ipvs())
    }

    /// What it needs of the kernel beyond what every run needs.
    pub fn kernel_needs(&self) -> Vec<Feature> {
        if self.needs_ipvs() {
            vec![Feature::IpVs, Feature::Dummy]
        } else {
            Vec::new()
        }
    }

    /// The proxier, ready for a run: what the spec names looked up (a program that is not
    /// there fails here, with the reason).
    pub fn build(&self) -> Result<Box<dyn NodeProgrammer>> {
        let inner: Box<dyn NodeProgrammer> = match &self.kind {
            Kind::Builtin { .. } => {
                let builtin = self.builtin().context("a built-in the list holds")?;
                Box::new(builtin)
            }
            Kind::Exec(p) => {
                p.check()?;
                Box::new(p.clone())
            }
            Kind::Replay(p) => {
                p.check()?;
                Box::new(p.clone())
            }
            Kind::KubeProxy(p) => Box::new(p.resolve()?),
            Kind::Api(p) => {
                p.check()?;
                Box::new(p.clone())
            }
        };
        match &self.name {
            None => Ok(inner),
            Some(name) => {
                let spec = self.text.split_once('=').map_or("", |(_, spec)| spec);
                Ok(Box::new(Named::new(name, spec, inner)?))
            }
        }
    }

    /// `text` read as a spec of kind `T` (`ExecProxier`, `Replay`, `RealProxier`,
    /// `ApiProxier`): an error when it names another kind, or a name (`NAME=SPEC`).
    pub fn parse_as<T: TryFrom<ProxierSpec, Error = anyhow::Error>>(text: &str) -> Result<T> {
        T::try_from(text.parse::<ProxierSpec>()?)
    }

    /// A built-in named `name` (`kube-proxy-iptables`, `kube-proxy-iptables@v1.34`).
    fn parse_builtin(spec: &str) -> Result<Kind> {
        let (base, release) = match spec.split_once('@') {
            Some((base, release)) => (
                base,
                release
                    .parse::<Release>()
                    .map_err(|e| anyhow::anyhow!("proxier `{spec}`: {e}"))?,
            ),
            None => (spec, Release::NEWEST),
        };
        let Some(name) = BUILTIN.iter().find(|b| **b == base) else {
            bail!(
                "unknown proxier `{spec}` (built-in: {}, each also as BUILTIN@v1.MINOR; or \
                 exec:COMMAND, replay:DIR, kube-proxy:MODE[:PATH|:VERSION], \
                 api:--sync-metric=NAME@PORT COMMAND)",
                BUILTIN.join(", ")
            );
        };
        if !release.is_modelled() {
            bail!(
                "proxier `{spec}`: the built-ins model {} (the releases `ci/real-proxiers.sh \
                 --all` builds), not {release}",
                Release::MODELLED.map(|r| r.to_string()).join(", ")
            );
        }
        Ok(Kind::Builtin { name, release })
    }
}

impl FromStr for ProxierSpec {
    type Err = anyhow::Error;

    fn from_str(spec: &str) -> Result<ProxierSpec> {
        let spec = spec.trim();
        if let Some((name, inner)) = Named::split(spec) {
            let inner: ProxierSpec = inner.parse()?;
            if inner.name.is_some() {
                bail!("proxier `{spec}`: one name is enough (NAME=SPEC, SPEC unnamed)");
            }
            if inner.label() == name {
                bail!("proxier `{spec}`: the name is the label it has anyway");
            }
            return Ok(ProxierSpec {
                name: Some(name.to_string()),
                text: spec.to_string(),
                kind: inner.kind,
            });
        }
        let kind = match Prefixed::split(spec) {
            Some((Prefixed::KubeProxy, rest)) => Kind::KubeProxy(RealSpec::parse(spec, rest)?),
            Some((Prefixed::Api, rest)) => Kind::Api(ApiProxier::parse(spec, rest)?),
            Some((Prefixed::Exec, rest)) => Kind::Exec(ExecProxier::parse(rest)?),
            Some((Prefixed::Replay, rest)) => Kind::Replay(Replay::parse(rest)?),
            None => ProxierSpec::parse_builtin(spec)?,
        };
        Ok(ProxierSpec {
            name: None,
            text: spec.to_string(),
            kind,
        })
    }
}

/// `TryFrom<ProxierSpec>` for the driver a kind holds, for [`ProxierSpec::parse_as`].
/// (Each resolved and checked as [`ProxierSpec::build`] does.)
macro_rules! kind_of {
    ($variant:ident, $driver:ty, $what:literal, $ready:expr) => {
        impl TryFrom<ProxierSpec> for $driver {
            type Error = anyhow::Error;
            fn try_from(spec: ProxierSpec) -> Result<$driver> {
                match spec.kind {
                    Kind::$variant(driver) if spec.name.is_none() => $ready(driver),
                    _ => bail!("proxier `{}` is not {} (unnamed)", spec.text, $what),
                }
            }
        }
    };
}
kind_of!(Exec, ExecProxier, "an `exec:` proxier", |p: ExecProxier| {
    p.check()?;
    Ok(p)
});
kind_of!(Replay, Replay, "a `replay:` capture", |p: Replay| {
    p.check()?;
    Ok(p)
});
kind_of!(
    KubeProxy,
    RealProxier,
    "a real kube-proxy",
    |p: RealSpec| p.resolve()
);
kind_of!(Api, ApiProxier, "an `api:` proxier", |p: ApiProxier| {
    p.check()?;
    Ok(p)
});

impl fmt::Display for ProxierSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The proxiers named, or the built-ins (each at the newest release) when none is.
pub fn or_builtins(specs: &[ProxierSpec]) -> Vec<ProxierSpec> {
    if specs.is_empty() {
        BUILTIN
            .iter()
            .map(|name| ProxierSpec {
                name: None,
                text: name.to_string(),
                kind: Kind::Builtin {
                    name,
                    release: Release::NEWEST,
                },
            })
            .collect()
    } else {
        specs.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<ProxierSpec> {
        spec.parse()
    }

    #[test]
    fn built_ins_parse_at_their_releases() {
        let p = parse("kube-proxy-iptables").unwrap();
        assert_eq!(p.label(), "kube-proxy-iptables");
        assert!(!p.needs_ipvs());
        let old = parse("kube-proxy-ipvs@v1.34").unwrap();
        assert_eq!(old.label(), "kube-proxy-ipvs@v1.34");
        assert!(old.needs_ipvs());
        assert_eq!(old.kernel_needs(), [Feature::IpVs, Feature::Dummy]);
        assert_eq!(old.build().unwrap().label(), "kube-proxy-ipvs@v1.34");
        assert_eq!(
            parse("kube-proxy-nftables@v1.37").unwrap().label(),
            "kube-proxy-nftables"
        );
        let e = parse("kube-proxy-iptables@v1.30").unwrap_err().to_string();
        assert!(e.contains("v1.34, v1.35, v1.36, v1.37"), "{e}");
        let e = parse("kube-proxy-userspace").unwrap_err().to_string();
        assert!(e.contains("unknown proxier"), "{e}");
        assert!(parse("kube-proxy-iptables@latest").is_err());
    }

    #[test]
    fn names_label_and_the_text_runs_again() {
        let p = parse("old=kube-proxy-iptables@v1.35").unwrap();
        assert_eq!(p.label(), "old");
        assert_eq!(p.text(), "old=kube-proxy-iptables@v1.35");
        let built = p.build().unwrap();
        assert_eq!(built.label(), "old");
        assert_eq!(built.spec(), "old=kube-proxy-iptables@v1.35");
        assert_eq!(built.expectations_of(), "kube-proxy-iptables@v1.35");
        assert!(parse("kube-proxy-iptables=kube-proxy-iptables").is_err());
        assert!(parse("a=b=kube-proxy-iptables").is_err());
    }

    #[test]
    fn exec_and_replay_are_checked_before_anything_runs() {
        let p = parse("exec:sh --flag 1").unwrap();
        assert_eq!(p.label(), "exec:sh --flag 1");
        assert!(matches!(p.kind(), Kind::Exec(_)));
        assert!(parse("exec:").is_err());
        // What a spec names is looked up when it is built, not parsed: the documentation's
        // `exec:./my-proxier` parses anywhere.
        let missing = parse("exec:/no/such/program").unwrap();
        assert!(missing.build().is_err());
        assert!(parse("replay:/no/such/dir").unwrap().build().is_err());
        assert!(parse("replay:").is_err());
        let dir = std::env::temp_dir();
        let r = parse(&format!("replay:{}", dir.display())).unwrap();
        assert!(matches!(r.kind(), Kind::Replay(_)));
        assert!(parse("api:sh -c true").is_err());
        assert!(parse("kube-proxy:userspace:/bin/true").is_err());
    }
}
