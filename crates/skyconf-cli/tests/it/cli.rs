//! The `skyconf` binary end to end: digest, validate, fetch, and serve as a process (bound
//! addresses read from its JSON log, SIGTERM for a graceful stop), plus the grpcio interop check.

use std::path::PathBuf;

use predicates::prelude::*;

use crate::util::{Server, example_document, grpcio_available, repo_root, serve_command, skyconf, stdout_of};
use skyconf_testkit::server::AdminClient;

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn digest_prints_what_the_server_would_serve() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "a.yaml", "configurations:\n  svc:\n    agent.sample_rate: 0.50\n");
    let output = stdout_of(skyconf().arg("digest").arg(&path));
    let json: serde_json::Value = serde_json::from_slice(&output).unwrap();
    // Vector V7: 0.50 is a Double and prints as 0.5.
    assert_eq!(json["svc"]["config"]["agent.sample_rate"], "0.5");
    assert_eq!(
        json["svc"]["uuid"],
        "1dbe76507aaefff68630023ff0882b046fbc6857f7c20e28732a28dad21293888e70d0e0f32fad6593f16315a5459fb3dc81e8fdc5ce308d052f2dc4d8909f64"
    );
}

/// `skyconf digest doc.yaml | head`: a reader that leaves ends the command quietly, not in a panic.
#[test]
fn digest_into_a_pipe_closed_early_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // More than a pipe's buffer (64 KiB) of output: the write meets the closed pipe.
    let services: String = (0..2000).map(|i| format!("  svc-{i}:\n    agent.sample_n_per_3_secs: {i}\n")).collect();
    let path = write(&dir, "a.yaml", &format!("configurations:\n{services}"));
    let mut child = skyconf()
        .arg("digest")
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn digest_and_validate_refuse_a_bad_document_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "bad.yaml", "configurations:\n  svc:\n    k: ~\n");
    for command in ["digest", "validate"] {
        assert_cmd::Command::from_std(skyconf())
            .arg(command)
            .arg(&path)
            .assert()
            .code(2)
            .stderr(predicate::str::starts_with(format!("{}:3:", path.display())));
    }
}

#[test]
fn validate_and_digest_print_jumpable_file_line_column_errors() {
    // Usability finding 8: `f.yaml:line 4, column 33:` is not what editors jump to.
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "f.yaml", "configurations:\n  svc:\n    k: ~\n");
    for command in ["validate", "digest"] {
        let output = skyconf().arg(command).arg(&path).output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8(output.stderr).unwrap();
        let prefix = format!("{}:3:8: service `svc`: setting `k` has no value", path.display());
        assert!(stderr.starts_with(&prefix) && !stderr.contains("line 3"), "{stderr}");
        assert!(output.stdout.is_empty(), "errors go to stderr only");
    }
    let output = skyconf().args(["validate", "--json"]).arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (json["valid"].as_bool(), json["line"].as_u64(), json["column"].as_u64()),
        (Some(false), Some(3), Some(8))
    );
    assert!(json["error"].as_str().unwrap().starts_with("service `svc`"), "{json}");
}

