//! A small client for Nacos' HTTP open API (v1), the part a config store needs: read, publish and
//! delete one config, the long-polling listener, and login.
//!
//! - `GET|POST|DELETE {base}/v1/cs/configs` with `dataId`, `group` and (when not the default
//!   namespace) `tenant`. A read answered 404 means "no such config".
//! - `POST {base}/v1/cs/configs/listener` with the form field `Listening-Configs`: one record per
//!   config, `dataId \x02 group \x02 md5 [\x02 tenant] \x01`, where `md5` is the lowercase MD5
//!   hex of the content we hold, empty for "absent".
//!   With the `Long-Pulling-Timeout` header the server answers as soon as any listed config
//!   differs from what we hold, or with an empty body when the timeout passes. The answer names the
//!   changed configs (URL-encoded `dataId \x02 group [\x02 tenant] \x01` records).
//! - `GET {base}/v1/cs/configs?search=accurate&dataId=&group=...&pageNo=&pageSize=` lists a group's
//!   configs with their content (`{"pagesAvailable", "pageItems": [{"dataId", "group", "content"}]}`).
//! - `POST {base}/v1/auth/login` (`username`, `password`) returns `{"accessToken", "tokenTtl"}`;
//!   the token then goes with every request as the `accessToken` query parameter.
//! - With an access key, requests carry the `Spas-AccessKey`, `Timestamp` and `Spas-Signature`
//!   headers (HMAC-SHA1 over `[tenant+]group+timestamp`, base64), as Nacos' Java client signs them
//!   for Alibaba Cloud's hosted Nacos.
//!
//! Every answer is checked: a transport failure or a 5xx is an outage ([`SourceError::Unavailable`]),
//! 401/403 is [`SourceError::Refused`] (after one fresh login, when logging in with a password).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::prelude::BASE64_STANDARD;
use reqwest::{Method, RequestBuilder, Response, StatusCode};

use crate::SourceError;

/// How long an ordinary request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How much longer than the long poll itself its request may take before it counts as lost.
const LONG_POLL_GRACE: Duration = Duration::from_secs(10);
/// The longest error body quoted in an error message.
const QUOTED_BODY: usize = 200;

/// How requests prove who they come from.
#[derive(Clone)]
pub(crate) enum Auth {
    /// Nothing (a Nacos without authentication).
    None,
    /// A login with a user name and password, for an access token.
    Password {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
    /// Alibaba Cloud's access-key signature.
    AccessKey {
        /// The access key.
        access_key: String,
        /// The secret that signs requests.
        secret_key: String,
    },
}

// Secrets stay out of logs and panics.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Password { username, .. } => {
                f.debug_struct("Password").field("username", username).field("password", &"<redacted>").finish()
            }
            Self::AccessKey { access_key, .. } => {
                f.debug_struct("AccessKey").field("access_key", access_key).field("secret_key", &"<redacted>").finish()
            }
        }
    }
}

/// An access token and when to renew it.
struct Token {
    value: String,
    renew_at: Instant,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token").field("value", &"<redacted>").field("renew_at", &self.renew_at).finish()
    }
}

/// One watched config as the listener is told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listened<'a> {
    /// The dataId.
    pub(crate) data_id: &'a str,
    /// The MD5 of the content held; empty when the config is absent.
    pub(crate) md5: &'a str,
}

/// A Nacos client for one group in one namespace.
#[derive(Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    /// `http://host:port/{contextPath}`, one per configured server; requests go to the current
    /// one and move on to the next after a transport failure.
    bases: Vec<String>,
    current: AtomicUsize,
    group: String,
    tenant: String,
    auth: Auth,
    token: tokio::sync::Mutex<Option<Token>>,
    store: String,
    max_value_bytes: u64,
}

