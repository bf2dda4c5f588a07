//! Header fields of a request and of a response (RFC 9113 §8.2, §8.3).
//!
//! [`Fields`] collects what the HPACK decoder hands out for one header block, checking each field
//! as it comes: its size counted as RFC 7541 §4.1 counts it (name, value, 32 bytes), fields past
//! the header list limit dropped (the block is then answered 431, never kept), pseudo-header rules
//! (only the four request ones, once each, before every regular field, none in trailers),
//! lowercase names, no connection-specific fields, `te` only as `trailers`, values without NUL,
//! CR or LF. The first broken rule makes the request malformed (a stream error,
//! `PROTOCOL_ERROR`). A value with surrounding whitespace is taken as it is (RFC 9113 §8.2.1 asks
//! for it to be malformed; h2 takes it too, and an agent token with a trailing space is then
//! refused by the token check, as the OAP refuses it, instead of failing the call as INTERNAL).
//!
//! Responses are encoded by [`encode_response`]/[`encode_trailers`], which leave out the
//! connection-specific fields HTTP/2 forbids.

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Uri, Version};

use crate::hpack::{self, ENTRY_OVERHEAD};

/// Fields HTTP/2 forbids (§8.2.2).
fn connection_specific(name: &[u8]) -> bool {
    matches!(name, b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade")
}

/// One header block's fields, checked as they are decoded.
#[derive(Debug)]
pub(crate) struct Fields {
    limit: usize,
    size: usize,
    trailers: bool,
    regular_seen: bool,
    malformed: Option<&'static str>,
    method: Option<Method>,
    scheme: Option<Box<[u8]>>,
    authority: Option<Box<[u8]>>,
    path: Option<Box<[u8]>>,
    content_length: Option<u64>,
    headers: HeaderMap,
}

/// A request's head, once its block is whole.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) request: Request<()>,
    pub(crate) content_length: Option<u64>,
}

impl Fields {
    /// Fields of a block of at most `limit` bytes (§4.1 sizes); `trailers`: a request's trailers.
    pub(crate) fn new(limit: usize, trailers: bool) -> Self {
        Self {
            limit,
            size: 0,
            trailers,
            regular_seen: false,
            malformed: None,
            method: None,
            scheme: None,
            authority: None,
            path: None,
            content_length: None,
            headers: HeaderMap::new(),
        }
    }

    /// Whether the block decoded to more than the limit.
    pub(crate) fn too_large(&self) -> bool {
        self.size > self.limit
    }

    /// One decoded field.
    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        self.size += name.len() + value.len() + ENTRY_OVERHEAD;
        if self.too_large() {
            // Nothing more is kept: the block is answered 431.
            self.headers = HeaderMap::new();
            return;
        }
        if self.malformed.is_none()
            && let Err(why) = self.check(name, value)
        {
            self.malformed = Some(why);
        }
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
            return Err("a field value with NUL, CR or LF");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.trailers {
                return Err("a pseudo-header in trailers");
            }
            if self.regular_seen {
                return Err("a pseudo-header after a regular field");
            }
            let slot = match pseudo {
                b"method" => {
                    if self.method.is_some() {
                        return Err("two :method");
                    }
                    self.method = Some(Method::from_bytes(value).map_err(|_| "an invalid :method")?);
                    return Ok(());
                }
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => &mut self.path,
                _ => return Err("an unknown or response pseudo-header"),
            };
            if slot.is_some() {
                return Err("a repeated pseudo-header");
            }
            *slot = Some(value.into());
            return Ok(());
        }
        self.regular_seen = true;
        if name.is_empty() || name.iter().any(u8::is_ascii_uppercase) {
            return Err("a field name with uppercase letters");
        }
        if connection_specific(name) {
            return Err("a connection-specific field");
        }
        if name == b"te" && value != b"trailers" {
            return Err("te other than trailers");
        }
        if name == b"content-length" {
            let length = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or("an invalid content-length")?;
            if self.content_length.is_some_and(|seen| seen != length) {
                return Err("two different content-lengths");
            }
            self.content_length = Some(length);
        }
        let name = HeaderName::from_bytes(name).map_err(|_| "an invalid field name")?;
        let value = HeaderValue::from_bytes(value).map_err(|_| "an invalid field value")?;
        self.headers.append(name, value);
        Ok(())
    }

    /// The request, if the block made one.
    pub(crate) fn into_request(self) -> Result<Head, &'static str> {
        if let Some(why) = self.malformed {
            return Err(why);
        }
        let method = self.method.ok_or("no :method")?;
        let uri = if method == Method::CONNECT {
            if self.scheme.is_some() || self.path.is_some() {
                return Err("CONNECT with :scheme or :path");
            }
            let authority = self.authority.ok_or("CONNECT without :authority")?;
            Uri::try_from(&authority[..]).map_err(|_| "an invalid :authority")?
        } else {
            let scheme = self.scheme.ok_or("no :scheme")?;
            let path = self.path.filter(|p| !p.is_empty()).ok_or("no :path")?;
            let mut uri = Uri::builder().path_and_query(&path[..]);
            if let Some(authority) = self.authority.filter(|a| !a.is_empty()) {
                uri = uri.scheme(&scheme[..]).authority(&authority[..]);
            }
            uri.build().map_err(|_| "an invalid :scheme, :authority or :path")?
        };
        let mut request = Request::new(());
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.version_mut() = Version::HTTP_2;
        *request.headers_mut() = self.headers;
        Ok(Head { request, content_length: self.content_length })
    }

    /// The trailers, if the block made them.
    pub(crate) fn into_trailers(self) -> Result<HeaderMap, &'static str> {
        match self.malformed {
            Some(why) => Err(why),
            None => Ok(self.headers),
        }
    }
}

