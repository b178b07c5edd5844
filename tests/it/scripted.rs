//! A scripted OpenAI-compatible LLM on loopback: agent tests point a provider at
//! [`ScriptedLlm::base_url`] and queue the model's answers as [`Step`]s, instead of calling a
//! real model. It is a real actix-web server (one worker, its own thread), so the provider's
//! HTTP client, timeouts and retries run exactly as in production.
//!
//! Routes: `POST /v1/chat/completions` plays the next step; `POST /v1/embeddings` answers with
//! word-count vectors ([`scripted_embedding`]); `GET /v1/models` is the provider's health
//! probe. Every other route answers 404, and every route answers 503 while the server is set
//! down. Error bodies have OpenAI's shape:
//! `{"error":{"message":..,"type":..,"code":null}}`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::dev::ServerHandle;
use actix_web::http::{StatusCode, header};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Agent conversations with many tool results outgrow actix's 256 KiB default.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Long enough that any client under test times out first.
const HANG: Duration = Duration::from_secs(3600);

/// The one model that `GET /v1/models` lists.
pub const MODEL_ID: &str = "scripted-model";

/// A running scripted LLM server.
pub struct ScriptedLlm {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    handle: ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// One scripted answer to a `POST /v1/chat/completions`.
#[derive(Debug, Clone)]
pub enum Step {
    /// An assistant message with these tool calls (arguments are serialized to a JSON string), finish_reason "tool_calls".
    ToolCalls(Vec<(String, Value)>),
    /// Tool calls whose `arguments` string is given verbatim (e.g. malformed JSON).
    RawToolCalls(Vec<(String, String)>),
    /// An assistant message with this content, finish_reason "stop".
    Answer(String),
    /// An HTTP error with an OpenAI error body; with Some(secs) also a Retry-After header.
    Error(u16, Option<u64>),
    /// Waits, then answers with the inner step.
    Delay(Duration, Box<Step>),
    /// Never answers (sleeps for an hour); the client must time out.
    Hang,
}

/// What the handlers and the test share. Locked only briefly, never across an `.await`.
#[derive(Default)]
struct Script {
    steps: VecDeque<Step>,
    requests: Vec<Value>,
    auth_headers: Vec<Option<String>>,
    down: bool,
    probes: usize,
    completions: u64,
    tool_calls: u64,
    embedding_requests: Vec<Value>,
    /// How long an extraction answered from the text waits first.
    extraction_delay: Duration,
    /// The pairs of names a confirmation (`kbq_same_entity`) calls one entity.
    same: Vec<(String, String)>,
}

impl ScriptedLlm {
    /// Starts on 127.0.0.1:0.
    pub async fn start() -> ScriptedLlm {
        let script = Arc::new(Mutex::new(Script::default()));
        let data = web::Data::from(script.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
                .service(
                    web::resource("/v1/chat/completions")
                        .route(web::post().to(chat_completions))
                        .default_service(web::to(unrouted)),
                )
                .service(
                    web::resource("/v1/embeddings")
                        .route(web::post().to(embeddings))
                        .default_service(web::to(unrouted)),
                )
                .service(
                    web::resource("/v1/models")
                        .route(web::get().to(models))
                        .default_service(web::to(unrouted)),
                )
                .default_service(web::to(unrouted))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .expect("the scripted LLM binds a loopback port");
        let addr = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        let task = tokio::spawn(server);
        ScriptedLlm {
            addr,
            script,
            handle,
            task,
        }
    }

    /// The base URL to configure a provider with, e.g. "http://127.0.0.1:PORT/v1".
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues the answer to the next POST /v1/chat/completions (FIFO).
    pub fn push(&self, step: Step) {
        self.script.lock().steps.push_back(step);
    }

    /// Drops the steps not played yet.
    pub fn clear(&self) {
        self.script.lock().steps.clear();
    }

    /// Bodies of every POST /v1/chat/completions received so far, in order, as JSON.
    ///
    /// Includes requests answered with an error (down, streaming, script exhausted); a body
    /// that is not JSON is answered 400 and not recorded.
    pub fn requests(&self) -> Vec<Value> {
        self.script.lock().requests.clone()
    }

    /// Bodies of every POST /v1/embeddings received so far, in order.
    pub fn embedding_requests(&self) -> Vec<Value> {
        self.script.lock().embedding_requests.clone()
    }

    /// Authorization header values seen on chat requests, in order.
    ///
    /// One entry per entry of [`ScriptedLlm::requests`].
    pub fn auth_headers(&self) -> Vec<Option<String>> {
        self.script.lock().auth_headers.clone()
    }

    /// Makes a confirmation of a doubtful pair (`kbq_same_entity`) answer `{"same": true}`
    /// for `a` and `b`, in either order; every other pair is answered `false`.
    pub fn confirm_same(&self, a: &str, b: &str) {
        self.script.lock().same.push((a.to_string(), b.to_string()));
    }

    /// Makes every extraction answered from the text wait `delay` first.
    pub fn set_extraction_delay(&self, delay: Duration) {
        self.script.lock().extraction_delay = delay;
    }

    /// While down, every endpoint answers 503 with an OpenAI error body.
    ///
    /// Chat requests are still recorded and probes still counted, but no step is consumed.
    pub fn set_down(&self, down: bool) {
        self.script.lock().down = down;
    }

    /// How many GET /v1/models requests arrived.
    pub fn probes(&self) -> usize {
        self.script.lock().probes
    }

    /// Stops the server.
    ///
    /// Not graceful: answers still in flight (a `Delay` or a `Hang`) are dropped, so a hung
    /// step cannot hold up the end of a test.
    pub async fn stop(self) {
        self.handle.stop(false).await;
        let _ = self.task.await;
    }
}

async fn chat_completions(
    script: web::Data<Mutex<Script>>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &format!("the body is not JSON: {e}"),
                None,
            );
        }
    };
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let step = {
        let mut script = script.lock();
        script.requests.push(body.clone());
        script.auth_headers.push(auth);
        if script.down {
            return outage();
        }
        if body["stream"] == true {
            return error_response(StatusCode::BAD_REQUEST, "streaming is not scripted", None);
        }
        script.steps.pop_front()
    };
    match (step, schema_asked(&body)) {
        (Some(step), _) => play(&script, step, &body["model"]).await,
        // Asked for the extraction schema with nothing queued: answered from the text.
        (None, "kbq_extraction") => {
            let answer = extraction_of(last_user_text(&body)).to_string();
            let delay = script.lock().extraction_delay;
            tokio::time::sleep(delay).await;
            completion(&script, &body["model"], Some(answer), Vec::new(), "stop")
        }
        // A doubtful pair to confirm, with nothing queued: answered from `confirm_same`.
        (None, "kbq_same_entity") => {
            let (a, b) = pair_asked(&body);
            let same = script
                .lock()
                .same
                .iter()
                .any(|(x, y)| (*x == a && *y == b) || (*x == b && *y == a));
            let answer = json!({ "same": same }).to_string();
            completion(&script, &body["model"], Some(answer), Vec::new(), "stop")
        }
        // Descriptions to summarise, with nothing queued: a summary that says how many, and
        // begins with the first (the most representative).
        (None, "kbq_summary") => {
            let answer = json!({ "description": summary_of(last_user_text(&body)) }).to_string();
            completion(&script, &body["model"], Some(answer), Vec::new(), "stop")
        }
        (None, _) => error_response(StatusCode::INTERNAL_SERVER_ERROR, "script exhausted", None),
    }
}

