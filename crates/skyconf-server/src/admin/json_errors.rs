//! JSON bodies for the refusals the admin port's HTTP framework gives on its own: a path no route
//! has (404), a method the route does not take (405), and the rejections of axum's extractors (a
//! query string, a path or a body that does not parse, a missing content type, a body over the
//! limit). The API's own errors ([`super::AppError`]) are JSON already; this gives every other
//! client error the same form, `{"error": "...", "details": null}`, so a client reads each
//! failure alike. Headers (`Allow` on a 405, `WWW-Authenticate` on a 401) are kept.

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::json;

/// The most of a framework's text body that is read into the JSON error (its messages are one
/// line; anything longer is cut).
const MAX_TEXT_BYTES: usize = 4096;

/// `router` with every non-JSON client error answered as JSON.
pub(crate) fn layer(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(json_errors))
}

/// Rewrites a client error whose body is not JSON.
async fn json_errors(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("application/problem+json"));
    if !status.is_client_error() || is_json || method == Method::HEAD {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_TEXT_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let error = match status {
        StatusCode::NOT_FOUND => format!(
            "no route for {path} on the admin port: the API is under /api/v1/ \
             (GET /api/v1/openapi.json lists every route), the page is at /"
        ),
        // axum adds the `Allow` header outside this layer, so it is named rather than quoted.
        StatusCode::METHOD_NOT_ALLOWED => {
            format!("{path} does not take {method}; the Allow header lists the methods it takes")
        }
        _ if text.is_empty() => status.canonical_reason().unwrap_or("refused").to_owned(),
        _ => text,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(json!({ "error": error, "details": null }).to_string()))
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tower::ServiceExt as _;

    use super::*;

    async fn call(router: &Router, method: Method, uri: &str) -> (StatusCode, Option<String>, serde_json::Value) {
        let request = Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let allow = response.headers().get(header::ALLOW).map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, allow, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
    }

    #[derive(serde::Deserialize)]
    struct Paging {
        #[allow(dead_code)]
        limit: u32,
    }

    #[tokio::test]
    async fn framework_refusals_are_json_and_the_rest_is_untouched() {
        let router = layer(
            Router::new()
                .route("/ok", get(|| async { "ok" }))
                .route("/paged", get(|_: axum::extract::Query<Paging>| async { "paged" })),
        );
        let (status, _, body) = call(&router, Method::GET, "/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body["error"].as_str().unwrap().starts_with("no route for /nope"), "{body}");
        assert_eq!(body["details"], serde_json::Value::Null);
        let (status, allow, body) = call(&router, Method::DELETE, "/ok").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(allow.is_some_and(|a| a.contains("GET")), "the Allow header stays");
        assert!(body["error"].as_str().unwrap().starts_with("/ok does not take DELETE; the Allow header"), "{body}");
        let (status, _, body) = call(&router, Method::GET, "/paged?limit=abc").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body["error"].as_str().unwrap().contains("limit"), "{body}");
        let request = Request::builder().uri("/ok").body(Body::empty()).unwrap();
        let ok = router.clone().oneshot(request).await.unwrap();
        assert_eq!(axum::body::to_bytes(ok.into_body(), 16).await.unwrap(), "ok");
    }
}
