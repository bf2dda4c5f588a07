//! Global settings (`global-configurations:`) as an independent client sees them: grpcio pollers
//! with the Java agent's deadline (so their polls are held), one for a service with its own
//! entry and one for a service without, against `skyconf serve` in its default configuration.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skyconf_testkit::server::AdminClient;

use crate::held::{HELD, replace, wait_for_metric};
use crate::util::{Server, grpcio_available, python, repo_root, skyconf, stdout_of};

const DOCUMENT: &str = "global-configurations:\n  agent.sample_n_per_3_secs: \"10\"\n  agent.ignore_suffix: \".jpg\"\nconfigurations:\n  listed:\n    agent.span_limit_per_segment: \"300\"\n  own-wins:\n    agent.sample_n_per_3_secs: \"50\"\n";

/// A grpcio poller with the Java agent's timing (`cds_client.py java-poll`), its answers read
/// line by line.
struct Poller {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Poller {
    fn start(addr: &str, service: &str) -> Self {
        let mut child = python()
            .arg(repo_root().join("tests/interop/cds_client.py"))
            .args(["java-poll", "--addr", addr, "--service", service, "--interval", "2", "--timeout", "30"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(serde_json::from_str(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The next answer that carries a command (within `within`).
    fn next_command(&self, within: Duration) -> Value {
        let give_up = Instant::now() + within;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("a command in time");
            assert!(line.get("error").is_none(), "{line}");
            if line.get("config").is_some() {
                return line;
            }
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `skyconf digest` says each service is served from `path` (`*`: services without an entry).
fn digests(path: &std::path::Path) -> Value {
    serde_json::from_slice(&stdout_of(skyconf().arg("digest").arg(path))).unwrap()
}

#[test]
fn a_global_change_reaches_grpcio_agents_with_and_without_their_own_entry_while_held() {
    if !grpcio_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent-configurations.yaml");
    std::fs::write(&path, DOCUMENT).unwrap();
    let server = Server::start(&path);
    let admin = AdminClient::new(&server.admin_addr);
    let listed = Poller::start(&server.grpc_addr, "listed");
    let unlisted = Poller::start(&server.grpc_addr, "unlisted");
    let own = Poller::start(&server.grpc_addr, "own-wins");

    // The service's own settings, then the global ones it does not set; a service without an
    // entry gets the global ones; its own setting wins. Each digest is what `skyconf digest` says.
    let served = digests(&path);
    let first = [(&listed, "listed"), (&unlisted, "*"), (&own, "own-wins")].map(|(poller, name)| {
        let answer = poller.next_command(Duration::from_secs(10));
        assert_eq!(answer["uuid"], served[name]["uuid"], "{name}: {answer}");
        answer["config"].clone()
    });
    assert_eq!(
        first,
        [
            json!({"agent.span_limit_per_segment": "300", "agent.sample_n_per_3_secs": "10", "agent.ignore_suffix": ".jpg"}),
            json!({"agent.sample_n_per_3_secs": "10", "agent.ignore_suffix": ".jpg"}),
            json!({"agent.sample_n_per_3_secs": "50", "agent.ignore_suffix": ".jpg"}),
        ]
    );

    // Every poller echoes its digest and is held; one global edit reaches all three at once.
    wait_for_metric(&admin, HELD, 3, Duration::from_secs(10));
    let edited = DOCUMENT.replace("\".jpg\"", "\".jpg,.png\"");
    replace(&path, &edited);
    let changed_at = Instant::now();
    let served = digests(&path);
    for (poller, name, own_sample) in [(&listed, "listed", "10"), (&unlisted, "*", "10"), (&own, "own-wins", "50")] {
        let answer = poller.next_command(Duration::from_secs(5));
        assert_eq!(answer["uuid"], served[name]["uuid"], "{name}: {answer}");
        assert_eq!(answer["config"]["agent.ignore_suffix"], ".jpg,.png", "{name}: {answer}");
        assert_eq!(answer["config"]["agent.sample_n_per_3_secs"], own_sample, "{name}: {answer}");
    }
    let took = changed_at.elapsed();
    assert!(took < Duration::from_secs(2), "the global change reached the held agents in {took:?}");
    // All three were answered from their held polls, by the change.
    let changed = "skyconf_held_polls_released_total{reason=\"changed\"}";
    wait_for_metric(&admin, changed, 3, Duration::from_secs(5));
}