impl Client {
    /// A client for `bases` (at least one), reading `group` in namespace `tenant`.
    pub(crate) fn new(
        bases: Vec<String>,
        group: String,
        tenant: String,
        auth: Auth,
        store: String,
        max_value_bytes: u64,
    ) -> Result<Self, SourceError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| SourceError::Unavailable { store: store.clone(), message: e.to_string() })?;
        Ok(Self {
            http,
            bases,
            current: AtomicUsize::new(0),
            group,
            tenant,
            auth,
            token: tokio::sync::Mutex::new(None),
            store,
            max_value_bytes,
        })
    }

    /// The content of config `data_id`; `None` when there is no such config.
    pub(crate) async fn get(&self, data_id: &str) -> Result<Option<String>, SourceError> {
        let params = self.config_params(data_id, None);
        let response = self.send(Method::GET, "/v1/cs/configs", &params, true, REQUEST_TIMEOUT).await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = self.check(response).await?;
        let what = format!("config {data_id}");
        let bytes = self.read_limited(response, &what).await?;
        String::from_utf8(bytes).map(Some).map_err(|_| SourceError::NotText { what })
    }

    /// Publishes `content` (non-empty: Nacos refuses empty content) as config `data_id`; with
    /// `cas_md5`, asks the server to write only while the config's MD5 is that (Nacos' `casMd5`
    /// field: servers that do not know it ignore it).
    pub(crate) async fn publish(&self, data_id: &str, content: &str, cas_md5: Option<&str>) -> Result<(), SourceError> {
        let mut params = self.config_params(data_id, Some(content));
        if let Some(md5) = cas_md5 {
            params.push(("casMd5", md5.to_owned()));
        }
        let response = self.send(Method::POST, "/v1/cs/configs", &params, false, REQUEST_TIMEOUT).await?;
        self.expect_true(response, "publish", data_id).await
    }

    /// Deletes config `data_id`; deleting a missing config succeeds.
    pub(crate) async fn remove(&self, data_id: &str) -> Result<(), SourceError> {
        let params = self.config_params(data_id, None);
        let response = self.send(Method::DELETE, "/v1/cs/configs", &params, true, REQUEST_TIMEOUT).await?;
        self.expect_true(response, "delete", data_id).await
    }

    /// Every config of the group, as `(dataId, content)`, by Nacos' exact search
    /// (`GET /v1/cs/configs?search=accurate&dataId=&group=...`, an empty dataId matching all),
    /// page by page.
    pub(crate) async fn list_group(&self) -> Result<Vec<(String, String)>, SourceError> {
        const PAGE: usize = 500;
        let mut listed = Vec::new();
        for page in 1.. {
            let mut params = self.config_params("", None);
            params.push(("search", "accurate".to_owned()));
            params.push(("pageNo", page.to_string()));
            params.push(("pageSize", PAGE.to_string()));
            let response = self.send(Method::GET, "/v1/cs/configs", &params, true, REQUEST_TIMEOUT).await?;
            let response = self.check(response).await?;
            let body = self.read_limited(response, "a config search").await?;
            let found: SearchPage = serde_json::from_slice(&body).map_err(|e| SourceError::Unavailable {
                store: self.store.clone(),
                message: format!("unexpected config search answer: {e}: {}", quote(&body)),
            })?;
            let items = found.page_items.unwrap_or_default();
            let last = items.len() < PAGE || page >= found.pages_available.unwrap_or(0);
            listed.extend(
                items.into_iter().filter(|i| i.group == self.group).map(|i| (i.data_id, i.content.unwrap_or_default())),
            );
            if last {
                break;
            }
        }
        Ok(listed)
    }

    /// Long-polls for changes to `watched`: returns the dataIds the server reports changed (empty
    /// when `hold` passed without a change).
    pub(crate) async fn listen(&self, watched: &[Listened<'_>], hold: Duration) -> Result<Vec<String>, SourceError> {
        let mut records = String::new();
        for config in watched {
            records.push_str(config.data_id);
            records.push('\u{2}');
            records.push_str(&self.group);
            records.push('\u{2}');
            records.push_str(config.md5);
            if !self.tenant.is_empty() {
                records.push('\u{2}');
                records.push_str(&self.tenant);
            }
            records.push('\u{1}');
        }
        let params = [("Listening-Configs", records)];
        let hold_ms = hold.as_millis().to_string();
        let request = |base: &str, token: Option<&str>| {
            let builder = self
                .http
                .post(format!("{base}/v1/cs/configs/listener"))
                .header("Long-Pulling-Timeout", hold_ms.as_str())
                .timeout(hold + LONG_POLL_GRACE)
                .form(&params);
            let builder = match token {
                Some(token) => builder.query(&[("accessToken", token)]),
                None => builder,
            };
            self.sign(builder, false)
        };
        let response = self.send_with(request).await?;
        let response = self.check(response).await?;
        let body = self.read_limited(response, "the listener's answer").await?;
        let changed = parse_changed(&body, &self.group, &self.tenant);
        if changed.is_empty() && body.iter().any(|b| !b.is_ascii_whitespace()) {
            // An answer we cannot place: re-read everything rather than miss a change.
            return Ok(watched.iter().map(|c| c.data_id.to_owned()).collect());
        }
        Ok(changed)
    }

    /// The query or form fields naming one config.
    fn config_params(&self, data_id: &str, content: Option<&str>) -> Vec<(&'static str, String)> {
        let mut params = vec![("dataId", data_id.to_owned()), ("group", self.group.clone())];
        if !self.tenant.is_empty() {
            params.push(("tenant", self.tenant.clone()));
        }
        if let Some(content) = content {
            params.push(("content", content.to_owned()));
        }
        params
    }

    /// Sends a request to the config API: fields in the query (`in_query`) or as a form body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        params: &[(&'static str, String)],
        in_query: bool,
        timeout: Duration,
    ) -> Result<Response, SourceError> {
        self.send_with(|base, token| {
            let mut builder = self.http.request(method.clone(), format!("{base}{path}")).timeout(timeout);
            builder = if in_query { builder.query(params) } else { builder.form(params) };
            if let Some(token) = token {
                builder = builder.query(&[("accessToken", token)]);
            }
            self.sign(builder, true)
        })
        .await
    }

    /// Sends the request `build` makes for the current server, with a token when logging in, and
    /// once more with a fresh token when the server refuses the one it got.
    async fn send_with(&self, build: impl Fn(&str, Option<&str>) -> RequestBuilder) -> Result<Response, SourceError> {
        let mut fresh_login = false;
        loop {
            let base = self.base();
            let token = self.token(&base, fresh_login).await?;
            let response = build(&base, token.as_deref()).send().await.map_err(|e| self.transport_failed(&e))?;
            let refused = matches!(response.status(), StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED);
            if refused && token.is_some() && !fresh_login {
                // The token may have expired early (a restarted server forgets its sessions).
                fresh_login = true;
                continue;
            }
            return Ok(response);
        }
    }

    /// Adds the access-key signature headers, when signing: requests about one config are signed
    /// with their `[tenant+]group`, the listener with the timestamp alone.
    fn sign(&self, builder: RequestBuilder, about_config: bool) -> RequestBuilder {
        let Auth::AccessKey { access_key, secret_key } = &self.auth else { return builder };
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
            .to_string();
        let resource = match (about_config, self.tenant.is_empty()) {
            (false, _) => String::new(),
            (true, true) => self.group.clone(),
            (true, false) => format!("{}+{}", self.tenant, self.group),
        };
        builder
            .header("Spas-AccessKey", access_key.as_str())
            .header("Timestamp", timestamp.as_str())
            .header("Spas-Signature", spas_signature(secret_key, &resource, &timestamp))
    }

    /// The token to send, logging in when there is none yet, it is due for renewal, or `fresh`.
    async fn token(&self, base: &str, fresh: bool) -> Result<Option<String>, SourceError> {
        let Auth::Password { username, password } = &self.auth else { return Ok(None) };
        // A tokio mutex: logins are serialized so concurrent requests share one token.
        let mut held = self.token.lock().await;
        if let Some(token) = held.as_ref()
            && !fresh
            && Instant::now() < token.renew_at
        {
            return Ok(Some(token.value.clone()));
        }
        let response = self
            .http
            .post(format!("{base}/v1/auth/login"))
            .timeout(REQUEST_TIMEOUT)
            .form(&[("username", username.as_str()), ("password", password.as_str())])
            .send()
            .await
            .map_err(|e| self.transport_failed(&e))?;
        let response = self.check(response).await?;
        let body = self.read_limited(response, "the login answer").await?;
        let login: Login = serde_json::from_slice(&body).map_err(|e| SourceError::Refused {
            store: self.store.clone(),
            message: format!("unexpected login answer: {e}"),
        })?;
        // Renew well before the server forgets the token.
        let ttl = Duration::from_secs(login.token_ttl.max(10).unsigned_abs());
        let token = Token { value: login.access_token, renew_at: Instant::now() + ttl.mul_f64(0.8) };
        let value = token.value.clone();
        *held = Some(token);
        Ok(Some(value))
    }

    /// The base URL requests go to now.
    fn base(&self) -> String {
        let n = self.current.load(Ordering::Relaxed) % self.bases.len().max(1);
        self.bases.get(n).cloned().unwrap_or_default()
    }

    /// An outage error for a failed request; the next request tries the next server.
    fn transport_failed(&self, error: &reqwest::Error) -> SourceError {
        if self.bases.len() > 1 {
            self.current.fetch_add(1, Ordering::Relaxed);
        }
        let mut message = error.to_string();
        let mut cause = std::error::Error::source(error);
        while let Some(inner) = cause {
            message.push_str(": ");
            message.push_str(&inner.to_string());
            cause = inner.source();
        }
        SourceError::Unavailable { store: self.store.clone(), message }
    }

    /// Passes a successful answer through; turns any other into an error.
    async fn check(&self, response: Response) -> Result<Response, SourceError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.bytes().await.map(|b| quote(&b)).unwrap_or_default();
        let message = format!("HTTP {status}: {body}");
        Err(match status {
            StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED | StatusCode::BAD_REQUEST => {
                SourceError::Refused { store: self.store.clone(), message }
            }
            _ => SourceError::Unavailable { store: self.store.clone(), message },
        })
    }

    /// Expects the `true` a successful publish or delete answers.
    async fn expect_true(&self, response: Response, what: &str, data_id: &str) -> Result<(), SourceError> {
        let response = self.check(response).await?;
        let body = self.read_limited(response, "the answer").await?;
        if String::from_utf8_lossy(&body).trim() == "true" {
            Ok(())
        } else {
            Err(SourceError::Refused {
                store: self.store.clone(),
                message: format!("cannot {what} {data_id}: {}", quote(&body)),
            })
        }
    }

    /// Reads a body, refusing one larger than the limit.
    async fn read_limited(&self, mut response: Response, what: &str) -> Result<Vec<u8>, SourceError> {
        let limit = self.max_value_bytes;
        let too_large = |size: u64| SourceError::TooLarge { what: what.to_owned(), size, limit };
        if let Some(size) = response.content_length()
            && size > limit
        {
            return Err(too_large(size));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_failed(&e))? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > limit {
                return Err(too_large(body.len() as u64));
            }
        }
        Ok(body)
    }
}

