//! A staged rollout as data: what it rolls out, its waves and gates, where it stands, and the pure
//! rule ([`Rollout::step`]) that moves it on from what the fleet says. The driver
//! ([`super::driver`]) gathers the fleet's observations, calls the rule, keeps the record in the
//! store and serves its overlay; everything here is plain data and arithmetic on milliseconds, so
//! the tests drive it through whole rollouts without a clock.
//!
//! A wave is served to instances of the services the candidate document changes: every instance
//! within a share of its service (the targeting hash, so a later, wider share keeps the earlier
//! wave's instances, and an instance that arrives later is in it if it hashes into the share), or
//! a count of instances of each changed service, picked when the wave starts (the lowest hashes
//! among the identified instances live then).
//!
//! **Reached.** An instance of a wave is *reached* once it is seen live after the wave started:
//! a poll of it is held at one of the driver's looks, or its row moves on (a poll, a newer summary
//! from another replica) between two of them; one seen held and gone from the listing before the
//! next look (answered the candidate, then crashed) was live at that look. An instance whose row
//! stays as it was never is (finding N2: one that left before the rollout started is not the
//! rollout's business). From then on it is *watched*, in
//! this wave and the later ones ([`Rollout::watched`]), and the driver remembers when it last saw
//! it live ([`Sightings`]).
//!
//! Between waves:
//!
//! 1. **applied**: every reached agent holds the digest it is now served, within `apply_within_s`
//!    of being seen without it;
//! 2. **bake**: for `bake_s` after that, no reached agent disappears (no live row for
//!    `lost_after_s`: it crashed on the new setting, stopped, or lost its connection; a row that
//!    vanishes from the fleet view counts as not seen since its last sighting), every reached
//!    agent still holds its digest, and the Prometheus query, if any, stays at or under its
//!    threshold.
//!
//! A wave never passes silently without judging a changed service (finding N3): a start whose
//! first wave reaches no live identified instance of a changed service is refused (the driver
//! says why), unless the rollout is *ungated*; and a wave in which a changed service has no
//! reached instance waits `apply_within_s` for one (not when ungated), then says in an
//! `unjudged` event that no gate judged the rollout there.
//!
//! **OpAMP agents.** A candidate that changes `opamp:` groups is judged on their agents too: each
//! group is the unit `opamp:<group>` beside the changed services ([`Rollout::units`]), its agents
//! its instances ([`crate::opamp::rollout`]). Their rows are applied by the `RemoteConfigStatus`
//! they report, and a reached agent that reports FAILED for the candidate reverts the wave at
//! once, with its error message.
//!
//! A failed gate reverts at once: the overlay is dropped, and every reached instance is answered
//! with the configuration it had before. A passed wave moves on by itself (`advance: auto`) or
//! waits for a promote; after the last wave the candidate is written to the store as the document,
//! on the release it was planned on.
//!
//! Every size a client chooses is bounded here (finding N7: [`MAX_WAVES`], [`MAX_AUTHOR_BYTES`],
//! [`MAX_MESSAGE_BYTES`], [`MAX_EVENTS`] × [`MAX_EVENT_BYTES`]), and so is every gate value (N12:
//! [`Gates::check`], at most [`MAX_GATE_S`]); milliseconds are computed with saturating
//! arithmetic.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use skyconf_core::targeting::share_bucket;

pub use super::sightings::Sightings;
pub use super::spec::{
    Advance, Gates, MAX_AUTHOR_BYTES, MAX_GATE_S, MAX_MESSAGE_BYTES, MAX_PROMETHEUS_QUERY_BYTES,
    MAX_PROMETHEUS_URL_BYTES, MAX_WAVE_INSTANCES, MAX_WAVES, WaveSpec, check_attribution, check_waves, ms, parse_share,
};
pub use crate::served::Observed;
use crate::served::WaveMembers;

/// How many events a rollout keeps (the newest).
pub const MAX_EVENTS: usize = 200;
/// The longest event text kept, in bytes; a longer one is cut and ends with `…`.
pub const MAX_EVENT_BYTES: usize = 1024;
/// How many instances or services an event or an error names; the others are counted.
pub const NAMED_AT_MOST: usize = 10;
/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A wave is being applied or baked.
    Running,
    /// A wave passed; the next waits for a promote.
    Waiting,
    /// The last wave passed; the candidate is being written as the document.
    Completing,
    /// The candidate is the document now.
    Completed,
    /// A gate failed: every reached instance was given back what it had.
    Reverted,
    /// An operator stopped it: every reached instance was given back what it had.
    Aborted,
}

