//! Wire formats. Only this module and the frontends know them: the KServe v2
//! JSON + binary tensor extension (`kserve_json`), the `generate` extension
//! (`generate`), the JSON form of
//! `ModelConfig` as Triton emits it (`config_json`), gRPC (`grpc_convert`,
//! `pb`), and the legacy TRTIS v1 API (`v1`). Engine types stay free of
//! serialization.

pub mod config_json;
pub mod generate;
pub mod grpc_convert;
pub mod kserve_json;
pub mod pb;
pub mod v1;
