//! Traces: `kbq serve` with `OTEL_EXPORTER_OTLP_ENDPOINT` set exports its spans over
//! OTLP/HTTP (or gRPC) to a receiver on loopback that decodes them with the official protobuf
//! definitions (opentelemetry-proto; over gRPC, its tonic service). A chat's trace continues the caller's `traceparent`
//! and holds the request, the session, each model call (a retry as an event) and each tool
//! call, linked by their parents, with the GenAI attributes and no text of the conversation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::json;

use crate::scripted::{ScriptedLlm, Step};
use crate::support::{KEY, ServeProcess};

/// A span as the receiver got it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
    /// Its events: name and attributes.
    events: Vec<(String, HashMap<String, String>)>,
    service: String,
}

/// An OTLP receiver of traces on 127.0.0.1: over HTTP (`POST /v1/traces`, protobuf) or
/// over gRPC (the collector's `TraceService`).
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
    port: u16,
    stop: Stop,
}

enum Stop {
    Http(actix_web::dev::ServerHandle),
    Grpc(tokio::sync::oneshot::Sender<()>),
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

async fn traces(spans: web::Data<Mutex<Vec<Received>>>, body: web::Bytes) -> HttpResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return HttpResponse::BadRequest().finish();
    };
    keep(&spans, request);
    // The empty answer of a full success.
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .finish()
}

/// The gRPC side of the receiver.
struct GrpcTraces(Arc<Mutex<Vec<Received>>>);

#[tonic::async_trait]
impl TraceService for GrpcTraces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Keeps the spans of `request`.
fn keep(spans: &Mutex<Vec<Received>>, request: ExportTraceServiceRequest) {
    let mut got = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(&a.value))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                got.push(Received {
                    name: span.name.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent: hex::encode(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|a| (a.key.clone(), text(&a.value)))
                        .collect(),
                    events: (span.events.iter())
                        .map(|e| {
                            let attributes = (e.attributes.iter())
                                .map(|a| (a.key.clone(), text(&a.value)))
                                .collect();
                            (e.name.clone(), attributes)
                        })
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
        let data = web::Data::from(spans.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(64 << 20))
                .route("/v1/traces", web::post().to(traces))
        })
        .workers(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Receiver {
            spans,
            port,
            stop: Stop::Http(handle),
        }
    }

    async fn start_grpc() -> Receiver {
        let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
        let incoming =
            tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = incoming.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = TraceServiceServer::new(GrpcTraces(spans.clone()));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                }),
        );
        Receiver {
            spans,
            port,
            stop: Stop::Grpc(stop),
        }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    async fn stop(self) {
        match self.stop {
            Stop::Http(handle) => handle.stop(false).await,
            Stop::Grpc(stop) => {
                let _ = stop.send(());
            }
        }
    }
}

/// A `[[providers]]` entry of the scripted model at `base_url`.
fn provider(name: &str, base_url: &str, max_retries: u32) -> String {
    format!(
        "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"scripted-model\"\nmax_retries = {max_retries}\n\n"
    )
}

