//! The admin API's comparison of any two releases and per-service history, through the router
//! with `oneshot`, over a release log filled directly.

use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use skyconf_core::AgentConfigurations;
use skyconf_server::admin::Admin;
use skyconf_server::{ReleaseLog, ServedTable, StoreView};
use tower::ServiceExt;

const V1: &str = "configurations:\n  order:\n    a: 1\n    b: x\n  pay:\n    k: v\n";
const V2: &str = "configurations:\n  order:\n    a: 1\n    b: x\n  pay:\n    k: w\n";
const V3: &str = "configurations:\n  order:\n    a: 2\n  pay:\n    k: w\n";

/// A router over a log holding `documents` as releases 1, 2, ... (each against the one before).
fn admin_with(documents: &[&str]) -> axum::Router {
    let releases = Arc::new(ReleaseLog::in_memory(50));
    let mut previous = AgentConfigurations::default();
    for (version, text) in documents.iter().enumerate() {
        let table = skyconf_core::read(text).unwrap();
        releases.record(&previous, &table, Some(text), version as u64 + 1, None, "test");
        previous = table;
    }
    let served = Arc::new(ServedTable::new(previous));
    let store = Arc::new(StoreView::new("test".into(), Default::default(), true, false));
    Admin::new(served, store).with_releases(releases).router()
}

async fn get(router: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let response = router.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn any_two_releases_compare_key_by_key_in_either_order() {
    let router = admin_with(&[V1, V2, V3]);
    let (status, body) = get(&router, "/api/v1/releases/1/compare/3").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["from"].as_u64(), body["to"].as_u64(), body["changed"].as_u64()), (Some(1), Some(3), Some(2)));
    assert_eq!(body["truncated"], false);
    let order = &body["changes"][0];
    assert_eq!((order["service"].as_str(), order["change"].as_str()), (Some("order"), Some("modified")));
    let keys: Vec<_> = order["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), k["before"].as_str(), k["after"].as_str()))
        .collect();
    assert_eq!(keys, [("a", Some("1"), Some("2")), ("b", Some("x"), None)]);
    assert_eq!(body["changes"][1]["keys"][0]["after"], "w");

    let (_, back) = get(&router, "/api/v1/releases/3/compare/1").await;
    assert_eq!(back["changes"][0]["keys"][0]["before"], "2", "the other way round");
    let (_, same) = get(&router, "/api/v1/releases/2/compare/2").await;
    assert_eq!(same["changed"], 0);

    assert_eq!(get(&router, "/api/v1/releases/1/compare/9").await.0, 404);
    assert_eq!(get(&router, "/api/v1/releases/x/compare/1").await.0, 400);
}

#[tokio::test]
async fn a_service_history_lists_the_releases_that_changed_it_in_pages() {
    // Release 4 changes 30 services, `order` last: beyond what a summary names.
    let many: String = (0..29).map(|i| format!("  s{i:02}:\n    k: v\n")).collect();
    let v4 = format!("configurations:\n{many}  order:\n    a: 3\n  pay:\n    k: w\n");
    let router = admin_with(&[V1, V2, V3, &v4]);

    let (status, body) = get(&router, "/api/v1/services/order/history").await;
    assert_eq!(status, 200, "{body}");
    let ids: Vec<_> = body["history"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [4, 3, 1], "release 2 did not change `order`");
    assert_eq!(body["history"][0]["change"]["keys"][0]["after"], "3");
    assert_eq!(body["history"][2]["change"]["change"], "added");
    assert!(body["next_before"].is_null());

    let (_, first) = get(&router, "/api/v1/services/order/history?limit=2").await;
    assert_eq!(first["history"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_before"], 3);
    let (_, rest) = get(&router, "/api/v1/services/order/history?limit=2&before=3").await;
    let ids: Vec<_> = rest["history"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1]);
    assert!(rest["next_before"].is_null());

    let (_, pay) = get(&router, "/api/v1/services/pay/history").await;
    assert_eq!(pay["history"].as_array().unwrap().len(), 2, "{pay}");
    let (_, none) = get(&router, "/api/v1/services/nobody/history").await;
    assert_eq!(none["history"].as_array().unwrap().len(), 0);
    assert_eq!(get(&router, "/api/v1/services/order/history?limit=0").await.0, 400);
    assert_eq!(get(&router, "/api/v1/services/order/history?limit=101").await.0, 400);
}

/// A query string that does not parse is refused in the API's words, naming the parameter, not
/// in the HTTP framework's (usability finding 15).
#[tokio::test]
async fn a_query_string_that_does_not_parse_is_refused_naming_the_parameter() {
    let router = admin_with(&[V1]);
    for uri in ["/api/v1/releases?limit=abc", "/api/v1/services/order/history?limit=abc", "/api/v1/instances?limit=abc"]
    {
        let (status, body) = get(&router, uri).await;
        assert_eq!(status, 400, "{uri}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.starts_with("the query string does not parse: limit: "), "{uri}: {body}");
    }
}
