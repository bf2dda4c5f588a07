//! `skyconf-bench sink`: an OAP stand-in for the gateway benchmark (`scripts/bench/gateway.sh`).
//!
//! It answers every gRPC call, whatever its path, the way an OAP answers a report: it reads the
//! whole request stream, then sends one empty `Commands` (a zero-length message) and grpc-status
//! 0. It does no work per message beyond walking the gRPC framing, so a proxy in front of it is
//! measured, not the sink. A request stream that ends inside a message (a proxy that lost or
//! corrupted bytes) gets grpc-status 13 (INTERNAL) instead, which the load generators count as a
//! failed call, and is counted apart from streams the client reset (h2load resets the calls in
//! flight when its time is up).
//!
//! Plain hyper HTTP/2, no tonic router: the sink must not be what limits a run.
//!
//! Output, like the other bench tools (a table, or one JSON object per line with `--json`): the
//! bound address as soon as it listens, the counters on SIGUSR1, and the counters again when
//! SIGTERM or Ctrl-C stops it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::{print_report, runtime};

/// Arguments of `skyconf-bench sink`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    /// Where to listen (`127.0.0.1:0`: any free port; the one bound is printed).
    #[arg(long, default_value = "127.0.0.1:11800")]
    addr: SocketAddr,
    /// Worker threads (default: the CPUs it may run on).
    #[arg(long)]
    threads: Option<usize>,
    /// Print JSON lines instead of tables.
    #[arg(long)]
    json: bool,
}

/// What the sink has received, over its whole life.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Calls answered with grpc-status 0.
    calls: AtomicU64,
    /// Request streams that ended inside a message (answered grpc-status 13).
    truncated: AtomicU64,
    /// Request streams the client reset or whose connection broke before they ended.
    reset: AtomicU64,
    /// gRPC messages of the calls answered with grpc-status 0.
    messages: AtomicU64,
    /// Request body bytes of the calls answered with grpc-status 0 (framing included).
    bytes: AtomicU64,
    /// HTTP/2 connections accepted.
    connections: AtomicU64,
}

impl Counters {
    fn json(&self, addr: SocketAddr, event: &str) -> Value {
        json!({
            "mode": "sink",
            "event": event,
            "addr": addr.to_string(),
            "connections": self.connections.load(Ordering::Relaxed),
            "calls": self.calls.load(Ordering::Relaxed),
            "truncated_calls": self.truncated.load(Ordering::Relaxed),
            "reset_calls": self.reset.load(Ordering::Relaxed),
            "messages": self.messages.load(Ordering::Relaxed),
            "bytes": self.bytes.load(Ordering::Relaxed),
        })
    }
}

/// Runs the sink until SIGTERM or Ctrl-C.
pub(super) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    runtime(args.threads)?.block_on(async {
        let listener = TcpListener::bind(args.addr).await.with_context(|| format!("cannot listen on {}", args.addr))?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        print_report(&json!({"mode": "sink", "event": "listening", "addr": addr.to_string()}), args.json);
        let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let serving = serve(listener, Arc::clone(&counters));
        tokio::pin!(serving);
        loop {
            tokio::select! {
                () = &mut serving => unreachable!("the accept loop never ends"),
                _ = usr1.recv() => print_report(&counters.json(addr, "counters"), args.json),
                _ = term.recv() => break,
                _ = tokio::signal::ctrl_c() => break,
            }
        }
        print_report(&counters.json(addr, "stopped"), args.json);
        Ok(ExitCode::SUCCESS)
    })
}

/// Accepts connections forever, each served on its own task.
pub(super) async fn serve(listener: TcpListener, counters: Arc<Counters>) {
    loop {
        // Out of descriptors (thousands of connections): wait for some to close.
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        counters.connections.fetch_add(1, Ordering::Relaxed);
        let counters = Arc::clone(&counters);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| answer(request, Arc::clone(&counters)));
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .max_concurrent_streams(1024)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Reads the whole request stream, then answers an empty `Commands` and grpc-status 0, or
/// grpc-status 13 when the stream ended inside a message.
async fn answer(request: Request<Incoming>, counters: Arc<Counters>) -> Result<Response<Answer>, Infallible> {
    let mut body = request.into_body();
    let mut framing = Framing::default();
    let mut bytes = 0u64;
    let mut complete = true;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    bytes += data.len() as u64;
                    framing.feed(data);
                }
            }
            Err(_) => {
                complete = false;
                break;
            }
        }
    }
    let status = if !complete {
        counters.reset.fetch_add(1, Ordering::Relaxed);
        Some(("1", "the request stream was reset"))
    } else if !framing.at_boundary() {
        counters.truncated.fetch_add(1, Ordering::Relaxed);
        Some(("13", "the request stream ended inside a gRPC message"))
    } else {
        counters.bytes.fetch_add(bytes, Ordering::Relaxed);
        counters.messages.fetch_add(framing.messages, Ordering::Relaxed);
        counters.calls.fetch_add(1, Ordering::Relaxed);
        None
    };
    let mut response = Response::builder().header("content-type", "application/grpc");
    let body = match status {
        None => Answer::Message,
        // Trailers-only: the status in the headers, no body.
        Some((code, message)) => {
            response = response.header("grpc-status", code).header("grpc-message", message);
            Answer::Done
        }
    };
    Ok(response.body(body).expect("a valid response head"))
}

