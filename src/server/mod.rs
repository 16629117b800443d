//! The wire, on top of the engine ([`crate::core`], which never names this
//! module): the frontends that listen ([`frontend`]: KServe v2 HTTP and
//! gRPC, TRTIS's v1 API, the OpenAI-compatible API, TLS and the
//! per-protocol restrictions), the wire formats they and the client share
//! ([`protocol`]) and the Prometheus renderer for `/metrics`
//! ([`prometheus`]).

pub mod frontend;
pub mod prometheus;
pub mod protocol;
