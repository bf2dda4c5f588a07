//! The fuzz targets' shared checks, callable from the AFL binaries and from the regression test
//! that replays every committed input (`cargo test` in this directory), so a crash found once
//! stays a test.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use prost::Message as _;
use skyconf_core::answer::{Answers, ReplyOptions, reply};
use skyconf_proto::v3::{Commands, ConfigurationSyncRequest};
use skyconf_server::{ServedTable, StoreView};
use tower::ServiceExt as _;

/// The reader never panics; a refusal names a position inside the document, and an accepted
/// document's answers encode and decode back. The incremental reader reads it as the full read
/// does, cold and after a document that shares its first service.
pub fn reader(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let full = skyconf_core::read(text);
    let in_order = |result: Result<skyconf_core::AgentConfigurations, skyconf_core::ReadError>| {
        result.map(|table| table.services().cloned().collect::<Vec<_>>())
    };
    let mut incremental = skyconf_core::reader::IncrementalReader::new();
    let warm = format!("{}\n  skyconf-fuzz-other: {{k: v}}\n", text.lines().take(3).collect::<Vec<_>>().join("\n"));
    let _ = incremental.read(&warm);
    assert_eq!(in_order(incremental.read(text)), in_order(full.clone()), "warm incremental read");
    assert_eq!(in_order(skyconf_core::reader::IncrementalReader::new().read(text)), in_order(full.clone()), "cold");
    match full {
        Ok(table) => {
            let answers = Answers::new(&table);
            for service in table.services() {
                let request = ConfigurationSyncRequest { service: service.name().to_owned(), uuid: String::new() };
                let bytes = reply(&answers, &request, ReplyOptions::default()).encode();
                let commands = Commands::decode(bytes).expect("an answer decodes");
                assert_eq!(commands.commands.len(), 1);
            }
        }
        Err(error) => {
            let at = error.position();
            assert!(at.is_some_and(|p| p.line >= 1 && p.column >= 1), "{error}");
        }
    }
}

/// Any bytes as a CDS request: decoding fails cleanly or the reply rule answers.
pub fn cds_request(data: &[u8]) {
    static ANSWERS: OnceLock<Answers> = OnceLock::new();
    let answers = ANSWERS.get_or_init(|| {
        Answers::new(&skyconf_core::read("configurations:\n  svc: {k: v}\n").expect("a valid document"))
    });
    if let Ok(request) = ConfigurationSyncRequest::decode(data) {
        let bytes = reply(answers, &request, ReplyOptions::default()).encode();
        Commands::decode(bytes).expect("an answer decodes");
    }
}

