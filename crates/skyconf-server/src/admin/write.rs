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
//! Several replicas. Where the store has revisions (etcd, ZooKeeper), release ids are the
//! store's revisions of the document, and a write that builds on what was read — a per-service
//! edit, or any write with `If-Match` — is a compare-and-swap on the revision of the served
//! document ([`Expect::At`]): refused by the store, on whichever replica, once another write
//! landed. A per-service write without `If-Match` that lost that race is built again on the newer
//! document ([`MAX_REBASES`] times); with `If-Match` it answers 409. A whole document or a
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

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use skyconf_core::AgentConfigurations;
use skyconf_core::diff::diff;
use skyconf_core::warnings::{Warning, warnings};
use skyconf_core::writer;
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect};
use tokio::sync::OwnedMutexGuard;

use super::extract::{AnyServiceName, HeldRequest, ReleaseId, ServiceName, WriteOptions, WriteRequest, json_body};
use super::openapi::{
    ErrorBody, HeldAnswer as HeldAnswerBody, WriteAnswer, WriteHeaders, WriteParams, WriteUnavailable,
};
use super::read::{document_of, summary};
use super::{Admin, AppError};
use crate::releases::{Attribution, Durability, document_hash};
use crate::served::Snapshot;
use crate::store_task::{HeldAnswer, HeldDecision};

/// The header naming who makes a change.
pub const AUTHOR_HEADER: &str = "x-skyconf-author";
/// The header saying why.
pub const MESSAGE_HEADER: &str = "x-skyconf-message";
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

/// The optional JSON body of a delete or rollback.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoteBody {
    author: Option<String>,
    message: Option<String>,
}

fn note(body: &[u8]) -> Result<NoteBody, AppError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(NoteBody::default());
    }
    // `null` is no body, as the description has it (the body is optional and nullable).
    json_body::<Option<NoteBody>>(body).map(Option::unwrap_or_default)
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

/// A document to write: its text (`None`: delete the key), the table it reads as, and its
/// warnings ([`skyconf_core::warnings`], the list `skyconf validate` prints).
struct Proposal {
    text: Option<String>,
    table: AgentConfigurations,
    warnings: Vec<Warning>,
}

impl Proposal {
    fn read(admin: &Admin, text: String) -> Result<Self, AppError> {
        if text.len() > admin.options.max_document_bytes {
            return Err(AppError::TooLarge(format!(
                "the document is {} bytes, more than the limit of {} bytes",
                text.len(),
                admin.options.max_document_bytes
            )));
        }
        let reading = skyconf_core::read_with_warnings(&text)?;
        let warnings = warnings(&reading, &text);
        Ok(Self { text: Some(text), table: reading.table, warnings })
    }

    /// Keeps the warnings about `service` and the whole document: a per-service write answers
    /// for what it changes, not for the other services' settings.
    fn warnings_of(mut self, service: &str) -> Self {
        self.warnings.retain(|w| w.service.as_deref().is_none_or(|s| s == service));
        self
    }
}

/// What a write of the document expects to replace in the store: the compare of its
/// compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Basis {
    /// The proposal is built on the served snapshot (a per-service edit) or the client named
    /// what it saw (`If-Match`): the store must still hold the document that snapshot was read
    /// from, at its revision — on every replica, since the revision is the store's own.
    Snapshot,
    /// The proposal stands on its own (a whole document or a rollback without `If-Match`): it
    /// replaces what this server last saw of the key.
    Standalone,
}

impl Basis {
    /// The store's expectation for a write based on `snapshot`. A snapshot whose revision is
    /// unknown (the store was not read since start-up, or the table was replaced several times
    /// since the snapshot was taken) cannot be written on: the write is refused as if the store
    /// had moved on. Never "as last seen" instead: the source may have seen a newer document
    /// than the snapshot, and a write on the snapshot would then undo it.
    fn expect(self, admin: &Admin, snapshot: &Snapshot) -> Result<Expect, AppError> {
        let revisions = admin.writer.as_ref().is_some_and(|w| w.revisions_boxed());
        match self {
            Self::Snapshot if revisions => admin.served.store_revision_of(snapshot.version).map(Expect::At).ok_or_else(|| {
                AppError::StoreMoved(
                    "the served document is being replaced, or was not read from the store since start-up; read it again"
                        .into(),
                )
            }),
            _ => Ok(Expect::Seen),
        }
    }
}