/// `kbq serve` with `providers` (written to a config in `dir`), the test's key, and traces
/// exported to `receiver` every 100 ms; `env` on top.
async fn serve_traced(
    receiver: &Receiver,
    dir: &std::path::Path,
    providers: &str,
    env: &[(&str, &str)],
    stderr: std::process::Stdio,
) -> ServeProcess {
    let config = dir.join("kbq.toml");
    std::fs::write(&config, providers).unwrap();
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let config = config.to_str().unwrap();
    let mut vars = vec![
        ("KBQ_CONFIG", config),
        ("KBQ_API_KEYS", KEY),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    vars.extend_from_slice(env);
    ServeProcess::start(&vars, stderr).await
}

#[tokio::test]
async fn a_chats_trace_reaches_an_otlp_receiver_as_a_tree_of_spans() {
    let receiver = Receiver::start().await;
    let llm = ScriptedLlm::start().await;
    // The first call fails once and is retried.
    llm.push(Step::Error(503, Some(0)));
    llm.push(Step::ToolCalls(vec![(
        "KnowledgeGraphTool".into(),
        json!({"entity": "Alan Turing", "depth": 1}),
    )]));
    llm.push(Step::Answer("Turing worked at Bletchley Park.".into()));
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_traced(
        &receiver,
        dir.path(),
        &provider("model", &llm.base_url(), 1),
        &[
            ("OTEL_SERVICE_NAME", "kbq-under-test"),
            ("RUST_LOG", "info"),
        ],
        std::process::Stdio::piped(),
    )
    .await;
    let (mut child, port) = (serve.child, serve.port);

    // The caller's trace, which kbq continues.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let message = "Where did Alan Turing work? secret-marker-7731";
    let res = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/agent/chat"))
        .bearer_auth(KEY)
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&json!({"message": message}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_string();
    let chat: serde_json::Value = res.json().await.unwrap();
    assert_eq!(
        chat["tool_calls"][0]["tool"], "KnowledgeGraphTool",
        "{chat}"
    );

    // The batch goes out within its 100 ms delay.
    let complete = crate::support::eventually(Duration::from_secs(15), || async {
        let spans = receiver.spans();
        spans.iter().any(|s| s.name == "POST /v1/agent/chat")
            && spans.iter().filter(|s| s.name == "chat model").count() == 2
            && spans
                .iter()
                .any(|s| s.name == "execute_tool KnowledgeGraphTool")
    })
    .await;
    let spans: Vec<Received> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == trace_id)
        .collect();
    let names: Vec<(String, String, String)> = receiver
        .spans()
        .into_iter()
        .map(|s| (s.name, s.span_id, s.parent))
        .collect();
    assert!(complete, "spans received: {names:?}");
    let one = |name: &str| -> Received {
        let found: Vec<&Received> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "{name} in {spans:#?}");
        found[0].clone()
    };
    let children = |parent: &Received, name: &str| -> Vec<Received> {
        spans
            .iter()
            .filter(|s| s.parent == parent.span_id && s.name == name)
            .cloned()
            .collect()
    };

    let request = one("POST /v1/agent/chat");
    assert_eq!(
        request.parent, caller_span,
        "the caller's span is the parent"
    );
    assert_eq!(request.service, "kbq-under-test");
    assert_eq!(request.attributes["http.route"], "/v1/agent/chat");
    assert_eq!(request.attributes["http.response.status_code"], "200");
    assert_eq!(request.attributes["request_id"], request_id);

    let session = one("invoke_agent kbq");
    assert_eq!(session.parent, request.span_id);
    assert_eq!(session.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(session.attributes["kbq.steps"], "2");
    assert_eq!(session.attributes["kbq.tool_calls"], "1");

    let calls = children(&session, "chat model");
    assert_eq!(calls.len(), 2, "one model call per step: {spans:#?}");
    for call in &calls {
        assert_eq!(call.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(call.attributes["gen_ai.provider.name"], "model");
        assert_eq!(call.attributes["gen_ai.request.model"], "scripted-model");
        assert!(
            call.attributes["gen_ai.usage.input_tokens"]
                .parse::<u64>()
                .unwrap()
                > 0
        );
        assert!(call.attributes.contains_key("gen_ai.usage.output_tokens"));
        assert_eq!(children(call, "provider.work").len(), 1, "{spans:#?}");
    }
    // The retry is an event of the first call's worker span.
    let retries: Vec<&HashMap<String, String>> = (spans.iter())
        .filter(|s| s.name == "provider.work")
        .flat_map(|s| &s.events)
        .filter(|(name, _)| name == "model call failed; retrying")
        .map(|(_, attributes)| attributes)
        .collect();
    assert_eq!(retries.len(), 1, "{spans:#?}");
    assert!(retries[0]["error"].contains("503"), "{:?}", retries[0]);
    let reasons: Vec<&str> = calls
        .iter()
        .map(|c| c.attributes["gen_ai.response.finish_reasons"].as_str())
        .collect();
    assert!(
        reasons.contains(&"tool_calls") && reasons.contains(&"stop"),
        "{reasons:?}"
    );

    let tool = one("execute_tool KnowledgeGraphTool");
    assert_eq!(tool.parent, session.span_id);
    assert_eq!(tool.attributes["gen_ai.tool.name"], "KnowledgeGraphTool");
    assert!(tool.attributes["kbq.result_bytes"].parse::<u64>().unwrap() > 10);
    assert_eq!(children(&tool, "tool.work").len(), 1, "{spans:#?}");

    // No text of the conversation, unless `include_content` asks for it.
    for span in receiver.spans() {
        for (key, value) in &span.attributes {
            assert!(
                !value.contains("secret-marker-7731") && !value.contains("Bletchley"),
                "{} {key} holds the conversation: {value}",
                span.name
            );
        }
    }

    // The request's log lines name the trace.
    let _ = child.start_kill();
    let out = child.wait_with_output().await.unwrap();
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.lines()
            .any(|l| l.contains(&request_id) && l.contains(&format!("trace_id={trace_id}"))),
        "{logs}"
    );
    receiver.stop().await;
    llm.stop().await;
}

/// A fallback is an event of the chat's trace: the first provider's call fails (no retry
/// allowed), its span carries the error, the session's span holds the event naming it, and
/// the next provider's call answers in the same trace.
#[tokio::test]
async fn a_fallback_to_the_next_provider_is_an_event_of_the_chats_trace() {
    let receiver = Receiver::start().await;
    let broken = ScriptedLlm::start().await;
    broken.push(Step::Error(500, None));
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Answer("Turing worked at Bletchley Park.".into()));
    let dir = tempfile::tempdir().unwrap();
    let providers =
        provider("first", &broken.base_url(), 0) + &provider("second", &llm.base_url(), 0);
    let serve = serve_traced(
        &receiver,
        dir.path(),
        &providers,
        &[],
        std::process::Stdio::null(),
    )
    .await;
    let (mut child, port) = (serve.child, serve.port);
    let res = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/agent/chat"))
        .bearer_auth(KEY)
        .json(&json!({"message": "Where did Alan Turing work?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let chat: serde_json::Value = res.json().await.unwrap();
    assert!(
        chat["response"].as_str().unwrap().contains("Bletchley"),
        "{chat}"
    );

    let complete = crate::support::eventually(Duration::from_secs(15), || async {
        let spans = receiver.spans();
        spans.iter().any(|s| s.name == "invoke_agent kbq")
            && spans.iter().any(|s| s.name == "chat first")
            && spans.iter().any(|s| s.name == "chat second")
    })
    .await;
    let spans = receiver.spans();
    assert!(complete, "{spans:#?}");
    let one = |name: &str| -> Received {
        let found: Vec<&Received> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "{name} in {spans:#?}");
        found[0].clone()
    };
    let session = one("invoke_agent kbq");
    let (first, second) = (one("chat first"), one("chat second"));
    for call in [&first, &second] {
        assert_eq!(call.parent, session.span_id);
        assert_eq!(call.trace_id, session.trace_id);
    }
    assert!(
        first.attributes["error.type"].contains("500"),
        "{:?}",
        first.attributes
    );
    assert!(!second.attributes.contains_key("error.type"));
    let fallbacks: Vec<&HashMap<String, String>> = (session.events.iter())
        .filter(|(name, _)| name == "provider failed; falling back")
        .map(|(_, attributes)| attributes)
        .collect();
    assert_eq!(fallbacks.len(), 1, "{:?}", session.events);
    assert_eq!(fallbacks[0]["provider"], "first");
    assert!(fallbacks[0]["error"].contains("500"), "{:?}", fallbacks[0]);
    assert_eq!(broken.requests().len(), 1);

    let _ = child.start_kill();
    let _ = child.wait().await;
    receiver.stop().await;
    broken.stop().await;
    llm.stop().await;
}

/// With `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, spans go to the endpoint over gRPC: a traversal's
/// trace reaches a gRPC receiver, continuing the caller's `traceparent`, with the service's
/// name; and what was left in the batch is sent when the node stops.
#[tokio::test]
async fn a_requests_trace_reaches_an_otlp_receiver_over_grpc() {
    let receiver = Receiver::start_grpc().await;
    let dir = tempfile::tempdir().unwrap();
    // serve_traced points OTEL_EXPORTER_OTLP_ENDPOINT at the receiver's port.
    let serve = serve_traced(
        &receiver,
        dir.path(),
        "",
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "kbq-over-grpc"),
            // A batch goes out at exit only: the last spans travel as the node stops.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
        std::process::Stdio::piped(),
    )
    .await;
    let (child, port) = (serve.child, serve.port);
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let caller_span = "b7ad6b7169203331";
    let res = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/data/v1/query/graph"))
        .bearer_auth(KEY)
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&json!({"entity_name": "Alan Turing", "depth": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(
        receiver.spans().is_empty(),
        "nothing is sent before the batch's time or the exit"
    );
    // SIGTERM: the node drains and flushes its last batch.
    crate::support::terminate(&child);
    let status = crate::support::exited(child).await.status;
    assert!(status.success(), "{status}");
    let spans = receiver.spans();
    let request: Vec<&Received> = spans
        .iter()
        .filter(|s| s.name == "POST /data/v1/query/graph")
        .collect();
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request.trace_id, trace_id);
    assert_eq!(request.parent, caller_span);
    assert_eq!(request.service, "kbq-over-grpc");
    assert_eq!(request.attributes["request_id"], request_id);
    assert_eq!(request.attributes["http.response.status_code"], "200");
    // The graph's work is a child span of the request, in the same trace.
    assert!(
        spans
            .iter()
            .any(|s| s.trace_id == trace_id && s.parent == request.span_id),
        "{spans:#?}"
    );
    receiver.stop().await;
}
