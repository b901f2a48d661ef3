//! Known differences as data (`known-differences.yaml` at the repository's top): each accepted
//! difference between proxiers or releases, what it matches, why, and the upstream source.
//! Explore counts the differences they explain and reports only the others; the README's table
//! of known differences is generated from the same file (`kpct scenario-table --write`).

use super::compare::Difference;
use crate::input_file;
use crate::release::{Release, ReleaseRange};
use crate::scenario::Scenario;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file, at the top of the repository kpct was built from.
pub const FILE: &str = "known-differences.yaml";

/// Why a difference is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// kube-proxy releases behave differently; the built-ins model each (`BUILTIN@v1.MINOR`).
    Release,
    /// A real binary does what no single observation can pin (Go map order, a race it has),
    /// which kpct handles so that it never reads as a difference.
    Handled,
    /// The built-ins model something on purpose otherwise than the real binary, and say so.
    Builtin,
}

/// One accepted difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Known {
    pub id: String,
    pub kind: Kind,
    /// One line: what differs.
    pub title: String,
    /// The two sides it is between; explained when one run's proxier matches one side and the
    /// other run's the other.
    #[serde(default)]
    pub between: Vec<Side>,
    /// Tags (`Scenario::tags`) the case carries.
    #[serde(default)]
    pub when: Vec<String>,
    /// What every differing probe is (see [`ProbeCondition`]): the difference is explained
    /// only where each holds of each probe that differs.
    #[serde(default)]
    pub probes: Vec<ProbeCondition>,
    /// Patterns (regular expressions) every part of every differing probe's or step's
    /// signature must match one of (`verdict: -delivered +rejected`, `run: -failed +completed`).
    #[serde(default)]
    pub signature: Vec<String>,
    /// With a run that failed: a pattern its error matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why, in a sentence or two.
    pub why: String,
    /// Where upstream decides it: file and release (and line).
    pub source: String,
    /// How kpct handles it.
    pub handled: String,
    /// The library scenario that shows it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
}

/// What a differing probe is, in the state of its step: the vocabulary a known difference says
/// where it applies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeCondition {
    /// It continues a kept flow.
    Continues,
    /// Over UDP.
    Udp,
    /// To one of its Service's ClusterIP, external IPs or load balancer IPs, not a NodePort (a
    /// kept flow: the way it was opened).
    ViaServiceIp,
    /// To a Service that has no serving endpoint now.
    NoServingEndpoint,
    /// To a Service labelled `service.kubernetes.io/headless`.
    HeadlessLabel,
    /// To a Service with a slice labelled `service.kubernetes.io/service-proxy-name`.
    ProxyNameSlice,
    /// To a Service whose slices list an address twice.
    DuplicateEndpoint,
}

/// One side of a known difference: proxiers of these modes at these releases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Side {
    /// Releases, as `expectFor` keys write them (`..v1.36`, `v1.37..`).
    pub releases: String,
    /// Modes (`iptables`, `ipvs`, `nftables`); every mode when absent.
    #[serde(default)]
    pub modes: Vec<String>,
}

/// What explore knows of a proxier for matching: its mode and release, where it has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub mode: Option<String>,
    pub release: Option<Release>,
}

impl Judged {
    /// From the name a proxier is judged as (`kube-proxy-iptables@v1.34`, a real kube-proxy's
    /// `judged_as`): its mode and release; nothing for an `exec:` or `api:` proxier.
    pub fn of(name: &str) -> Judged {
        match crate::scenario::expect_for::builtin_and_release(name) {
            Some((base, release)) => Judged {
                mode: base.strip_prefix("kube-proxy-").map(str::to_string),
                release: Some(release),
            },
            None => Judged {
                mode: None,
                release: None,
            },
        }
    }
}

impl Side {
    fn matches(&self, who: &Judged) -> bool {
        let Ok(range) = self.releases.parse::<ReleaseRange>() else {
            return false;
        };
        let release = who.release.is_some_and(|r| range.contains(r));
        let mode =
            self.modes.is_empty() || who.mode.as_ref().is_some_and(|m| self.modes.contains(m));
        release && mode
    }
}

