//! The rollout endpoints: start a staged rollout of a candidate document, watch it wave by wave,
//! promote or abort it (see [`crate::rollout`] for what a rollout does). Every answer is a
//! [`RolloutAnswer`]; the failures the writes share are [`RolloutFailures`] and, for a promote or
//! an abort, [`DecisionFailures`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ErrorBody;
use super::extract::{WriteRequest, json_body, optional_json_body};
use super::read::ReadFailures;
use super::{Admin, AppError};
use crate::opamp::backend::ConfigStatusView;
use crate::opamp::rollout::StatusOf;
use crate::rollout::driver::Reached;
use crate::rollout::plan::{Advance, Gates, Phase, Rollout, Summary, WaveSpec, phase_name};
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
pub(crate) struct StartRollout {
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
pub(crate) struct Operator {
    /// Who promotes or aborts (recorded in the rollout's events; at most 256 bytes).
    #[schema(max_length = 256)]
    pub author: Option<String>,
}

/// A rollout answer: `GET /api/v1/rollouts` and every rollout write.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutAnswer {
    /// The current (or last) rollout; `null` when there has been none.
    #[schema(required = true)]
    rollout: Option<RolloutView>,
    /// The ended rollouts kept (the newest 20), newest first; the last one too once ended.
    history: Vec<Summary>,
}

/// A rollout with where it stands.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutView {
    #[serde(flatten)]
    rollout: Rollout,
    /// The phase in words (`running`, `waiting for a promote`, `completed`, `reverted`, ...).
    state: String,
    /// The current wave's reach (empty once the rollout has ended).
    progress: RolloutProgress,
    /// Once reverted or aborted: each reached OpAMP agent of its `opamp:` groups that is still
    /// connected, offered the previous configuration again, and the `RemoteConfigStatus` it
    /// reported since (`status_of: previous` once it went back).
    after_revert: Vec<ReachedAgent>,
}

/// The current wave's reach.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutProgress {
    /// The wave being run, from 1 (the record's `wave_index` is the same wave from 0).
    wave: usize,
    /// How many waves there are.
    waves: usize,
    /// Instances reached so far, by this wave and the earlier ones: served the candidate and
    /// seen live since the wave that serves them started (0 once the rollout has ended).
    reached: usize,
    /// Of them, those holding their new digest now.
    applied: usize,
    /// Each reached instance (the first 1000 by service and name).
    agents: Vec<ReachedAgent>,
}

/// One reached instance.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReachedAgent {
    /// Its service.
    service: String,
    /// Its instance.
    instance: String,
    /// Whether it holds its new digest.
    applied: bool,
    /// When its row was last seen (a held poll: now); `null` when the fleet lists no row of it
    /// now (it disappears when that lasts `lost_after_s`).
    #[schema(required = true)]
    last_seen_ms: Option<u64>,
    /// An OpAMP agent (service `opamp:<group>`): the `RemoteConfigStatus` it last reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    remote_config_status: Option<ConfigStatusView>,
    /// An OpAMP agent: what that status is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    status_of: Option<StatusOf>,
}

impl From<Reached> for ReachedAgent {
    fn from(reached: Reached) -> Self {
        let Reached { service, instance, applied, last_seen_ms, opamp } = reached;
        let (remote_config_status, status_of) = match opamp {
            Some((status, of)) => (status, Some(of)),
            None => (None, None),
        };
        Self { service, instance, applied, last_seen_ms, remote_config_status, status_of }
    }
}

