//! The Triton model configuration: the generated `ModelConfig` types, parsing
//! `config.pbtxt`, normalization (Triton's defaults) and static validation.
//!
//! Everything here is pure: no I/O beyond what the caller hands in, no async,
//! no backend. The repository layer (`core::repository`) reads the files and
//! supplies the context (directory name, version directories, GPU count).

pub mod autocomplete;
pub mod catalog;
pub mod diagnostic;
pub mod json;
mod lexer;
pub mod normalize;
pub mod pbtxt;
pub mod support;
pub mod validate;

use std::sync::LazyLock;

use prost_reflect::DescriptorPool;

/// Types generated from `proto/model_config.proto` (package `inference`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/config/inference.rs"));
}

pub use diagnostic::{Issue, Severity};
pub use pb::ModelConfig;
pub use pbtxt::{parse_config, ParseError, ParsedConfig, SourceMap};

/// The encoded descriptor set of every `.proto` in `proto/`.
pub static DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// The descriptor pool, decoded once.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
        DescriptorPool::decode(DESCRIPTOR_SET).expect("build.rs writes a valid descriptor set")
    });
    &POOL
}
