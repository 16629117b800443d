//! The request path: `Engine::infer` validates a request against the
//! model's config (Triton's checks and messages), submits it to the
//! version's scheduler, awaits the answer without blocking the runtime,
//! applies classification, writes shared-memory outputs and records
//! statistics and the trace. Dropping the returned future (a client that
//! went away) cancels the request: its `CancelToken` is set, a queued
//! request is not run, a backend that watches the token stops early.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::Engine;
use crate::core::classify::classify;
use crate::core::error::{request_prefix, Error, ErrorKind, Result};
use crate::core::metrics::stats::ModelStats;
use crate::core::repository::LoadedModel;
use crate::core::request::validate;
use crate::core::scheduler::{StepRunner, Submission};
use crate::core::types::{CancelToken, InferRequest, InferResponse, RequestedOutput, Tensor};

impl Engine {
    /// Inference requests being handled right now.
    pub fn inflight(&self) -> usize {
        self.inner.inflight.load(SeqCst)
    }

    /// Runs one inference request.
    pub async fn infer(
        &self,
        name: &str,
        version: &str,
        request: InferRequest,
    ) -> Result<InferResponse> {
        let model = self.model(name, version)?;
        self.infer_on(model, request).await
    }

    /// Runs one inference request on a model version the caller already
    /// looked up (the HTTP frontend needs its config to parse the body):
    /// validate, submit to the model's scheduler, await the answer,
    /// classify, write shared-memory outputs, record statistics.
    pub async fn infer_on(
        &self,
        model: Arc<LoadedModel>,
        mut request: InferRequest,
    ) -> Result<InferResponse> {
        let start = Instant::now();
        let wall_start = SystemTime::now();
        let trace_context = request.trace_context.take();
        let sampled = self
            .inner
            .tracer
            .sample(&model.name, trace_context.as_ref());
        self.inner.inflight.fetch_add(1, SeqCst);
        let _inflight = InflightGuard(&self.inner.inflight);
        let stats = &model.stats;
        let fail = |e: Error| {
            stats.record_failure(start.elapsed());
            e
        };
        if model.decoupled() {
            return Err(fail(Error::unsupported(format!(
                "model '{}' is decoupled (any number of responses per request): it is served by streaming calls only",
                model.name
            ))));
        }
        let _in_use = self.hold_shm(&request);
        let (request, inputs, outputs, batch) = self.checked(&model, request).map_err(fail)?;
        // The response cache: an answer seen before goes back at once.
        let cache = self.inner.cache.as_ref().filter(|_| {
            model
                .config
                .response_cache
                .as_ref()
                .is_some_and(|c| c.enable)
        });
        let mut miss = None;
        if let Some(cache) = cache {
            let lookup = Instant::now();
            let key = cache.key(&model.name, model.generation, &inputs, &outputs);
            if let Some(tensors) = cache.get(key) {
                let looked = lookup.elapsed();
                let tensors = self
                    .write_shm_outputs(&outputs, tensors)
                    .inspect_err(|_| stats.record_failure(start.elapsed()))?;
                stats.record_cache_hit(start.elapsed(), looked);
                return Ok(InferResponse {
                    model_name: model.name.clone(),
                    model_version: model.version.to_string(),
                    id: request.id,
                    outputs: tensors,
                    parameters: Default::default(),
                    last: true,
                });
            }
            miss = Some((cache, key, lookup.elapsed()));
        }
        let enqueued = Instant::now();
        let cancel = CancelToken::new();
        let children = sampled.as_ref().and_then(|s| s.child_context());
        let submission = submission(
            &request, inputs, &outputs, batch, enqueued, &cancel, children,
        );
        let mut completion = match model.scheduler.submit(submission, self) {
            Ok(c) => c,
            // A request the scheduler found wrong is a failed request; any
            // other refusal (a full queue, unloading) a rejected one.
            Err(e) if e.kind == ErrorKind::InvalidArg => return Err(fail(e)),
            Err(e) => {
                stats.record_rejected(start.elapsed());
                return Err(e);
            }
        };
        // A caller that goes away while its request waits (a closed
        // connection, a client timeout, a cancelled gRPC call) cancels it
        // and counts as a canceled request.
        let mut canceled = CancelGuard {
            stats,
            start,
            token: &cancel,
            armed: true,
        };
        let done = completion.next().await;
        let answered = Instant::now();
        canceled.armed = false;
        drop(completion);
        let done = done.ok_or_else(|| {
            stats.record_backend_failure(start.elapsed());
            Error::internal(format!("model '{}' sent no response", model.name))
        })?;
        if done.rejected {
            stats.record_rejected(start.elapsed());
            return Err(done
                .result
                .err()
                .unwrap_or_else(|| Error::internal("a rejected request carried no error")));
        }
        let labels = self.labels_of(&model, &outputs);
        let batching = model.config.max_batch_size > 0;
        let compute = (done.input, done.compute, done.output);
        let parameters = done.parameters.as_deref().cloned().unwrap_or_default();
        if let Err(e) = &done.result {
            if e.answered {
                // The model answered with an error: a success, as Triton
                // counts it; the client gets the error.
                stats.record_success(batch, None, start.elapsed(), done.queue, compute);
                return Err(e.clone());
            }
        }
        let tensors = done
            .result
            .and_then(|t| classify(&labels, batching, &outputs, t, batch))
            .inspect(|t| {
                if let Some((cache, key, lookup)) = miss {
                    let insert = Instant::now();
                    cache.insert(key, t);
                    stats.record_cache_miss(lookup + insert.elapsed());
                }
            })
            .and_then(|t| self.write_shm_outputs(&outputs, t))
            .inspect_err(|_| stats.record_backend_failure(start.elapsed()))?;
        stats.record_success(batch, None, start.elapsed(), done.queue, compute);
        if let Some(sampled) = sampled {
            let times = TraceTimes {
                wall_start,
                start,
                enqueued,
                queue: done.queue,
                compute: (done.input, done.compute, done.output),
                answered,
            };
            self.record_trace(sampled, &model, &request.id, trace_context.as_ref(), times);
        }
        Ok(InferResponse {
            model_name: model.name.clone(),
            model_version: model.version.to_string(),
            id: request.id,
            outputs: tensors,
            parameters,
            last: true,
        })
    }
}

