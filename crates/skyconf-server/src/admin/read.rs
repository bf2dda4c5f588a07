//! The read side of the admin API. Every answer is JSON; times are Unix milliseconds (`*_ms`).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/v1/status` | served version, store status, newest release, the last refused document with its text, fleet settings, held polls, the gateway's OAPs, this replica's id and every replica sharing the store |
//! | `GET /api/v1/services` | every configured service: digest, key count, last change, agents seen, how many applied / behind / stuck (summed over the replicas); and the names agents poll that have no configuration |
//! | `GET /api/v1/services/{name}` | one service: configuration, digest, last change and every agent (peer, instance, properties, agent version, last seen, digest held, state, the replica it polls), with each replica's counts |
//! | `GET /api/v1/instances?limit=N&cursor=C` | a page of the live instances agents said they are (`ManagementService` calls): service, name, peer, whether another live connection claims the name, properties, agent version, and each service its connection polls with its state; by service, name, peer; `limit` defaults to 100, at most [`MAX_INSTANCES_PAGE`]; `cursor` pages on (`next_cursor`). The first page also lists the anonymous pollers, whose connection never said |
//! | `GET /api/v1/releases?limit=N&before=ID` | a page of release summaries, newest first: who, when, why, how many services changed and the first 20 of them (no digests, no key-level changes); `limit` defaults to 50, at most 500; `before` pages on (`next_before` of the previous page) |
//! | `GET /api/v1/releases/{id}` | one release in full: every changed service with digests and key-level changes, and its document text (read from its file) |
//! | `GET /api/v1/releases/{id}/compare/{other}` | what changed from release `id` to release `other` (any two kept releases, either order): every changed service with digests and key-level changes, at most 1000 services (`truncated` says when there were more) |
//! | `GET /api/v1/services/{name}/history?limit=N&before=ID` | the kept releases that changed this service, newest first, each with its change (kind, digests, keys); `limit` defaults to 20, at most 100; `before` pages on (`next_before`) |
//! | `GET /api/v1/configurations` | the current document text |
//!
//! With several replicas on a shared store, the fleet views add the other replicas' published
//! summaries (see [`crate::fleet::replicas`]) to this replica's live table: their rows carry the
//! replica they poll and `as_of_ms`, when that replica published them.
//!
//! Answers that a write can be conditioned on carry `ETag: "<release id>"`: the release the body
//! was built from. Body and ETag come from one snapshot of the served table (its version names
//! its release), never from two reads that a write could fall between; so an `If-Match` with that
//! ETag passes only while the content the client saw is still the newest release.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, X_CONTENT_TYPE_OPTIONS};
use axum::http::{HeaderName, HeaderValue};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use skyconf_core::Digest;

use super::extract::{AnyServiceName, ReleaseId};
use super::openapi::{ErrorBody, HistoryParams, InstanceParams, ListParams};
use super::{Admin, AppError};
use crate::fleet::StateCounts;
use crate::fleet::replicas::Summary;
use crate::releases::{MAX_SUMMARY_CHANGES, ReleaseLog, ReleaseSummary};
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

/// `ETag: "<id>"` of release `id`, when there is one.
pub(super) fn etag(id: Option<u64>) -> axum::http::HeaderMap {
    id.and_then(|id| HeaderValue::from_str(&format!("\"{id}\"")).ok())
        .map(|value| (ETAG, value))
        .into_iter()
        .collect::<Vec<(HeaderName, HeaderValue)>>()
        .into_iter()
        .collect()
}

/// How many release summaries a page holds by default, and at most.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;

/// A release without its per-service detail.
pub(super) fn summary(release: &ReleaseSummary) -> Value {
    serde_json::to_value(release).unwrap_or(Value::Null)
}

fn last_change(admin: &Admin, service: &str) -> Value {
    match admin.releases.last_change(service) {
        Some((release, at_ms)) => json!({ "release": release, "at_ms": at_ms }),
        None => Value::Null,
    }
}

/// This replica's id (`null` without a replica view, as in unit tests of the API).
fn own_id(admin: &Admin) -> Value {
    admin.replicas.as_ref().map_or(Value::Null, |r| json!(r.id()))
}

