//! What a scenario file of the library must be beyond valid: the rules `kpct validate` and the
//! library's own test hold every file to. A file that breaks them still runs.

use super::load::{locate, Problem};
use super::model::Scenario;
use super::validate::Seg;
use std::path::Path;

/// Every way `scenario`, read from `path` whose text is `text`, breaks the library's rules.
pub fn conventions(path: &Path, text: &str, scenario: &Scenario) -> Vec<Problem> {
    let origin = path.display().to_string();
    let problem = |field: &str, message: String| Problem {
        origin: origin.clone(),
        location: if field.is_empty() {
            Some((1, 1))
        } else {
            locate(text, &[Seg::Key(field.to_owned())])
        },
        path: field.to_owned(),
        message,
    };
    let mut out = Vec::new();
    if !text.starts_with('#') {
        out.push(problem(
            "",
            "the file must start with a comment saying what it checks and where that is specified"
                .into(),
        ));
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if scenario.name != stem {
        out.push(problem(
            "name",
            format!(
                "name `{}` differs from the file name `{stem}`: snapshots are named after the scenario",
                scenario.name
            ),
        ));
    }
    if scenario.description.trim().is_empty() {
        out.push(problem(
            "description",
            "a one-line description is required (the README's scenario table shows it)".into(),
        ));
    }
    // The scenario tests route these by file name to a kernel that has the feature.
    if scenario.uses_sctp() != stem.starts_with("sctp-") {
        out.push(problem(
            "name",
            "a scenario that uses SCTP (probes or pod ports) is named `sctp-*`, and only it: the \
             tests run those where the kernel has SCTP"
                .into(),
        ));
    }
    if scenario.has_existing_ipvs() != stem.starts_with("ipvs-existing-") {
        out.push(problem(
            "name",
            "a scenario with `existingIPVS` is named `ipvs-existing-*`, and only it: the tests \
             run those where the kernel has IP_VS, in iptables mode too"
                .into(),
        ));
    }
    out
}
