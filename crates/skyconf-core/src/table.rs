//! The agent-configurations table: service name → that service's settings and digest.

use std::sync::Arc;

use indexmap::IndexMap;

use crate::digest::Digest;
use crate::targeting::Targeting;

/// One service's configuration as the OAP would serve it. Cheap to clone: the entries are
/// shared (a reload that keeps a service keeps its entries, and comparing two clones is a
/// pointer comparison).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    name: String,
    entries: Arc<[(String, String)]>,
    digest: Digest,
}

impl ServiceConfig {
    /// A service with these stringified entries, in document order.
    pub fn new(name: String, entries: Vec<(String, String)>) -> Self {
        let digest = Digest::of_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Self { name, entries: entries.into(), digest }
    }

    /// A service whose digest covers more than the entries it serves: the OAP hashes every
    /// entry written, and of keys that print alike (`1` and `"1"`) sends only the last.
    pub fn with_digest(name: String, entries: Vec<(String, String)>, digest: Digest) -> Self {
        Self { name, entries: entries.into(), digest }
    }

    /// The service name agents send.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `(key, value)` pairs in document order.
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
}

impl AgentConfigurations {
    /// A table of these services, in document order.
    pub fn from_services(services: IndexMap<String, ServiceConfig>) -> Self {
        Self { services: Arc::new(services), targeting: Targeting::default() }
    }

    /// The same table with `targeting` as its `targeting:` section.
    pub fn with_targeting(mut self, targeting: Targeting) -> Self {
        self.targeting = targeting;
        self
    }

    /// The document's `targeting:` section (empty when it has none).
    pub fn targeting(&self) -> &Targeting {
        &self.targeting
    }

    /// Exact, case-sensitive lookup, as the OAP does it.
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
