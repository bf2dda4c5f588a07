//! skyconf with clients written by others, over real sockets, in the default configuration
//! (held polls on, the agents' real deadlines):
//!
//! - grpc-js (npm `@grpc/grpc-js` with `@grpc/proto-loader`; `tests/interop/grpc-js/cds_poller.js`)
//!   polls CDS with the Java agent's 30 s deadline against `skyconf serve --file`: it gets the
//!   configuration, a change made while its poll is held reaches it within a second, a hold that
//!   sees no change ends OK and "unchanged" before the deadline (never DEADLINE_EXCEEDED), and
//!   SIGTERM of skyconf answers the held poll OK and "unchanged" (never UNAVAILABLE);
//! - grpc-java over Netty (Debian's `libgrpc-java`, the Java agent's stack;
//!   `tests/interop/grpc-java/src/CdsPoller.java`) does the same, after a `keepAlive` on the same
//!   channel that lists its instance with its `agent-version`;
//! - the SkyWalking Python agent (PyPI `apache-skywalking`; `tests/interop/swpython/traced_app.py`)
//!   reports to skyconf in gateway mode in front of a recording grpcio OAP stand-in
//!   (`tests/gateway/upstream.py`): its `ManagementService` calls and its trace segments reach the
//!   stand-in; its instance is listed by `GET /api/v1/instances` with its properties while it runs
//!   and leaves the listing within a second of a `kill -9` (an identity lives as long as its
//!   connection).
//!
//! `scripts/deps/interop.sh` installs the clients inside the repository (git-ignored) and sets
//! SKYCONF_REQUIRE_INTEROP=1, so a missing client fails instead of skipping.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use prost::Message as _;
use serde_json::{Value, json};
use skyconf_proto::v3::{InstancePingPkg, InstanceProperties};
use skyconf_testkit::server::AdminClient;

use crate::gateway::Upstream;
use crate::held::{
    EXPIRED, HELD, SERVICE, digest_of, edited, epoch_seconds, metric, replace, served_copy, wait_for_metric,
};
use crate::util::{Server, example_document, grpcio_available, json_line, read_lines, repo_root, serve_command};

/// How long any wait for another process may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// Whether `available` holds; when not, says `why`, and fails instead when
/// `SKYCONF_REQUIRE_INTEROP` is set.
fn required(available: bool, why: &str) -> bool {
    if !available {
        assert!(std::env::var_os("SKYCONF_REQUIRE_INTEROP").is_none(), "{why} (scripts/deps/interop.sh installs it)");
        eprintln!("skipped: {why} (scripts/deps/interop.sh installs it)");
    }
    available
}

fn grpc_js_dir() -> PathBuf {
    repo_root().join("tests/interop/grpc-js")
}

fn grpc_java_dir() -> PathBuf {
    repo_root().join("tests/interop/grpc-java")
}

fn swpython_dir() -> PathBuf {
    repo_root().join("tests/interop/swpython")
}

/// Kills and reaps a child process when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A CDS poller written by others as a child process; its JSON lines are collected as they come.
struct Poller {
    _child: Reaped,
    lines: mpsc::Receiver<Value>,
}

impl Poller {
    fn spawn(mut command: Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let lines = read_lines(child.stdout.take().unwrap(), |line| json_line(&line));
        Self { _child: Reaped(child), lines }
    }

    /// The next line, which must come within `within` and be an OK answer (never an error).
    fn next_answer(&self, what: &str, within: Duration) -> Value {
        let line = self.lines.recv_timeout(within).unwrap_or_else(|e| panic!("{what}: no line from the poller ({e})"));
        assert!(line.get("error").is_none(), "{what}: the call failed: {line}");
        assert!(line.get("status").is_none_or(|s| s == "OK"), "{what}: the call failed: {line}");
        line
    }
}

/// `tests/interop/grpc-js/cds_poller.js`.
struct GrpcJs;

impl GrpcJs {
    fn available() -> bool {
        let node = Command::new("node").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
        let installed = grpc_js_dir().join("node_modules/@grpc/grpc-js/package.json").is_file()
            && grpc_js_dir().join("node_modules/@grpc/proto-loader/package.json").is_file();
        required(
            node && installed,
            "node with @grpc/grpc-js and @grpc/proto-loader in tests/interop/grpc-js is not installed",
        )
    }

    /// Polls `server` as the Java agent times it: a 30 s deadline per call, a fixed rate of
    /// `interval` seconds.
    fn java_poll(server: &Server, interval: &str) -> Poller {
        let mut command = Command::new("node");
        command.arg(grpc_js_dir().join("cds_poller.js")).args([
            "--addr",
            &server.grpc_addr,
            "--service",
            SERVICE,
            "--interval",
            interval,
            "--timeout",
            "30",
        ]);
        Poller::spawn(command)
    }
}

