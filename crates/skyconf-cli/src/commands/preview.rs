//! `skyconf preview PATH --service S [--instance I] [--property K=V]... [--agent-version V]
//! [--path P]...`: what an agent of a service would get from a document (a draft, read as the
//! server reads it), each setting with its layer (`global`, `service`, `group:<name>`), and which
//! of the given operation names a Java agent would not trace under it. The same JSON as
//! `POST /api/v1/preview` with a draft (without a rollout: a file has none).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use skyconf_core::ignore::list_problems;
use skyconf_core::keys::TRACE_IGNORE_PATH;
use skyconf_core::layers::{ignored_paths, provenance};
use skyconf_core::targeting::InstanceRef;

use super::{Document, EXIT_REFUSED};

/// Arguments of `skyconf preview`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status:
  0  the preview is printed on stdout
  1  the document cannot be read
  2  skyconf would refuse the document (FILE:LINE:COLUMN: message on stderr), or a usage error")]
pub(crate) struct Args {
    /// The agent-configurations YAML file, `-` for standard input, or a directory in the file
    /// store's directory form (a mounted ConfigMap).
    path: PathBuf,
    /// The service the agent names.
    #[arg(long)]
    service: String,
    /// The agent's instance name (its targeting group applies).
    #[arg(long)]
    instance: Option<String>,
    /// A property the instance reports, `KEY=VALUE`; repeat for more.
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = property)]
    properties: Vec<(String, String)>,
    /// The agent's version (its `agent-version`).
    #[arg(long)]
    agent_version: Option<String>,
    /// An operation name (`/health/live`, `GET:/ping`) to judge against the answer's
    /// `agent.trace.ignore_path` and `agent.ignore_suffix`; repeat for more.
    #[arg(long = "path", value_name = "NAME")]
    paths: Vec<String>,
}

fn property(text: &str) -> Result<(String, String), String> {
    text.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let document = Document::read(&args.path)?;
    let table = match document.parse() {
        Ok(reading) => reading.table,
        Err(error) => {
            eprintln!("{}", document.located(&error));
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
    };
    let properties: Vec<(Box<str>, Box<str>)> =
        args.properties.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect();
    let instance = args.instance.as_deref().map(|name| InstanceRef {
        name,
        properties: &properties,
        agent_version: args.agent_version.as_deref(),
    });
    let found = provenance(&table, &args.service, instance.as_ref());
    let sent: Vec<(&str, &str)> = found.settings.iter().map(|s| (s.key.as_str(), s.value.as_str())).collect();
    let ignored: Vec<Value> = ignored_paths(&sent, &args.paths)
        .into_iter()
        .map(|v| json!({"path": v.path, "ignored": v.ignored_by.is_some(), "ignored_by": v.ignored_by, "pattern": v.pattern}))
        .collect();
    let warnings: Vec<String> = sent
        .iter()
        .find(|(k, _)| *k == TRACE_IGNORE_PATH)
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(_, v)| list_problems(v))
        .unwrap_or_default();
    let settings: Vec<Value> =
        found.settings.iter().map(|s| json!({"key": s.key, "value": s.value, "layer": s.layer.to_string()})).collect();
    let mut out = json!({
        "service": args.service,
        "instance": args.instance,
        "against": "draft",
        "digest": found.digest.as_str(),
        "configured": table.get(&args.service).is_some(),
        "group": found.group,
        "rollout": null,
        "settings": settings,
    });
    if !ignored.is_empty() {
        out["ignored"] = Value::Array(ignored);
    }
    if !warnings.is_empty() {
        out["warnings"] = json!(warnings);
    }
    crate::commands::outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
