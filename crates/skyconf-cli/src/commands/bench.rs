//! `skyconf bench`: a load generator for any configuration discovery (CDS) endpoint, and the
//! memory, scale and propagation probes `scripts/bench.sh` runs.
//!
//! - `skyconf bench [--scenario unchanged|changed|mixed] [--rate R]`: many HTTP/2 connections,
//!   many concurrent streams each, closed loop (as fast as answers come) or, with `--rate`, a
//!   fixed-rate open loop whose latencies are measured from the scheduled send time (so a stalled
//!   server cannot hide its queue). Every answer's grpc-status is checked and, with
//!   `--check full` (the default), its content: an agent that echoes the digest must get an empty
//!   `Commands`, one that does not must get exactly one `ConfigurationDiscoveryCommand` carrying
//!   the digest and a 36-character serial number.
//! - `skyconf bench agents`: thousands of idle agents, each on its own connection and polling every
//!   `--interval` like a stock agent (memory per connection, connection scale).
//! - `skyconf bench propagation`: rewrites a served file and times how long until the new digest
//!   is answered.
//! - `skyconf bench reload`: parses a document and builds its served table in process (digests and
//!   pre-encoded answers included), as a reload does.
//! - `skyconf bench document`: prints a synthetic document (`--services` × `--keys`).
//!
//! Results go to stdout (a table, or one JSON object with `--json`); the exit status is 0 only if
//! every call succeeded and every answer was right. A progress bar goes to stderr when it is a
//! terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;
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
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::{Commands, ConfigurationSyncRequest};
use tonic::transport::{Channel, Endpoint};

use crate::args::parse_duration;

/// Arguments of `skyconf bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Mode {
    /// Many idle agents, one connection each, polling every --interval like a stock agent.
    Agents(AgentsArgs),
    /// Rewrites a served document and times each edit until its new digest is answered.
    Propagation(PropagationArgs),
    /// Times parsing a document and building its served table (digests, pre-encoded answers).
    Reload(ReloadArgs),
    /// Prints a synthetic agent-configurations document.
    Document(DocumentArgs),
}

/// What the load asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// Agents that already hold the configuration: they echo the digest, the answer is empty.
    Unchanged,
    /// Agents without the configuration (no uuid): the answer is the whole command.
    Changed,
    /// A fleet: --mix percent unchanged, changed and unknown services.
    Mixed,
}

/// How much of each answer is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Check {
    /// grpc-status and the answer's content (digest, serial number, empty or not).
    Full,
    /// grpc-status only (for servers that answer with canned content, like the null server).
    Status,
}

