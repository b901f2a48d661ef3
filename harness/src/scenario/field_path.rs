//! Where in a scenario file something is: a field path (`services[1].spec.ports[0]`), as the
//! loader, the validator and the steps name what they report, and how a probe or an
//! expectation names an object (`namespace/name`).

use std::fmt;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A field path such as `services[1].spec.ports[0]`, with the YAML (camelCase) field names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldPath(Vec<Seg>);

impl FieldPath {
    pub(crate) fn from_segments(segments: Vec<Seg>) -> Self {
        Self(segments)
    }

    pub(crate) fn root(key: &str) -> Self {
        Self(vec![Seg::Key(key.to_owned())])
    }

    pub(crate) fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Seg::Key(key.to_owned()));
        Self(segments)
    }

    pub(crate) fn idx(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Seg::Index(index));
        Self(segments)
    }

    pub(crate) fn segments(&self) -> &[Seg] {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Seg::Key(key) if i == 0 => f.write_str(key)?,
                Seg::Key(key) => write!(f, ".{key}")?,
                Seg::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// `namespace/name` or `name` (in `default`), as probes and expectations refer to objects.
pub(crate) fn split_ref(reference: &str) -> (&str, &str) {
    reference.split_once('/').unwrap_or(("default", reference))
}

/// The field path serde_path_to_error recorded, as a scenario field path's segments.
pub(crate) fn path_segments(path: &serde_path_to_error::Path) -> Vec<Seg> {
    path.iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
            serde_path_to_error::Segment::Enum { variant } => Some(Seg::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect()
}
