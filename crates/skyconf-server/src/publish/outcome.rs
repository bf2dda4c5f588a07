//! What a publication comes to: [`Published`] when the store took it (or nothing needed
//! writing), [`PublishError`] when it did not. Neither knows HTTP: the admin API maps them to
//! answers, the rollout driver and any other writer read them directly.

use std::sync::Arc;
use std::time::Duration;

use skyconf_core::diff::ServiceChange;
use skyconf_core::warnings::Warning;
use skyconf_sources::SourceError;

use crate::releases::{Durability, ReleaseSummary};

/// A document the store held that the reader refused, replaced by a write built on the served
/// table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ReplacedRefused {
    /// Where it came from (a path, a store key).
    pub origin: String,
    /// Why it was refused, with line and column.
    pub error: String,
    /// The store's revision of it, where the store has revisions.
    pub revision: Option<u64>,
}

/// A publication that was checked and, unless a dry run or unchanged, written.
#[derive(Debug)]
pub enum Published {
    /// A dry run: what would change; nothing written.
    DryRun {
        /// Per service, digest before and after.
        changes: Vec<ServiceChange>,
        /// Per `opamp:` group, the files that would change.
        opamp_changes: Vec<skyconf_core::opamp_diff::GroupChange>,
        /// The document that would be written (`None`: the key would be deleted).
        document: Option<String>,
        /// Its hash.
        document_sha256: Option<String>,
        /// The newest release it would replace.
        base_release: Option<u64>,
        /// The reader's warnings about it.
        warnings: Vec<Warning>,
    },
    /// The document is the one served already, and the store holds no refused document;
    /// nothing written.
    Unchanged {
        /// No service changed (an empty list, or only a reordering).
        changes: Vec<ServiceChange>,
        /// The newest release.
        release: Option<Arc<ReleaseSummary>>,
        /// The served version.
        version: u64,
        /// The reader's warnings.
        warnings: Vec<Warning>,
    },
    /// Written and served (and durable as `durability` says).
    Served {
        /// What changed.
        changes: Vec<ServiceChange>,
        /// The release it became.
        release: Arc<ReleaseSummary>,
        /// Whether the release is on disk.
        durability: Durability,
        /// How long it took from the write to being served.
        served_after: Duration,
        /// The reader's warnings.
        warnings: Vec<Warning>,
        /// The refused document it replaced, if the store held one.
        replaced_refused: Option<ReplacedRefused>,
    },
    /// The store took it, but it was not served within the wait.
    Accepted {
        /// How long was waited.
        waited: Duration,
        /// What changed.
        changes: Vec<ServiceChange>,
        /// The reader's warnings.
        warnings: Vec<Warning>,
        /// The refused document it replaced, if the store held one.
        replaced_refused: Option<ReplacedRefused>,
    },
}

/// Why a publication was not made. Nothing was written, unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The document was refused by the reader.
    #[error("the document was refused: {0}")]
    Refused(#[from] skyconf_core::ReadError),
    /// The document is larger than the limit.
    #[error("{0}")]
    TooLarge(String),
    /// A release, service or held change named by the caller does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The configuration is not as the caller said it saw it (`If-Match`), or there is no store
    /// to write to, or nothing is held to decide on.
    #[error("{0}")]
    Conflict(String),
    /// The store's key moved under the write (a compare-and-swap failed).
    #[error("{0}")]
    StoreMoved(String),
    /// The store refused or could not make the write.
    #[error(transparent)]
    Store(SourceError),
    /// The store took the document, but it was not served (or recorded) as expected.
    #[error("{0}")]
    NotServed(String),
    /// The server is shutting down, or a release file cannot be read.
    #[error("{0}")]
    Unavailable(String),
    /// A bug: a task failed.
    #[error("{0}")]
    Internal(String),
}

impl From<SourceError> for PublishError {
    fn from(error: SourceError) -> Self {
        match error {
            SourceError::Conflict { .. } => {
                Self::StoreMoved(format!("the store changed under this write; read it again ({error})"))
            }
            other => Self::Store(other),
        }
    }
}

/// What became of a held change an operator decided on.
#[derive(Debug)]
pub enum HeldDecided {
    /// Installed: the served version, services and the newest release.
    Confirmed {
        /// The served version.
        version: u64,
        /// How many services are served.
        services: usize,
        /// The newest release.
        release: Option<Arc<ReleaseSummary>>,
    },
    /// Dropped: the last good table is still served.
    Discarded {
        /// The served version.
        version: u64,
        /// How many services are served.
        services: usize,
    },
}