#[test]
fn validate_reads_standard_input_and_a_configmap_directory() {
    let text = "configurations:\n  svc:\n    agent.sample_rate: \"0.5\"\n";
    assert_cmd::Command::from_std(skyconf())
        .args(["validate", "-"])
        .write_stdin(text)
        .assert()
        .success()
        .stdout(predicate::str::starts_with("<stdin>: valid, 1 service, 1 setting, 0 warnings"));
    // Usability finding 14: plurals, and the targeting groups counted.
    let targeted = format!(
        "{text}targeting:\n  svc:\n    - {{group: a, instances: [a-*], settings: {{}}}}\n    - {{group: b, share: 10%, settings: {{}}}}\n"
    );
    assert_cmd::Command::from_std(skyconf())
        .args(["validate", "-"])
        .write_stdin(targeted)
        .assert()
        .success()
        .stdout(predicate::str::starts_with("<stdin>: valid, 1 service, 1 setting, 2 targeting groups, 0 warnings"));
    assert_cmd::Command::from_std(skyconf())
        .args(["validate", "-"])
        .write_stdin("configurations:\n  svc:\n    k: ~\n")
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with("<stdin>:3:8: "));
    // The file store's directory form, as a ConfigMap is mounted: one file per key, the document
    // in `configuration-discovery.default.agentConfigurations`, `..data` machinery skipped.
    let dir = tempfile::tempdir().unwrap();
    let document =
        write(&dir, "configuration-discovery.default.agentConfigurations", "configurations:\n  svc:\n    k: ~\n");
    write(&dir, "alarm.default.alarm-settings", "not: [an agent document\n");
    assert_cmd::Command::from_std(skyconf())
        .arg("validate")
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with(format!("{}:3:8: ", document.display())));
    std::fs::write(&document, text).unwrap();
    assert_cmd::Command::from_std(skyconf()).arg("validate").arg(dir.path()).assert().success();
    let output = stdout_of(skyconf().arg("digest").arg(dir.path()));
    assert!(String::from_utf8(output).unwrap().contains("\"svc\""));
    // A directory without the document: the store would serve nothing; a warning says so.
    std::fs::remove_file(&document).unwrap();
    assert_cmd::Command::from_std(skyconf())
        .args(["validate", "--strict"])
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(predicate::str::contains("holds no agent configurations"));
    write(&dir, "agent.yaml", text);
    assert_cmd::Command::from_std(skyconf())
        .arg("validate")
        .arg(dir.path())
        .assert()
        .success()
        .stderr(predicate::str::contains("its 1 *.yaml/*.yml files are not part of the directory form"));
}

#[test]
fn validate_refuses_scalar_alias_amplification_with_line_and_column() {
    // Reliability finding F1: 113 KB of text that expanded to a 100 MB answer was "valid".
    let dir = tempfile::tempdir().unwrap();
    let mut text = format!("configurations:\n  svc-a:\n    k0: &s \"{}\"\n", "x".repeat(100_000));
    for i in 1..=1000 {
        text.push_str(&format!("    k{i}: *s\n"));
    }
    let path = write(&dir, "amp.yaml", &text);
    assert_cmd::Command::from_std(skyconf()).arg("validate").arg(&path).assert().code(2).stderr(
        predicate::str::starts_with(format!("{}:42:10: ", path.display()))
            .and(predicate::str::contains("aliases expanded")),
    );
}

#[test]
fn validate_warns_about_keys_no_agent_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "a.yaml", "configurations:\n  svc:\n    agent.sampel_n_per_3_secs: 1\n    agent.typo: 2\n");
    // Usability finding 8: a typo gets the key it was meant to be, not the list of every key.
    assert_cmd::Command::from_std(skyconf()).arg("validate").arg(&path).assert().success().stderr(
        predicate::str::contains(format!(
            "{}:3:5: warning: service `svc`: no known agent reads `agent.sampel_n_per_3_secs`; did you mean `agent.sample_n_per_3_secs`?\n",
            path.display()
        ))
        .and(predicate::str::contains("no known agent reads `agent.typo`; known keys: agent.sample_n_per_3_secs,")),
    );
    assert_cmd::Command::from_std(skyconf()).args(["validate", "--strict"]).arg(&path).assert().code(1);
    let output = stdout_of(skyconf().args(["validate", "--json"]).arg(&path));
    let json: serde_json::Value = serde_json::from_slice(&output).unwrap();
    assert_eq!(json["valid"], true);
    assert_eq!(
        json["warnings"][0],
        serde_json::json!({
            "line": 3, "column": 5, "service": "svc", "key": "agent.sampel_n_per_3_secs",
            "message": "no known agent reads `agent.sampel_n_per_3_secs`; did you mean `agent.sample_n_per_3_secs`?",
            "suggestion": "agent.sample_n_per_3_secs",
        })
    );
    assert_eq!(json["warnings"][1]["suggestion"], serde_json::Value::Null);
}

