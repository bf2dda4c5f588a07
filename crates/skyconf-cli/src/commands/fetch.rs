//! `skyconf fetch`: one `fetchConfigurations` call, as an agent makes it, printed as JSON:
//! `{"commands": [{"command": "...", "args": [["SerialNumber", "..."], ["UUID", "..."], ...]}]}`.
//!
//! Stdout carries what the server answered, an error status included (`{"error": "<code>",
//! "code": N, "message": "..."}`, exit status 3); stderr carries every error message, and a
//! server that cannot be reached is only that (exit status 1).

use std::io::Write as _;
use std::process::ExitCode;

use serde_json::json;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::cds::hold::HOLD_HEADER;

use crate::args::{ClientArgs, ServerAddr};

/// Exit status of `fetch` when the server answered with an error status.
const EXIT_SERVER_ERROR: u8 = 3;

/// Arguments of `skyconf fetch`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Output: the answer on stdout as JSON; an error status the server answered is also JSON on stdout,
{\"error\": \"PermissionDenied\", \"code\": 7, \"message\": \"...\"}, and a line on stderr.

Exit status:
  0  the server answered; the answer is on stdout
  1  the server could not be reached or gave no answer in time (message on stderr only)
  2  usage error
  3  the server answered with an error status (JSON on stdout, a line on stderr)")]
pub(crate) struct Args {
    #[command(flatten)]
    client: ClientArgs,
    /// The digest the agent holds (empty on a first poll).
    #[arg(long, default_value = "")]
    uuid: String,
    /// Poll as an agent does: the server may hold the call until the service's answer changes
    /// (at most until shortly before --timeout; a timeout under 10 s is answered at once). With
    /// --uuid of the current answer, this waits for the next change.
    #[arg(long)]
    hold: bool,
}

/// Makes the call and prints its answer; exit status 3 when the server answers with an error.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { client: ClientArgs { addr, service, timeout, authentication }, uuid, hold } = args;
    let first_poll = uuid.is_empty();
    let asked = service.clone();
    super::runtime()?.block_on(async {
        let endpoint = addr.endpoint()?.timeout(timeout).connect_timeout(timeout);
        let channel = match endpoint.connect().await {
            Ok(channel) => channel,
            Err(error) => return Err(with_hint(&addr, anyhow::Error::new(error)).await.context(format!("cannot connect to {addr}"))),
        };
        let mut client = ConfigurationDiscoveryServiceClient::new(channel);
        let mut request = tonic::Request::new(ConfigurationSyncRequest { service, uuid });
        if hold {
            // The deadline an agent sends (`grpc-timeout`): the server holds the poll within it.
            request.set_timeout(timeout);
        } else {
            // An answer now, whatever the timeout: a held poll would wait for the next change.
            request.metadata_mut().insert(HOLD_HEADER, tonic::metadata::MetadataValue::from_static("off"));
        }
        if let Some(token) = &authentication {
            let token =
                token.expose().parse().map_err(|_| anyhow::anyhow!("invalid --authentication: not ASCII text"))?;
            request.metadata_mut().insert("authentication", token);
        }
        match client.fetch_configurations(request).await {
            Ok(response) => {
                let commands: Vec<_> = response
                    .into_inner()
                    .commands
                    .into_iter()
                    .map(|c| {
                        let args: Vec<_> = c.args.into_iter().map(|a| json!([a.key, a.value])).collect();
                        json!({ "command": c.command, "args": args })
                    })
                    .collect();
                crate::commands::outln!("{}", json!({ "commands": commands }));
                if first_poll && answer_is_empty(&commands) {
                    // A typo in the name gets the same answer as a service without settings.
                    let _ = writeln!(
                        std::io::stderr(),
                        "skyconf: no settings for `{asked}`: the answer is the empty configuration (check the service name)"
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            // A status with a cause is the client's own (the connection broke, the deadline
            // passed): no answer, so nothing on stdout.
            Err(status) if std::error::Error::source(&status).is_some() => {
                Err(with_hint(&addr, anyhow::Error::new(status)).await.context(format!("no answer from {addr}")))
            }
            // An HTTP answer that is not gRPC (another port's server): no answer either.
            Err(status) if !is_grpc_answer(&status) => {
                Err(with_hint(&addr, anyhow::Error::new(status)).await.context(format!("no gRPC answer from {addr}")))
            }
            Err(status) => {
                let code = status.code();
                crate::commands::outln!(
                    "{}",
                    json!({ "error": format!("{code:?}"), "code": code as i32, "message": status.message() })
                );
                // Never a panic on a closed stderr: the answer is on stdout already.
                let mut message = match status.message() {
                    "" => String::new(),
                    text => format!(": {text}"),
                };
                if crate::args::is_token_refusal(code) {
                    message.push_str(&format!(" ({})", crate::args::token_hint(authentication.is_some())));
                }
                let _ = writeln!(std::io::stderr(), "skyconf: the server at {addr} answered {code:?}{message}");
                Ok(ExitCode::from(EXIT_SERVER_ERROR))
            }
        }
    })
}

/// Whether an answer carries no setting: one command with only its serial number and digest.
fn answer_is_empty(commands: &[serde_json::Value]) -> bool {
    commands.iter().all(|c| c["args"].as_array().is_some_and(|args| args.len() <= 2))
}

/// Whether an error status came from a gRPC server: tonic reads a non-gRPC HTTP answer (an admin
/// port's JSON, say) as a gRPC one and says so in its message; its headers are in the metadata.
fn is_grpc_answer(status: &tonic::Status) -> bool {
    let content_type = status.metadata().get("content-type").and_then(|v| v.to_str().ok());
    let not_grpc = content_type.is_some_and(|t| !t.starts_with("application/grpc"));
    !not_grpc && !status.message().contains("while receiving response with status")
}

/// `error` with a sentence of what listens at `addr` instead, when a probe tells
/// ([`crate::probe::hint`]).
async fn with_hint(addr: &ServerAddr, error: anyhow::Error) -> anyhow::Error {
    // A TLS client that met a plaintext server says so in rustls' words.
    let text = crate::causes(error.chain().map(|c| c as &(dyn std::error::Error + 'static)));
    let hint = match crate::probe::hint(addr).await {
        Some(hint) => Some(hint),
        None if addr.is_tls() && text.contains("InvalidContentType") => {
            Some(format!("{} does not speak TLS: use --addr http://{}", addr.authority(), addr.authority()))
        }
        None => None,
    };
    match hint {
        Some(hint) => anyhow::anyhow!("{hint} ({text})"),
        None => error,
    }
}
