//! The failures the server answers with, each a `Status` worded as apimachinery's
//! pkg/api/errors constructors word it, since clients branch on reason and code (a 410
//! Expired makes a reflector relist, any other Status stops an event retry).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

/// A failed request: the HTTP code and the Status body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError(pub Box<Status>);

impl ApiError {
    pub(crate) fn code(&self) -> u16 {
        self.0
            .code
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(500)
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_else(|_| {
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":500}"#
                .into()
        })
    }
}

fn status(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> ApiError {
    ApiError(Box::new(Status {
        code: Some(i32::from(code)),
        details,
        message: Some(message),
        metadata: ListMeta::default(),
        reason: Some(reason.to_string()),
        status: Some("Failure".to_string()),
    }))
}

fn details(group: &str, kind: &str, name: &str) -> Option<StatusDetails> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Some(StatusDetails {
        group: opt(group),
        kind: opt(kind),
        name: opt(name),
        ..Default::default()
    })
}

/// errors.NewNotFound: `services "x" not found`.
pub(crate) fn not_found(resource: &str, group: &str, name: &str) -> ApiError {
    let qualified = super::resources::qualified(resource, group);
    status(
        404,
        "NotFound",
        format!("{qualified} {name:?} not found"),
        details(group, resource, name),
    )
}

/// What go-restful's error handler answers for a path under an API group version that
/// matches no route (apiserver pkg/server/handler.go serviceErrorHandler).
pub(crate) fn no_route() -> ApiError {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource".into(),
        Some(StatusDetails::default()),
    )
}

pub(crate) fn method_not_allowed() -> ApiError {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource".into(),
        Some(StatusDetails::default()),
    )
}

pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
    status(400, "BadRequest", message.into(), None)
}

/// One field.Error of a validation failure.
pub(crate) struct FieldError {
    /// `FieldValueForbidden`, `FieldValueNotSupported`, `FieldValueInvalid`, `FieldValueRequired`.
    pub cause: &'static str,
    pub field: String,
    /// The error body: `Forbidden: …`, `Unsupported value: "x": supported values: …`.
    pub body: String,
}

/// errors.NewInvalid: 422 with one cause per field error.
pub(crate) fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
    let texts: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body))
        .collect();
    let qualified = super::resources::qualified(kind, group);
    let message = match texts.len() {
        0 => format!("{qualified} {name:?} is invalid"),
        1 => format!("{qualified} {name:?} is invalid: {}", texts[0]),
        _ => format!("{qualified} {name:?} is invalid: [{}]", texts.join(", ")),
    };
    let mut d = details(group, kind, name).unwrap_or_default();
    d.causes = Some(
        errors
            .iter()
            .map(|e| StatusCause {
                field: Some(e.field.clone()),
                message: Some(e.body.clone()),
                reason: Some(e.cause.to_string()),
            })
            .collect(),
    );
    status(422, "Invalid", message, Some(d))
}

/// errors.NewResourceExpired (410 Expired), optionally with a continue token to resume from.
pub(crate) fn expired(message: impl Into<String>, continue_token: Option<String>) -> ApiError {
    let mut e = status(410, "Expired", message.into(), None);
    e.0.metadata.continue_ = continue_token;
    e
}

/// storage.NewTooLargeResourceVersionError: a 504 Timeout whose cause says the RV is newer
/// than the server's (clients retry, or relist from "").
pub(crate) fn too_large_rv(requested: u64, current: u64, retry_seconds: i32) -> ApiError {
    let d = StatusDetails {
        causes: Some(vec![StatusCause {
            field: None,
            message: Some("Too large resource version".into()),
            reason: Some("ResourceVersionTooLarge".into()),
        }]),
        retry_after_seconds: Some(retry_seconds),
        ..Default::default()
    };
    status(
        504,
        "Timeout",
        format!("Too large resource version: {requested}, current: {current}"),
        Some(d),
    )
}

/// The identity RBAC would see: kube-proxy's, bound to `system:node-proxier`, which may read
/// the served resources and write events, nothing else.
pub(crate) const USER: &str = "system:kube-proxy";

/// responsewriters.ForbiddenStatusError for a resource request.
pub(crate) fn forbidden(
    verb: &str,
    resource: &str,
    group: &str,
    namespace: Option<&str>,
    name: &str,
) -> ApiError {
    let scope = match namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    let why =
        format!("User {USER:?} cannot {verb} resource {resource:?} in API group {group:?} {scope}");
    let qualified = super::resources::qualified(resource, group);
    let message = if name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {name:?} is forbidden: {why}")
    };
    status(403, "Forbidden", message, details(group, resource, name))
}

/// The same for a non-resource path (`/version`, `/api`).
pub(crate) fn forbidden_path(verb: &str, path: &str) -> ApiError {
    status(
        403,
        "Forbidden",
        format!("forbidden: User {USER:?} cannot {verb} path {path:?}"),
        Some(StatusDetails::default()),
    )
}

pub(crate) fn not_acceptable(accepted: &[&str]) -> ApiError {
    status(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: {}",
            accepted.join(", ")
        ),
        None,
    )
}

pub(crate) fn unsupported_media_type(accepted: &[&str]) -> ApiError {
    status(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
        None,
    )
}

pub(crate) fn too_large_body(limit: usize) -> ApiError {
    status(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {limit}"),
        None,
    )
}

pub(crate) fn already_exists(resource: &str, group: &str, name: &str) -> ApiError {
    let qualified = super::resources::qualified(resource, group);
    status(
        409,
        "AlreadyExists",
        format!("{qualified} {name:?} already exists"),
        details(group, resource, name),
    )
}

pub(crate) fn internal(message: impl std::fmt::Display) -> ApiError {
    status(
        500,
        "InternalError",
        format!("Internal error occurred: {message}"),
        Some(StatusDetails {
            causes: Some(vec![StatusCause {
                message: Some(message.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_kind_code_and_reason() {
        let e = not_found("endpointslices", "discovery.k8s.io", "x");
        assert_eq!(e.code(), 404);
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NotFound");
        assert_eq!(
            v["message"],
            "endpointslices.discovery.k8s.io \"x\" not found"
        );
        assert_eq!(v["details"]["kind"], "endpointslices");
    }

    #[test]
    fn forbidden_and_invalid_are_worded_as_the_apiserver_words_them() {
        let e = forbidden("delete", "services", "", Some("default"), "web");
        assert_eq!(
            e.0.message.as_deref(),
            Some("services \"web\" is forbidden: User \"system:kube-proxy\" cannot delete resource \"services\" in API group \"\" in the namespace \"default\"")
        );
        let e = invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            &[FieldError {
                cause: "FieldValueForbidden",
                field: "resourceVersionMatch".into(),
                body: "Forbidden: x".into(),
            }],
        );
        assert_eq!(e.code(), 422);
        assert_eq!(
            e.0.message.as_deref(),
            Some("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: x")
        );
        let e = expired("too old", Some("tok".into()));
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(
            (v["code"].as_i64(), v["metadata"]["continue"].as_str()),
            (Some(410), Some("tok"))
        );
    }
}
