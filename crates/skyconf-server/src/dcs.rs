//! SkyWalking's dynamic configuration service (DCS), served: an OAP with
//! `configuration: selector: grpc` pointed at skyconf polls `/ConfigurationService/call` and
//! `/ConfigurationService/callGroup` and receives every key of the store skyconf watches.
//!
//! The OAP's client (behaviour reference §1.2) only updates the names present in a changed
//! response and treats a repeated uuid as "no change", so every response:
//! - carries a non-empty uuid derived from the content, so the same content is the same uuid on
//!   every replica and an unchanged store is answered with an empty table;
//! - when it changes, carries *every* key — the OAP's registered keys and every key the store ever
//!   held — with `""` for the ones that are gone, which is how the protocol clears a value (the OAP
//!   applies it as MODIFY `""`; for the agent configurations an empty document is an empty table).
//!   Groups that are gone are sent with no items, which deletes their sub-items.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use skyconf_core::store::{OAP_GROUP_KEYS, OAP_SINGLE_KEYS, StoreContent};
use skyconf_proto::dcs::configuration_service_server::{ConfigurationService, ConfigurationServiceServer};
use skyconf_proto::dcs::{
    Config, ConfigurationRequest, ConfigurationResponse, GroupConfigItems, GroupConfigurationResponse,
};
use tonic::{Request, Response, Status};

use crate::metrics::DcsMetrics;
use crate::store_view::StoreView;

/// Keys ever served, so a key that disappears is sent once more, empty.
#[derive(Debug, Default)]
struct Seen {
    singles: BTreeSet<String>,
    groups: BTreeSet<String>,
}

/// The DCS service over a [`StoreView`].
#[derive(Debug, Clone)]
pub(crate) struct DcsService {
    store: Arc<StoreView>,
    seen: Arc<Mutex<Seen>>,
    metrics: DcsMetrics,
}

impl DcsService {
    /// A service answering from `store`.
    pub(crate) fn new(store: Arc<StoreView>) -> Self {
        let seen = Seen {
            singles: OAP_SINGLE_KEYS.iter().map(|k| (*k).to_owned()).collect(),
            groups: OAP_GROUP_KEYS.iter().map(|k| (*k).to_owned()).collect(),
        };
        Self { store, seen: Arc::new(Mutex::new(seen)), metrics: DcsMetrics::default() }
    }

    /// Counts every call in `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: DcsMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The tonic server for this service.
    pub(crate) fn into_server(self) -> ConfigurationServiceServer<Self> {
        ConfigurationServiceServer::new(self)
    }

    /// What a response must carry now: every key ever seen, absent ones empty.
    fn response_content(&self) -> StoreContent {
        let content = self.store.content();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.singles.extend(content.singles.keys().cloned());
        seen.groups.extend(content.groups.keys().cloned());
        StoreContent {
            singles: seen
                .singles
                .iter()
                .map(|k| (k.clone(), content.singles.get(k).cloned().unwrap_or_default()))
                .collect(),
            groups: seen
                .groups
                .iter()
                .map(|k| (k.clone(), content.groups.get(k).cloned().unwrap_or_default()))
                .collect(),
            revisions: Default::default(),
        }
    }

    /// The answer to `call`.
    pub(crate) fn call_response(&self, request_uuid: &str) -> ConfigurationResponse {
        let content = self.response_content();
        let uuid = content.singles_uuid();
        if uuid == request_uuid {
            return ConfigurationResponse { config_table: Vec::new(), uuid };
        }
        let config_table = content.singles.into_iter().map(|(name, value)| Config { name, value }).collect();
        ConfigurationResponse { config_table, uuid }
    }

    /// The answer to `callGroup`.
    pub(crate) fn call_group_response(&self, request_uuid: &str) -> GroupConfigurationResponse {
        let content = self.response_content();
        let uuid = content.groups_uuid();
        if uuid == request_uuid {
            return GroupConfigurationResponse { group_config_table: Vec::new(), uuid };
        }
        let group_config_table = content
            .groups
            .into_iter()
            .map(|(group_name, items): (String, BTreeMap<String, String>)| GroupConfigItems {
                group_name,
                items: items.into_iter().map(|(name, value)| Config { name, value }).collect(),
            })
            .collect();
        GroupConfigurationResponse { group_config_table, uuid }
    }
}

#[tonic::async_trait]
impl ConfigurationService for DcsService {
    async fn call(&self, request: Request<ConfigurationRequest>) -> Result<Response<ConfigurationResponse>, Status> {
        let uuid = request.into_inner().uuid;
        let response = self.call_response(&uuid);
        self.metrics.record(false, response.uuid != uuid);
        Ok(Response::new(response))
    }

    async fn call_group(
        &self,
        request: Request<ConfigurationRequest>,
    ) -> Result<Response<GroupConfigurationResponse>, Status> {
        let uuid = request.into_inner().uuid;
        let response = self.call_group_response(&uuid);
        self.metrics.record(true, response.uuid != uuid);
        Ok(Response::new(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> (Arc<StoreView>, DcsService) {
        let store = Arc::new(StoreView::new("test".into(), StoreContent::default(), true, false));
        (Arc::clone(&store), DcsService::new(store))
    }

    fn table(response: &ConfigurationResponse) -> BTreeMap<&str, &str> {
        response.config_table.iter().map(|c| (c.name.as_str(), c.value.as_str())).collect()
    }

    #[test]
    fn sends_every_key_then_nothing_until_a_change_then_clears_removed_keys() {
        let (store, dcs) = service();
        let mut content = StoreContent::default();
        content.set_single("test-module.default.testKey", Some("100".into()));
        store.replace(content.clone());

        let first = dcs.call_response("");
        assert!(!first.uuid.is_empty());
        assert_eq!(table(&first)["test-module.default.testKey"], "100");
        assert_eq!(
            table(&first)[skyconf_core::store::AGENT_CONFIGURATIONS_KEY],
            "",
            "absent registered keys are sent empty"
        );

        let again = dcs.call_response(&first.uuid);
        assert_eq!(again.uuid, first.uuid);
        assert!(again.config_table.is_empty());

        content.set_single("test-module.default.testKey", None);
        store.replace(content);
        let cleared = dcs.call_response(&first.uuid);
        assert_ne!(cleared.uuid, first.uuid);
        assert_eq!(table(&cleared)["test-module.default.testKey"], "", "a removed key is cleared with an empty value");
    }

    #[test]
    fn groups_are_sent_whole_and_an_absent_group_is_emptied() {
        let (store, dcs) = service();
        let mut content = StoreContent::default();
        content.set_group("g.default.x", Some([("item1".to_owned(), "100".to_owned())].into()));
        store.replace(content.clone());
        let first = dcs.call_group_response("");
        let group = first.group_config_table.iter().find(|g| g.group_name == "g.default.x").unwrap();
        assert_eq!(group.items.len(), 1);
        assert!(dcs.call_group_response(&first.uuid).group_config_table.is_empty());
        content.set_group("g.default.x", None);
        store.replace(content);
        let second = dcs.call_group_response(&first.uuid);
        let group = second.group_config_table.iter().find(|g| g.group_name == "g.default.x").unwrap();
        assert!(group.items.is_empty());
    }

    #[test]
    fn the_uuid_depends_only_on_content() {
        let (store_a, a) = service();
        let (store_b, b) = service();
        let mut content = StoreContent::default();
        content.set_single("k.d.x", Some("v".into()));
        store_a.replace(content.clone());
        store_b.replace(content);
        assert_eq!(a.call_response("").uuid, b.call_response("").uuid, "replicas agree");
    }
}
