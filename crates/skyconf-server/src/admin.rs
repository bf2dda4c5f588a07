//! The admin HTTP endpoints: liveness and readiness for orchestrators.
//!
//! `GET /healthz` answers 200 while the process runs. `GET /readyz` answers 200 with a JSON
//! summary once a table is served (skyconf loads it before opening any port, so that is normally
//! from the start) and 503 while there is none; it names the store, whether it is connected,
//! whether the table is a persisted (stale) copy, and the last refused document, so an operator
//! sees why an edit did not land.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::state::{ServedTable, StoreView};

/// What the handlers read.
#[derive(Debug, Clone)]
struct AdminState {
    served: Arc<ServedTable>,
    store: Arc<StoreView>,
}

/// The admin router.
pub fn router(served: Arc<ServedTable>, store: Arc<StoreView>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(AdminState { served, store })
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, Json<serde_json::Value>) {
    let snapshot = state.served.snapshot();
    let store = state.store.status();
    let code = if snapshot.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "ready": snapshot.ready,
        "version": snapshot.version,
        "services": snapshot.table.len(),
        "installed_at": snapshot.installed_at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "stale": store.stale,
        "store": store,
        "last_rejection": state.served.last_rejection(),
    });
    (code, Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn store() -> Arc<StoreView> {
        Arc::new(StoreView::new("test".into(), Default::default(), true, false))
    }

    #[tokio::test]
    async fn readyz_is_503_without_a_table() {
        let response = router(Arc::new(ServedTable::waiting()), store())
            .oneshot(http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    }

    #[tokio::test]
    async fn readyz_reports_the_table_and_the_last_rejection() {
        let served = Arc::new(ServedTable::new(skyconf_core::read("configurations:\n  a: {k: v}\n").unwrap()));
        served.record_rejection(crate::state::Rejection {
            origin: "f".into(),
            error: "line 1, column 2: bad".into(),
            at: std::time::SystemTime::now(),
        });
        let response = router(Arc::clone(&served), store())
            .oneshot(http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: serde_json::Value =
            serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(body["services"], 1);
        assert_eq!(body["last_rejection"]["error"], "line 1, column 2: bad");
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
}
