//! The release history: pages of releases, one release in full, two compared, one service's
//! history, and the current document.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use serde::Serialize;
use skyconf_core::diff::ServiceChange;
use utoipa::ToSchema;

use super::{Admin, ReadFailures, etag};
use crate::admin::AppError;
use crate::admin::error::ErrorBody;
use crate::admin::extract::{AnyServiceName, ParsedQuery, ReleaseId, page_limit};
use crate::publish::PublishError;
use crate::releases::{MAX_SUMMARY_CHANGES, Release, ReleaseLog, ReleaseSummary};

/// How many release summaries a page holds by default, and at most.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;

/// How many history entries a page holds by default, and at most.
const DEFAULT_HISTORY_PAGE: usize = 20;
const MAX_HISTORY_PAGE: usize = 100;

/// The most changed services a comparison lists.
const MAX_COMPARED_SERVICES: usize = 1000;

/// `?limit` and `?before` of `GET /api/v1/releases`; any other parameter is refused (400).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Releases per page (default 50).
    #[param(value_type = u64, minimum = 1, maximum = 500, required = false)]
    limit: Option<usize>,
    /// Releases older than this id (`next_before` of the previous page).
    #[param(schema_with = release_id, required = false)]
    before: Option<u64>,
}

/// `?limit` and `?before` of `GET /api/v1/services/{name}/history`; any other parameter is
/// refused (400).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryParams {
    /// Entries per page (default 20).
    #[param(value_type = u64, minimum = 1, maximum = 100, required = false)]
    limit: Option<usize>,
    /// Releases older than this id (`next_before` of the previous page).
    #[param(schema_with = release_id, required = false)]
    before: Option<u64>,
}

/// A release id: any unsigned 64-bit integer (not `int64`, whose maximum is half of it).
fn release_id() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Integer)
        .minimum(Some(0u64))
        .maximum(Some(u64::MAX))
        .build()
}

/// `GET /api/v1/releases`.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReleasePage {
    /// How many releases are kept.
    retention: u64,
    /// How many are kept now.
    total: u64,
    /// The page size.
    limit: u64,
    /// `before` for the next page; `null` on the last.
    #[schema(required = true)]
    next_before: Option<u64>,
    /// Newest first.
    releases: Vec<ReleaseSummary>,
}

/// `GET /api/v1/releases/{id}`: the release with its document.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReleaseDetail {
    /// The release.
    #[serde(flatten)]
    release: Release,
    /// Its document text; `null` when the key was deleted.
    #[schema(required = true)]
    document: Option<String>,
    /// The release before it, when kept.
    #[schema(required = true)]
    previous: Option<u64>,
    /// Whether it is the newest.
    current: bool,
}

/// `GET /api/v1/releases/{id}/compare/{other}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Comparison {
    /// The release compared from.
    from: u64,
    /// The release compared to.
    to: u64,
    /// How many services changed.
    changed: u64,
    /// Whether `changes` lists only the first 1000.
    truncated: bool,
    /// Every changed service (at most 1000), with digests and key-level changes.
    changes: Vec<ServiceChange>,
    /// Every changed `opamp:` group (at most 1000), with its changed files.
    opamp_changes: Vec<skyconf_core::opamp_diff::GroupChange>,
}

/// `GET /api/v1/services/{name}/history`.
#[derive(Serialize, ToSchema)]
pub(crate) struct History {
    /// The service.
    name: String,
    /// How many releases are kept.
    retention: u64,
    /// How many are kept now.
    releases_kept: u64,
    /// The page size.
    limit: u64,
    /// `before` for the next page; `null` on the last.
    #[schema(required = true)]
    next_before: Option<u64>,
    /// Newest first.
    history: Vec<HistoryEntry>,
}

/// A release that changed the service, with that change.
#[derive(Serialize, ToSchema)]
pub(crate) struct HistoryEntry {
    /// The release.
    #[serde(flatten)]
    release: ReleaseSummary,
    /// What it did to the service.
    change: ServiceChange,
}

/// `GET /api/v1/configurations`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Configurations {
    /// The release served now, when known.
    #[schema(required = true)]
    release: Option<u64>,
    /// The served table's version.
    version: u64,
    /// The document text; `null` when no release is known or the key is absent.
    #[schema(required = true)]
    document: Option<String>,
}

