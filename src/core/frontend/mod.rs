//! Network frontends over the one `Engine`: the KServe v2 HTTP/REST API
//! (`http`) and Triton's gRPC service (`grpc`). Each maps `ErrorKind` to its
//! protocol's status in one table.

pub mod grpc;
pub mod http;
