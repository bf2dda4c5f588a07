//! Runs rollouts: keeps the record where every replica reads it, serves its overlay, and moves it
//! on with [`Rollout::step`] from what the fleet shows.
//!
//! **Where the record lives.** On a store with shared records (etcd, ZooKeeper, Nacos) it is the
//! record `rollouts/current`, so every replica serves the same waves and a restarted one resumes
//! where the rollout stood; a finished rollout is also kept as `rollouts/<id>`. On the file store
//! it is `rollout.json` in the data directory (and in memory without one).
//!
//! **Who moves it on.** Every replica reads the record every [`TICK`] and serves its overlay; one,
//! the *driver* named in the record, evaluates the gates and writes the record. It says it is alive
//! every [`HEARTBEAT`]; when it has not for [`DRIVER_TIMEOUT`] (it stopped, or lost the store),
//! the next replica to look takes over. A promote or an abort on any replica makes that replica the
//! driver. The driver judges the agents it sees and those the other replicas publish in their
//! fleet summaries (see [`crate::fleet::replicas`]) and OpAMP summaries (see
//! [`crate::opamp::replicas`]), so a gate sees the whole fleet, a summary interval late for the
//! others'. It remembers when it last saw each reached instance live
//! ([`Sightings`], beside the record); a replica that takes over starts from its own first look.
//!
//! **Start.** A plan is checked whole before anything is served: its bounds
//! ([`super::plan::check_waves`], [`super::plan::Gates::check`],
//! [`super::plan::check_attribution`]), a candidate with at least one service that changes at
//! least one, and a first wave that reaches a live identified instance of every changed service
//! (else no gate could judge the rollout there: refused, naming the services and what to do,
//! unless the plan is `ungated`).
//!
//! **Completion.** When the last wave passes, the candidate is written through the publishing
//! service ([`crate::publish::Publisher::write_planned`]) with `If-Match` on the release the rollout was planned on; once it is served, the overlay
//! is dropped (the candidate's answers and the new table's are the same, so no agent sees a
//! change). A configuration changed meanwhile refuses the write, and the rollout reverts.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indexmap::IndexMap;
use skyconf_core::answer::Answers;
use skyconf_core::{AgentConfigurations, diff::diff};
use skyconf_sources::shared::{Lifetime, Records};
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use super::plan::{
    Event, Observed, Phase, Reach, Reading, Rollout, Sightings, Step, Summary, check_attribution, check_waves, list,
    live, ms,
};
use crate::fleet::{AgentState, Fleet};
use crate::opamp::OpampFleet;
use crate::opamp::backend::ConfigStatusView;
use crate::opamp::replicas::OpampReplicas;
use crate::opamp::rollout::{StatusOf, UNIT_PREFIX};
use crate::publish::Publisher;
use crate::served::{Overlay, ServedTable};
use crate::unix_time::SteadyClock;

/// How often every replica reads the record, and the driver moves the rollout on.
pub const TICK: Duration = Duration::from_millis(500);
/// How often the driver says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(3);
/// How long a silent driver is waited for before another replica takes over.
pub const DRIVER_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the Prometheus gate is queried during a bake.
pub const PROMETHEUS_EVERY: Duration = Duration::from_secs(2);

/// The record kind, and the current rollout's name.
const KIND: &str = "rollouts";
const CURRENT: &str = "current";
/// The file the record is kept in without shared records, and the folder of ended ones beside it.
const FILE_NAME: &str = "rollout.json";
const HISTORY_DIR: &str = "rollouts";
/// How many ended rollouts the store keeps (older ones are deleted).
pub const HISTORY_KEPT: usize = 50;
/// How many ended rollouts the history shows.
pub const HISTORY_SHOWN: usize = 20;
/// How many reached instances [`Rollouts::progress`] lists (all are counted).
pub const PROGRESS_LISTED: usize = 1000;

/// Why a rollout operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// Another rollout is running.
    #[error("{0}")]
    Busy(String),
    /// The request cannot be carried out as asked (a bad plan, a rollout that has ended).
    #[error("{0}")]
    Refused(String),
    /// No such rollout.
    #[error("{0}")]
    NotFound(String),
    /// The candidate document does not read.
    #[error(transparent)]
    Document(#[from] skyconf_core::ReadError),
    /// The record could not be kept.
    #[error("the rollout could not be saved: {0}")]
    Store(String),
}

/// Where the record is kept.
#[derive(Debug, Clone)]
pub enum Keeper {
    /// The store's shared records.
    Records(Records),
    /// A file in the data directory.
    File(PathBuf),
    /// Nowhere: lost on restart.
    Memory,
}