/// The other replicas' summaries, as last read (none on a single-replica store).
fn peers(admin: &Admin) -> std::sync::Arc<Vec<Summary>> {
    admin.replicas.as_ref().map_or_else(Default::default, |r| r.peers())
}

/// Every replica: this one (live) and the others (as of their last publish).
fn replica_list(admin: &Admin, local_agents: usize) -> Vec<Value> {
    let Some(replicas) = &admin.replicas else { return Vec::new() };
    let now = unix_ms(std::time::SystemTime::now());
    let mut list = vec![json!({
        "id": replicas.id(),
        "admin_addr": replicas.admin_addr(),
        "local": true,
        "updated_ms": now,
        "agents": local_agents,
        "rows_total": admin.fleet.tracked(),
        "truncated": false,
    })];
    list.extend(replicas.peers().iter().map(|peer| {
        json!({
            "id": peer.replica,
            "admin_addr": peer.admin_addr,
            "local": false,
            "updated_ms": peer.updated_ms,
            "agents": peer.agents,
            "rows_total": peer.rows_total,
            "truncated": peer.truncated,
        })
    }));
    list
}

/// An agent row with the replica it polls (and, for another replica's, when that was published).
fn labelled(row: impl serde::Serialize, replica: &Value, as_of_ms: Option<u64>) -> Value {
    let mut value = serde_json::to_value(row).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut value {
        fields.insert("replica".to_owned(), replica.clone());
        fields.insert("as_of_ms".to_owned(), as_of_ms.map_or(Value::Null, Value::from));
    }
    value
}

/// `GET /api/v1/status`.
#[utoipa::path(
    get,
    path = "/api/v1/status",
    tag = "read",
    operation_id = "status",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The server's state.", body = super::openapi::Status),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
    ),
)]
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
    let local_agents: usize = admin.fleet.counts(&admin.served.serving()).values().map(|c| c.agents).sum();
    let replicas = replica_list(&admin, local_agents);
    let all_agents: u64 = replicas.iter().filter_map(|r| r["agents"].as_u64()).sum::<u64>().max(local_agents as u64);
    Json(json!({
        "replica": own_id(&admin),
        "replicas": replicas,
        "ready": snapshot.ready(),
        "version": snapshot.version,
        "installed_at_ms": unix_ms(snapshot.installed_at),
        "services": snapshot.table.len(),
        "store": admin.store.status(),
        "writable": admin.writer.is_some(),
        "release": admin.releases.latest().map(|r| r.id),
        "retention": admin.releases.retention(),
        "unsaved_releases": admin.releases.unsaved(),
        "last_rejection": rejection,
        "held": admin.served.held(),
        "held_polls": admin.held_polls.as_ref().map_or(0, |held| held.get()),
        "gateway": admin.gateway.as_ref().map(|upstreams| gateway_status(upstreams)),
        "fleet": {
            "agents": local_agents,
            "agents_all_replicas": all_agents,
            "tracked": admin.fleet.tracked(),
            "tracked_unconfigured": admin.fleet.tracked_unconfigured(),
            "evictions": admin.fleet.evictions(),
            "untracked_polls": admin.fleet.untracked_polls(),
            "stuck_after_polls": fleet.stuck_after_polls,
            "expire_after_s": fleet.expire_after.as_secs(),
            "expect_identity": fleet.expect_identity,
            "identified": admin.fleet.identified(),
            "unkept_identities": admin.fleet.unkept_identities(),
            "properties_cut": admin.fleet.properties_cut(),
        },
    }))
}

