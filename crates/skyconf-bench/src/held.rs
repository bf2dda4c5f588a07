//! `skyconf-bench held`: thousands of agents polling as the Java agent times its polls (a 30 s
//! deadline per call, a fixed rate of 20 s, a call that outlasts the interval followed at once),
//! each on its own HTTP/2 connection, against a server that holds unchanged polls (or, with
//! `--mode plain`, one started with `--no-hold-polls`, where the same agents simply poll every
//! 20 s). It measures:
//!
//! - **propagation**: a store write (the file store, a new file renamed over the served one, every
//!   service changed) until all N agents hold the new digest, over `--writes` writes (with
//!   `--mode held`, each write made once all N polls are held, per the server's
//!   `skyconf_held_polls`);
//! - **memory**: the server's VmRSS before the agents connect and with all N connected (held, or
//!   polled once), per agent;
//! - **CPU**: the server's utime + stime (`/proc/PID/stat`) over `--idle` while nothing changes.
//!
//! The server's PID (`--server-pid`) is needed for memory and CPU, its admin address
//! (`--admin-addr`) for `--mode held`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use skyconf_core::backoff::Rng;
use skyconf_proto::v3::ConfigurationSyncRequest;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{Client, Stats, Target, connect_channel, print_report, progress, runtime, service_name};
use crate::args::parse_duration;

/// Arguments of `skyconf-bench held`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// The file the server serves (`skyconf serve --file`); it is replaced by synthetic documents
    /// of --services services × --keys keys.
    #[arg(long)]
    file: PathBuf,
    /// `held`: the server holds unchanged polls, and each write waits until all agents are held.
    /// `plain`: the server answers at once (`serve --no-hold-polls`), the agents poll every
    /// --interval.
    #[arg(long, value_enum, default_value = "held")]
    mode: Mode,
    /// The server's admin address (`HOST:PORT`), for `skyconf_held_polls`; needed with --mode held.
    #[arg(long)]
    admin_addr: Option<String>,
    /// The server's process id, for its memory and CPU (`/proc/PID`); without it, neither is
    /// reported.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Agents, one HTTP/2 connection each.
    #[arg(long, short = 'c', default_value_t = 10_000)]
    agents: usize,
    /// Keys per service of the synthetic document.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    #[command(flatten)]
    timing: Timing,
    /// Writes to time.
    #[arg(long, default_value_t = 5)]
    writes: usize,
    /// How long the server's CPU is measured while nothing changes.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    idle: Duration,
    /// With --mode plain, the pause between one write reaching every agent and the next write.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pause: Duration,
    /// How long one write may take to reach every agent, or the agents to be held, before the
    /// run fails.
    #[arg(long, value_parser = parse_duration, default_value = "90s")]
    patience: Duration,
    /// Connections opened at once while ramping up.
    #[arg(long, default_value_t = 200)]
    connect_batch: usize,
    /// A directory to copy the server's `/proc/PID/smaps` into (`before`, `steady`, `idle`), for
    /// a per-mapping breakdown of its memory.
    #[arg(long)]
    smaps_dir: Option<PathBuf>,
}

/// Whether the server holds polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// The server holds unchanged polls.
    Held,
    /// The server answers every poll at once.
    Plain,
}

/// A command an agent received: which service, which digest, when.
pub(super) struct Receipt {
    service: usize,
    digest: String,
    at: Instant,
}

/// When an agent polls: the Java agent's fixed rate and per-call deadline (`--interval`,
/// `--deadline`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub(super) struct Timing {
    /// Each agent's poll period (the Java agent's `collector.get_agent_dynamic_config_interval`).
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub(super) interval: Duration,
    /// Each call's deadline (the Java agent's `collector.grpc_upstream_timeout`).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub(super) deadline: Duration,
}

/// One agent's poll loop: its service (`service_index` of the synthetic document), polled at a
/// fixed rate with the Java agent's deadline, echoing the digest of the last command.
pub(super) struct Poller {
    pub(super) service_index: usize,
    pub(super) service: String,
    pub(super) timing: Timing,
}