impl Keeper {
    async fn load(&self) -> Result<Option<Rollout>, String> {
        let bytes = match self {
            Self::Records(records) => records.get(KIND, CURRENT).await.map_err(|e| e.to_string())?,
            Self::File(path) => match std::fs::read(path) {
                Ok(bytes) => Some(bytes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            },
            Self::Memory => return Err("kept in memory".into()),
        };
        bytes
            .map(|b| serde_json::from_slice(&b).map_err(|e| format!("a rollout record that does not read: {e}")))
            .transpose()
    }

    /// Keeps `rollout` as the current record; an ended one also joins the history (the oldest
    /// beyond [`HISTORY_KEPT`] leave it).
    async fn save(&self, rollout: &Rollout) -> Result<(), String> {
        let bytes = serde_json::to_vec(rollout).expect("a rollout always serializes");
        let ended = !rollout.phase.is_active();
        match self {
            Self::Records(records) => {
                records.put(KIND, CURRENT, &bytes, Lifetime::Durable).await.map_err(|e| e.to_string())?;
                if ended {
                    records.put(KIND, &rollout.id, &bytes, Lifetime::Durable).await.map_err(|e| e.to_string())?;
                    let names = self.ended_names().await?;
                    for old in &names[..names.len().saturating_sub(HISTORY_KEPT)] {
                        records.delete(KIND, old).await.map_err(|e| e.to_string())?;
                    }
                }
                Ok(())
            }
            Self::File(path) => {
                let io = |path: &std::path::Path, e: std::io::Error| format!("{}: {e}", path.display());
                skyconf_sources::fs::write_atomically(path, &bytes).map_err(|e| io(path, e))?;
                if ended {
                    let dir = history_dir(path);
                    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
                    let file = dir.join(format!("{}.json", rollout.id));
                    skyconf_sources::fs::write_atomically(&file, &bytes).map_err(|e| io(&file, e))?;
                    let names = self.ended_names().await?;
                    for old in &names[..names.len().saturating_sub(HISTORY_KEPT)] {
                        let file = dir.join(format!("{old}.json"));
                        std::fs::remove_file(&file).map_err(|e| io(&file, e))?;
                    }
                }
                Ok(())
            }
            Self::Memory => Ok(()),
        }
    }

    /// The ids of the ended rollouts kept, oldest first (ids are `r` and a start time, all of
    /// one length for centuries, so they sort by time).
    async fn ended_names(&self) -> Result<Vec<String>, String> {
        let mut names: Vec<String> = match self {
            Self::Records(records) => records.names(KIND).await.map_err(|e| e.to_string())?,
            Self::File(path) => match std::fs::read_dir(history_dir(path)) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json").map(str::to_owned))
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(format!("{}: {e}", history_dir(path).display())),
            },
            Self::Memory => Vec::new(),
        };
        names.retain(|name| name != CURRENT);
        names.sort_by(|a, b| (a.len(), a).cmp(&(b.len(), b)));
        Ok(names)
    }

    /// The newest [`HISTORY_SHOWN`] ended rollouts kept, newest first.
    async fn history(&self) -> Result<Vec<Summary>, String> {
        let names = self.ended_names().await?;
        let mut out = Vec::new();
        for name in names.iter().rev().take(HISTORY_SHOWN) {
            let bytes = match self {
                Self::Records(records) => records.get(KIND, name).await.map_err(|e| e.to_string())?,
                Self::File(path) => std::fs::read(history_dir(path).join(format!("{name}.json"))).ok(),
                Self::Memory => None,
            };
            // One record that does not read is left out, not the whole history.
            if let Some(rollout) = bytes.and_then(|b| serde_json::from_slice::<Rollout>(&b).ok()) {
                out.push(rollout.summary());
            }
        }
        Ok(out)
    }
}

/// The folder of ended rollouts beside the current one's file.
fn history_dir(current: &std::path::Path) -> PathBuf {
    current.with_file_name(HISTORY_DIR)
}

/// What a new rollout is to do (the body of `POST /api/v1/rollouts`, checked).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The candidate document.
    pub document: String,
    /// The waves.
    pub waves: Vec<super::plan::WaveSpec>,
    /// The gates.
    pub gates: super::plan::Gates,
    /// Auto or manual.
    pub advance: super::plan::Advance,
    /// Who.
    pub author: Option<String>,
    /// Why.
    pub message: Option<String>,
    /// Started even if its first wave reaches no live identified instance of a changed service.
    pub ungated: bool,
}

/// One reached instance of a rollout, and where it stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    /// Its service.
    pub service: String,
    /// Its instance name.
    pub instance: String,
    /// Whether it holds the digest it is served now.
    pub applied: bool,
    /// When its row was last seen (Unix milliseconds); `None` when no row is listed now.
    pub last_seen_ms: Option<u64>,
    /// An OpAMP agent's last `RemoteConfigStatus` and what it is about (after a revert: whether it
    /// went back to the previous configuration).
    pub opamp: Option<(Option<ConfigStatusView>, StatusOf)>,
}