/// `GET /api/v1/services`.
#[utoipa::path(
    get,
    path = "/api/v1/services",
    tag = "read",
    operation_id = "services",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every service with its fleet counts.", body = super::openapi::Services),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
    ),
)]
pub(super) async fn services(State(admin): State<Admin>) -> Json<Value> {
    let serving = admin.served.serving();
    let snapshot = &serving.snapshot;
    let mut counts = admin.fleet.counts(&serving);
    let local_agents = counts.values().map(|c| c.agents).sum();
    if let Some(replicas) = &admin.replicas {
        for (service, theirs) in replicas.peer_counts() {
            counts.entry(service).or_default().merge(&theirs);
        }
    }
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
                "new": c.new,
                "anonymous": c.anonymous,
            })
        })
        .collect();
    let unconfigured: Vec<Value> = counts
        .iter()
        .take(MAX_UNCONFIGURED_LISTED)
        .map(|(name, c)| json!({ "name": name, "digest": Digest::empty().as_str(), "agents": c.agents, "applied": c.applied, "behind": c.behind, "stuck": c.stuck, "new": c.new, "anonymous": c.anonymous }))
        .collect();
    Json(json!({
        "version": snapshot.version,
        "release": admin.releases.latest().map(|r| r.id),
        "replica": own_id(&admin),
        "replicas": replica_list(&admin, local_agents),
        "services": services,
        "unconfigured": unconfigured,
    }))
}

/// `GET /api/v1/services/{name}`.
#[utoipa::path(
    get,
    path = "/api/v1/services/{name}",
    tag = "read",
    operation_id = "service",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The service (percent-encoded).")),
    responses(
        (status = 200, description = "The service, its configuration and its agents.", body = super::openapi::ServiceDetail,
            headers(("ETag" = String, description = "`\"<release id>\"` of the served release, for `If-Match`."))),
        (status = 400, description = "Not a valid service name (a bad percent-escape).", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
        (status = 404, description = "No such service is configured or polled.", body = ErrorBody),
    ),
)]
pub(super) async fn service(
    State(admin): State<Admin>,
    AnyServiceName(name): AnyServiceName,
) -> Result<impl IntoResponse, AppError> {
    let serving = admin.served.serving();
    let snapshot = &serving.snapshot;
    let current = &snapshot.answer(&name).digest;
    let release = admin.releases.served_as(snapshot.version);
    let agents = admin.fleet.agents_of(&name, &serving);
    let config = snapshot.table.get(&name);
    let peers = peers(&admin);
    let polled_elsewhere = peers.iter().any(|peer| peer.services.contains_key(&name));
    if config.is_none() && agents.is_empty() && !polled_elsewhere {
        return Err(AppError::NotFound(format!("no service `{name}` is configured or polled")));
    }
    let mut counts = StateCounts::default();
    for agent in &agents {
        counts.add(agent.state);
    }
    let own = own_id(&admin);
    let mut replicas = vec![json!({ "id": own, "as_of_ms": null, "counts": counts, "listed": agents.len() })];
    let mut rows: Vec<Value> = agents.iter().map(|agent| labelled(agent, &own, None)).collect();
    for peer in peers.iter() {
        let Some(theirs) = peer.services.get(&name) else { continue };
        counts.merge(&theirs.counts);
        let id = json!(peer.replica);
        let before = rows.len();
        rows.extend(
            peer.rows.iter().filter(|row| row.service == name).map(|row| labelled(row, &id, Some(peer.updated_ms))),
        );
        replicas.push(
            json!({ "id": id, "as_of_ms": peer.updated_ms, "counts": theirs.counts, "listed": rows.len() - before }),
        );
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
        "replicas": replicas,
        "agents": rows,
    });
    Ok((etag(release), Json(body)))
}

/// `?limit=N&cursor=C` of `GET /api/v1/instances`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InstancesQuery {
    limit: Option<usize>,
    cursor: Option<String>,
}

/// Where a row of the instances listing sorts: (service, instance, peer, replica), then the
/// connection id (two connections of one ip:port on this replica, the closing one and its
/// successor).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct Place {
    service: String,
    instance: String,
    peer: std::net::SocketAddr,
    replica: String,
    conn: u64,
}

