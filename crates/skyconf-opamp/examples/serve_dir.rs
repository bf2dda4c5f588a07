//! An OpAMP server that serves configuration files from a directory: the crate end to end,
//! without skyconf.
//!
//! ```text
//! DIR/default/<file>          every agent gets these files
//! DIR/<service.name>/<file>   agents whose service.name matches get these instead
//! ```
//!
//! The content type follows the extension (`.yaml`/`.yml`: `text/yaml`, `.json`:
//! `application/json`, anything else: `text/plain`). The directory is read again every second;
//! a group whose files changed is offered again (held polls and WebSocket connections get it at
//! once), a group whose files did not is not.
//!
//! ```text
//! cargo run -p skyconf-opamp --example serve_dir -- --dir ./opamp-configs
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use skyconf_opamp::{ConfigFile, MemoryBackend, Opamp, OpampConfig, RemoteConfig};

/// Serve OpAMP remote configurations from a directory.
#[derive(Debug, Parser)]
struct Args {
    /// Where to listen (plain HTTP and WebSocket on one port).
    #[arg(long, default_value = "127.0.0.1:4320")]
    listen: std::net::SocketAddr,
    /// The directory of configuration groups.
    #[arg(long)]
    dir: PathBuf,
    /// The heartbeat interval told to agents, in seconds (0: tell none).
    #[arg(long, default_value_t = 30)]
    heartbeat: u64,
    /// The longest hold granted to HTTP clients that ask (`OpAMP-Hold`), in seconds (0: none).
    #[arg(long, default_value_t = 60)]
    max_hold: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let args = Args::parse();
    let backend = MemoryBackend::new();
    let mut served = BTreeMap::new();
    reload(&args.dir, &backend, &mut served).with_context(|| format!("reading {}", args.dir.display()))?;

    let config = OpampConfig {
        heartbeat_interval: (args.heartbeat > 0).then(|| Duration::from_secs(args.heartbeat)),
        max_hold: (args.max_hold > 0).then(|| Duration::from_secs(args.max_hold)),
        ..OpampConfig::default()
    };
    let opamp = Opamp::new(config, Arc::new(backend.clone()));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, dir = %args.dir.display(), "Serving OpAMP on /v1/opamp.");

    let dir = args.dir.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if let Err(error) = reload(&dir, &backend, &mut served) {
                tracing::warn!(%error, "Cannot read the configuration directory; keeping what is served.");
            }
        }
    });
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    opamp.serve(listener, stop).await?;
    Ok(())
}

/// Reads every group and updates the backend where a group's configuration changed.
fn reload(dir: &Path, backend: &MemoryBackend, served: &mut BTreeMap<String, RemoteConfig>) -> anyhow::Result<()> {
    let mut groups = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            let name = entry.file_name().to_string_lossy().into_owned();
            groups.insert(name, read_group(&entry.path())?);
        }
    }
    for (group, config) in &groups {
        if served.get(group) == Some(config) {
            continue;
        }
        tracing::info!(group, config_hash = %config.hash(), files = config.files().len(), "Serving a configuration group.");
        if group == "default" {
            backend.set_default(Some(config.clone()));
        } else {
            backend.set_service(group, Some(config.clone()));
        }
    }
    for gone in served.keys().filter(|g| !groups.contains_key(*g)) {
        tracing::info!(group = gone, "A configuration group is gone.");
        if gone == "default" {
            backend.set_default(None);
        } else {
            backend.set_service(gone, None);
        }
    }
    *served = groups;
    Ok(())
}

fn read_group(dir: &Path) -> anyhow::Result<RemoteConfig> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let path = entry.path();
        let content_type = match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => "text/yaml",
            Some("json") => "application/json",
            _ => "text/plain",
        };
        let body = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        files.push((
            entry.file_name().to_string_lossy().into_owned(),
            ConfigFile { content_type: content_type.to_owned(), body: body.into() },
        ));
    }
    Ok(RemoteConfig::new(files))
}
