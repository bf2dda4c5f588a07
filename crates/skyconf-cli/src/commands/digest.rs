//! `skyconf digest PATH`: what the server would serve each service, as JSON:
//! `{"<service>": {"uuid": "<hex>", "config": {"<key>": "<value>", ...}}, ...}` in document order.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Map, Value, json};

/// Arguments of `skyconf digest`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent-configurations YAML file.
    path: PathBuf,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    match super::read_document(&args.path)? {
        Ok(table) => {
            let mut out = Map::new();
            for service in table.services() {
                let config: Map<String, Value> =
                    service.entries().iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
                out.insert(service.name().to_owned(), json!({ "uuid": service.digest().as_str(), "config": config }));
            }
            println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("{}:{}", args.path.display(), error);
            Ok(ExitCode::from(2))
        }
    }
}
