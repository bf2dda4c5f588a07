//! [`Opamp`]: the service. It is composable, not a closed binary:
//!
//! - [`Opamp::router`] is an axum [`Router`] serving both transports on one path (POST with
//!   `application/x-protobuf`: plain HTTP; GET with `Upgrade: websocket`: WebSocket). A host
//!   adds its own layers (bearer tokens answered 401, as the spec's authentication section
//!   has it) and serves it where it likes.
//! - [`Opamp::serve`] is an accept loop over any [`axum::serve::Listener`] — a TCP listener, or
//!   the host's TLS or capped listener — with HTTP/1.1 and HTTP/2, WebSocket upgrades, a
//!   header-read timeout, a connection cap and a graceful stop. It also runs
//!   [`Opamp::expire_idle`], which a host serving [`Opamp::router`] itself runs on its own.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::Authorize;
use crate::backend::{Backend, Disconnect, Transport};
use crate::limits::Limits;
use crate::session::{Answer, Protocol, Settings};
use crate::wire;

/// The server's settings. [`Default`] is the spec's defaults with held polls allowed.
#[derive(Debug, Clone)]
pub struct OpampConfig {
    /// The path of both transports.
    pub path: String,
    /// The bounds.
    pub limits: Limits,
    /// The heartbeat interval told to agents that report heartbeats (`None`: say nothing;
    /// agents keep their own, 30 s by default).
    pub heartbeat_interval: Option<Duration>,
    /// The longest hold granted to an HTTP client that asks for one (`None`: never hold).
    pub max_hold: Option<Duration>,
    /// How long a throttled agent is told to wait (the spec recommends at least 30 s).
    pub retry_after: Duration,
    /// How long an HTTP agent may stay silent before its session ends; a WebSocket silent for
    /// as long is closed.
    pub idle_timeout: Duration,
    /// The host's check of every request's credentials ([`crate::auth`]); `None`: none.
    pub authorize: Option<Arc<dyn Authorize>>,
}

impl Default for OpampConfig {
    fn default() -> Self {
        Self {
            path: crate::DEFAULT_PATH.to_owned(),
            limits: Limits::default(),
            heartbeat_interval: Some(Duration::from_secs(30)),
            max_hold: Some(Duration::from_secs(60)),
            retry_after: Duration::from_secs(30),
            // Three missed heartbeats at the spec's default interval.
            idle_timeout: Duration::from_secs(90),
            authorize: None,
        }
    }
}

/// Counters and gauges of the server (for the host's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Agents with a session.
    pub sessions: usize,
    /// Open WebSocket connections.
    pub websockets: usize,
    /// HTTP polls held now.
    pub held_polls: usize,
    /// Messages answered (both transports).
    pub messages: u64,
    /// Messages answered `BAD_REQUEST` or refused as malformed (HTTP 4xx).
    pub bad_requests: u64,
    /// Requests and messages throttled (HTTP 429/503, `UNAVAILABLE`).
    pub throttled: u64,
    /// Remote configurations sent by the server's initiative (held-poll answers, WebSocket pushes).
    pub pushes: u64,
    /// Requests and WebSocket upgrades refused (401) by [`OpampConfig::authorize`].
    pub unauthorized: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) messages: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) pushes: AtomicU64,
    pub(crate) unauthorized: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: OpampConfig,
    pub(crate) protocol: Arc<Protocol>,
    pub(crate) inflight: Arc<Semaphore>,
    pub(crate) held: Arc<Semaphore>,
    pub(crate) websockets: Arc<Semaphore>,
    pub(crate) next_connection: AtomicU64,
    pub(crate) counters: Counters,
    /// Cancelled when the server stops: held polls are answered, WebSockets closed.
    pub(crate) stop: CancellationToken,
}

/// The OpAMP service. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Opamp {
    pub(crate) inner: Arc<Inner>,
}

