//! The admin port's OpenAPI 3.1 description, served at `GET /api/v1/openapi.json`.
//!
//! It is generated, not written: every handler carries a `#[utoipa::path]` with its method,
//! path, parameters, bodies and status codes, and answers with types that derive both
//! `Serialize` and `ToSchema`, next to it (`read/`, `rollouts.rs`, `error.rs`), so what is sent
//! is what is described; likewise a request body is described by the type that reads it (a whole
//! document's JSON form, a note, a held decision). This file holds [`ApiDoc`] (the list of paths),
//! its modifiers, the write parameters and headers, and the schemas that no one type reads or
//! builds: the per-service write bodies (`write.rs` reads `PUT`'s and `PATCH`'s with one type and
//! checks each value itself) and `/readyz`, whose answer is still built as a JSON value there.
//! The contract test (`tests/contract/run.sh`, schemathesis against a real
//! server) checks every answer against the description, and a unit test checks that the
//! router's route table and the description name the same routes.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde::Serialize;
use skyconf_core::diff::{ChangeKind, KeyChange, ServiceChange};
use skyconf_core::opamp_diff::GroupChange;
use skyconf_core::warnings::Warning;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};

pub(crate) use super::error::ErrorBody;
pub(crate) use super::extract::HeldBody as HeldRequest;
use super::read::ReadFailures;
use crate::fleet::{AgentState, AgentStatus, AnonymousPoller, InstanceService, InstanceStatus, Property, StateCounts};
use crate::releases::ChangeSummary;
use crate::served::{Held, Rejection};
use crate::store_view::StoreStatus;

/// The description: every route's `#[utoipa::path]`, and the bearer scheme.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "skyconf admin API",
        description = "The admin port of skyconf, a SkyWalking configuration discovery server. \
            Every `/api/v1` route and `/metrics` take `Authorization: Bearer <token>` when the \
            server has admin tokens (a read token for `GET`, a write token for the rest); without \
            tokens the API is open. `/healthz` and `/readyz` are always open. Times are Unix \
            milliseconds (`*_ms`).",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        super::healthz,
        super::readyz,
        super::app::scrape,
        serve,
        super::read::status::status,
        super::read::services::services,
        super::read::services::service,
        super::read::instances::instances,
        super::read::releases::releases,
        super::read::releases::release,
        super::read::releases::compare,
        super::read::releases::history,
        super::preview::layers,
        super::preview::preview,
        super::read::releases::configurations,
        super::write::put_configurations,
        super::write::put_service,
        super::write::patch_service,
        super::write::delete_service,
        super::write::rollback,
        super::write::confirm_held,
        super::write::discard_held,
        super::rollouts::current,
        super::rollouts::start,
        super::rollouts::promote,
        super::rollouts::abort,
        super::opamp::agents,
        super::opamp::effective,
    ),
    // The schemas the paths do not bring in themselves: those only other schemas name, and the
    // bodies of `IntoResponses` answer sets (`WriteAnswers`, `HeldAnswers`), which utoipa does
    // not collect.
    components(schemas(
        ChangeKind,
        KeyChange,
        ServiceChange,
        GroupChange,
        Warning,
        AgentState,
        AgentStatus,
        StateCounts,
        ChangeSummary,
        Property,
        InstanceStatus,
        InstanceService,
        AnonymousPoller,
        ErrorBody,
        super::write::WriteAnswer,
        super::write::HeldAnswer,
        WriteUnavailable
    )),
    modifiers(&BearerAuth, &YamlDocument),
    tags(
        (name = "health", description = "Probes: open to anyone who can reach the port."),
        (name = "read", description = "Reads: a read or write token."),
        (name = "write", description = "Writes: a write token."),
    ),
)]
pub(crate) struct ApiDoc;

/// Adds the `bearer` security scheme the paths refer to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An admin token: `read <token>` or `write <token>` of a token file."))
                    .build(),
            ),
        );
    }
}

