//! The admin web page in a real headless Chromium (driven by `tests/web/page_test.py` through
//! chromedriver): it shows a service and its configuration, shows the releases, and its rollback
//! button restores exactly what an agent fetched before — checked over gRPC with a tonic client.
//! It keeps unsaved edits through its periodic refresh and saves what was typed, says when the
//! store's document is refused, pages, sorts and filters the services, opens services and
//! releases by URL, compares any two releases, shows the instances agents said they are, and
//! starts, promotes and aborts staged rollouts (the agents checked between the page's steps).
//!
//! `SKYCONF_SCREENSHOTS=DIR` makes the page tests write the documentation's screenshots
//! (`docs/images/page-*.png`) into DIR.
//!
//! Needs `chromium` and `chromedriver` (Debian: `chromium`, `chromium-driver`) and python3.
//! Skipped with a message when they are missing, unless SKYCONF_REQUIRE_BROWSER=1 (which
//! `scripts/test.sh` sets after `scripts/deps/browser.sh` installed them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use skyconf_server::security::{Role, Secret};
use skyconf_server::{FleetOptions, InstanceIdentity, ServeConfig};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, loopback};

const SERVICE: &str = "mall-order-service";
const V1: &str = "configurations:\n  mall-order-service:\n    agent.sample_n_per_3_secs: 10\n    agent.ignore_suffix: .jpg,.png\n  other:\n    agent.span_limit_per_segment: 100\n";
const V2: &str = "configurations:\n  mall-order-service:\n    agent.sample_n_per_3_secs: 20\n  other:\n    agent.span_limit_per_segment: 100\n";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn available(program: &str, arg: &str) -> bool {
    let env = match program {
        "chromium" => std::env::var("CHROMIUM").ok(),
        "chromedriver" => std::env::var("CHROMEDRIVER").ok(),
        _ => None,
    };
    Command::new(env.as_deref().unwrap_or(program)).arg(arg).output().is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_service_and_rolls_back_in_a_real_browser() {
    roll_back_in_a_browser(None).await;
}

/// With admin tokens the page is still served, asks for a token when the API answers 401, and
/// for a write token when the rollback answers 403 (page_test.py fails on any other prompt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_admin_tokens_the_page_asks_for_a_read_then_a_write_token() {
    roll_back_in_a_browser(Some(("reader-t0ken", "writer-t0ken"))).await;
}

/// A wiped file is held by the fleet-reset guard; the page's button (and its confirmation)
/// installs it now, and an agent then gets EMPTY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_confirms_a_held_change_in_a_real_browser() {
    let Some((_dir, path, running)) = page_server(V1, loopback()).await else { return };
    let cds = running.cds().await;
    assert!(cds.fetch(SERVICE, "").await.is_some());
    std::fs::write(&path, "configurations: {}\n").unwrap();
    skyconf_testkit::server::eventually("the wipe is held", || running.served.held().is_some()).await;
    assert!(cds.fetch(SERVICE, "").await.is_some(), "still served while held");

    page_test(&running, strings(&["--held", "confirm"])).await;
    assert!(running.served.held().is_none());
    assert!(running.served.snapshot().table.is_empty(), "the held change is installed");
    running.stop().await.unwrap();
}

/// A server on a file holding `text`, for a test in the browser: `None` when the browser is not
/// there (see [`browser_available`]).
async fn page_server(text: &str, config: ServeConfig) -> Option<(tempfile::TempDir, PathBuf, Server)> {
    if !browser_available() {
        return None;
    }
    let (dir, path) = temp_file("agents.yaml", text);
    let running = Server::start(FileSource::new(&path), config).await;
    Some((dir, path, running))
}

/// Whether chromium, chromedriver and python3 run; fails instead when SKYCONF_REQUIRE_BROWSER is
/// set and they do not.
fn browser_available() -> bool {
    let missing: Vec<_> = [("chromium", "--version"), ("chromedriver", "--version"), ("python3", "--version")]
        .into_iter()
        .filter(|(p, a)| !available(p, a))
        .map(|(p, _)| p)
        .collect();
    if !missing.is_empty() {
        assert!(
            std::env::var_os("SKYCONF_REQUIRE_BROWSER").is_none(),
            "SKYCONF_REQUIRE_BROWSER is set but {missing:?} cannot run (scripts/deps/browser.sh installs them)"
        );
        eprintln!("skipped: {missing:?} not installed (apt-get install chromium chromium-driver python3)");
        return false;
    }
    true
}

