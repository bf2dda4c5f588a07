//! `skyconf rollout`: start, watch, promote and abort staged rollouts through a server's admin API
//! (`/api/v1/rollouts`). Every subcommand prints the API's answer as one JSON object on stdout
//! (`{"rollout": {...}, "history": [...]}`), or with `--text` the rollout for a person to read
//! ([`text`]); `status --watch` prints again each time something a person sees changes (the
//! state, the wave, the reached and applied counts, a new event) until the rollout ends.

mod text;

use std::process::ExitCode;
use std::time::Duration;

use std::io::Write as _;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use skyconf_server::security::Secret;

use super::Document;
use crate::args::parse_duration;

/// Exit status when the server answered with an error (it refused the request, or the token),
/// as `fetch` has it.
const EXIT_SERVER_ERROR: u8 = 3;

/// Exit status when a watched rollout ends reverted or aborted.
const EXIT_REVERTED: u8 = 4;

/// How often `status --watch` asks.
const WATCH_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Output: the API's answer as one JSON object on stdout ({\"rollout\": ..., \"history\": [...]}), or the
rollout in a few lines for a person with --text.

Exit status:
  0  the server did it (status: answered; status --watch: the rollout completed)
  1  the server could not be reached, or a file cannot be read (the reason on stderr)
  2  start: skyconf would refuse the candidate (FILE:LINE:COLUMN: message on stderr), or a usage
     error
  3  the server answered with an error: it refused the request or the token (its reason on stderr)
  4  status --watch: the rollout ended reverted or aborted")]
