//! OpAMP agents in staged rollouts: which agents a rollout's candidate concerns, which of them a
//! wave reaches, what they are offered, and what the rollout's gates read of them.
//!
//! An agent is concerned when the candidate's `opamp:` section offers it other files than the
//! served one ([`skyconf_core::opamp_diff::changed_groups`] names every group such an agent
//! belongs to). The rollout rule sees it as one instance of a *unit* named `opamp:<group>` (its
//! group under the candidate, else under the served section), known by its
//! `service.instance.id` attribute, else its instance uid in hex: the waves' share takes it by
//! the targeting hash of (unit, that key), as it takes SkyWalking instances by (service,
//! instance), so a restarted agent that keeps its `service.instance.id` stays in its wave.
//!
//! A reached agent is offered the candidate's files; the others keep the served ones. It has
//! **applied** when its `RemoteConfigStatus` says APPLIED with the `config_hash` it is offered
//! now (or, for an agent that reports no status, when its effective configuration hashes to
//! it); it has **failed** when that status says FAILED for it, and its `error_message` is the
//! reason the wave is reverted with. An agent connected by WebSocket is live while its
//! connection is open; an HTTP agent while one of its polls is held, and when its messages move
//! on (a heartbeat too). The other replicas' agents are judged alike from the rows they publish
//! ([`super::replicas`]: seen as of their replica's last summary), so the replica that drives a
//! rollout judges every agent. After a revert every concerned
//! agent is offered the served files again, and what it reports of them is shown beside the
//! rollout (opamp-spec #397).

use std::sync::Arc;

use skyconf_core::opamp::OpampSection;
use skyconf_opamp::{Agent, RemoteConfig, Transport, bits};

use super::backend::{Built, ConfigStatusView, OpampFleet, hex};
use super::replicas::OpampSummary;
use crate::served::{Observed, WaveMembers};

/// The prefix of the rollout unit of an OpAMP group.
pub(crate) const UNIT_PREFIX: &str = "opamp:";

/// The rollout unit of `group`: `opamp:<group>`.
pub(crate) fn unit(group: &str) -> String {
    format!("{UNIT_PREFIX}{group}")
}

/// The attribute an agent is known by in a rollout, where it has it.
pub(crate) const INSTANCE_ATTRIBUTE: &str = "service.instance.id";

/// Which configuration an agent's last `RemoteConfigStatus` is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusOf {
    /// The rollout's candidate.
    Candidate,
    /// The configuration served without the rollout (the one a revert goes back to).
    Previous,
    /// Another one (or none is offered).
    Other,
}

/// One concerned OpAMP agent, as a rollout's gates read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The agent: its unit (`opamp:<group>`) as its service, its key as its instance; `held` when
    /// a WebSocket connection is open now, or a poll held (never for another replica's row).
    pub agent: Observed,
    /// Its last `RemoteConfigStatus`, if it reported one.
    pub status: Option<ConfigStatusView>,
    /// What that status is about.
    pub status_of: StatusOf,
}

/// An agent's key in a rollout's waves: its `service.instance.id`, else its uid (hex).
pub(super) fn key(agent_uid: &str, description: &skyconf_opamp::Description) -> String {
    description.get_str(INSTANCE_ATTRIBUTE).map_or_else(|| agent_uid.to_owned(), str::to_owned)
}

/// What the gates read of one agent: a live row of this replica, or one another replica published.
struct Facts<'r, F> {
    /// Reads its string attributes.
    attribute: F,
    /// Its key ([`key`]).
    instance: String,
    status: Option<&'r ConfigStatusView>,
    effective_config_hash: Option<&'r str>,
    last_seen_ms: u64,
    held: bool,
}

/// The configurations a rollout's look offers: the served table's and the candidate's.
struct Offers {
    served: Arc<Built>,
    candidate: Arc<Built>,
}

