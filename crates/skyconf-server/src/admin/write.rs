//! The write side of the admin API: every write is validated with the same reader that serves
//! agents, written through to the store (`Source::put`: a file by atomic rename, a put in etcd,
//! ZooKeeper or Nacos), and becomes a release once the store reports it back — the same path a
//! hand edit of the store takes, so replicas watching the same store all follow.
//!
//! | route | body |
//! |---|---|
//! | `PUT /api/v1/configurations` | the whole document as YAML text, or JSON `{"document": "...", "author": "...", "message": "..."}` (`Content-Type: application/json`) |
//! | `PUT /api/v1/services/{name}` | JSON `{"config": {"key": "value", ...}, "author": "...", "message": "..."}`; values are strings, exactly as agents receive them; order is kept |
//! | `DELETE /api/v1/services/{name}` | none, or JSON `{"author": "...", "message": "..."}` |
//! | `POST /api/v1/releases/{id}/rollback` | none, or JSON `{"author": "...", "message": "..."}` |
//! | `POST /api/v1/held/confirm` | none, or JSON `{"since_ms": N}` |
//! | `POST /api/v1/held/discard` | none, or JSON `{"since_ms": N}` |
//!
//! The two `held` routes decide about a store change held by the fleet-reset guard (see
//! [`crate::reload`]; `held` in `/readyz` and `/api/v1/status`): *confirm* installs it now (200
//! with the new `version` and its `release`), *discard* drops it and keeps serving the last good
//! table (200 with the served `version`); the discarded document is not held again until the
//! store's document changes. With `since_ms` (the `held.since_ms` the operator saw), only that
//! change is decided on. When nothing is held, or another change than the one named by `since_ms`,
//! the answer is **409** and nothing changes. They take no query parameters.
//!
//! Author and message come from the body's `author` and `message` fields or, when the body has
//! none, from the `X-Skyconf-Author` and `X-Skyconf-Message` headers. Query parameters:
//! `dry_run=true` answers what would change per service (digest before and after) and writes
//! nothing; `wait=SECONDS` bounds how long the answer waits for the new document to be served
//! (default 10 s, at most 60; `0` answers as soon as the store accepted the write). `If-Match:
//! "<release id>"` makes the write fail with 409 unless that release is still the newest.
//!
//! The handlers here parse requests and map the outcome to HTTP; checking, the compare-and-swap,
//! the release and the waits are the publishing service's ([`crate::publish`]).
//!
//! A refused document in the store (put there by hand, bypassing this API) is never served; a
//! per-service write replaces it, built on the served document, and its answer names it
//! (`replaced_refused`: origin, error, and the store's revision of it where the store has
//! revisions).
//!
//! Several replicas. Where the store has revisions (etcd, ZooKeeper), release ids are the
//! store's revisions of the document, and a write that builds on what was read — a per-service
//! edit, or any write with `If-Match` — is a compare-and-swap on the revision of the served
//! document ([`skyconf_sources::Expect::At`]): refused by the store, on whichever replica, once another write
//! landed. A per-service write without `If-Match` that lost that race is built again on the newer
//! document ([`crate::publish::MAX_REBASES`] times); with `If-Match` it answers 409. A whole document or a
//! rollback without `If-Match` is written against the key as this server last saw it.
//!
//! Answers: 200 with the release once the new document is served; 202 when the store took it but
//! it was not served within the wait; 200 with `"unchanged": true` when the document is the one
//! served already. A served write also waits (within the same wait) for the disk: `"durable":
//! true` once its release file and the last good copy holding its document are written (so a
//! restart, even while the store is away, serves it; reliability finding N11), `null` without a
//! data directory (or not yet known when the wait ends). When either cannot be written (disk
//! full, read-only data directory) the answer is **503** with `"written": true, "served": true,
//! "durable": false` and an `error` that says which and why: the store took the change and agents
//! get it — nothing is undone, and a retry answers `"unchanged"` — but it is not on disk, which
//! the operator must fix (the server logs it at error level; an unwritten release file is counted
//! in `GET /api/v1/status` as `unsaved_releases`). Per-service writes rewrite the document in a canonical form (every string
//! double-quoted; comments dropped), with the same digests for every untouched service.

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use skyconf_core::diff::ServiceChange;
use skyconf_core::warnings::Warning;
use utoipa::ToSchema;

