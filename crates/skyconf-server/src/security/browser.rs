//! What a web browser may do with the admin port. The API has no tokens by default, so a page on
//! another site that an operator opens must not be able to change anything through it, and a
//! name an attacker controls must not be able to point at it (DNS rebinding).
//!
//! - **Host allow-list.** The `Host` (or HTTP/2 `:authority`) must be an IP literal,
//!   `localhost`, or a configured name; anything else is 403. A rebinding page's requests carry
//!   the attacker's name, so they are refused. `/healthz`, `/readyz` and `/metrics` are exempt:
//!   orchestrators and Prometheus reach them by service names, and they carry no configuration
//!   and change nothing.
//! - **Cross-site writes.** A write (any method but `GET`, `HEAD`, `OPTIONS`) is refused (403)
//!   when `Sec-Fetch-Site` says another site, or `Origin` is present and is not this host. It
//!   must also be a request a browser cannot send across sites without a CORS preflight (which
//!   the server never grants): `Content-Type: application/json` or `application/yaml`, or a
//!   header starting with `X-Skyconf-`, or `Authorization`. An HTML form can send none of them.
//! - **Logged and counted.** Each refusal is one log line (the reason, method, path and what gave
//!   it away) and counts in `skyconf_admin_refused_total{reason}` (`host`, `cross_site`, `form`).
//! - **Headers.** Every answer carries `X-Content-Type-Options: nosniff`,
//!   `Referrer-Policy: no-referrer`, `X-Frame-Options: DENY` and a `Content-Security-Policy`
//!   with `frame-ancestors 'none'`: `default-src 'none'` on the API, and on the page its inline
//!   script and style allowed by their SHA-256 hashes (no `'unsafe-inline'`), requests to its own
//!   origin only.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::header::{CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::prelude::BASE64_STANDARD;

use crate::metrics::{BrowserRefusal, Events};

/// The CSP of every answer but the page.
const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Which hosts the admin port answers to, besides IP literals and `localhost`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// Lower-case host names without a port; `*` allows any.
    pub names: Vec<String>,
}

impl AllowedHosts {
    /// Whether `host` (a `Host` value, with or without a port) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || self.names.iter().any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(&name))
    }
}

/// The name of a `Host` value: without its port, an IPv6 literal without its brackets.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `router` behind the browser checks and with the security headers (see the module docs);
/// refusals are logged and counted through `events`.
pub fn protect(router: Router, hosts: AllowedHosts, events: Events) -> Router {
    let hosts = Arc::new(hosts);
    router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
        let (hosts, events) = (Arc::clone(&hosts), events.clone());
        async move {
            let mut response = match refusal(&request, &hosts) {
                Some((reason, why)) => {
                    events.admin_refused(reason, request.method(), request.uri().path(), &why);
                    refused(&why)
                }
                None => next.run(request).await,
            };
            add_headers(response.headers_mut());
            response
        }
    }))
}

fn refused(reason: &str) -> Response {
    (StatusCode::FORBIDDEN, axum::Json(serde_json::json!({ "error": reason }))).into_response()
}

/// Why `request` is refused, if it is.
fn refusal(request: &Request, hosts: &AllowedHosts) -> Option<(BrowserRefusal, String)> {
    let headers = request.headers();
    let host = request.uri().authority().map(|a| a.as_str().to_owned()).or_else(|| text(headers, HOST.as_str()));
    let path = request.uri().path();
    if let Some(host) = &host
        && !matches!(path, "/healthz" | "/readyz" | "/metrics")
        && !hosts.allows(host)
    {
        return Some((
            BrowserRefusal::Host,
            format!(
                "the host `{}` is not allowed: use an IP address or localhost, or add the name to skyconf.security.admin.allowedHosts",
                host_name(host)
            ),
        ));
    }
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    if let Some(site) = text(headers, "sec-fetch-site")
        && !matches!(site.as_str(), "same-origin" | "none")
    {
        return Some((BrowserRefusal::CrossSite, format!("a cross-site write is refused (Sec-Fetch-Site: {site})")));
    }
    if let Some(origin) = text(headers, ORIGIN.as_str()) {
        let origin_host = origin.split_once("://").map(|(_, rest)| rest);
        let same = match (origin_host, &host) {
            (Some(origin_host), Some(host)) => origin_host.eq_ignore_ascii_case(host),
            _ => false,
        };
        if !same {
            return Some((BrowserRefusal::CrossSite, format!("a cross-origin write is refused (Origin: {origin})")));
        }
    }
    if !cannot_be_sent_by_a_form(headers) {
        return Some((
            BrowserRefusal::Form,
            "a write needs `Content-Type: application/json` (or application/yaml) or an `X-Skyconf-*` header"
                .to_owned(),
        ));
    }
    None
}

/// Whether a browser would need a CORS preflight to send these headers to another origin.
fn cannot_be_sent_by_a_form(headers: &HeaderMap) -> bool {
    let media = text(headers, CONTENT_TYPE.as_str())
        .map(|t| t.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    matches!(
        media.as_deref(),
        Some(
            "application/json"
                | "application/merge-patch+json"
                | "application/yaml"
                | "application/x-yaml"
                | "text/yaml"
        )
    ) || headers.contains_key(header::AUTHORIZATION)
        || headers.keys().any(|name| name.as_str().starts_with("x-skyconf-"))
}

fn text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn add_headers(headers: &mut HeaderMap) {
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(API_CSP));
    }
}

/// The CSP of `page`: its inline `<script>` and `<style>` by hash, requests to its own origin.
pub fn page_csp(page: &str) -> String {
    let script = inline(page, "script").map(|s| format!(" '{}'", sha256_source(s))).unwrap_or_default();
    let style = inline(page, "style").map(|s| format!(" '{}'", sha256_source(s))).unwrap_or_default();
    format!(
        "default-src 'none'; script-src{script}; style-src{style}; connect-src 'self'; img-src 'self'; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
}

/// The text of the first `<tag>` element without attributes.
fn inline<'a>(page: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = page.find(&open)? + open.len();
    let end = page[start..].find(&format!("</{tag}>"))? + start;
    Some(&page[start..end])
}

fn sha256_source(text: &str) -> String {
    use sha2::Digest as _;
    format!("sha256-{}", BASE64_STANDARD.encode(sha2::Sha256::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_ip_literals_localhost_or_listed() {
        let hosts = AllowedHosts { names: vec!["skyconf.internal".into()] };
        for host in
            ["127.0.0.1:12800", "10.0.0.7", "[::1]:12800", "localhost:12800", "LOCALHOST", "skyconf.internal:80"]
        {
            assert!(hosts.allows(host), "{host}");
        }
        for host in ["attacker.example:12800", "127.0.0.1.nip.io", "localhost.attacker.example", ""] {
            assert!(!hosts.allows(host), "{host}");
        }
        assert!(AllowedHosts { names: vec!["*".into()] }.allows("anything.example"));
    }

    #[test]
    fn a_hash_source_is_the_base64_sha256_csp_expects() {
        // SHA-256 of the empty string, as browsers print it in CSP errors.
        assert_eq!(sha256_source(""), "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
    }

    #[test]
    fn the_page_csp_hashes_its_inline_script_and_style() {
        let csp = page_csp("<style>a{}</style><script>go()</script>");
        assert!(csp.contains(&format!("script-src '{}'", sha256_source("go()"))), "{csp}");
        assert!(csp.contains(&format!("style-src '{}'", sha256_source("a{}"))), "{csp}");
        assert!(!csp.contains("unsafe-inline"));
        assert!(csp.contains("frame-ancestors 'none'"));
    }
}
