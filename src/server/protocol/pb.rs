//! Generated gRPC types and service code: `inference` (Triton's
//! `GRPCInferenceService`, from `proto/grpc_service.proto`; its `ModelConfig`
//! is `core::config::pb::ModelConfig`) and `grpc.health.v1`.

/// Package `inference`.
#[allow(clippy::all, missing_docs)]
pub mod inference {
    include!(concat!(env!("OUT_DIR"), "/grpc/inference.rs"));
}

/// Package `grpc.health.v1`.
#[allow(clippy::all, missing_docs)]
pub mod health {
    include!(concat!(env!("OUT_DIR"), "/grpc/grpc.health.v1.rs"));
}
