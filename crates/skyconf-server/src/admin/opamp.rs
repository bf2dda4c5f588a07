//! `GET /api/v1/opamp/agents`: the live OpAMP agents (see [`crate::opamp`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::Admin;
use super::read::ReadFailures;
use crate::opamp::{OpampAgentRow, OpampFleet};

impl Admin {
    /// Lists the agents of the OpAMP port (`/api/v1/opamp/agents`).
    pub fn with_opamp(mut self, fleet: Arc<OpampFleet>) -> Self {
        self.opamp = Some(fleet);
        self
    }
}

/// The answer of `GET /api/v1/opamp/agents`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OpampAgents {
    /// Whether the OpAMP port runs (`--opamp-addr`).
    pub enabled: bool,
    /// Every agent with a live session, by uid.
    pub agents: Vec<OpampAgentRow>,
}

/// `GET /api/v1/opamp/agents`.
#[utoipa::path(
    get,
    path = "/api/v1/opamp/agents",
    tag = "read",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The OpAMP agents with a live session: description, health, the remote configuration status they last reported, their effective configuration's hash, and what they are offered now.", body = OpampAgents),
        ReadFailures,
    ),
)]
pub(super) async fn agents(State(admin): State<Admin>) -> Json<OpampAgents> {
    match admin.opamp.as_deref() {
        Some(fleet) => Json(OpampAgents { enabled: true, agents: fleet.agents() }),
        None => Json(OpampAgents { enabled: false, agents: Vec::new() }),
    }
}
