//! The admin port's OpenAPI 3.1 description, served at `GET /api/v1/openapi.json`.
//!
//! It is generated, not written: every handler carries a `#[utoipa::path]` with its method,
//! path, parameters, bodies and status codes, and the types it answers with derive `ToSchema`;
//! [`ApiDoc`] only lists the handlers. Answers still built with `json!` are described by the
//! schema-only types below, field for field; the contract test (`tests/contract/run.sh`,
//! schemathesis against a real server) checks every answer against them, and a unit test checks
//! that the router's route table and the description name the same routes.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde::Serialize;
use skyconf_core::diff::{ChangeKind, KeyChange, ServiceChange};
use skyconf_core::warnings::Warning;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};

use crate::fleet::{AgentState, AgentStatus, AnonymousPoller, InstanceService, InstanceStatus, Property, StateCounts};
use crate::releases::{ChangeSummary, Release, ReleaseSummary};
use crate::served::{Held, Rejection};
use crate::store_view::StoreStatus;

/// The description: every route's `#[utoipa::path]`, and the bearer scheme.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "skyconf admin API",
        description = "The admin port of skyconf, a SkyWalking configuration discovery server. \
            Every `/api/v1` route and `/metrics` take `Authorization: Bearer <token>` when the \
            server has admin tokens (a read token for `GET`, a write token for the rest); without \
            tokens the API is open. `/healthz` and `/readyz` are always open. Times are Unix \
            milliseconds (`*_ms`).",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        super::healthz,
        super::readyz,
        crate::security::scrape,
        serve,
        super::read::status,
        super::read::services,
        super::read::service,
        super::read::instances,
        super::read::releases,
        super::read::release,
        super::read::compare,
        super::read::history,
        super::read::configurations,
        super::write::put_configurations,
        super::write::put_service,
        super::write::patch_service,
        super::write::delete_service,
        super::write::rollback,
        super::write::confirm_held,
        super::write::discard_held,
        super::rollouts::current,
        super::rollouts::start,
        super::rollouts::promote,
        super::rollouts::abort,
    ),
    components(schemas(
        ChangeKind,
        KeyChange,
        ServiceChange,
        Warning,
        AgentState,
        AgentStatus,
        StateCounts,
        ChangeSummary,
        Property,
        InstanceStatus,
        InstanceService,
        AnonymousPoller
    )),
    modifiers(&BearerAuth, &YamlDocument),
    tags(
        (name = "health", description = "Probes: open to anyone who can reach the port."),
        (name = "read", description = "Reads: a read or write token."),
        (name = "write", description = "Writes: a write token."),
    ),
)]
pub(crate) struct ApiDoc;

/// Adds the `bearer` security scheme the paths refer to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An admin token: `read <token>` or `write <token>` of a token file."))
                    .build(),
            ),
        );
    }
}

/// The YAML body of `PUT /api/v1/configurations`, which the macro can only call a string: its
/// schema is the document's (what the reader accepts, as far as a schema can say: a null
/// document, or a mapping with `configurations:` mapping service names to mappings of settings
/// to non-null values; other top-level keys are ignored); and since an empty body is an empty
/// document (every service removed), the body is optional.
struct YamlDocument;

impl Modify for YamlDocument {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, SchemaType, Type};
        use utoipa::openapi::{Ref, RefOr, Required};
        let value = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([
                Type::String,
                Type::Number,
                Type::Integer,
                Type::Boolean,
                Type::Array,
                Type::Object,
            ]))
            .description(Some("Any value but null (SnakeYAML typing; agents receive it as text)."));
        let settings = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("A service's settings: setting name to value."))
            .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(value.into()))));
        let configurations = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
            .description(Some("Service name to settings."))
            .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(settings.into()))));
        let schema = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
            .description(Some(
                "The agent-configurations document, as YAML: `configurations: {service: {setting: value}}`.",
            ))
            .property("configurations", configurations)
            .required("configurations")
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .schemas
            .insert("AgentConfigurationsDocument".to_owned(), RefOr::T(schema.into()));
        let put = openapi.paths.paths.get_mut("/api/v1/configurations").and_then(|item| item.put.as_mut());
        if let Some(body) = put.and_then(|op| op.request_body.as_mut()) {
            body.required = Some(Required::False);
            if let Some(yaml) = body.content.get_mut("application/yaml") {
                yaml.schema = Some(RefOr::Ref(Ref::from_schema_name("AgentConfigurationsDocument")));
            }
        }
    }
}

