//! `*ipset`: `ipset save` lines.

use super::*;

/// Parses `ipset save` lines (`create`/`add`); also used for a replay's `ipset-save` file.
pub(crate) fn parse_ipset_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<IpSet>, TextError> {
    let mut sets: Vec<IpSet> = Vec::new();
    for &(lineno, line) in body {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let command = words.first().copied().unwrap_or_default();
        let name = words.get(1).copied();
        match command {
            "create" => {
                let name = name.ok_or_else(|| err("`create` without a set name".into()))?;
                let type_name = words
                    .get(2)
                    .copied()
                    .ok_or_else(|| err(format!("set {name} has no type")))?;
                let set_type = IpSetType::from_name(type_name).ok_or_else(|| {
                    err(format!(
                        "unknown ipset type `{type_name}` for set {name} (supported: {})",
                        IpSetType::ALL
                            .iter()
                            .map(|t| t.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                if sets.iter().any(|s| s.name == name) {
                    return Err(err(format!("set {name} created twice")));
                }
                sources.insert(Item::Set { set: sets.len() }, at(origin, lineno));
                sets.push(IpSet {
                    name: name.to_string(),
                    set_type,
                    create_options: words[3..].join(" "),
                    entries: Vec::new(),
                });
            }
            "add" => {
                let name = name.ok_or_else(|| err("`add` without a set name".into()))?;
                if words.len() < 3 {
                    return Err(err(format!("`add {name}` without an entry")));
                }
                let index = sets.iter().position(|s| s.name == name).ok_or_else(|| {
                    err(format!(
                        "entry for set {name}, which no earlier `create` line defines"
                    ))
                })?;
                let set = &mut sets[index];
                sources.insert(
                    Item::SetEntry {
                        set: index,
                        entry: set.entries.len(),
                    },
                    at(origin, lineno),
                );
                set.entries.push(words[2..].join(" "));
            }
            other => {
                return Err(err(format!(
                    "unsupported ipset command `{other}` (only `create` and `add`)"
                )))
            }
        }
    }
    Ok(sets)
}

/// `ipset save` lines for the sets.
pub fn render_ipsets(sets: &[IpSet]) -> String {
    let mut out = String::new();
    for s in sets {
        let _ = write!(out, "create {} {}", s.name, s.set_type.name());
        if !s.create_options.is_empty() {
            let _ = write!(out, " {}", s.create_options);
        }
        out.push('\n');
        for e in &s.entries {
            let _ = writeln!(out, "add {} {e}", s.name);
        }
    }
    out
}
