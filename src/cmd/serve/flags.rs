//! `trtis serve`'s flags: every flag of `tritonserver` 2.51 to 2.71, grouped
//! as Triton's `--help` groups them, plus trtis's own (marked "trtis:").
//!
//! Triton's spellings work: `--flag=value` and `--flag value`, any
//! unambiguous prefix of a flag's name (clap's `infer_long_args`), booleans
//! as `true|on|1` / `false|off|0` in any case, and repeated flags as Triton
//! treats them. Each flag is honoured, or accepted with one `I` line saying
//! why there is nothing to do here ([`Args::notes`]), or refused at start
//! with the reason ([`Args::check`]). `docs/flags.md` lists them all;
//! `tests/fixtures/triton-flags.tsv` is Triton's list, walked by a test.
//! Every flag can also be set from a `TRTIS_` environment variable.

use std::path::PathBuf;

/// `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Load every model at start; no load/unload API.
    None,
    /// Load every model at start, then rescan the repository every
    /// --repository-poll-secs: new, changed and removed models.
    Poll,
    /// Load only --load-model models at start; the API loads and unloads.
    Explicit,
}

/// `--grpc-infer-response-compression-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    None,
    Low,
    Medium,
    High,
}

/// A boolean as Triton parses one: `true|on|1`, `false|off|0`, any case.
pub fn triton_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(format!(
            "invalid value for bool option: {value} (true, on, 1, false, off or 0)"
        )),
    }
}

/// `--log-verbose`: a level, or `true` (1) / `false` (0) as Triton takes.
fn verbose_level(value: &str) -> Result<u32, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(1),
        "false" => Ok(0),
        _ => value
            .parse::<u32>()
            .map_err(|_| format!("'{value}' is not a level (a number, true or false)")),
    }
}

/// A count of milliseconds or bytes that may not be negative.
fn non_negative(value: &str) -> Result<u64, String> {
    value
        .parse::<u64>()
        .map_err(|_| format!("'{value}' is not a whole number of 0 or more"))
}

/// `--metrics-interval-ms`: Triton advertises a float and reads an int;
/// both spellings are taken, fractions dropped.
fn interval_ms(value: &str) -> Result<u64, String> {
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 1.0 => Ok(v as u64),
        _ => Err(format!(
            "'{value}' is not a number of milliseconds of 1 or more"
        )),
    }
}

const SERVER: &str = "Server";
const LOGGING: &str = "Logging";
const REPOSITORY: &str = "Model repository";
const HTTP: &str = "HTTP";
const GRPC: &str = "GRPC";
const CLOUD: &str = "SageMaker and Vertex AI";
const METRICS: &str = "Metrics";
const TRACING: &str = "Tracing";
const BACKEND: &str = "Backend";
const CACHE: &str = "Cache";
const RATE_LIMIT: &str = "Rate limiter";
const MEMORY: &str = "Memory and device";

#[derive(Debug, clap::Args)]
pub struct Args {
    // ---------------------------------------------------------------- Server
    /// The server id reported by server metadata.
    #[arg(long, env = "TRTIS_ID", default_value = "triton", help_heading = SERVER)]
    pub id: String,

    /// On SIGINT/SIGTERM, how long requests in flight may take to finish
    /// (a negative value is 0, as in Triton).
    #[arg(long, env = "TRTIS_EXIT_TIMEOUT_SECS", default_value_t = 30, allow_negative_numbers = true, help_heading = SERVER)]
    pub exit_timeout_secs: i64,

    // --------------------------------------------------------------- Logging
    /// Verbose logging level (0: off; 1 and up print `V` lines; true is 1).
    #[arg(long, env = "TRTIS_LOG_VERBOSE", default_value = "0", value_parser = verbose_level, help_heading = LOGGING)]
    pub log_verbose: u32,

    /// Print INFO (`I`) log lines.
    #[arg(long, env = "TRTIS_LOG_INFO", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = LOGGING)]
    pub log_info: bool,

