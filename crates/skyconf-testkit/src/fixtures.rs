//! Synthetic agent-configurations documents, for benchmarks and tests that need a document of a
//! given size (`skyconf_core::fixtures`, re-exported) or a series of distinct documents; and
//! [`temp_file`], a document on disk.

use std::path::PathBuf;

pub use skyconf_core::fixtures::{ENTRIES, document};
use tempfile::TempDir;

/// A document serving `svc` two settings: vector V5 of the behaviour reference.
pub const V5_DOCUMENT: &str =
    "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n";

/// The digest [`V5_DOCUMENT`] serves `svc` (vector V5 of the behaviour reference).
pub const V5_DIGEST: &str = "b111ca16ffb52b5d97102ffea2926a76e06d124f01e3aa0e9e11bca6b606bb72d39ec9596d900520195cfaf88c98eff8695576af47fb1858a8f1e098ff35fb11";

/// The OAP's own group key (endpoint-name grouping by OpenAPI documents).
pub const OPENAPI_GROUP: &str = "core.default.endpoint-name-grouping-openapi";

/// The `n`th of a series of one-service documents: `svc` with `agent.sample_n_per_3_secs: n`;
/// each `n` has its own digest.
pub fn numbered(n: impl std::fmt::Display) -> String {
    format!("configurations:\n  svc:\n    agent.sample_n_per_3_secs: {n}\n")
}

/// A file `name` holding `text` in a fresh temporary directory: the directory (the file goes
/// with it when it is dropped) and the file's path.
pub fn temp_file(name: &str, text: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("the file is written");
    (dir, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_documents_differ_by_their_number() {
        assert_eq!(numbered(7), "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 7\n");
    }
}