impl Phase {
    /// Whether the rollout still serves its candidate to some instances.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Running | Self::Waiting | Self::Completing)
    }
}

/// Something that happened to a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    /// When (Unix milliseconds).
    pub at_ms: u64,
    /// `started`, `wave`, `applied`, `unjudged` (a wave reached no instance of a changed service,
    /// so no gate judged it there), `passed`, `promoted`, `reverted`, `aborted`, `completed`,
    /// `gate` (a gate could not be read), `driver` (another replica took over).
    pub kind: String,
    /// What, in a sentence (at most 1024 bytes).
    pub message: String,
}

/// The most services, and keys of each, [`Rollout::changes`] keeps.
pub const MAX_CHANGES_SHOWN: usize = 20;

/// The most bytes of a value [`Rollout::changes`] keeps.
pub const MAX_VALUE_SHOWN: usize = 256;

/// [`skyconf_core::diff::diff`] of `before` and `after`, cut to the bounds of [`Rollout::changes`].
pub fn changes_shown(
    before: &skyconf_core::AgentConfigurations,
    after: &skyconf_core::AgentConfigurations,
) -> Vec<skyconf_core::diff::ServiceChange> {
    let mut changes = skyconf_core::diff::diff(before, after);
    changes.truncate(MAX_CHANGES_SHOWN);
    for change in &mut changes {
        change.keys.truncate(MAX_CHANGES_SHOWN);
        for key in &mut change.keys {
            for value in [&mut key.before, &mut key.after].into_iter().flatten() {
                *value = cut(std::mem::take(value), MAX_VALUE_SHOWN);
            }
        }
    }
    changes
}

/// A rollout's id: `r-` and its start as UTC `YYYYMMDD-HHMMSS-mmm`, which a person reads and
/// types and which sorts as the rollouts started.
pub fn rollout_id(started_ms: u64) -> String {
    let (days, ms_of_day) = (started_ms / 86_400_000, started_ms % 86_400_000);
    let (year, month, day) = skyconf_core::reader::civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
    let (h, m, s, ms) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("r-{year:04}{month:02}{day:02}-{h:02}{m:02}{s:02}-{ms:03}")
}

/// A rollout: the record every replica reads from the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rollout {
    /// Its id.
    pub id: String,
    /// The candidate document.
    pub document: String,
    /// The release it was planned on: the candidate is written only on it.
    pub base_release: u64,
    /// The services the candidate changes.
    pub services: Vec<String>,
    /// The `opamp:` groups the candidate changes: their agents are judged as the instances of
    /// the unit `opamp:<group>` (see [`crate::opamp::rollout`]).
    #[serde(default)]
    pub opamp_groups: Vec<String>,
    /// What the candidate changes against the base, key by key: the first
    /// [`MAX_CHANGES_SHOWN`] services, each with its first [`MAX_CHANGES_SHOWN`] keys, values cut
    /// to [`MAX_VALUE_SHOWN`] bytes (what a person reads on the rollout's card; `services` names
    /// them all).
    #[serde(default)]
    pub changes: Vec<skyconf_core::diff::ServiceChange>,
    /// The waves, in order.
    pub waves: Vec<WaveSpec>,
    /// The gates between waves.
    pub gates: Gates,
    /// Whether passed waves move on by themselves.
    pub advance: Advance,
    /// Started although its first wave reached no live identified instance of some changed
    /// service: there it is a write in steps, which no gate can judge.
    #[serde(default)]
    pub ungated: bool,
    /// Who started it.
    #[serde(default)]
    pub author: Option<String>,
    /// Why.
    #[serde(default)]
    pub message: Option<String>,
    /// When it started (Unix milliseconds).
    pub created_ms: u64,
    /// Where it stands.
    pub phase: Phase,
    /// The index of the wave being run, from 0 (`progress.wave`, the history and the events count
    /// waves from 1).
    #[serde(alias = "wave")]
    pub wave_index: usize,
    /// When that wave started.
    pub wave_started_ms: u64,
    /// When every agent it reached held its digest (the bake's start).
    #[serde(default)]
    pub applied_ms: Option<u64>,
    /// Instances picked by count waves so far, per service.
    #[serde(default)]
    pub named: BTreeMap<String, BTreeSet<String>>,
    /// The instances reached so far, per service: each was seen live after the start of the wave
    /// that serves it, and must keep being seen and hold its digest.
    #[serde(default)]
    pub watched: BTreeMap<String, BTreeSet<String>>,
    /// The release the candidate became, once completed.
    #[serde(default)]
    pub release: Option<u64>,
    /// What happened, oldest first (the newest [`MAX_EVENTS`]).
    pub events: Vec<Event>,
    /// The replica moving it on, and when it last said so.
    #[serde(default)]
    pub driver: String,
    /// Unix milliseconds.
    #[serde(default)]
    pub driver_seen_ms: u64,
}

