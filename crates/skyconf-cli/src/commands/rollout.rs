//! `skyconf rollout`: start, watch, promote and abort staged rollouts through a server's admin API
//! (`/api/v1/rollouts`). Every subcommand prints the rollout as one JSON object on stdout; `status
//! --watch` prints one line per change until the rollout ends.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use skyconf_server::security::Secret;

use super::Document;
use crate::args::parse_duration;

/// Exit status when a watched rollout ends reverted or aborted.
const EXIT_REVERTED: u8 = 4;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server's admin API.
    #[arg(long, global = true, default_value = "http://127.0.0.1:12800", env = "SKYCONF_ADMIN_URL")]
    admin: String,
    /// A write token (a read token for `status`). Its value from the environment never appears
    /// in `--help`.
    #[arg(long, global = true, env = "SKYCONF_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<Secret>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Start rolling out a document in waves.
    Start(StartArgs),
    /// Print the current (or last) rollout.
    Status {
        /// Print a line each time it changes, until it ends (exit status 4 when reverted or aborted).
        #[arg(long)]
        watch: bool,
    },
    /// Start the next wave of a rollout waiting after a passed wave.
    Promote {
        /// The rollout's id.
        id: String,
        /// Who promotes it (recorded in its events).
        #[arg(long)]
        author: Option<String>,
    },
    /// Stop a rollout: every instance it reached gets back what it had.
    Abort {
        /// The rollout's id.
        id: String,
        /// Who aborts it (recorded in its events).
        #[arg(long)]
        author: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
struct StartArgs {
    /// The candidate document (`-`: standard input).
    document: std::path::PathBuf,
    /// The waves, comma-separated: a share (`10%`) or a number of instances (`1`).
    #[arg(long, default_value = "1,10%,50%,100%")]
    waves: String,
    /// Every reached agent must apply within this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    apply_within: Duration,
    /// Then each wave bakes this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    bake: Duration,
    /// A reached agent not seen for this long has disappeared.
    #[arg(long, default_value = "45s", value_parser = parse_duration)]
    lost_after: Duration,
    /// Prometheus' base URL, for a gate on `--prometheus-query`.
    #[arg(long, requires_all = ["prometheus_query", "prometheus_max"])]
    prometheus_url: Option<String>,
    /// A PromQL query whose every sample must stay at or under `--prometheus-max`.
    #[arg(long, requires = "prometheus_url")]
    prometheus_query: Option<String>,
    /// The threshold.
    #[arg(long, requires = "prometheus_url")]
    prometheus_max: Option<f64>,
    /// Wait for `skyconf rollout promote` after each passed wave.
    #[arg(long)]
    manual: bool,
    /// Who starts it.
    #[arg(long)]
    author: Option<String>,
    /// Why.
    #[arg(long)]
    message: Option<String>,
}

/// Parses `1,10%,100%` into waves.
fn waves(text: &str) -> anyhow::Result<Vec<Value>> {
    text.split(',')
        .map(str::trim)
        .map(|wave| {
            if wave.ends_with('%') {
                Ok(json!({ "share": wave }))
            } else {
                let count: usize =
                    wave.parse().with_context(|| format!("`{wave}` is neither a share (`10%`) nor a count"))?;
                Ok(json!({ "instances": count }))
            }
        })
        .collect()
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async move {
        let client = Client::new(&args.admin, args.token.as_ref())?;
        match args.command {
            Command::Start(start) => {
                let document = Document::read(&start.document)?;
                // A refused candidate is said as `validate` says it, with the file's name.
                if let Err(refused) = document.parse() {
                    bail!("{}", document.located(&refused));
                }
                let Some(text) = document.text else { bail!("{} has no document", document.name) };
                let mut gates = json!({
                    "apply_within_s": start.apply_within.as_secs(),
                    "bake_s": start.bake.as_secs(),
                    "lost_after_s": start.lost_after.as_secs(),
                });
                if let (Some(url), Some(query), Some(max)) =
                    (start.prometheus_url, start.prometheus_query, start.prometheus_max)
                {
                    gates["prometheus"] = json!({ "url": url, "query": query, "max": max });
                }
                let body = json!({
                    "document": text,
                    "waves": waves(&start.waves)?,
                    "gates": gates,
                    "advance": if start.manual { "manual" } else { "auto" },
                    "author": start.author,
                    "message": start.message,
                });
                print(&client.send("POST", "/api/v1/rollouts", Some(&body)).await?);
                Ok(ExitCode::SUCCESS)
            }
            Command::Status { watch: false } => {
                print(&client.send("GET", "/api/v1/rollouts", None).await?);
                Ok(ExitCode::SUCCESS)
            }
            Command::Status { watch: true } => watch(&client).await,
            Command::Promote { id, author } => operate(&client, &id, "promote", author).await,
            Command::Abort { id, author } => operate(&client, &id, "abort", author).await,
        }
    })
}

/// `POST /api/v1/rollouts/{id}/{action}` with who does it; prints the answer.
async fn operate(client: &Client, id: &str, action: &str, author: Option<String>) -> anyhow::Result<ExitCode> {
    let body = json!({ "author": author });
    print(&client.send("POST", &format!("/api/v1/rollouts/{id}/{action}"), Some(&body)).await?);
    Ok(ExitCode::SUCCESS)
}

/// Prints the rollout each time its state, wave or reach changes, until it ends.
async fn watch(client: &Client) -> anyhow::Result<ExitCode> {
    let mut last = Value::Null;
    loop {
        let now = client.send("GET", "/api/v1/rollouts", None).await?;
        let rollout = &now["rollout"];
        let shown = json!([rollout["state"], rollout["progress"], rollout["events"].as_array().map(Vec::len)]);
        if shown != last {
            print(&now);
            last = shown;
        }
        match rollout["phase"].as_str() {
            None | Some("completed") => return Ok(ExitCode::SUCCESS),
            Some("reverted" | "aborted") => return Ok(ExitCode::from(EXIT_REVERTED)),
            Some(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

fn print(value: &Value) {
    crate::commands::outln!("{value}");
}

/// The admin API over HTTP, with the token.
struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    fn new(base: &str, token: Option<&Secret>) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
        Ok(Self { http, base: base.trim_end_matches('/').to_owned(), token: token.map(|t| t.expose().to_owned()) })
    }

    /// One request; an error status is an error carrying the server's reason.
    async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "GET" => self.http.get(&url),
            _ => self.http.post(&url),
        };
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.with_context(|| format!("cannot reach {url}"))?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let error = answer["error"].as_str().unwrap_or("no reason given");
            match answer["details"]["message"].as_str() {
                Some(refused) => bail!("{method} {path}: {status}: {error}: {refused}"),
                None => bail!("{method} {path}: {status}: {error}"),
            }
        }
        Ok(answer)
    }
}
