//! `POST /v1/chat/completions`: OpenAI's chat completions API, answered through the provider
//! actors (retries, health, fallback) so that OpenAI clients work unchanged (docs/api.md).
//!
//! kbq runs no tools here: tools and tool results travel between the client and the model,
//! as with OpenAI. With `stream: true` the answer is sent as server-sent events in OpenAI's
//! chunk format once the provider has given it whole, so that a failed attempt can still be
//! retried or handed to the next provider before anything reaches the client.
//!
//! This file has the handler and the `chat.completion` it answers; `request` the request
//! and its checks, `stream` the chunks of a streamed answer.

mod request;
mod stream;
use stream::ChunkEvent;

use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::middleware::from_fn;
use actix_web::{HttpRequest, HttpResponse, web};
use kbq_actors::{Agent, ChatResponse, Usage};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::{Scope, require_scope};
use crate::config::AgentSection;
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::ValidJson;
use crate::models::Models;
use crate::peer::unless_client_leaves;
use crate::workspaces::Workspace;

pub use request::{CompletionRequest, MAX_MESSAGES, MAX_TOOLS, StreamOptions, state};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/chat/completions")
            .wrap(from_fn(|req, next| require_scope(Scope::Agent, req, next)))
            .route(web::post().to(completions)),
    );
}

// The fields of this struct and of the other OpenAI shapes kbq answers with are in
// alphabetical order: the order these bodies have always been sent in (they were built as
// `serde_json` maps, which keep their keys sorted); the tests below hold them to those bytes.

/// `POST /v1/chat/completions`, in OpenAI's `chat.completion` shape.
#[derive(Serialize, ToSchema)]
pub struct ChatCompletion<'a> {
    /// One choice: `index` 0, the assistant `message` (`content`, `refusal`, `tool_calls`),
    /// `logprobs` null, `finish_reason`.
    #[schema(value_type = Vec<Object>)]
    pub choices: [Choice<'a>; 1],
    /// Unix seconds.
    pub created: u64,
    /// `chatcmpl-` and 32 hex digits.
    pub id: &'a str,
    /// The provider that answered.
    pub model: &'a str,
    /// Always `chat.completion`.
    pub object: &'static str,
    /// Always null.
    #[schema(value_type = Option<String>)]
    pub system_fingerprint: (),
    /// `prompt_tokens`, `completion_tokens`, `total_tokens`, as the provider counted them.
    #[schema(value_type = Object)]
    pub usage: TokenUsage,
}

#[derive(Serialize)]
pub struct Choice<'a> {
    pub finish_reason: &'a str,
    pub index: u32,
    /// Always null.
    pub logprobs: (),
    pub message: AssistantMessage<'a>,
}

/// The assistant message as OpenAI gives it back. `content` and `refusal` are the provider's
/// values as they came (null when it gave none).
#[derive(Serialize)]
pub struct AssistantMessage<'a> {
    pub content: &'a Value,
    pub refusal: &'a Value,
    pub role: &'static str,
    /// Only when the model called tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<&'a [Value]>,
}

/// Token counts, in OpenAI's (alphabetical) order.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TokenUsage {
    pub completion_tokens: u64,
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

impl From<Usage> for TokenUsage {
    fn from(u: Usage) -> Self {
        TokenUsage {
            completion_tokens: u.completion_tokens,
            prompt_tokens: u.prompt_tokens,
            total_tokens: u.total_tokens,
        }
    }
}

impl<'a> AssistantMessage<'a> {
    /// The message of `answer`, and its finish reason: `tool_calls` when the model called
    /// tools, else the model's own reason (`stop` when it gave none, or claimed tool calls
    /// that are not there).
    fn of(answer: &'a ChatResponse) -> (Self, &'a str) {
        let m = &answer.message;
        let field = |name: &str| m.get(name).unwrap_or(&Value::Null);
        let calls = m["tool_calls"]
            .as_array()
            .filter(|c| !c.is_empty())
            .map(Vec::as_slice);
        let finish = match (answer.finish_reason.as_deref(), calls) {
            (_, Some(_)) => "tool_calls",
            (Some(f), None) if f != "tool_calls" => f,
            _ => "stop",
        };
        let message = AssistantMessage {
            content: field("content"),
            refusal: field("refusal"),
            role: "assistant",
            tool_calls: calls,
        };
        (message, finish)
    }
}