/// Checks, writes, waits; the guard keeps writes of this server one at a time.
/// `snapshot` is the served table the proposal was built from (taken under the guard).
async fn apply(
    admin: &Admin,
    guard: OwnedMutexGuard<()>,
    snapshot: Arc<Snapshot>,
    proposal: Proposal,
    attribution: Attribution,
    options: WriteOptions,
    basis: Basis,
) -> Result<Response, AppError> {
    let latest = admin.releases.latest();
    let latest_id = latest.as_ref().map_or(0, |r| r.id);
    // The newest release must be the one served: a release is recorded just before its table is
    // installed, and an If-Match on a table about to be replaced must not pass.
    let served_id = admin.releases.served_as(snapshot.version).unwrap_or(0);
    if let Some(expected) = options.if_match
        && (expected != latest_id || served_id != latest_id)
    {
        return Err(AppError::Conflict(format!(
            "the configuration changed: If-Match names release {expected}, the newest is {latest_id}"
        )));
    }
    let changes = diff(&snapshot.table, &proposal.table);
    let hash = proposal.text.as_deref().map(document_hash);
    if options.dry_run {
        return Ok(Json(json!({
            "dry_run": true,
            "written": false,
            "changes": changes,
            "document": proposal.text,
            "document_sha256": hash,
            "base_release": latest.map(|r| r.id),
            "warnings": proposal.warnings,
        }))
        .into_response());
    }
    if snapshot.ready()
        && latest.as_ref().is_some_and(|l| l.document_sha256 == hash)
        && snapshot.table == proposal.table
    {
        return Ok(Json(json!({
            "dry_run": false,
            "written": false,
            "unchanged": true,
            "served": true,
            "changes": changes,
            "release": latest.map(|r| summary(&r)),
            "version": snapshot.version,
            "warnings": proposal.warnings,
        }))
        .into_response());
    }
    let basis = if options.if_match.is_some() { Basis::Snapshot } else { basis };
    let expect = basis.expect(admin, &snapshot)?;
    // From here the write runs to its end even when the client goes away. Dropped halfway, it
    // released the write lock while its store write could still land, after a later write that was
    // acknowledged (the soak found it: a write abandoned while etcd was frozen overwrote the next
    // one when etcd came back).
    let admin = admin.clone();
    tokio::spawn(async move {
        let _guard = guard;
        let write = Write { proposal, changes, hash, latest_id, attribution, expect };
        write_and_wait(&admin, write, options.wait).await
    })
    .await
    .map_err(|error| AppError::Internal(format!("the write task failed: {error}")))?
}

/// A checked write, ready for the store.
struct Write {
    proposal: Proposal,
    changes: Vec<skyconf_core::diff::ServiceChange>,
    /// The proposal's document hash.
    hash: Option<String>,
    /// The newest release when the write was checked.
    latest_id: u64,
    attribution: Attribution,
    expect: Expect,
}

/// Writes the proposal to the store and waits (up to `wait`) for it to be served and its release
/// to be durable.
async fn write_and_wait(admin: &Admin, write: Write, wait: std::time::Duration) -> Result<Response, AppError> {
    let Write { proposal, changes, hash, latest_id, attribution, expect } = write;
    let writer =
        admin.writer.as_ref().ok_or_else(|| AppError::Conflict("this server has no store to write to".into()))?;
    let mut served_changes = admin.served.subscribe();
    let started = Instant::now();
    let rollout = attribution.origin.strip_prefix(crate::releases::ORIGIN_ROLLOUT).map(str::to_owned);
    admin.releases.expect(proposal.text.as_deref(), attribution);
    if let Err(error) = writer.put_boxed(AGENT_CONFIGURATIONS_KEY, proposal.text.as_deref(), expect).await {
        admin.releases.withdraw(proposal.text.as_deref());
        tracing::warn!(%error, "The store refused an admin write.");
        return Err(error.into());
    }
    match rollout {
        Some(rollout) => tracing::info!(
            changed = changes.len(),
            %rollout,
            "The rollout driver wrote agent configurations to the store: the rollout's candidate."
        ),
        None => tracing::info!(changed = changes.len(), "Wrote agent configurations to the store from the admin API."),
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(release) = admin.releases.find_after(latest_id, hash.as_deref()) {
            let served = admin.served.snapshot();
            if served.version >= release.version {
                let served_after_ms = started.elapsed().as_millis() as u64;
                let durability = admin.releases.durable(release.id, deadline).await;
                let mut body = json!({
                    "dry_run": false,
                    "written": true,
                    "served": true,
                    "durable": match durability {
                        Durability::Durable => Some(true),
                        Durability::Failed(_) => Some(false),
                        Durability::Memory | Durability::Pending => None,
                    },
                    "served_after_ms": served_after_ms,
                    "changes": changes,
                    "release": summary(&release),
                    "version": release.version,
                    "warnings": proposal.warnings,
                });
                if let Durability::Failed(why) = durability {
                    body["error"] = json!(format!("the change is served, but it is not on disk: {why}"));
                    return Ok((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response());
                }
                return Ok(Json(body).into_response());
            }
        }
        match tokio::time::timeout_at(deadline, served_changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => break,
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "dry_run": false,
            "written": true,
            "served": false,
            "message": format!("the store took the document; it was not served within {wait:?}"),
            "changes": changes,
            "warnings": proposal.warnings,
        })),
    )
        .into_response())
}

