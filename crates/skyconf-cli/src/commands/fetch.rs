//! `skyconf fetch`: one `fetchConfigurations` call, as an agent makes it, printed as JSON:
//! `{"commands": [{"command": "...", "args": [["SerialNumber", "..."], ["UUID", "..."], ...]}]}`.

use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::json;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;

use crate::args::ClientArgs;

/// Arguments of `skyconf fetch`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    client: ClientArgs,
    /// The digest the agent holds (empty on a first poll).
    #[arg(long, default_value = "")]
    uuid: String,
}

/// Makes the call and prints its answer; exit status 3 when the call fails.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { client: ClientArgs { addr, service, timeout, authentication }, uuid } = args;
    super::runtime()?.block_on(async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .context("invalid address")?
            .timeout(timeout)
            .connect_timeout(timeout);
        let channel = endpoint.connect().await.with_context(|| format!("cannot connect to {addr}"))?;
        let mut client = ConfigurationDiscoveryServiceClient::new(channel);
        let mut request = tonic::Request::new(ConfigurationSyncRequest { service, uuid });
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
