//! One request, end to end: which API it names, whether its client can read JSON, which
//! handler answers, and the record of it. Authorization comes first, as in the apiserver's
//! handler chain: a write to a served resource is refused before anything else is looked at.

use super::list;
use super::log::RequestRecord;
use super::query;
use super::reply::{ClientCtx, Reply, JSON};
use super::route::{self, Target};
use super::status::{self, ApiError};
use super::watch::{self, WatchRequest};
use super::writes;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The axum handler of every request.
pub(crate) async fn handle(State(ctx): State<Arc<ClientCtx>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let header_text = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string());
    let reply = match dispatch(
        &ctx,
        &parts.method,
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
        &parts.headers,
        body,
        &path,
    )
    .await
    {
        Ok(reply) => reply,
        Err(e) => Reply::from(e),
    };
    ctx.shared.log.request(RequestRecord {
        client: ctx.client.clone(),
        method: parts.method.to_string(),
        path,
        user_agent: header_text(header::USER_AGENT),
        accept: header_text(header::ACCEPT),
        status: reply.status.as_u16(),
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(reply.content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache, private"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    (reply.status, headers, reply.body).into_response()
}

/// Whether the client accepts JSON (the only encoding served): an Accept of protobuf alone
/// is a 406, `application/vnd.kubernetes.protobuf, */*` gets JSON. Media types with
/// parameters asking for another shape (`as=Table`, aggregated discovery) are skipped, so
/// their fallbacks apply.
fn negotiate(headers: &HeaderMap) -> Result<(), ApiError> {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    if accept.trim().is_empty() {
        return Ok(());
    }
    let acceptable = accept.split(',').any(|clause| {
        let mut parts = clause.split(';');
        let mime = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        matches!(mime.as_str(), "application/json" | "application/*" | "*/*")
            && parts.all(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                match k.trim() {
                    "q" => v.trim().parse::<f32>().map_or(true, |q| q > 0.0),
                    "charset" | "stream" => true,
                    _ => false,
                }
            })
    });
    if acceptable {
        Ok(())
    } else {
        Err(status::not_acceptable(&[JSON]))
    }
}

fn write_verb(method: &Method, has_name: bool) -> Option<&'static str> {
    Some(match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if has_name => "delete",
        Method::DELETE => "deletecollection",
        _ => return None,
    })
}

async fn dispatch(
    ctx: &Arc<ClientCtx>,
    method: &Method,
    path: &str,
    query_text: &str,
    headers: &HeaderMap,
    body: Body,
    full_path: &str,
) -> Result<Reply, ApiError> {
    let target = route::resolve(path);
    let document = |text: String| -> Result<Reply, ApiError> {
        if *method == Method::GET {
            negotiate(headers)?;
            Ok(Reply::ok(text))
        } else if let Some(_verb) = write_verb(method, true) {
            Err(status::forbidden_path(
                &method.as_str().to_ascii_lowercase(),
                path,
            ))
        } else {
            Err(status::method_not_allowed())
        }
    };
    match target {
        Target::NotFound => Ok(Reply::plain_not_found()),
        Target::NoRoute => Err(status::no_route()),
        Target::Version => document(super::discovery::version()),
        Target::ApiVersions => document(super::discovery::api_versions(ctx.local)),
        Target::GroupList => document(super::discovery::group_list()),
        Target::Group(group) => document(super::discovery::api_group(group)),
        Target::ResourceList(group) => document(super::discovery::resource_list(group)),
        Target::Events {
            api,
            namespace,
            name,
        } => {
            writes::handle(
                ctx,
                writes::EventsRequest {
                    method,
                    api,
                    namespace: namespace.as_deref(),
                    name: name.as_deref(),
                    headers,
                    path: full_path,
                },
                body,
            )
            .await
        }
        Target::Resource {
            kind,
            namespace,
            name,
            watch_path,
        } => {
            if let Some(verb) = write_verb(method, name.is_some()) {
                let info = kind.info();
                return Err(status::forbidden(
                    verb,
                    info.resource,
                    info.group,
                    namespace.as_deref(),
                    name.as_deref().unwrap_or_default(),
                ));
            }
            if *method != Method::GET {
                return Err(status::method_not_allowed());
            }
            negotiate(headers)?;
            if let (Some(name), false) = (&name, watch_path) {
                return list::get(&ctx.shared, kind, namespace.as_deref(), name).map(Reply::ok);
            }
            let opts = query::list_options(kind, query_text, name.as_deref())?;
            if opts.watch || watch_path {
                let req = WatchRequest::new(kind, namespace, opts)?;
                let body =
                    watch::start(Arc::clone(&ctx.shared), req, ctx.stop.clone(), &ctx.client);
                return Ok(Reply {
                    status: StatusCode::OK,
                    content_type: JSON,
                    body,
                });
            }
            list::list(&ctx.shared, kind, namespace.as_deref(), &opts)
                .await
                .map(Reply::ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> Result<(), ApiError> {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        negotiate(&h)
    }

    #[test]
    fn json_is_served_whenever_it_is_acceptable() {
        assert!(negotiate(&HeaderMap::new()).is_ok());
        assert!(accept("application/json").is_ok());
        assert!(accept("application/vnd.kubernetes.protobuf, */*").is_ok());
        assert!(accept("application/vnd.kubernetes.protobuf,application/json").is_ok());
        assert!(accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json").is_ok());
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf")
                .unwrap_err()
                .code(),
            406
        );
        assert_eq!(
            accept("application/json;as=Table;v=v1;g=meta.k8s.io")
                .unwrap_err()
                .code(),
            406
        );
        assert_eq!(accept("application/json;q=0").unwrap_err().code(), 406);
    }
}
