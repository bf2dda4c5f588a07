//! The connection's bounds, in process with paused time where time matters: keep-alive pings,
//! the SETTINGS acknowledgement, a slow reader, response bodies within the window, request data
//! within the window, rapid reset.

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::raw::{self, Frame};
use http::{Request, Response};
use http_body::Frame as BodyFrame;
use skyconf_h2::{Error, Reason, RecvBody, ServiceFn, Settings};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A response body of endless 16 KiB chunks, counting what was polled out of it.
struct Endless(Arc<AtomicUsize>);

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<BodyFrame<Bytes>, Infallible>>> {
        self.0.fetch_add(16 * 1024, Ordering::SeqCst);
        Poll::Ready(Some(Ok(BodyFrame::data(Bytes::from(vec![0; 16 * 1024])))))
    }
}

/// `/endless` answers an [`Endless`] body; `/hold` never answers; anything else answers empty.
fn server(io: DuplexStream, settings: Settings, polled: Arc<AtomicUsize>) -> JoinHandle<Result<(), Error>> {
    let service = ServiceFn(move |request: Request<RecvBody>| {
        let polled = Arc::clone(&polled);
        async move {
            match request.uri().path() {
                "/endless" => Ok::<_, Infallible>(Response::new(http_body_util::Either::Left(Endless(polled)))),
                "/hold" => std::future::pending().await,
                _ => Ok(Response::new(http_body_util::Either::Right(http_body_util::Empty::<Bytes>::new()))),
            }
        }
    });
    tokio::spawn(
        async move { skyconf_h2::serve_connection(io, service, Arc::new(settings), std::future::pending()).await },
    )
}