/// Writes `text` as the whole document on release `base` (a rollout's last step), waiting for it
/// to be served: the release it became. Refused when the configuration changed since `base`.
pub(crate) async fn write_planned(
    admin: &Admin,
    text: String,
    attribution: Attribution,
    base: u64,
) -> Result<u64, AppError> {
    let proposal = Proposal::read(admin, text)?;
    let hash = proposal.text.as_deref().map(document_hash);
    let guard = Arc::clone(&admin.write_lock).lock_owned().await;
    let snapshot = admin.served.snapshot();
    let options =
        WriteOptions { dry_run: false, wait: admin.options.write_wait.max(PLANNED_WAIT), if_match: Some(base) };
    let response = apply(admin, guard, snapshot, proposal, attribution, options, Basis::Snapshot).await?;
    if response.status() != StatusCode::OK {
        return Err(AppError::NotWritten(format!(
            "the store took the document but it was not served as expected ({})",
            response.status()
        )));
    }
    admin
        .releases
        .find_after(base, hash.as_deref())
        .map(|release| release.id)
        .ok_or_else(|| AppError::NotWritten("the document was served but its release is not in the history".into()))
}

/// How long [`write_planned`] waits for its document to be served, at least.
const PLANNED_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The JSON form of `PUT /api/v1/configurations`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentBody {
    document: String,
    author: Option<String>,
    message: Option<String>,
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
            (super::openapi::DocumentRequest = "application/json"),
            (String = "application/yaml"),
        ),
    ),
    responses(
        (status = 200, description = "Served (or, with `dry_run`, what would change; or `unchanged`).", body = WriteAnswer),
        (status = 202, description = "The store took it, but it was not served within `wait`.", body = WriteAnswer),
        (status = 400, description = "A refused document (with line and column in `details`), bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "`If-Match` names an older release, or the store cannot be written.", body = ErrorBody),
        (status = 413, description = "The body or the document is larger than the limit.", body = ErrorBody),
        (status = 500, description = "The store could not write (permissions, a full disk); nothing was written.", body = ErrorBody),
        (status = 503, description = "The store is unavailable (nothing written), or the change is served but its release is not on disk.", body = WriteUnavailable),
    ),
)]
pub(super) async fn put_configurations(
    State(admin): State<Admin>,
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
    let proposal = Proposal::read(&admin, text)?;
    let guard = Arc::clone(&admin.write_lock).lock_owned().await;
    let snapshot = admin.served.snapshot();
    apply(&admin, guard, snapshot, proposal, attribution, options, Basis::Standalone).await
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
        ("name" = String, Path, description = "The service (percent-encoded): a configured one, or a new name of at most \
            512 bytes without control characters.", pattern = r"^[^\x00-\x1f\x7f-\x9f]+$", max_length = 512),
        WriteParams,
        WriteHeaders,
    ),
    request_body(content = super::openapi::ServiceRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Served (or, with `dry_run`, what would change; or `unchanged`).", body = WriteAnswer),
        (status = 202, description = "The store took it, but it was not served within `wait`.", body = WriteAnswer),
        (status = 400, description = "A bad name (a bad percent-escape included), a value that is not a string, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "`If-Match` names an older release, or the store cannot be written.", body = ErrorBody),
        (status = 413, description = "The body or the document is larger than the limit.", body = ErrorBody),
        (status = 500, description = "The store could not write (permissions, a full disk); nothing was written.", body = ErrorBody),
        (status = 503, description = "The store is unavailable (nothing written), or the change is served but its release is not on disk.", body = WriteUnavailable),
    ),
)]
pub(super) async fn put_service(
    State(admin): State<Admin>,
    ServiceName(name): ServiceName,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let (entries, author, message) = service_body(&body, |key, value| match value {
        Value::String(v) => Ok(v),
        other => Err(not_a_string(key, &other)),
    })?;
    let attribution = attribution(&headers, author, message, None)?;
    write_service(&admin, &name, ServiceChange::Set(entries), attribution, options).await
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
        ("name" = String, Path, description = "The service (percent-encoded): a configured one, or a new name of at most \
            512 bytes without control characters.", pattern = r"^[^\x00-\x1f\x7f-\x9f]+$", max_length = 512),
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
        (status = 200, description = "Served (or, with `dry_run`, what would change; or `unchanged`).", body = WriteAnswer),
        (status = 202, description = "The store took it, but it was not served within `wait`.", body = WriteAnswer),
        (status = 400, description = "A bad name (a bad percent-escape included), a value that is neither a string nor null, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "`If-Match` names an older release, or the store cannot be written.", body = ErrorBody),
        (status = 413, description = "The body or the document is larger than the limit.", body = ErrorBody),
        (status = 500, description = "The store could not write (permissions, a full disk); nothing was written.", body = ErrorBody),
        (status = 503, description = "The store is unavailable (nothing written), or the change is served but its release is not on disk.", body = WriteUnavailable),
    ),
)]
pub(super) async fn patch_service(
    State(admin): State<Admin>,
    ServiceName(name): ServiceName,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let (patch, author, message) = service_body(&body, |key, value| match value {
        Value::String(v) => Ok(Some(v)),
        Value::Null => Ok(None),
        other => Err(not_a_string(key, &other)),
    })?;
    let attribution = attribution(&headers, author, message, None)?;
    write_service(&admin, &name, ServiceChange::Merge(patch), attribution, options).await
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
        ("name" = String, Path, description = "The service (percent-encoded)."),
        WriteParams,
        WriteHeaders,
    ),
    request_body(content = Option<super::openapi::NoteRequest>, content_type = "application/json",
        description = "Optional: who and why."),
    responses(
        (status = 200, description = "Served (or, with `dry_run`, what would change; or `unchanged`).", body = WriteAnswer),
        (status = 202, description = "The store took it, but it was not served within `wait`.", body = WriteAnswer),
        (status = 400, description = "A bad percent-escape in the name, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 404, description = "No such service is configured.", body = ErrorBody),
        (status = 409, description = "`If-Match` names an older release, or the store cannot be written.", body = ErrorBody),
        (status = 413, description = "The body or the document is larger than the limit.", body = ErrorBody),
        (status = 500, description = "The store could not write (permissions, a full disk); nothing was written.", body = ErrorBody),
        (status = 503, description = "The store is unavailable (nothing written), or the change is served but its release is not on disk.", body = WriteUnavailable),
    ),
)]
pub(super) async fn delete_service(
    State(admin): State<Admin>,
    // Any name: one that is not configured is a 404, whether or not a write could create it.
    AnyServiceName(name): AnyServiceName,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let body = note(&body)?;
    let attribution = attribution(&headers, body.author, body.message, None)?;
    write_service(&admin, &name, ServiceChange::Remove, attribution, options).await
}