/// When a traced request's parts happened (`start`, `enqueued`: the
/// monotonic clock; the durations from its `Done`).
struct TraceTimes {
    wall_start: SystemTime,
    start: Instant,
    enqueued: Instant,
    queue: std::time::Duration,
    compute: (
        std::time::Duration,
        std::time::Duration,
        std::time::Duration,
    ),
    /// When the (last) response reached the engine, released in order
    /// where the model preserves it: Triton's INFER_RESPONSE_COMPLETE.
    answered: Instant,
}

impl Engine {
    /// Records a sampled request's trace (Triton's timestamps; spans in
    /// OpenTelemetry mode), now that it has ended.
    fn record_trace(
        &self,
        sampled: crate::core::trace::Sampled,
        model: &LoadedModel,
        request_id: &str,
        parent: Option<&crate::core::types::TraceContext>,
        t: TraceTimes,
    ) {
        let (input, compute, output) = t.compute;
        let queue_start = t.wall_start + (t.enqueued - t.start);
        let compute_start = queue_start + t.queue;
        let stamps = [
            ("REQUEST_START", t.wall_start),
            ("QUEUE_START", queue_start),
            ("COMPUTE_START", compute_start),
            ("COMPUTE_INPUT_END", compute_start + input),
            ("COMPUTE_OUTPUT_START", compute_start + input + compute),
            ("COMPUTE_END", compute_start + input + compute + output),
            (
                "INFER_RESPONSE_COMPLETE",
                t.wall_start + (t.answered - t.start),
            ),
            ("REQUEST_END", t.wall_start + t.start.elapsed()),
        ];
        let version = model.version.to_string();
        let done = crate::core::trace::Finished {
            model: &model.name,
            version: &version,
            request_id,
            parent,
            stamps: &stamps,
            compute: model.config.platform != "ensemble",
        };
        self.inner.tracer.record(sampled, &done);
    }

    /// Checks a request against its model: shared-memory inputs read,
    /// inputs and outputs validated (Triton's messages), the batch inputs'
    /// needs met, an ensemble's steps ready. Returns the request (its
    /// inputs taken), the inputs in config order, the outputs to produce
    /// and the batch size.
    fn checked(
        &self,
        model: &LoadedModel,
        mut request: InferRequest,
    ) -> Result<(InferRequest, Vec<Tensor>, Vec<RequestedOutput>, usize)> {
        for (i, r) in std::mem::take(&mut request.shm_inputs) {
            request.inputs[i].data = self.inner.shm.read(&r)?;
        }
        let (inputs, outputs, batch) = validate(
            &model.config,
            &request.id,
            std::mem::take(&mut request.inputs),
            &request.outputs,
        )?;
        model.batch_io.check(&inputs).map_err(|e| {
            Error::new(
                e.kind,
                format!("{}{}", request_prefix(&request.id), e.message),
            )
        })?;
        if let Some(why) = self.ensemble_unready(model, 0) {
            return Err(Error::unavailable(format!(
                "ensemble '{}' is not ready: {why}",
                model.name
            )));
        }
        Ok((request, inputs, outputs, batch))
    }

