//! The Python backend: a Triton `model.py` (`class TritonPythonModel`)
//! run unchanged, one worker process per model instance, as Triton runs
//! one stub process per instance.
//!
//! The parts: `frame` (the wire format, pure), `worker` (the process, its
//! socket and the thread reading it), and this module, the instance: it
//! starts the worker with Triton's `initialize` arguments, hands it each
//! batch the scheduler formed as one `execute` frame (the requests kept
//! apart, as Triton hands `execute` a list), and stops it with `finalize`
//! at unload. The Python side (`worker.py`, `triton_python_backend_utils.py`)
//! ships inside the executable. The protocol is in `PROTOCOL.md` here.
//!
//! A worker that dies fails the requests it held (the reader thread sees to
//! that); the next batch starts a new worker, so the model stays served.
//! A request cancelled while the worker holds it (its `CancelToken` set:
//! the client went away) gets a `cancel` frame, which the model sees as
//! `is_cancelled()`.

mod env;
mod frame;
mod worker;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::{Instance, ListExec, LoadContext};
use crate::core::error::{Error, Result};
use crate::core::responder::BackendRequest;
use crate::core::types::SequenceId;
use frame::Frame;
use worker::{Launch, Worker};

/// Triton's default `stub-timeout-seconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One instance of a Python model.
pub struct PythonInstance {
    worker: Option<Worker>,
    /// The batches sent to the worker and not yet answered, oldest first
    /// (two at most: `core::instance` pipelines).
    sent: std::collections::VecDeque<SentBatch>,
    /// The worker died running the oldest batch: those behind it, which
    /// never began, go to a new worker.
    resend: bool,
    /// The `init` frame, kept to start a new worker after one died.
    init: Frame,
    python: PathBuf,
    env_dir: Option<PathBuf>,
    name: String,
    timeout: Duration,
    host: Option<std::sync::Arc<dyn super::Host>>,
}

impl PythonInstance {
    pub fn load(ctx: &LoadContext) -> Result<Self> {
        let config = ctx.config;
        let file = if config.default_model_filename.is_empty() {
            "model.py"
        } else {
            config.default_model_filename.as_str()
        };
        plain_file_name(file, &config.name)?;
        let model_file = ctx.version_dir.join(file);
        if !model_file.is_file() {
            return Err(Error::not_found(format!(
                "unable to find '{}' for model instance '{}'",
                model_file.display(),
                ctx.instance_name
            )));
        }
        let (python, env_dir) = interpreter(ctx)?;
        let (version, module) = module_name(&ctx.version_dir, file);
        let config_json = crate::core::config::json::to_json(config)?;
        let decoupled = config
            .model_transaction_policy
            .as_ref()
            .is_some_and(|p| p.decoupled);
        // A KIND_GPU instance is told its GPU, as Triton's Python backend
        // tells it; the model does its own GPU work (tensors cross in host
        // memory, as with Triton's default FORCE_CPU_ONLY_INPUT_TENSORS).
        // KIND_MODEL leaves the placement to the model, told MODEL as
        // Triton tells it; its tensors are on the host.
        let (kind, device_id) = match ctx.device {
            crate::core::device::Device::Gpu(id) => ("GPU", id),
            crate::core::device::Device::Model => ("MODEL", 0),
            crate::core::device::Device::Cpu => ("CPU", 0),
        };
        let init = Frame::new(json!({
            "kind": "init",
            "args": {
                "model_config": config_json.to_string(),
                "model_instance_kind": kind,
                "model_instance_name": ctx.instance_name,
                "model_instance_device_id": device_id.to_string(),
                "model_repository": ctx.model_dir.display().to_string(),
                "model_version": version,
                "model_name": config.name,
            },
            "model_file": model_file.display().to_string(),
            "module_name": module,
            "version_dir": ctx.version_dir.display().to_string(),
            "model_dir": ctx.model_dir.display().to_string(),
            "decoupled": decoupled,
            "log_verbose": crate::core::logging::enabled('V', 1),
        }));
        let mut instance = PythonInstance {
            worker: None,
            sent: Default::default(),
            resend: false,
            init,
            python,
            env_dir,
            name: ctx.instance_name.clone(),
            timeout: ctx.options.stub_timeout.unwrap_or(DEFAULT_TIMEOUT),
            host: ctx.options.host.clone(),
        };
        instance.start()?;
        Ok(instance)
    }

