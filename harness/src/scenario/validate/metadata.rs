//! Checks of object metadata as the API server makes them (k8s.io/apimachinery
//! pkg/api/validation objectmeta.go `ValidateLabels` and `ValidateAnnotations`, with the
//! `IsLabelKey` / `IsLabelValue` rules of pkg/api/validate/content kube.go): label keys and
//! annotation keys are qualified names (an optional DNS subdomain prefix and `/`, then a name of
//! at most 63 alphanumerics, `-`, `_` and `.`, starting and ending with an alphanumeric), label
//! values at most 63 such characters or empty, and all annotations together at most 256 KiB.

use super::{Checker, FieldPath};
use std::collections::BTreeMap;

/// `TotalAnnotationSizeLimitB`: the bytes all of an object's annotation keys and values may
/// take together.
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// `labelKeyMaxLength`, `LabelValueMaxLength`.
const NAME_MAX: usize = 63;

/// `DNS1123SubdomainMaxLength`.
const SUBDOMAIN_MAX: usize = 253;

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: a label key's name part, a non-empty value.
fn is_label_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
}

/// `IsDNS1123Subdomain`: lower-case alphanumerics, `-` and `.`, starting and ending with an
/// alphanumeric, at most 253 characters.
fn subdomain_problem(s: &str) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if s.len() > SUBDOMAIN_MAX {
        return Some(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    let ok = s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || c == '-' || c == '.');
    (!ok).then(|| {
        "must be a lowercase RFC 1123 subdomain (lower-case alphanumerics, '-' and '.', \
         starting and ending with an alphanumeric, e.g. 'example.com')"
            .to_owned()
    })
}

/// `IsLabelKey` (alias `IsQualifiedName`): what is wrong with `key`, if anything.
pub(super) fn label_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let name = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else if let Some(p) = subdomain_problem(prefix) {
                problems.push(format!("prefix part {p}"));
            }
            name
        }
        _ => {
            return vec![
                "a qualified name is a name with an optional DNS subdomain prefix and one '/' \
                 (e.g. 'example.com/MyName')"
                    .to_owned(),
            ]
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > NAME_MAX {
        problems.push(format!(
            "name part must be no more than {NAME_MAX} characters"
        ));
    } else if !is_label_name(name) {
        problems.push(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character (e.g. 'MyName', 'my.name', '123-abc')"
                .to_owned(),
        );
    }
    problems
}

/// `IsLabelValue`: what is wrong with `value`, if anything.
pub(super) fn label_value_problems(value: &str) -> Vec<String> {
    if value.len() > NAME_MAX {
        return vec![format!("must be no more than {NAME_MAX} characters")];
    }
    if !value.is_empty() && !is_label_name(value) {
        return vec![
            "a label value must be empty or consist of alphanumeric characters, '-', '_' or \
             '.', and must start and end with an alphanumeric character (e.g. 'MyValue', \
             'my_value', '12345')"
                .to_owned(),
        ];
    }
    Vec::new()
}

impl Checker<'_> {
    /// `metadata.labels` at `path` (each problem at its key).
    pub(super) fn labels(&mut self, path: &FieldPath, labels: &BTreeMap<String, String>) {
        for (key, value) in labels {
            let at = path.key(key);
            let quoted = crate::quote::quote(key);
            for problem in label_key_problems(key) {
                self.err(at.clone(), format!("label key `{quoted}`: {problem}"));
            }
            for problem in label_value_problems(value) {
                self.err(
                    at.clone(),
                    format!(
                        "label value `{}` of `{quoted}`: {problem}",
                        crate::quote::quote(value)
                    ),
                );
            }
        }
    }

    /// `metadata.annotations` at `path`: keys are qualified names once lower-cased, values
    /// anything, all of them together at most 256 KiB.
    pub(super) fn annotations(&mut self, path: &FieldPath, annotations: &BTreeMap<String, String>) {
        let mut total = 0;
        for (key, value) in annotations {
            total += key.len() + value.len();
            for problem in label_key_problems(&key.to_lowercase()) {
                self.err(
                    path.key(key),
                    format!("annotation key `{}`: {problem}", crate::quote::quote(key)),
                );
            }
        }
        if total > ANNOTATIONS_MAX_BYTES {
            self.err(
                path.clone(),
                format!("annotations take {total} bytes, more than the {ANNOTATIONS_MAX_BYTES} the API server allows"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_as_the_api_server_takes_them() {
        for good in [
            "app",
            "service.kubernetes.io/service-proxy-name",
            "example.com/My_Name.1",
            "a",
        ] {
            assert_eq!(label_key_problems(good), Vec::<String>::new(), "{good}");
        }
        for bad in [
            "",
            "/name",
            "Example.com/name",
            "a/b/c",
            "-app",
            "app-",
            "has space",
            &"x".repeat(64),
        ] {
            assert!(!label_key_problems(bad).is_empty(), "{bad:?}");
        }
        for good in ["", "web", "My_Value.1", &"v".repeat(63)] {
            assert_eq!(label_value_problems(good), Vec::<String>::new(), "{good}");
        }
        for bad in ["-x", "x.", "a b", "a/b", &"v".repeat(64)] {
            assert!(!label_value_problems(bad).is_empty(), "{bad:?}");
        }
    }
}