/// Encodes a response's head.
pub(crate) fn encode_response(out: &mut Vec<u8>, parts: &http::response::Parts) {
    hpack::encode_status(out, parts.status);
    encode_trailers(out, &parts.headers);
}

/// Encodes `headers` (a response's regular fields, or its trailers).
pub(crate) fn encode_trailers(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        let name = name.as_str().as_bytes();
        if connection_specific(name) || name == b"te" {
            continue;
        }
        hpack::encode_field(out, name, value.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(&str, &str)]) -> Result<Head, &'static str> {
        let mut f = Fields::new(16 * 1024, false);
        for (n, v) in fields {
            f.field(n.as_bytes(), v.as_bytes());
        }
        f.into_request()
    }

    const BASE: [(&str, &str); 4] =
        [(":method", "POST"), (":scheme", "http"), (":authority", "a:1"), (":path", "/s/m")];

    #[test]
    fn a_grpc_request_is_built() {
        let mut fields = BASE.to_vec();
        fields.extend([("content-type", "application/grpc"), ("te", "trailers")]);
        let head = request(&fields).unwrap();
        assert_eq!(head.request.uri(), "http://a:1/s/m");
        assert_eq!(head.request.method(), Method::POST);
        assert_eq!(head.request.headers()["content-type"], "application/grpc");
    }

    #[test]
    fn each_rule_makes_a_request_malformed() {
        let cases: &[&[(&str, &str)]] = &[
            &[(":scheme", "http"), (":path", "/")],
            &[(":method", "GET"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http")],
            &[(":method", "GET"), (":method", "GET"), (":scheme", "http"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":status", "200")],
            &[(":method", "GET"), (":scheme", "http"), ("x", "1"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("Upper", "1")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("connection", "close")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("te", "gzip")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("x", "a\nb")],
            &[(":method", "GET"), (":scheme", "http"), (":path", ""), ("x", "a")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("content-length", "x")],
        ];
        for case in cases {
            assert!(request(case).is_err(), "{case:?}");
        }
    }

    #[test]
    fn sizes_are_counted_with_the_32_byte_overhead_and_nothing_is_kept_past_the_limit() {
        let mut f = Fields::new(100, false);
        f.field(b":method", b"GET"); // 42
        assert!(!f.too_large());
        f.field(b"a", b"b"); // 34: 76
        assert!(!f.too_large());
        f.field(b"c", b"d"); // 110
        assert!(f.too_large());
        assert!(f.headers.is_empty());
    }

    #[test]
    fn trailers_take_no_pseudo_headers() {
        let mut f = Fields::new(1024, true);
        f.field(b"grpc-status", b"0");
        assert_eq!(f.into_trailers().unwrap()["grpc-status"], "0");
        let mut f = Fields::new(1024, true);
        f.field(b":path", b"/");
        assert!(f.into_trailers().is_err());
    }
}
