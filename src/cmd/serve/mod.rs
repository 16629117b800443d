//! `trtis serve`: loads a Triton model repository and serves it over the
//! KServe v2 HTTP/REST API and Triton's gRPC service (and Prometheus
//! metrics), with Triton's flag names and defaults. Every
//! flag can also be set from a `TRTIS_` environment variable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use trtis::core::frontend::forward::HeaderForward;
use trtis::core::frontend::grpc::GrpcService;
use trtis::core::frontend::http::AppState;
use trtis::core::frontend::restrict::{GrpcRestrictLayer, Restrictions};
use trtis::core::frontend::tls::{TlsFiles, TlsListener};
use trtis::core::repository::ControlMode;
use trtis::core::{Engine, ServerConfig};

mod flags;
pub use flags::Args;
use flags::Mode;

use trtis::core::logging::log;

/// The items of `list` once each, in the order they first come (a
/// repository or model named twice is one: Triton keeps sets).
fn unique<T: Clone + PartialEq>(list: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in list {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

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
    if let Err(why) = args.check() {
        log('E', &why);
        return ExitCode::from(2);
    }
    if let Some(name) = &args.model_config_name {
        trtis::core::repository::layout::set_config_name(name);
    }
    if let Some(cc) = args.min_supported_compute_capability {
        trtis::core::device::set_min_compute_capability(cc);
    }
    // The GPUs, before anything places a model.
    match trtis::core::device::restrict_gpus(&args.gpus) {
        Ok(ids) if !ids.is_empty() && !args.model_load_gpu_limit.is_empty() => {
            log(
                'E',
                "--model-load-gpu-limit: trtis does not hold model loads to a GPU memory limit yet; leave the flag out (loads fail with the backend's out-of-memory error instead)",
            );
            return ExitCode::from(2);
        }
        Ok(ids) => log_gpus(ids),
        Err(e) => {
            log('E', &format!("error: creating server: {e}"));
            return ExitCode::from(2);
        }
    }
    for note in args.notes() {
        log('I', &note);
    }
    // A repository in object storage is mirrored into a local directory
    // first, and served from there.
    let mut remote = Vec::new();
    let mut stores = Vec::new();
    for location in &unique(&args.model_store) {
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
    config.namespacing = args.model_namespacing;
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
    config.load_models = unique(&args.load_model);
    config.strict_readiness = args.strict_readiness;
    config.id = args.id.clone();
    config.allow_client_shm = args.allow_client_shm;
    config.load_threads = args.model_load_thread_count as usize;
    config.load_retries = args.model_load_retry_count;
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
    let mut max_batch_size = None;
    // Later settings win, as in Triton.
    for setting in &args.backend_config {
        match backend_setting(setting) {
            Ok(BackendSetting::StubTimeout(timeout)) => config.stub_timeout = Some(timeout),
            Ok(BackendSetting::DefaultMaxBatchSize(n)) => max_batch_size = Some(n),
            Ok(BackendSetting::Note(note)) => log('I', &note),
            Err(why) => {
                log('E', &why);
                return ExitCode::from(2);
            }
        }
    }
    if let Some(n) = max_batch_size {
        trtis::core::config::autocomplete::set_default_max_batch_size(n);
    }
    config.rate_limit = match trtis::core::rate_limit::RateLimitSettings::from_flags(
        &args.rate_limit.to_ascii_lowercase(),
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
    // GPU and CPU metrics are off whenever metrics are (as Triton).
    config.metrics = match trtis::core::metrics_settings::MetricsSettings::from_flags(
        &args.metrics_config,
        args.allow_metrics && args.allow_cpu_metrics,
        args.allow_metrics && args.allow_gpu_metrics,
        args.metrics_interval_ms,
    ) {
        Ok(metrics) if args.allow_metrics => metrics,
        Ok(metrics) => metrics.unserved(),
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
                &if entry.version.is_empty() {
                    // The model as a whole failed (its config, its worker).
                    format!(
                        "model '{}': {} {}",
                        entry.name,
                        entry.state.name(),
                        entry.reason
                    )
                } else {
                    format!(
                        "model '{}' version {}: {} {}",
                        entry.name,
                        entry.version,
                        entry.state.name(),
                        entry.reason
                    )
                },
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
    // After a stop signal, --exit-timeout-secs bounds the whole shutdown:
    // unloading the models (a Python model's finalize, a worker stuck in
    // a request that never ends) gets what is left of it, at least a
    // second; past that the process exits (the Python workers die with it:
    // PR_SET_PDEATHSIG).
    let Some(deadline) = SHUTDOWN_DEADLINE.get().copied() else {
        engine.shutdown();
        return code;
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let unloading = engine.clone();
    let spawned = std::thread::Builder::new()
        .name("trtis-shutdown".into())
        .spawn(move || {
            unloading.shutdown();
            let _ = done_tx.send(());
        });
    let left = deadline
        .saturating_duration_since(std::time::Instant::now())
        .max(Duration::from_secs(1));
    if spawned.is_ok() && done_rx.recv_timeout(left).is_err() {
        log(
            'W',
            "models still unloading when --exit-timeout-secs ran out; exiting",
        );
        std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 });
    }
    // Work still running on the runtime (a request's blocking task stuck
    // in a model) gets the same bound, not the runtime's wait for it.
    let left = deadline
        .saturating_duration_since(std::time::Instant::now())
        .max(Duration::from_millis(100));
    runtime.shutdown_timeout(left);
    code
}

/// When the shutdown must be over (the stop signal plus
/// --exit-timeout-secs), set when the signal comes.
static SHUTDOWN_DEADLINE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// What the listeners put in front of the services: TLS and Triton's
/// restricted APIs, checked before any model loads.
struct Frontends {
    http_tls: Option<tokio_rustls::rustls::ServerConfig>,
    grpc_tls: Option<tonic::transport::ServerTlsConfig>,
    http_rules: Restrictions,
    grpc_rules: Restrictions,
    http_forward: Option<HeaderForward>,
    grpc_forward: Option<HeaderForward>,
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
        let forward = |pattern: &Option<String>, flag: &str| {
            pattern
                .as_deref()
                .map(|p| HeaderForward::new(p, flag))
                .transpose()
        };
        Ok(Frontends {
            http_forward: forward(
                &args.http_header_forward_pattern,
                "--http-header-forward-pattern",
            )?,
            grpc_forward: forward(
                &args.grpc_header_forward_pattern,
                "--grpc-header-forward-pattern",
            )?,
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

async fn bind(
    what: &str,
    address: &str,
    port: u16,
    reuse_port: bool,
) -> Result<tokio::net::TcpListener, ExitCode> {
    let addr = format!("{address}:{port}");
    match listen(&addr, reuse_port).await {
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

/// A listener on `addr` (`host:port`) with a backlog of 1024 connections
/// not yet accepted (a burst of clients is queued, not dropped), and
/// SO_REUSEPORT when asked (`--reuse-http-port`, `--reuse-grpc-port`): the
/// first address the host resolves to that binds.
async fn listen(addr: &str, reuse_port: bool) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        if reuse_port {
            socket.set_reuseport(true)?;
        }
        match socket.bind(a).and_then(|()| socket.listen(1024)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    }))
}

/// The largest HTTP/2 frame the gRPC server accepts (h2's default is 16 KB).
const GRPC_MAX_FRAME_SIZE: u32 = 4 << 20;
/// The gRPC server's initial HTTP/2 stream and connection windows.
const GRPC_WINDOW_SIZE: u32 = 8 << 20;

/// tonic's server with Triton's gRPC connection settings: keepalive pings
/// every --grpc-keepalive-time ms (0: none), unanswered after
/// --grpc-keepalive-timeout ms the connection closes; a connection older
/// than --grpc-max-connection-age ms is shut down gracefully (tonic), and
/// closed --grpc-max-connection-age-grace ms later.
fn grpc_connections(args: &Args) -> tonic::transport::Server {
    let ms = Duration::from_millis;
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(
            (args.grpc_keepalive_time > 0).then(|| ms(args.grpc_keepalive_time)),
        )
        .http2_keepalive_timeout(Some(ms(args.grpc_keepalive_timeout)));
    // Large frames and windows: a client may send a 600 KB image tensor as
    // one DATA frame instead of 37 of 16 KB, which the server reads in a
    // few syscalls instead of 75 (half the server CPU per request and 1.6x
    // the rate at concurrency 1 for such inputs, measured with
    // perf_analyzer). The windows let several such requests be in flight on
    // one connection, as gRPC C++'s dynamic windows do in Triton.
    builder = builder
        .max_frame_size(GRPC_MAX_FRAME_SIZE)
        .initial_stream_window_size(GRPC_WINDOW_SIZE)
        .initial_connection_window_size(GRPC_WINDOW_SIZE);
    if args.grpc_max_connection_age > 0 {
        builder = builder.max_connection_age(ms(args.grpc_max_connection_age));
        if args.grpc_max_connection_age_grace > 0 {
            builder = builder.max_connection_age_grace(ms(args.grpc_max_connection_age_grace));
        }
    }
    builder
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
        let listener = match bind(
            "GRPCInferenceService",
            &args.grpc_address,
            args.grpc_port,
            args.reuse_grpc_port,
        )
        .await
        {
            Ok(l) => l,
            Err(code) => return code,
        };
        let service = GrpcService::new(engine.clone())
            .with_max_input_size(args.grpc_max_input_size)
            .with_response_compression(
                args.grpc_infer_response_compression_level != flags::Compression::None,
            )
            .with_header_forward(front.grpc_forward.clone());
        let v1 = trtis::core::frontend::grpc_v1::GrpcV1Service::new(
            engine.clone(),
            args.grpc_max_input_size,
        );
        let shutdown = stopped(stop_rx.clone());
        let mut builder = grpc_connections(args);
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
        let delay = trtis::core::frontend::test_hooks::grpc_response_delay();
        if !delay.is_zero() {
            log(
                'W',
                &format!(
                    "{}: every non-inference gRPC response is delayed by {} s (a test hook)",
                    trtis::core::frontend::test_hooks::GRPC_RESPONSE_DELAY_VAR,
                    delay.as_secs()
                ),
            );
        }
        let delay = trtis::core::frontend::test_hooks::GrpcResponseDelayLayer(delay);
        services.push(tokio::spawn(async move {
            builder
                .layer(restrict)
                .layer(delay)
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
        let listener = match bind(
            "HTTPService",
            &args.http_address,
            args.http_port,
            args.reuse_http_port,
        )
        .await
        {
            Ok(l) => l,
            Err(code) => return code,
        };
        let state = AppState {
            engine: engine.clone(),
            max_input_size: args.http_max_input_size as usize,
        };
        let mut apps = vec![(
            listener,
            trtis::core::frontend::router(state.clone(), args.openai_port.is_none()),
        )];
        if let Some(port) = args.openai_port {
            // The OpenAI API on a port of its own, with the HTTP port's TLS,
            // restrictions, header forwarding and connection bounds.
            let listener = match bind("OpenAI API service", &args.http_address, port, false).await {
                Ok(l) => l,
                Err(code) => return code,
            };
            apps.push((listener, trtis::core::frontend::openai::router(state)));
        }
        for (listener, mut app) in apps {
            let forward = front.http_forward.clone().map(std::sync::Arc::new);
            if let Some(forward) = forward.clone() {
                app = app.layer(axum::Extension(forward));
            }
            if !front.http_rules.is_empty() {
                app = app.layer(axum::middleware::from_fn_with_state(
                    std::sync::Arc::new(front.http_rules.clone()),
                    trtis::core::frontend::restrict::http_check,
                ));
            }
            let shutdown = stopped(stop_rx.clone());
            // Slowloris bounds: a header must arrive in time, an idle
            // connection is closed (core::frontend::http_conn).
            let limits = trtis::core::frontend::http_conn::ConnLimits::from_secs(
                args.http_header_timeout_secs,
                args.http_idle_timeout_secs,
            );
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
                        trtis::core::frontend::http_conn::serve(
                            listener, app, limits, forward, shutdown,
                        )
                        .await;
                        Ok(())
                    }));
                }
                None => {
                    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                        let _ = tcp.set_nodelay(true);
                    });
                    services.push(tokio::spawn(async move {
                        trtis::core::frontend::http_conn::serve(
                            listener, app, limits, forward, shutdown,
                        )
                        .await;
                        Ok(())
                    }));
                }
            }
        }
    }
    if args.allow_metrics {
        let address = args
            .metrics_address
            .clone()
            .unwrap_or_else(|| args.http_address.clone());
        let listener = match bind("Metrics Service", &address, args.metrics_port, false).await {
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
    let deadline = Instant::now() + Duration::from_secs(args.exit_timeout_secs.max(0) as u64);
    let _ = SHUTDOWN_DEADLINE.set(deadline);
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
                args.exit_timeout_secs.max(0)
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

/// What one `--backend-config` does.
#[derive(Debug, PartialEq)]
enum BackendSetting {
    /// python,stub-timeout-seconds=N: how long a Python worker may take to
    /// start.
    StubTimeout(Duration),
    /// [onnxruntime,]default-max-batch-size=N: the max_batch_size
    /// auto-complete gives a model that batches.
    DefaultMaxBatchSize(i32),
    /// A setting with nothing to tune here: the line that says why.
    Note(String),
}

/// One `--backend-config=[BACKEND,]KEY=VALUE`, as Triton reads it: a
/// setting trtis honours, one with nothing to tune here (a note), or an
/// error in Triton's words.
fn backend_setting(setting: &str) -> Result<BackendSetting, String> {
    let shape = || {
        format!(
            "--backend-config option format is '<backend name>,<setting>=<value>'. Got {setting}"
        )
    };
    if setting.starts_with(',') {
        return Err(format!(
            "No backend specified. --backend-config option format is '<backend name>,<setting>=<value>'. Got {setting}"
        ));
    }
    // A global setting's value may hold commas: only a name before the
    // first '=' is a backend's.
    let (backend, rest) = match setting.split_once(',') {
        Some((b, rest)) if !b.contains('=') => (b, rest),
        _ => ("", setting),
    };
    let (key, value) = rest.split_once('=').ok_or_else(shape)?;
    if key.is_empty() || value.is_empty() {
        return Err(shape());
    }
    let positive = |what: &str| -> Result<u64, String> {
        value.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
            format!("--backend-config={setting}: '{value}' is not a positive {what}")
        })
    };
    Ok(match (backend, key) {
        ("python", "stub-timeout-seconds") => {
            BackendSetting::StubTimeout(Duration::from_secs(positive("number of seconds")?))
        }
        ("" | "onnxruntime", "default-max-batch-size") => {
            let n = positive("batch size")?;
            BackendSetting::DefaultMaxBatchSize(i32::try_from(n).map_err(|_| {
                format!("--backend-config={setting}: '{value}' is too large")
            })?)
        }
        (
            "python",
            "shm-default-byte-size"
            | "shm-growth-byte-size"
            | "shm-region-prefix-name"
            | "shm_message_queue_size"
            | "thread-pool-size",
        ) => BackendSetting::Note(format!(
            "--backend-config={setting}: trtis's Python workers exchange tensors over a socket and run BLS calls on the server's runtime, so there is nothing to tune"
        )),
        ("", _) => BackendSetting::Note(format!(
            "--backend-config={setting}: trtis reads no global backend setting '{key}' (it reads default-max-batch-size); not applied"
        )),
        (_, _) => BackendSetting::Note(format!(
            "--backend-config={setting}: trtis's {backend} backend reads no setting '{key}' (trtis reads python,stub-timeout-seconds and default-max-batch-size; model settings go in the model's config.pbtxt parameters); not applied"
        )),
    })
}
