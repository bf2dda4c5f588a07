//! The admin port's app: the admin API's route groups behind their roles and body limits
//! (`crate::security`'s token check, body limits and browser checks), `/metrics`, and JSON for
//! every refusal the framework gives on its own.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;
use crate::security::{Role, SecurityConfig, auth, browser, limits};

/// The admin app: the admin API's route groups behind their roles and body limits, and
/// `/metrics`. `/healthz` and `/readyz` stay open: orchestrators probe them without tokens. So
/// does the web page, which holds no data and asks the operator for a token when the API needs one.
pub fn admin_app(
    admin: &super::Admin,
    metrics: &Arc<Metrics>,
    security: &SecurityConfig,
    max_document_bytes: usize,
) -> Router {
    let tokens = Arc::new(security.admin_tokens.clone());
    let events = metrics.events();
    // The body limit sits inside the token check: an unauthenticated upload is refused (401)
    // before anything is read.
    let protect = |routes: Router, role: Role, body_bytes: usize| {
        auth::require(limits::limit_body(routes, body_bytes), role, &tokens, &events)
    };
    let small = limits::ADMIN_SMALL_BODY_BYTES;
    let scrape_routes = Router::new().route("/metrics", get(scrape)).with_state(Arc::clone(metrics));
    let metrics_routes = if security.metrics_open {
        limits::limit_body(scrape_routes, small)
    } else {
        protect(scrape_routes, Role::Read, small)
    };
    let app = limits::limit_body(admin.health_routes().merge(admin.page_routes()), small)
        .merge(metrics_routes)
        .merge(protect(admin.read_routes(), Role::Read, small))
        .merge(protect(admin.preview_routes(), Role::Read, limits::admin_write_body_bytes(max_document_bytes)))
        .merge(protect(admin.write_routes(), Role::Write, limits::admin_write_body_bytes(max_document_bytes)));
    // Outermost: a cross-site or rebound request is refused before the token check; every
    // refusal the framework gives on its own (404, 405, a query that does not parse) is JSON.
    super::json_errors::layer(browser::protect(app, security.allowed_hosts.clone(), metrics.events()))
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "metrics",
    security(("bearer" = []), ()),
    responses(
        (status = 200, description = "Prometheus / OpenMetrics text. Needs a read token when the \
            server has admin tokens, unless `metricsOpen` is set.", body = String,
            content_type = "application/openmetrics-text"),
        (status = 401, description = "No token, or an unknown one.", body = super::openapi::ErrorBody),
    ),
)]
pub(crate) async fn scrape(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE_OPENMETRICS)], metrics.encode())
}
