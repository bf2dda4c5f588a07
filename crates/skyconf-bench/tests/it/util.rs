//! What the test modules share: the `skyconf-bench` binary, and a skyconf server on a file store
//! that keeps serving while a test runs the binary ([`Served`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use skyconf_sources::file::FileSource;
use skyconf_testkit::server::{Server, loopback};

/// The `skyconf-bench` binary this package builds, as a command to add arguments to.
pub(crate) fn skyconf_bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_skyconf-bench"))
}

/// A skyconf server serving a file, on a runtime of its own (its workers serve while the test's
/// thread waits for a `skyconf-bench` process); stopped on drop.
pub(crate) struct Served {
    /// `HOST:PORT` of the gRPC port.
    pub(crate) addr: String,
    server: Option<Server>,
    runtime: tokio::runtime::Runtime,
}

impl Served {
    /// Serves `file` (re-read when it changes) on ephemeral loopback ports.
    pub(crate) fn file(file: &Path) -> Self {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let server = runtime.block_on(Server::start(FileSource::new(file), loopback()));
        Self { addr: server.grpc_addr.to_string(), server: Some(server), runtime }
    }
}

/// A synthetic document of `services` services × `keys` keys (`skyconf-bench document`) in a
/// temporary directory, and a server serving it: the directory, the file and the server.
pub(crate) fn served_document(services: &str, keys: &str) -> (tempfile::TempDir, PathBuf, Served) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent-configurations.yaml");
    let document = skyconf_bench().args(["document", "--services", services, "--keys", keys]).output().unwrap();
    assert!(document.status.success());
    std::fs::write(&file, &document.stdout).unwrap();
    let served = Served::file(&file);
    (dir, file, served)
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = self.runtime.block_on(server.stop());
        }
    }
}
