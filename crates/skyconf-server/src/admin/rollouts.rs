//! The rollout endpoints: start a staged rollout of a candidate document, watch it wave by wave,
//! promote or abort it (see [`crate::rollout`] for what a rollout does).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::extract::WriteRequest;
use super::extract::json_body;
use super::openapi::ErrorBody;
use super::{Admin, AppError};
use crate::rollout::plan::{Advance, Gates, Rollout, WaveSpec, phase_name};
use crate::rollout::{Plan, RolloutError, Rollouts};

impl From<RolloutError> for AppError {
    fn from(error: RolloutError) -> Self {
        match error {
            RolloutError::Busy(why) => Self::Conflict(why),
            RolloutError::Refused(why) => Self::BadRequest(why),
            RolloutError::NotFound(why) => Self::NotFound(why),
            RolloutError::Document(error) => Self::Refused(error),
            RolloutError::Store(why) => Self::Unavailable(why),
        }
    }
}

/// The body of `POST /api/v1/rollouts`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRollout {
    /// The candidate: a whole agent-configurations document.
    pub document: String,
    /// The waves, in order (1 to 20; shares only grow); the last usually `{"share": "100%"}`.
    #[schema(min_items = 1, max_items = 20)]
    pub waves: Vec<WaveSpec>,
    /// The gates between waves (defaults: apply within 60 s, bake 60 s, lost after 45 s).
    #[serde(default)]
    pub gates: Gates,
    /// `auto` (default) or `manual`.
    #[serde(default)]
    pub advance: Advance,
    /// Start even if the first wave reaches no live identified instance of a changed service
    /// (refused otherwise): there the rollout is a write in steps, which no gate can judge.
    #[serde(default)]
    pub ungated: bool,
    /// Who starts it (at most 256 bytes, no control characters).
    #[schema(max_length = 256)]
    pub author: Option<String>,
    /// Why (at most 4096 bytes).
    #[schema(max_length = 4096)]
    pub message: Option<String>,
}

/// The optional body of a promote or an abort.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Operator {
    /// Who promotes or aborts (recorded in the rollout's events; at most 256 bytes).
    #[schema(max_length = 256)]
    pub author: Option<String>,
}

fn rollouts(admin: &Admin) -> Result<&Rollouts, AppError> {
    admin.rollouts.as_deref().ok_or_else(|| AppError::Conflict("this server runs no rollouts".into()))
}

/// A rollout as the API shows it: the record and where its reached agents stand.
fn view(rollouts: &Rollouts, rollout: &Rollout) -> Value {
    let active = rollout.phase.is_active();
    let listed = if active { rollouts.progress(rollout) } else { Vec::new() };
    let reached = if active { rollout.reached() } else { 0 };
    let applied = listed.iter().filter(|a| a.applied).count();
    let agents: Vec<Value> = listed
        .iter()
        .map(|a| json!({"service": a.service, "instance": a.instance, "applied": a.applied, "last_seen_ms": a.last_seen_ms}))
        .collect();
    let mut body = serde_json::to_value(rollout).expect("a rollout always serializes");
    body["state"] = json!(phase_name(rollout.phase));
    body["progress"] = json!({
        "wave": rollout.wave_index + 1,
        "waves": rollout.waves.len(),
        "reached": reached,
        "applied": applied,
        "agents": agents,
    });
    body
}

/// Every rollout answer: `rollout` and the `history` of ended ones.
fn answer(rollouts: &Rollouts, rollout: Option<&Rollout>) -> Value {
    json!({ "rollout": rollout.map(|r| view(rollouts, r)), "history": rollouts.history() })
}

/// `GET /api/v1/rollouts`.
#[utoipa::path(
    get,
    path = "/api/v1/rollouts",
    tag = "read",
    operation_id = "get_rollout",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The current (or last) rollout with its reached agents, or `null`; and the ended ones, newest first.", body = super::openapi::RolloutAnswer),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A cross-site request, or an unknown Host.", body = ErrorBody),
    ),
)]
pub(super) async fn current(State(admin): State<Admin>) -> Json<Value> {
    let Some(rollouts) = admin.rollouts.as_deref() else {
        return Json(json!({ "rollout": null, "history": [] }));
    };
    let rollout = rollouts.current().await;
    Json(answer(rollouts, rollout.as_ref()))
}

