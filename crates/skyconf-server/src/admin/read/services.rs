//! `GET /api/v1/services` and `GET /api/v1/services/{name}`: the configured services with their
//! fleet counts, and one service with its configuration and agents.

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use serde::Serialize;
use skyconf_core::Digest;
use utoipa::ToSchema;

use super::status::{ReplicaRow, replica_list};
use super::{Admin, ReadFailures, etag, own_id, peers};
use crate::admin::AppError;
use crate::admin::error::ErrorBody;
use crate::admin::extract::AnyServiceName;
use crate::fleet::{AgentStatus, StateCounts};

/// How many names of unconfigured services polled by agents are listed at most.
const MAX_UNCONFIGURED_LISTED: usize = 1000;

/// `GET /api/v1/services`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Services {
    /// The served table's version.
    version: u64,
    /// The newest release.
    #[schema(required = true)]
    release: Option<u64>,
    /// Every configured service, in document order.
    services: Vec<ServiceRow>,
    /// Names agents poll that have no configuration (at most 1000).
    unconfigured: Vec<UnconfiguredRow>,
    /// This replica's id.
    #[schema(required = true)]
    replica: Option<String>,
    /// Every replica sharing the store; the counts above are their sums (the others' as of
    /// their `updated_ms`).
    replicas: Vec<ReplicaRow>,
}

/// A configured service in `GET /api/v1/services`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ServiceRow {
    /// The service.
    name: String,
    /// The digest agents are served.
    digest: String,
    /// How many settings it has.
    keys: u64,
    /// The release that last changed it, when kept.
    #[schema(required = true)]
    last_change: Option<LastChange>,
    /// Its agents per state, summed over the replicas.
    #[serde(flatten)]
    counts: StateCounts,
}

/// A polled service without configuration in `GET /api/v1/services`.
#[derive(Serialize, ToSchema)]
pub(crate) struct UnconfiguredRow {
    /// The service.
    name: String,
    /// The EMPTY answer's digest.
    digest: String,
    /// Its agents per state, summed over the replicas.
    #[serde(flatten)]
    counts: StateCounts,
}

/// The release that last changed a service.
#[derive(Serialize, ToSchema)]
pub(crate) struct LastChange {
    /// The release.
    release: u64,
    /// When.
    at_ms: u64,
}

/// `GET /api/v1/services/{name}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ServiceDetail {
    /// The service.
    name: String,
    /// Whether the served document configures it (else only agents poll for it).
    configured: bool,
    /// The digest agents are served.
    digest: String,
    /// Its settings in document order; values are strings, as agents receive them.
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    config: serde_json::Map<String, serde_json::Value>,
    /// How many settings it has.
    keys: u64,
    /// The release that last changed it, when kept.
    #[schema(required = true)]
    last_change: Option<LastChange>,
    /// The served table's version.
    version: u64,
    /// Agents per state, on every replica.
    counts: StateCounts,
    /// Polls without the current digest after which an agent is stuck.
    stuck_after_polls: u64,
    /// Agents per state on each replica (this one first); `counts` is their sum.
    replicas: Vec<ServiceReplica>,
    /// Every agent seen polling for it: this replica's (live), then the others' (as published,
    /// at most 1000 rows each), each with the replica it polls.
    agents: Vec<ReplicaAgent>,
    /// Its targeting groups in document order (an instance gets the first it matches).
    groups: Vec<GroupView>,
}

/// One targeting group of a service in `GET /api/v1/services/{name}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct GroupView {
    /// Its name, unique within the service.
    name: String,
    /// Which instances it selects, in words: ``instance name in [`checkout-7*`]``.
    selector: String,
    /// The settings merged over the service's own, in document order; `value` null removes one.
    settings: Vec<GroupSetting>,
}

/// One setting of a targeting group.
#[derive(Serialize, ToSchema)]
pub(crate) struct GroupSetting {
    /// The setting.
    key: String,
    /// Its value, or null: the group's instances are not sent the setting.
    #[schema(required = true)]
    value: Option<String>,
}

impl From<&skyconf_core::targeting::Group> for GroupView {
    fn from(group: &skyconf_core::targeting::Group) -> Self {
        Self {
            name: group.name.clone(),
            selector: group.selector.reason(),
            settings: group
                .settings
                .iter()
                .map(|(key, value)| GroupSetting { key: key.clone(), value: value.clone() })
                .collect(),
        }
    }
}

/// One replica's share of a service in `GET /api/v1/services/{name}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ServiceReplica {
    /// The replica.
    #[schema(required = true)]
    id: Option<String>,
    /// When its numbers were published; `null` for this replica (live).
    #[schema(required = true)]
    as_of_ms: Option<u64>,
    /// Its agents of the service per state (exact, not capped).
    counts: StateCounts,
    /// How many of them are listed in `agents` (another replica publishes at most 1000 rows).
    listed: u64,
}

