//! Compiles `proto/*.proto` with the pure-Rust `protox` compiler (no system
//! `protoc`), generates the Rust types with prost, and keeps the encoded
//! descriptor set for `prost-reflect` (text-format parsing of config.pbtxt).
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let protos = ["proto/model_config.proto"];
    let fds = protox::compile(protos, ["proto"])?;
    fs::write(
        out.join("descriptors.bin"),
        protox::prost::Message::encode_to_vec(&fds),
    )?;
    prost_build::Config::new()
        // Ordered maps: deterministic config output and validation order.
        .btree_map(["."])
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