impl Place {
    /// The opaque `cursor` that starts the page after this row.
    fn cursor(&self) -> String {
        use base64::Engine as _;
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn from_cursor(cursor: &str) -> Result<Self, AppError> {
        use base64::Engine as _;
        let bad = || AppError::BadRequest(format!("`{cursor}` is not a cursor of this listing (`next_cursor`)"));
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
        serde_json::from_slice(&json).map_err(|_| bad())
    }
}

/// One row of the listing before it is built: this replica's connection (built only if it is on
/// the page) or another replica's published row.
enum Listed {
    Local(crate::fleet::identity::InstanceKey),
    Remote(Value),
}

impl Listed {
    fn service_and_instance(&self) -> (&str, &str) {
        match self {
            Self::Local(key) => (&key.service, &key.instance),
            Self::Remote(row) => {
                (row["service"].as_str().unwrap_or_default(), row["instance"].as_str().unwrap_or_default())
            }
        }
    }

    /// Where it sorts; `own` is this replica's id.
    fn place(&self, own: &str) -> Place {
        let (service, instance) = self.service_and_instance();
        let (peer, replica, conn) = match self {
            Self::Local(key) => (key.conn.peer, own, key.conn.id),
            Self::Remote(row) => {
                let peer = row["peer"].as_str().and_then(|p| p.parse().ok());
                (
                    peer.unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
                    row["replica"].as_str().unwrap_or_default(),
                    0,
                )
            }
        };
        Place { service: service.to_owned(), instance: instance.to_owned(), peer, replica: replica.to_owned(), conn }
    }
}

/// How many instances a page holds by default, and at most.
const DEFAULT_INSTANCES_PAGE: usize = 100;
pub(crate) const MAX_INSTANCES_PAGE: usize = 1000;

/// `GET /api/v1/instances`: one page, sorted by (service, instance, peer, replica). Its cost is
/// what it returns: every live identity is only a key (shared names) until the page is chosen,
/// and rows, properties and targeting reasons are built for the page alone.
#[utoipa::path(
    get,
    path = "/api/v1/instances",
    tag = "read",
    operation_id = "instances",
    security(("bearer" = [])),
    params(InstanceParams),
    responses(
        (status = 200, description = "A page of the identified instances, and the anonymous pollers.", body = super::openapi::InstanceList),
        (status = 400, description = "A bad or unknown query parameter, or a cursor not from this listing.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
    ),
)]
pub(super) async fn instances(
    State(admin): State<Admin>,
    query: Result<Query<InstancesQuery>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(query) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_INSTANCES_PAGE);
    if !(1..=MAX_INSTANCES_PAGE).contains(&limit) {
        return Err(AppError::BadRequest(format!("limit must be between 1 and {MAX_INSTANCES_PAGE}")));
    }
    let after = query.cursor.as_deref().map(Place::from_cursor).transpose()?;
    let serving = admin.served.serving();
    let own_name = admin.replicas.as_ref().map_or("", |r| r.id()).to_owned();
    let own = own_id(&admin);

    let mut listed: Vec<(Place, Listed)> = Vec::new();
    let mut anonymous_remote: Vec<Value> = Vec::new();
    let mut partial = Vec::new();
    for peer in peers(&admin).iter() {
        let (theirs, their_anonymous) = peer_instances(peer);
        listed.extend(theirs.into_iter().map(Listed::Remote).map(|l| (l.place(&own_name), l)));
        anonymous_remote.extend(their_anonymous);
        if peer.rows.len() < peer.rows_total {
            partial.push(json!(peer.replica));
        }
    }
    listed.extend(admin.fleet.identified_keys().into_iter().map(Listed::Local).map(|l| (l.place(&own_name), l)));
    listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let total = listed.len();
    let start = after.as_ref().map_or(0, |after| listed.partition_point(|(place, _)| place <= after));
    let end = (start + limit).min(total);
    let same = |i: usize, j: usize| listed[i].1.service_and_instance() == listed[j].1.service_and_instance();
    let mut instances = Vec::with_capacity(end - start);
    for (i, (_, row)) in listed.iter().enumerate().take(end).skip(start) {
        let duplicate = (i > 0 && same(i - 1, i)) || (i + 1 < total && same(i, i + 1));
        let row = match row {
            Listed::Remote(row) => {
                let mut row = row.clone();
                row["duplicate_name"] = json!(duplicate);
                row
            }
            Listed::Local(key) => {
                // Gone since its key was read: left out of the page.
                let Some(mut row) = admin.fleet.instance_rows(std::slice::from_ref(key), &serving).pop() else {
                    continue;
                };
                row.duplicate_name = duplicate;
                explain_targeting(&serving.view(), &mut row);
                labelled(&row, &own, None)
            }
        };
        instances.push(row);
    }
    let next_cursor = (end < total).then(|| listed[end - 1].0.cursor());

    // The anonymous pollers: on the first page, the first `limit` of them.
    let local_anonymous = admin.fleet.anonymous_keys();
    let anonymous_total = local_anonymous.len() + anonymous_remote.len();
    let mut anonymous: Vec<Value> = Vec::new();
    if after.is_none() {
        let mut keys = local_anonymous;
        let keep = limit.min(keys.len());
        if keys.len() > keep && keep > 0 {
            keys.select_nth_unstable(keep - 1);
        }
        keys.truncate(keep);
        keys.sort_unstable();
        anonymous = admin.fleet.anonymous_rows(&keys, &serving).iter().map(|a| labelled(a, &own, None)).collect();
        anonymous.extend(anonymous_remote);
        let key = |v: &Value| {
            let field = |f: &str| v[f].as_str().unwrap_or_default().to_owned();
            (field("service"), field("peer").parse::<std::net::SocketAddr>().ok(), field("replica"))
        };
        anonymous.sort_by_cached_key(key);
        anonymous.truncate(limit);
    }
    Ok(Json(json!({
        "expect_identity": admin.fleet.options().expect_identity,
        "replica": own,
        "limit": limit,
        "next_cursor": next_cursor,
        "instances": instances,
        "instances_total": total,
        "anonymous": anonymous,
        "anonymous_total": anonymous_total,
        "partial_replicas": partial,
    })))
}

