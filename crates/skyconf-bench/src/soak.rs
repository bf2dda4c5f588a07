//! `skyconf-bench soak`: hours of what a fleet and its operators do to a server, checked as it
//! goes. `scripts/soak.sh` runs it next to a server on etcd while it makes the store flap and puts
//! refused documents straight into the store.
//!
//! These run at once until `--duration` is over:
//! - **Agents:** `--agents` connections poll their service every `--interval`, caching the digest
//!   as a stock agent does. Every answer is checked: the EMPTY command is never right (every
//!   document the soak writes configures every service), and neither is a status that makes a
//!   Java agent drop its channel (`UNKNOWN`, `UNAVAILABLE`, `RESOURCE_EXHAUSTED`, ...).
//! - **Held agents, churning** (`--held-agents`, `--churn-every`): agents with the Java agent's
//!   timing and `ManagementService` calls, whose polls the server holds; one is killed during its
//!   held poll and replaced every `--churn-every` ([`fleet`]).
//! - **Forwarded streams** (`--stream-clients`, for a server in gateway mode): trace-segment
//!   client streams through the server to its upstream, each of which must end OK ([`streams`]).
//! - **Writes:** every `--write-every`, a document through the admin API. Three in four are good
//!   (a new revision, sent with `If-Match`); one in four is refused (a syntax error, a null value,
//!   no `configurations:`, an alias bomb), and must be a 400. After each write the served document
//!   (`GET /api/v1/configurations`) must be the last acknowledged one: a lost acknowledged write
//!   is a failure, and so is a release id that does not grow.
//! - **Resources:** with `--pid`, the server's RSS and open descriptors are sampled every
//!   `--sample-every`. The second half of the run may not exceed the first half's peak by more
//!   than `--rss-growth-percent` (a leak grows; a plateau is bounded), and descriptors may not
//!   grow past the first half's peak plus `--fd-slack`.
//!
//! When `--duration` is over, the churn stops and, with every agent still polling, the fleet view
//! (`/api/v1/services`, `/api/v1/instances`, `/metrics`) must agree with the live fleet.
//!
//! The report is one JSON object (or a table); the exit status is 0 only when nothing failed.

mod fleet;
mod streams;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};
use skyconf_core::codec::DiscoveryCommand;
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::ConfigurationSyncRequest;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::{Target, connect, print_report, runtime, service_name};
use crate::args::parse_duration;

/// Arguments of `skyconf-bench soak`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// The server's admin API, where the documents are written.
    #[arg(long, default_value = "http://127.0.0.1:12800")]
    admin: String,
    /// Agents, one connection each; agent `i` polls service `i % --services`.
    #[arg(long, default_value_t = 200)]
    agents: usize,
    /// Each agent polls this often.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    interval: Duration,
    /// How long the soak runs.
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    duration: Duration,
    /// A document is written this often.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    write_every: Duration,
    /// Keys per service of the written documents.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// The server's process id, to sample its RSS and open descriptors.
    #[arg(long)]
    pid: Option<u32>,
    /// How often RSS and descriptors are sampled.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    sample_every: Duration,
    /// How far the second half's RSS peak may exceed the first half's, in percent.
    #[arg(long, default_value_t = 25)]
    rss_growth_percent: u64,
    /// How many descriptors the second half may hold beyond the first half's peak.
    #[arg(long, default_value_t = 32)]
    fd_slack: u64,
    /// Agents with the Java agent's timing (30 s deadlines, so the server holds their polls) that
    /// name their instance and send keepAlive, each on a connection of its own; they poll every
    /// service but the first, which the writes change.
    #[arg(long, default_value_t = 0)]
    held_agents: usize,
    /// The held agents' fixed poll rate.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    held_interval: Duration,
    /// Kill one held agent this often (during its held poll when one is held) and replace it,
    /// under the same name or a new one.
    #[arg(long, value_parser = parse_duration)]
    churn_every: Option<Duration>,
    /// Connections sending trace-segment client streams (to a server in gateway mode, which
    /// forwards them to its upstream).
    #[arg(long, default_value_t = 0)]
    stream_clients: usize,
    /// Each stream connection sends a report this often.
    #[arg(long, value_parser = parse_duration, default_value = "100ms")]
    stream_every: Duration,
    /// Segments per report.
    #[arg(long, default_value_t = 5)]
    stream_messages: usize,
}