fn quiet() -> Settings {
    Settings { keepalive_interval: None, ..Settings::default() }
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_keepalive_ping_closes_the_connection_after_interval_and_timeout() {
    let (mut client, io) = tokio::io::duplex(1 << 20);
    let settings = Settings {
        keepalive_interval: Some(Duration::from_secs(20)),
        keepalive_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let task = server(io, settings, Arc::default());
    let start = Instant::now();
    raw::handshake(&mut client, &[], true).await;
    // The first PING is answered: the connection lives on.
    let ping = raw::until(&mut client, 6, None).await.unwrap();
    assert_eq!(ping.flags & 1, 0);
    assert_eq!(start.elapsed().as_secs(), 20);
    client.write_all(&raw::frame(6, 1, 0, &ping.payload)).await.unwrap();
    // The next is not: the connection ends 10 s after it.
    let ping = raw::until(&mut client, 6, None).await.unwrap();
    let sent = Instant::now();
    assert_eq!(ping.flags & 1, 0);
    let ended = task.await.unwrap();
    assert!(matches!(ended, Err(Error::KeepAliveTimeout)), "{ended:?}");
    assert_eq!(sent.elapsed().as_secs(), 10);
}

#[tokio::test(start_paused = true)]
async fn settings_not_acknowledged_in_time_close_the_connection_with_settings_timeout() {
    let (mut client, io) = tokio::io::duplex(1 << 20);
    let task = server(io, Settings { settings_ack_timeout: Duration::from_secs(10), ..quiet() }, Arc::default());
    let start = Instant::now();
    raw::handshake(&mut client, &[], false).await;
    let goaway = raw::until(&mut client, 7, None).await.unwrap();
    assert_eq!(goaway.code(), Reason::SETTINGS_TIMEOUT.0);
    assert_eq!(start.elapsed().as_secs(), 10);
    drop(client);
    assert!(matches!(task.await.unwrap(), Err(Error::Protocol { reason: Reason::SETTINGS_TIMEOUT, .. })));
}

/// Lets every task run until all wait (paused time advances only then).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_response_body_is_not_polled_past_the_clients_window() {
    let (mut client, io) = tokio::io::duplex(1 << 20);
    let polled = Arc::new(AtomicUsize::new(0));
    let _task = server(io, quiet(), Arc::clone(&polled));
    raw::handshake(&mut client, &[], true).await;
    client.write_all(&raw::headers(1, "/endless", true)).await.unwrap();
    settle().await;
    // The client's window is the default 65,535 bytes: four chunks, the last one's final byte
    // waiting for window.
    assert_eq!(polled.load(Ordering::SeqCst), 4 * 16 * 1024);
    let mut data = 0;
    while data < 65_535 {
        let frame = raw::until(&mut client, 0, Some(1)).await.unwrap();
        data += frame.payload.len();
    }
    assert_eq!(data, 65_535);
    // A WINDOW_UPDATE lets exactly that much more through.
    client.write_all(&raw::frame(8, 0, 1, &32_768u32.to_be_bytes())).await.unwrap();
    client.write_all(&raw::frame(8, 0, 0, &32_768u32.to_be_bytes())).await.unwrap();
    settle().await;
    assert_eq!(polled.load(Ordering::SeqCst), 6 * 16 * 1024);
}

#[tokio::test(start_paused = true)]
async fn what_is_queued_for_a_client_that_does_not_read_is_bounded() {
    // A socket that takes 64 KiB, a client with windows of 2 GiB that reads nothing.
    let (mut client, io) = tokio::io::duplex(64 * 1024);
    let polled = Arc::new(AtomicUsize::new(0));
    let settings = Settings { max_send_buffer_bytes: 64 * 1024, ..quiet() };
    let _task = server(io, settings, Arc::clone(&polled));
    raw::handshake(&mut client, &[(4, (1 << 31) - 1)], true).await;
    client.write_all(&raw::frame(8, 0, 0, &((1u32 << 31) - 1 - 65_535).to_be_bytes())).await.unwrap();
    let mut requests = Vec::new();
    for i in 0..10 {
        requests.extend(raw::headers(2 * i + 1, "/endless", true));
    }
    client.write_all(&requests).await.unwrap();
    settle().await;
    let polled = polled.load(Ordering::SeqCst);
    // The socket's 64 KiB, the connection's 64 KiB of unsent bytes, and a chunk per stream.
    assert!(polled <= 64 * 1024 + 64 * 1024 + 10 * 16 * 1024 + 16 * 1024, "{polled} bytes polled");
    assert!(polled >= 64 * 1024, "{polled}");
}

#[tokio::test(start_paused = true)]
async fn request_data_past_the_stream_window_is_a_flow_control_error() {
    let (mut client, io) = tokio::io::duplex(1 << 20);
    let _task = server(io, Settings { initial_stream_window: 65_535, ..quiet() }, Arc::default());
    raw::handshake(&mut client, &[], true).await;
    client.write_all(&raw::headers(1, "/hold", false)).await.unwrap();
    let chunk = vec![0u8; 16_384];
    for _ in 0..4 {
        client.write_all(&raw::frame(0, 0, 1, &chunk)).await.unwrap();
    }
    let rst = raw::until(&mut client, 3, Some(1)).await.unwrap();
    assert_eq!(rst.code(), Reason::FLOW_CONTROL_ERROR.0);
}

#[tokio::test(start_paused = true)]
async fn streams_reset_before_their_answer_past_the_bound_close_the_connection() {
    let (mut client, io) = tokio::io::duplex(1 << 20);
    let task = server(io, Settings { max_pending_accept_reset_streams: 20, ..quiet() }, Arc::default());
    raw::handshake(&mut client, &[], true).await;
    // Reset streams interleaved with answered ones cost nothing: each answer takes one back.
    let mut burst = Vec::new();
    for i in 0..100u32 {
        burst.extend(raw::headers(4 * i + 1, "/hold", true));
        burst.extend(raw::frame(3, 0, 4 * i + 1, &8u32.to_be_bytes()));
        burst.extend(raw::headers(4 * i + 3, "/empty", true));
    }
    client.write_all(&burst).await.unwrap();
    settle().await;
    assert!(!task.is_finished());
    // Twenty-one in a row do not.
    let mut burst = Vec::new();
    for i in 0..21u32 {
        let id = 1001 + 2 * i;
        burst.extend(raw::headers(id, "/hold", true));
        burst.extend(raw::frame(3, 0, id, &8u32.to_be_bytes()));
    }
    client.write_all(&burst).await.unwrap();
    let goaway: Frame = raw::until(&mut client, 7, None).await.unwrap();
    assert_eq!(goaway.code(), Reason::ENHANCE_YOUR_CALM.0);
    drop(client);
    assert!(matches!(task.await.unwrap(), Err(Error::Protocol { reason: Reason::ENHANCE_YOUR_CALM, .. })));
}

#[tokio::test(start_paused = true)]
async fn a_header_block_past_its_bound_closes_the_connection() {
    let (mut client, io) = tokio::io::duplex(1 << 20);
    let task = server(io, Settings { max_header_list_bytes: 16 * 1024, ..quiet() }, Arc::default());
    raw::handshake(&mut client, &[], true).await;
    client.write_all(&raw::frame(1, 0, 1, &raw::request_block("/hold"))).await.unwrap();
    // Empty CONTINUATION frames count too (their headers).
    let mut flood = Vec::new();
    for _ in 0..4000 {
        flood.extend(raw::frame(9, 0, 1, &[]));
    }
    let _ = client.write_all(&flood).await;
    let goaway = raw::until(&mut client, 7, None).await.unwrap();
    assert_eq!(goaway.code(), Reason::ENHANCE_YOUR_CALM.0);
    drop(client);
    assert!(task.await.unwrap().is_err());
}