/// The most groups a targeting reason names as missed; the others are counted.
const MAX_EXPLAINED_MISSES: usize = 3;

/// The longest targeting reason given, in bytes (N9: naming every missed group, a reason grows
/// with the document).
const MAX_REASON_BYTES: usize = 1024;

/// Says, for each service `instance` polls whose answers vary per instance, which group (and
/// rollout) it is served as, and why: the first few groups it misses, not all of them.
fn explain_targeting(view: &crate::served::View<'_>, instance: &mut crate::fleet::InstanceStatus) {
    let properties: Vec<(Box<str>, Box<str>)> =
        instance.properties.iter().map(|p| (Box::from(p.key.as_str()), Box::from(p.value.as_str()))).collect();
    let who = skyconf_core::targeting::InstanceRef {
        name: &instance.instance,
        properties: &properties,
        agent_version: instance.agent_version.as_deref(),
    };
    for polled in &mut instance.services {
        if !view.varies(&polled.service) {
            continue;
        }
        let choice = view.choose(&polled.service, Some(&who));
        let mut reason = match choice.chosen.group {
            Some(group) => format!("group `{}`: {}", group.name, group.selector.reason()),
            None => {
                let groups = view.snapshot.table.targeting().groups(&polled.service);
                let mut missed = groups.iter().filter_map(|g| {
                    g.selector.mismatch(&polled.service, &who).map(|why| format!("`{}`: {why}", g.name))
                });
                let named: Vec<String> = missed.by_ref().take(MAX_EXPLAINED_MISSES).collect();
                let more = missed.count();
                if named.is_empty() {
                    "the service's own settings".to_owned()
                } else if more == 0 {
                    format!("the service's own settings; no group matches ({})", named.join("; "))
                } else {
                    format!("the service's own settings; no group matches ({}; and {more} more)", named.join("; "))
                }
            }
        };
        if let Some(rollout) = choice.rollout {
            reason = format!("reached by rollout {rollout}; {reason}");
        }
        if reason.len() > MAX_REASON_BYTES {
            let mut end = MAX_REASON_BYTES - 3;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
            reason.push_str("...");
        }
        polled.group = choice.chosen.group.map(|g| g.name.clone());
        polled.rollout = choice.rollout.map(str::to_owned);
        polled.reason = Some(reason);
    }
}

