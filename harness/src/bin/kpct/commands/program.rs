//! `kpct program`: the programming a proxier makes for a scenario, without a kernel.

use crate::stdout::emit;
use anyhow::Result;
use kpct::programming::view::View;

#[derive(clap::Args)]
pub struct Args {
    /// The scenario file.
    scenario: std::path::PathBuf,
    /// A built-in proxier or `replay:DIR`.
    #[arg(long, default_value = "kube-proxy-iptables")]
    proxier: String,
    /// Only this node (default: every node of the scenario).
    #[arg(long)]
    node: Option<String>,
    #[arg(long, value_enum, default_value_t = View::Text)]
    view: View,
    /// Compare with this proxier (a built-in or `replay:DIR`), rule by rule.
    #[arg(long)]
    diff: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let s = super::load(&args.scenario)?;
    let nodes: Vec<String> = match &args.node {
        Some(n) if s.topology.nodes.iter().any(|x| &x.name == n) => vec![n.clone()],
        Some(n) => anyhow::bail!(
            "no node `{n}` in scenario {} (nodes: {})",
            s.name,
            s.topology
                .nodes
                .iter()
                .map(|x| x.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => s.topology.nodes.iter().map(|x| x.name.clone()).collect(),
    };
    let cluster = kpct::scenario::cluster_state(&s);
    let render = |spec: &str, node: &str| -> Result<String> {
        Ok(kpct::programming::view::render(
            &programming_of(spec, &s, &cluster, node)?,
            args.view,
        ))
    };
    let mut differ = false;
    for node in &nodes {
        let ours = render(&args.proxier, node)?;
        match &args.diff {
            None => emit(&format!("# node {node}: {}\n{ours}", args.proxier))?,
            Some(other) => {
                let theirs = render(other, node)?;
                if ours != theirs {
                    differ = true;
                    emit(
                        &similar::TextDiff::from_lines(&ours, &theirs)
                            .unified_diff()
                            .header(
                                &format!("{} {node}", args.proxier),
                                &format!("{other} {node}"),
                            )
                            .to_string(),
                    )?;
                }
            }
        }
    }
    if differ {
        std::process::exit(1);
    }
    Ok(())
}

/// What `spec` programs on `node` of `s` (whose cluster state is `cluster`): a built-in
/// computes it, a replay reads its capture.
fn programming_of(
    spec: &str,
    s: &kpct::scenario::Scenario,
    cluster: &kpct::cluster::ClusterState,
    node: &str,
) -> Result<kpct::programming::Programming> {
    if spec.starts_with("replay:") {
        let replay = kpct::proxier::replay::Replay::from_spec(spec)?;
        return Ok(replay.load(node)?.programming);
    }
    if spec.starts_with("exec:") {
        anyhow::bail!(
            "`{spec}`: `program` does not run exec proxiers, which program a node namespace; \
             `kpct run --proxier {spec} --scenario … --report FILE` shows what one left on each node"
        );
    }
    let p = kpct::proxier::builtin(spec).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown proxier `{spec}` (program takes the built-ins: {}, or `replay:DIR`)",
            kpct::proxier::BUILTIN.join(", ")
        )
    })?;
    let ctx = kpct::scenario::node_context(s, node)
        .ok_or_else(|| anyhow::anyhow!("no node `{node}` in scenario {}", s.name))?;
    kpct::proxier::families::program_node(p.as_ref(), cluster, &ctx)
}
