//! `GET /api/v1/status`: the server's state, with the gateway's OAPs and every replica.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::{Admin, ReadFailures, own_id};
use crate::served::Held;
use crate::store_view::StoreStatus;
use crate::unix_time::unix_ms;

/// `GET /api/v1/status`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Status {
    /// Whether a table is served.
    ready: bool,
    /// The served table's version.
    version: u64,
    /// When the served table was installed.
    installed_at_ms: u64,
    /// Services served.
    services: u64,
    /// The store and its health.
    store: StoreStatus,
    /// Whether the store can be written through the API.
    writable: bool,
    /// The newest release.
    #[schema(required = true)]
    release: Option<u64>,
    /// How many releases are kept.
    retention: u64,
    /// Releases not written to the data directory.
    unsaved_releases: u64,
    /// The last document refused, with its text.
    #[schema(required = true)]
    last_rejection: Option<LastRejection>,
    /// A store change held by the fleet-reset guard.
    #[schema(required = true)]
    held: Option<Held>,
    /// `fetchConfigurations` calls held now, waiting for a change.
    held_polls: u64,
    /// Gateway mode: the OAPs calls are forwarded to; `null` without it.
    #[schema(required = true)]
    gateway: Option<GatewayStatus>,
    /// The fleet table's size and settings.
    fleet: FleetStatus,
    /// This replica's id.
    #[schema(required = true)]
    replica: Option<String>,
    /// Every replica sharing the store: this one first (live), then the others (as of their last
    /// published summary). Only this one on a single-replica store (a file).
    replicas: Vec<ReplicaRow>,
    /// Whether the store is shared, so other replicas can serve the same fleet: false for a file,
    /// where this replica is alone.
    shared_store: bool,
}

/// One replica, as `GET /api/v1/status` and `GET /api/v1/services` list them.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReplicaRow {
    /// Its id.
    id: String,
    /// Where its admin API is, when known.
    #[schema(required = true)]
    admin_addr: Option<String>,
    /// Whether it is the replica answering.
    local: bool,
    /// When its numbers were computed: now for this one, its last publish for the others.
    updated_ms: u64,
    /// Its fleet members (applied, behind or stuck agents).
    agents: u64,
    /// The (service, peer) pairs it tracks.
    rows_total: u64,
    /// Whether its summary had to leave services out (too large to publish).
    truncated: bool,
}

/// A refused document, as `GET /api/v1/status` shows it.
#[derive(Serialize, ToSchema)]
pub(crate) struct LastRejection {
    /// Where it came from.
    origin: String,
    /// Why, with line and column.
    error: String,
    /// When.
    at_ms: u64,
    /// Its text (the first MiB), when kept.
    #[schema(required = true)]
    text: Option<String>,
    /// Whether the text was cut.
    truncated: bool,
}

/// The fleet part of `GET /api/v1/status`.
#[derive(Serialize, ToSchema)]
pub(crate) struct FleetStatus {
    /// This replica's fleet members (applied, behind or stuck agents), all services.
    agents: u64,
    /// Fleet members of every replica sharing the store (the others' as of their last publish).
    agents_all_replicas: u64,
    /// Agents tracked.
    tracked: u64,
    /// Agents tracked that poll for services without configuration.
    tracked_unconfigured: u64,
    /// Agents dropped because the table was full.
    evictions: u64,
    /// Polls not tracked because the table was full.
    untracked_polls: u64,
    /// Polls without the current digest after which an agent is stuck.
    stuck_after_polls: u64,
    /// Seconds after which an agent that stopped polling is forgotten.
    expire_after_s: u64,
    /// Whether every agent is expected to say which instance it is (gateway mode): pollers
    /// that do not are `anonymous`.
    expect_identity: bool,
    /// Connections whose instance identity is known.
    identified: u64,
    /// `ManagementService` calls whose identity was not kept (the table was full).
    unkept_identities: u64,
    /// Reported properties dropped (over 64 per instance) or shortened, since start.
    properties_cut: u64,
}

