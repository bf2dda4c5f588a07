//! The read side of the admin API. Every answer is JSON; times are Unix milliseconds (`*_ms`).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/v1/status` | served version, store status, newest release, the last refused document with its text, fleet settings |
//! | `GET /api/v1/services` | every configured service: digest, key count, last change, agents seen, how many applied / behind / stuck; and the names agents poll that have no configuration |
//! | `GET /api/v1/services/{name}` | one service: configuration, digest, last change and every agent (peer, instance, last seen, digest held, state) |
//! | `GET /api/v1/releases?limit=N` | releases newest first, with per-service digest changes |
//! | `GET /api/v1/releases/{id}` | one release with key-level changes and its document text |
//! | `GET /api/v1/configurations` | the current document text |
//!
//! Answers that a write can be conditioned on carry `ETag: "<release id>"`, the newest release.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, X_CONTENT_TYPE_OPTIONS};
use axum::http::{HeaderName, HeaderValue};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use skyconf_core::Digest;

use super::extract::{ReleaseId, ServiceName};
use super::{Admin, AppError};
use crate::fleet::StateCounts;
use crate::releases::Release;
use crate::unix_time::unix_ms;

/// The web page: one static HTML file with its script and style inline.
const PAGE: &str = include_str!("../../assets/index.html");

/// How many names of unconfigured services polled by agents are listed at most.
const MAX_UNCONFIGURED_LISTED: usize = 1000;

pub(super) async fn page() -> impl IntoResponse {
    static CSP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let csp = CSP.get_or_init(|| crate::security::browser::page_csp(PAGE)).clone();
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8".to_owned()),
            (CACHE_CONTROL, "no-cache".to_owned()),
            (X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (axum::http::header::CONTENT_SECURITY_POLICY, csp),
        ],
        PAGE,
    )
}

/// `ETag: "<id>"` of the newest release, when there is one.
pub(super) fn etag(admin: &Admin) -> Option<(HeaderName, HeaderValue)> {
    let id = admin.releases.latest()?.id;
    Some((ETAG, HeaderValue::from_str(&format!("\"{id}\"")).ok()?))
}

/// A release without its key-level detail.
pub(super) fn summary(release: &Release) -> Value {
    json!({
        "id": release.id,
        "at_ms": release.at_ms,
        "author": release.author,
        "message": release.message,
        "origin": release.origin,
        "rollback_of": release.rollback_of,
        "version": release.version,
        "document_sha256": release.document_sha256,
        "services": release.digests.len(),
        "changes": release.changes.iter().map(|c| json!({
            "service": c.service,
            "change": c.change,
            "digest_before": c.digest_before,
            "digest_after": c.digest_after,
            "keys": c.keys.len(),
        })).collect::<Vec<_>>(),
    })
}

fn last_change(admin: &Admin, service: &str) -> Value {
    match admin.releases.last_change(service) {
        Some(r) => json!({ "release": r.id, "at_ms": r.at_ms }),
        None => Value::Null,
    }
}

