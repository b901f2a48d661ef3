//! List and watch parameters, decoded, defaulted and validated as the apiserver's `listOpts`
//! does (apiserver pkg/endpoints/handlers/get.go): parameter decoding (400), the WatchList
//! defaults (apimachinery pkg/apis/meta/internalversion/defaults.go), validation (422,
//! internalversion/validation/validation.go) and the field-label conversion (400).

use super::resources::Kind;
use super::selector::{FieldSelector, LabelSelector};
use super::status::{self, ApiError, FieldError};

pub(crate) const NOT_OLDER_THAN: &str = "NotOlderThan";
pub(crate) const EXACT: &str = "Exact";

/// The decoded query of a list or watch request.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    pub resource_version: String,
    pub resource_version_match: String,
    pub timeout_seconds: Option<i64>,
    pub limit: i64,
    pub continue_token: String,
    pub send_initial_events: Option<bool>,
}

/// Decodes `%XX` and `+` as Go's url.QueryUnescape does; None when malformed.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The query's pairs in order. Like Go's url.ParseQuery as `req.URL.Query()` uses it, a
/// malformed pair (bad escape, `;`) is dropped rather than failing the request.
pub(crate) fn pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty() && !p.contains(';'))
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((unescape(k)?, unescape(v)?))
        })
        .collect()
}

/// The first value given for `key`, if any.
pub(crate) fn first<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// runtime.Convert_Slice_string_To_bool: present and neither "0" nor "false" means true.
fn boolean(value: Option<&str>) -> Option<bool> {
    value.map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
}

fn integer(value: Option<&str>) -> Result<Option<i64>, ApiError> {
    value
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                let why = if v
                    .trim_start_matches(['-', '+'])
                    .chars()
                    .all(|c| c.is_ascii_digit())
                    && !v.is_empty()
                {
                    "value out of range"
                } else {
                    "invalid syntax"
                };
                status::bad_request(format!("strconv.ParseInt: parsing {v:?}: {why}"))
            })
        })
        .transpose()
}

fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError {
        cause: "FieldValueForbidden",
        field: field.into(),
        body: format!("Forbidden: {detail}"),
    }
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError {
        cause: "FieldValueNotSupported",
        field: field.into(),
        body: format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    }
}

/// Decodes a list/watch query for `kind`. `watch_path` is a `/watch/` URL (the watch is then
/// forced, but the defaults and validation see `watch` as given, as in the apiserver);
/// `name` is the object of an item URL, which becomes a `metadata.name` field selector.
pub(crate) fn list_options(
    kind: Kind,
    query: &str,
    name: Option<&str>,
) -> Result<ListOptions, ApiError> {
    let q = pairs(query);
    let get = |k: &str| first(&q, k);
    let labels = LabelSelector::parse(get("labelSelector").unwrap_or_default())
        .map_err(status::bad_request)?;
    let mut opts = ListOptions {
        labels,
        watch: boolean(get("watch")).unwrap_or(false),
        allow_watch_bookmarks: boolean(get("allowWatchBookmarks")).unwrap_or(false),
        resource_version: get("resourceVersion").unwrap_or_default().to_string(),
        resource_version_match: get("resourceVersionMatch").unwrap_or_default().to_string(),
        timeout_seconds: integer(get("timeoutSeconds"))?,
        limit: integer(get("limit"))?.unwrap_or(0),
        continue_token: get("continue").unwrap_or_default().to_string(),
        send_initial_events: boolean(get("sendInitialEvents")),
        ..Default::default()
    };
    let field_text = get("fieldSelector").unwrap_or_default();
    // Syntax errors surface while decoding, before the defaults and validation.
    FieldSelector::check_syntax(field_text).map_err(status::bad_request)?;
    set_defaults(&mut opts);
    let errors = validate(&opts);
    if !errors.is_empty() {
        return Err(status::invalid("meta.k8s.io", "ListOptions", "", &errors));
    }
    opts.fields = FieldSelector::parse(field_text, kind).map_err(status::bad_request)?;
    if let Some(name) = name {
        if opts.fields.is_empty() {
            opts.fields = FieldSelector::name(name);
        } else if opts.fields.exact("metadata.name") != Some(name) {
            return Err(status::bad_request(
                "fieldSelector metadata.name doesn't match requested name",
            ));
        }
    }
    Ok(opts)
}

/// SetListOptionsDefaults with the WatchList feature on (its default since 1.34): a watch
/// from "" or "0" that asks nothing else gets the initial state as events, ended by a
/// bookmark when bookmarks are allowed.
fn set_defaults(opts: &mut ListOptions) {
    if opts.send_initial_events.is_some() || !opts.resource_version_match.is_empty() {
        return;
    }
    let legacy = opts.resource_version.is_empty() || opts.resource_version == "0";
    if opts.watch && legacy {
        opts.send_initial_events = Some(true);
        opts.resource_version_match = NOT_OLDER_THAN.to_string();
    }
}

