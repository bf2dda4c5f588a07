//! The soak's churning fleet and its check of the fleet view.
//!
//! **Held agents** behave as the Java agent does towards a gateway: on a connection of its own,
//! each names its instance (`ManagementService/reportInstanceProperties`, then `keepAlive` every
//! 30 s on a schedule of its own), and polls a service the soak's writes never change, at a fixed
//! rate with a 30 s deadline, so the server holds its polls. Every answer is checked: EMPTY, a
//! status that makes a Java agent drop its channel, or a held poll that outlives its deadline is a
//! failure.
//!
//! **Churn:** every `--churn-every`, one held agent is killed, preferably while its poll is held
//! (its task is dropped with the call in flight, so the connection closes under the held call),
//! and replaced after up to a second by a new one under the same name or a new name.
//!
//! **The view at the end:** with the churn stopped and every agent still polling,
//! `/api/v1/services`, `/api/v1/instances` and `/metrics` must say what the live fleet is: each
//! held service's live instance names, members and anonymous pollers counted by the one rule, and
//! `skyconf_fleet_agents{service, state}` equal to the API's counts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use skyconf_core::backoff::Rng;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{ConfigurationSyncRequest, InstancePingPkg, InstanceProperties, KeyStringValuePair};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

use super::{CHANNEL_DROPPING, Counts, Failures};
use crate::{Target, service_name};

/// The Java agent's deadline on each poll (`collector.grpc_upstream_timeout`).
const DEADLINE: Duration = Duration::from_secs(30);
/// The Java agent's heartbeat: `keepAlive` this often.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(30);
/// A poll outstanding this long is held by the server.
const HELD_AFTER: Duration = Duration::from_secs(1);
/// How long the view may take to agree with the live fleet once the churn stopped: a closed
/// connection leaves at once, a replacement shows after its first poll.
const VIEW_PATIENCE: Duration = Duration::from_secs(20);

/// What the held agents do.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) target: Target,
    pub(super) agents: usize,
    pub(super) interval: Duration,
    pub(super) churn_every: Option<Duration>,
}