use super::AppError;
use super::extract::{
    AnyServiceName, HeldRequest, ReleaseId, ServiceName, WriteOptions, WriteRequest, json_body, optional_json_body,
};
use super::openapi::{ErrorBody, WriteHeaders, WriteParams, WriteUnavailable};
use crate::publish::{
    Basis, HeldDecided, Proposal, PublishError, Published, Publisher, ReplacedRefused, ServiceEdit,
    WriteOptions as PublishOptions,
};
use crate::releases::{Attribution, Durability, ReleaseSummary};
use crate::store_task::HeldDecision;

/// The header naming who makes a change.
pub(crate) const AUTHOR_HEADER: &str = "x-skyconf-author";
/// The header saying why.
pub(crate) const MESSAGE_HEADER: &str = "x-skyconf-message";
const MAX_AUTHOR_BYTES: usize = 256;
const MAX_MESSAGE_BYTES: usize = 4096;

fn header_text(headers: &HeaderMap, name: &str) -> Result<Option<String>, AppError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => std::str::from_utf8(value.as_bytes())
            .map(|s| Some(s.trim().to_owned()))
            .map_err(|_| AppError::BadRequest(format!("the {name} header is not UTF-8"))),
    }
}

fn attribution(
    headers: &HeaderMap,
    author: Option<String>,
    message: Option<String>,
    rollback_of: Option<u64>,
) -> Result<Attribution, AppError> {
    // The headers are checked even when the body's fields win over them: a request is refused
    // for a bad header whichever of the two it meant.
    let header_author = header_text(headers, AUTHOR_HEADER)?;
    let header_message = header_text(headers, MESSAGE_HEADER)?;
    for a in [&author, &header_author].into_iter().flatten() {
        if a.len() > MAX_AUTHOR_BYTES || a.chars().any(char::is_control) {
            return Err(AppError::BadRequest(format!(
                "the author must be at most {MAX_AUTHOR_BYTES} bytes without control characters"
            )));
        }
    }
    for m in [&message, &header_message].into_iter().flatten() {
        if m.len() > MAX_MESSAGE_BYTES || m.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
            return Err(AppError::BadRequest(format!(
                "the message must be at most {MAX_MESSAGE_BYTES} bytes without control characters other than newlines and tabs"
            )));
        }
    }
    let author = author.or(header_author).filter(|a| !a.is_empty());
    let message = message.or(header_message).filter(|m| !m.is_empty());
    Ok(Attribution { author, message, rollback_of, origin: crate::releases::ORIGIN_API.to_owned() })
}

