//! The legacy TRTIS v1 API (TRTIS 0.12 to 1.x, before Triton's KServe v2):
//! the generated messages and gRPC service (`pb`, from `proto/v1/`), the
//! request status every answer carries, the server status, and the
//! inference conversions (`infer`) and text/JSON renderings (`text`) both
//! v1 frontends use.

pub mod infer;
pub mod text;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::LazyLock;
use std::time::Duration;

use crate::core::engine::Engine;
use crate::core::error::{Error, ErrorKind, Result};
use crate::core::repository::ModelState;

/// Package `nvidia.inferenceserver`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/v1/nvidia.inferenceserver.rs"));
}

use pb::{RequestStatus, RequestStatusCode};

/// The v1 code of an engine error kind.
pub fn code_of(kind: ErrorKind) -> RequestStatusCode {
    match kind {
        ErrorKind::Unknown | ErrorKind::Cancelled => RequestStatusCode::Unknown,
        ErrorKind::Internal => RequestStatusCode::Internal,
        ErrorKind::NotFound => RequestStatusCode::NotFound,
        ErrorKind::InvalidArg => RequestStatusCode::InvalidArg,
        ErrorKind::Unavailable => RequestStatusCode::Unavailable,
        ErrorKind::Unsupported => RequestStatusCode::Unsupported,
        ErrorKind::AlreadyExists => RequestStatusCode::AlreadyExists,
    }
}

/// The server-side request ids of `RequestStatus` (one counter for HTTP
/// and gRPC, as TRTIS had).
static REQUEST_IDS: AtomicU64 = AtomicU64::new(0);

/// The status of one v1 request: SUCCESS or the error, with the server's
/// id and a new request id.
pub fn request_status(engine: &Engine, result: std::result::Result<(), &Error>) -> RequestStatus {
    let (code, msg) = match result {
        Ok(()) => (RequestStatusCode::Success, String::new()),
        Err(e) => (code_of(e.kind), e.message.clone()),
    };
    RequestStatus {
        code: code as i32,
        msg,
        server_id: engine.config().id.clone(),
        request_id: REQUEST_IDS.fetch_add(1, Relaxed) + 1,
    }
}

/// The v1 server's own request statistics (`ServerStatus`'s status,
/// health, model control, shared memory control and repository stats).
#[derive(Default)]
pub struct ApiStats {
    status: [AtomicU64; 2],
    health: [AtomicU64; 2],
    model_control: [AtomicU64; 2],
    shm_control: [AtomicU64; 2],
    repository: [AtomicU64; 2],
}

/// Which kind of v1 request `ApiStats::record` counts.
#[derive(Clone, Copy)]
pub enum Api {
    Status,
    Health,
    ModelControl,
    ShmControl,
    Repository,
}

/// The process's v1 request statistics.
pub static API_STATS: LazyLock<ApiStats> = LazyLock::new(ApiStats::default);

impl ApiStats {
    /// A successful request of `api` that took `took`.
    pub fn record(&self, api: Api, took: Duration) {
        let [count, ns] = match api {
            Api::Status => &self.status,
            Api::Health => &self.health,
            Api::ModelControl => &self.model_control,
            Api::ShmControl => &self.shm_control,
            Api::Repository => &self.repository,
        };
        count.fetch_add(1, Relaxed);
        ns.fetch_add(took.as_nanos() as u64, Relaxed);
    }
}

fn stat([count, ns]: &[AtomicU64; 2]) -> Option<pb::StatDuration> {
    Some(pb::StatDuration {
        count: count.load(Relaxed),
        total_time_ns: ns.load(Relaxed),
    })
}

fn duration((count, total_time_ns): (u64, u64)) -> Option<pb::StatDuration> {
    Some(pb::StatDuration {
        count,
        total_time_ns,
    })
}

fn ready_state(state: ModelState) -> pb::ModelReadyState {
    match state {
        ModelState::Loading => pb::ModelReadyState::ModelLoading,
        ModelState::Ready => pb::ModelReadyState::ModelReady,
        ModelState::Unloading => pb::ModelReadyState::ModelUnloading,
        ModelState::Unavailable => pb::ModelReadyState::ModelUnavailable,
    }
}

