//! `skyconf validate PATH`: exit status 0 when skyconf would serve the document, 2 when it would
//! refuse it (`FILE:LINE:COLUMN: message`). Warnings name settings no known agent reads (with the
//! known key it was probably meant to be), values an agent would refuse, values agents treat
//! differently, and what the reader dropped as the OAP drops it (a setting, a service or the
//! top-level `configurations:` written twice).
//!
//! `PATH` is a file, `-` for standard input, or a directory in the file store's directory form (a
//! mounted ConfigMap, one file per key): there the document is the file named
//! `configuration-discovery.default.agentConfigurations`, the one `serve --file DIR` serves.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;

use super::{Document, EXIT_REFUSED, split_position};
use crate::known_keys::{self, KNOWN_KEYS};
use crate::settings::did_you_mean;

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

/// The OAP's YAML loader refuses documents over this many characters.
const OAP_CODE_POINT_LIMIT: usize = 3 * 1024 * 1024;

/// One warning: where, about what, and the key probably meant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Warning {
    /// 1-based line of the key, when it could be found in the text.
    line: Option<usize>,
    /// 1-based column of the key.
    column: Option<usize>,
    /// The service; `None` for a warning about the whole document.
    service: Option<String>,
    /// The key.
    key: Option<String>,
    /// What is wrong.
    message: String,
    /// The known key a misspelt one probably meant.
    suggestion: Option<String>,
}

impl Warning {
    /// `NAME:LINE:COLUMN: warning: service `S`: message`, as compilers print warnings.
    fn text(&self, name: &str) -> String {
        let at = match (self.line, self.column) {
            (Some(line), Some(column)) => format!("{name}:{line}:{column}"),
            _ => name.to_owned(),
        };
        match &self.service {
            Some(service) => format!("{at}: warning: service `{service}`: {}", self.message),
            None => format!("{at}: warning: {}", self.message),
        }
    }
}

/// Where `key` of `service` is written in `text` (block style; `None` for flow style): the first
/// line that names the key, indented, after the line that names the service.
fn locate(text: &str, service: &str, key: &str) -> Option<(usize, usize)> {
    let names = |line: &str, name: &str| {
        let trimmed = line.trim_start();
        [format!("{name}:"), format!("\"{name}\":"), format!("'{name}':")]
            .iter()
            .any(|p| trimmed.starts_with(p.as_str()))
    };
    let mut lines = text.lines().enumerate();
    lines.by_ref().find(|(_, line)| names(line, service))?;
    lines.find(|(_, line)| names(line, key)).map(|(i, line)| {
        let indent = line.chars().take_while(|c| c.is_whitespace()).count();
        (i + 1, indent + 1)
    })
}