/// `tests/interop/grpc-java/src/CdsPoller.java`, compiled by `tests/interop/grpc-java/build.sh`.
struct GrpcJava;

/// The instance name `CdsPoller` sends in its `keepAlive`, and the `agent-version` it sends.
const JAVA_INSTANCE: &str = "grpc-java-poller";

impl GrpcJava {
    fn classpath() -> PathBuf {
        grpc_java_dir().join("build/classpath")
    }

    fn available() -> bool {
        let java = Command::new("java").arg("-version").stderr(Stdio::null()).status().is_ok_and(|s| s.success());
        required(
            java && Self::classpath().is_file(),
            "java with CdsPoller compiled against grpc-java in tests/interop/grpc-java/build is not installed",
        )
    }

    /// A `keepAlive`, then polls of `server` as the Java agent times them (a 30 s deadline per
    /// call, a fixed rate of `interval` seconds), all on one channel.
    fn java_poll(server: &Server, interval: &str) -> Poller {
        let classpath = std::fs::read_to_string(Self::classpath()).unwrap();
        let mut command = Command::new("java");
        command.args(["-cp", classpath.trim(), "CdsPoller"]).args([
            "--addr",
            &server.grpc_addr,
            "--service",
            SERVICE,
            "--instance",
            JAVA_INSTANCE,
            "--interval",
            interval,
            "--timeout",
            "30",
        ]);
        Poller::spawn(command)
    }
}

/// A poller with the Java agent's 30 s deadline: the configuration at once, a change within a
/// second while the poll is held, an "unchanged" answer 2 s (less jitter) before the deadline for
/// the echoed digest, and an OK "unchanged" answer when skyconf gets SIGTERM. `before` sees the
/// server's admin API and the poller first; the poller's next line after it answers the first poll.
///
/// The poll interval is 2 s, not the Java agent's 20 s: the interval only sets when the next poll
/// starts after an answer, while what gets a poll held is its 30 s deadline, which is kept. 20 s
/// would add 20 s of idle waiting after the first answer and after the change, and nothing more.
/// After the unchanged answer (25-28 s, longer than either interval) the next poll starts at once,
/// as the Java agent's does.
fn java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown(
    client: &str,
    start: impl Fn(&Server, &str) -> Poller,
    before: impl Fn(&AdminClient, &Poller),
) {
    let started = Instant::now();
    let (_dir, path) = served_copy();
    let server = Server::start(&path);
    let admin = AdminClient::new(&server.admin_addr);
    let poller = start(&server, "2");
    before(&admin, &poller);

    // The first poll (no digest) gets the configuration at once.
    let first = poller.next_answer("the first poll", PATIENCE);
    assert_eq!(first["uuid"].as_str(), Some(digest_of(&edited(10)).as_str()), "{first}");
    assert_eq!(first["config"]["agent.sample_n_per_3_secs"], "10", "{first}");
    // At once, not held (a hold lasts 25 s or more); loose, for a loaded machine.
    assert!(first["elapsed"].as_f64().unwrap() < 10.0, "answered at once: {first}");

    // The next poll echoes that digest and is held; a change made meanwhile reaches it within a second.
    wait_for_metric(&admin, HELD, 1, PATIENCE);
    let text = edited(77);
    let digest = digest_of(&text);
    let written = SystemTime::now();
    replace(&path, &text);
    let changed = poller.next_answer("the held poll after the change", PATIENCE);
    assert_eq!(changed["uuid"].as_str(), Some(digest.as_str()), "{changed}");
    assert_eq!(changed["config"]["agent.sample_n_per_3_secs"], "77", "{changed}");
    let delay = changed["t"].as_f64().unwrap() - epoch_seconds(written);
    eprintln!("file write → command at {client}: {delay:.3} s");
    assert!(delay <= 1.0, "the change reached the held poll {delay} s after the write");

    // The poll that echoes the new digest is held and, nothing changing, answered "unchanged"
    // 2 s before its 30 s deadline, less up to a tenth (never DEADLINE_EXCEEDED).
    let unchanged = poller.next_answer("the poll echoing the current digest", Duration::from_secs(40));
    assert_eq!(unchanged["unchanged"], true, "{unchanged}");
    let held_for = unchanged["elapsed"].as_f64().unwrap();
    assert!((25.0..30.0).contains(&held_for), "held {held_for} s: until 2 s before the deadline, less the jitter");
    assert_eq!(metric(&admin, EXPIRED), format!("{EXPIRED} 1"));

    // The next poll starts at once and is held; SIGTERM answers it OK and "unchanged".
    wait_for_metric(&admin, HELD, 1, PATIENCE);
    let (status, took, _log) = server.terminate_logged();
    assert!(status.success(), "{status}");
    let last = poller.next_answer("the held poll at shutdown", Duration::from_secs(10));
    assert_eq!(last["unchanged"], true, "the held poll is answered \"unchanged\", not UNAVAILABLE: {last}");
    assert!(took < Duration::from_secs(1), "the stop with a held poll took {took:?}");
    eprintln!("{client} interop test: {:?}", started.elapsed());
}

