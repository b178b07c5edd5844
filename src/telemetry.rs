//! Traces exported over OTLP (HTTP/protobuf or gRPC), off by default (docs/operations.md,
//! "Traces").
//!
//! kbq's `tracing` spans become OpenTelemetry spans through `tracing-opentelemetry`: the
//! request (with the caller's W3C `traceparent` as its parent), the chat session and its tool
//! loop, each provider call (GenAI attributes) and tool call, the graph and search work, each
//! store statement, and an ingestion job's chunks. Export is on when `[telemetry] enabled`
//! or when `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, as the
//! OpenTelemetry SDKs of other languages do; the standard `OTEL_*` variables win over the
//! `[telemetry]` keys. When it is off no layer is installed.
//!
//! Spans are batched and sent from the SDK's thread of its own. Over HTTP that thread sends
//! with reqwest's blocking client; over gRPC it hands each batch to tonic's channel, whose
//! connection lives on a one-thread runtime of the export's own: the server's runtimes never
//! carry it, and it outlives them until the last batch is out. The spans inside a request (the
//! graph call, the chat session, each provider and tool call, each store statement, an
//! ingestion job's chunks) are `debug`: at the default log level (`info`) nothing records
//! them, and each costs what a disabled `tracing` callsite costs. A request's own span and an
//! ingestion job's are `info`: each carries its id into every log line of the request or job,
//! the access log's `request done` among them (docs/configuration.md, `[log]`).

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{GRPC, HTTP_PROTOBUF, TelemetrySection};