/// Serves V1, edits the file to V2, and has the browser roll back to V1's release; `tokens`:
/// the admin read and write tokens the server requires and the browser is given when it asks.
async fn roll_back_in_a_browser(tokens: Option<(&str, &str)>) {
    if !browser_available() {
        return;
    }

    let (dir, path) = temp_file("agents.yaml", V1);
    let mut config = ServeConfig { data_dir: Some(dir.path().join("data")), ..loopback() };
    if let Some((read, write)) = tokens {
        config.security.admin_tokens.add(Role::Read, Secret::new(read));
        config.security.admin_tokens.add(Role::Write, Secret::new(write));
    }
    let running = Server::start(FileSource::new(&path), config).await;
    let cds = running.cds().await;
    let before = cds.fetch(SERVICE, "").await.expect("a first fetch gets the command");
    let first_release = running.releases.latest().unwrap().meta.id;

    // A hand edit of the file: the page must show it, then roll it back.
    std::fs::write(&path, V2).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    while running.releases.latest().unwrap().meta.id == first_release {
        assert!(Instant::now() < give_up, "the edit was never recorded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The release is recorded just before the install: wait for the new digest too.
    cds.wait_for_new_digest(SERVICE, before.uuid.as_deref()).await;
    let edited = cds.fetch(SERVICE, "").await.expect("a first fetch gets the command");
    assert_eq!(
        edited.config.iter().find(|(k, _)| k == "agent.sample_n_per_3_secs").map(|(_, v)| v.as_str()),
        Some("20")
    );

    let mut args = strings(&["--service", SERVICE, "--key", "agent.sample_n_per_3_secs", "--value", "20"]);
    args.extend(strings(&["--rollback-to", &first_release.to_string(), "--expect", "10"]));
    if let Some((read, write)) = tokens {
        args.extend(strings(&["--read-token", read, "--write-token", write]));
    }
    let stdout = page_test(&running, args).await;
    if tokens.is_some() {
        assert!(stdout.contains("admin token (read or write role)") && stdout.contains("write role"), "{stdout}");
    }

    let after = cds.fetch(SERVICE, "").await.expect("a first fetch gets the command");
    assert_eq!(after.uuid, before.uuid, "the rollback restores the digest the agent had");
    assert_eq!(after.config, before.config, "and exactly the values");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "the file itself is back, written by atomic rename");
    let latest = running.releases.latest().unwrap();
    assert_eq!(latest.meta.rollback_of, Some(first_release));
    running.stop().await.unwrap();
}

/// Runs `page_test.py` with `args` against `running`'s page; its JSON line on success.
async fn page_test(running: &Server, args: Vec<String>) -> String {
    let script = repo_root().join("tests/web/page_test.py");
    let url = format!("http://{}/", running.admin_addr);
    let mut args = args;
    if let Some(dir) = std::env::var_os("SKYCONF_SCREENSHOTS") {
        args.push("--screenshot".into());
        args.push(dir.to_string_lossy().into_owned());
    }
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(script).args(["--url", &url]).args(args).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains("\"ok\": true"),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// Writes `text` to `path` and waits for the release it becomes; its id.
async fn edit(running: &Server, path: &Path, text: &str) -> u64 {
    let before = running.releases.latest().map(|r| r.meta.id);
    std::fs::write(path, text).unwrap();
    skyconf_testkit::server::eventually("the edit is recorded", || {
        running.releases.latest().map(|r| r.meta.id) != before
    })
    .await;
    running.releases.latest().unwrap().meta.id
}

/// Finding 4 of the usability review: typing in the service editor, then clicking elsewhere or
/// "Dry run", let the 2 s refresh overwrite the editor, and "Save" saved the old configuration.
/// Now both editors keep their drafts through refreshes, and Save serves what was typed. Both
/// editors also show the warnings `skyconf validate` prints as one types, before Save (finding 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_keeps_unsaved_edits_through_refreshes_and_saves_what_was_typed() {
    if !browser_available() {
        return;
    }
    let (dir, path) = temp_file("agents.yaml", V1);
    let running =
        Server::start(FileSource::new(&path), ServeConfig { data_dir: Some(dir.path().join("data")), ..loopback() })
            .await;
    let cds = running.cds().await;
    let before = cds.fetch(SERVICE, "").await.expect("configured");

    let out = page_test(
        &running,
        strings(&[
            "--scenario",
            "editing",
            "--service",
            SERVICE,
            "--key",
            "agent.sample_n_per_3_secs",
            "--value",
            "42",
        ]),
    )
    .await;
    assert!(out.contains("\"refused_inline\""), "{out}");
    assert!(out.contains("\"warned\"") && out.contains("did you mean"), "warnings shown before Save: {out}");

    cds.wait_for_new_digest(SERVICE, before.uuid.as_deref()).await;
    let after = cds.fetch(SERVICE, "").await.expect("still configured");
    assert_eq!(after.config, [("agent.sample_n_per_3_secs".to_owned(), "42".to_owned())], "what was typed is served");
    assert!(std::fs::read_to_string(&path).unwrap().contains("42"));
    running.stop().await.unwrap();
}

/// The header does not say just "watching" while the store's document is refused; it names one
/// counter (the release) and says a file is watched, not connected; and an unconfigured name
/// polled by one agent reads "1 agent".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_header_says_when_the_store_document_is_refused() {
    let Some((_dir, path, running)) = page_server(V1, loopback()).await else { return };
    let cds = running.cds().await;
    // Two polls over one connection: an agent, not a one-off poll.
    cds.fetch("ghost-service", "").await;
    cds.fetch("ghost-service", "").await;
    std::fs::write(&path, "configurations:\n  mall-order-service:\n    agent.sample_n_per_3_secs: [10\n").unwrap();
    skyconf_testkit::server::eventually("the bad document is refused", || running.served.last_rejection().is_some())
        .await;

    let out = page_test(&running, strings(&["--scenario", "refused", "--unconfigured", "ghost-service"])).await;
    assert!(out.contains("is refused (line 4)"), "the header names the refused line (the end of the file): {out}");
    assert!(out.contains("watching") && !out.contains("connected"), "a file is watched, not connected: {out}");
    running.stop().await.unwrap();
}

