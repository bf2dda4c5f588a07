//! `skyconf-bench` without a subcommand: the load. Many HTTP/2 connections with many concurrent
//! streams each, closed loop or, with `--rate`, a fixed-rate open loop; every answer checked
//! against the [`Call`] planned for it. With `--path` and `--body-file`, every call goes to that
//! path with that body instead (a forwarded call through a gateway), and its answer must be an
//! empty `Commands` (`--check full`) or any answer with grpc-status 0 (`--check status`).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use skyconf_core::backoff::Rng;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::ConfigurationSyncRequest;

use super::raw::RawArgs;
use super::{Client, Stats, Target, Worker, exit_code, print_report, progress, runtime, service_name};
use crate::args::parse_duration;

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

/// Arguments of `skyconf-bench` without a subcommand: the load.
#[derive(Debug, Clone, clap::Args)]
// Flattened into `bench`'s own `Args`, whose group already has the struct's name.
#[group(id = "load")]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// What the load asks for.
    #[arg(long, value_enum, default_value = "unchanged")]
    scenario: Scenario,
    /// For `mixed`: percent unchanged, changed and unknown-service calls, `U,C,N`.
    #[arg(long, default_value = "80,15,5", value_delimiter = ',')]
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
    /// Calls made before measuring starts (checked, reported apart under `warmup`).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Fixed-rate open loop at this many calls per second in total, evenly spaced (warm-up
    /// included), latency measured from the time a call is due (no coordinated omission).
    #[arg(long)]
    rate: Option<f64>,
    /// How much of each answer to check.
    #[arg(long, value_enum, default_value = "full")]
    check: Check,
    #[command(flatten)]
    raw: RawArgs,
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
fn plan(load: &Args, digests: &[Option<String>]) -> Vec<Call> {
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
            let mut rng = Rng::from_seed(0x9E37_79B9_7F4A_7C15);
            let mut calls: Vec<Call> = (0..len)
                .map(|slot| {
                    let i = rng.below(n as u64) as usize;
                    match slot % total {
                        s if s < pu => unchanged(i),
                        s if s < pu + pc => changed(i),
                        _ => unknown(i),
                    }
                })
                .collect();
            for k in (1..calls.len()).rev() {
                calls.swap(k, rng.below(k as u64 + 1) as usize);
            }
            calls
        }
    }
}

/// Hands out send times at `rate` per second from `from` until `deadline`, round robin over
/// `callers`, from a thread of its own: tokio's timer wakes at most once a millisecond, so
/// callers sleeping on their own schedules set off together, ~rate/1000 calls in a burst at
/// each tick, and a server's queueing under that burst was counted as its latency. The thread
/// sleeps with the kernel's resolution (tens of microseconds) and, when it wakes late, hands
/// out every call due at once, each stamped with that moment. It stops at the deadline, or
/// when no caller is left.
fn pace(
    rate: f64,
    from: Instant,
    deadline: Option<Instant>,
    callers: Vec<tokio::sync::mpsc::UnboundedSender<Instant>>,
) {
    let interval = Duration::from_secs_f64(1.0 / rate);
    std::thread::spawn(move || {
        let mut next = from;
        let mut caller = 0;
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return;
            }
            if next > now {
                std::thread::sleep(next - now);
                continue;
            }
            while next <= now {
                if callers[caller].send(now).is_err() && callers.iter().all(|c| c.is_closed()) {
                    return;
                }
                caller = (caller + 1) % callers.len();
                next += interval;
            }
        }
    });
}

