//! Field selectors, parsed as apimachinery's pkg/fields/selector.go `ParseSelector` does and
//! checked against the fields each kind lets a selector use.

use crate::resources::Kind;
use serde_json::Value;

/// One `field=value` / `field!=value` term.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldTerm {
    field: &'static str,
    value: String,
    negated: bool,
}

/// A parsed field selector, its fields checked against the kind's selectable fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<FieldTerm>);

/// Splits on unescaped commas (fields.splitTerms).
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            out.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {c}"
                ))
            }
            _ => out.push(c),
        }
    }
    if escaped {
        return Err("invalid field selector: invalid escape sequence: \\".into());
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses `s` without looking at the fields: the syntax check of parameter decoding.
    fn parse_terms(s: &str) -> Result<Vec<(&str, String, bool)>, String> {
        let mut parts: Vec<&str> = if s.is_empty() {
            Vec::new()
        } else {
            split_terms(s)
        };
        parts.sort_unstable();
        let mut raw = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            // The first operator from the left; at one position `!=` and `==` before `=`.
            // At character boundaries only: a selector may hold any UTF-8.
            let split = part.char_indices().map(|(i, _)| i).find_map(|i| {
                ["!=", "==", "="]
                    .into_iter()
                    .find(|op| part[i..].starts_with(op))
                    .map(|op| (i, op))
            });
            let Some((i, op)) = split else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let value = unescape(&part[i + op.len()..])?;
            raw.push((&part[..i], value, op == "!="));
        }
        Ok(raw)
    }

    /// 400 when `s` is not a field selector at all (checked before the list options are
    /// validated, as DecodeParameters does).
    pub(crate) fn check_syntax(s: &str) -> Result<(), String> {
        Self::parse_terms(s).map(|_| ())
    }

    /// Parses `s` and converts its fields for `kind` (400 "field label not supported", as
    /// listOpts' Transform does).
    pub(crate) fn parse(s: &str, kind: Kind) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for (field, value, negated) in Self::parse_terms(s)? {
            let field = kind.convert_field_label(field)?;
            terms.push(FieldTerm {
                field,
                value,
                negated,
            });
        }
        Ok(FieldSelector(terms))
    }

    /// `metadata.name=NAME`: how a request for one object is narrowed.
    pub(crate) fn name(name: &str) -> FieldSelector {
        FieldSelector(vec![FieldTerm {
            field: "metadata.name",
            value: name.to_string(),
            negated: false,
        }])
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value `field` must equal, if the selector pins it (RequiresExactMatch).
    pub(crate) fn exact(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }

    pub(crate) fn matches(&self, kind: Kind, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|t| (kind.field_value(obj, t.field) == t.value) != t.negated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_selectors_use_the_kinds_fields() {
        let headless =
            json!({"metadata": {"name": "h", "namespace": "d"}, "spec": {"clusterIP": "None"}});
        let plain =
            json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"clusterIP": "10.0.0.1"}});
        let f = FieldSelector::parse("spec.clusterIP!=None", Kind::Service).unwrap();
        assert!(!f.matches(Kind::Service, &headless));
        assert!(f.matches(Kind::Service, &plain));
        let f =
            FieldSelector::parse("metadata.name=p,metadata.namespace==d", Kind::Service).unwrap();
        assert!(f.matches(Kind::Service, &plain) && !f.matches(Kind::Service, &headless));
        assert_eq!(f.exact("metadata.name"), Some("p"));
        let node = json!({"metadata": {"name": "node-a"}});
        assert!(FieldSelector::parse("metadata.name=node-a", Kind::Node)
            .unwrap()
            .matches(Kind::Node, &node));
        assert!(FieldSelector::parse("", Kind::Node).unwrap().is_empty());
    }

    #[test]
    fn bad_field_selectors_are_rejected() {
        for (s, want) in [
            ("spec.ports=1", "field label not supported: spec.ports"),
            (
                "metadata.name",
                "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
            ),
            ("metadata.name=a=b", "unescaped character in value: ="),
            ("metadata.name=a\\x", "invalid escape sequence: \\x"),
        ] {
            let err = FieldSelector::parse(s, Kind::Service).unwrap_err();
            assert!(err.contains(want), "{s}: {err}");
        }
        let escaped = FieldSelector::parse("metadata.name=a\\,b", Kind::Service).unwrap();
        assert_eq!(escaped.exact("metadata.name"), Some("a,b"));
    }
}