/// The rollouts of this server. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct Rollouts {
    served: Arc<ServedTable>,
    fleet: Arc<Fleet>,
    keeper: Keeper,
    replica: String,
    /// The newest record known (held across store I/O: a tokio lock).
    current: Mutex<Option<Rollout>>,
    /// The candidate read from the current record's document, by rollout id.
    candidate: std::sync::Mutex<Option<(String, AgentConfigurations)>>,
    wake: Notify,
    http: reqwest::Client,
    /// When the Prometheus gate was last read, for which rollout and wave, and what it said.
    last_reading: std::sync::Mutex<Option<(ReadingOf, Reading)>>,
    /// Other replicas' agents, for the gates.
    replicas: Option<Arc<crate::fleet::replicas::Replicas>>,
    /// The ended rollouts, newest first (at most [`HISTORY_SHOWN`]).
    history: std::sync::Mutex<Vec<Summary>>,
    /// Logs and counts each event this replica records.
    events: crate::metrics::Events,
    /// The current record holds a change served here that the keeper has not taken yet.
    unsaved: AtomicBool,
    /// When the driver last saw each reached instance live (empty where it does not drive).
    sightings: std::sync::Mutex<Sightings>,
    /// The clock the gates and the record's times are read from (it never steps).
    clock: SteadyClock,
    /// The OpAMP agents a change of `opamp:` groups is judged on: the OpAMP port's, and the
    /// other replicas'.
    opamp: std::sync::OnceLock<OpampJudging>,
}

/// The OpAMP agents a rollout's gates read.
#[derive(Debug)]
struct OpampJudging {
    /// This replica's (without agents when it runs no OpAMP port).
    fleet: Arc<OpampFleet>,
    /// The other replicas' rows, as last read.
    peers: Arc<OpampReplicas>,
}

/// Which bake a Prometheus reading was taken in, and when (Unix milliseconds).
#[derive(Debug, Clone)]
struct ReadingOf {
    rollout: String,
    wave: usize,
    at: u64,
}

impl Rollouts {
    /// Rollouts kept by `keeper`, served into `served`, judged on `fleet`, driven as `replica`.
    pub fn new(served: Arc<ServedTable>, fleet: Arc<Fleet>, keeper: Keeper, replica: String) -> Self {
        Self {
            served,
            fleet,
            keeper,
            replica,
            current: Mutex::new(None),
            candidate: std::sync::Mutex::new(None),
            wake: Notify::new(),
            http: reqwest::Client::new(),
            last_reading: std::sync::Mutex::new(None),
            replicas: None,
            history: std::sync::Mutex::new(Vec::new()),
            events: crate::metrics::Events::default(),
            unsaved: AtomicBool::new(false),
            sightings: std::sync::Mutex::new(Sightings::default()),
            clock: SteadyClock::new(),
            opamp: std::sync::OnceLock::new(),
        }
    }

    /// Judges rollouts that change `opamp:` groups on `fleet`'s agents (the OpAMP port's, when
    /// it runs here) and on those the other replicas publish through `peers`.
    pub fn judge_opamp(&self, fleet: Option<Arc<OpampFleet>>, peers: Arc<OpampReplicas>) {
        // Without a port of its own, an OpAMP fleet without agents builds the offers judged.
        let fleet = fleet.unwrap_or_else(|| Arc::new(OpampFleet::new(Arc::clone(&self.served))));
        let _ = self.opamp.set(OpampJudging { fleet, peers });
    }

    /// Logs and counts events through `events` (`skyconf_rollout_events_total`).
    pub fn with_events(mut self, events: crate::metrics::Events) -> Self {
        self.events = events;
        self
    }

    /// Also judges the agents other replicas publish.
    pub fn with_replicas(mut self, replicas: Arc<crate::fleet::replicas::Replicas>) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// Where the record is kept for `data_dir` and `records`.
    pub fn keeper(records: Option<Records>, data_dir: Option<&std::path::Path>) -> Keeper {
        match (records, data_dir) {
            (Some(records), _) => Keeper::Records(records),
            (None, Some(dir)) => Keeper::File(dir.join(FILE_NAME)),
            (None, None) => Keeper::Memory,
        }
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The current (or last) rollout.
    pub async fn current(&self) -> Option<Rollout> {
        self.current.lock().await.clone()
    }

    /// The ended rollouts, newest first: the current one too once it has ended.
    pub fn history(&self) -> Vec<Summary> {
        self.history.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Adds `rollout`, which has ended, to the history (once).
    fn remember(&self, rollout: &Rollout) {
        if rollout.phase.is_active() {
            return;
        }
        let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        history.retain(|r| r.id != rollout.id);
        history.push(rollout.summary());
        history.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.id.cmp(&a.id)));
        history.truncate(HISTORY_SHOWN);
    }

    /// Logs and counts the events `rollout` gained after `before` (its last event then).
    fn announce(&self, rollout: &Rollout, before: Option<&Event>) {
        let start = before.and_then(|b| rollout.events.iter().rposition(|e| e == b)).map_or(0, |i| i + 1);
        for event in &rollout.events[start..] {
            self.events.rollout_event(&rollout.id, &event.kind, &event.message);
        }
    }

