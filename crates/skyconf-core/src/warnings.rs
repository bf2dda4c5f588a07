//! What is probably wrong with a document skyconf would serve: the one list of warnings behind
//! `skyconf validate`, every admin write and dry run, and the web page's editors.
//!
//! A warning never refuses a document (the reader does that); it says what agents will do with
//! something that is probably a mistake:
//! - what the reader drops as the OAP drops it (a setting, a service or the top-level
//!   `configurations:` written twice), from [`Reading::warnings`];
//! - a key no known agent reads, with the known key it was probably meant to be
//!   ([`crate::keys`], [`crate::suggest`]);
//! - an empty value (agents fall back to their default) or one of only white space (the Java and
//!   Go agents disagree about it);
//! - a value the agent that reads the key would refuse or read otherwise;
//! - a document an OAP would refuse for its size, so it cannot move back to an OAP as is.
//!
//! Each warning has the line and column of the key it is about (of the occurrence that is
//! served), in the text it was read from.

use crate::keys::{self, KNOWN_KEYS};
use crate::reader::Reading;
use crate::suggest::did_you_mean;
use crate::table::GLOBAL_KEY;

/// The OAP's YAML loader refuses documents over this many characters.
pub const OAP_CODE_POINT_LIMIT: usize = 3 * 1024 * 1024;

/// One warning: where, about what, and the key probably meant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Warning {
    /// 1-based line of the key (`null` for a warning about the whole document).
    pub line: Option<usize>,
    /// 1-based column of the key, in characters.
    pub column: Option<usize>,
    /// The service; `null` for a warning about the whole document or its `global-configurations`.
    pub service: Option<String>,
    /// The setting; `null` for a warning about a service or the whole document.
    pub key: Option<String>,
    /// What is wrong, and what agents do about it.
    pub message: String,
    /// The known key a misspelt one was probably meant to be.
    pub suggestion: Option<String>,
}

impl Warning {
    /// A warning about the whole document, without a place.
    pub fn about_document(message: impl Into<String>) -> Self {
        Self { line: None, column: None, service: None, key: None, message: message.into(), suggestion: None }
    }
}

/// Every warning about `reading`, read from `text`: the reader's first (in document order),
/// then the document's size, then the `global-configurations` settings, then the services'
/// own settings, service by service, key by key.
pub fn warnings(reading: &Reading, text: &str) -> Vec<Warning> {
    let mut warnings: Vec<Warning> = reading
        .warnings
        .iter()
        .map(|w| Warning {
            line: Some(w.at.line),
            column: Some(w.at.column),
            ..Warning::about_document(w.message.clone())
        })
        .collect();
    // Counting characters costs a pass over the text; only a text that could be over the limit
    // needs it (a character is at most 4 bytes).
    if text.len() > OAP_CODE_POINT_LIMIT {
        let chars = text.chars().count();
        if chars > OAP_CODE_POINT_LIMIT {
            warnings.push(Warning::about_document(format!(
                "the document has {chars} characters; an OAP would refuse more than {OAP_CODE_POINT_LIMIT}, so it cannot move back to an OAP as is"
            )));
        }
    }
    if let Some(global) = reading.table.global() {
        for (index, (key, value)) in global.own_entries().iter().enumerate() {
            let Some((message, suggestion)) = setting_problem(key, value) else { continue };
            let at = reading.keys.of_global(index);
            warnings.push(Warning {
                line: at.map(|a| a.line),
                column: at.map(|a| a.column),
                service: None,
                key: Some(key.clone()),
                message: format!("`{GLOBAL_KEY}`: {message}"),
                suggestion,
            });
        }
    }
    for service in reading.table.services() {
        for (index, (key, value)) in service.own_entries().iter().enumerate() {
            let Some((message, suggestion)) = setting_problem(key, value) else { continue };
            let at = reading.keys.of(service.name(), index);
            warnings.push(Warning {
                line: at.map(|a| a.line),
                column: at.map(|a| a.column),
                service: Some(service.name().to_owned()),
                key: Some(key.clone()),
                message,
                suggestion,
            });
        }
    }
    warnings
}

/// What is wrong with one setting, and the key it was probably meant to be.
fn setting_problem(key: &str, value: &str) -> Option<(String, Option<String>)> {
    let Some(known) = keys::find(key) else {
        return Some(match did_you_mean(key, KNOWN_KEYS.iter().map(|k| k.key)) {
            Some(meant) => (format!("no known agent reads `{key}`; did you mean `{meant}`?"), Some(meant.to_owned())),
            None => {
                let names: Vec<_> = KNOWN_KEYS.iter().map(|k| k.key).collect();
                (format!("no known agent reads `{key}`; known keys: {}", names.join(", ")), None)
            }
        });
    };
    let message = if value.is_empty() {
        format!("`{key}` is empty; agents treat that as if the key were absent (their local default)")
    } else if value.trim().is_empty() {
        format!("`{key}` is only white space; the Java agent resets it to its default, the Go agent applies it")
    } else {
        format!("`{key}` ({} agent): {}", known.agent, keys::value_problem(known.kind, value)?)
    };
    Some((message, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Vec<Warning> {
        warnings(&crate::read_with_warnings(text).unwrap(), text)
    }

    #[test]
    fn warns_about_unknown_keys_bad_values_and_blank_values_at_their_keys() {
        let text = "configurations:\n  a:\n    agent.sample_n_per_3_secs: 1.5\n    agent.sampel_n_per_3_secs: 1\n    agent.typo: 1\n    agent.span_limit_per_segment: \" \"\n    agent.ignore_suffix: ''\n    agent.sample_rate: 0.5\n";
        let found = of(text);
        assert_eq!(found.len(), 5, "{found:?}");
        assert!(found[0].message.contains("not a 32-bit integer"));
        assert_eq!((found[0].line, found[0].column), (Some(3), Some(5)));
        assert_eq!(found[1].suggestion.as_deref(), Some("agent.sample_n_per_3_secs"));
        assert!(found[1].message.contains("did you mean `agent.sample_n_per_3_secs`?"));
        assert_eq!(found[1].line, Some(4));
        assert!(found[2].suggestion.is_none() && found[2].message.contains("known keys: "));
        assert!(found[3].message.contains("white space"));
        assert!(found[4].message.contains("is empty"));
        assert_eq!((found[4].service.as_deref(), found[4].key.as_deref()), (Some("a"), Some("agent.ignore_suffix")));
    }

    #[test]
    fn places_keys_in_flow_style_and_the_served_one_of_a_repeated_key() {
        let text = "configurations:\n  a: {k: 1}\n  \"b\":\n      agent.sample_rate: x\n      agent.sample_rate: y\n";
        let found = of(text);
        let placed: Vec<_> = found.iter().map(|w| (w.line, w.column, w.key.as_deref())).collect();
        // The reader's warning about the repeated key first, then the settings in order.
        assert_eq!(
            placed,
            [(Some(5), Some(7), None), (Some(2), Some(7), Some("k")), (Some(5), Some(7), Some("agent.sample_rate"))]
        );
        assert!(found[2].message.contains("`y` is not a number"), "the served value: {found:?}");
    }

    #[test]
    fn warns_about_what_a_repeated_configurations_key_drops() {
        let text = "configurations:\n  a: {agent.sample_rate: 0.5}\nconfigurations:\n  b: {agent.sample_rate: 1}\n";
        let found = of(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].line, found[0].column), (Some(3), Some(1)));
        assert!(found[0].message.starts_with("`configurations:` is written 2 times (lines 1, 3)"));
    }
}