#[test]
fn validate_warns_about_a_repeated_configurations_key_and_repeated_services() {
    // Reliability finding F16: two documents concatenated. Served as the OAP serves it (the last
    // `configurations:` wins), so valid, but the services it drops are named by line.
    let dir = tempfile::tempdir().unwrap();
    let text = "configurations:\n  a: {agent.sample_rate: 0.5}\n  b: {agent.sample_rate: 0.5}\nconfigurations:\n  c: {agent.sample_rate: 1}\n  c: {agent.sample_rate: 0.1}\n";
    let path = write(&dir, "twice.yaml", text);
    assert_cmd::Command::from_std(skyconf()).arg("validate").arg(&path).assert().success().stderr(
        predicate::str::contains(":4:1: warning: `configurations:` is written 2 times (lines 1, 4)")
            .and(predicate::str::contains(":6:3: warning: service `c` is written 2 times (lines 5, 6)")),
    );
    assert_cmd::Command::from_std(skyconf()).args(["validate", "--strict"]).arg(&path).assert().code(1);
    let output = stdout_of(skyconf().args(["validate", "--json"]).arg(&path));
    let json: serde_json::Value = serde_json::from_slice(&output).unwrap();
    assert_eq!((json["valid"].as_bool(), json["services"].as_u64()), (Some(true), Some(1)));
    assert_eq!(json["warnings"].as_array().unwrap().len(), 2, "{json}");
}

#[test]
fn the_example_document_is_valid_without_warnings() {
    let example = example_document();
    assert_cmd::Command::from_std(skyconf())
        .args(["validate", "--strict"])
        .arg(example)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 warnings"));
}

#[test]
fn serve_answers_fetch_and_stops_cleanly_on_sigterm() {
    let server = Server::start(&example_document());
    let output = stdout_of(skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "inventory-go"]));
    let json: serde_json::Value = serde_json::from_slice(&output).unwrap();
    let args = &json["commands"][0]["args"];
    assert_eq!(json["commands"][0]["command"], "ConfigurationDiscoveryCommand");
    assert_eq!(args[0][0], "SerialNumber");
    assert_eq!(args[2], serde_json::json!(["agent.sample_rate", "0.5"]));
    let uuid = args[1][1].as_str().unwrap().to_owned();
    let output =
        stdout_of(skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "inventory-go", "--uuid", &uuid]));
    assert_eq!(String::from_utf8(output).unwrap().trim(), r#"{"commands":[]}"#);
    assert!(server.admin_addr.starts_with("127.0.0.1:"));
    let (status, took, log) = server.terminate_logged();
    assert!(status.success(), "SIGTERM is a clean exit");
    assert!(took < std::time::Duration::from_secs(1), "an idle server stops promptly: {took:?}");
    let last: serde_json::Value = serde_json::from_str(log.last().expect("a final line")).unwrap();
    assert_eq!(last["fields"]["message"], "Stopped.", "{log:#?}");
    assert!(last["fields"]["took_ms"].as_u64().unwrap() < 1000, "{last}");
}

#[test]
fn fetch_says_when_a_service_has_no_settings() {
    let server = Server::start(&example_document());
    let output = skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "inventroy-go"]).output().unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["commands"][0]["args"].as_array().unwrap().len(), 2, "{json}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("no settings for `inventroy-go`") && stderr.contains("check the service name"), "{stderr}");
    let output = skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "inventory-go"]).output().unwrap();
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn fetch_hold_waits_for_the_next_change() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agents.yaml");
    std::fs::write(&file, "configurations:\n  svc:\n    agent.sample_rate: \"0.5\"\n").unwrap();
    let server = Server::start(&file);
    let uuid = fetch_digest(&server.grpc_addr, "svc");
    let addr = server.grpc_addr.clone();
    let held = std::thread::spawn(move || {
        stdout_of(skyconf().args(["fetch", "--hold", "--addr", &addr, "--service", "svc", "--uuid", &uuid]))
    });
    let admin = AdminClient::new(&server.admin_addr);
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !admin.send_blocking("GET", "/metrics").body.lines().any(|l| l == "skyconf_held_polls 1") {
        assert!(std::time::Instant::now() < give_up, "the poll was never held");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::write(&file, "configurations:\n  svc:\n    agent.sample_rate: \"0.7\"\n").unwrap();
    let json: serde_json::Value = serde_json::from_slice(&held.join().unwrap()).unwrap();
    assert_eq!(json["commands"][0]["args"][2], serde_json::json!(["agent.sample_rate", "0.7"]), "{json}");
}

