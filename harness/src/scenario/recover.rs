//! Deserialization that goes on past a bad value, so a file with several typos reports all of
//! them at once.
//!
//! serde stops at the first error. After it, the text is read again as a YAML tree, the bad
//! node is set aside (an unknown key removed, a bad scalar replaced by a stand-in of a type the
//! field accepts, a missing field given one) and deserialization is retried, until it succeeds
//! or a node cannot be stood in for. The stand-ins are only there to reach the rest of the file:
//! the paths they occupy are returned so semantic checks there (which would judge a stand-in)
//! are dropped.

use super::field_path::Seg;
use super::model::Scenario;
use serde_yaml_ng::{Mapping, Value};

/// At most this many problems from one file: beyond it, the file is not a scenario at all.
const MAX_PROBLEMS: usize = 100;

/// A problem serde raised, with the path of the node it concerns.
#[derive(Debug)]
pub(super) struct SerdeProblem {
    pub(super) segments: Vec<Seg>,
    pub(super) error: serde_yaml_ng::Error,
}

/// What deserialization produced: the scenario (with stand-ins where values were bad), every
/// problem found, and the paths that hold stand-ins.
pub(super) struct Outcome {
    pub(super) scenario: Option<Scenario>,
    pub(super) problems: Vec<SerdeProblem>,
    pub(super) stand_ins: Vec<Vec<Seg>>,
}

pub(super) fn deserialize(text: &str) -> Outcome {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let first = match serde_path_to_error::deserialize::<_, Scenario>(de) {
        Ok(scenario) => {
            return Outcome {
                scenario: Some(scenario),
                problems: Vec::new(),
                stand_ins: Vec::new(),
            }
        }
        Err(err) => problem(err),
    };
    let mut outcome = Outcome {
        scenario: None,
        problems: vec![first],
        stand_ins: Vec::new(),
    };
    // A syntax error leaves no tree to go on with.
    let Ok(mut tree) = serde_yaml_ng::from_str::<Value>(text) else {
        return outcome;
    };
    // An error at a stand-in put there earlier is not the file's: the stand-in was tried
    // while an earlier node was still bad, and then did not fit. It is tried again.
    let mut at_stand_in: Option<(Vec<Seg>, SerdeProblem)> = None;
    // The paths of values put in the tree (stand-ins), as opposed to mappings that lost a key.
    let mut values: Vec<Vec<Seg>> = Vec::new();
    for _ in 0..MAX_ATTEMPTS {
        if outcome.problems.len() >= MAX_PROBLEMS {
            break;
        }
        let (retry, a_value) = match at_stand_in.take() {
            Some((path, own)) => (
                stand_in(&mut tree, &path, &own.error.to_string()).map(|next| (path, next)),
                true,
            ),
            None => match outcome.problems.last() {
                Some(last) => (
                    set_aside(&mut tree, last),
                    quoted_after(&last.error.to_string(), "unknown field `").is_none(),
                ),
                None => (None, false),
            },
        };
        let Some((stand_in, next)) = retry else {
            break;
        };
        // A mapping that lost an unknown key holds the file's own values still.
        if a_value && !values.contains(&stand_in) {
            values.push(stand_in.clone());
        }
        if !outcome.stand_ins.contains(&stand_in) {
            outcome.stand_ins.push(stand_in);
        }
        match next {
            Ok(scenario) => {
                outcome.scenario = Some(scenario);
                break;
            }
            Err(next) => {
                let own = values
                    .iter()
                    .find(|path| next.segments.starts_with(path))
                    .cloned();
                match own {
                    Some(path) => at_stand_in = Some((path, next)),
                    None => outcome.problems.push(next),
                }
            }
        }
    }
    outcome
}

/// At most this many retries of one file: each sets a node aside or tries a stand-in again.
const MAX_ATTEMPTS: usize = 1000;

fn problem(err: serde_path_to_error::Error<serde_yaml_ng::Error>) -> SerdeProblem {
    let segments = super::field_path::path_segments(err.path());
    SerdeProblem {
        segments,
        error: err.into_inner(),
    }
}

fn attempt(tree: &Value) -> Result<Scenario, SerdeProblem> {
    serde_path_to_error::deserialize::<_, Scenario>(tree).map_err(problem)
}

/// Sets the node of `p` aside and deserializes again. Returns the path not to judge further
/// (the stand-in, or the mapping that lost a key) and the next result, or `None` when nothing
/// gets past `p`.
type Retry = (Vec<Seg>, Result<Scenario, SerdeProblem>);

