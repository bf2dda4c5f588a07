//! The connection against an independent client (the `h2` crate) over real sockets: unary and
//! streaming calls, trailers, flow control both ways, graceful shutdown.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{h2_client, serve};
use http::{HeaderMap, Request};

/// Reads `body` to its end, giving each chunk's bytes back to the windows as it is read.
async fn read_body(body: &mut h2::RecvStream) -> Vec<u8> {
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        got.extend_from_slice(&chunk);
    }
    got
}

#[tokio::test]
async fn a_unary_call_with_a_body_and_trailers() {
    let server = serve(skyconf_h2::Settings::default()).await;
    let mut client = h2_client(server.addr).await;
    let request = Request::post("http://test/echo").body(()).unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    send.send_data(Bytes::from_static(b"hello"), false).unwrap();
    let mut trailers = HeaderMap::new();
    trailers.insert("x-in", "t".parse().unwrap());
    send.send_trailers(trailers).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    assert_eq!(read_body(&mut body).await, b"hello");
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["x-n"], "5");
    assert_eq!(trailers["x-in"], "t");
}

#[tokio::test]
async fn a_trailers_only_answer_is_one_headers_frame() {
    let server = serve(skyconf_h2::Settings::default()).await;
    let mut client = h2_client(server.addr).await;
    let (response, _) = client.send_request(Request::post("http://test/status").body(()).unwrap(), true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "5");
    assert!(response.body().is_end_stream());
}

#[tokio::test]
async fn large_bodies_flow_within_the_windows_both_ways() {
    let server =
        serve(skyconf_h2::Settings { initial_stream_window: 65_535, connection_window: 65_535, ..Default::default() })
            .await;
    let mut client = h2_client(server.addr).await;
    // 1 MiB up: more than the server's windows, credited back as the call takes it.
    let (response, mut send) = client.send_request(Request::post("http://test/echo").body(()).unwrap(), false).unwrap();
    let payload = Bytes::from(vec![7u8; 1 << 20]);
    send.reserve_capacity(payload.len());
    send.send_data(payload.clone(), true).unwrap();
    let response = response.await.unwrap();
    let mut body = response.into_body();
    assert_eq!(read_body(&mut body).await.len(), 1 << 20);
    assert_eq!(body.trailers().await.unwrap().unwrap()["x-n"], (1 << 20).to_string().as_str());
    // 3 MiB down: more than the client's 64 KiB windows.
    let (response, _) = client.send_request(Request::get("http://test/big/3145728").body(()).unwrap(), true).unwrap();
    let mut body = response.await.unwrap().into_body();
    assert_eq!(read_body(&mut body).await.len(), 3 << 20);
}

#[tokio::test]
async fn many_calls_at_once_on_one_connection() {
    let server = serve(skyconf_h2::Settings::default()).await;
    let client = h2_client(server.addr).await;
    let calls = (0..50).map(|i| {
        let mut client = client.clone();
        async move {
            let client = std::future::poll_fn(|cx| client.poll_ready(cx)).await.map(|()| client);
            let mut client = client.unwrap();
            let (response, mut send) =
                client.send_request(Request::post("http://test/echo").body(()).unwrap(), false).unwrap();
            send.send_data(Bytes::from(format!("call {i}")), true).unwrap();
            let mut body = response.await.unwrap().into_body();
            let chunk = body.data().await.unwrap().unwrap();
            assert_eq!(chunk, format!("call {i}").as_bytes());
        }
    });
    futures_util::future::join_all(calls).await;
}

#[tokio::test]
async fn a_graceful_shutdown_lets_open_calls_finish_and_refuses_new_ones() {
    let server = serve(skyconf_h2::Settings::default()).await;
    let mut client = h2_client(server.addr).await;
    let (response, mut send) = client.send_request(Request::post("http://test/echo").body(()).unwrap(), false).unwrap();
    send.send_data(Bytes::from_static(b"first"), false).unwrap();
    // The call is open (its body not ended) when the shutdown begins.
    common::wait_for(|| server.open_calls() == 1).await;
    server.shutdown();
    send.send_data(Bytes::from_static(b" part"), true).unwrap();
    let mut body = response.await.unwrap().into_body();
    assert_eq!(body.data().await.unwrap().unwrap(), "first part");
    tokio::time::timeout(Duration::from_secs(10), server.ended()).await.expect("the connection closes").ok();
}