/// grpc-js with the Java agent's timing (see
/// [`java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown`]).
#[test]
fn grpc_js_with_the_java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown() {
    if !GrpcJs::available() {
        return;
    }
    java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown(
        "grpc-js",
        GrpcJs::java_poll,
        |_, _| {},
    );
}

/// grpc-java over Netty with the Java agent's timing (see
/// [`java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown`]), after
/// a `keepAlive` on the same channel: it is answered OK, and the instance it names is listed with
/// the `agent-version` its metadata carries.
#[test]
fn grpc_java_with_the_java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown() {
    if !GrpcJava::available() {
        return;
    }
    java_timing_gets_changes_within_a_second_unchanged_for_its_digest_and_ok_at_shutdown(
        "grpc-java",
        GrpcJava::java_poll,
        |admin, poller| {
            let ping = poller.next_answer("the keepAlive", PATIENCE);
            assert_eq!(ping["call"], "keepAlive", "{ping}");
            let give_up = Instant::now() + PATIENCE;
            let instance = loop {
                if let [instance] = listed(admin, SERVICE, JAVA_INSTANCE).as_slice() {
                    break instance.clone();
                }
                assert!(Instant::now() < give_up, "the grpc-java poller's instance is never listed");
                std::thread::sleep(Duration::from_millis(20));
            };
            assert_eq!(instance["agent_version"], JAVA_INSTANCE, "{instance}");
        },
    );
}

/// The SkyWalking Python agent instrumenting `traced_app.py`, killed when dropped.
struct PythonAgent {
    child: Reaped,
}

const PY_SERVICE: &str = "interop-python-app";
const PY_INSTANCE: &str = "interop-python-1";

impl PythonAgent {
    fn python() -> PathBuf {
        swpython_dir().join(".venv/bin/python")
    }

