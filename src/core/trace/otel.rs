//! OpenTelemetry mode (`--trace-config mode=opentelemetry`): a sampled
//! request becomes spans as Triton makes them, built from the timestamps
//! the request path records, and exported over OTLP/HTTP (protobuf) by the
//! SDK's batch span processor on a thread of its own: a request only hands
//! its spans to a bounded queue, so a slow or absent collector costs the
//! requests nothing. Spans that find the queue full are dropped; those and
//! failed exports are counted for `/metrics` (`metrics_text`), and the
//! first failed export is logged.
//!
//! Spans (scope `triton-server`, kind SERVER): `InferRequest`, a child of
//! the caller's span when the request carried a W3C `traceparent`; under
//! it one named after the model, with the events `REQUEST_START`,
//! `QUEUE_START`, `REQUEST_END` and Triton's attributes
//! (`triton.model_name`, `triton.model_version`, `triton.trace_id`,
//! `triton.trace_parent_id`, `triton.request_id`); under that `compute`,
//! with `COMPUTE_START`, `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`,
//! `COMPUTE_END`. An ensemble's steps hang under the ensemble's model span
//! (each a model span and its `compute`, no `InferRequest`); the ensemble
//! has no `compute` span, as in Triton.
//!
//! Spans are made once the request has ended, but a step must name its
//! parent while the ensemble still runs: the ensemble's trace and model
//! span ids are chosen when it is sampled (`SpanIds`), and the SDK, which
//! picks ids itself, is given them through its id generator (`PresetIds`).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanId, SpanKind, TraceContextExt, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SdkTracer,
    SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use crate::core::error::{Error, Result};
use crate::core::types::TraceContext;

/// `--trace-config opentelemetry,...`: where and how spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelSettings {
    /// The OTLP/HTTP endpoint (`url`).
    pub url: Option<String>,
    /// `resource=<key>=<value>`, in order.
    pub resource: Vec<(String, String)>,
    pub bsp_max_queue_size: u32,
    /// Milliseconds.
    pub bsp_schedule_delay: u32,
    pub bsp_max_export_batch_size: u32,
}

/// Triton's default endpoint.
pub const DEFAULT_URL: &str = "http://localhost:4318/v1/traces";

impl Default for OtelSettings {
    /// The batch settings from `OTEL_BSP_*` when set, else the SDK's
    /// defaults, as Triton takes them.
    fn default() -> Self {
        let env = |name: &str, default: u32| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
        };
        OtelSettings {
            url: None,
            resource: Vec::new(),
            bsp_max_queue_size: env("OTEL_BSP_MAX_QUEUE_SIZE", 2048),
            bsp_schedule_delay: env("OTEL_BSP_SCHEDULE_DELAY", 5000),
            bsp_max_export_batch_size: env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
        }
    }
}

impl OtelSettings {
    /// Takes one `opentelemetry,<key>=<value>` setting, with Triton's
    /// message for a bad number.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let number = || -> Result<u32> {
            value.trim().parse::<u32>().map_err(|_| {
                Error::invalid_arg(format!(
                    "Bad option: \"--trace-config opentelemetry,{key}\"."
                ))
            })
        };
        match key {
            "url" => self.url = Some(value.to_string()),
            "resource" => {
                let Some((k, v)) = value.split_once('=') else {
                    return Err(Error::invalid_arg(format!(
                        "--trace-config opentelemetry,resource={value}: expected resource=<key>=<value>"
                    )));
                };
                self.resource.push((k.to_string(), v.to_string()));
            }
            "bsp_max_queue_size" => self.bsp_max_queue_size = number()?,
            "bsp_schedule_delay" => self.bsp_schedule_delay = number()?,
            "bsp_max_export_batch_size" => self.bsp_max_export_batch_size = number()?,
            _ => {
                return Err(Error::invalid_arg(format!(
                    "--trace-config opentelemetry,{key}: unknown setting (url, resource, bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size)"
                )))
            }
        }
        Ok(())
    }

    /// The settings API's view of them (all strings, as Triton answers).
    pub fn entries(&self) -> Vec<(&'static str, Vec<String>)> {
        let mut out = Vec::new();
        if let Some(url) = &self.url {
            out.push(("url", vec![url.clone()]));
        }
        if !self.resource.is_empty() {
            out.push((
                "resource",
                self.resource
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ));
        }
        out.push((
            "bsp_max_queue_size",
            vec![self.bsp_max_queue_size.to_string()],
        ));
        out.push((
            "bsp_schedule_delay",
            vec![self.bsp_schedule_delay.to_string()],
        ));
        out.push((
            "bsp_max_export_batch_size",
            vec![self.bsp_max_export_batch_size.to_string()],
        ));
        out
    }
}