/// The YAML body of `PUT /api/v1/configurations`, which the macro can only call a string: its
/// schema is the document's (what the reader accepts, as far as a schema can say: a null
/// document, or a mapping with `configurations:` mapping service names to mappings of settings
/// to non-null values; other top-level keys are ignored); and since an empty body is an empty
/// document (every service removed), the body is optional.
struct YamlDocument;

impl Modify for YamlDocument {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, SchemaType, Type};
        use utoipa::openapi::{Ref, RefOr, Required};
        let value = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([
                Type::String,
                Type::Number,
                Type::Integer,
                Type::Boolean,
                Type::Array,
                Type::Object,
            ]))
            .description(Some("Any value but null (SnakeYAML typing; agents receive it as text)."));
        let settings = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("A service's settings: setting name to value."))
            .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(value.into()))));
        let configurations = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
            .description(Some("Service name to settings."))
            .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(settings.into()))));
        let schema = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
            .description(Some(
                "The agent-configurations document, as YAML: `configurations: {service: {setting: value}}`.",
            ))
            .property("configurations", configurations)
            .required("configurations")
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .schemas
            .insert("AgentConfigurationsDocument".to_owned(), RefOr::T(schema.into()));
        let put = openapi.paths.paths.get_mut("/api/v1/configurations").and_then(|item| item.put.as_mut());
        if let Some(body) = put.and_then(|op| op.request_body.as_mut()) {
            body.required = Some(Required::False);
            if let Some(yaml) = body.content.get_mut("application/yaml") {
                yaml.schema = Some(RefOr::Ref(Ref::from_schema_name("AgentConfigurationsDocument")));
            }
        }
    }
}

/// The description as JSON, built once.
pub(super) fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| ApiDoc::openapi().to_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")))
}

/// `GET /api/v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "read",
    operation_id = "openapi",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "This description (OpenAPI 3.1).", body = Object, content_type = "application/json"),
        ReadFailures,
    ),
)]
pub(super) async fn serve() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], json())
}

/// `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// Whether a table is served.
    ready: bool,
    /// The served table's version (0 before the first).
    version: u64,
    /// Services served.
    services: u64,
    /// When the served table was installed.
    installed_at_ms: u64,
    /// Whether the table may be behind the store: a persisted copy, or the store cannot be
    /// reached (the same as `store.stale`; `store.stale_since_ms` says since when).
    stale: bool,
    /// The store and its health.
    store: StoreStatus,
    /// The last document refused, while it is the store's newest.
    #[schema(required = true)]
    last_rejection: Option<Rejection>,
    /// A store change held by the fleet-reset guard.
    #[schema(required = true)]
    held: Option<Held>,
}

/// The body of `PUT /api/v1/services/{name}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServiceRequest {
    /// Every setting of the service, in order; values are strings, exactly as agents receive them.
    config: std::collections::BTreeMap<String, String>,
    /// Who makes the change.
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why.
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// The body of `PATCH /api/v1/services/{name}`: a JSON merge patch (RFC 7396).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServicePatch {
    /// The settings to change: a string sets the key (in place), `null` removes it; other keys
    /// and their order stay.
    config: std::collections::BTreeMap<String, Option<String>>,
    /// Who makes the change.
    #[schema(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256)]
    author: Option<String>,
    /// Why.
    #[schema(pattern = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$", max_length = 4096)]
    message: Option<String>,
}

/// A 503 of a write: the store could not be reached, or the change is served but not durable.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "a schema only: the 503 is built by `AppError` or `json!`")]
pub(crate) enum WriteUnavailable {
    /// The store could not be reached or refused to work: nothing was written.
    Failed(ErrorBody),
    /// Served, but its release is not on disk (`durable: false`, `error`).
    NotDurable(Box<super::write::WriteAnswer>),
}

/// `?dry_run` and `?wait` of a write; any other parameter, or one given twice, is refused (400).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WriteParams {
    /// Check and report what would change; write nothing (`true`, `1`, `yes` or empty; `false`,
    /// `0`, `no`).
    #[param(required = false)]
    dry_run: bool,
    /// Seconds to wait for the new document to be served (default 10; more than 60 is 60; `0`:
    /// answer once the store took it).
    #[param(minimum = 0, required = false)]
    wait: f64,
}

