//! The agent port on skyconf's own HTTP/2 server (`skyconf_h2`), the default; hyper's stays
//! selectable through [`GrpcLimits::http2_server`](crate::security::GrpcLimits::http2_server).
//!
//! The calls are the same [`Calls`] hyper's path serves (the direct CDS service, the routes, the
//! connection's info in each call's extensions, the `grpc-timeout` deadline); only the connection
//! underneath differs. That connection keeps no read or write buffer while idle (`skyconf_h2`'s
//! docs say how, and which bounds it applies), so an idle agent costs its socket, its task and
//! the connection's small state.
//!
//! Shutdown is hyper's path's: when `stop` completes the listener closes, every connection sends
//! GOAWAY and finishes its open calls, and [`serve`] returns once all have ended.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use http::Request;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::body::Body;

use super::{AgentService, Answer, Calls};

/// One connection's calls, as `skyconf_h2` calls them.
struct OwnCalls<S, D, C>(Calls<S, D, C>);

impl<S, D, C> skyconf_h2::Service for OwnCalls<S, D, C>
where
    S: AgentService,
    D: AgentService,
    C: Clone + Send + Sync + 'static,
{
    type Body = Body;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, request: Request<skyconf_h2::RecvBody>) -> <Self as skyconf_h2::Service>::Future {
        hyper::service::Service::call(&self.0, request.map(ResetAsH2))
    }
}

/// A request body whose reset reads as an h2 error with the stream's code, as hyper's request
/// bodies do: the gateway's forwarding (hyper's client) then resets the OAP's stream with the
/// same code (an agent cancelling its call cancels the OAP's).
struct ResetAsH2(skyconf_h2::RecvBody);

impl http_body::Body for ResetAsH2 {
    type Data = bytes::Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, h2::Error>>> {
        Pin::new(&mut self.0)
            .poll_frame(cx)
            .map(|frame| frame.map(|frame| frame.map_err(|reset| h2::Error::from(h2::Reason::from(reset.0.0)))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}

/// [`super::serve`] on the own server: serves every connection of `connections` with its calls.
pub(super) async fn serve<IO, S, D, C>(
    connections: impl Stream<Item = (IO, Calls<S, D, C>)>,
    settings: Arc<skyconf_h2::Settings>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: AgentService + Sync,
    D: AgentService + Sync,
    C: Clone + Send + Sync + 'static,
{
    // Every connection holds a receiver: the sender's `closed` completes when all have ended.
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    {
        let mut connections = std::pin::pin!(connections);
        while let Some((io, calls)) = connections.next().await {
            let calls = OwnCalls(calls);
            let settings = Arc::clone(&settings);
            // Held until the connection ends (not only until its shutdown begins).
            let running = stopped.clone();
            tokio::spawn(async move {
                let mut stopped = running.clone();
                let shutdown = async move {
                    // Never an error: the sender waits for this receiver's end.
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                let ended = skyconf_h2::serve_connection(io, calls, settings, shutdown).await;
                drop(running);
                if let Err(error) = ended {
                    // Debug only: resets, pings unanswered and cuts at shutdown are routine.
                    tracing::debug!(%error, "An agent connection ended with an error.");
                }
            });
        }
    }
    let _ = stopping.send(true);
    drop(stopped);
    stopping.closed().await;
}

#[cfg(test)]
mod tests {
    use super::OwnCalls;
    use http::{Request, Response};
    use std::convert::Infallible;
    use tonic::body::Body;

    type Answering =
        tower::util::ServiceFn<fn(Request<Body>) -> std::future::Ready<Result<Response<Body>, Infallible>>>;

    /// What an agent connection's state and each of its open calls' stream keep in the connection
    /// task, beside the socket and the calls' own futures: bounded here so that it stays small.
    #[test]
    fn an_agent_connections_state_and_its_streams_are_small() {
        let (connection, stream) =
            skyconf_h2::state_sizes::<OwnCalls<Answering, Answering, crate::socket::AgentConnection>>();
        eprintln!("connection state: {connection} B, per open stream: {stream} B");
        assert!(connection <= 512, "{connection} B");
        assert!(stream <= 160, "{stream} B");
    }
}