/// The failures every rollout write shares.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a description only: `AppError` builds these answers")]
pub(crate) enum RolloutFailures {
    /// No token, or an unknown one.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The store cannot keep the rollout.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The failures a promote and an abort share, besides [`RolloutFailures`].
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a description only: `AppError` builds these answers")]
pub(crate) enum DecisionFailures {
    /// A read token, or cross-site; an unknown Host.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such rollout is current.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// This server runs no rollouts.
    #[response(status = 409)]
    NoRollouts(ErrorBody),
}

fn rollouts(admin: &Admin) -> Result<&Rollouts, AppError> {
    admin.rollouts.as_deref().ok_or_else(|| AppError::Conflict("this server runs no rollouts".into()))
}

/// A rollout as the API shows it: the record and where its reached agents stand.
fn view(rollouts: &Rollouts, rollout: Rollout) -> RolloutView {
    let active = rollout.phase.is_active();
    let listed = if active { rollouts.progress(&rollout) } else { Vec::new() };
    let reached = if active { rollout.reached() } else { 0 };
    let applied = listed.iter().filter(|a| a.applied).count();
    let progress = RolloutProgress {
        wave: rollout.wave_index + 1,
        waves: rollout.waves.len(),
        reached,
        applied,
        agents: listed.into_iter().map(ReachedAgent::from).collect(),
    };
    let reverted = matches!(rollout.phase, Phase::Reverted | Phase::Aborted) && !rollout.opamp_groups.is_empty();
    let after_revert = if reverted {
        rollouts.progress(&rollout).into_iter().filter(|a| a.opamp.is_some()).map(ReachedAgent::from).collect()
    } else {
        Vec::new()
    };
    RolloutView { state: phase_name(rollout.phase).to_owned(), progress, after_revert, rollout }
}

/// Every rollout answer: `rollout` and the `history` of ended ones.
fn answer(rollouts: &Rollouts, rollout: Option<Rollout>) -> RolloutAnswer {
    RolloutAnswer { rollout: rollout.map(|r| view(rollouts, r)), history: rollouts.history() }
}

/// `GET /api/v1/rollouts`.
#[utoipa::path(
    get,
    path = "/api/v1/rollouts",
    tag = "read",
    operation_id = "get_rollout",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The current (or last) rollout with its reached agents, or `null`; and the ended ones, newest first.", body = RolloutAnswer),
        ReadFailures,
    ),
)]
pub(super) async fn current(State(admin): State<Admin>) -> Json<RolloutAnswer> {
    let Some(rollouts) = admin.rollouts.as_deref() else {
        return Json(RolloutAnswer { rollout: None, history: Vec::new() });
    };
    let rollout = rollouts.current().await;
    Json(answer(rollouts, rollout))
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
        (status = 201, description = "Started: its first wave is served.", body = RolloutAnswer),
        (status = 400, description = "A refused document (line and column in `details`); a wave, gate, author or message out of its bounds; a candidate without a service or that changes nothing; or a first wave that reaches no live identified instance of a changed service (the services named, and what to do), without `ungated`.", body = ErrorBody),
        RolloutFailures,
        (status = 403, description = "A read token; a write without a JSON content type, or cross-site; an unknown Host.", body = ErrorBody),
        (status = 409, description = "Another rollout is running, or this server runs none.", body = ErrorBody),
        (status = 413, description = "The body is larger than the limit.", body = ErrorBody),
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
    Ok((StatusCode::CREATED, Json(answer(rollouts, Some(rollout)))).into_response())
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
        (status = 200, description = "The next wave started.", body = RolloutAnswer),
        (status = 400, description = "The rollout is not waiting for a promote, an author over 256 bytes, or bad JSON.", body = ErrorBody),
        RolloutFailures,
        DecisionFailures,
    ),
)]
pub(super) async fn promote(
    State(admin): State<Admin>,
    Path(id): Path<String>,
    WriteRequest { body, .. }: WriteRequest,
) -> Result<Json<RolloutAnswer>, AppError> {
    decide(&admin, &id, &body, Decision::Promote).await
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
        (status = 200, description = "Aborted: every reached instance is served what it had.", body = RolloutAnswer),
        (status = 400, description = "The rollout has ended, an author over 256 bytes, or bad JSON.", body = ErrorBody),
        RolloutFailures,
        DecisionFailures,
    ),
)]
pub(super) async fn abort(
    State(admin): State<Admin>,
    Path(id): Path<String>,
    WriteRequest { body, .. }: WriteRequest,
) -> Result<Json<RolloutAnswer>, AppError> {
    decide(&admin, &id, &body, Decision::Abort).await
}

/// An operator's decision about a waiting or running rollout.
#[derive(Debug, Clone, Copy)]
enum Decision {
    Promote,
    Abort,
}

/// Takes `decision` about rollout `id`, as the operator the optional body names.
async fn decide(admin: &Admin, id: &str, body: &[u8], decision: Decision) -> Result<Json<RolloutAnswer>, AppError> {
    let rollouts = rollouts(admin)?;
    let author = optional_json_body::<Operator>(body)?.author;
    let rollout = match decision {
        Decision::Promote => rollouts.promote(id, author.as_deref()).await?,
        Decision::Abort => rollouts.abort(id, author.as_deref()).await?,
    };
    Ok(Json(answer(rollouts, Some(rollout))))
}
