//! The DCS store against DCS servers: a scripted mock replaying the OAP's own gRPC-sync test
//! sequence (behaviour reference §5.3 item 6), and error handling.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use skyconf_core::store::{Change, StoreContent};
use skyconf_proto::dcs::configuration_service_server::{ConfigurationService, ConfigurationServiceServer};
use skyconf_proto::dcs::{
    Config, ConfigurationRequest, ConfigurationResponse, GroupConfigItems, GroupConfigurationResponse,
};
use skyconf_sources::dcs::{DcsSettings, DcsSource};
use skyconf_sources::{Expect, KeySet, Source, SourceError, Update};
use tonic::{Request, Response, Status};

const KEY: &str = "test-module.grpc.testKey";
const GROUP: &str = "test-module.grpc.testKeyGroup";

/// Answers according to `flag`, as the upstream mock does; `fail` makes every call fail.
#[derive(Clone, Default)]
struct Scripted {
    flag: Arc<AtomicUsize>,
    fail: Arc<AtomicUsize>,
}

fn config(name: &str, value: &str) -> Config {
    Config { name: name.into(), value: value.into() }
}

#[tonic::async_trait]
impl ConfigurationService for Scripted {
    async fn call(&self, request: Request<ConfigurationRequest>) -> Result<Response<ConfigurationResponse>, Status> {
        if self.fail.load(Ordering::SeqCst) == 1 {
            return Err(Status::unavailable("down"));
        }
        let request = request.into_inner();
        assert_eq!(request.cluster_name, "SkyWalking");
        let response = match self.flag.load(Ordering::SeqCst) {
            0 => ConfigurationResponse { config_table: vec![config(KEY, "100")], uuid: "u0".into() },
            1 => ConfigurationResponse { config_table: vec![config(KEY, "300")], uuid: "u1".into() },
            2 => ConfigurationResponse { config_table: vec![], uuid: request.uuid },
            _ => ConfigurationResponse { config_table: vec![config(KEY, "")], uuid: "u3".into() },
        };
        Ok(Response::new(response))
    }

    async fn call_group(
        &self,
        request: Request<ConfigurationRequest>,
    ) -> Result<Response<GroupConfigurationResponse>, Status> {
        let group = |items: &[(&str, &str)]| GroupConfigItems {
            group_name: GROUP.into(),
            items: items.iter().map(|(k, v)| config(k, v)).collect(),
        };
        let response = match self.flag.load(Ordering::SeqCst) {
            0 => GroupConfigurationResponse {
                group_config_table: vec![group(&[("item1", "100"), ("item2", "200")])],
                uuid: "g0".into(),
            },
            1 => GroupConfigurationResponse {
                group_config_table: vec![group(&[("item1", "100"), ("item2", "2000")])],
                uuid: "g1".into(),
            },
            2 => GroupConfigurationResponse { group_config_table: vec![], uuid: request.into_inner().uuid },
            _ => {
                GroupConfigurationResponse { group_config_table: vec![group(&[("item2", "2000")])], uuid: "g3".into() }
            }
        };
        Ok(Response::new(response))
    }
}

async fn serve(mock: Scripted) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ConfigurationServiceServer::new(mock))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    addr
}

fn source(addr: std::net::SocketAddr) -> DcsSource {
    DcsSource::new(DcsSettings { host: addr.ip().to_string(), port: addr.port(), ..DcsSettings::default() }).unwrap()
}

/// Applies a round's updates with the OAP's change rules and returns the notified changes.
fn apply(content: &mut StoreContent, updates: Vec<Update>) -> (Option<Change>, BTreeMap<String, Change>) {
    let (mut single, mut group) = (None, BTreeMap::new());
    for update in updates {
        match update {
            Update::Single { key, value, .. } if key == KEY => single = content.set_single(&key, value),
            Update::Group { key, items } if key == GROUP => group = content.set_group(&key, items),
            other => panic!("unexpected {other:?}"),
        }
    }
    (single, group)
}

#[tokio::test]
async fn replays_the_oap_grpc_sync_sequence() {
    let mock = Scripted::default();
    let source = source(serve(mock.clone()).await);
    let mut content = StoreContent::default();

    // Step 1: first values.
    let (single, group) = apply(&mut content, source.round().await.unwrap());
    assert_eq!(single, Some(Change::Modify("100".into())));
    assert_eq!(group.len(), 2);
    assert_eq!(content.groups[GROUP]["item2"], "200");

    // Step 2: new uuid, new values.
    mock.flag.store(1, Ordering::SeqCst);
    let (single, group) = apply(&mut content, source.round().await.unwrap());
    assert_eq!(single, Some(Change::Modify("300".into())));
    assert_eq!(group.into_iter().collect::<Vec<_>>(), [("item2".to_owned(), Change::Modify("2000".into()))]);

    // Step 3: the server echoes the uuid: no change at all.
    mock.flag.store(2, Ordering::SeqCst);
    assert!(source.round().await.unwrap().is_empty());
    assert_eq!(content.singles[KEY], "300");

    // Step 4: the key with no value is a MODIFY to "", and item1 missing from the group is deleted.
    mock.flag.store(3, Ordering::SeqCst);
    let (single, group) = apply(&mut content, source.round().await.unwrap());
    assert_eq!(single, Some(Change::Modify(String::new())), "an empty value is a MODIFY, never a delete");
    assert_eq!(group.get("item1"), Some(&Change::Delete));
    assert_eq!(content.groups[GROUP].len(), 1);
}

#[tokio::test]
async fn an_error_changes_nothing_and_keeps_the_uuid() {
    let mock = Scripted::default();
    let source = source(serve(mock.clone()).await);
    assert!(!source.round().await.unwrap().is_empty());
    mock.fail.store(1, Ordering::SeqCst);
    assert!(matches!(source.round().await, Err(SourceError::Unavailable { .. })));
    mock.fail.store(0, Ordering::SeqCst);
    // Same content, same uuid as before the outage: nothing to report.
    assert!(source.round().await.unwrap().is_empty(), "the uuid was kept through the error");
}

#[tokio::test]
async fn load_reads_everything_and_writes_are_refused() {
    let source = source(serve(Scripted::default()).await);
    let content = source.load(&KeySet::oap()).await.unwrap();
    assert_eq!(content.singles[KEY], "100");
    assert_eq!(content.groups[GROUP].len(), 2);
    assert!(matches!(source.put(KEY, Some("x"), Expect::Seen).await, Err(SourceError::Unsupported(_))));
}

#[test]
fn settings_follow_the_oap() {
    assert!(DcsSource::new(DcsSettings::default()).is_err(), "no host");
    let settings: DcsSettings = serde_json::from_str(r#"{"host": "h", "clusterName": "c", "period": 5}"#).unwrap();
    assert_eq!((settings.port, settings.period, settings.cluster_name.as_str()), (80, 5, "c"));
}
