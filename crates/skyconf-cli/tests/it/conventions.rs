//! Usability findings 7–9 and issue 17, the CLI's conventions: results on stdout, errors on
//! stderr, documented exit statuses, `--addr` as a URI, messages that say what happened.

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use crate::util::{Server, example_document, serve_command, skyconf};

/// A loopback address nothing listens on.
fn closed_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[test]
fn fetch_puts_answers_on_stdout_and_failures_on_stderr_with_documented_statuses() {
    let mut command = serve_command();
    command.args(["--agent-token", "t0k", "--file"]).arg(example_document());
    let server = Server::spawn(command);
    let uri = format!("http://{}", server.grpc_addr);

    // `--addr http://HOST:PORT` reaches the server (not "dns error: dns error").
    let ok = skyconf()
        .args(["fetch", "--addr", &uri, "--service", "inventory-go", "--authentication", "t0k"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ConfigurationDiscoveryCommand"));
    assert!(ok.stderr.is_empty(), "{ok:?}");

    // The server answered an error status: JSON on stdout, a line on stderr, status 3.
    let denied = skyconf().args(["fetch", "--addr", &uri, "--service", "inventory-go"]).output().unwrap();
    assert_eq!(denied.status.code(), Some(3), "{denied:?}");
    let json: serde_json::Value = serde_json::from_slice(&denied.stdout).unwrap();
    assert_eq!((json["error"].as_str(), json["code"].as_u64()), (Some("PermissionDenied"), Some(7)), "{json}");
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(stderr.starts_with(&format!("skyconf: the server at {uri} answered PermissionDenied")), "{stderr}");

    // No server: nothing on stdout, the reason on stderr, status 1.
    let closed = format!("http://{}", closed_addr());
    let down = skyconf().args(["fetch", "--addr", &closed, "--service", "svc"]).output().unwrap();
    assert_eq!(down.status.code(), Some(1), "{down:?}");
    assert!(down.stdout.is_empty(), "{down:?}");
    assert!(String::from_utf8_lossy(&down.stderr).starts_with(&format!("skyconf: cannot connect to {closed}: ")));

    // Every client command says the same about an unsupported spelling, before connecting.
    for command in [&["fetch", "--service", "svc"][..], &["agent", "--service", "svc"]] {
        let bad = skyconf().args(command).args(["--addr", "grpc://127.0.0.1:1"]).output().unwrap();
        assert_eq!(bad.status.code(), Some(2), "{command:?}: {bad:?}");
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(stderr.contains("use HOST:PORT, http://HOST:PORT or https://HOST:PORT"), "{command:?}: {stderr}");
    }
}

/// What `skyconf agent ARGS` logs on stderr in 1.5 s against a port nothing listens on.
fn agent_stderr(addr: &str, args: &[&str]) -> String {
    let child = skyconf()
        .args(["agent", "--addr", addr, "--service", "svc", "--interval", "200ms"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let output = child.wait_with_output().unwrap();
    assert!(output.stdout.is_empty());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn agent_says_it_cannot_connect_and_to_which_address() {
    // Usability finding 7: "the server answered The service is currently unavailable" when the
    // connection was refused. Finding 13: the refusal was said twice (the chain doubled), a named
    // instance added "Instance identity not accepted" (nothing refused it) and the first line read
    // `instance=Some("order-1")`.
    let addr = format!("http://{}", closed_addr());
    for args in [&[][..], &["--instance", "order-1"]] {
        let stderr = agent_stderr(&addr, args);
        assert!(stderr.contains(&format!("addr={addr}")), "{stderr}");
        assert!(stderr.contains("cannot reach the server: "), "{stderr}");
        assert!(!stderr.contains("the server answered"), "{stderr}");
        assert_eq!(stderr.matches("Connection refused").count(), 1, "one line, once per outage: {stderr}");
        assert!(!stderr.contains("transport error: tcp connect error: transport error"), "{stderr}");
        assert!(!stderr.contains("identity"), "the identity was not refused: {stderr}");
        assert!(!stderr.contains("Some("), "{stderr}");
    }
}

#[test]
fn help_lists_every_command_and_each_command_documents_its_exit_statuses() {
    let help = String::from_utf8(skyconf().arg("--help").output().unwrap().stdout).unwrap();
    let about = help.lines().next().unwrap();
    for command in ["serve", "fetch", "digest", "validate", "agent"] {
        assert!(about.contains(command), "the about line names `{command}`: {about}");
        let sub = skyconf().args([command, "--help"]).output().unwrap();
        assert!(sub.status.success());
        let sub = String::from_utf8(sub.stdout).unwrap();
        assert!(sub.contains("Exit status:\n  0  "), "`{command} --help` documents exit statuses:\n{sub}");
    }
    // --addr has a default, so it is not required.
    for command in ["fetch", "agent"] {
        let sub = String::from_utf8(skyconf().args([command, "--help"]).output().unwrap().stdout).unwrap();
        let usage = sub.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(!usage.contains("--addr"), "{usage}");
        assert!(sub.contains("[default: 127.0.0.1:11800]"), "{sub}");
    }
}

#[test]
fn a_k8s_configmap_selector_points_to_the_mounted_directory_and_the_advice_works() {
    // Usability finding 9.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("application.yml");
    std::fs::write(&config, "configuration:\n  selector: ${SW_CONFIGURATION:k8s-configmap}\n").unwrap();
    let output = skyconf()
        .args(["serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env_remove("SKYCONF_STORE")
        .env_remove("SKYCONF_FILE")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("mount the ConfigMap as a volume"), "{stderr}");
    assert!(stderr.contains("`skyconf serve --store file --file /MOUNT/DIR`"), "{stderr}");

    // The advice, with the same config file: a ConfigMap's mount, `..data` machinery included.
    let mount = dir.path().join("configmap");
    let data = mount.join("..2026_12_03");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(example_document(), data.join("configuration-discovery.default.agentConfigurations")).unwrap();
    std::os::unix::fs::symlink("..2026_12_03", mount.join("..data")).unwrap();
    std::os::unix::fs::symlink(
        "..data/configuration-discovery.default.agentConfigurations",
        mount.join("configuration-discovery.default.agentConfigurations"),
    )
    .unwrap();
    let mut command = serve_command();
    command.arg("--config").arg(&config).args(["--store", "file", "--file"]).arg(&mount);
    let server = Server::spawn(command);
    let answer = skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "inventory-go"]).output().unwrap();
    assert!(String::from_utf8_lossy(&answer.stdout).contains("ConfigurationDiscoveryCommand"), "{answer:?}");
    // And `validate` reads the same directory the same way.
    let validate = skyconf().arg("validate").arg(&mount).output().unwrap();
    assert!(validate.status.success(), "{validate:?}");
}