/// An ended rollout as the history lists it: what it rolled out, how far it got, how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Summary {
    /// Its id.
    pub id: String,
    /// How it ended, in words (`completed`, `reverted`, `aborted`).
    pub state: String,
    /// How it ended.
    pub phase: Phase,
    /// The services it changed.
    pub services: Vec<String>,
    /// The `opamp:` groups it changed.
    pub opamp_groups: Vec<String>,
    /// Its waves.
    pub waves: Vec<WaveSpec>,
    /// The last wave it ran, from 1.
    pub wave: usize,
    /// When it started (Unix milliseconds).
    pub created_ms: u64,
    /// When it ended (its last event).
    pub ended_ms: u64,
    /// Who started it.
    pub author: Option<String>,
    /// Why.
    pub message: Option<String>,
    /// The release the candidate became, if it completed.
    pub release: Option<u64>,
    /// Its last event: why it was reverted, who aborted it, the release it became.
    pub outcome: String,
}

/// The (service, instance) pairs of `observed` live at `now_ms` (see [`Observed::is_live`]).
pub fn live(observed: &[Observed], now_ms: u64, lost_after_ms: u64) -> Vec<(String, String)> {
    observed
        .iter()
        .filter(|o| o.is_live(now_ms, lost_after_ms))
        .map(|o| (o.service.clone(), o.instance.clone()))
        .collect()
}

/// How far a wave reaches into one changed service's live identified instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reach {
    /// Those served the candidate by the waves so far.
    pub reached: usize,
    /// All of them.
    pub live: usize,
}

/// What the Prometheus gate says now.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// No Prometheus gate, or it was not read this time.
    Unread,
    /// Every sample at or under the threshold.
    Pass,
    /// Over it, with the reason.
    Fail(String),
    /// It could not be read, with the reason.
    Error(String),
}

/// What [`Rollout::step`] asks the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing changed.
    Same,
    /// The record changed (persist it; the overlay follows).
    Changed,
    /// The last wave passed: write the candidate as the document.
    Complete,
}

/// `items`, comma-separated, the first [`NAMED_AT_MOST`] named and the others counted.
pub fn list(items: &[String]) -> String {
    let shown = items.iter().take(NAMED_AT_MOST).cloned().collect::<Vec<_>>().join(", ");
    match items.len().saturating_sub(NAMED_AT_MOST) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// `text`, cut to at most `max` bytes at a character boundary (ending with `…` when cut).
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    text.truncate(crate::text::floor_char_boundary(&text, max.saturating_sub('…'.len_utf8())));
    text.push('…');
    text
}

/// A wave's reach in words: `it reaches 1 of 4 live identified instance(s) of svc`.
fn describe_reach(reach: &BTreeMap<String, Reach>) -> String {
    let each: Vec<String> = reach
        .iter()
        .map(|(service, r)| format!("{} of {} live identified instance(s) of {service}", r.reached, r.live))
        .collect();
    format!("it reaches {}", list(&each))
}

impl Rollout {
    /// Appends an event (its text cut to [`MAX_EVENT_BYTES`], keeping the newest [`MAX_EVENTS`]).
    pub fn event(&mut self, at_ms: u64, kind: &str, message: impl Into<String>) {
        let message = cut(message.into(), MAX_EVENT_BYTES);
        self.events.push(Event { at_ms, kind: kind.to_owned(), message });
        if self.events.len() > MAX_EVENTS {
            let extra = self.events.len() - MAX_EVENTS;
            self.events.drain(..extra);
        }
    }

