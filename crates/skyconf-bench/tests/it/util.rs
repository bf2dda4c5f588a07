//! What the test modules share: the `skyconf-bench` binary, and a skyconf server on a file store
//! that keeps serving while a test runs the binary ([`Served`]).

use std::path::Path;
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

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = self.runtime.block_on(server.stop());
        }
    }
}