/// The description as JSON, built once.
pub(super) fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| ApiDoc::openapi().to_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")))
}

/// `GET /api/v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "read",
    operation_id = "openapi",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "This description (OpenAPI 3.1).", body = Object, content_type = "application/json"),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
    ),
)]
pub(super) async fn serve() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], json())
}

/// Every failure: what went wrong, and for a refused document where.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    error: String,
    /// For a refused document (400), where; `null` otherwise. Absent on the browser checks' 403.
    #[schema(required = false)]
    details: Option<Refusal>,
}

/// Where a document was refused.
#[derive(Serialize, ToSchema)]
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

/// `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// Whether a table is served.
    ready: bool,
    /// The served table's version (0 before the first).
    version: u64,
    /// Services served.
    services: u64,
    /// When the served table was installed.
    installed_at_ms: u64,
    /// Whether the table may be behind the store: a persisted copy, or the store cannot be
    /// reached (the same as `store.stale`; `store.stale_since_ms` says since when).
    stale: bool,
    /// The store and its health.
    store: StoreStatus,
    /// The last document refused, while it is the store's newest.
    #[schema(required = true)]
    last_rejection: Option<Rejection>,
    /// A store change held by the fleet-reset guard.
    #[schema(required = true)]
    held: Option<Held>,
}

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

/// An identified instance labelled with the replica it polls.
#[derive(Serialize, ToSchema)]
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

/// A rollout answer: `GET /api/v1/rollouts` and every rollout write.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutAnswer {
    /// The current (or last) rollout; `null` when there has been none.
    #[schema(required = true)]
    rollout: Option<RolloutView>,
    /// The ended rollouts kept (the newest 20), newest first; the last one too once ended.
    history: Vec<crate::rollout::plan::Summary>,
}

/// A rollout with where it stands.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutView {
    #[serde(flatten)]
    rollout: crate::rollout::Rollout,
    /// The phase in words (`running`, `waiting for a promote`, `completed`, `reverted`, ...).
    state: String,
    /// The current wave's reach (empty once the rollout has ended).
    progress: RolloutProgress,
}

/// The current wave's reach.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutProgress {
    /// The wave being run, from 1 (the record's `wave_index` is the same wave from 0).
    wave: usize,
    /// How many waves there are.
    waves: usize,
    /// Instances reached so far, by this wave and the earlier ones: served the candidate and
    /// seen live since the wave that serves them started (0 once the rollout has ended).
    reached: usize,
    /// Of them, those holding their new digest now.
    applied: usize,
    /// Each reached instance (the first 1000 by service and name).
    agents: Vec<ReachedAgent>,
}

/// One reached instance.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReachedAgent {
    /// Its service.
    service: String,
    /// Its instance.
    instance: String,
    /// Whether it holds its new digest.
    applied: bool,
    /// When its row was last seen (a held poll: now); `null` when the fleet lists no row of it
    /// now (it disappears when that lasts `lost_after_s`).
    #[schema(required = true)]
    last_seen_ms: Option<u64>,
}

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
    /// Agents seen (not counting pollers seen once).
    agents: u64,
    /// Agents holding the current digest.
    applied: u64,
    /// Agents not holding it yet.
    behind: u64,
    /// Agents that failed to apply it.
    stuck: u64,
    /// Pollers seen once.
    new: u64,
    /// Pollers that never said which instance they are, where every agent is expected to.
    anonymous: u64,
}

