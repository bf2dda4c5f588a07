//! `GET /api/v1/instances`: a page of the live instances agents said they are, on every replica,
//! and the anonymous pollers; each service an instance polls says which group (and rollout) it
//! is served as, and why.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::{Admin, ReadFailures, own_id, peers};
use crate::admin::AppError;
use crate::admin::error::ErrorBody;
use crate::admin::extract::{ParsedQuery, page_limit};
use crate::fleet::replicas::Summary;
use crate::fleet::{AnonymousPoller, InstanceService, InstanceStatus};

/// How many instances a page holds by default, and at most.
const DEFAULT_INSTANCES_PAGE: usize = 100;
pub(crate) const MAX_INSTANCES_PAGE: usize = 1000;

/// The most groups a targeting reason names as missed; the others are counted.
const MAX_EXPLAINED_MISSES: usize = 3;

/// The longest targeting reason given, in bytes (N9: naming every missed group, a reason grows
/// with the document).
const MAX_REASON_BYTES: usize = 1024;

/// `?limit` and `?cursor` of `GET /api/v1/instances`; any other parameter is refused (400).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct InstanceParams {
    /// Instances per page (default 100).
    #[param(value_type = u64, minimum = 1, maximum = 1000, required = false)]
    limit: Option<usize>,
    /// Where the page starts: `next_cursor` of the previous page (opaque).
    #[param(value_type = String, required = false)]
    cursor: Option<String>,
}

/// `GET /api/v1/instances`: one page.
#[derive(Serialize, ToSchema)]
pub(crate) struct InstanceList {
    /// Whether every agent is expected to say which instance it is (gateway mode).
    expect_identity: bool,
    /// This replica's id.
    #[schema(required = true)]
    replica: Option<String>,
    /// The page size asked for (default 100, at most 1000).
    limit: u64,
    /// The `cursor` of the next page; `null` on the last one.
    #[schema(required = true)]
    next_cursor: Option<String>,
    /// One page of the live connections that said which instance they are, on every replica, by
    /// service, instance name, peer, then replica. Another replica's are built from its
    /// published rows: without properties, digests cut to 16 hex digits.
    instances: Vec<ReplicaInstance>,
    /// How many there are in all (of the others, as many as they published).
    instances_total: u64,
    /// On the first page only: the first `limit` (service, peer) rows polling from a connection
    /// that never said, on every replica, by service, peer, then replica.
    anonymous: Vec<ReplicaAnonymous>,
    /// How many there are in all (of the others, as many as they published).
    anonymous_total: u64,
    /// The replicas that track more agents than they publish rows for (1000): their lists here
    /// are partial; their counts in `GET /api/v1/services` are not.
    partial_replicas: Vec<String>,
}

/// An identified instance labelled with the replica it polls.
#[derive(Clone, Serialize, ToSchema)]
pub(crate) struct ReplicaInstance {
    #[serde(flatten)]
    instance: InstanceStatus,
    /// The replica the instance polls.
    #[schema(required = true)]
    replica: Option<String>,
    /// For another replica's instance, when that replica published it; `null` for this one's.
    #[schema(required = true)]
    as_of_ms: Option<u64>,
}

/// An anonymous poller labelled with the replica it polls.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReplicaAnonymous {
    #[serde(flatten)]
    poller: AnonymousPoller,
    /// The replica it polls.
    #[schema(required = true)]
    replica: Option<String>,
    /// For another replica's poller, when that replica published it; `null` for this one's.
    #[schema(required = true)]
    as_of_ms: Option<u64>,
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
    Remote(ReplicaInstance),
}

impl Listed {
    fn service_and_instance(&self) -> (&str, &str) {
        match self {
            Self::Local(key) => (&key.service, &key.instance),
            Self::Remote(row) => (&row.instance.service, &row.instance.instance),
        }
    }