/// Walks the gRPC framing (1 flag byte, 4 length bytes, the message) across DATA frames.
#[derive(Debug, Default)]
pub(super) struct Framing {
    /// Bytes of the current prefix seen so far (0–4), or 5 while inside a message.
    prefix: usize,
    length: [u8; 4],
    /// Bytes of the current message still to come.
    remaining: u64,
    /// Messages whose prefix has been read.
    pub(super) messages: u64,
}

impl Framing {
    /// Takes the next chunk of the stream.
    pub(super) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.prefix == 5 {
                let skip = usize::try_from(self.remaining).unwrap_or(usize::MAX).min(data.len());
                data = &data[skip..];
                self.remaining -= skip as u64;
                if self.remaining == 0 {
                    self.prefix = 0;
                }
                continue;
            }
            if self.prefix > 0 {
                self.length[self.prefix - 1] = data[0];
            }
            self.prefix += 1;
            data = &data[1..];
            if self.prefix == 5 {
                self.messages += 1;
                self.remaining = u64::from(u32::from_be_bytes(self.length));
                if self.remaining == 0 {
                    self.prefix = 0;
                }
            }
        }
    }

    /// Whether the stream so far ends exactly after a whole message (or is empty).
    pub(super) fn at_boundary(&self) -> bool {
        self.prefix == 0
    }
}

/// The answer's body: one zero-length message, then the trailers; or nothing (trailers-only).
#[derive(Debug)]
enum Answer {
    Message,
    Trailers,
    Done,
}

/// A zero-length gRPC message: an empty `Commands`.
static EMPTY_MESSAGE: [u8; 5] = [0; 5];

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(match *self {
            Self::Message => {
                *self = Self::Trailers;
                Some(Ok(Frame::data(Bytes::from_static(&EMPTY_MESSAGE))))
            }
            Self::Trailers => {
                *self = Self::Done;
                let mut trailers = HeaderMap::with_capacity(1);
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                Some(Ok(Frame::trailers(trailers)))
            }
            Self::Done => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw;

    /// `n` framed messages of `size` bytes each, as one request body.
    fn framed(n: usize, size: usize) -> Vec<u8> {
        let mut body = Vec::new();
        for i in 0..n {
            body.push(0);
            body.extend_from_slice(&(size as u32).to_be_bytes());
            body.extend(std::iter::repeat_n((i % 251) as u8, size));
        }
        body
    }

    #[test]
    fn the_framing_counts_messages_across_any_split_and_finds_a_cut() {
        let body = framed(7, 300);
        for chunk in [1, 2, 5, 6, 299, 305, 4096] {
            let mut framing = Framing::default();
            for part in body.chunks(chunk) {
                framing.feed(part);
            }
            assert_eq!((framing.messages, framing.at_boundary()), (7, true), "chunks of {chunk}");
        }
        let mut cut = Framing::default();
        cut.feed(&body[..body.len() - 1]);
        assert!(!cut.at_boundary());
        let mut empty_messages = Framing::default();
        empty_messages.feed(&framed(3, 0));
        assert_eq!((empty_messages.messages, empty_messages.at_boundary()), (3, true));
    }

    #[tokio::test]
    async fn a_client_stream_of_n_messages_gets_ok_and_an_empty_message() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        tokio::spawn(serve(listener, Arc::clone(&counters)));
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();

        let messages = raw::split(&framed(500, 1500)).unwrap();
        let mut caller =
            raw::Caller::new(channel, "/skywalking.v3.TraceSegmentReportService/collect", messages).unwrap();
        for _ in 0..3 {
            let answer = caller.call_bytes().await.expect("grpc-status 0");
            assert!(answer.into_inner().is_empty(), "an empty message");
        }
        // An unknown path is answered all the same, unary too.
        let mut unary = raw::Caller::new(
            tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap(),
            "/no.Such/Method",
            raw::split(&framed(1, 10)).unwrap(),
        )
        .unwrap();
        assert!(unary.call_bytes().await.unwrap().into_inner().is_empty());
        assert_eq!(counters.calls.load(Ordering::Relaxed), 4);
        assert_eq!(counters.messages.load(Ordering::Relaxed), 1501);
        assert_eq!(counters.truncated.load(Ordering::Relaxed) + counters.reset.load(Ordering::Relaxed), 0);
    }
}