    /// Reads the record kept before this process started and serves it: a restart mid-rollout
    /// resumes it.
    pub async fn resume(&self) {
        match self.keeper.history().await {
            Ok(ended) => *self.history.lock().unwrap_or_else(|p| p.into_inner()) = ended,
            Err(error) => tracing::warn!(%error, "Cannot read the rollout history; it starts empty here."),
        }
        match self.keeper.load().await {
            Ok(Some(rollout)) => {
                if rollout.phase.is_active() {
                    tracing::info!(rollout = %rollout.id, wave = rollout.wave_index + 1, "Resuming a rollout.");
                }
                self.serve(Some(&rollout));
                self.remember(&rollout);
                *self.current.lock().await = Some(rollout);
            }
            Ok(None) => {}
            Err(error) if matches!(self.keeper, Keeper::Memory) => drop(error),
            Err(error) => tracing::warn!(%error, "Cannot read the rollout record; none is resumed."),
        }
    }

    /// Starts a rollout of `plan` on the release `base_release` (the one served now).
    pub async fn start(&self, plan: Plan, base_release: u64) -> Result<Rollout, RolloutError> {
        let mut current = self.current.lock().await;
        if let Some(active) = current.as_ref().filter(|r| r.phase.is_active()) {
            return Err(RolloutError::Busy(format!(
                "rollout {} is {}; promote it to its end or abort it first",
                active.id,
                super::plan::phase_name(active.phase)
            )));
        }
        check_attribution(plan.author.as_deref(), plan.message.as_deref()).map_err(RolloutError::Refused)?;
        check_waves(&plan.waves).map_err(RolloutError::Refused)?;
        plan.gates.check().map_err(RolloutError::Refused)?;
        let candidate = skyconf_core::read(&plan.document)?;
        let snapshot = self.served.snapshot();
        if candidate.services().next().is_none() && snapshot.table.services().next().is_some() {
            return Err(RolloutError::Refused(
                "the candidate has no service: rolled out, it would remove every service's configuration".into(),
            ));
        }
        if !snapshot.ready() {
            return Err(RolloutError::Refused("no configuration is served yet".into()));
        }
        let services = changed_services(&snapshot.table, &candidate);
        let opamp_groups = skyconf_core::opamp_diff::changed_groups(&snapshot.table, &candidate);
        if services.is_empty() && opamp_groups.is_empty() {
            return Err(RolloutError::Refused(
                "the candidate changes no service's configuration and no `opamp:` group".into(),
            ));
        }
        if !opamp_groups.is_empty()
            && let Some(clash) = services.iter().find(|s| s.starts_with(UNIT_PREFIX))
        {
            return Err(RolloutError::Refused(format!(
                "the candidate changes the service `{clash}` and `opamp:` groups, whose agents a rollout names \
                 `{UNIT_PREFIX}<group>`: roll them out one after the other"
            )));
        }
        let now = self.clock.now_ms();
        let mut rollout = Rollout {
            id: super::plan::rollout_id(now),
            document: plan.document,
            base_release,
            services,
            opamp_groups,
            changes: super::plan::changes_shown(&snapshot.table, &candidate),
            waves: plan.waves,
            gates: plan.gates,
            advance: plan.advance,
            ungated: plan.ungated,
            author: plan.author,
            message: plan.message,
            created_ms: now,
            phase: Phase::Running,
            wave_index: 0,
            wave_started_ms: now,
            applied_ms: None,
            named: Default::default(),
            watched: Default::default(),
            release: None,
            events: Vec::new(),
            driver: self.replica.clone(),
            driver_seen_ms: now,
        };
        let ungated = if rollout.ungated { ", ungated" } else { "" };
        let started = format!("Rollout of {} on release {base_release}{ungated}", list(&rollout.units()));
        rollout.event(now, "started", started);
        let observed = self.listed(&rollout);
        let live = live(&observed, now, ms(rollout.gates.lost_after_s));
        rollout.start_wave(0, now, &live);
        let unreached: Vec<(String, Reach)> =
            rollout.reach(&live).into_iter().filter(|(_, reach)| reach.reached == 0).collect();
        if !rollout.ungated && !unreached.is_empty() {
            return Err(RolloutError::Refused(self.unreached(&unreached)));
        }
        self.sightings.lock().unwrap_or_else(|p| p.into_inner()).baseline(&rollout.id, 0, &observed, now);
        self.keeper.save(&rollout).await.map_err(RolloutError::Store)?;
        self.announce(&rollout, None);
        self.serve(Some(&rollout));
        *current = Some(rollout.clone());
        self.wake.notify_one();
        Ok(rollout)
    }