/// Usability finding 17: on first load the page's right half was two empty "Select a …"
/// panels, gateway mode was invisible, and the header wrapped. Now it opens on an overview (the
/// fleet, the last change, the store, each OAP up or not), the header says how many OAPs are up,
/// stays on one line at 800 px, and a release without author reads alike in every place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_opens_on_an_overview_with_the_gateway_oaps_and_fits_800_px() {
    use crate::rollouts::{TestAgent, V1, stop_all, until};
    if !browser_available() {
        return;
    }
    let oap = skyconf_testkit::upstream::Upstream::start("oap-up").await;
    // An address nothing listens on: the second OAP is down.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let (_dir, path) = temp_file("agents.yaml", V1);
    let gateway = skyconf_server::GatewayConfig::new(vec![oap.addr.to_string(), down.clone()]);
    let running = Server::start(FileSource::new(&path), ServeConfig { gateway: Some(gateway), ..loopback() }).await;
    let admin = running.admin();
    let agents: Vec<TestAgent> =
        (0..2).map(|i| TestAgent::spawn(running.grpc_addr, &format!("pod-{i}"), &[])).collect();
    until("both agents applied the document and one OAP is up", async || {
        let status = admin.get_json("/api/v1/status").await;
        let services = admin.get_json("/api/v1/services").await;
        status["gateway"]["upstreams"][0]["up"] == true && services["services"][0]["applied"] == 2
    })
    .await;
    let release = running.releases.latest().unwrap().meta.id.to_string();
    let args = ["--scenario", "overview", "--agents", "2", "--down-upstream", &down, "--rollback-to", &release];
    let out = page_test(&running, strings(&args)).await;
    assert!(out.contains("OAP 1/2 up"), "{out}");
    stop_all(agents).await;
    running.stop().await.unwrap();
}