    /// Starts a worker and runs `initialize` in it.
    fn start(&mut self) -> Result<()> {
        let mut worker = Worker::start(&Launch {
            python: &self.python,
            env_dir: self.env_dir.clone(),
            instance: &self.name,
            host: self.host.clone(),
        })?;
        worker.send(&self.init)?;
        let answer = worker.control(self.timeout)?;
        match answer.kind() {
            "ready" => {
                self.worker = Some(worker);
                Ok(())
            }
            "error" => Err(Error::internal(answer.str("message").to_string())),
            other => Err(Error::internal(format!(
                "the Python worker of model instance '{}' answered '{other}' to initialize",
                self.name
            ))),
        }
    }

    /// The running worker, started again if the last one died.
    fn worker(&mut self) -> Result<&mut Worker> {
        if !self.worker.as_mut().is_some_and(Worker::alive) {
            if self.worker.take().is_some() {
                crate::core::logging::log(
                    'W',
                    &format!(
                        "the Python worker of model instance '{}' had exited: starting a new one",
                        self.name
                    ),
                );
            }
            self.start()?;
        }
        Ok(self.worker.as_mut().expect("started"))
    }
}

/// Triton's `auto_complete_config`: when the model's class has the static
/// method, it runs in a short-lived worker with the config as a
/// `pb_utils.ModelConfig` and its answer becomes the config (validated by
/// the caller as any config is).
pub fn auto_complete(
    config: &crate::core::config::ModelConfig,
    model_dir: &Path,
    version_dir: &Path,
    options: &super::BackendOptions,
) -> Result<crate::core::config::ModelConfig> {
    let ctx = LoadContext {
        config,
        model_dir,
        version_dir: version_dir.to_path_buf(),
        instance_name: config.name.clone(),
        instance_index: 0,
        device: crate::core::device::Device::Cpu,
        options,
    };
    let file = if config.default_model_filename.is_empty() {
        "model.py"
    } else {
        config.default_model_filename.as_str()
    };
    plain_file_name(file, &config.name)?;
    let model_file = version_dir.join(file);
    if !model_file.is_file() {
        return Ok(config.clone());
    }
    let (python, env_dir) = interpreter(&ctx)?;
    let (_, module) = module_name(version_dir, file);
    let mut worker = Worker::start(&Launch {
        python: &python,
        env_dir,
        instance: &config.name,
        host: None,
    })?;
    worker.send(&Frame::new(json!({
        "kind": "auto_complete",
        "config": crate::core::config::json::to_json(config)?,
        "model_file": model_file.display().to_string(),
        "module_name": module,
        "version_dir": version_dir.display().to_string(),
        "model_dir": model_dir.display().to_string(),
    })))?;
    let answer = worker.control(options.stub_timeout.unwrap_or(DEFAULT_TIMEOUT))?;
    match answer.kind() {
        "config" => {
            let json = answer.header.get("config").cloned().unwrap_or(Value::Null);
            crate::core::config::json::from_json(&json).map_err(|e| {
                Error::invalid_arg(format!(
                    "auto_complete_config of model '{}' returned a config trtis cannot read: {}",
                    config.name, e.message
                ))
            })
        }
        "error" => Err(Error::internal(answer.str("message").to_string())),
        other => Err(Error::internal(format!(
            "the Python worker of model '{}' answered '{other}' to auto_complete_config",
            config.name
        ))),
    }
}

impl ListExec for PythonInstance {
    fn execute_requests(&mut self, requests: Vec<BackendRequest>) -> Result<()> {
        use super::Pipeline;
        self.send(requests)?;
        loop {
            if let Some(result) = self.finish(None) {
                return result;
            }
        }
    }

    fn pipeline(&mut self) -> Option<&mut dyn super::Pipeline> {
        Some(self)
    }

    /// The worker process's resident set (what unloading the instance
    /// gives back to the machine), on CPU 0.
    fn memory_usage(&self) -> Vec<crate::core::metrics::memory::MemoryUsage> {
        self.worker
            .as_ref()
            .and_then(|w| crate::core::metrics::memory::process_rss(w.pid()))
            .map(|byte_size| crate::core::metrics::memory::MemoryUsage {
                kind: "CPU",
                id: 0,
                byte_size,
            })
            .into_iter()
            .collect()
    }
}

