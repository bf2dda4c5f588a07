//! `skyconf-bench revert`: how soon a rollout's failed gate reaches the agents it had reached.
//!
//! Thousands of agents, each on its own HTTP/2 connection, say which instance they are
//! (`ManagementService/reportInstanceProperties` on the connection they poll on, as a stock agent
//! does) and poll as the Java agent times its polls (a 30 s deadline, a fixed rate of 20 s). Then,
//! `--rounds` times, through the server's admin API:
//!
//! 1. a rollout of a candidate that changes every service is started, one wave of 100 %, gated on
//!    a Prometheus query; it waits until every agent holds the candidate's digest and the server
//!    says the wave is applied (its bake started);
//! 2. the query's answer turns bad: the gate's Prometheus is a stand-in inside this tool, so the
//!    moment the failure becomes readable is known exactly, and no real Prometheus' scrape
//!    interval sits between the failure and the gate;
//! 3. it waits until every agent holds its previous digest again.
//!
//! Reported per round: the failure → the server's `reverted` event (the gate's read cadence and
//! the driver's tick: detection), that event → the last agent holding its old digest (the goal:
//! a revert served), and per agent the same from the event. The server's clock writes the event
//! and this tool's clock times the agents; both are the machine's wall clock.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail, ensure};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{InstanceProperties, KeyStringValuePair};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use super::held::{Fleet, Holding, Timing, connect_all, digests, nearest_rank, outlasting, round3, write_document};
use super::{Client, Target, print_report, progress, runtime, service_name};
use crate::args::parse_duration;

/// Arguments of `skyconf-bench revert`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// The file the server serves (`skyconf serve --file`); it is replaced by a synthetic
    /// document of --services services × --keys keys, the one every rollout starts from.
    #[arg(long)]
    file: PathBuf,
    /// The server's admin address (`HOST:PORT`), where rollouts are started and read.
    #[arg(long)]
    admin_addr: String,
    /// Agents, one HTTP/2 connection each, named `bench-agent-<n>`.
    #[arg(long, short = 'c', default_value_t = 1_000)]
    agents: usize,
    /// Keys per service of the synthetic document.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// Rollouts to start and revert.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[command(flatten)]
    timing: Timing,
    /// How long one step (every agent holding a digest, the wave applied) may take before the
    /// run fails.
    #[arg(long, value_parser = parse_duration, default_value = "120s")]
    patience: Duration,
    /// Connections opened at once while ramping up.
    #[arg(long, default_value_t = 200)]
    connect_batch: usize,
}

/// The gate's threshold; the stand-in answers 0 (pass) or 1 (fail).
const GATE_MAX: f64 = 0.5;

/// One round's times.
struct Round {
    start_to_all_ms: f64,
    failure_to_event_ms: f64,
    event_to_all_ms: f64,
    failure_to_all_ms: f64,
}

/// Runs the agents and the rounds, and prints the report.
pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    ensure!(args.agents > 0, "--agents must be > 0");
    ensure!(args.rounds > 0, "--rounds must be > 0");
    ensure!(args.target.services > 0, "--services must be > 0");
    runtime(args.target.threads)?.block_on(bench(args))
}

