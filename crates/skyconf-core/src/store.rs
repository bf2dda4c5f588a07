//! The store model of the OAP's dynamic configuration module: keys named
//! `<module>.<provider>.<item>` mapped to raw string values. A SINGLE key holds one value (the
//! agent-configurations document is one); a GROUP key holds named sub-items (the OAP's
//! `core.default.endpoint-name-grouping-openapi`).
//!
//! [`StoreContent`] is everything a store holds for the watched keys; [`single_change`] and
//! [`group_changes`] are the OAP's change-detection rules (behaviour reference §3.2): whole raw
//! values compared as strings, MODIFY for a new or different value, DELETE only when something was
//! there, nothing for repeated absence.

use std::collections::BTreeMap;

use crate::digest::Digest;

/// The dynamic-configuration key holding the agent-configurations document.
pub const AGENT_CONFIGURATIONS_KEY: &str = "configuration-discovery.default.agentConfigurations";

/// The keys the OAP registers watchers for (§3.6): what a store is asked about when it cannot
/// list its keys.
pub const OAP_SINGLE_KEYS: &[&str] = &[
    AGENT_CONFIGURATIONS_KEY,
    "agent-analyzer.default.slowDBAccessThreshold",
    "agent-analyzer.default.slowCacheReadThreshold",
    "agent-analyzer.default.slowCacheWriteThreshold",
    "agent-analyzer.default.uninstrumentedGateways",
    "agent-analyzer.default.traceSamplingPolicy",
    "alarm.default.alarm-settings",
    "core.default.apdexThreshold",
    "core.default.endpoint-name-grouping",
    "core.default.log4j-xml",
    "core.default.searchableTracesTags",
];

/// The OAP's group keys (§3.6).
pub const OAP_GROUP_KEYS: &[&str] = &["core.default.endpoint-name-grouping-openapi"];

/// A change to one value, as the OAP notifies watchers (ADD is never emitted: adds are MODIFY).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new or different value.
    Modify(String),
    /// The value went away.
    Delete,
}

/// The change a single key sees when the store reports `incoming` and the watcher holds
/// `current`; `None` when nothing is to be notified.
pub fn single_change(current: Option<&str>, incoming: Option<&str>) -> Option<Change> {
    match (current, incoming) {
        (Some(_), None) => Some(Change::Delete),
        (None, None) => None,
        (current, Some(new)) if current != Some(new) => Some(Change::Modify(new.to_owned())),
        _ => None,
    }
}

/// The changes a group sees: every incoming sub-item compared as a single, and every current
/// sub-item missing from the incoming group deleted. Empty when nothing changed.
pub fn group_changes(
    current: &BTreeMap<String, String>,
    incoming: &BTreeMap<String, String>,
) -> BTreeMap<String, Change> {
    let mut changes = BTreeMap::new();
    for (item, value) in incoming {
        if let Some(change) = single_change(current.get(item).map(String::as_str), Some(value)) {
            changes.insert(item.clone(), change);
        }
    }
    for item in current.keys() {
        if !incoming.contains_key(item) {
            changes.insert(item.clone(), Change::Delete);
        }
    }
    changes
}

/// Everything a store holds for the watched keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreContent {
    /// SINGLE keys and their raw values.
    pub singles: BTreeMap<String, String>,
    /// GROUP keys, each with its sub-items.
    pub groups: BTreeMap<String, BTreeMap<String, String>>,
    /// The store's revision of SINGLE keys, where the store orders its changes (see
    /// [`Revision`]); absent for stores that do not (a file, Nacos).
    pub revisions: BTreeMap<String, Revision>,
}

/// Where a value stands in its store's own order of changes: etcd's `mod_revision` of the key,
/// ZooKeeper's `mzxid` of the znode. Every client of the store sees the same number for the same
/// value, and a later change always has a higher one (until the store itself is wiped or
/// restored), so replicas watching one store agree on it. A write can be made conditional on it
/// (compare-and-swap), which is what makes writes from several replicas safe.
pub type Revision = u64;

impl StoreContent {
    /// The agent-configurations document, if the store holds one.
    pub fn agent_configurations(&self) -> Option<&str> {
        self.singles.get(AGENT_CONFIGURATIONS_KEY).map(String::as_str)
    }

    /// The store's revision of a single key, where the store has one.
    pub fn revision(&self, key: &str) -> Option<Revision> {
        self.revisions.get(key).copied()
    }

    /// Sets or removes a single key at the store's `revision` (forgotten when `None`, or with the
    /// value); the change it makes, if any.
    pub fn set_single_at(&mut self, key: &str, value: Option<String>, revision: Option<Revision>) -> Option<Change> {
        match revision.filter(|_| value.is_some()) {
            Some(revision) => self.revisions.insert(key.to_owned(), revision),
            None => self.revisions.remove(key),
        };
        self.set_single(key, value)
    }

