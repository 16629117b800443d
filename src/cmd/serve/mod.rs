//! `trtis serve`: loads a Triton model repository and serves it over the
//! KServe v2 HTTP/REST API and Triton's gRPC service (and Prometheus
//! metrics), with Triton's flag names and defaults. Every
//! flag can also be set from a `TRTIS_` environment variable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use trtis::core::frontend::grpc::GrpcService;
use trtis::core::frontend::http::{router, AppState};
use trtis::core::frontend::restrict::{GrpcRestrictLayer, Restrictions};
use trtis::core::frontend::tls::{TlsFiles, TlsListener};
use trtis::core::repository::ControlMode;
use trtis::core::{Engine, ServerConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Load every model at start; no load/unload API.
    None,
    /// Load every model at start, then rescan the repository every
    /// --repository-poll-secs: new, changed and removed models.
    Poll,
    /// Load only --load-model models at start; the API loads and unloads.
    Explicit,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model repository to serve (Triton's --model-repository): a
    /// directory, or s3://, gs://, as:// object storage. Repeatable: the
    /// repositories are served together; a model name may be in only one.
    #[arg(
        long = "model-store",
        visible_alias = "model-repository",
        env = "TRTIS_MODEL_STORE",
        value_name = "DIR|URL",
        required = true
    )]
    model_store: Vec<PathBuf>,

    /// Serve HTTP/REST.
    #[arg(long, env = "TRTIS_ALLOW_HTTP", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    allow_http: bool,

    /// Address of the HTTP service.
    #[arg(long, env = "TRTIS_HTTP_ADDRESS", default_value = "0.0.0.0")]
    http_address: String,

    /// Port of the HTTP service (0: any free port, printed at start).
    #[arg(long, env = "TRTIS_HTTP_PORT", default_value_t = 8000)]
    http_port: u16,

    /// Serve gRPC (Triton's GRPCInferenceService and grpc.health.v1).
    #[arg(long, env = "TRTIS_ALLOW_GRPC", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    allow_grpc: bool,

    /// Address of the gRPC service.
    #[arg(long, env = "TRTIS_GRPC_ADDRESS", default_value = "0.0.0.0")]
    grpc_address: String,

    /// Port of the gRPC service (0: any free port, printed at start).
    #[arg(long, env = "TRTIS_GRPC_PORT", default_value_t = 8001)]
    grpc_port: u16,

    /// gRPC over TLS (Triton's flag): needs --grpc-server-cert and
    /// --grpc-server-key.
    #[arg(long, env = "TRTIS_GRPC_USE_SSL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    grpc_use_ssl: bool,

    /// gRPC over mutual TLS: clients must present a certificate that
    /// chains to --grpc-root-cert (implies --grpc-use-ssl).
    #[arg(long, env = "TRTIS_GRPC_USE_SSL_MUTUAL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    grpc_use_ssl_mutual: bool,

    /// The gRPC server's certificate chain (PEM).
    #[arg(long, env = "TRTIS_GRPC_SERVER_CERT", value_name = "FILE")]
    grpc_server_cert: Option<PathBuf>,

    /// The gRPC server's private key (PEM).
    #[arg(long, env = "TRTIS_GRPC_SERVER_KEY", value_name = "FILE")]
    grpc_server_key: Option<PathBuf>,

    /// The root certificate(s) client certificates must chain to (PEM;
    /// with --grpc-use-ssl-mutual).
    #[arg(long, env = "TRTIS_GRPC_ROOT_CERT", value_name = "FILE")]
    grpc_root_cert: Option<PathBuf>,

    /// Restrict gRPC API groups to clients sending the metadata
    /// `triton-grpc-protocol-<key>: <value>` (Triton's flag; repeatable):
    /// <apis>:<key>=<value>, apis among health, metadata, inference,
    /// shared-memory, model-config, model-repository, statistics, trace,
    /// logging (comma-separated).
    #[arg(long = "grpc-restricted-protocol", value_name = "APIS:KEY=VALUE")]
    grpc_restricted_protocol: Vec<String>,

    /// HTTPS on the HTTP port (our equivalent of Triton's gRPC flags; the
    /// metrics port stays plain HTTP): needs --http-server-cert and
    /// --http-server-key.
    #[arg(long, env = "TRTIS_HTTP_USE_SSL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    http_use_ssl: bool,

    /// HTTPS with client certificates that chain to --http-root-cert
    /// (implies --http-use-ssl).
    #[arg(long, env = "TRTIS_HTTP_USE_SSL_MUTUAL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    http_use_ssl_mutual: bool,

    /// The HTTPS server's certificate chain (PEM).
    #[arg(long, env = "TRTIS_HTTP_SERVER_CERT", value_name = "FILE")]
    http_server_cert: Option<PathBuf>,

    /// The HTTPS server's private key (PEM).
    #[arg(long, env = "TRTIS_HTTP_SERVER_KEY", value_name = "FILE")]
    http_server_key: Option<PathBuf>,

    /// The root certificate(s) HTTPS client certificates must chain to
    /// (PEM; with --http-use-ssl-mutual).
    #[arg(long, env = "TRTIS_HTTP_ROOT_CERT", value_name = "FILE")]
    http_root_cert: Option<PathBuf>,

    /// Restrict HTTP API groups to requests with the header `<key>: <value>`
    /// (Triton's flag; repeatable): <apis>:<key>=<value>, apis as for
    /// --grpc-restricted-protocol.
    #[arg(long = "http-restricted-api", value_name = "APIS:KEY=VALUE")]
    http_restricted_api: Vec<String>,

    /// Serve Prometheus metrics (`/metrics`).
    #[arg(long, env = "TRTIS_ALLOW_METRICS", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    allow_metrics: bool,

    /// Address of the metrics service (default: the HTTP address).
    #[arg(long, env = "TRTIS_METRICS_ADDRESS")]
    metrics_address: Option<String>,

    /// Port of the metrics service (0: any free port, printed at start).
    #[arg(long, env = "TRTIS_METRICS_PORT", default_value_t = 8002)]
    metrics_port: u16,

    /// Threads serving HTTP (the async runtime's workers). Default: half the
    /// cores, at least 1; the other half runs model instances. On 2 cores one
    /// thread measured fastest and leanest (scripts/bench.sh serve).
    #[arg(long, env = "TRTIS_HTTP_THREAD_COUNT")]
    http_thread_count: Option<usize>,

    /// The largest HTTP request body, in bytes.
    #[arg(long, env = "TRTIS_HTTP_MAX_INPUT_SIZE", default_value_t = 64 * 1024 * 1024)]
    http_max_input_size: usize,

    /// The largest gRPC request message, in bytes: a message that declares
    /// more is refused (OUT_OF_RANGE) before it is read.
    #[arg(long, env = "TRTIS_GRPC_MAX_INPUT_SIZE", default_value_t = trtis::core::frontend::grpc::DEFAULT_MAX_INPUT_SIZE)]
    grpc_max_input_size: usize,

    /// none: load everything at start; poll: and rescan the repository;
    /// explicit: only --load-model, then the repository API loads and
    /// unloads.
    #[arg(long, env = "TRTIS_MODEL_CONTROL_MODE", value_enum, default_value_t = Mode::None)]
    model_control_mode: Mode,

    /// Seconds between repository scans in poll mode.
    #[arg(long, env = "TRTIS_REPOSITORY_POLL_SECS", default_value_t = 15)]
    repository_poll_secs: u64,

    /// A model to load at start in explicit mode (repeatable; `*` = all).
    #[arg(long = "load-model", env = "TRTIS_LOAD_MODEL", value_delimiter = ',')]
    load_model: Vec<String>,

    /// Ready only when every model is ready (false: ready when the server is).
    #[arg(long, env = "TRTIS_STRICT_READINESS", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    strict_readiness: bool,

    /// Exit when a model fails to load at start.
    #[arg(long, env = "TRTIS_EXIT_ON_ERROR", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    exit_on_error: bool,

    /// On SIGINT/SIGTERM, how long requests in flight may take to finish.
    #[arg(long, env = "TRTIS_EXIT_TIMEOUT_SECS", default_value_t = 30)]
    exit_timeout_secs: u64,

    /// The Python interpreter that runs Python models (`backend: "python"`;
    /// it needs numpy). Default: the project's .venv/bin/python3 when there
    /// is one, else python3 on PATH. A model's EXECUTION_ENV_PATH wins.
    #[arg(long, env = "TRTIS_PYTHON")]
    python: Option<PathBuf>,

    /// A backend setting, as Triton's --backend-config=BACKEND,KEY=VALUE:
    /// python,stub-timeout-seconds=N (how long a Python worker may take to
    /// start; 30 by default) is read; Triton's python shm-* and
    /// thread-pool-size settings are accepted and have nothing to tune here.
    #[arg(long = "backend-config", value_name = "BACKEND,KEY=VALUE")]
    backend_config: Vec<String>,

    /// Use config.pbtxt files exactly as written: no completion of inputs,
    /// outputs or batching from the model file.
    #[arg(long, env = "TRTIS_DISABLE_AUTO_COMPLETE_CONFIG")]
    disable_auto_complete_config: bool,

    /// Deprecated alias: --strict-model-config=true is
    /// --disable-auto-complete-config.
    #[arg(long, env = "TRTIS_STRICT_MODEL_CONFIG", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    strict_model_config: bool,

    /// Let clients register system shared memory regions (Triton's
    /// --allow-client-shm; off by default, as in Triton).
    #[arg(long, env = "TRTIS_ALLOW_CLIENT_SHM", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    allow_client_shm: bool,

    /// The server id reported by server metadata.
    #[arg(long, env = "TRTIS_ID", default_value = "triton")]
    id: String,

    /// The GPUs KIND_GPU instances may be placed on: `all` (every GPU the
    /// CUDA driver shows, after CUDA_VISIBLE_DEVICES, of compute capability
    /// 6.0 or more), `none`, or CUDA ids such as `0,1` (not renumbered).
    #[arg(
        long,
        env = "TRTIS_GPUS",
        default_value = "all",
        value_name = "all|none|IDS"
    )]
    gpus: trtis::core::device::GpuSelection,

    /// Verbose logging level (0: off; 1 and up print `V` lines).
    #[arg(long, env = "TRTIS_LOG_VERBOSE", default_value_t = 0)]
    log_verbose: u32,

    /// Print INFO (`I`) log lines.
    #[arg(long, env = "TRTIS_LOG_INFO", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    log_info: bool,

    /// Print WARNING (`W`) log lines.
    #[arg(long, env = "TRTIS_LOG_WARNING", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    log_warning: bool,

    /// Print ERROR (`E`) log lines.
    #[arg(long, env = "TRTIS_LOG_ERROR", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    log_error: bool,

    /// Log line format: default (`I1123 20:14:05.123456 <pid> file:line]
    /// message`) or ISO8601 (`2024-11-23T20:14:05Z I <pid> file:line]
    /// message`); times in UTC.
    #[arg(long, env = "TRTIS_LOG_FORMAT", default_value = "default", value_parser = ["default", "ISO8601"])]
    log_format: String,

    /// Append log lines to this file (created if missing) instead of
    /// printing them on stderr. Only settable here: the logging API refuses
    /// to change it.
    #[arg(long, env = "TRTIS_LOG_FILE", value_name = "FILE")]
    log_file: Option<String>,

    /// Tracing, as Triton's `[<mode>,]<setting>=<value>` (repeatable):
    /// `triton,file=FILE`, `level=OFF|TIMESTAMPS|TENSORS`, `rate=N`,
    /// `count=N`, `log-frequency=N`. The trace file can only be set here:
    /// the trace API refuses to change it.
    #[arg(
        long = "trace-config",
        env = "TRTIS_TRACE_CONFIG",
        value_name = "SETTING",
        value_delimiter = ';'
    )]
    trace_config: Vec<String>,

    /// The response cache, as Triton's `<cache>,<key>=<value>`: `local,size=BYTES`
    /// (repeatable). Models with `response_cache { enable: true }` answer
    /// repeated requests from it.
    #[arg(
        long = "cache-config",
        env = "TRTIS_CACHE_CONFIG",
        value_name = "CACHE,KEY=VALUE"
    )]
    cache_config: Vec<String>,

    /// Rate limiting: `off` (Triton's default: instance groups'
    /// `rate_limiter` settings are not applied) or `execution_count` (an
    /// instance runs only when its resources are free).
    #[arg(
        long,
        env = "TRTIS_RATE_LIMIT",
        default_value = "off",
        value_name = "MODE"
    )]
    rate_limit: String,

    /// A rate limiter resource's count, `NAME:COUNT[:DEVICE]` (repeatable;
    /// default: the largest count any instance asks for).
    #[arg(long, value_name = "NAME:COUNT[:DEVICE]")]
    rate_limit_resource: Vec<String>,

    /// Deprecated: --cache-config local,size=BYTES.
    #[arg(long, value_name = "BYTES")]
    response_cache_byte_size: Option<u64>,

    /// Deprecated: --trace-config triton,file=FILE.
    #[arg(long, value_name = "FILE")]
    trace_file: Option<String>,

    /// Deprecated: --trace-config level=LEVEL (repeatable).
    #[arg(long, value_name = "LEVEL")]
    trace_level: Vec<String>,

    /// Deprecated: --trace-config rate=N.
    #[arg(long, value_name = "N")]
    trace_rate: Option<String>,

    /// Deprecated: --trace-config count=N.
    #[arg(long, value_name = "N")]
    trace_count: Option<String>,

    /// Deprecated: --trace-config log-frequency=N.
    #[arg(long, value_name = "N")]
    trace_log_frequency: Option<String>,
}