    /// The rollout as the history lists it.
    pub fn summary(&self) -> Summary {
        let last = self.events.last();
        Summary {
            id: self.id.clone(),
            state: phase_name(self.phase).to_owned(),
            phase: self.phase,
            services: self.services.clone(),
            opamp_groups: self.opamp_groups.clone(),
            waves: self.waves.clone(),
            wave: self.wave_index + 1,
            created_ms: self.created_ms,
            ended_ms: last.map_or(self.created_ms, |e| e.at_ms),
            author: self.author.clone(),
            message: self.message.clone(),
            release: self.release,
            outcome: last.map(|e| e.message.clone()).unwrap_or_default(),
        }
    }

    /// What the rollout judges: the changed services, then the changed `opamp:` groups' units.
    pub fn units(&self) -> Vec<String> {
        let groups = self.opamp_groups.iter().map(|g| crate::opamp::rollout::unit(g));
        self.services.iter().cloned().chain(groups).collect()
    }

    /// The instances the waves up to the current one serve the candidate.
    pub fn members(&self) -> WaveMembers {
        if !self.phase.is_active() {
            return WaveMembers::default();
        }
        let upto = self.wave_index.min(self.waves.len().saturating_sub(1));
        let share = self.waves[..=upto].iter().filter_map(WaveSpec::share).max();
        let named =
            self.named.iter().map(|(service, names)| (service.clone(), names.iter().cloned().collect())).collect();
        WaveMembers { share, named }
    }

    /// How far the waves so far reach into each changed service's `live` (service, instance)
    /// pairs.
    pub fn reach(&self, live: &[(String, String)]) -> BTreeMap<String, Reach> {
        let members = self.members();
        let mut out: BTreeMap<String, Reach> = self.units().into_iter().map(|s| (s, Reach::default())).collect();
        for (service, instance) in live {
            if let Some(reach) = out.get_mut(service) {
                reach.live += 1;
                reach.reached += usize::from(members.holds(service, instance));
            }
        }
        out
    }

    /// How many instances are reached so far.
    pub fn reached(&self) -> usize {
        self.watched.values().map(BTreeSet::len).sum()
    }

    /// Starts wave `index` at `now_ms`: a count wave picks its instances of each changed service
    /// among the `live` (service, instance) pairs, the lowest hashes first, skipping those
    /// already served.
    pub fn start_wave(&mut self, index: usize, now_ms: u64, live: &[(String, String)]) {
        self.wave_index = index;
        self.wave_started_ms = now_ms;
        self.applied_ms = None;
        self.phase = Phase::Running;
        let spec = self.waves[index].clone();
        if let Some(count) = spec.instances {
            let members = self.members();
            for service in &self.units() {
                let mut candidates: Vec<&String> = live
                    .iter()
                    .filter(|(s, instance)| s == service && !members.holds(s, instance))
                    .map(|(_, instance)| instance)
                    .collect();
                candidates.sort_by_key(|instance| (share_bucket(service, instance), *instance));
                candidates.dedup();
                for instance in candidates.into_iter().take(count) {
                    self.named.entry(service.clone()).or_default().insert(instance.clone());
                }
            }
        }
        let reach = describe_reach(&self.reach(live));
        let message = format!("Wave {} of {} started: {}; {reach}", index + 1, self.waves.len(), spec.describe());
        self.event(now_ms, "wave", message);
    }

    /// Stops serving the candidate: `phase` is [`Phase::Reverted`] or [`Phase::Aborted`].
    pub fn revert(&mut self, now_ms: u64, phase: Phase, why: impl Into<String>) {
        self.phase = phase;
        let kind = if phase == Phase::Aborted { "aborted" } else { "reverted" };
        self.event(now_ms, kind, why);
    }

