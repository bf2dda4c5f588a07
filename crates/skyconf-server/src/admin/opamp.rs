//! `GET /api/v1/opamp/agents`: the live OpAMP agents of this replica and, as they last published
//! them, of the others (see [`crate::opamp`] and [`crate::opamp::replicas`]); and
//! `GET /api/v1/opamp/agents/{uid}/effective`: the contents of one agent's effective
//! configuration, from the replica it talks to ([`crate::opamp::effective`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ErrorBody;
use super::read::ReadFailures;
use super::{Admin, AppError};
use crate::opamp::effective::EffectiveConfig;
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
    operation_id = "opamp_agents",
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

/// The answer of `GET /api/v1/opamp/agents/{uid}/effective`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OpampEffective {
    /// The agent's instance uid, hex.
    uid: String,
    /// The hash of the effective configuration it reported last (as `config_hash` is computed).
    effective_config_hash: String,
    /// Its files with their bodies, together cut at 16 KiB (a cut body is marked `truncated`);
    /// `null` when its contents are not kept (all agents' kept contents are bounded to 64 MiB).
    #[schema(required = true)]
    effective_config: Option<EffectiveConfig>,
}

/// `GET /api/v1/opamp/agents/{uid}/effective`.
#[utoipa::path(
    get,
    path = "/api/v1/opamp/agents/{uid}/effective",
    tag = "read",
    operation_id = "opamp_effective",
    security(("bearer" = [])),
    params(("uid" = String, Path, description = "The agent's instance uid, hex, as `GET /api/v1/opamp/agents` lists it.")),
    responses(
        (status = 200, description = "The effective configuration the agent reported last, with its files' contents (16 KiB per agent at most).", body = OpampEffective),
        (status = 404, description = "No live agent of this replica has this uid (another replica's agent is shown by that replica), or it has reported no effective configuration.", body = ErrorBody),
        ReadFailures,
    ),
)]
pub(super) async fn effective(
    State(admin): State<Admin>,
    Path(uid): Path<String>,
) -> Result<Json<OpampEffective>, AppError> {
    let found = admin.opamp.as_deref().and_then(|fleet| fleet.effective(&uid)).ok_or_else(|| {
        AppError::NotFound(format!(
            "no live OpAMP agent `{uid}` talks to this replica (another replica's agent is shown by that replica)"
        ))
    })?;
    let hash = found.hash.ok_or_else(|| {
        AppError::NotFound(format!("the OpAMP agent `{uid}` has reported no effective configuration"))
    })?;
    Ok(Json(OpampEffective {
        uid: uid.to_ascii_lowercase(),
        effective_config_hash: hash,
        effective_config: found.config,
    }))
}
