//! LIST and GET: which state a resourceVersion asks for (apiserver pkg/storage/cacher
//! delegator.go ShouldDelegateList, cacher.go GetList), pagination with opaque continue
//! tokens (pkg/storage/continue.go), and the list body.

use super::query::{self, ListOptions, EXACT, NOT_OLDER_THAN};
use super::resources::Kind;
use super::status::{self, ApiError};
use super::store::Obj;
use super::Shared;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde_json::Value;
use std::time::Duration;

/// How long a request for a resourceVersion the server has not reached yet waits for it
/// (the watch cache's blockTimeout).
pub(crate) const BLOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether `obj` is in the request's scope and selected by it.
pub(crate) fn selected(
    kind: Kind,
    namespace: Option<&str>,
    opts: &ListOptions,
    obj: &Value,
) -> bool {
    let in_scope = namespace
        .is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns));
    in_scope
        && opts
            .labels
            .matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
        && opts.fields.matches(kind, obj)
}

/// A list item as the apiserver writes it: without `apiVersion` and `kind`, which only the
/// list itself carries (items are converted without their TypeMeta).
fn item(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(map) = obj.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    obj
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

fn encode_token(start: &str, rv: i64) -> String {
    let token = ContinueToken {
        v: TOKEN_VERSION.into(),
        rv,
        start: start.to_string(),
    };
    base64url::encode(serde_json::to_string(&token).unwrap_or_default().as_bytes())
}

/// storage.DecodeContinue: the start key (relative to the request's key prefix) and RV.
fn decode_token(token: &str) -> Result<(String, i64), String> {
    let data = base64url::decode(token).ok_or("continue key is not valid: illegal base64 data")?;
    let t: ContinueToken =
        serde_json::from_slice(&data).map_err(|e| format!("continue key is not valid: {e}"))?;
    if t.v != TOKEN_VERSION {
        return Err(format!(
            "continue key is not valid: server does not recognize this encoded version {}",
            t.v
        ));
    }
    if t.rv == 0 {
        return Err("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into());
    }
    if t.start.is_empty() {
        return Err(
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into(),
        );
    }
    let key = t.start.trim_start_matches('/');
    if key
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!("continue key is not valid: {}", t.start));
    }
    Ok((key.to_string(), t.rv))
}

/// Waits until the cluster reaches `rv`; Err(current RV) if it does not within BLOCK_TIMEOUT.
pub(crate) async fn wait_for(shared: &Shared, rv: u64) -> Result<(), u64> {
    let mut changes = shared.rv.subscribe();
    let reached = tokio::time::timeout(BLOCK_TIMEOUT, async {
        changes.wait_for(|now| *now >= rv).await.is_ok()
    })
    .await;
    match reached {
        Ok(true) => Ok(()),
        _ => Err(*changes.borrow()),
    }
}

/// The state a list reads, and where in it to start.
struct Read {
    rv: u64,
    /// The first key to list (keys sort as etcd's do).
    start: String,
    limit: i64,
}

