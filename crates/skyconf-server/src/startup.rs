//! What the server starts serving: the store's document when it can be read and accepted, else
//! the persisted last good copy, else nothing ("no change" to every agent) — or a refusal to
//! start where a missing document is an operator's mistake (a local file).
//!
//! The outcome is logged here, in one line that says where the first table came from and, when
//! it is not the store's, why (usability finding 7: one cause, one line, and a true one). The
//! store task, the replicas and the rollout driver do not log the same outage again.

use skyconf_core::AgentConfigurations;
use skyconf_core::store::StoreContent;
use skyconf_sources::{Source, SourceError};

use crate::persist::LastGood;
use crate::served::Rejection;
use crate::{ServeConfig, ServerError};

/// Where the first served table comes from.
#[derive(Debug)]
pub(crate) enum Start {
    /// The store answered and its document was accepted.
    Loaded {
        /// The table and the text it was read from (none: the key is absent).
        table: AgentConfigurations,
        text: Option<String>,
        content: StoreContent,
    },
    /// The persisted last good copy, because the store's document was refused (`rejection`) or
    /// the store did not answer (`failure`; the content is then the persisted one, stale).
    Persisted {
        table: AgentConfigurations,
        text: Option<String>,
        content: StoreContent,
        rejection: Option<Rejection>,
        failure: Option<String>,
    },
    /// Nothing to serve: agents get "no change" until the store delivers a good document.
    Waiting { content: StoreContent, rejection: Option<Rejection>, failure: Option<String> },
}

impl Start {
    /// The table served first, if any, and the text it was read from.
    pub(crate) fn table(&self) -> Option<(&AgentConfigurations, Option<&str>)> {
        match self {
            Self::Loaded { table, text, .. } | Self::Persisted { table, text, .. } => Some((table, text.as_deref())),
            Self::Waiting { .. } => None,
        }
    }

    /// Whether the store answered at start-up.
    pub(crate) fn connected(&self) -> bool {
        match self {
            Self::Loaded { .. } => true,
            Self::Persisted { failure, .. } | Self::Waiting { failure, .. } => failure.is_none(),
        }
    }

    /// Whether the store's content is the persisted copy rather than the store's own.
    pub(crate) fn stale(&self) -> bool {
        matches!(self, Self::Persisted { failure: Some(_), .. })
    }

    /// Splits into the store content, the refused document and the store failure.
    pub(crate) fn into_parts(self) -> (StoreContent, Option<Rejection>, Option<String>) {
        match self {
            Self::Loaded { content, .. } => (content, None, None),
            Self::Persisted { content, rejection, failure, .. } | Self::Waiting { content, rejection, failure } => {
                (content, rejection, failure)
            }
        }
    }
}

/// Reads the store once, falling back to the persisted copy.
pub(crate) async fn initial_state<S: Source>(
    source: &S,
    config: &ServeConfig,
    last_good: Option<&LastGood>,
) -> Result<Start, ServerError> {
    let store = source.describe();
    let persisted = last_good.and_then(|copy| match copy.load() {
        Ok(p) => p,
        Err(error) => {
            tracing::warn!(%error, "Ignoring the persisted configuration.");
            None
        }
    });
    // The persisted copy, with the store's content when the store answered; the caller logs why.
    let from_persisted = |answered: Option<StoreContent>, rejection: Option<Rejection>, failure: Option<String>| {
        let p = persisted.as_ref()?;
        let text = p.content.agent_configurations().map(str::to_owned);
        let table = skyconf_core::read(text.as_deref().unwrap_or("")).ok()?;
        let content = answered.unwrap_or_else(|| p.content.clone());
        Some((Start::Persisted { table, text, content, rejection, failure }, p.saved_at))
    };
    let loaded = tokio::time::timeout(config.initial_load_timeout, source.load(&config.keys)).await;
    let failure = match loaded {
        Ok(Ok(content)) => {
            let text = content.agent_configurations().map(str::to_owned);
            return match skyconf_core::read(text.as_deref().unwrap_or("")) {
                Ok(table) => {
                    tracing::info!(store = %store, services = table.len(), "Loaded agent configurations.");
                    Ok(Start::Loaded { table, text, content })
                }
                Err(error) => {
                    let located = crate::served::located(&store, &error);
                    let rejection = Rejection::new(store.clone(), located.clone(), text.as_deref());
                    if let Some((start, saved_at)) =
                        from_persisted(Some(content.clone()), Some(rejection.clone()), None)
                    {
                        let services = start.table().map_or(0, |(table, _)| table.len());
                        tracing::error!(store = %store, error = %located, saved_at, services, "Refused the store's agent configurations; serving the persisted last good configuration until a good document arrives.");
                        return Ok(start);
                    }
                    if config.require_initial_load {
                        return Err(ServerError::Document { origin: store, error });
                    }
                    tracing::error!(store = %store, error = %located, "Refused the store's agent configurations and nothing is persisted; answering \"no change\" until a good document arrives.");
                    Ok(Start::Waiting { content, rejection: Some(rejection), failure: None })
                }
            };
        }
        Ok(Err(error)) => error,
        Err(_) => {
            if persisted.is_none() && config.require_initial_load {
                return Err(ServerError::SourceTimeout { store, timeout: config.initial_load_timeout });
            }
            SourceError::Unavailable {
                store: store.clone(),
                message: format!("no answer within {:?}", config.initial_load_timeout),
            }
        }
    };
    if let Some((start, saved_at)) = from_persisted(None, None, Some(failure.to_string())) {
        let services = start.table().map_or(0, |(table, _)| table.len());
        tracing::warn!(store = %store, error = %failure, saved_at, services, "The store is unreachable; serving the persisted last good configuration until it is back.");
        return Ok(start);
    }
    if config.require_initial_load {
        return Err(failure.into());
    }
    tracing::error!(store = %store, error = %failure, "The store is unreachable and nothing is persisted; answering \"no change\" until it is back.");
    Ok(Start::Waiting { content: StoreContent::default(), rejection: None, failure: Some(failure.to_string()) })
}