    /// Moves a waiting rollout on to its next wave (`who` promotes it, if known), among the
    /// `live` (service, instance) pairs.
    pub fn promote(&mut self, now_ms: u64, who: Option<&str>, live: &[(String, String)]) -> Result<(), String> {
        match self.phase {
            Phase::Waiting => {
                let by = who.map(|w| format!(" by {w}")).unwrap_or_default();
                self.event(now_ms, "promoted", format!("Wave {} promoted{by}", self.wave_index + 1));
                self.start_wave(self.wave_index + 1, now_ms, live);
                Ok(())
            }
            Phase::Running => Err(format!("wave {} has not passed its gates yet", self.wave_index + 1)),
            other => Err(format!("the rollout is {}", phase_name(other))),
        }
    }

    /// The rule: moves the rollout on from what the fleet lists at `now_ms` (`observed`: every
    /// identified agent of the changed services) and what the driver remembers (`sightings`).
    pub fn step(
        &mut self,
        now_ms: u64,
        observed: &[Observed],
        sightings: &mut Sightings,
        prometheus: &Reading,
    ) -> Step {
        if self.phase != Phase::Running {
            return Step::Same;
        }
        let wave = self.wave_index + 1;
        let (apply_ms, lost_ms) = (ms(self.gates.apply_within_s), ms(self.gates.lost_after_s));
        let mut changed = false;
        sightings.at(&self.id, self.wave_index);
        let rows: HashMap<(&str, &str), (&Observed, bool)> = observed
            .iter()
            .map(|a| ((a.service.as_str(), a.instance.as_str()), (a, sightings.look(a, now_ms))))
            .collect();
        // Reached: served the candidate, and seen live since the wave started (its row moved on,
        // or a poll of it is held; never an instance whose row stays as it was: it may have left
        // before the start).
        for (agent, _) in rows.values().filter(|(a, moved)| a.reached && *moved) {
            if !self.watched.get(&agent.service).is_some_and(|names| names.contains(&agent.instance)) {
                self.watched.entry(agent.service.clone()).or_default().insert(agent.instance.clone());
                changed = true;
            }
        }
        // Seen held at an earlier look in this wave and gone since (its connection closed), before
        // a look saw its row move: live then, so reached if the wave holds it, and last live then.
        let members = self.members();
        for (service, instance, held_at_ms) in sightings.gone_after_held(|s, i| rows.contains_key(&(s, i))) {
            if members.holds(&service, &instance) {
                let seen = sightings.reached(&service, &instance, held_at_ms);
                seen.last_live_ms = seen.last_live_ms.max(held_at_ms);
                changed |= self.watched.entry(service).or_default().insert(instance);
            }
        }
        // A reached OpAMP agent that says it failed to apply the candidate: reverted at once, with
        // what it said.
        let failed: Vec<String> = self
            .watched
            .iter()
            .flat_map(|(service, names)| names.iter().map(move |name| (service, name)))
            .filter_map(|(service, name)| {
                let (row, _) = rows.get(&(service.as_str(), name.as_str()))?;
                let error = row.failed.as_ref()?;
                Some(format!("{name} ({service}): {error}"))
            })
            .collect();
        if !failed.is_empty() {
            let why = format!("Wave {wave}: {} reached agent(s) reported FAILED: {}", failed.len(), list(&failed));
            self.revert(now_ms, Phase::Reverted, why);
            return Step::Changed;
        }
        let (mut lost, mut overdue, mut not_yet) = (Vec::new(), Vec::new(), 0usize);
        for (service, names) in &self.watched {
            for name in names {
                let row = rows.get(&(service.as_str(), name.as_str()));
                let seen = sightings.reached(service, name, now_ms);
                if row.is_some_and(|(_, moved)| *moved) {
                    seen.last_live_ms = now_ms;
                }
                // A row that stays as it was, or vanished from the listing (its connection
                // closed), is not seen since.
                if now_ms > seen.last_live_ms.saturating_add(lost_ms) {
                    lost.push(format!("{name} ({service})"));
                    continue;
                }
                match row {
                    Some((row, _)) if row.applied => seen.behind_since_ms = None,
                    Some(_) => {
                        let since = *seen.behind_since_ms.get_or_insert(now_ms);
                        if now_ms >= since.saturating_add(apply_ms) {
                            overdue.push(format!("{name} ({service})"));
                        } else {
                            not_yet += 1;
                        }
                    }
                    None => not_yet += 1,
                }
            }
        }
        let reached = self.reached();
        // Served the candidate and live (listed, seen within `lost_after_s`), but not seen since the
        // wave started: an agent between two polls, or another replica's before its next summary.
        // Waited for as long as an agent has to apply, then left out (it may have left just before
        // the wave started).
        let pending = observed
            .iter()
            .filter(|a| a.reached && a.is_live(now_ms, lost_ms))
            .filter(|a| !self.watched.get(&a.service).is_some_and(|names| names.contains(&a.instance)))
            .count();
        let patient = now_ms < self.wave_started_ms.saturating_add(apply_ms);
        if !lost.is_empty() {
            let why = format!(
                "Wave {wave}: {} reached agent(s) disappeared, with no live row for {} s: {}",
                lost.len(),
                self.gates.lost_after_s,
                list(&lost)
            );
            self.revert(now_ms, Phase::Reverted, why);
            return Step::Changed;
        }
        if let Reading::Fail(why) = prometheus {
            self.revert(now_ms, Phase::Reverted, format!("Wave {wave}: the Prometheus gate failed: {why}"));
            return Step::Changed;
        }
        if !overdue.is_empty() {
            let why = format!(
                "Wave {wave}: {} of {reached} reached agent(s) did not apply within {} s: {}",
                overdue.len(),
                self.gates.apply_within_s,
                list(&overdue)
            );
            self.revert(now_ms, Phase::Reverted, why);
            return Step::Changed;
        }
        let same = if changed { Step::Changed } else { Step::Same };
        let all_applied = not_yet == 0;
        let Some(applied_ms) = self.applied_ms else {
            if !all_applied {
                return same;
            }
            let unjudged: Vec<String> =
                self.units().into_iter().filter(|s| self.watched.get(s).is_none_or(BTreeSet::is_empty)).collect();
            // A changed service not reached yet: its agents may not have polled since the wave
            // started; waited for as long as an agent has to apply.
            if patient && (pending > 0 || (!unjudged.is_empty() && !self.ungated)) {
                return same;
            }
            self.applied_ms = Some(now_ms);
            if reached > 0 {
                self.event(now_ms, "applied", format!("Wave {wave}: all {reached} reached agent(s) applied"));
            }
            if !unjudged.is_empty() {
                let reach = self.reach(&live(observed, now_ms, lost_ms));
                let why: Vec<String> = unjudged
                    .iter()
                    .map(|service| match reach.get(service).map_or(0, |r| r.live) {
                        0 => format!("{service} (no identified instance of it is live)"),
                        n => format!("{service} (none of its {n} live identified instance(s) is in the waves so far)"),
                    })
                    .collect();
                let ungated = if self.ungated { "; the rollout is ungated" } else { "" };
                let message = format!(
                    "Wave {wave} reached no instance of {}: no gate judges the rollout there{ungated}",
                    list(&why)
                );
                self.event(now_ms, "unjudged", message);
            }
            return Step::Changed;
        };
        let baked = now_ms >= applied_ms.saturating_add(ms(self.gates.bake_s));
        let gate_ok = self.gates.prometheus.is_none() || *prometheus == Reading::Pass;
        if !baked || !gate_ok || !all_applied || (patient && pending > 0) {
            if let (true, Reading::Error(why)) = (baked, prometheus) {
                let last = self.events.last().map(|e| e.message.as_str());
                let message =
                    cut(format!("Wave {wave}: the Prometheus gate could not be read: {why}"), MAX_EVENT_BYTES);
                if last != Some(message.as_str()) {
                    self.event(now_ms, "gate", message);
                    return Step::Changed;
                }
            }
            return same;
        }
        self.event(now_ms, "passed", format!("Wave {wave} passed its gates"));
        if wave == self.waves.len() {
            self.phase = Phase::Completing;
            return Step::Complete;
        }
        match self.advance {
            Advance::Auto => {
                self.start_wave(wave, now_ms, &live(observed, now_ms, lost_ms));
                sightings.baseline(&self.id, self.wave_index, observed, now_ms);
            }
            Advance::Manual => self.phase = Phase::Waiting,
        }
        Step::Changed
    }
}

/// The phase as the API spells it.
pub fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Running => "running",
        Phase::Waiting => "waiting for a promote",
        Phase::Completing => "completing",
        Phase::Completed => "completed",
        Phase::Reverted => "reverted",
        Phase::Aborted => "aborted",
    }
}

#[cfg(test)]
mod tests;