/// The ids a sampled request's spans will have: its trace, and its model
/// span (the parent of the spans of the requests it makes).
#[derive(Debug, Clone, Copy)]
pub struct SpanIds {
    trace_id: TraceId,
    model_span: SpanId,
}

impl SpanIds {
    /// The caller's trace when it sent a valid `traceparent`, else a new
    /// one; a new model span.
    pub fn new(parent: Option<&TraceContext>) -> SpanIds {
        let random = RandomIdGenerator::default();
        let inherited = parent.and_then(|p| {
            let mut parts = p.traceparent.split('-');
            let (_, trace) = (parts.next()?, parts.next()?);
            TraceId::from_hex(trace)
                .ok()
                .filter(|t| *t != TraceId::INVALID)
        });
        SpanIds {
            trace_id: inherited.unwrap_or_else(|| random.new_trace_id()),
            model_span: random.new_span_id(),
        }
    }

    /// The W3C context of the model span, for a request made under it.
    pub fn model_traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.model_span)
    }
}

thread_local! {
    /// The ids the next span made on this thread takes (`PresetIds`).
    static NEXT_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// The SDK's random ids, except where `emit` has set the next one.
#[derive(Debug, Default)]
struct PresetIds(RandomIdGenerator);

impl IdGenerator for PresetIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_span_id())
    }
}

/// Spans that met a full export queue and were dropped, spans a collector
/// took, and spans whose export failed (a collector down or slow), for
/// `/metrics` (`metrics_text`).
static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
/// Spans handed to the batch processor and not yet exported.
static QUEUED: AtomicU64 = AtomicU64::new(0);
/// Whether a failed export has been logged (once; the count goes on).
static FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

/// The counters as Prometheus text (OpenTelemetry mode only).
pub fn metrics_text() -> String {
    let mut out = String::new();
    for (name, help, value) in [
        (
            "trtis_trace_spans_dropped_total",
            "OpenTelemetry spans dropped because the export queue was full",
            &DROPPED,
        ),
        (
            "trtis_trace_spans_exported_total",
            "OpenTelemetry spans the collector took",
            &EXPORTED,
        ),
        (
            "trtis_trace_spans_export_failed_total",
            "OpenTelemetry spans whose export failed (the collector down, slow or refusing)",
            &FAILED,
        ),
    ] {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
            value.load(Relaxed)
        ));
    }
    out
}

