//! A real etcd for tests: the `etcd` binary (Debian's `etcd-server`) started on loopback with
//! ephemeral ports and a temporary data directory, killed when dropped; plus a small admin client
//! (put, delete, compact, switch authentication on) built on skyconf-proto's etcd stubs.
//!
//! Without the binary, [`EtcdServer::start`] returns `None` and the test skips with a message,
//! unless `SKYCONF_REQUIRE_ETCD` is set (scripts/test.sh sets it), in which case it panics.
//!
//! Shared by skyconf-sources' and skyconf-server's etcd tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skyconf_proto::etcd::etcdserverpb as pb;
use skyconf_proto::etcd::etcdserverpb::auth_client::AuthClient;
use skyconf_proto::etcd::etcdserverpb::kv_client::KvClient;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;

use crate::server::AdminClient;

/// How long etcd may take to start answering.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A running (or stopped, restartable) etcd.
#[derive(Debug)]
pub struct EtcdServer {
    binary: PathBuf,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    tls: Option<TestCerts>,
}

impl EtcdServer {
    /// Starts an etcd and waits until it answers; `None` (after saying why) when the binary is
    /// missing and not required.
    pub async fn start() -> Option<Self> {
        Self::start_with(None).await
    }

    /// Starts an etcd serving clients over TLS with `certs`, requiring a client certificate
    /// signed by their CA.
    pub async fn start_tls(certs: TestCerts) -> Option<Self> {
        Self::start_with(Some(certs)).await
    }

    async fn start_with(tls: Option<TestCerts>) -> Option<Self> {
        let Some(binary) = find_binary() else {
            super::skip_unless_required(
                "SKYCONF_REQUIRE_ETCD",
                "no `etcd` binary was found (apt-get install etcd-server)",
                "skipping: no `etcd` binary (apt-get install etcd-server, or run scripts/test.sh)",
            );
            return None;
        };
        // Ports picked by the kernel can be taken again before etcd binds them: try a few times.
        for _ in 0..5 {
            let mut server = Self {
                binary: binary.clone(),
                dir: data_dir(),
                client_port: free_port(),
                peer_port: free_port(),
                child: None,
                tls: tls.clone(),
            };
            server.spawn();
            if server.wait_ready().await {
                return Some(server);
            }
            server.kill();
        }
        panic!("etcd did not start; see the logs above");
    }

    /// The client URL.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("a log file");
        let mut command = Command::new(&self.binary);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", "skyconf-test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("skyconf-test={peer}")])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
    }

    /// Polls etcd's `/health` until it says healthy; false when it exited or took too long.
    async fn wait_ready(&mut self) -> bool {
        let give_up = Instant::now() + START_LIMIT;
        while Instant::now() < give_up {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                eprintln!("etcd exited with {status}: {}", self.log());
                return false;
            }
            let ready = if self.tls.is_some() {
                // Listening is all a plain client can see; TLS tests poll with their own client.
                tokio::net::TcpStream::connect(("127.0.0.1", self.client_port)).await.is_ok()
            } else {
                http_get(self.client_port, "/health").await.is_some_and(|r| r.contains("\"health\":\"true\""))
            };
            if ready {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!("etcd did not answer within {START_LIMIT:?}: {}", self.log());
        false
    }

    /// Kills etcd (SIGKILL: a crash, not a shutdown) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data directory and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(self.wait_ready().await, "etcd did not restart");
    }

    /// What etcd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// An admin client, without login.
    pub async fn admin(&self) -> Admin {
        let channel = Channel::from_shared(self.url()).unwrap().connect().await.expect("etcd answers");
        Admin { channel, token: None }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Direct etcd operations for tests.
#[derive(Debug, Clone)]
pub struct Admin {
    channel: Channel,
    token: Option<AsciiMetadataValue>,
}

impl Admin {
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.token {
            request.metadata_mut().insert("token", token.clone());
        }
        request
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone())
    }

    /// Writes a key; the revision it created.
    pub async fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> i64 {
        let request = pb::PutRequest { key: key.into(), value: value.into(), ..Default::default() };
        self.kv().put(self.request(request)).await.expect("put").into_inner().header.unwrap().revision
    }

    /// Deletes a key.
    pub async fn delete(&self, key: &str) -> i64 {
        let request = pb::DeleteRangeRequest { key: key.into(), ..Default::default() };
        self.kv().delete_range(self.request(request)).await.expect("delete").into_inner().header.unwrap().revision
    }

    /// The value of a key.
    pub async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let request = pb::RangeRequest { key: key.into(), ..Default::default() };
        let response = self.kv().range(self.request(request)).await.expect("range").into_inner();
        response.kvs.into_iter().next().map(|kv| kv.value)
    }

    /// Discards history before `revision`.
    pub async fn compact(&self, revision: i64) {
        let request = pb::CompactionRequest { revision, physical: true };
        self.kv().compact(self.request(request)).await.expect("compact");
    }

    /// Creates `root` with `password`, switches authentication on, and returns a client logged
    /// in as root.
    pub async fn enable_auth(&self, password: &str) -> Self {
        let mut auth = AuthClient::new(self.channel.clone());
        let user = pb::AuthUserAddRequest { name: "root".into(), password: password.into() };
        auth.user_add(user).await.expect("user add");
        auth.role_add(pb::AuthRoleAddRequest { name: "root".into() }).await.expect("role add");
        let grant = pb::AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() };
        auth.user_grant_role(grant).await.expect("grant");
        auth.auth_enable(pb::AuthEnableRequest {}).await.expect("auth enable");
        let login = pb::AuthenticateRequest { name: "root".into(), password: password.into() };
        let token = auth.authenticate(login).await.expect("login").into_inner().token;
        Self { channel: self.channel.clone(), token: Some(token.parse().unwrap()) }
    }
}

