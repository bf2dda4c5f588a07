//! A real ZooKeeper server for tests (Debian's `zookeeper` package: its jar and Java), on
//! loopback with an ephemeral port and a temporary data directory, plus a TCP proxy that can cut
//! a client off from it. Shared by the sources and the server tests.
//!
//! The JVM runs under a small shell wrapper that kills it when its stdin closes, so a server
//! never outlives the test process, even one that aborts.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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
            server.port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
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
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        let script = "java \"$@\" & pid=$!; read -r _; kill -9 $pid; wait $pid; exit 0";
        let mut child = Command::new("sh")
            .args(["-c", script, "zookeeper"])
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"])
            .args(["-cp", &format!("{JAR}:{LOGGER_JAR}")])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("sh runs");
        let stdin = child.stdin.take().unwrap();
        self.process = Some((child, stdin));
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

    /// Whether the server says it is serving requests (`srvr` names its mode only then; `ruok`
    /// answers before the database is loaded).
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(&self.socket_addr(), Duration::from_secs(1)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = String::new();
        stream.write_all(b"srvr").is_ok() && stream.read_to_string(&mut reply).is_ok() && reply.contains("Mode: ")
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
