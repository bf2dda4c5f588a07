//! The admin HTTP server: health endpoints, the JSON API operators use to see and change what
//! agents are served, and the web page built on that API.
//!
//! - `GET /healthz` answers 200 while the process runs. `GET /readyz` answers 200 with a JSON
//!   summary once a table is served and 503 while there is none; it names the store, whether it
//!   is connected, whether the table is a persisted (stale) copy, the last refused document, and
//!   a store change held by the fleet-reset guard (`held`, see [`crate::reload`]).
//! - `GET /api/v1/...`: services with their digest and fleet status, one service's configuration
//!   and agents, the instances agents said they are, releases with their changes, the current
//!   document (see [`read`]).
//! - `PUT`/`DELETE`/`POST /api/v1/...`: writes, validated, written through to the store and
//!   recorded as releases; rollback; confirming or discarding a held change (see [`write`](mod@write)).
//! - `GET /api/v1/openapi.json`: the OpenAPI 3.1 description of every route here and
//!   `/metrics`, generated from the handlers (`admin/openapi.rs`).
//! - `GET /`: the web page.
//!
//! The routes come in groups built by separate functions — [`Admin::health_routes`],
//! [`Admin::page_routes`], [`Admin::read_routes`] (every `GET` of the API),
//! [`Admin::preview_routes`] (a read that takes a draft document), [`Admin::write_routes`] (every
//! `PUT`, `POST`, `DELETE`)
//! — so each group can be wrapped in its own layers (authentication by role, say) before
//! [`Admin::router`] merges them.

mod app;
pub(crate) mod error;
mod extract;
pub(crate) mod json_errors;
pub(crate) mod opamp;
pub(crate) mod openapi;
pub(crate) mod preview;
pub(crate) mod read;
pub(crate) mod rollouts;
pub(crate) mod write;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::json;
use skyconf_sources::DynSource;

pub use app::admin_app;
pub use error::AppError;

use crate::fleet::{Fleet, FleetOptions};
use crate::publish::{Limits, PendingWrites, Publisher};
use crate::releases::{DEFAULT_RETENTION, ReleaseLog};
use crate::served::ServedTable;
use crate::store_task::HeldControl;
use crate::store_view::StoreView;

/// The longest service name the API accepts.
pub const MAX_SERVICE_NAME_BYTES: usize = 512;

/// Limits and waits of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminOptions {
    /// The largest document (and request body) accepted, in bytes.
    pub max_document_bytes: usize,
    /// How long a write waits, by default, for its document to be served before it answers.
    pub write_wait: Duration,
}

impl Default for AdminOptions {
    fn default() -> Self {
        Self { max_document_bytes: 32 * 1024 * 1024, write_wait: Duration::from_secs(10) }
    }
}

/// Everything the admin handlers read and write. Cheap to clone.
#[derive(Clone)]
pub struct Admin {
    served: Arc<ServedTable>,
    store: Arc<StoreView>,
    releases: Arc<ReleaseLog>,
    fleet: Arc<Fleet>,
    writer: Option<Arc<dyn DynSource>>,
    /// Every write goes through it: checks, writes through the store, waits to be served.
    publisher: Publisher,
    options: AdminOptions,
    /// The OAPs behind the gateway, in gateway mode.
    gateway: Option<Arc<skyconf_gateway::Upstreams>>,
    /// The count of held polls.
    held_polls: Option<Arc<crate::cds::hold::HeldCount>>,
    /// This replica and the others' fleet summaries.
    replicas: Option<Arc<crate::fleet::replicas::Replicas>>,
    /// Staged rollouts.
    rollouts: Option<Arc<crate::rollout::Rollouts>>,
    /// The OpAMP port's agents, when it runs.
    opamp: Option<Arc<crate::opamp::OpampFleet>>,
    /// The other replicas' OpAMP agents.
    opamp_peers: Option<Arc<crate::opamp::replicas::OpampReplicas>>,
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin")
            .field("served", &self.served.snapshot().version)
            .field("store", &self.store.status().store)
            .field("writable", &self.writer.is_some())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// Admin over `served` and `store`, with an in-memory release log, an empty fleet table and no
    /// writer (writes answer 409) until the `with_*` methods say otherwise.
    pub fn new(served: Arc<ServedTable>, store: Arc<StoreView>) -> Self {
        let releases = Arc::new(ReleaseLog::in_memory(DEFAULT_RETENTION));
        let options = AdminOptions::default();
        let publisher = Publisher::new(Arc::clone(&served), Arc::clone(&store), Arc::clone(&releases), limits(options));
        Self {
            served,
            store,
            releases,
            fleet: Arc::new(Fleet::new(FleetOptions::default())),
            writer: None,
            publisher,
            options,
            gateway: None,
            held_polls: None,
            replicas: None,
            rollouts: None,
            opamp: None,
            opamp_peers: None,
        }
    }

