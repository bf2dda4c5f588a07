//! The admin API without sockets: requests go through the router with `oneshot`, writes go through
//! a store held in memory, and come back through the real hub and reloader, as a store's watch
//! would bring them back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use skyconf_core::Digest;
use skyconf_core::store::StoreContent;
use skyconf_server::admin::Admin;
use skyconf_server::{Fleet, FleetOptions, InstanceIdentity, ReleaseLog, Reloader, ServedTable, StoreTask, StoreView};
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect, KeySet, Revision, Source, SourceError, Update};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const V1: &str = "# the fleet\nconfigurations:\n  order:\n    agent.sample_n_per_3_secs: 10\n    agent.ignore_suffix: .jpg\n  pay:\n    agent.span_limit_per_segment: 300\n";

/// A store in memory: a put is reported back to the hub, as a watch would report it.
struct MemoryStore {
    updates: mpsc::Sender<Update>,
    /// 0: works; 1: unreachable; 2: refuses the operation; 3: the key changed under the write.
    mode: Arc<AtomicU8>,
    /// Every put takes a permit: a test that takes them all away stalls the store.
    gate: Arc<Semaphore>,
    /// Puts in the store now, and the most at once.
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl Source for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn load(&self, _keys: &KeySet) -> Result<StoreContent, SourceError> {
        Ok(StoreContent::default())
    }

    async fn run(&self, _keys: KeySet, _updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        shutdown.cancelled().await;
    }

    async fn put(&self, key: &str, value: Option<&str>, _expect: Expect) -> Result<Option<Revision>, SourceError> {
        match self.mode.load(Ordering::SeqCst) {
            1 => return Err(SourceError::Unavailable { store: "memory".into(), message: "down".into() }),
            2 => return Err(SourceError::Unsupported("memory cannot do that".into())),
            3 => {
                let message = format!("key {key} was at revision 7 when last seen; it is now at 9");
                return Err(SourceError::Conflict { store: "memory".into(), message });
            }
            _ => {}
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let permit = self.gate.acquire().await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        drop(permit);
        let update = Update::single(key, value.map(str::to_owned));
        self.updates
            .send(update)
            .await
            .map(|()| None)
            .map_err(|_| SourceError::Unavailable { store: "memory".into(), message: "closed".into() })
    }
}

struct Setup {
    router: Router,
    served: Arc<ServedTable>,
    releases: Arc<ReleaseLog>,
    fleet: Arc<Fleet>,
    mode: Arc<AtomicU8>,
    store: Arc<MemoryStore>,
}

fn setup() -> Setup {
    setup_with(FleetOptions::default())
}

fn setup_with(fleet: FleetOptions) -> Setup {
    let table = skyconf_core::read(V1).unwrap();
    let served = Arc::new(ServedTable::new(table.clone()));
    let mut content = StoreContent::default();
    content.set_single(AGENT_CONFIGURATIONS_KEY, Some(V1.into()));
    let store = Arc::new(StoreView::new("memory".into(), content, true, false));
    let releases = Arc::new(ReleaseLog::in_memory(50));
    releases.record_start(&table, Some(V1), 1, None, "memory");
    let pending = Arc::new(skyconf_server::publish::PendingWrites::default());
    let reloader = Reloader::new(Arc::clone(&served), "memory", Some(V1))
        .with_releases(Arc::clone(&releases))
        .with_pending(Arc::clone(&pending));
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(StoreTask::new(Arc::clone(&store), reloader, None).run(rx));
    let fleet = Arc::new(Fleet::new(fleet));
    let mode = Arc::new(AtomicU8::new(0));
    let writer = Arc::new(MemoryStore {
        updates: tx,
        mode: Arc::clone(&mode),
        gate: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
        in_flight: Arc::default(),
        most_in_flight: Arc::default(),
    });
    let router = Admin::new(Arc::clone(&served), store)
        .with_releases(Arc::clone(&releases))
        .with_fleet(Arc::clone(&fleet))
        .with_writer(Arc::clone(&writer) as Arc<dyn skyconf_sources::DynSource>)
        .with_pending(pending)
        .router();
    Setup { router, served, releases, fleet, mode, store: writer }
}

impl Setup {
    /// The digest served to `service` now.
    fn digest(&self, service: &str) -> Digest {
        self.served.snapshot().answer(service).digest.clone()
    }

    /// Every served service with its digest, in order.
    fn digests(&self) -> Vec<(String, Digest)> {
        self.served.snapshot().table.services().map(|s| (s.name().to_owned(), s.digest().clone())).collect()
    }

    /// Sends `request`, which must succeed (200); the answer's body.
    async fn ok(&self, request: Request<Body>) -> Value {
        let (status, body) = call(&self.router, request).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// [`Setup::ok`] for a JSON request.
    async fn ok_json(&self, method: &str, path: &str, body: Value) -> Value {
        self.ok(json_request(method, path, &body)).await
    }
}

async fn call(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, body)
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// `PUT /api/v1/configurations` of `text`, without a content type.
fn put_document(text: impl Into<Body>) -> Request<Body> {
    Request::put("/api/v1/configurations").body(text.into()).unwrap()
}

fn json_request(method: &str, path: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn yaml_put(path: &str) -> http::request::Builder {
    Request::put(path).header("content-type", "application/yaml")
}

fn peer(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 1, 2, 3], port))
}

#[tokio::test]
async fn lists_services_with_digest_keys_and_fleet_counts() {
    let s = setup();
    let order = s.digest("order");
    for _ in 0..2 {
        s.fleet.observe("order", order.as_str(), peer(1), &order, true);
        s.fleet.observe("order", "", peer(2), &order, true);
    }
    // A one-off poll (`skyconf fetch`) is `new`, not an agent.
    s.fleet.observe("order", "", peer(4), &order, true);
    s.fleet.observe("typo-service", "", peer(3), &Digest::empty(), false);

    let (status, body) = call(&s.router, get("/api/v1/services")).await;
    assert_eq!(status, 200);
    let services = body["services"].as_array().unwrap();
    assert_eq!(services.iter().map(|s| s["name"].as_str().unwrap()).collect::<Vec<_>>(), ["order", "pay"]);
    assert_eq!(services[0]["digest"], order.as_str());
    assert_eq!(services[0]["keys"], 2);
    assert_eq!((services[0]["agents"].as_u64(), services[0]["applied"].as_u64()), (Some(2), Some(1)));
    assert_eq!(services[0]["behind"], 1);
    assert_eq!(services[0]["new"], 1);
    assert_eq!(services[0]["last_change"]["release"], 1);
    assert_eq!(body["unconfigured"][0]["name"], "typo-service");
}

