//! A document's `opamp:` section: the remote configurations OpAMP agents (OpenTelemetry
//! collectors and SDKs) are offered, per group of agents, from the same document the SkyWalking
//! agents' settings come from. The OAP ignores the section.
//!
//! ```yaml
//! opamp:
//!   - group: checkout-collectors
//!     match:                        # every condition holds; none: every agent
//!       service.name: checkout      # a pattern (`*` is any text) or a list of them
//!       host.name: [web-*, api-*]
//!     files:
//!       collector.yaml:             # the file's name
//!         content_type: text/yaml   # optional: from the extension (.yaml, .json), else text/plain
//!         body: |
//!           receivers: {}
//! ```
//!
//! An agent gets the files of the first group whose conditions all hold for its description
//! attributes (identifying first); an agent no group matches is offered nothing.

use std::sync::Arc;

use crate::targeting::Pattern;

/// One configuration file of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpampFile {
    /// The file's name, as the agent receives it.
    pub name: String,
    /// Its MIME type.
    pub content_type: String,
    /// Its text.
    pub body: String,
}

/// One group: which agents, and the files they get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpampGroup {
    /// Its name (unique in the section).
    pub name: String,
    /// Attribute name to the patterns one of which its value must match; every entry must hold.
    pub conditions: Vec<(String, Vec<Pattern>)>,
    /// Its files, in document order (names unique).
    pub files: Vec<OpampFile>,
}

impl OpampGroup {
    /// Whether an agent whose attribute values `attribute` looks up belongs to the group.
    pub fn matches<'a>(&self, attribute: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.conditions
            .iter()
            .all(|(key, patterns)| attribute(key).is_some_and(|v| patterns.iter().any(|p| p.matches(v))))
    }
}

/// The `opamp:` section: its groups in document order (empty when the document has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpampSection {
    groups: Arc<[OpampGroup]>,
}

impl OpampSection {
    /// A section of these groups.
    pub fn new(groups: Vec<OpampGroup>) -> Self {
        Self { groups: groups.into() }
    }

    /// The groups, in document order.
    pub fn groups(&self) -> &[OpampGroup] {
        &self.groups
    }

    /// Whether the document has no group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The index and group of the first group an agent belongs to.
    pub fn group_of<'a>(&self, attribute: impl Fn(&str) -> Option<&'a str> + Copy) -> Option<(usize, &OpampGroup)> {
        self.groups.iter().enumerate().find(|(_, g)| g.matches(attribute))
    }
}

/// The content type a file named `name` gets when its group does not say.
pub fn content_type_of(name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        "text/yaml"
    } else if lower.ends_with(".json") {
        "application/json"
    } else {
        "text/plain"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, conditions: &[(&str, &[&str])]) -> OpampGroup {
        OpampGroup {
            name: name.into(),
            conditions: conditions
                .iter()
                .map(|(k, ps)| ((*k).to_owned(), ps.iter().map(|p| Pattern::new(*p)).collect()))
                .collect(),
            files: Vec::new(),
        }
    }

    #[test]
    fn the_first_group_whose_conditions_all_hold_wins() {
        let section = OpampSection::new(vec![
            group("web", &[("service.name", &["checkout"]), ("host.name", &["web-*"])]),
            group("checkout", &[("service.name", &["checkout", "cart"])]),
            group("rest", &[]),
        ]);
        let attrs = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v)
        };
        let web = attrs(&[("service.name", "checkout"), ("host.name", "web-1")]);
        assert_eq!(section.group_of(web).map(|(i, _)| i), Some(0));
        let api = attrs(&[("service.name", "checkout"), ("host.name", "api-1")]);
        assert_eq!(section.group_of(api).map(|(i, _)| i), Some(1));
        let cart = attrs(&[("service.name", "cart")]);
        assert_eq!(section.group_of(cart).map(|(i, _)| i), Some(1));
        let other = attrs(&[]);
        assert_eq!(section.group_of(other).map(|(_, g)| g.name.as_str()), Some("rest"));
        assert!(OpampSection::default().group_of(other).is_none());
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(content_type_of("collector.YAML"), "text/yaml");
        assert_eq!(content_type_of("sampling.json"), "application/json");
        assert_eq!(content_type_of("notes"), "text/plain");
    }
}
