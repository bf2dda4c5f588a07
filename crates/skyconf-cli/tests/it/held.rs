//! Held polls seen by an independent client: the grpcio (C-core) poller of
//! `tests/interop/cds_client.py java-poll`, timed as the Java agent times its polls (a 30 s
//! deadline per call, a fixed rate), against `skyconf serve --file` as a process.
//!
//! - every file write made while the poll is held reaches the client within a second (p99), and no
//!   call ends in an error: no DEADLINE_EXCEEDED;
//! - a hold that sees no change ends as an OK "unchanged" answer before the 30 s deadline, and
//!   the next poll is held at once;
//! - SIGTERM releases the held poll as an OK "unchanged" answer, not an error, and the server
//!   stops within a second, with a final "Stopped." line;
//! - a call without a deadline (grpcio's default user agent) is answered at once, not held.
//!
//! The grpcio client needs python3 with grpcio and grpcio-tools: `scripts/test.sh` installs them
//! and sets SKYCONF_REQUIRE_INTEROP=1 so a missing dependency fails instead of skipping.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skyconf_testkit::latency::percentiles;
use skyconf_testkit::server::AdminClient;

use crate::util::{Server, example_document, grpcio_available, json_line, read_lines, repo_root};

pub(crate) const SERVICE: &str = "mall-order-service";
const WRITES: u32 = 20;

/// The grpcio client as a child process, killed when dropped; its stdout's JSON lines are
/// collected as they come.
struct Grpcio {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Grpcio {
    /// `cds_client.py ARGS...` against `server`.
    fn spawn(server: &Server, args: &[&str]) -> Self {
        let mut child = crate::util::python()
            .arg(repo_root().join("tests/interop/cds_client.py"))
            .args(args)
            .args(["--addr", &server.grpc_addr, "--service", SERVICE])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = read_lines(child.stdout.take().unwrap(), |line| json_line(&line));
        Self { child, lines }
    }

    /// The poller, as the Java agent times it: a 30 s deadline, a fixed rate of `interval`.
    fn java_poll(server: &Server, interval: &str) -> Self {
        Self::spawn(server, &["java-poll", "--interval", interval])
    }

    /// The next line, which must come within `within`.
    fn next(&self, what: &str, within: Duration) -> Value {
        self.lines.recv_timeout(within).unwrap_or_else(|e| panic!("{what}: no line from the grpcio client ({e})"))
    }

    /// The next line, which must be an OK answer (never an error).
    fn next_answer(&self, what: &str, within: Duration) -> Value {
        let line = self.next(what, within);
        assert!(line.get("error").is_none(), "{what}: the call failed: {line}");
        line
    }

    /// Waits for the process to exit; its status must be success.
    fn finish(mut self, within: Duration) -> Vec<Value> {
        let give_up = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < give_up, "the grpcio client did not finish within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "the grpcio client failed: {status}");
        self.lines.try_iter().collect()
    }
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The served file in a temp dir: a copy of the tests' example document.
pub(crate) fn served_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent-configurations.yaml");
    std::fs::copy(example_document(), &path).unwrap();
    (dir, path)
}

/// A server on a [`served_copy`], with its admin client, when grpcio is installed for the
/// independent client.
fn served_for_grpcio() -> Option<(tempfile::TempDir, PathBuf, Server, AdminClient)> {
    if !grpcio_available() {
        return None;
    }
    let (dir, path) = served_copy();
    let server = Server::start(&path);
    let admin = AdminClient::new(&server.admin_addr);
    Some((dir, path, server, admin))
}

/// Replaces `path` by rename, as editors and ConfigMap mounts do.
pub(crate) fn replace(path: &Path, text: &str) {
    let staged = path.with_extension("yaml.tmp");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// A metric's line (`name{labels} value`), or empty when absent.
pub(crate) fn metric(admin: &AdminClient, name: &str) -> String {
    let body = admin.send_blocking("GET", "/metrics").body;
    body.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' ')).unwrap_or_default().to_owned()
}

