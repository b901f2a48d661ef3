//! Who is asking and what is answered: a listener's client, and an answer before it is
//! written (the handlers of reads and of writes both make them).

use super::status::ApiError;
use super::Shared;
use axum::body::Body;
use axum::http::StatusCode;
use std::net::SocketAddr;
use std::sync::Arc;

/// What a listener knows about the clients it serves.
pub(crate) struct ClientCtx {
    pub shared: Arc<Shared>,
    /// The name requests are recorded under.
    pub client: String,
    /// Turns true when the client is no longer served (its watches end).
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// The listener's address, as `/api` reports it.
    pub local: SocketAddr,
}

/// An answer before it is written.
pub(crate) struct Reply {
    pub(super) status: StatusCode,
    pub(super) content_type: &'static str,
    pub(super) body: Body,
}

pub(super) const JSON: &str = "application/json";

impl Reply {
    pub(crate) fn json(status: StatusCode, text: String) -> Reply {
        Reply {
            status,
            content_type: JSON,
            body: Body::from(text),
        }
    }

    pub(super) fn ok(text: String) -> Reply {
        Reply::json(StatusCode::OK, text)
    }

    /// What Go's http.NotFound writes, as the apiserver's last handler does for a path no
    /// API claims.
    pub(super) fn plain_not_found() -> Reply {
        Reply {
            status: StatusCode::NOT_FOUND,
            content_type: "text/plain; charset=utf-8",
            body: Body::from("404 page not found\n"),
        }
    }
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Reply {
        let status = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Reply::json(status, e.to_json())
    }
}