/// The optional body of `DELETE /api/v1/services/{name}` and of a rollback.
#[derive(Debug, Default, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NoteRequest)]
struct NoteBody {
    /// Who makes the change.
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why.
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// Whether the body is JSON: `Content-Type: application/json`, parameters aside, in any case
/// (media types are case-insensitive).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The publisher's options for a write asked for as `options`.
fn publish_options(options: WriteOptions) -> PublishOptions {
    PublishOptions { dry_run: options.dry_run, wait: options.wait, if_match: options.if_match }
}

impl From<PublishError> for AppError {
    fn from(error: PublishError) -> Self {
        match error {
            PublishError::Refused(error) => Self::Refused(error),
            PublishError::TooLarge(why) => Self::TooLarge(why),
            PublishError::NotFound(why) => Self::NotFound(why),
            PublishError::Conflict(why) => Self::Conflict(why),
            PublishError::StoreMoved(why) => Self::StoreMoved(why),
            PublishError::Store(error) => error.into(),
            PublishError::NotServed(why) => Self::NotWritten(why),
            PublishError::Unavailable(why) => Self::Unavailable(why),
            PublishError::Internal(why) => Self::Internal(why),
        }
    }
}

/// The answer of a write: a dry run's report, `unchanged`, the served release, or (202) the
/// store took it but it was not served within the wait, or (503) served but not durable. Each
/// outcome sends the fields it has; the others are left out.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct WriteAnswer {
    /// Whether it was a dry run.
    dry_run: bool,
    /// Whether the store was written.
    written: bool,
    /// What changes (or changed) per service.
    changes: Vec<ServiceChange>,
    /// A dry run: what would change per `opamp:` group (a write's release lists what changed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    opamp_changes: Vec<skyconf_core::opamp_diff::GroupChange>,
    /// Dry run: the document that would be written (`null`: the key would be deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    document: Option<Option<String>>,
    /// Dry run: its SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    document_sha256: Option<Option<String>>,
    /// Dry run: the newest release now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<u64>)]
    base_release: Option<Option<u64>>,
    /// The document is the one served already; nothing was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = bool)]
    unchanged: Option<bool>,
    /// Whether the new document is served.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = bool)]
    served: Option<bool>,
    /// Whether it is on disk: its release file and the last good copy a restart serves while the
    /// store is away (`null`: no data directory, or not known yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<bool>)]
    durable: Option<Option<bool>>,
    /// How long it took to be served.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = u64)]
    served_after_ms: Option<u64>,
    /// The release (the newest one for `unchanged`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<ReleaseSummary>)]
    release: Option<Option<ReleaseSummary>>,
    /// The served table's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = u64)]
    version: Option<u64>,
    /// 202: what happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = String)]
    message: Option<String>,
    /// 503: served, but not on disk: which file could not be written, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = String)]
    error: Option<String>,
    /// A per-service write that replaced a document the reader refused (put into the store by
    /// hand): where it came from, why it was refused, its store revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    replaced_refused: Option<ReplacedRefused>,
    /// What is probably wrong with the document (the warnings `skyconf validate` prints): each
    /// at the line and column of its key in the document written (a dry run's `document`). A
    /// per-service write's are those about its service and the whole document.
    warnings: Vec<Warning>,
}

/// The answer to a write: 200 when served (or a dry run, or unchanged), 202 when the store took
/// it but it was not served within the wait, 503 when it is served but not on disk.
fn answer(published: Published) -> Response {
    let release = |r: &ReleaseSummary| Some(r.clone());
    match published {
        Published::DryRun { changes, opamp_changes, document, document_sha256, base_release, warnings } => {
            Json(WriteAnswer {
                dry_run: true,
                changes,
                opamp_changes,
                document: Some(document),
                document_sha256: Some(document_sha256),
                base_release: Some(base_release),
                warnings,
                ..WriteAnswer::default()
            })
            .into_response()
        }
        Published::Unchanged { changes, release: newest, version, warnings } => Json(WriteAnswer {
            unchanged: Some(true),
            served: Some(true),
            changes,
            release: Some(newest.as_deref().and_then(release)),
            version: Some(version),
            warnings,
            ..WriteAnswer::default()
        })
        .into_response(),
        Published::Served { changes, release: served, durability, served_after, warnings, replaced_refused } => {
            let durable = match durability {
                Durability::Durable => Some(true),
                Durability::Failed(_) => Some(false),
                Durability::Memory | Durability::Pending => None,
            };
            let mut body = WriteAnswer {
                written: true,
                served: Some(true),
                durable: Some(durable),
                served_after_ms: Some(served_after.as_millis() as u64),
                changes,
                release: Some(release(&served)),
                version: Some(served.meta.version),
                warnings,
                replaced_refused,
                ..WriteAnswer::default()
            };
            if let Durability::Failed(why) = durability {
                body.error = Some(format!("the change is served, but it is not on disk: {why}"));
                return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
            }
            Json(body).into_response()
        }
        Published::Accepted { waited, changes, warnings, replaced_refused } => {
            let body = WriteAnswer {
                written: true,
                served: Some(false),
                message: Some(format!("the store took the document; it was not served within {waited:?}")),
                changes,
                warnings,
                replaced_refused,
                ..WriteAnswer::default()
            };
            (StatusCode::ACCEPTED, Json(body)).into_response()
        }
    }
}