    /// Why a start is refused: the changed services the first wave reaches no live identified
    /// instance of (`unreached`), why for each, and what to do.
    fn unreached(&self, unreached: &[(String, Reach)]) -> String {
        let anonymous = self.anonymous();
        let (mut unknown, mut outside, mut offline) = (Vec::new(), Vec::new(), Vec::new());
        for (service, reach) in unreached {
            if reach.live == 0 && service.starts_with(UNIT_PREFIX) {
                offline.push(format!("{service} (no connected OpAMP agent is offered other files by it)"));
            } else if reach.live == 0 {
                unknown.push(match anonymous.get(service).copied().unwrap_or(0) {
                    0 => format!("{service} (no agent polls for it)"),
                    n => format!("{service} ({n} agent(s) poll for it without an identity)"),
                });
            } else {
                outside.push(format!("{service} (none of its {} live identified instance(s) is in it)", reach.live));
            }
        }
        let mut what = Vec::new();
        if !unknown.is_empty() {
            what.push(
                "skyconf knows an instance by the ManagementService calls on its agent's connection: run skyconf as \
                 the agents' gateway (`--upstream`, the OAP behind it), or send the agents' ManagementService calls \
                 to skyconf",
            );
        }
        if !offline.is_empty() {
            what.push(
                "an OpAMP agent is judged while it reports to the OpAMP port (`--opamp-addr`) with its description",
            );
        }
        if !outside.is_empty() {
            what.push("a first wave of a number of instances (`\"instances\": 1`) or a larger share reaches one");
        }
        let services: Vec<String> = unknown.into_iter().chain(offline).chain(outside).collect();
        format!(
            "wave 1 reaches no live identified instance of {}, so no gate could judge the rollout there. {}. Or \
             start it with \"ungated\": true: there it is a write in steps, which no gate can judge",
            list(&services),
            what.join("; ")
        )
    }

    /// Moves the rollout `id`, waiting after a passed wave, on to its next wave.
    pub async fn promote(&self, id: &str, who: Option<&str>) -> Result<Rollout, RolloutError> {
        check_attribution(who, None).map_err(RolloutError::Refused)?;
        self.operate(id, |rollout, live| rollout.promote(self.clock.now_ms(), who, live)).await
    }

    /// Stops the rollout `id` and gives every reached instance back what it had.
    pub async fn abort(&self, id: &str, who: Option<&str>) -> Result<Rollout, RolloutError> {
        check_attribution(who, None).map_err(RolloutError::Refused)?;
        let by = who.map(|w| format!(" by {w}")).unwrap_or_default();
        self.operate(id, |rollout, _| {
            if !rollout.phase.is_active() || rollout.phase == Phase::Completing {
                return Err(format!("the rollout is {}", super::plan::phase_name(rollout.phase)));
            }
            rollout.revert(
                self.clock.now_ms(),
                Phase::Aborted,
                format!("Aborted{by} at wave {}", rollout.wave_index + 1),
            );
            Ok(())
        })
        .await
    }

    async fn operate(
        &self,
        id: &str,
        change: impl FnOnce(&mut Rollout, &[(String, String)]) -> Result<(), String>,
    ) -> Result<Rollout, RolloutError> {
        let mut current = self.current.lock().await;
        // The store's record is the truth (another replica may have moved it on), unless this
        // replica serves a change the store has not taken yet.
        if !self.unsaved.load(Ordering::Relaxed)
            && let Ok(Some(stored)) = self.keeper.load().await
        {
            *current = Some(stored);
        }
        let rollout = current
            .as_mut()
            .filter(|r| r.id == id)
            .ok_or_else(|| RolloutError::NotFound(format!("no rollout `{id}` is current")))?;
        let observed = self.listed(rollout);
        let now = self.clock.now_ms();
        let live = live(&observed, now, ms(rollout.gates.lost_after_s));
        let before = rollout.events.last().cloned();
        let mut changed = rollout.clone();
        change(&mut changed, &live).map_err(RolloutError::Refused)?;
        changed.driver = self.replica.clone();
        changed.driver_seen_ms = now;
        // Kept first: a change the store did not take is not served, nor said to have happened.
        self.keeper.save(&changed).await.map_err(RolloutError::Store)?;
        self.unsaved.store(false, Ordering::Relaxed);
        if changed.wave_index != rollout.wave_index {
            // This replica drives it now: the new wave's rows move on from here.
            let mut sightings = self.sightings.lock().unwrap_or_else(|p| p.into_inner());
            sightings.baseline(&changed.id, changed.wave_index, &observed, now);
        }
        *rollout = changed;
        self.announce(rollout, before.as_ref());
        self.remember(rollout);
        self.serve(Some(rollout));
        let done = rollout.clone();
        drop(current);
        self.wake.notify_one();
        Ok(done)
    }

