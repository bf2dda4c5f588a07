//! The agent port: the gRPC routes (CDS, called directly ([`Direct`]), `ManagementService`, DCS,
//! and in gateway mode the forwarding of every other call) served on skyconf's own HTTP/2 server
//! ([`own`], the default), or on hyper's with settings of skyconf's own ([`http2`]) when the limits
//! choose it, over the sockets `crate::security` hands out (capped, shared by source, with
//! handshake deadlines, drained when closed).
//!
//! Each accepted connection is served in a task of its own. Its calls carry the connection's info
//! (`Connected::connect_info`: the `crate::socket::AgentConnection`, under TLS inside tonic's
//! `TlsConnectInfo`) in their extensions, and a call whose client sent a `grpc-timeout` ends
//! `CANCELLED` once that deadline passes (the client has given up on it by then; its handler is
//! dropped). When `stop` completes, the listener is closed, every open connection is asked to
//! finish (GOAWAY: no new calls, the open ones end) and [`serve`] returns once all have ended
//! (`crate::security::drain` bounds how long that takes). A connection the kernel had completed
//! but not yet handed to the server is reset with the listener, as one attempted later is
//! refused: it has had no SETTINGS from the server, and gRPC's Java and Go clients send no call on
//! a connection before those arrive.

pub mod http2;
pub mod own;

pub use crate::security::Http2Server;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::body::Body;
use tonic::transport::server::Connected;

/// What a call on the agent port is answered with.
type Answer = Result<Response<Body>, Infallible>;

/// A service that answers calls on the agent port: the routes, or a [`Direct`] service. Every
/// connection's task calls a clone of it, hence `Send` and `'static`, its futures too.
pub trait AgentService:
    tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<T> AgentService for T where
    T: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// One gRPC service called straight from the port, before the routes: the one every agent calls
/// every 20 s (CDS), which tonic's router (axum's path matching) would cost about 2,000
/// instructions per call. It honours the client's `grpc-timeout` itself (CDS merges it with its
/// held poll's timer), where the routes' calls get [`within`]'s.
#[derive(Debug, Clone)]
pub struct Direct<D> {
    /// The service's gRPC name (`package.Service`): it answers every path `/<name>/…`.
    pub name: &'static str,
    /// The service.
    pub service: D,
}

impl<D> Direct<D> {
    /// Whether a call to `path` is this service's.
    fn serves(&self, path: &str) -> bool {
        path.strip_prefix('/').and_then(|p| p.strip_prefix(self.name)).is_some_and(|rest| rest.starts_with('/'))
    }
}

/// Serves `routes` (and `direct`'s service before them) on every connection `incoming` yields,
/// with `http2`'s server and settings, until `stop` completes and the open connections have
/// ended (see the module docs).
pub async fn serve<I, IO, S, D>(
    incoming: I,
    routes: S,
    direct: Option<Direct<D>>,
    http2: http2::Server,
    stop: impl Future<Output = ()>,
) where
    I: Stream<Item = std::io::Result<IO>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Sync,
    S: AgentService + Sync,
    D: AgentService + Sync,
{
    let connections = connections(incoming, Arc::new(routes), direct.map(Arc::new), stop);
    let builder = match http2 {
        http2::Server::Hyper(builder) => builder,
        http2::Server::Own(settings) => return own::serve(connections, settings).await,
    };
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    {
        // Dropped when the loop ends: the listener closes at once, and a client connecting
        // during the shutdown is refused instead of left waiting.
        let mut connections = std::pin::pin!(connections);
        while let Some((io, calls)) = connections.next().await {
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

/// The connections `incoming` yields until `stop` completes, each with the calls it serves
/// (`routes` and `direct`, shared, and its own info); one that could not be taken up is logged
/// and skipped. Dropping the stream closes the listener.
fn connections<I, IO, S, D>(
    incoming: I,
    routes: Arc<S>,
    direct: Option<Arc<Direct<D>>>,
    stop: impl Future<Output = ()>,
) -> impl Stream<Item = (IO, Calls<S, D, IO::ConnectInfo>)>
where
    I: Stream<Item = std::io::Result<IO>>,
    IO: Connected,
{
    incoming.take_until(stop).filter_map(move |next| {
        std::future::ready(match next {
            Ok(io) => {
                let calls =
                    Calls { routes: Arc::clone(&routes), direct: direct.clone(), connection: io.connect_info() };
                Some((io, calls))
            }
            Err(error) => {
                tracing::debug!(%error, "An agent connection could not be taken up.");
                None
            }
        })
    })
}

/// One connection's calls: the routes and the direct service, shared by every connection, and
/// the connection's info, given to each call.
struct Calls<S, D, C> {
    routes: Arc<S>,
    direct: Option<Arc<Direct<D>>>,
    connection: C,
}

impl<S, D, C, B> hyper::service::Service<Request<B>> for Calls<S, D, C>
where
    B: http_body::Body<Data = Bytes, Error: Into<tonic::codegen::StdError>> + Send + 'static,
    S: AgentService,
    D: AgentService,
    C: Clone + Send + Sync + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.connection.clone());
        // The call is made when its task first runs, not as the stream is accepted: its message,
        // which arrives with its headers, is read at once then, so a burst of new streams is not
        // counted as calls waiting for their message (`grpcMaxPendingStreamsPerSource`).
        if let Some(direct) = self.direct.as_deref().filter(|d| d.serves(request.uri().path())) {
            // Boxed until then, so that once called the future keeps the call's future alone.
            let mut waiting = Box::new((D::clone(&direct.service), request));
            return Box::pin(async move {
                let Ok(()) = std::future::poll_fn(|cx| waiting.0.poll_ready(cx)).await;
                let call = {
                    let (mut service, request) = *waiting;
                    service.call(request)
                };
                call.await
            });
        }
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| crate::cds::hold::parse_grpc_timeout(value.as_bytes()));
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

#[cfg(test)]
mod tests {
    use super::Direct;

    #[test]
    fn a_direct_service_serves_its_own_paths_only() {
        let cds = Direct { name: "skywalking.v3.ConfigurationDiscoveryService", service: () };
        assert!(cds.serves("/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations"));
        assert!(cds.serves("/skywalking.v3.ConfigurationDiscoveryService/other"), "the service answers UNIMPLEMENTED");
        assert!(!cds.serves("/skywalking.v3.ConfigurationDiscoveryServiceX/fetchConfigurations"));
        assert!(!cds.serves("/skywalking.v3.ManagementService/keepAlive"));
        assert!(!cds.serves("skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations"));
        assert!(!cds.serves("/skywalking.v3.ConfigurationDiscoveryService"));
    }
}
