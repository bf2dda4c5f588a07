//! A real Nacos-protocol server for the Nacos tests: an `rnacos` process on ephemeral loopback
//! ports with its own data directory, stopped when dropped. The sources' and the server's Nacos
//! tests both use it, so both test the store against the same server set-up.
//!
//! The binary is `$SKYCONF_RNACOS`, else `rnacos` on `PATH`, else `~/.cargo/bin/rnacos`
//! (`scripts/deps/nacos.sh` installs it). Without it a test prints why and skips, unless
//! `SKYCONF_REQUIRE_NACOS` is set, when it fails.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skyconf_sources::nacos::NacosSettings;

use crate::server::AdminClient;

/// How long rnacos may take to start answering writes.
const STARTUP: Duration = Duration::from_secs(60);

/// A running (or stopped, between [`Rnacos::stop`] and [`Rnacos::restart`]) rnacos.
#[derive(Debug)]
pub struct Rnacos {
    binary: PathBuf,
    child: Option<Child>,
    http_port: u16,
    grpc_port: u16,
    dir: PathBuf,
    /// How many times the server was restarted: each run has its own data directory.
    generation: u32,
    login: Option<(String, String)>,
}

impl Rnacos {
    /// Starts rnacos without authentication; `None` (after saying why) when it is not installed.
    pub async fn start(test: &str) -> Option<Self> {
        Self::launch(test, None).await
    }

    /// Starts rnacos with open-API authentication and one user.
    pub async fn start_with_login(test: &str, username: &str, password: &str) -> Option<Self> {
        Self::launch(test, Some((username.to_owned(), password.to_owned()))).await
    }

