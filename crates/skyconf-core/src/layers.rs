//! Where each value an agent is served comes from: for a service (and optionally one of its
//! instances), every setting with its [`Layer`] — the `global-configurations:` section, the
//! service's own entry, or the targeting group the instance falls in — and the digest of exactly
//! that answer (the one [`crate::answer::Answers`] serves). The server adds the rollout layer,
//! which lives outside the document.

use crate::digest::Digest;
use crate::ignore::{IgnorePaths, IgnoreSuffixes};
use crate::keys;
use crate::table::{AgentConfigurations, Layer};
use crate::targeting::InstanceRef;

/// One served setting and its layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced {
    /// The setting.
    pub key: String,
    /// Its served value.
    pub value: String,
    /// Where the value comes from.
    pub layer: Layer,
}

/// What one agent is served, layer by layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The digest of the answer (the EMPTY digest when there are no settings from any layer).
    pub digest: Digest,
    /// The targeting group the instance falls in, if any.
    pub group: Option<String>,
    /// The settings, in the order they are sent.
    pub settings: Vec<Sourced>,
}

/// What `instance` of `service` (or any of its instances, for `None`) is served by `table`.
pub fn provenance(table: &AgentConfigurations, service: &str, instance: Option<&InstanceRef<'_>>) -> Provenance {
    let served = table.served(service);
    let base = served.as_ref().map_or(&[][..], |s| s.entries());
    let layer_of = |key: &str| served.as_ref().and_then(|s| s.layer_of(key)).unwrap_or(Layer::Service);
    let group = instance.and_then(|instance| table.targeting().group_of(service, instance)).map(|(_, group)| group);
    match group {
        Some(group) => {
            let entries = group.entries(base);
            let digest = Digest::of_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let settings = entries
                .into_iter()
                .map(|(key, value)| {
                    let by_group = group.settings.iter().any(|(k, v)| *k == key && v.is_some());
                    let layer = if by_group { Layer::Group(group.name.clone()) } else { layer_of(&key) };
                    Sourced { key, value, layer }
                })
                .collect();
            Provenance { digest, group: Some(group.name.clone()), settings }
        }
        None => Provenance {
            digest: served.as_ref().map_or_else(Digest::empty, |s| s.digest().clone()),
            group: None,
            settings: base
                .iter()
                .map(|(key, value)| Sourced { key: key.clone(), value: value.clone(), layer: layer_of(key) })
                .collect(),
        },
    }
}

/// Whether a Java agent holding `settings` traces one operation name, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathVerdict {
    /// The operation name (a path, or `GET:/path`).
    pub path: String,
    /// The setting that makes the agent ignore it (`agent.trace.ignore_path` or
    /// `agent.ignore_suffix`), `None` when it is traced.
    pub ignored_by: Option<&'static str>,
    /// The pattern or suffix that matched.
    pub pattern: Option<String>,
}

/// For each of `paths`, whether an agent holding `settings` ignores it ([`crate::ignore`]).
pub fn ignored_paths(settings: &[(&str, &str)], paths: &[String]) -> Vec<PathVerdict> {
    let value = |wanted: &str| settings.iter().find(|(k, _)| *k == wanted).map(|(_, v)| *v);
    let patterns = value(keys::TRACE_IGNORE_PATH).map(IgnorePaths::parse);
    let suffixes = value(keys::IGNORE_SUFFIX).map(IgnoreSuffixes::parse);
    paths
        .iter()
        .map(|path| {
            let by_pattern = patterns.as_ref().and_then(|p| p.ignored_by(path)).map(|p| p.as_str().to_owned());
            let by_suffix = suffixes.as_ref().and_then(|s| s.ignored_by(path)).map(str::to_owned);
            let (ignored_by, pattern) = match (by_pattern, by_suffix) {
                (Some(pattern), _) => (Some(keys::TRACE_IGNORE_PATH), Some(pattern)),
                (None, Some(suffix)) => (Some(keys::IGNORE_SUFFIX), Some(suffix)),
                (None, None) => (None, None),
            };
            PathVerdict { path: path.clone(), ignored_by, pattern }
        })
        .collect()
}

#[cfg(all(test, feature = "reader"))]
mod tests {
    use super::*;

    const DOCUMENT: &str = "global-configurations:\n  agent.trace.ignore_path: /health/**\n  agent.ignore_suffix: .css\nconfigurations:\n  a:\n    agent.sample_n_per_3_secs: 5\ntargeting:\n  a:\n    - group: canary\n      instances: [a-1]\n      settings:\n        agent.sample_n_per_3_secs: 50\n        agent.ignore_suffix: ~\n";

    #[test]
    fn each_setting_names_its_layer_and_the_digest_is_the_served_one() {
        let table = crate::read(DOCUMENT).unwrap();
        let answers = crate::answer::Answers::new(&table);
        let plain = provenance(&table, "a", None);
        let layers: Vec<_> = plain.settings.iter().map(|s| (s.key.as_str(), s.layer.to_string())).collect();
        assert_eq!(
            layers,
            [
                ("agent.sample_n_per_3_secs", "service".to_owned()),
                ("agent.trace.ignore_path", "global".to_owned()),
                ("agent.ignore_suffix", "global".to_owned()),
            ]
        );
        assert_eq!(plain.digest, answers.answer("a").digest);
        let instance = InstanceRef { name: "a-1", properties: &[], agent_version: None };
        let grouped = provenance(&table, "a", Some(&instance));
        assert_eq!(grouped.group.as_deref(), Some("canary"));
        let layers: Vec<_> = grouped.settings.iter().map(|s| (s.key.as_str(), s.layer.to_string())).collect();
        assert_eq!(
            layers,
            [
                ("agent.sample_n_per_3_secs", "group:canary".to_owned()),
                ("agent.trace.ignore_path", "global".to_owned())
            ]
        );
        assert_eq!(grouped.digest, answers.choose("a", Some(&instance)).answer.digest);
        let other = provenance(&table, "unlisted", None);
        assert!(other.settings.iter().all(|s| s.layer == Layer::Global));
        assert_eq!(other.digest, answers.answer("unlisted").digest);
        let none = provenance(&crate::read("configurations: {}\n").unwrap(), "x", None);
        assert_eq!((none.digest, none.settings.len()), (Digest::empty(), 0));
    }

    #[test]
    fn ignored_paths_name_the_setting_and_pattern_that_ignores_each() {
        let settings = [("agent.trace.ignore_path", "/health/**,GET:/ping"), ("agent.ignore_suffix", ".css")];
        let paths: Vec<String> = ["/health/live", "GET:/ping", "/site.css", "/orders"].map(String::from).to_vec();
        let verdicts = ignored_paths(&settings, &paths);
        let got: Vec<_> = verdicts.iter().map(|v| (v.ignored_by, v.pattern.as_deref())).collect();
        assert_eq!(
            got,
            [
                (Some("agent.trace.ignore_path"), Some("/health/**")),
                (Some("agent.trace.ignore_path"), Some("GET:/ping")),
                (Some("agent.ignore_suffix"), Some(".css")),
                (None, None),
            ]
        );
    }
}
