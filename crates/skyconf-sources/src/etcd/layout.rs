//! Where the OAP keeps each configuration key in etcd, and back:
//!
//! - a SINGLE key `k` is the etcd key `{namespace}/k`;
//! - a GROUP key `g` is every etcd key under `{namespace}/g/`, the remainder being the sub-item's
//!   name (the OAP reads the group with a prefix read and skips the prefix key itself).
//!
//! skyconf watches the whole namespace, so it also reports keys no OAP registers (the DCS server
//! carries them all): an unregistered `{namespace}/k` is a single key, and an unregistered
//! `{namespace}/g/item` a group item. Deeper unregistered paths are not configuration keys and are
//! ignored, and so is everything under `{namespace}/skyconf/`, where skyconf keeps its own records
//! (see [`crate::shared`]). A registered single key is never read as a group, nor a registered group as a single,
//! because the OAP would not read them that way.

use std::collections::BTreeSet;

use crate::KeySet;
use crate::shared::RECORDS_NODE;

/// What an etcd key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A single key's value.
    Single(String),
    /// One sub-item of a group: (group key, sub-item name).
    Item(String, String),
}

/// The key mapping for one namespace and key set.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: String,
    singles: BTreeSet<String>,
    groups: BTreeSet<String>,
}

impl Layout {
    /// The mapping under `prefix` (the namespace with its trailing `/`, or empty).
    pub(crate) fn new(prefix: &str, keys: &KeySet) -> Self {
        Self {
            prefix: prefix.to_owned(),
            singles: keys.singles.iter().cloned().collect(),
            groups: keys.groups.iter().cloned().collect(),
        }
    }

    /// The etcd range `[key, range_end)` covering the whole namespace.
    pub(crate) fn range(&self) -> (Vec<u8>, Vec<u8>) {
        if self.prefix.is_empty() {
            // etcd's "every key": from the smallest key to the end.
            return (vec![0], vec![0]);
        }
        let key = self.prefix.clone().into_bytes();
        (key.clone(), prefix_end(&key))
    }

    /// What `etcd_key` holds, if it is a configuration key.
    pub(crate) fn slot(&self, etcd_key: &[u8]) -> Option<Slot> {
        let rest = etcd_key.strip_prefix(self.prefix.as_bytes())?;
        // Configuration keys are text; anything else is not one of ours.
        let rest = std::str::from_utf8(rest).ok()?;
        if rest.strip_prefix(RECORDS_NODE).is_some_and(|after| after.starts_with('/')) {
            return None;
        }
        match rest.split_once('/') {
            None if rest.is_empty() || self.groups.contains(rest) => None,
            None => Some(Slot::Single(rest.to_owned())),
            Some((group, item)) if group.is_empty() || item.is_empty() || self.singles.contains(group) => None,
            Some((group, item)) if self.groups.contains(group) || !item.contains('/') => {
                Some(Slot::Item(group.to_owned(), item.to_owned()))
            }
            Some(_) => None,
        }
    }
}

/// The etcd key of single key `key` under `prefix`.
pub(crate) fn single_key(prefix: &str, key: &str) -> Vec<u8> {
    format!("{prefix}{key}").into_bytes()
}

/// The smallest key greater than every key starting with `prefix` (etcd's prefix range end).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: no upper bound.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "core.default.endpoint-name-grouping-openapi";

    fn layout(prefix: &str) -> Layout {
        Layout::new(prefix, &KeySet::oap())
    }

    #[test]
    fn single_keys_sit_under_the_namespace() {
        let l = layout("/skywalking/");
        assert_eq!(
            single_key("/skywalking/", "configuration-discovery.default.agentConfigurations"),
            b"/skywalking/configuration-discovery.default.agentConfigurations"
        );
        assert_eq!(
            l.slot(b"/skywalking/alarm.default.alarm-settings"),
            Some(Slot::Single("alarm.default.alarm-settings".into()))
        );
        assert_eq!(l.slot(b"/skywalking/x.y.z"), Some(Slot::Single("x.y.z".into())), "unregistered keys count too");
        assert_eq!(l.slot(b"/skywalkingx/a"), None);
        assert_eq!(l.slot(b"/skywalking/"), None);
        assert_eq!(l.slot(b"/other/a"), None);
        assert_eq!(l.slot(&[b'/', b's', 0xff]), None);
    }

    #[test]
    fn groups_are_prefix_reads_without_the_prefix_key() {
        let l = layout("/skywalking/");
        let item = |g: &str, i: &str| Some(Slot::Item(g.into(), i.into()));
        assert_eq!(
            l.slot(format!("/skywalking/{GROUP}/customerAPI-v1.yaml").as_bytes()),
            item(GROUP, "customerAPI-v1.yaml")
        );
        assert_eq!(l.slot(format!("/skywalking/{GROUP}/a/b").as_bytes()), item(GROUP, "a/b"), "the OAP's prefix read");
        assert_eq!(l.slot(format!("/skywalking/{GROUP}/").as_bytes()), None, "the prefix key itself");
        assert_eq!(l.slot(format!("/skywalking/{GROUP}").as_bytes()), None, "a registered group is not a single");
        assert_eq!(l.slot(b"/skywalking/test.default.g/item1"), item("test.default.g", "item1"));
        assert_eq!(l.slot(b"/skywalking/test.default.g/a/b"), None, "one level for unregistered groups");
        assert_eq!(l.slot(b"/skywalking/skyconf/fleet"), None, "skyconf's records are not configuration");
        assert_eq!(l.slot(b"/skywalking/skyconf/fleet/a"), None);
        let with_records_group =
            Layout::new("/skywalking/", &KeySet { singles: vec![], groups: vec!["skyconf".into()] });
        assert_eq!(with_records_group.slot(b"/skywalking/skyconf/x"), None, "not even as a registered group");
        assert_eq!(
            l.slot(b"/skywalking/configuration-discovery.default.agentConfigurations/x"),
            None,
            "a registered single is not a group"
        );
    }

    #[test]
    fn ranges_cover_exactly_the_namespace() {
        assert_eq!(layout("/skywalking/").range(), (b"/skywalking/".to_vec(), b"/skywalking0".to_vec()));
        assert_eq!(layout("").range(), (vec![0], vec![0]));
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff, 0xff]), [0]);
        let l = layout("");
        assert_eq!(single_key("", "k"), b"k");
        assert_eq!(l.slot(b"k"), Some(Slot::Single("k".into())));
    }
}
