//! The model suite's reference model: what the fleet view must show, updated exactly where the
//! server's state changes.

use super::*;

/// What the model knows of the served table: each configured service's digest, and the
/// targeted group's.
#[derive(Debug, Clone, Default)]
pub(super) struct Served {
    pub(super) own: BTreeMap<String, Digest>,
    /// (service, group pattern prefix, the group's digest).
    pub(super) group: Option<(String, String, Digest)>,
}

impl Served {
    /// Reads the digests (the mapping from a document to digests is the core's, tested
    /// elsewhere); who gets which is the model's.
    pub(super) fn of(served: &ServedTable, flipped: bool) -> Self {
        let snapshot = served.snapshot();
        let own = snapshot.table.services().map(|s| (s.name().to_owned(), s.digest().clone())).collect();
        let prefix = if flipped { "pod-" } else { "canary-" };
        let group = snapshot.answers.chosen(TARGETED, Some(0)).answer.digest.clone();
        Self { own, group: Some((TARGETED.to_owned(), prefix.to_owned(), group)) }
    }

    /// The digest served to a poller of `service` whose connection says it is `identity`.
    pub(super) fn current(&self, service: &str, identity: Option<&(String, String)>) -> Digest {
        if let (Some((group_service, prefix, digest)), Some((identity_service, name))) = (&self.group, identity)
            && group_service == service
            && identity_service == service
            && name.starts_with(prefix.as_str())
        {
            return digest.clone();
        }
        self.own.get(service).cloned().unwrap_or_else(Digest::empty)
    }
}

/// One (service, connection) row as the model keeps it.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) last_seen: u64,
    pub(super) polls: u64,
    pub(super) echoed: String,
    pub(super) target: Digest,
    pub(super) polls_behind: u32,
    pub(super) held: u32,
}

/// One open connection as the model keeps it.
#[derive(Debug, Clone)]
pub(super) struct Conn {
    pub(super) peer: SocketAddr,
    pub(super) identity: Option<(String, String)>,
    pub(super) rows: BTreeMap<String, Row>,
}

/// One replica's reference model.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) conns: BTreeMap<u64, Conn>,
    pub(super) options: Option<FleetOptions>,
}

impl Model {
    pub(super) fn options(&self) -> FleetOptions {
        self.options.unwrap_or_default()
    }

    /// A poll of connection `id` arrives: echoing `uuid`, served `current`. Whether it is held.
    pub(super) fn arrive(&mut self, id: u64, service: &str, uuid: &str, current: &Digest, now: u64) -> bool {
        let Some(conn) = self.conns.get_mut(&id) else { return false };
        let row = conn.rows.entry(service.to_owned()).or_insert_with(|| Row {
            last_seen: now,
            polls: 0,
            echoed: String::new(),
            target: current.clone(),
            polls_behind: 0,
            held: 0,
        });
        row.last_seen = now;
        row.polls += 1;
        row.echoed = uuid.to_owned();
        if row.target != *current {
            row.target = current.clone();
            row.polls_behind = 0;
        }
        let unchanged = current.as_str() == uuid;
        if unchanged {
            row.polls_behind = 0;
            row.held += 1;
        } else {
            row.polls_behind += 1;
        }
        unchanged
    }

    /// A held poll of connection `id` ended at `now`, answered with `sent` if it was a change.
    pub(super) fn release(&mut self, id: u64, service: &str, sent: Option<&Digest>, now: u64) {
        let Some(row) = self.conns.get_mut(&id).and_then(|c| c.rows.get_mut(service)) else { return };
        row.held -= 1;
        row.last_seen = now;
        if let Some(sent) = sent
            && row.target != *sent
        {
            row.target = sent.clone();
            row.polls_behind = 0;
        }
    }

    pub(super) fn identify(&mut self, id: u64, service: &str, name: &str) -> bool {
        let Some(conn) = self.conns.get_mut(&id) else { return false };
        let new = Some((service.to_owned(), name.to_owned()));
        let changed = conn.identity != new;
        conn.identity = new;
        changed
    }

    pub(super) fn sweep(&mut self, now: u64) {
        let options = self.options();
        let horizon = options.expire_after.as_millis() as u64;
        let one_off = horizon.min(crate::fleet::ONE_OFF_EXPIRY.as_millis() as u64);
        for conn in self.conns.values_mut() {
            let identified = conn.identity.is_some();
            conn.rows.retain(|_, row| {
                row.held > 0
                    || if row.polls <= 1 && !identified {
                        now.saturating_sub(row.last_seen) < one_off
                    } else {
                        now.saturating_sub(row.last_seen) < horizon
                    }
            });
        }
    }

    pub(super) fn state(&self, conn: &Conn, row: &Row, current: &Digest) -> AgentState {
        let options = self.options();
        if options.expect_identity && conn.identity.is_none() {
            AgentState::Anonymous
        } else if row.polls <= 1 && conn.identity.is_none() {
            AgentState::New
        } else if row.echoed == current.as_str() && row.target == *current {
            AgentState::Applied
        } else if row.target == *current && row.polls_behind >= options.stuck_after_polls.max(2) {
            AgentState::Stuck
        } else {
            AgentState::Behind
        }
    }

    /// Every row: (service, peer, instance for that service, state, polls, echoed, last seen).
    pub(super) fn rows(&self, served: &Served, now: u64) -> RowSet {
        let mut out = BTreeSet::new();
        for conn in self.conns.values() {
            for (service, row) in &conn.rows {
                let current = served.current(service, conn.identity.as_ref());
                let instance = conn.identity.as_ref().filter(|(s, _)| s == service).map(|(_, n)| n.clone());
                let seen = if row.held > 0 { now } else { row.last_seen };
                let state = self.state(conn, row, &current);
                out.insert((
                    service.clone(),
                    conn.peer.to_string(),
                    instance,
                    state,
                    row.polls,
                    row.echoed.clone(),
                    seen,
                ));
            }
        }
        out
    }

    pub(super) fn counts(&self, served: &Served) -> BTreeMap<String, StateCounts> {
        let mut out: BTreeMap<String, StateCounts> = BTreeMap::new();
        for conn in self.conns.values() {
            for (service, row) in &conn.rows {
                let current = served.current(service, conn.identity.as_ref());
                out.entry(service.clone()).or_default().add(self.state(conn, row, &current));
            }
        }
        out
    }

    /// The identified connections: (service, instance, peer, the services polled with states).
    pub(super) fn instances(&self, served: &Served) -> Vec<Listed> {
        let mut out: Vec<_> = self
            .conns
            .values()
            .filter_map(|conn| {
                let (service, name) = conn.identity.clone()?;
                let services = conn
                    .rows
                    .iter()
                    .map(|(polled, row)| {
                        let current = served.current(polled, conn.identity.as_ref());
                        (polled.clone(), self.state(conn, row, &current))
                    })
                    .collect();
                Some((service, name, conn.peer, services))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
        out.into_iter().map(|(s, n, p, v)| (s, n, p.to_string(), v)).collect()
    }
}
