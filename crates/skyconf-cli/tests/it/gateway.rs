//! Gateway mode (`skyconf serve --upstream ...`, issue 12) with independent gRPC stacks on both
//! sides: agent-like calls from a grpcio (C-core) client (`tests/gateway/client.py`) go through
//! skyconf to recording grpcio OAP stand-ins (`tests/gateway/upstream.py`), and what the client
//! sent is compared with what the upstream recorded, byte for byte, and back.
//!
//! The same checks also run with the client talking to the upstream directly, which shows the
//! checks hold for a perfect pass-through (so a failure through skyconf is skyconf's).
//!
//! Needs python3 with grpcio and grpcio-tools: `scripts/test.sh` installs them and sets
//! SKYCONF_REQUIRE_INTEROP=1 so a missing dependency fails instead of skipping.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skyconf_testkit::server::AdminClient;

use crate::util::{Server, example_document, grpcio_available, json_line, read_lines, repo_root, serve_command};

const TRACE_COLLECT: &str = "/skywalking.v3.TraceSegmentReportService/collect";
const JVM_COLLECT: &str = "/skywalking.v3.JVMMetricReportService/collect";
const REPORT_PROPERTIES: &str = "/skywalking.v3.ManagementService/reportInstanceProperties";
const KEEP_ALIVE: &str = "/skywalking.v3.ManagementService/keepAlive";
/// What client.py puts before grpc-python's own `user-agent`.
const USER_AGENT: &str = "skyconf-gateway-test/1 grpc-python/";
/// How long any wait for another process may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

fn tool(name: &str) -> PathBuf {
    repo_root().join("tests/gateway").join(name)
}

/// One call as an upstream recorded it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Call {
    pub(crate) path: String,
    pub(crate) metadata: Vec<(String, String)>,
    time_remaining: Option<f64>,
    /// The request messages, base64.
    pub(crate) messages: Vec<String>,
    /// The response messages the upstream sent, base64.
    replies: Vec<String>,
    half_closed: bool,
    /// The status the handler ended the call with (it did not when the call was cancelled).
    status: Option<Value>,
    /// `Some(cancelled)` once the call ended.
    terminated: Option<bool>,
}

fn pairs(value: &Value) -> Vec<(String, String)> {
    value
        .as_array()
        .map(|a| a.iter().map(|p| (p[0].as_str().unwrap().to_owned(), p[1].as_str().unwrap().to_owned())).collect())
        .unwrap_or_default()
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect()).unwrap_or_default()
}

/// A recording `upstream.py`, killed when dropped.
pub(crate) struct Upstream {
    child: Child,
    name: String,
    port: u16,
    record: PathBuf,
    _dir: tempfile::TempDir,
}

impl Upstream {
    /// Starts one with `scenario` (path -> behaviour, see upstream.py) and waits for it to listen.
    pub(crate) fn start(name: &str, scenario: &Value) -> Self {
        Self::start_with(name, scenario, &[])
    }