/// What a per-service write does to the service.
enum ServiceChange {
    /// Replace its settings (create it when new).
    Set(Vec<(String, String)>),
    /// Set (`Some`) or remove (`None`) the named keys, keeping the others.
    Merge(Vec<(String, Option<String>)>),
    /// Remove the service.
    Remove,
}

/// How many times a per-service write without `If-Match` is built again on a newer document
/// when the store changed under it (another replica's write, a hand edit).
const MAX_REBASES: usize = 16;

/// Applies `change` to one service of the served document and writes the result, conditioned
/// on the store still holding that document: no concurrent write is lost, whether from this
/// server (the write lock) or from another replica (the store's compare-and-swap). Without
/// `If-Match`, a write that lost the race is built again on the newer document, up to
/// [`MAX_REBASES`] times.
async fn write_service(
    admin: &Admin,
    name: &str,
    change: ServiceChange,
    attribution: Attribution,
    options: WriteOptions,
) -> Result<Response, AppError> {
    let mut rebases = 0;
    loop {
        let guard = Arc::clone(&admin.write_lock).lock_owned().await;
        // A conditional write need not wait: `apply` refuses it while the served table lags.
        let current = if options.if_match.is_some() { admin.served.snapshot() } else { newest_served(admin).await };
        let existing = current.table.get(name);
        let entries = match &change {
            ServiceChange::Set(entries) => Some(entries.clone()),
            ServiceChange::Merge(patch) => {
                Some(writer::merge_entries(existing.map_or(&[], |s| s.own_entries()), patch))
            }
            ServiceChange::Remove if existing.is_none() => {
                return Err(AppError::NotFound(format!("no service `{name}` is configured")));
            }
            ServiceChange::Remove => None,
        };
        let proposal = Proposal::read(admin, writer::with_service(&current.table, name, entries))?.warnings_of(name);
        let (version, expected) = (current.version, admin.served.store_revision_of(current.version));
        match apply(admin, guard, current, proposal, attribution.clone(), options, Basis::Snapshot).await {
            Err(AppError::StoreMoved(why)) if options.if_match.is_none() && rebases < MAX_REBASES => {
                rebases += 1;
                tracing::info!(service = name, rebases, %why, "The store changed under a per-service write; building it again on the newer document.");
                if !newer_than(admin, version, expected).await {
                    return Err(AppError::StoreMoved(format!(
                        "{why}; the store holds a document this server does not serve (refused or held, see \
                         GET /api/v1/status): replace it with PUT /api/v1/configurations or roll back"
                    )));
                }
            }
            answer => return answer,
        }
    }
}

