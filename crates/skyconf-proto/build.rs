//! Compiles the protocol files with protox, a pure-Rust protobuf compiler, so the build needs no
//! system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/skywalking/v3/configuration_discovery.proto",
        "proto/skywalking/v3/management.proto",
        "proto/dcs/configuration_service.proto",
    ];
    let descriptors = protox::compile(files, ["proto"])?;
    // Features reach a build script as CARGO_FEATURE_* variables.
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    tonic_prost_build::configure().build_server(server).build_client(true).compile_fds(descriptors)?;
    if std::env::var_os("CARGO_FEATURE_ETCD").is_some() {
        // skyconf is only ever an etcd client: no server stubs for etcd's API.
        let etcd = protox::compile(["proto/etcd/rpc.proto"], ["proto"])?;
        tonic_prost_build::configure().build_server(false).build_client(true).compile_fds(etcd)?;
    }
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