fn validate(opts: &ListOptions) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let m = opts.resource_version_match.as_str();
    if opts.watch {
        if opts.send_initial_events.is_some() && m != NOT_OLDER_THAN {
            errs.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !m.is_empty() {
            if opts.send_initial_events.is_none() {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != NOT_OLDER_THAN {
                errs.push(not_supported("resourceVersionMatch", m, &[NOT_OLDER_THAN]));
            }
            if !opts.continue_token.is_empty() {
                errs.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return errs;
    }
    if !m.is_empty() {
        if opts.resource_version.is_empty() {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !opts.continue_token.is_empty() {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != EXACT && m != NOT_OLDER_THAN {
            errs.push(not_supported(
                "resourceVersionMatch",
                m,
                &[EXACT, NOT_OLDER_THAN, ""],
            ));
        }
        if m == EXACT && opts.resource_version == "0" {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if opts.send_initial_events.is_some() {
        errs.push(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    errs
}

/// A resourceVersion as the storage versioner parses it ("" and "0" are 0), or the body of
/// its field error (`Invalid value: "x": strconv.ParseUint: …`).
pub(crate) fn parse_rv(rv: &str) -> Result<u64, String> {
    if rv.is_empty() || rv == "0" {
        return Ok(0);
    }
    rv.parse::<u64>().map_err(|_| {
        let why = if rv.chars().all(|c| c.is_ascii_digit()) {
            "value out of range"
        } else {
            "invalid syntax"
        };
        format!("Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: {why}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(q: &str) -> Result<ListOptions, ApiError> {
        list_options(Kind::Service, q, None)
    }

    #[test]
    fn decodes_what_informers_send() {
        let o = opts("labelSelector=%21service.kubernetes.io%2Fservice-proxy-name&fieldSelector=spec.clusterIP%21%3DNone&limit=500&resourceVersion=0").unwrap();
        assert_eq!(
            (o.limit, o.resource_version.as_str(), o.watch),
            (500, "0", false)
        );
        assert!(!o.labels.is_empty() && !o.fields.is_empty());
        let o = opts("allowWatchBookmarks=true&resourceVersion=12&timeoutSeconds=412&watch=true")
            .unwrap();
        assert!(o.watch && o.allow_watch_bookmarks);
        assert_eq!(
            (o.timeout_seconds, o.send_initial_events),
            (Some(412), None)
        );
        let o = opts("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").unwrap();
        assert_eq!(o.send_initial_events, Some(true));
    }

    #[test]
    fn a_legacy_watch_gets_initial_events_by_default() {
        let o = opts("watch=true").unwrap();
        assert_eq!(
            (o.send_initial_events, o.resource_version_match.as_str()),
            (Some(true), NOT_OLDER_THAN)
        );
        let o = opts("watch=true&resourceVersion=5").unwrap();
        assert_eq!(o.send_initial_events, None);
        let o = opts("watch=false").unwrap();
        assert_eq!(o.send_initial_events, None);
    }

    #[test]
    fn invalid_combinations_are_422_and_bad_values_400() {
        let cases = [
            (
                "watch=true&sendInitialEvents=true",
                422,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ),
            (
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=1",
                422,
                "sendInitialEvents is forbidden for list",
            ),
            (
                "resourceVersionMatch=Exact",
                422,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ),
            (
                "resourceVersionMatch=Newest&resourceVersion=3",
                422,
                "Unsupported value: \"Newest\"",
            ),
            (
                "limit=x",
                400,
                "strconv.ParseInt: parsing \"x\": invalid syntax",
            ),
            ("labelSelector=a%20b", 400, "unable to parse requirement"),
            (
                "fieldSelector=spec.ports%3D1",
                400,
                "field label not supported: spec.ports",
            ),
            ("fieldSelector=nonsense", 400, "can't understand 'nonsense'"),
        ];
        for (q, code, text) in cases {
            let e = opts(q).unwrap_err();
            assert_eq!(e.code(), code, "{q}");
            assert!(
                e.0.message.as_deref().unwrap_or_default().contains(text),
                "{q}: {:?}",
                e.0.message
            );
        }
    }

    #[test]
    fn malformed_pairs_are_dropped_and_names_narrow() {
        assert_eq!(
            pairs("a=%zz&b=1&c=x+y"),
            [
                ("b".to_string(), "1".to_string()),
                ("c".into(), "x y".into())
            ]
        );
        let o = list_options(Kind::Service, "watch=1", Some("web")).unwrap();
        assert_eq!(o.fields.exact("metadata.name"), Some("web"));
        let e = list_options(
            Kind::Service,
            "fieldSelector=metadata.name%3Dx",
            Some("web"),
        )
        .unwrap_err();
        assert_eq!(e.code(), 400);
        assert_eq!(parse_rv(""), Ok(0));
        assert!(parse_rv("abc").unwrap_err().contains("invalid syntax"));
    }
}