/// One live held agent.
#[derive(Debug)]
struct Member {
    name: String,
    service: String,
    /// When its current poll began (Unix ms; 0 between polls).
    polling_since: Arc<AtomicU64>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The held agents, their churn and what it did.
#[derive(Debug)]
pub(super) struct HeldFleet {
    settings: Settings,
    members: Vec<Member>,
    started: usize,
    rng: Rng,
    failures: Arc<Failures>,
    counts: Arc<Counts>,
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl HeldFleet {
    /// Starts `settings.agents` held agents.
    pub(super) async fn start(
        settings: Settings,
        failures: Arc<Failures>,
        counts: Arc<Counts>,
    ) -> anyhow::Result<Self> {
        let mut fleet =
            Self { settings, members: Vec::new(), started: 0, rng: Rng::from_seed(0x5EED_C4A2), failures, counts };
        for i in 0..fleet.settings.agents {
            let service = fleet.service_of(i);
            fleet.spawn(format!("soak-held-{i}"), service).await?;
        }
        Ok(fleet)
    }

    /// The held agents' services: every one but the first, which the soak's writes change.
    fn service_of(&self, i: usize) -> String {
        let others = self.settings.target.services.saturating_sub(1).max(1);
        service_name(&self.settings.target, 1 + i % others)
    }

    async fn spawn(&mut self, name: String, service: String) -> anyhow::Result<()> {
        // No transport timeout: each call carries its own deadline, which held polls use whole.
        let channel = self
            .settings
            .target
            .addr
            .endpoint()?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .connect()
            .await?;
        let polling_since = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let agent = Agent {
            name: name.clone(),
            service: service.clone(),
            interval: self.settings.interval,
            polling_since: Arc::clone(&polling_since),
            failures: Arc::clone(&self.failures),
            counts: Arc::clone(&self.counts),
        };
        let task = tokio::spawn(agent.run(channel, stop.clone()));
        self.members.push(Member { name, service, polling_since, stop, task });
        self.started += 1;
        Ok(())
    }

    /// Kills one agent (one whose poll is held, when there is one) and starts its replacement,
    /// under the same name or a new one; until `end`.
    pub(super) async fn churn(mut self, end: Instant) -> Self {
        let Some(every) = self.settings.churn_every else { return self };
        let mut tick = tokio::time::interval_at((Instant::now() + every).into(), every);
        loop {
            tick.tick().await;
            if Instant::now() >= end || self.members.is_empty() {
                return self;
            }
            let now = unix_ms();
            let held: Vec<usize> = (0..self.members.len())
                .filter(|&i| {
                    let since = self.members[i].polling_since.load(Ordering::Relaxed);
                    since != 0 && now.saturating_sub(since) >= HELD_AFTER.as_millis() as u64
                })
                .collect();
            let victim = if held.is_empty() {
                self.counts.add("held_agent_kills_between_polls");
                self.rng.below(self.members.len() as u64) as usize
            } else {
                self.counts.add("held_agent_kills_during_held_poll");
                held[self.rng.below(held.len() as u64) as usize]
            };
            let member = self.members.swap_remove(victim);
            member.stop.cancel();
            let _ = member.task.await;
            let pause = Duration::from_millis(self.rng.below(1000));
            tokio::time::sleep(pause).await;
            let name = if self.rng.below(2) == 0 {
                self.counts.add("held_agent_restarts_same_name");
                member.name
            } else {
                self.counts.add("held_agent_restarts_new_name");
                format!("soak-held-{}", self.settings.agents + self.started)
            };
            if let Err(error) = self.spawn(name, member.service).await {
                self.failures.record("held_agent_cannot_connect", || error.to_string());
            }
        }
    }

    /// Stops every agent.
    pub(super) async fn stop(self) {
        for member in &self.members {
            member.stop.cancel();
        }
        for member in self.members {
            let _ = member.task.await;
        }
    }

    /// The live fleet: per service, the held agents' instance names (sorted).
    fn live(&self) -> BTreeMap<String, Vec<String>> {
        let mut live: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for member in &self.members {
            live.entry(member.service.clone()).or_default().push(member.name.clone());
        }
        for names in live.values_mut() {
            names.sort();
        }
        live
    }

    /// Waits until the admin API and the metrics agree with the live fleet (`plain`: the
    /// anonymous pollers per service); records a failure with the differences if they do not
    /// within [`VIEW_PATIENCE`]. Returns what it found, for the report.
    pub(super) async fn check_view(&self, admin: &str, plain: &BTreeMap<String, usize>) -> Value {
        let live = self.live();
        let started = Instant::now();
        let mut differences;
        loop {
            differences = match read_view(admin).await {
                Ok(view) => compare(&view, &live, plain),
                Err(error) => vec![format!("cannot read the view: {error}")],
            };
            if differences.is_empty() || started.elapsed() >= VIEW_PATIENCE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let agreed = differences.is_empty();
        if !agreed {
            self.failures.record("fleet_view_disagrees_with_the_live_fleet", || differences.join("; "));
        }
        json!({
            "held_agents_live": self.members.len(),
            "held_agents_started": self.started,
            "agreed": agreed,
            "seconds": round1(started.elapsed().as_secs_f64()),
            "differences": differences,
        })
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// One held agent's talk on its connection.
struct Agent {
    name: String,
    service: String,
    interval: Duration,
    polling_since: Arc<AtomicU64>,
    failures: Arc<Failures>,
    counts: Arc<Counts>,
}

impl Agent {
    async fn run(self, channel: Channel, stop: CancellationToken) {
        let mut management = ManagementServiceClient::new(channel.clone());
        let properties = InstanceProperties {
            service: self.service.clone(),
            service_instance: self.name.clone(),
            properties: vec![
                KeyStringValuePair { key: "language".into(), value: "java".into() },
                KeyStringValuePair { key: "hostname".into(), value: self.name.clone() },
            ],
            layer: String::new(),
        };
        let mut report = tonic::Request::new(properties);
        report.set_timeout(Duration::from_secs(10));
        self.check_management("reportInstanceProperties", management.report_instance_properties(report).await);
        let heartbeat = async {
            let mut tick = tokio::time::interval(KEEP_ALIVE_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let ping = InstancePingPkg {
                    service: self.service.clone(),
                    service_instance: self.name.clone(),
                    layer: String::new(),
                };
                let mut request = tonic::Request::new(ping);
                request.set_timeout(Duration::from_secs(10));
                self.check_management("keepAlive", management.keep_alive(request).await);
            }
        };
        let polls = self.poll(ConfigurationDiscoveryServiceClient::new(channel));
        tokio::select! {
            () = stop.cancelled() => {}
            () = heartbeat => {}
            () = polls => {}
        }
    }

    fn check_management<T>(&self, call: &str, result: Result<T, tonic::Status>) {
        match result {
            Ok(_) => self.counts.add("held_agent_management_calls"),
            Err(status) if CHANNEL_DROPPING.contains(&status.code()) => {
                self.failures
                    .record("held_agent_channel_dropping_status", || format!("{}: {call}: {status}", self.name));
            }
            Err(_) => self.counts.add("held_agent_management_other_status"),
        }
    }

    /// Polls at a fixed rate, echoing the digest of the last command; a call that outlasts the
    /// interval is followed at once.
    async fn poll(&self, mut client: ConfigurationDiscoveryServiceClient<Channel>) {
        let mut uuid = String::new();
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::time::sleep_until(next).await;
            next = tokio::time::Instant::now() + self.interval;
            let mut request =
                tonic::Request::new(ConfigurationSyncRequest { service: self.service.clone(), uuid: uuid.clone() });
            request.set_timeout(DEADLINE);
            self.polling_since.store(unix_ms(), Ordering::Relaxed);
            let result = client.fetch_configurations(request).await;
            self.polling_since.store(0, Ordering::Relaxed);
            match result {
                Ok(answer) => match DiscoveryCommand::find(&answer.into_inner()).and_then(|c| c.uuid) {
                    Some(digest) if digest == EMPTY_DIGEST => {
                        self.failures
                            .record("empty_answer", || format!("{} ({}) was answered EMPTY", self.name, self.service));
                    }
                    Some(digest) => {
                        self.counts.add("held_agent_command_answers");
                        uuid = digest;
                    }
                    None => self.counts.add("held_agent_unchanged_answers"),
                },
                Err(status) if status.code() == Code::DeadlineExceeded => {
                    self.failures.record("held_poll_outlived_its_deadline", || format!("{}: {status}", self.name));
                }
                Err(status) if CHANNEL_DROPPING.contains(&status.code()) => {
                    self.failures.record("held_agent_channel_dropping_status", || format!("{}: {status}", self.name));
                }
                Err(_) => self.counts.add("held_agent_other_status"),
            }
        }
    }
}

/// The view as the admin API and the metrics give it.
#[derive(Debug)]
struct View {
    expect_identity: bool,
    /// Per service, the counts of `/api/v1/services`.
    counts: BTreeMap<String, Value>,
    /// Per service, the instance names `/api/v1/instances` lists (sorted).
    instances: BTreeMap<String, Vec<String>>,
    /// `skyconf_fleet_agents` per (service, state).
    metrics: BTreeMap<(String, String), u64>,
    /// `skyconf_fleet_agents` series with a digest label.
    digest_labelled: usize,
}

async fn read_view(admin: &str) -> anyhow::Result<View> {
    let http = crate::http::client()?;
    let get = async |path: &str| -> anyhow::Result<reqwest::Response> {
        Ok(http.get(format!("{}{path}", admin.trim_end_matches('/'))).send().await?.error_for_status()?)
    };
    let status: Value = get("/api/v1/status").await?.json().await?;
    let services: Value = get("/api/v1/services").await?.json().await?;
    let instances: Value = get("/api/v1/instances?limit=1000").await?.json().await?;
    let metrics = get("/metrics").await?.text().await?;
    let mut view = View {
        expect_identity: status["fleet"]["expect_identity"].as_bool().unwrap_or(false),
        counts: BTreeMap::new(),
        instances: BTreeMap::new(),
        metrics: BTreeMap::new(),
        digest_labelled: 0,
    };
    for list in ["services", "unconfigured"] {
        for service in services[list].as_array().map_or(&[][..], Vec::as_slice) {
            if let Some(name) = service["name"].as_str() {
                view.counts.insert(name.to_owned(), service.clone());
            }
        }
    }
    for instance in instances["instances"].as_array().map_or(&[][..], Vec::as_slice) {
        let (Some(service), Some(name)) = (instance["service"].as_str(), instance["instance"].as_str()) else {
            continue;
        };
        view.instances.entry(service.to_owned()).or_default().push(name.to_owned());
    }
    for names in view.instances.values_mut() {
        names.sort();
    }
    for line in metrics.lines().filter(|l| l.starts_with("skyconf_fleet_agents{")) {
        let Some((labels, value)) = line["skyconf_fleet_agents{".len()..].rsplit_once("} ") else { continue };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")).map(|v| v.trim_end_matches('"').to_owned()))
        };
        if label("digest").is_some() {
            view.digest_labelled += 1;
        }
        let key = (label("service").unwrap_or_default(), label("state").unwrap_or_default());
        *view.metrics.entry(key).or_default() += value.trim().parse::<f64>().map_or(0, |v| v as u64);
    }
    Ok(view)
}

/// What differs between `view` and the live fleet.
fn compare(view: &View, live: &BTreeMap<String, Vec<String>>, plain: &BTreeMap<String, usize>) -> Vec<String> {
    let mut differences = Vec::new();
    if view.digest_labelled > 0 {
        differences.push(format!("{} skyconf_fleet_agents series carry a digest label", view.digest_labelled));
    }
    let mut services: Vec<&String> = live.keys().chain(plain.keys()).collect();
    services.sort();
    services.dedup();
    let none = Vec::new();
    for service in services {
        let names = live.get(service).unwrap_or(&none);
        let pollers = plain.get(service).copied().unwrap_or(0);
        let (members, anonymous) =
            if view.expect_identity { (names.len(), pollers) } else { (names.len() + pollers, 0) };
        let counts = view.counts.get(service).cloned().unwrap_or(Value::Null);
        for (field, want) in [("agents", members), ("anonymous", anonymous), ("new", 0)] {
            if counts[field].as_u64() != Some(want as u64) {
                differences.push(format!("{service}: {field} = {}, the live fleet {want}", counts[field]));
            }
        }
        let listed = view.instances.get(service).unwrap_or(&none);
        if listed != names {
            let gone: Vec<&String> = listed.iter().filter(|n| !names.contains(n)).collect();
            let missing: Vec<&String> = names.iter().filter(|n| !listed.contains(n)).collect();
            differences.push(format!(
                "{service}: /api/v1/instances lists {} instance(s), the live fleet has {}; not live: {gone:?}; not listed: {missing:?}",
                listed.len(),
                names.len()
            ));
        }
        for state in ["applied", "behind", "stuck", "new", "anonymous"] {
            let metric = view.metrics.get(&(service.clone(), state.to_owned())).copied().unwrap_or(0);
            if Some(metric) != counts[state].as_u64() {
                differences.push(format!(
                    "{service}: skyconf_fleet_agents{{state=\"{state}\"}} = {metric}, /api/v1/services {}",
                    counts[state]
                ));
            }
        }
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(agents: u64, anonymous: u64, names: &[&str]) -> View {
        let counts =
            json!({ "agents": agents, "applied": agents, "behind": 0, "stuck": 0, "new": 0, "anonymous": anonymous });
        View {
            expect_identity: true,
            counts: [("s1".to_owned(), counts)].into(),
            instances: [("s1".to_owned(), names.iter().map(|n| (*n).to_owned()).collect())].into(),
            metrics: [
                (("s1".to_owned(), "applied".to_owned()), agents),
                (("s1".to_owned(), "anonymous".to_owned()), anonymous),
            ]
            .into(),
            digest_labelled: 0,
        }
    }

    #[test]
    fn the_view_of_the_live_fleet_agrees_and_a_ghost_does_not() {
        let live: BTreeMap<String, Vec<String>> = [("s1".to_owned(), vec!["a".to_owned(), "b".to_owned()])].into();
        let plain: BTreeMap<String, usize> = [("s1".to_owned(), 3)].into();
        assert_eq!(compare(&view(2, 3, &["a", "b"]), &live, &plain), Vec::<String>::new());
        let ghost = compare(&view(3, 3, &["a", "b", "c"]), &live, &plain);
        assert!(ghost.iter().any(|d| d.contains("agents = 3")), "{ghost:?}");
        assert!(ghost.iter().any(|d| d.contains("not live: [\"c\"]")), "{ghost:?}");
    }
}
