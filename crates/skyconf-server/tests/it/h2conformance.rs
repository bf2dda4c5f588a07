//! RFC 9113 conformance cases and the hardening attacks (`tests/h2/conformance.py`, a raw-frame
//! client on Python's hyperframe and hpack, one connection per case) against the agent port, on
//! each HTTP/2 server. The own server passes every case; hyper's differs on the cases listed in
//! [`HYPER_DIFFERS`], each said there.

use std::path::Path;
use std::process::Command;

use skyconf_server::agent_port::Http2Server;
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::{V5_DOCUMENT as GOOD, temp_file};
use skyconf_testkit::server::{Server, loopback};

/// Cases where hyper/h2 answers differently from what the cases expect (which is what RFC 9113
/// says and the own server does). None of them is unsafe: h2 closes the connection in each, with
/// another code or none.
const HYPER_DIFFERS: &[&str] = &[
    // A request before the client's SETTINGS is served (§3.4 makes it a connection error).
    "first_frame_not_settings",
    // GOAWAY PROTOCOL_ERROR where RFC 9113 names FRAME_SIZE_ERROR (§6.5, §6.4, §6.9, §6.7, §6.3).
    "settings_ack_with_payload",
    "settings_length_not_a_multiple_of_6",
    "rst_stream_wrong_length",
    "window_update_wrong_length",
    "ping_wrong_length",
    "priority_wrong_length",
    // PROTOCOL_ERROR where §6.5.2 names FLOW_CONTROL_ERROR.
    "settings_initial_window_over_2_31",
    // A connection error PROTOCOL_ERROR where §5.1 names STREAM_CLOSED.
    "data_after_end_stream",
    // Malformed requests (§8.1.1) as connection errors, not stream errors.
    "request_with_an_unknown_pseudo_header",
    "request_with_an_uppercase_name",
    // So the stream-error flood never builds up: the first error closes the connection.
    "attack_stream_error_flood",
    // Trailers with a pseudo-header are accepted.
    "trailers_with_a_pseudo_header",
    // HPACK errors as PROTOCOL_ERROR, not COMPRESSION_ERROR (RFC 7541 §2.3.3, §4.2, §5.2).
    "hpack_index_0",
    "hpack_index_beyond_the_tables",
    "hpack_huffman_padding_of_zeros",
    "hpack_table_size_update_over_the_bound",
    "attack_hpack_reference_after_the_table_is_0",
];

/// The interpreter, if it has hyperframe and hpack; when not, says so (and fails instead when
/// `SKYCONF_REQUIRE_INTEROP` is set, as `scripts/test.sh` sets it).
fn python() -> Option<Command> {
    let program = std::env::var_os("SKYCONF_TEST_PYTHON").unwrap_or_else(|| "python3".into());
    let has = Command::new(&program).args(["-c", "import hpack, hyperframe"]).status().is_ok_and(|s| s.success());
    if !has {
        assert!(
            std::env::var_os("SKYCONF_REQUIRE_INTEROP").is_none(),
            "{program:?} with hpack and hyperframe (tests/requirements.txt) is required"
        );
        eprintln!("skipped: {program:?} has no hpack and hyperframe (tests/requirements.txt)");
        return None;
    }
    Some(Command::new(program))
}

/// Runs every case against a server on `http2`; the failed cases' names.
async fn failed_cases(http2: Http2Server) -> Option<Vec<String>> {
    let mut python = python()?;
    let (_dir, path) = temp_file("agent.yaml", GOOD);
    let mut config = loopback();
    config.security.grpc_limits.http2_server = http2;
    let server = Server::start(FileSource::new(&path), config).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/h2/conformance.py");
    python.arg(script).arg(server.grpc_addr.to_string());
    let output = tokio::task::spawn_blocking(move || python.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("{http2:?}:\n{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let summary = stdout.lines().last().expect("a summary line");
    let summary: serde_json::Value = serde_json::from_str(summary).expect("the summary is JSON");
    assert!(summary["cases"].as_u64().unwrap() > 60, "{summary}");
    server.stop().await.unwrap();
    Some(summary["failed"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_owned()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_own_server_passes_every_conformance_case_and_attack() {
    if let Some(failed) = failed_cases(Http2Server::Own).await {
        assert!(failed.is_empty(), "failed: {failed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_passes_the_same_cases_but_the_known_differences() {
    if let Some(mut failed) = failed_cases(Http2Server::Hyper).await {
        let mut differs = HYPER_DIFFERS.to_vec();
        failed.sort_unstable();
        differs.sort_unstable();
        assert_eq!(failed, differs, "hyper's differences changed");
    }
}