/// The gateway part of `GET /api/v1/status` (the numbers of the `skyconf_gateway_*` metrics).
#[derive(Serialize, ToSchema)]
pub(crate) struct GatewayStatus {
    /// Whether the OAPs are reached over TLS.
    tls: bool,
    /// HTTP/2 connections kept open to each OAP.
    connections_per_upstream: u64,
    /// The most connections to one OAP, opened while every stream it allows is in use.
    max_connections_per_upstream: u64,
    /// The most calls waiting for a stream to one OAP.
    max_queued_calls: u64,
    /// How long a call waits for a stream at most, in milliseconds.
    queue_wait_ms: u64,
    /// Calls answered UNAVAILABLE because no OAP was reachable, so far.
    no_upstream: u64,
    /// Every OAP, as configured.
    upstreams: Vec<UpstreamStatus>,
}

/// One OAP behind the gateway.
#[derive(Serialize, ToSchema)]
pub(crate) struct UpstreamStatus {
    /// `host:port`.
    addr: String,
    /// Whether a connection to it is open (one on which it has spoken HTTP/2).
    up: bool,
    /// Agent connections whose forwarded calls go to it.
    agent_connections: u64,
    /// Open HTTP/2 connections to it.
    connections: u64,
    /// Forwarded calls holding a stream to it.
    calls_in_flight: u64,
    /// Calls waiting for a stream to it.
    queued_calls: u64,
    /// Its `SETTINGS_MAX_CONCURRENT_STREAMS` per connection; `null`: no limit (or no connection).
    stream_limit: Option<u64>,
    /// Calls it answered (whatever their status), so far.
    forwarded: u64,
    /// Calls that failed before it answered (a reset, the connection lost), so far.
    failed: u64,
    /// Its answers not passed on (the call ended INTERNAL), by reason.
    answers_refused: AnswersRefused,
    /// Calls never sent to it for want of a stream, by reason.
    unsent: UnsentCalls,
}

/// OAP answers not passed on.
#[derive(Serialize, ToSchema)]
pub(crate) struct AnswersRefused {
    /// A header block (response headers or trailers) over 8 KiB.
    oversized: u64,
    /// Refused by HTTP/2 for its stream (malformed, or a header block over 16 MiB).
    malformed: u64,
}

/// Calls never sent to an OAP for want of a stream.
#[derive(Serialize, ToSchema)]
pub(crate) struct UnsentCalls {
    /// Ended DEADLINE_EXCEEDED after waiting as long as the queue allows.
    deadline: u64,
    /// Ended DEADLINE_EXCEEDED at once: the queue was full.
    full: u64,
    /// Ended while waiting: their own deadline passed or the agent cancelled them.
    left: u64,
}

/// Every replica: this one (live) and the others (as of their last publish).
pub(super) fn replica_list(admin: &Admin, local_agents: usize) -> Vec<ReplicaRow> {
    let Some(replicas) = &admin.replicas else { return Vec::new() };
    let mut list = vec![ReplicaRow {
        id: replicas.id().to_owned(),
        admin_addr: replicas.admin_addr().map(str::to_owned),
        local: true,
        updated_ms: unix_ms(std::time::SystemTime::now()),
        agents: local_agents as u64,
        rows_total: admin.fleet.tracked() as u64,
        truncated: false,
    }];
    list.extend(replicas.peers().iter().map(|peer| ReplicaRow {
        id: peer.replica.clone(),
        admin_addr: peer.admin_addr.clone(),
        local: false,
        updated_ms: peer.updated_ms,
        agents: peer.agents as u64,
        rows_total: peer.rows_total as u64,
        truncated: peer.truncated,
    }));
    list
}

