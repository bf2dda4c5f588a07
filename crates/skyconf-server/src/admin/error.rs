//! The one mapping from admin API failures to HTTP responses: a status code and an
//! [`ErrorBody`], `{"error": "<what went wrong>", "details": <where, or null>}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use skyconf_sources::SourceError;
use utoipa::ToSchema;

/// Every failure: what went wrong, and for a refused document where.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    error: String,
    /// For a refused document (400), where; `null` otherwise. Absent on the browser checks' 403.
    #[schema(required = false)]
    details: Option<Refusal>,
}

/// Where a document was refused.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Refusal {
    /// The reader's message, with line and column.
    message: String,
    /// 1-based line.
    #[schema(required = true)]
    line: Option<u64>,
    /// 1-based column.
    #[schema(required = true)]
    column: Option<u64>,
}

/// Why an admin request failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The document (or the one built from the request) was refused: 400 with line and column.
    #[error("the document was refused: {0}")]
    Refused(#[from] skyconf_core::ReadError),
    /// The request itself is malformed: 400.
    #[error("{0}")]
    BadRequest(String),
    /// No bearer token, or one that is not configured: 401, with a `Bearer` challenge.
    #[error("{0}")]
    Unauthorized(String),
    /// The token may not do this (a read token on a write route): 403.
    #[error("{0}")]
    Forbidden(String),
    /// No such service or release: 404.
    #[error("{0}")]
    NotFound(String),
    /// The store's state does not allow the write (a read-only document among them), or the
    /// caller's `If-Match` is outdated: 409.
    #[error("{0}")]
    Conflict(String),
    /// The key changed in the store under the write (a failed compare-and-swap; another replica
    /// or a hand edit wrote first): 409. Nothing was written; a write that does not depend on
    /// what the client saw can be built again on the newer document.
    #[error("{0}")]
    StoreMoved(String),
    /// The body is larger than the limit: 413.
    #[error("{0}")]
    TooLarge(String),
    /// The store could not write (a full disk, an I/O error): 500;
    /// nothing was written, and retrying will not help until an operator fixes it.
    #[error("{0}")]
    NotWritten(String),
    /// The store cannot be reached or refused to work: 503.
    #[error("{0}")]
    Unavailable(String),
    /// A bug: 500.
    #[error("{0}")]
    Internal(String),
}

impl From<SourceError> for AppError {
    fn from(error: SourceError) -> Self {
        match error {
            SourceError::Unsupported(_) => Self::Conflict(error.to_string()),
            SourceError::Conflict { .. } => {
                Self::StoreMoved(format!("the store changed under this write; read it again ({error})"))
            }
            SourceError::TooLarge { .. } => Self::TooLarge(error.to_string()),
            SourceError::NotText { .. } => Self::BadRequest(error.to_string()),
            SourceError::Write { ref path, ref cause } if is_read_only(cause) => Self::Conflict(format!(
                "the document is read-only here: cannot write {path} ({cause}). A document mounted read-only \
                 (a ConfigMap, a file in the image) is changed at its source; to write through this API, serve \
                 a writable copy (--file on a writable volume, such as the one holding --data-dir) or use a \
                 store that takes writes (etcd, ZooKeeper, Nacos)"
            )),
            SourceError::Write { .. } => Self::NotWritten(error.to_string()),
            SourceError::Io { .. }
            | SourceError::Watch { .. }
            | SourceError::Unavailable { .. }
            | SourceError::Refused { .. } => Self::Unavailable(error.to_string()),
        }
    }
}

/// Whether a failed write means the document cannot be written by this process at all (a
/// read-only mount, no permission), rather than a failure a retry may get past.
fn is_read_only(cause: &std::io::Error) -> bool {
    matches!(cause.kind(), std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied)
}

impl AppError {
    fn status(&self) -> StatusCode {
        match self {
            Self::Refused(_) | Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) | Self::StoreMoved(_) => StatusCode::CONFLICT,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotWritten(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn details(&self) -> Option<Refusal> {
        match self {
            Self::Refused(error) => {
                let at = error.position();
                Some(Refusal {
                    message: error.to_string(),
                    line: at.map(|p| p.line as u64),
                    column: at.map(|p| p.column as u64),
                })
            }
            _ => None,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %self, "An admin request failed.");
        }
        let error = match &self {
            Self::Refused(_) => "the document was refused".to_owned(),
            other => other.to_string(),
        };
        let mut response = (status, Json(ErrorBody { error, details: self.details() })).into_response();
        if matches!(self, Self::Unauthorized(_)) {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"skyconf\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_their_status() {
        let unavailable = SourceError::Unavailable { store: "etcd".into(), message: "down".into() };
        assert_eq!(AppError::from(unavailable).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(AppError::from(SourceError::Unsupported("no".into())).status(), StatusCode::CONFLICT);
        let changed = AppError::from(SourceError::Conflict { store: "etcd".into(), message: "key k".into() });
        assert_eq!(changed.status(), StatusCode::CONFLICT);
        assert!(changed.to_string().starts_with("the store changed under this write; read it again"), "{changed}");
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let write = AppError::from(SourceError::Write { path: "/etc/agent.yaml".into(), cause: full });
        assert_eq!(write.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(write.to_string().starts_with("cannot write /etc/agent.yaml: "), "{write}");
        for kind in [std::io::ErrorKind::ReadOnlyFilesystem, std::io::ErrorKind::PermissionDenied] {
            let cause = std::io::Error::from(kind);
            let read_only = AppError::from(SourceError::Write { path: "/etc/agent.yaml".into(), cause });
            assert_eq!(read_only.status(), StatusCode::CONFLICT);
            assert!(read_only.to_string().starts_with("the document is read-only here: cannot write /etc/agent.yaml"));
        }
        let refused = skyconf_core::read("configurations:\n  a: {k: }\n").unwrap_err();
        let error = AppError::from(refused);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        assert_eq!(error.details().and_then(|at| at.line), Some(2));
    }
}
