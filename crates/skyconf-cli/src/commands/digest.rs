//! `skyconf digest PATH`: what the server would serve each service, as JSON:
//! `{"<service>": {"uuid": "<hex>", "config": {"<key>": "<value>", ...}}, ...}` in document order.
//! `PATH` is a file, `-` (standard input) or a file-store directory, as for `validate`. With a
//! `global-configurations:` section, `"*"` is what services without an entry get.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Map, Value, json};

use super::{Document, EXIT_REFUSED};

/// Arguments of `skyconf digest`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status:
  0  the digests are printed on stdout
  1  the document cannot be read
  2  skyconf would refuse the document (FILE:LINE:COLUMN: message on stderr), or a usage error")]
pub(crate) struct Args {
    /// The agent-configurations YAML file, `-` for standard input, or a directory in the file
    /// store's directory form (a mounted ConfigMap).
    path: PathBuf,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let document = Document::read(&args.path)?;
    match document.parse() {
        Ok(skyconf_core::Reading { table, .. }) => {
            let mut out = Map::new();
            // `*`: what services without an entry get (the global settings), as the history names it.
            let others = table.served(skyconf_core::diff::OTHER_SERVICES).filter(|_| table.global().is_some());
            for service in table.services().chain(others.as_ref()) {
                let config: Map<String, Value> =
                    service.entries().iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
                out.insert(service.name().to_owned(), json!({ "uuid": service.digest().as_str(), "config": config }));
            }
            crate::commands::outln!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("{}", document.located(&error));
            Ok(ExitCode::from(EXIT_REFUSED))
        }
    }
}
