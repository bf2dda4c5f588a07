//! The reference model: what the fleet view of each replica must show at a given moment, from
//! what the test did to the fleet and the bounds of the fleet-view contract
//! (`/work/notes/fleet-contract.md`, the README's Fleet section).
//!
//! The model knows connections, not rows: each agent process opens one (a healed partition opens
//! another), polls one service on one replica, and names its instance or not. A connection may be
//! shown from its process' start and must be shown once its first answer was read from the
//! process' output (or after [`START_BOUND`] in any case); it must be gone [`CLOSE_BOUND`] after
//! its process exited, or [`PARTITION_BOUND`] after a silent partition began, and may be shown
//! until then. Rows a replica shows of another replica (its published summary) may lag by
//! [`PUBLISH_BOUND`] both ways.
//!
//! Rows are compared per [`Key`] (service, instance name, replica it polls), by count and state:
//! the connections that must be shown give the least number of rows and the states they must be
//! in, those that may be shown the most.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::view::Observation;

/// Added to each bound of the contract: the test's own reads, a loaded machine.
pub(super) const SLACK: Duration = Duration::from_secs(2);
/// An agent crashed (RST) or stopped (FIN): its rows and identity are gone within 1 s.
pub(super) const CLOSE_BOUND: Duration = Duration::from_secs(1).saturating_add(SLACK);
/// A silent partition: PING_INTERVAL (20 s) + PING_TIMEOUT (10 s) + 1 s.
pub(super) const PARTITION_BOUND: Duration = Duration::from_secs(31).saturating_add(SLACK);
/// Another replica's rows: one publish period (10 s) plus one read tick (10 s).
pub(super) const PUBLISH_BOUND: Duration = Duration::from_secs(20).saturating_add(SLACK);
/// How long a started agent process may take to get its first answer (Python and grpcio start
/// slowly on a loaded machine); not a bound of the contract, the test's patience.
pub(super) const START_BOUND: Duration = Duration::from_secs(30);
/// How long an agent behind a healed partition may take to poll again and be named again: its
/// next poll (one interval), a reconnection, and its next keepAlive (5 s in this test).
pub(super) const HEAL_BOUND: Duration = Duration::from_secs(15);
/// The agents' poll interval (their deadline stays the Java agent's 30 s, so polls are held).
pub(super) const INTERVAL: Duration = Duration::from_secs(2);
/// An agent that received a configuration echoes it on its next poll: `behind` until then.
pub(super) const SETTLE: Duration = INTERVAL.saturating_mul(2).saturating_add(SLACK);
/// `--stuck-after-polls` (3) polls after a change, an agent that refused it is `stuck`.
pub(super) const STUCK_SETTLE: Duration = INTERVAL.saturating_mul(4).saturating_add(SLACK);
/// A live member's `last_seen_ms` is now (a held poll) or its last poll, within one interval.
pub(super) const LIVE_AGE: Duration = INTERVAL.saturating_add(SLACK).saturating_add(Duration::from_secs(1));

/// The fleet-view states, as the API and the metrics spell them.
pub(super) const STATES: [&str; 5] = ["applied", "behind", "stuck", "new", "anonymous"];

/// Rows are compared per service, instance name (`None`: an agent that never named one) and the
/// replica the agent polls.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Key {
    pub(super) service: String,
    pub(super) instance: Option<String>,
    pub(super) replica: usize,
}

/// When a connection ended, and by when the view must show it.
#[derive(Debug, Clone)]
pub(super) struct Gone {
    /// When it ended (the kill, the stop, the partition): from then on it need not be shown.
    pub(super) at: Instant,
    /// From then on it must not be shown.
    pub(super) by: Instant,
    pub(super) why: String,
}

/// One connection of one agent process.
#[derive(Debug, Clone)]
pub(super) struct Conn {
    pub(super) key: Key,
    /// Which process, for messages.
    pub(super) label: String,
    pub(super) opened: Instant,
    /// When it must be shown at the latest when no first answer was read.
    pub(super) shown_by: Instant,
    /// When the process read its first answer (set by the thread reading its output); `None`
    /// for a connection re-opened after a partition, which no output tells.
    pub(super) answered: Option<Arc<OnceLock<Instant>>>,
    /// For an agent that applies its first configuration and refuses later ones: when it applied
    /// the first.
    pub(super) refuses: Option<Arc<OnceLock<Instant>>>,
    pub(super) gone: Option<Gone>,
}

impl Conn {
    /// From when it must be shown (on its own replica).
    fn must_from(&self) -> Instant {
        self.answered.as_ref().and_then(|a| a.get().copied()).unwrap_or(self.shown_by).min(self.shown_by)
    }

    fn must_show(&self, t: Instant, lag: Duration) -> bool {
        self.must_from() + lag <= t && self.gone.as_ref().is_none_or(|g| t < g.at)
    }

