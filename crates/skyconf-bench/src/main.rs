//! `skyconf-bench`: a load generator for any configuration discovery (CDS) endpoint, and the
//! memory, scale and propagation probes `scripts/bench.sh` runs. It is
//! tooling for developing skyconf, a binary of its own so that the shipped `skyconf` links none of
//! it (no HTTP/2 sink server, histograms or progress bars).
//!
//! - `skyconf-bench [--scenario unchanged|changed|mixed] [--rate R]`: many HTTP/2 connections,
//!   many concurrent streams each, closed loop (as fast as answers come) or, with `--rate`, a
//!   fixed-rate open loop, calls evenly spaced by a pacer thread, whose latencies are measured
//!   from each call's send time (so a stalled server cannot hide its queue). Every answer's
//!   grpc-status is checked and, with `--check full` (the default), its content: an agent that
//!   echoes the digest must get an empty `Commands`, one that does not must get exactly one
//!   `ConfigurationDiscoveryCommand` carrying the digest and a 36-character serial number.
//! - `skyconf-bench agents`: thousands of idle agents, each on its own connection and polling every
//!   `--interval` like a stock agent (memory per connection, connection scale).
//! - `skyconf-bench held`: thousands of agents with the Java agent's timing (30 s deadline, 20 s
//!   fixed rate), each on its own connection, against a server that holds unchanged polls (or
//!   not): write → all agents hold the new digest, memory per agent, idle CPU.
//! - `skyconf-bench revert`: agents that report instance names, and rollouts whose Prometheus
//!   gate fails: the failure → the server's revert → every agent holding its old digest again.
//! - `skyconf-bench propagation`: rewrites a served file and times how long until the new digest
//!   is answered.
//! - `skyconf-bench reload`: parses a document and builds its served table in process (digests and
//!   pre-encoded answers included), as a reload does.
//! - `skyconf-bench document`: prints a synthetic document (`--services` × `--keys`).
//! - `skyconf-bench sink`: an OAP stand-in answering any gRPC path with an empty `Commands` after
//!   reading the whole request stream (the upstream of `scripts/bench/gateway.sh`).
//! - `skyconf-bench soak`: agents polling for a long time while documents, good and bad, are
//!   written through the admin API; every answer and every write is checked (`scripts/soak.sh`).
//! - `skyconf-bench floor`: a measurement-only CDS server on a minimal HTTP/2 path of its own
//!   (buffers per worker, not per connection), the memory floor `held.sh` compares `skyconf serve`
//!   with (`SERVER=floor`). Never a server for agents.
//!
//! Results go to stdout (a table, or one JSON object with `--json`); the exit status is 0 only if
//! every call succeeded and every answer was right. A progress bar goes to stderr when it is a
//! terminal, a plain line every few seconds when it is not (a pipe, a CI log).
//!
//! One file per tool: `load.rs` (the default, without a subcommand), `agents.rs`, `held.rs`,
//! `propagation.rs`, `revert.rs`, `reload.rs`, `document.rs`, `soak.rs`, `sink.rs` and `floor.rs`; `raw.rs` holds the calls
//! to any path (`--path`, `--body-file`). This file holds what they share: the
//! [`Target`] flags, connecting, the outcome counters ([`Stats`]) and the report; `args.rs` the
//! spelling of addresses and durations, as `skyconf` takes them.

mod agents;
mod args;
mod document;
mod floor;
mod held;
mod http;
mod load;
mod propagation;
mod raw;
mod reload;
mod revert;
mod sink;
mod soak;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use skyconf_core::codec::{DiscoveryCommand, SERIAL_NUMBER_KEY};
use skyconf_proto::v3::Commands;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use tonic::transport::Channel;

use clap::Parser;

use crate::args::{ServerAddr, parse_duration};

// The allocator `skyconf` serves with: `reload` times what a server's reload costs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Development tooling for skyconf: load, memory, scale, propagation and soak probes of a
/// configuration discovery endpoint (any server).
#[derive(Debug, Parser)]
#[command(
    name = "skyconf-bench",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    after_help = "\
Output: the report on stdout (a table, or one JSON object with --json); progress on stderr (a bar
on a terminal, a plain line every few seconds elsewhere, none with --quiet); logs on stderr (filter
from SKYCONF_LOG, default info).

Exit status:
  0  every call succeeded and every answer was right
  1  a call failed, an answer was wrong, no call succeeded, or the server cannot be reached
  2  usage error"
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    load: load::Args,
}

