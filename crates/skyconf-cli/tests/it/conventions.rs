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

/// `skyconf fetch --service svc ARGS`: its status, stdout and stderr.
fn fetch(args: &[&str]) -> (Option<i32>, String, String) {
    let output = skyconf().args(["fetch", "--service", "svc", "--timeout", "10s"]).args(args).output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// Usability finding 13: `fetch` pointed at the admin port said "invalid compression flag: 123",
/// TLS against a plaintext port "received corrupt message of type InvalidContentType", and a
/// refused token gave no hint of the flag that sets it. Each now says what is wrong and what to
/// use; none is an answer of the server's (nothing on stdout, status 1), but a refused token is
/// (status 3).
#[test]
fn fetch_says_what_listens_at_a_wrong_port_or_scheme_and_which_flag_sets_the_token() {
    let mut command = serve_command();
    command.args(["--agent-token", "t0k", "--file"]).arg(example_document());
    let plain = Server::spawn(command);

    let (code, stdout, stderr) = fetch(&["--addr", &plain.admin_addr]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is skyconf's admin port (HTTP", plain.admin_addr))
            && stderr.contains("agent port, 11800 by default"),
        "{stderr}"
    );

    let (code, stdout, stderr) = fetch(&["--addr", &format!("https://{}", plain.grpc_addr)]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "does not speak TLS (it answers plaintext HTTP/2): use --addr http://{}",
            plain.grpc_addr
        )),
        "{stderr}"
    );

    let (code, _, stderr) = fetch(&["--addr", &plain.grpc_addr]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("the server wants an agent token: pass it with --authentication or SKYCONF_AUTHENTICATION"),
        "{stderr}"
    );
    let (code, _, stderr) = fetch(&["--addr", &plain.grpc_addr, "--authentication", "wrong"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("does not take this agent token: check --authentication or SKYCONF_AUTHENTICATION"),
        "{stderr}"
    );

    // A TLS agent port, called without TLS.
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let mut command = serve_command();
    command.arg("--file").arg(example_document()).arg("--grpc-tls-cert").arg(&cert).arg("--grpc-tls-key").arg(&key);
    let tls = Server::spawn(command);
    let (code, stdout, stderr) = fetch(&["--addr", &tls.grpc_addr]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(stderr.contains(&format!("{0} speaks TLS: use --addr https://{0}", tls.grpc_addr)), "{stderr}");
}

/// `rollout` refused by the server exits 3, as `fetch` does, and a refused admin token names the
/// flag and variable that set it.
#[test]
fn rollout_refusals_exit_3_and_name_the_token_flag() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "read r3ad\nwrite wr1te\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut command = serve_command();
    command.arg("--admin-token-file").arg(&tokens).arg("--file").arg(example_document());
    let server = Server::spawn(command);
    let admin = format!("http://{}", server.admin_addr);
    let rollout = |args: &[&str]| {
        let output = skyconf().args(["rollout", "--admin", &admin]).args(args).output().unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, stderr) = rollout(&["status"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("wants an admin token: pass it with --token or SKYCONF_ADMIN_TOKEN"), "{stderr}");
    let (code, stderr) = rollout(&["--token", "wrong", "status"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("does not know this token"), "{stderr}");
    let (code, stderr) = rollout(&["--token", "r3ad", "abort", "r1"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("need a write token, in --token or SKYCONF_ADMIN_TOKEN"), "{stderr}");
    let (code, stderr) = rollout(&["--token", "wr1te", "abort", "r1"]);
    assert_eq!(code, Some(3), "the server refused: no such rollout: {stderr}");
    // Nothing listens: 1, not an answer of the server's.
    let (code, stderr) = skyconf()
        .args(["rollout", "--admin", &format!("http://{}", closed_addr()), "status"])
        .output()
        .map(|o| (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned()))
        .unwrap();
    assert_eq!(code, Some(1), "{stderr}");
}

/// Usability finding 10: the start-up line names the page's URL, which answers; a wildcard
/// listen address is given as loopback, which a browser on this machine opens.
#[test]
fn the_start_up_line_names_the_page() {
    let server = Server::start(&example_document());
    let line = crate::util::json_line(server.startup_log.last().unwrap());
    let page = format!("http://{}/", server.admin_addr);
    assert_eq!(line["fields"]["page"], page.as_str(), "{line}");
    let mut http = std::net::TcpStream::connect(&server.admin_addr).unwrap();
    let request = format!("GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", server.admin_addr);
    std::io::Write::write_all(&mut http, request.as_bytes()).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut http, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("<html"), "the page answers: {answer:.200}");

    let mut command = skyconf();
    command.args([
        "--log-format",
        "json",
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "0.0.0.0:0",
        "--file",
    ]);
    command.arg(example_document());
    let wildcard = Server::spawn(command);
    let line = crate::util::json_line(wildcard.startup_log.last().unwrap());
    let port = wildcard.admin_addr.rsplit_once(':').unwrap().1;
    assert_eq!(line["fields"]["page"], format!("http://127.0.0.1:{port}/").as_str(), "{line}");
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

/// `skyconf ARGS --help`, which must succeed.
fn help(args: &[&str]) -> String {
    let output = skyconf().args(args).arg("--help").output().unwrap();
    assert!(output.status.success(), "{args:?} --help: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The names under a help text's `Commands:` heading (clap's own `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A command's line is indented two spaces; its wrapped description, further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The statuses a help text's `Exit status:` section lists, in order; panics, naming `what`,
/// when the section is missing or a line is not `  N  meaning` (or its continuation).
fn exit_statuses(what: &str, help: &str) -> Vec<u8> {
    let section: Vec<&str> =
        help.lines().skip_while(|l| *l != "Exit status:").skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(!section.is_empty(), "`{what} --help` has no `Exit status:` section:\n{help}");
    let mut statuses = Vec::new();
    for line in section {
        let bytes = line.as_bytes();
        match bytes {
            [b' ', b' ', d, b' ', b' ', c, ..] if d.is_ascii_digit() && *c != b' ' => statuses.push(d - b'0'),
            [b' ', b' ', b' ', b' ', b' ', c, ..] if *c != b' ' && !statuses.is_empty() => {}
            _ => panic!("`{what} --help`: `{line}` is not `  N  meaning` in its exit statuses:\n{help}"),
        }
    }
    assert_eq!(statuses.first(), Some(&0), "`{what} --help` starts its exit statuses at 0:\n{help}");
    assert!(statuses.windows(2).all(|w| w[0] < w[1]), "`{what} --help`: statuses in order:\n{help}");
    statuses
}

/// Usability finding 12: every subcommand, at every depth (rollout's included),
/// documents its exit statuses in one form, each status has one meaning across commands, and the
/// top-level help names every command and every status.
#[test]
fn help_lists_every_command_and_each_command_documents_its_exit_statuses() {
    let top = help(&[]);
    let about = top.lines().next().unwrap();
    let all = exit_statuses("skyconf", &top);
    assert_eq!(all, [0, 1, 2, 3, 4], "{top}");
    let commands = subcommands(&top);
    for command in ["serve", "fetch", "digest", "validate", "preview", "agent", "rollout"] {
        assert!(about.contains(command), "the about line names `{command}`: {about}");
        assert!(commands.iter().any(|c| c == command), "`skyconf --help` lists `{command}`: {top}");
    }
    let mut walked = 0;
    let mut queue: Vec<Vec<String>> = commands.into_iter().map(|c| vec![c]).collect();
    while let Some(path) = queue.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let what = format!("skyconf {}", args.join(" "));
        let text = help(&args);
        let statuses = exit_statuses(&what, &text);
        assert!(statuses.iter().all(|s| all.contains(s)), "`{what} --help` uses a status the top level does not list");
        // One meaning per status: 2 is a usage error (or a refused document) everywhere, 3 an
        // error the server answered, 4 a watched rollout that ended reverted or aborted.
        let meaning = |status: u8| {
            let mut lines = text.lines().skip_while(|l| !l.starts_with(&format!("  {status}  ")));
            let mut said = lines.next().unwrap()[5..].to_owned();
            for more in lines.take_while(|l| l.starts_with("     ")) {
                said.push(' ');
                said.push_str(more.trim());
            }
            said
        };
        assert!(meaning(2).ends_with("usage error"), "{what}: 2 is a usage error: {}", meaning(2));
        if statuses.contains(&3) {
            assert!(meaning(3).starts_with("the server"), "{what}: 3 is an error the server answered: {}", meaning(3));
        }
        if statuses.contains(&4) {
            assert!(meaning(4).contains("reverted or aborted"), "{what}: {}", meaning(4));
        }
        for sub in subcommands(&text) {
            let mut deeper = path.clone();
            deeper.push(sub);
            queue.push(deeper);
        }
        walked += 1;
    }
    assert!(walked >= 7 + 4, "every command and the subcommands of rollout ({walked})");
    // --addr has a default, so it is not required.
    for command in ["fetch", "agent"] {
        let sub = help(&[command]);
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