    async fn launch(test: &str, login: Option<(String, String)>) -> Option<Self> {
        let Some(binary) = find_binary() else {
            super::skip_unless_required(
                "SKYCONF_REQUIRE_NACOS",
                "rnacos is not installed (scripts/deps/nacos.sh installs it)",
                &format!("skipping {test}: rnacos is not installed (cargo install rnacos --locked)"),
            );
            return None;
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = std::env::temp_dir().join(format!("skyconf-rnacos-{test}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut server = Self { binary, child: None, http_port: 0, grpc_port: 0, dir, generation: 0, login };
        // Ports are picked free and then released, so another process may take one first: retry.
        for _ in 0..10 {
            (server.http_port, server.grpc_port) = free_ports();
            server.spawn();
            if server.wait_ready().await {
                return Some(server);
            }
            server.kill();
            server.generation += 1;
        }
        server.generation -= 1;
        panic!("rnacos did not start; its last log:\n{}", server.log());
    }

    /// Settings for a store on this server, in `group` and `namespace`.
    pub fn settings(&self, group: &str, namespace: &str) -> NacosSettings {
        NacosSettings {
            server_addr: "127.0.0.1".to_owned(),
            port: self.http_port,
            group: group.to_owned(),
            namespace: namespace.to_owned(),
            ..NacosSettings::default()
        }
    }

    /// `127.0.0.1:port` of the HTTP API.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    /// Stops the server abruptly, as a crash would; its ports stay reserved for a restart.
    pub async fn stop(&mut self) {
        self.kill();
    }

    /// Starts the server again on the same ports, *empty*: rnacos 0.8.8 does not reliably keep
    /// a single node's raft membership across a restart (it then refuses every write with
    /// "unknown the raft leader addr"), so the restarted server gets a fresh data directory. The
    /// tests are about skyconf resuming, not about rnacos' durability: they write again after.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.generation += 1;
        // The ports were just released by the stopped server; retry while the kernel frees them.
        for _ in 0..10 {
            self.spawn();
            if self.wait_ready().await {
                return;
            }
            self.kill();
            // A fresh directory for the next attempt, as a broken start may have written to it.
            self.generation += 1;
        }
        self.generation -= 1;
        panic!("rnacos did not restart; its last log:\n{}", self.log());
    }

    fn spawn(&mut self) {
        let mut command = Command::new(&self.binary);
        // Its working directory is the temporary one: rnacos reads a `.env` file from there.
        command
            .current_dir(&self.dir)
            .env("RNACOS_HTTP_PORT", self.http_port.to_string())
            .env("RNACOS_GRPC_PORT", self.grpc_port.to_string())
            .env("RNACOS_HTTP_CONSOLE_PORT", "0")
            .env("RNACOS_SDK_HOST", "127.0.0.1")
            .env("RNACOS_CONSOLE_HOST", "127.0.0.1")
            .env("RNACOS_RAFT_NODE_ADDR", format!("127.0.0.1:{}", self.grpc_port))
            .env("RNACOS_DATA_DIR", self.dir.join(format!("data-{}", self.generation)))
            .env("RNACOS_HTTP_WORKERS", "2")
            .env("RNACOS_ENABLE_METRICS", "false")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null());
        super::output_to(&mut command, &self.log_path());
        if let Some((username, password)) = &self.login {
            command
                .env("RNACOS_ENABLE_OPEN_API_AUTH", "true")
                .env("RNACOS_INIT_ADMIN_USERNAME", username)
                .env("RNACOS_INIT_ADMIN_PASSWORD", password);
        }
        self.child = Some(command.spawn().expect("rnacos starts"));
    }

    /// Waits (bounded) until the server applies a write; false if it exited, broke or never did.
    async fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + STARTUP;
        let mut probe = 0u32;
        // Logged in once per run: rnacos limits logins per minute.
        let mut token = None;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(_)) = child.try_wait()
            {
                return false;
            }
            // rnacos 0.8.8 has a start-up race: a thread may panic while raft initializes, and the
            // server then acknowledges writes it never applies. Such a run is started again.
            if self.log().contains("panicked") {
                return false;
            }
            probe += 1;
            if self.login.is_some() && token.is_none() {
                token = self.token().await;
            }
            if (self.login.is_none() || token.is_some()) && self.probe(probe, token.as_deref().unwrap_or("")).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Whether the server is healthy and reads back what it was just sent.
    async fn probe(&self, n: u32, token: &str) -> bool {
        // `/health`, not `/nacos/health`: only the former is outside the login.
        if !matches!(http(&self.addr(), "GET", "/health", "").await, Some((200, _))) {
            return false;
        }
        let key = format!("dataId=skyconf.probe&group=skyconf-probe&accessToken={token}");
        let written = http(&self.addr(), "POST", "/nacos/v1/cs/configs", &format!("{key}&content={n}")).await;
        if !matches!(written, Some((200, ref answer)) if answer.trim() == "true") {
            return false;
        }
        let read = http(&self.addr(), "GET", &format!("/nacos/v1/cs/configs?{key}"), "").await;
        matches!(read, Some((200, ref answer)) if answer.trim() == n.to_string())
    }

    /// An access token, when the server has a login.
    async fn token(&self) -> Option<String> {
        let (username, password) = self.login.as_ref()?;
        let body = format!("username={username}&password={password}");
        let (_, answer) = http(&self.addr(), "POST", "/nacos/v1/auth/login", &body).await?;
        let start = answer.find("\"accessToken\":\"")? + "\"accessToken\":\"".len();
        let end = start + answer[start..].find('"')?;
        Some(answer[start..end].to_owned())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The current run's log: every run has its own, like its own data directory.
    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("rnacos-{}.log", self.generation))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Rnacos {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The rnacos binary, if installed (`cargo install rnacos` puts it in `~/.cargo/bin`).
fn find_binary() -> Option<PathBuf> {
    let in_cargo = std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo/bin/rnacos"));
    super::find_program(Some("SKYCONF_RNACOS"), "rnacos", in_cargo)
}

/// Two free loopback ports.
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let b = TcpListener::bind("127.0.0.1:0").expect("a free port");
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}

/// One HTTP request with a form body; the status and body, or `None` when it failed.
async fn http(addr: &str, method: &str, path: &str, form: &str) -> Option<(u16, String)> {
    let headers = [("Content-Type", "application/x-www-form-urlencoded")];
    let reply = AdminClient::new(addr).try_send(method, path, &headers, form).await.ok()?;
    Some((reply.status, reply.body))
}
