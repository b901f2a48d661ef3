//! `*sysctl`: `net.*` keys and values.

use super::*;

/// `key=value` lines (`key = value`, as `sysctl -a` prints, too), each key once.
pub(crate) fn parse_sysctl_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<BTreeMap<String, String>, TextError> {
    let mut sysctls = BTreeMap::new();
    for (lineno, line) in body {
        let err = |message| TextError {
            origin: origin.to_string(),
            line: *lineno,
            message,
        };
        let (key, value) = parse_sysctl_line(line).map_err(err)?;
        let item = Item::Sysctl { key: key.clone() };
        if let Some(first) = sources.get(&item) {
            return Err(err(format!(
                "sysctl `{key}` is set twice (also line {})",
                first.line
            )));
        }
        sources.insert(
            item,
            Origin {
                file: origin.to_string(),
                line: *lineno,
            },
        );
        sysctls.insert(key, value);
    }
    Ok(sysctls)
}

pub(super) fn parse_sysctl_line(line: &str) -> Result<(String, String), String> {
    let (key, value) = line
        .split_once('=')
        .ok_or_else(|| format!("`{}` is not `key=value`", crate::quote::quote(line)))?;
    let (key, value) = (key.trim(), value.trim());
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !key_ok {
        return Err(format!("malformed sysctl name `{key}`"));
    }
    if !key.starts_with("net.") {
        return Err(format!(
            "sysctl `{key}` is not per network namespace (only net.* keys are allowed)"
        ));
    }
    if value.is_empty() {
        return Err(format!("sysctl `{key}` has no value"));
    }
    Ok((key.to_string(), value.to_string()))
}
