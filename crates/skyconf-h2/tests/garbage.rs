//! Random frames after a valid opening, 2,000 connections: the connection never panics, and
//! it either goes on or ends with GOAWAY; and valid frames written a few bytes at a time (every
//! split of a preface, a header, a payload) are read whole. Deterministic (fixed seeds), in
//! process, paused time.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::raw;
use http::{Request, Response};
use skyconf_h2::{RecvBody, ServiceFn, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// xorshift64*: a fixed sequence, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_frame(rng: &mut Rng) -> Vec<u8> {
    let kind = rng.below(11) as u8;
    let flags = rng.next() as u8;
    let stream = match rng.below(4) {
        0 => 0,
        1 => 1,
        2 => rng.below(8) as u32,
        _ => rng.next() as u32 & 0x7fff_ffff,
    };
    let payload: Vec<u8> = match (kind, rng.below(3)) {
        // A well-formed request block now and then, so streams open.
        (1, 0) => raw::request_block(if rng.below(2) == 0 { "/hold" } else { "/answer" }),
        (4, 0) => (0..rng.below(4) * 6).map(|_| rng.next() as u8).collect(),
        (8, 0) | (3, 0) => (rng.next() as u32 & 0x7fff_ffff).to_be_bytes().to_vec(),
        (6, 0) => (0..8).map(|_| rng.next() as u8).collect(),
        _ => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
    };
    raw::frame(kind, flags, stream, &payload)
}

#[tokio::test(start_paused = true)]
async fn random_frames_never_panic_the_connection() {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let mut goaways = 0;
    for _ in 0..2000 {
        let (mut client, io) = tokio::io::duplex(1 << 20);
        let service = ServiceFn(|request: Request<RecvBody>| async move {
            if request.uri().path() == "/hold" {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from_static(b"answer"))))
        });
        let settings = Arc::new(Settings { keepalive_interval: None, ..Settings::default() });
        let task = tokio::spawn(skyconf_h2::serve_connection(io, service, settings, std::future::pending()));
        raw::handshake(&mut client, &[], rng.below(2) == 0).await;
        let mut bytes = Vec::new();
        for _ in 0..rng.below(40) + 1 {
            bytes.extend(random_frame(&mut rng));
        }
        let _ = client.write_all(&bytes).await;
        // Whatever the server answers, read it: the connection either waits or ends.
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer)).await;
        drop(client);
        if let Err(error) = task.await {
            panic!("the connection task failed: {error}");
        }
        if answer.windows(4).any(|w| w == [0, 0, 8, 7]) {
            goaways += 1;
        }
    }
    assert!(goaways > 0, "some of the garbage is a protocol error");
}

#[tokio::test(start_paused = true)]
async fn frames_split_at_every_kind_of_boundary_are_read_whole() {
    let mut rng = Rng(0x0dd5_1ce5_0000_0002);
    let (client, io) = tokio::io::duplex(1 << 20);
    let service = ServiceFn(|request: Request<RecvBody>| async move {
        use http_body_util::BodyExt;
        let body = request.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(body)))
    });
    let settings = Arc::new(Settings { keepalive_interval: None, ..Settings::default() });
    let _task = tokio::spawn(skyconf_h2::serve_connection(io, service, settings, std::future::pending()));
    // The preface and SETTINGS split too; windows for every answer (the client reads them all).
    let mut bytes = raw::PREFACE.to_vec();
    bytes.extend(raw::settings(&[(4, 1 << 20)]));
    bytes.extend(raw::settings_ack());
    bytes.extend(raw::frame(8, 0, 0, &(16u32 << 20).to_be_bytes()));
    let calls = 50u32;
    for i in 0..calls {
        let id = 2 * i + 1;
        bytes.extend(raw::headers(id, "/echo", false));
        let body = vec![i as u8; (rng.below(40_000)) as usize];
        let mut chunks = body.chunks(16_384).peekable();
        while let Some(chunk) = chunks.next() {
            bytes.extend(raw::frame(0, u8::from(chunks.peek().is_none()), id, chunk));
        }
        if body.is_empty() {
            bytes.extend(raw::frame(0, 1, id, &[]));
        }
    }
    let (mut read, mut write) = tokio::io::split(client);
    let reader = tokio::spawn(async move {
        let mut answered = std::collections::HashMap::new();
        let mut ended = 0;
        while ended < calls {
            let frame = raw::read_frame(&mut read).await.expect("every answer");
            if frame.kind == 0 {
                *answered.entry(frame.stream).or_insert(0usize) += frame.payload.len();
                if frame.flags & 1 == 1 {
                    ended += 1;
                }
            }
        }
        answered
    });
    // Written in pieces of 1 to 40 bytes, the server reading after each.
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let n = (rng.below(40) as usize + 1).min(rest.len());
        write.write_all(&rest[..n]).await.unwrap();
        rest = &rest[n..];
        tokio::task::yield_now().await;
    }
    let answered = reader.await.unwrap();
    assert_eq!(answered.len(), calls as usize);
    let mut rng = Rng(0x0dd5_1ce5_0000_0002);
    for i in 0..calls {
        let expected = rng.below(40_000) as usize;
        assert_eq!(answered.get(&(2 * i + 1)).copied().unwrap_or(0), expected, "call {i}");
    }
}