/// The name of the structured output's schema a chat request asks for; empty when none.
pub fn schema_asked(body: &Value) -> &str {
    body["response_format"]["json_schema"]["name"]
        .as_str()
        .unwrap_or_default()
}

/// The scripted model's summary of a `kbq_summary` request's descriptions: `"{first} (one of
/// {n})"`.
pub fn summary_of(user: &str) -> String {
    let listed: Vec<&str> = user.lines().filter_map(|l| l.strip_prefix("- ")).collect();
    format!(
        "{} (one of {})",
        listed.first().copied().unwrap_or_default(),
        listed.len()
    )
}

/// The text of a chat request's last user message.
fn last_user_text(body: &Value) -> &str {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

/// The two names a `kbq_same_entity` request asks about: its `A: ` and `B: ` lines.
pub fn pair_asked(body: &Value) -> (String, String) {
    let user = last_user_text(body);
    let side = |label: &str| {
        user.lines()
            .find_map(|l| l.strip_prefix(&format!("{label}: ")))
            .unwrap_or_default()
            .to_string()
    };
    (side("A"), side("B"))
}

/// What the scripted model extracts from a chunk: every `[[Name]]` is an entity (type
/// `thing`; `[[Name|words]]` describes it with the words), and every `[[A]] -[type]-> [[B]]` a relationship. A real model reads prose; tests write their facts
/// in this markup so that what is extracted is known exactly.
pub fn extraction_of(text: &str) -> Value {
    let mut entities: Vec<String> = Vec::new();
    let mut relationships: Vec<Value> = Vec::new();
    let mut descriptions: std::collections::HashMap<String, String> = Default::default();
    let mut rest = text;
    let mut last: Option<String> = None;
    while let Some(open) = rest.find("[[") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("]]") else { break };
        // `[[Name|what it is]]` gives the entity a description of its own.
        let (name, description) = match after[..close].split_once('|') {
            Some((name, description)) => (name.to_string(), Some(description.to_string())),
            None => (after[..close].to_string(), None),
        };
        if let Some(d) = description {
            descriptions.entry(name.clone()).or_insert(d);
        }
        let tail = &after[close + 2..];
        // An arrow right after the name, to the next name: a relationship.
        if let Some(prev) = last.take()
            && let Some(arrow) = rest[..open].trim_end().strip_suffix("->")
            && let Some(start) = arrow.rfind("-[")
            && arrow.ends_with(']')
        {
            let relationship_type = &arrow[start + 2..arrow.len() - 1];
            relationships.push(json!({
                "source": prev,
                "target": name,
                "type": relationship_type,
                "description": "",
            }));
        }
        if !entities.contains(&name) {
            entities.push(name.clone());
        }
        last = Some(name);
        rest = tail;
    }
    json!({
        "entities": entities.iter().map(|n| json!({
            "name": n,
            "type": "thing",
            "description": descriptions
                .get(n)
                .cloned()
                .unwrap_or_else(|| format!("{n}, as the text names it")),
        })).collect::<Vec<_>>(),
        "relationships": relationships,
    })
}

