//! The agent port: the gRPC routes (CDS, `ManagementService`, DCS, and in gateway mode the
//! forwarding of every other call) served on hyper's HTTP/2 server with settings of skyconf's own
//! ([`http2`]), over the sockets `crate::security` hands out (capped, shared by source, with
//! handshake deadlines, drained when closed).
//!
//! Each accepted connection is served in a task of its own. Its calls carry the connection's info
//! (`Connected::connect_info`: the `crate::socket::AgentConnection`, under TLS inside tonic's
//! `TlsConnectInfo`) in their extensions, and a call whose client sent a `grpc-timeout` ends
//! `CANCELLED` once that deadline passes (the client has given up on it by then; its handler is
//! dropped). When `stop` completes, the listener is closed, every open connection is asked to
//! finish (GOAWAY: no new calls, the open ones end) and [`serve`] returns once all have ended
//! (`crate::security::drain` bounds how long that takes).

pub mod http2;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::body::Body;
use tonic::transport::server::Connected;

/// What a call on the agent port is answered with.
type Answer = Result<Response<Body>, Infallible>;

/// Serves `routes` on every connection `incoming` yields, with `builder`'s HTTP/2 settings, until
/// `stop` completes and the open connections have ended (see the module docs).
pub async fn serve<I, IO, S>(
    incoming: I,
    routes: S,
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
    stop: impl Future<Output = ()>,
) where
    I: Stream<Item = std::io::Result<IO>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Sync,
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let routes = Arc::new(routes);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    {
        // Dropped when the loop ends: the listener closes at once, and a client connecting
        // during the shutdown is refused instead of left waiting.
        let mut incoming = std::pin::pin!(incoming);
        let mut stop = std::pin::pin!(stop);
        loop {
            let io = tokio::select! {
                () = &mut stop => break,
                next = incoming.next() => match next {
                    Some(Ok(io)) => io,
                    Some(Err(error)) => {
                        tracing::debug!(%error, "An agent connection could not be taken up.");
                        continue;
                    }
                    None => break,
                },
            };
            let calls = Calls { routes: Arc::clone(&routes), connection: io.connect_info() };
            let connection = graceful.watch(builder.serve_connection(TokioIo::new(io), calls));
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    // Debug only: resets, pings unanswered and cuts at shutdown are routine.
                    tracing::debug!(%error, "An agent connection ended with an error.");
                }
            });
        }
    }
    graceful.shutdown().await;
}

/// One connection's calls: the routes, shared by every connection, and the connection's info,
/// given to each call.
struct Calls<S, C> {
    routes: Arc<S>,
    connection: C,
}

impl<S, C> hyper::service::Service<Request<Incoming>> for Calls<S, C>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    C: Clone + Send + Sync + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.connection.clone());
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| crate::cds::hold::parse_grpc_timeout(value.as_bytes()));
        // The call is made when its task first runs, not as the stream is accepted: its message,
        // which arrives with its headers, is read at once then, so a burst of new streams is not
        // counted as calls waiting for their message (`grpcMaxPendingStreamsPerSource`).
        let routes = S::clone(&self.routes);
        Box::pin(within(deadline, tower::ServiceExt::oneshot(routes, request)))
    }
}

/// `call`'s answer, or `CANCELLED` once `deadline` (the client's `grpc-timeout`) has passed.
async fn within(deadline: Option<Duration>, call: impl Future<Output = Answer>) -> Answer {
    let Some(deadline) = deadline else { return call.await };
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| Ok(tonic::Status::cancelled("Timeout expired").into_http()))
}