impl Offers {
    /// `agent` judged with `members` reached, when the candidate offers it other files than the
    /// served table.
    fn judge<'a>(
        &self,
        members: &WaveMembers,
        agent: Facts<'_, impl Fn(&str) -> Option<&'a str> + Copy>,
    ) -> Option<Judged> {
        let (served, offered) =
            (self.served.of_attributes(agent.attribute), self.candidate.of_attributes(agent.attribute));
        let hash = |o: Option<(&str, &Arc<RemoteConfig>)>| o.map(|(_, c)| c.hash().to_string());
        let (previous, next) = (hash(served), hash(offered));
        if previous == next {
            return None;
        }
        let group = offered.or(served).map(|(group, _)| group)?;
        let unit = unit(group);
        let reached = members.holds(&unit, &agent.instance);
        let now = if reached { &next } else { &previous };
        let about = |hash: &str| now.as_deref() == Some(hash);
        let status = agent.status.cloned();
        let applied = now.is_none()
            || status.as_ref().is_some_and(|s| s.status == "applied" && about(&s.config_hash))
            || agent.effective_config_hash.is_some_and(about);
        let failed =
            status.as_ref().filter(|s| s.status == "failed" && about(&s.config_hash)).map(|s| s.error_message.clone());
        let status_of = match status.as_ref().map(|s| Some(s.config_hash.clone())) {
            Some(hash) if hash == next => StatusOf::Candidate,
            Some(hash) if hash == previous => StatusOf::Previous,
            _ => StatusOf::Other,
        };
        Some(Judged {
            agent: Observed {
                service: unit,
                instance: agent.instance,
                reached,
                applied,
                failed,
                last_seen_ms: agent.last_seen_ms,
                held: agent.held,
            },
            status,
            status_of,
        })
    }
}

impl OpampFleet {
    /// The candidate's configuration for `agent` when a rollout's waves reach it and its files
    /// change (`Some(None)`: the candidate offers it nothing); `None` otherwise.
    pub(super) fn rollout_offer(
        &self,
        agent: &Agent,
        served: Option<(&str, &Arc<RemoteConfig>)>,
    ) -> Option<Option<Arc<RemoteConfig>>> {
        let overlay = self.served.overlay()?;
        let section = overlay.opamp.as_ref()?;
        let candidate = self.candidate(section);
        let offered = candidate.of(&agent.description);
        let hash = |o: Option<(&str, &Arc<RemoteConfig>)>| o.map(|(_, c)| c.hash().clone());
        if hash(offered) == hash(served) {
            return None;
        }
        let group = offered.or(served).map(|(group, _)| group)?;
        let uid = hex(agent.uid.as_bytes());
        overlay
            .members
            .holds(&unit(group), &key(&uid, &agent.description))
            .then(|| offered.map(|(_, config)| Arc::clone(config)))
    }