/// The server status: every model of the repository (or only `model`; an
/// unknown one is INVALID_ARG), each with its config as v1 describes it and
/// each version's readiness and statistics.
pub fn server_status(engine: &Engine, model: Option<&str>) -> Result<pb::ServerStatus> {
    let entries = engine.index(false)?;
    if let Some(m) = model {
        if !entries.iter().any(|e| e.name == m) {
            return Err(Error::invalid_arg(format!(
                "no status available for unknown model '{m}'"
            )));
        }
    }
    let mut status = pb::ServerStatus {
        id: engine.config().id.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_ns: engine.uptime().as_nanos() as u64,
        ready_state: if engine.draining() {
            pb::ServerReadyState::ServerExiting
        } else {
            pb::ServerReadyState::ServerReady
        } as i32,
        status_stats: Some(pb::StatusRequestStats {
            success: stat(&API_STATS.status),
        }),
        health_stats: Some(pb::HealthRequestStats {
            success: stat(&API_STATS.health),
        }),
        model_control_stats: Some(pb::ModelControlRequestStats {
            success: stat(&API_STATS.model_control),
        }),
        shm_control_stats: Some(pb::SharedMemoryControlRequestStats {
            success: stat(&API_STATS.shm_control),
        }),
        repository_stats: Some(pb::RepositoryRequestStats {
            success: stat(&API_STATS.repository),
        }),
        ..Default::default()
    };
    for entry in entries.iter().filter(|e| model.is_none_or(|m| m == e.name)) {
        let model_status = status
            .model_status
            .entry(entry.name.clone())
            .or_insert_with(|| pb::ModelStatus {
                config: Some(match engine.model(&entry.name, "") {
                    Ok(m) => infer::v1_config(&m.config),
                    // Not loaded: all that can be said is its name.
                    Err(_) => pb::ModelConfig {
                        name: entry.name.clone(),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            });
        let version = match entry.version.parse::<i64>() {
            Ok(v) => v,
            // Failed before any version was known (its config, say): v1
            // has no model-level state, so the failure is reported under
            // the version the default policy would load, its latest.
            Err(_) => match latest_version_dir(engine, &entry.name) {
                Some(v) => v,
                None => continue,
            },
        };
        let mut vs = pb::ModelVersionStatus {
            ready_state: ready_state(entry.state) as i32,
            ..Default::default()
        };
        if !entry.reason.is_empty() {
            vs.ready_state_reason = Some(pb::ModelReadyStateReason {
                message: entry.reason.clone(),
            });
        }
        if let Ok(m) = engine.model(&entry.name, &entry.version) {
            let s = m.stats.snapshot();
            vs.model_execution_count = s.execution_count;
            vs.model_inference_count = s.inference_count;
            vs.last_inference_timestamp_milliseconds = s.last_inference;
            for (size, b) in &s.request_batches {
                vs.infer_stats.insert(
                    *size,
                    pb::InferRequestStats {
                        success: duration(b.success),
                        compute: duration(b.compute),
                        queue: duration(b.queue),
                        failed: None,
                    },
                );
            }
            // trtis does not keep failures by batch size: all of them are
            // reported under batch size 1.
            if s.fail.0 > 0 {
                vs.infer_stats.entry(1).or_default().failed = duration(s.fail);
            }
        }
        model_status.version_status.insert(version, vs);
    }
    Ok(status)
}

/// The highest numbered version directory of a model in the repository.
fn latest_version_dir(engine: &Engine, name: &str) -> Option<i64> {
    let dirs = crate::core::repository::check::model_dirs(&engine.config().repositories(), name);
    crate::core::repository::layout::scan_model_dir(
        dirs.first()?,
        engine.config().model_config_name.as_deref(),
    )
    .ok()?
    .versions
    .keys()
    .next_back()
    .copied()
}

/// Every model of the repository, by name.
pub fn repository_index(engine: &Engine) -> Result<pb::ModelRepositoryIndex> {
    let mut names: Vec<String> = engine.index(false)?.into_iter().map(|e| e.name).collect();
    names.dedup();
    Ok(pb::ModelRepositoryIndex {
        models: names
            .into_iter()
            .map(|name| pb::model_repository_index::ModelEntry { name })
            .collect(),
    })
}

/// The registered system shared memory regions.
pub fn shm_regions(engine: &Engine) -> Result<Vec<pb::SharedMemoryRegion>> {
    let system = engine
        .shm_status(None)?
        .into_iter()
        .map(|r| pb::SharedMemoryRegion {
            name: r.name,
            byte_size: r.byte_size,
            shared_memory_types: Some(
                pb::shared_memory_region::SharedMemoryTypes::SystemSharedMemory(
                    pb::shared_memory_region::SystemSharedMemory {
                        shared_memory_key: r.key,
                        offset: r.offset,
                    },
                ),
            ),
        });
    let cuda = engine
        .cuda_shm_status(None)?
        .into_iter()
        .map(|r| pb::SharedMemoryRegion {
            name: r.name,
            byte_size: r.byte_size,
            shared_memory_types: Some(
                pb::shared_memory_region::SharedMemoryTypes::CudaSharedMemory(
                    pb::shared_memory_region::CudaSharedMemory {
                        device_id: r.device_id as i64,
                    },
                ),
            ),
        });
    Ok(system.chain(cuda).collect())
}

/// 0.12's profiling command: trtis has no CUDA profiler to start or stop.
pub fn profile(cmd: &str) -> Result<()> {
    match cmd {
        "start" | "stop" => Err(Error::unsupported(format!(
            "profile '{cmd}' is not supported: trtis runs no GPU and has no CUDA profiler"
        ))),
        _ => Err(Error::invalid_arg(format!(
            "unknown profile command '{cmd}', expected 'start' or 'stop'"
        ))),
    }
}
