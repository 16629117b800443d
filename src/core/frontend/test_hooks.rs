//! Triton's test-only hooks in the frontends, read from the environment as
//! Triton reads them, so Triton's own QA tests run against this server
//! unchanged. Not for production: they only slow the server down.
//!
//! - `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N`: every gRPC call except
//!   inference (`ModelInfer`, `ModelStreamInfer`) is answered N seconds
//!   after it was handled (Triton's `CommonHandler` sleeps before it writes
//!   the response), so a client's deadline can expire on health, metadata,
//!   repository, statistics, shared-memory, trace and logging calls. The
//!   call's effect (a model load, a region registered) happens at once.

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

impl<S, B> tower::Service<axum::http::Request<B>> for GrpcResponseDelay<S>
where
    S: tower::Service<axum::http::Request<B>> + Send,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
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
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await;
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