/// Documents the server must refuse, with why.
const REFUSED: [(&str, &str); 4] = [
    ("a syntax error", "configurations:\n  soak-svc-0: [unclosed\n"),
    ("a null value", "configurations:\n  soak-svc-0:\n    agent.sample_n_per_3_secs:\n"),
    ("no configurations key", "configuration:\n  soak-svc-0:\n    k: v\n"),
    (
        "an alias bomb",
        "a: &a xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n\
         b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
         c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
         d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
         e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n\
         configurations:\n  soak-svc-0: {k: *e}\n",
    ),
];

/// How long an admin call may take before its outcome counts as open.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Statuses after which a Java agent drops its channel: never right.
const CHANNEL_DROPPING: [Code; 5] =
    [Code::Unknown, Code::Unavailable, Code::ResourceExhausted, Code::Unauthenticated, Code::PermissionDenied];

/// What went wrong, counted by kind, with the first example of each.
#[derive(Debug, Default)]
struct Failures(Mutex<BTreeMap<String, (u64, String)>>);

impl Failures {
    fn record(&self, kind: &str, example: impl FnOnce() -> String) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(kind) {
            Some((n, _)) => *n += 1,
            None => {
                let example = example();
                tracing::error!(kind, example, "The soak found a failure.");
                map.insert(kind.to_owned(), (1, example));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    fn json(&self) -> Value {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(k, (n, example))| (k.clone(), json!({ "count": n, "first": example }))).collect()
    }
}

/// Counters of what happened, by name.
#[derive(Debug, Default)]
struct Counts(Mutex<BTreeMap<&'static str, u64>>);

impl Counts {
    fn add(&self, name: &'static str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()).entry(name).or_default() += 1;
    }

    fn json(&self) -> Value {
        json!(*self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Runs the soak and prints the report.
pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.agents > 0, "--agents must be > 0");
    anyhow::ensure!(args.target.services > 0, "--services must be > 0");
    runtime(args.target.threads)?.block_on(async move {
        let failures = Arc::new(Failures::default());
        let counts = Arc::new(Counts::default());
        let started = Instant::now();
        let end = started + args.duration;

        let mut clients = Vec::with_capacity(args.agents);
        let mut plain: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..args.agents {
            clients.push(connect(&args.target, i).await?);
            *plain.entry(service_name(&args.target, i % args.target.services)).or_default() += 1;
        }
        // The agents poll until the fleet view has been checked, after `end`.
        let stop = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, mut client) in clients.into_iter().enumerate() {
            let service = service_name(&args.target, i % args.target.services);
            let (failures, counts, interval) = (Arc::clone(&failures), Arc::clone(&counts), args.interval);
            let stop = stop.clone();
            tasks.spawn(async move {
                let mut uuid = String::new();
                // Spread over the interval, as a real fleet is.
                let mut at = started + interval.mul_f64((i as f64 * 0.618_034).fract());
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep_until(at.into()) => {}
                    }
                    at += interval;
                    let request = ConfigurationSyncRequest { service: service.clone(), uuid: uuid.clone() };
                    match client.fetch_configurations(request).await {
                        Err(status) if CHANNEL_DROPPING.contains(&status.code()) => {
                            failures.record("channel_dropping_status", || format!("{service}: {status}"));
                        }
                        Err(_) => counts.add("other_status"),
                        Ok(answer) => match DiscoveryCommand::find(&answer.into_inner()).and_then(|c| c.uuid) {
                            Some(digest) if digest == EMPTY_DIGEST => {
                                failures.record("empty_answer", || format!("{service} was answered EMPTY"));
                            }
                            Some(digest) => {
                                counts.add("command_answers");
                                uuid = digest;
                            }
                            None => counts.add("unchanged_answers"),
                        },
                    }
                }
            });
        }

        let settings = fleet::Settings {
            target: args.target.clone(),
            agents: args.held_agents,
            interval: args.held_interval,
            churn_every: args.churn_every,
        };
        let held = fleet::HeldFleet::start(settings, Arc::clone(&failures), Arc::clone(&counts)).await?;
        let churn = tokio::spawn(held.churn(end));
        let streams = tokio::spawn(streams::run(
            args.target.clone(),
            args.stream_clients,
            args.stream_every,
            args.stream_messages,
            end,
            Arc::clone(&failures),
            Arc::clone(&counts),
        ));
        let writer = tokio::spawn(write_loop(args.clone(), end, Arc::clone(&failures), Arc::clone(&counts)));
        let resources = args.pid.map(|pid| tokio::spawn(sample_loop(pid, args.sample_every, end)));

        streams.await.context("the streams panicked")?;
        let held = churn.await.context("the churn panicked")?;
        let written = writer.await.context("the writer panicked")?;
        let fleet_view = held.check_view(&args.admin, &plain).await;
        stop.cancel();
        held.stop().await;
        while let Some(joined) = tasks.join_next().await {
            joined.context("an agent task panicked")?;
        }
        let resources = match resources {
            Some(task) => Some(task.await.context("the sampler panicked")?),
            None => None,
        };
        let resource_report = resources.as_ref().map(|samples| judge_resources(samples, &args, &failures));

        let report = json!({
            "mode": "soak",
            "addr": args.target.addr,
            "admin": args.admin,
            "agents": args.agents,
            "held_agents": args.held_agents,
            "churn_every_s": args.churn_every.map(|d| d.as_secs_f64()),
            "stream_clients": args.stream_clients,
            "services": args.target.services,
            "seconds": started.elapsed().as_secs(),
            "counts": counts.json(),
            "acknowledged_writes": written,
            "resources": resource_report,
            "fleet_view": fleet_view,
            "failures": failures.json(),
            "passed": failures.is_empty(),
        });
        print_report(&report, args.target.json);
        Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
    })
}