/// The file, read and checked.
#[derive(Debug, Clone, Default)]
pub struct KnownDifferences {
    pub entries: Vec<Known>,
}

impl KnownDifferences {
    /// `known-differences.yaml` of the repository kpct was built from.
    pub fn bundled() -> Result<KnownDifferences> {
        KnownDifferences::read(&crate::repository::root_or_built().join(FILE))
    }

    /// `path`, read and checked: every problem in one error.
    pub fn read(path: &Path) -> Result<KnownDifferences> {
        let text =
            input_file::read_text(path, input_file::SCENARIO_LIMIT, "known-differences file")
                .with_context(|| format!("reading {}", path.display()))?;
        let entries: Vec<Known> = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{}: not a list of known differences", path.display()))?;
        let mut problems = Vec::new();
        let mut ids = std::collections::BTreeSet::new();
        for (i, k) in entries.iter().enumerate() {
            let at = format!("{}: entry {i} ({})", path.display(), k.id);
            if !ids.insert(k.id.clone()) {
                problems.push(format!("{at}: duplicate id"));
            }
            if k.kind == Kind::Release && k.between.len() != 2 {
                problems.push(format!("{at}: a release difference is between two sides"));
            }
            for side in &k.between {
                if let Err(e) = side.releases.parse::<ReleaseRange>() {
                    problems.push(format!("{at}: releases: {e}"));
                }
                for m in &side.modes {
                    if !["iptables", "ipvs", "nftables"].contains(&m.as_str()) {
                        problems.push(format!("{at}: unknown mode `{m}`"));
                    }
                }
            }
            if k.kind == Kind::Release && k.probes.is_empty() && k.error.is_none() {
                problems.push(format!(
                    "{at}: a release difference says which probes it concerns (`probes`) or the \
                     error it ends in (`error`)"
                ));
            }
            for tag in &k.when {
                if !crate::scenario::TAGS.iter().any(|(t, _)| t == tag) {
                    problems.push(format!("{at}: unknown tag `{tag}`"));
                }
            }
            for p in k.signature.iter().chain(&k.error) {
                if let Err(e) = regex_lite::Regex::new(p) {
                    problems.push(format!("{at}: pattern `{p}`: {e}"));
                }
            }
            if k.kind == Kind::Release && k.signature.is_empty() && k.error.is_none() {
                problems.push(format!(
                    "{at}: says neither a signature nor an error it matches"
                ));
            }
        }
        if !problems.is_empty() {
            bail!("{}", problems.join("\n"));
        }
        Ok(KnownDifferences { entries })
    }

    /// The entry that explains `difference` between runs of `scenario` by proxiers judged as `a`
    /// and `b`, if one does; `error` is the failed run's message, if one failed.
    pub fn explaining(
        &self,
        scenario: &Scenario,
        a: &Judged,
        b: &Judged,
        difference: &Difference,
        error: Option<&str>,
    ) -> Option<&Known> {
        let tags = scenario.tags();
        self.entries.iter().find(|k| {
            if k.signature.is_empty() && k.error.is_none() {
                return false;
            }
            let sides = match k.between.as_slice() {
                [x, y] => (x.matches(a) && y.matches(b)) || (x.matches(b) && y.matches(a)),
                _ => false,
            };
            let tagged = k.when.iter().all(|t| tags.contains(t.as_str()));
            let patterns: Vec<regex_lite::Regex> = k
                .signature
                .iter()
                .filter_map(|p| regex_lite::Regex::new(p).ok())
                .collect();
            let every_part = difference
                .signatures
                .values()
                .flat_map(|s| s.0.iter())
                .all(|part| patterns.iter().any(|p| p.is_match(part)));
            let probes_fit = k.probes.is_empty()
                || difference.signatures.keys().all(|subject| {
                    subject
                        .strip_prefix("probe ")
                        .and_then(|name| probe_in_state(scenario, name))
                        .is_some_and(|(state, probe)| {
                            k.probes.iter().all(|c| holds(*c, &state, &probe, scenario))
                        })
                });
            let errs = match (&k.error, error) {
                (Some(p), Some(e)) => regex_lite::Regex::new(p).is_ok_and(|r| r.is_match(e)),
                (Some(_), None) => false,
                (None, _) => true,
            };
            sides && tagged && every_part && probes_fit && errs
        })
    }