    /// Serves `rollout`'s overlay (or none when it is not active).
    fn serve(&self, rollout: Option<&Rollout>) {
        let Some(rollout) = rollout.filter(|r| r.phase.is_active()) else {
            if self.served.overlay().is_some() {
                self.served.set_overlay(None);
            }
            return;
        };
        let Some(candidate) = self.candidate_of(rollout) else {
            return;
        };
        let services: HashSet<String> = rollout.services.iter().cloned().collect();
        let members = rollout.members();
        if let Some(now) = self.served.overlay()
            && now.rollout == rollout.id
            && now.members == members
        {
            return;
        }
        // Only the changed services' answers: the others are never served from the candidate.
        let only: IndexMap<String, skyconf_core::ServiceConfig> = candidate
            .services()
            .filter(|s| services.contains(s.name()))
            .map(|s| (s.name().to_owned(), s.clone()))
            .collect();
        let table = AgentConfigurations::from_services(only).with_targeting(candidate.targeting().clone());
        let opamp = (!rollout.opamp_groups.is_empty()).then(|| candidate.opamp().clone());
        let overlay =
            Overlay { rollout: rollout.id.clone(), services, candidate: Answers::new(&table), members, opamp };
        self.served.set_overlay(Some(Arc::new(overlay)));
    }

    /// The candidate table of `rollout`, read once per rollout.
    fn candidate_of(&self, rollout: &Rollout) -> Option<AgentConfigurations> {
        let mut cached = self.candidate.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((id, table)) = cached.as_ref()
            && *id == rollout.id
        {
            return Some(table.clone());
        }
        match skyconf_core::read(&rollout.document) {
            Ok(table) => {
                *cached = Some((rollout.id.clone(), table.clone()));
                Some(table)
            }
            Err(error) => {
                tracing::error!(rollout = %rollout.id, %error, "A rollout's candidate does not read; it is not served.");
                None
            }
        }
    }

    /// Every identified agent of `rollout`'s changed services listed now, here and by other
    /// replicas (the instances a wave starting now may pick are those of them live: see
    /// [`live`]).
    fn listed(&self, rollout: &Rollout) -> Vec<Observed> {
        self.observe_with(rollout, &crate::served::WaveMembers::default(), 0)
    }