/// Whether spans are exported (set once, at start).
static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// What the process's environment says about export (the standard variables).
#[derive(Debug, Default, Clone)]
pub struct Environment {
    pub endpoint: Option<String>,
    pub traces_endpoint: Option<String>,
    pub service_name: Option<String>,
    pub sampler: Option<String>,
    pub sdk_disabled: bool,
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, or else `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub protocol: Option<String>,
}

impl Environment {
    pub fn read() -> Environment {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Environment {
            endpoint: var("OTEL_EXPORTER_OTLP_ENDPOINT"),
            traces_endpoint: var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            service_name: var("OTEL_SERVICE_NAME"),
            sampler: var("OTEL_TRACES_SAMPLER"),
            sdk_disabled: var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")),
            protocol: var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL")),
        }
    }

    /// How spans are sent: the protocol variable when it names one kbq speaks
    /// (`http/protobuf` or `grpc`), else `telemetry.protocol`.
    pub fn grpc(&self, config: &TelemetrySection) -> bool {
        match self.protocol.as_deref().map(str::trim) {
            Some(HTTP_PROTOBUF) => false,
            Some(GRPC) => true,
            _ => config.protocol == GRPC,
        }
    }

    /// What to warn of when the protocol variables ask for one kbq does not speak
    /// (`http/json`): spans go as `telemetry.protocol` says instead.
    pub fn protocol_warning(&self, config: &TelemetrySection) -> Option<String> {
        let asked = self.protocol.as_deref()?.trim();
        (self.exports(config) && asked != HTTP_PROTOBUF && asked != GRPC).then(|| {
            format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL asks for {asked:?}, but kbq exports traces over http/protobuf or grpc only; they go over {} to {}",
                if self.grpc(config) { GRPC } else { HTTP_PROTOBUF },
                self.traces_url(config)
            )
        })
    }

    /// Whether export is on: asked for by the config or by an endpoint variable, and not
    /// turned off by `OTEL_SDK_DISABLED=true`.
    pub fn exports(&self, config: &TelemetrySection) -> bool {
        !self.sdk_disabled
            && (config.enabled || self.endpoint.is_some() || self.traces_endpoint.is_some())
    }

    /// Where spans go: the traces variable as it is; else the general one, the config's
    /// endpoint or the protocol's default (port 4318 over HTTP, 4317 over gRPC), with
    /// `/v1/traces` added over HTTP (as the OTLP specification says).
    pub fn traces_url(&self, config: &TelemetrySection) -> String {
        if let Some(url) = &self.traces_endpoint {
            return url.clone();
        }
        let grpc = self.grpc(config);
        let base = (self.endpoint.as_deref())
            .or(config.endpoint.as_deref())
            .unwrap_or(if grpc {
                "http://127.0.0.1:4317"
            } else {
                "http://127.0.0.1:4318"
            });
        if grpc {
            base.to_string()
        } else {
            format!("{}/v1/traces", base.trim_end_matches('/'))
        }
    }
}

/// The provider that exports spans; dropping it flushes what is left and stops the export.
pub struct Telemetry {
    provider: SdkTracerProvider,
    /// gRPC's runtime, where tonic's channel does its work; stopped once the last batch is
    /// out.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("kbq: traces not all exported at exit: {e}");
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The layer that turns spans into OpenTelemetry spans and exports them, with the guard
/// that flushes them at exit; `None` when export is off. Only kbq's own spans and events
/// (and warnings of any crate) are exported: a store statement is a `debug` span.
pub fn layer<S>(
    config: &TelemetrySection,
) -> Result<Option<(impl Layer<S> + Send + Sync + 'static, Telemetry)>, String>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let env = Environment::read();
    if !env.exports(config) {
        return Ok(None);
    }
    let url = env.traces_url(config);
    let cannot =
        |e: &dyn std::fmt::Display| format!("telemetry: the OTLP exporter cannot start: {e}");
    let mut provider = SdkTracerProvider::builder();
    let mut runtime = None;
    if env.grpc(config) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kbq-otlp")
            .enable_all()
            .build()
            .map_err(|e| cannot(&e))?;
        // tonic's channel starts its worker on the runtime it is made in; the batch thread
        // hands each export to that worker.
        let exporter = {
            let _in = rt.enter();
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(url.clone());
            if url.starts_with("https://") {
                builder = builder.with_tls_config(
                    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                        .with_enabled_roots(),
                );
            }
            builder.build().map_err(|e| cannot(&e))?
        };
        provider = provider.with_batch_exporter(exporter);
        runtime = Some(rt);
    } else {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .build()
            .map_err(|e| cannot(&e))?;
        provider = provider.with_batch_exporter(exporter);
    }
    let mut resource = opentelemetry_sdk::Resource::builder().with_attribute(
        opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    );
    if env.service_name.is_none() {
        resource = resource.with_service_name(config.service_name.clone());
    }
    provider = provider.with_resource(resource.build());
    // The SDK reads OTEL_TRACES_SAMPLER (and its argument) itself when it is set.
    if env.sampler.is_none() {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(config.sample_ratio),
        )));
    }
    let provider = provider.build();
    let tracer = provider.tracer("kbq");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    ON.store(true, Ordering::Relaxed);
    kbq_actors::backend::set_span_content(config.include_content);
    // kbq's spans (statements are `debug`), and only warnings and errors among events: an
    // `info` event (each request's "request done") would be a span event on every request.
    let spans = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::WARN)
        .with_targets(
            ["kbq", "kbq_actors", "kbq_tools", "kbq_store", "kbq_ingest"]
                .map(|t| (t, tracing::Level::DEBUG)),
        )
        // Probes and /metrics (crate::middleware): logged, never exported.
        .with_target("kbq::probe", tracing::level_filters::LevelFilter::OFF);
    let filter = tracing_subscriber::filter::filter_fn(move |meta| {
        if meta.is_event() {
            *meta.level() <= tracing::Level::WARN && spans.would_enable(meta.target(), meta.level())
        } else {
            spans.would_enable(meta.target(), meta.level())
        }
    });
    // No per-span timing of idle and busy time, thread or source location: each is work on
    // every span that a trace reader does not need (the span's own times remain).
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_target(false)
        .with_filter(filter);
    Ok(Some((layer, Telemetry { provider, runtime })))
}

/// A request's headers as the W3C trace-context propagator reads them.
struct Headers<'a>(&'a actix_web::http::header::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// With export on: makes the caller's `traceparent` (and `tracestate`) the parent of `span`,
/// and records the trace id on it, so that logs name it. Nothing when export is off.
pub fn continue_trace(span: &tracing::Span, headers: &actix_web::http::header::HeaderMap) {
    if !enabled() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    let trace_id = span.context().span().span_context().trace_id();
    span.record("trace_id", tracing::field::display(trace_id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_variable_alone_turns_export_on_and_names_the_url() {
        let config = TelemetrySection::default();
        let none = Environment::default();
        assert!(!none.exports(&config));
        assert_eq!(none.traces_url(&config), "http://127.0.0.1:4318/v1/traces");
        let general = Environment {
            endpoint: Some("http://collector:4318/".into()),
            ..Environment::default()
        };
        assert!(general.exports(&config));
        assert_eq!(
            general.traces_url(&config),
            "http://collector:4318/v1/traces"
        );
        let traces = Environment {
            endpoint: Some("http://collector:4318".into()),
            traces_endpoint: Some("http://other:9999/custom".into()),
            ..Environment::default()
        };
        assert_eq!(traces.traces_url(&config), "http://other:9999/custom");
        // A protocol kbq does not speak is warned of, when export is on, and the config's
        // is used.
        let json = Environment {
            protocol: Some("http/json".into()),
            ..general.clone()
        };
        let warning = json.protocol_warning(&config).unwrap();
        assert!(
            warning.contains("\"http/json\"")
                && warning.contains("over http/protobuf to http://collector:4318/v1/traces"),
            "{warning}"
        );
        assert!(!json.grpc(&config));
        let http = Environment {
            protocol: Some("http/protobuf".into()),
            ..general.clone()
        };
        assert_eq!(http.protocol_warning(&config), None);
        let off = Environment {
            protocol: Some("http/json".into()),
            ..Environment::default()
        };
        assert_eq!(off.protocol_warning(&config), None);
        let disabled = Environment {
            sdk_disabled: true,
            ..general
        };
        assert!(!disabled.exports(&TelemetrySection {
            enabled: true,
            ..config.clone()
        }));
        let asked = TelemetrySection {
            enabled: true,
            endpoint: Some("https://otel.example:4318".into()),
            ..config.clone()
        };
        assert!(none.exports(&asked));
        assert_eq!(
            none.traces_url(&asked),
            "https://otel.example:4318/v1/traces"
        );
    }

    #[test]
    fn grpc_is_asked_by_the_config_or_the_protocol_variable_and_sends_to_the_endpoint_itself() {
        let grpc = TelemetrySection {
            enabled: true,
            protocol: GRPC.into(),
            ..TelemetrySection::default()
        };
        let none = Environment::default();
        assert!(none.grpc(&grpc));
        assert_eq!(none.traces_url(&grpc), "http://127.0.0.1:4317");
        let at = TelemetrySection {
            endpoint: Some("http://collector:4317".into()),
            ..grpc.clone()
        };
        assert_eq!(none.traces_url(&at), "http://collector:4317");
        // The variable wins over the config, either way.
        let http = Environment {
            protocol: Some("http/protobuf".into()),
            endpoint: Some("http://collector:4318".into()),
            ..Environment::default()
        };
        assert!(!http.grpc(&grpc));
        assert_eq!(http.traces_url(&grpc), "http://collector:4318/v1/traces");
        let asked = Environment {
            protocol: Some(" grpc ".into()),
            endpoint: Some("http://collector:4317".into()),
            ..Environment::default()
        };
        let config = TelemetrySection::default();
        assert!(asked.grpc(&config));
        assert_eq!(asked.traces_url(&config), "http://collector:4317");
        assert_eq!(asked.protocol_warning(&config), None);
        // The config's protocol is checked.
        let wrong = TelemetrySection {
            protocol: "http/json".into(),
            ..TelemetrySection::default()
        };
        let e = wrong.validate().unwrap_err().to_string();
        assert!(e.contains("telemetry.protocol"), "{e}");
    }
}