/// Waits (bounded) until `metric(name)` reads `name value`.
pub(crate) fn wait_for_metric(admin: &AdminClient, name: &str, value: u64, within: Duration) {
    let want = format!("{name} {value}");
    let give_up = Instant::now() + within;
    loop {
        let now = metric(admin, name);
        if now == want {
            return;
        }
        assert!(Instant::now() < give_up, "never happened: {want} (last seen: {now:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) const HELD: &str = "skyconf_held_polls";
const CHANGED: &str = "skyconf_held_polls_released_total{reason=\"changed\"}";
pub(crate) const EXPIRED: &str = "skyconf_held_polls_released_total{reason=\"expired\"}";
const SHUTDOWN: &str = "skyconf_held_polls_released_total{reason=\"shutdown\"}";
const REFUSED: [&str; 2] =
    ["skyconf_held_polls_refused_total{limit=\"total\"}", "skyconf_held_polls_refused_total{limit=\"connection\"}"];

/// The example document with the service's sample rate set to `value` (10 in the example).
pub(crate) fn edited(value: u32) -> String {
    let original = std::fs::read_to_string(example_document()).unwrap();
    let text = original.replace("agent.sample_n_per_3_secs: 10\n", &format!("agent.sample_n_per_3_secs: {value}\n"));
    assert!(value == 10 || text != original, "the example document sets the service's sample rate to 10");
    text
}

/// The digest skyconf serves the service for `text`.
pub(crate) fn digest_of(text: &str) -> String {
    skyconf_core::read(text).unwrap().get(SERVICE).unwrap().digest().as_str().to_owned()
}

pub(crate) fn epoch_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// 20 file writes, each made once the grpcio client's poll is held: every command reaches it,
/// p99 write → receipt ≤ 1 s, no call fails; then SIGTERM answers the held poll "unchanged".
#[test]
fn a_grpcio_poller_with_the_java_timing_gets_every_write_within_a_second_and_an_ok_answer_at_shutdown() {
    let Some((_dir, path, server, admin)) = served_for_grpcio() else { return };
    // A short interval so the next poll follows a command quickly; each call still carries the
    // Java agent's 30 s deadline, which is what gets it held.
    let grpcio = Grpcio::java_poll(&server, "0.5");
    let first = grpcio.next_answer("the first poll", Duration::from_secs(30));
    let mut uuid = first["uuid"].as_str().expect("the first poll gets the configuration").to_owned();

    let mut delays = Vec::new();
    for n in 0..WRITES {
        wait_for_metric(&admin, HELD, 1, Duration::from_secs(10));
        let value = 1000 + n;
        let text = edited(value);
        let digest = digest_of(&text);
        let written = SystemTime::now();
        replace(&path, &text);
        let line = grpcio.next_answer(&format!("write {n}"), Duration::from_secs(10));
        assert_eq!(line["uuid"].as_str(), Some(digest.as_str()), "write {n}: the held poll gets its command: {line}");
        assert_eq!(line["config"]["agent.sample_n_per_3_secs"], value.to_string(), "{line}");
        assert_ne!(line["uuid"].as_str(), Some(uuid.as_str()));
        uuid = digest;
        let receipt = line["t"].as_f64().unwrap() - epoch_seconds(written);
        delays.push(Duration::from_secs_f64(receipt.max(0.0)));
    }
    let p = percentiles(&mut delays);
    eprintln!("file write → command at the grpcio client, {WRITES} writes: {p}");
    assert!(p.p99 <= Duration::from_secs(1), "{delays:?}");
    assert_eq!(metric(&admin, CHANGED), format!("{CHANGED} {WRITES}"));

    // SIGTERM while the poll is held: the call ends OK and empty, before the server exits.
    wait_for_metric(&admin, HELD, 1, Duration::from_secs(10));
    let (status, took, log) = server.terminate_logged();
    assert!(status.success(), "{status}");
    let line = grpcio.next_answer("the held poll at shutdown", Duration::from_secs(10));
    assert_eq!(line["unchanged"], true, "the held poll is answered \"unchanged\": {line}");
    assert!(took < Duration::from_secs(1), "the stop with a held poll took {took:?}");
    // One final line says it stopped, and how long that took.
    let last: Value = serde_json::from_str(log.last().expect("a final line")).unwrap();
    assert_eq!(last["fields"]["message"], "Stopped.", "{log:#?}");
    assert!(last["fields"]["took_ms"].as_u64().unwrap() < 1000, "{last}");
}

/// A hold that sees no change ends OK and empty 2 s before the 30 s deadline, less up to a random
/// tenth (never DEADLINE_EXCEEDED), and the Java agent's next poll, due since, is held at once.
#[test]
fn an_unchanged_grpcio_poll_ends_ok_before_its_30s_deadline_and_the_next_one_is_held() {
    let Some((_dir, _, server, admin)) = served_for_grpcio() else { return };
    let grpcio = Grpcio::java_poll(&server, "20");
    let first = grpcio.next_answer("the first poll", Duration::from_secs(30));
    assert!(first["uuid"].is_string(), "{first}");
    wait_for_metric(&admin, HELD, 1, Duration::from_secs(30));
    let line = grpcio.next_answer("the held poll", Duration::from_secs(40));
    assert_eq!(line["unchanged"], true, "{line}");
    let elapsed = line["elapsed"].as_f64().unwrap();
    // 28 s, shortened by up to 2.8 s so a fleet's holds do not all end together.
    assert!((25.0..30.0).contains(&elapsed), "held {elapsed} s: until 2 s before the deadline, less the jitter");
    assert_eq!(metric(&admin, EXPIRED), format!("{EXPIRED} 1"));
    // 25-28 s outlast the 20 s interval: the next poll starts at once and is held again.
    wait_for_metric(&admin, HELD, 1, Duration::from_secs(10));
    assert_eq!(metric(&admin, SHUTDOWN), format!("{SHUTDOWN} 0"));
}

/// grpcio without a deadline, with its default user agent (`grpc-python/... grpc-c/...`), is
/// answered at once, as h2load and grpcurl are; the same call with a 30 s deadline is held.
#[test]
fn a_grpcio_call_without_a_deadline_is_answered_at_once() {
    let Some((_dir, _, server, admin)) = served_for_grpcio() else { return };
    let digest = digest_of(&edited(10));

    let started = Instant::now();
    let answered =
        Grpcio::spawn(&server, &["fetch", "--uuid", &digest, "--timeout", "0"]).finish(Duration::from_secs(20));
    assert_eq!(answered, [serde_json::json!([])], "unchanged");
    eprintln!("a call without a deadline, python start-up included: {:?}", started.elapsed());
    assert_eq!(metric(&admin, HELD), format!("{HELD} 0"));
    for name in [CHANGED, EXPIRED, SHUTDOWN].into_iter().chain(REFUSED) {
        assert_eq!(metric(&admin, name), format!("{name} 0"), "the call was never held");
    }

    // The control: the same call with the Java agent's deadline is held.
    let held = Grpcio::spawn(&server, &["fetch", "--uuid", &digest, "--timeout", "30"]);
    wait_for_metric(&admin, HELD, 1, Duration::from_secs(20));
    drop(held);
}