/// Waits (at most [`CATCH_UP`]) until this server has seen the store move past the served
/// `version` read at `revision`: a newer table, or the same text at a newer revision. False when
/// it did not.
async fn newer_than(admin: &Admin, version: u64, revision: Option<Option<skyconf_sources::Revision>>) -> bool {
    let mut changes = admin.store.subscribe();
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        if admin.served.snapshot().version != version || admin.served.store_revision_of(version) != revision {
            return true;
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return false,
        }
    }
}

/// How long a per-service write waits for a recorded release to be installed before it builds
/// on the served table anyway.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// The served snapshot, once it is the newest release's: a release is recorded just before its
/// table is installed, and a per-service write built on the table before it would undo it.
async fn newest_served(admin: &Admin) -> Arc<Snapshot> {
    let mut changes = admin.served.subscribe();
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let snapshot = admin.served.snapshot();
        let behind = match (admin.releases.served_as(snapshot.version), admin.releases.latest()) {
            (Some(served), Some(latest)) => served < latest.id,
            _ => false,
        };
        if !behind {
            return snapshot;
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return admin.served.snapshot(),
        }
    }
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
    request_body(content = Option<super::openapi::NoteRequest>, content_type = "application/json",
        description = "Optional: who and why."),
    responses(
        (status = 200, description = "Served (or, with `dry_run`, what would change; or `unchanged`).", body = WriteAnswer),
        (status = 202, description = "The store took it, but it was not served within `wait`.", body = WriteAnswer),
        (status = 400, description = "Not a release id, bad JSON (a key given twice included) or a bad parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 404, description = "No such release is kept.", body = ErrorBody),
        (status = 409, description = "`If-Match` names an older release, or the store cannot be written.", body = ErrorBody),
        (status = 413, description = "The body or the document is larger than the limit.", body = ErrorBody),
        (status = 500, description = "The store could not write (permissions, a full disk); nothing was written.", body = ErrorBody),
        (status = 503, description = "The store is unavailable (nothing written), or the change is served but its release is not on disk.", body = WriteUnavailable),
    ),
)]
pub(super) async fn rollback(
    State(admin): State<Admin>,
    ReleaseId(id): ReleaseId,
    WriteRequest { options, headers, body }: WriteRequest,
) -> Result<Response, AppError> {
    let body = note(&body)?;
    let message = body
        .message
        .or_else(|| header_text(&headers, MESSAGE_HEADER).ok().flatten())
        .or_else(|| Some(format!("Roll back to release {id}")));
    let attribution = attribution(&headers, body.author, message, Some(id))?;
    if admin.releases.get(id).is_none() {
        return Err(AppError::NotFound(format!("no release {id}")));
    }
    let proposal = match document_of(&admin, id).await? {
        Some(text) => Proposal::read(&admin, text)?,
        None => Proposal { text: None, table: AgentConfigurations::default(), warnings: Vec::new() },
    };
    let guard = Arc::clone(&admin.write_lock).lock_owned().await;
    let snapshot = admin.served.snapshot();
    apply(&admin, guard, snapshot, proposal, attribution, options, Basis::Standalone).await
}