/// The JSON form of `PUT /api/v1/configurations`.
#[derive(Debug, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DocumentRequest)]
struct DocumentBody {
    /// The whole document as YAML text.
    document: String,
    /// Who makes the change (at most 256 bytes, no control characters; wins over `X-Skyconf-Author`).
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why (at most 4096 bytes, no control characters but newlines and tabs; wins over `X-Skyconf-Message`).
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// The answers every document write shares (its own 400 and 404 it lists itself).
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a description only: `answer` and `AppError` build these answers")]
pub(crate) enum WriteAnswers {
    /// Served (or, with `dry_run`, what would change; or `unchanged`).
    #[response(status = 200)]
    Served(WriteAnswer),
    /// The store took it, but it was not served within `wait`.
    #[response(status = 202)]
    Accepted(WriteAnswer),
    /// `If-Match` names an older release, or the store cannot be written.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body or the document is larger than the limit.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The store could not write (permissions, a full disk); nothing was written.
    #[response(status = 500)]
    NotWritten(ErrorBody),
    /// The store is unavailable (nothing written), or the change is served but its release is not on disk.
    #[response(status = 503)]
    Unavailable(WriteUnavailable),
}

/// The refusals every write shares, before its body is read.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a description only: `AppError` builds these answers")]
pub(crate) enum WriteRefusals {
    /// No token, or an unknown one.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// The answers of a decision about a held change (confirm or discard).
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a description only: `decide_held` and `AppError` build these answers")]
pub(crate) enum HeldAnswers {
    /// Decided.
    #[response(status = 200)]
    Decided(HeldAnswer),
    /// A query parameter (none is taken), or bad JSON (a key given twice included).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// Nothing is held, or another change than `since_ms` names.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body is larger than the limit.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The server is shutting down.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// `PUT /api/v1/configurations`.
#[utoipa::path(
    put,
    path = "/api/v1/configurations",
    tag = "write",
    operation_id = "put_configurations",
    security(("bearer" = [])),
    params(
        WriteParams,
        WriteHeaders,
    ),
    request_body(
        description = "The whole document: YAML text (any content type but JSON), or JSON with `document`.",
        content(
            (DocumentBody = "application/json"),
            (String = "application/yaml"),
        ),
    ),
    responses(
        WriteAnswers,
        (status = 400, description = "A refused document (with line and column in `details`), bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        WriteRefusals,
    ),
)]
pub(super) async fn put_configurations(
    State(publisher): State<Publisher>,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let (text, author, message) = if is_json(&headers) {
        let parsed: DocumentBody = json_body(&body)?;
        (parsed.document, parsed.author, parsed.message)
    } else {
        let text =
            String::from_utf8(body.to_vec()).map_err(|_| AppError::BadRequest("the document is not UTF-8".into()))?;
        (text, None, None)
    };
    let attribution = attribution(&headers, author, message, None)?;
    let proposal = publisher.read(text)?;
    Ok(answer(publisher.write(proposal, attribution, publish_options(options), Basis::Standalone).await?))
}

/// The body of `PUT /api/v1/services/{name}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceBody {
    config: serde_json::Map<String, Value>,
    author: Option<String>,
    message: Option<String>,
}

/// `PUT /api/v1/services/{name}`.
#[utoipa::path(
    put,
    path = "/api/v1/services/{name}",
    tag = "write",
    operation_id = "put_service",
    security(("bearer" = [])),
    params(
        ServiceName,
        WriteParams,
        WriteHeaders,
    ),
    request_body(content = super::openapi::ServiceRequest, content_type = "application/json"),
    responses(
        WriteAnswers,
        (status = 400, description = "A bad name (a bad percent-escape included), a value that is not a string, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        WriteRefusals,
    ),
)]
pub(super) async fn put_service(
    State(publisher): State<Publisher>,
    ServiceName(name): ServiceName,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let (entries, author, message) = service_body(&body, |key, value| match value {
        Value::String(v) => Ok(v),
        other => Err(not_a_string(key, &other)),
    })?;
    let attribution = attribution(&headers, author, message, None)?;
    Ok(answer(publisher.write_service(&name, ServiceEdit::Set(entries), attribution, publish_options(options)).await?))
}