/// Writes documents until `end`, checking each outcome; returns how many writes were acknowledged.
async fn write_loop(args: Args, end: Instant, failures: Arc<Failures>, counts: Arc<Counts>) -> u64 {
    // A write may take the store's timeouts (a frozen etcd: a call, then one retry on a new
    // connection) plus the server's wait for the new document to be served (10 s).
    let http = match reqwest::Client::builder().timeout(ADMIN_TIMEOUT).build() {
        Ok(http) => http,
        Err(error) => {
            failures.record("http_client", || error.to_string());
            return 0;
        }
    };
    let url = format!("{}/api/v1/configurations", args.admin.trim_end_matches('/'));
    let mut ledger = Ledger::default();
    let mut round = 0u64;
    while Instant::now() + args.write_every < end {
        tokio::time::sleep(args.write_every).await;
        round += 1;
        let Some((etag, served)) = current(&http, &url, &counts).await else { continue };
        ledger.check(served.as_deref(), &failures, &counts);
        let refused = round.is_multiple_of(4).then(|| REFUSED[(round / 4) as usize % REFUSED.len()]);
        let document = match refused {
            Some((_, text)) => text.to_owned(),
            None => super::document::document(&args.target.service_prefix, args.target.services, args.keys, round),
        };
        let mut request = http
            .put(&url)
            .header("content-type", "application/yaml")
            .header("x-skyconf-author", "soak")
            .body(document.clone());
        if let Some(etag) = &etag {
            request = request.header("if-match", etag);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                counts.add("write_unanswered");
                tracing::warn!(%error, "A write was not answered; it may still land.");
                ledger.uncertain.push(document);
                continue;
            }
        };
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        match (refused, status) {
            (Some(_), 400) => counts.add("refused_as_expected"),
            (Some((why, _)), _) => failures.record("bad_document_not_refused", || format!("{why}: {status} {body}")),
            (None, 200) => {
                let release = body["release"]["id"].as_u64().unwrap_or(0);
                if release <= ledger.release {
                    failures.record("release_id_not_growing", || format!("{release} after {}", ledger.release));
                }
                ledger.acknowledge(document, release);
            }
            (None, 409) => counts.add("write_conflict"),
            // The store is down (refused, though a write cut off mid-way may still land), or the
            // document is taken but not served yet: the outcome is settled by a later read.
            (None, 503 | 202) => {
                counts.add(if status == 503 { "write_refused_store_down" } else { "write_not_yet_served" });
                ledger.uncertain.push(document);
            }
            (None, _) => failures.record("unexpected_write_status", || format!("{status} {body}")),
        }
    }
    if let Some((_, served)) = current(&http, &url, &counts).await {
        ledger.check(served.as_deref(), &failures, &counts);
    }
    ledger.acknowledged_writes
}

/// What the admin API acknowledged, and what it may still serve.
#[derive(Debug, Default)]
struct Ledger {
    /// The last acknowledged document: served until another write lands.
    acknowledged: Option<String>,
    /// Its release id; ids must grow.
    release: u64,
    /// Documents sent since, whose outcome the answer left open (503, 202, no answer).
    uncertain: Vec<String>,
    acknowledged_writes: u64,
}

impl Ledger {
    fn acknowledge(&mut self, document: String, release: u64) {
        self.acknowledged = Some(document);
        self.release = release;
        self.uncertain.clear();
        self.acknowledged_writes += 1;
    }

