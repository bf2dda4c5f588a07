//! The OpAMP port's tokens and TLS: the same as the other ports'.
//!
//! - **Token.** With an agent token set (`--agent-token`, the one the gRPC port checks), every
//!   OpAMP request — a plain HTTP POST, a WebSocket upgrade — must carry it, byte for byte:
//!   as `Authorization: Bearer <token>` (what OpenTelemetry clients and the collector's bearer
//!   token extension send) or as an `Authentication: <token>` header (the name a SkyWalking
//!   agent uses). Missing or wrong: `401` before the body is read, and a WebSocket is never
//!   upgraded ([`skyconf_opamp::auth`]). The comparison takes the same time wherever the first
//!   differing byte is. An empty token means none, as on the gRPC port.
//! - **TLS.** `--opamp-tls-cert`/`--opamp-tls-key` (and `--opamp-tls-client-ca`,
//!   `--opamp-tls-client-auth`), read and checked before any port opens, served over the same
//!   listener as the admin port's ([`crate::security::tls::TlsListener`]): handshakes in tasks of
//!   their own within [`crate::security::tls::HANDSHAKE_TIMEOUT`], the first request's header
//!   block within the handshake deadline, the port's connection cap.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use skyconf_opamp::{Authorize, Denied};
use tokio_rustls::rustls::ServerConfig;

use crate::security::Secret;
use crate::security::auth::AUTHENTICATION_METADATA;

/// The security of the OpAMP port, resolved.
#[derive(Debug, Clone, Default)]
pub(crate) struct PortSecurity {
    /// The agent token every request must carry; `None`: not checked.
    pub token: Option<Secret>,
    /// TLS, when configured.
    pub tls: Option<Arc<ServerConfig>>,
    /// How long a new connection may take to send its first request's header block.
    pub handshake_timeout: Duration,
}

/// The agent token check of the OpAMP port.
#[derive(Debug)]
pub(crate) struct AgentToken(Secret);

impl AgentToken {
    /// A check against `token`, or `None` when it is unset or empty.
    pub(crate) fn of(token: Option<&Secret>) -> Option<Self> {
        token.filter(|t| !t.is_empty()).map(|t| Self(t.clone()))
    }
}

impl Authorize for AgentToken {
    fn authorize(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let bearer = headers.get_all(AUTHORIZATION).iter().next_back().map(|value| {
            let bytes = value.as_bytes();
            match bytes.get(..7) {
                Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &bytes[7..],
                _ => &[][..],
            }
        });
        let plain = headers.get_all(AUTHENTICATION_METADATA).iter().next_back().map(|v| v.as_bytes());
        if bearer.into_iter().chain(plain).any(|sent| self.0.matches(sent)) {
            return Ok(());
        }
        let reason = if bearer.is_none() && plain.is_none() {
            "the agent token is missing: send it as `Authorization: Bearer <token>`"
        } else {
            "the agent token does not match"
        };
        Err(Denied { reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_token_must_match_exactly_as_a_bearer_or_authentication_header() {
        assert!(AgentToken::of(Some(&Secret::new(""))).is_none(), "empty: no check");
        let check = AgentToken::of(Some(&Secret::new("t0k"))).unwrap();
        assert!(check.authorize(&headers(&[("authorization", "Bearer t0k")])).is_ok());
        assert!(check.authorize(&headers(&[("authorization", "bearer t0k")])).is_ok());
        assert!(check.authorize(&headers(&[("authentication", "t0k")])).is_ok());
        let missing = check.authorize(&HeaderMap::new()).unwrap_err();
        assert!(missing.reason.contains("missing"), "{missing:?}");
        for wrong in ["Bearer t0", "Bearer t0k ", "Bearer T0K", "Basic t0k", "t0k", "Bearer "] {
            let denied = check.authorize(&headers(&[("authorization", wrong)])).unwrap_err();
            assert_eq!(denied.reason, "the agent token does not match", "{wrong:?}");
        }
        assert!(check.authorize(&headers(&[("authentication", "t0")])).is_err());
    }
}