pub(super) async fn status(State(admin): State<Admin>) -> Json<Value> {
    let snapshot = admin.served.snapshot();
    let fleet = admin.fleet.options();
    let rejection = match admin.releases.last_rejection() {
        Some(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        None => admin.served.last_rejection().map_or(Value::Null, |r| {
            json!({
                "origin": r.origin,
                "error": r.error,
                "at_ms": unix_ms(r.at),
                "text": null,
                "truncated": false,
            })
        }),
    };
    Json(json!({
        "ready": snapshot.ready(),
        "version": snapshot.version,
        "installed_at_ms": unix_ms(snapshot.installed_at),
        "services": snapshot.table.len(),
        "store": admin.store.status(),
        "writable": admin.writer.is_some(),
        "release": admin.releases.latest().map(|r| r.id),
        "retention": admin.releases.retention(),
        "last_rejection": rejection,
        "fleet": {
            "tracked": admin.fleet.tracked(),
            "untracked_polls": admin.fleet.untracked_polls(),
            "stuck_after_polls": fleet.stuck_after_polls,
            "expire_after_s": fleet.expire_after.as_secs(),
        },
    }))
}

pub(super) async fn services(State(admin): State<Admin>) -> Json<Value> {
    let snapshot = admin.served.snapshot();
    let mut counts = admin.fleet.counts(|service| snapshot.answer(service).digest.clone());
    let services: Vec<Value> = snapshot
        .table
        .services()
        .map(|s| {
            let c = counts.remove(s.name()).unwrap_or_default();
            json!({
                "name": s.name(),
                "digest": s.digest().as_str(),
                "keys": s.entries().len(),
                "last_change": last_change(&admin, s.name()),
                "agents": c.agents,
                "applied": c.applied,
                "behind": c.behind,
                "stuck": c.stuck,
            })
        })
        .collect();
    let unconfigured: Vec<Value> = counts
        .iter()
        .take(MAX_UNCONFIGURED_LISTED)
        .map(|(name, c)| json!({ "name": name, "digest": Digest::empty().as_str(), "agents": c.agents, "applied": c.applied, "behind": c.behind, "stuck": c.stuck }))
        .collect();
    Json(json!({
        "version": snapshot.version,
        "release": admin.releases.latest().map(|r| r.id),
        "services": services,
        "unconfigured": unconfigured,
    }))
}

pub(super) async fn service(
    State(admin): State<Admin>,
    ServiceName(name): ServiceName,
) -> Result<impl IntoResponse, AppError> {
    let snapshot = admin.served.snapshot();
    let current = &snapshot.answer(&name).digest;
    let agents = admin.fleet.agents_of(&name, current);
    let config = snapshot.table.get(&name);
    if config.is_none() && agents.is_empty() {
        return Err(AppError::NotFound(format!("no service `{name}` is configured or polled")));
    }
    let mut counts = StateCounts::default();
    for agent in &agents {
        match agent.state {
            crate::fleet::AgentState::Applied => counts.applied += 1,
            crate::fleet::AgentState::Behind => counts.behind += 1,
            crate::fleet::AgentState::Stuck => counts.stuck += 1,
        }
        counts.agents += 1;
    }
    let entries: serde_json::Map<String, Value> = config
        .map(|c| c.entries().iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
        .unwrap_or_default();
    let body = json!({
        "name": name,
        "configured": config.is_some(),
        "digest": current.as_str(),
        "config": entries,
        "keys": entries.len(),
        "last_change": last_change(&admin, &name),
        "version": snapshot.version,
        "counts": counts,
        "stuck_after_polls": admin.fleet.options().stuck_after_polls,
        "agents": agents,
    });
    Ok((etag(&admin).into_iter().collect::<Vec<_>>().into_iter().collect::<axum::http::HeaderMap>(), Json(body)))
}

/// `?limit=N`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ListQuery {
    limit: Option<usize>,
}

pub(super) async fn releases(
    State(admin): State<Admin>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(query) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let limit = query.limit.unwrap_or(100);
    let list = admin.releases.list();
    Ok(Json(json!({
        "retention": admin.releases.retention(),
        "total": list.len(),
        "releases": list.iter().take(limit).map(|r| summary(r)).collect::<Vec<_>>(),
    })))
}

/// Reads a release's text off the async threads.
pub(super) async fn document_of(admin: &Admin, id: u64) -> Result<Option<String>, AppError> {
    let releases = std::sync::Arc::clone(&admin.releases);
    let text = tokio::task::spawn_blocking(move || releases.document(id))
        .await
        .map_err(|e| AppError::Internal(format!("reading release {id}: {e}")))?
        .map_err(|e| AppError::Unavailable(e.to_string()))?;
    text.ok_or_else(|| AppError::NotFound(format!("release {id} is not kept")))
}

pub(super) async fn release(State(admin): State<Admin>, ReleaseId(id): ReleaseId) -> Result<Json<Value>, AppError> {
    let release = admin.releases.get(id).ok_or_else(|| AppError::NotFound(format!("no release {id}")))?;
    let document = document_of(&admin, id).await?;
    let mut body = serde_json::to_value(&*release).map_err(|e| AppError::Internal(e.to_string()))?;
    body["document"] = document.map_or(Value::Null, Value::String);
    body["previous"] = admin.releases.previous(id).map_or(Value::Null, |p| json!(p.id));
    body["current"] = json!(admin.releases.latest().is_some_and(|l| l.id == id));
    Ok(Json(body))
}

pub(super) async fn configurations(State(admin): State<Admin>) -> Result<impl IntoResponse, AppError> {
    let snapshot = admin.served.snapshot();
    let latest = admin.releases.latest();
    let document = match &latest {
        Some(r) => document_of(&admin, r.id).await?,
        None => None,
    };
    let body = json!({
        "release": latest.map(|r| r.id),
        "version": snapshot.version,
        "document": document,
    });
    Ok((etag(&admin).into_iter().collect::<axum::http::HeaderMap>(), Json(body)))
}