/// `PATCH /api/v1/services/{name}`: a JSON merge patch (RFC 7396) of the service's settings. The
/// body has the shape of a `PUT`'s, but `config` names only the keys to change: a string sets
/// the key (in place, so the other keys and their order stay), `null` removes it. A service that
/// is not configured yet is created from the patch.
#[utoipa::path(
    patch,
    path = "/api/v1/services/{name}",
    tag = "write",
    operation_id = "patch_service",
    security(("bearer" = [])),
    params(
        ServiceName,
        WriteParams,
        WriteHeaders,
    ),
    request_body(
        description = "A JSON merge patch of `config`: a string sets a key, `null` removes it.",
        content(
            (super::openapi::ServicePatch = "application/merge-patch+json"),
            (super::openapi::ServicePatch = "application/json"),
        ),
    ),
    responses(
        WriteAnswers,
        (status = 400, description = "A bad name (a bad percent-escape included), a value that is neither a string nor null, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        WriteRefusals,
    ),
)]
pub(super) async fn patch_service(
    State(publisher): State<Publisher>,
    ServiceName(name): ServiceName,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let (patch, author, message) = service_body(&body, |key, value| match value {
        Value::String(v) => Ok(Some(v)),
        Value::Null => Ok(None),
        other => Err(not_a_string(key, &other)),
    })?;
    let attribution = attribution(&headers, author, message, None)?;
    Ok(answer(publisher.write_service(&name, ServiceEdit::Merge(patch), attribution, publish_options(options)).await?))
}

/// A per-service write's body: its `config` entries (each value taken by `value`), author and
/// message.
type ServiceWrite<T> = (Vec<(String, T)>, Option<String>, Option<String>);

fn service_body<T>(
    body: &[u8],
    value: impl Fn(&str, Value) -> Result<T, AppError>,
) -> Result<ServiceWrite<T>, AppError> {
    let parsed: ServiceBody = json_body(body)?;
    let mut entries = Vec::with_capacity(parsed.config.len());
    for (key, v) in parsed.config {
        let v = value(&key, v)?;
        entries.push((key, v));
    }
    Ok((entries, parsed.author, parsed.message))
}

fn not_a_string(key: &str, value: &Value) -> AppError {
    AppError::BadRequest(format!("the value of `{key}` must be a string, as agents receive it (got {value})"))
}

/// `DELETE /api/v1/services/{name}`.
#[utoipa::path(
    delete,
    path = "/api/v1/services/{name}",
    tag = "write",
    operation_id = "delete_service",
    security(("bearer" = [])),
    params(
        AnyServiceName,
        WriteParams,
        WriteHeaders,
    ),
    request_body(content = Option<NoteBody>, content_type = "application/json",
        description = "Optional: who and why."),
    responses(
        WriteAnswers,
        (status = 400, description = "A bad percent-escape in the name, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        WriteRefusals,
        (status = 404, description = "No such service is configured.", body = ErrorBody),
    ),
)]
pub(super) async fn delete_service(
    State(publisher): State<Publisher>,
    // Any name: one that is not configured is a 404, whether or not a write could create it.
    AnyServiceName(name): AnyServiceName,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let body: NoteBody = optional_json_body(&body)?;
    let attribution = attribution(&headers, body.author, body.message, None)?;
    Ok(answer(publisher.write_service(&name, ServiceEdit::Remove, attribution, publish_options(options)).await?))
}

