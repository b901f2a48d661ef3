//! `kpct program`: the programming a proxier makes for a scenario: computed without a kernel
//! for a built-in, read from its capture for a replay, and for an `exec:` proxier read back from
//! the nodes of a scenario built for it, after its first sync.

use crate::stdout::emit;
use anyhow::Result;
use kpct::drivers::spec::Kind;
use kpct::programming::view::View;
use kpct::ProxierSpec;

#[derive(clap::Args)]
pub struct Args {
    /// The scenario file.
    scenario: std::path::PathBuf,
    /// A built-in proxier, `replay:DIR` or `exec:PROGRAM` (run on the scenario's nodes, built in
    /// namespaces for it; what it leaves there is read back).
    #[arg(long, default_value = "kube-proxy-iptables")]
    proxier: kpct::ProxierSpec,
    /// Only this node (default: every node of the scenario).
    #[arg(long)]
    node: Option<String>,
    #[arg(long, value_enum, default_value_t = View::Text)]
    view: View,
    /// Compare with this proxier (a built-in, `replay:DIR` or `exec:PROGRAM`), rule by rule.
    #[arg(long)]
    diff: Option<kpct::ProxierSpec>,
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
    // An exec: proxier's nodes are read back once, for every node asked.
    let mut read_back = std::collections::BTreeMap::new();
    for spec in std::iter::once(&args.proxier).chain(&args.diff) {
        if matches!(spec.kind(), Kind::Exec(_)) && !read_back.contains_key(spec.text()) {
            read_back.insert(spec.text().to_string(), exec_programming(spec, &s, &nodes)?);
        }
    }
    let render = |spec: &ProxierSpec, node: &str| -> Result<String> {
        let programming = match read_back.get(spec.text()) {
            Some(by_node) => by_node
                .get(node)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("node {node} was not read back"))?,
            None => programming_of(spec, &s, &cluster, node)?,
        };
        Ok(kpct::programming::view::render(&programming, args.view))
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
    spec: &ProxierSpec,
    s: &kpct::Scenario,
    cluster: &kpct::scenario::cluster::ClusterState,
    node: &str,
) -> Result<kpct::programming::Programming> {
    if let Kind::Replay(replay) = spec.kind() {
        return Ok(replay.load(node)?.programming);
    }
    let p = spec.builtin().ok_or_else(|| {
        anyhow::anyhow!(
            "`{spec}`: program takes the built-ins ({}), `replay:DIR` or `exec:PROGRAM`",
            kpct::proxier::BUILTIN.join(", ")
        )
    })?;
    let ctx = kpct::scenario::node_context(s, node)
        .ok_or_else(|| anyhow::anyhow!("no node `{node}` in scenario {}", s.name))?;
    kpct::proxier::families::program_node(p.as_ref(), cluster, &ctx)
}

/// What the `exec:` proxier `spec` leaves on each of `nodes` after its first sync of `s`: the
/// scenario built in namespaces, every node programmed by the proxier, each asked node captured
/// with the real tools (as `replay:` captures are) and parsed back; the namespaces are then
/// removed.
fn exec_programming(
    spec: &ProxierSpec,
    s: &kpct::Scenario,
    nodes: &[String],
) -> Result<std::collections::BTreeMap<String, kpct::programming::Programming>> {
    use anyhow::Context;
    let proxier = spec.build()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let staged = runtime
        .block_on(kpct::run::stage(s, proxier.as_ref()))
        .with_context(|| format!("programming the nodes of {} with {spec}", s.name))?;
    let dir = kpct::netns::scratch::ScratchDir::new("program")?;
    let replay = kpct::drivers::replay::Replay::new(dir.path());
    let mut out = std::collections::BTreeMap::new();
    for name in nodes {
        let node = staged.topo.node(name)?;
        kpct::drivers::replay::capture(&node.netns, name, dir.path(), Default::default())
            .with_context(|| format!("reading back node {name}"))?;
        let mut programming = replay
            .load(name)
            .with_context(|| format!("reading back node {name}"))?
            .programming;
        // The same sets, whatever the kernel drew for them: its random initval also orders a
        // hash set's entries.
        for set in &mut programming.ipsets {
            set.create_options =
                kpct::programming::effective::without_kernel_chosen_options(&set.create_options);
            if set.set_type.name().starts_with("hash:") {
                set.entries.sort();
            }
        }
        out.insert(name.clone(), programming);
    }
    drop(staged);
    Ok(out)
}
