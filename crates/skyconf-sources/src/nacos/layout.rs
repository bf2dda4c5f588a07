//! How the OAP's keys map onto Nacos configs: a SINGLE key is the config with that dataId, a GROUP
//! key an index config listing its sub-items' dataIds (see the store's module header), and what
//! the source holds of them.

use std::collections::{BTreeMap, BTreeSet};

use super::client;
use crate::{KeySet, StoreContent};

/// Whether Nacos accepts `name` as a dataId, group or namespace.
pub(super) fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// One config's content as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    text: String,
    md5: String,
}

/// Every watched config, by dataId; `None` when the store has no such config.
#[derive(Debug, Default)]
pub(super) struct Held {
    pub(super) configs: BTreeMap<String, Option<Entry>>,
}

impl Held {
    pub(super) fn insert(&mut self, data_id: String, value: Option<String>) {
        let entry = value.map(|text| Entry { md5: client::content_md5(&text), text });
        self.configs.insert(data_id, entry);
    }

    fn text(&self, data_id: &str) -> Option<&str> {
        self.configs.get(data_id).and_then(Option::as_ref).map(|e| e.text.as_str())
    }

    /// The sub-item dataIds a group's index lists, in order, without duplicates.
    fn sub_items(&self, group: &str) -> Vec<String> {
        parse_index(self.text(group).unwrap_or(""))
    }

    /// Every dataId to watch: the keys, the group indexes and their sub-items.
    pub(super) fn watched(&self, keys: &KeySet) -> BTreeSet<String> {
        let mut watched: BTreeSet<String> = keys.singles.iter().chain(&keys.groups).cloned().collect();
        for group in &keys.groups {
            watched.extend(self.sub_items(group));
        }
        watched
    }

    /// What the listener is told: each held dataId with its MD5 (empty: absent).
    pub(super) fn listened(&self) -> Vec<(String, String)> {
        self.configs
            .iter()
            .map(|(data_id, entry)| (data_id.clone(), entry.as_ref().map(|e| e.md5.clone()).unwrap_or_default()))
            .collect()
    }

    /// The store content the held configs make, mapped as the OAP maps them.
    pub(super) fn content(&self, keys: &KeySet) -> StoreContent {
        let mut content = StoreContent::default();
        for key in &keys.singles {
            if let Some(text) = self.text(key) {
                content.singles.insert(key.clone(), text.to_owned());
            }
        }
        for group in &keys.groups {
            let items = self
                .sub_items(group)
                .into_iter()
                .filter_map(|item| self.text(&item).map(|text| (item, text.to_owned())))
                .collect();
            content.groups.insert(group.clone(), items);
        }
        content
    }
}

/// The sub-item dataIds a group index lists: one per line, trimmed; blank lines, names Nacos
/// would refuse and repeats are skipped.
fn parse_index(index: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for line in index.lines() {
        let item = line.trim();
        if item.is_empty() || items.iter().any(|i| i == item) {
            continue;
        }
        if is_valid_name(item) {
            items.push(item.to_owned());
        } else {
            tracing::warn!(item, "Skipping a group sub-item that cannot be a Nacos dataId.");
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> KeySet {
        KeySet { singles: vec!["a.b.c".into(), "item1".into()], groups: vec!["g.h.i".into()] }
    }

    #[test]
    fn an_index_lists_trimmed_sub_items_one_per_line() {
        assert_eq!(parse_index("item1\n item2"), ["item1", "item2"]);
        assert_eq!(parse_index("a\r\nb\r\n\r\n  \nb\nbad name\n"), ["a", "b"]);
        assert!(parse_index("").is_empty());
    }

    #[test]
    fn content_maps_keys_and_groups_as_the_oap() {
        let mut held = Held::default();
        held.insert("a.b.c".into(), Some("v".into()));
        held.insert("item1".into(), None);
        held.insert("g.h.i".into(), Some("item1\r\n item2\nitem3".into()));
        held.insert("item2".into(), Some("200".into()));
        let content = held.content(&keys());
        assert_eq!(content.singles.len(), 1);
        assert_eq!(content.singles["a.b.c"], "v");
        let items = &content.groups["g.h.i"];
        assert_eq!(items.len(), 1, "sub-items without a config are absent: {items:?}");
        assert_eq!(items["item2"], "200");
        let watched: Vec<_> = held.watched(&keys()).into_iter().collect();
        assert_eq!(watched, ["a.b.c", "g.h.i", "item1", "item2", "item3"]);

        let mut absent = Held::default();
        absent.insert("g.h.i".into(), None);
        assert!(absent.content(&keys()).groups["g.h.i"].is_empty(), "an absent index is an empty group");
    }
}
