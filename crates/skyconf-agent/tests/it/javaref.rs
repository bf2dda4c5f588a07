//! The agent against `RefServer`, the OAP-equivalent CDS endpoint on grpc-java + netty from
//! `bench/javaref` (beside the repository, not in it). It runs the scenarios of
//! `common::scenarios`; the server reloads its file every second, and each step waits until it
//! serves the new digest.
//!
//! It runs only when `SKYCONF_JAVAREF_CP` names the classpath file `bench/javaref/build.sh` writes
//! (`scripts/interop/agent-vs-javaref.sh` sets it up); without it the test says so and passes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::scenarios::{self, Backend, SERVICE};

const CLASSPATH_ENV: &str = "SKYCONF_JAVAREF_CP";

struct RefServer {
    classpath: String,
    dir: tempfile::TempDir,
    addr: SocketAddr,
    child: Option<Child>,
}

impl RefServer {
    fn file(&self) -> PathBuf {
        self.dir.path().join("agent.yaml")
    }

    fn write(&self, yaml: &str) {
        // Whole or not at all: the server may reload at any moment.
        let tmp = self.dir.path().join("agent.yaml.tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.file()).unwrap();
    }

    /// Starts `java RefServer PORT FILE false 1` and waits for its "listening" line.
    async fn spawn(&mut self) {
        let mut child = Command::new("java")
            .arg("-cp")
            .arg(&self.classpath)
            .arg("RefServer")
            .arg(self.addr.port().to_string())
            .arg(self.file())
            .arg("false")
            .arg("1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("java runs");
        let stdout = child.stdout.take().unwrap();
        let ready = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line.starts_with("listening"))
        });
        let listening = tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .expect("RefServer starts within a minute")
            .unwrap();
        assert!(listening, "RefServer exited before listening");
        self.child = Some(child);
    }
}

impl Drop for RefServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Backend for RefServer {
    async fn serve(&mut self, yaml: &str) {
        self.write(yaml);
        if self.child.is_none() {
            self.spawn().await;
        }
        let expected = scenarios::digest(yaml, SERVICE);
        scenarios::wait_until_served(self.addr, SERVICE, &expected, Duration::from_secs(20)).await;
    }

    async fn stop(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    async fn start(&mut self) {
        self.spawn().await;
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

#[tokio::test]
async fn every_scenario_against_the_oap_equivalent_refserver() {
    let Ok(classpath_file) = std::env::var(CLASSPATH_ENV) else {
        eprintln!(
            "skipped: {CLASSPATH_ENV} is not set; scripts/interop/agent-vs-javaref.sh builds RefServer and runs this test"
        );
        return;
    };
    let classpath = std::fs::read_to_string(&classpath_file)
        .unwrap_or_else(|e| panic!("cannot read {classpath_file}: {e}"))
        .trim()
        .to_owned();
    // A free port for the server; it may be reused for the restart.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut server = RefServer { classpath, dir: tempfile::tempdir().unwrap(), addr, child: None };
    scenarios::run_all(&mut server).await;
}
