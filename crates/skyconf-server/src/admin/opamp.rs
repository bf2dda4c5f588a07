//! `GET /api/v1/opamp/agents`: the live OpAMP agents of this replica and, as they last published
//! them, of the others (see [`crate::opamp`] and [`crate::opamp::replicas`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::Admin;
use super::read::ReadFailures;
use crate::opamp::replicas::OpampReplicas;
use crate::opamp::{OpampAgentRow, OpampFleet};

impl Admin {
    /// Lists the agents of the OpAMP port (`/api/v1/opamp/agents`).
    pub fn with_opamp(mut self, fleet: Arc<OpampFleet>) -> Self {
        self.opamp = Some(fleet);
        self
    }

    /// Lists the other replicas' OpAMP agents too.
    pub fn with_opamp_peers(mut self, peers: Arc<OpampReplicas>) -> Self {
        self.opamp_peers = Some(peers);
        self
    }
}

/// The answer of `GET /api/v1/opamp/agents`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OpampAgents {
    /// Whether the OpAMP port runs here (`--opamp-addr`).
    pub enabled: bool,
    /// This replica's id.
    #[schema(required = true)]
    pub replica: Option<String>,
    /// Every agent with a live session, here and on the other replicas, by uid then replica.
    pub agents: Vec<ReplicaOpampAgent>,
    /// The replicas with more live agents than they publish rows for (1000): their lists here
    /// are partial.
    pub partial_replicas: Vec<String>,
    /// The served `opamp:` groups no listed agent is in, in document order: most often a `match`
    /// no agent's description satisfies ([`crate::opamp::unmatched`]).
    pub unmatched_groups: Vec<String>,
}

/// An OpAMP agent labelled with the replica it talks to.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ReplicaOpampAgent {
    #[serde(flatten)]
    agent: OpampAgentRow,
    /// The replica the agent talks to.
    #[schema(required = true)]
    replica: Option<String>,
    /// For another replica's agent, when that replica published it; `null` for this one's.
    #[schema(required = true)]
    as_of_ms: Option<u64>,
}

/// `GET /api/v1/opamp/agents`.
#[utoipa::path(
    get,
    path = "/api/v1/opamp/agents",
    tag = "read",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The OpAMP agents with a live session, on every replica: description, health, the remote configuration status they last reported, their effective configuration's hash, and what they are offered now.", body = OpampAgents),
        ReadFailures,
    ),
)]
pub(super) async fn agents(State(admin): State<Admin>) -> Json<OpampAgents> {
    let own = admin.opamp_peers.as_ref().map(|p| p.id().to_owned());
    let mut agents: Vec<ReplicaOpampAgent> = admin
        .opamp
        .as_deref()
        .map(OpampFleet::agents)
        .unwrap_or_default()
        .into_iter()
        .map(|agent| ReplicaOpampAgent { agent, replica: own.clone(), as_of_ms: None })
        .collect();
    let mut partial_replicas = Vec::new();
    if let Some(peers) = &admin.opamp_peers {
        for peer in peers.peers().iter() {
            if peer.total > peer.agents.len() {
                partial_replicas.push(peer.replica.clone());
            }
            agents.extend(peer.agents.iter().map(|agent| ReplicaOpampAgent {
                agent: agent.clone(),
                replica: Some(peer.replica.clone()),
                as_of_ms: Some(peer.updated_ms),
            }));
        }
    }
    agents.sort_by(|a, b| (&a.agent.uid, &a.replica).cmp(&(&b.agent.uid, &b.replica)));
    partial_replicas.sort();
    let snapshot = admin.served.snapshot();
    let unmatched_groups = crate::opamp::unmatched::unmatched(
        snapshot.table.opamp(),
        agents.iter().filter_map(|a| a.agent.group.as_deref()),
    );
    Json(OpampAgents { enabled: admin.opamp.is_some(), replica: own, agents, partial_replicas, unmatched_groups })
}
