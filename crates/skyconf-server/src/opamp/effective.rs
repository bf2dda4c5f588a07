//! The effective configuration an OpAMP agent reports (`EffectiveConfig`), kept with its contents
//! so the API and the page show what the agent runs, not only its hash.
//!
//! Bounded twice: an agent's files together keep at most [`MAX_EFFECTIVE_BYTES`] of body (a body
//! past it is cut at a character boundary, and the files after it are listed without one, each
//! marked `truncated`), and all agents' kept configurations together at most
//! [`MAX_EFFECTIVE_TOTAL_BYTES`]: past it a new report is kept as its hash only (`kept: false`)
//! until others are released. A configuration is released with its agent's row, or when the
//! agent reports another one ([`Kept`]'s `Drop`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use skyconf_opamp::wire;
use utoipa::ToSchema;

/// The most body an agent's kept effective configuration holds, its files together.
pub(crate) const MAX_EFFECTIVE_BYTES: usize = 16 * 1024;

/// The most body every agent's kept effective configuration holds together (4096 agents at
/// [`MAX_EFFECTIVE_BYTES`]).
pub(crate) const MAX_EFFECTIVE_TOTAL_BYTES: usize = 64 << 20;

/// One file of an effective configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct EffectiveFile {
    /// Its name in the agent's `config_map`.
    pub(crate) name: String,
    /// Its content type, as the agent reported it.
    pub(crate) content_type: String,
    /// Its body as text (bytes that are not UTF-8 are replaced), cut where `truncated`.
    pub(crate) body: String,
    /// Whether its body is cut (the bound of 16 KiB per agent was reached).
    pub(crate) truncated: bool,
}

/// An agent's effective configuration, as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct EffectiveConfig {
    /// Its files, by name.
    pub(crate) files: Vec<EffectiveFile>,
    /// Whether any body is cut.
    pub(crate) truncated: bool,
}

impl EffectiveConfig {
    /// `reported`'s files by name, their bodies together cut to `limit` bytes.
    pub(crate) fn of(reported: &wire::EffectiveConfig, limit: usize) -> Self {
        let mut names: Vec<(&String, &wire::AgentConfigFile)> =
            reported.config_map.iter().flat_map(|m| &m.config_map).collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let mut room = limit;
        let files: Vec<EffectiveFile> = names
            .into_iter()
            .map(|(name, file)| {
                let text = String::from_utf8_lossy(&file.body);
                let cut = crate::text::floor_char_boundary(&text, room);
                room -= cut;
                EffectiveFile {
                    name: name.clone(),
                    content_type: file.content_type.clone(),
                    body: text[..cut].to_owned(),
                    truncated: cut < text.len(),
                }
            })
            .collect();
        let truncated = files.iter().any(|f| f.truncated);
        Self { files, truncated }
    }

    /// The bytes it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.files.iter().map(|f| f.name.len() + f.content_type.len() + f.body.len()).sum()
    }
}

/// What every agent's kept configuration takes together. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    used: Arc<AtomicUsize>,
    limit: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(MAX_EFFECTIVE_TOTAL_BYTES)
    }
}

impl Budget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self { used: Arc::default(), limit }
    }

    /// Keeps `config` when it fits in the budget with the others; `None` when it does not.
    pub(crate) fn keep(&self, config: EffectiveConfig) -> Option<Kept> {
        let bytes = config.bytes();
        let taken = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            (used + bytes <= self.limit).then_some(used + bytes)
        });
        taken.ok().map(|_| Kept { config, bytes, budget: self.clone() })
    }

    /// The bytes kept now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// A kept configuration; it gives its bytes back to the budget when dropped.
#[derive(Debug)]
pub(crate) struct Kept {
    /// The configuration.
    pub(crate) config: EffectiveConfig,
    bytes: usize,
    budget: Budget,
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn reported(files: &[(&str, &str)]) -> wire::EffectiveConfig {
        wire::EffectiveConfig {
            config_map: Some(wire::AgentConfigMap {
                config_map: files
                    .iter()
                    .map(|(name, body)| {
                        let file = wire::AgentConfigFile {
                            body: Bytes::copy_from_slice(body.as_bytes()),
                            content_type: "text/yaml".into(),
                        };
                        ((*name).to_owned(), file)
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn a_configuration_is_cut_at_its_bound_on_a_character_and_marked() {
        let whole = EffectiveConfig::of(&reported(&[("b.yaml", "b: 2"), ("a.yaml", "a: 1")]), 1024);
        assert_eq!(whole.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["a.yaml", "b.yaml"]);
        assert!(!whole.truncated && whole.files[1].body == "b: 2");

        // "é" is two bytes: a cut inside it falls before it, and the next file gets the rest.
        let cut = EffectiveConfig::of(&reported(&[("a.yaml", "a: é"), ("b.yaml", "b: 2")]), 4);
        assert_eq!((cut.files[0].body.as_str(), cut.files[0].truncated), ("a: ", true));
        assert_eq!((cut.files[1].body.as_str(), cut.files[1].truncated), ("b", true));
        assert!(cut.truncated);
    }

    #[test]
    fn the_budget_keeps_what_fits_and_gets_it_back_when_released() {
        let big = "x".repeat(MAX_EFFECTIVE_BYTES);
        let one = || EffectiveConfig::of(&reported(&[("a", &big)]), MAX_EFFECTIVE_BYTES);
        let budget = Budget::new(4 * one().bytes() + 10);
        let kept: Vec<Kept> = std::iter::from_fn(|| budget.keep(one())).take(100).collect();
        assert_eq!(kept.len(), 4);
        assert!(budget.keep(one()).is_none(), "past the budget: the hash only");
        drop(kept);
        assert_eq!(budget.used(), 0);
        assert!(budget.keep(one()).is_some());
    }
}