/// The tools besides the load, which runs when no subcommand is given.
#[derive(Debug, clap::Subcommand)]
enum Mode {
    /// Many idle agents, one connection each, polling every --interval like a stock agent.
    Agents(agents::Args),
    /// Agents timed like the Java agent against a server holding polls: write → every agent, memory, CPU.
    Held(held::Args),
    /// Rewrites a served document and times each edit until its new digest is answered.
    Propagation(propagation::Args),
    /// Agents with instance names; rollouts whose gate fails: the failure → every agent reverted.
    Revert(revert::Args),
    /// Times parsing a document and building its served table (digests, pre-encoded answers).
    Reload(reload::Args),
    /// Prints a synthetic agent-configurations document.
    Document(document::Args),
    /// Agents polling while documents churn through the admin API; checks every answer and write.
    Soak(soak::Args),
    /// An OAP stand-in: answers any gRPC path with an empty `Commands` after the whole request.
    Sink(sink::Args),
    /// A measurement-only CDS server on a minimal HTTP/2 path of its own (the memory floor).
    Floor(floor::Args),
}

/// Where to send, and which services to ask for.
#[derive(Debug, Clone, clap::Args)]
struct Target {
    /// The server: `HOST:PORT`, `http://HOST:PORT`, or `https://HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:11800", env = "SKYCONF_ADDR", value_parser = ServerAddr::parse)]
    addr: ServerAddr,
    /// Service names are `PREFIX0`, `PREFIX1`, ...
    #[arg(long, default_value = "bench-svc-")]
    service_prefix: String,
    /// How many distinct services the load asks for.
    #[arg(long, default_value_t = 1)]
    services: usize,
    /// Source addresses for the connections, used in turn (127.0.0.x avoids running out of
    /// ephemeral ports with many connections).
    #[arg(long, value_delimiter = ',')]
    local_addr: Vec<IpAddr>,
    /// Deadline of each call.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Worker threads of the load generator (default: the CPUs it may run on).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKYCONF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "skyconf-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the chosen tool.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.mode {
        None => load::run(cli.load),
        Some(Mode::Agents(a)) => agents::run(a),
        Some(Mode::Held(a)) => held::run(a),
        Some(Mode::Propagation(a)) => propagation::run(a),
        Some(Mode::Revert(a)) => revert::run(a),
        Some(Mode::Reload(a)) => reload::run(&a),
        Some(Mode::Document(a)) => document::run(&a),
        Some(Mode::Soak(a)) => soak::run(a),
        Some(Mode::Sink(a)) => sink::run(&a),
        Some(Mode::Floor(a)) => floor::run(a),
    }
}

/// Writes to standard output. A reader that went away (`skyconf-bench document | head`) ends the
/// program quietly with status 0 instead of the panic `print!` raises; any other failure to write
/// is status 1.
fn write_out(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_fmt(args).and_then(|()| out.flush()) {
        std::process::exit(i32::from(error.kind() != std::io::ErrorKind::BrokenPipe));
    }
}

/// `print!` through [`write_out`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_out(format_args!($($arg)*)) };
}

/// `println!` through [`write_out`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};

/// A multi-threaded runtime with `threads` workers (default: one per CPU).
fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    builder.enable_all().build().context("cannot start the async runtime")
}

/// A CDS client on one HTTP/2 connection.
type Client = ConfigurationDiscoveryServiceClient<Channel>;

/// Opens connection number `index` to the target, from its next --local-addr if any.
async fn connect(target: &Target, index: usize) -> anyhow::Result<Client> {
    Ok(ConfigurationDiscoveryServiceClient::new(connect_channel(target, index).await?))
}

/// [`connect`], for any service.
async fn connect_channel(target: &Target, index: usize) -> anyhow::Result<Channel> {
    let mut endpoint =
        target.addr.endpoint()?.timeout(target.timeout).connect_timeout(target.timeout).tcp_nodelay(true);
    if !target.local_addr.is_empty() {
        endpoint = endpoint.local_address(Some(target.local_addr[index % target.local_addr.len()]));
    }
    endpoint.connect().await.with_context(|| format!("cannot connect to {}", target.addr))
}

/// One connection's client: fetchConfigurations, or any path with a fixed body (`--path`).
#[derive(Debug, Clone)]
enum Worker {
    Cds(Client),
    Raw(raw::Caller),
}

