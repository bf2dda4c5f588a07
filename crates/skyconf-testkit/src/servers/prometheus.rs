//! A real Prometheus for tests: the `prometheus` binary (Debian's `prometheus`) started on an
//! ephemeral loopback port with a generated configuration that scrapes one target every second,
//! its TSDB in a temporary directory, killed when dropped.
//!
//! The binary is `SKYCONF_PROMETHEUS_BIN` when set, else `prometheus` on `PATH`, else
//! `/usr/bin/prometheus`. Without it, [`PrometheusServer::start`] returns `None` and the test
//! skips with a message, unless `SKYCONF_REQUIRE_PROMETHEUS` is set (scripts/test.sh sets it), in
//! which case it panics. Only the process is started: the package's systemd service is neither
//! needed nor touched.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;
use crate::server::AdminClient;

/// How long Prometheus may take to say it is ready.
const START_LIMIT: Duration = Duration::from_secs(30);

/// The variable that makes a missing binary a failure.
const REQUIRE: &str = "SKYCONF_REQUIRE_PROMETHEUS";

/// A running Prometheus scraping one target.
#[derive(Debug)]
pub struct PrometheusServer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl PrometheusServer {
    /// Starts Prometheus scraping `http://{target}/metrics` every second and waits until it is
    /// ready (`/-/ready`); `None` (after saying why) when the binary is missing and not required.
    pub async fn start(target: SocketAddr) -> Option<Self> {
        let binary = binary_or_skip()?;
        // A port picked by the kernel can be taken again before Prometheus binds it: try a few.
        for _ in 0..5 {
            let mut server = Self { dir: tempfile::tempdir().expect("a temp dir"), port: free_port(), child: None };
            server.spawn(&binary, target);
            if server.wait_ready().await {
                return Some(server);
            }
            server.kill();
        }
        panic!("prometheus did not start; see the logs above");
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What Prometheus logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn spawn(&mut self, binary: &std::path::Path, target: SocketAddr) {
        let config = self.dir.path().join("prometheus.yml");
        std::fs::write(&config, scrape_config(target)).expect("the configuration is written");
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", self.dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--log.level=warn")
            .stdin(Stdio::null());
        super::output_to(&mut command, &self.dir.path().join("prometheus.log"));
        self.child = Some(command.spawn().expect("prometheus starts"));
    }

    /// Polls `/-/ready` until it answers 200; false when the process exited or took too long.
    async fn wait_ready(&mut self) -> bool {
        let give_up = Instant::now() + START_LIMIT;
        let client = AdminClient::new(format!("127.0.0.1:{}", self.port));
        while Instant::now() < give_up {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                eprintln!("prometheus exited with {status}: {}", self.log());
                return false;
            }
            if client.try_send("GET", "/-/ready", &[], "").await.is_ok_and(|reply| reply.status == 200) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("prometheus was not ready within {START_LIMIT:?}: {}", self.log());
        false
    }

    /// Kills the process and waits for it to exit.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A configuration scraping `target` every second (the shortest interval that keeps a test's
/// wait for a new value short without loading a shared machine).
fn scrape_config(target: SocketAddr) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: skyconf-test\n    static_configs:\n      - targets: ['{target}']\n"
    )
}

/// The binary; `None` (after saying why) when it is missing and not required.
fn binary_or_skip() -> Option<PathBuf> {
    let fallback = PathBuf::from("/usr/bin/prometheus");
    let binary = super::find_program(Some("SKYCONF_PROMETHEUS_BIN"), "prometheus", Some(fallback));
    if binary.is_none() {
        super::skip_unless_required(
            REQUIRE,
            "no `prometheus` binary was found (apt-get install prometheus, or set SKYCONF_PROMETHEUS_BIN)",
            "skipping: no `prometheus` binary (apt-get install prometheus, or run scripts/test.sh)",
        );
    }
    binary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_scrapes_the_target_every_second() {
        let config = scrape_config("127.0.0.1:4321".parse().unwrap());
        assert!(config.contains("scrape_interval: 1s"), "{config}");
        assert!(config.contains("targets: ['127.0.0.1:4321']"), "{config}");
    }
}