async fn read_point(shared: &Shared, opts: &ListOptions, prefix: &str) -> Result<Read, ApiError> {
    let current = || super::log::lock(&shared.store).rv();
    let compacted = || super::log::lock(&shared.store).compacted();
    // Limits are ignored for resourceVersion "0" (cacher.go computeListLimit).
    let limit = if opts.resource_version == "0" {
        0
    } else {
        opts.limit.max(0)
    };
    if !opts.continue_token.is_empty() {
        let (start, rv) = decode_token(&opts.continue_token)
            .map_err(|e| status::bad_request(format!("invalid continue token: {e}")))?;
        if !opts.resource_version.is_empty() && opts.resource_version != "0" {
            return Err(status::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let start = format!("{prefix}{start}");
        let at = u64::try_from(rv).unwrap_or_else(|_| current());
        if at < compacted() {
            // etcd3/errors.go handleCompactedErrorForPaging: resume at "now" if you accept it.
            let token = encode_token(start.strip_prefix(prefix).unwrap_or(&start), -1);
            return Err(status::expired(INCONSISTENT_CONTINUE, Some(token)));
        }
        return Ok(Read {
            rv: at.min(current()),
            start,
            limit,
        });
    }
    let rv = query::parse_rv(&opts.resource_version).map_err(|e| {
        status::bad_request(format!("invalid resource version: resourceVersion: {e}"))
    })?;
    let exact = match opts.resource_version_match.as_str() {
        EXACT => true,
        NOT_OLDER_THAN => false,
        _ => limit > 0 && rv > 0,
    };
    if exact {
        if rv > current() {
            return Err(status::too_large_rv(rv, current(), 0));
        }
        if rv < compacted() {
            return Err(status::expired(
                "The resourceVersion for the provided list is too old.",
                None,
            ));
        }
        return Ok(Read {
            rv,
            start: prefix.to_string(),
            limit,
        });
    }
    if rv > 0 {
        wait_for(shared, rv)
            .await
            .map_err(|now| status::too_large_rv(rv, now, 1))?;
    }
    Ok(Read {
        rv: current(),
        start: prefix.to_string(),
        limit,
    })
}

const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Answers a LIST of `kind` (within `namespace` if given): the list body.
pub(crate) async fn list(
    shared: &Shared,
    kind: Kind,
    namespace: Option<&str>,
    opts: &ListOptions,
) -> Result<String, ApiError> {
    let prefix = namespace.map(|ns| format!("{ns}/")).unwrap_or_default();
    let read = read_point(shared, opts, &prefix).await?;
    let objects: Vec<(String, Obj)> = {
        let store = super::log::lock(&shared.store);
        store.snapshot(kind, read.rv).map_err(|_| {
            status::expired(
                "The resourceVersion for the provided list is too old.",
                None,
            )
        })?
    };
    let candidates: Vec<&(String, Obj)> = objects
        .iter()
        .filter(|(key, _)| key.starts_with(&prefix) && *key >= read.start)
        .collect();
    let mut items = Vec::new();
    let mut last_key = None;
    let mut has_more = false;
    for (i, (key, obj)) in candidates.iter().enumerate() {
        if selected(kind, namespace, opts, obj) {
            items.push(item(obj));
            last_key = Some(key.as_str());
        }
        if read.limit > 0 && i64::try_from(items.len()).unwrap_or(i64::MAX) >= read.limit {
            has_more = i + 1 < candidates.len();
            break;
        }
    }
    let mut meta = ListMeta {
        resource_version: Some(read.rv.to_string()),
        ..Default::default()
    };
    if let (true, Some(last)) = (has_more, last_key) {
        let start = format!("{}\0", last.strip_prefix(&prefix).unwrap_or(last));
        meta.continue_ = Some(encode_token(
            &start,
            i64::try_from(read.rv).unwrap_or(i64::MAX),
        ));
        if opts.labels.is_empty() && opts.fields.is_empty() {
            let total = i64::try_from(candidates.len()).unwrap_or(i64::MAX);
            meta.remaining_item_count = Some(total - read.limit);
        }
    }
    let info = kind.info();
    Ok(format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":{}}}",
        Value::from(format!("{}List", info.kind)),
        Value::from(info.api_version),
        serde_json::to_string(&meta).map_err(status::internal)?,
        serde_json::to_string(&items).map_err(status::internal)?,
    ))
}

/// Answers a GET of one object: the object, or 404.
pub(crate) fn get(
    shared: &Shared,
    kind: Kind,
    namespace: Option<&str>,
    name: &str,
) -> Result<String, ApiError> {
    let key = namespace.map_or_else(|| name.to_string(), |ns| format!("{ns}/{name}"));
    let obj = super::log::lock(&shared.store).get(kind, &key);
    let info = kind.info();
    let obj = obj.ok_or_else(|| status::not_found(info.resource, info.group, name))?;
    serde_json::to_string(&*obj).map_err(status::internal)
}

/// Unpadded URL-safe base64 (Go's base64.RawURLEncoding), for continue tokens.
mod base64url {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    pub(super) fn encode(data: &[u8]) -> String {
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        out
    }

    pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let values: Vec<u32> = text
            .bytes()
            .map(|c| {
                ALPHABET
                    .iter()
                    .position(|a| *a == c)
                    .and_then(|p| u32::try_from(p).ok())
            })
            .collect::<Option<_>>()?;
        for chunk in values.chunks(4) {
            if chunk.len() == 1 {
                return None;
            }
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, v)| n | (v << (18 - 6 * i)));
            for i in 0..chunk.len() - 1 {
                out.push(u8::try_from((n >> (16 - 8 * i)) & 0xff).ok()?);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_like_go() {
        assert_eq!(base64url::encode(b"hello?>"), "aGVsbG8_Pg");
        for s in ["", "a", "ab", "abc", "abcd", "{\"v\":\"meta.k8s.io/v1\"}"] {
            assert_eq!(
                base64url::decode(&base64url::encode(s.as_bytes())).unwrap(),
                s.as_bytes()
            );
        }
        assert!(base64url::decode("a").is_none());
        assert!(base64url::decode("a$").is_none());
    }

    #[test]
    fn continue_tokens_are_the_apiservers() {
        let t = encode_token("default/web\0", 7);
        let json = String::from_utf8(base64url::decode(&t).unwrap()).unwrap();
        assert_eq!(
            json,
            r#"{"v":"meta.k8s.io/v1","rv":7,"start":"default/web\u0000"}"#
        );
        assert_eq!(decode_token(&t).unwrap(), ("default/web\0".to_string(), 7));
        assert!(decode_token(&encode_token("a", 0))
            .unwrap_err()
            .contains("incorrect encoded start resourceVersion"));
        assert!(decode_token(&encode_token("../x", 3)).is_err());
        assert!(decode_token("!!").is_err());
    }
}
