//! Reads a document's `targeting:` section (see [`crate::targeting`] for what it means) with the
//! same typing as `configurations:`: a setting written `100` is sent as `100`, and every problem
//! is refused with its line and column.

use indexmap::IndexMap;

use super::java::JavaValue;
use super::resolve::{Constructor, Entry, MapEntries, is_map};
use super::tree::{Node, NodeKind};
use super::{RESERVED_KEYS, ReadError, ReadWarning};
use crate::answer::{MAX_ANSWER_BYTES, answer_len};
use crate::table::{AgentConfigurations, ServiceConfig};
use crate::targeting::{Group, Pattern, Selector, Share, Targeting};

/// The keys a group may have.
const GROUP_KEYS: &str = "`group`, `instances`, `properties`, `agent_versions`, `share`, `settings`";

/// The value of `targeting`: service name to its list of groups.
pub(super) fn read_targeting(
    constructor: &mut Constructor,
    node: &Node,
    table: &AgentConfigurations,
    warnings: &mut Vec<ReadWarning>,
) -> Result<Targeting, ReadError> {
    if is_null(constructor, node)? {
        return Ok(Targeting::default());
    }
    if !is_map(node) {
        return Err(ReadError::structure(node.at, "`targeting` must map service names to lists of groups"));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let mut out: IndexMap<String, Vec<Group>> = IndexMap::new();
    for Entry { key, key_node, value } in entries {
        if matches!(key, JavaValue::Null) {
            return Err(ReadError::structure(key_node.at, "a service name under `targeting` is empty (null)"));
        }
        let service = key.to_java_string();
        if table.get(&service).is_none() {
            let others = if table.global().is_some() { "the global settings" } else { "the EMPTY configuration" };
            warnings.push(ReadWarning {
                at: key_node.at,
                message: format!(
                    "`targeting` has groups for `{service}`, which has no `configurations` entry: its other instances get {others}"
                ),
            });
        }
        let groups = read_groups(constructor, &service, &value)?;
        let served = table.served(&service);
        let base = served.as_ref().map_or(&[][..], ServiceConfig::entries);
        for group in &groups {
            let entries = group.entries(base);
            let digest = crate::Digest::of_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let answer = answer_len(&digest, &entries);
            if answer > MAX_ANSWER_BYTES {
                return Err(ReadError::structure(
                    key_node.at,
                    format!(
                        "group `{}` of `{service}`: its answer would be {answer} bytes, more than the {MAX_ANSWER_BYTES} (4 MiB) that agents accept",
                        group.name
                    ),
                ));
            }
        }
        out.shift_remove(&service);
        out.insert(service, groups);
    }
    Ok(Targeting::new(out))
}

pub(super) fn is_null(constructor: &mut Constructor, node: &Node) -> Result<bool, ReadError> {
    Ok(matches!(node.kind, NodeKind::Scalar { .. }) && matches!(constructor.construct(node)?, JavaValue::Null))
}

fn read_groups(constructor: &mut Constructor, service: &str, node: &Node) -> Result<Vec<Group>, ReadError> {
    let NodeKind::Sequence(items) = &node.kind else {
        return Err(ReadError::structure(
            node.at,
            format!("`targeting.{service}` must be a list of groups (`- group: name`, its conditions and `settings`)"),
        ));
    };
    let mut groups: Vec<Group> = Vec::with_capacity(items.len());
    for item in items {
        let group = read_group(constructor, service, item)?;
        if groups.iter().any(|g| g.name == group.name) {
            return Err(ReadError::structure(
                item.at,
                format!("service `{service}` has two groups named `{}`; each needs its own name", group.name),
            ));
        }
        groups.push(group);
    }
    Ok(groups)
}

fn read_group(constructor: &mut Constructor, service: &str, node: &Node) -> Result<Group, ReadError> {
    if !is_map(node) {
        return Err(ReadError::structure(
            node.at,
            format!("a group of `{service}` must be a mapping with {GROUP_KEYS}"),
        ));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let mut name = None;
    let mut selector = Selector::default();
    let mut settings = Vec::new();
    for Entry { key, key_node, value } in entries {
        match key.to_java_string().as_str() {
            "group" => name = Some(scalar(constructor, &value, "a group name")?),
            "instances" => selector.instances = patterns(constructor, &value, "`instances`")?,
            "agent_versions" => selector.agent_versions = patterns(constructor, &value, "`agent_versions`")?,
            "properties" => selector.properties = properties(constructor, &value)?,
            "share" => {
                let text = scalar(constructor, &value, "`share`")?;
                let share = Share::parse(&text).ok_or_else(|| {
                    ReadError::value(
                        value.at,
                        format!("`share: {text}` is not a percentage from 0 to 100 (`10%`, `0.5%`)"),
                    )
                })?;
                selector.share = Some(share);
            }
            "settings" => settings = read_settings(constructor, service, &value)?,
            other => {
                return Err(ReadError::structure(
                    key_node.at,
                    format!("a group has no `{other}`; it may have {GROUP_KEYS}"),
                ));
            }
        }
    }
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return Err(ReadError::structure(node.at, format!("a group of `{service}` needs a name: `- group: canary`")));
    };
    if selector.is_empty() {
        return Err(ReadError::structure(
            node.at,
            format!(
                "group `{name}` of `{service}` says no condition (`instances`, `properties`, `agent_versions` or `share`); to change every instance, edit `configurations`"
            ),
        ));
    }
    Ok(Group { name, selector, settings })
}

/// A scalar's text as Java prints it.
pub(super) fn scalar(constructor: &mut Constructor, node: &Node, what: &str) -> Result<String, ReadError> {
    match constructor.construct(node)? {
        JavaValue::Null => Err(ReadError::structure(node.at, format!("{what} is empty"))),
        JavaValue::List(_) | JavaValue::Map(_) | JavaValue::Set(_) => {
            Err(ReadError::structure(node.at, format!("{what} must be a single value")))
        }
        value => Ok(value.to_java_string()),
    }
}

/// One pattern or a list of them.
pub(super) fn patterns(constructor: &mut Constructor, node: &Node, what: &str) -> Result<Vec<Pattern>, ReadError> {
    let NodeKind::Sequence(items) = &node.kind else {
        return Ok(vec![Pattern::new(scalar(constructor, node, what)?)]);
    };
    if items.is_empty() {
        return Err(ReadError::structure(node.at, format!("{what} is an empty list: it would match nothing")));
    }
    let item_of = format!("an item of {what}");
    items.iter().map(|item| Ok(Pattern::new(scalar(constructor, item, &item_of)?))).collect()
}

fn properties(constructor: &mut Constructor, node: &Node) -> Result<Vec<(String, Vec<Pattern>)>, ReadError> {
    if !is_map(node) {
        return Err(ReadError::structure(
            node.at,
            "`properties` must map property names to a value or a list of values",
        ));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let mut out = Vec::with_capacity(entries.len());
    for Entry { key, value, .. } in entries {
        let key = key.to_java_string();
        let values = patterns(constructor, &value, &format!("property `{key}`"))?;
        out.push((key, values));
    }
    Ok(out)
}

/// A group's settings: stringified as `configurations` values are; null removes the setting.
fn read_settings(
    constructor: &mut Constructor,
    service: &str,
    node: &Node,
) -> Result<Vec<(String, Option<String>)>, ReadError> {
    if is_null(constructor, node)? {
        return Ok(Vec::new());
    }
    if !is_map(node) {
        return Err(ReadError::structure(
            node.at,
            format!("the `settings` of a group of `{service}` must be a mapping"),
        ));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let mut out: Vec<(String, Option<String>)> = Vec::with_capacity(entries.len());
    for Entry { key, key_node, value } in entries {
        if matches!(key, JavaValue::Null) {
            return Err(ReadError::structure(key_node.at, "a setting with an empty (null) name"));
        }
        let key = key.to_java_string();
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(ReadError::structure(
                key_node.at,
                format!("`{key}` is reserved by the command format and cannot be a setting name"),
            ));
        }
        let value = match constructor.construct(&value)? {
            JavaValue::Null => None,
            java => Some(java.to_java_string()),
        };
        out.retain(|(k, _)| *k != key);
        out.push((key, value));
    }
    Ok(out)
}