/// 151 services: paged 100 at a time, filtered, sorted; a service and a comparison of two
/// releases opened by pasted URLs; the service's history; no horizontal scroll at 1400 px.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_pages_sorts_filters_links_and_compares_releases() {
    if !browser_available() {
        return;
    }
    let document = |sample: u32, other: &str| {
        let many: String = (0..150)
            .map(|i| {
                format!("  svc-{i:03}:\n    agent.span_limit_per_segment: {}\n", if i == 7 { other } else { "300" })
            })
            .collect();
        format!(
            "configurations:\n  mall-order-service:\n    agent.sample_n_per_3_secs: {sample}\n    agent.ignore_suffix: .jpg,.png\n    plugin.http.http_params_length_threshold: 1024\n{many}"
        )
    };
    let (dir, path) = temp_file("agents.yaml", &document(10, "300"));
    let running =
        Server::start(FileSource::new(&path), ServeConfig { data_dir: Some(dir.path().join("data")), ..loopback() })
            .await;
    let first = running.releases.latest().unwrap().meta.id;
    edit(&running, &path, &document(20, "300")).await;
    edit(&running, &path, &document(20, "500")).await;
    let last = edit(&running, &path, &document(30, "500")).await;
    // An agent that applied the current configuration, for the fleet column.
    let cds = running.cds().await;
    let served = cds.fetch(SERVICE, "").await.unwrap();
    cds.fetch(SERVICE, served.uuid.as_deref().unwrap_or_default()).await;

    let (first, last) = (first.to_string(), last.to_string());
    let out = page_test(
        &running,
        strings(&[
            "--scenario",
            "browse",
            "--service",
            SERVICE,
            "--key",
            "agent.sample_n_per_3_secs",
            "--services",
            "151",
            "--history",
            "3",
            "--compare",
            &first,
            &last,
        ]),
    )
    .await;
    assert!(out.contains("10 + 30"), "the comparison shows 10 → 30: {out}");
    running.stop().await.unwrap();
}

/// The Instances view (`#/instances`) in gateway mode: an instance fed as the gateway feeds it
/// (its properties, two IPs, its agent version) polling the service, and a connection that polls
/// without ever saying which instance it is, listed apart as anonymous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_instances_and_the_anonymous_pollers() {
    let fleet = FleetOptions { expect_identity: true, ..FleetOptions::default() };
    let Some((_dir, _, running)) = page_server(V1, ServeConfig { fleet, ..loopback() }).await else { return };
    // A poller that never says who it is: two polls over one connection.
    let cds = running.cds().await;
    cds.fetch(SERVICE, "").await;
    cds.fetch(SERVICE, "").await;
    // An agent, as the gateway sees it pass: a report, then polls echoing what it applied.
    let peer: std::net::SocketAddr = "10.20.30.40:41234".parse().unwrap();
    let properties = [
        ("OS Name", "Linux"),
        ("hostname", "order-7d9f-x2k"),
        ("ipv4", "10.20.30.40"),
        ("ipv4", "172.17.0.1"),
        ("Process No.", "1"),
        ("language", "java"),
    ];
    running.fleet.observe_identity(
        peer,
        &InstanceIdentity {
            service: SERVICE.into(),
            instance: "order-7d9f-x2k@10.20.30.40".into(),
            properties: properties.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            agent_version: Some("9.4.0".into()),
            reported_properties: true,
        },
    );
    let current = running.served.snapshot().answer(SERVICE).digest.clone();
    for _ in 0..2 {
        running.fleet.observe(SERVICE, current.as_str(), peer, &current, true);
    }

    let out = page_test(
        &running,
        strings(&[
            "--scenario",
            "instances",
            "--service",
            SERVICE,
            "--instance",
            "order-7d9f-x2k@10.20.30.40",
            "--host",
            "order-7d9f-x2k",
            "--ip",
            "10.20.30.40",
            "--ip",
            "172.17.0.1",
            "--language",
            "java",
            "--agent-version",
            "9.4.0",
            "--anonymous-state",
            "anonymous",
        ]),
    )
    .await;
    assert!(out.contains("1 anonymous"), "the services row counts it: {out}");
    running.stop().await.unwrap();
}

