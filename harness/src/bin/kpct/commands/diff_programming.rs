//! `kpct diff-programming`: the programming two proxiers leave on each node, compared.

use crate::proxiers;
use crate::stdout::emit;
use anyhow::Result;
use kpct::programming_diff::{self, Declared, RealKey};

#[derive(clap::Args)]
pub struct Args {
    /// The two proxiers to compare (given twice): built-ins, `kube-proxy:MODE[:PATH|:VERSION]`,
    /// `exec:COMMAND [ARGS]` or `replay:DIR`.
    #[arg(long = "proxier", num_args = 1, required = true)]
    proxiers: Vec<kpct::ProxierSpec>,
    /// Scenario files or globs; repeatable. Default: scenarios/*.yaml.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Also print each difference the known differences of a real kube-proxy with the
    /// built-in of its mode declare, with its reason (by default only counted).
    #[arg(long)]
    show_declared: bool,
}

pub fn run(args: Args) -> Result<()> {
    let [first, second] = args.proxiers.as_slice() else {
        anyhow::bail!(
            "--proxier takes exactly two proxiers to compare, {} given",
            args.proxiers.len()
        );
    };
    // A real kube-proxy and the built-in of its mode: the real one first, so that the known
    // differences declare what they may.
    use kpct::drivers::spec::Kind;
    let builtin_of = |s: &kpct::ProxierSpec| match s.kind() {
        Kind::Builtin { name, .. } => Some(*name),
        _ => None,
    };
    let (first, second, key) = match (first.kind(), second.kind()) {
        (Kind::KubeProxy(r), _) if Some(r.mode.builtin()) == builtin_of(second) => {
            (first, second, Some(RealKey::of(&r.resolve()?)?))
        }
        (_, Kind::KubeProxy(r)) if Some(r.mode.builtin()) == builtin_of(first) => {
            (second, first, Some(RealKey::of(&r.resolve()?)?))
        }
        _ => (first, second, None),
    };
    let built = proxiers::ready(&[first.clone(), second.clone()], "diff-programming")?;
    let [a, b] = <[_; 2]>::try_from(built).map_err(|_| anyhow::anyhow!("two proxiers"))?;
    let files = kpct::scenario::files(&args.scenarios)?;
    let rt = tokio::runtime::Runtime::new()?;
    let (mut undeclared, mut declared, mut failed, mut seen) = (0, 0, 0, Vec::new());
    for file in files {
        let scenario = super::load(&file)?;
        let differences = match rt.block_on(programming_diff::diff_programming(
            &scenario,
            a.as_ref(),
            b.as_ref(),
        )) {
            Ok(d) => d,
            Err(e) => {
                emit(&format!("{}: not compared: {e:#}\n", scenario.name))?;
                failed += 1;
                continue;
            }
        };
        let sorted = match key {
            Some(key) => Declared::sort(key, differences),
            None => Declared {
                declared: Vec::new(),
                undeclared: differences,
            },
        };
        let mut text = format!(
            "{}: {}\n",
            scenario.name,
            match (sorted.undeclared.len(), sorted.declared.len()) {
                (0, 0) => "the same programming".to_string(),
                (n, 0) => format!("{n} difference(s)"),
                (n, d) => format!("{n} difference(s), {d} declared"),
            }
        );
        for d in &sorted.undeclared {
            text.push_str(&format!(
                "  {}\n",
                d.describe(&first.label(), &second.label())
            ));
        }
        if args.show_declared {
            for (d, k) in &sorted.declared {
                text.push_str(&format!(
                    "  declared: {}\n    {} ({})\n",
                    d.describe(&first.label(), &second.label()),
                    k.reason,
                    k.source
                ));
            }
        }
        emit(&text)?;
        undeclared += sorted.undeclared.len();
        declared += sorted.declared.len();
        seen.extend(sorted.declared.iter().map(|(_, k)| *k));
    }
    let mut summary = format!("{undeclared} difference(s), {declared} declared");
    if failed > 0 {
        summary.push_str(&format!("; {failed} scenario(s) not compared"));
    }
    summary.push('\n');
    if let Some(key) = key {
        let unseen: Vec<_> = kpct::programming_diff::known::applying_to(key)
            .filter(|k| !seen.iter().any(|s| std::ptr::eq(*s, *k)))
            .collect();
        if !unseen.is_empty() {
            summary.push_str(&format!(
                "known differences of {key} none of these scenarios showed:\n"
            ));
            for k in unseen {
                summary.push_str(&format!("  {k}\n"));
            }
        }
    }
    emit(&summary)?;
    if undeclared > 0 || failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
