//! Proxiers named on the command line: which ones, whether the kernel can run them, and the
//! default where none is named.

use anyhow::Result;
use kpct::kernel_features::{self, Feature};

/// The proxiers named on the command line, or both built-ins when none is.
pub fn or_builtins(names: &[String]) -> Vec<String> {
    if names.is_empty() {
        kpct::proxier::BUILTIN
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        names.to_vec()
    }
}

/// Built-in proxiers by name (both when none is named), refusing IPVS up front on a kernel
/// without it; `command` names the subcommand in messages, `way_out` says what to do instead.
pub fn builtins(
    names: &[String],
    command: &str,
    way_out: &str,
) -> Result<Vec<Box<dyn kpct::proxier::Proxier>>> {
    let names = or_builtins(names);
    if names.iter().any(|n| kpct::proxier::needs_ipvs(n)) {
        ensure_ipvs(way_out)?;
    }
    names
        .iter()
        .map(|n| {
            kpct::proxier::builtin(n).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown proxier `{n}` ({command} takes the built-ins: {})",
                    kpct::proxier::BUILTIN.join(", ")
                )
            })
        })
        .collect()
}

/// A built-in (`kube-proxy-ipvs`, `kube-proxy-iptables`, `kube-proxy-nftables`),
/// `exec:COMMAND [ARGS]`, `replay:DIR`, `kube-proxy:MODE[:PATH|:VERSION]` or `api:… COMMAND`, or
/// any of them as
/// `NAME=SPEC`, labelled NAME.
pub fn from_spec(spec: &str) -> Result<Box<dyn kpct::run::NodeProgrammer>> {
    if let Some((name, inner)) = kpct::proxier::programmer::Named::split(spec) {
        return Ok(Box::new(kpct::proxier::programmer::Named::new(
            name,
            inner,
            from_spec(inner)?,
        )?));
    }
    if kpct::proxier::real::RealProxier::is_spec(spec) {
        return Ok(Box::new(kpct::proxier::real::RealProxier::from_spec(spec)?));
    }
    if kpct::proxier::real::ApiProxier::is_spec(spec) {
        return Ok(Box::new(kpct::proxier::real::ApiProxier::from_spec(spec)?));
    }
    if spec.starts_with("exec:") {
        return Ok(Box::new(kpct::proxier::exec::ExecProxier::from_spec(spec)?));
    }
    if spec.starts_with("replay:") {
        return Ok(Box::new(kpct::proxier::replay::Replay::from_spec(spec)?));
    }
    kpct::proxier::builtin(spec)
        .map(|p| Box::new(p) as Box<dyn kpct::run::NodeProgrammer>)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown proxier `{spec}` (built-in: {}; or exec:COMMAND, replay:DIR, \
                 kube-proxy:MODE[:PATH|:VERSION], api:--sync-metric=NAME@PORT COMMAND)",
                kpct::proxier::BUILTIN.join(", ")
            )
        })
}

/// The proxier a one-proxier command uses: the one asked for, else the IPVS one where the kernel
/// can run it, else the iptables one, with a note on stderr.
pub fn chosen(asked: Option<String>) -> Result<String> {
    if let Some(p) = asked {
        return Ok(p);
    }
    let has_ipvs = kernel_features::detect()?
        .missing(&[Feature::IpVs])
        .is_empty();
    let (chosen, note) = default_proxier(has_ipvs);
    if let Some(note) = note {
        eprintln!("kpct: {note}");
    }
    Ok(chosen.to_string())
}

fn default_proxier(has_ipvs: bool) -> (&'static str, Option<&'static str>) {
    if has_ipvs {
        ("kube-proxy-ipvs", None)
    } else {
        (
            "kube-proxy-iptables",
            Some("no IP_VS in this kernel: using --proxier kube-proxy-iptables (for IPVS, run it through `sudo ci/kpct.sh`, which uses a VM whose kernel has it)"),
        )
    }
}

/// Fails with the reason when the running kernel has no IP_VS; `way_out` says what to do instead.
pub fn ensure_ipvs(way_out: &str) -> Result<()> {
    let caps = kernel_features::detect()?;
    if let Some((_, why)) = caps.missing(&[Feature::IpVs]).into_iter().next() {
        anyhow::bail!(
            "the IPVS proxier needs IP_VS, which kernel {} lacks ({why}); {way_out}",
            caps.kernel
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::default_proxier;

    #[test]
    fn the_default_proxier_is_one_the_kernel_can_run() {
        assert_eq!(default_proxier(true), ("kube-proxy-ipvs", None));
        let (chosen, note) = default_proxier(false);
        assert_eq!(chosen, "kube-proxy-iptables");
        assert!(note.is_some_and(|n| n.contains("ci/kpct.sh")));
    }
}
