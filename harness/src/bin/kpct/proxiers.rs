//! Proxiers named on the command line (parsed by clap into [`ProxierSpec`]s): the default where
//! none is named, and the one way a command gets them ready — refusing up front what this
//! kernel cannot run, then building them.

use anyhow::Result;
use kpct::kernel_features::{self, Feature};
use kpct::NodeProgrammer;
use kpct::ProxierSpec;

/// What to do instead when this kernel lacks IP_VS, for the command `command`.
fn way_out(command: &str) -> String {
    format!(
        "run it through `sudo ci/kpct.sh {command} …`, which uses a VM whose kernel has it, or \
         pick `--proxier kube-proxy-iptables`"
    )
}

/// `specs` (the built-ins when none is named) built for `command`, after refusing, with the
/// reason, any that needs what this kernel lacks.
pub fn ready(specs: &[ProxierSpec], command: &str) -> Result<Vec<Box<dyn NodeProgrammer>>> {
    let specs = kpct::drivers::spec::or_builtins(specs);
    if specs.iter().any(ProxierSpec::needs_ipvs) {
        ensure_ipvs(&way_out(command))?;
    }
    specs.iter().map(ProxierSpec::build).collect()
}

/// Built-in proxiers only (the built-ins when none is named), refusing IPVS up front on a
/// kernel without it and anything but a built-in with the reason.
pub fn builtins(specs: &[ProxierSpec], command: &str) -> Result<Vec<Box<dyn kpct::Proxier>>> {
    let specs = kpct::drivers::spec::or_builtins(specs);
    if specs.iter().any(ProxierSpec::needs_ipvs) {
        ensure_ipvs(&way_out(command))?;
    }
    specs
        .iter()
        .map(|s| {
            s.builtin().ok_or_else(|| {
                anyhow::anyhow!(
                    "`{s}` is not a built-in ({command} takes the built-ins: {}, each also as \
                     BUILTIN@v1.MINOR)",
                    kpct::proxier::BUILTIN.join(", ")
                )
            })
        })
        .collect()
}

/// The proxier a one-proxier command uses, built: the one asked for, else the IPVS one where
/// the kernel can run it, else the iptables one, with a note on stderr.
pub fn chosen(asked: Option<ProxierSpec>, command: &str) -> Result<Box<dyn NodeProgrammer>> {
    let spec = match asked {
        Some(spec) => spec,
        None => {
            let has_ipvs = kernel_features::detect()?
                .missing(&[Feature::IpVs])
                .is_empty();
            let (chosen, note) = default_proxier(has_ipvs);
            if let Some(note) = note {
                eprintln!("kpct: {note}");
            }
            chosen.parse()?
        }
    };
    let mut built = ready(std::slice::from_ref(&spec), command)?;
    Ok(built.remove(0))
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
