//! The admin API's extractors: each turns a part of the request into a checked value or an
//! [`AppError`], so a handler's signature says what it needs and no handler maps a rejection by
//! hand.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::IF_MATCH;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};

use super::{Admin, AppError, check_service_name};

/// The longest wait a write may ask for.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// The route's one path parameter, percent-decoded. A `%` not followed by two hex digits is
/// refused (the decoder would keep it as it is, and `/services/%ZZ` would name `%ZZ`).
async fn path_segment(parts: &mut Parts, state: &Admin) -> Result<String, AppError> {
    if let Some(bad) = bad_percent_escape(parts.uri.path()) {
        return Err(AppError::BadRequest(format!(
            "the path has a bad percent-escape `{bad}`: `%` must be followed by two hex digits (write `%25` for a `%` itself)"
        )));
    }
    let Path(text) =
        Path::<String>::from_request_parts(parts, state).await.map_err(|e| AppError::BadRequest(e.body_text()))?;
    Ok(text)
}

/// The first `%` of `path` not followed by two hex digits, with what follows it (at most two
/// characters).
fn bad_percent_escape(path: &str) -> Option<&str> {
    let bytes = path.as_bytes();
    bytes.iter().enumerate().filter(|(_, b)| **b == b'%').find_map(|(i, _)| {
        let escape = bytes.get(i + 1..i + 3);
        (!escape.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)))
            .then(|| path.get(i..(i + 3).min(path.len())).unwrap_or(&path[i..i + 1]))
    })
}

/// A `{name}` path segment that names a service: one the served document holds, whatever its
/// length or characters (a document may hold names the rules below refuse, and each must still be
/// readable, editable and deletable), or a valid new name. Every route that takes it describes
/// its `{name}` with this type.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(names("name"), parameter_in = Path)]
pub(super) struct ServiceName(
    /// The service (percent-encoded): a configured one, or a new name of at most 512 bytes without control characters.
    #[param(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$", max_length = 512)]
    pub(super) String,
);

impl FromRequestParts<Admin> for ServiceName {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Admin) -> Result<Self, AppError> {
        let name = path_segment(parts, state).await?;
        if state.served.snapshot().table.get(&name).is_none() {
            check_service_name(&name)?;
        }
        Ok(Self(name))
    }
}

/// A `{name}` path segment that a read looks up as it is: agents may poll for names a write
/// would refuse (control characters, longer than the limit), and each must still be readable.
/// Every route that takes it describes its `{name}` with this type.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(names("name"), parameter_in = Path)]
pub(super) struct AnyServiceName(
    /// The service (percent-encoded).
    pub(super) String,
);

impl FromRequestParts<Admin> for AnyServiceName {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Admin) -> Result<Self, AppError> {
        path_segment(parts, state).await.map(Self)
    }
}

/// An `{id}` path segment that is a release id.
#[derive(Debug)]
pub(super) struct ReleaseId(pub(super) u64);

impl FromRequestParts<Admin> for ReleaseId {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Admin) -> Result<Self, AppError> {
        let text = path_segment(parts, state).await?;
        text.parse().map(Self).map_err(|_| AppError::BadRequest(format!("`{text}` is not a release id")))
    }
}

/// A query string parsed into `T`; one that does not parse is refused by [`query_refused`].
#[derive(Debug)]
pub(super) struct ParsedQuery<T>(pub(super) T);

impl<T: serde::de::DeserializeOwned + Send> FromRequestParts<Admin> for ParsedQuery<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Admin) -> Result<Self, AppError> {
        let Query(query) = Query::<T>::from_request_parts(parts, state).await.map_err(|e| query_refused(&e))?;
        Ok(Self(query))
    }
}

/// A page's size: the `limit` asked, or `default`; refused outside 1 to `max`.
pub(super) fn page_limit(asked: Option<usize>, default: usize, max: usize) -> Result<usize, AppError> {
    let limit = asked.unwrap_or(default);
    if !(1..=max).contains(&limit) {
        return Err(AppError::BadRequest(format!("limit must be between 1 and {max}")));
    }
    Ok(limit)
}