    /// Shows this replica's id and merges the other replicas' fleet summaries into the fleet
    /// views.
    pub fn with_replicas(mut self, replicas: Arc<crate::fleet::replicas::Replicas>) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// Runs staged rollouts (`/api/v1/rollouts`).
    pub fn with_rollouts(mut self, rollouts: Arc<crate::rollout::Rollouts>) -> Self {
        self.rollouts = Some(rollouts);
        self
    }

    /// Shows the state of the OAPs behind the gateway.
    pub fn with_gateway(mut self, upstreams: Arc<skyconf_gateway::Upstreams>) -> Self {
        self.gateway = Some(upstreams);
        self
    }

    /// Shows how many polls are held now.
    pub fn with_held_polls(mut self, held: Arc<crate::cds::hold::HeldCount>) -> Self {
        self.held_polls = Some(held);
        self
    }

    /// Uses this release log.
    pub fn with_releases(mut self, releases: Arc<ReleaseLog>) -> Self {
        self.publisher = self.publisher.with_releases(Arc::clone(&releases));
        self.releases = releases;
        self
    }

    /// Uses this fleet table.
    pub fn with_fleet(mut self, fleet: Arc<Fleet>) -> Self {
        self.fleet = fleet;
        self
    }

    /// Writes through `writer`.
    pub fn with_writer(mut self, writer: Arc<dyn DynSource>) -> Self {
        self.publisher = self.publisher.with_writer(Some(Arc::clone(&writer)));
        self.writer = Some(writer);
        self
    }

    /// Confirms and discards held changes through `held` (without it, both answer 409).
    pub fn with_held_control(mut self, held: HeldControl) -> Self {
        self.publisher = self.publisher.with_held_control(Some(held));
        self
    }

    /// Announces writes in `pending`, which the reloader reads to attribute their releases
    /// ([`crate::reload::Reloader::with_pending`]).
    pub fn with_pending(mut self, pending: Arc<PendingWrites>) -> Self {
        self.publisher = self.publisher.with_pending(pending);
        self
    }

    /// Uses these limits.
    pub fn with_options(mut self, options: AdminOptions) -> Self {
        self.publisher = self.publisher.with_limits(limits(options));
        self.options = options;
        self
    }

    /// The publishing service the write routes use: for other writers (the rollout driver).
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// `/healthz` and `/readyz`.
    pub fn health_routes(&self) -> Router {
        Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(self.clone())
    }

    /// The web page: static, holds no data (it reads everything through the API, asking for a
    /// token when the API wants one), so it is served to anyone who can reach the port.
    pub fn page_routes(&self) -> Router {
        Router::new().route("/", get(read::page))
    }

    /// Every `GET` of the API: reads only.
    pub fn read_routes(&self) -> Router {
        Router::new()
            .route("/api/v1/status", get(read::status))
            .route("/api/v1/services", get(read::services))
            .route("/api/v1/services/{name}", get(read::service))
            .route("/api/v1/instances", get(read::instances))
            .route("/api/v1/releases", get(read::releases))
            .route("/api/v1/releases/{id}", get(read::release))
            .route("/api/v1/releases/{id}/compare/{other}", get(read::compare))
            .route("/api/v1/services/{name}/history", get(read::history))
            .route("/api/v1/services/{name}/layers", get(preview::layers))
            .route("/api/v1/configurations", get(read::configurations))
            .route("/api/v1/rollouts", get(rollouts::current))
            .route("/api/v1/opamp/agents", get(opamp::agents))
            .route("/api/v1/opamp/agents/{uid}/effective", get(opamp::effective))
            .route("/api/v1/openapi.json", get(openapi::serve))
            .with_state(self.clone())
    }

    /// `POST /api/v1/preview`: a read (a read token) whose body may hold a whole draft document.
    pub fn preview_routes(&self) -> Router {
        Router::new().route("/api/v1/preview", post(preview::preview)).with_state(self.clone())
    }

    /// Every write of the API: `PUT`, `POST`, `DELETE`.
    pub fn write_routes(&self) -> Router {
        // Room for the largest document plus a JSON envelope.
        let limit = self.options.max_document_bytes.saturating_add(64 * 1024);
        Router::new()
            .route("/api/v1/configurations", put(write::put_configurations))
            .route(
                "/api/v1/services/{name}",
                put(write::put_service).patch(write::patch_service).delete(write::delete_service),
            )
            .route("/api/v1/releases/{id}/rollback", post(write::rollback))
            .route("/api/v1/held/confirm", post(write::confirm_held))
            .route("/api/v1/held/discard", post(write::discard_held))
            .route("/api/v1/rollouts", post(rollouts::start))
            .route("/api/v1/rollouts/{id}/promote", post(rollouts::promote))
            .route("/api/v1/rollouts/{id}/abort", post(rollouts::abort))
            .layer(DefaultBodyLimit::max(limit))
            .with_state(self.clone())
    }

