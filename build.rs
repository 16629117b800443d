//! Compiles `proto/*.proto` with the pure-Rust `protox` compiler (no system
//! `protoc`) and generates Rust code:
//! - `model_config.proto` → plain prost types (`core::config::pb`), pure data;
//! - `grpc_service.proto`, `health.proto` → prost types and tonic service
//!   code (`core::protocol::pb`), referring to the config types above;
//! - the encoded descriptor set of all of them, for `prost-reflect`;
//! - `proto/v1/*.proto` (the legacy TRTIS v1 API, package
//!   `nvidia.inferenceserver`) → prost types and tonic service code
//!   (`core::protocol::v1::pb`), and their own descriptor set, which
//!   `prost-reflect` uses for the v1 text and JSON formats.
use std::{env, fs, path::PathBuf};

use prost_types::FileDescriptorSet;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let protos = [
        "proto/model_config.proto",
        "proto/grpc_service.proto",
        "proto/health.proto",
    ];
    let fds = protox::compile(protos, ["proto"])?;
    fs::write(
        out.join("descriptors.bin"),
        protox::prost::Message::encode_to_vec(&fds),
    )?;

    let only = |keep: &dyn Fn(&str) -> bool| FileDescriptorSet {
        file: fds
            .file
            .iter()
            .filter(|f| keep(f.name()))
            .cloned()
            .collect(),
    };
    let config_dir = out.join("config");
    fs::create_dir_all(&config_dir)?;
    prost_build::Config::new()
        // Ordered maps: deterministic config output and validation order.
        .btree_map(["."])
        .out_dir(&config_dir)
        .compile_fds(only(&|name| name == "model_config.proto"))?;

    // The gRPC code refers to the config types instead of generating them
    // again: every top-level type of model_config.proto is an extern path.
    let grpc_dir = out.join("grpc");
    fs::create_dir_all(&grpc_dir)?;
    let mut grpc = tonic_prost_build::configure().out_dir(&grpc_dir);
    for file in fds.file.iter().filter(|f| f.name() == "model_config.proto") {
        let names = file
            .message_type
            .iter()
            .map(|m| m.name().to_string())
            .chain(file.enum_type.iter().map(|e| e.name().to_string()));
        for name in names {
            grpc = grpc.extern_path(
                format!(".inference.{name}"),
                format!("crate::core::config::pb::{name}"),
            );
        }
    }
    grpc.compile_fds(fds.clone())?;

    let v1 = protox::compile(
        [
            "request_status.proto",
            "api.proto",
            "model_config.proto",
            "server_status.proto",
            "grpc_service.proto",
        ],
        ["proto/v1"],
    )?;
    fs::write(
        out.join("descriptors_v1.bin"),
        protox::prost::Message::encode_to_vec(&v1),
    )?;
    let v1_dir = out.join("v1");
    fs::create_dir_all(&v1_dir)?;
    tonic_prost_build::configure()
        // Ordered maps: the status lists models and versions in order.
        .btree_map(".")
        .out_dir(&v1_dir)
        .compile_fds(v1)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
