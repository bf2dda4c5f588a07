//! What one replica shows of the fleet, read the way an operator or a dashboard reads it:
//! `GET /api/v1/services/{name}` for each service, `GET /api/v1/services`, `GET
//! /api/v1/instances` and `GET /metrics`. Rows and identities are keyed like the model's
//! connections; what the answers must agree on among themselves (the counts with the rows, the
//! services list with each service, the metrics with the replica's own rows) is checked here.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skyconf_testkit::server::AdminClient;

use super::model::{Key, Problem, STATES};

/// One row of a service's `agents`.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) key: Key,
    pub(super) state: String,
    pub(super) last_seen_ms: Option<u64>,
    /// The row as the API gave it, for messages.
    pub(super) raw: Value,
}

impl Row {
    /// How long ago the row's agent was last seen, as of `now_ms`.
    pub(super) fn age(&self, now_ms: u64) -> Option<Duration> {
        self.last_seen_ms.map(|seen| Duration::from_millis(now_ms.saturating_sub(seen)))
    }

    pub(super) fn describe(&self, now_ms: u64) -> String {
        let age = self.age(now_ms).map_or_else(|| "?".to_owned(), |a| format!("{:.1}", a.as_secs_f64()));
        format!(
            "{} seen {age} s ago, peer {}, as_of_ms {}",
            self.state,
            self.raw["peer"].as_str().unwrap_or("?"),
            self.raw["as_of_ms"]
        )
    }
}

/// One entry of `/api/v1/instances`.
#[derive(Debug, Clone)]
pub(super) struct Identity {
    pub(super) key: Key,
    pub(super) duplicate_name: bool,
    pub(super) raw: Value,
}

/// One replica's answers, read at about one moment.
#[derive(Debug)]
pub(super) struct Observation {
    pub(super) observer: usize,
    /// The wall clock when the reads began (the server's `last_seen_ms` is wall-clock too).
    pub(super) now_ms: u64,
    pub(super) rows: Vec<Row>,
    pub(super) identities: Vec<Identity>,
    /// Disagreements within the answers, and answers that could not be read.
    pub(super) problems: Vec<Problem>,
}

/// Reads replica `observer` (`replicas` are every replica's id, by index).
pub(super) async fn observe(observer: usize, admin: &AdminClient, replicas: &[&str], services: &[&str]) -> Observation {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut seen = Observation { observer, now_ms, rows: Vec::new(), identities: Vec::new(), problems: Vec::new() };
    let name = replicas[observer].to_owned();
    let replica_of = |value: &Value, seen: &mut Observation| -> Option<usize> {
        let id = value["replica"].as_str().unwrap_or_default();
        let index = replicas.iter().position(|r| *r == id);
        if index.is_none() {
            seen.problems.push(Problem {
                id: format!("replica label {name}"),
                text: format!(
                    "{name} labels a row with replica {:?}, not one of {replicas:?}: {value}",
                    value["replica"]
                ),
            });
        }
        index
    };
    let Some(list) = get_json(admin, "/api/v1/services", &name, &mut seen).await else { return seen };
    let mut own_tally: BTreeMap<(String, String), u64> = BTreeMap::new();
    for service in services {
        let Some(detail) = get_json(admin, &format!("/api/v1/services/{service}"), &name, &mut seen).await else {
            return seen;
        };
        let mut tally: BTreeMap<String, u64> = BTreeMap::new();
        for agent in detail["agents"].as_array().map_or(&[][..], Vec::as_slice) {
            let state = agent["state"].as_str().unwrap_or("?").to_owned();
            *tally.entry(state.clone()).or_default() += 1;
            let Some(replica) = replica_of(agent, &mut seen) else { continue };
            if replica == observer {
                *own_tally.entry(((*service).to_owned(), state.clone())).or_default() += 1;
            }
            seen.rows.push(Row {
                key: Key {
                    service: (*service).to_owned(),
                    instance: agent["instance"].as_str().map(str::to_owned),
                    replica,
                },
                state,
                last_seen_ms: agent["last_seen_ms"].as_u64(),
                raw: agent.clone(),
            });
        }
        let counts = &detail["counts"];
        let members: u64 = ["applied", "behind", "stuck"].iter().map(|s| tally.get(*s).copied().unwrap_or(0)).sum();
        let mut want: BTreeMap<&str, u64> = STATES.iter().map(|s| (*s, tally.get(*s).copied().unwrap_or(0))).collect();
        want.insert("agents", members);
        for (field, n) in &want {
            if counts[*field].as_u64() != Some(*n) {
                seen.problems.push(Problem {
                    id: format!("counts {name} {service} {field}"),
                    text: format!(
                        "{name}: /api/v1/services/{service} counts {field} = {}, but its rows say {n} (agents = applied + behind + stuck): counts {counts}",
                        counts[*field]
                    ),
                });
            }
        }
        let listed = list["services"].as_array().and_then(|all| all.iter().find(|s| s["name"] == *service));
        for (field, n) in &want {
            if listed.is_none_or(|s| s[*field].as_u64() != Some(*n)) {
                seen.problems.push(Problem {
                    id: format!("services list {name} {service} {field}"),
                    text: format!(
                        "{name}: /api/v1/services says {field} = {} for {service}, its detail's rows {n}",
                        listed.map_or(Value::Null, |s| s[*field].clone())
                    ),
                });
            }
        }
    }
    let Some(instances) = get_json(admin, "/api/v1/instances?limit=1000", &name, &mut seen).await else {
        return seen;
    };
    for instance in instances["instances"].as_array().map_or(&[][..], Vec::as_slice) {
        let Some(replica) = replica_of(instance, &mut seen) else { continue };
        seen.identities.push(Identity {
            key: Key {
                service: instance["service"].as_str().unwrap_or_default().to_owned(),
                instance: instance["instance"].as_str().map(str::to_owned),
                replica,
            },
            duplicate_name: instance["duplicate_name"].as_bool().unwrap_or(false),
            raw: instance.clone(),
        });
    }
    let metrics = match admin.try_send("GET", "/metrics", &[], "").await {
        Ok(reply) if reply.status == 200 => reply.body,
        other => {
            seen.problems.push(unreadable(&name, "/metrics", &other));
            return seen;
        }
    };
    check_metrics(&metrics, &name, services, &own_tally, &mut seen.problems);
    seen
}