impl Poller {
    /// Polls from `first` on until `stop`, reporting every command received on `receipts`.
    pub(super) async fn run(
        self,
        mut client: Client,
        first: Instant,
        stats: Arc<Stats>,
        stop: CancellationToken,
        receipts: mpsc::UnboundedSender<Receipt>,
    ) {
        let Self { service_index, service, timing } = self;
        let mut next = first;
        let mut uuid = String::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = stop.cancelled() => return,
            }
            let sent = Instant::now();
            next = sent + timing.interval;
            let mut request =
                tonic::Request::new(ConfigurationSyncRequest { service: service.clone(), uuid: uuid.clone() });
            request.set_timeout(timing.deadline);
            let result = tokio::select! {
                result = client.fetch_configurations(request) => result,
                () = stop.cancelled() => return,
            };
            if let Some(digest) = stats.check(result, None) {
                uuid.clone_from(&digest);
                let _ = receipts.send(Receipt { service: service_index, digest, at: Instant::now() });
            }
            stats.record_latency(sent.elapsed());
            stats.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The simulated fleet: one [`Poller`] per client, agent `i` polling service `i % services`, each
/// starting at a random point of its first interval (as a real fleet does), all reporting on one
/// channel and stopped by one token.
pub(super) struct Fleet {
    /// Every agent's calls and outcomes.
    pub(super) stats: Arc<Stats>,
    /// Stops every agent.
    pub(super) stop: CancellationToken,
    /// Every command any agent received.
    pub(super) receipts: mpsc::UnboundedReceiver<Receipt>,
    /// The agents' poll loops.
    pub(super) tasks: tokio::task::JoinSet<()>,
    /// When the agents were spawned.
    pub(super) started: Instant,
}

impl Fleet {
    /// Spawns an agent per client; `seed` draws their start points.
    pub(super) fn spawn(
        target: &Target,
        clients: impl IntoIterator<Item = Client>,
        services: usize,
        timing: Timing,
        seed: u64,
    ) -> Self {
        let stats = Arc::new(Stats::new());
        let stop = CancellationToken::new();
        let (receipts_tx, receipts) = mpsc::unbounded_channel::<Receipt>();
        let mut tasks = tokio::task::JoinSet::new();
        let mut rng = Rng::from_seed(seed);
        let started = Instant::now();
        for (i, client) in clients.into_iter().enumerate() {
            let service_index = i % services;
            let poller = Poller { service_index, service: service_name(target, service_index), timing };
            let first = started + timing.interval.mul_f64(rng.fraction());
            tasks.spawn(poller.run(client, first, Arc::clone(&stats), stop.clone(), receipts_tx.clone()));
        }
        Self { stats, stop, receipts, tasks, started }
    }
}

/// `target` for agents whose calls are held up to `deadline`: the transport's own timeout
/// outlasts the call's deadline, or it would end held calls.
pub(super) fn outlasting(target: &Target, deadline: Duration) -> Arc<Target> {
    let mut target = target.clone();
    target.timeout = target.timeout.max(deadline + Duration::from_secs(5));
    Arc::new(target)
}

/// Runs the agents, the idle window and the writes, and prints the report.
pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    ensure!(args.agents > 0, "--agents must be > 0");
    ensure!(args.writes > 0, "--writes must be > 0");
    ensure!(args.target.services > 0, "--services must be > 0");
    ensure!(
        args.mode == Mode::Plain || args.admin_addr.is_some(),
        "--mode held needs --admin-addr (the writes wait for skyconf_held_polls)"
    );
    runtime(args.target.threads)?.block_on(bench(args))
}