/// The Instances view pages the listing 100 at a time, and flags both connections that claim
/// one instance name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instances_view_pages_and_flags_a_name_claimed_twice() {
    let Some((_dir, _, running)) = page_server(V1, loopback()).await else { return };
    let current = running.served.snapshot().answer(SERVICE).digest.clone();
    // 101 names, the first claimed by two connections: 102 rows.
    for port in 0..=101u16 {
        let name = format!("pod-{:03}", port.saturating_sub(1));
        let peer = std::net::SocketAddr::from(([10, 9, 0, 1], 30_000 + port));
        let identity = InstanceIdentity { service: SERVICE.into(), instance: name, ..InstanceIdentity::default() };
        running.fleet.observe_identity(peer, &identity);
        running.fleet.observe(SERVICE, current.as_str(), peer, &current, true);
    }
    let out =
        page_test(&running, strings(&["--scenario", "instances-paged", "--instance", "pod-100", "--total", "102"]))
            .await;
    assert!(out.contains("100 of 102)") && out.contains("102 of 102)"), "{out}");
    running.stop().await.unwrap();
}

/// Two replicas on one etcd: the page of replica B lists an agent that polls replica A, in the
/// service's agents and in the Instances view, with A in its replica column; the header names B
/// and counts two replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_of_one_replica_shows_the_agents_of_another() {
    if !browser_available() {
        return;
    }
    let Some(etcd) = skyconf_testkit::servers::etcd::EtcdServer::start().await else { return };
    etcd.admin().await.put("/skywalking/configuration-discovery.default.agentConfigurations", V1).await;
    let replica = |name: &str| ServeConfig {
        require_initial_load: false,
        replicas: skyconf_server::ReplicaOptions {
            name: Some(name.to_owned()),
            publish_every: Duration::from_millis(200),
            advertise_admin: None,
        },
        ..loopback()
    };
    let source = || {
        let settings = skyconf_sources::etcd::EtcdSettings { endpoints: etcd.url(), ..Default::default() };
        skyconf_sources::etcd::EtcdSource::new(settings).unwrap()
    };
    let a = Server::start(source(), replica("replica-a")).await;
    let b = Server::start(source(), replica("replica-b")).await;
    let agent = a.cds().await;
    let digest = agent.fetch_digest(SERVICE, "").await.expect("the service is configured");
    agent.fetch(SERVICE, &digest).await;
    let out = page_test(
        &b,
        strings(&[
            "--scenario",
            "replicas",
            "--service",
            SERVICE,
            "--replica",
            "replica-b",
            "--peer-replica",
            "replica-a",
        ]),
    )
    .await;
    assert!(out.contains("replica-a"), "{out}");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// `page_test.py` run step by step: it prints a `{"step": ...}` line where it stands and waits
/// for `go` on its standard input, so the test checks the agents between the page's actions.
struct Steps {
    child: std::process::Child,
    /// Closed to stop the script: it reads the end of its input as "stop", and quits the browser.
    stdin: Option<std::process::ChildStdin>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    said: Vec<String>,
}

