//! The deployment artifacts against a running server: `examples/skyconf.yaml` starts and serves,
//! and every metric (and label) that the alert rules in `deploy/prometheus/` and the Grafana
//! dashboard in `deploy/grafana/` name is one `skyconf serve` exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use skyconf_testkit::server::AdminClient;

use crate::util::{Server, repo_root, serve_command, skyconf, skyconf_bench, stdout_of};

/// Labels Prometheus adds to every scraped series, and series it makes itself.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];
const PROMETHEUS_SERIES: [&str; 1] = ["up"];

#[test]
fn the_example_settings_file_serves_the_example_document() {
    let dir = tempfile::tempdir().unwrap();
    let document = dir.path().join("agent-configurations.yaml");
    std::fs::copy(repo_root().join("examples/agent-configurations.yaml"), &document).unwrap();
    let mut command = serve_command();
    command
        .arg("--config")
        .arg(repo_root().join("examples/skyconf.yaml"))
        .arg("--file")
        .arg(&document)
        .arg("--data-dir")
        .arg(dir.path().join("data"));
    let server = Server::spawn(command);

    let ready = AdminClient::new(&server.admin_addr).send_blocking("GET", "/readyz");
    assert_eq!(ready.status, 200, "{ready:?}");
    let ready = ready.json();
    assert_eq!((&ready["ready"], &ready["services"]), (&true.into(), &3.into()), "{ready}");
    let output = stdout_of(skyconf().args(["fetch", "--addr", &server.grpc_addr, "--service", "inventory-go"]));
    let answer: serde_json::Value = serde_json::from_slice(&output).unwrap();
    assert_eq!(answer["commands"][0]["args"][2], serde_json::json!(["agent.sample_rate", "0.5"]), "{answer}");
    assert!(server.terminate_logged().0.success(), "SIGTERM is a clean exit");
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_name_is_exported() {
    // Gateway mode towards a port nothing listens on (the gateway's gauges then exist), a live
    // agent, so that the fleet has a row to count (a row ends with its connection), and calls to
    // forward, which find no OAP.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut command = serve_command();
    command.arg("--file").arg(crate::util::example_document()).args(["--upstream", &closed]);
    let server = Server::spawn(command);
    let mut agent = skyconf()
        .args(["agent", "--addr", &server.grpc_addr, "--service", "inventory-go", "--instance", "deploy-1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("empty-message.bin");
    std::fs::write(&body, [0u8; 5]).unwrap();
    // An agent calling a forwarded path every 100 ms; each call finds no OAP and fails, which is
    // counted. It runs until the count shows.
    let mut caller = skyconf_bench()
        .args(["agents", "--addr", &server.grpc_addr, "-c", "1", "--interval", "100ms"])
        .args(["--duration", "60s", "--quiet", "--json", "--path", "/skywalking.v3.JVMMetricReportService/collect"])
        .arg("--body-file")
        .arg(&body)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let admin = AdminClient::new(&server.admin_addr);
    let give_up = Instant::now() + Duration::from_secs(30);
    let exported = loop {
        let scrape = admin.send_blocking("GET", "/metrics");
        assert_eq!(scrape.status, 200);
        let exported = exported_series(&scrape.body);
        if exported.contains_key("skyconf_gateway_calls_total") && exported.contains_key("skyconf_fleet_agents") {
            break exported;
        }
        assert!(Instant::now() < give_up, "the forwarded calls or the agent are never counted: {exported:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for child in [&mut caller, &mut agent] {
        let _ = child.kill();
        let _ = child.wait();
    }

    let mut queries = alert_queries(&repo_root().join("deploy/prometheus/skyconf-alerts.yaml"));
    queries.extend(dashboard_queries(&repo_root().join("deploy/grafana/skyconf.json")));
    assert!(queries.len() > 20, "the rules and the dashboard were read: {queries:?}");
    let mut problems = Vec::new();
    for (origin, query) in &queries {
        for problem in check_query(query, &exported) {
            problems.push(format!("{origin}: {problem}\n    in `{query}`"));
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "the deploy artifacts name what `skyconf serve` does not export:\n{}\n\nexported: {exported:#?}",
        problems.join("\n")
    );
}

/// The `expr` of every rule, named by its alert.
fn alert_queries(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let rules: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).expect("a name").to_owned();
            queries.push((format!("alert {name}"), rule["expr"].as_str().expect("an expr").to_owned()));
        }
    }
    queries
}

/// Every panel target's `expr` and every query variable's query, named by panel or variable.
fn dashboard_queries(path: &Path) -> Vec<(String, String)> {
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default();
            queries.push((format!("panel {title:?}"), target["expr"].as_str().expect("an expr").to_owned()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        if variable["type"] == "query" {
            let name = variable["name"].as_str().unwrap_or_default();
            queries.push((format!("variable ${name}"), variable["query"]["query"].as_str().unwrap().to_owned()));
        }
    }
    queries
}

/// Series name → the label names it is exported with, from an OpenMetrics/Prometheus text scrape.
fn exported_series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = series.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let mut rest = &line[name_end + 1..];
            while let Some(eq) = rest.find('=') {
                labels.insert(rest[..eq].trim_start_matches(',').trim().to_owned());
                let (_, after) = quoted(&rest[eq + 1..]);
                rest = after.trim_start_matches(',');
                if rest.starts_with('}') {
                    break;
                }
            }
        }
    }
    series
}

/// The quoted string at the start of `text` (escapes kept) and what follows it.
fn quoted(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let Some(body) = text.strip_prefix('"') else { return ("", text) };
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return (&body[..i], &body[i + 1..]),
            _ => escaped = false,
        }
    }
    (body, "")
}