    /// Sets or removes a single key; the change it makes, if any. Its revision is left as it was
    /// (forgotten with the value).
    pub fn set_single(&mut self, key: &str, value: Option<String>) -> Option<Change> {
        let change = single_change(self.singles.get(key).map(String::as_str), value.as_deref());
        match value {
            Some(v) => self.singles.insert(key.to_owned(), v),
            None => {
                self.revisions.remove(key);
                self.singles.remove(key)
            }
        };
        change
    }

    /// Replaces or removes a whole group; the changes it makes.
    pub fn set_group(&mut self, key: &str, items: Option<BTreeMap<String, String>>) -> BTreeMap<String, Change> {
        let empty = BTreeMap::new();
        let current = self.groups.get(key).unwrap_or(&empty);
        let changes = group_changes(current, items.as_ref().unwrap_or(&empty));
        match items {
            Some(items) => self.groups.insert(key.to_owned(), items),
            None => self.groups.remove(key),
        };
        changes
    }

    /// A content-derived, never-empty version string for the single keys, as a DCS server must
    /// send (`ConfigurationResponse.uuid`).
    pub fn singles_uuid(&self) -> String {
        versioned("singles", self.singles.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The same for the group keys (`GroupConfigurationResponse.uuid`).
    pub fn groups_uuid(&self) -> String {
        let flat: Vec<(String, &str)> = self
            .groups
            .iter()
            .flat_map(|(g, items)| items.iter().map(move |(k, v)| (format!("{g}\u{0}{k}"), v.as_str())))
            .collect();
        versioned(
            "groups",
            flat.iter().map(|(k, v)| (k.as_str(), *v)).chain(self.groups.keys().map(|g| (g.as_str(), ""))),
        )
    }
}

/// Hashes length-prefixed pairs (unambiguous, unlike the agent digest) under a domain tag.
fn versioned<'a>(domain: &str, pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut text = String::from(domain);
    for (k, v) in pairs {
        text.push_str(&format!("\n{}:{k}{}:{v}", k.len(), v.len()));
    }
    Digest::of_text(&text).as_str()[..32].to_owned()
}

/// A SHA-256 of raw text, to notice change without keeping or comparing whole documents (the
/// reload de-duplication and the release log's document ids use it).
pub fn content_hash(text: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn single_rules_match_the_oap() {
        assert_eq!(single_change(None, Some("a")), Some(Change::Modify("a".into())));
        assert_eq!(single_change(Some("a"), Some("a")), None);
        assert_eq!(single_change(Some("a"), Some("A")), Some(Change::Modify("A".into())), "case-sensitive");
        assert_eq!(single_change(Some("a"), None), Some(Change::Delete));
        assert_eq!(single_change(None, None), None, "repeated absence does not re-fire");
        assert_eq!(single_change(Some("a"), Some("")), Some(Change::Modify(String::new())), "empty is a value");
    }

    #[test]
    fn group_rules_match_the_oap() {
        let current = map(&[("item1", "100"), ("item2", "200")]);
        let incoming = map(&[("item2", "300"), ("item3", "1")]);
        let changes = group_changes(&current, &incoming);
        assert_eq!(changes.get("item1"), Some(&Change::Delete));
        assert_eq!(changes.get("item2"), Some(&Change::Modify("300".into())));
        assert_eq!(changes.get("item3"), Some(&Change::Modify("1".into())));
        assert!(group_changes(&current, &current).is_empty());
    }

    #[test]
    fn content_tracks_changes_and_versions() {
        let mut content = StoreContent::default();
        let empty_singles = content.singles_uuid();
        assert!(!empty_singles.is_empty(), "a DCS uuid is never empty");
        assert_eq!(content.set_single("k", Some("v".into())), Some(Change::Modify("v".into())));
        assert_eq!(content.set_single("k", Some("v".into())), None);
        assert_ne!(content.singles_uuid(), empty_singles);
        let before = content.groups_uuid();
        let changes = content.set_group("g", Some(map(&[("a", "1")])));
        assert_eq!(changes.len(), 1);
        assert_ne!(content.groups_uuid(), before);
        assert_eq!(content.set_group("g", None).get("a"), Some(&Change::Delete));
        assert_eq!(content.set_single("k", None), Some(Change::Delete));
        assert_eq!(content.singles_uuid(), empty_singles, "content-derived: same content, same uuid");
    }

    #[test]
    fn uuid_is_unambiguous() {
        let mut a = StoreContent::default();
        a.set_single("a", Some("b:c".into()));
        let mut b = StoreContent::default();
        b.set_single("a:b", Some("c".into()));
        assert_ne!(a.singles_uuid(), b.singles_uuid());
        let mut g = StoreContent::default();
        g.set_group("g", Some(BTreeMap::new()));
        assert_ne!(g.groups_uuid(), StoreContent::default().groups_uuid(), "an empty group is content too");
    }
}