/// Another replica's agent rows as `GET /api/v1/instances` rows: those of a connection that said
/// which instance it is, one per (peer, instance) with its services, and the others as anonymous
/// pollers; labelled with the replica. Its published rows are capped, so this may be part of
/// its fleet (`partial_replicas`).
fn peer_instances(peer: &Summary) -> (Vec<Value>, Vec<Value>) {
    let id = json!(peer.replica);
    let mut identified: BTreeMap<(&str, &str), (Value, Vec<Value>)> = BTreeMap::new();
    let mut anonymous = Vec::new();
    for row in &peer.rows {
        let service = json!({
            "service": row.service,
            "state": row.state,
            "digest": row.digest,
            "polls": row.polls,
            "last_seen_ms": row.last_seen_ms,
        });
        match &row.instance {
            Some(instance) => {
                let (head, services) = identified.entry((row.peer.as_str(), instance.as_str())).or_insert_with(|| {
                    let head = json!({
                        "service": row.service,
                        "instance": instance,
                        "peer": row.peer,
                        "properties": [],
                        "properties_cut": 0,
                        "agent_version": row.agent_version,
                        "reported_ms": null,
                        "last_seen_ms": row.last_seen_ms,
                        "replica": id,
                        "as_of_ms": peer.updated_ms,
                    });
                    (head, Vec::new())
                });
                if head["last_seen_ms"].as_u64() < Some(row.last_seen_ms) {
                    head["last_seen_ms"] = json!(row.last_seen_ms);
                }
                services.push(service);
            }
            None => {
                let mut poller = service;
                poller["peer"] = json!(row.peer);
                poller["replica"] = id.clone();
                poller["as_of_ms"] = json!(peer.updated_ms);
                anonymous.push(poller);
            }
        }
    }
    let instances = identified
        .into_values()
        .map(|(mut head, services)| {
            head["services"] = Value::Array(services);
            head
        })
        .collect();
    (instances, anonymous)
}

/// `?limit=N&before=ID`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    limit: Option<usize>,
    before: Option<u64>,
}