/// A batch sent to the worker and not yet answered.
#[derive(Default)]
struct SentBatch {
    /// Its requests' ids on the worker's link.
    ids: Vec<u64>,
    /// Per request (in `ids`' order): how to put it back in its
    /// scheduler's queue, where the scheduler takes it back.
    reschedule: Vec<Option<crate::core::responder::Reschedule>>,
    /// While another batch runs before it: what sending it again to a new
    /// worker takes, should the worker die first (as Triton runs the
    /// requests still queued on the restarted stub).
    again: Option<Again>,
}

struct Again {
    frame: Frame,
    responders: Vec<crate::core::responder::Responder>,
    tokens: Vec<crate::core::types::CancelToken>,
}

/// Registers a batch's requests on `link` under `ids` (as `waiting`
/// behind a batch that runs, with `behind`), sends its frame, and arms
/// their cancellation; on an error nothing stays registered.
fn post(
    link: &std::sync::Arc<worker::Link>,
    frame: &Frame,
    ids: &[u64],
    responders: &[crate::core::responder::Responder],
    tokens: &[crate::core::types::CancelToken],
    behind: bool,
) -> Result<()> {
    if behind {
        link.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids.iter().copied());
    }
    {
        let mut open = link.requests.lock().unwrap_or_else(|p| p.into_inner());
        for (id, r) in ids.iter().zip(responders) {
            open.insert(*id, r.clone());
        }
    }
    if let Err(e) = link.send(frame) {
        forget(link, ids);
        return Err(e);
    }
    // The worker knows the requests now: a request cancelled from here
    // on (or already) gets a `cancel` frame while it is open.
    for (id, token) in ids.iter().zip(tokens) {
        link.cancel_on(*id, token);
    }
    Ok(())
}

impl PythonInstance {
    /// Sends the batches left behind a worker that died to a new one.
    fn send_again(&mut self) -> Result<()> {
        let worker = self.worker()?;
        let link = std::sync::Arc::clone(&worker.link);
        for (i, batch) in self.sent.iter_mut().enumerate() {
            let Some(again) = batch.again.as_mut() else {
                continue;
            };
            let mut ids = Vec::with_capacity(again.responders.len());
            if let Some(Value::Array(list)) = again.frame.header.get_mut("requests") {
                for entry in list.iter_mut() {
                    let id = link.next_id();
                    entry["rid"] = json!(id);
                    ids.push(id);
                }
            }
            post(
                &link,
                &again.frame,
                &ids,
                &again.responders,
                &again.tokens,
                i > 0,
            )?;
            batch.ids = ids;
        }
        if let Some(first) = self.sent.front_mut() {
            first.again = None; // it runs now
        }
        Ok(())
    }
}

impl super::Pipeline for PythonInstance {
    fn can_send(&mut self) -> bool {
        self.worker.as_mut().is_some_and(Worker::alive)
    }

    fn send(&mut self, requests: Vec<BackendRequest>) -> Result<()> {
        // A new worker only when nothing is left on the one before: the
        // batches sent to it end first (failing, if it died).
        let worker = if self.sent.is_empty() {
            self.worker()?
        } else {
            let Some(w) = self.worker.as_mut() else {
                return Err(Error::internal("the Python worker is not running"));
            };
            if !w.alive() {
                return Err(w.died());
            }
            w
        };
        let link = std::sync::Arc::clone(&worker.link);
        let mut frame = Frame::new(json!({"kind": "execute"}));
        let mut list = Vec::with_capacity(requests.len());
        let mut ids = Vec::with_capacity(requests.len());
        let mut responders = Vec::with_capacity(requests.len());
        let mut tokens = Vec::with_capacity(requests.len());
        let mut reschedule = Vec::with_capacity(requests.len());
        for r in requests {
            let id = link.next_id();
            reschedule.push(r.reschedule);
            let inputs = frame.add_owned_tensors(r.inputs);
            let info = &r.info;
            list.push(json!({
                "rid": id,
                "id": info.id,
                "correlation_id": match &info.correlation_id {
                    SequenceId::None => json!(0),
                    SequenceId::Number(n) => json!(n),
                    SequenceId::Text(s) => json!(s),
                },
                "flags": info.flags,
                "timeout": info.timeout_us,
                "parameters": Value::Object(info.parameters.clone()).to_string(),
                "trace": info.trace.as_ref().map(|t| json!({
                    "traceparent": t.traceparent,
                    "parent_trace": t.parent_trace,
                })),
                "outputs": r.outputs,
                "inputs": inputs,
            }));
            ids.push(id);
            responders.push(r.respond);
            tokens.push(r.info.cancel);
        }
        frame.header.insert("requests".into(), Value::Array(list));
        let behind = !self.sent.is_empty();
        post(&link, &frame, &ids, &responders, &tokens, behind)?;
        // Kept while another batch runs before it.
        let again = behind.then_some(Again {
            frame,
            responders,
            tokens,
        });
        self.sent.push_back(SentBatch {
            ids,
            reschedule,
            again,
        });
        Ok(())
    }