/// The headers of a write.
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Header)]
pub(crate) struct WriteHeaders {
    /// `"<release id>"` (an `ETag`, quotes and `W/` optional): write only while that release is
    /// the newest, else 409 — checked by the store itself (a compare-and-swap on its revision)
    /// with etcd and ZooKeeper, so on every replica. `*`: whichever.
    #[serde(rename = "If-Match")]
    #[param(pattern = r#"^(\*|(W/)?"?[0-9]{1,19}"?)$"#, required = false)]
    if_match: String,
    /// Who makes the change, when the body names no `author` (at most 256 bytes).
    #[serde(rename = "X-Skyconf-Author")]
    #[param(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 256, required = false)]
    author: String,
    /// Why, when the body has no `message` (at most 4096 bytes).
    #[serde(rename = "X-Skyconf-Message")]
    #[param(pattern = r"^[^\x00-\x1f\x7f-\x9f]*$", max_length = 4096, required = false)]
    message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `(METHOD, path)` the router serves, read off the route table's source: each
    /// `.route("PATH", get(..).put(..))` of `admin/mod.rs`, and `/metrics`.
    fn routed() -> std::collections::BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let mut routes = std::collections::BTreeSet::new();
        for chunk in source.split(".route(").skip(1) {
            let path = chunk.split('"').nth(1).expect("a path literal");
            // The route's method chain ends at the next `.route(` or `.with_state`/`.layer`.
            let chain = chunk.split(".with_state").next().unwrap_or(chunk);
            let chain = chain.split(".layer(").next().unwrap_or(chain);
            for method in ["get", "put", "post", "patch", "delete"] {
                if chain.contains(&format!("{method}(")) {
                    routes.insert((method.to_owned(), path.to_owned()));
                }
            }
        }
        routes.insert(("get".to_owned(), "/metrics".to_owned()));
        routes
    }

    fn described() -> std::collections::BTreeSet<(String, String)> {
        let doc: serde_json::Value = serde_json::from_str(json()).unwrap();
        let mut routes = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                routes.insert((method.clone(), path.clone()));
            }
        }
        routes
    }

    #[test]
    fn every_route_is_described_and_every_description_is_routed() {
        let mut routed = routed();
        // The web page is HTML for people, not part of the API.
        assert!(routed.remove(&("get".to_owned(), "/".to_owned())));
        assert_eq!(routed, described());
    }

    /// Every `$ref` under `value`.
    fn refs<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match value {
            serde_json::Value::Object(map) => {
                out.extend(map.get("$ref").and_then(serde_json::Value::as_str));
                map.values().for_each(|v| refs(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_in_the_description_names_a_schema_it_holds() {
        let doc: serde_json::Value = serde_json::from_str(json()).unwrap();
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        let dangling: std::collections::BTreeSet<&str> = found
            .into_iter()
            .filter(|r| {
                let name = r.strip_prefix("#/components/schemas/").unwrap_or(r);
                doc["components"]["schemas"].get(name).is_none()
            })
            .collect();
        assert!(dangling.is_empty(), "references without a schema: {dangling:?}");
    }

    #[test]
    fn the_description_is_openapi_3_1_with_bearer_auth() {
        let doc: serde_json::Value = serde_json::from_str(json()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        let put = &doc["paths"]["/api/v1/configurations"]["put"];
        let content = put["requestBody"]["content"].as_object().unwrap();
        assert!(content.contains_key("application/json") && content.contains_key("application/yaml"));
        assert_eq!(content["application/yaml"]["schema"]["$ref"], "#/components/schemas/AgentConfigurationsDocument");
        assert_eq!(put["requestBody"]["required"], false, "an empty body is an empty document");
        let document = &doc["components"]["schemas"]["AgentConfigurationsDocument"];
        assert_eq!(document["properties"]["configurations"]["additionalProperties"]["type"], "object");
        let names: Vec<&str> =
            put["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        for name in ["dry_run", "wait", "If-Match"] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
    }
}
