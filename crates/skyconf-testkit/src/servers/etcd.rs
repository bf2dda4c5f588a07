//! A real etcd for tests: the `etcd` binary (Debian's `etcd-server`) started on loopback with
//! ephemeral ports and a temporary data directory, killed when dropped, alone ([`EtcdServer`]) or
//! as a three-member cluster ([`EtcdCluster`]); plus a small admin client
//! (put, delete, compact, switch authentication on) built on skyconf-proto's etcd stubs.
//!
//! Without the binary, [`EtcdServer::start`] returns `None` and the test skips with a message,
//! unless `SKYCONF_REQUIRE_ETCD` is set (scripts/test.sh sets it), in which case it panics.
//!
//! Shared by skyconf-sources' and skyconf-server's etcd tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skyconf_proto::etcd::etcdserverpb as pb;
use skyconf_proto::etcd::etcdserverpb::auth_client::AuthClient;
use skyconf_proto::etcd::etcdserverpb::kv_client::KvClient;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;

use super::free_port;
use crate::server::AdminClient;

/// How long etcd may take to start answering.
const START_LIMIT: Duration = Duration::from_secs(30);

/// One etcd process: its name, ports and data directory, and the child while it runs. The
/// single server and every member of an [`EtcdCluster`] are one of these.
#[derive(Debug)]
struct Member {
    name: String,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Member {
    /// A member named `name` on fresh ephemeral ports with a fresh data directory (not started).
    fn new(name: &str) -> Self {
        Self { name: name.to_owned(), dir: data_dir(), client_port: free_port(), peer_port: free_port(), child: None }
    }

    fn client_url(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// `name=peer-url`, one entry of `--initial-cluster`.
    fn cluster_entry(&self) -> String {
        format!("{}={}", self.name, self.peer_url())
    }

    /// Starts the process (without waiting) as a member of `initial_cluster`.
    fn spawn(&mut self, binary: &Path, tls: Option<&TestCerts>, initial_cluster: &str) {
        let client = self.client_url(tls.is_some());
        let peer = self.peer_url();
        let mut command = Command::new(binary);
        if let Some(tls) = tls {
            command
                .arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        command
            .args(["--name", &self.name, "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", initial_cluster, "--initial-cluster-token", "skyconf-test"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null());
        super::output_to(&mut command, &self.dir.path().join("etcd.log"));
        self.child = Some(command.spawn().expect("etcd starts"));
    }

    /// Polls etcd's `/health` until it says healthy (for a cluster member: a leader is known and
    /// answers); false when the process exited or took too long.
    async fn wait_ready(&mut self, tls: bool) -> bool {
        let give_up = Instant::now() + START_LIMIT;
        while Instant::now() < give_up {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                eprintln!("etcd {} exited with {status}: {}", self.name, self.log());
                return false;
            }
            let ready = if tls {
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
        eprintln!("etcd {} did not answer within {START_LIMIT:?}: {}", self.name, self.log());
        false
    }

    /// Kills the process (SIGKILL: a crash, not a shutdown) and waits for it to exit.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running (or stopped, restartable) etcd.
#[derive(Debug)]
pub struct EtcdServer {
    binary: PathBuf,
    member: Member,
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
        let binary = binary_or_skip()?;
        // Ports picked by the kernel can be taken again before etcd binds them: try a few times.
        for _ in 0..5 {
            let mut server = Self { binary: binary.clone(), member: Member::new("skyconf-test"), tls: tls.clone() };
            server.spawn();
            if server.member.wait_ready(server.tls.is_some()).await {
                return Some(server);
            }
            server.kill();
        }
        panic!("etcd did not start; see the logs above");
    }

    /// The client URL.
    pub fn url(&self) -> String {
        self.member.client_url(self.tls.is_some())
    }

    fn spawn(&mut self) {
        let initial_cluster = self.member.cluster_entry();
        self.member.spawn(&self.binary, self.tls.as_ref(), &initial_cluster);
    }

    /// Kills etcd (SIGKILL: a crash, not a shutdown) and waits for it to exit.
    pub fn kill(&mut self) {
        self.member.kill();
    }

    /// Starts etcd again on the same ports and data directory and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(self.member.wait_ready(self.tls.is_some()).await, "etcd did not restart");
    }

    /// What etcd logged.
    pub fn log(&self) -> String {
        self.member.log()
    }

    /// An admin client, without login.
    pub async fn admin(&self) -> Admin {
        Admin::connect(&self.url()).await
    }
}

/// A three-member etcd cluster on loopback: three processes, each with its own ephemeral client
/// and peer ports and data directory, all named in one `--initial-cluster`. Members can be
/// killed and restarted one by one; the cluster serves while two of three run.
#[derive(Debug)]
pub struct EtcdCluster {
    binary: PathBuf,
    members: Vec<Member>,
}

impl EtcdCluster {
    /// How many members the cluster has.
    pub const SIZE: usize = 3;

    /// Starts three members and waits until each answers healthy (which needs an elected leader);
    /// `None` (after saying why) when the binary is missing and not required.
    pub async fn start() -> Option<Self> {
        let binary = binary_or_skip()?;
        // Ports picked by the kernel can be taken again before etcd binds them: start again with
        // new ports a few times.
        for _ in 0..5 {
            let members = (0..Self::SIZE).map(|i| Member::new(&format!("skyconf-test-{i}"))).collect();
            let mut cluster = Self { binary: binary.clone(), members };
            // Every member is started before any is waited for: none is healthy without a quorum.
            for i in 0..Self::SIZE {
                cluster.spawn(i);
            }
            let mut ready = true;
            for member in &mut cluster.members {
                ready = ready && member.wait_ready(false).await;
            }
            if ready {
                return Some(cluster);
            }
            // Dropping the cluster kills every member.
        }
        panic!("the etcd cluster did not start; see the logs above");
    }

    fn initial_cluster(&self) -> String {
        self.members.iter().map(Member::cluster_entry).collect::<Vec<_>>().join(",")
    }

    fn spawn(&mut self, i: usize) {
        let initial_cluster = self.initial_cluster();
        self.members[i].spawn(&self.binary, None, &initial_cluster);
    }

    /// The client URL of member `i`.
    pub fn url(&self, i: usize) -> String {
        self.members[i].client_url(false)
    }

    /// Every member's client URL, comma-separated (what `endpoints=` takes).
    pub fn endpoints(&self) -> String {
        (0..Self::SIZE).map(|i| self.url(i)).collect::<Vec<_>>().join(",")
    }

    /// Whether member `i` runs (it has not been killed, or was restarted).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].is_running()
    }

    /// The index of the member that is the leader now, as the running members see it (from
    /// `/v3/maintenance/status`: the member whose own id is the leader id); waits up to
    /// [`START_LIMIT`] for an election to finish.
    pub async fn leader(&self) -> usize {
        let give_up = Instant::now() + START_LIMIT;
        loop {
            let mut ids = Vec::new();
            for (i, member) in self.members.iter().enumerate().filter(|(_, m)| m.is_running()) {
                if let Some((own, leader)) = member_status(member.client_port).await {
                    ids.push((i, own, leader));
                }
            }
            // Every running member must agree, so a member that has not heard of a new election
            // yet does not name a dead leader.
            let leaders: std::collections::BTreeSet<&str> = ids.iter().map(|(_, _, l)| l.as_str()).collect();
            if leaders.len() == 1
                && let Some((i, _, _)) = ids.iter().find(|(_, own, leader)| own == leader)
            {
                return *i;
            }
            assert!(Instant::now() < give_up, "no etcd leader agreed on within {START_LIMIT:?}: {ids:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills member `i` (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Kills the leader; its index.
    pub async fn kill_leader(&mut self) -> usize {
        let leader = self.leader().await;
        self.kill(leader);
        leader
    }

    /// Starts member `i` again on its ports and data directory and waits until it answers.
    pub async fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        assert!(self.members[i].wait_ready(false).await, "etcd member {i} did not restart");
    }

    /// What member `i` logged.
    pub fn log(&self, i: usize) -> String {
        self.members[i].log()
    }

    /// An admin client connected to the first running member.
    pub async fn admin(&self) -> Admin {
        let i = (0..Self::SIZE).find(|&i| self.is_running(i)).expect("a running member");
        Admin::connect(&self.url(i)).await
    }
}

/// A member's own id and the leader id it knows (`/v3/maintenance/status`, ids as decimal text),
/// or `None` when it does not answer or knows no leader.
async fn member_status(port: u16) -> Option<(String, String)> {
    let client = AdminClient::new(format!("127.0.0.1:{port}"));
    let reply = client.try_send("POST", "/v3/maintenance/status", &[], "{}").await.ok()?;
    let status = reply.json();
    let own = status["header"]["member_id"].as_str()?.to_owned();
    let leader = status["leader"].as_str().filter(|l| *l != "0")?.to_owned();
    Some((own, leader))
}

/// Direct etcd operations for tests.
#[derive(Debug, Clone)]
pub struct Admin {
    channel: Channel,
    token: Option<AsciiMetadataValue>,
}

impl Admin {
    /// A client of the etcd at `url` (a member's client URL, or a comma-separated list whose
    /// first entry is used), without login.
    pub async fn connect(url: &str) -> Self {
        let first = url.split(',').next().unwrap_or(url).to_owned();
        let channel = Channel::from_shared(first).unwrap().connect().await.expect("etcd answers");
        Self { channel, token: None }
    }

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

/// The `etcd` binary; `None` (after saying why) when it is missing and not required.
fn binary_or_skip() -> Option<PathBuf> {
    let binary = super::find_program(None, "etcd", Some(PathBuf::from("/usr/bin/etcd")));
    if binary.is_none() {
        super::skip_unless_required(
            "SKYCONF_REQUIRE_ETCD",
            "no `etcd` binary was found (apt-get install etcd-server)",
            "skipping: no `etcd` binary (apt-get install etcd-server, or run scripts/test.sh)",
        );
    }
    binary
}

/// A temporary directory for etcd's data, in memory where the machine has /dev/shm: etcd fsyncs
/// every write, and a disk shared with other work would make write latency depend on it.
fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("skyconf-etcd-").tempdir_in(shm).ok().filter(|_| shm.is_dir());
    builder.unwrap_or_else(|| tempfile::tempdir().expect("a temp dir"))
}

/// A GET on loopback; the body, or `None` when nothing answers.
async fn http_get(port: u16, path: &str) -> Option<String> {
    let reply = AdminClient::new(format!("127.0.0.1:{port}")).try_send("GET", path, &[], "").await.ok()?;
    Some(reply.body)
}
