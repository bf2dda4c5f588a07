//! Wire types and gRPC stubs (clients always, servers with the `server` feature) for the two protocols skyconf speaks, generated at build time from the
//! `.proto` files under `proto/` (written for skyconf from the published field numbers):
//!
//! - [`v3`]: `skywalking.v3`, the agent side: `ConfigurationDiscoveryService/fetchConfigurations`
//!   and `ManagementService`;
//! - [`dcs`]: SkyWalking's package-less `ConfigurationService` (`/ConfigurationService/call` and
//!   `/ConfigurationService/callGroup`), which an OAP polls for its dynamic configuration;
//! - `etcd` (feature `etcd`): the subset of etcd's v3 API the etcd store uses (KV with Txn, Watch, Auth, Lease), client side only;
//! - `fixtures` (feature `fixtures`): sample messages for tests.

/// `skywalking.v3`: configuration discovery and instance management.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod v3 {
    tonic::include_proto!("skywalking.v3");
}

/// The dynamic configuration service (DCS). Its proto has no package, hence the `_` include.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod dcs {
    tonic::include_proto!("_");
}

#[cfg(feature = "etcd")]
/// etcd's v3 API, the part skyconf's etcd store needs: `etcdserverpb` (KV, Watch, Auth, Lease) and
/// `mvccpb` (KeyValue, Event). Client stubs only.
pub mod etcd {
    /// `mvccpb`: stored keys and watch events.
    #[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }

    /// `etcdserverpb`: the KV, Watch, Auth and Lease services.
    #[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

#[cfg(feature = "fixtures")]
/// Sample messages for tests.
pub mod fixtures {
    use crate::v3::{InstanceProperties, KeyStringValuePair};

    /// A `reportInstanceProperties` as a Java agent sends it: service `order`, instance
    /// `pod-1@10.0.0.7`, its host name and two IPv4 addresses under the same key, in that order.
    pub fn instance_properties() -> InstanceProperties {
        InstanceProperties {
            service: "order".into(),
            service_instance: "pod-1@10.0.0.7".into(),
            properties: vec![
                KeyStringValuePair { key: "hostname".into(), value: "pod-1".into() },
                KeyStringValuePair { key: "ipv4".into(), value: "10.0.0.7".into() },
                KeyStringValuePair { key: "ipv4".into(), value: "172.17.0.1".into() },
            ],
            ..Default::default()
        }
    }
}

/// The full gRPC path agents call.
pub const FETCH_CONFIGURATIONS_PATH: &str = "/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations";

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn field_numbers_match_the_published_protocol() {
        // service = 1, uuid = 2: tag bytes 0x0a and 0x12.
        let bytes = v3::ConfigurationSyncRequest { service: "a".into(), uuid: "b".into() }.encode_to_vec();
        assert_eq!(bytes, [0x0a, 1, b'a', 0x12, 1, b'b']);
        // Commands.commands = 1, Command.command = 1, Command.args = 2, pair key = 1, value = 2.
        let cmds = v3::Commands {
            commands: vec![v3::Command {
                command: "c".into(),
                args: vec![v3::KeyStringValuePair { key: "k".into(), value: "v".into() }],
            }],
        };
        assert_eq!(cmds.encode_to_vec(), [0x0a, 11, 0x0a, 1, b'c', 0x12, 6, 0x0a, 1, b'k', 0x12, 1, b'v']);
        let dcs = dcs::ConfigurationResponse {
            config_table: vec![dcs::Config { name: "n".into(), value: "v".into() }],
            uuid: "u".into(),
        };
        assert_eq!(dcs.encode_to_vec(), [0x0a, 6, 0x0a, 1, b'n', 0x12, 1, b'v', 0x12, 1, b'u']);
    }

    #[test]
    #[cfg(feature = "etcd")]
    fn etcd_txn_field_numbers_match_the_published_protocol() {
        use etcd::etcdserverpb::{Compare, PutRequest, RequestOp, TxnRequest, compare, request_op};
        // Compare: target = 2 (MOD = 2), key = 3, mod_revision = 6; result EQUAL = 0 is the default.
        let compare = Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Mod as i32,
            key: b"k".to_vec(),
            target_union: Some(compare::TargetUnion::ModRevision(5)),
            range_end: Vec::new(),
        };
        assert_eq!(compare.encode_to_vec(), [0x10, 2, 0x1a, 1, b'k', 0x30, 5]);
        // TxnRequest: compare = 1, success = 2; RequestOp.request_put = 2; PutRequest key = 1.
        let txn = TxnRequest {
            compare: vec![],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest { key: b"k".to_vec(), ..Default::default() })),
            }],
            failure: vec![],
        };
        assert_eq!(txn.encode_to_vec(), [0x12, 5, 0x12, 3, 0x0a, 1, b'k']);
    }

    #[test]
    #[cfg(feature = "server")]
    fn service_paths_are_the_upstream_ones() {
        use dcs::configuration_service_server::SERVICE_NAME as DCS;
        use v3::configuration_discovery_service_server::SERVICE_NAME as CDS;
        assert_eq!(format!("/{CDS}/fetchConfigurations"), FETCH_CONFIGURATIONS_PATH);
        assert_eq!(DCS, "ConfigurationService");
    }
}