impl Steps {
    fn start(running: &Server, args: Vec<String>) -> Self {
        use std::io::{BufRead as _, Read as _};
        use std::process::Stdio;
        let script = repo_root().join("tests/web/page_test.py");
        let mut args = args;
        if let Some(dir) = std::env::var_os("SKYCONF_SCREENSHOTS") {
            args.extend(["--screenshot".to_owned(), dir.to_string_lossy().into_owned()]);
        }
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--url", &format!("http://{}/", running.admin_addr)])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout, mut stderr) =
            (child.stdin.take().unwrap(), child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Self { child, stdin: Some(stdin), lines, stderr: Some(stderr), said: Vec::new() }
    }

    /// The next line the script prints, parsed; fails the test with what it said when it ended or
    /// failed instead.
    async fn next(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(180), self.lines.recv()).await.ok().flatten();
        let parsed = line.as_deref().and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok());
        match parsed {
            Some(value) if value["ok"] != false => {
                self.said.push(value.to_string());
                value
            }
            _ => {
                // A failed script ends by itself once it has quit the browser (killed, it would
                // leave chromedriver and chromium behind); one that says nothing is stuck.
                if line.is_none() {
                    let _ = self.child.kill();
                }
                let _ = self.child.wait();
                let stderr = self.stderr.take().map(|t| t.join().unwrap_or_default()).unwrap_or_default();
                panic!("the browser test failed: {line:?}\nbefore: {:?}\n{stderr}", self.said);
            }
        }
    }

    /// Waits for step `name`; its line.
    async fn at(&mut self, name: &str) -> serde_json::Value {
        let line = self.next().await;
        assert_eq!(line["step"], name, "{line}");
        line
    }

    /// Lets the script go on.
    fn go(&mut self) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().expect("the script's input is open");
        stdin.write_all(b"go\n").and_then(|()| stdin.flush()).unwrap();
    }

    /// The script's last line: `{"ok": true, ...}`.
    async fn finish(mut self) -> serde_json::Value {
        let last = self.next().await;
        assert_eq!(last["ok"], true, "{last}");
        assert!(self.child.wait().unwrap().success());
        last
    }
}

impl Drop for Steps {
    /// A failed assertion between steps: the script, waiting on its input, is told to stop and
    /// quits the browser before it exits.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Issue 15's page: a staged rollout started from the whole-document editor (waves `1,100%`,
/// manual advance) reaches exactly one agent, which the Rollouts view shows reached and applied
/// and the Instances view shows served as the rollout; Promote (confirmed) gives every agent the
/// candidate and the rollout completes into the document and the history. A second rollout,
/// started from the service's editor, is aborted in the page: its agent gets back what it had.
/// Checked on the agents themselves (skyconf's Rust agent over gRPC) at each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_starts_promotes_and_aborts_staged_rollouts() {
    use crate::rollouts::{KEY, TestAgent, V1, V2, rollout, stop_all, until, values};
    let Some((_dir, path, running)) = page_server(V1, loopback()).await else { return };
    let admin = running.admin();
    let agents: Vec<TestAgent> =
        (0..3).map(|i| TestAgent::spawn(running.grpc_addr, &format!("pod-{i}"), &[])).collect();
    until("every agent applied the document", async || {
        let body = admin.get_json("/api/v1/instances").await;
        let applied =
            body["instances"].as_array().unwrap().iter().filter(|i| i["services"][0]["state"] == "applied").count();
        applied == agents.len() && agents.iter().all(|a| a.value().as_deref() == Some("10"))
    })
    .await;
    // What each agent holds when exactly the one the page names holds `value`, the others `others`.
    let only = |reached: &str, value: &str, others: &str| -> Vec<Option<String>> {
        agents.iter().map(|a| Some(if a.name == reached { value } else { others }.to_owned())).collect()
    };
    let all = |value: &str| vec![Some(value.to_owned()); agents.len()];

    let mut page = Steps::start(
        &running,
        strings(&[
            "--scenario",
            "rollouts",
            "--service",
            "svc",
            "--key",
            KEY,
            "--document",
            V2,
            "--waves",
            "1,100%",
            "--served",
            "20",
            "--value",
            "30",
            "--author",
            "page-tester",
        ]),
    );