/// A metric a query names, with the label names its selector matches on.
#[derive(Debug)]
struct Selector {
    metric: String,
    labels: Vec<String>,
}

/// What a query names: its metrics (with their matchers) and the labels it groups by.
#[derive(Debug, Default)]
struct Named {
    selectors: Vec<Selector>,
    grouping: Vec<String>,
}

fn is_metric(word: &str) -> bool {
    word.starts_with("skyconf_") || word.starts_with("process_") || PROMETHEUS_SERIES.contains(&word)
}

/// Reads what `query` names. PromQL is scanned, not parsed: identifiers outside strings are
/// metric names (skyconf's and the process's; function names and keywords are not), a `{...}`
/// right after one holds its matchers, and `by`/`without`/`on`/`ignoring` are followed by labels.
fn scan(query: &str) -> Named {
    let mut named = Named::default();
    let bytes = query.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' || c == b'\'' {
            i = query.len() - quoted_any(&query[i..]).len();
        } else if c == b'$' || c.is_ascii_digit() {
            // A dashboard variable ($__rate_interval, ${job}), a number or a duration.
            i += 1;
            while i < bytes.len() && (ident(bytes[i]) || bytes[i] == b'{' || bytes[i] == b'}' || bytes[i] == b'.') {
                if bytes[i] == b'}' {
                    i += 1;
                    break;
                }
                i += 1;
            }
        } else if ident(c) {
            let start = i;
            while i < bytes.len() && ident(bytes[i]) {
                i += 1;
            }
            let word = &query[start..i];
            let rest = query[i..].trim_start();
            if matches!(word, "by" | "without" | "on" | "ignoring") && rest.starts_with('(') {
                let close = rest.find(')').expect("a closing parenthesis");
                named.grouping.extend(rest[1..close].split(',').map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()));
                i = query.len() - rest[close + 1..].len();
            } else if is_metric(word) {
                let mut labels = Vec::new();
                if let Some(mut inner) = rest.strip_prefix('{') {
                    while let Some(end) = inner.find(['=', '!']) {
                        labels.push(inner[..end].trim().trim_start_matches(',').trim().to_owned());
                        let value = inner[end..].trim_start_matches(['=', '!', '~']);
                        inner = quoted_any(value).trim_start().trim_start_matches(',');
                        if inner.trim_start().starts_with('}') {
                            break;
                        }
                    }
                    i = query.len() - inner.trim_start().trim_start_matches('}').len();
                }
                named.selectors.push(Selector { metric: word.to_owned(), labels });
            }
        } else {
            i += 1;
        }
    }
    named
}

/// What follows the quoted string (double or single quotes) at the start of `text`.
fn quoted_any(text: &str) -> &str {
    let text = text.trim_start();
    let Some(quote) = text.chars().next().filter(|c| *c == '"' || *c == '\'') else { return text };
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            '\\' if !escaped => escaped = true,
            c if c == quote && !escaped => return &text[i + 1..],
            _ => escaped = false,
        }
    }
    ""
}

/// Why `query` does not fit the exported series: unknown metrics, labels a metric does not have,
/// grouping by a label none of its metrics has.
fn check_query(query: &str, exported: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let named = scan(query);
    let mut problems = Vec::new();
    if named.selectors.is_empty() {
        problems.push("names no skyconf or process metric".to_owned());
    }
    let mut all_labels: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
    for selector in &named.selectors {
        if PROMETHEUS_SERIES.contains(&selector.metric.as_str()) {
            continue;
        }
        let Some(labels) = exported.get(&selector.metric) else {
            problems.push(format!("`{}` is not exported", selector.metric));
            continue;
        };
        all_labels.extend(labels.iter().map(String::as_str));
        for label in &selector.labels {
            if !labels.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                problems.push(format!(
                    "`{}` has no label `{label}` (it is exported with: {})",
                    selector.metric,
                    labels.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    for label in &named.grouping {
        if !all_labels.contains(label.as_str()) {
            problems.push(format!("groups by `{label}`, which none of its metrics has"));
        }
    }
    problems
}

#[test]
fn the_query_scanner_reads_metrics_matchers_and_grouping() {
    let named = scan(
        r#"sum by (service, state) (rate(skyconf_fleet_agents{job="$job", instance=~"$instance", state!~"a|b"}[$__rate_interval])) / on(instance) process_max_fds > 0.8 or vector(0)"#,
    );
    let selectors: Vec<(&str, Vec<&str>)> =
        named.selectors.iter().map(|s| (s.metric.as_str(), s.labels.iter().map(String::as_str).collect())).collect();
    assert_eq!(
        selectors,
        [("skyconf_fleet_agents", vec!["job", "instance", "state"]), ("process_max_fds", vec![])],
        "{named:?}"
    );
    assert_eq!(named.grouping, ["service", "state", "instance"]);

    let exported = exported_series(
        "# TYPE skyconf_fleet_agents gauge\nskyconf_fleet_agents{service=\"a,b\\\"}\",digest=\"d\"} 1\nprocess_max_fds 10\n# EOF\n",
    );
    assert_eq!(exported["skyconf_fleet_agents"], BTreeSet::from(["service".to_owned(), "digest".to_owned()]));
    let problems = check_query(r#"sum by (state) (skyconf_fleet_agents{state="stuck"}) + skyconf_nope"#, &exported);
    assert_eq!(
        problems,
        [
            "`skyconf_fleet_agents` has no label `state` (it is exported with: digest, service)",
            "`skyconf_nope` is not exported",
            "groups by `state`, which none of its metrics has",
        ]
    );
    assert_eq!(check_query("vector(1)", &exported), ["names no skyconf or process metric"]);
}
