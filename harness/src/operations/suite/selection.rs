//! What a suite run runs: the scenario files, every one validated first, cut down to the tags
//! and probes asked for, crossed with the proxiers into jobs, and this share of them.

use crate::kernel_features::Feature;
use crate::operations::parallel::{Job, Shard};
use crate::run::NodeProgrammer;
use crate::scenario::{KnownProxiers, Scenario};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The proxiers' labels, refusing two alike, and every name `expectFor` may use for them: a
/// label, or the built-in a proxier is judged as.
pub fn names(proxiers: &[Box<dyn NodeProgrammer>]) -> Result<Vec<String>> {
    let labels: Vec<String> = proxiers.iter().map(|p| p.label()).collect();
    for (i, label) in labels.iter().enumerate() {
        if labels[..i].contains(label) {
            anyhow::bail!(
                "two proxiers are labelled `{label}`: name them apart, `--proxier NAME=SPEC`"
            );
        }
    }
    let mut known = labels;
    known.extend(proxiers.iter().map(|p| p.expectations_of()));
    known.dedup();
    Ok(known)
}

/// Which scenarios and probes, as asked on the command line.
pub struct Filter<'a> {
    /// Only scenarios with every one of these tags.
    pub tags: &'a [String],
    /// No scenario with any of these tags.
    pub exclude_tags: &'a [String],
    /// Only the probes of these names (none: all).
    pub probes: &'a [String],
}

/// The scenarios chosen, each with the file it came from.
pub struct Chosen {
    pub scenarios: Vec<Scenario>,
    /// Scenario name → its file.
    pub files: BTreeMap<String, PathBuf>,
}

/// The scenarios of `files`, every one validated before anything runs (a typo fails fast, with
/// all the problems of all the files; `expectFor` may name only `known`), then filtered.
pub fn scenarios(files: &[PathBuf], known: &[String], filter: &Filter<'_>) -> Result<Chosen> {
    let chosen = validated(files, known, filter.probes)?;
    let asked: Vec<String> = [filter.tags, filter.exclude_tags].concat();
    crate::scenario::check_tags(&asked).map_err(|e| anyhow::anyhow!("--tag/--exclude-tag: {e}"))?;
    let chosen: Vec<(PathBuf, Scenario)> = chosen
        .into_iter()
        .filter(|(_, s)| {
            let tags = s.tags();
            filter.tags.iter().all(|t| tags.contains(t.as_str()))
                && !filter
                    .exclude_tags
                    .iter()
                    .any(|t| tags.contains(t.as_str()))
        })
        .collect();
    if chosen.is_empty() && !asked.is_empty() {
        anyhow::bail!("no scenario has the tags asked for (--tag/--exclude-tag)");
    }
    Ok(Chosen {
        files: chosen
            .iter()
            .map(|(f, s)| (s.name.clone(), f.clone()))
            .collect(),
        scenarios: chosen.into_iter().map(|(_, s)| s).collect(),
    })
}

/// Every scenario × proxier, in the table's order, cut down to `shard` and, when any are given,
/// to the runs named `SCENARIO=LABEL` in `only`.
pub fn jobs<'a>(
    scenarios: &'a [Scenario],
    proxiers: &'a [Box<dyn NodeProgrammer>],
    shard: Option<Shard>,
    only: &[String],
) -> Vec<Job<'a>> {
    scenarios
        .iter()
        .flat_map(|scenario| {
            proxiers.iter().map(move |proxier| Job {
                scenario,
                proxier: proxier.as_ref(),
            })
        })
        .enumerate()
        .filter(|(position, _)| shard.is_none_or(|s| s.holds(*position)))
        .map(|(_, job)| job)
        .filter(|job| {
            only.is_empty()
                || only.contains(&format!("{}={}", job.scenario.name, job.proxier.label()))
        })
        .collect()
}

/// What a run needs of the kernel: its scenario's needs, and IP_VS for an IPVS proxier.
pub fn kernel_needs(job: &Job<'_>) -> BTreeSet<Feature> {
    let mut needs: BTreeSet<_> = crate::kernel_features::needed_by(job.scenario)
        .into_iter()
        .collect();
    if job.proxier.needs_ipvs() {
        needs.extend([Feature::IpVs, Feature::Dummy]);
    }
    needs
}

/// The kernel features `jobs` need, as `kpct caps --require` takes them (`ip_vs,dummy,sctp`;
/// an empty line for none).
pub fn needs_line(jobs: &[Job<'_>]) -> String {
    let needs: BTreeSet<Feature> = jobs.iter().flat_map(kernel_needs).collect();
    let names: Vec<&str> = needs.iter().map(|f| f.name()).collect();
    format!("{}\n", names.join(","))
}

/// What would run: each scenario's probes with the proxiers that would run them, one per line
/// (`scenario<TAB>probe<TAB>labels`), for this share's jobs.
pub fn listing(scenarios: &[Scenario], jobs: &[Job<'_>]) -> String {
    let mut out = String::new();
    for s in scenarios {
        let with: Vec<String> = jobs
            .iter()
            .filter(|j| std::ptr::eq(j.scenario, s))
            .map(|j| j.proxier.label())
            .collect();
        if with.is_empty() {
            continue;
        }
        for p in &s.probes {
            out.push_str(&format!("{}\t{}\t{}\n", s.name, p.name, with.join(",")));
        }
    }
    out
}

/// The scenarios of `files`, validated, cut down to the probes named in `probes` when there
/// are any.
fn validated(
    files: &[PathBuf],
    known: &[String],
    probes: &[String],
) -> Result<Vec<(PathBuf, Scenario)>> {
    let mut scenarios = Vec::new();
    let mut invalid = Vec::new();
    for file in files {
        match crate::scenario::load_for(file, KnownProxiers::Run(known)) {
            Ok(s) => scenarios.push((file.clone(), s)),
            Err(e) => invalid.push(e.to_string()),
        }
    }
    if !invalid.is_empty() {
        anyhow::bail!("{}", invalid.join("\n"));
    }
    let scenarios: Vec<(PathBuf, Scenario)> = scenarios
        .into_iter()
        .filter_map(|(f, s)| only_probes(s, probes).map(|s| (f, s)))
        .collect();
    if let Some(missing) = probes.iter().find(|name| {
        !scenarios
            .iter()
            .any(|(_, s)| s.probes.iter().any(|p| &&p.name == name))
    }) {
        anyhow::bail!("no probe named `{missing}` in the scenarios given");
    }
    Ok(scenarios)
}

/// Keeps only the probes named `wanted`, each with the source port it has in the whole file.
/// `None` when the scenario has none of them.
fn only_probes(mut s: Scenario, wanted: &[String]) -> Option<Scenario> {
    if wanted.is_empty() {
        return Some(s);
    }
    for (index, probe) in s.probes.iter_mut().enumerate() {
        let first = probe.first_source_port(index);
        probe.source_port = u16::try_from(first).ok();
    }
    s.probes.retain(|p| wanted.contains(&p.name));
    (!s.probes.is_empty()).then_some(s)
}