/// The login answer (no `Debug`: it holds the access token).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Login {
    access_token: String,
    #[serde(default = "default_token_ttl")]
    token_ttl: i64,
}

/// One page of a config search.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchPage {
    pages_available: Option<usize>,
    page_items: Option<Vec<SearchItem>>,
}

/// One config a search found.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchItem {
    data_id: String,
    group: String,
    content: Option<String>,
}

/// Nacos' default token lifetime, in seconds.
fn default_token_ttl() -> i64 {
    18_000
}

/// A short, printable excerpt of a body for an error message.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(QUOTED_BODY) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The dataIds in a listener answer that belong to `group` in `tenant`.
pub(crate) fn parse_changed(body: &[u8], group: &str, tenant: &str) -> Vec<String> {
    let decoded = form_decode(body);
    let mut changed = Vec::new();
    for record in decoded.split('\u{1}') {
        let mut fields = record.trim_matches(|c: char| c.is_ascii_whitespace()).split('\u{2}');
        let (Some(data_id), Some(record_group)) = (fields.next(), fields.next()) else { continue };
        let record_tenant = fields.next().unwrap_or("");
        let same_tenant = record_tenant == tenant || (tenant.is_empty() && record_tenant == "public");
        if !data_id.is_empty() && record_group == group && same_tenant && !changed.iter().any(|c| c == data_id) {
            changed.push(data_id.to_owned());
        }
    }
    changed
}