    fn may_show(&self, t: Instant, lag: Duration) -> bool {
        self.opened <= t && self.gone.as_ref().is_none_or(|g| t < g.by + lag)
    }
}

/// A problem found by a check: `id` says what and where (the same problem seen at several
/// checkpoints is reported once), `text` the details.
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub(super) id: String,
    pub(super) text: String,
}

/// What the test did to the fleet, as far as the view is concerned.
#[derive(Debug)]
pub(super) struct Model {
    pub(super) start: Instant,
    pub(super) conns: Vec<Conn>,
    /// Configuration changes: (service, when the new document was written).
    pub(super) changes: Vec<(String, Instant)>,
    /// The replicas' ids, by index.
    pub(super) replicas: Vec<String>,
}

impl Model {
    pub(super) fn new(replicas: Vec<String>) -> Self {
        Self { start: Instant::now(), conns: Vec::new(), changes: Vec::new(), replicas }
    }

    /// `t` as seconds since the test began.
    pub(super) fn at(&self, t: Instant) -> String {
        format!("+{:.1}s", t.saturating_duration_since(self.start).as_secs_f64())
    }

    /// A new connection; its index.
    pub(super) fn open(&mut self, conn: Conn) -> usize {
        self.conns.push(conn);
        self.conns.len() - 1
    }

    /// Connection `i` ended at `at` and must be gone from the view by `by`.
    pub(super) fn close(&mut self, i: usize, at: Instant, by: Instant, why: String) {
        let conn = &mut self.conns[i];
        if conn.gone.is_none() {
            conn.gone = Some(Gone { at, by, why });
        }
    }