/// `GET /api/v1/releases`.
#[utoipa::path(
    get,
    path = "/api/v1/releases",
    tag = "read",
    operation_id = "releases",
    security(("bearer" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "A page of releases, newest first.", body = super::openapi::ReleasePage),
        (status = 400, description = "A bad or unknown query parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
    ),
)]
pub(super) async fn releases(
    State(admin): State<Admin>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(query) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(AppError::BadRequest(format!("limit must be between 1 and {MAX_PAGE}")));
    }
    // One more than asked, to know whether there is a next page.
    let (mut page, total) = admin.releases.page(query.before, limit + 1);
    let more = page.len() > limit;
    page.truncate(limit);
    Ok(Json(json!({
        "retention": admin.releases.retention(),
        "total": total,
        "limit": limit,
        "next_before": if more { page.last().map(|r| r.id) } else { None },
        "releases": page.iter().map(|r| summary(r)).collect::<Vec<_>>(),
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

/// `GET /api/v1/releases/{id}`.
#[utoipa::path(
    get,
    path = "/api/v1/releases/{id}",
    tag = "read",
    operation_id = "release",
    security(("bearer" = [])),
    params(("id" = u64, Path, description = "The release id.", minimum = 0)),
    responses(
        (status = 200, description = "The release in full, with its document.", body = super::openapi::ReleaseDetail),
        (status = 400, description = "Not a release id.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
        (status = 404, description = "No such release is kept.", body = ErrorBody),
        (status = 500, description = "A bug.", body = ErrorBody),
        (status = 503, description = "Its file could not be read.", body = ErrorBody),
    ),
)]
pub(super) async fn release(State(admin): State<Admin>, ReleaseId(id): ReleaseId) -> Result<Json<Value>, AppError> {
    let releases = std::sync::Arc::clone(&admin.releases);
    let (release, document) = tokio::task::spawn_blocking(move || releases.full(id))
        .await
        .map_err(|e| AppError::Internal(format!("reading release {id}: {e}")))?
        .map_err(|e| AppError::Unavailable(e.to_string()))?
        .ok_or_else(|| AppError::NotFound(format!("no release {id}")))?;
    let mut body = serde_json::to_value(&release).map_err(|e| AppError::Internal(e.to_string()))?;
    body["document"] = document.map_or(Value::Null, Value::String);
    body["previous"] = admin.releases.previous(id).map_or(Value::Null, |p| json!(p.id));
    body["current"] = json!(admin.releases.latest().is_some_and(|l| l.id == id));
    Ok(Json(body))
}

/// The most changed services a comparison lists.
const MAX_COMPARED_SERVICES: usize = 1000;

/// The table of kept release `id`, read (from its file, maybe) and parsed: 404 when it is not
/// kept. Blocking: call it off the async threads.
fn kept_table(releases: &ReleaseLog, id: u64) -> Result<skyconf_core::AgentConfigurations, AppError> {
    match releases.document(id).map_err(|e| AppError::Unavailable(e.to_string()))? {
        None => Err(AppError::NotFound(format!("no release {id}"))),
        Some(None) => Ok(skyconf_core::AgentConfigurations::default()),
        Some(Some(text)) => skyconf_core::read(&text)
            .map_err(|e| AppError::Internal(format!("release {id}'s document cannot be read again: {e}"))),
    }
}

/// `GET /api/v1/releases/{id}/compare/{other}`: what changed from release `id` to `other`.
#[utoipa::path(
    get,
    path = "/api/v1/releases/{id}/compare/{other}",
    tag = "read",
    operation_id = "compare",
    security(("bearer" = [])),
    params(
        ("id" = u64, Path, description = "The release compared from.", minimum = 0),
        ("other" = u64, Path, description = "The release compared to (either order).", minimum = 0),
    ),
    responses(
        (status = 200, description = "Every changed service, key by key (at most 1000).", body = super::openapi::Comparison),
        (status = 400, description = "Not a release id.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
        (status = 404, description = "A release is not kept.", body = ErrorBody),
        (status = 500, description = "A kept document cannot be read again (a bug).", body = ErrorBody),
        (status = 503, description = "A release's file could not be read.", body = ErrorBody),
    ),
)]
pub(super) async fn compare(
    State(admin): State<Admin>,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, AppError> {
    let Path((from, to)) = path.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let parse =
        |text: &str| text.parse::<u64>().map_err(|_| AppError::BadRequest(format!("`{text}` is not a release id")));
    let (from, to) = (parse(&from)?, parse(&to)?);
    let releases = std::sync::Arc::clone(&admin.releases);
    let mut changes = tokio::task::spawn_blocking(move || {
        let before = kept_table(&releases, from)?;
        let after = kept_table(&releases, to)?;
        Ok::<_, AppError>(skyconf_core::diff::diff(&before, &after))
    })
    .await
    .map_err(|e| AppError::Internal(format!("comparing releases {from} and {to}: {e}")))??;
    let changed = changes.len();
    changes.truncate(MAX_COMPARED_SERVICES);
    Ok(Json(json!({
        "from": from,
        "to": to,
        "changed": changed,
        "truncated": changed > changes.len(),
        "changes": changes,
    })))
}

/// How many history entries a page holds by default, and at most.
const DEFAULT_HISTORY_PAGE: usize = 20;
const MAX_HISTORY_PAGE: usize = 100;

/// `GET /api/v1/services/{name}/history`: the kept releases that changed one service.
#[utoipa::path(
    get,
    path = "/api/v1/services/{name}/history",
    tag = "read",
    operation_id = "history",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The service (percent-encoded)."), HistoryParams),
    responses(
        (status = 200, description = "The kept releases that changed it, newest first.", body = super::openapi::History),
        (status = 400, description = "A bad percent-escape in the name, or a bad or unknown query parameter.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
        (status = 500, description = "A bug.", body = ErrorBody),
        (status = 503, description = "A release's file could not be read.", body = ErrorBody),
    ),
)]
pub(super) async fn history(
    State(admin): State<Admin>,
    AnyServiceName(name): AnyServiceName,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(query) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_HISTORY_PAGE);
    if !(1..=MAX_HISTORY_PAGE).contains(&limit) {
        return Err(AppError::BadRequest(format!("limit must be between 1 and {MAX_HISTORY_PAGE}")));
    }
    let releases = std::sync::Arc::clone(&admin.releases);
    let (page, total) = admin.releases.page(query.before, usize::MAX);
    let service = name.clone();
    // A summary that names every changed service settles a release without its file; a release
    // that changed more than a summary names is read (bounded by the retention).
    let mut entries = tokio::task::spawn_blocking(move || {
        let mut entries = Vec::new();
        for release in page {
            let named = release.changes.iter().any(|c| c.service == service);
            if !named && release.changed <= MAX_SUMMARY_CHANGES {
                continue;
            }
            let Some(changes) = releases.changes(release.id).map_err(|e| AppError::Unavailable(e.to_string()))? else {
                continue;
            };
            if let Some(change) = changes.into_iter().find(|c| c.service == service) {
                entries.push((release, change));
                if entries.len() > limit {
                    break;
                }
            }
        }
        Ok::<_, AppError>(entries)
    })
    .await
    .map_err(|e| AppError::Internal(format!("reading the history of `{name}`: {e}")))??;
    let more = entries.len() > limit;
    entries.truncate(limit);
    let history: Vec<Value> = entries
        .iter()
        .map(|(release, change)| {
            let mut entry = summary(release);
            entry["change"] = serde_json::to_value(change).unwrap_or(Value::Null);
            entry
        })
        .collect();
    Ok(Json(json!({
        "name": name,
        "retention": admin.releases.retention(),
        "releases_kept": total,
        "limit": limit,
        "next_before": if more { entries.last().map(|(r, _)| r.id) } else { None },
        "history": history,
    })))
}

/// `GET /api/v1/configurations`.
#[utoipa::path(
    get,
    path = "/api/v1/configurations",
    tag = "read",
    operation_id = "get_configurations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The current document text.", body = super::openapi::Configurations,
            headers(("ETag" = String, description = "`\"<release id>\"` of the served release, for `If-Match`."))),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
        (status = 500, description = "A bug.", body = ErrorBody),
        (status = 503, description = "The release's file could not be read, or it was just replaced.", body = ErrorBody),
    ),
)]
pub(super) async fn configurations(State(admin): State<Admin>) -> Result<impl IntoResponse, AppError> {
    // One snapshot: the document, the release and the ETag all name the table served now.
    let snapshot = admin.served.snapshot();
    let release = admin.releases.served_as(snapshot.version);
    let document = match release {
        Some(id) => document_of(&admin, id).await.map_err(|e| match e {
            AppError::NotFound(_) => {
                AppError::Unavailable(format!("release {id} was just replaced and dropped; ask again"))
            }
            other => other,
        })?,
        None => None,
    };
    let body = json!({
        "release": release,
        "version": snapshot.version,
        "document": document,
    });
    Ok((etag(release), Json(body)))
}