/// The admin API's write routes with any path segment and body: never a panic, never a 500.
/// Input: one selector byte, a path segment up to the first newline, then the body.
pub fn admin_write(data: &[u8]) {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime =
        RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"));
    let Some((&selector, rest)) = data.split_first() else { return };
    let (segment, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let segment: String = segment.iter().map(|b| format!("%{b:02X}")).collect();
    let query = if selector & 0x10 != 0 { "?dry_run=true" } else { "" };
    let (method, path) = match selector % 4 {
        0 => (Method::PUT, format!("/api/v1/configurations{query}")),
        1 => (Method::PUT, format!("/api/v1/services/{segment}{query}")),
        2 => (Method::DELETE, format!("/api/v1/services/{segment}{query}")),
        _ => (Method::POST, format!("/api/v1/releases/{segment}/rollback{query}")),
    };
    let content_type = if selector & 0x20 != 0 { "application/json" } else { "application/yaml" };
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(Body::from(body.to_vec()))
        .expect("a request");
    runtime.block_on(async {
        let table = skyconf_core::read("configurations:\n  svc: {k: v}\n").expect("a valid document");
        let served = Arc::new(ServedTable::new(table));
        let store = Arc::new(StoreView::new("fuzz".into(), Default::default(), true, false));
        let router = skyconf_server::admin::Admin::new(served, store).router();
        let response = router.oneshot(request).await.expect("the router answers");
        assert_ne!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    });
}

/// Any bytes as an OpAMP message: the first byte picks the transport (0: a plain HTTP body,
/// 1: a gzip-compressed HTTP body, 2: a WebSocket message with its varint header), the rest is
/// the message. Decoding fails cleanly within the size limit, or the server answers it, and the
/// answer encodes and decodes back.
pub fn opamp_message(data: &[u8]) {
    use skyconf_opamp::codec::{self, Encoding};
    use skyconf_opamp::wire::ServerToAgent;
    const LIMIT: usize = 64 << 10;
    static SERVER: OnceLock<skyconf_opamp::Opamp> = OnceLock::new();
    let server = SERVER.get_or_init(|| {
        let backend = skyconf_opamp::MemoryBackend::new();
        backend.set_default(Some(skyconf_opamp::RemoteConfig::single("a.yaml", "text/yaml", "k: v\n")));
        let mut config = skyconf_opamp::OpampConfig::default();
        config.limits.max_sessions = 1000;
        skyconf_opamp::Opamp::new(config, Arc::new(backend))
    });
    let Some((&selector, rest)) = data.split_first() else { return };
    let decoded = match selector % 3 {
        0 => codec::decode_body(Encoding::Identity, rest, LIMIT),
        1 => codec::decode_body(Encoding::Gzip, rest, LIMIT),
        _ => codec::decode_frame(rest),
    };
    if let Ok(message) = decoded {
        let answer = server.answer(&message);
        let (body, gzipped) = codec::encode_body(&answer.message, selector & 0x10 != 0);
        let bytes =
            if gzipped { codec::gunzip(&body, usize::MAX >> 1).expect("our gzip decodes") } else { body.to_vec() };
        assert_eq!(ServerToAgent::decode(bytes.as_slice()).expect("an answer decodes"), answer.message);
        let frame = codec::encode_frame(&answer.message);
        assert_eq!(ServerToAgent::decode(&frame[1..]).expect("a frame decodes"), answer.message);
    }
}

/// Any bytes from a client after a valid connection preface, on skyconf's own HTTP/2 server (the
/// agent port's): the connection answers them or ends with an error, never panics, and ends once
/// the client has sent everything and closed. Its calls read their request body and answer with
/// a body and trailers, so DATA, flow control and trailers are reached too.
pub fn h2_connection(data: &[u8]) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime =
        RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"));
    runtime.block_on(async {
        let (client, server) = tokio::io::duplex(64 << 10);
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let service = skyconf_h2::ServiceFn(|request: Request<skyconf_h2::RecvBody>| async move {
            use http_body_util::BodyExt as _;
            let mut body = request.into_body();
            while let Some(Ok(_)) = body.frame().await {}
            let mut trailers = axum::http::HeaderMap::new();
            trailers.insert("grpc-status", axum::http::HeaderValue::from_static("0"));
            let answer = http_body_util::Full::new(bytes::Bytes::from_static(b"\0\0\0\0\0"))
                .with_trailers(std::future::ready(Some(Ok::<_, std::convert::Infallible>(trailers))));
            Ok::<_, std::convert::Infallible>(axum::http::Response::new(answer))
        });
        let settings = skyconf_h2::Settings { keepalive_interval: None, ..skyconf_h2::Settings::default() };
        let serving = skyconf_h2::serve_connection(server, service, Arc::new(settings), std::future::pending());
        let sending = async move {
            let _ = to_server.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
            let _ = to_server.write_all(data).await;
            let _ = to_server.shutdown().await;
        };
        let reading = async move {
            let mut sink = Vec::new();
            let _ = from_server.read_to_end(&mut sink).await;
        };
        let (_, (), ()) = tokio::join!(serving, sending, reading);
    });
}

#[cfg(test)]
mod tests {
    /// Replays every committed corpus input through its target.
    #[test]
    fn every_committed_input_passes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        let targets: [(&str, fn(&[u8])); 5] = [
            ("reader", super::reader),
            ("cds", super::cds_request),
            ("admin", super::admin_write),
            ("opamp", super::opamp_message),
            ("h2", super::h2_connection),
        ];
        for (name, target) in targets {
            let mut inputs = 0;
            for entry in std::fs::read_dir(dir.join(name)).expect("a corpus directory") {
                let path = entry.expect("a corpus entry").path();
                target(&std::fs::read(&path).expect("a corpus file"));
                inputs += 1;
            }
            assert!(inputs > 0, "the {name} corpus is empty");
        }
    }
}
