//! Generates the CDS server with skyconf's own codec: requests decode with prost, answers go out
//! as bytes encoded once per reload (see `src/cds/codec.rs`).

fn main() {
    let fetch = tonic_build::manual::Method::builder()
        .name("fetch_configurations")
        .route_name("fetchConfigurations")
        .input_type("skyconf_proto::v3::ConfigurationSyncRequest")
        .output_type("crate::cds::codec::EncodedCommands")
        .codec_path("crate::cds::codec::CdsCodec")
        .build();
    let service = tonic_build::manual::Service::builder()
        .name("ConfigurationDiscoveryService")
        .package("skywalking.v3")
        .method(fetch)
        .build();
    tonic_build::manual::Builder::new().build_client(false).compile(&[service]);
    println!("cargo:rerun-if-changed=build.rs");
}
