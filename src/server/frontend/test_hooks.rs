//! Triton's test-only hooks in the frontends, read from the environment as
//! Triton reads them, so Triton's own QA tests run against this server
//! unchanged. Not for production: they only slow the server down.
//!
//! - `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N`: every gRPC call except
//!   inference (`ModelInfer`, `ModelStreamInfer`) is answered N seconds
//!   after it was handled (Triton's `CommonHandler` sleeps before it writes
//!   the response), so a client's deadline can expire on health, metadata,
//!   repository, statistics, shared-memory, trace and logging calls. The
//!   call's effect (a model load, a region registered) happens at once; a
//!   call whose deadline comes first is answered DEADLINE_EXCEEDED just
//!   before it, as a gRPC C++ client sees such a call end.

use std::task::{Context, Poll};
use std::time::Duration;

/// The variable Triton's gRPC server reads at start.
pub const GRPC_RESPONSE_DELAY_VAR: &str = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC";

/// The delay `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC` asks for (0:
/// none).
pub fn grpc_response_delay() -> Duration {
    Duration::from_secs(crate::core::types::hooks::env_count(
        GRPC_RESPONSE_DELAY_VAR,
    ))
}

/// How long before a call's deadline a delayed answer gives up.
const DEADLINE_MARGIN: Duration = Duration::from_millis(5);

/// A `grpc-timeout` header's value (gRPC over HTTP/2: up to 8 digits and
/// a unit, `H`, `M`, `S`, `m`, `u` or `n`).
fn grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Whether a gRPC path is one of the calls Triton delays (all but
/// inference).
fn delayed(path: &str) -> bool {
    !matches!(
        path,
        "/inference.GRPCInferenceService/ModelInfer"
            | "/inference.GRPCInferenceService/ModelStreamInfer"
    )
}

/// A tower layer on tonic's server that holds back the answers of the
/// non-inference calls by `delay` (nothing when zero).
#[derive(Clone)]
pub struct GrpcResponseDelayLayer(pub Duration);

impl<S> tower::Layer<S> for GrpcResponseDelayLayer {
    type Service = GrpcResponseDelay<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcResponseDelay {
            inner,
            delay: self.0,
        }
    }
}

#[derive(Clone)]
pub struct GrpcResponseDelay<S> {
    inner: S,
    delay: Duration,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<axum::http::Request<B>> for GrpcResponseDelay<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<RB>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let delay = if delayed(request.uri().path()) {
            self.delay
        } else {
            Duration::ZERO
        };
        // A delay that outlasts the call's deadline: answered just before
        // the deadline as gRPC C++ ends such a call, DEADLINE_EXCEEDED (at
        // the deadline itself tonic would answer CANCELLED "Timeout
        // expired", a race with the client's own timer).
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout)
            .filter(|t| *t <= delay);
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await;
            if let Some(t) = deadline {
                tokio::time::sleep(t.saturating_sub(DEADLINE_MARGIN)).await;
                return Ok(tonic::Status::deadline_exceeded("Deadline Exceeded").into_http());
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_with_their_units() {
        assert_eq!(grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout("99999u"), Some(Duration::from_micros(99999)));
        for bad in ["", "m", "10x", "-1S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_inference_is_not_delayed() {
        assert!(!delayed("/inference.GRPCInferenceService/ModelInfer"));
        assert!(!delayed("/inference.GRPCInferenceService/ModelStreamInfer"));
        assert!(delayed("/inference.GRPCInferenceService/ServerLive"));
        assert!(delayed(
            "/inference.GRPCInferenceService/RepositoryModelLoad"
        ));
        assert!(delayed("/grpc.health.v1.Health/Check"));
    }
}
