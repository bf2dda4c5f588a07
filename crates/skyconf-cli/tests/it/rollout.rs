//! `skyconf rollout` against a real server whose fleet is two independent clients that report
//! their instances: the grpcio (C-core) client (`tests/interop/cds_client.py poll --instance`) and
//! `skyconf agent --instance` (skyconf-agent). A wave of one instance reaches one of them; a
//! promote reaches all and writes the candidate; an aborted rollout gives every agent back what
//! it had, and `status --watch` says so with exit status 4.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use skyconf_server::Running;
use skyconf_server::fleet::{AgentState, AgentStatus};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, loopback};

use crate::util::{Guard, grpcio_available, repo_root, skyconf};

const V1: &str = "configurations:\n  roll-svc:\n    agent.sample_n_per_3_secs: 10\n";
const V2: &str = "configurations:\n  roll-svc:\n    agent.sample_n_per_3_secs: 20\n";
const V3: &str = "configurations:\n  roll-svc:\n    agent.sample_n_per_3_secs: 30\n";

fn grpcio(running: &Running, instance: &str) -> Guard {
    let child = crate::util::python()
        .arg(repo_root().join("tests/interop/cds_client.py"))
        .args(["poll", "--addr", &running.grpc_addr.to_string(), "--service", "roll-svc", "--interval", "0.2"])
        .args(["--instance", instance, "--property", "language=python"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Guard(child)
}

fn agent(running: &Running, instance: &str) -> Guard {
    crate::util::skyconf_agent(running, "roll-svc", &["--instance", instance, "--property", "language=rust"])
}

/// Every agent of the service, each judged against what it is served.
fn agents(running: &Running) -> Vec<AgentStatus> {
    running.fleet.agents_of("roll-svc", &running.served.serving())
}

async fn wait_until(running: &Running, what: &str, condition: impl Fn(&[AgentStatus]) -> bool) -> Vec<AgentStatus> {
    crate::util::wait_for_agents(running, what, agents, condition).await
}

/// `skyconf rollout ARGS` with the server's admin URL: its exit status and its last JSON line.
async fn rollout(running: &Running, args: &[&str]) -> (i32, Value) {
    let mut command = skyconf();
    command.args(["rollout", "--admin", &format!("http://{}", running.admin_addr)]).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().map_or(Value::Null, |l| serde_json::from_str(l).unwrap());
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    }
    (output.status.code().unwrap_or(-1), last)
}

async fn until_state(running: &Running, state: &str) -> Value {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, now) = rollout(running, &["status"]).await;
        assert_eq!(code, 0);
        if now["rollout"]["state"] == state {
            return now["rollout"].clone();
        }
        assert!(Instant::now() < give_up, "not {state}: {now:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The digest of `roll-svc` in `document`.
fn digest_of(document: &str) -> String {
    skyconf_core::read(document).unwrap().get("roll-svc").unwrap().digest().as_str().to_owned()
}

/// How many of `agents` echo the digest of `document`.
fn holding(agents: &[AgentStatus], document: &str) -> usize {
    agents.iter().filter(|a| a.digest == digest_of(document)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_rolls_a_document_out_to_grpcio_and_rust_agents_and_aborts_one() {
    if !grpcio_available() {
        return;
    }
    let (dir, path) = temp_file("agents.yaml", V1);
    let running = Server::start(FileSource::new(&path), loopback()).await;
    let _fleet = [grpcio(&running, "py-1"), grpcio(&running, "py-2"), agent(&running, "rs-1"), agent(&running, "rs-2")];
    wait_until(&running, "four identified agents applied", |a| {
        a.len() == 4 && a.iter().all(|a| a.state == AgentState::Applied && a.instance.is_some())
    })
    .await;

    let candidate = dir.path().join("candidate.yaml");
    std::fs::write(&candidate, V2).unwrap();
    let candidate = candidate.to_str().unwrap();
    let timing = ["--apply-within", "20s", "--bake", "1s", "--lost-after", "30s"];
    let (code, started) =
        rollout(&running, &[&["start", candidate, "--waves", "1,100%", "--manual"][..], &timing].concat()).await;
    assert_eq!(code, 0, "{started}");
    let id = started["rollout"]["id"].as_str().unwrap().to_owned();
    let waiting = until_state(&running, "waiting for a promote").await;
    let picked = waiting["named"]["roll-svc"][0].as_str().unwrap().to_owned();
    let now = agents(&running);
    assert_eq!(holding(&now, V2), 1, "one instance in wave 1: {now:#?}");
    let reached = now.iter().find(|a| a.digest == digest_of(V2)).unwrap();
    assert_eq!(reached.instance.as_deref(), Some(picked.as_str()));

    let (code, promoted) = rollout(&running, &["promote", &id]).await;
    assert_eq!(code, 0, "{promoted}");
    let (code, done) = rollout(&running, &["status", "--watch"]).await;
    assert_eq!((code, done["rollout"]["state"].as_str()), (0, Some("completed")), "{done}");
    wait_until(&running, "every agent holds the candidate", |a| holding(a, V2) == 4).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2);

    // A second rollout, aborted after its first wave reached one agent: every agent holds V2 again.
    let next = dir.path().join("next.yaml");
    std::fs::write(&next, V3).unwrap();
    let (code, started) = rollout(
        &running,
        &[&["start", next.to_str().unwrap(), "--waves", "1,100%", "--manual", "--author", "ops"][..], &timing].concat(),
    )
    .await;
    assert_eq!(code, 0, "{started}");
    let id = started["rollout"]["id"].as_str().unwrap().to_owned();
    until_state(&running, "waiting for a promote").await;
    wait_until(&running, "one agent holds the second candidate", |a| holding(a, V3) == 1 && holding(a, V2) == 3).await;
    let (code, aborted) = rollout(&running, &["abort", &id, "--author", "ops"]).await;
    assert_eq!((code, aborted["rollout"]["state"].as_str()), (0, Some("aborted")), "{aborted}");
    let said = aborted["rollout"]["events"].as_array().unwrap().last().unwrap()["message"].clone();
    assert_eq!(said, "Aborted by ops at wave 1", "{aborted}");
    let (code, _) = rollout(&running, &["status", "--watch"]).await;
    assert_eq!(code, 4, "a watched rollout that ended aborted");
    wait_until(&running, "every agent is back on V2", |a| holding(a, V2) == 4).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2);
    // A refused candidate is said with its line (the unclosed flow sequence is found at the end).
    std::fs::write(&next, "configurations:\n  roll-svc: [\n").unwrap();
    let mut command = skyconf();
    command.args(["rollout", "--admin", &format!("http://{}", running.admin_addr), "start", next.to_str().unwrap()]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    // Status 2, as `validate` has it for a document skyconf would refuse.
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("{}:3:1: ", next.display())), "with the file's name: {stderr}");
    running.stop().await.unwrap();
}

/// `skyconf rollout --admin URL ARGS`: its exit status, stdout's lines and stderr.
async fn rollout_lines(admin: &str, args: &[&str]) -> (i32, Vec<String>, String) {
    let mut command = skyconf();
    command.args(["rollout", "--admin", admin]).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect();
    (output.status.code().unwrap_or(-1), stdout, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// What a person sees of a rollout: its state, wave, reach and last event.
fn visible(answer: &Value) -> Value {
    let r = &answer["rollout"];
    serde_json::json!([
        r["state"],
        r["progress"]["wave"],
        r["progress"]["reached"],
        r["progress"]["applied"],
        r["events"].as_array().and_then(|e| e.last()).cloned()
    ])
}

/// Usability findings 4 and 19: `status --watch` prints a line only when something a person
/// sees changes (not on every `last_seen_ms` of a held agent); `--text` prints the rollout for
/// a person; the log says the rollout driver wrote the candidate; every rollout subcommand's
/// help lists its exit statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_only_visible_changes_text_reads_and_the_log_names_the_driver() {
    use crate::util::Server as Process;
    let (dir, path) = temp_file("agents.yaml", V1);
    let server = Process::start(&path);
    let addr: std::net::SocketAddr = server.grpc_addr.parse().unwrap();
    let admin_url = format!("http://{}", server.admin_addr);
    let spawn = |instance: &str| {
        let child = Command::new(env!("CARGO_BIN_EXE_skyconf"))
            .args(["agent", "--addr", &addr.to_string(), "--service", "roll-svc", "--interval", "200ms"])
            .args(["--instance", instance])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Guard(child)
    };
    let _fleet = [spawn("rs-1"), spawn("rs-2")];
    let admin = skyconf_testkit::server::AdminClient::new(&server.admin_addr);
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let body = admin.get_json("/api/v1/instances").await;
        let applied = body["instances"].as_array().unwrap().iter().filter(|i| i["services"][0]["state"] == "applied");
        if applied.count() == 2 {
            break;
        }
        assert!(Instant::now() < give_up, "two identified agents applied: {body:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let candidate = dir.path().join("candidate.yaml");
    std::fs::write(&candidate, V2).unwrap();
    let start = ["start", candidate.to_str().unwrap(), "--waves", "1,100%", "--bake", "2s", "--apply-within", "20s"];
    let (code, _, stderr) = rollout_lines(&admin_url, &start).await;
    assert_eq!(code, 0, "{stderr}");
    let (code, lines, stderr) = rollout_lines(&admin_url, &["status", "--watch"]).await;
    assert_eq!(code, 0, "{stderr}");
    let shown: Vec<Value> = lines.iter().map(|l| visible(&serde_json::from_str(l).unwrap())).collect();
    assert!(shown.windows(2).all(|w| w[0] != w[1]), "a line without a visible change: {shown:#?}");
    assert_eq!(shown.last().unwrap()[0], "completed", "{shown:#?}");

    // The same rollout for a person: a heading, where it stands, the events.
    let (code, text, stderr) = rollout_lines(&admin_url, &["status", "--text"]).await;
    assert_eq!(code, 0, "{stderr}");
    let text = text.join("\n");
    assert!(text.starts_with("Rollout r") && text.contains("completed"), "{text}");
    assert!(text.contains("wave 2 of 2"), "{text}");
    assert!(text.contains("Wave 1 of 2 started") && text.contains("passed"), "{text}");
    assert!(!text.contains('{'), "no JSON: {text}");

    // The log names who wrote the candidate.
    let give_up = Instant::now() + Duration::from_secs(10);
    let wrote = loop {
        let log = server.drain_log();
        if let Some(line) = log.into_iter().find(|l| l.contains("agent configurations to the store")) {
            break line;
        }
        assert!(Instant::now() < give_up, "no line says the candidate was written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(wrote.contains("rollout driver") && !wrote.contains("admin API"), "{wrote}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2);

    for sub in [
        &["rollout"][..],
        &["rollout", "start"],
        &["rollout", "status"],
        &["rollout", "promote"],
        &["rollout", "abort"],
    ] {
        let help = skyconf().args(sub).arg("--help").output().unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        assert!(help.contains("Exit status:\n  0  "), "`{}` documents its exit statuses:\n{help}", sub.join(" "));
    }
    let help = String::from_utf8(skyconf().args(["rollout", "status", "--help"]).output().unwrap().stdout).unwrap();
    assert!(help.contains("  4  "), "{help}");
}
