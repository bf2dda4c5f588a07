//! Compiles `proto/opamp/opamp.proto` with protox, a pure-Rust protobuf compiler, so the build
//! needs no system `protoc`. `bytes` fields become `bytes::Bytes`: configuration bodies are
//! shared between the backend and every response without copying.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let descriptors = protox::compile(["opamp/opamp.proto"], ["proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
