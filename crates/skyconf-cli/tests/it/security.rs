//! `skyconf serve` with tokens, as a process: the agent token read from an OAP `application.yml`
//! and its `SW_AUTHENTICATION`, admin bearer tokens from the environment and a token file, and
//! token values that never reach `--help` or the log.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use skyconf_testkit::server::AdminClient;

use crate::util::{repo_root, skyconf};

const AGENT_TOKEN: &str = "agent-tok-5f1c";
const READ_TOKEN: &str = "read-tok-77ab";
const WRITE_TOKEN: &str = "write-tok-90de";

/// A `skyconf serve` process; its log lines are collected for inspection.
struct Server {
    child: Child,
    grpc_addr: String,
    admin_addr: String,
    log: mpsc::Receiver<String>,
}

impl Server {
    fn spawn(mut command: Command) -> Self {
        let mut child = command.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut seen = Vec::new();
        let (grpc_addr, admin_addr) = loop {
            let line = log.recv_timeout(Duration::from_secs(30)).expect("the server logs its addresses");
            seen.push(line.clone());
            let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if let (Some(g), Some(a)) = (json["fields"]["grpc_addr"].as_str(), json["fields"]["admin_addr"].as_str()) {
                break (g.to_owned(), a.to_owned());
            }
        };
        let server = Self { child, grpc_addr, admin_addr, log };
        for line in seen {
            server.assert_no_secret(&line);
        }
        server
    }

    fn assert_no_secret(&self, line: &str) {
        for secret in [AGENT_TOKEN, READ_TOKEN, WRITE_TOKEN] {
            assert!(!line.contains(secret), "a token in the log: {line}");
        }
    }

    /// Every log line so far.
    fn drain_log(&self) -> Vec<String> {
        self.log.try_iter().collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_takes_the_oap_token_and_admin_tokens_and_never_prints_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("application.yml");
    std::fs::write(
        &config,
        "receiver-sharing-server:\n  selector: ${SW_RECEIVER_SHARING_SERVER:default}\n  default:\n    authentication: ${SW_AUTHENTICATION:\"\"}\n",
    )
    .unwrap();
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, format!("# operators\nwrite {WRITE_TOKEN}\n")).unwrap();
    let mut command = skyconf();
    command
        .env("SW_AUTHENTICATION", AGENT_TOKEN)
        .env("SKYCONF_ADMIN_READ_TOKENS", READ_TOKEN)
        .env("SKYCONF_LOG", "debug")
        .args(["--log-format", "json", "serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .arg("--config")
        .arg(&config)
        .arg("--admin-token-file")
        .arg(&tokens)
        .arg("--file")
        .arg(repo_root().join("examples/agent-configurations.yaml"));
    let server = Server::spawn(command);

    let fetch = |token: Option<&str>| {
        let mut command = skyconf();
        command.args(["fetch", "--addr", &server.grpc_addr, "--service", "inventory-go"]);
        if let Some(token) = token {
            command.args(["--authentication", token]);
        }
        command.output().unwrap()
    };
    let denied = fetch(None);
    assert!(String::from_utf8_lossy(&denied.stdout).contains("PermissionDenied"), "{denied:?}");
    let denied = fetch(Some("wrong"));
    assert!(String::from_utf8_lossy(&denied.stdout).contains("PermissionDenied"), "{denied:?}");
    let allowed = fetch(Some(AGENT_TOKEN));
    assert!(allowed.status.success(), "{allowed:?}");
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("ConfigurationDiscoveryCommand"));

    let (anonymous, admin) =
        (AdminClient::new(&server.admin_addr), |token| AdminClient::new(&server.admin_addr).with_bearer(token));
    assert_eq!(anonymous.send_blocking("GET", "/healthz").status, 200);
    assert_eq!(anonymous.send_blocking("GET", "/metrics").status, 401);
    assert_eq!(admin(READ_TOKEN).send_blocking("GET", "/metrics").status, 200);
    assert_eq!(admin(WRITE_TOKEN).send_blocking("GET", "/api/v1/services").status, 200);
    assert_eq!(admin(READ_TOKEN).send_blocking("DELETE", "/api/v1/services/nobody").status, 403);
    let metrics = admin(READ_TOKEN).send_blocking("GET", "/metrics").body;
    assert!(metrics.contains("skyconf_grpc_denied_total{service=\"cds\"} 2"), "{metrics}");

    for line in server.drain_log() {
        server.assert_no_secret(&line);
    }
}

#[test]
fn help_never_shows_token_values_from_the_environment() {
    let output = skyconf()
        .env("SKYCONF_AGENT_TOKEN", AGENT_TOKEN)
        .env("SKYCONF_ADMIN_READ_TOKENS", READ_TOKEN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("--agent-token"), "{help}");
    assert!(!help.contains(AGENT_TOKEN) && !help.contains(READ_TOKEN), "{help}");
}
