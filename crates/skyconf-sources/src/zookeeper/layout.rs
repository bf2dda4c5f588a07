//! How keys map onto znodes, as the OAP maps them, and how a key's znode becomes store content.
//!
//! Under the namespace znode `N`, each child `N/{key}` is one key:
//! - its **data**, when not empty, is the key's SINGLE value (UTF-8);
//! - its **children** `N/{key}/{item}` are the key's GROUP items, the child's data being the value.
//!
//! The OAP reads a key one way or the other depending on how it registered it, so a znode with
//! both data and children is reported as both a single and a group: the DCS server then carries
//! what an OAP reading ZooKeeper directly would see. A znode with no children is a group only when
//! the key is a registered group key (an empty group, which clears its items, as the OAP reads
//! it). Empty data is no value: ZooKeeper clients cannot tell empty data from none, and a node
//! created without data (`create /default/k`, or a group's parent) reads as absent in the OAP.
//! Deeper znodes (`N/{key}/{item}/...`) mean nothing to the OAP and are ignored, and so does
//! `N/skyconf`, which holds skyconf's own records.

use std::collections::BTreeMap;

use crate::shared::RECORDS_NODE;
use crate::{StoreContent, Update};

/// The root's system znode, never a key.
const SYSTEM_NODE: &str = "zookeeper";

/// The namespace znode and the paths under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Namespace {
    /// The namespace path without a trailing `/`; empty for the root.
    prefix: String,
}

impl Namespace {
    /// A namespace from a validated prefix.
    pub(crate) fn new(prefix: String) -> Self {
        Self { prefix }
    }

    /// The namespace znode itself.
    pub(crate) fn path(&self) -> &str {
        if self.prefix.is_empty() { "/" } else { &self.prefix }
    }

    /// The znode of `key`.
    pub(crate) fn key_path(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }

    /// Whether a child of the namespace is a key: the root's `zookeeper` node is not, nor
    /// `skyconf`, where skyconf keeps its own records (see [`crate::shared`]).
    pub(crate) fn is_key(&self, name: &str) -> bool {
        !(self.prefix.is_empty() && name == SYSTEM_NODE) && name != RECORDS_NODE
    }

    /// The key a watch event on `path` concerns: the key znode itself or one of its items.
    pub(crate) fn key_of<'p>(&self, path: &'p str) -> Option<&'p str> {
        let rest = path.strip_prefix(self.prefix.as_str())?.strip_prefix('/')?;
        let mut segments = rest.split('/');
        let key = segments.next().filter(|k| !k.is_empty())?;
        let depth = 1 + segments.count();
        (depth <= 2 && self.is_key(key)).then_some(key)
    }

    /// Why `key` cannot be written as a znode, if it cannot.
    pub(crate) fn refuse_key(&self, key: &str) -> Option<String> {
        if key.is_empty() || key == "." || key == ".." || key.contains(['/', '\0']) || !self.is_key(key) {
            Some(format!("`{key}` cannot be a znode name under {}", self.path()))
        } else {
            None
        }
    }
}

/// What one key's znode holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyState {
    /// The single value: the data, when not empty.
    pub(crate) single: Option<String>,
    /// The group items: the children, when there are any or the key is a registered group.
    pub(crate) group: Option<BTreeMap<String, String>>,
    /// The znode's `mzxid`, with a single value.
    pub(crate) revision: Option<u64>,
}

impl KeyState {
    /// The state of an existing znode with `data` and `items` (name → data), last modified at
    /// `mzxid`.
    pub(crate) fn of(
        data: Option<String>,
        items: BTreeMap<String, String>,
        registered_group: bool,
        mzxid: i64,
    ) -> Self {
        let group = (!items.is_empty() || registered_group).then_some(items);
        let single = data.filter(|d| !d.is_empty());
        let revision = single.as_ref().and_then(|_| u64::try_from(mzxid).ok());
        Self { single, group, revision }
    }

    /// Adds this key to a snapshot.
    pub(crate) fn add_to(self, key: &str, content: &mut StoreContent) {
        if let Some(value) = self.single {
            content.set_single_at(key, Some(value), self.revision);
        }
        if let Some(items) = self.group {
            content.groups.insert(key.to_owned(), items);
        }
    }

    /// Records this key's new state in `content`; the updates that say what changed.
    pub(crate) fn apply_to(self, key: &str, content: &mut StoreContent) -> Vec<Update> {
        let mut updates = Vec::new();
        // A rewrite of the same text is reported too: its revision is what the next
        // conditional write must expect.
        if content.singles.get(key) != self.single.as_ref() || content.revision(key) != self.revision {
            content.set_single_at(key, self.single.clone(), self.revision);
            updates.push(Update::Single { key: key.to_owned(), value: self.single, revision: self.revision });
        }
        if content.groups.get(key) != self.group.as_ref() {
            match &self.group {
                Some(items) => content.groups.insert(key.to_owned(), items.clone()),
                None => content.groups.remove(key),
            };
            updates.push(Update::Group { key: key.to_owned(), items: self.group });
        }
        updates
    }
}

