//! The admin HTTP endpoints: liveness and readiness for orchestrators.
//!
//! `GET /healthz` answers 200 while the process runs. `GET /readyz` answers 200 with a JSON
//! summary once a table is served (skyconf loads it before opening any port, so that is from the
//! start), and names the last refused document so an operator sees why an edit did not land.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::state::ServedTable;

/// The admin router.
pub fn router(served: Arc<ServedTable>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(served)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(served): State<Arc<ServedTable>>) -> Json<serde_json::Value> {
    let snapshot = served.snapshot();
    Json(json!({
        "ready": true,
        "version": snapshot.version,
        "services": snapshot.table.len(),
        "installed_at": snapshot.installed_at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "last_rejection": served.last_rejection(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[tokio::test]
    async fn readyz_reports_the_table_and_the_last_rejection() {
        let served = Arc::new(ServedTable::new(
            skyconf_core::read("configurations:\n  a: {k: v}\n").unwrap(),
        ));
        served.record_rejection(crate::state::Rejection {
            origin: "f".into(),
            error: "line 1, column 2: bad".into(),
            at: std::time::SystemTime::now(),
        });
        let response = router(Arc::clone(&served))
            .oneshot(
                http::Request::get("/readyz")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: serde_json::Value =
            serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes())
                .unwrap();
        assert_eq!(body["services"], 1);
        assert_eq!(body["last_rejection"]["error"], "line 1, column 2: bad");
    }

    #[tokio::test]
    async fn healthz_is_ok() {
        let served = Arc::new(ServedTable::new(Default::default()));
        let response = router(served)
            .oneshot(
                http::Request::get("/healthz")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}
