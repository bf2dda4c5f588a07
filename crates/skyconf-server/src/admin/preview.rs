//! Where each value an agent gets comes from, and what an agent would get:
//!
//! - `GET /api/v1/services/{name}/layers[?instance=I&property=K=V...&agent_version=A]`: every
//!   setting served to the service (to that instance, when named) with its layer — `global`,
//!   `service`, `group:<name>`, or `rollout:<id>` for a value a running rollout's wave gives the
//!   instance — and the digest its agents echo.
//! - `POST /api/v1/preview`: the same for a service, an instance, its properties and agent
//!   version, against the served document or a draft sent in the body (read as a write would read
//!   it, refused with line and column, never served), and for a list of operation names which of
//!   them the agent would not trace ([`skyconf_core::ignore`]).
//!
//! Both change nothing: they are reads (a read token), the preview a `POST` only to carry its body.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use prost::Message;
use serde::{Deserialize, Serialize};
use skyconf_core::AgentConfigurations;
use skyconf_core::answer::Answers;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_core::ignore::list_problems;
use skyconf_core::keys::TRACE_IGNORE_PATH;
use skyconf_core::layers::{Sourced, ignored_paths, provenance};
use skyconf_core::table::Layer;
use skyconf_core::targeting::InstanceRef;
use skyconf_proto::v3::Commands;
use utoipa::ToSchema;

use super::extract::{AnyServiceName, ParsedQuery};
use super::openapi::ErrorBody;
use super::read::ReadFailures;
use super::{Admin, AppError};
use crate::served::View;

/// The most operation names one preview judges.
pub(crate) const MAX_PREVIEW_PATHS: usize = 1000;

/// One setting and where its value comes from.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LayeredSetting {
    /// The setting.
    key: String,
    /// Its value, as sent.
    value: String,
    /// `global`, `service`, `group:<name>` or `rollout:<id>`.
    layer: String,
}

/// Whether an agent traces one operation name.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PathVerdict {
    /// The operation name judged.
    path: String,
    /// Whether the agent ignores it (does not trace it).
    ignored: bool,
    /// The setting that ignores it: `agent.trace.ignore_path` or `agent.ignore_suffix`.
    #[schema(required = true)]
    ignored_by: Option<String>,
    /// The pattern (or suffix) that matched.
    #[schema(required = true)]
    pattern: Option<String>,
}

/// What one agent is served, layer by layer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Layers {
    /// The service.
    service: String,
    /// The instance asked about, if any.
    #[schema(required = true)]
    instance: Option<String>,
    /// `served` (the document served now, with a running rollout) or `draft` (the body's).
    against: &'static str,
    /// The digest of the answer, as agents echo it.
    digest: String,
    /// Whether the service has its own entry (else it gets the global settings, or EMPTY).
    configured: bool,
    /// The targeting group the instance falls in.
    #[schema(required = true)]
    group: Option<String>,
    /// The rollout whose wave serves the instance.
    #[schema(required = true)]
    rollout: Option<String>,
    /// The settings, in the order they are sent.
    settings: Vec<LayeredSetting>,
    /// For `POST /api/v1/preview` with `paths`: each one's verdict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ignored: Vec<PathVerdict>,
    /// `agent.trace.ignore_path` patterns that probably do not mean what they say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// One reported instance property.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PropertyInput {
    /// The property name (`zone`, `ipv4`, ...).
    key: String,
    /// Its value.
    value: String,
}

/// The body of `POST /api/v1/preview`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreviewRequest {
    /// The service the agent names.
    service: String,
    /// Its instance name.
    #[serde(default)]
    instance: Option<String>,
    /// The properties it reports (a key may repeat).
    #[serde(default)]
    properties: Vec<PropertyInput>,
    /// The `agent-version` of its calls.
    #[serde(default)]
    agent_version: Option<String>,
    /// A draft document to preview against instead of the served one (never served).
    #[serde(default)]
    document: Option<String>,
    /// Operation names to judge against the answer's `agent.trace.ignore_path` and
    /// `agent.ignore_suffix` (at most 1000).
    #[serde(default)]
    paths: Vec<String>,
}

/// Who is asked about.
struct Asked {
    service: String,
    instance: Option<String>,
    properties: Vec<(Box<str>, Box<str>)>,
    agent_version: Option<String>,
}

impl Asked {
    fn instance(&self) -> Option<InstanceRef<'_>> {
        let name = self.instance.as_deref()?;
        Some(InstanceRef { name, properties: &self.properties, agent_version: self.agent_version.as_deref() })
    }
}

/// `GET /api/v1/services/{name}/layers`: every setting served to a service (or one of its
/// instances) with the layer it comes from.
#[utoipa::path(
    get,
    path = "/api/v1/services/{name}/layers",
    tag = "read",
    operation_id = "layers",
    security(("bearer" = [])),
    params(
        AnyServiceName,
        ("instance" = Option<String>, Query, description = "An instance name: its targeting group and rollout wave apply."),
        ("property" = Option<Vec<String>>, Query, description = "A reported property, `key=value`; repeat for more."),
        ("agent_version" = Option<String>, Query, description = "The instance's agent version."),
    ),
    responses(
        (status = 200, description = "The settings and their layers.", body = Layers),
        (status = 400, description = "A bad percent-escape in the name, or a bad or unknown query parameter.", body = ErrorBody),
        ReadFailures,
    ),
)]
pub(super) async fn layers(
    State(admin): State<Admin>,
    AnyServiceName(service): AnyServiceName,
    ParsedQuery(pairs): ParsedQuery<Vec<(String, String)>>,
) -> Result<Json<Layers>, AppError> {
    let mut asked = Asked { service, instance: None, properties: Vec::new(), agent_version: None };
    for (name, value) in pairs {
        match name.as_str() {
            "instance" => asked.instance = Some(value),
            "agent_version" => asked.agent_version = Some(value),
            "property" => {
                let Some((key, value)) = value.split_once('=') else {
                    return Err(AppError::BadRequest(format!("property `{value}` is not `key=value`")));
                };
                asked.properties.push((key.into(), value.into()));
            }
            other => {
                return Err(AppError::BadRequest(format!(
                    "unknown query parameter `{other}`; expected `instance`, `property` or `agent_version`"
                )));
            }
        }
    }
    let serving = admin.served.serving();
    Ok(Json(explain(&serving.view(), &asked)))
}