#[tokio::test]
async fn shows_one_service_with_its_config_and_agents() {
    let s = setup();
    let order = s.digest("order");
    s.fleet.observe_instance("order", "pod-1@10.1.2.3", peer(1));
    s.fleet.observe("order", order.as_str(), peer(1), &order, true);

    let (status, body) = call(&s.router, get("/api/v1/services/order")).await;
    assert_eq!(status, 200);
    assert_eq!(body["config"], json!({"agent.sample_n_per_3_secs": "10", "agent.ignore_suffix": ".jpg"}));
    assert_eq!(body["digest"], order.as_str());
    let agent = &body["agents"][0];
    assert_eq!(agent["peer"], "10.1.2.3:1");
    assert_eq!(agent["instance"], "pod-1@10.1.2.3");
    assert_eq!(agent["state"], "applied");
    assert_eq!(agent["digest"], order.as_str());

    let (status, body) = call(&s.router, get("/api/v1/services/nope")).await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("nope"));
    // A read looks any name up: names a write would refuse are 404 when nobody polls them...
    let (status, _) = call(&s.router, get("/api/v1/services/a%0Ab")).await;
    assert_eq!(status, 404, "control characters in a name");
    let (status, _) = call(&s.router, get(&format!("/api/v1/services/{}", "x".repeat(600)))).await;
    assert_eq!(status, 404, "too long a name");
}

fn java_report(instance: &str, version: Option<&str>) -> InstanceIdentity {
    let properties = [("hostname", "pod-1"), ("ipv4", "10.1.2.3"), ("ipv4", "172.17.0.1"), ("language", "java")];
    InstanceIdentity {
        service: "order".into(),
        instance: instance.into(),
        properties: properties.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        agent_version: version.map(str::to_owned),
        reported_properties: true,
    }
}

#[tokio::test]
async fn lists_instances_with_their_properties_and_the_pollers_that_never_said_who_they_are() {
    let s = setup();
    let order = s.digest("order");
    s.fleet.observe_identity(peer(1), &java_report("pod-1@10.1.2.3", Some("9.4.0")));
    s.fleet.observe_identity(peer(5), &java_report("pod-0@10.1.2.5", None));
    for _ in 0..2 {
        s.fleet.observe("order", order.as_str(), peer(1), &order, true);
        s.fleet.observe("pay", "", peer(1), &s.digest("pay"), true);
        s.fleet.observe("order", "", peer(2), &order, true);
    }

    let body = s.ok(get("/api/v1/instances")).await;
    assert_eq!(body["expect_identity"], false);
    assert_eq!((body["instances_total"].as_u64(), body["anonymous_total"].as_u64()), (Some(2), Some(1)));
    let names: Vec<_> = body["instances"].as_array().unwrap().iter().map(|i| i["instance"].as_str().unwrap()).collect();
    assert_eq!(names, ["pod-0@10.1.2.5", "pod-1@10.1.2.3"], "by service, then name");
    let pod = &body["instances"][1];
    assert_eq!(pod["service"], "order");
    assert_eq!(pod["peer"], "10.1.2.3:1");
    assert_eq!(pod["agent_version"], "9.4.0");
    assert_eq!(pod["properties"][1], json!({"key": "ipv4", "value": "10.1.2.3"}));
    assert_eq!(pod["properties"][2], json!({"key": "ipv4", "value": "172.17.0.1"}), "a repeated key is kept");
    assert!(pod["reported_ms"].as_u64().unwrap() <= pod["last_seen_ms"].as_u64().unwrap());
    let services = crate::pairs(&pod["services"], "service", "state");
    assert_eq!(services, [("order", "applied"), ("pay", "behind")]);
    assert_eq!(body["instances"][0]["agent_version"], Value::Null);
    assert_eq!(body["instances"][0]["services"], json!([]), "identified, not polling");
    let anonymous = &body["anonymous"][0];
    assert_eq!((anonymous["peer"].as_str(), anonymous["service"].as_str()), (Some("10.1.2.3:2"), Some("order")));
    assert_eq!(anonymous["state"], "behind", "without the expectation, its usual state");

    // The service's agents carry the identity too.
    let body = s.ok(get("/api/v1/services/order")).await;
    let agents = body["agents"].as_array().unwrap();
    assert_eq!(agents[0]["agent_version"], "9.4.0");
    assert_eq!(agents[0]["properties"][0], json!({"key": "hostname", "value": "pod-1"}));
    assert_eq!((agents[1]["properties"].clone(), agents[1]["agent_version"].clone()), (json!([]), Value::Null));
}

/// N1, N9: the instances listing is paged (by service, instance, peer), built only for the page
/// it returns, and two live connections naming the same instance are both listed and flagged.
#[tokio::test]
async fn the_instances_listing_is_paged_and_flags_a_name_two_connections_claim() {
    let s = setup();
    let order = s.digest("order");
    for port in 1..=5u16 {
        let name = if port == 5 { "pod-1".to_owned() } else { format!("pod-{port}") };
        s.fleet.observe_identity(peer(port), &java_report(&name, Some("9.4.0")));
        s.fleet.observe("order", order.as_str(), peer(port), &order, true);
    }
    let page = s.ok(get("/api/v1/instances?limit=2")).await;
    let rows = |body: &Value| -> Vec<(String, String, bool)> {
        body["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let duplicate = i["duplicate_name"].as_bool().unwrap();
                (i["instance"].as_str().unwrap().to_owned(), i["peer"].as_str().unwrap().to_owned(), duplicate)
            })
            .collect()
    };
    assert_eq!(page["instances_total"], 5);
    assert_eq!(page["limit"], 2);
    assert_eq!(
        rows(&page),
        [("pod-1".into(), "10.1.2.3:1".into(), true), ("pod-1".into(), "10.1.2.3:5".into(), true)],
        "both connections claiming pod-1, flagged"
    );
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let page = s.ok(get(&format!("/api/v1/instances?limit=2&cursor={cursor}"))).await;
    assert_eq!(
        rows(&page),
        [("pod-2".into(), "10.1.2.3:2".into(), false), ("pod-3".into(), "10.1.2.3:3".into(), false)]
    );
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let page = s.ok(get(&format!("/api/v1/instances?limit=2&cursor={cursor}"))).await;
    assert_eq!(rows(&page), [("pod-4".into(), "10.1.2.3:4".into(), false)]);
    assert_eq!(page["next_cursor"], Value::Null, "the last page");
    let all = s.ok(get("/api/v1/instances")).await;
    assert_eq!((all["limit"].as_u64(), all["instances"].as_array().unwrap().len()), (Some(100), 5), "100 by default");
    // An empty cursor (a form's empty field) is the first page.
    assert_eq!(s.ok(get("/api/v1/instances?cursor=")).await, all);
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=%%%", "cursor=bm9wZQ", "offset=3"] {
        let (status, body) = call(&s.router, get(&format!("/api/v1/instances?{bad}"))).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