/// An agent row labelled with the replica it polls.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReplicaAgent {
    #[serde(flatten)]
    agent: AgentStatus,
    /// The replica the agent polls.
    #[schema(required = true)]
    replica: Option<String>,
    /// For another replica's agent, when that replica published it (its row's digest is then a
    /// 16-hex-digit prefix and its properties are left out); `null` for this replica's, which are
    /// live.
    #[schema(required = true)]
    as_of_ms: Option<u64>,
}

fn last_change(admin: &Admin, service: &str) -> Option<LastChange> {
    admin.releases.last_change(service).map(|(release, at_ms)| LastChange { release, at_ms })
}

/// `GET /api/v1/services`.
#[utoipa::path(
    get,
    path = "/api/v1/services",
    tag = "read",
    operation_id = "services",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every service with its fleet counts.", body = Services),
        ReadFailures,
    ),
)]
pub(crate) async fn services(State(admin): State<Admin>) -> Json<Services> {
    let serving = admin.served.serving();
    let snapshot = &serving.snapshot;
    let mut counts = admin.fleet.counts(&serving);
    let local_agents = counts.values().map(|c| c.agents).sum();
    if let Some(replicas) = &admin.replicas {
        for (service, theirs) in replicas.peer_counts() {
            counts.entry(service).or_default().merge(&theirs);
        }
    }
    let services = snapshot
        .table
        .services()
        .map(|s| ServiceRow {
            name: s.name().to_owned(),
            digest: s.digest().as_str().to_owned(),
            keys: s.entries().len() as u64,
            last_change: last_change(&admin, s.name()),
            counts: counts.remove(s.name()).unwrap_or_default(),
        })
        .collect();
    let unconfigured = counts
        .into_iter()
        .take(MAX_UNCONFIGURED_LISTED)
        .map(|(name, counts)| UnconfiguredRow { name, digest: Digest::empty().as_str().to_owned(), counts })
        .collect();
    Json(Services {
        version: snapshot.version,
        release: admin.releases.latest().map(|r| r.meta.id),
        services,
        unconfigured,
        replica: own_id(&admin),
        replicas: replica_list(&admin, local_agents),
    })
}

/// `GET /api/v1/services/{name}`.
#[utoipa::path(
    get,
    path = "/api/v1/services/{name}",
    tag = "read",
    operation_id = "service",
    security(("bearer" = [])),
    params(AnyServiceName),
    responses(
        (status = 200, description = "The service, its configuration and its agents.", body = ServiceDetail,
            headers(("ETag" = String, description = "`\"<release id>\"` of the served release, for `If-Match`."))),
        (status = 400, description = "Not a valid service name (a bad percent-escape).", body = ErrorBody),
        ReadFailures,
        (status = 404, description = "No such service is configured or polled.", body = ErrorBody),
    ),
)]
pub(crate) async fn service(
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
    let mut replicas = vec![ServiceReplica { id: own.clone(), as_of_ms: None, counts, listed: agents.len() as u64 }];
    let mut rows: Vec<ReplicaAgent> =
        agents.into_iter().map(|agent| ReplicaAgent { agent, replica: own.clone(), as_of_ms: None }).collect();
    for peer in peers.iter() {
        let Some(theirs) = peer.services.get(&name) else { continue };
        counts.merge(&theirs.counts);
        let before = rows.len();
        rows.extend(peer.rows.iter().filter(|row| row.service == name).map(|row| ReplicaAgent {
            agent: row.clone(),
            replica: Some(peer.replica.clone()),
            as_of_ms: Some(peer.updated_ms),
        }));
        replicas.push(ServiceReplica {
            id: Some(peer.replica.clone()),
            as_of_ms: Some(peer.updated_ms),
            counts: theirs.counts,
            listed: (rows.len() - before) as u64,
        });
    }
    let configured = config.is_some();
    let config: serde_json::Map<String, serde_json::Value> = config
        // Its own settings (what `PUT` takes back); the global ones it is also served are in
        // `GET /api/v1/services/{name}/layers`.
        .map(|c| c.own_entries().iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect())
        .unwrap_or_default();
    let body = ServiceDetail {
        name: name.clone(),
        configured,
        digest: current.as_str().to_owned(),
        keys: config.len() as u64,
        config,
        last_change: last_change(&admin, &name),
        version: snapshot.version,
        counts,
        stuck_after_polls: u64::from(admin.fleet.options().stuck_after_polls),
        replicas,
        agents: rows,
        groups: snapshot.table.targeting().groups(&name).iter().map(GroupView::from).collect(),
    };
    Ok((etag(release), Json(body)))
}
