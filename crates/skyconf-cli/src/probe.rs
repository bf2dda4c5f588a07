//! What listens at an address that did not answer as a gRPC server: one plain HTTP/1.1 request
//! over TCP (`GET /readyz`), and what comes back tells an HTTP server (skyconf's admin port among
//! them), a TLS server (a TLS alert) and a plaintext HTTP/2 server (a `SETTINGS` frame) apart. A
//! client command adds the [`hint`] to its error, so a wrong port or a wrong scheme is said in
//! words a person can act on rather than as the transport's error.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::args::ServerAddr;

/// The longest the probe takes.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of the answer the probe reads.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// What answered the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// skyconf's admin port: HTTP, and `/readyz` has skyconf's readiness.
    SkyconfAdmin,
    /// Another HTTP/1 server.
    Http,
    /// A TLS server (it answered plaintext with a TLS alert).
    Tls,
    /// A plaintext HTTP/2 server (gRPC without TLS).
    Http2,
}

/// Sends the probe to `addr`'s host and port, without TLS whatever its scheme.
pub(crate) async fn probe(addr: &ServerAddr) -> Option<Found> {
    tokio::time::timeout(PROBE_TIMEOUT, exchange(addr.authority())).await.ok().flatten().map(|answer| classify(&answer))
}

/// The probe's request and the first bytes of the answer; `None` when nothing answered.
async fn exchange(authority: &str) -> Option<Vec<u8>> {
    let mut stream = tokio::net::TcpStream::connect(authority).await.ok()?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0_u8; 4096];
    while answer.len() < MAX_ANSWER_BYTES {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    (!answer.is_empty()).then_some(answer)
}

/// What an answer's first bytes say.
fn classify(answer: &[u8]) -> Found {
    match answer {
        // A TLS record: an alert (21) or a handshake (22), protocol version 3.x.
        [21 | 22, 3, ..] => Found::Tls,
        _ if answer.starts_with(b"HTTP/1.") => {
            let text = String::from_utf8_lossy(answer);
            let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
            if body.contains("\"ready\":") && body.contains("\"store\":") && body.contains("\"last_rejection\":") {
                Found::SkyconfAdmin
            } else {
                Found::Http
            }
        }
        _ => Found::Http2,
    }
}

/// A sentence that says why `addr` gave no gRPC answer, when the probe tells.
pub(crate) async fn hint(addr: &ServerAddr) -> Option<String> {
    let found = probe(addr).await?;
    let authority = addr.authority();
    Some(match (found, addr.is_tls()) {
        (Found::SkyconfAdmin, _) => format!(
            "{authority} is skyconf's admin port (HTTP: the API and the page); agents and `skyconf fetch` use its \
             agent port, 11800 by default (`serve --grpc-addr`)"
        ),
        (Found::Http, _) => format!(
            "{authority} answers HTTP/1, not gRPC: agents and `skyconf fetch` use a gRPC port (skyconf's and the \
             OAP's agent port is 11800 by default)"
        ),
        (Found::Tls, false) => format!("{authority} speaks TLS: use --addr https://{authority}"),
        (Found::Http2, true) => {
            format!("{authority} does not speak TLS (it answers plaintext HTTP/2): use --addr http://{authority}")
        }
        (Found::Tls, true) | (Found::Http2, false) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_told_apart_by_their_first_bytes() {
        assert_eq!(classify(b"\x15\x03\x03\x00\x02\x022"), Found::Tls);
        assert_eq!(classify(b"\x00\x00\x18\x04\x00\x00\x00\x00\x00"), Found::Http2);
        assert_eq!(classify(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), Found::Http);
        let readyz = b"HTTP/1.1 200 OK\r\n\r\n{\"ready\":true,\"store\":{},\"last_rejection\":null}";
        assert_eq!(classify(readyz), Found::SkyconfAdmin);
    }
}