impl Worker {
    /// Opens connection number `index`, for `raw`'s path and messages if given, else for CDS.
    async fn open(target: &Target, index: usize, raw: Option<&(String, Vec<bytes::Bytes>)>) -> anyhow::Result<Self> {
        let channel = connect_channel(target, index).await?;
        Ok(match raw {
            Some((path, messages)) => Self::Raw(raw::Caller::new(channel, path, messages.clone())?),
            None => Self::Cds(Client::new(channel)),
        })
    }

    /// One call: `request` to fetchConfigurations, or the fixed body to the fixed path.
    async fn call(
        &mut self,
        request: &skyconf_proto::v3::ConfigurationSyncRequest,
    ) -> Result<tonic::Response<Commands>, tonic::Status> {
        match self {
            Self::Cds(client) => client.fetch_configurations(request.clone()).await,
            Self::Raw(caller) => caller.call().await,
        }
    }
}

/// The `i`-th service name the load asks for.
fn service_name(target: &Target, i: usize) -> String {
    format!("{}{i}", target.service_prefix)
}

/// Outcome counters and the latency histogram, shared by every task.
#[derive(Debug)]
struct Stats {
    ok: AtomicU64,
    empty: AtomicU64,
    command: AtomicU64,
    wrong: AtomicU64,
    done: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    first_wrong: Mutex<Option<String>>,
    latency_us: Mutex<Histogram<u64>>,
}

impl Stats {
    /// All counters at zero, an empty histogram.
    fn new() -> Self {
        Self {
            ok: AtomicU64::new(0),
            empty: AtomicU64::new(0),
            command: AtomicU64::new(0),
            wrong: AtomicU64::new(0),
            done: AtomicU64::new(0),
            errors: Mutex::new(BTreeMap::new()),
            first_wrong: Mutex::new(None),
            // 1 µs to 100 s at 3 significant digits.
            latency_us: Mutex::new(Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")),
        }
    }

    /// Records one call's latency, in microseconds (at least 1).
    fn record_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1);
        self.latency_us.lock().unwrap_or_else(|p| p.into_inner()).saturating_record(us);
    }

    /// Checks one answer against what it must be; returns the digest it carried, if any.
    fn check(
        &self,
        result: Result<tonic::Response<Commands>, tonic::Status>,
        expect: Option<&Option<String>>,
    ) -> Option<String> {
        let commands = match result {
            Ok(response) => response.into_inner(),
            Err(status) => {
                *self
                    .errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(format!("{:?}", status.code()))
                    .or_default() += 1;
                return None;
            }
        };
        self.ok.fetch_add(1, Ordering::Relaxed);
        let found = DiscoveryCommand::find(&commands);
        if found.is_some() {
            self.command.fetch_add(1, Ordering::Relaxed);
        } else {
            self.empty.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(expect) = expect {
            let problem = match (expect, &found, commands.commands.len()) {
                (None, _, 0) => None,
                (None, _, n) => Some(format!("expected no command, got {n}")),
                (Some(_), None, _) => Some("expected a command, got none".to_owned()),
                (Some(digest), Some(cmd), 1) => {
                    let serial_ok = cmd.serial_number.as_ref().is_some_and(|s| s.len() == 36);
                    if cmd.uuid.as_deref() != Some(digest.as_str()) {
                        Some(format!("expected digest {digest}, got {:?}", cmd.uuid))
                    } else if !serial_ok {
                        Some(format!("bad {SERIAL_NUMBER_KEY} {:?}", cmd.serial_number))
                    } else {
                        None
                    }
                }
                (Some(_), Some(_), n) => Some(format!("expected one command, got {n}")),
            };
            if let Some(problem) = problem {
                self.wrong.fetch_add(1, Ordering::Relaxed);
                self.first_wrong.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(problem);
            }
        }
        found.and_then(|c| c.uuid)
    }

    /// Failed calls by gRPC status code.
    fn errors(&self) -> BTreeMap<String, u64> {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether any call failed or any answer was wrong.
    fn failed(&self) -> bool {
        self.wrong.load(Ordering::Relaxed) > 0 || !self.errors().is_empty()
    }

    /// Latency percentiles in microseconds; `null` when nothing was measured.
    fn latency_json(&self) -> Value {
        let h = self.latency_us.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_empty() {
            return Value::Null;
        }
        json!({
            "p50": h.value_at_quantile(0.50),
            "p90": h.value_at_quantile(0.90),
            "p99": h.value_at_quantile(0.99),
            "p999": h.value_at_quantile(0.999),
            "max": h.max(),
            "mean": (h.mean() * 10.0).round() / 10.0,
        })
    }

    /// The counters, the first wrong answer and the errors, for the report.
    fn outcome_json(&self) -> Value {
        json!({
            "ok": self.ok.load(Ordering::Relaxed),
            "empty_answers": self.empty.load(Ordering::Relaxed),
            "command_answers": self.command.load(Ordering::Relaxed),
            "wrong_answers": self.wrong.load(Ordering::Relaxed),
            "first_wrong": *self.first_wrong.lock().unwrap_or_else(|p| p.into_inner()),
            "errors": self.errors(),
        })
    }
}

/// How often progress is printed as a plain line when stderr is not a terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Progress on stderr: indicatif's bar on a terminal; elsewhere (a pipe, a CI log), where
/// indicatif draws nothing, a plain line at the start, every [`PLAIN_PROGRESS_EVERY`] and at the
/// end; nothing with --quiet.
#[derive(Clone)]
struct Progress {
    bar: ProgressBar,
    plain: Option<Arc<Plain>>,
}

/// The state of plain-line progress.
struct Plain {
    what: String,
    len: u64,
    started: Instant,
    last: Mutex<Instant>,
}

impl Plain {
    fn line(&self, position: u64, end: &str) {
        let seconds = self.started.elapsed().as_secs_f64();
        let _ = writeln!(std::io::stderr(), "bench: {} {position}/{} after {seconds:.1} s{end}", self.what, self.len);
    }
}

impl Progress {
    /// Sets the position.
    fn set_position(&self, position: u64) {
        self.bar.set_position(position);
        self.tick();
    }

    /// Advances the position by `n`.
    fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.tick();
    }

    /// A plain line when one is due.
    fn tick(&self) {
        if let Some(plain) = &self.plain {
            let mut last = plain.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= PLAIN_PROGRESS_EVERY {
                *last = Instant::now();
                drop(last);
                plain.line(self.bar.position(), "");
            }
        }
    }

    /// Removes the bar; off a terminal, prints the final line.
    fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
        if let Some(plain) = &self.plain {
            plain.line(self.bar.position(), ", done");
        }
    }
}