/// `POST /api/v1/preview`: what an agent would get, against the served document or a draft,
/// and which operation names it would not trace.
#[utoipa::path(
    post,
    path = "/api/v1/preview",
    tag = "read",
    operation_id = "preview",
    security(("bearer" = [])),
    request_body(content = PreviewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The settings with their layers, and each path's verdict.", body = Layers),
        (status = 400, description = "A malformed body, too many paths, or a draft document that would be refused (with line and column).", body = ErrorBody),
        ReadFailures,
        (status = 413, description = "A body over the largest document accepted.", body = ErrorBody),
    ),
)]
pub(super) async fn preview(
    State(admin): State<Admin>,
    body: Result<Json<PreviewRequest>, JsonRejection>,
) -> Result<Json<Layers>, AppError> {
    let Json(request) = body.map_err(|e| AppError::BadRequest(e.body_text()))?;
    if request.paths.len() > MAX_PREVIEW_PATHS {
        return Err(AppError::BadRequest(format!("at most {MAX_PREVIEW_PATHS} paths per preview")));
    }
    let asked = Asked {
        service: request.service,
        instance: request.instance,
        properties: request.properties.into_iter().map(|p| (p.key.into(), p.value.into())).collect(),
        agent_version: request.agent_version,
    };
    let mut layers = match request.document {
        Some(document) => {
            let table = tokio::task::spawn_blocking(move || skyconf_core::read(&document))
                .await
                .map_err(|e| AppError::Internal(format!("reading the draft: {e}")))??;
            explain_table(&table, &asked, "draft")
        }
        None => explain(&admin.served.serving().view(), &asked),
    };
    let sent: Vec<(&str, &str)> = layers.settings.iter().map(|s| (s.key.as_str(), s.value.as_str())).collect();
    let ignored = ignored_paths(&sent, &request.paths)
        .into_iter()
        .map(|v| PathVerdict {
            path: v.path,
            ignored: v.ignored_by.is_some(),
            ignored_by: v.ignored_by.map(str::to_owned),
            pattern: v.pattern,
        })
        .collect();
    let warnings = match sent.iter().find(|(k, _)| *k == TRACE_IGNORE_PATH) {
        Some((_, value)) if !value.trim().is_empty() => list_problems(value),
        _ => Vec::new(),
    };
    layers.ignored = ignored;
    layers.warnings = warnings;
    Ok(Json(layers))
}

/// What `asked` is served now: from a running rollout's candidate when its wave holds the
/// instance (each value the candidate changes in layer `rollout:<id>`), else from the snapshot.
fn explain(view: &View<'_>, asked: &Asked) -> Layers {
    let instance = asked.instance();
    let mut layers = explain_table(&view.snapshot.table, asked, "served");
    let (answers, rollout) = view.answers_for(&asked.service, instance.as_ref());
    if let Some(rollout) = rollout {
        let chosen = answers.choose(&asked.service, instance.as_ref());
        let before: Vec<LayeredSetting> = std::mem::take(&mut layers.settings);
        layers.settings = sent_by(answers, &asked.service, instance.as_ref())
            .into_iter()
            .map(|(key, value)| {
                let kept = before.iter().find(|s| s.key == key && s.value == value).map(|s| s.layer.clone());
                let layer = kept.unwrap_or_else(|| Layer::Rollout(rollout.to_owned()).to_string());
                LayeredSetting { key, value, layer }
            })
            .collect();
        layers.digest = chosen.answer.digest.to_string();
        layers.group = chosen.group.map(|g| g.name.clone());
        layers.rollout = Some(rollout.to_owned());
    }
    layers
}

/// The settings `answers` sends `instance` of `service`, read back from the encoded answer.
fn sent_by(answers: &Answers, service: &str, instance: Option<&InstanceRef<'_>>) -> Vec<(String, String)> {
    let bytes = answers.choose(service, instance).answer.encoded.with_serial(uuid::Uuid::nil());
    Commands::decode(bytes).ok().and_then(|c| DiscoveryCommand::find(&c)).map(|c| c.config).unwrap_or_default()
}

/// What `asked` gets from `table` alone.
fn explain_table(table: &AgentConfigurations, asked: &Asked, against: &'static str) -> Layers {
    let instance = asked.instance();
    let found = provenance(table, &asked.service, instance.as_ref());
    Layers {
        service: asked.service.clone(),
        instance: asked.instance.clone(),
        against,
        digest: found.digest.to_string(),
        configured: table.get(&asked.service).is_some(),
        group: found.group,
        rollout: None,
        settings: found
            .settings
            .into_iter()
            .map(|Sourced { key, value, layer }| LayeredSetting { key, value, layer: layer.to_string() })
            .collect(),
        ignored: Vec::new(),
        warnings: Vec::new(),
    }
}
