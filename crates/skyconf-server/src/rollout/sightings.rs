//! What a rollout's driver remembers between its looks at the fleet, beside the record: each
//! listed row's `last_seen_ms` at the previous look in the current wave, to tell a row that moved
//! on (a poll, a poll held now, a newer summary from another replica) from one that did not; and,
//! per reached instance, when the driver last saw it live and since when it has been seen without
//! its digest.
//!
//! A sighting is a row that moved on, or a row whose poll is held at the look (this replica's
//! own rows: one exists only while its connection does), not a timestamp compared with the
//! driver's clock: the fleet's times and other replicas' are other clocks, and a step of the
//! system clock would otherwise reach instances that left before the wave started (a step back)
//! or none at all (a step forward). Only the driver's own clock times the gates.
//!
//! A row seen held at a look in this wave and gone from the listing at a later one closed its
//! connection during the wave, however short it was there: an agent answered the candidate by
//! its held poll that crashes before the driver's next look is still judged, from the look that
//! last saw it held.
//!
//! None of this is in the record (it changes on every look): a driver that takes over, or
//! restarts, starts from its own first look, so the disappearance gate fires at most
//! `lost_after_s` after it.

use std::collections::HashMap;

use super::plan::Observed;

/// The driver's memory of a rollout's fleet (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Sightings {
    rollout: String,
    wave: usize,
    /// Per service and instance: its row at the last look in this wave.
    rows: HashMap<String, HashMap<String, Row>>,
    /// Per service and instance reached: what the driver saw of it.
    reached: HashMap<String, HashMap<String, Seen>>,
}

/// One listed row at the driver's last look at it in this wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    /// Its `last_seen_ms` (the fleet's clock, or another replica's).
    last_seen_ms: u64,
    /// The driver's time of the last look that saw one of its polls held.
    held_at_ms: Option<u64>,
}

/// What the driver saw of one reached instance (its own clock, Unix milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// When its row last moved on (or the driver's first look at it).
    pub(super) last_live_ms: u64,
    /// Since when it has been seen without the digest it is served, if so.
    pub(super) behind_since_ms: Option<u64>,
}

impl Sightings {
    /// Prepares a look at rollout `id` in wave `wave`: another rollout's sightings are forgotten,
    /// and another wave's rows (a row moves on from the wave's start).
    pub(super) fn at(&mut self, id: &str, wave: usize) {
        if self.rollout != id {
            self.rollout = id.to_owned();
            self.reached.clear();
            self.rows.clear();
        } else if self.wave != wave {
            self.rows.clear();
        }
        self.wave = wave;
    }

    /// Takes `observed` as what the fleet lists at `now_ms` when wave `wave` of rollout `id`
    /// starts.
    pub fn baseline(&mut self, id: &str, wave: usize, observed: &[Observed], now_ms: u64) {
        self.at(id, wave);
        for row in observed {
            self.look(row, now_ms);
        }
    }

    /// Looks at one row at `now_ms`: whether it is a sighting, a row held now or one that moved
    /// on since the last look in this wave (a row seen for the first time did not).
    pub(super) fn look(&mut self, row: &Observed, now_ms: u64) -> bool {
        let held_at_ms = row.held.then_some(now_ms);
        if let Some(seen) = self.rows.get_mut(row.service.as_str()).and_then(|r| r.get_mut(row.instance.as_str())) {
            let moved = row.last_seen_ms > seen.last_seen_ms;
            seen.last_seen_ms = seen.last_seen_ms.max(row.last_seen_ms);
            seen.held_at_ms = held_at_ms.or(seen.held_at_ms);
            return moved || row.held;
        }
        let first = Row { last_seen_ms: row.last_seen_ms, held_at_ms };
        self.rows.entry(row.service.clone()).or_default().insert(row.instance.clone(), first);
        row.held
    }

    /// The rows seen held at a look in this wave that `listed` no longer holds (their connection
    /// closed): (service, instance, the driver's time of the last look that saw one held).
    pub(super) fn gone_after_held(&self, listed: impl Fn(&str, &str) -> bool) -> Vec<(String, String, u64)> {
        let mut gone = Vec::new();
        for (service, rows) in &self.rows {
            for (instance, row) in rows {
                if let Some(at) = row.held_at_ms.filter(|_| !listed(service, instance)) {
                    gone.push((service.clone(), instance.clone(), at));
                }
            }
        }
        gone
    }

    /// The memory of reached `instance` of `service`; one not known yet is seen now (`now_ms`).
    pub(super) fn reached(&mut self, service: &str, instance: &str, now_ms: u64) -> &mut Seen {
        if !self.reached.get(service).is_some_and(|r| r.contains_key(instance)) {
            let first = Seen { last_live_ms: now_ms, behind_since_ms: None };
            self.reached.entry(service.to_owned()).or_default().insert(instance.to_owned(), first);
        }
        self.reached.get_mut(service).and_then(|r| r.get_mut(instance)).expect("inserted above")
    }

    /// Forgets everything: this replica no longer drives the rollout.
    pub fn forget(&mut self) {
        *self = Self::default();
    }

    /// When this driver last saw reached `instance` of `service` of rollout `id` live.
    pub fn last_live_ms(&self, id: &str, service: &str, instance: &str) -> Option<u64> {
        (self.rollout == id).then(|| self.reached.get(service)?.get(instance).map(|s| s.last_live_ms)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(instance: &str, last_seen_ms: u64) -> Observed {
        Observed {
            service: "svc".into(),
            instance: instance.into(),
            reached: true,
            applied: true,
            failed: None,
            last_seen_ms,
            held: false,
        }
    }

    #[test]
    fn a_row_moves_on_when_its_last_sighting_does_and_each_wave_starts_afresh() {
        let mut memory = Sightings::default();
        memory.baseline("r1", 0, &[row("a", 100)], 1);
        assert!(!memory.look(&row("a", 100), 2), "the same sighting");
        assert!(memory.look(&row("a", 101), 3));
        assert!(!memory.look(&row("a", 90), 4), "an older row (another replica's) is no sighting");
        assert!(!memory.look(&row("b", 5000), 5), "a row's first look is its baseline");
        memory.reached("svc", "a", 7).behind_since_ms = Some(7);
        memory.at("r1", 1);
        assert!(!memory.look(&row("a", 102), 8), "the new wave starts from here");
        assert_eq!(memory.last_live_ms("r1", "svc", "a"), Some(7), "reached instances are kept across waves");
        memory.at("r2", 0);
        assert_eq!(memory.last_live_ms("r2", "svc", "a"), None, "another rollout starts afresh");
    }

    #[test]
    fn a_held_row_is_a_sighting_and_one_gone_after_it_was_held_is_told_with_when() {
        let mut memory = Sightings::default();
        let held = |instance: &str, last_seen_ms| Observed { held: true, ..row(instance, last_seen_ms) };
        memory.baseline("r1", 0, &[held("a", 100), row("b", 100)], 1000);
        assert!(memory.look(&held("a", 100), 1500), "held now: live at this look, moved or not");
        let listed = |only: &'static [&'static str]| move |_: &str, instance: &str| only.contains(&instance);
        assert_eq!(memory.gone_after_held(listed(&["a", "b"])), vec![]);
        assert_eq!(memory.gone_after_held(listed(&["b"])), vec![("svc".into(), "a".into(), 1500)]);
        assert_eq!(memory.gone_after_held(listed(&[])).len(), 1, "b was never seen held");
        memory.at("r1", 1);
        assert_eq!(memory.gone_after_held(listed(&[])), vec![], "each wave starts afresh");
    }
}
