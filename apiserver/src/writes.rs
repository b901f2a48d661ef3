//! The only writes a proxier's identity may make: Events (create, patch, update), kept as
//! evidence. Their resourceVersions count on their own, as if Events had their own etcd (a
//! common production setup, `--etcd-servers-overrides`), so that when a client reports an
//! event does not shift the cluster's resourceVersions.

use super::log::{lock, PostedEvent};
use super::reply::{ClientCtx, Reply};
use super::route::EventsApi;
use super::status::{self, ApiError, FieldError};
use super::store::{timestamp, uid};
use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::Value;
use std::collections::BTreeMap;

/// The apiserver's request body limit (MaxRequestBodyBytes).
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

const JSON: &str = "application/json";
const PATCH_TYPES: [&str; 2] = [
    "application/strategic-merge-patch+json",
    "application/merge-patch+json",
];

#[derive(Default)]
pub(crate) struct EventStore {
    rv: u64,
    by_key: BTreeMap<(&'static str, String, String), Value>,
}

/// The request's media type without parameters; JSON when absent (as the apiserver assumes).
fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| JSON.to_string())
}

async fn json_body(body: Body) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| status::too_large_body(MAX_BODY))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| status::bad_request(format!("json parse error: {e}")))
}

/// The Event type the API serves there, checked by decoding into it.
fn typed(api: EventsApi, obj: &Value) -> Result<Value, ApiError> {
    let bad = |e: serde_json::Error| status::bad_request(format!("decoding Event: {e}"));
    match api {
        EventsApi::Events => {
            let e: k8s_openapi::api::events::v1::Event =
                serde_json::from_value(obj.clone()).map_err(bad)?;
            serde_json::to_value(e).map_err(status::internal)
        }
        EventsApi::Core => {
            let e: k8s_openapi::api::core::v1::Event =
                serde_json::from_value(obj.clone()).map_err(bad)?;
            serde_json::to_value(e).map_err(status::internal)
        }
    }
}

fn api_version(api: EventsApi) -> &'static str {
    match api {
        EventsApi::Events => "events.k8s.io/v1",
        EventsApi::Core => "v1",
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if let Some(map) = obj.as_object_mut() {
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(field.into(), value);
        }
    }
}

/// A request on an events path, as routed.
pub(crate) struct EventsRequest<'a> {
    pub method: &'a Method,
    pub api: EventsApi,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub headers: &'a HeaderMap,
    /// Path and query as sent, for the evidence.
    pub path: &'a str,
}

/// Answers a request on an events path.
pub(crate) async fn handle(
    ctx: &ClientCtx,
    req: EventsRequest<'_>,
    body: Body,
) -> Result<Reply, ApiError> {
    let EventsRequest {
        method,
        api,
        namespace,
        name,
        headers,
        path,
    } = req;
    let group = api.group();
    let denied =
        |verb: &str| status::forbidden(verb, "events", group, namespace, name.unwrap_or_default());
    match (method.as_str(), namespace, name) {
        ("GET", _, Some(_)) => Err(denied("get")),
        ("GET", _, None) => Err(denied("list")),
        ("DELETE", _, Some(_)) => Err(denied("delete")),
        ("DELETE", _, None) => Err(denied("deletecollection")),
        ("POST", Some(ns), None) => {
            if content_type(headers) != JSON {
                return Err(status::unsupported_media_type(&[JSON]));
            }
            let sent = json_body(body).await?;
            let stored = create(ctx, api, ns, &sent)?;
            ctx.shared.log.event(PostedEvent {
                client: ctx.client.clone(),
                method: "POST".into(),
                path: path.into(),
                body: sent,
            });
            Ok(Reply::json(StatusCode::CREATED, stored))
        }
        ("PATCH", Some(ns), Some(name)) => {
            if !PATCH_TYPES.contains(&content_type(headers).as_str()) {
                return Err(status::unsupported_media_type(&PATCH_TYPES));
            }
            let sent = json_body(body).await?;
            if !sent.is_object() {
                return Err(status::bad_request("the patch is not a JSON object"));
            }
            let stored = update(ctx, api, ns, name, &sent, true)?;
            ctx.shared.log.event(PostedEvent {
                client: ctx.client.clone(),
                method: "PATCH".into(),
                path: path.into(),
                body: sent,
            });
            Ok(Reply::json(StatusCode::OK, stored))
        }
        ("PUT", Some(ns), Some(name)) => {
            if content_type(headers) != JSON {
                return Err(status::unsupported_media_type(&[JSON]));
            }
            let sent = json_body(body).await?;
            if meta_str(&sent, "name") != Some(name) {
                return Err(status::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&sent, "name").unwrap_or_default()
                )));
            }
            let exists = lock(&ctx.shared.events).by_key.contains_key(&(
                group,
                ns.to_string(),
                name.to_string(),
            ));
            let stored = if exists {
                update(ctx, api, ns, name, &sent, false)?
            } else {
                create(ctx, api, ns, &sent)?
            };
            ctx.shared.log.event(PostedEvent {
                client: ctx.client.clone(),
                method: "PUT".into(),
                path: path.into(),
                body: sent,
            });
            Ok(Reply::json(
                if exists {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                },
                stored,
            ))
        }
        _ => Err(status::method_not_allowed()),
    }
}

