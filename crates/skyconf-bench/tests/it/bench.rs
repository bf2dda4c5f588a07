//! A smoke run of `skyconf-bench` against a real skyconf server (in process, on a file store): every scenario, the open loop,
//! propagation and reload, each short, each required to report every call as succeeded and every
//! answer as right. Timings are not asserted (CI machines are shared); correctness is.

use std::net::TcpListener;
use std::process::Stdio;

use crate::util::{served_document, skyconf_bench};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs `skyconf-bench ARGS --json --quiet`, requires success, returns its report.
fn bench(args: &[&str]) -> serde_json::Value {
    let output = skyconf_bench().args(args).args(["--json", "--quiet"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "skyconf-bench {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

fn assert_all_right(report: &serde_json::Value) {
    let outcome = &report["outcome"];
    assert_eq!(outcome["errors"], serde_json::json!({}), "{report}");
    assert_eq!(outcome["wrong_answers"], 0, "{report}");
    assert!(report["calls"].as_u64().unwrap() > 0, "{report}");
}

#[test]
fn bench_smoke_every_call_succeeds_and_every_answer_is_right() {
    let (_dir, file, server) = served_document("50", "6");
    let addr = server.addr.as_str();

    for scenario in ["unchanged", "changed", "mixed"] {
        let report = bench(&[
            "--addr",
            addr,
            "--scenario",
            scenario,
            "--services",
            "50",
            "-n",
            "600",
            "-c",
            "4",
            "-m",
            "4",
            "--warmup",
            "0s",
        ]);
        assert_all_right(&report);
        assert_eq!(report["calls"], 600, "{report}");
        let outcome = &report["outcome"];
        match scenario {
            "unchanged" => assert_eq!(outcome["command_answers"], 0),
            "changed" => assert_eq!(outcome["empty_answers"], 0),
            _ => {
                assert!(outcome["command_answers"].as_u64().unwrap() > 0);
                assert!(outcome["empty_answers"].as_u64().unwrap() > 0);
            }
        }
    }

    // The fixed-rate open loop.
    let report =
        bench(&["--addr", addr, "--rate", "400", "--duration", "1s", "--warmup", "200ms", "-c", "2", "-m", "4"]);
    assert_all_right(&report);
    // 400 calls are due in the measured second and 80 in the warm-up, at that rate too; a pacer
    // that wakes late hands out what is due at once, so only a stall at the very end loses any.
    let calls = report["calls"].as_u64().unwrap();
    assert!((360..=401).contains(&calls), "{report}");
    let warmup = report["warmup"]["calls"].as_u64().unwrap();
    assert!((70..=81).contains(&warmup), "{report}");

    // Idle agents that poll like stock agents.
    let report =
        bench(&["agents", "--addr", addr, "-c", "20", "--services", "50", "--interval", "300ms", "--duration", "1s"]);
    assert_all_right(&report);

    // An edit is served (the file is rewritten with new revisions of the same shape).
    let report =
        bench(&["propagation", "--addr", addr, "--file", file.to_str().unwrap(), "--services", "50", "--edits", "2"]);
    assert_eq!(report["timed_out"], 0, "{report}");
    assert_eq!(report["seen"], 2, "{report}");
}

#[test]
fn bench_reload_times_a_synthetic_document() {
    let report = bench(&["reload", "--services", "200", "--keys", "6", "--repeat", "2"]);
    assert_eq!(report["services"], 200);
    assert!(report["total_ms"]["max"].as_f64().unwrap() >= 0.0);
}

#[test]
fn bench_fails_when_calls_fail() {
    // Nothing listens there: the run must not pass.
    let output = skyconf_bench()
        .args(["--addr", &format!("127.0.0.1:{}", free_port()), "-n", "10", "--timeout", "1s", "--quiet"])
        .output()
        .unwrap();
    assert!(!output.status.success());
}

#[test]
fn bench_counts_measured_calls_only_prints_plain_values_and_plain_progress_when_piped() {
    // Usability finding 8: `outcome.ok` larger than `calls` (warm-up answers were counted), `mode
    // "load"` quoted in the table, and no progress at all when stderr is not a terminal.
    let (_dir, _, server) = served_document("5", "2");
    let report =
        bench(&["--addr", &server.addr, "--services", "5", "-n", "100", "-c", "1", "-m", "2", "--warmup", "300ms"]);
    assert_all_right(&report);
    assert_eq!(report["calls"], 100, "{report}");
    assert_eq!(report["outcome"]["ok"], 100, "ok counts the measured calls only: {report}");
    assert!(report["warmup"]["calls"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["warmup"]["outcome"]["wrong_answers"], 0, "{report}");

    // A table, stderr a pipe, no --quiet.
    let output = skyconf_bench()
        .args(["--addr", &server.addr, "--services", "5", "-n", "50", "-c", "1", "-m", "2", "--warmup", "0s"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mode = stdout.lines().find(|l| l.starts_with("mode ")).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(mode.split_whitespace().collect::<Vec<_>>(), ["mode", "load"], "{stdout}");
    assert!(stdout.lines().any(|l| l.split_whitespace().eq(["addr", server.addr.as_str()])), "{stdout}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.lines().any(|l| l.starts_with("bench: calls 0/50 after")), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("bench: calls 50/50 after") && l.ends_with(", done")), "{stderr}");
    assert!(!stderr.contains('\r') && !stderr.contains('\u{1b}'), "plain lines: {stderr:?}");
}

#[test]
fn bench_sink_answers_a_client_stream_on_any_path_and_counts_every_message() {
    // The gateway benchmark's upstream: `skyconf-bench sink` answers every call with grpc-status 0 and an
    // empty `Commands` after the whole request stream; `skyconf-bench --path --body-file` sends it.
    use std::io::{BufRead as _, BufReader};

    let mut sink = skyconf_bench()
        .args(["sink", "--addr", "127.0.0.1:0", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(sink.stdout.take().unwrap()).lines();
    let listening: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!((listening["mode"].as_str(), listening["event"].as_str()), (Some("sink"), Some("listening")));
    let addr = listening["addr"].as_str().unwrap().to_owned();

    // A client stream of 40 messages of 1,500 bytes, like a batch of trace segments.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("segments.bin");
    let mut body = Vec::new();
    for i in 0..40u8 {
        body.push(0);
        body.extend_from_slice(&1500u32.to_be_bytes());
        body.extend(std::iter::repeat_n(i, 1500));
    }
    std::fs::write(&file, &body).unwrap();
    let path = "/skywalking.v3.TraceSegmentReportService/collect";
    let report = bench(&[
        "--addr",
        &addr,
        "--path",
        path,
        "--body-file",
        file.to_str().unwrap(),
        "-n",
        "30",
        "-c",
        "1",
        "-m",
        "2",
        "--warmup",
        "0s",
    ]);
    assert_all_right(&report);
    assert_eq!(
        (report["calls"].as_u64(), report["outcome"]["empty_answers"].as_u64()),
        (Some(30), Some(30)),
        "{report}"
    );
    assert_eq!(report["path"], path);

    let _ = std::process::Command::new("kill").args(["-TERM", &sink.id().to_string()]).status();
    let stopped: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(sink.wait().unwrap().success());
    assert_eq!(stopped["event"], "stopped", "{stopped}");
    // Every call checked: the warm-up is off, so 30 calls of 40 messages each.
    assert_eq!(
        (stopped["calls"].as_u64(), stopped["truncated_calls"].as_u64(), stopped["reset_calls"].as_u64()),
        (Some(30), Some(0), Some(0)),
        "{stopped}"
    );
    assert_eq!(stopped["messages"], 30 * 40, "{stopped}");
    assert_eq!(stopped["bytes"], 30 * 40 * 1505, "{stopped}");
}