fn fetch_digest(addr: &str, service: &str) -> String {
    let output = stdout_of(skyconf().args(["fetch", "--addr", addr, "--service", service]));
    let json: serde_json::Value = serde_json::from_slice(&output).unwrap();
    json["commands"][0]["args"][1][1].as_str().unwrap().to_owned()
}

#[test]
fn serve_reads_an_oap_application_yml_and_its_sw_variables() {
    // An upstream skyconf on the example file, and a second one that reads it over DCS, configured
    // by an OAP-style application.yml whose placeholders come from the environment.
    let upstream = Server::start(&example_document());
    let port = upstream.grpc_addr.rsplit(':').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "application.yml",
        "core:\n  default:\n    role: Mixed\nconfiguration:\n  selector: ${SW_CONFIGURATION:none}\n  grpc:\n    host: ${SW_DCS_SERVER_HOST:\"\"}\n    port: ${SW_DCS_SERVER_PORT:80}\n    clusterName: ${SW_DCS_CLUSTER_NAME:SkyWalking}\n    period: ${SW_DCS_PERIOD:20}\n",
    );
    let mut command = serve_command();
    command
        .env("SW_CONFIGURATION", "grpc")
        .env("SW_DCS_SERVER_HOST", "127.0.0.1")
        .env("SW_DCS_SERVER_PORT", &port)
        .arg("--config")
        .arg(&config);
    let downstream = Server::spawn(command);
    assert_eq!(fetch_digest(&downstream.grpc_addr, "inventory-go"), fetch_digest(&upstream.grpc_addr, "inventory-go"));
}

#[test]
fn a_remote_store_that_is_down_at_start_means_no_change_not_empty() {
    // Nothing listens on port 1: the store is down and nothing is persisted, so the server starts
    // not ready and answers "no change", which keeps every agent's configuration.
    for (store, setting) in [("etcd", "endpoints=http://127.0.0.1:1"), ("zookeeper", "hostPort=127.0.0.1:1")] {
        let mut command = serve_command();
        command.args(["--store", store, "--store-setting", setting]);
        let server = Server::spawn(command);
        let output = stdout_of(skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "svc"]));
        assert_eq!(String::from_utf8(output).unwrap().trim(), r#"{"commands":[]}"#, "{store}");
    }
}

#[test]
fn serve_explains_a_missing_store() {
    assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .env_remove("SKYCONF_FILE")
        .env_remove("SKYCONF_STORE")
        .env_remove("SKYCONF_CONFIG")
        .assert()
        .failure()
        .stderr(predicate::str::contains("no store chosen"));
    assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--store", "consul"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("not supported yet"));
}

#[test]
fn serve_refuses_file_next_to_another_store() {
    // Usability finding 2: `--file` was silently ignored when --config or --store chose another
    // store.
    let dir = tempfile::tempdir().unwrap();
    let file = example_document();
    let config = write(&dir, "skyconf.yaml", "configuration:\n  selector: etcd\n");
    assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--file")
        .arg(&file)
        .env_remove("SKYCONF_STORE")
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "--file applies to the file store, but the config file selects `etcd`; drop --file or use --store file",
        ));
    assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--store", "none", "--file"])
        .arg(&file)
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .failure()
        .stderr(predicate::str::contains("--file applies to the file store, but --store selects `none`"));
    // --store file next to a config file that selects another store: --file is the document.
    let mut command = serve_command();
    command.arg("--config").arg(&config).args(["--store", "file", "--file"]).arg(&file);
    let server = Server::spawn(command);
    assert_eq!(fetch_digest(&server.grpc_addr, "inventory-go").len(), 128);
}