fn create(
    ctx: &ClientCtx,
    api: EventsApi,
    namespace: &str,
    sent: &Value,
) -> Result<String, ApiError> {
    let group = api.group();
    for (field, want) in [("apiVersion", api_version(api)), ("kind", "Event")] {
        if let Some(got) = sent.get(field).and_then(Value::as_str) {
            if got != want {
                return Err(status::bad_request(format!(
                    "the {field} in the data ({got}) does not match the expected {field} ({want})"
                )));
            }
        }
    }
    let mut obj = typed(api, sent)?;
    if meta_str(&obj, "namespace").is_some_and(|ns| ns != namespace) {
        return Err(status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut events = lock(&ctx.shared.events);
    let rv = events.rv + 1;
    let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
        (Some(name), _) => name.to_string(),
        (None, Some(prefix)) => format!("{prefix}{}", &uid("Event", namespace, rv)[..5]),
        (None, None) => {
            return Err(status::invalid(
                group,
                "Event",
                "",
                &[FieldError {
                    cause: "FieldValueRequired",
                    field: "metadata.name".into(),
                    body: "Required value: name or generateName is required".into(),
                }],
            ))
        }
    };
    let key = (group, namespace.to_string(), name.clone());
    if events.by_key.contains_key(&key) {
        return Err(status::already_exists("events", group, &name));
    }
    set_meta(&mut obj, "name", Value::from(name.clone()));
    set_meta(&mut obj, "namespace", Value::from(namespace));
    set_meta(
        &mut obj,
        "uid",
        Value::from(uid("Event", &format!("{group}/{namespace}/{name}"), rv)),
    );
    set_meta(&mut obj, "creationTimestamp", timestamp(rv));
    set_meta(&mut obj, "resourceVersion", Value::from(rv.to_string()));
    events.rv = rv;
    let text = serde_json::to_string(&obj).map_err(status::internal)?;
    events.by_key.insert(key, obj);
    Ok(text)
}

fn update(
    ctx: &ClientCtx,
    api: EventsApi,
    namespace: &str,
    name: &str,
    sent: &Value,
    patch: bool,
) -> Result<String, ApiError> {
    let group = api.group();
    let mut events = lock(&ctx.shared.events);
    let key = (group, namespace.to_string(), name.to_string());
    let old = events
        .by_key
        .get(&key)
        .cloned()
        .ok_or_else(|| status::not_found("events", group, name))?;
    let mut obj = if patch {
        let mut obj = old.clone();
        // RFC 7386; for an Event (no lists with merge keys) what a strategic merge does too.
        json_patch::merge(&mut obj, sent);
        obj
    } else {
        sent.clone()
    };
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        if let Some(v) = old.pointer(&format!("/metadata/{field}")) {
            set_meta(&mut obj, field, v.clone());
        }
    }
    let mut obj = typed(api, &obj)?;
    events.rv += 1;
    set_meta(
        &mut obj,
        "resourceVersion",
        Value::from(events.rv.to_string()),
    );
    let text = serde_json::to_string(&obj).map_err(status::internal)?;
    events.by_key.insert(key, obj);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patches_replace_and_remove() {
        let mut target = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        json_patch::merge(
            &mut target,
            &json!({"a": null, "b": {"c": 5}, "l": [3], "n": "x", "m": {"gone": null, "k": 1}}),
        );
        assert_eq!(
            target,
            json!({"b": {"c": 5, "d": 3}, "l": [3], "n": "x", "m": {"k": 1}}),
            "a null under a new key is dropped too"
        );
    }

    #[test]
    fn content_types_ignore_parameters() {
        let mut h = HeaderMap::new();
        assert_eq!(content_type(&h), JSON);
        h.insert(
            axum::http::header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert_eq!(content_type(&h), JSON);
        h.insert(
            axum::http::header::CONTENT_TYPE,
            "application/vnd.kubernetes.protobuf".parse().unwrap(),
        );
        assert_ne!(content_type(&h), JSON);
    }
}