#[tokio::test]
async fn with_identities_expected_anonymous_pollers_are_counted_apart() {
    let s = setup_with(FleetOptions { expect_identity: true, ..FleetOptions::default() });
    let order = s.digest("order");
    s.fleet.observe_identity(peer(1), &java_report("pod-1@10.1.2.3", Some("9.4.0")));
    for _ in 0..2 {
        s.fleet.observe("order", order.as_str(), peer(1), &order, true);
        s.fleet.observe("order", "", peer(2), &order, true);
    }
    let body = s.ok(get("/api/v1/services")).await;
    let row = &body["services"][0];
    assert_eq!(
        (row["agents"].as_u64(), row["behind"].as_u64(), row["anonymous"].as_u64()),
        (Some(1), Some(0), Some(1))
    );
    let body = s.ok(get("/api/v1/services/order")).await;
    assert_eq!(body["counts"]["anonymous"], 1);
    assert_eq!(body["agents"][1]["state"], "anonymous");
    let body = s.ok(get("/api/v1/instances")).await;
    assert_eq!(body["anonymous"][0]["state"], "anonymous");
    let status = s.ok(get("/api/v1/status")).await;
    assert_eq!(status["fleet"]["expect_identity"], true);
    assert_eq!(status["fleet"]["identified"], 1);
}

/// Found by the contract test: agents may poll names a write refuses (control characters, up to
/// 1024 bytes), `GET /api/v1/services` lists them, and `GET /api/v1/services/{name}` answered 400
/// for them instead of showing their agents.
#[tokio::test]
async fn a_polled_name_a_write_would_refuse_is_still_readable() {
    let s = setup();
    let long = "y".repeat(600);
    for name in ["bell\u{7}name", long.as_str()] {
        s.fleet.observe(name, "", peer(7), &Digest::empty(), false);
        let path = format!("/api/v1/services/{}", name.replace('\u{7}', "%07"));
        let (status, body) = call(&s.router, get(&path)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["name"], name);
        assert_eq!(body["configured"], false);
        assert_eq!(body["agents"][0]["peer"], "10.1.2.3:7");
        let (status, body) = call(&s.router, get(&format!("{path}/history"))).await;
        assert_eq!(status, 200, "its history (none) is readable too: {body}");
        assert_eq!(body["history"], json!([]));
        // A write still refuses the name.
        let (status, _) = call(&s.router, json_request("PUT", &path, &json!({"config": {}}))).await;
        assert_eq!(status, 400);
    }
}

