//! `skyconf serve` with tokens, as a process: the agent token read from an OAP `application.yml`
//! and its `SW_AUTHENTICATION`, admin bearer tokens from the environment and a token file, and
//! token values that never reach `--help` or the log.

use skyconf_testkit::server::AdminClient;

use crate::util::{Server, example_document, serve_command, skyconf};

const AGENT_TOKEN: &str = "agent-tok-5f1c";
const READ_TOKEN: &str = "read-tok-77ab";
const WRITE_TOKEN: &str = "write-tok-90de";

/// Fails when `line` holds any of the tokens.
fn assert_no_secret(line: &str) {
    for secret in [AGENT_TOKEN, READ_TOKEN, WRITE_TOKEN] {
        assert!(!line.contains(secret), "a token in the log: {line}");
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
    let mut command = serve_command();
    command
        .env("SW_AUTHENTICATION", AGENT_TOKEN)
        .env("SKYCONF_ADMIN_READ_TOKENS", READ_TOKEN)
        .env("SKYCONF_LOG", "debug")
        .arg("--config")
        .arg(&config)
        .arg("--admin-token-file")
        .arg(&tokens)
        .arg("--file")
        .arg(example_document());
    let server = Server::spawn(command);
    for line in &server.startup_log {
        assert_no_secret(line);
    }

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
        assert_no_secret(&line);
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

/// N13: a cross-site write was refused (403) in silence; now it is logged, one line naming the
/// request and why, and counted in `skyconf_admin_refused_total{reason}`.
#[test]
fn a_cross_site_write_is_logged_once_and_counted() {
    let server = Server::start(&example_document());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let admin = AdminClient::new(&server.admin_addr);
    let headers = [("Content-Type", "application/json"), ("Origin", "http://evil.example")];
    let reply = runtime.block_on(admin.send("POST", "/api/v1/releases/1/rollback", &headers, ""));
    assert_eq!(reply.status, 403, "{}", reply.body);
    let metrics = runtime.block_on(admin.get("/metrics")).body;
    assert!(metrics.contains("skyconf_admin_refused_total{reason=\"cross_site\"} 1"), "{metrics}");
    assert!(metrics.contains("skyconf_admin_refused_total{reason=\"host\"} 0"), "present at zero: {metrics}");
    let mut seen = Vec::new();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.iter().any(|l: &String| l.contains("evil.example")) {
        assert!(std::time::Instant::now() < give_up, "the refusal is not logged: {seen:#?}");
        seen.extend(server.drain_log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let lines: Vec<&String> = seen.iter().filter(|l| l.contains("evil.example")).collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = crate::util::json_line(lines[0]);
    assert_eq!(line["fields"]["reason"], "cross_site", "{line}");
    assert_eq!(line["fields"]["path"], "/api/v1/releases/1/rollback", "{line}");
}

/// Usability finding 13: `skyconf agent` refused for its token said only `PermissionDenied`; it
/// now says which flag or variable sets the token, once per run of refusals.
#[test]
fn agent_refused_for_its_token_says_how_to_pass_one() {
    let mut command = serve_command();
    command.env("SKYCONF_AGENT_TOKEN", AGENT_TOKEN).arg("--file").arg(example_document());
    let server = Server::spawn(command);
    for (token, hint) in [
        (None, "pass it with --authentication or SKYCONF_AUTHENTICATION"),
        (Some("wrong"), "does not take this agent token: check --authentication or SKYCONF_AUTHENTICATION"),
    ] {
        let mut agent = skyconf();
        agent
            .args(["agent", "--addr", &server.grpc_addr, "--service", "inventory-go", "--interval", "200ms"])
            .env_remove("SKYCONF_AUTHENTICATION")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(token) = token {
            agent.args(["--authentication", token]);
        }
        let mut child = agent.spawn().unwrap();
        let lines = crate::util::read_lines(child.stderr.take().unwrap(), |line| line);
        let mut seen = Vec::new();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !seen.iter().any(|l: &String| l.contains(hint)) {
            let left = give_up.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("no hint `{hint}` in: {seen:#?}"),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        seen.extend(lines.try_iter());
        assert_eq!(seen.iter().filter(|l| l.contains("--authentication")).count(), 1, "once per run: {seen:#?}");
    }
}
