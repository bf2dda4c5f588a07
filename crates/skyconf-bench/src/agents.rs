//! `skyconf-bench agents`: thousands of idle agents, each on its own connection and polling every
//! `--interval` like a stock agent, to measure memory per connection and connection scale.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use skyconf_core::backoff::Rng;
use skyconf_proto::v3::ConfigurationSyncRequest;

use super::raw::RawArgs;
use super::{Stats, Target, Worker, exit_code, print_report, progress, runtime, service_name};
use crate::args::parse_duration;

/// Arguments of `skyconf-bench agents`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
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
    #[command(flatten)]
    raw: RawArgs,
}

/// Connects the agents, lets them poll for --duration and prints the report.
pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.connections > 0, "--connections must be > 0");
    runtime(args.target.threads)?.block_on(async move {
        let target = Arc::new(args.target.clone());
        let raw = Arc::new(args.raw.read()?);
        let bar = progress(target.quiet, args.connections as u64, "connecting");
        let ramp = Instant::now();
        let mut clients = Vec::with_capacity(args.connections);
        let mut pending = tokio::task::JoinSet::new();
        for i in 0..args.connections {
            let target = Arc::clone(&target);
            let raw = Arc::clone(&raw);
            pending.spawn(async move { Worker::open(&target, i, raw.as_ref().as_ref()).await });
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
        let mut rng = Rng::from_seed(0x2545_F491_4F6C_DD1D);
        for (i, mut client) in clients.into_iter().enumerate() {
            let stats = Arc::clone(&stats);
            let service = service_name(&target, i % target.services.max(1));
            // Agents start at random points of their interval, as a real fleet does.
            let offset = args.interval.mul_f64(rng.fraction());
            let interval = args.interval;
            tasks.spawn(async move {
                let mut uuid = String::new();
                let mut at = started + offset;
                while at < end {
                    tokio::time::sleep_until(at.into()).await;
                    let sent = Instant::now();
                    let result =
                        client.call(&ConfigurationSyncRequest { service: service.clone(), uuid: uuid.clone() }).await;
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
        crate::outln!(
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