impl Args {
    /// Every trace setting given, the deprecated flags first (as
    /// `--trace-config` values), so `--trace-config` wins.
    fn trace_settings(&self) -> Vec<String> {
        let mut values: Vec<String> = Vec::new();
        values.extend(self.trace_file.iter().map(|v| format!("file={v}")));
        values.extend(self.trace_level.iter().map(|v| format!("level={v}")));
        values.extend(self.trace_rate.iter().map(|v| format!("rate={v}")));
        values.extend(self.trace_count.iter().map(|v| format!("count={v}")));
        values.extend(
            self.trace_log_frequency
                .iter()
                .map(|v| format!("log-frequency={v}")),
        );
        values.extend(self.trace_config.iter().cloned());
        values
    }
}

use trtis::core::logging::log;

/// One line per GPU found (and whether this server uses it), or why there
/// is none.
fn log_gpus(used: &[i32]) {
    let found = trtis::core::device::discovery();
    if let Some(why) = &found.none_because {
        log('I', &format!("no GPU: {why}"));
    }
    for g in &found.gpus {
        let note = if used.contains(&g.id) {
            ""
        } else if !g.usable() {
            " (not used: compute capability below 6.0)"
        } else {
            " (not used: --gpus)"
        };
        log(
            'I',
            &format!(
                "GPU {}: {}, {:.1} GiB, compute capability {}.{}, {}{note}",
                g.id,
                g.name,
                g.memory_total as f64 / (1u64 << 30) as f64,
                g.compute_capability.0,
                g.compute_capability.1,
                g.uuid
            ),
        );
    }
}

