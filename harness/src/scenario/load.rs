//! Reading a scenario file: YAML text to a validated [`Scenario`].
//!
//! Every problem is reported as `file:line:column: field.path: message`, one line each, so an
//! operator can jump straight to the offending line. serde_yaml_ng keeps no spans in its values,
//! so lines of semantic problems are found by re-reading the text (see [`locate`]).

use super::field_path::{FieldPath, Seg};
use super::model::{Scenario, IPV4_FORM};
use super::recover::{self, SerdeProblem};
use super::validate::{self, KnownProxiers};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::path::Path;

/// One problem in a scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or other origin) the text came from.
    pub origin: String,
    /// 1-based line and column, when the problem could be placed in the text.
    pub location: Option<(usize, usize)>,
    /// The field path, e.g. `services[1].spec.ports[0].targetPort`; empty for the whole file.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some((line, column)) = self.location {
            write!(f, ":{line}:{column}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{origin}: cannot read scenario file: {cause}")]
    Read {
        origin: String,
        /// Shown in the message, so not a `source()` too: `{:#}` would print it twice.
        cause: crate::input_file::InputError,
    },
    /// The file does not parse, or parses into a scenario that cannot describe a real cluster.
    #[error("{}", one_per_line(.problems))]
    Invalid { problems: Vec<Problem> },
}

impl ScenarioError {
    /// The individual problems (empty for a read error).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ScenarioError::Read { .. } => &[],
            ScenarioError::Invalid { problems } => problems,
        }
    }
}

fn one_per_line(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads, parses and validates a scenario file; `name` defaults to the file stem.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    load_for(path, KnownProxiers::Any)
}

/// [`load`], with `expectFor` keys checked against the proxiers of a run.
pub fn load_for(path: &Path, known: KnownProxiers<'_>) -> Result<Scenario, ScenarioError> {
    let origin = path.display().to_string();
    let text = crate::input_file::read_text(path, crate::input_file::SCENARIO_LIMIT, "scenario")
        .map_err(|cause| ScenarioError::Read {
            origin: origin.clone(),
            cause,
        })?;
    parse_for(&text, &origin, known)
}

/// Parses and validates scenario text. `origin` names the text in messages (usually the file
/// path); its stem becomes the scenario name when the file sets none.
pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
    parse_for(text, origin, KnownProxiers::Any)
}

/// [`parse`], with `expectFor` keys checked against the proxiers of a run.
pub fn parse_for(
    text: &str,
    origin: &str,
    known: KnownProxiers<'_>,
) -> Result<Scenario, ScenarioError> {
    let outcome = recover::deserialize(text);
    let mut problems: Vec<Problem> = outcome
        .problems
        .iter()
        .map(|p| serde_problem(text, origin, p))
        .collect();
    let Some(mut scenario) = outcome.scenario else {
        return Err(ScenarioError::Invalid { problems });
    };
    if scenario.name.is_empty() {
        scenario.name = Path::new(origin)
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    // A check at a stand-in would judge the stand-in, not the file.
    let issues = validate::check(&scenario, known)
        .into_iter()
        .filter(|issue| {
            !outcome
                .stand_ins
                .iter()
                .any(|stand_in| starts_with_fields(issue.path.segments(), stand_in))
        });
    problems.extend(issues.map(|issue| Problem {
        origin: origin.to_owned(),
        location: locate(text, issue.path.segments()),
        path: issue.path.to_string(),
        message: issue.message,
    }));
    if problems.is_empty() {
        return Ok(scenario);
    }
    // Reading order is what an operator fixing the file wants; checks run in a different order.
    problems.sort_by_key(|p| p.location.unwrap_or((usize::MAX, usize::MAX)));
    Err(ScenarioError::Invalid { problems })
}

/// Validates a scenario built in code (no text, so no line numbers).
pub fn validate(scenario: &Scenario) -> Result<(), ScenarioError> {
    let problems: Vec<Problem> = validate::check(scenario, KnownProxiers::Any)
        .into_iter()
        .map(|issue| Problem {
            origin: scenario.name.clone(),
            location: None,
            path: issue.path.to_string(),
            message: issue.message,
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ScenarioError::Invalid { problems })
    }
}

/// Whether `path` (a check's, in field names) lies at or under `file_path` (serde's, as the
/// file spells the keys, perhaps by an alias).
fn starts_with_fields(path: &[Seg], file_path: &[Seg]) -> bool {
    path.len() >= file_path.len()
        && path
            .iter()
            .zip(file_path)
            .all(|(seg, file_seg)| match (seg, file_seg) {
                (Seg::Key(field), Seg::Key(key)) => spells(key, field),
                _ => seg == file_seg,
            })
}

/// Where a serde problem is and what it says, in the file's terms.
fn serde_problem(text: &str, origin: &str, p: &SerdeProblem) -> Problem {
    let segments = &p.segments;
    let mut message = clean_message(&p.error.to_string(), p.error.location());
    // std's address parser says only that the syntax is wrong; the usual cause is a leading
    // zero (`10.0.0.010`), which it refuses because other parsers read it as octal.
    if message == "invalid IPv4 address syntax" {
        if let Some(value) = recover::scalar_at(text, segments) {
            message = format!("`{value}` is not an IPv4 address ({IPV4_FORM})");
        }
    }
    // The message names an unknown key already; the path names where it was found.
    let path_len = if message.starts_with("unknown field `") {
        segments.len().saturating_sub(1)
    } else {
        segments.len()
    };
    let path = FieldPath::from_segments(segments[..path_len].to_vec());
    // serde_yaml_ng marks the node whose `deserialize_*` call was running: the field itself
    // for type errors, but the enclosing mapping for errors raised by a `Deserialize` impl
    // after reading the field (a bad CIDR), and the point past the field for syntax errors.
    // The mark never lies before the field's node, so the later of the two positions is the
    // precise one. Problems found in the re-read tree carry no mark.
    let marked = p.error.location().map(|l| (l.line(), l.column()));
    let located = locate_exact(text, segments);
    let location = marked.max(located).or_else(|| locate(text, segments));
    Problem {
        origin: origin.to_owned(),
        location,
        path: path.to_string(),
        message,
    }
}

/// Strips what the `file:line:column: path:` prefix already says from a serde_yaml_ng message,
/// and rewords the one serde message that names a Rust type instead of the YAML expected.
fn clean_message(message: &str, location: Option<serde_yaml_ng::Location>) -> String {
    let mut message = message.to_owned();
    if let Some(l) = location {
        let mark = format!(" at line {} column {}", l.line(), l.column());
        if let Some(pos) = message.find(&mark) {
            message.replace_range(pos..pos + mark.len(), "");
        }
    }
    if let Some((head, rest)) = message.split_once(": ") {
        let looks_like_path = !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._[]?-".contains(c));
        if looks_like_path {
            message = rest.to_owned();
        }
    }
    if message.starts_with("data did not match any variant of untagged enum TargetPort") {
        return "expected a port number (1-65535) or a port name".to_owned();
    }
    // Every u16 in the schema is a port; name what is expected in YAML terms, not Rust types.
    for (rust, yaml) in [
        ("expected u16", "expected a port number (1-65535)"),
        ("expected u32", "expected a non-negative integer"),
    ] {
        if let Some(head) = message.strip_suffix(rust) {
            return format!("{head}{yaml}");
        }
    }
    message
}

/// Line and column (1-based) of the node at `path` in the YAML text: of the key for a mapping
/// entry, of the item for a sequence element. Falls back to the nearest ancestor that exists
/// (a missing field is reported where its parent is).
pub(crate) fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    (1..=path.len())
        .rev()
        .find_map(|len| locate_exact(text, &path[..len]))
}

