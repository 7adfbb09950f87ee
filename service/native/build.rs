//! Generates the wire types of `proto/edgepath/v1/edgepath.proto` (the same file the Python `edgepath.wire` package
//! is generated from) with prost, and keeps the compiled schema as `edgepath.v1.fds` (an encoded
//! `FileDescriptorSet`) for `request::wire_schema`, which the Python side compares with its own before using the
//! compiled decoding.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let proto = root.join("edgepath/v1/edgepath.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile([&proto], [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("edgepath.v1.fds"), prost::Message::encode_to_vec(&fds))?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
