//! Recording a scenario's golden snapshots without the whole suite: the observation of one run,
//! written as the pending snapshot the scenario test would write, for `cargo insta review`.

use crate::run::ScenarioRun;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Where the scenario tests keep their goldens, under the repository root.
pub const SNAPSHOT_DIR: &str = "snapshots";

/// What recording one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The golden snapshot already says exactly this.
    Unchanged(PathBuf),
    /// A pending snapshot (`.snap.new`) was written for review.
    Pending(PathBuf),
}

/// The snapshot file the scenario test (harness/tests/scenarios.rs) writes for a run of the
/// scenario file `file_name` against `proxier`: insta's header, then the observation.
pub fn snapshot_text(file_name: &str, proxier: &str, observation_yaml: &str) -> String {
    format!(
        "---\nsource: harness/tests/scenarios.rs\ndescription: scenarios/{file_name} against {proxier}\n---\n{}",
        observation_yaml.trim_end_matches('\n')
    )
}

/// The body of a snapshot file: what follows insta's `---` header.
fn body(snapshot: &str) -> Option<&str> {
    let rest = snapshot.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    Some(rest[end + "\n---\n".len()..].trim_end_matches('\n'))
}

/// Writes `run`'s observation as a pending snapshot under `repo`, unless the golden one already
/// holds it (then any stale pending one is removed).
pub fn record(repo: &Path, scenario_file: &Path, run: &ScenarioRun) -> Result<Recorded> {
    let obs = &run.observation;
    let yaml = run.observation.to_yaml()?;
    let dir = repo.join(SNAPSHOT_DIR);
    anyhow::ensure!(
        dir.is_dir(),
        "{} is not a directory: run from the repository root",
        dir.display()
    );
    let golden = dir.join(format!("{}@{}.snap", obs.scenario, obs.proxier));
    let pending = dir.join(format!("{}@{}.snap.new", obs.scenario, obs.proxier));
    let existing = std::fs::read_to_string(&golden).ok();
    if existing.as_deref().and_then(body) == Some(yaml.trim_end_matches('\n')) {
        if pending.exists() {
            std::fs::remove_file(&pending)
                .with_context(|| format!("removing {}", pending.display()))?;
        }
        return Ok(Recorded::Unchanged(golden));
    }
    let file_name = scenario_file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::write(
        &pending,
        snapshot_text(&file_name, &obs.proxier, &yaml) + "\n",
    )
    .with_context(|| format!("writing {}", pending.display()))?;
    Ok(Recorded::Pending(pending))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_what_follows_the_header() {
        let text = snapshot_text("x.yaml", "p", "a: 1\nb: 2\n");
        assert_eq!(
            text,
            "---\nsource: harness/tests/scenarios.rs\ndescription: scenarios/x.yaml against p\n---\na: 1\nb: 2"
        );
        assert_eq!(body(&text), Some("a: 1\nb: 2"));
        let with_line = "---\nsource: s\nassertion_line: 31\ndescription: d\n---\na: 1\n";
        assert_eq!(body(with_line), Some("a: 1"));
        assert_eq!(body("no header"), None);
    }
}
