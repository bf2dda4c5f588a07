//! The read side of the admin API. Every answer is JSON; times are Unix milliseconds (`*_ms`).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/v1/status` | served version, store status, newest release, the last refused document with its text, fleet settings, held polls, the gateway's OAPs, this replica's id and every replica sharing the store |
//! | `GET /api/v1/services` | every configured service: digest, key count, last change, agents seen, how many applied / behind / stuck (summed over the replicas); and the names agents poll that have no configuration |
//! | `GET /api/v1/services/{name}` | one service: configuration, digest, last change and every agent (peer, instance, properties, agent version, last seen, digest held, state, the replica it polls), with each replica's counts |
//! | `GET /api/v1/instances?limit=N&cursor=C` | a page of the live instances agents said they are (`ManagementService` calls): service, name, peer, whether another live connection claims the name, properties, agent version, and each service its connection polls with its state; by service, name, peer; `limit` defaults to 100, at most [`instances::MAX_INSTANCES_PAGE`]; `cursor` pages on (`next_cursor`; empty: the first page). The first page also lists the anonymous pollers, whose connection never said |
//! | `GET /api/v1/releases?limit=N&before=ID` | a page of release summaries, newest first: who, when, why, how many services changed and the first 20 of them (no digests, no key-level changes); `limit` defaults to 50, at most 500; `before` pages on (`next_before` of the previous page) |
//! | `GET /api/v1/releases/{id}` | one release in full: every changed service with digests and key-level changes, and its document text (read from its file) |
//! | `GET /api/v1/releases/{id}/compare/{other}` | what changed from release `id` to release `other` (any two kept releases, either order): every changed service with digests and key-level changes, at most 1000 services (`truncated` says when there were more) |
//! | `GET /api/v1/services/{name}/history?limit=N&before=ID` | the kept releases that changed this service, newest first, each with its change (kind, digests, keys); `limit` defaults to 20, at most 100; `before` pages on (`next_before`) |
//! | `GET /api/v1/configurations` | the current document text |
//!
//! Each answer is one type next to its handler ([`status`](mod@status),
//! [`services`](mod@services), [`instances`](mod@instances), [`releases`](mod@releases)): what
//! the handler serialises is what the OpenAPI description says, and the failures every read
//! shares are [`ReadFailures`].
//!
//! With several replicas on a shared store, the fleet views add the other replicas' published
//! summaries (see [`crate::fleet::replicas`]) to this replica's live table: their rows carry the
//! replica they poll and `as_of_ms`, when that replica published them.
//!
//! Answers that a write can be conditioned on carry `ETag: "<release id>"`: the release the body
//! was built from. Body and ETag come from one snapshot of the served table (its version names
//! its release), never from two reads that a write could fall between; so an `If-Match` with that
//! ETag passes only while the content the client saw is still the newest release.

pub(super) mod instances;
pub(super) mod releases;
pub(super) mod services;
pub(super) mod status;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, X_CONTENT_TYPE_OPTIONS};
use axum::http::{HeaderName, HeaderValue};
use axum::response::IntoResponse;

pub(super) use self::instances::instances;
pub(super) use self::releases::{compare, configurations, history, release, releases};
pub(super) use self::services::{service, services};
pub(super) use self::status::status;
use super::Admin;
use super::error::ErrorBody;
use crate::fleet::replicas::Summary;

/// The web page: one static HTML file with its script and style inline.
const PAGE: &str = include_str!("../../../assets/index.html");

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

/// The failures every read route shares (its own, a 400 or a 404, it lists itself).
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a description only: `AppError` builds these answers")]
pub(crate) enum ReadFailures {
    /// No token, or an unknown one.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A cross-site request, or an unknown Host.
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// `ETag: "<id>"` of release `id`, when there is one.
pub(super) fn etag(id: Option<u64>) -> axum::http::HeaderMap {
    id.and_then(|id| HeaderValue::from_str(&format!("\"{id}\"")).ok())
        .map(|value| (ETAG, value))
        .into_iter()
        .collect::<Vec<(HeaderName, HeaderValue)>>()
        .into_iter()
        .collect()
}

/// This replica's id (`None` without a replica view, as in unit tests of the API).
fn own_id(admin: &Admin) -> Option<String> {
    admin.replicas.as_ref().map(|r| r.id().to_owned())
}

/// The other replicas' summaries, as last read (none on a single-replica store).
fn peers(admin: &Admin) -> std::sync::Arc<Vec<Summary>> {
    admin.replicas.as_ref().map_or_else(Default::default, |r| r.peers())
}
