//! OpenTelemetry mode (`--trace-config mode=opentelemetry`): a sampled
//! request becomes spans as Triton makes them, built from the timestamps
//! the request path records, and exported over OTLP/HTTP (protobuf) by the
//! SDK's batch span processor on a thread of its own: a request only hands
//! its spans to a bounded queue, so a slow or absent collector costs the
//! requests nothing (the SDK drops spans when the queue is full and logs
//! why).
//!
//! Spans (scope `triton-server`, kind SERVER): `InferRequest`, a child of
//! the caller's span when the request carried a W3C `traceparent`; under
//! it one named after the model, with the events `REQUEST_START`,
//! `QUEUE_START`, `REQUEST_END` and Triton's attributes
//! (`triton.model_name`, `triton.model_version`, `triton.trace_id`,
//! `triton.trace_parent_id`, `triton.request_id`); under that `compute`,
//! with `COMPUTE_START`, `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`,
//! `COMPUTE_END`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
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
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
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
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("triton-server");
        Ok(Otel { provider, tracer })
    }

    /// The spans of one sampled request, from its timestamps (the names of
    /// `core::engine`'s trace stamps).
    #[allow(clippy::too_many_arguments)]
    pub fn emit(
        &self,
        trace_id: u64,
        model: &str,
        version: &str,
        request_id: &str,
        parent: Option<&TraceContext>,
        stamps: &[(&str, SystemTime)],
    ) {
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
        let root = self
            .tracer
            .span_builder("InferRequest")
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .start_with_context(&self.tracer, &parent_cx);
        let root_cx = parent_cx.with_span(root);
        let mut attributes = vec![
            KeyValue::new("triton.model_name", model.to_string()),
            KeyValue::new("triton.model_version", version.parse::<i64>().unwrap_or(-1)),
            KeyValue::new("triton.trace_id", trace_id as i64),
            KeyValue::new("triton.trace_parent_id", 0i64),
        ];
        if !request_id.is_empty() {
            attributes.push(KeyValue::new("triton.request_id", request_id.to_string()));
        }
        let model_span = self
            .tracer
            .span_builder(model.to_string())
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &root_cx);
        let model_cx = root_cx.with_span(model_span);
        for name in ["REQUEST_START", "QUEUE_START"] {
            if let Some(t) = at(name) {
                model_cx.span().add_event_with_timestamp(name, t, vec![]);
            }
        }
        if let (Some(c0), Some(c1)) = (at("COMPUTE_START"), at("COMPUTE_END")) {
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
        root_cx.span().end_with_timestamp(end);
    }

    /// Exports what is queued (at shutdown).
    pub fn shutdown(&self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}
