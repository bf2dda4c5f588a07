//! The agent-configurations table: service name → that service's settings and digest.
//!
//! A document may carry, beside `configurations:`, a top-level `global-configurations:` section
//! (a flat `key: value` map that the OAP ignores). Its settings are layered under every service's
//! own: a listed service is served its own settings followed by the global settings it does not
//! set itself, and a service with no entry is served the global settings alone ([`Layer`] says
//! which of the two a served value comes from). The digest is that of exactly what is served, so
//! a Java agent's echo stays consistent; a service to which the global section adds nothing keeps
//! the OAP's own digest.

use std::sync::Arc;

use indexmap::IndexMap;

use crate::digest::Digest;
use crate::targeting::Targeting;

/// The top-level key of the global section.
pub const GLOBAL_KEY: &str = "global-configurations";

/// Where a served value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layer {
    /// The document's `global-configurations:` section.
    Global,
    /// The service's own entry under `configurations:`.
    Service,
    /// A targeting group of the service (its name).
    Group(String),
    /// A staged rollout's candidate (its id).
    Rollout(String),
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Global => f.write_str("global"),
            Self::Service => f.write_str("service"),
            Self::Group(name) => write!(f, "group:{name}"),
            Self::Rollout(id) => write!(f, "rollout:{id}"),
        }
    }
}

/// One service's configuration as served. Cheap to clone: the entries are shared (a reload
/// that keeps a service keeps its entries, and comparing two clones is a pointer comparison).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    name: String,
    /// What is served: its own entries, then the global ones it does not set.
    entries: Arc<[(String, String)]>,
    digest: Digest,
    /// Its own entries when the global section adds to them (`None`: `entries` are its own).
    own: Option<Arc<[(String, String)]>>,
}

impl ServiceConfig {
    /// A service with these stringified entries, in document order.
    pub fn new(name: String, entries: Vec<(String, String)>) -> Self {
        let digest = Digest::of_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Self { name, entries: entries.into(), digest, own: None }
    }

    /// A service whose digest covers more than the entries it serves: the OAP hashes every
    /// entry written, and of keys that print alike (`1` and `"1"`) sends only the last.
    pub fn with_digest(name: String, entries: Vec<(String, String)>, digest: Digest) -> Self {
        Self { name, entries: entries.into(), digest, own: None }
    }

    /// This service with `global`'s settings layered under its own: its entries, then each
    /// global entry whose key it does not set, under the digest of exactly that. Unchanged when
    /// the global section adds no key.
    pub fn layered(self, global: &[(String, String)]) -> Self {
        let own = self.own_entries();
        let added: Vec<&(String, String)> = global.iter().filter(|(k, _)| !own.iter().any(|(o, _)| o == k)).collect();
        if added.is_empty() {
            return self;
        }
        let entries: Vec<(String, String)> = own.iter().cloned().chain(added.into_iter().cloned()).collect();
        let digest = Digest::of_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let own = self.own.clone().unwrap_or_else(|| self.entries.clone());
        Self { name: self.name, entries: entries.into(), digest, own: Some(own) }
    }

    /// The settings written under this service's own entry (what a per-service write edits).
    pub fn own_entries(&self) -> &[(String, String)] {
        self.own.as_deref().unwrap_or(&self.entries)
    }

    /// Where the served value of `key` comes from: the service's own entry or the global section.
    pub fn layer_of(&self, key: &str) -> Option<Layer> {
        if self.own_entries().iter().any(|(k, _)| k == key) {
            Some(Layer::Service)
        } else {
            self.get(key).map(|_| Layer::Global)
        }
    }

    /// The service name agents send.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The served `(key, value)` pairs: its own in document order, then the global ones it does
    /// not set, in theirs.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }

    /// The value of one key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The digest agents echo back.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }
}

/// Every service of one accepted document, and its per-instance [`Targeting`]. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentConfigurations {
    services: Arc<IndexMap<String, ServiceConfig>>,
    targeting: Targeting,
    global: Option<ServiceConfig>,
    opamp: crate::opamp::OpampSection,
}

impl AgentConfigurations {
    /// A table of these services, in document order.
    pub fn from_services(services: IndexMap<String, ServiceConfig>) -> Self {
        Self { services: Arc::new(services), targeting: Targeting::default(), global: None, opamp: Default::default() }
    }

    /// The same table with `global` (named [`GLOBAL_KEY`]) as its `global-configurations:`
    /// section, layered under every service (an empty section is no section).
    pub fn with_global(mut self, global: Option<ServiceConfig>) -> Self {
        let global = global.filter(|g| !g.entries().is_empty());
        if let Some(global) = &global {
            let layered = self.services.values().map(|s| (s.name().to_owned(), s.clone().layered(global.entries())));
            self.services = Arc::new(layered.collect());
        }
        self.global = global;
        self
    }

    /// The `global-configurations:` section (`None` when the document has none, or it is empty).
    pub fn global(&self) -> Option<&ServiceConfig> {
        self.global.as_ref()
    }

    /// What `service` is served: its entry, else (with a global section) the global settings
    /// under its name; `None` for the OAP's EMPTY answer.
    pub fn served(&self, service: &str) -> Option<ServiceConfig> {
        self.get(service).cloned().or_else(|| {
            let global = self.global.as_ref()?;
            Some(ServiceConfig {
                name: service.to_owned(),
                entries: global.entries.clone(),
                digest: global.digest.clone(),
                own: Some(Arc::from(Vec::new())),
            })
        })
    }

    /// The same table with `targeting` as its `targeting:` section.
    pub fn with_targeting(mut self, targeting: Targeting) -> Self {
        self.targeting = targeting;
        self
    }

    /// The same table with `opamp` as its `opamp:` section.
    pub fn with_opamp(mut self, opamp: crate::opamp::OpampSection) -> Self {
        self.opamp = opamp;
        self
    }

    /// The document's `opamp:` section (empty when it has none).
    pub fn opamp(&self) -> &crate::opamp::OpampSection {
        &self.opamp
    }

    /// The document's `targeting:` section (empty when it has none).
    pub fn targeting(&self) -> &Targeting {
        &self.targeting
    }

    /// Exact, case-sensitive lookup of a listed service, as the OAP does it (with the global
    /// settings layered in; [`Self::served`] also answers for unlisted services).
    pub fn get(&self, service: &str) -> Option<&ServiceConfig> {
        self.services.get(service)
    }

    /// Services in document order.
    pub fn services(&self) -> impl ExactSizeIterator<Item = &ServiceConfig> {
        self.services.values()
    }

    /// How many services.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// No services at all: every agent gets the EMPTY answer.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }
}