    /// Per service, the pollers without an identity (here, and in other replicas' summaries).
    fn anonymous(&self) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for poller in self.fleet.instances(&self.served.serving()).anonymous {
            *out.entry(poller.service).or_insert(0) += 1;
        }
        if let Some(replicas) = &self.replicas {
            for peer in replicas.peers().iter() {
                for row in peer.rows.iter().filter(|row| row.instance.is_none()) {
                    *out.entry(row.service.clone()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// The agents of the changed services, judged against what they are served now.
    fn observe(&self, rollout: &Rollout) -> Vec<Observed> {
        // Another replica serves a wave from its next read of the record (within a tick); a
        // summary it computed before then judged its agents against the old answers.
        let fresh_after_ms = rollout.wave_started_ms.saturating_add(TICK.as_millis() as u64);
        self.observe_with(rollout, &rollout.members(), fresh_after_ms)
    }

    /// The OpAMP agents of `rollout`'s changed `opamp:` groups, judged with `members` reached.
    fn judged(&self, rollout: &Rollout, members: &crate::served::WaveMembers) -> Vec<crate::opamp::rollout::Judged> {
        let Some(opamp) = self.opamp.get().filter(|_| !rollout.opamp_groups.is_empty()) else { return Vec::new() };
        let Some(candidate) = self.candidate_of(rollout) else { return Vec::new() };
        let units: HashSet<String> = rollout.units().into_iter().collect();
        let judged = opamp.fleet.judged(candidate.opamp(), members, &opamp.peers.peers());
        judged.into_iter().filter(|j| units.contains(&j.agent.service)).collect()
    }

    /// The agents of `rollout`'s services, here and on the other replicas (another replica's agent
    /// counts as applied only by a summary computed after `fresh_after_ms`), and the OpAMP agents
    /// of its `opamp:` groups, here and on the other replicas (judged by the `config_hash` they
    /// report, which names what they applied whenever they said it).
    fn observe_with(
        &self,
        rollout: &Rollout,
        members: &crate::served::WaveMembers,
        fresh_after_ms: u64,
    ) -> Vec<Observed> {
        let wanted: HashSet<&str> = rollout.services.iter().map(String::as_str).collect();
        let serving = self.served.serving();
        let mut out: Vec<Observed> = Vec::new();
        // A held row says "now" by the fleet's clock at the listing, never earlier than this.
        let listing_started_ms = self.fleet.now_unix_ms();
        let listed = self.fleet.instances(&serving);
        for instance in &listed.instances {
            for polled in instance.services.iter().filter(|s| wanted.contains(s.service.as_str())) {
                if polled.state == AgentState::New {
                    continue;
                }
                out.push(Observed {
                    service: polled.service.clone(),
                    instance: instance.instance.clone(),
                    reached: members.holds(&polled.service, &instance.instance),
                    applied: polled.state == AgentState::Applied,
                    failed: None,
                    last_seen_ms: polled.last_seen_ms,
                    held: polled.last_seen_ms >= listing_started_ms,
                });
            }
        }
        if let Some(replicas) = &self.replicas {
            for peer in replicas.peers().iter() {
                for agent in peer.rows.iter().filter(|a| wanted.contains(a.service.as_str())) {
                    let Some(instance) = &agent.instance else { continue };
                    if agent.state == AgentState::New {
                        continue;
                    }
                    out.push(Observed {
                        service: agent.service.clone(),
                        instance: instance.clone(),
                        reached: members.holds(&agent.service, instance),
                        applied: agent.state == AgentState::Applied && peer.updated_ms > fresh_after_ms,
                        failed: None,
                        last_seen_ms: agent.last_seen_ms,
                        held: false,
                    });
                }
            }
        }
        out.extend(self.judged(rollout, members).into_iter().map(|j| j.agent));
        // One row per instance: the one seen last (an instance that reconnected has two).
        out.sort_by(|a, b| (&a.service, &a.instance, b.last_seen_ms).cmp(&(&b.service, &b.instance, a.last_seen_ms)));
        out.dedup_by(|later, first| later.service == first.service && later.instance == first.instance);
        out
    }

    /// The instances `rollout` reached and where each stands now, for the API: the first
    /// [`PROGRESS_LISTED`] by service and name.
    pub fn progress(&self, rollout: &Rollout) -> Vec<Reached> {
        let observed = self.observe(rollout);
        let rows: std::collections::HashMap<(&str, &str), &Observed> =
            observed.iter().map(|o| ((o.service.as_str(), o.instance.as_str()), o)).collect();
        let opamp: std::collections::HashMap<(String, String), (Option<ConfigStatusView>, StatusOf)> = self
            .judged(rollout, &rollout.members())
            .into_iter()
            .map(|j| ((j.agent.service, j.agent.instance), (j.status, j.status_of)))
            .collect();
        rollout
            .watched
            .iter()
            .flat_map(|(service, names)| names.iter().map(move |name| (service, name)))
            .take(PROGRESS_LISTED)
            .map(|(service, instance)| {
                let row = rows.get(&(service.as_str(), instance.as_str()));
                Reached {
                    service: service.clone(),
                    instance: instance.clone(),
                    applied: row.is_some_and(|r| r.applied),
                    last_seen_ms: row.map(|r| r.last_seen_ms),
                    opamp: opamp.get(&(service.clone(), instance.clone())).cloned(),
                }
            })
            .collect()
    }

    /// What the Prometheus gate says now (read at most every [`PROMETHEUS_EVERY`], during bakes).
    async fn reading(&self, rollout: &Rollout, now: u64) -> Reading {
        let Some(gate) = rollout.gates.prometheus.as_ref().filter(|_| rollout.applied_ms.is_some()) else {
            return Reading::Unread;
        };
        // A reading serves only the bake it was taken in: a rollout started again right after one
        // its gate reverted must not be reverted by the old reading.
        let of = ReadingOf { rollout: rollout.id.clone(), wave: rollout.wave_index, at: now };
        if let Some((taken, reading)) = self.last_reading.lock().unwrap_or_else(|p| p.into_inner()).clone()
            && (taken.rollout == of.rollout && taken.wave == of.wave)
            && now < taken.at + PROMETHEUS_EVERY.as_millis() as u64
        {
            return reading;
        }
        let reading = match gate.check(&self.http).await {
            Ok(found) if found.passed => Reading::Pass,
            Ok(found) => Reading::Fail(found.summary),
            Err(error) => Reading::Error(error.to_string()),
        };
        *self.last_reading.lock().unwrap_or_else(|p| p.into_inner()) = Some((of, reading.clone()));
        reading
    }

    /// Reads the record, serves it, and moves it on where this replica drives, until `stop`.
    pub async fn run(self: Arc<Self>, publisher: Publisher, stop: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.wake.notified() => {}
                () = stop.cancelled() => return,
            }
            self.tick(&publisher).await;
        }
    }

    async fn tick(&self, publisher: &Publisher) {
        let mut current = self.current.lock().await;
        if self.unsaved.load(Ordering::Relaxed)
            && let Some(rollout) = current.as_ref()
        {
            // A change this replica serves but could not keep: kept first, before the store's
            // older record could undo it here.
            if let Err(error) = self.keeper.save(rollout).await {
                tracing::debug!(rollout = %rollout.id, %error, "Still cannot save the rollout record.");
                self.serve(Some(rollout));
                return;
            }
            self.unsaved.store(false, Ordering::Relaxed);
        }
        match self.keeper.load().await {
            Ok(Some(stored)) if current.as_ref() != Some(&stored) => {
                // Another replica ended it, or started another: one this replica saw running
                // may have ended unseen, so the history is read again.
                if current.as_ref().is_some_and(|c| c.id != stored.id)
                    && let Ok(ended) = self.keeper.history().await
                {
                    *self.history.lock().unwrap_or_else(|p| p.into_inner()) = ended;
                }
                self.remember(&stored);
                *current = Some(stored);
            }
            Ok(_) => {}
            Err(error) if !matches!(self.keeper, Keeper::Memory) => {
                tracing::debug!(%error, "Cannot read the rollout record; serving the last one read.");
            }
            Err(_) => {}
        }
        self.serve(current.as_ref());
        let Some(rollout) = current.as_mut().filter(|r| r.phase.is_active()) else {
            return;
        };
        let now = self.clock.now_ms();
        let mut changed = false;
        let before = rollout.events.last().cloned();
        if rollout.driver != self.replica {
            if now < rollout.driver_seen_ms.saturating_add(DRIVER_TIMEOUT.as_millis() as u64) {
                self.sightings.lock().unwrap_or_else(|p| p.into_inner()).forget();
                return;
            }
            let message = format!(
                "Replica {} took over from {}, silent since {}",
                self.replica, rollout.driver, rollout.driver_seen_ms
            );
            rollout.event(now, "driver", message);
            rollout.driver = self.replica.clone();
            changed = true;
        }
        if now >= rollout.driver_seen_ms.saturating_add(HEARTBEAT.as_millis() as u64) {
            rollout.driver_seen_ms = now;
            changed = true;
        }
        let mut complete = rollout.phase == Phase::Completing;
        if !complete {
            let observed = self.observe(rollout);
            let reading = self.reading(rollout, now).await;
            let mut sightings = self.sightings.lock().unwrap_or_else(|p| p.into_inner());
            let step = rollout.step(now, &observed, &mut sightings, &reading);
            drop(sightings);
            match step {
                Step::Same => {}
                Step::Changed => changed = true,
                Step::Complete => (changed, complete) = (true, true),
            }
        }
        if changed {
            // Served at once, kept after: a revert reaches the wave's agents now, also while the
            // store is away; the record is then saved on a later tick, before any is read.
            if let Err(error) = self.take_up(rollout, before.as_ref()).await {
                tracing::warn!(rollout = %rollout.id, %error, "Cannot save the rollout record; serving it and retrying.");
                return;
            }
        }
        if complete {
            self.complete(publisher, rollout).await;
        }
    }

    /// Writes the candidate as the document, then stops serving the overlay.
    async fn complete(&self, publisher: &Publisher, rollout: &mut Rollout) {
        let attribution = crate::releases::Attribution {
            author: rollout.author.clone(),
            message: Some(rollout.message.clone().unwrap_or_else(|| format!("rollout {} completed", rollout.id))),
            rollback_of: None,
            origin: format!("{}{}", crate::releases::ORIGIN_ROLLOUT, rollout.id),
        };
        let written = publisher.write_planned(rollout.document.clone(), attribution, rollout.base_release).await;
        let now = self.clock.now_ms();
        let before = rollout.events.last().cloned();
        match written {
            Ok(release) => {
                rollout.phase = Phase::Completed;
                rollout.release = Some(release);
                let said =
                    format!("The rollout driver wrote the candidate as release {release}, served to every agent");
                rollout.event(now, "completed", said);
            }
            Err(error) => {
                let why = format!("The candidate could not be written as the document: {error}");
                rollout.revert(now, Phase::Reverted, why);
            }
        }
        if let Err(error) = self.take_up(rollout, before.as_ref()).await {
            tracing::warn!(rollout = %rollout.id, %error, "Cannot save the ended rollout's record; retrying.");
        }
    }

    /// Takes up the changed `rollout`: announces its events after `before`, adds it to the
    /// history once it has ended and serves it at once; then saves its record. A record that
    /// cannot be saved is marked unsaved, for a later tick to save before any record is read.
    async fn take_up(&self, rollout: &Rollout, before: Option<&Event>) -> Result<(), String> {
        self.announce(rollout, before);
        self.remember(rollout);
        self.serve(Some(rollout));
        let saved = self.keeper.save(rollout).await;
        if saved.is_err() {
            self.unsaved.store(true, Ordering::Relaxed);
        }
        saved
    }
}

/// The services whose answers differ between `before` and `after`: their configuration, or
/// their targeting groups. Services without an entry (the diff's `*`) are not rolled out in
/// waves: they get a changed global section when the rollout completes.
pub fn changed_services(before: &AgentConfigurations, after: &AgentConfigurations) -> Vec<String> {
    let mut changed: BTreeSet<String> = diff(before, after)
        .into_iter()
        .map(|c| c.service)
        .filter(|s| s != skyconf_core::diff::OTHER_SERVICES)
        .collect();
    for (service, groups) in after.targeting().services() {
        if before.targeting().groups(service) != groups {
            changed.insert(service.to_owned());
        }
    }
    for (service, _) in before.targeting().services() {
        if after.targeting().groups(service).is_empty() {
            changed.insert(service.to_owned());
        }
    }
    changed.into_iter().collect()
}

#[cfg(test)]
mod tests;
