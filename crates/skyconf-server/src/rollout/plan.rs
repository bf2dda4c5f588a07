//! A staged rollout as data: what it rolls out, its waves and gates, where it stands, and the pure
//! rule ([`Rollout::step`]) that moves it on from what the fleet says. The driver
//! ([`super::driver`]) gathers the fleet's observations, calls the rule, keeps the record in the
//! store and serves its overlay; everything here is plain data and arithmetic on milliseconds, so
//! the tests drive it through whole rollouts without a clock.
//!
//! A wave reaches instances of the services the candidate document changes: every instance within
//! a share of its service (the targeting hash, so a later, wider share keeps the earlier wave's
//! instances), or a count of instances picked when the wave starts (the lowest hashes among those
//! known then). Between waves:
//!
//! 1. **applied**: every reached agent holds the digest it is now served, within `apply_within_s`
//!    of the wave's start;
//! 2. **bake**: for `bake_s` after that, no reached agent disappears (not seen for
//!    `lost_after_s`: it stopped polling, its connection was lost, its process crashed on the new
//!    setting), and the Prometheus query, if any, stays at or under its threshold.
//!
//! A failed gate reverts at once: the overlay is dropped, and every reached instance is answered
//! with the configuration it had before. A passed wave moves on by itself (`advance: auto`) or
//! waits for a promote; after the last wave the candidate is written to the store as the document,
//! on the release it was planned on.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use skyconf_core::targeting::{Share, share_bucket};

use super::prometheus::PrometheusGate;
use crate::served::WaveMembers;

/// How many events a rollout keeps.
pub const MAX_EVENTS: usize = 200;

/// One wave: a share of every changed service's instances, or a count of instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaveSpec {
    /// A share such as `"10%"` (`"100%"`: every instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// This many more instances, picked when the wave starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<usize>,
}

impl WaveSpec {
    /// The wave's share, if it is one.
    pub fn share(&self) -> Option<Share> {
        self.share.as_deref().and_then(Share::parse)
    }

    /// Why the wave cannot be run, if so.
    pub fn check(&self) -> Result<(), String> {
        match (&self.share, self.instances) {
            (Some(text), None) => {
                Share::parse(text).map(|_| ()).ok_or_else(|| format!("`{text}` is not a share from 0% to 100%"))
            }
            (None, Some(0)) => Err("a wave of 0 instances reaches nobody".into()),
            (None, Some(_)) => Ok(()),
            _ => Err("a wave has either a `share` (\"10%\") or a number of `instances`".into()),
        }
    }
}

/// When a wave passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Gates {
    /// Every reached agent holds its new digest within this many seconds of the wave's start.
    pub apply_within_s: u64,
    /// Then the wave bakes this long before it passes.
    pub bake_s: u64,
    /// A reached agent not seen for this long has disappeared (agents poll every 20 s; a held
    /// poll counts as seen).
    pub lost_after_s: u64,
    /// A Prometheus query whose every sample must stay at or under a threshold during the bake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusGate>,
}

impl Default for Gates {
    fn default() -> Self {
        Self { apply_within_s: 60, bake_s: 60, lost_after_s: 45, prometheus: None }
    }
}

/// Whether passed waves move on by themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Advance {
    /// The next wave starts when one passes.
    #[default]
    Auto,
    /// A passed wave waits for a promote.
    Manual,
}

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
    /// `started`, `wave`, `applied`, `passed`, `promoted`, `reverted`, `aborted`, `completed`,
    /// `gate` (a gate could not be read), `failed`.
    pub kind: String,
    /// What, in words.
    pub message: String,
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
    /// The waves, in order.
    pub waves: Vec<WaveSpec>,
    /// The gates between waves.
    pub gates: Gates,
    /// Whether passed waves move on by themselves.
    pub advance: Advance,
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
    /// The wave being run (0-based).
    pub wave: usize,
    /// When that wave started.
    pub wave_started_ms: u64,
    /// When every agent it reached held its digest (the bake's start).
    #[serde(default)]
    pub applied_ms: Option<u64>,
    /// Instances picked by count waves so far, per service.
    #[serde(default)]
    pub named: BTreeMap<String, BTreeSet<String>>,
    /// Instances reached so far and seen since, per service: each must keep being seen.
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

/// One agent of a changed service as the fleet sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Its service.
    pub service: String,
    /// Its instance name.
    pub instance: String,
    /// Whether it is reached by the waves so far.
    pub reached: bool,
    /// Whether it holds the digest it is served now.
    pub applied: bool,
    /// When it was last seen (Unix milliseconds).
    pub last_seen_ms: u64,
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

