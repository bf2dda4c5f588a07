//! `skyconf serve` with a stderr that does not take its logs: closed before start-up, closed after
//! the first line, or a full pipe nobody reads. The server must start, serve, reload an edited file
//! and stop on SIGTERM all the same (usability finding 3). Also: no colour codes in piped logs.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use skyconf_testkit::server::AdminClient;

use crate::util::skyconf;

/// How long anything here may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// A loopback address with a port that was free a moment ago (the server's logs, where it says
/// which ephemeral ports it took, cannot be read in these tests).
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// Polls `condition` until it holds; fails after [`PATIENCE`].
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < give_up, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET path` on the admin port: the JSON body, or `None` when nothing answered.
fn admin_get(admin_addr: &str, path: &str) -> Option<serde_json::Value> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(AdminClient::new(admin_addr).try_send("GET", path, &[], "")).ok().map(|reply| reply.json())
}

/// A server process on its admin address, killed when dropped (a failed test leaves none behind).
struct Running {
    child: Child,
    admin_addr: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `skyconf serve --file file` on free ports, in text format with its stderr on `stderr` and
/// `SKYCONF_LOG=log`.
fn spawn_serve(file: &Path, log: &str, stderr: Stdio) -> Running {
    let (grpc_addr, admin_addr) = (free_addr(), free_addr());
    let mut command: Command = skyconf();
    command
        .args(["serve", "--grpc-addr", &grpc_addr, "--admin-addr", &admin_addr, "--file"])
        .arg(file)
        .env("SKYCONF_LOG", log)
        .stdout(Stdio::null())
        .stderr(stderr);
    Running { child: command.spawn().unwrap(), admin_addr }
}

/// Ready with `services` services, per `/readyz`.
fn ready_with(admin_addr: &str, services: u64) -> bool {
    admin_get(admin_addr, "/readyz").is_some_and(|json| json["ready"] == true && json["services"] == services)
}

/// Waits for the server to serve `file`, edits the file and waits for the reload, then stops the
/// server with SIGTERM and expects a clean exit.
fn serves_reloads_and_stops(mut server: Running, file: &Path) {
    eventually("the server is ready with 1 service", || ready_with(&server.admin_addr, 1));
    std::fs::write(
        file,
        "configurations:\n  svc-a:\n    agent.sample_rate: 0.5\n  svc-b:\n    agent.sample_rate: 0.25\n",
    )
    .unwrap();
    eventually("the edited file is loaded", || ready_with(&server.admin_addr, 2));
    let status = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let mut exit = None;
    eventually("the server exits on SIGTERM", || {
        exit = server.child.try_wait().unwrap();
        exit.is_some()
    });
    assert!(exit.unwrap().success(), "SIGTERM is a clean exit: {exit:?}");
}

/// `agent.yaml` with one service, in a temporary directory.
fn one_service_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, "configurations:\n  svc-a:\n    agent.sample_rate: 0.5\n").unwrap();
    (dir, path)
}

#[test]
fn serve_keeps_serving_when_stderr_is_closed_before_start_up() {
    // Finding: exit status 101 (a panic in tracing's error path) before the port was open.
    let (_dir, file) = one_service_file();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let server = spawn_serve(&file, "debug", writer.into());
    serves_reloads_and_stops(server, &file);
}

#[test]
fn serve_keeps_serving_when_stderr_closes_after_the_first_line() {
    // `2> fifo` whose reader reads a line and leaves: a logger that blocks on the full pipe would
    // stop reloads while /readyz says ready, and SIGTERM would not stop the server.
    let (_dir, file) = one_service_file();
    let (reader, writer) = std::io::pipe().unwrap();
    let server = spawn_serve(&file, "debug", writer.into());
    let mut reader = BufReader::new(reader);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(!first.is_empty(), "the server logs a line");
    drop(reader);
    serves_reloads_and_stops(server, &file);
}

#[test]
fn serve_keeps_serving_when_stderr_is_a_full_pipe() {
    // A pipe nobody reads: a thread of this test fills it and stays blocked on it, and the server
    // logs at trace level into it.
    let (_dir, file) = one_service_file();
    let (reader, writer) = std::io::pipe().unwrap();
    let mut filler = writer.try_clone().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let filling = {
        let written = Arc::clone(&written);
        std::thread::spawn(move || {
            // Far more than a pipe holds (64 KiB by default; 1 MiB at most without privileges).
            let chunk = [b'.'; 4096];
            for _ in 0..1024 {
                if filler.write_all(&chunk).is_err() {
                    return;
                }
                written.fetch_add(chunk.len(), Ordering::Relaxed);
            }
        })
    };
    eventually("the pipe holds something", || written.load(Ordering::Relaxed) > 0);
    let server = spawn_serve(&file, "trace", writer.into());
    serves_reloads_and_stops(server, &file);
    assert!(!filling.is_finished(), "the pipe was full throughout: the filler is still blocked on it");
    // Unblocks the filler (EPIPE).
    drop(reader);
    filling.join().unwrap();
}

#[test]
fn piped_logs_have_no_colour_codes() {
    let (_dir, file) = one_service_file();
    let (reader, writer) = std::io::pipe().unwrap();
    let server = spawn_serve(&file, "debug", writer.into());
    eventually("the server is ready", || ready_with(&server.admin_addr, 1));
    drop(server);
    let mut log = Vec::new();
    BufReader::new(reader).read_to_end(&mut log).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("Loaded agent configurations."), "{text}");
    assert!(!log.contains(&0x1b), "an ESC byte in the piped log: {text:?}");
}

/// Usability finding 7: `serve --config skyconf.yaml` (the README's example: etcd selected) with
/// etcd down logged 7 lines within 4 ms and 20 in 30 s for that one cause, among them
/// `stale=false` while `/readyz` said stale and "still serving the last good configuration" when
/// there was none. Now the outage is one line, and every line says what is true: watched for
/// 11 s, past the fleet summary's and the session lease's retries.
#[test]
fn a_store_down_at_start_is_one_line_and_every_line_is_true() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("skyconf.yaml");
    let etcd = free_addr();
    std::fs::write(&config, format!("configuration:\n  selector: etcd\n  etcd:\n    endpoints: http://{etcd}\n"))
        .unwrap();
    let mut command = crate::util::serve_command();
    command.arg("--config").arg(&config);
    let server = crate::util::Server::spawn(command);
    std::thread::sleep(Duration::from_secs(11));
    let readyz = admin_get(&server.admin_addr, "/readyz").expect("/readyz answers");
    let lines: Vec<serde_json::Value> =
        server.startup_log.iter().cloned().chain(server.drain_log()).map(|l| crate::util::json_line(&l)).collect();
    let text = |line: &serde_json::Value| line["fields"]["message"].as_str().unwrap_or_default().to_owned();
    let loud: Vec<_> = lines.iter().filter(|l| matches!(l["level"].as_str(), Some("WARN" | "ERROR"))).collect();
    assert_eq!(loud.len(), 1, "one line for the store that is down: {loud:#?}");
    assert!(text(loud[0]).contains("nothing is persisted"), "{loud:#?}");
    assert_eq!(readyz["stale"], true, "{readyz}");
    for line in &lines {
        assert!(!text(line).contains("last good configuration"), "there is none to serve: {line}");
        for field in ["stale", "ready"] {
            if let Some(value) = line["fields"].get(field) {
                assert_eq!(value.to_string(), readyz[field].to_string(), "`{field}` disagrees with /readyz: {line}");
            }
        }
    }
}