/// `POST /api/v1/rollouts`.
#[utoipa::path(
    post,
    path = "/api/v1/rollouts",
    tag = "write",
    operation_id = "start_rollout",
    security(("bearer" = [])),
    request_body(content = StartRollout, content_type = "application/json"),
    responses(
        (status = 201, description = "Started: its first wave is served.", body = super::openapi::RolloutAnswer),
        (status = 400, description = "A refused document (line and column in `details`); a wave, gate, author or message out of its bounds; a candidate without a service or that changes nothing; or a first wave that reaches no live identified instance of a changed service (the services named, and what to do), without `ungated`.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token; a write without a JSON content type, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "Another rollout is running, or this server runs none.", body = ErrorBody),
        (status = 413, description = "The body is larger than the limit.", body = ErrorBody),
        (status = 503, description = "The store cannot keep the rollout.", body = ErrorBody),
    ),
)]
pub(super) async fn start(
    State(admin): State<Admin>,
    WriteRequest { body, .. }: WriteRequest,
) -> Result<Response, AppError> {
    let rollouts = rollouts(&admin)?;
    let request: StartRollout = json_body(&body)?;
    if request.document.len() > admin.options.max_document_bytes {
        return Err(AppError::TooLarge(format!(
            "the document is {} bytes, more than the limit of {} bytes",
            request.document.len(),
            admin.options.max_document_bytes
        )));
    }
    let snapshot = admin.served.snapshot();
    let base = admin.releases.served_as(snapshot.version).unwrap_or(0);
    let plan = Plan {
        document: request.document,
        waves: request.waves,
        gates: request.gates,
        advance: request.advance,
        author: request.author,
        message: request.message,
        ungated: request.ungated,
    };
    let rollout = rollouts.start(plan, base).await?;
    Ok((StatusCode::CREATED, Json(answer(rollouts, Some(&rollout)))).into_response())
}

/// `POST /api/v1/rollouts/{id}/promote`.
#[utoipa::path(
    post,
    path = "/api/v1/rollouts/{id}/promote",
    tag = "write",
    operation_id = "promote_rollout",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The rollout's id.")),
    request_body(content = Option<Operator>, content_type = "application/json",
        description = "Optional: who promotes."),
    responses(
        (status = 200, description = "The next wave started.", body = super::openapi::RolloutAnswer),
        (status = 400, description = "The rollout is not waiting for a promote, an author over 256 bytes, or bad JSON.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 404, description = "No such rollout is current.", body = ErrorBody),
        (status = 409, description = "This server runs no rollouts.", body = ErrorBody),
        (status = 503, description = "The store cannot keep the rollout.", body = ErrorBody),
    ),
)]
pub(super) async fn promote(
    State(admin): State<Admin>,
    Path(id): Path<String>,
    WriteRequest { body, .. }: WriteRequest,
) -> Result<Json<Value>, AppError> {
    let rollouts = rollouts(&admin)?;
    let operator = operator(&body)?;
    let rollout = rollouts.promote(&id, operator.author.as_deref()).await?;
    Ok(Json(answer(rollouts, Some(&rollout))))
}

/// `POST /api/v1/rollouts/{id}/abort`.
#[utoipa::path(
    post,
    path = "/api/v1/rollouts/{id}/abort",
    tag = "write",
    operation_id = "abort_rollout",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The rollout's id.")),
    request_body(content = Option<Operator>, content_type = "application/json",
        description = "Optional: who aborts."),
    responses(
        (status = 200, description = "Aborted: every reached instance is served what it had.", body = super::openapi::RolloutAnswer),
        (status = 400, description = "The rollout has ended, an author over 256 bytes, or bad JSON.", body = ErrorBody),
        (status = 401, description = "No token, or an unknown one.", body = ErrorBody),
        (status = 403, description = "A read token, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 404, description = "No such rollout is current.", body = ErrorBody),
        (status = 409, description = "This server runs no rollouts.", body = ErrorBody),
        (status = 503, description = "The store cannot keep the rollout.", body = ErrorBody),
    ),
)]
pub(super) async fn abort(
    State(admin): State<Admin>,
    Path(id): Path<String>,
    WriteRequest { body, .. }: WriteRequest,
) -> Result<Json<Value>, AppError> {
    let rollouts = rollouts(&admin)?;
    let operator = operator(&body)?;
    let rollout = rollouts.abort(&id, operator.author.as_deref()).await?;
    Ok(Json(answer(rollouts, Some(&rollout))))
}

fn operator(body: &[u8]) -> Result<Operator, AppError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Operator::default());
    }
    json_body::<Option<Operator>>(body).map(Option::unwrap_or_default)
}