impl Opamp {
    /// A server of `config`, asking `backend` for configurations.
    pub fn new(config: OpampConfig, backend: Arc<dyn Backend>) -> Self {
        let limits = config.limits;
        let settings = Settings {
            heartbeat: config.heartbeat_interval,
            retry_after: config.retry_after,
            max_sessions: limits.max_sessions,
            idle_timeout: config.idle_timeout,
        };
        Self {
            inner: Arc::new(Inner {
                protocol: Arc::new(Protocol::new(backend, settings)),
                inflight: Arc::new(Semaphore::new(limits.max_inflight_requests.max(1))),
                held: Arc::new(Semaphore::new(limits.max_held_polls)),
                websockets: Arc::new(Semaphore::new(limits.max_websockets)),
                next_connection: AtomicU64::new(1),
                counters: Counters::default(),
                stop: CancellationToken::new(),
                config,
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &OpampConfig {
        &self.inner.config
    }

    /// Both transports on [`OpampConfig::path`], behind [`OpampConfig::authorize`] when set.
    pub fn router(&self) -> Router {
        let routes = Router::new()
            .route(&self.inner.config.path, post(crate::http::post).get(crate::ws::upgrade))
            .with_state(self.clone());
        match &self.inner.config.authorize {
            None => routes,
            Some(check) => routes.route_layer(axum::middleware::from_fn_with_state(
                (self.clone(), Arc::clone(check)),
                crate::auth::check,
            )),
        }
    }

    /// Answers one message as the plain HTTP transport does, without I/O (no hold). For hosts
    /// that carry OpAMP over a transport of their own, and for fuzzing.
    pub fn answer(&self, message: &wire::AgentToServer) -> Answer {
        Counters::add(&self.inner.counters.messages);
        self.inner.protocol.answer(message, Transport::Http, None)
    }

    /// The counters and gauges.
    pub fn stats(&self) -> Stats {
        let limits = &self.inner.config.limits;
        let c = &self.inner.counters;
        Stats {
            sessions: self.inner.protocol.len(),
            websockets: limits.max_websockets - self.inner.websockets.available_permits(),
            held_polls: limits.max_held_polls - self.inner.held.available_permits(),
            messages: c.messages.load(Ordering::Relaxed),
            bad_requests: c.bad_requests.load(Ordering::Relaxed),
            throttled: c.throttled.load(Ordering::Relaxed),
            pushes: c.pushes.load(Ordering::Relaxed),
            unauthorized: c.unauthorized.load(Ordering::Relaxed),
        }
    }

    /// Ends HTTP sessions idle past [`OpampConfig::idle_timeout`], every quarter of it (within
    /// 1 s and 30 s), until [`Self::shutdown`]. [`Self::serve`] runs it.
    pub fn expire_idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        async move {
            let period = (inner.config.idle_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = inner.stop.cancelled() => return,
                    _ = tick.tick() => { inner.protocol.expire(tokio::time::Instant::now()); }
                }
            }
        }
    }

    /// Stops: held polls are answered at once, WebSocket connections are closed (1001), and
    /// every session ends ([`Disconnect::Shutdown`]).
    pub fn shutdown(&self) {
        self.inner.stop.cancel();
        self.inner.protocol.end_all(Disconnect::Shutdown);
    }

    /// Serves [`Self::router`] on `listener` until `stop` completes, then stops
    /// ([`Self::shutdown`]) and waits for the connections to finish what they are answering.
    /// At most [`Limits::max_connections`] connections are open at once; an HTTP/1 request's
    /// header block must arrive within [`Limits::header_timeout`].
    pub async fn serve<L>(&self, mut listener: L, stop: impl Future<Output = ()> + Send) -> std::io::Result<()>
    where
        L: axum::serve::Listener,
    {
        use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
        let limits = self.inner.config.limits;
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let expiry = tokio::spawn(self.expire_idle());
        let app = self.router();
        let mut stop = std::pin::pin!(stop);
        loop {
            let permit = tokio::select! {
                permit = Arc::clone(&slots).acquire_owned() => permit.expect("the semaphore is never closed"),
                () = &mut stop => break,
            };
            let (io, _peer) = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut stop => break,
            };
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            let connection =
                graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned());
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    // Debug only: timeouts and resets by clients are routine.
                    tracing::debug!(%error, "An OpAMP connection ended with an error.");
                }
                drop(permit);
            });
        }
        drop(listener);
        self.shutdown();
        graceful.shutdown().await;
        expiry.abort();
        Ok(())
    }
}
