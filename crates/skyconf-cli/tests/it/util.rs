//! What the test modules of this binary share: the `skyconf` binary, the repository root,
//! whether the independent grpcio client can run, `skyconf serve` as a process ([`Server`]), and
//! a bounded wait on an in-process server's fleet ([`wait_for_agents`]).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use assert_cmd::assert::OutputAssertExt;
use assert_cmd::cargo::CommandCargoExt;

/// A child process killed when the test ends, pass or fail.
pub(crate) struct Guard(pub(crate) Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `skyconf agent` polling `running` as `service` every 200 ms, with `extra` arguments.
pub(crate) fn skyconf_agent(running: &skyconf_server::Running, service: &str, extra: &[&str]) -> Guard {
    let child = Command::new(env!("CARGO_BIN_EXE_skyconf"))
        .args(["agent", "--addr", &running.grpc_addr.to_string(), "--service", service, "--interval", "200ms"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Guard(child)
}

/// Waits (at most 30 s) until `condition` holds for the agents `agents` lists of `running`;
/// returns them.
pub(crate) async fn wait_for_agents(
    running: &skyconf_server::Running,
    what: &str,
    agents: impl Fn(&skyconf_server::Running) -> Vec<skyconf_server::fleet::AgentStatus>,
    condition: impl Fn(&[skyconf_server::fleet::AgentStatus]) -> bool,
) -> Vec<skyconf_server::fleet::AgentStatus> {
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = agents(running);
        if condition(&now) {
            return now;
        }
        assert!(std::time::Instant::now() < give_up, "{what}: {now:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `skyconf` binary this package builds, as a command to add arguments to.
pub(crate) fn skyconf() -> Command {
    Command::cargo_bin("skyconf").unwrap()
}

/// The `skyconf-bench` binary (the workspace's development tooling, a package of its own), as a
/// command to add arguments to. Cargo gives a test only its own package's binaries, so this one is
/// found beside `skyconf` in the target directory: `cargo test --workspace` (scripts/test.sh)
/// builds it; a run of this package alone needs `cargo build -p skyconf-bench` first.
pub(crate) fn skyconf_bench() -> Command {
    Command::cargo_bin("skyconf-bench")
        .ok()
        .filter(|command| Path::new(command.get_program()).exists())
        .expect("skyconf-bench is not built: run `cargo build -p skyconf-bench` (or test the workspace)")
}

/// The repository's root (examples/, tests/interop/ and tests/web/ are there).
/// The tests' copy of the README's example document (`examples/` is the user's to edit).
pub(crate) fn example_document() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/data/agent-configurations.yaml")
}

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The Python interpreter the grpcio clients run on, as a command to add arguments to:
/// `$SKYCONF_TEST_PYTHON` when set (a virtualenv's `bin/python`), else `python3` from `PATH`.
pub(crate) fn python() -> Command {
    Command::new(std::env::var_os("SKYCONF_TEST_PYTHON").unwrap_or_else(|| "python3".into()))
}

/// Whether [`python`] with grpcio and grpcio-tools (the independent client of
/// `tests/interop/cds_client.py`) is there; when not, says so, and fails instead when
/// `SKYCONF_REQUIRE_INTEROP` is set (`scripts/test.sh` installs them and sets it).
pub(crate) fn grpcio_available() -> bool {
    let has_grpcio = python().args(["-c", "import grpc, grpc_tools"]).status().is_ok_and(|s| s.success());
    if !has_grpcio {
        let python = python().get_program().to_string_lossy().into_owned();
        let how = "`. scripts/deps/00-lib.sh; . scripts/deps/python.sh` installs them into .venv/ and sets \
                   SKYCONF_TEST_PYTHON";
        assert!(
            std::env::var_os("SKYCONF_REQUIRE_INTEROP").is_none(),
            "{python} with grpcio and grpcio-tools is required ({how})"
        );
        eprintln!("skipped: {python} has no grpcio and grpcio-tools ({how})");
    }
    has_grpcio
}

/// The lines of a child's output, each mapped by `map`, read on a thread of their own that keeps
/// draining the pipe (so the child never blocks on a full one) until the output ends.
pub(crate) fn read_lines<T: Send + 'static>(
    output: impl std::io::Read + Send + 'static,
    map: impl Fn(String) -> T + Send + 'static,
) -> mpsc::Receiver<T> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            let _ = tx.send(map(line));
        }
    });
    lines
}

/// A line of JSON a test tool printed.
pub(crate) fn json_line(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// `skyconf --log-format json serve` on ephemeral loopback ports, as a command to add the store
/// (and anything else) to; [`Server::spawn`] runs it.
pub(crate) fn serve_command() -> Command {
    let mut command = skyconf();
    command.args(["--log-format", "json", "serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"]);
    command
}

/// What `command` prints on stdout; it must succeed.
pub(crate) fn stdout_of(command: &mut Command) -> Vec<u8> {
    command.assert().success().get_output().stdout.clone()
}

/// A `skyconf serve` process, killed when dropped; its log lines are collected for inspection.
pub(crate) struct Server {
    child: Child,
    pub(crate) grpc_addr: String,
    pub(crate) admin_addr: String,
    /// The lines logged up to the one that gave the addresses.
    pub(crate) startup_log: Vec<String>,
    log: mpsc::Receiver<String>,
}

impl Server {
    /// `skyconf serve` on `file`, on ephemeral ports.
    pub(crate) fn start(file: &Path) -> Self {
        let mut command = serve_command();
        command.arg("--file").arg(file);
        Self::spawn(command)
    }

    /// Runs a prepared `skyconf ... serve` command (see [`serve_command`]) and waits for its
    /// addresses.
    pub(crate) fn spawn(mut command: Command) -> Self {
        let mut child = command.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let log = read_lines(child.stderr.take().unwrap(), |line| line);
        let mut startup_log = Vec::new();
        let (grpc_addr, admin_addr) = loop {
            let line = log
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("the server logs its addresses ({e}); it logged: {startup_log:#?}"));
            startup_log.push(line.clone());
            let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if let (Some(g), Some(a)) = (json["fields"]["grpc_addr"].as_str(), json["fields"]["admin_addr"].as_str()) {
                break (g.to_owned(), a.to_owned());
            }
        };
        Self { child, grpc_addr, admin_addr, startup_log, log }
    }

    /// The server's process id (for /proc/<pid>/status).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log lines since the addresses (or since the last call).
    pub(crate) fn drain_log(&self) -> Vec<String> {
        self.log.try_iter().collect()
    }

    /// Sends SIGKILL (a crash: nothing runs on the way out) and waits for the process to exit.
    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends SIGTERM and waits for the process to exit; its status, how long the exit took, and
    /// the lines it logged since the addresses (or the last [`Self::drain_log`]).
    pub(crate) fn terminate_logged(mut self) -> (ExitStatus, Duration, Vec<String>) {
        let sent = std::time::Instant::now();
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let status = self.child.wait().unwrap();
        let took = sent.elapsed();
        // The reader thread ends at the end of the output, once the process is gone.
        (status, took, self.log.iter().collect())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
