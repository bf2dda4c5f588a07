//! A test server on an ephemeral port, and clients.

#![allow(dead_code, unreachable_pub)]

pub mod raw;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use skyconf_h2::{RecvBody, ServiceFn, Settings};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

pub type BoxBody = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

/// How long a condition may take to come true.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub struct Server {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    ended: tokio::sync::Mutex<Option<oneshot::Receiver<Result<(), skyconf_h2::Error>>>>,
    open: Arc<AtomicUsize>,
}

impl Server {
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    pub fn open_calls(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// The first connection's end.
    pub async fn ended(&self) -> Result<(), skyconf_h2::Error> {
        let receiver = self.ended.lock().await.take().expect("once");
        receiver.await.expect("the connection task ends")
    }
}

struct Open(Arc<AtomicUsize>);
impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An echo service: `/echo` answers with the request body and trailers `x-n: <bytes>`; `/big/N`
/// answers N bytes; `/status` answers trailers-only `grpc-status: 5`; `/hold` never answers.
async fn echo(request: Request<RecvBody>, open: Arc<AtomicUsize>) -> Result<Response<BoxBody>, Infallible> {
    open.fetch_add(1, Ordering::SeqCst);
    let _open = Open(open);
    let path = request.uri().path().to_owned();
    if path == "/status" {
        let mut response = Response::new(Full::new(Bytes::new()).boxed_unsync());
        response.headers_mut().insert("grpc-status", "5".parse().unwrap());
        return Ok(response);
    }
    if path == "/hold" {
        std::future::pending::<()>().await;
    }
    if let Some(n) = path.strip_prefix("/big/") {
        let n: usize = n.parse().unwrap();
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; n])).boxed_unsync()));
    }
    let Ok(collected) = request.into_body().collect().await else {
        return Ok(Response::new(Full::new(Bytes::new()).boxed_unsync()));
    };
    let trailers_in = collected.trailers().cloned();
    let bytes = collected.to_bytes();
    let mut trailers = HeaderMap::new();
    trailers.insert("x-n", bytes.len().to_string().parse().unwrap());
    if let Some(t) = trailers_in.and_then(|t| t.get("x-in").cloned()) {
        trailers.insert("x-in", t);
    }
    let frames = stream::iter([Ok(http_body::Frame::data(bytes)), Ok(http_body::Frame::trailers(trailers))]);
    Ok(Response::new(StreamBody::new(frames).boxed_unsync()))
}

/// Serves the echo service on one accepted connection at a time (each in its task); `ended`
/// reports the first connection's end.
pub async fn serve(settings: Settings) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    let (ended_tx, ended) = oneshot::channel();
    let open = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&open);
    tokio::spawn(async move {
        let mut ended_tx = Some(ended_tx);
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let settings = settings.clone();
            let mut stopped = stopped.clone();
            let open = Arc::clone(&counter);
            let ended_tx = ended_tx.take();
            tokio::spawn(async move {
                let service = ServiceFn(move |request| echo(request, Arc::clone(&open)));
                let shutdown = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                let result = skyconf_h2::serve_connection(socket, service, Arc::new(settings), shutdown).await;
                if let Some(tx) = ended_tx {
                    let _ = tx.send(result);
                }
            });
        }
    });
    Server { addr, stop, ended: tokio::sync::Mutex::new(Some(ended)), open }
}

/// An `h2` client connection.
pub async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let socket = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Waits until `condition` holds, at most [`PATIENCE`].
pub async fn wait_for(mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "condition not met within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