/// A polled service without configuration in `GET /api/v1/services`.
#[derive(Serialize, ToSchema)]
pub(crate) struct UnconfiguredRow {
    /// The service.
    name: String,
    /// The EMPTY answer's digest.
    digest: String,
    /// Agents seen (not counting pollers seen once).
    agents: u64,
    /// Agents holding the current digest.
    applied: u64,
    /// Agents not holding it yet.
    behind: u64,
    /// Agents that failed to apply it.
    stuck: u64,
    /// Pollers seen once.
    new: u64,
    /// Pollers that never said which instance they are, where every agent is expected to.
    anonymous: u64,
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
    config: std::collections::BTreeMap<String, String>,
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
}

/// `GET /api/v1/releases`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReleasePage {
    /// How many releases are kept.
    retention: u64,
    /// How many are kept now.
    total: u64,
    /// The page size.
    limit: u64,
    /// `before` for the next page; `null` on the last.
    #[schema(required = true)]
    next_before: Option<u64>,
    /// Newest first.
    releases: Vec<ReleaseSummary>,
}

/// `GET /api/v1/releases/{id}`: the release with its document.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReleaseDetail {
    /// The release.
    #[serde(flatten)]
    release: Release,
    /// Its document text; `null` when the key was deleted.
    #[schema(required = true)]
    document: Option<String>,
    /// The release before it, when kept.
    #[schema(required = true)]
    previous: Option<u64>,
    /// Whether it is the newest.
    current: bool,
}

/// `GET /api/v1/releases/{id}/compare/{other}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Comparison {
    /// The release compared from.
    from: u64,
    /// The release compared to.
    to: u64,
    /// How many services changed.
    changed: u64,
    /// Whether `changes` lists only the first 1000.
    truncated: bool,
    /// Every changed service (at most 1000), with digests and key-level changes.
    changes: Vec<ServiceChange>,
}

/// `GET /api/v1/services/{name}/history`.
#[derive(Serialize, ToSchema)]
pub(crate) struct History {
    /// The service.
    name: String,
    /// How many releases are kept.
    retention: u64,
    /// How many are kept now.
    releases_kept: u64,
    /// The page size.
    limit: u64,
    /// `before` for the next page; `null` on the last.
    #[schema(required = true)]
    next_before: Option<u64>,
    /// Newest first.
    history: Vec<HistoryEntry>,
}

/// A release that changed the service, with that change.
#[derive(Serialize, ToSchema)]
pub(crate) struct HistoryEntry {
    /// The release.
    #[serde(flatten)]
    release: ReleaseSummary,
    /// What it did to the service.
    change: ServiceChange,
}

/// `GET /api/v1/configurations`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Configurations {
    /// The release served now, when known.
    #[schema(required = true)]
    release: Option<u64>,
    /// The served table's version.
    version: u64,
    /// The document text; `null` when no release is known or the key is absent.
    #[schema(required = true)]
    document: Option<String>,
}

/// The JSON form of `PUT /api/v1/configurations`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DocumentRequest {
    /// The whole document as YAML text.
    document: String,
    /// Who makes the change (at most 256 bytes, no control characters; wins over `X-Skyconf-Author`).
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why (at most 4096 bytes, no control characters but newlines and tabs; wins over `X-Skyconf-Message`).
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// The body of `PUT /api/v1/services/{name}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServiceRequest {
    /// Every setting of the service, in order; values are strings, exactly as agents receive them.
    config: std::collections::BTreeMap<String, String>,
    /// Who makes the change.
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why.
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// The body of `PATCH /api/v1/services/{name}`: a JSON merge patch (RFC 7396).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServicePatch {
    /// The settings to change: a string sets the key (in place), `null` removes it; other keys
    /// and their order stay.
    config: std::collections::BTreeMap<String, Option<String>>,
    /// Who makes the change.
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why.
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// The optional body of `DELETE /api/v1/services/{name}` and of a rollback.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoteRequest {
    /// Who makes the change.
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why.
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// The optional body of `POST /api/v1/held/confirm` and `/discard`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeldRequest {
    /// The `held.since_ms` the operator saw: only that change is decided on.
    since_ms: Option<u64>,
}

