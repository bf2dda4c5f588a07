//! The agent-configurations reader: YAML text in, a typed, digested [`AgentConfigurations`] out.
//!
//! It reads the document the OAP reads (`configurations: {service: {key: value}}`) and produces
//! the strings the OAP would serve, byte for byte: SnakeYAML's YAML 1.1 typing ([`resolve`]) and
//! Java's `toString` ([`java`]), in document order, with duplicate keys resolved as SnakeYAML does.
//!
//! Where the OAP would install a *partial* table (a null value or a malformed service drops that
//! service and every later one) the reader refuses the whole document instead, with the line and
//! column of the first problem, so the caller keeps serving its last good table. The README lists
//! every such deviation. One more is not the OAP's at all: a document whose aliases expand past a
//! budget (`tree::MAX_EXPANDED_CHARS`), or that would give a service an answer over gRPC's 4 MiB
//! message limit ([`crate::answer::MAX_ANSWER_BYTES`]), is refused before it is expanded.

mod bigint;
mod java;
mod resolve;
mod tree;
mod yaml11;

use std::collections::HashMap;
use std::fmt;

use indexmap::IndexMap;

use crate::answer::{MAX_ANSWER_BYTES, answer_len};
use crate::table::{AgentConfigurations, ServiceConfig};
use java::JavaValue;
use resolve::{Constructor, Entry, is_plain_mapping};
use tree::NodeKind;

/// Keys the command codec reserves: a configuration key with one of these names would overwrite
/// the command's own serial number or digest in the agent.
pub const RESERVED_KEYS: [&str; 2] = [crate::codec::SERIAL_NUMBER_KEY, crate::codec::UUID_KEY];

/// A place in the document: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Not YAML at all.
    #[error("{at}: invalid YAML: {message}")]
    Syntax {
        /// Where the parser stopped.
        at: Position,
        /// What the parser expected.
        message: String,
    },
    /// YAML, but not the shape of an agent-configurations document.
    #[error("{at}: {message}")]
    Structure {
        /// The offending node.
        at: Position,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A scalar that cannot become the Java value its form promises.
    #[error("{at}: {message}")]
    Value {
        /// The offending scalar.
        at: Position,
        /// What is wrong.
        message: String,
    },
}

impl ReadError {
    pub(crate) fn syntax(at: Position, message: impl Into<String>) -> Self {
        Self::Syntax { at, message: message.into() }
    }

    pub(crate) fn structure(at: Position, message: impl Into<String>) -> Self {
        Self::Structure { at, message: message.into() }
    }

    pub(crate) fn value(at: Position, message: impl Into<String>) -> Self {
        Self::Value { at, message: message.into() }
    }

    /// Where the problem is.
    pub fn position(&self) -> Option<Position> {
        match self {
            Self::Syntax { at, .. } | Self::Structure { at, .. } | Self::Value { at, .. } => Some(*at),
        }
    }
}

/// Reads an agent-configurations document.
///
/// An empty document (nothing, or only comments) and `configurations:` with no value give an
/// empty table, as in the OAP.
pub fn read(text: &str) -> Result<AgentConfigurations, ReadError> {
    let Some(root) = tree::parse(text)? else {
        return Ok(AgentConfigurations::default());
    };
    let mut constructor = Constructor::default();
    // `---` alone, `~`, `!!null x`: a null root, which the OAP reads as an empty table.
    if matches!(root.kind, NodeKind::Scalar { .. }) && matches!(constructor.construct(&root), Ok(JavaValue::Null)) {
        return Ok(AgentConfigurations::default());
    }
    if !is_plain_mapping(&root) {
        return Err(ReadError::structure(
            root.at,
            "the document must be a mapping with a top-level `configurations:` key",
        ));
    }
    let top = constructor.mapping_entries(&root)?;
    // Everything is built in document order, as SnakeYAML builds it: building a mapping can
    // rewrite nodes that later aliases see (see `Constructor::mapping_entries`).
    let mut services = None;
    for entry in &top {
        if matches!(&entry.key, JavaValue::Str(k) if k == "configurations") {
            services = Some(read_services(&mut constructor, &entry.value)?);
        } else {
            // The OAP's loader builds every value; one it cannot build fails the document.
            constructor.construct(&entry.value)?;
        }
    }
    match services {
        Some(services) => Ok(AgentConfigurations::from_services(services)),
        None => {
            let found: Vec<String> = top.iter().map(|e| format!("`{}`", e.key.to_java_string())).collect();
            Err(ReadError::structure(
                root.at,
                format!(
                    "no top-level `configurations:` key (found {}); without it every agent would lose its configuration",
                    if found.is_empty() { "none".to_owned() } else { found.join(", ") }
                ),
            ))
        }
    }
}

