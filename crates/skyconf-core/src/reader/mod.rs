//! The agent-configurations reader: YAML text in, a typed, digested [`AgentConfigurations`] out.
//!
//! It reads the document the OAP reads (`configurations: {service: {key: value}}`) and produces
//! the strings the OAP would serve, byte for byte: SnakeYAML's YAML 1.1 typing ([`resolve`]) and
//! Java's `toString` ([`java`]), in document order, with duplicate keys resolved as SnakeYAML does
//! and, of keys that print alike (`1:` and `"1":`), the last sent while the digest hashes every
//! one, as the OAP's maps do. [`read_with_warnings`] also says what those rules drop. YAML 1.1's
//! line breaks NEL, LS and PS are read as SnakeYAML reads them (`breaks`).
//!
//! Where the OAP would install a *partial* table (a null value or a malformed service drops that
//! service and every later one) the reader refuses the whole document instead, with the line and
//! column of the first problem, so the caller keeps serving its last good table. The README lists
//! every such deviation. One more is not the OAP's at all: a document whose aliases expand past a
//! budget (`tree::MAX_EXPANDED_CHARS`), or that would give a service an answer over gRPC's 4 MiB
//! message limit ([`crate::answer::MAX_ANSWER_BYTES`]), is refused before it is expanded.

mod bigint;
mod breaks;
mod incremental;
mod java;
mod opamp;
mod resolve;
mod targeting;
mod tree;
mod yaml11;

pub use incremental::{IncrementalReader, Reuse};
pub use java::civil_from_days;

use std::fmt;

use indexmap::IndexMap;

use crate::answer::{MAX_ANSWER_BYTES, answer_len};
use crate::digest::Digest;
use crate::table::{AgentConfigurations, GLOBAL_KEY, ServiceConfig};
use java::JavaValue;
use resolve::{Constructor, Entry, MapEntries, is_map};
use tree::NodeKind;

/// Keys the command codec reserves: a configuration key with one of these names would overwrite
/// the command's own serial number or digest in the agent.
pub const RESERVED_KEYS: [&str; 2] = [crate::codec::SERIAL_NUMBER_KEY, crate::codec::UUID_KEY];

/// A place in the document: 1-based line and column, written `LINE:COLUMN` (after the document's
/// name where it has one: `FILE:LINE:COLUMN`, what editors and terminals jump to), the one form
/// every refusal and warning takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
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

/// Something the OAP and skyconf both read the same way but that is probably a mistake, such
/// as a key written twice: the table is served as the OAP would serve it, and the warning says
/// what was dropped. `skyconf validate` prints these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWarning {
    /// The occurrence that won (the last one).
    pub at: Position,
    /// What was dropped and why.
    pub message: String,
}

impl fmt::Display for ReadWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// A document read: the table to serve, what the reader noticed on the way, and where each
/// served setting is written.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// What agents get.
    pub table: AgentConfigurations,
    /// In document order.
    pub warnings: Vec<ReadWarning>,
    /// Where the served settings' keys are written.
    pub keys: KeyPositions,
}

/// Where each served setting's key is written: of a key written more than once, the occurrence
/// that is served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPositions {
    services: IndexMap<String, Vec<Position>>,
    global: Vec<Position>,
}

impl KeyPositions {
    /// Where the `index`-th of `service`'s own entries ([`ServiceConfig::own_entries`]) is written.
    pub fn of(&self, service: &str, index: usize) -> Option<Position> {
        self.services.get(service)?.get(index).copied()
    }

    /// Where the `index`-th entry of the `global-configurations:` section is written.
    pub fn of_global(&self, index: usize) -> Option<Position> {
        self.global.get(index).copied()
    }
}

/// Reads an agent-configurations document.
///
/// An empty document (nothing, or only comments) and `configurations:` with no value give an
/// empty table, as in the OAP. [`read_with_warnings`] also says what the document drops.
pub fn read(text: &str) -> Result<AgentConfigurations, ReadError> {
    read_with_warnings(text).map(|reading| reading.table)
}