    /// The served document must be the acknowledged one, or one whose outcome was open.
    fn check(&mut self, served: Option<&str>, failures: &Failures, counts: &Counts) {
        let Some(acknowledged) = &self.acknowledged else { return };
        if served == Some(acknowledged.as_str()) {
            return;
        }
        if let Some(landed) = served.filter(|s| self.uncertain.iter().any(|u| u == s)) {
            counts.add("uncertain_write_landed");
            self.acknowledged = Some(landed.to_owned());
            self.uncertain.clear();
            return;
        }
        let release = self.release;
        failures.record("lost_acknowledged_write", || {
            format!("release {release} was acknowledged, but another document is served")
        });
    }
}

/// The ETag and the document served now; `None` when the admin API did not answer 200.
async fn current(http: &reqwest::Client, url: &str, counts: &Counts) -> Option<(Option<String>, Option<String>)> {
    let response = http.get(url).send().await.ok()?;
    if !response.status().is_success() {
        counts.add("read_not_ok");
        return None;
    }
    let etag = response.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body: Value = response.json().await.ok()?;
    Some((etag, body["document"].as_str().map(str::to_owned)))
}

/// One sample of the server's resources.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: u64,
}

/// Samples the process' RSS and descriptors every `every` until `end`.
async fn sample_loop(pid: u32, every: Duration, end: Instant) -> Vec<Sample> {
    let started = Instant::now();
    let mut samples = Vec::new();
    while Instant::now() < end {
        let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(str::to_owned)))
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()));
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).ok();
        if let (Some(rss_kib), Some(fds)) = (rss_kib, fds) {
            samples.push(Sample { at: started.elapsed(), rss_kib, fds });
        }
        tokio::time::sleep(every).await;
    }
    samples
}

/// Compares the second half of the samples with the first; records a failure when RSS or
/// descriptors grew past the allowance.
fn judge_resources(samples: &[Sample], args: &Args, failures: &Failures) -> Value {
    let half = args.duration / 2;
    let peak = |pick: fn(&Sample) -> u64, second: bool| {
        samples.iter().filter(|s| (s.at >= half) == second).map(pick).max().unwrap_or(0)
    };
    let (rss_first, rss_second) = (peak(|s| s.rss_kib, false), peak(|s| s.rss_kib, true));
    let (fds_first, fds_second) = (peak(|s| s.fds, false), peak(|s| s.fds, true));
    if samples.is_empty() {
        failures.record("no_resource_samples", || format!("/proc/{} could not be read", args.pid.unwrap_or(0)));
    }
    if rss_second > rss_first + rss_first * args.rss_growth_percent / 100 {
        failures
            .record("rss_grew", || format!("peak {rss_first} KiB in the first half, {rss_second} KiB in the second"));
    }
    if fds_second > fds_first + args.fd_slack {
        failures
            .record("descriptors_grew", || format!("peak {fds_first} in the first half, {fds_second} in the second"));
    }
    json!({
        "samples": samples.len(),
        "rss_kib": { "first": samples.first().map(|s| s.rss_kib), "peak_first_half": rss_first, "peak_second_half": rss_second, "last": samples.last().map(|s| s.rss_kib) },
        "fds": { "first": samples.first().map(|s| s.fds), "peak_first_half": fds_first, "peak_second_half": fds_second, "last": samples.last().map(|s| s.fds) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refused_document_is_refused_by_the_reader() {
        for (why, text) in REFUSED {
            assert!(skyconf_core::read(text).is_err(), "{why} was read");
        }
    }

    #[test]
    fn the_ledger_accepts_an_uncertain_write_that_landed_and_flags_any_other_document() {
        let (failures, counts) = (Failures::default(), Counts::default());
        let mut ledger = Ledger::default();
        ledger.check(Some("anything before the first acknowledgement"), &failures, &counts);
        ledger.acknowledge("a".into(), 1);
        ledger.check(Some("a"), &failures, &counts);
        ledger.uncertain.push("b".into());
        ledger.check(Some("b"), &failures, &counts);
        assert!(failures.is_empty());
        assert_eq!(ledger.acknowledged.as_deref(), Some("b"));
        ledger.check(Some("a"), &failures, &counts);
        assert!(!failures.is_empty(), "an older document served after a newer one landed is a lost write");
    }

    #[test]
    fn the_written_documents_configure_every_service() {
        let table = skyconf_core::read(&super::super::document::document("soak-svc-", 5, 6, 7)).unwrap();
        assert_eq!(table.len(), 5);
    }
}
