//! Tokens: the agent token on the gRPC services, bearer tokens with roles on the admin API.
//!
//! **gRPC.** Exactly the OAP's `AuthenticationInterceptor` (behaviour reference §1.3): when a
//! token is set, a call whose metadata `Authentication` is missing or not byte-for-byte equal to
//! it is closed with `PERMISSION_DENIED` before its message is read. A Java agent treats that
//! status as a disconnect, which is what the OAP intends for an agent with the wrong token. The
//! check runs before anything else, so a wrong token is never told anything about the table.
//!
//! **Admin.** `Authorization: Bearer <token>`. With no token configured the API is open; with
//! any, a read route needs a read or write token and a write route a write token:
//! 401 without a token or with an unknown one, 403 for a read token on a write route.
//!
//! Comparisons take the same time wherever the first differing byte is.

use std::convert::Infallible;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tonic::Status;
use tonic::service::Interceptor;

use super::SecurityError;
use crate::metrics::{AdminDenial, Events, GuardedService};

/// The gRPC metadata key the OAP reads the token from (`Authentication`; HTTP/2 sends it
/// lower-case).
pub const AUTHENTICATION_METADATA: &str = "authentication";

/// A token or password: compared in constant time, never printed (`Debug` is redacted and there
/// is no `Display`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// A secret holding `value`.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }

    /// The value, for the few places that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string (which, as on the OAP, means "not set").
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `candidate` equals the secret, byte for byte.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), candidate)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl FromStr for Secret {
    type Err = Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(s))
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

/// `a == b` without an early exit on the first differing byte (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Why a gRPC call was refused. The one mapping of these to a `tonic::Status` is the `From`
/// impl below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GrpcAuthError {
    /// The `Authentication` metadata is missing or differs from the token.
    #[error("the Authentication metadata does not match the token")]
    TokenMismatch,
}

impl From<GrpcAuthError> for Status {
    fn from(error: GrpcAuthError) -> Self {
        match error {
            // The OAP closes the call with PERMISSION_DENIED and no description.
            GrpcAuthError::TokenMismatch => Self::permission_denied(""),
        }
    }
}

/// The token check of one gRPC service, as a tonic interceptor.
#[derive(Debug, Clone)]
pub struct TokenCheck {
    token: Secret,
    service: GuardedService,
    events: Events,
}

impl TokenCheck {
    /// Checks calls to `service` against `token`, counting refusals in `events`.
    pub fn new(token: Secret, service: GuardedService, events: Events) -> Self {
        Self { token, service, events }
    }

    /// The check on one call's metadata.
    pub fn check(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), GrpcAuthError> {
        // grpc-java's Metadata.get, which the OAP uses, reads the last value of a repeated key.
        let sent = metadata.get_all(AUTHENTICATION_METADATA).iter().next_back();
        if sent.is_some_and(|value| self.token.matches(value.as_bytes())) {
            return Ok(());
        }
        self.events.grpc_denied(self.service, sent.is_some());
        Err(GrpcAuthError::TokenMismatch)
    }
}

impl Interceptor for TokenCheck {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        self.check(request.metadata())?;
        Ok(request)
    }
}

/// `service` as it is when `token` is unset (or empty, as on the OAP), or behind the token
/// check; exactly one of the two is `Some`, for `add_optional_service`.
#[allow(clippy::type_complexity)]
pub fn guard<S>(
    service: S,
    token: Option<&Secret>,
    which: GuardedService,
    events: &Events,
) -> (Option<S>, Option<tonic::service::interceptor::InterceptedService<S, TokenCheck>>) {
    match guard_either(service, token, which, events) {
        tower::util::Either::Left(service) => (Some(service), None),
        tower::util::Either::Right(guarded) => (None, Some(guarded)),
    }
}