    /// Print WARNING (`W`) log lines.
    #[arg(long, env = "TRTIS_LOG_WARNING", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = LOGGING)]
    pub log_warning: bool,

    /// Print ERROR (`E`) log lines.
    #[arg(long, env = "TRTIS_LOG_ERROR", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = LOGGING)]
    pub log_error: bool,

    /// Log line format: default (`I1123 20:14:05.123456 <pid> file:line]
    /// message`) or ISO8601 (`2024-11-23T20:14:05Z I <pid> file:line]
    /// message`); times in UTC.
    #[arg(long, env = "TRTIS_LOG_FORMAT", default_value = "default", value_parser = ["default", "ISO8601"], help_heading = LOGGING)]
    pub log_format: String,

    /// Append log lines to this file (created if missing) instead of
    /// printing them on stderr. Only settable here: the logging API refuses
    /// to change it.
    #[arg(long, env = "TRTIS_LOG_FILE", value_name = "FILE", help_heading = LOGGING)]
    pub log_file: Option<String>,

    // ------------------------------------------------------ Model repository
    /// The model repository to serve (Triton's --model-repository): a
    /// directory, or s3://, gs://, as:// object storage. Repeatable: the
    /// repositories are served together; a model name may be in only one
    /// (unless --model-namespacing).
    #[arg(
        long = "model-store",
        visible_alias = "model-repository",
        env = "TRTIS_MODEL_STORE",
        value_name = "DIR|URL",
        required = true,
        help_heading = REPOSITORY
    )]
    pub model_store: Vec<PathBuf>,

    /// Exit when a model fails to load at start.
    #[arg(long, env = "TRTIS_EXIT_ON_ERROR", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = REPOSITORY)]
    pub exit_on_error: bool,

    /// Use config.pbtxt files exactly as written: no completion of inputs,
    /// outputs or batching from the model file.
    #[arg(long, env = "TRTIS_DISABLE_AUTO_COMPLETE_CONFIG", value_parser = triton_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", help_heading = REPOSITORY)]
    pub disable_auto_complete_config: bool,

    /// Deprecated alias: --strict-model-config=true is
    /// --disable-auto-complete-config.
    #[arg(long, env = "TRTIS_STRICT_MODEL_CONFIG", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = REPOSITORY)]
    pub strict_model_config: bool,

    /// Ready only when every model is ready (false: ready when the server is).
    #[arg(long, env = "TRTIS_STRICT_READINESS", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = REPOSITORY)]
    pub strict_readiness: bool,

    /// none: load everything at start; poll: and rescan the repository;
    /// explicit: only --load-model, then the repository API loads and
    /// unloads (any case).
    #[arg(long, env = "TRTIS_MODEL_CONTROL_MODE", value_enum, ignore_case = true, default_value_t = Mode::None, help_heading = REPOSITORY)]
    pub model_control_mode: Mode,

    /// Seconds between repository scans in poll mode.
    #[arg(long, env = "TRTIS_REPOSITORY_POLL_SECS", default_value_t = 15, help_heading = REPOSITORY)]
    pub repository_poll_secs: u64,

    /// A model to load at start in explicit mode (repeatable; `*` = all).
    #[arg(long = "load-model", env = "TRTIS_LOAD_MODEL", value_delimiter = ',', help_heading = REPOSITORY)]
    pub load_model: Vec<String>,

    /// Load each model's `configs/<NAME>.pbtxt` instead of its config.pbtxt
    /// (a model without that file keeps its config.pbtxt).
    #[arg(long, env = "TRTIS_MODEL_CONFIG_NAME", value_name = "NAME", help_heading = REPOSITORY)]
    pub model_config_name: Option<String>,

    /// How many models load at once: at start, on a poll and for an
    /// ensemble's steps (1: one after the other).
    #[arg(long, env = "TRTIS_MODEL_LOAD_THREAD_COUNT", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..), help_heading = REPOSITORY)]
    pub model_load_thread_count: u32,

    /// How many times a model whose load fails is loaded again before it
    /// counts as failed.
    #[arg(long, env = "TRTIS_MODEL_LOAD_RETRY_COUNT", default_value_t = 0, help_heading = REPOSITORY)]
    pub model_load_retry_count: u32,

    /// Let two repositories hold models of the same name: a name that one
    /// repository has is served as before, one that several have is
    /// ambiguous to clients and reached through the ensembles of its own
    /// repository; the models' metrics get a `namespace` label.
    #[arg(long, env = "TRTIS_MODEL_NAMESPACING", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = REPOSITORY)]
    pub model_namespacing: bool,

    /// CUDA peer access between GPUs (Triton's default true).
    #[arg(long, env = "TRTIS_ENABLE_PEER_ACCESS", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = REPOSITORY)]
    pub enable_peer_access: Option<bool>,

    // ------------------------------------------------------------------ HTTP
    /// Serve HTTP/REST.
    #[arg(long, env = "TRTIS_ALLOW_HTTP", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = HTTP)]
    pub allow_http: bool,

    /// Address of the HTTP service.
    #[arg(long, env = "TRTIS_HTTP_ADDRESS", default_value = "0.0.0.0", help_heading = HTTP)]
    pub http_address: String,

    /// Port of the HTTP service (0: any free port, printed at start).
    #[arg(long, env = "TRTIS_HTTP_PORT", default_value_t = 8000, help_heading = HTTP)]
    pub http_port: u16,

    /// trtis: serve the OpenAI-compatible API (`/v1/models`,
    /// `/v1/completions`, `/v1/chat/completions`, `/v1/embeddings`) on this
    /// port of --http-address instead of the HTTP port (Triton's OpenAI
    /// frontend uses 9000). Without it they are on the HTTP port.
    #[arg(long, env = "TRTIS_OPENAI_PORT", help_heading = HTTP)]
    pub openai_port: Option<u16>,

    /// Bind the HTTP port with SO_REUSEPORT, so several servers can share it.
    #[arg(long, env = "TRTIS_REUSE_HTTP_PORT", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = HTTP)]
    pub reuse_http_port: bool,

    /// Request headers whose names match this regex (any case) are passed to
    /// the model as string request parameters.
    #[arg(long, env = "TRTIS_HTTP_HEADER_FORWARD_PATTERN", value_name = "REGEX", help_heading = HTTP)]
    pub http_header_forward_pattern: Option<String>,

    /// Threads serving HTTP (the async runtime's workers, which serve gRPC
    /// too). Default: half the cores, at least 1; the other half runs model
    /// instances. On 2 cores one thread measured fastest and leanest
    /// (scripts/bench.sh serve).
    #[arg(long, env = "TRTIS_HTTP_THREAD_COUNT", help_heading = HTTP)]
    pub http_thread_count: Option<usize>,

    /// The largest HTTP request body, in bytes (also after decompression).
    #[arg(long, env = "TRTIS_HTTP_MAX_INPUT_SIZE", default_value_t = 64 * 1024 * 1024, allow_negative_numbers = true, help_heading = HTTP)]
    pub http_max_input_size: i64,

    /// Restrict HTTP API groups to requests with the header `<key>: <value>`
    /// (Triton's flag; repeatable): <apis>:<key>=<value>, apis as for
    /// --grpc-restricted-protocol.
    #[arg(long = "http-restricted-api", value_name = "APIS:KEY=VALUE", help_heading = HTTP)]
    pub http_restricted_api: Vec<String>,

    /// trtis: HTTPS on the HTTP port (the metrics port stays plain HTTP):
    /// needs --http-server-cert and --http-server-key.
    #[arg(long, env = "TRTIS_HTTP_USE_SSL", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = HTTP)]
    pub http_use_ssl: bool,

    /// trtis: HTTPS with client certificates that chain to
    /// --http-root-cert (implies --http-use-ssl).
    #[arg(long, env = "TRTIS_HTTP_USE_SSL_MUTUAL", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = HTTP)]
    pub http_use_ssl_mutual: bool,

    /// trtis: the HTTPS server's certificate chain (PEM).
    #[arg(long, env = "TRTIS_HTTP_SERVER_CERT", value_name = "FILE", help_heading = HTTP)]
    pub http_server_cert: Option<PathBuf>,

    /// trtis: the HTTPS server's private key (PEM).
    #[arg(long, env = "TRTIS_HTTP_SERVER_KEY", value_name = "FILE", help_heading = HTTP)]
    pub http_server_key: Option<PathBuf>,

    /// trtis: the root certificate(s) HTTPS client certificates must chain
    /// to (PEM; with --http-use-ssl-mutual).
    #[arg(long, env = "TRTIS_HTTP_ROOT_CERT", value_name = "FILE", help_heading = HTTP)]
    pub http_root_cert: Option<PathBuf>,

    /// trtis: seconds a connection may take to send a request's whole
    /// header (from its first byte, or from the end of the previous
    /// request); then it is closed. 0: no limit.
    #[arg(long, env = "TRTIS_HTTP_HEADER_TIMEOUT_SECS", default_value_t = 30, help_heading = HTTP)]
    pub http_header_timeout_secs: u64,

    /// trtis: seconds an idle keep-alive connection (or one that sends
    /// nothing after connecting) is kept open. 0: no limit.
    #[arg(long, env = "TRTIS_HTTP_IDLE_TIMEOUT_SECS", default_value_t = 120, help_heading = HTTP)]
    pub http_idle_timeout_secs: u64,

    // ------------------------------------------------------------------ GRPC
    /// Serve gRPC (Triton's GRPCInferenceService and grpc.health.v1).
    #[arg(long, env = "TRTIS_ALLOW_GRPC", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = GRPC)]
    pub allow_grpc: bool,

    /// Address of the gRPC service.
    #[arg(long, env = "TRTIS_GRPC_ADDRESS", default_value = "0.0.0.0", help_heading = GRPC)]
    pub grpc_address: String,

    /// Port of the gRPC service (0: any free port, printed at start).
    #[arg(long, env = "TRTIS_GRPC_PORT", default_value_t = 8001, help_heading = GRPC)]
    pub grpc_port: u16,

    /// Bind the gRPC port with SO_REUSEPORT, so several servers can share it.
    #[arg(long, env = "TRTIS_REUSE_GRPC_PORT", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = GRPC)]
    pub reuse_grpc_port: bool,

    /// Request metadata whose keys match this regex (any case) is passed to
    /// the model as string request parameters.
    #[arg(long, env = "TRTIS_GRPC_HEADER_FORWARD_PATTERN", value_name = "REGEX", help_heading = GRPC)]
    pub grpc_header_forward_pattern: Option<String>,

    /// Triton's gRPC handler threads (2 to 128): trtis serves gRPC on its
    /// async runtime (--http-thread-count).
    #[arg(long, env = "TRTIS_GRPC_INFER_THREAD_COUNT", value_parser = clap::value_parser!(u32).range(2..=128), help_heading = GRPC)]
    pub grpc_infer_thread_count: Option<u32>,

    /// Triton's pool of reusable gRPC request objects.
    #[arg(long, env = "TRTIS_GRPC_INFER_ALLOCATION_POOL_SIZE", allow_negative_numbers = true, help_heading = GRPC)]
    pub grpc_infer_allocation_pool_size: Option<i64>,

    /// Triton's cap on response objects alive per stream (more than 0).
    #[arg(long, env = "TRTIS_GRPC_MAX_RESPONSE_POOL_SIZE", value_parser = clap::value_parser!(i64).range(1..), allow_negative_numbers = true, help_heading = GRPC)]
    pub grpc_max_response_pool_size: Option<i64>,

    /// gRPC over TLS (Triton's flag): needs --grpc-server-cert and
    /// --grpc-server-key.
    #[arg(long, env = "TRTIS_GRPC_USE_SSL", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = GRPC)]
    pub grpc_use_ssl: bool,

    /// gRPC over mutual TLS: clients must present a certificate that
    /// chains to --grpc-root-cert (implies --grpc-use-ssl).
    #[arg(long, env = "TRTIS_GRPC_USE_SSL_MUTUAL", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = GRPC)]
    pub grpc_use_ssl_mutual: bool,

    /// The gRPC server's certificate chain (PEM).
    #[arg(long, env = "TRTIS_GRPC_SERVER_CERT", value_name = "FILE", help_heading = GRPC)]
    pub grpc_server_cert: Option<PathBuf>,

    /// The gRPC server's private key (PEM).
    #[arg(long, env = "TRTIS_GRPC_SERVER_KEY", value_name = "FILE", help_heading = GRPC)]
    pub grpc_server_key: Option<PathBuf>,

    /// The root certificate(s) client certificates must chain to (PEM;
    /// with --grpc-use-ssl-mutual).
    #[arg(long, env = "TRTIS_GRPC_ROOT_CERT", value_name = "FILE", help_heading = GRPC)]
    pub grpc_root_cert: Option<PathBuf>,

    /// Compress gRPC responses with gzip for clients that accept it (any
    /// case). low, medium and high all compress at gzip's default level 6:
    /// tonic sets no other. Compressed requests are read either way.
    #[arg(long, env = "TRTIS_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL", value_enum, ignore_case = true, default_value_t = Compression::None, help_heading = GRPC)]
    pub grpc_infer_response_compression_level: Compression,

    /// Milliseconds between the server's HTTP/2 keepalive pings.
    #[arg(long, env = "TRTIS_GRPC_KEEPALIVE_TIME", default_value = "7200000", value_parser = non_negative, value_name = "MS", help_heading = GRPC)]
    pub grpc_keepalive_time: u64,

    /// Milliseconds a keepalive ping may go unanswered before the
    /// connection is closed.
    #[arg(long, env = "TRTIS_GRPC_KEEPALIVE_TIMEOUT", default_value = "20000", value_parser = non_negative, value_name = "MS", help_heading = GRPC)]
    pub grpc_keepalive_timeout: u64,

    /// Triton's leave for clients to ping without calls in flight: trtis
    /// answers every client ping, with or without calls.
    #[arg(long, env = "TRTIS_GRPC_KEEPALIVE_PERMIT_WITHOUT_CALLS", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = GRPC)]
    pub grpc_keepalive_permit_without_calls: Option<bool>,

    /// Triton's cap on server pings without data in between.
    #[arg(long, env = "TRTIS_GRPC_HTTP2_MAX_PINGS_WITHOUT_DATA", allow_negative_numbers = true, help_heading = GRPC)]
    pub grpc_http2_max_pings_without_data: Option<i64>,

    /// Triton's least interval between client pings (ms) before a ping
    /// counts as a strike.
    #[arg(long, env = "TRTIS_GRPC_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA", allow_negative_numbers = true, value_name = "MS", help_heading = GRPC)]
    pub grpc_http2_min_recv_ping_interval_without_data: Option<i64>,

    /// Triton's bad pings tolerated before it sends GOAWAY.
    #[arg(long, env = "TRTIS_GRPC_HTTP2_MAX_PING_STRIKES", allow_negative_numbers = true, help_heading = GRPC)]
    pub grpc_http2_max_ping_strikes: Option<i64>,

    /// Milliseconds after which a connection is shut down gracefully (its
    /// calls may finish). 0: never.
    #[arg(long, env = "TRTIS_GRPC_MAX_CONNECTION_AGE", default_value = "0", value_parser = non_negative, value_name = "MS", help_heading = GRPC)]
    pub grpc_max_connection_age: u64,

    /// Milliseconds the calls of a connection past its age get to finish
    /// before it is closed. 0: as long as they take.
    #[arg(long, env = "TRTIS_GRPC_MAX_CONNECTION_AGE_GRACE", default_value = "0", value_parser = non_negative, value_name = "MS", help_heading = GRPC)]
    pub grpc_max_connection_age_grace: u64,

    /// Restrict gRPC API groups to clients sending the metadata
    /// `triton-grpc-protocol-<key>: <value>` (Triton's flag; repeatable):
    /// <apis>:<key>=<value>, apis among health, metadata, inference,
    /// shared-memory, model-config, model-repository, statistics, trace,
    /// logging (comma-separated).
    #[arg(long = "grpc-restricted-protocol", value_name = "APIS:KEY=VALUE", help_heading = GRPC)]
    pub grpc_restricted_protocol: Vec<String>,

    /// trtis: the largest gRPC request message, in bytes: a message that
    /// declares more is refused (OUT_OF_RANGE) before it is read.
    #[arg(long, env = "TRTIS_GRPC_MAX_INPUT_SIZE", default_value_t = trtis::server::frontend::grpc::DEFAULT_MAX_INPUT_SIZE, help_heading = GRPC)]
    pub grpc_max_input_size: usize,

    // ------------------------------------------------ SageMaker and Vertex AI
    /// Serve SageMaker's endpoint (not in trtis: refused when true).
    #[arg(long, env = "TRTIS_ALLOW_SAGEMAKER", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = CLOUD)]
    pub allow_sagemaker: bool,

    /// SageMaker's port (with --allow-sagemaker).
    #[arg(long, env = "TRTIS_SAGEMAKER_PORT", help_heading = CLOUD)]
    pub sagemaker_port: Option<u16>,

    /// SageMaker's port range for the other services, `LOW-HIGH`.
    #[arg(long, env = "TRTIS_SAGEMAKER_SAFE_PORT_RANGE", value_name = "LOW-HIGH", help_heading = CLOUD)]
    pub sagemaker_safe_port_range: Option<String>,

    /// SageMaker's threads.
    #[arg(long, env = "TRTIS_SAGEMAKER_THREAD_COUNT", help_heading = CLOUD)]
    pub sagemaker_thread_count: Option<u32>,

    /// Serve Vertex AI's endpoint (not in trtis: refused when true).
    #[arg(long, env = "TRTIS_ALLOW_VERTEX_AI", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = CLOUD)]
    pub allow_vertex_ai: bool,

    /// Vertex AI's port (with --allow-vertex-ai).
    #[arg(long, env = "TRTIS_VERTEX_AI_PORT", help_heading = CLOUD)]
    pub vertex_ai_port: Option<u16>,

    /// Vertex AI's threads.
    #[arg(long, env = "TRTIS_VERTEX_AI_THREAD_COUNT", help_heading = CLOUD)]
    pub vertex_ai_thread_count: Option<u32>,

    /// Vertex AI's model for requests that name none.
    #[arg(long, env = "TRTIS_VERTEX_AI_DEFAULT_MODEL", help_heading = CLOUD)]
    pub vertex_ai_default_model: Option<String>,

    // --------------------------------------------------------------- Metrics
    /// Serve Prometheus metrics (`/metrics`).
    #[arg(long, env = "TRTIS_ALLOW_METRICS", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = METRICS)]
    pub allow_metrics: bool,

    /// The `nv_gpu_*` metrics (with --allow-metrics).
    #[arg(long, env = "TRTIS_ALLOW_GPU_METRICS", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = METRICS)]
    pub allow_gpu_metrics: bool,

    /// The `nv_cpu_*` metrics (with --allow-metrics).
    #[arg(long, env = "TRTIS_ALLOW_CPU_METRICS", default_value = "true", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = METRICS)]
    pub allow_cpu_metrics: bool,

    /// Address of the metrics service (default: the HTTP address).
    #[arg(long, env = "TRTIS_METRICS_ADDRESS", help_heading = METRICS)]
    pub metrics_address: Option<String>,

    /// Port of the metrics service (0: any free port, printed at start).
    #[arg(long, env = "TRTIS_METRICS_PORT", default_value_t = 8002, help_heading = METRICS)]
    pub metrics_port: u16,

    /// Milliseconds between readings of the CPU and GPU metrics.
    #[arg(long, env = "TRTIS_METRICS_INTERVAL_MS", default_value = "2000", value_parser = interval_ms, value_name = "MS", help_heading = METRICS)]
    pub metrics_interval_ms: u64,

    /// A metrics setting, `<setting>=<value>` (repeatable):
    /// counter_latencies=true|false, summary_latencies=true|false,
    /// summary_quantiles=<q>:<error>,..., histogram_latencies=true|false.
    #[arg(long = "metrics-config", value_name = "SETTING=VALUE", help_heading = METRICS)]
    pub metrics_config: Vec<String>,

    // --------------------------------------------------------------- Tracing
    /// Tracing, as Triton's `[<mode>,]<setting>=<value>` (repeatable):
    /// `triton,file=FILE`, `level=OFF|TIMESTAMPS|TENSORS`, `rate=N`,
    /// `count=N`, `log-frequency=N`. The trace file can only be set here:
    /// the trace API refuses to change it.
    #[arg(
        long = "trace-config",
        env = "TRTIS_TRACE_CONFIG",
        value_name = "SETTING",
        value_delimiter = ';',
        help_heading = TRACING
    )]
    pub trace_config: Vec<String>,

    /// Deprecated: --trace-config triton,file=FILE.
    #[arg(long, value_name = "FILE", help_heading = TRACING)]
    pub trace_file: Option<String>,

    /// Deprecated: --trace-config level=LEVEL (repeatable).
    #[arg(long, value_name = "LEVEL", help_heading = TRACING)]
    pub trace_level: Vec<String>,

    /// Deprecated: --trace-config rate=N.
    #[arg(long, value_name = "N", help_heading = TRACING)]
    pub trace_rate: Option<String>,

    /// Deprecated: --trace-config count=N.
    #[arg(long, value_name = "N", allow_negative_numbers = true, help_heading = TRACING)]
    pub trace_count: Option<String>,

    /// Deprecated: --trace-config log-frequency=N.
    #[arg(long, value_name = "N", help_heading = TRACING)]
    pub trace_log_frequency: Option<String>,

    // --------------------------------------------------------------- Backend
    /// Where Triton looks for backend libraries: trtis's backends are built
    /// in.
    #[arg(long, env = "TRTIS_BACKEND_DIRECTORY", value_name = "DIR", help_heading = BACKEND)]
    pub backend_directory: Option<PathBuf>,

    /// A backend setting, as Triton's --backend-config=[BACKEND,]KEY=VALUE
    /// (repeatable; later wins, a backend's own over a global one):
    /// default-max-batch-size=N (global), python,stub-timeout-seconds=N
    /// are read; the others Triton's backends take are accepted with a
    /// line saying what trtis does instead.
    #[arg(long = "backend-config", value_name = "[BACKEND,]KEY=VALUE", help_heading = BACKEND)]
    pub backend_config: Vec<String>,

    /// Where Triton looks for repository agents: trtis has none.
    #[arg(long, env = "TRTIS_REPOAGENT_DIRECTORY", value_name = "DIR", help_heading = BACKEND)]
    pub repoagent_directory: Option<PathBuf>,

    /// trtis: the Python interpreter that runs Python models (`backend:
    /// "python"`; it needs numpy). Default: the project's .venv/bin/python3
    /// when there is one, else python3 on PATH. A model's
    /// EXECUTION_ENV_PATH wins.
    #[arg(long, env = "TRTIS_PYTHON", help_heading = BACKEND)]
    pub python: Option<PathBuf>,

    // ----------------------------------------------------------------- Cache
    /// The response cache, as Triton's `<cache>,<key>=<value>`:
    /// `local,size=BYTES` (repeatable). Models with `response_cache {
    /// enable: true }` answer repeated requests from it.
    #[arg(
        long = "cache-config",
        env = "TRTIS_CACHE_CONFIG",
        value_name = "CACHE,KEY=VALUE",
        help_heading = CACHE
    )]
    pub cache_config: Vec<String>,

    /// Where Triton looks for cache libraries: trtis's local cache is built
    /// in.
    #[arg(long, env = "TRTIS_CACHE_DIRECTORY", value_name = "DIR", help_heading = CACHE)]
    pub cache_directory: Option<PathBuf>,

    /// Deprecated: --cache-config local,size=BYTES.
    #[arg(long, value_name = "BYTES", help_heading = CACHE)]
    pub response_cache_byte_size: Option<u64>,

    // ---------------------------------------------------------- Rate limiter
    /// Rate limiting: `off` (Triton's default: instance groups'
    /// `rate_limiter` settings are not applied) or `execution_count` (an
    /// instance runs only when its resources are free); any case.
    #[arg(long, env = "TRTIS_RATE_LIMIT", default_value = "off", value_name = "MODE", help_heading = RATE_LIMIT)]
    pub rate_limit: String,

    /// A rate limiter resource's count, `NAME:COUNT[:DEVICE]` (repeatable;
    /// default: the largest count any instance asks for).
    #[arg(long, value_name = "NAME:COUNT[:DEVICE]", help_heading = RATE_LIMIT)]
    pub rate_limit_resource: Vec<String>,

    // ----------------------------------------------------- Memory and device
    /// Triton's pinned host memory pool, in bytes: trtis copies to a GPU
    /// from the request's own buffer.
    #[arg(long, env = "TRTIS_PINNED_MEMORY_POOL_BYTE_SIZE", allow_negative_numbers = true, value_name = "BYTES", help_heading = MEMORY)]
    pub pinned_memory_pool_byte_size: Option<i64>,

    /// Triton's CUDA memory pool per GPU, `<gpu>:<bytes>` (repeatable).
    #[arg(long, value_name = "GPU:BYTES", help_heading = MEMORY)]
    pub cuda_memory_pool_byte_size: Vec<String>,

    /// Triton's virtual address space per GPU for growable implicit state,
    /// `<gpu>:<bytes>` (repeatable).
    #[arg(long, value_name = "GPU:BYTES", help_heading = MEMORY)]
    pub cuda_virtual_address_size: Vec<String>,

    /// GPUs below this CUDA compute capability are not used (default 6.0).
    #[arg(long, env = "TRTIS_MIN_SUPPORTED_COMPUTE_CAPABILITY", value_name = "X.Y", help_heading = MEMORY)]
    pub min_supported_compute_capability: Option<f64>,

    /// Triton's buffer manager threads (unused in Triton since the backend
    /// split).
    #[arg(long, env = "TRTIS_BUFFER_MANAGER_THREAD_COUNT", allow_negative_numbers = true, help_heading = MEMORY)]
    pub buffer_manager_thread_count: Option<i64>,

    /// A host policy, `<name>,<setting>=<value>` with numa-node or
    /// cpu-cores (repeatable): refused, trtis does not pin instances.
    #[arg(long, value_name = "NAME,SETTING=VALUE", help_heading = MEMORY)]
    pub host_policy: Vec<String>,

    /// Refuse a GPU model's load while the GPU's memory use is above a
    /// fraction, `<gpu>:<fraction>` (repeatable; the first for a GPU wins).
    #[arg(long, value_name = "GPU:FRACTION", help_heading = MEMORY)]
    pub model_load_gpu_limit: Vec<String>,

    /// Let clients register system shared memory regions (Triton's
    /// --allow-client-shm; off by default, as in Triton 2.68).
    #[arg(long, env = "TRTIS_ALLOW_CLIENT_SHM", default_value = "false", value_parser = triton_bool, num_args = 0..=1, default_missing_value = "true", help_heading = MEMORY)]
    pub allow_client_shm: bool,

    /// trtis: the GPUs KIND_GPU instances may be placed on: `all` (every
    /// GPU the CUDA driver shows, after CUDA_VISIBLE_DEVICES, of compute
    /// capability 6.0 or more), `none`, or CUDA ids such as `0,1` (not
    /// renumbered).
    #[arg(
        long,
        env = "TRTIS_GPUS",
        default_value = "all",
        value_name = "all|none|IDS",
        help_heading = MEMORY
    )]
    pub gpus: trtis::core::device::GpuSelection,
}