/// Found by the contract test: the optional bodies (`DELETE`, rollback, `held/*`) are described
/// as an object or `null`; `null` was refused, and an array of the fields in order was read as
/// the object (serde reads structs from sequences).
#[tokio::test]
async fn optional_bodies_may_be_null_but_never_arrays() {
    let s = setup();
    let raw = |method: &str, path: &str, body: &'static str| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    let (status, body) = call(&s.router, raw("DELETE", "/api/v1/services/order?dry_run=true", "null")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&s.router, raw("POST", "/api/v1/releases/1/rollback?dry_run=true", " null ")).await;
    assert_eq!(status, 200, "{body}");
    // This router has no held control: a body that reads is answered 409, one that does not 400.
    let (status, body) = call(&s.router, raw("POST", "/api/v1/held/confirm", "null")).await;
    assert_eq!(status, 409, "{body}");
    for (method, path, body) in [
        ("DELETE", "/api/v1/services/order?dry_run=true", r#"[null, null]"#),
        ("POST", "/api/v1/releases/1/rollback?dry_run=true", r#"["ann", "why"]"#),
        ("POST", "/api/v1/held/discard", "[1]"),
        ("PUT", "/api/v1/services/order?dry_run=true", r#"[{"k": "v"}, null, null]"#),
        ("PATCH", "/api/v1/services/order?dry_run=true", r#"[{"k": null}]"#),
        ("PUT", "/api/v1/configurations?dry_run=true", r#"["configurations: {}"]"#),
        ("PUT", "/api/v1/services/order?dry_run=true", "null"),
    ] {
        let (status, answer) = call(&s.router, raw(method, path, body)).await;
        assert_eq!(status, 400, "{method} {path} {body}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("not the expected JSON"), "{answer}");
    }
}

/// Found by the contract test: `since_ms` is an integer, and JSON's `139.0` is the integer 139.
#[tokio::test]
async fn since_ms_may_be_written_as_a_whole_float() {
    let s = setup();
    let (status, body) =
        call(&s.router, json_request("POST", "/api/v1/held/confirm", &json!({"since_ms": 139.0}))).await;
    assert_eq!(status, 409, "read, and nothing is held: {body}");
    for bad in [json!({"since_ms": 1.5}), json!({"since_ms": -1}), json!({"since_ms": "5"})] {
        let (status, body) = call(&s.router, json_request("POST", "/api/v1/held/discard", &bad)).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

/// Found by the contract test: a bad `X-Skyconf-Author`/`X-Skyconf-Message` header was ignored
/// when the body named an author or message; it is refused, whichever of the two was meant.
#[tokio::test]
async fn a_bad_attribution_header_is_refused_even_when_the_body_names_one() {
    let s = setup();
    for (header, value) in [("x-skyconf-message", "\u{84}"), ("x-skyconf-author", "a\u{9}b")] {
        let request = Request::put("/api/v1/services/order?dry_run=true")
            .header("content-type", "application/json")
            .header(header, http::HeaderValue::from_bytes(value.as_bytes()).unwrap())
            .body(Body::from(json!({"config": {"k": "v"}, "author": "ann", "message": "why"}).to_string()))
            .unwrap();
        let (status, body) = call(&s.router, request).await;
        assert_eq!(status, 400, "{header}: {body}");
    }
}

#[tokio::test]
async fn the_openapi_description_is_served_and_names_every_api_route() {
    let s = setup();
    let response = s.router.clone().oneshot(get("/api/v1/openapi.json")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let doc: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in ["/api/v1/services/{name}", "/api/v1/releases/{id}/rollback", "/healthz", "/readyz", "/metrics"] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }
    let patch = &doc["paths"]["/api/v1/services/{name}"]["patch"];
    assert!(patch["requestBody"]["content"]["application/merge-patch+json"].is_object());
    for code in ["200", "202", "400", "401", "403", "409", "413", "500", "503"] {
        assert!(patch["responses"][code].is_object(), "PATCH answers {code}");
    }
}

#[tokio::test]
async fn a_document_write_is_served_and_recorded_with_author_and_message() {
    let s = setup();
    let v2 = "configurations:\n  order:\n    agent.sample_n_per_3_secs: 20\n";
    let request = yaml_put("/api/v1/configurations")
        .header("x-skyconf-author", "ann")
        .header("x-skyconf-message", "sample more")
        .body(Body::from(v2))
        .unwrap();
    let body = s.ok(request).await;
    assert_eq!(body["served"], true);
    assert_eq!(body["release"]["id"], 2);
    assert_eq!(s.served.snapshot().table.get("order").unwrap().get("agent.sample_n_per_3_secs"), Some("20"));
    let release = s.releases.get(2).unwrap();
    assert_eq!((release.meta.author.as_deref(), release.meta.message.as_deref()), (Some("ann"), Some("sample more")));
    assert_eq!(release.meta.origin, "api");

    let (status, body) = call(&s.router, get("/api/v1/releases/2")).await;
    assert_eq!(status, 200);
    assert_eq!(body["document"], v2);
    assert_eq!(body["previous"], 1);
    let changes = body["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!((changes[0]["service"].as_str(), changes[0]["change"].as_str()), (Some("order"), Some("modified")));
    assert_eq!(changes[0]["keys"][0], json!({"key": "agent.sample_n_per_3_secs", "before": "10", "after": "20"}));
    assert_eq!(changes[0]["keys"][1], json!({"key": "agent.ignore_suffix", "before": ".jpg", "after": null}));
    assert_eq!((changes[1]["service"].as_str(), changes[1]["change"].as_str()), (Some("pay"), Some("removed")));
    assert_eq!(changes[1]["digest_after"], Digest::empty().as_str());

    let (status, body) = call(&s.router, get("/api/v1/releases")).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["releases"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect::<Vec<_>>(),
        [2, 1]
    );

    let (status, body) = call(&s.router, get("/api/v1/configurations")).await;
    assert_eq!((status, body["document"].as_str()), (StatusCode::OK, Some(v2)));

    let again = yaml_put("/api/v1/configurations").body(Body::from(v2)).unwrap();
    let (status, body) = call(&s.router, again).await;
    assert_eq!((status, body["unchanged"].as_bool()), (StatusCode::OK, Some(true)));
    assert_eq!(s.releases.list().len(), 2, "an unchanged document is not a release");
}

#[tokio::test]
async fn a_refused_document_is_a_400_with_line_and_column_and_changes_nothing() {
    let s = setup();
    let bad = "configurations:\n  order:\n    agent.sample_n_per_3_secs:\n";
    let (status, body) = call(&s.router, yaml_put("/api/v1/configurations").body(Body::from(bad)).unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "the document was refused");
    assert_eq!(body["details"]["line"], 3);
    assert!(body["details"]["column"].is_u64());
    assert_eq!(s.served.snapshot().version, 1);
    assert_eq!(s.releases.list().len(), 1);

    let not_text = Request::put("/api/v1/configurations").body(Body::from(vec![0xff, 0xfe])).unwrap();
    assert_eq!(call(&s.router, not_text).await.0, 400);
    let not_json = Request::put("/api/v1/configurations")
        .header("content-type", "application/json")
        .body(Body::from("{"))
        .unwrap();
    assert_eq!(call(&s.router, not_json).await.0, 400);
    let (status, body) = call(
        &s.router,
        json_request("PUT", "/api/v1/services/order", &json!({"config": {"agent.sample_n_per_3_secs": 5}})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("must be a string"), "{body}");
    let (status, _) =
        call(&s.router, json_request("PUT", "/api/v1/services/order", &json!({"config": {"UUID": "x"}}))).await;
    assert_eq!(status, 400, "a reserved key");
    let (status, _) =
        call(&s.router, Request::put("/api/v1/configurations?dry_run=maybe").body(Body::from(V1)).unwrap()).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn an_alias_amplified_document_is_a_400_before_anything_is_written() {
    // Reliability finding F1: this PUT used to write the document, then exhaust memory.
    let s = setup();
    let mut bomb = format!("configurations:\n  order:\n    k0: &s \"{}\"\n", "x".repeat(100_000));
    for i in 1..=1000 {
        bomb.push_str(&format!("    k{i}: *s\n"));
    }
    let (status, body) = call(&s.router, yaml_put("/api/v1/configurations").body(Body::from(bomb)).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!((body["details"]["line"].as_u64(), body["details"]["column"].as_u64()), (Some(42), Some(10)), "{body}");
    assert_eq!(s.served.snapshot().version, 1);
    assert_eq!(s.releases.list().len(), 1);
}

#[tokio::test]
async fn a_dry_run_answers_digests_before_and_after_and_writes_nothing() {
    let s = setup();
    let order = s.digest("order");
    let body = s
        .ok_json(
            "PUT",
            "/api/v1/services/order?dry_run=true",
            json!({"config": {"agent.sample_n_per_3_secs": "30"}, "author": "bob"}),
        )
        .await;
    assert_eq!(body["dry_run"], true);
    let change = &body["changes"][0];
    assert_eq!(change["service"], "order");
    assert_eq!(change["digest_before"], order.as_str());
    assert_eq!(change["digest_after"], Digest::of_entries([("agent.sample_n_per_3_secs", "30")]).as_str());
    assert_eq!(body["changes"].as_array().unwrap().len(), 1, "pay is untouched");
    assert_eq!(s.served.snapshot().version, 1);
    assert_eq!(s.releases.list().len(), 1);
}

#[tokio::test]
async fn a_dry_run_warns_about_a_repeated_configurations_key() {
    // Reliability finding F16: a document with two `configurations:` keys is served as the OAP
    // serves it (the last wins), and the dry run says which lines and how much it drops.
    let s = setup();
    let twice = "configurations:\n  order: {agent.sample_rate: 0.1}\n  pay: {agent.sample_rate: 0.2}\nconfigurations:\n  order: {agent.sample_rate: 0.3}\n";
    let (status, body) =
        call(&s.router, yaml_put("/api/v1/configurations?dry_run=true").body(Body::from(twice)).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let warnings = body["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{body}");
    assert_eq!((&warnings[0]["line"], &warnings[0]["column"]), (&json!(4), &json!(1)), "{body}");
    assert!(
        warnings[0]["message"].as_str().unwrap().starts_with("`configurations:` is written 2 times (lines 1, 4)"),
        "{body}"
    );
    let clean = "configurations:\n  order: {agent.sample_rate: 0.5}\n";
    let (_, body) =
        call(&s.router, yaml_put("/api/v1/configurations?dry_run=true").body(Body::from(clean)).unwrap()).await;
    assert_eq!(body["warnings"], json!([]), "{body}");
    assert_eq!(s.served.snapshot().version, 1);
}

/// What `skyconf validate` warns about in one document: a misspelt key, a value the Java agent
/// refuses, an empty value and a key no agent reads.
const WARNED: &str = "configurations:\n  order:\n    agent.sampel_n_per_3_secs: 5\n    agent.span_limit_per_segment: abc\n    agent.ignore_suffix: \"\"\n    foo.bar: 1\n";

/// `(line, column, service, key)` of each warning of a write's answer.
fn warned(body: &Value) -> Vec<(u64, u64, String, String)> {
    body["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings: {body}"))
        .iter()
        .map(|w| {
            let text = |k: &str| w[k].as_str().unwrap_or_default().to_owned();
            (w["line"].as_u64().unwrap_or(0), w["column"].as_u64().unwrap_or(0), text("service"), text("key"))
        })
        .collect()
}

/// The text of `document` at a warning's line and column.
fn at<'a>(document: &'a str, warning: &Value) -> &'a str {
    let line = document.lines().nth(warning["line"].as_u64().unwrap() as usize - 1).unwrap();
    &line[warning["column"].as_u64().unwrap() as usize - 1..]
}

#[tokio::test]
async fn every_write_path_warns_as_validate_does_with_line_and_column() {
    // Usability finding 3: `validate` warned, the dry runs answered `"warnings": []`.
    let s = setup();
    let (status, body) =
        call(&s.router, yaml_put("/api/v1/configurations?dry_run=true").body(Body::from(WARNED)).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let order = |line, key: &str| (line, 5, "order".to_owned(), key.to_owned());
    assert_eq!(
        warned(&body),
        [
            order(3, "agent.sampel_n_per_3_secs"),
            order(4, "agent.span_limit_per_segment"),
            order(5, "agent.ignore_suffix"),
            order(6, "foo.bar")
        ]
    );
    let warnings = &body["warnings"];
    assert_eq!(warnings[0]["suggestion"], "agent.sample_n_per_3_secs");
    assert!(warnings[0]["message"].as_str().unwrap().contains("did you mean `agent.sample_n_per_3_secs`?"), "{body}");
    assert!(warnings[1]["message"].as_str().unwrap().contains("not a 32-bit integer"), "{body}");
    assert!(warnings[2]["message"].as_str().unwrap().contains("is empty"), "{body}");
    assert!(warnings[3]["message"].as_str().unwrap().contains("no known agent reads `foo.bar`"), "{body}");

    // The per-service dry run and a PATCH dry run: the same warning, placed in the document they
    // would write.
    let misspelt = json!({"config": {"agent.sampel_n_per_3_secs": "5"}});
    for method in ["PUT", "PATCH"] {
        let body = s.ok_json(method, "/api/v1/services/order?dry_run=true", misspelt.clone()).await;
        let found = warned(&body);
        assert_eq!(found.len(), 1, "{method}: {body}");
        assert_eq!((found[0].2.as_str(), found[0].3.as_str()), ("order", "agent.sampel_n_per_3_secs"), "{method}");
        assert_eq!(body["warnings"][0]["suggestion"], "agent.sample_n_per_3_secs", "{method}: {body}");
        let document = body["document"].as_str().unwrap();
        assert!(at(document, &body["warnings"][0]).trim_start_matches('"').starts_with("agent.sampel_n_per_3_secs"));
    }
    assert_eq!(s.served.snapshot().version, 1, "dry runs write nothing");

    // The real write's answer says it too.
    let body = s.ok_json("PATCH", "/api/v1/services/order", misspelt).await;
    assert_eq!(body["served"], true, "{body}");
    assert_eq!(warned(&body).len(), 1, "{body}");
    let body =
        s.ok_json("PUT", "/api/v1/services/pay", json!({"config": {"agent.span_limit_per_segment": "400"}})).await;
    assert_eq!(body["served"], true, "{body}");
    assert_eq!(body["warnings"], json!([]), "only the edited service's warnings: {body}");
}

#[tokio::test]
async fn a_key_given_twice_in_a_json_body_is_a_400_naming_it() {
    // N13: the last of two `config` keys (or authors) was taken without a word.
    let s = setup();
    for (path, body, key) in [
        (
            "/api/v1/services/order",
            r#"{"config": {"agent.sample_n_per_3_secs": "1", "agent.sample_n_per_3_secs": "2"}}"#,
            "agent.sample_n_per_3_secs",
        ),
        ("/api/v1/services/order", r#"{"config": {"k": "1"}, "author": "ann", "author": "bob"}"#, "author"),
        (
            "/api/v1/configurations",
            r#"{"document": "configurations: {}", "document": "configurations:\n  a: {k: v}\n"}"#,
            "document",
        ),
    ] {
        let request = Request::put(path).header("content-type", "application/json").body(Body::from(body)).unwrap();
        let (status, answer) = call(&s.router, request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(&format!("`{key}`")) && error.contains("more than once"), "{error}");
    }
    assert_eq!(s.served.snapshot().version, 1, "nothing was written");
}

#[tokio::test]
async fn a_bad_percent_escape_in_a_service_name_is_a_400() {
    // N13: `PUT /api/v1/services/%ZZ` created a service named `%ZZ`.
    let s = setup();
    for (method, path) in
        [("PUT", "/api/v1/services/%ZZ"), ("PATCH", "/api/v1/services/a%2"), ("GET", "/api/v1/services/%zz%41")]
    {
        let (status, answer) = call(&s.router, json_request(method, path, &json!({"config": {"k": "v"}}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("percent"), "{answer}");
    }
    assert!(s.served.snapshot().table.get("%ZZ").is_none());
    // A `%` written as `%25` is a name like any other.
    s.ok_json("PUT", "/api/v1/services/100%25-sure", json!({"config": {"agent.sample_rate": "1"}})).await;
    assert!(s.served.snapshot().table.get("100%-sure").is_some());
}

#[tokio::test]
async fn a_misspelled_dry_run_is_a_400_naming_the_parameter_and_writes_nothing() {
    // F14: `?DRY_RUN=true` used to be ignored, so the "dry run" was a real write.
    let s = setup();
    let order = s.served.snapshot().answer("order").digest.clone();
    let changed = "configurations:\n  order:\n    agent.sample_n_per_3_secs: 99\n";
    for (query, name) in [
        ("DRY_RUN=true", "DRY_RUN"),
        ("dryrun=true", "dryrun"),
        ("dry-run=1", "dry-run"),
        ("dry_run=true&force=1", "force"),
    ] {
        let whole = yaml_put(&format!("/api/v1/configurations?{query}")).body(Body::from(changed)).unwrap();
        let (status, body) = call(&s.router, whole).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(&format!("`{name}`")), "{query}: the error names the parameter: {body}");
        let one = json_request(
            "PUT",
            &format!("/api/v1/services/order?{query}"),
            &json!({"config": {"agent.sample_n_per_3_secs": "99"}}),
        );
        let (status, body) = call(&s.router, one).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    let (status, body) =
        call(&s.router, yaml_put("/api/v1/configurations?DRY_RUN=true").body(Body::from(changed)).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("did you mean `dry_run`?"), "{body}");
    let twice = yaml_put("/api/v1/configurations?dry_run=true&dry_run=false").body(Body::from(changed)).unwrap();
    assert_eq!(call(&s.router, twice).await.0, StatusCode::BAD_REQUEST, "a parameter given twice");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(s.served.snapshot().version, 1, "nothing was served");
    assert_eq!(s.served.snapshot().answer("order").digest, order);
    assert_eq!(s.releases.list().len(), 1, "nothing was recorded");
    let (status, body) =
        call(&s.router, yaml_put("/api/v1/configurations?dry_run=true&wait=0").body(Body::from(changed)).unwrap())
            .await;
    assert_eq!(
        (status, body["dry_run"].as_bool()),
        (StatusCode::OK, Some(true)),
        "the right spelling still works: {body}"
    );
}

#[tokio::test]
async fn per_service_writes_keep_other_services_digests() {
    let s = setup();
    let pay = s.digest("pay");
    let config = json!({"agent.sample_n_per_3_secs": "5", "agent.ignore_suffix": ".a, \"b\"\n"});
    s.ok_json("PUT", "/api/v1/services/new%7Cns%7C", json!({"config": config, "author": "carl", "message": "new"}))
        .await;
    let snapshot = s.served.snapshot();
    assert_eq!(snapshot.answer("pay").digest, pay, "untouched services keep their digest");
    let added = snapshot.table.get("new|ns|").unwrap();
    assert_eq!(
        added.entries(),
        [("agent.sample_n_per_3_secs".into(), "5".into()), ("agent.ignore_suffix".into(), ".a, \"b\"\n".into())]
    );
    assert_eq!(s.releases.latest().unwrap().meta.author.as_deref(), Some("carl"));

    s.ok_json("DELETE", "/api/v1/services/pay", json!({"message": "pay is retired"})).await;
    assert!(s.served.snapshot().table.get("pay").is_none());
    assert_eq!(s.releases.latest().unwrap().meta.message.as_deref(), Some("pay is retired"));
    let (status, _) = call(&s.router, Request::delete("/api/v1/services/pay").body(Body::empty()).unwrap()).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn per_service_writes_work_next_to_and_with_keys_over_1024_characters() {
    let s = setup();
    let long = "k".repeat(1100);
    // The API takes names up to 512 bytes, but a document may hold longer ones.
    let long_name = "n".repeat(1100);
    let document = format!("{V1}  svc-long:\n    ? \"{long}\"\n    : v\n  ? {long_name}\n  : {{k: v}}\n");
    let body = s.ok(yaml_put("/api/v1/configurations").body(Body::from(document)).unwrap()).await;
    assert_eq!(body["served"], true);
    let long_service = s.digest("svc-long");
    let long_named = s.digest(&long_name);

    // A write of another service renders the whole document again, the long key included.
    s.ok_json("PUT", "/api/v1/services/order", json!({"config": {"agent.sample_n_per_3_secs": "20"}})).await;
    assert_eq!(s.digest("svc-long"), long_service, "the long key reads back to the same digest");
    assert_eq!(s.digest(&long_name), long_named, "so does the long name");
    assert_eq!(s.served.snapshot().table.get("order").unwrap().get("agent.sample_n_per_3_secs"), Some("20"));

    s.ok_json("DELETE", "/api/v1/services/pay", json!({})).await;
    assert!(s.served.snapshot().table.get("pay").is_none());
    assert_eq!(s.digest("svc-long"), long_service);

    // A service whose own key is long.
    let config = json!({ long.clone(): "w", "short": "x" });
    s.ok_json("PUT", "/api/v1/services/added", json!({ "config": config })).await;
    let snapshot = s.served.snapshot();
    let added = snapshot.table.get("added").unwrap();
    assert_eq!(added.entries(), [(long.clone(), "w".into()), ("short".into(), "x".into())]);
    assert_eq!(snapshot.answer("svc-long").digest, long_service);
    assert_eq!(snapshot.answer(&long_name).digest, long_named);

    let before = s.digests();
    let (status, body) = call(&s.router, get("/api/v1/configurations")).await;
    assert_eq!(status, 200);
    let again = skyconf_core::read(body["document"].as_str().unwrap()).unwrap();
    let reread: Vec<_> = again.services().map(|s| (s.name().to_owned(), s.digest().clone())).collect();
    assert_eq!(reread, before, "the written document reads back to the served digests");
}

#[tokio::test]
async fn a_patch_changes_the_named_keys_and_keeps_the_others_in_their_order() {
    let s = setup();
    let pay = s.digest("pay");
    let patch = json!({"config": {"agent.sample_n_per_3_secs": "50", "agent.ignore_suffix": null, "new.key": "x"}});
    let body = s.ok_json("PATCH", "/api/v1/services/order", patch).await;
    assert_eq!(body["served"], true, "{body}");
    let snapshot = s.served.snapshot();
    let order = snapshot.table.get("order").unwrap();
    let expected = [("agent.sample_n_per_3_secs", "50"), ("new.key", "x")];
    assert_eq!(order.entries(), expected.map(|(k, v)| (k.to_owned(), v.to_owned())));
    assert_eq!(s.digest("pay"), pay, "other services are untouched");

    // A patch of a service that is not configured creates it; a value must be a string or null.
    s.ok_json("PATCH", "/api/v1/services/fresh", json!({"config": {"k": "v"}})).await;
    assert_eq!(s.served.snapshot().table.get("fresh").unwrap().get("k"), Some("v"));
    let (status, body) =
        call(&s.router, json_request("PATCH", "/api/v1/services/order", &json!({"config": {"k": 5}}))).await;
    assert_eq!(status, 400, "{body}");
}

/// A write whose client goes away while the store is stalled (etcd frozen) still holds the write
/// lock until the store answers, so the next write reaches the store after it and is the one
/// served. The soak found the opposite: the abandoned write landed last and overwrote the next,
/// acknowledged one.
#[tokio::test(start_paused = true)]
async fn a_write_whose_client_went_away_still_holds_the_lock_until_the_store_answers() {
    let s = setup();
    let v2 = "configurations:\n  order: {agent.sample_n_per_3_secs: 2}\n  pay: {k: v}\n";
    let v3 = "configurations:\n  order: {agent.sample_n_per_3_secs: 3}\n  pay: {k: v}\n";
    s.store.gate.forget_permits(Semaphore::MAX_PERMITS);
    let router = s.router.clone();
    let abandoned =
        tokio::spawn(
            async move { call(&router, yaml_put("/api/v1/configurations").body(Body::from(v2)).unwrap()).await },
        );
    skyconf_testkit::server::eventually("the first write is in the store", || {
        s.store.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    abandoned.abort();
    let router = s.router.clone();
    let next =
        tokio::spawn(
            async move { call(&router, yaml_put("/api/v1/configurations").body(Body::from(v3)).unwrap()).await },
        );
    // Paused time moves on only when every task waits: the next write has gone as far as it can.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(s.store.most_in_flight.load(Ordering::SeqCst), 1, "two writes were in the store at once");
    s.store.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    let (status, body) = next.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.served.snapshot().table.get("order").unwrap().get("agent.sample_n_per_3_secs"), Some("3"));
    assert_eq!(s.store.most_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn every_service_a_document_holds_is_readable_editable_and_deletable_per_service() {
    let s = setup();
    // Names the API would refuse as new ones: control characters, and longer than 512 bytes.
    let long_name = "n".repeat(1100);
    let document = format!("{V1}  \"svc\\abell\": {{k: v}}\n  \"svc\\nnl\": {{k: v}}\n  ? {long_name}\n  : {{k: v}}\n");
    s.ok(yaml_put("/api/v1/configurations").body(Body::from(document)).unwrap()).await;
    for (name, path) in
        [("svc\u{7}bell", "svc%07bell"), ("svc\nnl", "svc%0Anl"), (long_name.as_str(), long_name.as_str())]
    {
        let uri = format!("/api/v1/services/{path}");
        let (status, body) = call(&s.router, get(&uri)).await;
        assert_eq!(status, 200, "{name:?}: {body}");
        assert_eq!(body["config"], json!({"k": "v"}));
        s.ok_json("PUT", &uri, json!({"config": {"k": "w"}})).await;
        assert_eq!(s.served.snapshot().table.get(name).unwrap().get("k"), Some("w"), "{name:?}");
        s.ok_json("DELETE", &uri, json!({})).await;
        assert!(s.served.snapshot().table.get(name).is_none(), "{name:?}");
    }
    // A new name is still checked by a write; a read of it finds nothing.
    let (status, _) = call(&s.router, json_request("PUT", "/api/v1/services/a%0Ab", &json!({"config": {}}))).await;
    assert_eq!(status, 400);
    let (status, _) = call(&s.router, get("/api/v1/services/a%0Ab")).await;
    assert_eq!(status, 404);
    // Found by the contract test: a DELETE of it was a 400 (a bad new name), though there is
    // nothing to delete and nothing it could create: 404, as for any name not configured.
    let (status, body) = call(&s.router, json_request("DELETE", "/api/v1/services/a%0Ab", &json!({}))).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_rollback_restores_the_exact_document_and_digests() {
    let s = setup();
    let before = s.digests();
    let v2 = "configurations:\n  order: {agent.sample_n_per_3_secs: 99}\n";
    assert_eq!(call(&s.router, put_document(v2)).await.0, 200);
    let body = s
        .ok(Request::post("/api/v1/releases/1/rollback")
            .header("x-skyconf-author", "dana")
            .body(Body::empty())
            .unwrap())
        .await;
    assert_eq!(body["release"]["rollback_of"], 1);
    assert_eq!(s.digests(), before);
    let latest = s.releases.latest().unwrap();
    assert_eq!((latest.meta.id, latest.meta.author.as_deref(), latest.meta.rollback_of), (3, Some("dana"), Some(1)));
    assert_eq!(latest.meta.message.as_deref(), Some("Roll back to release 1"));
    assert_eq!(s.releases.document(3).unwrap(), Some(Some(V1.to_owned())), "the exact text, comments too");

    assert_eq!(
        call(&s.router, Request::post("/api/v1/releases/77/rollback").body(Body::empty()).unwrap()).await.0,
        404
    );
    assert_eq!(call(&s.router, get("/api/v1/releases/77")).await.0, 404);
    assert_eq!(call(&s.router, get("/api/v1/releases/x")).await.0, 400);
}

#[tokio::test]
async fn if_match_guards_against_lost_updates() {
    let s = setup();
    let request = |release: &str| {
        Request::put("/api/v1/services/order")
            .header("content-type", "application/json")
            .header("if-match", release)
            .body(Body::from(json!({"config": {"k": "v"}}).to_string()))
            .unwrap()
    };
    let (status, body) = call(&s.router, request("\"7\"")).await;
    assert_eq!(status, 409, "{body}");
    let response = s.router.clone().oneshot(get("/api/v1/services/order")).await.unwrap();
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, "\"1\"");
    assert_eq!(call(&s.router, request(&etag)).await.0, 200);
}

/// F3: a release is recorded just before its table is installed. In that window a GET must name
/// the release whose content it returns, and no If-Match may pass: neither the served release
/// (no longer the newest) nor the newest (whose content nobody could have read).
#[tokio::test]
async fn the_etag_names_the_content_returned_even_while_a_release_is_being_installed() {
    let s = setup();
    let v2 = "configurations:\n  order:\n    k: from-the-store\n";
    let (current, next) = (s.served.snapshot(), skyconf_core::read(v2).unwrap());
    s.releases.record(&current.table, &next, Some(v2), current.version + 1, None, "memory");
    assert_eq!(s.releases.latest().unwrap().meta.id, 2, "recorded, not yet installed");

    let response = s.router.clone().oneshot(get("/api/v1/services/order")).await.unwrap();
    assert_eq!(response.headers()["etag"], "\"1\"", "the served content is release 1's");
    let response = s.router.clone().oneshot(get("/api/v1/configurations")).await.unwrap();
    assert_eq!(response.headers()["etag"], "\"1\"");
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!((body["release"].as_u64(), body["document"].as_str()), (Some(1), Some(V1)));

    for release in ["\"1\"", "\"2\""] {
        let request = Request::put("/api/v1/services/order")
            .header("content-type", "application/json")
            .header("if-match", release)
            .body(Body::from(json!({"config": {"k": "mine"}}).to_string()))
            .unwrap();
        let (status, body) = call(&s.router, request).await;
        assert_eq!(status, 409, "If-Match {release}: {body}");
    }
    assert_eq!(s.served.snapshot().version, current.version, "nothing was written");
}

/// F7: the list holds summaries (counts and the first changed services, no digests, no key-level
/// changes), in pages; the full release is one GET away.
#[tokio::test]
async fn releases_are_listed_as_bounded_summaries_in_pages() {
    let s = setup();
    let many: String = (0..100).map(|i| format!("  s{i}: {{k: v}}\n")).collect();
    let big = format!("configurations:\n{many}");
    let request = yaml_put("/api/v1/configurations").body(Body::from(big)).unwrap();
    s.ok(request).await;
    for i in 0..4 {
        s.ok_json("PUT", "/api/v1/services/order", json!({"config": {"k": format!("{i}")}})).await;
    }

    let list = s.ok(get("/api/v1/releases?limit=2")).await;
    assert_eq!((list["total"].as_u64(), list["limit"].as_u64()), (Some(6), Some(2)));
    let ids: Vec<u64> = list["releases"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [6, 5]);
    assert_eq!(list["next_before"], 5);
    let list = s.ok(get("/api/v1/releases?limit=2&before=5")).await;
    let ids: Vec<u64> = list["releases"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [4, 3]);
    let list = s.ok(get("/api/v1/releases?before=3")).await;
    assert_eq!(list["releases"].as_array().unwrap().len(), 2);
    assert_eq!(list["next_before"], Value::Null, "the last page");

    let big = &list["releases"][0];
    assert_eq!(big["id"], 2);
    assert_eq!((big["services"].as_u64(), big["changed"].as_u64()), (Some(100), Some(102)), "100 added, 2 removed");
    let changes = big["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 20, "only the first changed services");
    assert_eq!(changes[0], json!({"service": "s0", "change": "added"}), "no digests, no keys");
    assert!(big.get("digests").is_none());

    let full = s.ok(get("/api/v1/releases/2")).await;
    assert_eq!(full["changes"].as_array().unwrap().len(), 102, "the full release has every change");
    assert_eq!(full["changes"][0]["keys"][0]["key"], "k");
    assert_eq!(full["digests"].as_object().unwrap().len(), 100);

    for bad in ["limit=0", "limit=501", "limit=x", "lmit=3", "before=-1"] {
        let (status, body) = call(&s.router, get(&format!("/api/v1/releases?{bad}"))).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

/// F3: a per-service write made while a store change is recorded but not yet installed builds on
/// that change, not on the table before it.
#[tokio::test]
async fn a_per_service_write_keeps_a_change_that_is_being_installed() {
    let s = setup();
    let v2 = format!("{V1}  extra:\n    k: from-the-store\n");
    let (current, next) = (s.served.snapshot(), skyconf_core::read(&v2).unwrap());
    s.releases.record(&current.table, &next, Some(&v2), current.version + 1, None, "memory");
    let served = Arc::clone(&s.served);
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        served.install(next);
    });
    s.ok_json("PUT", "/api/v1/services/pay", json!({"config": {"k": "mine"}})).await;
    let table = s.served.snapshot().table.clone();
    assert_eq!(table.get("extra").and_then(|c| c.get("k")), Some("from-the-store"), "the store's change survived");
    assert_eq!(table.get("pay").and_then(|c| c.get("k")), Some("mine"));
}

/// F3 end to end: clients each run the textbook loop (GET the document and its ETag, add their
/// own service, PUT with If-Match, retry on 409) at once; every acknowledged write must survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_conditional_writes_lose_nothing() {
    let s = setup();
    let clients: Vec<_> = (0..16)
        .map(|i| {
            let router = s.router.clone();
            tokio::spawn(async move {
                for _ in 0..500 {
                    let response = router.clone().oneshot(get("/api/v1/configurations")).await.unwrap();
                    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
                    let bytes = response.into_body().collect().await.unwrap().to_bytes();
                    let body: Value = serde_json::from_slice(&bytes).unwrap();
                    let document = format!("{}  new-{i}: {{k: v}}\n", body["document"].as_str().unwrap());
                    let request =
                        yaml_put("/api/v1/configurations").header("if-match", etag).body(Body::from(document));
                    match call(&router, request.unwrap()).await {
                        (StatusCode::OK, body) => {
                            assert_eq!(body["served"], true, "{body}");
                            return;
                        }
                        (StatusCode::CONFLICT, _) => tokio::task::yield_now().await,
                        (status, body) => panic!("{status}: {body}"),
                    }
                }
                panic!("client {i} never got its write in");
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let table = s.served.snapshot().table.clone();
    let missing: Vec<_> = (0..16).filter(|i| table.get(&format!("new-{i}")).is_none()).collect();
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
}

#[tokio::test]
async fn store_failures_map_to_503_and_409() {
    let s = setup();
    let v2 = "configurations:\n  order: {k: v}\n";
    s.mode.store(1, Ordering::SeqCst);
    let (status, body) = call(&s.router, put_document(v2)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("down"));
    s.mode.store(2, Ordering::SeqCst);
    assert_eq!(call(&s.router, put_document(v2)).await.0, 409);
    assert_eq!(s.releases.list().len(), 1);
    assert_eq!(s.served.snapshot().version, 1);
}

#[tokio::test]
async fn a_store_write_that_finds_the_key_changed_is_a_409_to_read_again() {
    let s = setup();
    let v2 = "configurations:\n  order: {k: v}\n";
    s.mode.store(3, Ordering::SeqCst);
    let (status, body) = call(&s.router, put_document(v2)).await;
    assert_eq!(status, 409, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.starts_with("the store changed under this write; read it again"), "{error}");
    assert!(error.contains("it is now at 9"), "the store's own words are kept: {error}");
    let patch = json_request("PATCH", "/api/v1/services/order", &json!({"config": {"agent.ignore_suffix": ".png"}}));
    assert_eq!(call(&s.router, patch).await.0, 409, "a service write too");
    assert_eq!(s.releases.list().len(), 1, "no release for a write that did not happen");
    assert_eq!(s.served.snapshot().version, 1);
    s.mode.store(0, Ordering::SeqCst);
    let body = s.ok(put_document(v2)).await;
    assert_eq!(body["written"], true, "once read again, the write goes through: {body}");
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused() {
    let s = setup();
    let options = skyconf_server::AdminOptions { max_document_bytes: 1024, ..Default::default() };
    let store = Arc::new(StoreView::new("memory".into(), StoreContent::default(), true, false));
    let router = Admin::new(Arc::clone(&s.served), store).with_options(options).router();
    let big = format!("configurations:\n  a: {{k: '{}'}}\n", "x".repeat(2000));
    let (status, body) = call(&router, put_document(big)).await;
    assert_eq!(status, 413, "{body}");
}

#[tokio::test]
async fn a_write_without_a_store_is_a_conflict() {
    let s = setup();
    let store = Arc::new(StoreView::new("memory".into(), StoreContent::default(), true, false));
    let router = Admin::new(Arc::clone(&s.served), store).router();
    let v2 = "configurations:\n  order: {k: v}\n";
    assert_eq!(call(&router, put_document(v2)).await.0, 409);
}

#[tokio::test]
async fn read_and_write_routes_are_separate_groups() {
    let s = setup();
    let store = Arc::new(StoreView::new("memory".into(), StoreContent::default(), true, false));
    let admin = Admin::new(Arc::clone(&s.served), store);
    let reads = admin.read_routes();
    let (status, _) = call(&reads, put_document(V1)).await;
    assert_eq!(status, 405, "the read group has no writes");
    let writes = admin.write_routes();
    assert_eq!(call(&writes, get("/api/v1/services")).await.0, 404, "the write group has no reads");
}

#[tokio::test]
async fn the_page_and_the_status_are_served() {
    let s = setup();
    let response = s.router.clone().oneshot(get("/")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(html.contains("id=\"services\"") && html.contains("/api/v1/releases"));

    let bad = "configurations: [1]\n";
    s.served.record_rejection(skyconf_server::served::Rejection::new("memory", "line 1, column 17: bad", Some(bad)));
    let (status, body) = call(&s.router, get("/api/v1/status")).await;
    assert_eq!(status, 200);
    assert_eq!(body["release"], 1);
    assert_eq!(body["writable"], true);
    assert_eq!(body["last_rejection"]["text"], bad);
    assert_eq!(body["fleet"]["stuck_after_polls"], 3);
}

/// F19: media types are case-insensitive, so `APPLICATION/JSON` is read as JSON, not as YAML.
#[tokio::test]
async fn a_json_content_type_in_any_case_is_json() {
    let s = setup();
    let v2 = "configurations:\n  order:\n    agent.sample_n_per_3_secs: 20\n";
    let request = Request::put("/api/v1/configurations")
        .header("content-type", "APPLICATION/JSON; Charset=UTF-8")
        .body(Body::from(json!({"document": v2, "author": "ann"}).to_string()))
        .unwrap();
    let body = s.ok(request).await;
    assert_eq!(body["served"], true);
    assert_eq!(body["release"]["author"], "ann");
}