/// Progress on stderr counting `len` `what`s; hidden with --quiet.
fn progress(quiet: bool, len: u64, what: &str) -> Progress {
    if quiet {
        return Progress { bar: ProgressBar::hidden(), plain: None };
    }
    if !std::io::stderr().is_terminal() {
        let now = Instant::now();
        let plain = Plain { what: what.to_owned(), len, started: now, last: Mutex::new(now) };
        plain.line(0, "");
        return Progress { bar: ProgressBar::hidden().with_position(0), plain: Some(Arc::new(plain)) };
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} ({{per_sec}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Progress { bar, plain: None }
}

/// Prints `report` as JSON or as a two-column table.
fn print_report(report: &Value, as_json: bool) {
    if as_json {
        outln!("{report}");
    } else {
        out!("{}", report_table(report));
    }
}

/// `report` as a two-column table, one row per value (nested keys joined by `.`). A `null` (a
/// figure that does not apply to this run, such as `rate` without one) has no row.
fn report_table(report: &Value) -> String {
    fn walk(prefix: &str, value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, v, out);
                }
            }
            Value::Null => {}
            // Strings as they are: `mode load`, not `mode "load"`.
            Value::String(text) => {
                let _ = writeln!(out, "{prefix:<32} {text}");
            }
            other => {
                let _ = writeln!(out, "{prefix:<32} {other}");
            }
        }
    }
    let mut out = String::new();
    walk("", report, &mut out);
    out
}

/// 1 when a call failed, an answer was wrong or no call succeeded at all; 0 otherwise.
fn exit_code(stats: &Stats) -> ExitCode {
    if stats.failed() || stats.ok.load(Ordering::Relaxed) == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of the whole command line, which it otherwise runs only when a tool is used.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn the_table_has_no_rows_for_figures_that_do_not_apply() {
        // Usability finding 14: `path null`, `rate null`, `outcome.first_wrong null`.
        let report = serde_json::json!({"mode": "load", "rate": null, "outcome": {"ok": 3, "first_wrong": null}});
        let table = report_table(&report);
        assert_eq!(table, format!("{:<32} load\n{:<32} 3\n", "mode", "outcome.ok"));
    }
}