/// The answer of a write: a dry run's report, `unchanged`, the served release, or (202) the
/// store took it but it was not served within the wait, or (503) served but not durable.
#[derive(Serialize, ToSchema)]
pub(crate) struct WriteAnswer {
    /// Whether it was a dry run.
    dry_run: bool,
    /// Whether the store was written.
    written: bool,
    /// What changes (or changed) per service.
    changes: Vec<ServiceChange>,
    /// Dry run: the document that would be written (`null`: the key would be deleted).
    #[schema(required = false)]
    document: Option<String>,
    /// Dry run: its SHA-256.
    #[schema(required = false)]
    document_sha256: Option<String>,
    /// Dry run: the newest release now.
    #[schema(required = false)]
    base_release: Option<u64>,
    /// The document is the one served already; nothing was written.
    #[schema(required = false)]
    unchanged: bool,
    /// Whether the new document is served.
    #[schema(required = false)]
    served: bool,
    /// Whether it is on disk: its release file and the last good copy a restart serves while the
    /// store is away (`null`: no data directory, or not known yet).
    #[schema(required = false)]
    durable: Option<bool>,
    /// How long it took to be served.
    #[schema(required = false)]
    served_after_ms: u64,
    /// The release (the newest one for `unchanged`).
    #[schema(required = false)]
    release: Option<ReleaseSummary>,
    /// The served table's version.
    #[schema(required = false)]
    version: u64,
    /// 202: what happened.
    #[schema(required = false)]
    message: String,
    /// 503: served, but not on disk: which file could not be written, and why.
    #[schema(required = false)]
    error: String,
    /// What is probably wrong with the document (the warnings `skyconf validate` prints): each
    /// at the line and column of its key in the document written (a dry run's `document`). A
    /// per-service write's are those about its service and the whole document.
    warnings: Vec<Warning>,
}

/// A 503 of a write: the store could not be reached, or the change is served but not durable.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "a schema only: the 503 is built by `AppError` or `json!`")]
pub(crate) enum WriteUnavailable {
    /// The store could not be reached or refused to work: nothing was written.
    Failed(ErrorBody),
    /// Served, but its release is not on disk (`durable: false`, `error`).
    NotDurable(Box<WriteAnswer>),
}

/// `POST /api/v1/held/confirm` or `/discard`.
#[derive(Serialize, ToSchema)]
pub(crate) struct HeldAnswer {
    /// Confirm: the held change is installed.
    #[schema(required = false)]
    confirmed: bool,
    /// Discard: the held change is dropped.
    #[schema(required = false)]
    discarded: bool,
    /// The served table's version.
    version: u64,
    /// Services served.
    services: u64,
    /// Confirm: the newest release.
    #[schema(required = false)]
    release: Option<ReleaseSummary>,
}

/// `?dry_run` and `?wait` of a write; any other parameter, or one given twice, is refused (400).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WriteParams {
    /// Check and report what would change; write nothing (`true`, `1`, `yes` or empty; `false`,
    /// `0`, `no`).
    #[param(required = false)]
    dry_run: bool,
    /// Seconds to wait for the new document to be served (default 10; more than 60 is 60; `0`:
    /// answer once the store took it).
    #[param(minimum = 0, required = false)]
    wait: f64,
}

/// The headers of a write.
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Header)]
pub(crate) struct WriteHeaders {
    /// `"<release id>"` (an `ETag`, quotes and `W/` optional): write only while that release is
    /// the newest, else 409 — checked by the store itself (a compare-and-swap on its revision)
    /// with etcd and ZooKeeper, so on every replica. `*`: whichever.
    #[serde(rename = "If-Match")]
    #[param(pattern = r#"^(\*|(W/)?"?[0-9]{1,19}"?)$"#, required = false)]
    if_match: String,
    /// Who makes the change, when the body names no `author` (at most 256 bytes).
    #[serde(rename = "X-Skyconf-Author")]
    #[param(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256, required = false)]
    author: String,
    /// Why, when the body has no `message` (at most 4096 bytes).
    #[serde(rename = "X-Skyconf-Message")]
    #[param(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 4096, required = false)]
    message: String,
}