    /// The README's table of known differences, one row per entry.
    pub fn table(&self) -> String {
        let mut out = String::from("| difference | between | why | source | how kpct handles it |\n|---|---|---|---|---|\n");
        for k in &self.entries {
            let between = match k.between.as_slice() {
                [] => "real binaries and the built-ins".to_string(),
                sides => sides
                    .iter()
                    .map(|s| {
                        if s.modes.is_empty() {
                            format!("`{}`", s.releases)
                        } else {
                            format!("`{}` ({})", s.releases, s.modes.join(", "))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" / "),
            };
            let scenario = k
                .scenario
                .as_ref()
                .map(|s| format!(" ([`{s}`](../{s}))"))
                .unwrap_or_default();
            out.push_str(&format!(
                "| {}{scenario} | {between} | {} | {} | {} |\n",
                cell(&k.title),
                cell(&k.why),
                cell(&k.source),
                cell(&k.handled)
            ));
        }
        out
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The probe a run's observation names `name` (`STEP/PROBE` in a step), with the scenario as it
/// stands then.
fn probe_in_state(s: &Scenario, name: &str) -> Option<(Scenario, crate::scenario::Probe)> {
    match name.split_once('/') {
        None => {
            let p = s.probes.iter().find(|p| p.name == name)?;
            Some((s.clone(), p.clone()))
        }
        Some((step, probe)) => {
            let k = s.steps.iter().position(|st| st.name == step)?;
            let p = s.steps[k].probes.iter().find(|p| p.name == probe)?.clone();
            Some((crate::scenario::state_at(s, Some(k)).scenario, p))
        }
    }
}

/// The probe that opened the flow `probe` continues (or `probe` itself).
fn opening<'a>(
    whole: &'a Scenario,
    probe: &'a crate::scenario::Probe,
) -> &'a crate::scenario::Probe {
    let Some(flow) = &probe.continues else {
        return probe;
    };
    whole
        .probes
        .iter()
        .chain(whole.steps.iter().flat_map(|st| st.probes.iter()))
        .find(|p| p.keep.as_ref() == Some(flow))
        .unwrap_or(probe)
}

/// The cluster as it stood when the flow `probe` continues was opened (`None` for a probe that
/// continues none).
fn state_when_opened(whole: &Scenario, probe: &crate::scenario::Probe) -> Option<Scenario> {
    let flow = probe.continues.as_ref()?;
    let kept = |p: &crate::scenario::Probe| p.keep.as_ref() == Some(flow);
    if whole.probes.iter().any(kept) {
        return Some(crate::scenario::state_at(whole, None).scenario);
    }
    let k = whole
        .steps
        .iter()
        .position(|st| st.probes.iter().any(kept))?;
    Some(crate::scenario::state_at(whole, Some(k)).scenario)
}

fn holds(
    c: ProbeCondition,
    state: &Scenario,
    probe: &crate::scenario::Probe,
    whole: &Scenario,
) -> bool {
    // What a label or a slice decided when a kept flow opened decides its continuation too:
    // a flow a release never let open stays unopened after the label goes.
    let decided_at_opening = matches!(
        c,
        ProbeCondition::HeadlessLabel
            | ProbeCondition::ProxyNameSlice
            | ProbeCondition::DuplicateEndpoint
    );
    if decided_at_opening {
        if let Some(then) = state_when_opened(whole, probe) {
            if holds_in(c, &then, probe, whole) {
                return true;
            }
        }
    }
    holds_in(c, state, probe, whole)
}

fn holds_in(
    c: ProbeCondition,
    state: &Scenario,
    probe: &crate::scenario::Probe,
    whole: &Scenario,
) -> bool {
    use crate::scenario::{Protocol, Via};
    let opened = opening(whole, probe);
    let service = opened.to.service.as_deref().and_then(|r| {
        let (ns, name) = r.split_once('/').unwrap_or(("default", r));
        state
            .services
            .iter()
            .find(|s| s.namespace == ns && s.name == name)
    });
    let slices = |svc: &crate::scenario::Service| -> Vec<crate::scenario::EndpointSlice> {
        state
            .endpoint_slices
            .iter()
            .filter(|sl| sl.namespace == svc.namespace && sl.service == svc.name)
            .cloned()
            .collect()
    };
    match c {
        ProbeCondition::Continues => probe.continues.is_some(),
        ProbeCondition::Udp => opened.protocol == Protocol::Udp,
        ProbeCondition::ViaServiceIp => matches!(
            opened.to.via,
            Some(Via::ClusterIP | Via::ExternalIP | Via::LoadBalancer)
        ),
        ProbeCondition::NoServingEndpoint => service.is_some_and(|svc| {
            let cluster = crate::scenario::cluster_state(state);
            let none_serving = cluster.families().all(|f| {
                f.service_ports
                    .iter()
                    .filter(|sp| sp.namespace == svc.namespace && sp.name == svc.name)
                    .all(|sp| !sp.endpoints.iter().any(|e| e.serving))
            });
            none_serving
        }),
        ProbeCondition::HeadlessLabel => {
            service.is_some_and(|svc| svc.labels.contains_key(crate::scenario::LABEL_HEADLESS))
        }
        ProbeCondition::ProxyNameSlice => service.is_some_and(|svc| {
            slices(svc).iter().any(|sl| {
                sl.labels
                    .contains_key(crate::scenario::LABEL_SERVICE_PROXY_NAME)
            })
        }),
        ProbeCondition::DuplicateEndpoint => service.is_some_and(|svc| {
            slices(svc).iter().any(|sl| {
                let mut ips: Vec<_> = sl
                    .endpoints
                    .iter()
                    .flat_map(|e| e.addresses.clone())
                    .collect();
                let n = ips.len();
                ips.sort();
                ips.dedup();
                ips.len() < n
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::explore::compare::{Difference, Signature};
    use std::collections::BTreeMap;

    fn judged(name: &str) -> Judged {
        Judged::of(name)
    }

    fn difference(subject: &str, parts: &[&str]) -> Difference {
        Difference {
            lines: Vec::new(),
            signatures: BTreeMap::from([(
                subject.to_string(),
                Signature(parts.iter().map(|p| p.to_string()).collect()),
            )]),
        }
    }

    fn library(name: &str) -> Scenario {
        let path = format!("{}/../scenarios/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
        crate::scenario::load(Path::new(&path)).expect("a library scenario")
    }

    #[test]
    fn the_bundled_file_reads_and_judges_sides_by_release_and_mode() {
        let known = KnownDifferences::bundled().expect("known-differences.yaml");
        assert!(known.entries.len() >= 5);
        assert_eq!(
            judged("kube-proxy-nftables@v1.34"),
            Judged {
                mode: Some("nftables".into()),
                release: Some(Release::V1_34)
            }
        );
        assert_eq!(judged("kube-proxy-iptables").release, Some(Release::NEWEST));
        assert_eq!(judged("exec:./p").release, None);
    }

    /// The release difference of a kept UDP flow explains exactly that probe's difference,
    /// between releases on either side of it, in either order; not another probe's, not two
    /// runs of one release, not an exec: proxier.
    #[test]
    fn a_release_difference_explains_its_probe_between_its_releases_only() {
        let known = KnownDifferences::bundled().expect("known-differences.yaml");
        let s = library("transition-udp-last-endpoint-gone");
        let d = difference(
            "probe last-endpoint-terminates/clusterip-flow-again",
            &[
                "backend differs",
                "reached differs",
                "verdict: -delivered +rejected",
            ],
        );
        let (old, new) = (
            judged("kube-proxy-iptables@v1.36"),
            judged("kube-proxy-iptables"),
        );
        let explained = |a: &Judged, b: &Judged, d: &Difference| {
            known.explaining(&s, a, b, d, None).map(|k| k.id.clone())
        };
        let id = Some("udp-conntrack-services-without-endpoints".to_string());
        assert_eq!(explained(&old, &new, &d), id);
        assert_eq!(explained(&new, &old, &d), id);
        assert_eq!(explained(&new, &new, &d), None, "one release");
        assert_eq!(explained(&judged("exec:./p"), &new, &d), None);
        let nodeport = difference(
            "probe last-endpoint-terminates/nodeport-flow-again",
            &["verdict: -delivered +rejected"],
        );
        assert_eq!(
            explained(&old, &new, &nodeport),
            None,
            "v1.37 keeps NodePort flows"
        );
        let other = difference(
            "probe last-endpoint-terminates/clusterip-flow-again",
            &["verdict: -delivered +delivered-refused-by-backend"],
        );
        assert_eq!(
            explained(&old, &new, &other),
            None,
            "another kind of difference"
        );
    }

    /// A flow kept while the Service carried the headless label, continued after the label
    /// went: v1.34 never opened it, so the continuation's difference is the label's too.
    #[test]
    fn a_continuation_is_judged_by_the_labels_of_its_opening() {
        let known = KnownDifferences::bundled().expect("known-differences.yaml");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/explore/headless-label-kept-flow.yaml");
        let s = crate::scenario::load(&path).expect("the fixture loads");
        let d = difference(
            "probe s2/c-s1q1",
            &[
                "backend differs",
                "reached differs",
                "verdict: -dropped +delivered",
            ],
        );
        let (old, new) = (
            judged("kube-proxy-iptables@v1.34"),
            judged("kube-proxy-iptables"),
        );
        assert_eq!(
            known
                .explaining(&s, &old, &new, &d, None)
                .map(|k| k.id.clone()),
            Some("headless-label-on-services".to_string())
        );
    }

    #[test]
    fn a_failed_sync_is_explained_by_its_error_in_its_mode_only() {
        let known = KnownDifferences::bundled().expect("known-differences.yaml");
        let s = library("nftables-long-service-names");
        let d = difference("(run)", &["run: -failed +completed"]);
        let (old, new) = (
            judged("kube-proxy-nftables@v1.34"),
            judged("kube-proxy-nftables"),
        );
        let id = known
            .explaining(
                &s,
                &old,
                &new,
                &d,
                Some("… Error: comment too long, 128 characters …"),
            )
            .map(|k| k.id.as_str());
        assert_eq!(id, Some("nftables-long-comments"));
        assert!(known
            .explaining(&s, &old, &new, &d, Some("another error"))
            .is_none());
        let iptables = (
            judged("kube-proxy-iptables@v1.34"),
            judged("kube-proxy-iptables"),
        );
        assert!(known
            .explaining(&s, &iptables.0, &iptables.1, &d, Some("comment too long"))
            .is_none());
    }

    #[test]
    fn a_bad_file_is_refused_with_every_problem() {
        let dir = crate::netns::scratch::ScratchDir::new("known").expect("a scratch dir");
        let path = dir.path().join("known.yaml");
        std::fs::write(
            &path,
            "- {id: a, kind: release, title: t, why: w, source: s, handled: h, between: [{releases: x}], when: [nosuchtag], signature: ['(']}\n\
             - {id: a, kind: handled, title: t, why: w, source: s, handled: h}\n",
        )
        .unwrap();
        let e = KnownDifferences::read(&path).unwrap_err().to_string();
        for part in [
            "a release difference is between two sides",
            "releases: `x`",
            "unknown tag `nosuchtag`",
            "pattern `(`",
            "duplicate id",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
    }
}
