//! `skyconf serve`: loads the agent-configurations file, serves it to agents over gRPC and keeps
//! it current as the file changes. Stops gracefully on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use skyconf_server::{CdsOptions, ServeConfig};
use skyconf_sources::Limits;
use skyconf_sources::file::FileSource;

/// Arguments of `skyconf serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent-configurations YAML file (`configurations: {service: {key: value}}`), or a
    /// directory holding one file per configuration key (a mounted ConfigMap).
    #[arg(long, env = "SKYCONF_FILE")]
    file: PathBuf,
    /// Where agents connect (gRPC; the OAP's default port is 11800).
    #[arg(long, default_value = "0.0.0.0:11800", env = "SKYCONF_GRPC_ADDR")]
    grpc_addr: SocketAddr,
    /// Where health checks and operators connect (HTTP).
    #[arg(long, default_value = "0.0.0.0:12800", env = "SKYCONF_ADMIN_ADDR")]
    admin_addr: SocketAddr,
    /// Always send the whole configuration, even to agents that hold it (the OAP's `disableMessageDigest`).
    #[arg(long, env = "SKYCONF_DISABLE_MESSAGE_DIGEST")]
    disable_message_digest: bool,
    /// The largest document accepted, in bytes.
    #[arg(long, default_value_t = Limits::default().max_value_bytes, env = "SKYCONF_MAX_DOCUMENT_BYTES")]
    max_document_bytes: u64,
    /// Where to persist the last good configuration, served at start-up when the store is unreachable.
    #[arg(long, env = "SKYCONF_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = ServeConfig {
        grpc_addr: args.grpc_addr,
        admin_addr: args.admin_addr,
        cds: CdsOptions { disable_message_digest: args.disable_message_digest },
        data_dir: args.data_dir,
        ..ServeConfig::default()
    };
    let source = FileSource::open(args.file).with_limits(Limits { max_value_bytes: args.max_document_bytes });
    super::runtime()?.block_on(async {
        let running = skyconf_server::start_with(source, config).await?;
        let stop = running.shutdown_token();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("Shutting down.");
            stop.cancel();
        });
        running.wait().await?;
        Ok(ExitCode::SUCCESS)
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(error) => {
                tracing::warn!(%error, "Cannot listen for SIGTERM; only Ctrl-C stops the server.");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
