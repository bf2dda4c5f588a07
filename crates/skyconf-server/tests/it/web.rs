//! The admin web page in a real headless Chromium (driven by `tests/web/page_test.py` through
//! chromedriver): it shows a service and its configuration, shows the releases, and its rollback
//! button restores exactly what an agent fetched before — checked over gRPC with a tonic client.
//!
//! Needs `chromium` and `chromedriver` (Debian: `chromium`, `chromium-driver`) and python3.
//! Skipped with a message when they are missing, unless SKYCONF_REQUIRE_BROWSER=1 (which
//! `scripts/test.sh` sets after `scripts/deps/browser.sh` installed them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use skyconf_server::ServeConfig;
use skyconf_server::security::{Role, Secret};
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
    if !browser_available() {
        return;
    }
    let (_dir, path) = temp_file("agents.yaml", V1);
    let running = Server::start(FileSource::new(&path), loopback()).await;
    let cds = running.cds().await;
    assert!(cds.fetch(SERVICE, "").await.is_some());
    std::fs::write(&path, "configurations: {}\n").unwrap();
    skyconf_testkit::server::eventually("the wipe is held", || running.served.held().is_some()).await;
    assert!(cds.fetch(SERVICE, "").await.is_some(), "still served while held");

    let script = repo_root().join("tests/web/page_test.py");
    let url = format!("http://{}/", running.admin_addr);
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(script).args(["--url", &url, "--held", "confirm"]).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("\"ok\": true"),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(running.served.held().is_none());
    assert!(running.served.snapshot().table.is_empty(), "the held change is installed");
    running.stop().await.unwrap();
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
    let first_release = running.releases.latest().unwrap().id;

    // A hand edit of the file: the page must show it, then roll it back.
    std::fs::write(&path, V2).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    while running.releases.latest().unwrap().id == first_release {
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

    let script = repo_root().join("tests/web/page_test.py");
    let url = format!("http://{}/", running.admin_addr);
    let token_args: Vec<String> = tokens
        .map(|(read, write)| ["--read-token", read, "--write-token", write].map(String::from).to_vec())
        .unwrap_or_default();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .args(["--url", &url, "--service", SERVICE, "--key", "agent.sample_n_per_3_secs", "--value", "20"])
            .args(["--rollback-to", &first_release.to_string(), "--expect", "10"])
            .args(token_args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("\"ok\": true"),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    if tokens.is_some() {
        assert!(stdout.contains("admin token (read or write role)") && stdout.contains("write role"), "{stdout}");
    }

    let after = cds.fetch(SERVICE, "").await.expect("a first fetch gets the command");
    assert_eq!(after.uuid, before.uuid, "the rollback restores the digest the agent had");
    assert_eq!(after.config, before.config, "and exactly the values");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "the file itself is back, written by atomic rename");
    let latest = running.releases.latest().unwrap();
    assert_eq!(latest.rollback_of, Some(first_release));
    running.stop().await.unwrap();
}
