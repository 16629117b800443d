//! Network frontends over the one `Engine`: the KServe v2 HTTP/REST API
//! (`http`) and Triton's gRPC service (`grpc`), and the legacy TRTIS v1 API
//! beside each (`http::v1`, `grpc_v1`) on the same ports; the
//! OpenAI-compatible API (`openai`) on the HTTP port or its own. `answers`
//! is a request's responses as a stream, for the routes that stream over
//! HTTP. Each maps
//! `ErrorKind` to its protocol's status in one table. `tls` and `restrict`
//! are what both listeners may put in front: TLS, and Triton's restricted
//! APIs; `test_hooks` holds Triton's test-only environment hooks.

pub mod answers;
pub mod forward;
pub mod grpc;
pub mod grpc_v1;
pub mod http;
pub mod http_conn;
pub mod openai;
pub mod raw_heads;
pub mod restrict;
pub mod test_hooks;
pub mod tls;

use crate::core::error::{Error, Result};

/// The HTTP port's router: Triton's routes (`http`), with the OpenAI API's
/// (`openai`) unless it has a port of its own (`--openai-port`).
pub fn router(state: http::AppState, openai: bool) -> axum::Router {
    let extra = if openai {
        openai::routes()
    } else {
        axum::Router::new()
    };
    http::router_with(state, extra)
}
use crate::core::repository::LoadOverride;

/// A load request's `config` and `file:` parameters as one override
/// (`None`: load from the repository). Files need a config, as in Triton.
fn load_override(
    name: &str,
    config: Option<String>,
    files: Vec<(String, Vec<u8>)>,
) -> Result<Option<LoadOverride>> {
    match config {
        Some(config) => Ok(Some(LoadOverride { config, files })),
        None if files.is_empty() => Ok(None),
        None => Err(Error::invalid_arg(format!(
            "failed to load '{name}', load parameters 'file:' need the 'config' parameter too"
        ))),
    }
}