    /// The states a row of `conn` may be in at `t`.
    fn allowed(&self, conn: &Conn, t: Instant) -> BTreeSet<&'static str> {
        let change = self.changes.iter().filter(|(s, at)| *s == conn.key.service && *at <= t).map(|(_, at)| *at).max();
        if let (Some(change), Some(first)) = (change, conn.refuses.as_ref().and_then(|r| r.get().copied()))
            && change > first
        {
            return if t < change + STUCK_SETTLE { ["behind", "stuck"].into() } else { ["stuck"].into() };
        }
        let since = change.map_or(conn.must_from(), |c| c.max(conn.must_from()));
        match (t < since + SETTLE, conn.key.instance.is_some()) {
            (true, true) => ["applied", "behind"].into(),
            // An agent without a name is `new` until its second poll.
            (true, false) => ["applied", "behind", "new"].into(),
            (false, _) => ["applied"].into(),
        }
    }

    /// The states a row of `conn` may be in at some moment within `lag` before `t` (a published
    /// row is as of its replica's last publish).
    fn allowed_lagging(&self, conn: &Conn, t: Instant, lag: Duration) -> BTreeSet<&'static str> {
        let from = t.checked_sub(lag).unwrap_or(t);
        // `allowed` changes only at these moments.
        let mut moments = vec![from, t, conn.must_from() + SETTLE];
        for (_, at) in self.changes.iter().filter(|(s, _)| *s == conn.key.service) {
            moments.extend([*at, *at + SETTLE, *at + STUCK_SETTLE]);
        }
        moments.into_iter().filter(|m| (from..=t).contains(m)).flat_map(|m| self.allowed(conn, m)).collect()
    }

    fn describe(&self, conn: &Conn) -> String {
        let mut text = format!("{} opened {}", conn.label, self.at(conn.opened));
        if let Some(at) = conn.answered.as_ref().and_then(|a| a.get()) {
            let _ = write!(text, ", answered {}", self.at(*at));
        }
        if let Some(gone) = &conn.gone {
            let _ = write!(text, ", {} {} (gone by {})", gone.why, self.at(gone.at), self.at(gone.by));
        }
        text
    }

    fn key_text(&self, key: &Key) -> String {
        format!(
            "{}/{} polling {}",
            key.service,
            key.instance.as_deref().unwrap_or("(no instance name)"),
            self.replicas.get(key.replica).map_or("?", String::as_str)
        )
    }

    /// Checks what replica `seen.observer` showed against the model: its own rows as of
    /// `t_own`, the other replicas' (published) rows as of `t_others`.
    pub(super) fn check(&self, seen: &Observation, t_own: Instant, t_others: Instant) -> Vec<Problem> {
        let observer = seen.observer;
        let name = &self.replicas[observer];
        let mut problems = seen.problems.clone();
        let mut keys: BTreeSet<Key> = self.conns.iter().map(|c| c.key.clone()).collect();
        keys.extend(seen.rows.iter().map(|r| r.key.clone()));
        keys.extend(seen.identities.iter().map(|i| i.key.clone()));
        for key in keys {
            let own = key.replica == observer;
            let (t, lag) = if own { (t_own, Duration::ZERO) } else { (t_others, PUBLISH_BOUND) };
            let conns: Vec<&Conn> = self.conns.iter().filter(|c| c.key == key).collect();
            let must: Vec<&Conn> = conns.iter().copied().filter(|c| c.must_show(t, lag)).collect();
            let may = conns.iter().filter(|c| c.may_show(t, lag)).count();
            let rows: Vec<_> = seen.rows.iter().filter(|r| r.key == key).collect();
            let context = || {
                let conns: Vec<String> = conns.iter().map(|c| self.describe(c)).collect();
                let rows: Vec<String> = rows.iter().map(|r| r.describe(seen.now_ms)).collect();
                format!("\n    connections: {conns:#?}\n    rows: {rows:#?}")
            };
            let whose = if own { "its own" } else { "published" };
            if rows.len() < must.len() || rows.len() > may {
                problems.push(Problem {
                    id: format!("rows {name} {key:?}"),
                    text: format!(
                        "{name} shows {} row(s) of {} ({whose}), want {}..={} at {}{}",
                        rows.len(),
                        self.key_text(&key),
                        must.len(),
                        may,
                        self.at(t),
                        context()
                    ),
                });
            } else {
                // Each connection that must be shown needs a row in a state it may be in; the
                // most constrained first.
                let mut wanted: Vec<(&Conn, BTreeSet<&str>)> = must
                    .iter()
                    .map(|c| (*c, if own { self.allowed(c, t) } else { self.allowed_lagging(c, t, lag) }))
                    .collect();
                wanted.sort_by_key(|(_, states)| states.len());
                let mut free: Vec<_> = rows.clone();
                for (conn, states) in wanted {
                    match free.iter().position(|r| states.contains(r.state.as_str())) {
                        Some(i) => {
                            let row = free.remove(i);
                            let age = row.age(seen.now_ms);
                            if own && age.is_some_and(|a| a > LIVE_AGE) {
                                problems.push(Problem {
                                    id: format!("last_seen {name} {key:?}"),
                                    text: format!(
                                        "{name} shows {} live (its poll is held, or its last poll was within one interval) but last seen {:.1} s ago{}",
                                        self.key_text(&key),
                                        age.unwrap_or_default().as_secs_f64(),
                                        context()
                                    ),
                                });
                            }
                        }
                        None => problems.push(Problem {
                            id: format!("state {name} {key:?}"),
                            text: format!(
                                "{name} shows {} ({whose}) in no state {states:?} at {} ({}){}",
                                self.key_text(&key),
                                self.at(t),
                                self.describe(conn),
                                context()
                            ),
                        }),
                    }
                }
            }
            if key.instance.is_some() {
                self.check_identities(seen, &key, &must, may, own, &mut problems);
            }
        }
        problems
    }

    /// `/api/v1/instances`: one live identity per connection that names one, flagged when two
    /// live connections of this replica name the same instance.
    fn check_identities(
        &self,
        seen: &Observation,
        key: &Key,
        must: &[&Conn],
        may: usize,
        own: bool,
        problems: &mut Vec<Problem>,
    ) {
        let name = &self.replicas[seen.observer];
        let listed: Vec<_> = seen.identities.iter().filter(|i| i.key == *key).collect();
        if listed.len() < must.len() || listed.len() > may {
            problems.push(Problem {
                id: format!("identities {name} {key:?}"),
                text: format!(
                    "{name} lists {} instance(s) {} in /api/v1/instances, want {}..={}: {:?}",
                    listed.len(),
                    self.key_text(key),
                    must.len(),
                    may,
                    listed.iter().map(|i| i.raw.to_string()).collect::<Vec<_>>()
                ),
            });
            return;
        }
        if !own {
            return;
        }
        // Two live connections of this replica claiming one name are both flagged; one alone is
        // not, unless the listing holds the name elsewhere too (another replica's published row,
        // which may lag behind a move).
        let duplicate = must.len() >= 2;
        let alone = must.len() == 1
            && may == 1
            && seen
                .identities
                .iter()
                .filter(|i| i.key.service == key.service && i.key.instance == key.instance)
                .count()
                == 1;
        if (duplicate || alone) && listed.iter().any(|i| i.duplicate_name != duplicate) {
            problems.push(Problem {
                id: format!("duplicate_name {name} {key:?}"),
                text: format!(
                    "{name} lists {} live connection(s) naming {}: each must say duplicate_name: {duplicate}; listed: {:?}",
                    must.len(),
                    self.key_text(key),
                    listed.iter().map(|i| i.raw.to_string()).collect::<Vec<_>>()
                ),
            });
        }
    }

    /// Per replica, how many connections must be shown by each (service, replica polled): for the
    /// report.
    pub(super) fn summary(&self, t: Instant) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for conn in self.conns.iter().filter(|c| c.must_show(t, Duration::ZERO)) {
            *out.entry(format!("{} on {}", conn.key.service, self.replicas[conn.key.replica])).or_default() += 1;
        }
        out
    }
}