impl<'a> ChatCompletion<'a> {
    fn new(id: &'a str, created: u64, answer: &'a ChatResponse) -> Self {
        let (message, finish) = AssistantMessage::of(answer);
        ChatCompletion {
            choices: [Choice {
                finish_reason: finish,
                index: 0,
                logprobs: (),
                message,
            }],
            created,
            id,
            model: &answer.provider,
            object: "chat.completion",
            system_fingerprint: (),
            usage: answer.usage.into(),
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// OpenAI's chat completions, through the provider actors (docs/api.md).
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "A `chat.completion`; with `stream: true`, `text/event-stream` chunks ending with `data: [DONE]`",
            content(
                (ChatCompletion = "application/json"),
                (ChunkEvent = "text/event-stream"),
            )),
        (status = 404, description = ErrorCode::NotFound.answers("no such model (`field` is `model`)"), body = ErrorBody),
        (status = 502, description = ErrorCode::Upstream.answers("every provider tried failed"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("every provider behind the model is ejected"), body = ErrorBody),
    ),
    security(("bearer" = ["agent"]), ("api_key" = ["agent"])),
)]
pub(crate) async fn completions(
    agent: web::Data<Agent>,
    models: web::Data<Models>,
    limits: web::Data<AgentSection>,
    ws: web::ReqData<Workspace>,
    http: HttpRequest,
    ValidJson(req): ValidJson<CompletionRequest>,
) -> Result<HttpResponse, ApiError> {
    let mut v = request::validate(req, &models, &limits)?;
    // The built-in provider answers from the key's workspace.
    v.request.workspace = Some(ws.knowledge.clone());
    let chain = models.chain(&v.chain_model).flatten();
    // Dropping the call abandons it and its retries.
    let result = unless_client_leaves(
        &http,
        agent.complete(chain, &v.request),
        "completion abandoned",
    )
    .await?;
    let answer = result.map_err(|e| {
        let e = ApiError::agent(e, Some(&v.chain_model));
        if e.code == ErrorCode::Upstream {
            tracing::warn!(error = %e.message, model = %v.chain_model, "chat completion failed");
        }
        e
    })?;
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = now_secs();
    if !v.stream {
        return Ok(HttpResponse::Ok()
            .insert_header(("X-Kbq-Provider", answer.provider.clone()))
            .json(ChatCompletion::new(&id, created, &answer)));
    }
    let events = stream::events(&id, created, &answer, v.include_usage);
    let body = futures::stream::iter(events.into_iter().map(Ok::<_, std::convert::Infallible>));
    Ok(super::event_stream()
        .insert_header(("X-Kbq-Provider", answer.provider.clone()))
        .streaming(body))
}

#[cfg(test)]
mod tests {
    use kbq_actors::{ChatResponse, Usage};
    use serde_json::json;

    use super::{ChatCompletion, stream};

    /// Answers that exercise every part of the shapes: content in pieces, tool calls (one
    /// with parts missing), a refusal, an empty tool-call list, no finish reason.
    fn answers() -> Vec<ChatResponse> {
        let answer =
            |message, finish: Option<&str>, usage: [u64; 3], provider: &str| ChatResponse {
                message,
                finish_reason: finish.map(str::to_string),
                usage: Usage {
                    prompt_tokens: usage[0],
                    completion_tokens: usage[1],
                    total_tokens: usage[2],
                },
                provider: provider.into(),
            };
        vec![
            answer(
                json!({"role": "assistant",
                "content": "Graphs connect entities by typed relationships; kbq walks them breadth first. Ünïcode too.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "other", "arguments": "{}"}},
                ]}),
                Some("stop"),
                [1, 2, 3],
                "p1",
            ),
            answer(
                json!({"role": "assistant", "content": null, "refusal": "no", "tool_calls": []}),
                Some("length"),
                [10, 0, 10],
                "p2",
            ),
            answer(
                json!({"role": "assistant", "content": "short"}),
                None,
                [0, 0, 0],
                "p3",
            ),
            answer(
                json!({"content": "x", "tool_calls": [{"id": "c", "function": {}}]}),
                Some("tool_calls"),
                [0, 0, 0],
                "p4",
            ),
        ]
    }

    /// The bytes these answers have always been sent as (`testdata/bodies.txt`, written when
    /// the bodies were still built as `serde_json` maps): each answer as a `chat.completion`
    /// on one line, then its events streamed without usage and with it, each set followed by
    /// a `----` line.
    #[test]
    fn bodies_are_the_bytes_clients_have_always_read() {
        let mut out = String::new();
        for answer in answers() {
            out += &serde_json::to_string(&ChatCompletion::new("chatcmpl-x", 17, &answer)).unwrap();
            out += "\n";
            for include_usage in [false, true] {
                for event in stream::events("chatcmpl-x", 17, &answer, include_usage) {
                    out += std::str::from_utf8(&event).unwrap();
                }
                out += "----\n";
            }
        }
        assert_eq!(out, include_str!("testdata/bodies.txt"));
    }
}