/// A znode's data as text. Bytes that are not UTF-8 are replaced (as the OAP's JVM decodes
/// them) rather than refused, so one stray binary znode cannot stop the whole namespace.
pub(crate) fn text(path: &str, data: Vec<u8>) -> String {
    String::from_utf8(data).unwrap_or_else(|e| {
        tracing::warn!(znode = path, "The znode's data is not UTF-8; invalid bytes are replaced.");
        String::from_utf8_lossy(e.as_bytes()).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn events_map_to_their_key() {
        let ns = Namespace::new("/default".into());
        assert_eq!(ns.path(), "/default");
        assert_eq!(ns.key_path("a.b.c"), "/default/a.b.c");
        assert_eq!(ns.key_of("/default/a.b.c"), Some("a.b.c"));
        assert_eq!(ns.key_of("/default/g/item"), Some("g"));
        assert_eq!(ns.key_of("/default/g/item/deeper"), None, "the OAP ignores deeper znodes");
        assert_eq!(ns.key_of("/default"), None);
        assert_eq!(ns.key_of("/defaults/x"), None, "a sibling with a longer name");
        assert_eq!(ns.key_of("/other/x"), None);
    }

    #[test]
    fn the_root_namespace_skips_the_system_node() {
        let ns = Namespace::new(String::new());
        assert_eq!(ns.path(), "/");
        assert_eq!(ns.key_path("k"), "/k");
        assert_eq!(ns.key_of("/k/item"), Some("k"));
        assert_eq!(ns.key_of("/zookeeper/config"), None);
        assert!(!ns.is_key("zookeeper"));
        assert!(ns.refuse_key("zookeeper").is_some());
    }

    #[test]
    fn refuses_keys_that_are_not_one_znode_name() {
        let ns = Namespace::new("/default".into());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(ns.refuse_key(bad).is_some(), "{bad:?}");
        }
        assert!(ns.refuse_key("configuration-discovery.default.agentConfigurations").is_none());
    }

    #[test]
    fn a_znode_is_a_single_a_group_or_both() {
        let single = KeyState::of(Some("v".into()), BTreeMap::new(), false, 7);
        assert_eq!(single, KeyState { single: Some("v".into()), group: None, revision: Some(7) });
        let group = KeyState::of(None, map(&[("a", "1")]), false, 7);
        assert_eq!(group.group, Some(map(&[("a", "1")])));
        assert_eq!(group.single, None);
        let both = KeyState::of(Some("v".into()), map(&[("a", "")]), false, 7);
        assert!(both.single.is_some() && both.group.is_some());
        assert_eq!(
            KeyState::of(Some(String::new()), BTreeMap::new(), false, 7),
            KeyState::default(),
            "empty is absent"
        );
        let registered = KeyState::of(None, BTreeMap::new(), true, 7);
        assert_eq!(registered.group, Some(BTreeMap::new()), "a registered group with no items is empty, not absent");
    }

    #[test]
    fn applying_a_state_reports_only_what_changed() {
        let mut content = StoreContent::default();
        let updates = KeyState::of(Some("v".into()), map(&[("a", "1")]), false, 7).apply_to("k", &mut content);
        assert_eq!(updates.len(), 2);
        assert!(KeyState::of(Some("v".into()), map(&[("a", "1")]), false, 7).apply_to("k", &mut content).is_empty());
        let updates = KeyState::of(Some("v".into()), BTreeMap::new(), false, 7).apply_to("k", &mut content);
        assert!(matches!(&updates[..], [Update::Group { items: None, .. }]), "{updates:?}");
        let updates = KeyState::of(Some("v".into()), BTreeMap::new(), false, 9).apply_to("k", &mut content);
        assert!(
            matches!(&updates[..], [Update::Single { revision: Some(9), .. }]),
            "the same text rewritten is reported with its new revision: {updates:?}"
        );
        let updates = KeyState::default().apply_to("k", &mut content);
        assert!(matches!(&updates[..], [Update::Single { value: None, .. }]), "{updates:?}");
        assert_eq!(content, StoreContent::default());
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        assert_eq!(text("/n", vec![b'a', 0xff, b'b']), "a\u{fffd}b");
        assert_eq!(text("/n", "default:100,mongodb:50".into()), "default:100,mongodb:50");
    }
}
