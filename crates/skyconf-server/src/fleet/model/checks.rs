//! The model suite's checks: the fleet's own queries at every quiescent point, and every few
//! steps `/metrics`, `/api/v1/services` and every page of `/api/v1/instances`, each against the
//! reference model.

use super::*;

/// `(service, peer, instance, state, polls, digest echoed, last seen)` of every row.
pub(super) type RowSet = BTreeSet<(String, String, Option<String>, AgentState, u64, String, u64)>;

/// An identified connection: (service, instance, peer, each polled service and its state).
pub(super) type Listed = (String, String, String, Vec<(String, AgentState)>);

/// Flags, in a list sorted by (service, instance), the rows that share both with another.
pub(super) fn duplicates<T>(sorted: &[T], key: impl Fn(&T) -> (&str, &str)) -> Vec<bool> {
    (0..sorted.len())
        .map(|i| {
            (i > 0 && key(&sorted[i - 1]) == key(&sorted[i]))
                || (i + 1 < sorted.len() && key(&sorted[i + 1]) == key(&sorted[i]))
        })
        .collect()
}

impl Sim {
    /// The fleet's own queries against the model: every row, the counts (the one counting
    /// function: the API's and the metric's), the metric's series, and the rollout driver's
    /// unpaged instances list.
    pub(super) async fn check(&mut self) -> Result<(), String> {
        let seed = self.seed;
        {
            let world = lock(&self.world);
            if let Some(failure) = &world.failure {
                return Err(failure.clone());
            }
            for (r, replica) in self.replicas.iter().enumerate() {
                let serving = replica.served.serving();
                let now = world.now(r);
                let model = &world.models[r];
                let counts = replica.fleet.counts(&serving);
                let mut services: BTreeSet<String> = counts.keys().cloned().collect();
                services.extend(model.conns.values().flat_map(|c| c.rows.keys().cloned()));
                let mut actual = RowSet::new();
                for service in &services {
                    for a in replica.fleet.agents_of(service, &serving) {
                        actual.insert((a.service, a.peer, a.instance, a.state, a.polls, a.digest, a.last_seen_ms));
                    }
                }
                let expected = model.rows(&world.served, now);
                self.rows_checked += expected.len() as u64;
                self.held_seen +=
                    model.conns.values().flat_map(|c| c.rows.values()).filter(|r| r.held > 0).count() as u64;
                if actual != expected {
                    let missing: Vec<_> = expected.difference(&actual).collect();
                    let extra: Vec<_> = actual.difference(&expected).collect();
                    return Err(format!(
                        "seed {seed}, replica {r}, step {}: rows differ; the model has {missing:?}, the fleet {extra:?}",
                        self.steps
                    ));
                }
                let expected_counts = model.counts(&world.served);
                if counts != expected_counts {
                    return Err(format!("seed {seed}, replica {r}: counts {counts:?}, the model {expected_counts:?}"));
                }
                let listed = replica.fleet.instances(&serving);
                let got: Vec<Listed> = listed
                    .instances
                    .iter()
                    .map(|i| {
                        let states = i.services.iter().map(|s| (s.service.clone(), s.state)).collect();
                        (i.service.clone(), i.instance.clone(), i.peer.clone(), states)
                    })
                    .collect();
                let want = model.instances(&world.served);
                if got != want {
                    return Err(format!("seed {seed}, replica {r}: instances {got:?}, the model {want:?}"));
                }
                let flags: Vec<bool> = listed.instances.iter().map(|i| i.duplicate_name).collect();
                if flags != duplicates(&want, |l| (&l.0, &l.1)) {
                    return Err(format!("seed {seed}, replica {r}: duplicate flags {flags:?} for {want:?}"));
                }
                let anonymous: BTreeSet<(String, String, AgentState)> =
                    listed.anonymous.iter().map(|a| (a.service.clone(), a.peer.clone(), a.state)).collect();
                let unidentified: BTreeSet<String> =
                    model.conns.values().filter(|c| c.identity.is_none()).map(|c| c.peer.to_string()).collect();
                let want_anonymous: BTreeSet<(String, String, AgentState)> = expected
                    .iter()
                    .filter(|row| unidentified.contains(&row.1))
                    .map(|row| (row.0.clone(), row.1.clone(), row.3))
                    .collect();
                if anonymous != want_anonymous {
                    return Err(format!(
                        "seed {seed}, replica {r}: anonymous {anonymous:?}, the model {want_anonymous:?}"
                    ));
                }
            }
        }
        let every = std::env::var("SKYCONF_MODEL_API_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(API_EVERY);
        if self.steps.is_multiple_of(every) {
            self.check_api().await?;
        }
        Ok(())
    }

    /// What operators read: `/metrics`, `/api/v1/services` and every page of `/api/v1/instances`,
    /// on every replica.
    pub(super) async fn check_api(&mut self) -> Result<(), String> {
        let seed = self.seed;
        for r in 0..self.replicas.len() {
            let (counts, want, configured) = {
                let world = lock(&self.world);
                let model = &world.models[r];
                let configured: BTreeSet<String> = world.served.own.keys().cloned().collect();
                (model.counts(&world.served), model.instances(&world.served), configured)
            };
            let replica = &self.replicas[r];
            // The metric: the same counts, unconfigured services summed into service="".
            let series = crate::metrics::by_series(counts.clone(), |s| configured.contains(s));
            let mut expected_series = BTreeMap::new();
            for row in &series {
                for state in AgentState::ALL {
                    expected_series
                        .insert((row.service.clone(), state.as_str().to_owned()), row.counts.of(state) as u64);
                }
            }
            let scraped = scrape_fleet_agents(&replica.metrics.encode());
            if scraped != expected_series {
                return Err(format!("seed {seed}, replica {r}: /metrics {scraped:?}, the model {expected_series:?}"));
            }
            // The API: this replica's live counts plus the summaries it read of the others.
            let mut merged = counts.clone();
            for peer in replica.replicas.peers().iter() {
                for (service, summary) in &peer.services {
                    merged.entry(service.clone()).or_default().merge(&summary.counts);
                }
            }
            let body = get(&replica.admin, "/api/v1/services").await;
            let mut api = BTreeMap::new();
            for row in body["services"].as_array().unwrap().iter().chain(body["unconfigured"].as_array().unwrap()) {
                let counts = StateCounts {
                    agents: row["agents"].as_u64().unwrap() as usize,
                    applied: row["applied"].as_u64().unwrap() as usize,
                    behind: row["behind"].as_u64().unwrap() as usize,
                    stuck: row["stuck"].as_u64().unwrap() as usize,
                    new: row["new"].as_u64().unwrap() as usize,
                    anonymous: row["anonymous"].as_u64().unwrap() as usize,
                };
                if counts != StateCounts::default() {
                    api.insert(row["name"].as_str().unwrap().to_owned(), counts);
                }
            }
            merged.retain(|_, c| *c != StateCounts::default());
            if api != merged {
                return Err(format!("seed {seed}, replica {r}: /api/v1/services {api:?}, expected {merged:?}"));
            }
            // Every page of the instances listing, small pages.
            let limit = 1 + self.rng.below(6);
            let mut rows: Vec<Value> = Vec::new();
            let mut cursor: Option<String> = None;
            let mut total = None;
            loop {
                let path = match &cursor {
                    Some(cursor) => format!("/api/v1/instances?limit={limit}&cursor={cursor}"),
                    None => format!("/api/v1/instances?limit={limit}"),
                };
                let page = get(&replica.admin, &path).await;
                total.get_or_insert(page["instances_total"].as_u64().unwrap());
                let got = page["instances"].as_array().unwrap();
                if got.len() as u64 > limit {
                    return Err(format!("seed {seed}: a page of {} rows for limit {limit}", got.len()));
                }
                rows.extend(got.iter().cloned());
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break,
                }
            }
            if Some(rows.len() as u64) != total {
                return Err(format!("seed {seed}, replica {r}: {} rows over the pages, total {total:?}", rows.len()));
            }
            let own = format!("replica-{r}");
            let local: Vec<Listed> = rows
                .iter()
                .filter(|row| row["replica"] == own.as_str())
                .map(|row| {
                    let states = row["services"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| (s["service"].as_str().unwrap().to_owned(), state_of(&s["state"])))
                        .collect();
                    let text = |f: &str| row[f].as_str().unwrap().to_owned();
                    (text("service"), text("instance"), text("peer"), states)
                })
                .collect();
            if local != want {
                return Err(format!("seed {seed}, replica {r}: /api/v1/instances {local:?}, the model {want:?}"));
            }
            let key = |row: &Value| {
                (row["service"].as_str().unwrap().to_owned(), row["instance"].as_str().unwrap().to_owned())
            };
            for (i, row) in rows.iter().enumerate() {
                let shared = rows.iter().enumerate().any(|(j, other)| j != i && key(other) == key(row));
                if row["duplicate_name"].as_bool() != Some(shared) {
                    return Err(format!("seed {seed}, replica {r}: duplicate_name of {row} is not {shared}"));
                }
            }
        }
        Ok(())
    }
}

pub(super) fn state_of(value: &Value) -> AgentState {
    serde_json::from_value(value.clone()).unwrap()
}

/// `skyconf_fleet_agents{service, state}` series of a scrape.
pub(super) fn scrape_fleet_agents(text: &str) -> BTreeMap<(String, String), u64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("skyconf_fleet_agents{service=\"")?;
            let (service, rest) = rest.split_once("\",state=\"")?;
            let (state, value) = rest.split_once("\"} ")?;
            Some(((service.to_owned(), state.to_owned()), value.parse().ok()?))
        })
        .collect()
}

pub(super) async fn get(admin: &Router, path: &str) -> Value {
    let request = http::Request::get(path).body(axum::body::Body::empty()).unwrap();
    let response = admin.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}