/// `POST /api/v1/releases/{id}/rollback`.
#[utoipa::path(
    post,
    path = "/api/v1/releases/{id}/rollback",
    tag = "write",
    operation_id = "rollback",
    security(("bearer" = [])),
    params(
        ("id" = u64, Path, description = "The release to restore.", minimum = 0),
        WriteParams,
        WriteHeaders,
    ),
    request_body(content = Option<NoteBody>, content_type = "application/json",
        description = "Optional: who and why."),
    responses(
        WriteAnswers,
        (status = 400, description = "Not a release id, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        WriteRefusals,
        (status = 404, description = "No such release is kept.", body = ErrorBody),
    ),
)]
pub(super) async fn rollback(
    State(publisher): State<Publisher>,
    ReleaseId(id): ReleaseId,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let body: NoteBody = optional_json_body(&body)?;
    let message = body
        .message
        .or_else(|| header_text(&headers, MESSAGE_HEADER).ok().flatten())
        .or_else(|| Some(format!("Roll back to release {id}")));
    let attribution = attribution(&headers, body.author, message, Some(id))?;
    if !publisher.has_release(id) {
        return Err(AppError::NotFound(format!("no release {id}")));
    }
    let proposal = match publisher.release_document(id).await? {
        Some(text) => publisher.read(text)?,
        None => Proposal::delete(),
    };
    Ok(answer(publisher.write(proposal, attribution, publish_options(options), Basis::Standalone).await?))
}

/// A route that decides about the held change: `POST $path` makes `$decision`, its operation id
/// is the handler's name, and its answers are [`HeldAnswers`].
macro_rules! held_route {
    ($(#[$doc:meta])* $name:ident, $path:literal, $decision:expr) => {
        $(#[$doc])*
        #[utoipa::path(
            post,
            path = $path,
            tag = "write",
            operation_id = stringify!($name),
            security(("bearer" = [])),
            request_body(content = Option<super::openapi::HeldRequest>, content_type = "application/json",
                description = "Optional: the `held.since_ms` the operator saw."),
            responses(
                HeldAnswers,
                WriteRefusals,
            ),
        )]
        pub(super) async fn $name(
            State(publisher): State<Publisher>,
            HeldRequest { since_ms }: HeldRequest,
        ) -> Result<Response, AppError> {
            decide_held(&publisher, since_ms, $decision).await
        }
    };
}

held_route!(
    /// `POST /api/v1/held/confirm`.
    confirm_held,
    "/api/v1/held/confirm",
    HeldDecision::Confirm
);

held_route!(
    /// `POST /api/v1/held/discard`.
    discard_held,
    "/api/v1/held/discard",
    HeldDecision::Discard
);

/// `POST /api/v1/held/confirm` or `/discard`.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct HeldAnswer {
    /// Confirm: the held change is installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = bool)]
    confirmed: Option<bool>,
    /// Discard: the held change is dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = bool)]
    discarded: Option<bool>,
    /// The served table's version.
    version: u64,
    /// Services served.
    #[schema(value_type = u64)]
    services: usize,
    /// Confirm: the newest release.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<ReleaseSummary>)]
    release: Option<Option<ReleaseSummary>>,
}

async fn decide_held(
    publisher: &Publisher,
    since_ms: Option<u64>,
    decision: HeldDecision,
) -> Result<Response, AppError> {
    let body = match publisher.decide_held(decision, since_ms).await? {
        HeldDecided::Confirmed { version, services, release } => HeldAnswer {
            confirmed: Some(true),
            version,
            services,
            release: Some(release.map(|r| (*r).clone())),
            ..HeldAnswer::default()
        },
        HeldDecided::Discarded { version, services } => {
            HeldAnswer { discarded: Some(true), version, services, ..HeldAnswer::default() }
        }
    };
    Ok(Json(body).into_response())
}