/// Everything a write handler reads from its request: the options (`?dry_run`, `?wait`,
/// `If-Match`), the headers (author, message, content type) and the body, within the limit.
pub(super) struct WriteRequest {
    pub(super) options: WriteOptions,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl FromRequest<Admin> for WriteRequest {
    type Rejection = AppError;

    async fn from_request(request: Request, admin: &Admin) -> Result<Self, AppError> {
        let (mut parts, body) = request.into_parts();
        let query = Query::<Vec<(String, String)>>::from_request_parts(&mut parts, admin).await;
        let options = options(admin, &write_query(query)?, &parts.headers)?;
        let headers = parts.headers.clone();
        let body = body_bytes(admin, Bytes::from_request(Request::from_parts(parts, body), admin).await)?;
        Ok(Self { options, headers, body })
    }
}

/// What a `POST /api/v1/held/*` reads from its request: the optional JSON body
/// `{"since_ms": N}`. It takes no query parameters: a `?dry_run=true` must not confirm for real.
pub(super) struct HeldRequest {
    /// The `held.since_ms` the operator saw; `None`: whichever change is held.
    pub(super) since_ms: Option<u64>,
}

/// The optional body of `POST /api/v1/held/confirm` and `/discard`.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = HeldRequest)]
pub(crate) struct HeldBody {
    /// The `held.since_ms` the operator saw: only that change is decided on.
    #[serde(default, deserialize_with = "whole_number")]
    since_ms: Option<u64>,
}

impl FromRequest<Admin> for HeldRequest {
    type Rejection = AppError;

    async fn from_request(request: Request, admin: &Admin) -> Result<Self, AppError> {
        if request.uri().query().is_some_and(|q| !q.is_empty()) {
            return Err(AppError::BadRequest("this route takes no query parameters; nothing was changed".into()));
        }
        let body = body_bytes(admin, Bytes::from_request(request, admin).await)?;
        Ok(Self { since_ms: optional_json_body::<HeldBody>(&body)?.since_ms })
    }
}

/// A JSON request body that must be an object (or, where `T` is an `Option`, `null`): serde
/// would otherwise also read a struct from an array of its fields in order (`[null, null]`). An
/// object that names a key twice is refused, at any depth: serde_json would keep the last one,
/// and either reading could be the wrong one.
pub(super) fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    let Strict(value) = serde_json::from_slice(body)
        .map_err(|e| AppError::BadRequest(format!("the body is not the expected JSON: {e}")))?;
    if !(value.is_object() || value.is_null()) {
        return Err(AppError::BadRequest("the body is not the expected JSON: not an object".into()));
    }
    serde_json::from_value(value).map_err(|e| AppError::BadRequest(format!("the body is not the expected JSON: {e}")))
}

/// An optional JSON request body, read by [`json_body`]: no body (or only white space) and
/// `null` are both `T::default()`, as the description has it (the body is optional and nullable).
pub(super) fn optional_json_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, AppError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    json_body::<Option<T>>(body).map(Option::unwrap_or_default)
}

/// A JSON value as serde_json reads it, but for an object that names a key more than once.
struct Strict(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(items.into())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("the key `{key}` is given more than once")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(object.into())
    }
}

/// Reads a JSON number that is a whole non-negative number as a `u64`: `139.0` too, which JSON
/// (and the description's `integer`) holds to be the integer 139.
fn whole_number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    use serde::Deserialize as _;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if let Some(n) = number.as_u64() {
        return Ok(Some(n));
    }
    match number.as_f64() {
        // Exact for every value below 2^53, which holds every time in milliseconds.
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 9_007_199_254_740_992.0 => Ok(Some(f as u64)),
        _ => Err(serde::de::Error::custom(format!("expected a whole number of milliseconds, got {number}"))),
    }
}

/// `?dry_run=true&wait=SECONDS`.
#[derive(Debug, Default)]
struct WriteQuery {
    dry_run: Option<String>,
    wait: Option<String>,
}

/// The write's query parameters. Any other parameter is refused, not ignored: a misspelled
/// `?DRY_RUN=true` or `?dryrun=1` must not turn a dry run into a real write. A parameter
/// given twice is refused too, since either reading of it could be the wrong one.
fn write_query(query: Result<Query<Vec<(String, String)>>, QueryRejection>) -> Result<WriteQuery, AppError> {
    let Query(pairs) = query.map_err(|e| query_refused(&e))?;
    let mut query = WriteQuery::default();
    for (name, value) in pairs {
        let slot = match name.as_str() {
            "dry_run" => &mut query.dry_run,
            "wait" => &mut query.wait,
            _ => return Err(AppError::BadRequest(unknown_parameter(&name))),
        };
        if slot.replace(value).is_some() {
            return Err(AppError::BadRequest(format!("the query parameter `{name}` is given more than once")));
        }
    }
    Ok(query)
}