/// Decodes `application/x-www-form-urlencoded` text (`%XX` escapes, `+` for space); malformed
/// escapes are kept as they are.
fn form_decode(body: &[u8]) -> String {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < body.len() => match (hex_value(body[i + 1]), hex_value(body[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The lowercase MD5 hex of `text`, as Nacos identifies a config's content.
pub(crate) fn content_md5(text: &str) -> String {
    use md5::Digest as _;
    hex::encode(md5::Md5::digest(text.as_bytes()))
}

/// The `Spas-Signature` header: base64 of HMAC-SHA1 over `resource+timestamp` (or the timestamp
/// alone when there is no resource), keyed with the secret key.
pub(crate) fn spas_signature(secret_key: &str, resource: &str, timestamp: &str) -> String {
    use hmac::{KeyInit as _, Mac as _};
    let signed = if resource.is_empty() { timestamp.to_owned() } else { format!("{resource}+{timestamp}") };
    let mut mac = <hmac::Hmac<sha1::Sha1>>::new_from_slice(secret_key.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(signed.as_bytes());
    BASE64_STANDARD.encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_is_lowercase_hex_of_the_utf8_bytes() {
        assert_eq!(content_md5(""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(content_md5("abc"), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn signature_is_hmac_sha1_in_base64() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let expected = BASE64_STANDARD.encode([
            0xef, 0xfc, 0xdf, 0x6a, 0xe5, 0xeb, 0x2f, 0xa2, 0xd2, 0x74, 0x16, 0xd5, 0xf1, 0x84, 0xdf, 0x9c, 0x25, 0x9a,
            0x7c, 0x79,
        ]);
        assert_eq!(spas_signature("Jefe", "", "what do ya want for nothing?"), expected);
        assert_eq!(
            spas_signature("Jefe", "what do ya want for", "nothing?"),
            spas_signature("Jefe", "", "what do ya want for+nothing?")
        );
    }

    #[test]
    fn listener_answers_name_the_changed_configs() {
        let body = b"a.b.c%02skywalking%01x%02other%01d%02skywalking%02ns%01\n";
        assert_eq!(parse_changed(body, "skywalking", ""), ["a.b.c"]);
        assert_eq!(parse_changed(body, "skywalking", "ns"), ["d"]);
        assert_eq!(parse_changed(b"a%02g%02public%01", "g", ""), ["a"], "public is the default namespace");
        assert!(parse_changed(b"", "g", "").is_empty());
        assert!(parse_changed(b"%zz%%2", "g", "").is_empty(), "malformed escapes do not panic");
        assert_eq!(form_decode(b"a+b%2Fc%"), "a b/c%");
    }
}
