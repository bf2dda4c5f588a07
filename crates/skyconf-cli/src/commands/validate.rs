//! `skyconf validate PATH`: exit status 0 when skyconf would serve the document, 2 when it would
//! refuse it (with line and column). Warnings name settings no known agent reads (listing the
//! ones they do), values an agent would refuse, and values agents treat differently, and what the
//! reader dropped as the OAP drops it (a key, service or `configurations:` written twice).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use crate::known_keys::{self, KNOWN_KEYS};

/// Arguments of `skyconf validate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent-configurations YAML file.
    path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Exit with status 1 when there are warnings.
    #[arg(long)]
    strict: bool,
}

/// The OAP's YAML loader refuses documents over this many characters.
const OAP_CODE_POINT_LIMIT: usize = 3 * 1024 * 1024;

fn warnings_for(reading: &skyconf_core::Reading, text_chars: usize) -> Vec<String> {
    let table = &reading.table;
    let mut warnings: Vec<String> = reading.warnings.iter().map(ToString::to_string).collect();
    if text_chars > OAP_CODE_POINT_LIMIT {
        warnings.push(format!(
            "the document has {text_chars} characters; an OAP would refuse more than {OAP_CODE_POINT_LIMIT}, so it cannot move back to an OAP as is"
        ));
    }
    for service in table.services() {
        for (key, value) in service.entries() {
            let Some(known) = known_keys::find(key) else {
                let names: Vec<_> = KNOWN_KEYS.iter().map(|k| k.key).collect();
                warnings.push(format!(
                    "service `{}`: no known agent reads `{key}`; known keys: {}",
                    service.name(),
                    names.join(", ")
                ));
                continue;
            };
            if value.is_empty() {
                warnings.push(format!(
                    "service `{}`: `{key}` is empty; agents treat that as if the key were absent (their local default)",
                    service.name()
                ));
            } else if value.trim().is_empty() {
                warnings.push(format!(
                    "service `{}`: `{key}` is only white space; the Java agent resets it to its default, the Go agent applies it",
                    service.name()
                ));
            } else if let Some(problem) = known_keys::value_problem(known.kind, value) {
                warnings.push(format!("service `{}`: `{key}` ({} agent): {problem}", service.name(), known.agent));
            }
        }
    }
    warnings
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(&args.path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.path.display()))?;
    let path = args.path.display().to_string();
    match skyconf_core::read_with_warnings(&text) {
        Err(error) => {
            if args.json {
                let at = error.position();
                println!(
                    "{}",
                    json!({ "valid": false, "path": path, "error": error.to_string(),
                            "line": at.map(|p| p.line), "column": at.map(|p| p.column) })
                );
            } else {
                eprintln!("{path}:{error}");
            }
            Ok(ExitCode::from(2))
        }
        Ok(reading) => {
            let warnings = warnings_for(&reading, text.chars().count());
            let table = &reading.table;
            let settings: usize = table.services().map(|s| s.entries().len()).sum();
            if args.json {
                println!(
                    "{}",
                    json!({ "valid": true, "path": path, "services": table.len(), "settings": settings, "warnings": warnings })
                );
            } else {
                for warning in &warnings {
                    eprintln!("warning: {warning}");
                }
                println!("{path}: valid, {} services, {settings} settings, {} warnings", table.len(), warnings.len());
            }
            Ok(if args.strict && !warnings.is_empty() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_about_unknown_keys_bad_values_and_blank_values() {
        let reading = skyconf_core::read_with_warnings(
            "configurations:\n  a:\n    agent.sample_n_per_3_secs: 1.5\n    agent.typo: 1\n    agent.span_limit_per_segment: \" \"\n    agent.sample_rate: 0.5\n",
        )
        .unwrap();
        let warnings = warnings_for(&reading, 10);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("not a 32-bit integer"));
        assert!(warnings[1].contains("agent.typo") && warnings[1].contains("agent.sample_n_per_3_secs"));
        assert!(warnings[2].contains("white space"));
    }

    #[test]
    fn warns_about_what_a_repeated_key_drops_first() {
        let reading = skyconf_core::read_with_warnings(
            "configurations:\n  a: {agent.sample_rate: 0.5}\nconfigurations:\n  b: {agent.sample_rate: 1}\n",
        )
        .unwrap();
        let warnings = warnings_for(&reading, 10);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("line 3, column 1: `configurations:` is written 2 times (lines 1, 3)"));
    }
}