/// Where to send, and which services to ask for.
#[derive(Debug, Clone, clap::Args)]
struct Target {
    /// The server, `HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:11800", env = "SKYCONF_ADDR")]
    addr: String,
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

#[derive(Debug, Clone, clap::Args)]
struct LoadArgs {
    #[command(flatten)]
    target: Target,
    /// What the load asks for.
    #[arg(long, value_enum, default_value = "unchanged")]
    scenario: Scenario,
    /// For `mixed`: percent unchanged, changed and unknown-service calls.
    #[arg(long, default_value = "80,15,5", value_delimiter = ',', num_args = 3)]
    mix: Vec<u32>,
    /// HTTP/2 connections.
    #[arg(long, short = 'c', default_value_t = 32)]
    connections: usize,
    /// Concurrent streams (calls in flight) per connection.
    #[arg(long, short = 'm', default_value_t = 16)]
    streams: usize,
    /// Stop after this many measured calls.
    #[arg(long, short = 'n')]
    requests: Option<u64>,
    /// Stop after this long (default 10s unless --requests is given).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Calls made before measuring starts (checked, not counted).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Fixed-rate open loop at this many calls per second in total, latency measured from the
    /// scheduled send time (no coordinated omission).
    #[arg(long)]
    rate: Option<f64>,
    /// How much of each answer to check.
    #[arg(long, value_enum, default_value = "full")]
    check: Check,
}

#[derive(Debug, Clone, clap::Args)]
struct AgentsArgs {
    #[command(flatten)]
    target: Target,
    /// Agents, one connection each.
    #[arg(long, short = 'c', default_value_t = 1000)]
    connections: usize,
    /// Each agent polls this often (stock agents: 20 s).
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    interval: Duration,
    /// How long to keep the agents connected after they are all up.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    duration: Duration,
    /// Connections opened at once while ramping up.
    #[arg(long, default_value_t = 200)]
    connect_batch: usize,
}

#[derive(Debug, Clone, clap::Args)]
struct PropagationArgs {
    #[command(flatten)]
    target: Target,
    /// The file the server serves; it is overwritten with synthetic documents.
    #[arg(long)]
    file: std::path::PathBuf,
    /// Keys per service of the synthetic document (its --services is the target's).
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// How many edits to time.
    #[arg(long, default_value_t = 30)]
    edits: usize,
    /// Pause between edits.
    #[arg(long, value_parser = parse_duration, default_value = "250ms")]
    pause: Duration,
    /// Rewrite the file in place instead of renaming a new file over it.
    #[arg(long)]
    in_place: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct ReloadArgs {
    /// The document; without it a synthetic one of --services × --keys is used.
    #[arg(long)]
    file: Option<std::path::PathBuf>,
    /// Services of the synthetic document.
    #[arg(long, default_value_t = 10_000)]
    services: usize,
    /// Keys per service of the synthetic document.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// How many reloads to time.
    #[arg(long, default_value_t = 10)]
    repeat: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct DocumentArgs {
    /// Services, named `PREFIX0`, `PREFIX1`, ...
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Keys per service (at most 12).
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// Service name prefix.
    #[arg(long, default_value = "bench-svc-")]
    service_prefix: String,
    /// Changes one value of the first service, so each revision has a new digest.
    #[arg(long, default_value_t = 0)]
    revision: u64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.mode {
        None => run_load(args.load),
        Some(Mode::Agents(a)) => run_agents(a),
        Some(Mode::Propagation(a)) => run_propagation(a),
        Some(Mode::Reload(a)) => run_reload(&a),
        Some(Mode::Document(a)) => {
            print!("{}", document(&a.service_prefix, a.services, a.keys, a.revision));
            Ok(ExitCode::SUCCESS)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Synthetic documents

/// Settings the stock agents read, with values typed the way real documents write them.
const KEYS: [(&str, &str); 12] = [
    ("agent.sample_n_per_3_secs", "{n}"),
    ("agent.span_limit_per_segment", "300"),
    ("agent.ignore_suffix", "'.jpg,.css,.png,.ico'"),
    ("agent.trace.ignore_path", "'/eureka/**,/actuator/**,/health'"),
    ("plugin.jdbc.trace_sql_parameters", "true"),
    ("agent.sample_rate", "'0.5'"),
    ("plugin.http.include_http_headers", "x-request-id"),
    ("plugin.mongodb.trace_param", "false"),
    ("plugin.elasticsearch.trace_dsl", "false"),
    ("plugin.springmvc.collect_http_params", "true"),
    ("plugin.kafka.bootstrap_servers", "kafka-0:9092"),
    ("agent.cause_exception_depth", "5"),
];

/// `configurations:` with `services` services of `keys` settings each.
fn document(prefix: &str, services: usize, keys: usize, revision: u64) -> String {
    let keys = keys.min(KEYS.len());
    let mut out = String::with_capacity(services * (keys * 48 + 32) + 32);
    out.push_str("configurations:\n");
    for i in 0..services {
        let _ = writeln!(out, "  {prefix}{i}:");
        for (key, value) in &KEYS[..keys] {
            // The first service carries the revision, so every revision has its own digest.
            let n = if i == 0 { 10 + revision } else { 10 + (i as u64 % 7) };
            let _ = writeln!(out, "    {key}: {}", value.replace("{n}", &n.to_string()));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Shared client machinery

fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    builder.enable_all().build().context("cannot start the async runtime")
}

type Client = ConfigurationDiscoveryServiceClient<Channel>;

async fn connect(target: &Target, index: usize) -> anyhow::Result<Client> {
    let mut endpoint = Endpoint::from_shared(format!("http://{}", target.addr))
        .context("invalid address")?
        .timeout(target.timeout)
        .connect_timeout(target.timeout)
        .tcp_nodelay(true);
    if !target.local_addr.is_empty() {
        endpoint = endpoint.local_address(Some(target.local_addr[index % target.local_addr.len()]));
    }
    let channel = endpoint.connect().await.with_context(|| format!("cannot connect to {}", target.addr))?;
    Ok(ConfigurationDiscoveryServiceClient::new(channel))
}

fn service_name(target: &Target, i: usize) -> String {
    format!("{}{i}", target.service_prefix)
}

/// Asks once for every service with no uuid and remembers the digest each one is served.
async fn discover(client: &mut Client, target: &Target) -> anyhow::Result<Vec<Option<String>>> {
    let mut digests = Vec::with_capacity(target.services);
    for i in 0..target.services {
        let answer = client
            .fetch_configurations(ConfigurationSyncRequest { service: service_name(target, i), uuid: String::new() })
            .await
            .with_context(|| format!("the first call for {} failed", service_name(target, i)))?;
        digests.push(DiscoveryCommand::find(&answer.into_inner()).and_then(|c| c.uuid));
    }
    Ok(digests)
}

/// One planned call and the answer it must get.
#[derive(Debug, Clone)]
struct Call {
    request: ConfigurationSyncRequest,
    /// `None`: an empty `Commands`; `Some(d)`: one command carrying digest `d`.
    expect: Option<String>,
}

/// The calls a scenario cycles through, in a shuffled but fixed order.
fn plan(load: &LoadArgs, digests: &[Option<String>]) -> Vec<Call> {
    let target = &load.target;
    let unchanged = |i: usize| Call {
        request: ConfigurationSyncRequest {
            service: service_name(target, i),
            uuid: digests[i].clone().unwrap_or_default(),
        },
        expect: None,
    };
    let changed = |i: usize| Call {
        request: ConfigurationSyncRequest { service: service_name(target, i), uuid: String::new() },
        expect: Some(digests[i].clone().unwrap_or_default()),
    };
    let unknown = |i: usize| Call {
        request: ConfigurationSyncRequest {
            service: format!("{}unknown-{i}", target.service_prefix),
            uuid: String::new(),
        },
        expect: Some(EMPTY_DIGEST.to_owned()),
    };
    let n = target.services.max(1);
    match load.scenario {
        Scenario::Unchanged => (0..n).map(unchanged).collect(),
        Scenario::Changed => (0..n).map(changed).collect(),
        Scenario::Mixed => {
            // Slots in exact --mix proportions, services drawn at random, order shuffled so
            // consecutive calls on one connection differ.
            let (pu, pc) = (load.mix[0] as usize, load.mix[1] as usize);
            let total = load.mix.iter().sum::<u32>().max(1) as usize;
            // A whole number of mix rounds, at least one call per service on average.
            let len = n.max(total).div_ceil(total) * total;
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
            let mut calls: Vec<Call> = (0..len)
                .map(|slot| {
                    let i = rng.below(n);
                    match slot % total {
                        s if s < pu => unchanged(i),
                        s if s < pu + pc => changed(i),
                        _ => unknown(i),
                    }
                })
                .collect();
            for k in (1..calls.len()).rev() {
                calls.swap(k, rng.below(k + 1));
            }
            calls
        }
    }
}

/// A tiny deterministic generator: the bench needs spread, not quality.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
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

    fn errors(&self) -> BTreeMap<String, u64> {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn failed(&self) -> bool {
        self.wrong.load(Ordering::Relaxed) > 0 || !self.errors().is_empty()
    }

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

fn progress(quiet: bool, len: u64, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} ({{per_sec}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Prints `report` as JSON or as a two-column table.
fn print_report(report: &Value, as_json: bool) {
    if as_json {
        println!("{report}");
        return;
    }
    fn walk(prefix: &str, value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, v, out);
                }
            }
            other => {
                let _ = writeln!(out, "{prefix:<32} {other}");
            }
        }
    }
    let mut out = String::new();
    walk("", report, &mut out);
    print!("{out}");
}

fn exit_code(stats: &Stats) -> ExitCode {
    if stats.failed() || stats.ok.load(Ordering::Relaxed) == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

// ---------------------------------------------------------------------------------------------
// Load

fn run_load(load: LoadArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(load.connections > 0 && load.streams > 0, "--connections and --streams must be > 0");
    anyhow::ensure!(load.scenario != Scenario::Mixed || load.mix.iter().sum::<u32>() > 0, "--mix must not be all zero");
    if let Some(rate) = load.rate {
        anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--rate must be positive");
    }
    let duration = match (load.requests, load.duration) {
        (_, Some(d)) => Some(d),
        (None, None) => Some(Duration::from_secs(10)),
        (Some(_), None) => None,
    };
    runtime(load.target.threads)?.block_on(async move {
        let target = &load.target;
        let mut clients = Vec::with_capacity(load.connections);
        for i in 0..load.connections {
            clients.push(connect(target, i).await?);
        }
        let digests = discover(&mut clients[0], target).await?;
        if load.check == Check::Full && load.scenario != Scenario::Mixed {
            anyhow::ensure!(
                digests.iter().all(Option::is_some),
                "the server answered a first call without a command; use --check status for servers that answer canned content"
            );
        }
        let calls: Arc<[Call]> = plan(&load, &digests).into();
        let stats = Arc::new(Stats::new());
        let workers = load.connections * load.streams;
        let issued = Arc::new(AtomicU64::new(0));
        let limit = load.requests.unwrap_or(u64::MAX);

        let started = Instant::now();
        let measure_from = started + load.warmup;
        let deadline = duration.map(|d| measure_from + d);
        let bar = match (load.requests, duration) {
            (Some(n), _) => progress(target.quiet, n, "calls"),
            (None, Some(d)) => progress(target.quiet, d.as_secs(), "seconds"),
            (None, None) => unreachable!("a duration is set when no request count is"),
        };

        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..workers {
            let mut client = clients[w % load.connections].clone();
            let calls = Arc::clone(&calls);
            let stats = Arc::clone(&stats);
            let issued = Arc::clone(&issued);
            let check = load.check;
            // Open loop: each worker sends every `period`, workers staggered evenly.
            let schedule = load.rate.map(|rate| {
                let period = Duration::from_secs_f64(workers as f64 / rate);
                (period, measure_from + period.mul_f64(w as f64 / workers as f64))
            });
            tasks.spawn(async move {
                let mut k = w;
                let mut next = schedule.map(|(_, first)| first);
                loop {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        break;
                    }
                    // The send time latency counts from: when the schedule says (if we are late,
                    // the wait is the server's), or when the timer actually woke us.
                    let start = match next {
                        Some(at) if at > now => {
                            tokio::time::sleep_until(at.into()).await;
                            Instant::now()
                        }
                        Some(at) => at,
                        None => now,
                    };
                    if deadline.is_some_and(|d| start >= d) {
                        break;
                    }
                    let measured = start >= measure_from;
                    if measured && issued.fetch_add(1, Ordering::Relaxed) >= limit {
                        break;
                    }
                    let call = &calls[k % calls.len()];
                    k += workers;
                    let result = client.fetch_configurations(call.request.clone()).await;
                    let expect = (check == Check::Full).then_some(&call.expect);
                    stats.check(result, expect);
                    if measured {
                        stats.record_latency(start.elapsed());
                        stats.done.fetch_add(1, Ordering::Relaxed);
                    }
                    if let (Some((period, _)), Some(at)) = (schedule, next.as_mut()) {
                        *at += period;
                    }
                }
            });
        }
        let ticker = {
            let stats = Arc::clone(&stats);
            let bar = bar.clone();
            let by_count = load.requests.is_some();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if by_count {
                        bar.set_position(stats.done.load(Ordering::Relaxed));
                    } else {
                        bar.set_position(measure_from.elapsed().as_secs());
                    }
                }
            })
        };
        while let Some(joined) = tasks.join_next().await {
            joined.context("a load task panicked")?;
        }
        let elapsed = measure_from.elapsed();
        ticker.abort();
        bar.finish_and_clear();

        let done = stats.done.load(Ordering::Relaxed);
        let report = json!({
            "mode": "load",
            "addr": target.addr,
            "scenario": format!("{:?}", load.scenario).to_lowercase(),
            "check": format!("{:?}", load.check).to_lowercase(),
            "services": target.services,
            "connections": load.connections,
            "streams": load.streams,
            "rate": load.rate,
            "calls": done,
            "seconds": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
            "calls_per_s": (done as f64 / elapsed.as_secs_f64()).round(),
            "latency_us": stats.latency_json(),
            "outcome": stats.outcome_json(),
        });
        print_report(&report, target.json);
        Ok(exit_code(&stats))
    })
}

// ---------------------------------------------------------------------------------------------
// Agents

fn run_agents(args: AgentsArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.connections > 0, "--connections must be > 0");
    runtime(args.target.threads)?.block_on(async move {
        let target = Arc::new(args.target.clone());
        let bar = progress(target.quiet, args.connections as u64, "connecting");
        let ramp = Instant::now();
        let mut clients = Vec::with_capacity(args.connections);
        let mut pending = tokio::task::JoinSet::new();
        for i in 0..args.connections {
            let target = Arc::clone(&target);
            pending.spawn(async move { connect(&target, i).await });
            if pending.len() >= args.connect_batch.max(1) || i + 1 == args.connections {
                while let Some(joined) = pending.join_next().await {
                    clients.push(joined.context("a connect task panicked")??);
                    bar.inc(1);
                }
            }
        }
        bar.finish_and_clear();
        let connect_seconds = ramp.elapsed().as_secs_f64();
        tracing::info!(connections = clients.len(), seconds = connect_seconds, "All agents are connected.");

        let stats = Arc::new(Stats::new());
        let started = Instant::now();
        let end = started + args.duration;
        let mut tasks = tokio::task::JoinSet::new();
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        for (i, mut client) in clients.into_iter().enumerate() {
            let stats = Arc::clone(&stats);
            let service = service_name(&target, i % target.services.max(1));
            // Agents start at random points of their interval, as a real fleet does.
            let offset = args.interval.mul_f64(rng.below(10_000) as f64 / 10_000.0);
            let interval = args.interval;
            tasks.spawn(async move {
                let mut uuid = String::new();
                let mut at = started + offset;
                while at < end {
                    tokio::time::sleep_until(at.into()).await;
                    let sent = Instant::now();
                    let result = client
                        .fetch_configurations(ConfigurationSyncRequest { service: service.clone(), uuid: uuid.clone() })
                        .await;
                    // Like the agent: keep the digest of the last command; no command = no change.
                    if let Some(digest) = stats.check(result, None) {
                        uuid = digest;
                    }
                    stats.record_latency(sent.elapsed());
                    stats.done.fetch_add(1, Ordering::Relaxed);
                    at += interval;
                }
                // Hold the connection until the end, idle, as an agent between polls does.
                tokio::time::sleep_until(end.into()).await;
                drop(client);
            });
        }
        // Every agent has polled at least once after one interval: the steady state to measure.
        let steady_at = started + args.interval.min(args.duration);
        tokio::time::sleep_until(steady_at.into()).await;
        println!(
            "{}",
            json!({"event": "steady", "connections": args.connections, "calls": stats.done.load(Ordering::Relaxed)})
        );
        while let Some(joined) = tasks.join_next().await {
            joined.context("an agent task panicked")?;
        }
        let report = json!({
            "mode": "agents",
            "addr": target.addr,
            "connections": args.connections,
            "interval_s": args.interval.as_secs_f64(),
            "connect_seconds": (connect_seconds * 1000.0).round() / 1000.0,
            "seconds": args.duration.as_secs_f64(),
            "calls": stats.done.load(Ordering::Relaxed),
            "latency_us": stats.latency_json(),
            "outcome": stats.outcome_json(),
        });
        print_report(&report, target.json);
        Ok(exit_code(&stats))
    })
}

// ---------------------------------------------------------------------------------------------
// Propagation

fn run_propagation(args: PropagationArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.edits > 0, "--edits must be > 0");
    runtime(args.target.threads)?.block_on(async move {
        let target = &args.target;
        let mut client = connect(target, 0).await?;
        let service = service_name(target, 0);
        let write = |text: &str| -> anyhow::Result<()> {
            if args.in_place {
                std::fs::write(&args.file, text)?;
            } else {
                // How editors and ConfigMap mounts replace a file: a new inode renamed over it.
                let tmp = args.file.with_extension("bench-tmp");
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, &args.file)?;
            }
            Ok(())
        };
        let fetch = |client: &mut Client| {
            let mut client = client.clone();
            let service = service.clone();
            async move {
                client
                    .fetch_configurations(ConfigurationSyncRequest { service, uuid: String::new() })
                    .await
                    .ok()
                    .and_then(|r| DiscoveryCommand::find(&r.into_inner()))
                    .and_then(|c| c.uuid)
            }
        };
        let stats = Stats::new();
        let bar = progress(target.quiet, args.edits as u64, "edits");
        let mut timed_out = 0u64;
        // Revisions start from the clock so a rerun never writes the digest already served.
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000 * 1000)
            .unwrap_or(0);
        for edit in 0..args.edits as u64 {
            let text = document(&target.service_prefix, target.services, args.keys, base + edit);
            let table = skyconf_core::read(&text).context("the synthetic document is refused")?;
            let want = table
                .get(&service)
                .map(|s| s.digest().as_str().to_owned())
                .context("the synthetic document lacks its first service")?;
            let t0 = Instant::now();
            write(&text).with_context(|| format!("cannot write {}", args.file.display()))?;
            loop {
                if fetch(&mut client).await.as_deref() == Some(want.as_str()) {
                    stats.record_latency(t0.elapsed());
                    stats.done.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                if t0.elapsed() > target.timeout {
                    timed_out += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            bar.inc(1);
            tokio::time::sleep(args.pause).await;
        }
        bar.finish_and_clear();
        let report = json!({
            "mode": "propagation",
            "addr": target.addr,
            "services": target.services,
            "keys": args.keys,
            "edits": args.edits,
            "seen": stats.done.load(Ordering::Relaxed),
            "timed_out": timed_out,
            "latency_us": stats.latency_json(),
        });
        print_report(&report, target.json);
        Ok(if timed_out == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
    })
}

// ---------------------------------------------------------------------------------------------
// Reload

fn run_reload(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    let text = match &args.file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => document("bench-svc-", args.services, args.keys, 0),
    };
    let served = skyconf_server::ServedTable::new(skyconf_core::AgentConfigurations::default());
    let (mut parse, mut install, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut services = 0;
    let bar = progress(args.quiet, args.repeat.max(1) as u64, "reloads");
    for _ in 0..args.repeat.max(1) {
        let t0 = Instant::now();
        let table = skyconf_core::read(&text).context("the document is refused")?;
        let t1 = Instant::now();
        services = table.len();
        served.install(table);
        let t2 = Instant::now();
        parse.push(t1 - t0);
        install.push(t2 - t1);
        total.push(t2 - t0);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let summary = |v: &mut Vec<Duration>| {
        v.sort();
        let ms = |d: Duration| (d.as_secs_f64() * 1e5).round() / 100.0;
        json!({"min": ms(v[0]), "p50": ms(v[v.len() / 2]), "max": ms(v[v.len() - 1])})
    };
    let report = json!({
        "mode": "reload",
        "services": services,
        "bytes": text.len(),
        "repeat": args.repeat.max(1),
        "parse_ms": summary(&mut parse),
        "install_ms": summary(&mut install),
        "total_ms": summary(&mut total),
    });
    print_report(&report, args.json);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_documents_are_served_and_revisions_change_one_digest() {
        let a = skyconf_core::read(&document("s", 3, 12, 0)).unwrap();
        let b = skyconf_core::read(&document("s", 3, 12, 1)).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.get("s0").unwrap().entries().len(), 12);
        assert_ne!(a.get("s0").unwrap().digest(), b.get("s0").unwrap().digest());
        assert_eq!(a.get("s1").unwrap().digest(), b.get("s1").unwrap().digest());
    }
}