/// `?limit` and `?before` of `GET /api/v1/releases`; any other parameter is refused (400).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Releases per page (default 50).
    #[param(minimum = 1, maximum = 500, required = false)]
    limit: u64,
    /// Releases older than this id (`next_before` of the previous page).
    #[param(schema_with = release_id, required = false)]
    before: u64,
}

/// `?limit` and `?cursor` of `GET /api/v1/instances`; any other parameter is refused (400).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct InstanceParams {
    /// Instances per page (default 100).
    #[param(minimum = 1, maximum = 1000, required = false)]
    limit: u64,
    /// Where the page starts: `next_cursor` of the previous page (opaque).
    #[param(required = false)]
    cursor: String,
}

/// `?limit` and `?before` of `GET /api/v1/services/{name}/history`; any other parameter is
/// refused (400).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryParams {
    /// Entries per page (default 20).
    #[param(minimum = 1, maximum = 100, required = false)]
    limit: u64,
    /// Releases older than this id (`next_before` of the previous page).
    #[param(schema_with = release_id, required = false)]
    before: u64,
}

/// A release id: any unsigned 64-bit integer (not `int64`, whose maximum is half of it).
fn release_id() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Integer)
        .minimum(Some(0u64))
        .maximum(Some(u64::MAX))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `(METHOD, path)` the router serves, read off the route table's source: each
    /// `.route("PATH", get(..).put(..))` of `admin/mod.rs`, and `/metrics`.
    fn routed() -> std::collections::BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let mut routes = std::collections::BTreeSet::new();
        for chunk in source.split(".route(").skip(1) {
            let path = chunk.split('"').nth(1).expect("a path literal");
            // The route's method chain ends at the next `.route(` or `.with_state`/`.layer`.
            let chain = chunk.split(".with_state").next().unwrap_or(chunk);
            let chain = chain.split(".layer(").next().unwrap_or(chain);
            for method in ["get", "put", "post", "patch", "delete"] {
                if chain.contains(&format!("{method}(")) {
                    routes.insert((method.to_owned(), path.to_owned()));
                }
            }
        }
        routes.insert(("get".to_owned(), "/metrics".to_owned()));
        routes
    }

    fn described() -> std::collections::BTreeSet<(String, String)> {
        let doc: serde_json::Value = serde_json::from_str(json()).unwrap();
        let mut routes = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                routes.insert((method.clone(), path.clone()));
            }
        }
        routes
    }

    #[test]
    fn every_route_is_described_and_every_description_is_routed() {
        let mut routed = routed();
        // The web page is HTML for people, not part of the API.
        assert!(routed.remove(&("get".to_owned(), "/".to_owned())));
        assert_eq!(routed, described());
    }

    #[test]
    fn the_description_is_openapi_3_1_with_bearer_auth() {
        let doc: serde_json::Value = serde_json::from_str(json()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        let put = &doc["paths"]["/api/v1/configurations"]["put"];
        let content = put["requestBody"]["content"].as_object().unwrap();
        assert!(content.contains_key("application/json") && content.contains_key("application/yaml"));
        assert_eq!(content["application/yaml"]["schema"]["$ref"], "#/components/schemas/AgentConfigurationsDocument");
        assert_eq!(put["requestBody"]["required"], false, "an empty body is an empty document");
        let document = &doc["components"]["schemas"]["AgentConfigurationsDocument"];
        assert_eq!(document["properties"]["configurations"]["additionalProperties"]["type"], "object");
        let names: Vec<&str> =
            put["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        for name in ["dry_run", "wait", "If-Match"] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
    }
}