#[test]
fn serve_refuses_a_misspelt_security_key_instead_of_starting_without_it() {
    // Reliability finding F9: `agentTokn` was ignored and the server started with no token.
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "bad.yaml",
        "skyconf:\n  security:\n    agentTokn: T0k\nconfiguration:\n  selector: file\n  file: {path: agent.yaml}\n",
    );
    assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--file")
        .arg(example_document())
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("unknown setting `skyconf.security.agentTokn`")
                .and(predicate::str::contains("did you mean `agentToken`?"))
                .and(predicate::str::contains("bad.yaml")),
        );
}

#[test]
fn serve_refuses_to_start_on_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "bad.yaml", "configurations: [1, 2]\n");
    assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--file"])
        .arg(&path)
        .assert()
        .failure()
        // Usability finding 14: said as `validate` says it, not `file bad.yaml: line 1, column 17`.
        .stderr(
            predicate::str::contains(format!("{}:1:17: ", path.display()))
                .and(predicate::str::contains("line 1").not()),
        );
}

#[test]
fn serve_says_once_why_it_cannot_listen() {
    // Usability finding 7: `Address already in use (os error 98): Address already in use (os error
    // 98)`, the cause in the message and again as its source.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = assert_cmd::Command::from_std(skyconf())
        .args(["serve", "--grpc-addr", &addr, "--admin-addr", "127.0.0.1:0", "--file"])
        .arg(example_document())
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let stderr = String::from_utf8_lossy(&output);
    let line = stderr.lines().find(|line| line.starts_with("skyconf: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.starts_with(&format!("skyconf: cannot listen on {addr}: ")), "{line}");
    assert_eq!(line.matches("(os error").count(), 1, "the cause once: {line}");
}

#[test]
fn fetch_says_once_why_it_cannot_connect() {
    // Nothing listens on port 1. hyper-util puts `tcp connect error` in its chain twice.
    let output = skyconf().args(["fetch", "--addr", "127.0.0.1:1", "--service", "svc"]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("tcp connect error").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("(os error").count(), 1, "{stderr}");
}

/// The independent grpcio client (tests/interop/cds_client.py) checks every argument against the
/// answers the OAP-equivalent DigestTool computed for the example file. It needs python3 with
/// grpcio and grpcio-tools: `scripts/test.sh` installs them and sets SKYCONF_REQUIRE_INTEROP=1 so a
/// missing dependency fails instead of skipping.
#[test]
fn an_independent_grpcio_client_sees_exactly_the_oap_answers() {
    let root = repo_root();
    if !grpcio_available() {
        return;
    }
    let server = Server::start(&example_document());
    let output = crate::util::python()
        .arg(root.join("tests/interop/cds_client.py"))
        .args(["check", "--addr", &server.grpc_addr, "--golden"])
        .arg(root.join("tests/interop/golden/agent-configurations.json"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "grpcio check failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains(r#""ok": true"#));
}

#[test]
fn gateway_settings_that_cannot_work_stop_the_start_with_a_reason() {
    let file = example_document();
    let serve = |extra: &[&str], config: Option<&std::path::Path>| {
        let mut command = assert_cmd::Command::from_std(skyconf());
        command.args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--file"]).arg(&file);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        command.args(extra).env_remove("SKYCONF_UPSTREAM").timeout(std::time::Duration::from_secs(30));
        command.assert().failure().code(1)
    };
    serve(&["--upstream", "oap"], None).stderr(predicate::str::contains("upstream `oap`: expected HOST:PORT"));
    serve(&["--upstream", "oap:11800,oap-1:port"], None)
        .stderr(predicate::str::contains("upstream `oap-1:port`: expected HOST:PORT"));
    serve(&["--upstream-tls-ca", "/ca.pem"], None)
        .stderr(predicate::str::contains("--upstream-tls-* settings apply to gateway mode"));
    serve(&["--upstream", "oap:11800", "--upstream-tls-cert", "/c.pem", "--upstream-tls-key", "/c.key"], None)
        .stderr(predicate::str::contains("TLS towards the OAPs needs --upstream-tls-ca"));
    serve(&["--upstream", "oap:11800", "--upstream-tls-ca", "/nowhere/ca.pem"], None)
        .stderr(predicate::str::contains("cannot read /nowhere/ca.pem"));
    // The same from skyconf.yaml; an unknown setting there is named.
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, "skyconf.yaml", "skyconf:\n  gateway:\n    upstreams: [oap]\n");
    serve(&[], Some(&config)).stderr(predicate::str::contains("upstream `oap`: expected HOST:PORT"));
    let config = write(&dir, "skyconf.yaml", "skyconf:\n  gateway:\n    upstream: [oap:11800]\n");
    serve(&[], Some(&config))
        .stderr(predicate::str::contains("unknown setting `skyconf.gateway.upstream` (did you mean `upstreams`?)"));
    let config = write(
        &dir,
        "skyconf.yaml",
        "skyconf:\n  gateway:\n    upstreams: [oap:11800]\n    connectionsPerUpstream: 4\n    maxConnectionsPerUpstream: 3\n",
    );
    serve(&[], Some(&config))
        .stderr(predicate::str::contains("maxConnectionsPerUpstream (3) is below connectionsPerUpstream (4)"));
    let config =
        write(&dir, "skyconf.yaml", "skyconf:\n  gateway:\n    upstreams: [oap:11800]\n    queueWaitSecs: 0\n");
    serve(&[], Some(&config)).stderr(predicate::str::contains("queueWaitSecs must be at least 1"));
}

#[test]
fn serve_refuses_a_replica_name_no_store_can_hold() {
    let mut command = serve_command();
    command.arg("--file").arg(example_document()).args(["--replica-name", "eu/west 1"]);
    assert_cmd::Command::from_std(command)
        .assert()
        .failure()
        .stderr(predicates::str::contains("--replica-name").and(predicates::str::contains("cannot be a record name")));
}

#[test]
fn preview_says_where_each_value_comes_from_and_which_paths_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let text = "global-configurations:\n  agent.trace.ignore_path: /health/**\nconfigurations:\n  a:\n    agent.sample_n_per_3_secs: 5\ntargeting:\n  a:\n    - group: eu\n      properties: {zone: eu}\n      settings: {agent.sample_n_per_3_secs: 9}\n";
    let path = write(&dir, "a.yaml", text);
    let output = stdout_of(
        skyconf()
            .args([
                "preview",
                "--service",
                "a",
                "--instance",
                "a-1",
                "--property",
                "zone=eu",
                "--path",
                "/health/live",
                "--path",
                "/orders",
            ])
            .arg(&path),
    );
    let json: serde_json::Value = serde_json::from_slice(&output).unwrap();
    assert_eq!(json["group"], "eu");
    assert_eq!(json["settings"][0]["layer"], "group:eu");
    assert_eq!(json["settings"][1]["layer"], "global");
    assert_eq!(
        (json["ignored"][0]["ignored"].as_bool(), json["ignored"][1]["ignored"].as_bool()),
        (Some(true), Some(false))
    );
    let digest = stdout_of(skyconf().arg("digest").arg(&path));
    let digest: serde_json::Value = serde_json::from_slice(&digest).unwrap();
    assert_eq!(digest["*"]["config"]["agent.trace.ignore_path"], "/health/**");
    let bad = write(&dir, "bad.yaml", "global-configurations:\n  k:\nconfigurations: {}\n");
    assert_cmd::Command::from_std(skyconf())
        .args(["preview", "--service", "a"])
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(":2:4: "));
    let help = String::from_utf8(skyconf().args(["preview", "--help"]).output().unwrap().stdout).unwrap();
    assert!(help.contains("Exit status:\n  0  "), "{help}");
}