    // Wave 1: the one instance the page shows is the only one served the candidate.
    let step = page.at("wave-1").await;
    let (first, reached) =
        (step["rollout"].as_str().unwrap().to_owned(), step["instance"].as_str().unwrap().to_owned());
    until("the reached agent holds the candidate", async || values(&agents) == only(&reached, "20", "10")).await;
    let now = rollout(&admin).await;
    assert_eq!(now["id"], first.as_str());
    assert_eq!(now["named"]["svc"], serde_json::json!([reached]), "{now:#}");
    assert_eq!((now["author"].as_str(), now["message"].as_str()), (Some("page-tester"), Some("canary first")));
    assert_eq!((now["advance"].as_str(), now["gates"]["bake_s"].as_u64()), (Some("manual"), Some(0)));
    assert_eq!(now["waves"], serde_json::json!([{"instances": 1}, {"share": "100%"}]));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "not written before the last wave");
    page.go();

    // Promoted in the page: every agent holds the candidate, which is the document now.
    page.at("completed").await;
    let done = rollout(&admin).await;
    assert_eq!((done["id"].as_str(), done["state"].as_str()), (Some(first.as_str()), Some("completed")), "{done:#}");
    assert!(done["events"].to_string().contains("Wave 1 promoted by page-tester"), "{done:#}");
    until("every agent holds the candidate", async || values(&agents) == all("20")).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2, "the candidate is the document, as typed");
    page.go();

    // From the service's editor: the served document with svc's edited configuration, to one agent.
    let step = page.at("service-wave-1").await;
    let (second, reached) =
        (step["rollout"].as_str().unwrap().to_owned(), step["instance"].as_str().unwrap().to_owned());
    until("the reached agent holds the service's edit", async || values(&agents) == only(&reached, "30", "20")).await;
    let now = rollout(&admin).await;
    assert_eq!((now["id"].as_str(), now["services"].clone()), (Some(second.as_str()), serde_json::json!(["svc"])));
    assert_eq!(now["message"], "try a new sampling rate");
    assert!(now["document"].as_str().unwrap().contains("30"), "{now:#}");
    page.go();

    // Aborted in the page: the reached agent is given back what it had; the document is untouched.
    page.at("aborted").await;
    until("the reached agent is given back its value", async || values(&agents) == all("20")).await;
    let history = admin.get_json("/api/v1/rollouts").await["history"].clone();
    assert_eq!(
        (history[0]["id"].as_str(), history[0]["state"].as_str(), history[1]["state"].as_str()),
        (Some(second.as_str()), Some("aborted"), Some("completed")),
        "{history:#}"
    );
    assert!(history[0]["outcome"].as_str().unwrap().contains("Aborted by page-tester at wave 1"), "{history:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2);
    page.go();
    let out = page.finish().await;
    assert!(out["refused"].as_str().unwrap().contains("150%"), "{out}");
    stop_all(agents).await;
    running.stop().await.unwrap();
}

/// Findings 5 and 17 of the usability review, and the preview on the page: the service view
/// lists its targeting groups and the running rollout that touches it, and previews what one
/// instance would be served (each setting's layer, the paths a Java agent ignores, the
/// warnings); services sort by the numbers in their names; a file store's header names no
/// replica; an empty table's row spans its columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_view_shows_its_groups_its_rollout_and_a_preview() {
    use crate::rollouts::{TestAgent, start_rollout, until, until_state};
    if !browser_available() {
        return;
    }
    let document = |sampling: u32| {
        format!(
            "configurations:\n  svc:\n    agent.sample_n_per_3_secs: {sampling}\n    agent.trace.ignore_path: /health,/static/**, /admin\n  svc-10:\n    agent.span_limit_per_segment: 100\n  svc-2:\n    agent.span_limit_per_segment: 100\ntargeting:\n  svc:\n    - group: canary\n      instances: [\"canary-*\"]\n      settings:\n        agent.sample_n_per_3_secs: 100\n    - group: eu\n      properties: {{zone: eu-west-1a}}\n      settings:\n        agent.trace.ignore_path: ~\n"
        )
    };
    let (_dir, path) = temp_file("agents.yaml", &document(10));
    let running = Server::start(FileSource::new(&path), loopback()).await;
    let admin = running.admin();
    let agent = TestAgent::spawn(running.grpc_addr, "pod-0", &[]);
    until("the agent applied the document", async || {
        let body = admin.get_json("/api/v1/instances").await;
        body["instances"].as_array().unwrap().iter().any(|i| i["services"][0]["state"] == "applied")
    })
    .await;
    let start = serde_json::json!({
        "document": document(20),
        "waves": [{"instances": 1}, {"share": "100%"}],
        "gates": {"apply_within_s": 20, "bake_s": 0, "lost_after_s": 10},
        "advance": "manual",
        "author": "ops",
    });
    let body = start_rollout(&admin, &start).await;
    let id = body["rollout"]["id"].as_str().unwrap().to_owned();
    until_state(&admin, "waiting for a promote").await;
    let groups = admin.get_json("/api/v1/services/svc").await["groups"].clone();
    assert_eq!(
        groups[1]["settings"],
        serde_json::json!([{"key": "agent.trace.ignore_path", "value": null}]),
        "{groups}"
    );
    assert_eq!(admin.get_json("/api/v1/status").await["shared_store"], false, "a file store is not shared");

    let out = page_test(
        &running,
        strings(&[
            "--scenario",
            "service-view",
            "--service",
            "svc",
            "--rollout",
            &id,
            "--group",
            "canary",
            "--instance",
            "canary-1",
            "--property",
            "zone=eu-west-1a",
            "--key",
            "agent.sample_n_per_3_secs",
            "--value",
            "100",
            "--path",
            "/health",
            "--path",
            "/api/orders",
            "--path",
            "/static/css/a.css",
            "--ignored",
            "/health",
            "--ignored",
            "/static/css/a.css",
            "--traced",
            "/api/orders",
            "--others",
            "svc-2,svc-10",
        ]),
    )
    .await;
    assert!(out.contains(" /admin"), "the warning names the pattern with a space: {out}");
    agent.handle.stop().await;
    running.stop().await.unwrap();
}

