//! What changed between two tables, per service and per setting: the release log records it and
//! the admin API's dry runs and the page show it. A service is listed when its digest changed, so
//! a reordering of settings (which changes what agents are sent) is a change with no key listed.
//! Services are compared as served, the `global-configurations:` settings layered in, so a change
//! of a global setting names every listed service whose answer changed, and [`OTHER_SERVICES`]
//! for the services without an entry.

use crate::digest::Digest;
use crate::table::{AgentConfigurations, ServiceConfig};

/// How one service changed in a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum ChangeKind {
    /// The service is new: its agents move from the EMPTY answer to a configuration.
    Added,
    /// The service is gone: its agents get the EMPTY answer and reset every setting.
    Removed,
    /// Its settings (or their order, which the digest depends on) changed.
    Modified,
}

/// One setting that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct KeyChange {
    /// The setting.
    pub key: String,
    /// Its value before; none when it is new.
    pub before: Option<String>,
    /// Its value after; none when it is removed (agents reset it to their local default).
    pub after: Option<String>,
}

/// One service whose digest changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ServiceChange {
    /// The service.
    pub service: String,
    /// Added, removed or modified.
    pub change: ChangeKind,
    /// The digest its agents were served before (the EMPTY digest for a new service).
    pub digest_before: String,
    /// The digest they are served after (the EMPTY digest for a removed service).
    pub digest_after: String,
    /// The settings that changed, in document order.
    pub keys: Vec<KeyChange>,
}

/// The name [`diff`] gives the change of what services without an entry are served (the
/// `global-configurations:` section's settings, else the EMPTY answer).
pub const OTHER_SERVICES: &str = "*";

/// What changed from `before` to `after`, per service: services of `after` in its order, then the
/// services it no longer has, then (named [`OTHER_SERVICES`]) the services without an entry when
/// their answer changed. Services whose digest is unchanged are left out. A service that gains or
/// loses its entry is compared with what it is served without one.
pub fn diff(before: &AgentConfigurations, after: &AgentConfigurations) -> Vec<ServiceChange> {
    let mut out = Vec::new();
    for service in after.services() {
        let (change, old) = match before.get(service.name()) {
            Some(old) => (ChangeKind::Modified, Some(old.clone())),
            None => (ChangeKind::Added, before.served(service.name())),
        };
        if let Some(found) = change_of(service.name(), change, old.as_ref(), Some(service)) {
            out.push(found);
        }
    }
    for old in before.services().filter(|s| after.get(s.name()).is_none()) {
        let new = after.served(old.name());
        if let Some(found) = change_of(old.name(), ChangeKind::Removed, Some(old), new.as_ref()) {
            out.push(found);
        }
    }
    let (old, new) = (before.global().cloned(), after.global().cloned());
    let change = match (&old, &new) {
        (None, _) => ChangeKind::Added,
        (Some(_), None) => ChangeKind::Removed,
        (Some(_), Some(_)) => ChangeKind::Modified,
    };
    if let Some(found) = change_of(OTHER_SERVICES, change, old.as_ref(), new.as_ref()) {
        out.push(found);
    }
    out
}

/// The change of one service from `old` to `new` (`None`: the EMPTY answer), if its digest changed.
fn change_of(
    name: &str,
    change: ChangeKind,
    old: Option<&ServiceConfig>,
    new: Option<&ServiceConfig>,
) -> Option<ServiceChange> {
    let digest = |s: Option<&ServiceConfig>| s.map_or_else(Digest::empty, |s| s.digest().clone());
    let (digest_before, digest_after) = (digest(old), digest(new));
    if digest_before == digest_after {
        return None;
    }
    let entries = |s: Option<&ServiceConfig>| s.map_or(&[][..], |s| s.entries()).to_vec();
    let (old_entries, new_entries) = (entries(old), entries(new));
    let find = |entries: &[(String, String)], key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let mut keys: Vec<KeyChange> = new_entries
        .iter()
        .filter(|(k, v)| find(&old_entries, k).as_ref() != Some(v))
        .map(|(k, v)| KeyChange { key: k.clone(), before: find(&old_entries, k), after: Some(v.clone()) })
        .collect();
    keys.extend(old_entries.iter().filter(|(k, _)| find(&new_entries, k).is_none()).map(|(k, v)| KeyChange {
        key: k.clone(),
        before: Some(v.clone()),
        after: None,
    }));
    Some(ServiceChange {
        service: name.to_owned(),
        change,
        digest_before: digest_before.to_string(),
        digest_after: digest_after.to_string(),
        keys,
    })
}

#[cfg(all(test, feature = "reader"))]
mod tests {
    use super::*;

    fn table(text: &str) -> AgentConfigurations {
        crate::read(text).unwrap()
    }

    const V1: &str = "configurations:\n  a: {k: 1, j: x}\n  b: {k: 2}\n";
    const V2: &str = "configurations:\n  a: {k: 3}\n  c: {k: 4}\n";

    #[test]
    fn diff_names_added_removed_and_modified_services_with_their_keys() {
        let changes = diff(&table(V1), &table(V2));
        let kinds: Vec<_> = changes.iter().map(|c| (c.service.as_str(), c.change)).collect();
        assert_eq!(kinds, [("a", ChangeKind::Modified), ("c", ChangeKind::Added), ("b", ChangeKind::Removed)]);
        assert_eq!(
            changes[0].keys,
            [
                KeyChange { key: "k".into(), before: Some("1".into()), after: Some("3".into()) },
                KeyChange { key: "j".into(), before: Some("x".into()), after: None },
            ]
        );
        assert_eq!(changes[1].digest_before, Digest::empty().to_string());
        assert_eq!(changes[2].digest_after, Digest::empty().to_string());
        assert!(diff(&table(V1), &table(V1)).is_empty());
        let reordered = diff(&table(V1), &table("configurations:\n  a: {j: x, k: 1}\n  b: {k: 2}\n"));
        assert_eq!(reordered.len(), 1, "order changes the digest");
        assert!(reordered[0].keys.is_empty());
    }
}