/// Runs the load and prints its report.
pub(super) fn run(load: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(load.connections > 0 && load.streams > 0, "--connections and --streams must be > 0");
    anyhow::ensure!(load.mix.len() == 3, "--mix takes three percentages, unchanged,changed,unknown");
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
        let raw = load.raw.read()?;
        let mut clients = Vec::with_capacity(load.connections);
        for i in 0..load.connections {
            clients.push(Worker::open(target, i, raw.as_ref()).await?);
        }
        let calls: Arc<[Call]> = match &mut clients[0] {
            // One call, repeated: its answer must be an empty `Commands`.
            Worker::Raw(_) => vec![Call { request: ConfigurationSyncRequest::default(), expect: None }].into(),
            Worker::Cds(first) => {
                let digests = discover(first, target).await?;
                if load.check == Check::Full && load.scenario != Scenario::Mixed {
                    anyhow::ensure!(
                        digests.iter().all(Option::is_some),
                        "the server answered a first call without a command; use --check status for servers that answer canned content"
                    );
                }
                plan(&load, &digests).into()
            }
        };
        let stats = Arc::new(Stats::new());
        // Warm-up calls are checked apart: `outcome` counts exactly the `calls` measured.
        let warmup = Arc::new(Stats::new());
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

        // Open loop: a pacer thread hands out send times, round robin over the callers (closed
        // loop: none).
        let mut tickets = match load.rate {
            Some(rate) => {
                let (senders, receivers): (_, Vec<_>) = (0..workers).map(|_| tokio::sync::mpsc::unbounded_channel()).unzip();
                pace(rate, started, deadline, senders);
                receivers
            }
            None => Vec::new(),
        }
        .into_iter();

        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..workers {
            let mut client = clients[w % load.connections].clone();
            let calls = Arc::clone(&calls);
            let stats = Arc::clone(&stats);
            let warmup = Arc::clone(&warmup);
            let issued = Arc::clone(&issued);
            let check = load.check;
            let mut tickets = tickets.next();
            tasks.spawn(async move {
                let mut k = w;
                loop {
                    // When the call is sent, which latency counts from: open loop, the time the
                    // pacer handed it out (if this caller is still busy then, the wait is the
                    // server's); closed loop, now.
                    let start = match tickets.as_mut() {
                        Some(tickets) => match tickets.recv().await {
                            Some(at) => at,
                            None => break,
                        },
                        None => Instant::now(),
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
                    let result = client.call(&call.request).await;
                    // Only measured calls count, in the outcome as in `calls` (warm-up answers
                    // are checked and reported apart), so `ok` never exceeds `calls`.
                    let expect = (check == Check::Full).then_some(&call.expect);
                    if measured {
                        stats.check(result, expect);
                        stats.record_latency(start.elapsed());
                        stats.done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        warmup.check(result, expect);
                        warmup.done.fetch_add(1, Ordering::Relaxed);
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
        // Where the run ended, not where the last tick left it.
        bar.set_position(if load.requests.is_some() { stats.done.load(Ordering::Relaxed) } else { elapsed.as_secs() });
        bar.finish_and_clear();

        let done = stats.done.load(Ordering::Relaxed);
        let report = json!({
            "mode": "load",
            "addr": target.addr,
            "scenario": if raw.is_some() { "path".to_owned() } else { format!("{:?}", load.scenario).to_lowercase() },
            "path": load.raw.path,
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
            "warmup": { "calls": warmup.done.load(Ordering::Relaxed), "outcome": warmup.outcome_json() },
        });
        print_report(&report, target.json);
        Ok(if warmup.failed() { ExitCode::from(1) } else { exit_code(&stats) })
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// The load's flags alone, parsed as the command line would be.
    #[derive(Debug, clap::Parser)]
    struct Load {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn a_mixed_plan_keeps_the_exact_mix_and_is_the_same_every_run() {
        let load = Load::parse_from(["bench", "--scenario", "mixed", "--services", "40", "--mix", "80,15,5"]).args;
        let digests: Vec<_> = (0..40).map(|i| Some(format!("digest-{i}"))).collect();
        let calls = plan(&load, &digests);
        assert_eq!(calls.len(), 100);
        let unknown = calls.iter().filter(|c| c.request.service.contains("unknown-")).count();
        let unchanged = calls.iter().filter(|c| c.expect.is_none()).count();
        assert_eq!((unchanged, calls.len() - unchanged - unknown, unknown), (80, 15, 5));
        let again = plan(&load, &digests);
        let services = |calls: &[Call]| calls.iter().map(|c| c.request.service.clone()).collect::<Vec<_>>();
        assert_eq!(services(&calls), services(&again));
    }
}