/// The last refused document, with its text when it had one.
fn last_rejection(admin: &Admin) -> Option<LastRejection> {
    admin.served.last_rejection().map(|r| LastRejection {
        origin: r.origin,
        error: r.error,
        at_ms: unix_ms(r.at),
        text: r.text.as_deref().map(str::to_owned),
        truncated: r.truncated,
    })
}

/// `GET /api/v1/status`.
#[utoipa::path(
    get,
    path = "/api/v1/status",
    tag = "read",
    operation_id = "status",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The server's state.", body = Status),
        ReadFailures,
    ),
)]
pub(crate) async fn status(State(admin): State<Admin>) -> Json<Status> {
    let snapshot = admin.served.snapshot();
    let options = admin.fleet.options();
    let local_agents: usize = admin.fleet.counts(&admin.served.serving()).values().map(|c| c.agents).sum();
    let replicas = replica_list(&admin, local_agents);
    let all_agents = replicas.iter().map(|r| r.agents).sum::<u64>().max(local_agents as u64);
    Json(Status {
        ready: snapshot.ready(),
        version: snapshot.version,
        installed_at_ms: unix_ms(snapshot.installed_at),
        services: snapshot.table.len() as u64,
        store: admin.store.status(),
        writable: admin.writer.is_some(),
        release: admin.releases.latest().map(|r| r.meta.id),
        retention: admin.releases.retention() as u64,
        unsaved_releases: admin.releases.unsaved() as u64,
        last_rejection: last_rejection(&admin),
        held: admin.served.held(),
        held_polls: admin.held_polls.as_ref().map_or(0, |held| held.get() as u64),
        gateway: admin.gateway.as_ref().map(|upstreams| gateway_status(upstreams)),
        fleet: FleetStatus {
            agents: local_agents as u64,
            agents_all_replicas: all_agents,
            tracked: admin.fleet.tracked() as u64,
            tracked_unconfigured: admin.fleet.tracked_unconfigured() as u64,
            evictions: admin.fleet.evictions(),
            untracked_polls: admin.fleet.untracked_polls(),
            stuck_after_polls: u64::from(options.stuck_after_polls),
            expire_after_s: options.expire_after.as_secs(),
            expect_identity: options.expect_identity,
            identified: admin.fleet.identified() as u64,
            unkept_identities: admin.fleet.unkept_identities(),
            properties_cut: admin.fleet.properties_cut(),
        },
        replica: own_id(&admin),
        replicas,
        shared_store: admin.replicas.as_ref().is_some_and(|r| r.shared()),
    })
}

/// The gateway part of `GET /api/v1/status`: the same numbers as the `skyconf_gateway_*` metrics.
fn gateway_status(upstreams: &skyconf_gateway::Upstreams) -> GatewayStatus {
    let config = upstreams.config();
    GatewayStatus {
        tls: upstreams.is_tls(),
        connections_per_upstream: config.connections_per_upstream as u64,
        max_connections_per_upstream: config.max_connections_per_upstream as u64,
        max_queued_calls: config.max_queued_calls as u64,
        queue_wait_ms: config.queue_wait.as_millis() as u64,
        no_upstream: upstreams.no_upstream(),
        upstreams: upstreams
            .members()
            .iter()
            .map(|m| {
                let s = m.stats();
                UpstreamStatus {
                    addr: m.addr.clone(),
                    up: s.up,
                    agent_connections: s.agent_connections as u64,
                    connections: s.connections as u64,
                    calls_in_flight: s.calls_in_flight as u64,
                    queued_calls: s.queued_calls as u64,
                    stream_limit: s.stream_limit.map(|n| n as u64),
                    forwarded: s.forwarded,
                    failed: s.failed,
                    answers_refused: AnswersRefused { oversized: s.answers_oversized, malformed: s.answers_malformed },
                    unsent: UnsentCalls { deadline: s.unsent.deadline, full: s.unsent.full, left: s.unsent.left },
                }
            })
            .collect(),
    }
}