/// The gateway part of `GET /api/v1/status`: the same numbers as the `skyconf_gateway_*` metrics.
fn gateway_status(upstreams: &skyconf_gateway::Upstreams) -> serde_json::Value {
    let config = upstreams.config();
    json!({
        "tls": upstreams.is_tls(),
        "connections_per_upstream": config.connections_per_upstream,
        "max_connections_per_upstream": config.max_connections_per_upstream,
        "max_queued_calls": config.max_queued_calls,
        "queue_wait_ms": config.queue_wait.as_millis() as u64,
        "no_upstream": upstreams.no_upstream(),
        "upstreams": upstreams.members().iter().map(|m| {
            let s = m.stats();
            json!({
                "addr": m.addr,
                "up": s.up,
                "agent_connections": s.agent_connections,
                "connections": s.connections,
                "calls_in_flight": s.calls_in_flight,
                "queued_calls": s.queued_calls,
                "stream_limit": s.stream_limit,
                "forwarded": s.forwarded,
                "failed": s.failed,
                "answers_refused": { "oversized": s.answers_oversized, "malformed": s.answers_malformed },
                "unsent": { "deadline": s.unsent.deadline, "full": s.unsent.full, "left": s.unsent.left },
            })
        }).collect::<Vec<_>>(),
    })
}
