//! The WebSocket transport, with a client written here from the spec's framing (a varint
//! header 0, then the message, in binary WebSocket messages): no OpAMP WebSocket client is
//! installable from the registries this project uses that speaks the current spec (see
//! `docs/opamp.md`).

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use prost::Message as _;
use skyconf_opamp::backend::ApplyStatus;
use skyconf_opamp::memory::Event;
use skyconf_opamp::wire::{self, RemoteConfigStatuses};
use skyconf_opamp::{Disconnect, RemoteConfig, bits, codec};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::util::{Server, full, heartbeat, offered, with_status};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const UID: [u8; 16] = [0x22; 16];

async fn connect(server: &Server) -> Socket {
    let (socket, response) = tokio_tungstenite::connect_async(format!("ws://{}/v1/opamp", server.addr)).await.unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// A connection whose agent `uid` of `service` has sent its first, full message and read the
/// answer: its session is open.
async fn session(server: &Server, uid: [u8; 16], service: &str) -> Socket {
    let mut socket = connect(server).await;
    send(&mut socket, &full(uid, 1, service)).await;
    let _ = receive(&mut socket).await;
    socket
}

/// Sends one message in the spec's framing: header 0, then the message.
async fn send(socket: &mut Socket, msg: &wire::AgentToServer) {
    let mut frame = vec![0u8];
    msg.encode(&mut frame).unwrap();
    socket.send(Message::Binary(frame.into())).await.unwrap();
}

/// The next ServerToAgent, within 10 s.
async fn receive(socket: &mut Socket) -> wire::ServerToAgent {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.expect("a message in time");
        match next.expect("the connection is open").unwrap() {
            Message::Binary(bytes) => {
                assert_eq!(bytes[0], 0, "header 0");
                return wire::ServerToAgent::decode(&bytes[1..]).unwrap();
            }
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Waits for the server to close the connection; its close code, if it sent one.
async fn closed(socket: &mut Socket) -> Option<CloseCode> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await.expect("closed in time") {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return None,
        }
    }
}

#[tokio::test]
async fn the_server_pushes_a_change_and_the_session_ends_with_the_connection() {
    let server = Server::start().await;
    let v1 = RemoteConfig::single("collector.yaml", "text/yaml", "receivers: {}\n");
    server.backend.set_default(Some(v1.clone()));
    let mut socket = connect(&server).await;

    send(&mut socket, &full(UID, 1, "collector")).await;
    let first = receive(&mut socket).await;
    assert_eq!(first.instance_uid.as_ref(), &UID);
    assert_eq!(offered(&first).as_ref(), Some(v1.hash().as_bytes()));
    assert_ne!(first.capabilities & bits::server::ACCEPTS_STATUS, 0);
    send(&mut socket, &with_status(heartbeat(UID, 2), v1.hash().as_bytes(), RemoteConfigStatuses::Applied)).await;
    assert_eq!(offered(&receive(&mut socket).await), None);

    // A change reaches the agent without it asking.
    let v2 = RemoteConfig::single("collector.yaml", "text/yaml", "receivers: {otlp: {}}\n");
    server.backend.set_default(Some(v2.clone()));
    let pushed = receive(&mut socket).await;
    assert_eq!(offered(&pushed).as_ref(), Some(v2.hash().as_bytes()));
    assert_eq!(pushed.instance_uid.as_ref(), &UID);
    send(&mut socket, &with_status(heartbeat(UID, 3), v2.hash().as_bytes(), RemoteConfigStatuses::Failed)).await;
    assert_eq!(offered(&receive(&mut socket).await), None, "FAILED for the current hash: not resent");
    server.backend.wait_for_status(Duration::from_secs(5), &v2, ApplyStatus::Failed).await.unwrap();
    assert_eq!(server.opamp.stats().websockets, 1);

    // The connection drops without AgentDisconnect: the session ends.
    drop(socket);
    server
        .backend
        .wait_for(Duration::from_secs(10), |events| {
            events.iter().any(|(_, e)| *e == Event::Disconnected(Disconnect::Closed))
        })
        .await
        .unwrap();
    server.wait_stats(|s| s.websockets == 0 && s.sessions == 0).await;
    server.stop().await;
}

#[tokio::test]
async fn agent_disconnect_ends_the_session_once() {
    let server = Server::start().await;
    let mut socket = session(&server, UID, "collector").await;
    let mut bye = heartbeat(UID, 2);
    bye.agent_disconnect = Some(wire::AgentDisconnect {});
    send(&mut socket, &bye).await;
    let _ = receive(&mut socket).await;
    socket.close(None).await.unwrap();
    server.wait_stats(|s| s.websockets == 0).await;
    let ends: Vec<_> =
        server.backend.events().into_iter().filter(|(_, e)| matches!(e, Event::Disconnected(_))).collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0].1, Event::Disconnected(Disconnect::Reported));
    server.stop().await;
}