    /// Runs one request on a decoupled model (any number of responses):
    /// `each` gets every response as it comes, or the error that ended the
    /// request; returning means the final flag. The request counts once in
    /// the statistics, as Triton counts a decoupled model's requests.
    pub async fn infer_each(
        &self,
        model: Arc<LoadedModel>,
        request: InferRequest,
        mut each: impl FnMut(Result<InferResponse>),
    ) {
        let start = Instant::now();
        let wall_start = SystemTime::now();
        let mut request = request;
        let trace_context = request.trace_context.take();
        let sampled = self
            .inner
            .tracer
            .sample(&model.name, trace_context.as_ref());
        self.inner.inflight.fetch_add(1, SeqCst);
        let _inflight = InflightGuard(&self.inner.inflight);
        let stats = &model.stats;
        let _in_use = self.hold_shm(&request);
        let (request, inputs, outputs, batch) = match self.checked(&model, request) {
            Ok(checked) => checked,
            Err(e) => {
                stats.record_failure(start.elapsed());
                return each(Err(e));
            }
        };
        let cancel = CancelToken::new();
        let enqueued = Instant::now();
        let children = sampled.as_ref().and_then(|s| s.child_context());
        let submission = submission(
            &request, inputs, &outputs, batch, enqueued, &cancel, children,
        );
        let mut completion = match model.scheduler.submit(submission, self) {
            Ok(c) => c,
            Err(e) if e.kind == ErrorKind::InvalidArg => {
                stats.record_failure(start.elapsed());
                return each(Err(e));
            }
            Err(e) => {
                stats.record_rejected(start.elapsed());
                return each(Err(e));
            }
        };
        let mut canceled = CancelGuard {
            stats,
            start,
            token: &cancel,
            armed: true,
        };
        let labels = &model.labels;
        let batching = model.config.max_batch_size > 0;
        let mut last = None;
        let mut failed = false;
        // When the first response went (nv_inference_first_response_histogram_ms).
        let mut first = None;
        let mut answered = Instant::now();
        while let Some(done) = completion.next().await {
            answered = Instant::now();
            first.get_or_insert_with(|| start.elapsed());
            let timing = (done.queue, (done.input, done.compute, done.output));
            let rejected = done.rejected;
            let parameters = done.parameters.as_deref().cloned().unwrap_or_default();
            let final_flag = done.last;
            let tensors = done
                .result
                .and_then(|t| classify(labels, batching, &outputs, t, batch))
                .and_then(|t| self.write_shm_outputs(&outputs, t));
            match tensors {
                Ok(outputs) => each(Ok(InferResponse {
                    model_name: model.name.clone(),
                    model_version: model.version.to_string(),
                    id: request.id.clone(),
                    outputs,
                    parameters,
                    last: final_flag,
                })),
                Err(e) => {
                    if rejected {
                        stats.record_rejected(start.elapsed());
                        canceled.armed = false;
                        return each(Err(e));
                    }
                    // The model's own error answer counts as a success.
                    failed |= !e.answered;
                    each(Err(e));
                }
            }
            last = Some(timing);
        }
        canceled.armed = false;
        if failed {
            stats.record_backend_failure(start.elapsed());
        } else {
            let (queue, compute) = last.unwrap_or_default();
            stats.record_decoupled_success(batch, start.elapsed(), first, queue, compute);
            if let Some(sampled) = sampled {
                // The last response's timings, as the statistics take them.
                let times = TraceTimes {
                    wall_start,
                    start,
                    enqueued,
                    queue,
                    compute,
                    answered,
                };
                self.record_trace(sampled, &model, &request.id, trace_context.as_ref(), times);
            }
        }
    }
}