/// `GET /api/v1/releases`.
#[utoipa::path(
    get,
    path = "/api/v1/releases",
    tag = "read",
    operation_id = "releases",
    security(("bearer" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "A page of releases, newest first.", body = ReleasePage),
        (status = 400, description = "A bad or unknown query parameter.", body = ErrorBody),
        ReadFailures,
    ),
)]
pub(crate) async fn releases(
    State(admin): State<Admin>,
    ParsedQuery(query): ParsedQuery<ListParams>,
) -> Result<Json<ReleasePage>, AppError> {
    let limit = page_limit(query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    // One more than asked, to know whether there is a next page.
    let (mut page, total) = admin.releases.page(query.before, limit + 1);
    let more = page.len() > limit;
    page.truncate(limit);
    Ok(Json(ReleasePage {
        retention: admin.releases.retention() as u64,
        total: total as u64,
        limit: limit as u64,
        next_before: if more { page.last().map(|r| r.meta.id) } else { None },
        releases: page.iter().map(|r| ReleaseSummary::clone(r)).collect(),
    }))
}

/// `GET /api/v1/releases/{id}`.
#[utoipa::path(
    get,
    path = "/api/v1/releases/{id}",
    tag = "read",
    operation_id = "release",
    security(("bearer" = [])),
    params(("id" = u64, Path, description = "The release id.", minimum = 0)),
    responses(
        (status = 200, description = "The release in full, with its document.", body = ReleaseDetail),
        (status = 400, description = "Not a release id.", body = ErrorBody),
        ReadFailures,
        (status = 404, description = "No such release is kept.", body = ErrorBody),
        (status = 500, description = "A bug.", body = ErrorBody),
        (status = 503, description = "Its file could not be read.", body = ErrorBody),
    ),
)]
pub(crate) async fn release(
    State(admin): State<Admin>,
    ReleaseId(id): ReleaseId,
) -> Result<Json<ReleaseDetail>, AppError> {
    let releases = std::sync::Arc::clone(&admin.releases);
    let (release, document) = tokio::task::spawn_blocking(move || releases.full(id))
        .await
        .map_err(|e| AppError::Internal(format!("reading release {id}: {e}")))?
        .map_err(|e| AppError::Unavailable(e.to_string()))?
        .ok_or_else(|| AppError::NotFound(format!("no release {id}")))?;
    Ok(Json(ReleaseDetail {
        release,
        document,
        previous: admin.releases.previous(id).map(|p| p.meta.id),
        current: admin.releases.latest().is_some_and(|l| l.meta.id == id),
    }))
}

/// The table of kept release `id`, read (from its file, maybe) and parsed: 404 when it is not
/// kept. Blocking: call it off the async threads.
fn kept_table(releases: &ReleaseLog, id: u64) -> Result<skyconf_core::AgentConfigurations, AppError> {
    match releases.document(id).map_err(|e| AppError::Unavailable(e.to_string()))? {
        None => Err(AppError::NotFound(format!("no release {id}"))),
        Some(None) => Ok(skyconf_core::AgentConfigurations::default()),
        Some(Some(text)) => skyconf_core::read(&text)
            .map_err(|e| AppError::Internal(format!("release {id}'s document cannot be read again: {e}"))),
    }
}