async fn bench(args: Args) -> anyhow::Result<ExitCode> {
    let target = outlasting(&args.target, args.timing.deadline);
    let services = target.services;
    let server = args.server_pid.map(Proc);
    let admin = match &args.admin_addr {
        Some(addr) => Some(Admin::new(addr)?),
        None => None,
    };
    let clock_ticks = clock_ticks();

    // The first document, then the server's memory before any agent connects.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() % 1_000_000 * 1000)
        .unwrap_or(0);
    let mut wants = write_document(&args.file, &target.service_prefix, services, args.keys, base)?;
    if let Some(admin) = &admin {
        admin.wait_until("the server serves the first document", args.patience, |_| true).await?;
    }
    let rss_before_kb = server.as_ref().map(Proc::rss_kb).transpose()?;
    let rollup_before = server.as_ref().map(|p| p.memory("before", args.smaps_dir.as_deref())).transpose()?;

    // Connect every agent.
    let ramp = Instant::now();
    let clients: Vec<Client> =
        connect_all(&target, args.agents, args.connect_batch).await?.into_iter().map(Client::new).collect();
    let connect_seconds = ramp.elapsed().as_secs_f64();

    // The agents: each polls its service at a fixed rate with the Java agent's deadline, echoing
    // the digest of the last command, and reports every command it receives.
    let Fleet { stats, stop, mut receipts, mut tasks, .. } =
        Fleet::spawn(&target, clients, services, args.timing, 0x9E37_79B9_7F4A_7C15);

    // Every agent has the first document.
    let mut holding = Holding::new(args.agents, services);
    let first = Instant::now();
    holding.wait_all(&mut receipts, &wants, first, args.patience, "the first document").await?;
    let first_poll_seconds = first.elapsed().as_secs_f64();
    let held_at_steady = match (&admin, args.mode) {
        (Some(admin), Mode::Held) => {
            Some(admin.wait_until("all agents held", args.patience, |held| held >= args.agents as u64).await?)
        }
        (Some(admin), Mode::Plain) => Some(admin.held().await?),
        (None, _) => None,
    };
    let rss_steady_kb = server.as_ref().map(Proc::rss_kb).transpose()?;
    let rollup_steady = server.as_ref().map(|p| p.memory("steady", args.smaps_dir.as_deref())).transpose()?;
    let server_fds = server.as_ref().map(Proc::fds).transpose()?;

    // CPU while nothing changes.
    let calls_before = stats.done.load(Ordering::Relaxed);
    let cpu_before = server.as_ref().map(Proc::cpu_ticks).transpose()?;
    let idle_started = Instant::now();
    tokio::time::sleep(args.idle).await;
    let idle_seconds = idle_started.elapsed().as_secs_f64();
    let cpu_after = server.as_ref().map(Proc::cpu_ticks).transpose()?;
    let idle_calls = stats.done.load(Ordering::Relaxed) - calls_before;
    let rss_idle_kb = server.as_ref().map(Proc::rss_kb).transpose()?;
    let rollup_idle = server.as_ref().map(|p| p.memory("idle", args.smaps_dir.as_deref())).transpose()?;
    let idle_cpu = cpu_before.zip(cpu_after).map(|(before, after)| {
        let seconds = (after - before) as f64 / clock_ticks;
        json!({
            "seconds": round3(seconds),
            "percent_of_one_core": round3(seconds / idle_seconds * 100.0),
        })
    });

    // The writes.
    let bar = progress(target.quiet, args.writes as u64, "writes");
    let mut all_ms = Vec::with_capacity(args.writes);
    let mut each_us = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).context("a histogram")?;
    let mut held_at_write = Vec::new();
    for write in 0..args.writes {
        match (&admin, args.mode) {
            (Some(admin), Mode::Held) => {
                let held =
                    admin.wait_until("all agents held", args.patience, |held| held >= args.agents as u64).await?;
                held_at_write.push(held);
            }
            _ => tokio::time::sleep(args.pause).await,
        }
        let revision = base + 1 + write as u64;
        let written = Instant::now();
        wants = write_document(&args.file, &target.service_prefix, services, args.keys, revision)?;
        let last = holding.wait_all(&mut receipts, &wants, written, args.patience, "a write").await?;
        for delay in &holding.delays {
            each_us.saturating_record(u64::try_from(delay.as_micros()).unwrap_or(u64::MAX).max(1));
        }
        all_ms.push(last.as_secs_f64() * 1000.0);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let rss_end_kb = server.as_ref().map(Proc::rss_kb).transpose()?;
    let metrics = match &admin {
        Some(admin) => Some(admin.held_metrics().await?),
        None => None,
    };
    stop.cancel();
    while let Some(joined) = tasks.join_next().await {
        joined.context("an agent task panicked")?;
    }

    let per_agent_kb = rss_before_kb
        .zip(rss_steady_kb)
        .map(|(before, steady)| round3((steady as f64 - before as f64) / args.agents as f64));
    let mut sorted = all_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let report = json!({
        "mode": "held",
        "polls": match args.mode { Mode::Held => "held", Mode::Plain => "plain" },
        "addr": target.addr,
        "agents": args.agents,
        "services": services,
        "keys": args.keys,
        "interval_s": args.timing.interval.as_secs_f64(),
        "deadline_s": args.timing.deadline.as_secs_f64(),
        "connect_seconds": round3(connect_seconds),
        "first_document_seconds": round3(first_poll_seconds),
        "held_polls": {"steady": held_at_steady, "at_each_write": held_at_write},
        "propagation_all_ms": {
            "writes": args.writes,
            "each": all_ms.iter().map(|ms| round3(*ms)).collect::<Vec<_>>(),
            "p50": round3(nearest_rank(&sorted, 0.50)),
            "p99": round3(nearest_rank(&sorted, 0.99)),
            "max": round3(sorted.last().copied().unwrap_or_default()),
        },
        "propagation_each_agent_us": {
            "p50": each_us.value_at_quantile(0.50),
            "p99": each_us.value_at_quantile(0.99),
            "max": each_us.max(),
        },
        "rss_kb": {"before": rss_before_kb, "steady": rss_steady_kb, "idle": rss_idle_kb, "end": rss_end_kb},
        "rss_per_agent_kb": per_agent_kb,
        "rss_per_agent_after_idle_kb": rss_before_kb
            .zip(rss_idle_kb)
            .map(|(before, idle)| round3((idle as f64 - before as f64) / args.agents as f64)),
        "smaps_rollup_kb": {"before": rollup_before, "steady": rollup_steady, "idle": rollup_idle},
        "server_fds": server_fds,
        "idle": {"seconds": round3(idle_seconds), "calls": idle_calls, "cpu": idle_cpu},
        "server_metrics": metrics,
        "calls": stats.done.load(Ordering::Relaxed),
        "latency_us": stats.latency_json(),
        "outcome": stats.outcome_json(),
    });
    print_report(&report, target.json);
    Ok(if stats.failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Opens `agents` connections to the target, `batch` at a time, with a progress bar.
pub(super) async fn connect_all(target: &Arc<Target>, agents: usize, batch: usize) -> anyhow::Result<Vec<Channel>> {
    let bar = progress(target.quiet, agents as u64, "connecting");
    let mut channels = Vec::with_capacity(agents);
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..agents {
        let target = Arc::clone(target);
        pending.spawn(async move { connect_channel(&target, i).await });
        if pending.len() >= batch.max(1) || i + 1 == agents {
            while let Some(joined) = pending.join_next().await {
                channels.push(joined.context("a connect task panicked")??);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(channels)
}

/// Which agents hold the wanted digest of their service, and after how long.
pub(super) struct Holding {
    agents: usize,
    /// Agents per service.
    per_service: Vec<usize>,
    /// The delay of each receipt of the wanted digest in the current round.
    pub(super) delays: Vec<Duration>,
}

impl Holding {
    pub(super) fn new(agents: usize, services: usize) -> Self {
        let mut per_service = vec![0; services];
        for i in 0..agents {
            per_service[i % services] += 1;
        }
        Self { agents, per_service, delays: Vec::with_capacity(agents) }
    }

    /// Waits until every agent has received its service's wanted digest (receipts of other
    /// digests, left from before, are skipped); the time from `since` to the last one.
    pub(super) async fn wait_all(
        &mut self,
        receipts: &mut mpsc::UnboundedReceiver<Receipt>,
        wants: &[String],
        since: Instant,
        patience: Duration,
        what: &str,
    ) -> anyhow::Result<Duration> {
        self.delays.clear();
        let mut have = vec![0usize; self.per_service.len()];
        let mut last = Duration::ZERO;
        let give_up = tokio::time::Instant::now() + patience;
        while self.delays.len() < self.agents {
            let receipt = tokio::time::timeout_at(give_up, receipts.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "{what}: only {} of {} agents got it within {patience:?}",
                        self.delays.len(),
                        self.agents
                    )
                })?
                .context("every agent stopped")?;
            if receipt.digest != wants[receipt.service] || have[receipt.service] >= self.per_service[receipt.service] {
                continue;
            }
            have[receipt.service] += 1;
            let delay = receipt.at.saturating_duration_since(since);
            last = last.max(delay);
            self.delays.push(delay);
        }
        Ok(last)
    }
}

/// Writes the synthetic document of `revision` (every service changed) by rename, as editors
/// and ConfigMap mounts replace a file; each service's digest in it.
pub(super) fn write_document(
    path: &Path,
    prefix: &str,
    services: usize,
    keys: usize,
    revision: u64,
) -> anyhow::Result<Vec<String>> {
    let text = super::document::document_every_service(prefix, services, keys, revision);
    let wants = digests(&text, prefix, services)?;
    let staged = path.with_extension("bench-tmp");
    std::fs::write(&staged, &text).with_context(|| format!("cannot write {}", staged.display()))?;
    std::fs::rename(&staged, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(wants)
}

/// Each service's digest in `text` (a synthetic document of `services` services), in order.
pub(super) fn digests(text: &str, prefix: &str, services: usize) -> anyhow::Result<Vec<String>> {
    let table = skyconf_core::read(text).context("the synthetic document is refused")?;
    (0..services)
        .map(|i| {
            table
                .get(&format!("{prefix}{i}"))
                .map(|s| s.digest().as_str().to_owned())
                .context("the synthetic document lacks a service")
        })
        .collect()
}

/// The server's process, read from `/proc`.
pub(super) struct Proc(pub(super) u32);

impl Proc {
    /// VmRSS, in KiB.
    pub(super) fn rss_kb(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0))
            .with_context(|| format!("cannot read /proc/{}/status", self.0))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS in /proc/PID/status")
    }

    /// `/proc/PID/smaps_rollup`'s fields, in KiB (Rss, Anonymous, Private_Dirty, ...): the
    /// process's own pages only, never the kernel's socket buffers. With `dir`, the whole
    /// `/proc/PID/smaps` is copied into `dir/<moment>.smaps` too.
    fn memory(&self, moment: &str, dir: Option<&std::path::Path>) -> anyhow::Result<serde_json::Value> {
        if let Some(dir) = dir {
            let path = dir.join(format!("{moment}.smaps"));
            std::fs::copy(format!("/proc/{}/smaps", self.0), &path)
                .with_context(|| format!("cannot copy /proc/{}/smaps to {}", self.0, path.display()))?;
        }
        let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", self.0))
            .with_context(|| format!("cannot read /proc/{}/smaps_rollup", self.0))?;
        let fields: serde_json::Map<String, serde_json::Value> = rollup
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                let kb: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
                Some((name.to_owned(), json!(kb)))
            })
            .collect();
        Ok(serde_json::Value::Object(fields))
    }

    /// utime + stime, in clock ticks.
    fn cpu_ticks(&self) -> anyhow::Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0))
            .with_context(|| format!("cannot read /proc/{}/stat", self.0))?;
        // After the command name in parentheses: state is field 3, utime 14 and stime 15.
        let rest = stat.rsplit_once(')').map(|(_, rest)| rest).context("a malformed /proc/PID/stat")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> anyhow::Result<u64> {
            fields.get(n - 3).and_then(|v| v.parse().ok()).context("a malformed /proc/PID/stat")
        };
        Ok(field(14)? + field(15)?)
    }

    /// Open descriptors.
    fn fds(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.0))?.count())
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when it cannot be asked).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The server's `/metrics`.
struct Admin {
    http: reqwest::Client,
    url: String,
}

