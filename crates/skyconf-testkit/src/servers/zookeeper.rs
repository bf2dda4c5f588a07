//! A real ZooKeeper for tests (Debian's `zookeeper` package: its jar and Java), on loopback with
//! ephemeral ports and temporary data directories: one server ([`ZkServer`]) or a three-server
//! ensemble ([`ZkEnsemble`]); plus a TCP proxy that can cut a client off from it. Shared by the sources and the server tests.
//!
//! The JVM runs under a small shell wrapper that kills it when its stdin closes, so a server
//! never outlives the test process, even one that aborts.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::free_port;
use zookeeper_client as zk;

/// The jar of Debian's `zookeeper` package; its manifest lists the jars it needs.
const JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logger binding from the same packages, so a failing start explains itself.
const LOGGER_JAR: &str = "/usr/share/java/slf4j-simple.jar";

/// Whether the tests must fail rather than skip when ZooKeeper is missing.
fn required() -> bool {
    std::env::var_os("SKYCONF_REQUIRE_ZOOKEEPER").is_some_and(|v| !v.is_empty() && v != "0")
}

fn installed() -> bool {
    Path::new(JAR).exists()
        && Command::new("java").arg("-version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// One ZooKeeper server process.
#[derive(Debug)]
pub struct ZkServer {
    port: u16,
    dir: tempfile::TempDir,
    process: Option<(Child, ChildStdin)>,
}

impl ZkServer {
    /// A server shared by every test of this binary that does not stop it; `None` (after saying
    /// why) when ZooKeeper is not installed and not required.
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<ZkServer>> = OnceLock::new();
        SHARED.get_or_init(Self::start).as_ref()
    }

    /// A server of the caller's own, to stop and restart.
    pub fn start() -> Option<Self> {
        if !installed() {
            assert!(!required(), "SKYCONF_REQUIRE_ZOOKEEPER is set but {JAR} or java is missing");
            eprintln!("skipping: ZooKeeper is not installed (apt-get install zookeeper, or run scripts/test.sh)");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let mut server = Self { port: 0, dir, process: None };
        // An ephemeral port, free a moment ago; another process taking it meanwhile is retried.
        for _ in 0..5 {
            server.port = free_port();
            if server.launch() {
                return Some(server);
            }
        }
        panic!("ZooKeeper did not start; see the logs above");
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The address as a socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        self.addr().parse().unwrap()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    /// Starts the JVM on this server's port and data directory and waits until it serves.
    fn launch(&mut self) -> bool {
        let config = self.dir.path().join("zoo.cfg");
        // A short tick so tests can ask for short sessions; a long maximum so a session survives
        // a server restart.
        let cfg = format!(
            "tickTime=200\nminSessionTimeout=400\nmaxSessionTimeout=60000\ndataDir={}\nclientPort={}\n\
             clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n4lw.commands.whitelist=srvr\n",
            self.dir.path().join("data").display(),
            self.port
        );
        std::fs::write(&config, cfg).unwrap();
        self.process =
            Some(spawn_jvm("org.apache.zookeeper.server.ZooKeeperServerMain", &[], &config, &self.log_path()));
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            if self.answers() {
                return true;
            }
            let (child, _) = self.process.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() || Instant::now() > give_up {
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                eprintln!("ZooKeeper on port {} did not start:\n{log}", self.port);
                self.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server says it is serving requests.
    fn answers(&self) -> bool {
        serving_mode(self.socket_addr()).is_some()
    }

    /// Kills the server (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some((mut child, stdin)) = self.process.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.launch(), "ZooKeeper did not restart on port {}", self.port);
    }

    /// Empties the data directory of a stopped server: it restarts knowing no znode and no session.
    pub fn wipe_data(&self) {
        assert!(self.process.is_none(), "stop the server first");
        let data = self.dir.path().join("data");
        std::fs::remove_dir_all(&data).unwrap();
        std::fs::create_dir(&data).unwrap();
    }

    /// A client session of the test's own.
    pub async fn client(&self) -> zk::Client {
        zk::Client::connect(&self.addr()).await.expect("a ZooKeeper session")
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `main_class` of ZooKeeper's jar on `config` in a JVM (with the extra `jvm_options`),
/// logging to `log`, under a shell wrapper that kills the JVM (SIGKILL) when the returned stdin is
/// closed or the test process dies; does not wait for it to serve.
fn spawn_jvm(main_class: &str, jvm_options: &[&str], config: &Path, log: &Path) -> (Child, ChildStdin) {
    let script = "java \"$@\" & pid=$!; read -r _; kill -9 $pid; wait $pid; exit 0";
    let mut command = Command::new("sh");
    command
        .args(["-c", script, "zookeeper"])
        .args(["-Xmx256m", "-XX:+UseSerialGC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"])
        .args(jvm_options)
        .args(["-cp", &format!("{JAR}:{LOGGER_JAR}")])
        .arg(main_class)
        .arg(config)
        .stdin(Stdio::piped());
    let mut child = super::output_to(&mut command, log).spawn().expect("sh runs");
    let stdin = child.stdin.take().unwrap();
    (child, stdin)
}

/// The mode a server at `addr` says it serves in (`standalone`, `leader`, `follower`), from the
/// `srvr` four-letter word; `None` while it does not serve (`srvr` names a mode only then; `ruok`
/// answers before the database is loaded).
fn serving_mode(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reply = String::new();
    stream.write_all(b"srvr").ok()?;
    stream.read_to_string(&mut reply).ok()?;
    reply.lines().find_map(|line| line.strip_prefix("Mode: ")).map(|mode| mode.trim().to_owned())
}

/// A three-server ZooKeeper ensemble on loopback: three JVMs (`QuorumPeerMain`), each with its
/// own client, quorum and election ports (ephemeral) and data directory with its `myid`, all
/// listed in each `zoo.cfg` as `server.1..3`. It serves while two of three run.
#[derive(Debug)]
pub struct ZkEnsemble {
    dir: tempfile::TempDir,
    /// Per server: client, quorum and election port.
    ports: Vec<[u16; 3]>,
    processes: Vec<Option<(Child, ChildStdin)>>,
}

impl ZkEnsemble {
    /// How many servers the ensemble has.
    pub const SIZE: usize = 3;

    /// Starts three servers and waits until each serves as leader or follower; `None` (after
    /// saying why) when ZooKeeper is not installed and not required.
    pub fn start() -> Option<Self> {
        if !installed() {
            assert!(!required(), "SKYCONF_REQUIRE_ZOOKEEPER is set but {JAR} or java is missing");
            eprintln!("skipping: ZooKeeper is not installed (apt-get install zookeeper, or run scripts/test.sh)");
            return None;
        }
        // Ports free a moment ago can be taken before a JVM binds them: start again with new ports.
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let ports = (0..Self::SIZE).map(|_| [free_port(), free_port(), free_port()]).collect();
            let mut ensemble = Self { dir, ports, processes: (0..Self::SIZE).map(|_| None).collect() };
            for i in 0..Self::SIZE {
                ensemble.configure(i);
                ensemble.spawn(i);
            }
            if (0..Self::SIZE).all(|i| ensemble.wait_serving(i)) {
                return Some(ensemble);
            }
            // Dropping the ensemble kills every server.
        }
        panic!("the ZooKeeper ensemble did not start; see the logs above");
    }

    fn server_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("server-{}", i + 1))
    }

    /// Writes server `i`'s data directory, `myid` and `zoo.cfg`.
    fn configure(&self, i: usize) {
        let dir = self.server_dir(i);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("data/myid"), format!("{}\n", i + 1)).unwrap();
        let servers: String = self
            .ports
            .iter()
            .enumerate()
            .map(|(n, [_, quorum, election])| format!("server.{}=127.0.0.1:{quorum}:{election}\n", n + 1))
            .collect();
        // A short tick (sessions as short as the single server's, fast elections), a long
        // maximum so a session survives a server's restart.
        let cfg = format!(
            "tickTime=200\ninitLimit=50\nsyncLimit=10\nminSessionTimeout=400\nmaxSessionTimeout=60000\n\
             dataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n\
             4lw.commands.whitelist=srvr\nstandaloneEnabled=false\n{servers}",
            dir.join("data").display(),
            self.ports[i][0]
        );
        std::fs::write(dir.join("zoo.cfg"), cfg).unwrap();
    }

    fn spawn(&mut self, i: usize) {
        let dir = self.server_dir(i);
        // Three JVMs at once: the quick compiler only, and sized for one core each, so their
        // start leaves the machine to other tests' measurements as much as it can.
        let light = ["-XX:TieredStopAtLevel=1", "-XX:ActiveProcessorCount=1"];
        let (config, log) = (dir.join("zoo.cfg"), dir.join("zookeeper.log"));
        let process = spawn_jvm("org.apache.zookeeper.server.quorum.QuorumPeerMain", &light, &config, &log);
        self.processes[i] = Some(process);
    }

    /// Waits until server `i` serves (it has joined a quorum); false when its JVM exited or it
    /// took more than a minute.
    fn wait_serving(&mut self, i: usize) -> bool {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            if self.mode(i).is_some_and(|mode| mode == "leader" || mode == "follower") {
                return true;
            }
            let exited = self.processes[i].as_mut().is_none_or(|(child, _)| child.try_wait().unwrap().is_some());
            if exited || Instant::now() > give_up {
                eprintln!("ZooKeeper server {} did not start:\n{}", i + 1, self.log(i));
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What server `i` says its mode is now (`leader`, `follower`), `None` while it does not serve.
    pub fn mode(&self, i: usize) -> Option<String> {
        serving_mode(self.socket_addr(i))
    }

    /// `127.0.0.1:port` of server `i`'s client port.
    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i][0])
    }

    fn socket_addr(&self, i: usize) -> SocketAddr {
        self.addr(i).parse().unwrap()
    }

    /// Every server's client address, comma-separated: a ZooKeeper connect string.
    pub fn connect_string(&self) -> String {
        (0..Self::SIZE).map(|i| self.addr(i)).collect::<Vec<_>>().join(",")
    }

    /// The index of the server that says it leads; waits up to a minute for an election.
    pub fn leader(&self) -> usize {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let running = (0..Self::SIZE).filter(|&i| self.processes[i].is_some());
            if let Some(i) = running.into_iter().find(|&i| self.mode(i).as_deref() == Some("leader")) {
                return i;
            }
            assert!(Instant::now() < give_up, "no ZooKeeper server leads");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills server `i` (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self, i: usize) {
        if let Some((mut child, stdin)) = self.processes[i].take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Starts server `i` again on its ports and data directory and waits until it serves.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        assert!(self.wait_serving(i), "ZooKeeper server {} did not restart", i + 1);
    }

    /// What server `i` logged.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.server_dir(i).join("zookeeper.log")).unwrap_or_default()
    }

    /// A client session of the test's own, to any server of the ensemble.
    pub async fn client(&self) -> zk::Client {
        zk::Client::connect(&self.connect_string()).await.expect("a ZooKeeper session")
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..Self::SIZE {
            self.kill(i);
        }
    }
}

/// Creates `path` with `data`, or sets its data when it exists, creating missing parents.
pub async fn upsert(client: &zk::Client, path: &str, data: &str) {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match client.set_data(path, data.as_bytes(), None).await {
        Ok(_) => return,
        Err(zk::Error::NoNode) => {}
        Err(e) => panic!("set {path}: {e}"),
    }
    if let Some(parent) = path.rsplit_once('/').map(|(p, _)| p).filter(|p| !p.is_empty()) {
        client.mkdir(parent, &options).await.unwrap();
    }
    client.create(path, data.as_bytes(), &options).await.unwrap_or_else(|e| panic!("create {path}: {e}"));
}

/// Deletes `path` and everything under it.
pub async fn delete_tree(client: &zk::Client, path: &str) {
    let children = match client.get_children(path).await {
        Ok((children, _)) => children,
        Err(zk::Error::NoNode) => return,
        Err(e) => panic!("list {path}: {e}"),
    };
    for child in children {
        Box::pin(delete_tree(client, &format!("{path}/{child}"))).await;
    }
    match client.delete(path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => {}
        Err(e) => panic!("delete {path}: {e}"),
    }
}

/// A unique namespace for one test on a shared server.
pub fn namespace(test: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("/skyconf-test/{test}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A TCP proxy in front of a server that can cut every connection through it and refuse new
/// ones, as a network partition would.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    cuts: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `target` on an ephemeral port.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let (cuts, _) = tokio::sync::watch::channel(0);
        let (accepting, cut) = (Arc::clone(&open), cuts.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue; // dropped: connection closed at once
                }
                let mut cut = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { addr, open, cuts, task }
    }

    /// `127.0.0.1:port` of the proxy.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