pub(crate) struct Args {
    /// The server's admin API.
    #[arg(long, global = true, default_value = "http://127.0.0.1:12800", env = "SKYCONF_ADMIN_URL")]
    admin: String,
    /// An admin token: a write token for start, promote and abort; a read token is enough for
    /// status. Its value from the environment never appears in `--help`.
    #[arg(long, global = true, env = "SKYCONF_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<Secret>,
    /// Print the rollout for a person (its state, reach and events) instead of JSON.
    #[arg(long, global = true)]
    text: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Start rolling out a document in waves.
    #[command(after_help = "\
Refused (exit status 3, the reason on stderr) when a wave, a gate, the author or the message is out
of its bounds, or when the first wave reaches no live identified instance of a service the document
changes (unless --ungated).

Exit status:
  0  started: its first wave is served
  1  the server could not be reached, or the candidate cannot be read
  2  skyconf would refuse the candidate (FILE:LINE:COLUMN: message on stderr), or a usage error
  3  the server refused the plan or the token (its reason on stderr)")]
    Start(StartArgs),
    /// Print the current (or last) rollout.
    #[command(after_help = "\
Exit status:
  0  printed; with --watch: the rollout completed (or there is none)
  1  the server could not be reached
  2  usage error
  3  the server refused the token (its reason on stderr)
  4  --watch: the rollout ended reverted or aborted")]
    Status {
        /// Print again each time its state, wave, reach or events change, until it ends (exit
        /// status 4 when reverted or aborted).
        #[arg(long)]
        watch: bool,
    },
    /// Start the next wave of a rollout waiting after a passed wave.
    #[command(after_help = "\
Exit status:
  0  the next wave started
  1  the server could not be reached
  2  usage error
  3  the server refused: the rollout is not waiting for a promote or is not current, or the token")]
    Promote {
        /// The rollout's id.
        id: String,
        /// Who promotes it (recorded in its events; at most 256 bytes).
        #[arg(long)]
        author: Option<String>,
    },
    /// Stop a rollout: every instance it reached gets back what it had.
    #[command(after_help = "\
Exit status:
  0  aborted: every instance it reached is served what it had before
  1  the server could not be reached
  2  usage error
  3  the server refused: the rollout has ended or is not current, or the token")]
    Abort {
        /// The rollout's id.
        id: String,
        /// Who aborts it (recorded in its events; at most 256 bytes).
        #[arg(long)]
        author: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
struct StartArgs {
    /// The candidate document (`-`: standard input).
    document: std::path::PathBuf,
    /// The waves, comma-separated (at most 20): a share of each changed service's instances
    /// (`10%`, growing from wave to wave) or a number of instances of each (`1`).
    #[arg(long, default_value = "1,10%,50%,100%")]
    waves: String,
    /// Every reached agent must apply within this long (whole seconds, 1 s to 1 day).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    apply_within: Duration,
    /// Then each wave bakes this long (whole seconds, up to 1 day; 0: it passes once applied).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    bake: Duration,
    /// A reached agent with no live row for this long has disappeared (whole seconds, 1 s to 1 day).
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
    /// Start even if the first wave reaches no live identified instance of a changed service:
    /// there it is a write in steps, which no gate can judge.
    #[arg(long)]
    ungated: bool,
    /// Who starts it (at most 256 bytes).
    #[arg(long)]
    author: Option<String>,
    /// Why (at most 4096 bytes).
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

/// A gate's duration in whole seconds, as the API takes it.
fn whole_seconds(flag: &str, duration: Duration) -> anyhow::Result<u64> {
    if duration.subsec_nanos() != 0 {
        bail!("--{flag} {duration:?}: gates are whole seconds");
    }
    Ok(duration.as_secs())
}

/// Why a rollout command ends with a status of its own rather than 1: the server answered with
/// an error (3), or the candidate is one skyconf would refuse (2, as `validate` says it).
#[derive(Debug)]
enum Ended {
    /// The server's error answer, with its reason.
    Answered(String),
    /// The candidate's `FILE:LINE:COLUMN: message`.
    Refused(String),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answered(text) | Self::Refused(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for Ended {}

/// Runs the subcommand; an [`Ended`] becomes its exit status, with its message on stderr.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match execute(args) {
        Err(error) => match error.downcast_ref::<Ended>() {
            Some(ended) => {
                let code = match ended {
                    Ended::Answered(_) => EXIT_SERVER_ERROR,
                    Ended::Refused(_) => super::EXIT_REFUSED,
                };
                let _ = writeln!(std::io::stderr(), "skyconf: {ended}");
                Ok(ExitCode::from(code))
            }
            None => Err(error),
        },
        done => done,
    }
}

fn execute(args: Args) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async move {
        let client = Client::new(&args.admin, args.token.as_ref())?;
        let print = |answer: &Value| show(answer, args.text);
        match args.command {
            Command::Start(start) => {
                let document = Document::read(&start.document)?;
                // A refused candidate is said as `validate` says it, with the file's name.
                if let Err(refused) = document.parse() {
                    return Err(Ended::Refused(document.located(&refused)).into());
                }
                let Some(text) = document.text else { bail!("{} has no document", document.name) };
                let mut gates = json!({
                    "apply_within_s": whole_seconds("apply-within", start.apply_within)?,
                    "bake_s": whole_seconds("bake", start.bake)?,
                    "lost_after_s": whole_seconds("lost-after", start.lost_after)?,
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
                    "ungated": start.ungated,
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
            Command::Status { watch: true } => watch(&client, args.text).await,
            Command::Promote { id, author } => {
                print(&operate(&client, &id, "promote", author).await?);
                Ok(ExitCode::SUCCESS)
            }
            Command::Abort { id, author } => {
                print(&operate(&client, &id, "abort", author).await?);
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// `POST /api/v1/rollouts/{id}/{action}` with who does it.
async fn operate(client: &Client, id: &str, action: &str, author: Option<String>) -> anyhow::Result<Value> {
    let body = json!({ "author": author });
    client.send("POST", &format!("/api/v1/rollouts/{id}/{action}"), Some(&body)).await
}

/// What a person sees of a rollout answer: its state, wave, reach and newest event (not when
/// each agent was last seen, which changes on every look while a poll is held).
fn visible(answer: &Value) -> Value {
    let rollout = &answer["rollout"];
    let progress = &rollout["progress"];
    let newest = rollout["events"].as_array().and_then(|events| events.last()).cloned();
    json!([rollout["id"], rollout["state"], progress["wave"], progress["reached"], progress["applied"], newest])
}

/// Prints the rollout each time something a person sees changes, until it ends.
async fn watch(client: &Client, text: bool) -> anyhow::Result<ExitCode> {
    let mut last: Option<Value> = None;
    loop {
        let now = client.send("GET", "/api/v1/rollouts", None).await?;
        let shown = visible(&now);
        if last.as_ref() != Some(&shown) {
            match (text, &last) {
                (true, Some(_)) => text::changes(&now, last.as_ref()),
                _ => show(&now, text),
            }
            last = Some(shown);
        }
        match now["rollout"]["phase"].as_str() {
            None | Some("completed") => return Ok(ExitCode::SUCCESS),
            Some("reverted" | "aborted") => return Ok(ExitCode::from(EXIT_REVERTED)),
            Some(_) => tokio::time::sleep(WATCH_EVERY).await,
        }
    }
}

/// Prints an answer: one JSON line, or the rollout for a person.
fn show(answer: &Value, text: bool) {
    if text {
        text::rollout(answer);
    } else {
        crate::commands::outln!("{answer}");
    }
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
            let mut reason = match answer["details"]["message"].as_str() {
                Some(refused) => format!("{method} {path}: {status}: {error}: {refused}"),
                None => format!("{method} {path}: {status}: {error}"),
            };
            reason.push_str(token_hint(status, self.token.is_some()));
            return Err(Ended::Answered(reason).into());
        }
        Ok(answer)
    }
}

/// What to do about a refused token: which flag or variable sets it.
fn token_hint(status: reqwest::StatusCode, has_token: bool) -> &'static str {
    match status {
        reqwest::StatusCode::UNAUTHORIZED if has_token => {
            " (the server does not know this token: pass one of its admin tokens with --token or SKYCONF_ADMIN_TOKEN)"
        }
        reqwest::StatusCode::UNAUTHORIZED => {
            " (the server wants an admin token: pass it with --token or SKYCONF_ADMIN_TOKEN)"
        }
        reqwest::StatusCode::FORBIDDEN if has_token => {
            " (this token may not do this: start, promote and abort need a write token, in --token or SKYCONF_ADMIN_TOKEN)"
        }
        _ => "",
    }
}