    /// All of the above.
    pub fn router(&self) -> Router {
        let routes = self
            .health_routes()
            .merge(self.page_routes())
            .merge(self.read_routes())
            .merge(self.preview_routes())
            .merge(self.write_routes());
        json_errors::layer(routes)
    }
}

impl FromRef<Admin> for Publisher {
    fn from_ref(admin: &Admin) -> Self {
        admin.publisher.clone()
    }
}

/// The publisher's limits from the admin API's.
fn limits(options: AdminOptions) -> Limits {
    Limits { max_document_bytes: options.max_document_bytes, write_wait: options.write_wait }
}

/// The admin router with health endpoints and a read-only API over `served` and `store` (no
/// history, no fleet, no writes); [`Admin`] builds the full one.
pub fn router(served: Arc<ServedTable>, store: Arc<StoreView>) -> Router {
    Admin::new(served, store).router()
}

/// `GET /healthz`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    operation_id = "healthz",
    security(()),
    responses((status = 200, description = "The process runs.", body = String, content_type = "text/plain", example = "ok\n")),
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    operation_id = "readyz",
    security(()),
    responses(
        (status = 200, description = "A table is served.", body = openapi::Readiness),
        (status = 503, description = "No table is served yet.", body = openapi::Readiness),
    ),
)]
async fn readyz(State(state): State<Admin>) -> (StatusCode, Json<serde_json::Value>) {
    let snapshot = state.served.snapshot();
    let store = state.store.status();
    let code = if snapshot.ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "ready": snapshot.ready(),
        "version": snapshot.version,
        "services": snapshot.table.len(),
        "installed_at_ms": crate::unix_time::unix_ms(snapshot.installed_at),
        "stale": store.stale,
        "store": store,
        "last_rejection": state.served.last_rejection(),
        "held": state.served.held(),
    });
    (code, Json(body))
}

/// Checks a new service name from a request: non-empty, bounded, no control characters.
pub(crate) fn check_service_name(name: &str) -> Result<(), AppError> {
    if name.is_empty() {
        return Err(AppError::BadRequest("the service name is empty".into()));
    }
    if name.len() > MAX_SERVICE_NAME_BYTES {
        return Err(AppError::BadRequest(format!("the service name is longer than {MAX_SERVICE_NAME_BYTES} bytes")));
    }
    if name.chars().any(char::is_control) {
        return Err(AppError::BadRequest("the service name has control characters".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn store() -> Arc<StoreView> {
        Arc::new(StoreView::new("test".into(), Default::default(), true, false))
    }

    /// `GET /readyz` on a router over `served`: the status and the JSON body.
    async fn readyz(served: &Arc<ServedTable>) -> (http::StatusCode, serde_json::Value) {
        let response = router(Arc::clone(served), store())
            .oneshot(http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        (status, serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap())
    }

    #[tokio::test]
    async fn readyz_is_503_without_a_table() {
        let (status, _) = readyz(&Arc::new(ServedTable::waiting())).await;
        assert_eq!(status, 503);
    }

    #[tokio::test]
    async fn readyz_reports_the_table_and_the_last_rejection() {
        let served = Arc::new(ServedTable::new(skyconf_core::read("configurations:\n  a: {k: v}\n").unwrap()));
        served.record_rejection(crate::served::Rejection::new("f", "1:2: bad", None));
        let (status, body) = readyz(&served).await;
        assert_eq!(status, 200);
        assert_eq!(body["services"], 1);
        assert_eq!(body["last_rejection"]["error"], "1:2: bad");
    }

    #[tokio::test(start_paused = true)]
    async fn readyz_stays_ready_and_shows_a_held_change() {
        let two = "configurations:\n  a: {k: v}\n  b: {k: v}\n";
        let served = Arc::new(ServedTable::new(skyconf_core::read(two).unwrap()));
        let mut reloader = crate::reload::Reloader::new(Arc::clone(&served), "etcd", Some(two))
            .with_guard(crate::reload::Guard::default());
        reloader.apply(None);
        let (status, body) = readyz(&served).await;
        assert_eq!(status, 200);
        assert_eq!(body["services"], 2, "the last good table is still served");
        assert_eq!(body["held"]["services_before"], 2);
        assert_eq!(body["held"]["services_after"], 0);
        assert!(body["held"]["since_ms"].is_u64());
        assert!(body["held"]["reason"].as_str().unwrap().contains("no services"));
    }

    #[tokio::test]
    async fn healthz_is_ok() {
        let served = Arc::new(ServedTable::new(Default::default()));
        let response = router(served, store())
            .oneshot(http::Request::get("/healthz").body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }

    #[test]
    fn service_names_are_checked() {
        assert!(check_service_name("svc|ns|eu").is_ok());
        assert!(check_service_name("").is_err());
        assert!(check_service_name("a\nb").is_err());
        assert!(check_service_name(&"x".repeat(MAX_SERVICE_NAME_BYTES + 1)).is_err());
    }
}
