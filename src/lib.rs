//! `trtis`: a Rust re-implementation of NVIDIA's TensorRT Inference Server
//! (Triton Inference Server).
//!
//! # Layout
//! - [`core`]: the engine of a Triton-compatible server: model configuration
//!   and repository, backends, instances, schedulers, the engine API, and the
//!   KServe v2 HTTP and gRPC frontends (ARCHITECTURE.md has the layers).
//! - [`client`]: an async client for Triton-protocol servers (HTTP and gRPC).
//! - [`perf`]: the load generator behind `trtis perf`.
//!
//! The `trtis` binary (`src/main.rs`, `src/cmd/`) is the only place that knows
//! about command-line parsing, stdout formatting and exit codes.

pub mod client;
pub mod core;
pub mod perf;