    /// Where it sorts; `own` is this replica's id.
    fn place(&self, own: &str) -> Place {
        let (service, instance) = self.service_and_instance();
        let (peer, replica, conn) = match self {
            Self::Local(key) => (key.conn.peer, own, key.conn.id),
            Self::Remote(row) => (
                row.instance.peer.parse().unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
                row.replica.as_deref().unwrap_or_default(),
                0,
            ),
        };
        Place { service: service.to_owned(), instance: instance.to_owned(), peer, replica: replica.to_owned(), conn }
    }
}

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
        (status = 200, description = "A page of the identified instances, and the anonymous pollers.", body = InstanceList),
        (status = 400, description = "A bad or unknown query parameter, or a cursor not from this listing.", body = ErrorBody),
        ReadFailures,
    ),
)]
pub(crate) async fn instances(
    State(admin): State<Admin>,
    ParsedQuery(query): ParsedQuery<InstanceParams>,
) -> Result<Json<InstanceList>, AppError> {
    let limit = page_limit(query.limit, DEFAULT_INSTANCES_PAGE, MAX_INSTANCES_PAGE)?;
    let after = query.cursor.as_deref().filter(|c| !c.is_empty()).map(Place::from_cursor).transpose()?;
    let serving = admin.served.serving();
    let own_name = admin.replicas.as_ref().map_or("", |r| r.id()).to_owned();
    let own = own_id(&admin);

    let mut listed: Vec<(Place, Listed)> = Vec::new();
    let mut anonymous_remote: Vec<ReplicaAnonymous> = Vec::new();
    let mut partial = Vec::new();
    for peer in peers(&admin).iter() {
        let (theirs, their_anonymous) = peer_instances(peer);
        listed.extend(theirs.into_iter().map(Listed::Remote).map(|l| (l.place(&own_name), l)));
        anonymous_remote.extend(their_anonymous);
        if peer.rows.len() < peer.rows_total {
            partial.push(peer.replica.clone());
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
                row.instance.duplicate_name = duplicate;
                row
            }
            Listed::Local(key) => {
                // Gone since its key was read: left out of the page.
                let Some(mut row) = admin.fleet.instance_rows(std::slice::from_ref(key), &serving).pop() else {
                    continue;
                };
                row.duplicate_name = duplicate;
                explain_targeting(&serving.view(), &mut row);
                ReplicaInstance { instance: row, replica: own.clone(), as_of_ms: None }
            }
        };
        instances.push(row);
    }
    let next_cursor = (end < total).then(|| listed[end - 1].0.cursor());

    // The anonymous pollers: on the first page, the first `limit` of them.
    let local_anonymous = admin.fleet.anonymous_keys();
    let anonymous_total = local_anonymous.len() + anonymous_remote.len();
    let mut anonymous = Vec::new();
    if after.is_none() {
        let mut keys = local_anonymous;
        let keep = limit.min(keys.len());
        if keys.len() > keep && keep > 0 {
            keys.select_nth_unstable(keep - 1);
        }
        keys.truncate(keep);
        keys.sort_unstable();
        anonymous = admin
            .fleet
            .anonymous_rows(&keys, &serving)
            .into_iter()
            .map(|poller| ReplicaAnonymous { poller, replica: own.clone(), as_of_ms: None })
            .collect();
        anonymous.extend(anonymous_remote);
        anonymous.sort_by_cached_key(|a| {
            let peer = a.poller.peer.parse::<std::net::SocketAddr>().ok();
            (a.poller.service.clone(), peer, a.replica.clone().unwrap_or_default())
        });
        anonymous.truncate(limit);
    }
    Ok(Json(InstanceList {
        expect_identity: admin.fleet.options().expect_identity,
        replica: own,
        limit: limit as u64,
        next_cursor,
        instances,
        instances_total: total as u64,
        anonymous,
        anonymous_total: anonymous_total as u64,
        partial_replicas: partial,
    }))
}

/// Says, for each service `instance` polls whose answers vary per instance, which group (and
/// rollout) it is served as, and why: the first few groups it misses, not all of them.
fn explain_targeting(view: &crate::served::View<'_>, instance: &mut InstanceStatus) {
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
            reason.truncate(crate::text::floor_char_boundary(&reason, MAX_REASON_BYTES - 3));
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
fn peer_instances(peer: &Summary) -> (Vec<ReplicaInstance>, Vec<ReplicaAnonymous>) {
    let replica = Some(peer.replica.clone());
    let as_of_ms = Some(peer.updated_ms);
    let mut identified: BTreeMap<(&str, &str), InstanceStatus> = BTreeMap::new();
    let mut anonymous = Vec::new();
    for row in &peer.rows {
        match &row.instance {
            Some(instance) => {
                let head = identified.entry((row.peer.as_str(), instance.as_str())).or_insert_with(|| InstanceStatus {
                    service: row.service.clone(),
                    instance: instance.clone(),
                    peer: row.peer.clone(),
                    duplicate_name: false,
                    properties: Vec::new(),
                    properties_cut: 0,
                    agent_version: row.agent_version.clone(),
                    reported_ms: None,
                    last_seen_ms: row.last_seen_ms,
                    services: Vec::new(),
                });
                head.last_seen_ms = head.last_seen_ms.max(row.last_seen_ms);
                head.services.push(InstanceService {
                    service: row.service.clone(),
                    state: row.state,
                    digest: row.digest.clone(),
                    polls: row.polls,
                    last_seen_ms: row.last_seen_ms,
                    group: None,
                    rollout: None,
                    reason: None,
                });
            }
            None => anonymous.push(ReplicaAnonymous {
                poller: AnonymousPoller {
                    peer: row.peer.clone(),
                    service: row.service.clone(),
                    state: row.state,
                    digest: row.digest.clone(),
                    polls: row.polls,
                    last_seen_ms: row.last_seen_ms,
                },
                replica: replica.clone(),
                as_of_ms,
            }),
        }
    }
    let instances = identified
        .into_values()
        .map(|instance| ReplicaInstance { instance, replica: replica.clone(), as_of_ms })
        .collect();
    (instances, anonymous)
}