impl StepRunner for Engine {
    fn run_step<'a>(
        &'a self,
        home: &'a str,
        model: &'a str,
        version: &'a str,
        request: InferRequest,
    ) -> futures_util::future::BoxFuture<'a, Result<InferResponse>> {
        Box::pin(async move {
            let model = self.step_model(home, model, version)?;
            self.infer_on(model, request).await
        })
    }

    fn with_step_config(
        &self,
        home: &str,
        model: &str,
        version: &str,
        f: &mut dyn FnMut(&crate::core::config::ModelConfig),
    ) -> Result<()> {
        f(&self.step_model(home, model, version)?.config);
        Ok(())
    }
}

/// A checked request as its scheduler takes it.
fn submission<'a>(
    request: &'a InferRequest,
    inputs: Vec<Tensor>,
    outputs: &'a [RequestedOutput],
    batch: usize,
    enqueued: Instant,
    cancel: &'a CancelToken,
    trace: Option<crate::core::types::TraceContext>,
) -> Submission<'a> {
    Submission {
        id: &request.id,
        inputs,
        outputs,
        batch,
        priority: request.priority,
        timeout_us: request.timeout_us,
        sequence: &request.sequence,
        enqueued,
        parameters: &request.parameters,
        cancel,
        trace,
    }
}

/// Cancels the request and records it as canceled when dropped armed (the
/// caller's future was dropped before the request finished): a queued
/// request is then not run, and a backend running it hears of it
/// (`CancelToken::on_cancel`).
struct CancelGuard<'a> {
    stats: &'a ModelStats,
    start: Instant,
    token: &'a CancelToken,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.token.cancel();
            self.stats.record_canceled(self.start.elapsed());
        }
    }
}

impl Engine {
    /// The labels to classify the outputs with: the model's own, and for an
    /// ensemble output without a `label_filename`, those of the step output
    /// it comes from (Triton gives an ensemble its composing models' labels).
    fn labels_of<'m>(
        &self,
        model: &'m LoadedModel,
        outputs: &[RequestedOutput],
    ) -> std::borrow::Cow<'m, std::collections::BTreeMap<String, Vec<String>>> {
        use crate::core::config::pb::model_config::SchedulingChoice;
        use std::borrow::Cow;
        let Some(SchedulingChoice::EnsembleScheduling(e)) = &model.config.scheduling_choice else {
            return Cow::Borrowed(&model.labels);
        };
        let mut labels = Cow::Borrowed(&model.labels);
        for o in outputs {
            if o.classification.is_none() || labels.contains_key(&o.name) {
                continue;
            }
            let from = e.step.iter().find_map(|step| {
                let (model_output, _) = step.output_map.iter().find(|(_, t)| **t == o.name)?;
                let version = crate::core::scheduler::step_version(step);
                let m = self
                    .step_model(&model.namespace, &step.model_name, &version)
                    .ok()?;
                let l = self.labels_of(
                    m.as_ref(),
                    &[RequestedOutput {
                        name: model_output.clone(),
                        classification: o.classification,
                        shm: None,
                    }],
                );
                l.get(model_output).cloned()
            });
            if let Some(l) = from {
                labels.to_mut().insert(o.name.clone(), l);
            }
        }
        labels
    }

    /// Holds the shared-memory regions a request reads and writes until it
    /// is answered, so they cannot be unregistered under it (Triton's rule).
    fn hold_shm(&self, request: &InferRequest) -> crate::core::shm::InUse {
        let outputs = request
            .outputs
            .iter()
            .filter_map(|o| o.shm.as_ref().map(|r| r.region.as_str()));
        if request.shm_inputs.is_empty() && outputs.clone().next().is_none() {
            // Most requests: no lock taken, nothing allocated.
            return crate::core::shm::InUse::default();
        }
        let inputs = request.shm_inputs.iter().map(|(_, r)| r.region.as_str());
        self.inner.shm.hold(inputs.chain(outputs))
    }

    /// Writes the outputs asked for in shared memory there; their tensors
    /// keep shape and type but carry no data.
    fn write_shm_outputs(
        &self,
        outputs: &[RequestedOutput],
        mut tensors: Vec<Tensor>,
    ) -> Result<Vec<Tensor>> {
        for t in tensors.iter_mut() {
            // By name: an ensemble leaves out an output no step produced.
            let Some(req) = outputs.iter().find(|o| o.name == t.name) else {
                continue;
            };
            if let Some(r) = &req.shm {
                self.inner.shm.write(r, &t.name, &t.data)?;
                t.data.clear();
            }
        }
        Ok(tensors)
    }
}

/// Counts a request in flight until dropped (also when the caller goes away).
struct InflightGuard<'a>(&'a AtomicUsize);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}
