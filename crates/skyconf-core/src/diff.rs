//! What changed between two tables, per service and per setting: the release log records it and
//! the admin API's dry runs and the page show it. A service is listed when its digest changed, so
//! a reordering of settings (which changes what agents are sent) is a change with no key listed.

use crate::digest::Digest;
use crate::table::AgentConfigurations;

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

/// What changed from `before` to `after`, per service: services of `after` in its order, then the
/// services it no longer has. Services whose digest is unchanged are left out.
pub fn diff(before: &AgentConfigurations, after: &AgentConfigurations) -> Vec<ServiceChange> {
    let empty = Digest::empty();
    let mut out = Vec::new();
    for service in after.services() {
        match before.get(service.name()) {
            Some(old) if old.digest() == service.digest() => {}
            Some(old) => {
                let mut keys: Vec<KeyChange> = service
                    .entries()
                    .iter()
                    .filter(|(k, v)| old.get(k) != Some(v.as_str()))
                    .map(|(k, v)| KeyChange {
                        key: k.clone(),
                        before: old.get(k).map(str::to_owned),
                        after: Some(v.clone()),
                    })
                    .collect();
                keys.extend(old.entries().iter().filter(|(k, _)| service.get(k).is_none()).map(|(k, v)| KeyChange {
                    key: k.clone(),
                    before: Some(v.clone()),
                    after: None,
                }));
                out.push(ServiceChange {
                    service: service.name().to_owned(),
                    change: ChangeKind::Modified,
                    digest_before: old.digest().to_string(),
                    digest_after: service.digest().to_string(),
                    keys,
                });
            }
            None => out.push(ServiceChange {
                service: service.name().to_owned(),
                change: ChangeKind::Added,
                digest_before: empty.to_string(),
                digest_after: service.digest().to_string(),
                keys: service
                    .entries()
                    .iter()
                    .map(|(k, v)| KeyChange { key: k.clone(), before: None, after: Some(v.clone()) })
                    .collect(),
            }),
        }
    }
    for old in before.services().filter(|s| after.get(s.name()).is_none()) {
        out.push(ServiceChange {
            service: old.name().to_owned(),
            change: ChangeKind::Removed,
            digest_before: old.digest().to_string(),
            digest_after: empty.to_string(),
            keys: old
                .entries()
                .iter()
                .map(|(k, v)| KeyChange { key: k.clone(), before: Some(v.clone()), after: None })
                .collect(),
        });
    }
    out
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
