//! Why the server could not start, or stopped: every cause in one type, the one `start_with`
//! and `Running::wait` return. Each part's own error (the store's, a security setting's, the
//! gateway's) is carried whole.

use std::net::SocketAddr;
use std::time::Duration;

use skyconf_sources::SourceError;

use crate::security::SecurityError;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be read at start-up and nothing was persisted.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The store did not answer in time at start-up and nothing was persisted.
    #[error("{store} did not answer within {timeout:?}")]
    SourceTimeout {
        /// The store.
        store: String,
        /// The limit.
        timeout: Duration,
    },
    /// The document at start-up was refused and there is no last good table to fall back to:
    /// `FILE:LINE:COLUMN: message` for a file ([`crate::served::located`]).
    #[error("{}", located_at_start(.origin, .error))]
    Document {
        /// Where the document came from.
        origin: String,
        /// Why it was refused (in the message, not also its `source()`).
        error: skyconf_core::ReadError,
    },
    /// A listening socket could not be opened.
    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause, in the message (so logs of the error alone keep it); not also its
        /// `source()`, which would print it twice in a chain.
        cause: std::io::Error,
    },
    /// The admin server failed.
    #[error("admin server: {0}")]
    Admin(std::io::Error),
    /// The OpAMP port failed.
    #[error("OpAMP server: {0}")]
    Opamp(std::io::Error),
    /// A token file, certificate or key cannot be used.
    #[error(transparent)]
    Security(#[from] SecurityError),
    /// The gateway's settings cannot be used.
    #[error(transparent)]
    Gateway(#[from] skyconf_gateway::GatewayError),
}

/// A document refused at start-up: where it is and why, with the store's name when it is no file.
fn located_at_start(origin: &str, error: &skyconf_core::ReadError) -> String {
    let located = crate::served::located(origin, error);
    if located == error.to_string() { format!("{origin}: {located}") } else { located }
}