pub fn run(args: Args) -> ExitCode {
    let started = Instant::now();
    let logging = trtis::core::logging::Options {
        info: args.log_info,
        warning: args.log_warning,
        error: args.log_error,
        verbose: args.log_verbose,
        format: trtis::core::logging::Format::parse(&args.log_format).unwrap_or_default(),
        file: args.log_file.clone(),
    };
    if let Err(e) = trtis::core::logging::init(&logging) {
        log('E', &e.message);
        return ExitCode::from(2);
    }
    // The GPUs, before anything places a model.
    match trtis::core::device::restrict_gpus(&args.gpus) {
        Ok(ids) => log_gpus(ids),
        Err(e) => {
            log('E', &format!("error: creating server: {e}"));
            return ExitCode::from(2);
        }
    }
    // A repository in object storage is mirrored into a local directory
    // first, and served from there.
    let mut remote = Vec::new();
    let mut stores = Vec::new();
    for location in &args.model_store {
        match super::remote_repo::mirror(location) {
            Ok(Some(r)) => {
                stores.push(r.local_dir().to_path_buf());
                remote.push(r);
            }
            Ok(None) => stores.push(location.clone()),
            Err(e) => {
                log('E', &format!("error: creating server: {e}"));
                return ExitCode::from(1);
            }
        }
    }
    let mut config = ServerConfig::new(&stores[0]);
    config.extra_repositories = stores[1..].to_vec();
    if !remote.is_empty() {
        config.remotes = Some(std::sync::Arc::new(trtis::core::remote::Remotes::new(
            remote,
        )));
    }
    config.control_mode = match args.model_control_mode {
        Mode::None => ControlMode::None,
        Mode::Poll => ControlMode::Poll,
        Mode::Explicit => ControlMode::Explicit,
    };
    if config.control_mode != ControlMode::Explicit && !args.load_model.is_empty() {
        log('E', "--load-model requires --model-control-mode=explicit");
        return ExitCode::from(2);
    }
    if args.load_model.iter().any(|m| m == "*") && args.load_model.len() > 1 {
        log('E', "--load-model=* must be the only --load-model");
        return ExitCode::from(2);
    }
    config.load_models = args.load_model.clone();
    config.strict_readiness = args.strict_readiness;
    config.id = args.id.clone();
    config.allow_client_shm = args.allow_client_shm;
    config.auto_complete = !(args.disable_auto_complete_config || args.strict_model_config);
    let mut cache_flags: Vec<String> = args
        .response_cache_byte_size
        .iter()
        .map(|n| format!("local,size={n}"))
        .collect();
    cache_flags.extend(args.cache_config.iter().cloned());
    config.cache = match trtis::core::cache::CacheSettings::from_flags(&cache_flags) {
        Ok(cache) => cache,
        Err(e) => {
            log('E', &e.message);
            return ExitCode::from(2);
        }
    };
    config.python = args.python.clone();
    for setting in &args.backend_config {
        match backend_setting(setting) {
            Ok(Some(timeout)) => config.stub_timeout = Some(timeout),
            Ok(None) => {}
            Err(why) => {
                log('E', &format!("--backend-config={setting}: {why}"));
                return ExitCode::from(2);
            }
        }
    }
    config.rate_limit = match trtis::core::rate_limit::RateLimitSettings::from_flags(
        &args.rate_limit,
        &args.rate_limit_resource,
    ) {
        Ok(r) => r,
        Err(e) => {
            log('E', &e.message);
            return ExitCode::from(2);
        }
    };
    config.trace = match trtis::core::trace::TraceSettings::from_config(&args.trace_settings()) {
        Ok(trace) => trace,
        Err(e) => {
            log('E', &e.message);
            return ExitCode::from(2);
        }
    };
    let front = match Frontends::from_args(&args) {
        Ok(f) => f,
        Err(why) => {
            log('E', &why);
            return ExitCode::from(2);
        }
    };

    let (engine, errors) = match Engine::start(config) {
        Ok(started) => started,
        Err(e) => {
            log('E', &format!("error: creating server: {e}"));
            return ExitCode::from(1);
        }
    };
    for e in &errors {
        log('E', &e.message);
    }
    for entry in engine.index(false).unwrap_or_default() {
        if args.log_verbose > 0 || !entry.reason.is_empty() {
            log(
                'I',
                &format!(
                    "model '{}' version {}: {} {}",
                    entry.name,
                    entry.version,
                    entry.state.name(),
                    entry.reason
                ),
            );
        }
    }
    if !errors.is_empty() && args.exit_on_error {
        log(
            'E',
            "error: creating server: Internal - failed to load all models",
        );
        engine.shutdown();
        return ExitCode::from(1);
    }

    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let workers = args.http_thread_count.unwrap_or((cores / 2).max(1)).max(1);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("trtis-rt")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log('E', &format!("failed to start the async runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    engine.attach_runtime(runtime.handle().clone());
    let code = runtime.block_on(serve(engine.clone(), &args, front, started));
    engine.shutdown();
    code
}

/// What the listeners put in front of the services: TLS and Triton's
/// restricted APIs, checked before any model loads.
struct Frontends {
    http_tls: Option<tokio_rustls::rustls::ServerConfig>,
    grpc_tls: Option<tonic::transport::ServerTlsConfig>,
    http_rules: Restrictions,
    grpc_rules: Restrictions,
}

impl Frontends {
    fn from_args(args: &Args) -> Result<Frontends, String> {
        let files = |proto: &str,
                     on: bool,
                     mutual: bool,
                     cert: &Option<PathBuf>,
                     key: &Option<PathBuf>,
                     root: &Option<PathBuf>|
         -> Result<Option<TlsFiles>, String> {
            if !on && !mutual {
                let given = [
                    ("server-cert", cert),
                    ("server-key", key),
                    ("root-cert", root),
                ];
                if let Some((flag, _)) = given.iter().find(|(_, v)| v.is_some()) {
                    return Err(format!(
                        "--{proto}-{flag} is given but TLS is off: add --{proto}-use-ssl (or --{proto}-use-ssl-mutual)"
                    ));
                }
                return Ok(None);
            }
            let (Some(cert), Some(key)) = (cert, key) else {
                return Err(format!(
                    "--{proto}-use-ssl needs --{proto}-server-cert and --{proto}-server-key"
                ));
            };
            if mutual && root.is_none() {
                return Err(format!(
                    "--{proto}-use-ssl-mutual needs --{proto}-root-cert (the roots client certificates must chain to)"
                ));
            }
            if !mutual && root.is_some() {
                return Err(format!(
                    "--{proto}-root-cert checks client certificates: it needs --{proto}-use-ssl-mutual"
                ));
            }
            Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_roots: if mutual { root.clone() } else { None },
            }))
        };
        let http = files(
            "http",
            args.http_use_ssl,
            args.http_use_ssl_mutual,
            &args.http_server_cert,
            &args.http_server_key,
            &args.http_root_cert,
        )?;
        let grpc = files(
            "grpc",
            args.grpc_use_ssl,
            args.grpc_use_ssl_mutual,
            &args.grpc_server_cert,
            &args.grpc_server_key,
            &args.grpc_root_cert,
        )?;
        let http_tls = http
            .map(|f| {
                f.server_config()
                    .map_err(|e| format!("HTTPS: {}", e.message))
            })
            .transpose()?;
        let grpc_tls = match grpc {
            None => None,
            Some(f) => {
                // The same checks as HTTPS (a clear error at start, not at
                // the first handshake), then tonic's own configuration.
                f.server_config()
                    .map_err(|e| format!("gRPC TLS: {}", e.message))?;
                let pem = f.pem().map_err(|e| e.message)?;
                let mut tls = tonic::transport::ServerTlsConfig::new()
                    .identity(tonic::transport::Identity::from_pem(pem.cert, pem.key));
                if let Some(roots) = pem.client_roots {
                    tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(roots));
                }
                Some(tls)
            }
        };
        Ok(Frontends {
            http_tls,
            grpc_tls,
            http_rules: Restrictions::parse(&args.http_restricted_api, "--http-restricted-api")?,
            grpc_rules: Restrictions::parse(
                &args.grpc_restricted_protocol,
                "--grpc-restricted-protocol",
            )?,
        })
    }
}

