//! The agent-configurations reader: YAML text in, a typed, digested [`AgentConfigurations`] out.
//!
//! It reads the document the OAP reads (`configurations: {service: {key: value}}`) and produces
//! the strings the OAP would serve, byte for byte: SnakeYAML's YAML 1.1 typing ([`resolve`]) and
//! Java's `toString` ([`java`]), in document order, with duplicate keys resolved as SnakeYAML does.
//!
//! Where the OAP would install a *partial* table (a null value or a malformed service drops that
//! service and every later one) the reader refuses the whole document instead, with the line and
//! column of the first problem, so the caller keeps serving its last good table. The README lists
//! every such deviation.

mod bigint;
mod java;
mod resolve;
mod tree;
mod yaml11;

use std::collections::HashMap;
use std::fmt;

use indexmap::IndexMap;

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
        services.insert(name.clone(), ServiceConfig::new(name, entries));
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
