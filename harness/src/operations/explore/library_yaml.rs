//! A scenario written as the library writes one: no field at its default, so a shrunk finding
//! reads like a hand-written file (and reads back as the same scenario).

use crate::scenario::{ProxierOptions, Scenario};
use anyhow::{Context, Result};
use serde_yaml_ng::{Mapping, Value};

/// Fields left out wherever they hold this value (the format's defaults).
const DEFAULTS: &[(&str, &str)] = &[
    ("namespace", "default"),
    ("repeat", "1"),
    ("external", "false"),
    ("restartProxier", "false"),
    ("waitSeconds", "0"),
    ("protocol", "TCP"),
    ("type", "ClusterIP"),
    ("sessionAffinity", "None"),
    ("description", ""),
    ("serviceNodePortRange", "30000-32767"),
];

/// Lists the format requires even when empty (a slice with no endpoints, a Service or slice
/// with no ports).
const REQUIRED: &[&str] = &["endpoints", "ports"];

/// `scenario` as YAML, `comment` (each line prefixed `# `) above it.
pub fn library_yaml(scenario: &Scenario, comment: &str) -> Result<String> {
    let mut value = serde_yaml_ng::to_value(scenario).context("writing the scenario")?;
    if let Value::Mapping(map) = &mut value {
        strip_default_options(map)?;
    }
    let value = pruned(value).unwrap_or(Value::Null);
    let body = serde_yaml_ng::to_string(&value).context("writing the scenario")?;
    let mut out = String::new();
    for line in comment.lines() {
        out.push_str(if line.is_empty() { "#" } else { "# " });
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&body);
    Ok(out)
}

/// `proxier:` without the options at their defaults (some default to true, so no rule over
/// the value alone could tell).
fn strip_default_options(map: &mut Mapping) -> Result<()> {
    let defaults = serde_yaml_ng::to_value(ProxierOptions::default())?;
    let key = Value::String("proxier".into());
    if let (Some(Value::Mapping(options)), Value::Mapping(defaults)) = (map.get_mut(&key), defaults)
    {
        options.retain(|k, v| defaults.get(k) != Some(v));
    }
    Ok(())
}

/// `value` without nulls, empty lists and maps, and fields at their defaults; `None` when
/// nothing is left.
fn pruned(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Sequence(items) => {
            let items: Vec<Value> = items.into_iter().filter_map(pruned).collect();
            (!items.is_empty()).then_some(Value::Sequence(items))
        }
        Value::Mapping(map) => {
            let mut out = Mapping::new();
            for (k, v) in map {
                let at_default = match (&k, &v) {
                    (Value::String(key), v) => DEFAULTS.iter().any(|(name, default)| {
                        name == key && scalar_text(v).as_deref() == Some(*default)
                    }),
                    _ => false,
                };
                if at_default {
                    continue;
                }
                // A label's value may be empty (`service.kubernetes.io/headless: ""`): kept.
                if let (Value::String(_), Value::String(s)) = (&k, &v) {
                    if s.is_empty() {
                        out.insert(k, v);
                        continue;
                    }
                }
                let required = matches!(&k, Value::String(key) if REQUIRED.contains(&key.as_str()));
                match pruned(v) {
                    Some(v) => {
                        out.insert(k, v);
                    }
                    None if required => {
                        out.insert(k, Value::Sequence(Vec::new()));
                    }
                    None => {}
                }
            }
            (!out.is_empty()).then_some(Value::Mapping(out))
        }
        other => Some(other),
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::explore::generate::Generator;

    /// A generated case written in the library's form reads back as the same scenario.
    #[test]
    fn the_library_form_reads_back_as_the_same_scenario() {
        let g = Generator::default();
        for case in 0..300 {
            let s = g.case(3, case);
            let text = library_yaml(&s, "a comment\n\nwith lines").unwrap();
            assert!(text.starts_with("# a comment\n#\n# with lines\n"), "{text}");
            assert!(!text.contains(": null"), "{text}");
            let back = crate::scenario::parse(&text, "case.yaml")
                .unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
            assert_eq!(back, s, "case {case}:\n{text}");
        }
    }
}
