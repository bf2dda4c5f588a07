//! What the test modules of this binary share: the `skyconf` binary, the repository root, and
//! whether the independent grpcio client can run.

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

/// Whether python3 with grpcio and grpcio-tools (the independent client of
/// `tests/interop/cds_client.py`) is there; when not, says so, and fails instead when
/// `SKYCONF_REQUIRE_INTEROP` is set (`scripts/test.sh` installs them and sets it).
pub(crate) fn grpcio_available() -> bool {
    let has_grpcio =
        Command::new("python3").args(["-c", "import grpc, grpc_tools"]).status().is_ok_and(|s| s.success());
    if !has_grpcio {
        assert!(
            std::env::var_os("SKYCONF_REQUIRE_INTEROP").is_none(),
            "python3 with grpcio and grpcio-tools is required"
        );
        eprintln!("skipped: python3 with grpcio and grpcio-tools is not installed (pip install grpcio grpcio-tools)");
    }
    has_grpcio
}