    /// The agents the `candidate` section offers other files than the served one, judged against
    /// what they are offered with `members` reached: this replica's live agents, and those
    /// `peers` published (seen when their rows say, never held at this look).
    pub fn judged(&self, candidate: &OpampSection, members: &WaveMembers, peers: &[OpampSummary]) -> Vec<Judged> {
        let offers = Offers { served: self.built(), candidate: self.candidate(candidate) };
        let rows: Vec<_> = self.rows().iter().map(|(uid, row)| (hex(uid.as_bytes()), row.clone())).collect();
        let mut out = Vec::new();
        for (uid, row) in &rows {
            if row.description.is_empty() || !row.capabilities.has(bits::agent::ACCEPTS_REMOTE_CONFIG) {
                continue;
            }
            let facts = Facts {
                attribute: |key: &str| row.description.get_str(key),
                instance: key(uid, &row.description),
                status: row.status.as_ref(),
                effective_config_hash: row.effective_config_hash.as_deref(),
                last_seen_ms: row.last_report_ms,
                held: row.transport == Transport::WebSocket || row.holding > 0,
            };
            out.extend(offers.judge(members, facts));
        }
        for row in peers.iter().flat_map(|peer| &peer.agents) {
            if row.attributes.is_empty() || !row.accepts_remote_config {
                continue;
            }
            let facts = Facts {
                attribute: |key: &str| {
                    let found = row.attributes.iter().find(|a| a.key == key)?;
                    found.string.then_some(found.value.as_str())
                },
                instance: row.instance.clone(),
                status: row.remote_config_status.as_ref(),
                effective_config_hash: row.effective_config_hash.as_deref(),
                last_seen_ms: row.last_seen_ms,
                held: false,
            };
            out.extend(offers.judge(members, facts));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use skyconf_core::AgentConfigurations;
    use skyconf_core::answer::Answers;
    use skyconf_opamp::backend::ApplyStatus;
    use skyconf_opamp::bits::Capabilities;
    use skyconf_opamp::wire::{self, any_value::Value};
    use skyconf_opamp::{Backend, ConfigStatus, Description, InstanceUid, Report};

    use super::*;
    use crate::served::{Overlay, ServedTable};

    fn table(ratio: &str) -> AgentConfigurations {
        skyconf_core::read(&format!(
            "configurations:\n  svc: {{k: 1}}\nopamp:\n  - group: collectors\n    match: {{service.name: otel}}\n    files:\n      sampling.json: {{body: '{{\"ratio\": {ratio}}}'}}\n"
        ))
        .unwrap()
    }

    fn agent(index: u8, accepts: bool) -> Agent {
        let kv = |key: &str, value: String| wire::KeyValue {
            key: key.into(),
            value: Some(wire::AnyValue { value: Some(Value::StringValue(value)) }),
        };
        let mut caps = bits::agent::REPORTS_REMOTE_CONFIG;
        if accepts {
            caps |= bits::agent::ACCEPTS_REMOTE_CONFIG;
        }
        Agent {
            uid: InstanceUid::from_bytes([index + 1; 16]),
            description: Arc::new(Description {
                wire: wire::AgentDescription {
                    identifying_attributes: vec![
                        kv("service.name", "otel".into()),
                        kv(INSTANCE_ATTRIBUTE, format!("otel-{index}")),
                    ],
                    non_identifying_attributes: vec![],
                },
            }),
            capabilities: Capabilities(caps),
            transport: Transport::Http,
        }
    }

    fn status(config: &RemoteConfig, status: ApplyStatus, error: &str) -> ConfigStatus {
        ConfigStatus { hash: config.hash().clone(), status, error_message: error.into() }
    }

    fn offered(fleet: &OpampFleet, agent: &Agent) -> Arc<RemoteConfig> {
        fleet.remote_config(agent).unwrap().expect("a configuration is offered")
    }

    #[test]
    fn a_wave_offers_the_candidate_to_its_agents_only_and_reads_what_they_report() {
        let served = Arc::new(ServedTable::new(table("0.5")));
        let fleet = OpampFleet::new(Arc::clone(&served));
        let agents: Vec<Agent> = (0..4).map(|i| agent(i, i != 3)).collect();
        for agent in &agents {
            fleet.report(agent, Report::Connected);
        }
        let v1 = offered(&fleet, &agents[0]);
        let candidate = table("2");
        let members = WaveMembers {
            share: None,
            named: [(unit("collectors"), ["otel-1".to_owned()].into_iter().collect())].into_iter().collect(),
        };
        served.set_overlay(Some(Arc::new(Overlay {
            rollout: "r1".into(),
            services: HashSet::new(),
            candidate: Answers::new(&AgentConfigurations::default()),
            members: members.clone(),
            opamp: Some(candidate.opamp().clone()),
        })));
        let v2 = offered(&fleet, &agents[1]);
        assert_ne!(v2.hash(), v1.hash(), "the reached agent is offered the candidate");
        assert_eq!(offered(&fleet, &agents[0]).hash(), v1.hash(), "the others keep the served files");

        fleet.report(&agents[0], Report::RemoteConfigStatus(&status(&v1, ApplyStatus::Applied, "")));
        fleet.report(&agents[1], Report::RemoteConfigStatus(&status(&v2, ApplyStatus::Failed, "ratio 2")));
        let judged = fleet.judged(candidate.opamp(), &members, &[]);
        let of = |name: &str| judged.iter().find(|j| j.agent.instance == name).cloned();
        assert!(of("otel-3").is_none(), "an agent that does not accept remote configuration is not judged");
        let reached = of("otel-1").unwrap();
        assert_eq!(
            (reached.agent.service.as_str(), reached.agent.reached, reached.agent.applied),
            ("opamp:collectors", true, false)
        );
        assert_eq!((reached.agent.failed.as_deref(), reached.status_of), (Some("ratio 2"), StatusOf::Candidate));
        let other = of("otel-0").unwrap();
        assert_eq!(
            (other.agent.reached, other.agent.applied, other.agent.failed, other.status_of),
            (false, true, None, StatusOf::Previous)
        );
        let silent = of("otel-2").unwrap();
        assert!(!silent.agent.applied && silent.status.is_none(), "no status yet: not applied");

        // The revert: the reached agent is offered its previous files again, and what it reports
        // of them is about the previous configuration.
        served.set_overlay(None);
        assert_eq!(offered(&fleet, &agents[1]).hash(), v1.hash());
        fleet.report(&agents[1], Report::RemoteConfigStatus(&status(&v1, ApplyStatus::Applied, "")));
        let after = fleet.judged(candidate.opamp(), &WaveMembers::default(), &[]);
        let back = after.iter().find(|j| j.agent.instance == "otel-1").unwrap();
        assert_eq!((back.agent.applied, back.status_of), (true, StatusOf::Previous));
    }

    #[test]
    fn another_replicas_published_agent_is_judged_as_its_own_replica_judges_it() {
        let served = Arc::new(ServedTable::new(table("0.5")));
        let (here, there) = (OpampFleet::new(Arc::clone(&served)), OpampFleet::new(Arc::clone(&served)));
        let candidate = table("2");
        let members = WaveMembers {
            share: Some(skyconf_core::targeting::Share::read("100%").unwrap()),
            named: Default::default(),
        };
        let (agent, v2) = (agent(0, true), candidate.opamp().clone());
        there.report(&agent, Report::Connected);
        let offered = Built::new(0, &v2).of(&agent.description).map(|(_, c)| Arc::clone(c)).unwrap();
        there.report(&agent, Report::RemoteConfigStatus(&status(&offered, ApplyStatus::Failed, "ratio 2")));
        let peer = OpampSummary { replica: "b".into(), updated_ms: 5, agents: there.agents(), total: 1 };
        let published = here.judged(&v2, &members, std::slice::from_ref(&peer));
        let own = there.judged(&v2, &members, &[]);
        assert_eq!(published.len(), 1);
        let (published, own) = (&published[0], &own[0]);
        assert_eq!(
            (published.agent.service.as_str(), published.agent.instance.as_str()),
            ("opamp:collectors", "otel-0")
        );
        assert_eq!((published.agent.reached, published.agent.applied), (own.agent.reached, own.agent.applied));
        assert_eq!((published.agent.failed.as_deref(), published.status_of), (Some("ratio 2"), StatusOf::Candidate));
        assert!(!published.agent.held, "another replica's row is never held at this look");

        // A non-string attribute is not read by a `match`, there or here.
        let mut typed = peer.clone();
        typed.agents[0].attributes[0].string = false;
        assert!(here.judged(&v2, &members, &[typed]).is_empty());
    }

    #[test]
    fn an_unchanged_group_concerns_no_agent() {
        let served = Arc::new(ServedTable::new(table("0.5")));
        let fleet = OpampFleet::new(Arc::clone(&served));
        fleet.report(&agent(0, true), Report::Connected);
        let members = WaveMembers {
            share: Some(skyconf_core::targeting::Share::read("100%").unwrap()),
            named: Default::default(),
        };
        assert!(fleet.judged(table("0.5").opamp(), &members, &[]).is_empty());
        assert_eq!(fleet.judged(table("0.7").opamp(), &members, &[]).len(), 1);
    }
}