/// The value of `configurations`: service name to settings, in document order.
fn read_services(
    constructor: &mut Constructor,
    services_node: &tree::Node,
) -> Result<IndexMap<String, ServiceConfig>, ReadError> {
    match &services_node.kind {
        NodeKind::Scalar { .. } if matches!(constructor.construct(services_node)?, JavaValue::Null) => {
            return Ok(IndexMap::new());
        }
        NodeKind::Mapping(_) if is_plain_mapping(services_node) => {}
        _ => {
            return Err(ReadError::structure(
                services_node.at,
                "`configurations` must map service names to their settings",
            ));
        }
    }
    let mut services: IndexMap<String, ServiceConfig> = IndexMap::new();
    let mut service_at: HashMap<String, Position> = HashMap::new();
    for Entry { key, key_node, value } in constructor.mapping_entries(services_node)? {
        let key_at = key_node.at;
        let name = match &key {
            JavaValue::Null => {
                return Err(ReadError::structure(key_at, "a service name is empty (null)"));
            }
            other => other.to_java_string(),
        };
        if let Some(first) = service_at.insert(name.clone(), key_at) {
            return Err(ReadError::structure(
                key_at,
                format!("service `{name}` is written twice in different forms (first at {first})"),
            ));
        }
        let entries = read_service(constructor, &name, &value)?;
        let service = ServiceConfig::new(name.clone(), entries);
        let answer = answer_len(service.digest(), service.entries());
        if answer > MAX_ANSWER_BYTES {
            return Err(ReadError::structure(
                key_at,
                format!(
                    "service `{name}`: its answer would be {answer} bytes, more than the {MAX_ANSWER_BYTES} (4 MiB) that agents accept (gRPC's default message limit); split or shorten its settings"
                ),
            ));
        }
        services.insert(name, service);
    }
    Ok(services)
}