impl Admin {
    fn new(addr: &str) -> anyhow::Result<Self> {
        Ok(Self { http: crate::http::client()?, url: format!("http://{addr}/metrics") })
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        Ok(crate::http::get_ok(&self.http, &self.url).await?.text().await?)
    }

    /// `skyconf_held_polls` now.
    async fn held(&self) -> anyhow::Result<u64> {
        let metrics = self.metrics().await?;
        metric(&metrics, "skyconf_held_polls").context("no skyconf_held_polls in /metrics (not a held-polls server?)")
    }

    /// Every `skyconf_held_polls*` sample.
    async fn held_metrics(&self) -> anyhow::Result<Value> {
        let metrics = self.metrics().await?;
        let samples: serde_json::Map<String, Value> = metrics
            .lines()
            .filter(|l| l.starts_with("skyconf_held_polls"))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(name, value)| (name.to_owned(), value.parse::<f64>().map_or(Value::Null, |v| json!(v))))
            .collect();
        Ok(Value::Object(samples))
    }

    /// Polls `skyconf_held_polls` until `done` holds for it; its value then.
    async fn wait_until(&self, what: &str, patience: Duration, done: impl Fn(u64) -> bool) -> anyhow::Result<u64> {
        let give_up = Instant::now() + patience;
        loop {
            let held = self.held().await?;
            if done(held) {
                return Ok(held);
            }
            if Instant::now() > give_up {
                bail!("{what}: not within {patience:?} (skyconf_held_polls {held})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The value of an unlabelled sample `name` in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

pub(super) fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_is_read_by_its_exact_name() {
        let text =
            "# HELP skyconf_held_polls x\nskyconf_held_polls_refused_total{limit=\"total\"} 4\nskyconf_held_polls 7\n";
        assert_eq!(metric(text, "skyconf_held_polls"), Some(7));
        assert_eq!(metric("", "skyconf_held_polls"), None);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(nearest_rank(&sorted, 0.5), 5.0);
        assert_eq!(nearest_rank(&sorted, 0.99), 10.0);
        assert_eq!(nearest_rank(&[], 0.5), 0.0);
    }

    #[test]
    fn digests_follow_the_service_order() {
        let text = super::super::document::document_every_service("s", 2, 3, 1);
        let table = skyconf_core::read(&text).unwrap();
        let got = digests(&text, "s", 2).unwrap();
        assert_eq!(got[1], table.get("s1").unwrap().digest().as_str());
        assert!(digests(&text, "s", 3).is_err(), "a missing service is an error");
    }

    #[test]
    fn agents_are_spread_over_the_services() {
        assert_eq!(Holding::new(10, 3).per_service, [4, 3, 3]);
    }

    #[tokio::test]
    async fn a_round_ends_when_every_agent_has_its_services_digest_and_skips_stale_ones() {
        let mut holding = Holding::new(3, 2);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let since = Instant::now();
        let wants = vec!["a2".to_owned(), "b2".to_owned()];
        let at = since + Duration::from_millis(7);
        for (service, digest) in [(0, "a1"), (0, "a2"), (1, "b2"), (0, "a2")] {
            tx.send(Receipt { service, digest: digest.to_owned(), at }).unwrap();
        }
        let last = holding.wait_all(&mut rx, &wants, since, Duration::from_secs(5), "test").await.unwrap();
        assert_eq!(last, Duration::from_millis(7));
        assert_eq!(holding.delays.len(), 3);
        let err = holding.wait_all(&mut rx, &wants, since, Duration::from_millis(50), "test").await.unwrap_err();
        assert!(err.to_string().contains("only 0 of 3"), "{err}");
    }
}