/// The SDK's batch processor behind a queue bound of our own: the SDK
/// drops a span when its queue is full but only counts it privately, so
/// this keeps the count of spans between here and the exporter and drops
/// (and counts) a span that would not fit. The SDK still batches and
/// exports on its own thread.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    queue: u64,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if QUEUED
            .fetch_update(Relaxed, Relaxed, |n| (n < self.queue).then_some(n + 1))
            .is_err()
        {
            DROPPED.fetch_add(1, Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what leaves the queue and how it went; the
/// first failure is logged.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    url: String,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let _ = QUEUED.fetch_update(Relaxed, Relaxed, |q| Some(q.saturating_sub(n)));
        match &result {
            Ok(()) => EXPORTED.fetch_add(n, Relaxed),
            Err(e) => {
                if !FAILURE_LOGGED.swap(true, Relaxed) {
                    crate::core::logging::log(
                        'W',
                        &format!(
                            "OpenTelemetry: exporting spans to {} failed: {e}; requests are unaffected, further failures are counted in trtis_trace_spans_export_failed_total",
                            self.url
                        ),
                    );
                }
                FAILED.fetch_add(n, Relaxed)
            }
        };
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter and what makes spans.
pub struct Otel {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Otel {
    /// Starts the exporter (nothing is sent until a span ends).
    pub fn start(settings: &OtelSettings) -> Result<Otel> {
        let url = settings
            .url
            .clone()
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        // The exporter's reqwest needs the process's rustls provider: ring,
        // as everywhere in trtis (already installed is fine).
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        // The HTTP client is a blocking one (the batch processor's thread
        // waits on it); it is made off any async runtime.
        let exporter = std::thread::spawn(move || {
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url)
                .with_timeout(Duration::from_secs(10))
                .build()
        })
        .join()
        .map_err(|_| Error::internal("starting the OTLP exporter panicked"))?
        .map_err(|e| Error::invalid_arg(format!("--trace-config opentelemetry: {e}")))?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(settings.bsp_max_queue_size.max(1) as usize)
            .with_scheduled_delay(Duration::from_millis(settings.bsp_schedule_delay as u64))
            .with_max_export_batch_size(settings.bsp_max_export_batch_size.max(1) as usize)
            .build();
        let queue = settings.bsp_max_queue_size.max(1) as u64;
        let exporter = Counted {
            inner: exporter,
            url: settings
                .url
                .clone()
                .unwrap_or_else(|| DEFAULT_URL.to_string()),
        };
        let processor = Bounded {
            inner: BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch)
                .build(),
            queue,
        };
        // Triton's service name unless the environment
        // (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) or a `resource`
        // setting names one; the settings win.
        let env_named = std::env::var("OTEL_SERVICE_NAME").is_ok()
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
                v.split(',')
                    .any(|kv| kv.trim().starts_with("service.name="))
            });
        let mut resource = Resource::builder();
        if !env_named {
            resource = resource.with_service_name("triton-inference-server");
        }
        let resource = resource
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_id_generator(PresetIds::default())
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("triton-server");
        Ok(Otel { provider, tracer })
    }

    /// The spans of one sampled request (`trace_id`: Triton's id of it),
    /// from its timestamps.
    pub fn emit(&self, trace_id: u64, ids: SpanIds, done: &super::Finished) {
        let (model, version, request_id) = (done.model, done.version, done.request_id);
        let (parent, stamps, compute) = (done.parent, done.stamps, done.compute);
        let at = |name: &str| stamps.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
        let (Some(start), Some(end)) = (at("REQUEST_START"), at("REQUEST_END")) else {
            return;
        };
        let parent_cx = match parent {
            Some(p) => {
                let mut carrier =
                    HashMap::from([("traceparent".to_string(), p.traceparent.clone())]);
                if let Some(state) = &p.tracestate {
                    carrier.insert("tracestate".to_string(), state.clone());
                }
                TraceContextPropagator::new().extract(&carrier)
            }
            None => Context::new(),
        };
        let nested = parent.and_then(|p| p.parent_trace);
        // A request the server made for a traced one hangs under that
        // one's model span; any other has an InferRequest span of its own.
        let root_cx = if nested.is_some() {
            parent_cx
        } else {
            if !parent_cx.span().span_context().is_valid() {
                NEXT_TRACE.with(|n| n.set(Some(ids.trace_id)));
            }
            let root = self
                .tracer
                .span_builder("InferRequest")
                .with_kind(SpanKind::Server)
                .with_start_time(start)
                .start_with_context(&self.tracer, &parent_cx);
            NEXT_TRACE.with(|n| n.set(None));
            parent_cx.with_span(root)
        };
        let mut attributes = vec![
            KeyValue::new("triton.model_name", model.to_string()),
            KeyValue::new("triton.model_version", version.parse::<i64>().unwrap_or(-1)),
            KeyValue::new("triton.trace_id", trace_id as i64),
            KeyValue::new("triton.trace_parent_id", nested.unwrap_or(0) as i64),
        ];
        if !request_id.is_empty() {
            attributes.push(KeyValue::new("triton.request_id", request_id.to_string()));
        }
        NEXT_SPAN.with(|n| n.set(Some(ids.model_span)));
        let model_span = self
            .tracer
            .span_builder(model.to_string())
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &root_cx);
        NEXT_SPAN.with(|n| n.set(None));
        let model_cx = root_cx.with_span(model_span);
        for name in ["REQUEST_START", "QUEUE_START"] {
            if let Some(t) = at(name) {
                model_cx.span().add_event_with_timestamp(name, t, vec![]);
            }
        }
        if let (true, Some(c0), Some(c1)) = (compute, at("COMPUTE_START"), at("COMPUTE_END")) {
            let compute = self
                .tracer
                .span_builder("compute")
                .with_kind(SpanKind::Server)
                .with_start_time(c0)
                .start_with_context(&self.tracer, &model_cx);
            let compute_cx = model_cx.with_span(compute);
            for name in [
                "COMPUTE_START",
                "COMPUTE_INPUT_END",
                "COMPUTE_OUTPUT_START",
                "COMPUTE_END",
            ] {
                if let Some(t) = at(name) {
                    compute_cx.span().add_event_with_timestamp(name, t, vec![]);
                }
            }
            compute_cx.span().end_with_timestamp(c1);
        }
        model_cx
            .span()
            .add_event_with_timestamp("REQUEST_END", end, vec![]);
        model_cx.span().end_with_timestamp(end);
        if nested.is_none() {
            root_cx.span().end_with_timestamp(end);
        }
    }

    /// Exports what is queued (at shutdown).
    pub fn shutdown(&self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}
