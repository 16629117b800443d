//! Triton's restricted APIs: `--http-restricted-api=<apis>:<key>=<value>`
//! and `--grpc-restricted-protocol=<apis>:<key>=<value>` make the named
//! API groups (`health`, `metadata`, `inference`, `shared-memory`,
//! `model-config`, `model-repository`, `statistics`, `trace`, `logging`)
//! answer only requests that carry the header `<key>: <value>` (over gRPC
//! the metadata key `triton-grpc-protocol-<key>`). Anything else is refused
//! as Triton refuses it: HTTP 403 `{"error": "This API is restricted,
//! expecting header '<key>'"}`, gRPC UNAVAILABLE "This protocol is
//! restricted, expecting header 'triton-grpc-protocol-<key>'".
//!
//! Which group a route or gRPC method belongs to is decided here, in one
//! table per protocol; the legacy v1 routes and methods are mapped onto the
//! same groups (a v1 status, which reports configs and statistics, needs
//! the keys of `metadata`, `model-config` and `statistics`).

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// An API group that can be restricted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

impl Api {
    const ALL: [(&'static str, Api); 9] = [
        ("health", Api::Health),
        ("metadata", Api::Metadata),
        ("inference", Api::Inference),
        ("shared-memory", Api::SharedMemory),
        ("model-config", Api::ModelConfig),
        ("model-repository", Api::ModelRepository),
        ("statistics", Api::Statistics),
        ("trace", Api::Trace),
        ("logging", Api::Logging),
    ];
}

/// The restrictions of one protocol: each group at most once.
#[derive(Debug, Clone, Default)]
pub struct Restrictions {
    rules: Vec<(Api, String, String)>,
}

impl Restrictions {
    /// Parses the flag values (`<apis>:<key>=<value>`, apis separated by
    /// commas); `flag` names the flag in errors. An unknown group or one
    /// named twice is refused in Triton's words, which call a group an
    /// `api` on HTTP and a `protocol` on gRPC.
    pub fn parse(values: &[String], flag: &str) -> std::result::Result<Self, String> {
        let kind = if flag.contains("grpc") {
            "protocol"
        } else {
            "api"
        };
        let mut rules: Vec<(Api, String, String)> = Vec::new();
        for value in values {
            let (apis, pair) = value
                .split_once(':')
                .ok_or_else(|| format!("{flag} expects <apis>:<key>=<value>, got '{value}'"))?;
            let (key, val) = pair
                .split_once('=')
                .ok_or_else(|| format!("{flag} expects <apis>:<key>=<value>, got '{value}'"))?;
            if key.is_empty() {
                return Err(format!("{flag}: the header key is empty in '{value}'"));
            }
            if axum::http::HeaderName::from_bytes(key.as_bytes()).is_err() {
                return Err(format!(
                    "{flag}: '{key}' in '{value}' is not a valid header name"
                ));
            }
            for name in apis.split(',').map(str::trim) {
                let api = Api::ALL
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, a)| *a)
                    .ok_or_else(|| {
                        format!(
                            "unknown restricted {kind} '{name}' ({flag}: expected one of {})",
                            Api::ALL.map(|(n, _)| n).join(", ")
                        )
                    })?;
                if rules.iter().any(|(a, _, _)| *a == api) {
                    return Err(format!(
                        "restricted {kind} '{name}' can not be specified in multiple config groups ({flag})"
                    ));
                }
                rules.push((api, key.to_ascii_lowercase(), val.to_string()));
            }
        }
        Ok(Restrictions { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The header key a request to these groups lacks (or has with another
    /// value), if any; `prefix` goes before the key (gRPC's
    /// `triton-grpc-protocol-`).
    fn missing(&self, apis: &[Api], headers: &HeaderMap, prefix: &str) -> Option<String> {
        self.rules
            .iter()
            .filter(|(api, _, _)| apis.contains(api))
            .find(|(_, key, value)| {
                headers
                    .get(format!("{prefix}{key}"))
                    .and_then(|v| v.to_str().ok())
                    != Some(value.as_str())
            })
            .map(|(_, key, _)| format!("{prefix}{key}"))
    }
}

/// The groups of an HTTP path (v2 and v1 routes); none for a path that
/// matches no route (it answers 404 / 400 anyway).
pub fn http_apis(path: &str) -> &'static [Api] {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["v2", "health", ..] => &[Api::Health],
        ["v2"] | ["v2", "trtis", "devices"] => &[Api::Metadata],
        ["v2", "models", "stats"] => &[Api::Statistics],
        ["v2", "models", _, rest @ ..] => {
            let rest = match rest {
                ["versions", _, tail @ ..] => tail,
                tail => tail,
            };
            match rest {
                [] => &[Api::Metadata],
                ["ready"] => &[Api::Health],
                ["config"] => &[Api::ModelConfig],
                ["stats"] => &[Api::Statistics],
                ["infer" | "generate" | "generate_stream"] => &[Api::Inference],
                ["trace", "setting"] => &[Api::Trace],
                _ => &[],
            }
        }
        ["v2", "systemsharedmemory" | "cudasharedmemory", ..] => &[Api::SharedMemory],
        ["v2", "repository", ..] => &[Api::ModelRepository],
        ["v2", "trace", ..] => &[Api::Trace],
        ["v2", "logging"] => &[Api::Logging],
        // The OpenAI API, grouped as Triton's OpenAI frontend groups it.
        ["v1", "models", ..] => &[Api::ModelRepository],
        ["v1", "completions" | "chat" | "embeddings", ..] => &[Api::Inference],
        ["api", "health", ..] => &[Api::Health],
        ["api", "status", ..] => &[Api::Metadata, Api::ModelConfig, Api::Statistics],
        ["api", "infer", ..] => &[Api::Inference],
        ["api", "modelcontrol" | "repository", ..] => &[Api::ModelRepository],
        ["api", "sharedmemorycontrol", ..] => &[Api::SharedMemory],
        ["api", "profile"] => &[Api::Trace],
        _ => &[],
    }
}

/// The groups of a gRPC method (`/package.Service/Method`).
pub fn grpc_apis(path: &str) -> &'static [Api] {
    let method = path.rsplit('/').next().unwrap_or("");
    let service = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match (service, method) {
        ("grpc.health.v1.Health", _) => &[Api::Health],
        ("inference.GRPCInferenceService", m) => match m {
            "ServerLive" | "ServerReady" | "ModelReady" => &[Api::Health],
            "ServerMetadata" | "ModelMetadata" => &[Api::Metadata],
            "ModelInfer" | "ModelStreamInfer" => &[Api::Inference],
            "ModelConfig" => &[Api::ModelConfig],
            "ModelStatistics" => &[Api::Statistics],
            "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => {
                &[Api::ModelRepository]
            }
            m if m.contains("SharedMemory") => &[Api::SharedMemory],
            "TraceSetting" => &[Api::Trace],
            "LogSettings" => &[Api::Logging],
            _ => &[],
        },
        ("nvidia.inferenceserver.GRPCService", m) => match m {
            "Health" => &[Api::Health],
            "Status" => &[Api::Metadata, Api::ModelConfig, Api::Statistics],
            "Infer" | "StreamInfer" => &[Api::Inference],
            "ModelControl" | "Repository" => &[Api::ModelRepository],
            "SharedMemoryControl" => &[Api::SharedMemory],
            "Profile" => &[Api::Trace],
            _ => &[],
        },
        _ => &[],
    }
}

