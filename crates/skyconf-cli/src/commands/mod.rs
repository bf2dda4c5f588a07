//! One module per subcommand.

pub(crate) mod agent;
pub(crate) mod bench;
pub(crate) mod digest;
pub(crate) mod fetch;
pub(crate) mod serve;
pub(crate) mod validate;

use std::path::Path;

use anyhow::Context as _;
use skyconf_core::AgentConfigurations;

/// Reads and parses a document file; the error names the file, line and column.
pub(crate) fn read_document(path: &Path) -> anyhow::Result<Result<AgentConfigurations, skyconf_core::ReadError>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(skyconf_core::read(&text))
}

/// Builds the async runtime for commands that do I/O.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}
