//! The plain HTTP transport over real sockets, with reqwest as the client.

use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message as _;
use skyconf_opamp::backend::ApplyStatus;
use skyconf_opamp::codec;
use skyconf_opamp::memory::Event;
use skyconf_opamp::wire::{self, RemoteConfigStatuses};
use skyconf_opamp::{Disconnect, RemoteConfig, Unavailable};

use crate::util::{Server, encode, full, heartbeat, offered, with_status};

const UID: [u8; 16] = [0x11; 16];

fn client() -> reqwest::Client {
    // No automatic decompression: the test reads Content-Encoding itself.
    reqwest::Client::builder().no_gzip().build().unwrap()
}

async fn post(client: &reqwest::Client, server: &Server, msg: &wire::AgentToServer) -> reqwest::Response {
    client.post(server.url()).header("content-type", codec::CONTENT_TYPE).body(encode(msg)).send().await.unwrap()
}

/// Posts `msg` asking to be held up to `hold` seconds (the `OpAMP-Hold` header) when nothing changes.
async fn post_holding(client: &reqwest::Client, url: &str, hold: &str, msg: &wire::AgentToServer) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", codec::CONTENT_TYPE)
        .header("opamp-hold", hold)
        .body(encode(msg))
        .send()
        .await
        .unwrap()
}

async fn decode(response: reqwest::Response) -> wire::ServerToAgent {
    assert_eq!(response.headers()["content-type"], codec::CONTENT_TYPE);
    let gzipped = response.headers().get("content-encoding").is_some_and(|v| v == "gzip");
    let body = response.bytes().await.unwrap();
    let body = if gzipped { Bytes::from(codec::gunzip(&body, 1 << 20).unwrap()) } else { body };
    wire::ServerToAgent::decode(body).unwrap()
}