    fn finish(&mut self, wake: Option<&super::Wake>) -> Option<Result<()>> {
        if std::mem::take(&mut self.resend) {
            if let Err(e) = self.send_again() {
                // The oldest fails with the reason; the next tries again.
                self.sent.pop_front();
                self.resend = !self.sent.is_empty();
                return Some(Err(e));
            }
        }
        let Some(worker) = self.worker.as_mut() else {
            self.sent.pop_front();
            return Some(Err(Error::internal("the Python worker is not running")));
        };
        // The batch is done with when `execute` returned; a decoupled
        // model's responses may still come after.
        let answer = worker.answer_or_wake(wake)?;
        let link = std::sync::Arc::clone(&worker.link);
        let mut batch = self.sent.pop_front().unwrap_or_default();
        let result = match answer {
            Ok(f) => match f.error() {
                None => {
                    reschedule(&link, &mut batch, &f);
                    Ok(())
                }
                Some(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if result.is_err() {
            // The requests still open fail with the error (`core::instance`
            // answers them).
            forget(&link, &batch.ids);
        }
        if result.is_err() && !self.sent.is_empty() && !worker.alive() {
            self.resend = true;
        } else if let Some(next) = self.sent.front_mut() {
            next.again = None; // it runs now
            began(&link, &next.ids);
        }
        Some(result)
    }
}

/// The requests of `batch` the model released with
/// `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` (the `executed` frame's
/// `rescheduled` ids) go back to their scheduler, answering through the
/// same responder; where the scheduler takes no request back they fail
/// with Triton's reason (which Triton logs).
fn reschedule(link: &worker::Link, batch: &mut SentBatch, executed: &Frame) {
    let Some(Value::Array(ids)) = executed.header.get("rescheduled") else {
        return;
    };
    for rid in ids.iter().filter_map(Value::as_u64) {
        let Some(i) = batch.ids.iter().position(|&id| id == rid) else {
            continue;
        };
        let responder = link
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&rid);
        let Some(responder) = responder else {
            continue; // answered or cancelled meanwhile
        };
        match batch.reschedule.get_mut(i).and_then(Option::take) {
            Some(again) => again(responder),
            None => {
                let e = crate::core::responder::reschedule_refused();
                crate::core::logging::log(
                    'E',
                    &format!("Failed to release request: {}", e.message),
                );
                responder.fail(e);
            }
        }
    }
}

/// Routes nothing more to requests `ids` (their batch failed).
fn forget(link: &worker::Link, ids: &[u64]) {
    began(link, ids);
    let mut open = link.requests.lock().unwrap_or_else(|p| p.into_inner());
    for id in ids {
        open.remove(id);
    }
}

/// Requests `ids` are no longer waiting behind another batch.
fn began(link: &worker::Link, ids: &[u64]) {
    let mut waiting = link.waiting.lock().unwrap_or_else(|p| p.into_inner());
    for id in ids {
        waiting.remove(id);
    }
}

impl Drop for PythonInstance {
    fn drop(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            // A decoupled model may still be answering requests whose
            // `execute` returned: they finish first (within the timeout),
            // as Triton waits for them before stopping the stub.
            let deadline = std::time::Instant::now() + self.timeout;
            while worker.alive()
                && std::time::Instant::now() < deadline
                && !worker
                    .link
                    .requests
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty()
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            worker.stop(self.timeout);
        }
    }
}

/// The version (the version directory's name) and the module name Triton
/// imports the model file as (`1.model`).
fn module_name(version_dir: &Path, file: &str) -> (String, String) {
    let version = version_dir
        .file_name()
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let module = format!("{version}.{stem}");
    (version, module)
}

/// A model file must be a file of the version directory: a
/// `default_model_filename` with a path in it (`../x.py`, `/tmp/x.py`) is
/// refused.
fn plain_file_name(file: &str, model: &str) -> Result<()> {
    let mut parts = Path::new(file).components();
    match (parts.next(), parts.next()) {
        (Some(std::path::Component::Normal(_)), None) => Ok(()),
        _ => Err(Error::invalid_arg(format!(
            "default_model_filename '{file}' of model '{model}' must be a file name in the version directory"
        ))),
    }
}

/// The interpreter for a model: its `EXECUTION_ENV_PATH` environment's,
/// else the server's choice (`--python`, `TRTIS_PYTHON`), else the
/// project's `.venv`, else `python3`. With an environment, also its
/// directory, which the worker activates as Triton does.
/// The environment is a directory, or an archive (a conda-pack `.tar.gz`)
/// that `env` unpacks into its cache, as Triton unpacks it.
fn interpreter(ctx: &LoadContext) -> Result<(PathBuf, Option<PathBuf>)> {
    if let Some(env) = ctx.config.parameters.get("EXECUTION_ENV_PATH") {
        let name = &ctx.config.name;
        let path = env.string_value.replace(
            "$$TRITON_MODEL_DIRECTORY",
            &ctx.model_dir.display().to_string(),
        );
        let given = PathBuf::from(&path);
        let dir = if given.is_dir() {
            given
        } else if given.is_file() {
            env::unpacked(&given).map_err(|e| {
                Error::new(
                    e.kind,
                    format!(
                        "EXECUTION_ENV_PATH '{path}' of model '{name}': {}",
                        e.message
                    ),
                )
            })?
        } else {
            return Err(Error::invalid_arg(format!(
                "EXECUTION_ENV_PATH '{path}' of model '{name}' does not exist: it names an environment directory with bin/python3, or a conda-pack .tar.gz of one"
            )));
        };
        let python = env::python_of(&dir).ok_or_else(|| {
            Error::invalid_arg(format!(
                "EXECUTION_ENV_PATH '{path}' of model '{name}' has no bin/python3"
            ))
        })?;
        return Ok((python, Some(dir)));
    }
    if let Some(p) = &ctx.options.python {
        return Ok((p.clone(), None));
    }
    for venv in [".venv/bin/python3", ".venv/bin/python"] {
        let p = Path::new(venv);
        if p.is_file() {
            return Ok((
                std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
                None,
            ));
        }
    }
    Ok((PathBuf::from("python3"), None))
}

/// The Python backend in the registry.
pub struct Python;

impl super::Backend for Python {
    fn name(&self) -> &'static str {
        "python"
    }