/// The message for an unknown write parameter, with the one it most likely meant.
fn unknown_parameter(name: &str) -> String {
    let folded: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    let guess = match folded.as_str() {
        "dryrun" => Some("dry_run"),
        "wait" => Some("wait"),
        _ => None,
    };
    match guess {
        Some(known) => format!("unknown query parameter `{name}` (did you mean `{known}`?); nothing was written"),
        None => format!("unknown query parameter `{name}`: a write takes `dry_run` and `wait`; nothing was written"),
    }
}

/// How a write is to be made.
#[derive(Debug, Clone, Copy)]
pub(super) struct WriteOptions {
    /// Check and report, write nothing.
    pub(super) dry_run: bool,
    /// How long to wait for the new document to be served.
    pub(super) wait: Duration,
    /// The release the writer based its edit on.
    pub(super) if_match: Option<u64>,
}

fn options(admin: &Admin, query: &WriteQuery, headers: &HeaderMap) -> Result<WriteOptions, AppError> {
    let dry_run = match query.dry_run.as_deref() {
        None | Some("false" | "0" | "no") => false,
        Some("" | "true" | "1" | "yes") => true,
        Some(other) => return Err(AppError::BadRequest(format!("dry_run must be true or false, not `{other}`"))),
    };
    let wait = match query.wait.as_deref() {
        None => admin.options.write_wait,
        Some(text) => match text.parse::<f64>() {
            Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs.min(MAX_WAIT.as_secs_f64())),
            _ => return Err(AppError::BadRequest(format!("wait must be a number of seconds, not `{text}`"))),
        },
    };
    let if_match = match headers.get(IF_MATCH) {
        None => None,
        Some(value) => {
            let text = value.to_str().unwrap_or_default().trim();
            let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
            if text == "*" {
                None
            } else {
                Some(
                    text.parse()
                        .map_err(|_| AppError::BadRequest(format!("If-Match must be a release id, not `{text}`")))?,
                )
            }
        }
    };
    Ok(WriteOptions { dry_run, wait, if_match })
}

fn body_bytes(admin: &Admin, body: Result<Bytes, BytesRejection>) -> Result<Bytes, AppError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::TooLarge(format!("the body is larger than {} bytes", admin.options.max_document_bytes))
        } else {
            AppError::BadRequest(e.body_text())
        }
    })?;
    Ok(body)
}

/// A query string that does not parse, refused in the API's words: the parameter and why
/// (`limit: invalid digit found in string`), without the HTTP framework's own prefix.
fn query_refused(rejection: &QueryRejection) -> AppError {
    let text = rejection.body_text();
    let why = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text);
    AppError::BadRequest(format!("the query string does not parse: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_percent_escapes_are_found() {
        assert_eq!(bad_percent_escape("/api/v1/services/%ZZ"), Some("%ZZ"));
        assert_eq!(bad_percent_escape("/api/v1/services/a%2"), Some("%2"));
        assert_eq!(bad_percent_escape("/api/v1/services/a%"), Some("%"));
        assert_eq!(bad_percent_escape("/api/v1/services/100%25-%41%e2%82%ac"), None);
    }

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth() {
        #[derive(serde::Deserialize)]
        struct Body {
            #[allow(dead_code, reason = "read only to be checked")]
            config: serde_json::Map<String, serde_json::Value>,
        }
        assert!(json_body::<Body>(br#"{"config": {"a": "1", "b": [1, {"c": null}]}}"#).is_ok());
        let error = json_body::<Body>(br#"{"config": {"a": "1", "a": "2"}}"#).err().unwrap().to_string();
        assert!(error.contains("the key `a` is given more than once"), "{error}");
        let deep = json_body::<Body>(br#"{"config": {"a": [{"x": 1, "x": 2}]}}"#).err().unwrap().to_string();
        assert!(deep.contains("`x`"), "{deep}");
    }
}