    /// [`Self::start`] with more of upstream.py's options.
    fn start_with(name: &str, scenario: &Value, options: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record.jsonl");
        let scenario_file = dir.path().join("scenario.json");
        std::fs::write(&scenario_file, scenario.to_string()).unwrap();
        let mut child = crate::util::python()
            .arg(tool("upstream.py"))
            .args(["--name", name, "--record"])
            .arg(&record)
            .arg("--scenario")
            .arg(&scenario_file)
            .args(options)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let rx = read_lines(child.stdout.take().unwrap(), |line| line);
        let line = rx.recv_timeout(PATIENCE).expect("upstream.py prints LISTENING <port>");
        let port = line.strip_prefix("LISTENING ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line}"));
        Self { child, name: name.to_owned(), port, record, _dir: dir }
    }

    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The calls recorded so far, in the order they started.
    pub(crate) fn calls(&self) -> Vec<Call> {
        let text = std::fs::read_to_string(&self.record).unwrap_or_default();
        let mut calls: BTreeMap<u64, Call> = BTreeMap::new();
        // Only whole lines: the upstream may be writing the last one.
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let event: Value = serde_json::from_str(line).unwrap();
            let call = calls.entry(event["call"].as_u64().unwrap()).or_default();
            match event["event"].as_str().unwrap() {
                "call" => {
                    call.path = event["path"].as_str().unwrap().to_owned();
                    call.metadata = pairs(&event["metadata"]);
                    call.time_remaining = event["time_remaining"].as_f64();
                }
                "message" => call.messages.push(event["data"].as_str().unwrap().to_owned()),
                "reply" => call.replies.push(event["data"].as_str().unwrap().to_owned()),
                "half_close" => call.half_closed = true,
                "status" => call.status = Some(event),
                "terminated" => call.terminated = Some(event["cancelled"].as_bool().unwrap()),
                other => panic!("unknown event {other}"),
            }
        }
        calls.into_values().collect()
    }

    /// Waits (bounded) until the recorded calls satisfy `condition`.
    pub(crate) fn wait_until(&self, what: &str, condition: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        let give_up = Instant::now() + PATIENCE;
        loop {
            let calls = self.calls();
            if condition(&calls) {
                return calls;
            }
            assert!(Instant::now() < give_up, "{}: {what}: {calls:#?}", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The one ended call on `path` (waiting for it to end).
    fn ended_call(&self, path: &str) -> Call {
        let calls = self.wait_until(&format!("one ended call on {path}"), |calls| {
            calls.iter().any(|c| c.path == path && c.terminated.is_some())
        });
        let mut on_path: Vec<Call> = calls.into_iter().filter(|c| c.path == path).collect();
        assert_eq!(on_path.len(), 1, "{on_path:#?}");
        on_path.remove(0)
    }

    /// SIGKILL, as an OAP that dies.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `client.py --addr addr args...` to its end; its JSON result.
fn client(addr: &str, args: &[&str]) -> Value {
    let output = crate::util::python().arg(tool("client.py")).args(["--addr", addr]).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "client.py {args:?}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// A `client.py --hold` streaming call: sends its messages, then waits for `close` or `cancel`.
struct HeldClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
}

impl HeldClient {
    fn start(addr: &str, args: &[&str]) -> Self {
        let mut child = crate::util::python()
            .arg(tool("client.py"))
            .args(["--addr", addr, "--hold"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = read_lines(child.stdout.take().unwrap(), |line| json_line(&line));
        Self { stdin: child.stdin.take(), child, lines }
    }

    /// The next line printed, waiting at most `timeout`; `None` when there was none.
    fn next_line(&self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("client.py ended without a result"),
        }
    }

    /// Waits for the `{"event": "sent"}` line.
    fn wait_sent(&self) -> Value {
        loop {
            let line = self.next_line(PATIENCE).expect("client.py sends its messages");
            if line["event"] == "sent" {
                return line;
            }
        }
    }

    fn say(&mut self, word: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{word}").unwrap();
    }

    /// The call's result (the line with a status code).
    fn result(mut self) -> Value {
        loop {
            let line = self.next_line(PATIENCE).expect("the call ends");
            if line.get("code").is_some() {
                self.stdin.take();
                assert!(self.child.wait().unwrap().success());
                return line;
            }
        }
    }
}

impl Drop for HeldClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `skyconf serve` in gateway mode in front of `upstreams` (addresses), on the tests' document.
fn gateway(upstreams: &[String]) -> Server {
    let mut command = serve_command();
    command.arg("--file").arg(example_document()).arg("--upstream").arg(upstreams.join(","));
    Server::spawn(command)
}

/// Response headers and trailers that differ between what the upstream sent and what the client
/// got, collected over several calls and asserted at the end, so that an added header does not
/// hide what else passed or failed.
#[derive(Default)]
struct HeaderCheck(Vec<String>);

impl HeaderCheck {
    fn compare(&mut self, path: &str, what: &str, got: &[(String, String)], want: &[(String, String)]) {
        // The one header skyconf adds: its HTTP/2 server (hyper, under tonic) stamps `date` on
        // every response that has none, as nginx does; the README says so.
        let got: Vec<_> = got.iter().filter(|(name, _)| name != "date").cloned().collect();
        if got != want {
            self.0.push(format!("{path}: {what}: the client got {got:?}, the upstream sent {want:?}"));
        }
    }

    fn assert_unchanged(self) {
        assert!(self.0.is_empty(), "response headers or trailers changed on the way:\n{}", self.0.join("\n"));
    }
}

/// Checks that `call` is what the client of `result` sent, and that the client got exactly
/// what the upstream answered (its trailers into `headers`).
fn assert_passed_through(result: &Value, call: &Call, sent_metadata: &[(&str, &str)], headers: &mut HeaderCheck) {
    // Byte for byte, both ways.
    assert_eq!(call.messages, strings(&result["requests"]), "request messages at the upstream");
    assert_eq!(strings(&result["responses"]), call.replies, "response messages at the client");
    assert!(call.half_closed, "the client's end of stream reached the upstream: {call:?}");
    assert_eq!(call.terminated, Some(false), "{call:?}");
    // Every header the client set, in order, with nothing added or dropped.
    let (agent, rest): (Vec<_>, Vec<_>) = call.metadata.iter().cloned().partition(|(k, _)| k == "user-agent");
    let want: Vec<(String, String)> = sent_metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    assert_eq!(rest, want, "metadata at the upstream");
    assert_eq!(agent.len(), 1, "{:?}", call.metadata);
    assert!(agent[0].1.starts_with(USER_AGENT), "user-agent at the upstream: {:?}", agent[0].1);
    // The upstream's status and trailers, exactly.
    let status = call.status.as_ref().expect("the upstream ended the call");
    assert_eq!(result["code"], status["code"]);
    assert_eq!(result["details"], status["details"]);
    headers.compare(&call.path, "trailers", &pairs(&result["trailing_metadata"]), &pairs(&status["trailers"]));
}

const AGENT_METADATA: [(&str, &str); 3] = [
    ("authentication", "agent-token-1c9e"),
    ("agent-version", "9.1.0"),
    // A binary header (base64 on both tools' command lines and records): bytes 00 ff 10 80.
    ("x-sw-trace-bin", "AP8QgA=="),
];

fn metadata_args(metadata: &[(&str, &str)]) -> Vec<String> {
    metadata.iter().flat_map(|(k, v)| ["--metadata".to_owned(), format!("{k}={v}")]).collect()
}

/// Trace segments (client stream), JVM metrics (unary) and both Management calls, each with the
/// agent's metadata, reach `upstream` unchanged through `target`, and its answers come back.
fn check_agent_calls(target: &str, upstream: &Upstream) {
    let metadata = metadata_args(&AGENT_METADATA);
    let cases: [(&str, Vec<&str>); 4] = [
        (TRACE_COLLECT, vec!["segments", "--count", "7", "--size", "300"]),
        (JVM_COLLECT, vec!["jvm"]),
        (
            REPORT_PROPERTIES,
            vec!["properties", "--service", "mall-order-service", "--instance", "order-1", "--prop", "language=java"],
        ),
        (KEEP_ALIVE, vec!["keepalive", "--service", "mall-order-service", "--instance", "order-1"]),
    ];
    let mut headers = HeaderCheck::default();
    for (path, command) in cases {
        let args: Vec<&str> = metadata.iter().map(String::as_str).chain(command).collect();
        let result = client(target, &args);
        assert_eq!(result["code"], "OK", "{path}: {result}");
        let call = upstream.ended_call(path);
        assert_passed_through(&result, &call, &AGENT_METADATA, &mut headers);
        if path == TRACE_COLLECT {
            assert_eq!(call.messages.len(), 7);
        }
        // The default answer names the upstream: it came from there.
        assert_eq!(result["commands"][0][0]["args"][0], json!(["upstream", upstream.name]), "{result}");
        // The upstream sent no response headers of its own.
        headers.compare(path, "headers", &pairs(&result["initial_metadata"]), &[]);
    }
    headers.assert_unchanged();
}

fn status_scenario() -> Value {
    json!({
        JVM_COLLECT: {"code": "INVALID_ARGUMENT", "details": "metric too old: 100% ✓ (retry later)", "responses": [],
                      "trailers": [["x-reason", "too-old"], ["x-detail-bin", "AP8QgA=="]]},
        KEEP_ALIVE: {"code": "NOT_FOUND", "details": "no such instance", "responses": []},
        REPORT_PROPERTIES: {"initial_metadata": [["x-oap-node", "oap-2"]], "trailers": [["x-oap-took-ms", "3"]],
                            "responses": [{"commands": [{"command": "Noop", "args": [["k", "v"]]}]}]},
        "/foo.Bar/baz": {"responses": [{"b64": "AAECAwT/"}], "trailers": [["x-unknown", "yes"]]},
        "/foo.Bar/watch": {"responses": [{"b64": "AQ=="}, {"b64": ""}, {"b64": "AgM="}], "repeat": 2,
                           "code": "ABORTED", "details": "stream reset by the OAP", "trailers": [["x-at", "6"]]},
        "/foo.Bar/chat": {"mode": "echo", "trailers": [["x-echoed", "3"]]},
    })
}

/// Statuses, messages and trailers the upstream ends calls with reach the client exactly, on
/// known and unknown paths, for every kind of call.
fn check_statuses(target: &str, upstream: &Upstream) {
    let cases: [(&str, &str, Vec<&str>, Option<Value>); 6] = [
        (JVM_COLLECT, "INVALID_ARGUMENT", vec!["jvm"], None),
        (KEEP_ALIVE, "NOT_FOUND", vec!["keepalive", "--service", "s", "--instance", "i"], None),
        (
            REPORT_PROPERTIES,
            "OK",
            vec!["properties", "--service", "s", "--instance", "i"],
            Some(json!([["x-oap-node", "oap-2"]])),
        ),
        ("/foo.Bar/baz", "OK", vec!["raw", "--path", "/foo.Bar/baz", "--kind", "unary", "--message", "/w=="], None),
        (
            "/foo.Bar/watch",
            "ABORTED",
            vec!["raw", "--path", "/foo.Bar/watch", "--kind", "server_stream", "--message", "Cg=="],
            None,
        ),
        (
            "/foo.Bar/chat",
            "OK",
            vec![
                "raw",
                "--path",
                "/foo.Bar/chat",
                "--kind",
                "bidi",
                "--message",
                "AQ==",
                "--message",
                "",
                "--message",
                "AgM=",
            ],
            None,
        ),
    ];
    let mut headers = HeaderCheck::default();
    for (path, code, args, initial) in cases {
        let result = client(target, &args);
        assert_eq!(result["code"], code, "{path}: {result}");
        let call = upstream.ended_call(path);
        assert_passed_through(&result, &call, &[], &mut headers);
        headers.compare(path, "headers", &pairs(&result["initial_metadata"]), &pairs(&initial.unwrap_or(json!([]))));
    }
    let watched = client(target, &["raw", "--path", "/foo.Bar/watch", "--kind", "server_stream"]);
    assert_eq!(strings(&watched["responses"]).len(), 6, "every message before the error status: {watched}");
    headers.assert_unchanged();
}

/// The client's deadline reaches the upstream (what is left of it), and a call without one
/// gets none on the way.
fn check_deadline(target: &str, upstream: &Upstream) {
    let result = client(target, &["--timeout", "20", "jvm"]);
    assert_eq!(result["code"], "OK");
    let with = upstream.ended_call(JVM_COLLECT);
    let remaining = with.time_remaining.expect("a deadline at the upstream");
    assert!(remaining > 0.0 && remaining <= 20.0, "{remaining} s left of 20 s");
    // Not much lost on the way, even on a loaded machine.
    assert!(remaining > 10.0, "{remaining} s left of 20 s");
    let result = client(target, &["keepalive", "--service", "s", "--instance", "i"]);
    assert_eq!(result["code"], "OK");
    assert_eq!(upstream.ended_call(KEEP_ALIVE).time_remaining, None, "no deadline invented on the way");
}

/// Has `held` cancel its open trace-segment stream: the client sees CANCELLED and the upstream
/// the call terminated. The call as the upstream saw it, for what else a test asserts of it.
fn cancel_trace_stream(mut held: HeldClient, upstream: &Upstream) -> Call {
    held.say("cancel");
    let result = held.result();
    assert_eq!(result["code"], "CANCELLED", "{result}");
    let call = upstream.ended_call(TRACE_COLLECT);
    assert_eq!(call.terminated, Some(true), "cancelled at the upstream: {call:?}");
    call
}

/// A client that cancels its open stream: the upstream sees the call cancelled.
fn check_cancel(target: &str, upstream: &Upstream) {
    let held = HeldClient::start(target, &["segments", "--count", "3"]);
    held.wait_sent();
    upstream.wait_until("three segments arrived", |calls| calls.iter().any(|c| c.messages.len() == 3));
    let call = cancel_trace_stream(held, upstream);
    // (grpcio's server may end the request stream of a cancelled call as if half-closed, and
    // the handler may then try to answer; the cancellation stops it before it can finish.)
    assert!(call.status.is_none(), "the upstream never finished the call: {call:?}");
}

/// The checks themselves, with the client talking to the upstream directly: they hold for a
/// perfect pass-through.
#[test]
fn the_checks_hold_for_a_direct_connection() {
    if !grpcio_available() {
        return;
    }
    let checks: [(Value, Check); 4] = [
        (json!({}), check_agent_calls),
        (status_scenario(), check_statuses),
        (json!({}), check_deadline),
        (json!({}), check_cancel),
    ];
    for (scenario, check) in checks {
        let upstream = Upstream::start("direct", &scenario);
        check(&upstream.addr(), &upstream);
    }
}

/// A check of the pass-through: the client at `target`, the OAP `upstream`.
type Check = fn(&str, &Upstream);

/// Runs `check` with the client talking through a gateway in front of one OAP playing `scenario`
/// (when grpcio is installed).
fn through_a_gateway(scenario: &Value, check: Check) {
    if !grpcio_available() {
        return;
    }
    let upstream = Upstream::start("oap-1", scenario);
    let server = gateway(&[upstream.addr()]);
    check(&server.grpc_addr, &upstream);
}

#[test]
fn agent_calls_reach_the_oap_byte_for_byte_and_its_answers_come_back() {
    through_a_gateway(&json!({}), check_agent_calls);
}

#[test]
fn statuses_messages_and_trailers_come_back_exactly_on_any_path() {
    through_a_gateway(&status_scenario(), check_statuses);
}

#[test]
fn a_deadline_reaches_the_oap() {
    through_a_gateway(&json!({}), check_deadline);
}

#[test]
fn a_cancelled_stream_is_cancelled_at_the_oap() {
    through_a_gateway(&json!({}), check_cancel);
}

/// Segments larger than an HTTP/2 frame and than the default flow-control windows arrive whole
/// and unchanged.
#[test]
fn large_segments_pass_byte_for_byte() {
    through_a_gateway(&json!({}), |target, upstream| {
        let result = client(target, &["segments", "--count", "5", "--size", "1500000"]);
        assert_eq!(result["code"], "OK", "{result}");
        let call = upstream.ended_call(TRACE_COLLECT);
        assert_eq!(call.messages.len(), 5);
        assert_eq!(call.messages, strings(&result["requests"]), "the segments at the upstream");
        assert_eq!(strings(&result["responses"]), call.replies);
    });
}

/// An OAP killed while a trace stream to it is open: the stream ends with UNAVAILABLE, and new
/// agent connections go to the OAP that is left.
#[test]
fn a_dead_oap_ends_its_streams_with_unavailable_and_new_connections_go_to_a_live_one() {
    if !grpcio_available() {
        return;
    }
    let mut upstreams = [Upstream::start("oap-a", &json!({})), Upstream::start("oap-b", &json!({}))];
    let server = gateway(&[upstreams[0].addr(), upstreams[1].addr()]);
    let held = HeldClient::start(&server.grpc_addr, &["segments", "--count", "3"]);
    held.wait_sent();
    let give_up = Instant::now() + PATIENCE;
    let pinned = loop {
        if let Some(i) = upstreams.iter().position(|u| u.calls().iter().any(|c| c.messages.len() == 3)) {
            break i;
        }
        assert!(Instant::now() < give_up, "the stream reached neither upstream");
        std::thread::sleep(Duration::from_millis(20));
    };
    let live = 1 - pinned;
    upstreams[pinned].kill();
    let result = held.result();
    assert_eq!(result["code"], "UNAVAILABLE", "the open stream to the dead OAP: {result}");

    for _ in 0..3 {
        let result = client(&server.grpc_addr, &["jvm"]);
        assert_eq!(result["code"], "OK", "a new connection after the OAP died: {result}");
        assert_eq!(result["commands"][0][0]["args"][0], json!(["upstream", upstreams[live].name]), "{result}");
    }
    let calls = upstreams[live].calls();
    assert_eq!(calls.iter().filter(|c| c.path == JVM_COLLECT && c.terminated == Some(false)).count(), 3, "{calls:#?}");
    assert!(calls.iter().all(|c| c.path != TRACE_COLLECT), "the stream never moved: {calls:#?}");
}

fn assert_cds_answers(addr: &str) {
    let result = client(addr, &["--timeout", "10", "cds", "--service", "mall-order-service"]);
    assert_eq!(result["code"], "OK", "{result}");
    let command = &result["commands"][0][0];
    assert_eq!(command["command"], "ConfigurationDiscoveryCommand", "{result}");
    let args = pairs(&command["args"]);
    assert_eq!(args[0].0, "SerialNumber");
    assert_eq!(args[1].0, "UUID");
    assert!(args.contains(&("agent.sample_n_per_3_secs".to_owned(), "10".to_owned())), "{args:?}");
}

/// Configuration discovery is answered by skyconf itself: with every OAP gone (and with none
/// there from the start) agents still get their configuration, while forwarded calls fail
/// with UNAVAILABLE.
#[test]
fn configuration_discovery_answers_with_every_oap_down() {
    if !grpcio_available() {
        return;
    }
    let mut upstreams = [Upstream::start("oap-a", &json!({})), Upstream::start("oap-b", &json!({}))];
    let addrs = [upstreams[0].addr(), upstreams[1].addr()];
    let server = gateway(&addrs);
    assert_eq!(client(&server.grpc_addr, &["jvm"])["code"], "OK");
    for upstream in &mut upstreams {
        upstream.kill();
    }
    assert_cds_answers(&server.grpc_addr);
    let forwarded = client(&server.grpc_addr, &["--timeout", "10", "jvm"]);
    assert_eq!(forwarded["code"], "UNAVAILABLE", "{forwarded}");
    assert_cds_answers(&server.grpc_addr);

    // Started with both OAPs already gone.
    let dead = gateway(&addrs);
    assert_cds_answers(&dead.grpc_addr);
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// 200 MB of trace segments pushed into a stream whose OAP never reads: the client is held back
/// by flow control, and skyconf does not buffer what it cannot deliver.
#[test]
fn a_stalled_oap_pushes_back_to_the_agent_and_skyconf_buffers_little() {
    const TOTAL: u64 = 200_000_000;
    const BOUND_KIB: u64 = 32 * 1024;
    if !grpcio_available() {
        return;
    }
    let upstream = Upstream::start("stalled", &json!({TRACE_COLLECT: {"mode": "stall"}}));
    let server = gateway(&[upstream.addr()]);
    // The forwarding path warmed up: a connection to the OAP exists.
    assert_eq!(client(&server.grpc_addr, &["jvm"])["code"], "OK");
    let before = status_kib(server.pid(), "VmRSS:");
    let peak_before = status_kib(server.pid(), "VmHWM:");

    let held = HeldClient::start(&server.grpc_addr, &["flood", "--total", &TOTAL.to_string()]);
    // The client takes another MiB each time flow control lets it; it is blocked once no MiB
    // has gone for 3 s.
    let mut pushed = 0;
    while let Some(line) = held.next_line(Duration::from_secs(3)) {
        assert_ne!(line["event"], "sent", "all {TOTAL} bytes went through a stalled OAP");
        assert_eq!(line["event"], "progress", "{line}");
        pushed = line["bytes"].as_u64().unwrap();
    }
    assert!(pushed > 0 && pushed < TOTAL, "{pushed} bytes taken");
    let peak = status_kib(server.pid(), "VmHWM:");
    let now = status_kib(server.pid(), "VmRSS:");
    // A new peak since `before` is the most skyconf held; else the peak predates the flood.
    let grown = if peak > peak_before { peak } else { now }.saturating_sub(before);
    assert!(
        grown < BOUND_KIB,
        "skyconf grew by {grown} KiB (from {before} KiB; peak {peak} KiB, now {now} KiB) while the client pushed \
         {pushed} bytes into a stalled stream"
    );
    eprintln!("stalled OAP: the client pushed {pushed} bytes; skyconf grew by {grown} KiB");
    upstream.wait_until("the stalled call is open", |calls| calls.iter().any(|c| c.path == TRACE_COLLECT));
    let call = cancel_trace_stream(held, &upstream);
    assert!(call.messages.is_empty(), "the stalled upstream never read: {call:?}");
}

/// reportInstanceProperties passes through to the OAP, and skyconf shows the instance it names,
/// with its properties and agent version, in `GET /api/v1/instances`.
#[test]
fn reported_instance_properties_show_in_the_admin_api() {
    if !grpcio_available() {
        return;
    }
    let upstream = Upstream::start("oap-1", &json!({}));
    let server = gateway(&[upstream.addr()]);
    let properties = [
        ("hostname", "order-host-1"),
        ("ipv4", "10.0.0.7"),
        ("ipv4", "172.17.0.3"),
        ("language", "java"),
        ("OS Name", "Linux"),
    ];
    let mut args = vec!["--metadata", "agent-version=9.1.0", "properties", "--service", "mall-order-service"];
    args.extend(["--instance", "order-1@10.0.0.7"]);
    let props: Vec<String> = properties.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for prop in &props {
        args.extend(["--prop", prop]);
    }
    // The connection stays open while the instance is looked at: an identity lives as long as
    // its connection.
    let reporter = HeldClient::start(&server.grpc_addr, &args);
    let result = loop {
        let line = reporter.next_line(PATIENCE).expect("the call is answered");
        if line.get("code").is_some() {
            break line;
        }
    };
    assert_eq!(result["code"], "OK", "{result}");
    // (Response headers and trailers are the business of the tests above.)
    let mut headers = HeaderCheck::default();
    assert_passed_through(
        &result,
        &upstream.ended_call(REPORT_PROPERTIES),
        &[("agent-version", "9.1.0")],
        &mut headers,
    );

    let admin = AdminClient::new(&server.admin_addr);
    let give_up = Instant::now() + PATIENCE;
    let instance = loop {
        let reply = admin.send_blocking("GET", "/api/v1/instances");
        assert_eq!(reply.status, 200, "{reply:?}");
        let body = reply.json();
        let found = body["instances"].as_array().and_then(|all| {
            all.iter().find(|i| i["service"] == "mall-order-service" && i["instance"] == "order-1@10.0.0.7").cloned()
        });
        if let Some(instance) = found {
            break instance;
        }
        assert!(Instant::now() < give_up, "the instance never showed: {body}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let shown: Vec<(String, String)> = instance["properties"]
        .as_array()
        .unwrap_or_else(|| panic!("{instance}"))
        .iter()
        .map(|p| (p["key"].as_str().unwrap().to_owned(), p["value"].as_str().unwrap().to_owned()))
        .collect();
    let want: Vec<(String, String)> = properties.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    assert_eq!(shown, want, "{instance}");
    assert_eq!(instance["agent_version"], "9.1.0", "{instance}");
    assert!(instance["peer"].as_str().is_some_and(|p| p.starts_with("127.0.0.1:")), "{instance}");
    assert!(instance["last_seen_ms"].as_u64().is_some_and(|t| t > 0), "{instance}");
    assert!(instance["services"].is_array(), "{instance}");

    // keepAlive keeps the properties already known.
    let ping =
        client(&server.grpc_addr, &["keepalive", "--service", "mall-order-service", "--instance", "order-1@10.0.0.7"]);
    assert_eq!(ping["code"], "OK");
    upstream.ended_call(KEEP_ALIVE);
    let body = admin.send_blocking("GET", "/api/v1/instances").json();
    let again = body["instances"]
        .as_array()
        .and_then(|all| all.iter().find(|i| i["instance"] == "order-1@10.0.0.7"))
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(again["properties"], instance["properties"], "{body}");

    // The reporting agent goes: its instance goes with its connection.
    drop(reporter);
    let give_up = Instant::now() + PATIENCE;
    loop {
        let body = admin.send_blocking("GET", "/api/v1/instances").json();
        let left =
            body["instances"].as_array().is_some_and(|all| all.iter().any(|i| i["instance"] == "order-1@10.0.0.7"));
        if !left {
            break;
        }
        assert!(Instant::now() < give_up, "the instance outlived its connection: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// N6 with independent HTTP/2 stacks on both sides: a grpcio OAP stand-in that allows 8 streams
/// per connection, one grpcio client holding 40 streams open through skyconf, and other agents'
/// calls that all still reach the OAP, over the connections skyconf opens as it needs them (the
/// `skyconf.gateway` settings read from skyconf.yaml).
#[test]
fn an_oaps_stream_limit_is_not_the_fleets_with_grpcio_on_both_sides() {
    if !grpcio_available() {
        return;
    }
    let upstream = Upstream::start_with("oap-a", &json!({TRACE_COLLECT: {"mode": "stall"}}), &["--max-streams", "8"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("skyconf.yaml");
    let yaml = format!(
        "skyconf:\n  gateway:\n    upstreams: [\"{}\"]\n    connectionsPerUpstream: 1\n    maxConnectionsPerUpstream: 8\n    maxQueuedCalls: 100\n    queueWaitSecs: 7\n",
        upstream.addr()
    );
    std::fs::write(&config, yaml).unwrap();
    let mut command = serve_command();
    command.arg("--file").arg(example_document()).arg("--config").arg(&config);
    let server = Server::spawn(command);
    let admin = AdminClient::new(&server.admin_addr);
    let gateway = || admin.send_blocking("GET", "/api/v1/status").json()["gateway"].clone();
    let give_up = Instant::now() + PATIENCE;
    while gateway()["upstreams"][0]["up"] != true {
        assert!(Instant::now() < give_up, "never connected: {}", gateway());
        std::thread::sleep(Duration::from_millis(20));
    }
    let settings = gateway();
    assert_eq!(settings["max_connections_per_upstream"], 8, "{settings}");
    assert_eq!(settings["max_queued_calls"], 100);
    assert_eq!(settings["queue_wait_ms"], 7000);

    let mut hog = HeldClient::start(&server.grpc_addr, &["hold", "--streams", "40"]);
    hog.wait_sent();
    upstream.wait_until("the 40 held streams", |calls| calls.iter().filter(|c| c.path == TRACE_COLLECT).count() == 40);
    let agents: Vec<_> = (0..4)
        .map(|_| {
            let addr = server.grpc_addr.clone();
            std::thread::spawn(move || client(&addr, &["--timeout", "5", "jvm"]))
        })
        .collect();
    for agent in agents {
        let result = agent.join().unwrap();
        assert_eq!(result["code"], "OK", "{result}");
        assert_eq!(result["commands"][0][0]["args"][0], json!(["upstream", "oap-a"]), "{result}");
    }
    let oap = gateway()["upstreams"][0].clone();
    assert_eq!(oap["stream_limit"], 8, "{oap}");
    assert_eq!(oap["calls_in_flight"], 40, "{oap}");
    let connections = oap["connections"].as_u64().unwrap();
    assert!((5..=8).contains(&connections), "{oap}");
    hog.say("cancel");
    assert_eq!(hog.result()["codes"], json!({"CANCELLED": 40}));
}
