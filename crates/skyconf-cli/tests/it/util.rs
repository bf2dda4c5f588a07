//! What every test module of this binary needs: the `skyconf` binary and the repository root.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

/// The `skyconf` binary this package builds, as a command to add arguments to.
pub(crate) fn skyconf() -> Command {
    Command::cargo_bin("skyconf").unwrap()
}

/// The repository's root (examples/, tests/interop/ and tests/web/ are there).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}
