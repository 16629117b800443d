//! `trtis serve`: loads a Triton model repository and serves it over the
//! KServe v2 HTTP/REST API and Triton's gRPC service (and Prometheus
//! metrics), with Triton's flag names and defaults. Every
//! flag can also be set from a `TRTIS_` environment variable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use trtis::core::repository::ControlMode;
use trtis::core::{Engine, ServerConfig};
use trtis::server::frontend::forward::HeaderForward;
use trtis::server::frontend::grpc::GrpcService;
use trtis::server::frontend::http::AppState;
use trtis::server::frontend::restrict::{GrpcRestrictLayer, Restrictions};
use trtis::server::frontend::tls::{TlsFiles, TlsListener};

mod answers;
mod backend_config;
mod flags;
mod listen;
use backend_config::{backend_setting, BackendSetting};
pub use flags::Args;
use flags::Mode;
use listen::{grpc_connections, listen};

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
fn log_gpus(used: &[i32], min_cc: (i32, i32)) {
    let found = trtis::core::device::discovery();
    if let Some(why) = &found.none_because {
        log('I', &format!("no GPU: {why}"));
    }
    for g in &found.gpus {
        let note = if used.contains(&g.id) {
            String::new()
        } else if !g.usable(min_cc) {
            format!(
                " (not used: compute capability below {}.{})",
                min_cc.0, min_cc.1
            )
        } else {
            " (not used: --gpus)".to_string()
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
    match start(args) {
        Ok(code) => code,
        Err(Exit(code, why)) => {
            log('E', &why);
            ExitCode::from(code)
        }
    }
}

/// Why the server stops before it serves: the exit code and the error it
/// logs (2: the command line or a setting, 1: creating the server).
struct Exit(u8, String);

impl Exit {
    fn new(code: u8, why: impl ToString) -> Exit {
        Exit(code, why.to_string())
    }
}

/// Starts the server and serves until it stops; the exit code.
fn start(args: Args) -> Result<ExitCode, Exit> {
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
        return Err(Exit::new(2, &e.message));
    }
    if let Err(why) = args.check() {
        return Err(Exit::new(2, &why));
    }
    let min_cc = args
        .min_supported_compute_capability
        .map(trtis::core::device::capability_from_flag)
        .unwrap_or(trtis::core::device::MIN_COMPUTE_CAPABILITY);
    // The GPUs, before anything places a model.
    match trtis::core::device::restrict_gpus(&args.gpus, min_cc) {
        Ok(ids) if !ids.is_empty() && !args.model_load_gpu_limit.is_empty() => {
            return Err(Exit::new(2, "--model-load-gpu-limit: trtis does not hold model loads to a GPU memory limit yet; leave the flag out (loads fail with the backend's out-of-memory error instead)"));
        }
        Ok(ids) => log_gpus(ids, min_cc),
        Err(e) => {
            return Err(Exit::new(2, format!("error: creating server: {e}")));
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
                return Err(Exit::new(1, format!("error: creating server: {e}")));
            }
        }
    }
    let mut config = ServerConfig::new(&stores[0]);
    config.min_compute_capability = min_cc;
    config.model_config_name = args.model_config_name.clone();
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
        return Err(Exit::new(
            2,
            "--load-model requires --model-control-mode=explicit",
        ));
    }
    if args.load_model.iter().any(|m| m == "*") && args.load_model.len() > 1 {
        return Err(Exit::new(2, "--load-model=* must be the only --load-model"));
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
            return Err(Exit::new(2, &e.message));
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
                return Err(Exit::new(2, &why));
            }
        }
    }
    if let Some(n) = max_batch_size {
        config.default_max_batch_size = n;
    }
    config.rate_limit = match trtis::core::rate_limit::RateLimitSettings::from_flags(
        &args.rate_limit.to_ascii_lowercase(),
        &args.rate_limit_resource,
    ) {
        Ok(r) => r,
        Err(e) => {
            return Err(Exit::new(2, &e.message));
        }
    };
    config.trace = match trtis::core::trace::TraceSettings::from_config(&args.trace_settings()) {
        Ok(trace) => trace,
        Err(e) => {
            return Err(Exit::new(2, &e.message));
        }
    };
    // GPU and CPU metrics are off whenever metrics are (as Triton).
    config.metrics = match trtis::core::metrics::settings::MetricsSettings::from_flags(
        &args.metrics_config,
        args.allow_metrics && args.allow_cpu_metrics,
        args.allow_metrics && args.allow_gpu_metrics,
        args.metrics_interval_ms,
    ) {
        Ok(metrics) if args.allow_metrics => metrics,
        Ok(metrics) => metrics.unserved(),
        Err(e) => {
            return Err(Exit::new(2, &e.message));
        }
    };
    let front = match Frontends::from_args(&args) {
        Ok(f) => f,
        Err(why) => {
            return Err(Exit::new(2, &why));
        }
    };

    let (engine, errors) = match Engine::start(config) {
        Ok(started) => started,
        Err(e) => {
            return Err(Exit::new(1, format!("error: creating server: {e}")));
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
        return Ok(ExitCode::from(1));
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
            return Err(Exit::new(
                1,
                format!("failed to start the async runtime: {e}"),
            ));
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
        return Ok(code);
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
    Ok(code)
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

/// Binds the listener of `what` at `address:port` and logs where it
/// started (from here: the log line names this file, as Triton's names
/// its server); the exit code when it cannot.
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
        let v1 = trtis::server::frontend::grpc_v1::GrpcV1Service::new(
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
        let delay = trtis::server::frontend::test_hooks::grpc_response_delay();
        if !delay.is_zero() {
            log(
                'W',
                &format!(
                    "{}: every non-inference gRPC response is delayed by {} s (a test hook)",
                    trtis::server::frontend::test_hooks::GRPC_RESPONSE_DELAY_VAR,
                    delay.as_secs()
                ),
            );
        }
        let delay = trtis::server::frontend::test_hooks::GrpcResponseDelayLayer(delay);
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
            trtis::server::frontend::router(state.clone(), args.openai_port.is_none()),
        )];
        if let Some(port) = args.openai_port {
            // The OpenAI API on a port of its own, with the HTTP port's TLS,
            // restrictions, header forwarding and connection bounds.
            let listener = match bind("OpenAI API service", &args.http_address, port, false).await {
                Ok(l) => l,
                Err(code) => return code,
            };
            apps.push((listener, trtis::server::frontend::openai::router(state)));
        }
        for (listener, mut app) in apps {
            let forward = front.http_forward.clone().map(std::sync::Arc::new);
            if let Some(forward) = forward.clone() {
                app = app.layer(axum::Extension(forward));
            }
            if !front.http_rules.is_empty() {
                app = app.layer(axum::middleware::from_fn_with_state(
                    std::sync::Arc::new(front.http_rules.clone()),
                    trtis::server::frontend::restrict::http_check,
                ));
            }
            let shutdown = stopped(stop_rx.clone());
            // Slowloris bounds: a header must arrive in time, an idle
            // connection is closed (server::frontend::http_conn).
            let limits = trtis::server::frontend::http_conn::ConnLimits::from_secs(
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
                        trtis::server::frontend::http_conn::serve(
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
                        trtis::server::frontend::http_conn::serve(
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
        let app = trtis::server::frontend::http::metrics_router(engine.clone());
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