#[tokio::test]
async fn malformed_messages_are_answered_or_closed() {
    let server = Server::with(|c| c.limits.max_message_bytes = 1024).await;
    let mut socket = connect(&server).await;

    // A header other than 0.
    socket.send(Message::Binary(Bytes::from_static(&[1, 0x08, 0x01]))).await.unwrap();
    let answer = receive(&mut socket).await;
    assert_eq!(answer.error_response.unwrap().r#type, wire::ServerErrorResponseType::BadRequest as i32);
    // No header at all (a client of an older draft): the first byte reads as header 10.
    socket.send(Message::Binary(full(UID, 1, "x").encode_to_vec().into())).await.unwrap();
    assert!(receive(&mut socket).await.error_response.is_some());
    // Still usable.
    send(&mut socket, &full(UID, 1, "x")).await;
    assert!(receive(&mut socket).await.error_response.is_none());

    // Text is not OpAMP.
    socket.send(Message::Text("hello".into())).await.unwrap();
    assert_eq!(closed(&mut socket).await, Some(CloseCode::Unsupported));

    // Over the limit: the connection closes.
    let mut socket = connect(&server).await;
    socket.send(Message::Binary(vec![0u8; 4096].into())).await.unwrap();
    let code = closed(&mut socket).await;
    assert!(code.is_none() || code == Some(CloseCode::Size), "{code:?}");
    server.stop().await;
}

#[tokio::test]
async fn throttling_is_unavailable_with_retry_info_or_503_at_the_upgrade() {
    let server = Server::with(|c| {
        c.limits.max_sessions = 1;
        c.limits.max_websockets = 2;
    })
    .await;
    let _first = session(&server, UID, "a").await;
    let mut second = connect(&server).await;
    send(&mut second, &full([3; 16], 1, "b")).await;
    let error = receive(&mut second).await.error_response.unwrap();
    assert_eq!(error.r#type, wire::ServerErrorResponseType::Unavailable as i32);
    assert_eq!(
        error.details,
        Some(wire::server_error_response::Details::RetryInfo(wire::RetryInfo {
            retry_after_nanoseconds: 30_000_000_000
        }))
    );

    let refused = tokio_tungstenite::connect_async(format!("ws://{}/v1/opamp", server.addr)).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            assert_eq!(response.headers()["retry-after"], "30");
        }
        other => panic!("expected 503, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn a_newer_connection_of_the_agent_closes_the_older_one() {
    let server = Server::start().await;
    let mut old = session(&server, UID, "a").await;
    let _new = session(&server, UID, "a").await;
    closed(&mut old).await;
    server.wait_stats(|s| s.websockets == 1 && s.sessions == 1).await;
    assert!(!server.backend.events().iter().any(|(_, e)| matches!(e, Event::Disconnected(_))), "the session goes on");
    server.stop().await;
}

#[tokio::test]
async fn shutdown_closes_websockets_going_away() {
    let server = Server::start().await;
    let mut socket = session(&server, UID, "a").await;
    let backend = server.backend.clone();
    server.stop().await;
    assert_eq!(closed(&mut socket).await, Some(CloseCode::Away));
    assert!(backend.events().iter().any(|(_, e)| *e == Event::Disconnected(Disconnect::Shutdown)));
}

#[tokio::test]
async fn one_connection_may_carry_several_agents() {
    let server = Server::start().await;
    let v1 = RemoteConfig::single("a", "", "1");
    server.backend.set_service("one", Some(v1.clone()));
    let mut socket = connect(&server).await;
    send(&mut socket, &full([1; 16], 1, "one")).await;
    assert!(receive(&mut socket).await.remote_config.is_some());
    send(&mut socket, &full([2; 16], 1, "two")).await;
    assert!(receive(&mut socket).await.remote_config.is_none());
    server.backend.set_service("two", Some(RemoteConfig::single("b", "", "2")));
    let pushed = receive(&mut socket).await;
    assert_eq!(
        pushed.instance_uid.as_ref(),
        &[2; 16],
        "the push is addressed to the agent whose configuration changed"
    );
    server.wait_stats(|s| s.sessions == 2).await;
    drop(socket);
    server.wait_stats(|s| s.sessions == 0).await;
    let _ = codec::CONTENT_TYPE;
    server.stop().await;
}
