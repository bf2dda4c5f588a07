//! `skyconf validate PATH`: exit status 0 when skyconf would serve the document, 2 when it would
//! refuse it (`FILE:LINE:COLUMN: message`). Warnings name settings no known agent reads (with the
//! known key it was probably meant to be), values an agent would refuse, values agents treat
//! differently, and what the reader dropped as the OAP drops it (a setting, a service or the
//! top-level `configurations:` written twice): [`skyconf_core::warnings`], the list every admin
//! write and the web page's editors give too.
//!
//! `PATH` is a file, `-` for standard input, or a directory in the file store's directory form (a
//! mounted ConfigMap, one file per key): there the document is the file named
//! `configuration-discovery.default.agentConfigurations`, the one `serve --file DIR` serves.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use skyconf_core::warnings::{Warning, warnings};

use super::{Document, EXIT_REFUSED, split_position};

/// Arguments of `skyconf validate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status:
  0  skyconf would serve the document (warnings, if any, on stderr)
  1  --strict and there are warnings, or the document cannot be read
  2  skyconf would refuse the document (FILE:LINE:COLUMN: message on stderr), or a usage error")]
pub(crate) struct Args {
    /// The agent-configurations YAML file, `-` for standard input, or a directory in the file
    /// store's directory form (a mounted ConfigMap): its `configuration-discovery.default.agentConfigurations` file.
    path: PathBuf,
    /// Print one JSON object on stdout instead of text (warnings as objects).
    #[arg(long)]
    json: bool,
    /// Exit with status 1 when there are warnings.
    #[arg(long)]
    strict: bool,
}

/// `NAME:LINE:COLUMN: warning: service `S`: message`, as compilers print warnings.
fn warning_text(warning: &Warning, name: &str) -> String {
    let at = match (warning.line, warning.column) {
        (Some(line), Some(column)) => format!("{name}:{line}:{column}"),
        _ => name.to_owned(),
    };
    match &warning.service {
        Some(service) => format!("{at}: warning: service `{service}`: {}", warning.message),
        None => format!("{at}: warning: {}", warning.message),
    }
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    if n == 1 { format!("1 {thing}") } else { format!("{n} {thing}s") }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let document = Document::read(&args.path)?;
    let name = document.name.as_str();
    match document.parse() {
        Err(error) => {
            if args.json {
                let (at, message) = split_position(&error);
                crate::commands::outln!(
                    "{}",
                    json!({ "valid": false, "path": name, "error": message,
                            "line": at.map(|p| p.line), "column": at.map(|p| p.column) })
                );
            } else {
                eprintln!("{}", document.located(&error));
            }
            Ok(ExitCode::from(EXIT_REFUSED))
        }
        Ok(reading) => {
            let mut warnings = warnings(&reading, document.text.as_deref().unwrap_or(""));
            let table = &reading.table;
            if document.text.is_none() {
                let mut message =
                    "no such file: the directory holds no agent configurations, so the file store would serve none"
                        .to_owned();
                // Loose documents are not the directory form: say how to check them instead.
                let yaml = std::fs::read_dir(&args.path)
                    .map(|entries| {
                        entries
                            .filter_map(Result::ok)
                            .filter(|e| e.path().extension().is_some_and(|x| x == "yaml" || x == "yml"))
                            .count()
                    })
                    .unwrap_or(0);
                if yaml > 0 {
                    message.push_str(&format!(
                        "; its {yaml} *.yaml/*.yml files are not part of the directory form: validate each by name"
                    ));
                }
                warnings.push(Warning::about_document(message));
            }
            let settings: usize = table.services().map(|s| s.own_entries().len()).sum();
            let global = table.global().map_or(0, |g| g.own_entries().len());
            let groups: usize = table.targeting().services().map(|(_, groups)| groups.len()).sum();
            if args.json {
                crate::commands::outln!(
                    "{}",
                    json!({ "valid": true, "path": name, "services": table.len(), "settings": settings,
                            "global_settings": global, "targeting_groups": groups, "warnings": warnings })
                );
            } else {
                for warning in &warnings {
                    eprintln!("{}", warning_text(warning, name));
                }
                let groups =
                    if groups == 0 { String::new() } else { format!(", {}", count(groups, "targeting group")) };
                let global = if global == 0 { String::new() } else { format!(", {}", count(global, "global setting")) };
                crate::commands::outln!(
                    "{name}: valid, {}, {}{global}{groups}, {}",
                    count(table.len(), "service"),
                    count(settings, "setting"),
                    count(warnings.len(), "warning")
                );
            }
            Ok(if args.strict && !warnings.is_empty() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_reads_as_a_compiler_warning() {
        let text = "configurations:\n  a:\n    agent.span_limit_per_segment: \" \"\n";
        let found = warnings(&skyconf_core::read_with_warnings(text).unwrap(), text);
        assert_eq!(
            warning_text(&found[0], "f.yaml"),
            format!("f.yaml:3:5: warning: service `a`: {}", found[0].message)
        );
        assert_eq!(warning_text(&Warning::about_document("big"), "f.yaml"), "f.yaml: warning: big");
    }

    #[test]
    fn counts_say_one_thing_or_many_things() {
        assert_eq!(
            (count(0, "warning"), count(1, "service"), count(2, "setting")),
            ("0 warnings".into(), "1 service".into(), "2 settings".into())
        );
    }
}