async fn bind(what: &str, address: &str, port: u16) -> Result<tokio::net::TcpListener, ExitCode> {
    let addr = format!("{address}:{port}");
    match tokio::net::TcpListener::bind(&addr).await {
        Ok(listener) => {
            let local = listener.local_addr().map(|a| a.to_string()).unwrap_or(addr);
            log('I', &format!("Started {what} at {local}"));
            Ok(listener)
        }
        Err(e) => {
            log('E', &format!("failed to start {what} at {addr}: {e}"));
            Err(ExitCode::from(1))
        }
    }
}

async fn serve(engine: Engine, args: &Args, front: Frontends, started: Instant) -> ExitCode {
    // Listen for signals before announcing any listener, so a SIGINT right
    // after start is a graceful stop, not the default kill.
    let signal = match shutdown_signal() {
        Ok(signal) => signal,
        Err(e) => {
            log('E', &format!("failed to install signal handlers: {e}"));
            return ExitCode::from(1);
        }
    };
    if !args.allow_http && !args.allow_grpc {
        log(
            'E',
            "no frontend is enabled (--allow-http=false, --allow-grpc=false); nothing to serve",
        );
        return ExitCode::from(2);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let mut services = Vec::new();
    if args.allow_grpc {
        let listener = match bind("GRPCInferenceService", &args.grpc_address, args.grpc_port).await
        {
            Ok(l) => l,
            Err(code) => return code,
        };
        let service =
            GrpcService::new(engine.clone()).with_max_input_size(args.grpc_max_input_size);
        let v1 = trtis::core::frontend::grpc_v1::GrpcV1Service::new(
            engine.clone(),
            args.grpc_max_input_size,
        );
        let shutdown = stopped(stop_rx.clone());
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = front.grpc_tls.clone() {
            builder = match builder.tls_config(tls) {
                Ok(b) => b,
                Err(e) => {
                    log('E', &format!("gRPC TLS: {e}"));
                    return ExitCode::from(2);
                }
            };
        }
        let restrict = GrpcRestrictLayer(std::sync::Arc::new(front.grpc_rules.clone()));
        services.push(tokio::spawn(async move {
            builder
                .layer(restrict)
                .add_service(service.inference())
                .add_service(service.health())
                .add_service(v1.server())
                .serve_with_incoming_shutdown(
                    // Answers go out at once, not held back by Nagle's
                    // algorithm waiting for the client's delayed ACK.
                    tokio_stream::StreamExt::map(
                        tokio_stream::wrappers::TcpListenerStream::new(listener),
                        |conn| {
                            conn.inspect(|tcp| {
                                let _ = tcp.set_nodelay(true);
                            })
                        },
                    ),
                    shutdown,
                )
                .await
                .map_err(|e| format!("gRPC service failed: {e}"))
        }));
    }
    if args.allow_http {
        let listener = match bind("HTTPService", &args.http_address, args.http_port).await {
            Ok(l) => l,
            Err(code) => return code,
        };
        let mut app = router(AppState {
            engine: engine.clone(),
            max_input_size: args.http_max_input_size,
        });
        if !front.http_rules.is_empty() {
            app = app.layer(axum::middleware::from_fn_with_state(
                std::sync::Arc::new(front.http_rules.clone()),
                trtis::core::frontend::restrict::http_check,
            ));
        }
        let shutdown = stopped(stop_rx.clone());
        match front.http_tls.clone() {
            Some(tls) => {
                let listener = match TlsListener::new(listener, tls) {
                    Ok(l) => l,
                    Err(e) => {
                        log('E', &format!("HTTPS: {e}"));
                        return ExitCode::from(1);
                    }
                };
                services.push(tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await
                        .map_err(|e| format!("HTTP service failed: {e}"))
                }));
            }
            None => {
                let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                services.push(tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await
                        .map_err(|e| format!("HTTP service failed: {e}"))
                }));
            }
        }
    }
    if args.allow_metrics {
        let address = args
            .metrics_address
            .clone()
            .unwrap_or_else(|| args.http_address.clone());
        let listener = match bind("Metrics Service", &address, args.metrics_port).await {
            Ok(l) => l,
            Err(code) => return code,
        };
        let app = trtis::core::frontend::http::metrics_router(engine.clone());
        let shutdown = stopped(stop_rx.clone());
        services.push(tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(|e| format!("metrics service failed: {e}"))
        }));
    }
    log(
        'I',
        &format!("ready in {:.3} s", started.elapsed().as_secs_f64()),
    );

    if engine.config().control_mode == ControlMode::Poll {
        let poller = engine.clone();
        let every = Duration::from_secs(args.repository_poll_secs.max(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                for e in poller.poll().await {
                    log('E', &e.message);
                }
            }
        });
    }
    signal.await;
    log('I', "shutting down: waiting for requests in flight");
    let deadline = Instant::now() + Duration::from_secs(args.exit_timeout_secs);
    // The drain. The listeners stay open throughout, so every request
    // already sent (even one still in a socket buffer or the accept backlog)
    // is read and answered rather than reset.
    // 1. Not ready, still serving: for up to ACCEPT_GRACE, new requests run
    //    too, until the server has been idle for QUIET.
    engine.begin_drain();
    let accept_until = (Instant::now() + ACCEPT_GRACE).min(deadline);
    wait_idle(&engine, accept_until).await;
    // 2. New requests are refused (UNAVAILABLE, Triton's message); those in
    //    flight run to the end, up to --exit-timeout-secs.
    engine.refuse_new();
    if !wait_idle(&engine, deadline).await {
        log(
            'W',
            &format!(
                "{} requests still in flight after {} s; exiting",
                engine.inflight(),
                args.exit_timeout_secs
            ),
        );
    }
    // 3. Close the listeners and idle connections; answers being written
    //    get a moment to go out.
    let _ = stop_tx.send(true);
    let closing = Instant::now() + CLOSE_GRACE;
    while !services.iter().all(|s| s.is_finished()) && Instant::now() < closing {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut code = ExitCode::SUCCESS;
    for service in services {
        if !service.is_finished() {
            service.abort();
            continue;
        }
        match service.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                log('E', &e);
                code = ExitCode::from(1);
            }
            Err(e) => {
                log('E', &format!("service task failed: {e}"));
                code = ExitCode::from(1);
            }
        }
    }
    code
}

