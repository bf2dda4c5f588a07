//! The last refused document, with its text, for operators.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The most of a refused document kept for operators to look at.
pub(super) const MAX_REJECTED_TEXT_BYTES: usize = 1024 * 1024;

/// A document that was refused, with its text, for operators.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RejectedDocument {
    /// Where it came from.
    pub origin: String,
    /// Why, with line and column.
    pub error: String,
    /// When (Unix milliseconds).
    pub at_ms: u64,
    /// Its text (the first MiB).
    pub text: String,
    /// Whether the text was cut.
    pub truncated: bool,
}

impl ReleaseLog {
    /// Keeps a refused document for operators.
    pub fn record_rejection(&self, origin: &str, error: &str, text: &str) {
        let mut end = text.len().min(MAX_REJECTED_TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.lock().last_rejection = Some(RejectedDocument {
            origin: origin.to_owned(),
            error: error.to_owned(),
            at_ms: now_ms(),
            text: text[..end].to_owned(),
            truncated: end < text.len(),
        });
    }

    /// Forgets the refused document once a good one is accepted.
    pub fn clear_rejection(&self) {
        self.lock().last_rejection = None;
    }

    /// The last refused document, unless a good one came after it.
    pub fn last_rejection(&self) -> Option<RejectedDocument> {
        self.lock().last_rejection.clone()
    }
}