/// `GET /api/v1/releases/{id}/compare/{other}`: what changed from release `id` to `other`.
#[utoipa::path(
    get,
    path = "/api/v1/releases/{id}/compare/{other}",
    tag = "read",
    operation_id = "compare",
    security(("bearer" = [])),
    params(
        ("id" = u64, Path, description = "The release compared from.", minimum = 0),
        ("other" = u64, Path, description = "The release compared to (either order).", minimum = 0),
    ),
    responses(
        (status = 200, description = "Every changed service, key by key (at most 1000).", body = Comparison),
        (status = 400, description = "Not a release id.", body = ErrorBody),
        ReadFailures,
        (status = 404, description = "A release is not kept.", body = ErrorBody),
        (status = 500, description = "A kept document cannot be read again (a bug).", body = ErrorBody),
        (status = 503, description = "A release's file could not be read.", body = ErrorBody),
    ),
)]
pub(crate) async fn compare(
    State(admin): State<Admin>,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Comparison>, AppError> {
    let Path((from, to)) = path.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let parse =
        |text: &str| text.parse::<u64>().map_err(|_| AppError::BadRequest(format!("`{text}` is not a release id")));
    let (from, to) = (parse(&from)?, parse(&to)?);
    let releases = std::sync::Arc::clone(&admin.releases);
    let (mut changes, mut opamp_changes) = tokio::task::spawn_blocking(move || {
        let before = kept_table(&releases, from)?;
        let after = kept_table(&releases, to)?;
        let opamp = skyconf_core::opamp_diff::opamp_diff(&before, &after);
        Ok::<_, AppError>((skyconf_core::diff::diff(&before, &after), opamp))
    })
    .await
    .map_err(|e| AppError::Internal(format!("comparing releases {from} and {to}: {e}")))??;
    let changed = changes.len();
    changes.truncate(MAX_COMPARED_SERVICES);
    opamp_changes.truncate(MAX_COMPARED_SERVICES);
    let truncated = changed > changes.len();
    Ok(Json(Comparison { from, to, changed: changed as u64, truncated, changes, opamp_changes }))
}

/// `GET /api/v1/services/{name}/history`: the kept releases that changed one service.
#[utoipa::path(
    get,
    path = "/api/v1/services/{name}/history",
    tag = "read",
    operation_id = "history",
    security(("bearer" = [])),
    params(AnyServiceName, HistoryParams),
    responses(
        (status = 200, description = "The kept releases that changed it, newest first.", body = History),
        (status = 400, description = "A bad percent-escape in the name, or a bad or unknown query parameter.", body = ErrorBody),
        ReadFailures,
        (status = 500, description = "A bug.", body = ErrorBody),
        (status = 503, description = "A release's file could not be read.", body = ErrorBody),
    ),
)]
pub(crate) async fn history(
    State(admin): State<Admin>,
    AnyServiceName(name): AnyServiceName,
    ParsedQuery(query): ParsedQuery<HistoryParams>,
) -> Result<Json<History>, AppError> {
    let limit = page_limit(query.limit, DEFAULT_HISTORY_PAGE, MAX_HISTORY_PAGE)?;
    let releases = std::sync::Arc::clone(&admin.releases);
    let (page, total) = admin.releases.page(query.before, usize::MAX);
    let service = name.clone();
    // A summary that names every changed service settles a release without its file; a release
    // that changed more than a summary names is read (bounded by the retention).
    let mut entries = tokio::task::spawn_blocking(move || {
        let mut entries = Vec::new();
        for release in page {
            let named = release.changes.iter().any(|c| c.service == service);
            if !named && release.changed <= MAX_SUMMARY_CHANGES {
                continue;
            }
            let Some(changes) = releases.changes(release.meta.id).map_err(|e| AppError::Unavailable(e.to_string()))?
            else {
                continue;
            };
            if let Some(change) = changes.into_iter().find(|c| c.service == service) {
                entries.push((release, change));
                if entries.len() > limit {
                    break;
                }
            }
        }
        Ok::<_, AppError>(entries)
    })
    .await
    .map_err(|e| AppError::Internal(format!("reading the history of `{name}`: {e}")))??;
    let more = entries.len() > limit;
    entries.truncate(limit);
    let next_before = if more { entries.last().map(|(r, _)| r.meta.id) } else { None };
    Ok(Json(History {
        name,
        retention: admin.releases.retention() as u64,
        releases_kept: total as u64,
        limit: limit as u64,
        next_before,
        history: entries
            .into_iter()
            .map(|(release, change)| HistoryEntry { release: ReleaseSummary::clone(&release), change })
            .collect(),
    }))
}

/// `GET /api/v1/configurations`.
#[utoipa::path(
    get,
    path = "/api/v1/configurations",
    tag = "read",
    operation_id = "get_configurations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The current document text.", body = Configurations,
            headers(("ETag" = String, description = "`\"<release id>\"` of the served release, for `If-Match`."))),
        ReadFailures,
        (status = 500, description = "A bug.", body = ErrorBody),
        (status = 503, description = "The release's file could not be read, or it was just replaced.", body = ErrorBody),
    ),
)]
pub(crate) async fn configurations(State(admin): State<Admin>) -> Result<impl IntoResponse, AppError> {
    // One snapshot: the document, the release and the ETag all name the table served now.
    let snapshot = admin.served.snapshot();
    let release = admin.releases.served_as(snapshot.version);
    let document = match release {
        Some(id) => admin.publisher.release_document(id).await.map_err(|e| match e {
            PublishError::NotFound(_) => {
                AppError::Unavailable(format!("release {id} was just replaced and dropped; ask again"))
            }
            other => other.into(),
        })?,
        None => None,
    };
    Ok((etag(release), Json(Configurations { release, version: snapshot.version, document })))
}