/// Reads an agent-configurations document as [`read`] does, with the warnings.
pub fn read_with_warnings(text: &str) -> Result<Reading, ReadError> {
    read_measured(text).map(|(reading, _)| reading)
}

/// What a read weighed against the document-wide limits (the incremental reader adds these up).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Measure {
    /// The tree's: anchors and expanded weight.
    tree: tree::TreeMeasure,
    /// Values built (against `resolve::MAX_VALUES`).
    values: usize,
}

/// [`read_with_warnings`], with what the document weighed.
pub(crate) fn read_measured(text: &str) -> Result<(Reading, Measure), ReadError> {
    let (root, tree) = tree::parse_measured(text)?;
    let Some(root) = root else {
        return Ok((Reading::default(), Measure { tree, values: 0 }));
    };
    let mut constructor = Constructor::default();
    let measured = |constructor: &Constructor| Measure { tree, values: constructor.values() };
    // `---` alone, `~`, `!!null x`: a null root, which the OAP reads as an empty table.
    if matches!(root.kind, NodeKind::Scalar { .. }) && matches!(constructor.construct(&root), Ok(JavaValue::Null)) {
        return Ok((Reading::default(), measured(&constructor)));
    }
    if !is_map(&root) {
        return Err(ReadError::structure(
            root.at,
            "the document must be a mapping with a top-level `configurations:` key",
        ));
    }
    let MapEntries { entries: top, replaced } = constructor.map_entries(&root)?;
    let mut warnings = Vec::new();
    // Everything is built in document order, as SnakeYAML builds it: building a mapping can
    // rewrite nodes that later aliases see (see `Constructor::mapping_entries`).
    let mut services = None;
    let mut keys = KeyPositions::default();
    let mut targeting_node = None;
    let mut opamp_node = None;
    let mut global = None;
    for entry in &top {
        if matches!(&entry.key, JavaValue::Str(k) if k == "configurations") {
            // Reliability finding F16: two files concatenated, or a bad merge, leave two
            // `configurations:` keys; SnakeYAML keeps the last, so every earlier service is
            // dropped without a word. Served as the OAP serves it, but said.
            let earlier: Vec<_> = replaced.iter().filter(|(k, _)| is_configurations_key(k)).collect();
            if !earlier.is_empty() {
                let lost: usize = earlier.iter().map(|(_, v)| entries_in(v)).sum();
                let mut lines: Vec<_> = earlier.iter().map(|(k, _)| k.at.line).collect();
                lines.push(entry.key_node.at.line);
                lines.sort_unstable();
                warnings.push(ReadWarning {
                    at: entry.key_node.at,
                    message: format!(
                        "`configurations:` is written {} times (lines {}); like the OAP, skyconf reads only the last, so the {lost} service entries under the earlier ones are not served",
                        lines.len(),
                        join_lines(&lines)
                    ),
                });
            }
            let (read, positions) = read_services(&mut constructor, &entry.value, &mut warnings)?;
            services = Some(read);
            keys = positions;
        } else if matches!(&entry.key, JavaValue::Str(k) if k == GLOBAL_KEY) {
            global = read_global(&mut constructor, &entry.value, &mut warnings)?
                .map(|(settings, positions)| (settings, positions, entry.key_node.at));
        } else {
            // The OAP's loader builds every value; one it cannot build fails the document.
            constructor.construct(&entry.value)?;
            if matches!(&entry.key, JavaValue::Str(k) if k == "targeting") {
                targeting_node = Some(&entry.value);
            } else if matches!(&entry.key, JavaValue::Str(k) if k == "opamp") {
                opamp_node = Some(&entry.value);
            }
        }
    }
    match services {
        Some(services) => {
            let table = match global {
                Some((settings, positions, at)) => {
                    keys.global = positions;
                    layered(services, settings, at)?
                }
                None => AgentConfigurations::from_services(services),
            };
            // Read after `configurations`, wherever it is written: it refers to its services.
            let targeting = match targeting_node {
                Some(node) => targeting::read_targeting(&mut constructor, node, &table, &mut warnings)?,
                None => crate::targeting::Targeting::default(),
            };
            let opamp = opamp_node.map(|node| opamp::read_opamp(&mut constructor, node)).transpose()?;
            let table = table.with_targeting(targeting).with_opamp(opamp.unwrap_or_default());
            Ok((Reading { table, warnings, keys }, measured(&constructor)))
        }
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

/// The value of `global-configurations`: settings read as a service's are (`None` for a null
/// value), with where each served key is written.
fn read_global(
    constructor: &mut Constructor,
    node: &tree::Node,
    warnings: &mut Vec<ReadWarning>,
) -> Result<Option<(ServiceConfig, Vec<Position>)>, ReadError> {
    if matches!(node.kind, NodeKind::Scalar { .. }) && matches!(constructor.construct(node)?, JavaValue::Null) {
        return Ok(None);
    }
    if !is_map(node) {
        return Err(ReadError::structure(
            node.at,
            format!("`{GLOBAL_KEY}` must be a mapping of setting names to values"),
        ));
    }
    read_settings_of(constructor, GLOBAL_KEY, &format!("`{GLOBAL_KEY}`"), node, warnings).map(Some)
}

/// `services` with `global` layered under each, refused (at the global section's key `at`) if
/// that gives a service an answer over the 4 MiB agents accept.
fn layered(
    services: IndexMap<String, ServiceConfig>,
    global: ServiceConfig,
    at: Position,
) -> Result<AgentConfigurations, ReadError> {
    let table = AgentConfigurations::from_services(services).with_global(Some(global));
    for service in table.services().chain(table.global()) {
        let answer = answer_len(service.digest(), service.entries());
        if answer > MAX_ANSWER_BYTES {
            return Err(ReadError::structure(
                at,
                format!(
                    "with the `{GLOBAL_KEY}` settings, the answer of `{}` would be {answer} bytes, more than the {MAX_ANSWER_BYTES} (4 MiB) that agents accept",
                    service.name()
                ),
            ));
        }
    }
    Ok(table)
}

fn is_configurations_key(key: &tree::Node) -> bool {
    matches!(&key.kind, NodeKind::Scalar { text, .. } if &**text == "configurations")
}

/// How many entries a collection holds, as written.
fn entries_in(node: &tree::Node) -> usize {
    match &node.kind {
        NodeKind::Mapping(entries) => entries.borrow().len(),
        NodeKind::Sequence(items) => items.len(),
        NodeKind::Scalar { .. } => 0,
    }
}

fn join_lines(lines: &[usize]) -> String {
    lines.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

/// Where each printed key was written, first to last, for the warnings about repeated keys.
#[derive(Default)]
struct Occurrences(IndexMap<String, Vec<Position>>);

impl Occurrences {
    fn add(&mut self, key: String, at: Position) {
        self.0.entry(key).or_default().push(at);
    }

    /// The keys written more than once: each with its last occurrence, its lines and how many
    /// times, in the order of their last occurrences.
    fn repeated(mut self) -> Vec<(String, Position, String, usize)> {
        self.0.values_mut().for_each(|positions| positions.sort());
        let mut repeated: Vec<_> = self
            .0
            .into_iter()
            .filter(|(_, positions)| positions.len() > 1)
            .map(|(key, positions)| {
                let lines: Vec<_> = positions.iter().map(|p| p.line).collect();
                (key, *positions.last().expect("more than one"), join_lines(&lines), positions.len())
            })
            .collect();
        repeated.sort_by_key(|(_, at, ..)| *at);
        repeated
    }
}

/// The value of `configurations`: service name to settings, in document order.
///
/// Services whose names print alike (`1:` and `"1":`) are all read, as the OAP reads them, and
/// the last one is served (the OAP's table is a `HashMap` keyed by the printed name).
fn read_services(
    constructor: &mut Constructor,
    services_node: &tree::Node,
    warnings: &mut Vec<ReadWarning>,
) -> Result<(IndexMap<String, ServiceConfig>, KeyPositions), ReadError> {
    match &services_node.kind {
        NodeKind::Scalar { .. } if matches!(constructor.construct(services_node)?, JavaValue::Null) => {
            return Ok((IndexMap::new(), KeyPositions::default()));
        }
        _ if is_map(services_node) => {}
        _ => {
            return Err(ReadError::structure(
                services_node.at,
                "`configurations` must map service names to their settings",
            ));
        }
    }
    let MapEntries { entries, replaced } = constructor.map_entries(services_node)?;
    let mut services: IndexMap<String, ServiceConfig> = IndexMap::new();
    let mut positions: IndexMap<String, Vec<Position>> = IndexMap::new();
    let mut written = Occurrences::default();
    for (key_node, _) in &replaced {
        written.add(constructor.construct(key_node)?.to_java_string(), key_node.at);
    }
    for Entry { key, key_node, value } in entries {
        let key_at = key_node.at;
        let name = match &key {
            JavaValue::Null => {
                return Err(ReadError::structure(key_at, "a service name is empty (null)"));
            }
            other => other.to_java_string(),
        };
        written.add(name.clone(), key_at);
        let (service, keys) = read_service(constructor, &name, &value, warnings)?;
        let answer = answer_len(service.digest(), service.entries());
        if answer > MAX_ANSWER_BYTES {
            return Err(ReadError::structure(
                key_at,
                format!(
                    "service `{name}`: its answer would be {answer} bytes, more than the {MAX_ANSWER_BYTES} (4 MiB) that agents accept (gRPC's default message limit); split or shorten its settings"
                ),
            ));
        }
        // The last of services that print alike wins, at its own place.
        services.shift_remove(&name);
        positions.shift_remove(&name);
        positions.insert(name.clone(), keys);
        services.insert(name, service);
    }
    for (name, at, lines, times) in written.repeated() {
        warnings.push(ReadWarning {
            at,
            message: format!(
                "service `{name}` is written {times} times (lines {lines}); like the OAP, skyconf serves only the last"
            ),
        });
    }
    Ok((services, KeyPositions { services: positions, global: Vec::new() }))
}

/// One service's `{key: value}` mapping, stringified in document order, with where each served
/// key is written.
///
/// Settings whose keys print alike (`8:` and `"8":`) are all hashed, as the OAP hashes them, and
/// only the last is sent (the OAP's per-service map is a `HashMap` keyed by the printed key).
fn read_service(
    constructor: &mut Constructor,
    service: &str,
    node: &tree::Node,
    warnings: &mut Vec<ReadWarning>,
) -> Result<(ServiceConfig, Vec<Position>), ReadError> {
    match &node.kind {
        _ if is_map(node) => {}
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
    read_settings_of(constructor, service, &format!("service `{service}`"), node, warnings)
}

/// A mapping of settings named `name` (a service, or the global section), described as
/// `subject` in messages: stringified in document order, with where each served key is written.
fn read_settings_of(
    constructor: &mut Constructor,
    name: &str,
    subject: &str,
    node: &tree::Node,
    warnings: &mut Vec<ReadWarning>,
) -> Result<(ServiceConfig, Vec<Position>), ReadError> {
    let MapEntries { entries, replaced } = constructor.map_entries(node)?;
    let mut hashed = Vec::with_capacity(entries.len());
    let mut written = Occurrences::default();
    for (key_node, _) in &replaced {
        written.add(constructor.construct(key_node)?.to_java_string(), key_node.at);
    }
    for Entry { key, key_node, value } in entries {
        let key_at = key_node.at;
        if matches!(key, JavaValue::Null) {
            return Err(ReadError::structure(key_at, format!("{subject} has a setting with an empty (null) name")));
        }
        let key = key.to_java_string();
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(ReadError::structure(
                key_at,
                format!("`{key}` is reserved by the command format and cannot be a setting name"),
            ));
        }
        let java = constructor.construct(&value)?;
        if matches!(java, JavaValue::Null) {
            return Err(ReadError::structure(
                value.at,
                format!(
                    "{subject}: setting `{key}` has no value; remove the line to fall back to the agent's default, or quote an empty string (\"\")"
                ),
            ));
        }
        written.add(key.clone(), key_at);
        hashed.push((key, java.to_java_string(), key_at));
    }
    let digest = Digest::of_entries(hashed.iter().map(|(k, v, _)| (k.as_str(), v.as_str())));
    let mut served: IndexMap<String, (String, Position)> = IndexMap::with_capacity(hashed.len());
    for (key, value, at) in hashed {
        served.shift_remove(&key);
        served.insert(key, (value, at));
    }
    for (key, at, lines, times) in written.repeated() {
        warnings.push(ReadWarning {
            at,
            message: format!(
                "{subject}: setting `{key}` is written {times} times (lines {lines}); like the OAP, skyconf sends only the last (`{}`)",
                served.get(&key).map_or("", |(value, _)| value.as_str())
            ),
        });
    }
    let (entries, positions) = served.into_iter().map(|(key, (value, at))| ((key, value), at)).unzip();
    Ok((ServiceConfig::with_digest(name.to_owned(), entries, digest), positions))
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
        // The finding's document: 113 KB of text whose aliases, expanded, make a 100 MB answer.
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

    fn served(table: &AgentConfigurations, service: &str) -> (Vec<(String, String)>, String) {
        let service = table.get(service).unwrap_or_else(|| panic!("no service {service}"));
        (service.entries().to_vec(), service.digest().as_str().to_owned())
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    // The digests in these tests are DigestTool's (the OAP's reader on SnakeYAML 2.0 and 1.33).

    #[test]
    fn settings_that_print_alike_send_the_last_and_hash_every_one() {
        let reading = read_with_warnings("configurations:\n  a:\n    1: x\n    j: y\n    \"1\": z\n").unwrap();
        let (entries, digest) = served(&reading.table, "a");
        assert_eq!(entries, pairs(&[("j", "y"), ("1", "z")]));
        assert_eq!(digest, Digest::of_text("1:xj:y1:z").as_str());
        assert_eq!(
            digest,
            "bbd95ff528d861d9993f480377a773284dc87e8daa410b0c5f50943089e143b8ab3583de08dc84c26fde055d26326b09b30345f3f789c470f23c08ab0f0ad215"
        );
        let [warning] = reading.warnings.as_slice() else { panic!("{:?}", reading.warnings) };
        assert_eq!(warning.at, Position { line: 5, column: 5 });
        assert!(warning.message.contains("setting `1` is written 2 times (lines 3, 5)"), "{warning}");
        // A key written twice the same way is SnakeYAML's own rule (V10), and said too.
        let reading = read_with_warnings("configurations:\n  a: {k: 1, j: 2, k: 3}\n").unwrap();
        assert_eq!(served(&reading.table, "a").0, pairs(&[("j", "2"), ("k", "3")]));
        assert_eq!(reading.warnings.len(), 1, "{:?}", reading.warnings);
    }

    #[test]
    fn services_that_print_alike_serve_the_last() {
        let reading =
            read_with_warnings("configurations:\n  1: {k: v}\n  b: {k: w}\n  \"1\": {k: x}\n  b: {k: y}\n").unwrap();
        let names: Vec<_> = reading.table.services().map(ServiceConfig::name).collect();
        assert_eq!(names, ["1", "b"]);
        assert_eq!(
            served(&reading.table, "1"),
            (
                pairs(&[("k", "x")]),
                "b4d6cea6325f1c4a015f7877c78e0c7f27f9701691b5cc888b92a14ff9daab05badeed124448130650ecff1aea3fe6eec2069bac6e7e2a13c301772e2a80e4db".to_owned()
            )
        );
        assert_eq!(served(&reading.table, "b").0, pairs(&[("k", "y")]));
        let messages: Vec<_> = reading.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("4:3: service `1` is written 2 times (lines 2, 4)"), "{messages:?}");
        assert!(messages[1].starts_with("5:3: service `b` is written 2 times (lines 3, 5)"), "{messages:?}");
    }

    #[test]
    fn a_repeated_configurations_key_serves_the_last_and_says_so() {
        // Reliability finding F16: two files concatenated.
        let text = "configurations:\n  a: {k: v}\n  b: {k: w}\nother: 1\nconfigurations:\n  c: {k: x}\n";
        let reading = read_with_warnings(text).unwrap();
        let names: Vec<_> = reading.table.services().map(ServiceConfig::name).collect();
        assert_eq!(names, ["c"], "the OAP's reading: SnakeYAML keeps the last key");
        let [warning] = reading.warnings.as_slice() else { panic!("{:?}", reading.warnings) };
        assert_eq!(warning.at, Position { line: 5, column: 1 });
        assert!(warning.message.contains("written 2 times (lines 1, 5)"), "{warning}");
        assert!(warning.message.contains("the 2 service entries under the earlier ones"), "{warning}");
        assert!(read_with_warnings("configurations:\n  a: {k: v}\n").unwrap().warnings.is_empty());
    }

    #[test]
    fn omap_values_and_services_read_as_linked_hash_maps() {
        let text = "configurations:\n  s:\n    k: !!omap [a: 1, b: 2]\n    j: !!omap\n      - x: yes\n      - y: [1, 2]\n    m: !!omap []\n";
        let (entries, digest) = served(&read(text).unwrap(), "s");
        assert_eq!(entries, pairs(&[("k", "{a=1, b=2}"), ("j", "{x=true, y=[1, 2]}"), ("m", "{}")]));
        assert_eq!(
            digest,
            "ac3fe21eabf9033cb7b016206324da3ca185a043a6545207fc0e53abc39e11be468e4286b13a41842ef6b2149858efa9a0c7a22a2135a3c6e5ca715a108ec4cb"
        );
        // As a service: a LinkedHashMap keeps the first key's place and the last value.
        let (entries, digest) = served(&read("configurations:\n  s: !!omap [k: 1, j: 2, k: 3]\n").unwrap(), "s");
        assert_eq!(entries, pairs(&[("k", "3"), ("j", "2")]));
        assert_eq!(
            digest,
            "84da0e30902abbacd0c0b20786c7df000b6f9640be80748629f975eea6314aa7e2ee54375fcdbc212bbdfda6b0d5465ee5b64f96643e16dd05bbe05b716f4c88"
        );
        let table = read("configurations: !!omap\n  - s: {k: v}\n  - t: {k: w}\n").unwrap();
        assert_eq!(table.len(), 2);
        for refused in [
            "configurations:\n  s: {k: !!omap [a: 1, b]}\n",
            "configurations:\n  s: {k: !!omap [{a: 1, b: 2}]}\n",
            "configurations:\n  s: {k: !!omap {a: 1}}\n",
            "configurations:\n  s: {k: !!omap [<<: {a: 1}]}\n",
            "configurations:\n  s: {k: !!pairs [a: 1]}\n",
            "configurations:\n  s: {k: !!binary aGk=}\n",
        ] {
            assert!(read(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_large_honest_document_is_read() {
        let text = crate::fixtures::document(10_000, 6);
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
