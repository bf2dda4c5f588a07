//! `skyconf agent`: runs the skyconf-agent library as a Rust service would, with a string watcher
//! per key, and prints one JSON line per event on stdout:
//! `{"key": "...", "event": "MODIFY"|"DELETE", "value": "..."|null, "uuid": "..."}`.
//!
//! Without `--key` it watches the keys a Java agent watches. Watchers start holding no value, so
//! a key the server never set produces no DELETE. Runs until SIGTERM or Ctrl-C.

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use skyconf_agent::watchers::{JAVA_KEYS, StringWatcher};
use skyconf_agent::{Agent, AgentOptions, AgentStatus, ChangeEvent, GrpcTransport, Registry, Watcher, WatcherError};
use tokio::sync::watch;
use tracing::Instrument as _;

use crate::args::{ClientArgs, parse_duration};

/// Arguments of `skyconf agent`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Output: one JSON line per change on stdout; log lines (a server that cannot be reached, an error
status) on stderr. A server that is down is retried with back-off, as an agent does.

Exit status:
  0  stopped by SIGTERM or Ctrl-C
  1  an argument is invalid (--authentication) or the runtime cannot start
  2  usage error")]
pub(crate) struct Args {
    #[command(flatten)]
    client: ClientArgs,
    /// Time between polls.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    interval: Duration,
    /// A key to watch (repeatable); default: the Java agent's keys.
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
    /// The instance name to report (`ManagementService`, on the polls' connection, as agents do),
    /// so targeting groups and rollout waves can reach this agent.
    #[arg(long)]
    instance: Option<String>,
    /// The `agent-version` metadata sent on every call, as the Java agent sends its version (shown
    /// per instance by the server).
    #[arg(long = "agent-version", value_name = "VERSION")]
    agent_version: Option<String>,
    /// A reported instance property, `KEY=VALUE` (repeatable; with --instance).
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = parse_property, requires = "instance")]
    properties: Vec<(String, String)>,
}

fn parse_property(text: &str) -> Result<(String, String), String> {
    text.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}

/// A string watcher that also prints each event it receives.
struct Printer<W> {
    inner: StringWatcher,
    out: Arc<Mutex<W>>,
}

impl<W: Write + Send + 'static> Watcher for Printer<W> {
    fn key(&self) -> &str {
        self.inner.key()
    }

    fn value(&self) -> Option<String> {
        self.inner.value()
    }

    fn notify(&self, event: &ChangeEvent<'_>) -> Result<(), WatcherError> {
        self.inner.notify(event)?;
        let line = json!({
            "key": event.key,
            "event": event.event.as_str(),
            "value": event.value,
            "uuid": event.uuid,
        });
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // A closed stdout is no reason to stop following the configuration.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        Ok(())
    }
}

/// Follows the configuration, printing events to `out`, until `stop` completes.
async fn follow<W: Write + Send + 'static>(
    args: Args,
    out: Arc<Mutex<W>>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let Args {
        client: ClientArgs { addr, service, timeout, authentication },
        interval,
        keys,
        instance,
        properties,
        agent_version,
    } = args;
    // As `GrpcTransport::lazy`, for every spelling of --addr (https:// included).
    let channel = addr.endpoint()?.connect_timeout(Duration::from_secs(10)).tcp_nodelay(true).connect_lazy();
    let mut transport = GrpcTransport::from_channel(channel);
    if let Some(token) = &authentication {
        transport = transport.with_authentication(token.expose()).context("invalid --authentication")?;
    }
    if let Some(version) = &agent_version {
        transport = transport.with_agent_version(version).context("invalid --agent-version")?;
    }
    let keys = if keys.is_empty() { JAVA_KEYS.iter().map(|k| (*k).to_owned()).collect() } else { keys };
    let registry = Registry::new();
    for key in keys {
        registry.register(Arc::new(Printer { inner: StringWatcher::new(key), out: Arc::clone(&out) }));
    }
    let mut options = AgentOptions::new(service).interval(interval).timeout(timeout);
    if let Some(instance) = instance {
        options = options.instance(instance);
    }
    for (key, value) in properties {
        options = options.property(key, value);
    }
    // Every line the agent logs names the server (a refused connection says where, once per
    // outage: the library logs the first failure of a run of them).
    let span = tracing::info_span!("agent", addr = %addr);
    let handle = span.in_scope(|| Agent::new(options, registry, transport).spawn());
    let hints = tokio::spawn(hint_token_refusals(handle.status(), authentication.is_some()).instrument(span));
    stop.await;
    hints.abort();
    handle.stop().await;
    Ok(())
}

/// Logs which flag sets the agent token when the server refuses it: once per run of refused
/// polls (the library logs each refusal; this says what to do about it).
async fn hint_token_refusals(mut status: watch::Receiver<AgentStatus>, sent: bool) {
    let mut hinted = false;
    while status.changed().await.is_ok() {
        let refused = match &status.borrow_and_update().last {
            Some(Err(error)) => crate::args::is_token_refusal(error.code()),
            Some(Ok(_)) => false,
            None => continue,
        };
        if refused && !hinted {
            tracing::warn!(hint = crate::args::token_hint(sent), "The server refused the agent token.");
        }
        hinted = refused;
    }
}

/// Follows the configuration on stdout until SIGTERM or Ctrl-C.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(follow(args, Arc::new(Mutex::new(std::io::stdout())), shutdown_signal()))?;
    Ok(ExitCode::SUCCESS)
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ServerAddr;
    use skyconf_server::{CdsOptions, CdsService, ServedTable};
    use tokio::sync::Notify;

    /// Hands every complete line written to it to the test.
    struct LineSink {
        line: Vec<u8>,
        lines: tokio::sync::mpsc::UnboundedSender<String>,
    }

    impl Write for LineSink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            for &b in buf {
                if b == b'\n' {
                    let _ = self.lines.send(String::from_utf8(std::mem::take(&mut self.line)).unwrap());
                } else {
                    self.line.push(b);
                }
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn prints_one_json_line_per_event() {
        let doc = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.other: x\n";
        let served = Arc::new(ServedTable::new(skyconf_core::read(doc).unwrap()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = CdsService::new(Arc::clone(&served), CdsOptions::default()).into_server();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );

        let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
        let out = Arc::new(Mutex::new(LineSink { line: Vec::new(), lines: lines_tx }));
        let done = Arc::new(Notify::new());
        let args = Args {
            client: ClientArgs {
                addr: ServerAddr::parse(&addr.to_string()).unwrap(),
                service: "svc".into(),
                timeout: Duration::from_secs(5),
                authentication: None,
            },
            interval: Duration::from_millis(20),
            keys: vec![],
            instance: None,
            agent_version: None,
            properties: vec![],
        };
        let stop = {
            let done = Arc::clone(&done);
            async move { done.notified().await }
        };
        let follower = tokio::spawn(follow(args, out, stop));
        let mut next_line = async || {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.recv()).await.expect("an event").unwrap();
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        };

        let digest = served.snapshot().answer("svc").digest.as_str().to_owned();
        assert_eq!(
            next_line().await,
            json!({"key": "agent.sample_n_per_3_secs", "event": "MODIFY", "value": "10", "uuid": digest})
        );
        // Removing the service: EMPTY, so the key is deleted.
        served.install(skyconf_core::read("configurations:\n").unwrap());
        let empty = skyconf_core::Digest::empty().as_str().to_owned();
        assert_eq!(
            next_line().await,
            json!({"key": "agent.sample_n_per_3_secs", "event": "DELETE", "value": null, "uuid": empty})
        );
        done.notify_one();
        follower.await.unwrap().unwrap();
        server.abort();
    }
}