/// `skyconf_fleet_agents{service, state}` must be the replica's own rows, state by state, with
/// no digest label.
fn check_metrics(
    text: &str,
    name: &str,
    services: &[&str],
    own: &BTreeMap<(String, String), u64>,
    problems: &mut Vec<Problem>,
) {
    let mut series: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("skyconf_fleet_agents{")) {
        let Some((labels, value)) = line.strip_prefix("skyconf_fleet_agents{").and_then(|l| l.rsplit_once("} ")) else {
            continue;
        };
        let labels = parse_labels(labels);
        if labels.contains_key("digest") {
            problems.push(Problem {
                id: format!("metrics digest label {name}"),
                text: format!("{name}: skyconf_fleet_agents carries a digest label (a new series per release): {line}"),
            });
        }
        let value = value.trim().parse::<f64>().map_or(0, |v| v as u64);
        let key =
            (labels.get("service").cloned().unwrap_or_default(), labels.get("state").cloned().unwrap_or_default());
        *series.entry(key).or_default() += value;
    }
    for service in services {
        for state in STATES {
            let key = ((*service).to_owned(), state.to_owned());
            let (metric, rows) = (series.get(&key).copied().unwrap_or(0), own.get(&key).copied().unwrap_or(0));
            if metric != rows {
                problems.push(Problem {
                    id: format!("metrics {name} {service} {state}"),
                    text: format!(
                        "{name}: skyconf_fleet_agents{{service=\"{service}\",state=\"{state}\"}} = {metric}, its own rows in /api/v1/services/{service}: {rows}"
                    ),
                });
            }
        }
    }
}

/// `a="x",b="y"` as a map (values without escaped quotes, as the test's names are).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter_map(|pair| pair.split_once("=\""))
        .map(|(k, v)| (k.trim().to_owned(), v.trim_end_matches('"').to_owned()))
        .collect()
}

async fn get_json(admin: &AdminClient, path: &str, name: &str, seen: &mut Observation) -> Option<Value> {
    match admin.try_send("GET", path, &[], "").await {
        Ok(reply) if reply.status == 200 => match serde_json::from_str(&reply.body) {
            Ok(json) => Some(json),
            Err(e) => {
                seen.problems
                    .push(Problem { id: format!("unreadable {name} {path}"), text: format!("{name}: {path}: {e}") });
                None
            }
        },
        other => {
            seen.problems.push(unreadable(name, path, &other));
            None
        }
    }
}

fn unreadable(name: &str, path: &str, reply: &Result<skyconf_testkit::server::Reply, reqwest::Error>) -> Problem {
    let what = match reply {
        Ok(reply) => format!("{} {}", reply.status, reply.body),
        Err(e) => e.to_string(),
    };
    Problem { id: format!("unreadable {name} {path}"), text: format!("{name}: GET {path}: {what}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_parsed() {
        let labels = parse_labels(r#"service="churn-a",state="applied""#);
        assert_eq!(labels["service"], "churn-a");
        assert_eq!(labels["state"], "applied");
    }
}