/// A private CA with a server certificate for 127.0.0.1 and a client certificate, made with the
/// `openssl` command line tool.
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// Keeps the files until the last copy is dropped.
    _dir: std::sync::Arc<tempfile::TempDir>,
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// etcd's certificate, for 127.0.0.1 and localhost.
    pub server_cert: PathBuf,
    /// etcd's private key.
    pub server_key: PathBuf,
    /// The client certificate, for the user `root`.
    pub client_cert: PathBuf,
    /// The client's private key.
    pub client_key: PathBuf,
}

impl TestCerts {
    /// Makes the certificates; `None` (after saying why) without `openssl`, unless etcd tests are
    /// required.
    pub fn generate() -> Option<Self> {
        let available =
            Command::new("openssl").arg("version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
        if !available {
            super::skip_unless_required(
                "SKYCONF_REQUIRE_ETCD",
                "there is no `openssl` to make test certificates",
                "skipping: no `openssl` command to make test certificates",
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir.path()).output().expect("openssl runs");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=skyconf test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ]);
        for (name, cn, usage) in [("server", "127.0.0.1", "serverAuth,clientAuth"), ("client", "root", "clientAuth")] {
            std::fs::write(
                path(&format!("{name}.ext")),
                format!("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage={usage}\n"),
            )
            .unwrap();
            openssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ]);
        }
        Some(Self {
            ca: path("ca.pem"),
            server_cert: path("server.pem"),
            server_key: path("server.key"),
            client_cert: path("client.pem"),
            client_key: path("client.key"),
            _dir: std::sync::Arc::new(dir),
        })
    }
}

/// A loopback TCP proxy in front of etcd that a test can cut and restore: an outage of the
/// connection to the store while the store itself keeps running (and can be changed meanwhile).
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `upstream` (a `http://127.0.0.1:PORT` URL), open.
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (is_open, tracked) = (open.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                // Cut: accepted and dropped at once, like a store that resets every connection.
                if !is_open.load(std::sync::atomic::Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                let copy = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap().push(copy.abort_handle());
            }
        });
        Self { port, open, connections, task }
    }

    /// The URL to give the client.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

fn find_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file());
    on_path.or_else(|| Some(PathBuf::from("/usr/bin/etcd")).filter(|p| p.is_file()))
}

/// A temporary directory for etcd's data, in memory where the machine has /dev/shm: etcd fsyncs
/// every write, and a disk shared with other work would make write latency depend on it.
fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("skyconf-etcd-").tempdir_in(shm).ok().filter(|_| shm.is_dir());
    builder.unwrap_or_else(|| tempfile::tempdir().expect("a temp dir"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A GET on loopback; the body, or `None` when nothing answers.
async fn http_get(port: u16, path: &str) -> Option<String> {
    let reply = AdminClient::new(format!("127.0.0.1:{port}")).try_send("GET", path, &[], "").await.ok()?;
    Some(reply.body)
}