async fn bench(args: Args) -> anyhow::Result<ExitCode> {
    let target = outlasting(&args.target, args.timing.deadline);
    let services = target.services;
    let admin = RolloutApi::new(&args.admin_addr)?;
    let gate = StandIn::start().await?;

    // The document every rollout starts from, and the candidate that changes every service.
    let revision = unix_ms() / 1000 % 1_000_000 * 1000;
    let before = write_document(&args.file, &target.service_prefix, services, args.keys, revision)?;
    let candidate = super::document::document_every_service(&target.service_prefix, services, args.keys, revision + 1);
    let after = digests(&candidate, &target.service_prefix, services)?;

    // Every agent: its connection, who it is on it, then its polls.
    let ramp = Instant::now();
    let channels = connect_all(&target, args.agents, args.connect_batch).await?;
    let connect_seconds = ramp.elapsed().as_secs_f64();
    let bar = progress(target.quiet, args.agents as u64, "reporting instances");
    for (i, channel) in channels.iter().enumerate() {
        let service = service_name(&target, i % services);
        let message = InstanceProperties {
            service,
            service_instance: format!("bench-agent-{i}"),
            properties: vec![KeyStringValuePair { key: "hostname".into(), value: format!("bench-host-{i}") }],
            layer: String::new(),
        };
        ManagementServiceClient::new(channel.clone())
            .report_instance_properties(message)
            .await
            .with_context(|| format!("agent {i}: reportInstanceProperties failed"))?;
        bar.inc(1);
    }
    bar.finish_and_clear();

    let Fleet { stats, stop, mut receipts, mut tasks, started } =
        Fleet::spawn(&target, channels.into_iter().map(Client::new), services, args.timing, 0x5EED_0F4E_7E47);
    let mut holding = Holding::new(args.agents, services);
    holding.wait_all(&mut receipts, &before, started, args.patience, "the first document").await?;
    let first_document_seconds = started.elapsed().as_secs_f64();

    let bar = progress(target.quiet, args.rounds as u64, "rollouts");
    let mut rounds = Vec::with_capacity(args.rounds);
    let mut each_agent_us = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).context("a histogram")?;
    let mut outcomes = Vec::with_capacity(args.rounds);
    for round in 0..args.rounds {
        gate.set(0.0);
        let plan = json!({
            "document": candidate,
            "waves": [{"share": "100%"}],
            "gates": {
                "apply_within_s": args.patience.as_secs().max(1),
                "bake_s": 86_400,
                "lost_after_s": 86_400,
                "prometheus": {"url": gate.url(), "query": "bench_error_ratio", "max": GATE_MAX},
            },
            "advance": "auto",
            "author": "skyconf-bench revert",
            "message": format!("round {}", round + 1),
        });
        let start = Instant::now();
        let id = admin.start(&plan).await?;
        let start_to_all = holding.wait_all(&mut receipts, &after, start, args.patience, "the candidate").await?;
        admin.wait_applied(&id, args.patience).await?;

        let failed = Instant::now();
        let failed_ms = unix_ms_f64();
        gate.set(1.0);
        let failure_to_all = holding.wait_all(&mut receipts, &before, failed, args.patience, "the revert").await?;
        let (reverted_ms, outcome) = admin.reverted_at(&id).await?;
        // Each agent's delay from the server's `reverted` event (wall clock, milliseconds).
        let mut last_ms = 0.0f64;
        for delay in &holding.delays {
            let from_event_ms = (failed_ms + delay.as_secs_f64() * 1000.0 - reverted_ms as f64).max(0.0);
            last_ms = last_ms.max(from_event_ms);
            each_agent_us.saturating_record(((from_event_ms * 1000.0) as u64).max(1));
        }
        rounds.push(Round {
            start_to_all_ms: start_to_all.as_secs_f64() * 1000.0,
            failure_to_event_ms: (reverted_ms as f64 - failed_ms).max(0.0),
            event_to_all_ms: last_ms,
            failure_to_all_ms: failure_to_all.as_secs_f64() * 1000.0,
        });
        outcomes.push(outcome);
        bar.inc(1);
    }
    bar.finish_and_clear();
    stop.cancel();
    while let Some(joined) = tasks.join_next().await {
        joined.context("an agent task panicked")?;
    }

    let spread = |pick: fn(&Round) -> f64| {
        let each: Vec<f64> = rounds.iter().map(pick).collect();
        let mut sorted = each.clone();
        sorted.sort_by(f64::total_cmp);
        json!({
            "each": each.iter().map(|ms| round3(*ms)).collect::<Vec<_>>(),
            "p50": round3(nearest_rank(&sorted, 0.50)),
            "p99": round3(nearest_rank(&sorted, 0.99)),
            "max": round3(sorted.last().copied().unwrap_or_default()),
        })
    };
    let report = json!({
        "mode": "revert",
        "addr": target.addr,
        "agents": args.agents,
        "services": services,
        "keys": args.keys,
        "rounds": args.rounds,
        "interval_s": args.timing.interval.as_secs_f64(),
        "deadline_s": args.timing.deadline.as_secs_f64(),
        "connect_seconds": round3(connect_seconds),
        "first_document_seconds": round3(first_document_seconds),
        "start_to_all_ms": spread(|r| r.start_to_all_ms),
        "failure_to_revert_event_ms": spread(|r| r.failure_to_event_ms),
        "revert_event_to_all_ms": spread(|r| r.event_to_all_ms),
        "failure_to_all_ms": spread(|r| r.failure_to_all_ms),
        "revert_event_to_each_agent_us": {
            "p50": each_agent_us.value_at_quantile(0.50),
            "p99": each_agent_us.value_at_quantile(0.99),
            "max": each_agent_us.max(),
        },
        "outcomes": outcomes,
        "gate_reads": gate.reads(),
        "calls": stats.done.load(Ordering::Relaxed),
        "latency_us": stats.latency_json(),
        "outcome": stats.outcome_json(),
    });
    print_report(&report, target.json);
    Ok(if stats.failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn unix_ms_f64() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn unix_ms() -> u64 {
    unix_ms_f64() as u64
}

/// The rollouts API of the server under test.
struct RolloutApi {
    http: reqwest::Client,
    base: String,
}

impl RolloutApi {
    fn new(addr: &str) -> anyhow::Result<Self> {
        Ok(Self { http: crate::http::client()?, base: format!("http://{addr}/api/v1/rollouts") })
    }

    /// Starts a rollout of `plan`; its id.
    async fn start(&self, plan: &Value) -> anyhow::Result<String> {
        let reply =
            self.http.post(&self.base).json(plan).send().await.with_context(|| format!("POST {}", self.base))?;
        let status = reply.status();
        let body: Value = reply.json().await.context("the rollout answer is not JSON")?;
        ensure!(status == reqwest::StatusCode::CREATED, "POST {}: {status}: {body}", self.base);
        body["rollout"]["id"].as_str().map(str::to_owned).context("the rollout answer has no id")
    }

    /// The current rollout, which must be `id`.
    async fn current(&self, id: &str) -> anyhow::Result<Value> {
        let reply = crate::http::get_ok(&self.http, &self.base).await?;
        let mut body: Value = reply.json().await.context("the rollout answer is not JSON")?;
        let rollout = body["rollout"].take();
        ensure!(rollout["id"] == id, "the current rollout is not {id}: {rollout}");
        Ok(rollout)
    }

    /// Waits until the rollout's wave is applied (its bake started).
    async fn wait_applied(&self, id: &str, patience: Duration) -> anyhow::Result<()> {
        let give_up = Instant::now() + patience;
        loop {
            let rollout = self.current(id).await?;
            if !rollout["applied_ms"].is_null() {
                return Ok(());
            }
            if rollout["state"] != "running" {
                bail!("rollout {id} ended before its wave was applied: {}", rollout["events"]);
            }
            if Instant::now() > give_up {
                bail!("rollout {id}: its wave was not applied within {patience:?}: {}", rollout["progress"]);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// When the rollout was reverted (Unix milliseconds), and why.
    async fn reverted_at(&self, id: &str) -> anyhow::Result<(u64, String)> {
        let rollout = self.current(id).await?;
        ensure!(rollout["state"] == "reverted", "rollout {id} is {} after its gate failed", rollout["state"]);
        let events = rollout["events"].as_array().context("a rollout without events")?;
        let event = events.iter().rev().find(|e| e["kind"] == "reverted").context("no `reverted` event")?;
        let at = event["at_ms"].as_u64().context("a `reverted` event without at_ms")?;
        Ok((at, event["message"].as_str().unwrap_or_default().to_owned()))
    }
}

/// A Prometheus stand-in: answers every `/api/v1/query` with one sample of the value last set.
struct StandIn {
    addr: SocketAddr,
    value: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
    _stop: tokio_util::sync::DropGuard,
}

impl StandIn {
    async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot listen for the gate")?;
        let addr = listener.local_addr()?;
        let value = Arc::new(AtomicU64::new(0f64.to_bits()));
        let reads = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (v, r, s) = (Arc::clone(&value), Arc::clone(&reads), stop.clone());
        tokio::spawn(async move {
            loop {
                let (socket, _) = tokio::select! {
                    accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => continue },
                    () = s.cancelled() => return,
                };
                let sample = f64::from_bits(v.load(Ordering::SeqCst));
                r.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(answer(socket, sample));
            }
        });
        Ok(Self { addr, value, reads, _stop: stop.drop_guard() })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, sample: f64) {
        self.value.store(sample.to_bits(), Ordering::SeqCst);
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// One HTTP/1.1 exchange: reads the request head, answers the query API's vector of one sample,
/// and closes the connection.
async fn answer(mut socket: tokio::net::TcpStream, sample: f64) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let now = unix_ms_f64() / 1000.0;
    let body = json!({
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {"job": "bench"}, "value": [now, sample.to_string()]}]},
    })
    .to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(reply.as_bytes()).await;
    let _ = socket.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_stand_in_answers_the_query_api_with_the_value_last_set() {
        let gate = StandIn::start().await.unwrap();
        let http = reqwest::Client::new();
        let read = || async {
            let body: Value = http
                .get(format!("{}/api/v1/query", gate.url()))
                .query(&[("query", "x")])
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(body["status"], "success");
            assert_eq!(body["data"]["resultType"], "vector");
            body["data"]["result"][0]["value"][1].as_str().unwrap().to_owned()
        };
        assert_eq!(read().await, "0");
        gate.set(1.0);
        assert_eq!(read().await, "1");
        assert_eq!(gate.reads(), 2);
    }
}
