//! The one way skyconf opens and keeps a ZooKeeper session ([`SessionSlot`]), for the watch and
//! writes of a [`super::ZookeeperSource`] and for skyconf's own records alike (each on a session of
//! its own); a request within a time limit ([`timed`]) and what its failure means ([`Failure`]).

use std::future::Future;
use std::time::Duration;

use tokio::sync::Mutex;
use zookeeper_client as zk;

use crate::SourceError;

/// Why a request failed: ZooKeeper's answer, or none in time.
#[derive(Debug)]
pub(super) enum Failure {
    Zk(zk::Error),
    Timeout(Duration),
}

impl Failure {
    /// The failure as `store`'s error: refused for what credentials or ACLs decide, unavailable
    /// otherwise.
    pub(super) fn into_error(self, store: String) -> SourceError {
        match self {
            Self::Zk(error @ (zk::Error::NoAuth | zk::Error::AuthFailed | zk::Error::InvalidAcl)) => {
                SourceError::Refused { store, message: error.to_string() }
            }
            Self::Zk(error) => SourceError::Unavailable { store, message: error.to_string() },
            Self::Timeout(limit) => SourceError::Unavailable { store, message: format!("no answer within {limit:?}") },
        }
    }
}

/// Runs one request within `limit`.
pub(super) async fn timed<T>(
    limit: Duration,
    request: impl Future<Output = Result<T, zk::Error>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(limit, request).await {
        Ok(result) => result.map_err(Failure::Zk),
        Err(_) => Err(Failure::Timeout(limit)),
    }
}

/// Where to connect and how: the connect string and the session's timeouts.
#[derive(Debug, Clone)]
pub(super) struct Connect {
    /// `host:port,...[/chroot]`.
    pub(super) connect: String,
    /// The session timeout asked of the server.
    pub(super) session_timeout: Duration,
    /// How long connecting, like any request, may take.
    pub(super) request_timeout: Duration,
}

/// One session, opened on first use and again once it has ended; callers share it. A tokio mutex,
/// held while connecting, so that concurrent callers share one new session.
#[derive(Debug, Default)]
pub(super) struct SessionSlot(Mutex<Option<zk::Client>>);

impl SessionSlot {
    /// The session, opened with `how` if there is none or it has ended; `store` and `purpose`
    /// name it in the log line that says it was opened.
    pub(super) async fn client(
        &self,
        how: &Connect,
        store: &str,
        purpose: &'static str,
    ) -> Result<zk::Client, Failure> {
        let mut slot = self.0.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.state().is_terminated()) {
            return Ok(client.clone());
        }
        let connecting =
            zk::Client::connector().with_session_timeout(how.session_timeout).with_fail_eagerly().connect(&how.connect);
        let client = timed(how.request_timeout, connecting).await?;
        tracing::debug!(store, purpose, session = %client.session_id(), timeout = ?client.session_timeout(), "Opened a ZooKeeper session.");
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Drops the session this slot holds; when no caller holds it any more, it closes.
    pub(super) async fn close(&self) {
        self.0.lock().await.take();
    }

    /// Drops the session if it is `client`'s, so that the next caller opens a new one.
    pub(super) async fn forget(&self, client: &zk::Client) {
        let mut slot = self.0.lock().await;
        if slot.as_ref().is_some_and(|c| c.session_id() == client.session_id()) {
            *slot = None;
        }
    }
}