fn set_aside(tree: &mut Value, p: &SerdeProblem) -> Option<Retry> {
    let message = p.error.to_string();
    if let Some(key) = quoted_after(&message, "unknown field `") {
        let (last, parent) = p.segments.split_last()?;
        if *last != Seg::Key(key.to_owned()) {
            return None;
        }
        // A key that is not there to remove (a tagged key, `! ports:`, reads as `ports` but
        // is another value) leaves nothing to retry: the same problem would come back.
        if !remove_key(node_mut(tree, parent)?.as_mapping_mut()?, key) {
            return None;
        }
        // The key is likely a misspelt field (`nodeport`), so what the mapping then lacks is
        // the typo's echo, not a second problem.
        return Some((parent.to_vec(), attempt(tree)));
    }
    if let Some(key) = quoted_after(&message, "missing field `") {
        let mut path = p.segments.clone();
        path.push(Seg::Key(key.to_owned()));
        node_mut(tree, &p.segments)?
            .as_mapping_mut()?
            .insert(Value::String(key.to_owned()), Value::Null);
        return stand_in(tree, &path, &message).map(|next| (path, next));
    }
    stand_in(tree, &p.segments, &message).map(|next| (p.segments.clone(), next))
}

/// Removes `key` from `mapping`, also when written with a tag (`!tag key:`); whether it was
/// there.
fn remove_key(mapping: &mut Mapping, key: &str) -> bool {
    let found = mapping.keys().find(|k| {
        let untagged = match k {
            Value::Tagged(tagged) => &tagged.value,
            other => other,
        };
        untagged.as_str() == Some(key)
    });
    match found.cloned() {
        Some(k) => mapping.remove(&k).is_some(),
        None => false,
    }
}

/// Tries stand-ins at `path` until the error there goes away.
fn stand_in(
    tree: &mut Value,
    path: &[Seg],
    message: &str,
) -> Option<Result<Scenario, SerdeProblem>> {
    for candidate in candidates(message) {
        *node_mut(tree, path)? = candidate;
        match attempt(tree) {
            Ok(scenario) => return Some(Ok(scenario)),
            Err(next) if !next.segments.starts_with(path) => return Some(Err(next)),
            Err(_) => {}
        }
    }
    None
}

/// Values of every shape the schema's leaves take: the first variant an enum error offers,
/// then an address, a CIDR, a number, a flag, a name, a port range, nothing, empty collections.
fn candidates(message: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(variant) =
        quoted_after(message, "expected one of `").or_else(|| quoted_after(message, "expected `"))
    {
        out.push(Value::String(variant.to_owned()));
    }
    out.extend([
        Value::String("0.0.0.0".into()),
        Value::String("0.0.0.0/32".into()),
        Value::Number(1.into()),
        Value::Bool(false),
        Value::String("x".into()),
        Value::String("1-2".into()),
        Value::Null,
        Value::Mapping(Mapping::new()),
        Value::Sequence(Vec::new()),
    ]);
    out
}

fn quoted_after<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let start = message.find(prefix)? + prefix.len();
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

/// The scalar at `path` in `text`, as written, for messages that must quote it.
pub(super) fn scalar_at(text: &str, path: &[Seg]) -> Option<String> {
    let mut tree = serde_yaml_ng::from_str::<Value>(text).ok()?;
    match node_mut(&mut tree, path)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn node_mut<'t>(tree: &'t mut Value, path: &[Seg]) -> Option<&'t mut Value> {
    path.iter().try_fold(tree, |node, seg| match seg {
        Seg::Key(key) => node.as_mapping_mut()?.get_mut(key.as_str()),
        Seg::Index(i) => node.as_sequence_mut()?.get_mut(*i),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_names_are_read_from_serde_messages() {
        assert_eq!(
            quoted_after(
                "unknown field `nodeport`, expected one of `name`",
                "unknown field `"
            ),
            Some("nodeport")
        );
        assert_eq!(
            quoted_after(
                "unknown variant `tcp`, expected one of `TCP`, `UDP`",
                "expected one of `"
            ),
            Some("TCP")
        );
        assert_eq!(quoted_after("invalid type", "missing field `"), None);
    }

    #[test]
    fn nodes_are_found_by_path() {
        let mut tree: Value = serde_yaml_ng::from_str("a:\n  - {b: 1}\n  - {b: 2}\n").unwrap();
        let path = [Seg::Key("a".into()), Seg::Index(1), Seg::Key("b".into())];
        assert_eq!(
            node_mut(&mut tree, &path),
            Some(&mut Value::Number(2.into()))
        );
        assert_eq!(node_mut(&mut tree, &[Seg::Key("z".into())]), None);
    }

    /// A tagged unknown key (`!tag ports:`) is reported once, at its line, and the rest of the
    /// file is still read (it was reported a hundred times, without a line: found by fuzzing).
    #[test]
    fn a_tagged_unknown_key_is_reported_once_where_it_is() {
        let text = "name: x\n!tag ports: [1]\ntopology: {underlay: 192.168.1.0/24, nodes: []}\nservices: [{nam: web}]\n";
        let e = crate::scenario::parse(text, "t.yaml").unwrap_err();
        let shown: Vec<String> = e.problems().iter().map(|p| p.to_string()).collect();
        let ports: Vec<&String> = shown.iter().filter(|p| p.contains("`ports`")).collect();
        assert_eq!(ports.len(), 1, "{shown:#?}");
        assert!(ports[0].starts_with("t.yaml:2:"), "{shown:#?}");
        assert!(
            shown
                .iter()
                .any(|p| p.starts_with("t.yaml:4:") && p.contains("`nam`")),
            "{shown:#?}"
        );
    }
}