    fn load(&self, ctx: &LoadContext) -> Result<Instance> {
        Ok(Instance::Lists(Box::new(PythonInstance::load(ctx)?)))
    }

    /// Its parameters are the model's to read; one of Triton's Python
    /// backend's own has nothing to do here.
    fn check(
        &self,
        config: &crate::core::config::ModelConfig,
        _: &[PathBuf],
        _: bool,
    ) -> Vec<crate::core::config::Issue> {
        let gpu_inputs = config
            .parameters
            .get("FORCE_CPU_ONLY_INPUT_TENSORS")
            .is_some_and(|p| p.string_value.eq_ignore_ascii_case("no"));
        if !gpu_inputs {
            return Vec::new();
        }
        vec![crate::core::config::Issue::warning(
            "parameters[\"FORCE_CPU_ONLY_INPUT_TENSORS\"]",
            "has no effect in trtis: there is no GPU: inputs are always in CPU memory",
        )]
    }

    /// A model completes its own config when its class has
    /// `auto_complete_config` (Triton calls it whenever auto-complete is
    /// on); Triton's defaults then apply to what it added (dynamic
    /// batching, instance groups).
    fn auto_complete(
        &self,
        config: &crate::core::config::ModelConfig,
        ctx: &super::CompleteContext,
    ) -> Option<Result<crate::core::config::ModelConfig>> {
        let fail = |why: String| super::load_failed(config, why);
        Some(
            auto_complete(config, ctx.model_dir, ctx.version_dir, ctx.options)
                .map_err(|e| fail(e.message))
                .and_then(|mut completed| {
                    (ctx.normalize)(&mut completed).map_err(|issue| fail(issue.message))?;
                    Ok(completed)
                }),
        )
    }

    /// The model does its own GPU work, told its GPU in `args`.
    fn gpu_ready(&self) -> bool {
        true
    }
}