/// How long, after a stop signal, new requests are still served (while the
/// server reports not ready), unless it goes idle sooner.
const ACCEPT_GRACE: Duration = Duration::from_secs(1);

/// How long no request must be in flight for the server to count as idle
/// (requests still in socket buffers arrive within it).
const QUIET: Duration = Duration::from_millis(100);

/// How long the listeners get to close their connections at the end.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Waits until no request has been in flight for `QUIET`, or `until`;
/// returns whether the server went idle.
async fn wait_idle(engine: &Engine, until: Instant) -> bool {
    let mut idle_since: Option<Instant> = None;
    loop {
        if engine.inflight() == 0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= QUIET {
                return true;
            }
        } else {
            idle_since = None;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A future that completes on SIGINT or SIGTERM; the handlers are in place
/// when this returns.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// One `--backend-config=BACKEND,KEY=VALUE`: the Python worker's start-up
/// timeout, or a setting with nothing to tune here (logged), or an error.
fn backend_setting(setting: &str) -> Result<Option<Duration>, String> {
    let (backend, rest) = setting
        .split_once(',')
        .ok_or("expected BACKEND,KEY=VALUE")?;
    let (key, value) = rest.split_once('=').ok_or("expected BACKEND,KEY=VALUE")?;
    match (backend, key) {
        ("python", "stub-timeout-seconds") => value
            .parse::<u64>()
            .ok()
            .filter(|&s| s > 0)
            .map(|s| Some(Duration::from_secs(s)))
            .ok_or_else(|| format!("'{value}' is not a positive number of seconds")),
        (
            "python",
            "shm-default-byte-size"
            | "shm-growth-byte-size"
            | "shm-region-prefix-name"
            | "shm_message_queue_size"
            | "thread-pool-size",
        ) => {
            log(
                'I',
                &format!(
                    "--backend-config={setting}: trtis's Python workers exchange tensors over a socket and run BLS calls on the server's runtime, so there is nothing to tune"
                ),
            );
            Ok(None)
        }
        _ => Err("not supported by trtis (it reads python,stub-timeout-seconds)".to_string()),
    }
}