/// Answers with `step`. Sleeps with tokio's timer, so a waiting step holds up no other request.
async fn play(script: &Mutex<Script>, step: Step, model: &Value) -> HttpResponse {
    match step {
        Step::ToolCalls(calls) => {
            let calls = calls
                .into_iter()
                .map(|(name, arguments)| (name, arguments.to_string()))
                .collect();
            completion(script, model, None, calls, "tool_calls")
        }
        Step::RawToolCalls(calls) => completion(script, model, None, calls, "tool_calls"),
        Step::Answer(content) => completion(script, model, Some(content), Vec::new(), "stop"),
        Step::Error(status, retry_after) => {
            let status = StatusCode::from_u16(status)
                .unwrap_or_else(|_| panic!("Step::Error({status}) is not an HTTP status"));
            let message = format!("scripted error {status}");
            error_response(status, &message, retry_after)
        }
        Step::Delay(wait, then) => {
            tokio::time::sleep(wait).await;
            Box::pin(play(script, *then, model)).await
        }
        Step::Hang => {
            tokio::time::sleep(HANG).await;
            error_response(StatusCode::GATEWAY_TIMEOUT, "scripted hang ended", None)
        }
    }
}

/// An OpenAI `chat.completion` with one choice. `tool_calls` is left out when there are none.
fn completion(
    script: &Mutex<Script>,
    model: &Value,
    content: Option<String>,
    calls: Vec<(String, String)>,
    finish_reason: &str,
) -> HttpResponse {
    let mut script = script.lock();
    script.completions += 1;
    let id = format!("chatcmpl-{}", script.completions);
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        let calls: Vec<Value> = calls
            .into_iter()
            .map(|(name, arguments)| {
                script.tool_calls += 1;
                json!({
                    "id": format!("call_{}", script.tool_calls),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                })
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    HttpResponse::Ok().json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
}

/// Dimension of scripted embeddings when a request gives no `dimensions`.
pub const EMBEDDING_DIMENSION: usize = 16;

/// A scripted embedding: counts of lower-cased words, each hashed (FNV-1a) to a component,
/// so that equal texts get equal vectors and texts sharing words similar ones. Not unit
/// length, so that kbq's normalising is visible.
pub fn scripted_embedding(text: &str, dimension: usize) -> Vec<f32> {
    let mut v = vec![0f32; dimension];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = word
            .to_lowercase()
            .bytes()
            .fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            });
        v[(h % dimension as u64) as usize] += 1.0;
    }
    v
}

/// `POST /v1/embeddings`: [`scripted_embedding`] of each input, in OpenAI's shape.
async fn embeddings(script: web::Data<Mutex<Script>>, body: web::Json<Value>) -> HttpResponse {
    {
        let mut script = script.lock();
        script.embedding_requests.push(body.0.clone());
        if script.down {
            return outage();
        }
    }
    let dimension = body["dimensions"]
        .as_u64()
        .map_or(EMBEDDING_DIMENSION, |d| d as usize);
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => return error_response(StatusCode::BAD_REQUEST, "input must be text", None),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, t)| json!({"object": "embedding", "index": index, "embedding": scripted_embedding(t, dimension)}))
        .collect();
    HttpResponse::Ok().json(json!({
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()},
    }))
}

async fn models(script: web::Data<Mutex<Script>>) -> HttpResponse {
    let down = {
        let mut script = script.lock();
        script.probes += 1;
        script.down
    };
    if down {
        return outage();
    }
    HttpResponse::Ok().json(json!({
        "object": "list",
        "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "kbq-tests"}],
    }))
}

async fn unrouted(script: web::Data<Mutex<Script>>, req: HttpRequest) -> HttpResponse {
    if script.lock().down {
        return outage();
    }
    let message = format!("no scripted route for {} {}", req.method(), req.path());
    error_response(StatusCode::NOT_FOUND, &message, None)
}

fn outage() -> HttpResponse {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "the scripted LLM is down",
        None,
    )
}

/// An OpenAI error body, with `type` derived from the status as OpenAI does.
fn error_response(status: StatusCode, message: &str, retry_after: Option<u64>) -> HttpResponse {
    let kind = if status == StatusCode::TOO_MANY_REQUESTS {
        "rate_limit_error"
    } else if status.is_client_error() {
        "invalid_request_error"
    } else {
        "server_error"
    };
    let mut response = HttpResponse::build(status);
    if let Some(secs) = retry_after {
        response.insert_header((header::RETRY_AFTER, secs.to_string()));
    }
    response.json(json!({"error": {"message": message, "type": kind, "code": null}}))
}