#[tokio::test]
async fn a_poll_gets_the_configuration_then_only_its_changes() {
    let server = Server::start().await;
    let v1 = RemoteConfig::single("app.yaml", "text/yaml", "level: info\n");
    server.backend.set_default(Some(v1.clone()));
    let http = client();

    let first = decode(post(&http, &server, &full(UID, 1, "checkout")).await).await;
    assert_eq!(first.instance_uid.as_ref(), &UID);
    assert_eq!(offered(&first).as_ref(), Some(v1.hash().as_bytes()));
    let files = first.remote_config.unwrap().config.unwrap().config_map;
    assert_eq!(&files["app.yaml"].body[..], b"level: info\n");
    assert_eq!(files["app.yaml"].content_type, "text/yaml");

    let applied = with_status(heartbeat(UID, 2), v1.hash().as_bytes(), RemoteConfigStatuses::Applied);
    assert_eq!(offered(&decode(post(&http, &server, &applied).await).await), None);
    assert_eq!(offered(&decode(post(&http, &server, &heartbeat(UID, 3)).await).await), None, "unchanged: not resent");

    let v2 = RemoteConfig::single("app.yaml", "text/yaml", "level: debug\n");
    server.backend.set_default(Some(v2.clone()));
    assert_eq!(
        offered(&decode(post(&http, &server, &heartbeat(UID, 4)).await).await).as_ref(),
        Some(v2.hash().as_bytes())
    );
    server.backend.wait_for_status(Duration::from_secs(5), &v1, ApplyStatus::Applied).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn bodies_are_gzip_both_ways() {
    let server = Server::start().await;
    let big = "x: 1\n".repeat(200);
    let v1 = RemoteConfig::single("big.yaml", "text/yaml", big.clone());
    server.backend.set_default(Some(v1.clone()));
    let response = client()
        .post(server.url())
        .header("content-type", codec::CONTENT_TYPE)
        .header("content-encoding", "gzip")
        .header("accept-encoding", "gzip")
        .body(codec::gzip(&encode(&full(UID, 1, "checkout"))))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-encoding"], "gzip");
    let answer = decode(response).await;
    assert_eq!(&answer.remote_config.unwrap().config.unwrap().config_map["big.yaml"].body[..], big.as_bytes());

    // Without Accept-Encoding the answer is plain.
    let plain = post(&client(), &server, &heartbeat([2; 16], 1)).await;
    assert!(plain.headers().get("content-encoding").is_none());
    server.stop().await;
}

#[tokio::test]
async fn refusals_say_why_with_the_right_status() {
    let server = Server::with(|c| c.limits.max_message_bytes = 64 << 10).await;
    let http = client();
    let url = server.url();

    let wrong_type = http.post(&url).header("content-type", "application/json").body("{}").send().await.unwrap();
    assert_eq!(wrong_type.status(), 415);
    let wrong_encoding = http
        .post(&url)
        .header("content-type", codec::CONTENT_TYPE)
        .header("content-encoding", "br")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_encoding.status(), 415);

    let too_large =
        http.post(&url).header("content-type", codec::CONTENT_TYPE).body(vec![0u8; 70_000]).send().await.unwrap();
    assert_eq!(too_large.status(), 413);
    // A small gzip body that expands past the limit.
    let bomb = codec::gzip(&vec![0u8; 8 << 20]);
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    let expanding = http
        .post(&url)
        .header("content-type", codec::CONTENT_TYPE)
        .header("content-encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(expanding.status(), 413);

    let garbage =
        http.post(&url).header("content-type", codec::CONTENT_TYPE).body(vec![0xff, 0xff, 0xff]).send().await.unwrap();
    assert_eq!(garbage.status(), 400);
    let error = decode(garbage).await.error_response.unwrap();
    assert_eq!(error.r#type, wire::ServerErrorResponseType::BadRequest as i32);

    // The OpAMP-Instance-UID header must name the body's agent.
    let mismatch = http
        .post(&url)
        .header("content-type", codec::CONTENT_TYPE)
        .header("opamp-instance-uid", "0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b")
        .body(encode(&full(UID, 1, "checkout")))
        .send()
        .await
        .unwrap();
    assert_eq!(mismatch.status(), 200);
    assert_eq!(decode(mismatch).await.error_response.unwrap().r#type, wire::ServerErrorResponseType::BadRequest as i32);
    let matching = http
        .post(&url)
        .header("content-type", codec::CONTENT_TYPE)
        .header("opamp-instance-uid", uuid_text(UID))
        .body(encode(&full(UID, 1, "checkout")))
        .send()
        .await
        .unwrap();
    assert!(decode(matching).await.error_response.is_none());

    let get = http.get(&url).send().await.unwrap();
    assert_eq!(get.status(), 400, "a GET that is not a WebSocket upgrade");
    assert_eq!(server.opamp.stats().bad_requests, 6);
    server.stop().await;
}

fn uuid_text(uid: [u8; 16]) -> String {
    skyconf_opamp::InstanceUid::from_bytes(uid).to_string()
}

#[tokio::test]
async fn throttling_answers_429_or_503_with_retry_after() {
    let server = Server::with(|c| {
        c.limits.max_inflight_requests = 1;
        c.limits.max_sessions = 1;
    })
    .await;
    let http = client();

    // A body that never finishes (its Content-Length is never reached) holds the only slot.
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head =
        "POST /v1/opamp HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-length: 100\r\n\r\n\x0a";
    tokio::io::AsyncWriteExt::write_all(&mut slow, head.as_bytes()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let throttled = loop {
        let response = post(&http, &server, &full(UID, 1, "a")).await;
        if response.status() == 429 {
            break response;
        }
        assert!(Instant::now() < deadline, "the slow body never took the slot");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(throttled.headers()["retry-after"], "30");
    drop(slow);

    // The session limit: the first agent is served, a second one gets 503.
    let _ = post(&http, &server, &full(UID, 1, "a")).await;
    let refused = post(&http, &server, &full([9; 16], 1, "b")).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "30");
    let error = decode(refused).await.error_response.unwrap();
    assert_eq!(error.r#type, wire::ServerErrorResponseType::Unavailable as i32);

    // An unavailable backend: 503 with its retry interval.
    server
        .backend
        .set_unavailable(Some(Unavailable { reason: "warming up".into(), retry_after: Some(Duration::from_secs(45)) }));
    let unavailable = post(&http, &server, &heartbeat(UID, 2)).await;
    assert_eq!(unavailable.status(), 503);
    assert_eq!(unavailable.headers()["retry-after"], "45");
    assert!(server.opamp.stats().throttled >= 3);
    server.stop().await;
}

#[tokio::test]
async fn a_held_poll_is_answered_when_the_configuration_changes() {
    let server = Server::start().await;
    let v1 = RemoteConfig::single("a.json", "application/json", "{}");
    server.backend.set_default(Some(v1.clone()));
    let http = client();
    let first = decode(post(&http, &server, &full(UID, 1, "checkout")).await).await;
    assert!(first.remote_config.is_some());
    let _ = post(&http, &server, &with_status(heartbeat(UID, 2), v1.hash().as_bytes(), RemoteConfigStatuses::Applied))
        .await;

    // Without the header: answered at once although holds are on.
    let started = Instant::now();
    let plain = post(&http, &server, &heartbeat(UID, 3)).await;
    assert!(plain.headers().get("opamp-hold").is_none());
    assert!(started.elapsed() < Duration::from_secs(1));

    // With it: held until the change.
    let held = tokio::spawn({
        let http = http.clone();
        let url = server.url();
        async move {
            let started = Instant::now();
            let response = post_holding(&http, &url, "20", &heartbeat(UID, 4)).await;
            (response, started)
        }
    });
    server.wait_stats(|s| s.held_polls == 1).await;
    let changed_at = Instant::now();
    let v2 = RemoteConfig::single("a.json", "application/json", r#"{"debug":true}"#);
    server.backend.set_default(Some(v2.clone()));
    let (response, started) = held.await.unwrap();
    let latency = changed_at.elapsed();
    assert_eq!(response.headers()["opamp-hold"], "20", "the grant");
    assert_eq!(offered(&decode(response).await).as_ref(), Some(v2.hash().as_bytes()));
    assert!(latency < Duration::from_secs(2), "answered on the change, not at the end of the hold: {latency:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(server.opamp.stats().held_polls, 0);
    assert_eq!(server.opamp.stats().pushes, 1);
    server.stop().await;
}

#[tokio::test]
async fn a_hold_ends_plain_at_its_end_and_at_shutdown() {
    let server = Server::with(|c| c.max_hold = Some(Duration::from_secs(1))).await;
    let http = client();
    let _ = post(&http, &server, &full(UID, 1, "checkout")).await;

    let started = Instant::now();
    let response = post_holding(&http, &server.url(), "30", &heartbeat(UID, 2)).await;
    assert_eq!(response.headers()["opamp-hold"], "1", "granted within the server's maximum");
    let answer = decode(response).await;
    assert!(answer.remote_config.is_none() && answer.error_response.is_none());
    let held_for = started.elapsed();
    assert!(held_for >= Duration::from_millis(900) && held_for < Duration::from_secs(5), "{held_for:?}");

    // A report (not a bare heartbeat) is never held.
    let started = Instant::now();
    let report = with_status(heartbeat(UID, 3), &Bytes::from_static(b"h"), RemoteConfigStatuses::Applied);
    let _ = post_holding(&http, &server.url(), "30", &report).await;
    assert!(started.elapsed() < Duration::from_millis(900));

    // Shutdown answers a held poll at once.
    let server = Server::with(|c| c.max_hold = Some(Duration::from_secs(60))).await;
    let _ = post(&http, &server, &full(UID, 1, "checkout")).await;
    let held = tokio::spawn({
        let http = http.clone();
        let url = server.url();
        async move { post_holding(&http, &url, "60", &heartbeat(UID, 2)).await }
    });
    server.wait_stats(|s| s.held_polls == 1).await;
    let backend = server.backend.clone();
    let stopping = Instant::now();
    server.stop().await;
    let response = held.await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(stopping.elapsed() < Duration::from_secs(5));
    assert!(backend.events().iter().any(|(_, e)| *e == Event::Disconnected(Disconnect::Shutdown)));
}
