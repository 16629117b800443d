//! `trtis`: a Rust re-implementation of NVIDIA's TensorRT Inference Server
//! (Triton Inference Server).
//!
//! # Layout
//! - [`core`]: the model configuration, the model repository, and (as they
//!   land) the engine, schedulers, backends and protocol frontends.
//! - [`client`]: an async client for Triton-protocol servers (HTTP and gRPC).
//!
//! The `trtis` binary (`src/main.rs`, `src/cmd/`) is the only place that knows
//! about command-line parsing, stdout formatting and exit codes.

pub mod client;
pub mod core;
pub mod perf;