/// One service's `{key: value}` mapping, stringified in document order.
fn read_service(
    constructor: &mut Constructor,
    service: &str,
    node: &tree::Node,
) -> Result<Vec<(String, String)>, ReadError> {
    match &node.kind {
        NodeKind::Mapping(_) if is_plain_mapping(node) => {}
        NodeKind::Scalar { text, plain: true } if matches!(&**text, "" | "~" | "null") => {
            return Err(ReadError::structure(
                node.at,
                format!("service `{service}` has no settings; write `{service}: {{}}` for an empty configuration"),
            ));
        }
        _ => {
            return Err(ReadError::structure(
                node.at,
                format!("service `{service}` must be a mapping of setting names to values"),
            ));
        }
    }
    let mut out = Vec::new();
    let mut seen: HashMap<String, Position> = HashMap::new();
    for Entry { key, key_node, value } in constructor.mapping_entries(node)? {
        let key_at = key_node.at;
        if matches!(key, JavaValue::Null) {
            return Err(ReadError::structure(
                key_at,
                format!("service `{service}` has a setting with an empty (null) name"),
            ));
        }
        let key = key.to_java_string();
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(ReadError::structure(
                key_at,
                format!("`{key}` is reserved by the command format and cannot be a setting name"),
            ));
        }
        if let Some(first) = seen.insert(key.clone(), key_at) {
            return Err(ReadError::structure(
                key_at,
                format!(
                    "service `{service}`: setting `{key}` is written twice in different forms (first at {first}); agents reject a command that repeats a key"
                ),
            ));
        }
        let java = constructor.construct(&value)?;
        if matches!(java, JavaValue::Null) {
            return Err(ReadError::structure(
                value.at,
                format!(
                    "service `{service}`: setting `{key}` has no value; remove the line to fall back to the agent's default, or quote an empty string (\"\")"
                ),
            ));
        }
        out.push((key, java.to_java_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reliability finding F1: one long anchored scalar and many aliases to it.
    fn amplified(anchor_chars: usize, aliases: usize) -> String {
        let mut text = format!("configurations:\n  svc-a:\n    k0: &s \"{}\"\n", "x".repeat(anchor_chars));
        for i in 1..=aliases {
            text.push_str(&format!("    k{i}: *s\n"));
        }
        text
    }

    #[test]
    fn scalar_alias_amplification_is_refused_at_the_alias_that_crosses_the_budget() {
        // The finding's document: 113 KB of text that used to become a 100 MB answer.
        let text = amplified(100_000, 1000);
        let started = std::time::Instant::now();
        let err = read(&text).unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(err, ReadError::Structure { .. }), "{err:?}");
        assert!(err.to_string().contains("aliases expanded"), "{err}");
        // Every alias adds 100,001 (the anchor's characters plus one): the 39th is the first
        // past 4,000,000, on line 3 + 39, where `*s` starts in column 10.
        assert_eq!(err.position(), Some(Position { line: 42, column: 10 }), "{err}");
        assert!(elapsed < std::time::Duration::from_secs(5), "refused without expanding: {elapsed:?}");
        assert!(read(&amplified(100_000, 30)).is_ok(), "3 M characters expanded is within the budget");
    }

    #[test]
    fn aliases_to_collections_count_their_expanded_contents() {
        let item = "y".repeat(1000);
        let list = vec![item.as_str(); 1000].join(", ");
        let mut text = format!("configurations:\n  svc-a:\n    k0: &l [{list}]\n");
        for i in 1..=10 {
            text.push_str(&format!("    k{i}: *l\n"));
        }
        let err = read(&text).unwrap_err();
        assert_eq!(err.position().map(|p| p.line), Some(6), "the third alias (the fourth copy) crosses 4 M: {err}");
        // Empty collections are not free either: `[[], [], ...]` expands to `[[], [], ...]`.
        let empties = vec!["[]"; 500_000].join(",");
        let mut text = format!("configurations:\n  svc-a:\n    k0: &l [{empties}]\n");
        for i in 1..=10 {
            text.push_str(&format!("    k{i}: *l\n"));
        }
        assert!(read(&text).unwrap_err().to_string().contains("aliases expanded"));
        // Nor is nesting: an alias to a collection holding aliases weighs all it expands to.
        let text = format!(
            "configurations:\n  svc-a:\n    k0: &s \"{}\"\n    k1: &l [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n    k2: *l\n    k3: *l\n    k4: *l\n",
            "z".repeat(100_000)
        );
        assert_eq!(read(&text).unwrap_err().position(), Some(Position { line: 7, column: 9 }));
    }

    #[test]
    fn a_large_honest_document_is_read() {
        let text = skyconf_testkit::fixtures::document(10_000, 6);
        assert!(text.len() > 1_000_000, "{}", text.len());
        let table = read(&text).unwrap();
        assert_eq!(table.len(), 10_000);
        // The largest document the reader takes at all, with nothing aliased, fits the budget.
        let value = "v".repeat(yaml11::MAX_CODE_POINTS - 64);
        assert!(read(&format!("configurations:\n  svc:\n    k: {value}\n")).is_ok());
    }

    #[test]
    fn a_service_whose_answer_would_exceed_4_mib_is_refused_at_its_name() {
        // 2.2 M two-byte characters: within the text and expanded budgets, over 4 MiB encoded.
        let value = "é".repeat(2_200_000);
        let text = format!("configurations:\n  small:\n    k: v\n  big:\n    k: \"{value}\"\n");
        let err = read(&text).unwrap_err();
        assert_eq!(err.position(), Some(Position { line: 4, column: 3 }), "{err}");
        assert!(err.to_string().contains("4 MiB"), "{err}");
        let value = "é".repeat(2_000_000);
        let table = read(&format!("configurations:\n  big:\n    k: \"{value}\"\n")).unwrap();
        let service = table.get("big").unwrap();
        let len = crate::answer::Answer::new(service.digest().clone(), service.entries()).encoded.len();
        assert!(len <= MAX_ANSWER_BYTES && len > 4_000_000, "{len}");
    }
}