/// The OpAMP view: two OpenTelemetry agents of the OpAMP port, one that applied its group's files
/// and reports itself healthy with its effective configuration, one whose configuration failed
/// and that reports itself unhealthy; the page shows their description, group, status, error and
/// effective configuration (its file, opened), names the group no agent is in, filters them, and opens from the
/// header; a rollout of another group that its agent fails shows that group and what the agent
/// reports after the revert on the rollout's card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_opamp_agents_with_their_health_group_and_status() {
    use skyconf_opamp::wire::RemoteConfigStatuses;

    use crate::opamp_rollout::{OtelAgent, start};
    use crate::rollouts::{rollout, start_rollout, until};
    let base = crate::opamp::document("checkout", &crate::opamp::json_file("0.5"), 10);
    let with = |ratio: &str| {
        format!(
            "{base}  - group: collectors\n    match:\n      service.name: otel\n    files:\n      sampling.json:\n        body: '{{\"ratio\": {ratio}}}'\n"
        )
    };
    let Some((_dir, _, running)) = page_server(&with("0.5"), crate::opamp::config()).await else { return };
    let url = crate::opamp::url(&running);
    let (applied, failed) = ([0xa1; 16], [0xf0; 16]);
    crate::opamp::reporting_agent(&url, applied, "checkout", "node-1", RemoteConfigStatuses::Applied, "").await;
    crate::opamp::reporting_agent(&url, failed, "checkout", "node-2", RemoteConfigStatuses::Failed, "bad ratio").await;
    let (applied, failed) = (crate::opamp::hex(&applied), crate::opamp::hex(&failed));
    // A rollout of `collectors` its one agent fails: reverted, and the agent goes back.
    let otel = OtelAgent::spawn(&url, 0);
    until("the collector applied its file", async || otel.applied_ratio("0.5")).await;
    let admin = running.admin();
    let gates = serde_json::json!({"apply_within_s": 30, "bake_s": 1, "lost_after_s": 20});
    let plan = start(&with("2"), serde_json::json!([{"share": "100%"}]), gates);
    start_rollout(&admin, &plan).await;
    until("the rollout is reverted and its agent went back", async || {
        let back = rollout(&admin).await["after_revert"].clone();
        back[0]["status_of"] == "previous" && back[0]["remote_config_status"]["status"] == "applied"
    })
    .await;
    let out = page_test(
        &running,
        strings(&[
            "--scenario",
            "opamp",
            "--applied-uid",
            &applied,
            "--failed-uid",
            &failed,
            "--group",
            "svc",
            "--error",
            "bad ratio",
            "--host",
            "node-1",
            "--unmatched",
            "others",
            "--effective-body",
            r#"{"ratio": 0.5}"#,
            "--reverted-group",
            "collectors",
            "--reverted-instance",
            "otel-0",
        ]),
    )
    .await;
    assert!(out.contains("bad ratio"), "{out}");
    running.stop().await.unwrap();
}
