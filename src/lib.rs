//! `trtis`: a Rust re-implementation of NVIDIA's TensorRT Inference Server
//! (Triton Inference Server).
//!
//! # Layout
//! - [`core`]: the engine of a Triton-compatible server: model configuration
//!   and repository, backends, instances, schedulers and the engine API
//!   (ARCHITECTURE.md has the layers).
//! - [`server`]: the wire: the KServe v2 HTTP and gRPC frontends, TRTIS's
//!   v1 API, the OpenAI-compatible API, the wire formats and the Prometheus
//!   renderer, all on top of the engine.
//! - [`client`]: an async client for Triton-protocol servers (HTTP and gRPC).
//! - [`perf`]: the load generator behind `trtis perf`.
//!
//! The `trtis` binary (`src/main.rs`, `src/cmd/`) is the only place that knows
//! about command-line parsing, stdout formatting and exit codes.

pub mod client;
pub mod core;
pub mod perf;
pub mod server;