/// `POST /api/v1/held/confirm`.
#[utoipa::path(
    post,
    path = "/api/v1/held/confirm",
    tag = "write",
    operation_id = "confirm_held",
    security(("bearer" = [])),
    request_body(content = Option<super::openapi::HeldRequest>, content_type = "application/json",
        description = "Optional: the `held.since_ms` the operator saw."),
    responses(
        (status = 200, description = "Decided.", body = HeldAnswerBody),
        (status = 400, description = "A query parameter (none is taken), or bad JSON (a key given twice included).", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "Nothing is held, or another change than `since_ms` names.", body = ErrorBody),
        (status = 413, description = "The body is larger than the limit.", body = ErrorBody),
        (status = 503, description = "The server is shutting down.", body = ErrorBody),
    ),
)]
pub(super) async fn confirm_held(
    State(admin): State<Admin>,
    HeldRequest { since_ms }: HeldRequest,
) -> Result<Response, AppError> {
    decide_held(&admin, since_ms, HeldDecision::Confirm).await
}

/// `POST /api/v1/held/discard`.
#[utoipa::path(
    post,
    path = "/api/v1/held/discard",
    tag = "write",
    operation_id = "discard_held",
    security(("bearer" = [])),
    request_body(content = Option<super::openapi::HeldRequest>, content_type = "application/json",
        description = "Optional: the `held.since_ms` the operator saw."),
    responses(
        (status = 200, description = "Decided.", body = HeldAnswerBody),
        (status = 400, description = "A query parameter (none is taken), or bad JSON (a key given twice included).", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON/YAML content type or `X-Skyconf-*` header, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "Nothing is held, or another change than `since_ms` names.", body = ErrorBody),
        (status = 413, description = "The body is larger than the limit.", body = ErrorBody),
        (status = 503, description = "The server is shutting down.", body = ErrorBody),
    ),
)]
pub(super) async fn discard_held(
    State(admin): State<Admin>,
    HeldRequest { since_ms }: HeldRequest,
) -> Result<Response, AppError> {
    decide_held(&admin, since_ms, HeldDecision::Discard).await
}

async fn decide_held(admin: &Admin, since_ms: Option<u64>, decision: HeldDecision) -> Result<Response, AppError> {
    let control = admin
        .held
        .as_ref()
        .ok_or_else(|| AppError::Conflict("nothing is held: this server holds no store changes".into()))?;
    let _guard = Arc::clone(&admin.write_lock).lock_owned().await;
    let answer = control
        .decide(decision, since_ms)
        .await
        .ok_or_else(|| AppError::Unavailable("the store task has stopped; the server is shutting down".into()))?;
    let snapshot = admin.served.snapshot();
    match answer {
        HeldAnswer::NothingHeld => Err(AppError::Conflict(
            "nothing is held: the change was installed, replaced or discarded meanwhile, or never held".into(),
        )),
        HeldAnswer::NotTheOneSeen { since_ms } => Err(AppError::Conflict(format!(
            "the change held now is not the one named by since_ms (it arrived at {since_ms}); nothing was changed"
        ))),
        // The reloader logs both decisions.
        HeldAnswer::Confirmed(_) => Ok(Json(json!({
            "confirmed": true,
            "version": snapshot.version,
            "services": snapshot.table.len(),
            "release": admin.releases.latest().map(|r| summary(&r)),
        }))
        .into_response()),
        HeldAnswer::Discarded => Ok(Json(json!({
            "discarded": true,
            "version": snapshot.version,
            "services": snapshot.table.len(),
        }))
        .into_response()),
    }
}