/// [`guard`]'s two outcomes as one service type, for a service called without tonic's routes.
pub fn guard_either<S>(
    service: S,
    token: Option<&Secret>,
    which: GuardedService,
    events: &Events,
) -> tower::util::Either<S, tonic::service::interceptor::InterceptedService<S, TokenCheck>> {
    match token.filter(|token| !token.is_empty()) {
        None => tower::util::Either::Left(service),
        Some(token) => {
            let check = TokenCheck::new(token.clone(), which, events.clone());
            tower::util::Either::Right(tonic::service::interceptor::InterceptedService::new(service, check))
        }
    }
}

/// What an admin token may do. `Write` includes `Read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Every `GET` of the API and the web page, and `/metrics`.
    Read,
    /// Every write, and everything a read token may do.
    Write,
}

/// The bearer tokens of the admin API.
#[derive(Clone, Default)]
pub struct AdminTokens {
    tokens: Vec<(Secret, Role)>,
}

impl fmt::Debug for AdminTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |role| self.tokens.iter().filter(|(_, r)| *r == role).count();
        f.debug_struct("AdminTokens").field("read", &count(Role::Read)).field("write", &count(Role::Write)).finish()
    }
}

impl AdminTokens {
    /// Adds a token with `role`; an empty token is ignored (an unset `${VAR:}` placeholder).
    pub fn add(&mut self, role: Role, token: Secret) {
        if !token.is_empty() {
            self.tokens.push((token, role));
        }
    }

    /// Adds the tokens of a file: one `read <token>` or `write <token>` per line; blank lines and
    /// lines starting with `#` are skipped.
    pub fn add_file(&mut self, path: &Path) -> Result<(), SecurityError> {
        let text =
            std::fs::read_to_string(path).map_err(|cause| SecurityError::Read { path: path.to_owned(), cause })?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || SecurityError::TokenFile { path: path.to_owned(), line: index + 1 };
            let (role, token) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
            let role = match role {
                "read" => Role::Read,
                "write" => Role::Write,
                _ => return Err(bad()),
            };
            let token = token.trim();
            if token.is_empty() || token.contains(char::is_whitespace) {
                return Err(bad());
            }
            self.add(role, Secret::new(token));
        }
        Ok(())
    }

    /// Whether no token is configured (the API is then open).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The strongest role of `candidate`, if it is a configured token.
    pub fn role_of(&self, candidate: &[u8]) -> Option<Role> {
        // Every token is compared, so the time does not tell which one matched.
        self.tokens.iter().filter(|(token, _)| token.matches(candidate)).map(|(_, role)| *role).max()
    }

    /// Whether the request's headers allow `needed`.
    pub fn authorize(&self, headers: &HeaderMap, needed: Role) -> Result<Role, AdminAuthError> {
        let role = bearer(headers).and_then(|token| self.role_of(token)).ok_or(AdminAuthError::Unauthenticated)?;
        if role < needed {
            return Err(AdminAuthError::ReadOnly);
        }
        Ok(role)
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Why the admin API turned a request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdminAuthError {
    /// No bearer token, or one that is not configured.
    #[error("a valid bearer token is required")]
    Unauthenticated,
    /// A read token on a write route.
    #[error("this token may only read")]
    ReadOnly,
}

/// The admin API's error body for a refused token (`{"error", "details": null}`, as every
/// admin error), 401 with a `WWW-Authenticate` challenge or 403.
impl IntoResponse for AdminAuthError {
    fn into_response(self) -> Response {
        #[derive(serde::Serialize)]
        struct Body {
            error: String,
            details: Option<()>,
        }
        let status = match self {
            Self::Unauthenticated => axum::http::StatusCode::UNAUTHORIZED,
            Self::ReadOnly => axum::http::StatusCode::FORBIDDEN,
        };
        let mut response = (status, axum::Json(Body { error: self.to_string(), details: None })).into_response();
        if self == Self::Unauthenticated {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"skyconf\""),
            );
        }
        response
    }
}