/// Carried by the error the locating walk raises on reaching its target; the deserializer stamps
/// that error with the position of the node it was reading, which is the position sought.
const FOUND: &str = "kpct: located";

fn locate_exact(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match (Walk { path }).deserialize(de) {
        Err(err) if err.to_string().contains(FOUND) => {
            err.location().map(|l| (l.line(), l.column()))
        }
        _ => None,
    }
}

/// Descends along `path`; fails with [`FOUND`] at the target, succeeds if it is absent.
struct Walk<'p> {
    path: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        self.tagged(data)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let mut index = 0;
        loop {
            let found = if *first == Seg::Index(index) {
                seq.next_element_seed(Walk { path: rest })?
            } else {
                seq.next_element::<IgnoredAny>()?.map(|_| ())
            };
            if found.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let wanted = match first {
            Seg::Key(key) => Some(key.as_str()),
            Seg::Index(_) => None,
        };
        // The key itself is the target when the path ends here, so its mark is reported.
        let fail_on = if rest.is_empty() { wanted } else { None };
        while let Some(key) = map.next_key_seed(Key { fail_on })? {
            if wanted.is_some_and(|w| spells(&key, w)) {
                map.next_value_seed(Walk { path: rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl Walk<'_> {
    /// A tagged node (`!tag value`): serde reads it as an enum, the tag its variant; the walk
    /// goes on in its content.
    fn tagged<'de, A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let (_, content) = data.variant::<IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(content, self)
    }

    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.path.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

/// Whether `key` in the file is `field`, under its name or its alias.
fn spells(key: &str, field: &str) -> bool {
    key == field
        || crate::scenario::model::ALIASES
            .iter()
            .any(|&(name, alias)| name == field && alias == key)
}

/// A mapping key as text; fails with [`FOUND`] when it spells `fail_on`.
struct Key<'k> {
    fail_on: Option<&'k str>,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        if self.fail_on.is_some_and(|f| spells(v, f)) {
            Err(E::custom(FOUND))
        } else {
            Ok(v.to_owned())
        }
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(String::new())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(String::new())
    }
    /// A tagged key (`!tag ports:`): serde reads it as an enum, the tag its variant; the key
    /// is its content.
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<String, A::Error> {
        let (_, content) = data.variant::<IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(content, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
a:
  b: 1
  list:
    - x: 1
      y: [1, 2]
    - {x: 2, z: 3}
c: hello
";

    fn at(path: &[Seg]) -> Option<(usize, usize)> {
        locate(TEXT, path)
    }

    fn k(s: &str) -> Seg {
        Seg::Key(s.to_owned())
    }

    #[test]
    fn locates_keys_items_and_flow_nodes() {
        assert_eq!(at(&[k("a")]), Some((1, 1)));
        assert_eq!(at(&[k("a"), k("b")]), Some((2, 3)));
        assert_eq!(at(&[k("a"), k("list"), Seg::Index(0)]), Some((4, 7)));
        assert_eq!(
            at(&[k("a"), k("list"), Seg::Index(0), k("y")]),
            Some((5, 7))
        );
        assert_eq!(
            at(&[k("a"), k("list"), Seg::Index(0), k("y"), Seg::Index(1)]),
            Some((5, 14))
        );
        assert_eq!(
            at(&[k("a"), k("list"), Seg::Index(1), k("z")]),
            Some((6, 14))
        );
        assert_eq!(at(&[k("c")]), Some((7, 1)));
    }

    #[test]
    fn missing_nodes_fall_back_to_their_parent() {
        assert_eq!(at(&[k("a"), k("nope")]), Some((1, 1)));
        assert_eq!(at(&[k("a"), k("list"), Seg::Index(7)]), Some((3, 3)));
        assert_eq!(at(&[k("zzz")]), None);
    }
}