impl Rollout {
    /// Appends an event (keeping the newest [`MAX_EVENTS`]).
    pub fn event(&mut self, at_ms: u64, kind: &str, message: impl Into<String>) {
        self.events.push(Event { at_ms, kind: kind.to_owned(), message: message.into() });
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
            waves: self.waves.clone(),
            wave: self.wave + 1,
            created_ms: self.created_ms,
            ended_ms: last.map_or(self.created_ms, |e| e.at_ms),
            author: self.author.clone(),
            message: self.message.clone(),
            release: self.release,
            outcome: last.map(|e| e.message.clone()).unwrap_or_default(),
        }
    }

    /// The instances the waves up to the current one reach.
    pub fn members(&self) -> WaveMembers {
        if !self.phase.is_active() {
            return WaveMembers::default();
        }
        let share =
            self.waves[..=self.wave.min(self.waves.len().saturating_sub(1))].iter().filter_map(WaveSpec::share).max();
        let named =
            self.named.iter().map(|(service, names)| (service.clone(), names.iter().cloned().collect())).collect();
        WaveMembers { share, named }
    }

    /// Starts wave `index` at `now_ms`: a count wave picks its instances among `known` (service,
    /// instance) pairs, the lowest hashes first, skipping those already reached.
    pub fn start_wave(&mut self, index: usize, now_ms: u64, known: &[(String, String)]) {
        self.wave = index;
        self.wave_started_ms = now_ms;
        self.applied_ms = None;
        self.phase = Phase::Running;
        let spec = self.waves[index].clone();
        if let Some(count) = spec.instances {
            let members = self.members();
            let mut candidates: Vec<&(String, String)> =
                known.iter().filter(|(service, instance)| !members.holds(service, instance)).collect();
            candidates.sort_by_key(|(service, instance)| (share_bucket(service, instance), service, instance));
            candidates.dedup();
            for (service, instance) in candidates.into_iter().take(count) {
                self.named.entry(service.clone()).or_default().insert(instance.clone());
            }
        }
        let what = match (spec.share, spec.instances) {
            (Some(share), _) => format!("{share} of the instances"),
            (None, Some(count)) => format!("{count} more instance(s)"),
            (None, None) => "nobody".to_owned(),
        };
        self.event(now_ms, "wave", format!("wave {} of {} started: {what}", index + 1, self.waves.len()));
    }

    /// Stops serving the candidate: `phase` is [`Phase::Reverted`] or [`Phase::Aborted`].
    pub fn revert(&mut self, now_ms: u64, phase: Phase, why: impl Into<String>) {
        self.phase = phase;
        let kind = if phase == Phase::Aborted { "aborted" } else { "reverted" };
        self.event(now_ms, kind, why);
    }

    /// Moves a waiting rollout on to its next wave (`who` promotes it, if known).
    pub fn promote(&mut self, now_ms: u64, who: Option<&str>, known: &[(String, String)]) -> Result<(), String> {
        match self.phase {
            Phase::Waiting => {
                let by = who.map(|w| format!(" by {w}")).unwrap_or_default();
                self.event(now_ms, "promoted", format!("wave {} promoted{by}", self.wave + 1));
                self.start_wave(self.wave + 1, now_ms, known);
                Ok(())
            }
            Phase::Running => Err(format!("wave {} has not passed its gates yet", self.wave + 1)),
            other => Err(format!("the rollout is {}", phase_name(other))),
        }
    }

    /// The rule: moves the rollout on from what the fleet shows at `now_ms`.
    pub fn step(&mut self, now_ms: u64, observed: &[Observed], prometheus: &Reading) -> Step {
        if self.phase != Phase::Running {
            return Step::Same;
        }
        let mut changed = false;
        // Every reached agent seen is watched from then on, in this wave and the later ones.
        for agent in observed.iter().filter(|a| a.reached) {
            changed |= self.watched.entry(agent.service.clone()).or_default().insert(agent.instance.clone());
        }
        let lost_after_ms = self.gates.lost_after_s * 1000;
        let lost: Vec<String> = self
            .watched
            .iter()
            .flat_map(|(service, names)| names.iter().map(move |n| (service, n)))
            .filter(|(service, name)| {
                !observed
                    .iter()
                    .any(|a| &a.service == *service && &a.instance == *name && a.last_seen_ms + lost_after_ms >= now_ms)
            })
            .map(|(service, name)| format!("{name} ({service})"))
            .collect();
        if !lost.is_empty() {
            let why = format!(
                "wave {}: reached agent(s) not seen for {} s: {}",
                self.wave + 1,
                self.gates.lost_after_s,
                lost.join(", ")
            );
            self.revert(now_ms, Phase::Reverted, why);
            return Step::Changed;
        }
        if let Reading::Fail(why) = prometheus {
            self.revert(now_ms, Phase::Reverted, format!("wave {}: the Prometheus gate failed: {why}", self.wave + 1));
            return Step::Changed;
        }
        let reached: Vec<&Observed> = observed.iter().filter(|a| a.reached).collect();
        let Some(applied_ms) = self.applied_ms else {
            let behind: Vec<String> =
                reached.iter().filter(|a| !a.applied).map(|a| format!("{} ({})", a.instance, a.service)).collect();
            if behind.is_empty() {
                self.applied_ms = Some(now_ms);
                let message = format!("wave {}: all {} reached agent(s) applied", self.wave + 1, reached.len());
                self.event(now_ms, "applied", message);
                return Step::Changed;
            }
            if now_ms >= self.wave_started_ms + self.gates.apply_within_s * 1000 {
                let why = format!(
                    "wave {}: {} of {} reached agent(s) did not apply within {} s: {}",
                    self.wave + 1,
                    behind.len(),
                    reached.len(),
                    self.gates.apply_within_s,
                    behind.join(", ")
                );
                self.revert(now_ms, Phase::Reverted, why);
                return Step::Changed;
            }
            return if changed { Step::Changed } else { Step::Same };
        };
        let baked = now_ms >= applied_ms + self.gates.bake_s * 1000;
        let gate_ok = self.gates.prometheus.is_none() || *prometheus == Reading::Pass;
        if !baked || !gate_ok {
            if let (true, Reading::Error(why)) = (baked, prometheus) {
                let last = self.events.last().map(|e| e.message.as_str());
                let message = format!("wave {}: the Prometheus gate could not be read: {why}", self.wave + 1);
                if last != Some(message.as_str()) {
                    self.event(now_ms, "gate", message);
                    return Step::Changed;
                }
            }
            return if changed { Step::Changed } else { Step::Same };
        }
        self.event(now_ms, "passed", format!("wave {} passed its gates", self.wave + 1));
        if self.wave + 1 == self.waves.len() {
            self.phase = Phase::Completing;
            return Step::Complete;
        }
        match self.advance {
            Advance::Auto => {
                let known: Vec<(String, String)> =
                    observed.iter().map(|a| (a.service.clone(), a.instance.clone())).collect();
                self.start_wave(self.wave + 1, now_ms, &known);
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
mod tests {
    use super::*;

    fn rollout(waves: &[WaveSpec], advance: Advance) -> Rollout {
        let mut r = Rollout {
            id: "r1".into(),
            document: String::new(),
            base_release: 7,
            services: vec!["svc".into()],
            waves: waves.to_vec(),
            gates: Gates { apply_within_s: 10, bake_s: 5, lost_after_s: 3, prometheus: None },
            advance,
            author: None,
            message: None,
            created_ms: 0,
            phase: Phase::Running,
            wave: 0,
            wave_started_ms: 0,
            applied_ms: None,
            named: BTreeMap::new(),
            watched: BTreeMap::new(),
            release: None,
            events: Vec::new(),
            driver: "a".into(),
            driver_seen_ms: 0,
        };
        let known: Vec<(String, String)> = (0..20).map(|i| ("svc".to_owned(), format!("pod-{i}"))).collect();
        r.start_wave(0, 0, &known);
        r
    }

    fn share(text: &str) -> WaveSpec {
        WaveSpec { share: Some(text.into()), instances: None }
    }

    fn count(n: usize) -> WaveSpec {
        WaveSpec { share: None, instances: Some(n) }
    }

    /// 20 agents seen at `now`, each applied when reached (`applied`), or never.
    fn fleet(r: &Rollout, now: u64, applied: bool) -> Vec<Observed> {
        let members = r.members();
        (0..20)
            .map(|i| {
                let instance = format!("pod-{i}");
                let reached = members.holds("svc", &instance);
                Observed { service: "svc".into(), instance, reached, applied: !reached || applied, last_seen_ms: now }
            })
            .collect()
    }

    #[test]
    fn a_count_wave_picks_the_lowest_hashes_and_later_shares_keep_them() {
        let r = rollout(&[count(1), share("50%"), share("100%")], Advance::Auto);
        let picked: Vec<&String> = r.named["svc"].iter().collect();
        assert_eq!(picked.len(), 1);
        let lowest = (0..20).map(|i| format!("pod-{i}")).min_by_key(|n| share_bucket("svc", n)).unwrap();
        assert_eq!(picked[0], &lowest);
        let reached = fleet(&r, 0, true).iter().filter(|a| a.reached).count();
        assert_eq!(reached, 1);
    }

    #[test]
    fn waves_advance_after_apply_and_bake_and_the_last_completes() {
        let mut r = rollout(&[count(1), share("50%"), share("100%")], Advance::Auto);
        assert_eq!(r.step(1000, &fleet(&r, 1000, true), &Reading::Unread), Step::Changed, "applied");
        assert_eq!(r.applied_ms, Some(1000));
        assert_eq!(r.step(5999, &fleet(&r, 5999, true), &Reading::Unread), Step::Same, "baking");
        assert_eq!(r.step(6000, &fleet(&r, 6000, true), &Reading::Unread), Step::Changed);
        assert_eq!((r.wave, r.phase), (1, Phase::Running));
        let reached = fleet(&r, 6000, true).iter().filter(|a| a.reached).count();
        assert!((5..=15).contains(&reached), "about half of 20: {reached}");
        r.step(7000, &fleet(&r, 7000, true), &Reading::Unread);
        r.step(12_000, &fleet(&r, 12_000, true), &Reading::Unread);
        assert_eq!(r.wave, 2);
        assert!(fleet(&r, 12_000, true).iter().all(|a| a.reached));
        r.step(13_000, &fleet(&r, 13_000, true), &Reading::Unread);
        assert_eq!(r.step(18_000, &fleet(&r, 18_000, true), &Reading::Unread), Step::Complete);
        assert_eq!(r.phase, Phase::Completing);
        assert!(r.members().holds("svc", "pod-3"), "served until the document is written");
    }

    #[test]
    fn an_agent_that_does_not_apply_in_time_reverts_the_wave() {
        let mut r = rollout(&[share("100%")], Advance::Auto);
        assert_eq!(r.step(9_999, &fleet(&r, 9_999, false), &Reading::Unread), Step::Changed, "watched");
        assert_eq!(r.phase, Phase::Running);
        assert_eq!(r.step(10_000, &fleet(&r, 10_000, false), &Reading::Unread), Step::Changed);
        assert_eq!(r.phase, Phase::Reverted);
        assert!(r.events.last().unwrap().message.contains("20 of 20 reached agent(s) did not apply within 10 s"));
        assert!(r.members().named.is_empty() && r.members().share.is_none(), "nobody is served the candidate");
    }

    #[test]
    fn a_reached_agent_that_stops_polling_reverts_even_after_its_wave() {
        let mut r = rollout(&[count(1), share("100%")], Advance::Auto);
        r.step(1000, &fleet(&r, 1000, true), &Reading::Unread);
        r.step(6000, &fleet(&r, 6000, true), &Reading::Unread);
        assert_eq!(r.wave, 1);
        let first = r.named["svc"].iter().next().unwrap().clone();
        // The first wave's agent stops polling during the second wave.
        let mut agents = fleet(&r, 7000, true);
        agents.iter_mut().filter(|a| a.instance == first).for_each(|a| a.last_seen_ms = 5000);
        assert_eq!(r.step(7000, &agents, &Reading::Unread), Step::Changed, "seen 2 s ago: not lost yet");
        assert_eq!(r.phase, Phase::Running);
        let mut agents = fleet(&r, 8001, true);
        agents.retain(|a| a.instance != first);
        r.step(8001, &agents, &Reading::Unread);
        assert_eq!(r.phase, Phase::Reverted);
        assert!(r.events.last().unwrap().message.contains(&first), "{:?}", r.events.last());
    }

    #[test]
    fn the_prometheus_gate_holds_a_wave_until_read_and_reverts_when_over() {
        let mut r = rollout(&[share("10%"), share("100%")], Advance::Manual);
        r.gates.prometheus = Some(PrometheusGate { url: "http://p".into(), query: "q".into(), max: 0.1 });
        r.step(0, &fleet(&r, 0, true), &Reading::Unread);
        assert_eq!(r.step(5000, &fleet(&r, 5000, true), &Reading::Error("refused".into())), Step::Changed);
        assert_eq!(r.events.last().unwrap().kind, "gate");
        assert_eq!(r.step(5500, &fleet(&r, 5500, true), &Reading::Error("refused".into())), Step::Same, "said once");
        assert_eq!(r.phase, Phase::Running, "an unread gate neither passes nor fails");
        r.step(6000, &fleet(&r, 6000, true), &Reading::Pass);
        assert_eq!(r.phase, Phase::Waiting, "manual: waits for a promote");
        assert!(r.promote(6500, Some("ops"), &[]).is_ok());
        assert_eq!((r.wave, r.phase), (1, Phase::Running));
        r.step(7000, &fleet(&r, 7000, true), &Reading::Fail("0.2 > 0.1".into()));
        assert_eq!(r.phase, Phase::Reverted);
        assert!(r.promote(8000, None, &[]).unwrap_err().contains("reverted"));
    }

    #[test]
    fn waves_are_checked() {
        assert!(share("10%").check().is_ok());
        assert!(share("110%").check().is_err());
        assert!(count(0).check().is_err());
        assert!(WaveSpec { share: Some("1%".into()), instances: Some(1) }.check().is_err());
        assert!(WaveSpec { share: None, instances: None }.check().is_err());
    }
}