fn warnings_for(reading: &skyconf_core::Reading, text: &str) -> Vec<Warning> {
    let table = &reading.table;
    let mut warnings: Vec<Warning> = reading
        .warnings
        .iter()
        .map(|w| Warning {
            line: Some(w.at.line),
            column: Some(w.at.column),
            service: None,
            key: None,
            message: w.message.clone(),
            suggestion: None,
        })
        .collect();
    let text_chars = text.chars().count();
    if text_chars > OAP_CODE_POINT_LIMIT {
        warnings.push(Warning {
            line: None,
            column: None,
            service: None,
            key: None,
            message: format!(
                "the document has {text_chars} characters; an OAP would refuse more than {OAP_CODE_POINT_LIMIT}, so it cannot move back to an OAP as is"
            ),
            suggestion: None,
        });
    }
    for service in table.services() {
        for (key, value) in service.entries() {
            let mut suggestion = None;
            let message = match known_keys::find(key) {
                None => match did_you_mean(key, KNOWN_KEYS.iter().map(|k| k.key)) {
                    Some(meant) => {
                        suggestion = Some(meant.to_owned());
                        format!("no known agent reads `{key}`; did you mean `{meant}`?")
                    }
                    None => {
                        let names: Vec<_> = KNOWN_KEYS.iter().map(|k| k.key).collect();
                        format!("no known agent reads `{key}`; known keys: {}", names.join(", "))
                    }
                },
                Some(_) if value.is_empty() => {
                    format!("`{key}` is empty; agents treat that as if the key were absent (their local default)")
                }
                Some(_) if value.trim().is_empty() => {
                    format!(
                        "`{key}` is only white space; the Java agent resets it to its default, the Go agent applies it"
                    )
                }
                Some(known) => match known_keys::value_problem(known.kind, value) {
                    Some(problem) => format!("`{key}` ({} agent): {problem}", known.agent),
                    None => continue,
                },
            };
            let at = locate(text, service.name(), key);
            warnings.push(Warning {
                line: at.map(|a| a.0),
                column: at.map(|a| a.1),
                service: Some(service.name().to_owned()),
                key: Some(key.clone()),
                message,
                suggestion,
            });
        }
    }
    warnings
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
            let mut warnings = warnings_for(&reading, document.text.as_deref().unwrap_or(""));
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
                warnings.push(Warning {
                    line: None,
                    column: None,
                    service: None,
                    key: None,
                    message,
                    suggestion: None,
                });
            }
            let settings: usize = table.services().map(|s| s.entries().len()).sum();
            if args.json {
                crate::commands::outln!(
                    "{}",
                    json!({ "valid": true, "path": name, "services": table.len(), "settings": settings, "warnings": warnings })
                );
            } else {
                for warning in &warnings {
                    eprintln!("{}", warning.text(name));
                }
                crate::commands::outln!(
                    "{name}: valid, {} services, {settings} settings, {} warnings",
                    table.len(),
                    warnings.len()
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
    fn warns_about_unknown_keys_bad_values_and_blank_values() {
        let text = "configurations:\n  a:\n    agent.sample_n_per_3_secs: 1.5\n    agent.sampel_n_per_3_secs: 1\n    agent.typo: 1\n    agent.span_limit_per_segment: \" \"\n    agent.sample_rate: 0.5\n";
        let reading = skyconf_core::read_with_warnings(text).unwrap();
        let warnings = warnings_for(&reading, text);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].message.contains("not a 32-bit integer"));
        assert_eq!((warnings[0].line, warnings[0].column), (Some(3), Some(5)));
        assert_eq!(warnings[1].suggestion.as_deref(), Some("agent.sample_n_per_3_secs"));
        assert!(warnings[1].message.contains("did you mean `agent.sample_n_per_3_secs`?"));
        assert_eq!(warnings[1].line, Some(4));
        assert!(warnings[2].suggestion.is_none() && warnings[2].message.contains("known keys: "));
        assert!(warnings[3].message.contains("white space"));
        assert_eq!(warnings[3].text("f.yaml"), format!("f.yaml:6:5: warning: service `a`: {}", warnings[3].message));
    }

    #[test]
    fn warns_about_what_a_repeated_key_drops_first() {
        let text = "configurations:\n  a: {agent.sample_rate: 0.5}\nconfigurations:\n  b: {agent.sample_rate: 1}\n";
        let warnings = warnings_for(&skyconf_core::read_with_warnings(text).unwrap(), text);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!((warnings[0].line, warnings[0].column), (Some(3), Some(1)));
        assert!(
            warnings[0]
                .text("f.yaml")
                .starts_with("f.yaml:3:1: warning: `configurations:` is written 2 times (lines 1, 3)")
        );
    }

    #[test]
    fn locates_keys_of_the_right_service_and_not_flow_style() {
        let text = "configurations:\n  a:\n    k: 1\n  \"b\":\n      k: 2\n  c: {k: 3}\n";
        assert_eq!(locate(text, "a", "k"), Some((3, 5)));
        assert_eq!(locate(text, "b", "k"), Some((5, 7)));
        assert_eq!(locate(text, "c", "k"), None);
    }
}