impl From<AdminAuthError> for AdminDenial {
    fn from(error: AdminAuthError) -> Self {
        match error {
            AdminAuthError::Unauthenticated => Self::Unauthenticated,
            AdminAuthError::ReadOnly => Self::ReadOnly,
        }
    }
}

#[derive(Debug, Clone)]
struct Guard {
    tokens: Arc<AdminTokens>,
    needed: Role,
    events: Events,
}

async fn check_bearer(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match guard.tokens.authorize(request.headers(), guard.needed) {
        Ok(_) => next.run(request).await,
        Err(error) => {
            guard.events.admin_denied(error.into(), request.method(), request.uri().path());
            error.into_response()
        }
    }
}

/// `router` with every route requiring a token of at least `needed`; unchanged when no token
/// is configured.
pub fn require(router: Router, needed: Role, tokens: &Arc<AdminTokens>, events: &Events) -> Router {
    if tokens.is_empty() {
        return router;
    }
    let state = Guard { tokens: Arc::clone(tokens), needed, events: events.clone() };
    router.route_layer(axum::middleware::from_fn_with_state(state, check_bearer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        let mut tokens = AdminTokens::default();
        tokens.add(Role::Write, s);
        assert!(!format!("{tokens:?}").contains("hunter2"));
    }

    #[test]
    fn the_agent_token_must_match_exactly() {
        let check = TokenCheck::new(Secret::new("t0k"), GuardedService::Cds, Events::default());
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(check.check(&metadata), Err(GrpcAuthError::TokenMismatch), "absent");
        for wrong in ["t0", "t0k ", "T0K", ""] {
            metadata.insert(AUTHENTICATION_METADATA, wrong.parse().unwrap());
            assert!(check.check(&metadata).is_err(), "{wrong:?}");
        }
        metadata.insert(AUTHENTICATION_METADATA, "t0k".parse().unwrap());
        assert!(check.check(&metadata).is_ok());
        assert_eq!(Status::from(GrpcAuthError::TokenMismatch).code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn bearer_tokens_have_roles() {
        let mut tokens = AdminTokens::default();
        tokens.add(Role::Read, Secret::new("r"));
        tokens.add(Role::Write, Secret::new("w"));
        tokens.add(Role::Read, Secret::new(""));
        let headers = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, value.parse().unwrap());
            h
        };
        assert_eq!(tokens.authorize(&HeaderMap::new(), Role::Read), Err(AdminAuthError::Unauthenticated));
        assert_eq!(tokens.authorize(&headers("Bearer x"), Role::Read), Err(AdminAuthError::Unauthenticated));
        assert_eq!(tokens.authorize(&headers("Basic r"), Role::Read), Err(AdminAuthError::Unauthenticated));
        assert_eq!(tokens.authorize(&headers("Bearer "), Role::Read), Err(AdminAuthError::Unauthenticated));
        assert_eq!(tokens.authorize(&headers("bearer r"), Role::Read), Ok(Role::Read));
        assert_eq!(tokens.authorize(&headers("Bearer r"), Role::Write), Err(AdminAuthError::ReadOnly));
        assert_eq!(tokens.authorize(&headers("Bearer w"), Role::Write), Ok(Role::Write));
        assert_eq!(tokens.authorize(&headers("Bearer w"), Role::Read), Ok(Role::Write));
    }

    #[test]
    fn token_files_name_the_bad_line_without_repeating_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# operators\nread  r1\n\nwrite w1\n").unwrap();
        let mut tokens = AdminTokens::default();
        tokens.add_file(&path).unwrap();
        assert_eq!(tokens.role_of(b"r1"), Some(Role::Read));
        assert_eq!(tokens.role_of(b"w1"), Some(Role::Write));
        std::fs::write(&path, "read ok\nadmin s3cret\n").unwrap();
        let error = AdminTokens::default().add_file(&path).unwrap_err().to_string();
        assert!(
            error.ends_with(&format!("{}:2: expected `read <token>` or `write <token>`", path.display())),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
    }
}