    fn available() -> bool {
        let agent = Command::new(Self::python())
            .args(["-c", "import skywalking.agent, skywalking.protocol"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        required(
            agent,
            "the SkyWalking Python agent (apache-skywalking) in tests/interop/swpython/.venv is not installed",
        )
    }

    /// Starts the program with the agent reporting to `collector`, and waits until it says it started.
    fn start(collector: &str) -> Self {
        let mut child = Command::new(Self::python())
            .arg(swpython_dir().join("traced_app.py"))
            .env("SW_AGENT_COLLECTOR_BACKEND_SERVICES", collector)
            .env("SW_AGENT_NAME", PY_SERVICE)
            .env("SW_AGENT_INSTANCE_NAME", PY_INSTANCE)
            .env("SW_AGENT_INSTANCE_PROPERTIES_JSON", r#"{"team": "interop"}"#)
            // Only the agent's errors on stderr: at INFO and WARNING it lists every plugin whose
            // library the program does not use.
            .env("SW_AGENT_LOGGING_LEVEL", "ERROR")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = read_lines(child.stdout.take().unwrap(), |line| json_line(&line));
        let started = lines.recv_timeout(PATIENCE).expect("traced_app.py prints that it started");
        assert_eq!(started["started"], true, "{started}");
        Self { child: Reaped(child) }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// SIGKILL: the process ends without a word, the kernel closes its connections.
    fn kill_9(mut self) {
        let status = Command::new("kill").args(["-KILL", &self.pid().to_string()]).status().unwrap();
        assert!(status.success());
        self.child.0.wait().unwrap();
    }
}

/// The bytes of the first message of the first recorded call on `path`.
fn first_message(upstream: &Upstream, path: &str) -> Vec<u8> {
    let calls = upstream.wait_until(&format!("a message on {path}"), |calls| {
        calls.iter().any(|c| c.path == path && !c.messages.is_empty())
    });
    let call = calls.into_iter().find(|c| c.path == path && !c.messages.is_empty()).unwrap();
    base64::engine::general_purpose::STANDARD.decode(&call.messages[0]).unwrap()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The listed instances named (`service`, `instance`).
fn listed(admin: &AdminClient, service: &str, instance: &str) -> Vec<Value> {
    let reply = admin.send_blocking("GET", "/api/v1/instances");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    let instances = body["instances"].as_array().unwrap_or_else(|| panic!("{body}"));
    instances.iter().filter(|i| i["service"] == service && i["instance"] == instance).cloned().collect()
}

/// Whether the listed instance's properties hold `key` = `value`.
fn has_property(instance: &Value, key: &str, value: &str) -> bool {
    instance["properties"].as_array().is_some_and(|props| {
        props.iter().any(|p| p == &json!([key, value]) || p == &json!({"key": key, "value": value}))
    })
}

/// The Python agent through skyconf's gateway: its ManagementService calls and its segments reach
/// the OAP stand-in, its instance is listed with its properties while it runs, and is gone from
/// the listing within a second of `kill -9`.
#[test]
fn the_python_agent_through_the_gateway_reaches_the_oap_and_is_listed_exactly_while_it_runs() {
    if !PythonAgent::available() || !grpcio_available() {
        return;
    }
    let started = Instant::now();
    // The stand-in answers every call with an empty `Commands`, as an OAP with nothing to say does.
    let upstream = Upstream::start("oap", &json!({"*": {"responses": [{"b64": ""}]}}));
    let mut command = serve_command();
    command.arg("--file").arg(example_document()).arg("--upstream").arg(upstream.addr());
    let server = Server::spawn(command);
    let admin = AdminClient::new(&server.admin_addr);
    let agent = PythonAgent::start(&server.grpc_addr);

    // What the agent sends reaches the OAP through skyconf.
    let properties = InstanceProperties::decode(
        first_message(&upstream, "/skywalking.v3.ManagementService/reportInstanceProperties").as_slice(),
    )
    .unwrap();
    assert_eq!((properties.service.as_str(), properties.service_instance.as_str()), (PY_SERVICE, PY_INSTANCE));
    let reported: Vec<(&str, &str)> =
        properties.properties.iter().map(|p| (p.key.as_str(), p.value.as_str())).collect();
    assert!(reported.contains(&("language", "python")) && reported.contains(&("team", "interop")), "{reported:?}");
    let ping =
        InstancePingPkg::decode(first_message(&upstream, "/skywalking.v3.ManagementService/keepAlive").as_slice())
            .unwrap();
    assert_eq!((ping.service.as_str(), ping.service_instance.as_str()), (PY_SERVICE, PY_INSTANCE));
    let segment = first_message(&upstream, "/skywalking.v3.TraceSegmentReportService/collect");
    for text in [PY_SERVICE, PY_INSTANCE, "GET /interop/work", "interop.compute"] {
        assert!(contains(&segment, text), "the trace segment at the OAP names {text}");
    }
    let calls = upstream.calls();
    let reached = calls.iter().find(|c| c.path.ends_with("/reportInstanceProperties")).unwrap();
    assert!(
        reached.metadata.iter().any(|(k, v)| k == "user-agent" && v.starts_with("grpc-python/")),
        "the agent's own user-agent reaches the OAP: {:?}",
        reached.metadata
    );

    // Listed while it runs, with the properties it reported.
    let give_up = Instant::now() + PATIENCE;
    let instance = loop {
        if let [instance] = listed(&admin, PY_SERVICE, PY_INSTANCE).as_slice() {
            break instance.clone();
        }
        assert!(Instant::now() < give_up, "the Python agent's instance is never listed");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = agent.pid().to_string();
    for (key, value) in [("language", "python"), ("team", "interop"), ("Process No.", pid.as_str())] {
        assert!(has_property(&instance, key, value), "listed with {key} = {value}: {instance}");
    }
    // The Python agent sends no `agent-version` metadata (the Java agent does), so none is listed.
    assert_eq!(instance["agent_version"], Value::Null, "{instance}");
    assert_eq!(instance["duplicate_name"], false, "{instance}");

    // kill -9: the kernel closes the connection; the instance leaves the listing within a second.
    agent.kill_9();
    let killed = Instant::now();
    while !listed(&admin, PY_SERVICE, PY_INSTANCE).is_empty() {
        assert!(killed.elapsed() < Duration::from_secs(1), "still listed {:?} after kill -9", killed.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("the Python agent's instance left the listing {:?} after kill -9", killed.elapsed());
    eprintln!("Python agent interop test: {:?}", started.elapsed());
}
