//! `skyconf fetch`: one `fetchConfigurations` call, as an agent makes it, printed as JSON:
//! `{"commands": [{"command": "...", "args": [["SerialNumber", "..."], ["UUID", "..."], ...]}]}`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::security::Secret;

/// Arguments of `skyconf fetch`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server, `HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:11800", env = "SKYCONF_ADDR")]
    addr: String,
    /// The service name, exactly as the agent sends it.
    #[arg(long)]
    service: String,
    /// The digest the agent holds (empty on a first poll).
    #[arg(long, default_value = "")]
    uuid: String,
    /// Deadline of the call.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// Token sent as `authentication` metadata, as an agent with `agent.authentication` sends it.
    #[arg(long, env = "SKYCONF_AUTHENTICATION", hide_env_values = true)]
    authentication: Option<Secret>,
}

/// Parses `250ms`, `20s`, `2m` or a plain number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((text, "s"), |i| text.split_at(i));
    let value: f64 = number.parse().map_err(|_| format!("not a duration: {text}"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("unknown unit in {text} (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", args.addr))
            .context("invalid address")?
            .timeout(args.timeout)
            .connect_timeout(args.timeout);
        let channel = endpoint.connect().await.with_context(|| format!("cannot connect to {}", args.addr))?;
        let mut client = ConfigurationDiscoveryServiceClient::new(channel);
        let mut request = tonic::Request::new(ConfigurationSyncRequest { service: args.service, uuid: args.uuid });
        if let Some(token) = &args.authentication {
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
                println!("{}", json!({ "commands": commands }));
                Ok(ExitCode::SUCCESS)
            }
            Err(status) => {
                println!("{}", json!({ "error": format!("{:?}", status.code()), "message": status.message() }));
                Ok(ExitCode::from(3))
            }
        }
    })
}