/// The HTTP middleware: a request to a restricted group without its header
/// is answered 403 and goes no further.
pub async fn http_check(
    axum::extract::State(rules): axum::extract::State<Arc<Restrictions>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = rules.missing(http_apis(request.uri().path()), request.headers(), "") {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({
                "error": format!("This API is restricted, expecting header '{key}'")
            })),
        )
            .into_response();
    }
    next.run(request).await
}

/// The gRPC check: a tower layer on tonic's server.
#[derive(Clone)]
pub struct GrpcRestrictLayer(pub Arc<Restrictions>);

impl<S> tower::Layer<S> for GrpcRestrictLayer {
    type Service = GrpcRestrict<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcRestrict {
            inner,
            rules: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct GrpcRestrict<S> {
    inner: S,
    rules: Arc<Restrictions>,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<axum::http::Request<B>> for GrpcRestrict<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<RB>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = axum::http::Response<RB>;
    type Error = S::Error;
    type Future = BoxFuture<std::result::Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let missing = self.rules.missing(
            grpc_apis(request.uri().path()),
            request.headers(),
            "triton-grpc-protocol-",
        );
        if let Some(key) = missing {
            let status = tonic::Status::unavailable(format!(
                "This protocol is restricted, expecting header '{key}'"
            ));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let future = self.inner.call(request);
        Box::pin(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_triton_flag_values() {
        let r = Restrictions::parse(
            &["model-repository,shared-memory:admin-key=secret".into()],
            "--http-restricted-api",
        )
        .unwrap();
        assert_eq!(r.rules.len(), 2);
        for bad in ["model-repository", "x:k=v", "health:=v", "health:k"] {
            assert!(
                Restrictions::parse(&[bad.into()], "--f").is_err(),
                "{bad} should be refused"
            );
        }
        // qa/L0_http and qa/L0_grpc grep the server's output for these.
        let twice = |flag| {
            Restrictions::parse(
                &[
                    "model-repository,health:k1=v1".into(),
                    "metadata,health:k2=v2".into(),
                ],
                flag,
            )
            .unwrap_err()
        };
        assert!(twice("--http-restricted-api")
            .starts_with("restricted api 'health' can not be specified in multiple config groups"));
        assert!(twice("--grpc-restricted-protocol").starts_with(
            "restricted protocol 'health' can not be specified in multiple config groups"
        ));
        let unknown =
            |flag| Restrictions::parse(&["model-reposit,health:k1=v1".into()], flag).unwrap_err();
        assert!(
            unknown("--http-restricted-api").starts_with("unknown restricted api 'model-reposit'")
        );
        assert!(unknown("--grpc-restricted-protocol")
            .starts_with("unknown restricted protocol 'model-reposit'"));
    }

    #[test]
    fn routes_and_methods_have_their_groups() {
        assert_eq!(
            http_apis("/v2/models/m/versions/1/infer"),
            &[Api::Inference]
        );
        assert_eq!(http_apis("/v2/models/m/ready"), &[Api::Health]);
        assert_eq!(http_apis("/v2/models/m/generate"), &[Api::Inference]);
        assert_eq!(
            http_apis("/v2/models/m/versions/2/generate_stream"),
            &[Api::Inference]
        );
        assert_eq!(http_apis("/v1/chat/completions"), &[Api::Inference]);
        assert_eq!(http_apis("/v1/embeddings"), &[Api::Inference]);
        assert_eq!(http_apis("/v1/models/m"), &[Api::ModelRepository]);
        assert_eq!(http_apis("/v2/models/m"), &[Api::Metadata]);
        assert_eq!(http_apis("/v2/models/stats"), &[Api::Statistics]);
        assert_eq!(http_apis("/v2/repository/index"), &[Api::ModelRepository]);
        assert_eq!(
            http_apis("/v2/systemsharedmemory/region/r/register"),
            &[Api::SharedMemory]
        );
        assert_eq!(
            http_apis("/api/sharedmemorycontrol/status"),
            &[Api::SharedMemory]
        );
        assert_eq!(
            grpc_apis("/inference.GRPCInferenceService/SystemSharedMemoryRegister"),
            &[Api::SharedMemory]
        );
        assert_eq!(
            grpc_apis("/inference.GRPCInferenceService/ModelStreamInfer"),
            &[Api::Inference]
        );
        assert_eq!(grpc_apis("/grpc.health.v1.Health/Check"), &[Api::Health]);
    }

    #[test]
    fn a_request_needs_the_exact_header() {
        let r = Restrictions::parse(&["inference:k=v".into()], "--f").unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(r.missing(&[Api::Inference], &h, ""), Some("k".into()));
        h.insert("k", "w".parse().unwrap());
        assert_eq!(r.missing(&[Api::Inference], &h, ""), Some("k".into()));
        h.insert("k", "v".parse().unwrap());
        assert_eq!(r.missing(&[Api::Inference], &h, ""), None);
        assert_eq!(r.missing(&[Api::Health], &HeaderMap::new(), ""), None);
    }
}
