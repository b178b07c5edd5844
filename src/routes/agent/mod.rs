//! The agent endpoints: `POST /v1/agent/chat` (answered whole, or streamed: see `stream`)
//! and `GET /v1/agent/health`.

mod stream;

pub use stream::{ChatDelta, ChatEvent};

use actix_web::http::StatusCode;
use actix_web::http::header::ContentType;
use actix_web::middleware::from_fn;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use std::future::Future;

use kbq_actors::{
    Agent, AgentError, AgentReply, AgentRequest, Health, HealthReport, Role, StopReason,
    ToolCallRecord,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{KeyIdentity, Scope, require_scope};
use crate::config::AgentSection;
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{Items, Range, Rules, ValidJson};
use crate::peer::unless_client_leaves;
use crate::workspaces::Workspace;
use kbq_store::model::longer_than;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/agent/chat")
            .wrap(from_fn(|req, next| require_scope(Scope::Agent, req, next)))
            .route(web::post().to(chat)),
    );
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    pub role: HistoryRole,
    /// At most `agent.max_message_chars` characters, as a message.
    pub content: String,
}

/// Who said a history entry.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HistoryRole {
    User,
    Assistant,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    pub message: String,
    pub system_prompt: Option<String>,
    pub history: Option<Vec<HistoryEntry>>,
    pub temperature: Option<f64>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub max_tokens: Option<i64>,
    /// Answer as server-sent events while the turn runs (see the 200 answer's
    /// `text/event-stream`); absent, null or false: one JSON answer at the end.
    pub stream: Option<bool>,
}

/// `temperature`: its least, its most, and the value an absent one takes.
pub const TEMPERATURE: (f64, f64, f64) = (0.0, 2.0, 0.7);

impl ChatRequest {
    /// `max_tokens`' rule, bounded by `agent.max_tokens_limit`.
    pub fn max_tokens(limits: &AgentSection) -> Range {
        Range::new("max_tokens", 1, i64::from(limits.max_tokens_limit), 1024)
    }

    /// `history`'s size, bounded by `agent.max_history`.
    pub fn history(limits: &AgentSection) -> Items {
        Items {
            field: "history",
            min: 0,
            max: limits.max_history,
        }
    }
}

/// The message's and the history's lengths and `max_tokens`' bound come from `[agent]`: the
/// server states them when it builds its document (`crate::openapi::Live`).
impl Rules for ChatRequest {
    const NOT_BLANK: &'static [&'static str] = &["message"];
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChatUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Provider calls made.
    pub steps: u32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChatResponse {
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub response: Option<String>,
    pub tool_calls: Vec<ToolCallRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    pub stop_reason: StopReason,
    pub usage: ChatUsage,
    pub provider: Option<String>,
}

impl ChatResponse {
    /// The answer of a run that failed before the agent could answer: no tool calls, no
    /// usage, `stop_reason` `provider_error`.
    fn failed(error: String) -> Self {
        ChatResponse {
            success: false,
            response: None,
            tool_calls: Vec::new(),
            error: Some(error),
            stop_reason: StopReason::ProviderError,
            usage: ChatUsage {
                prompt_tokens: 0,
                completion_tokens: 0,
                total_tokens: 0,
                steps: 0,
            },
            provider: None,
        }
    }
}

impl From<AgentReply> for ChatResponse {
    fn from(reply: AgentReply) -> Self {
        ChatResponse {
            success: reply.success,
            response: reply.response,
            tool_calls: reply.tool_calls,
            error: reply.error,
            stop_reason: reply.stop_reason,
            usage: ChatUsage {
                prompt_tokens: reply.usage.prompt_tokens,
                completion_tokens: reply.usage.completion_tokens,
                total_tokens: reply.usage.total_tokens,
                steps: reply.steps,
            },
            provider: reply.provider,
        }
    }
}

/// What a turn comes to: the body of its answer, or the error that answers instead.
type TurnOutcome = Result<ChatResponse, ApiError>;

/// The answer to a turn's reply, streamed or not.
async fn outcome(reply: impl Future<Output = Result<AgentReply, AgentError>>) -> TurnOutcome {
    match reply.await.map_err(ApiError::from) {
        Ok(reply) => Ok(reply.into()),
        // The one exception to the common mapping of agent failures: a run that started and
        // then failed upstream (every provider failed, or the session was lost) is a 200 with
        // `success: false` here, as the spec allows ("an agent chat that fails may return
        // success false"), not a 502.
        Err(e) if e.code == ErrorCode::Upstream => {
            tracing::error!(error = %e.message, "chat run failed");
            Ok(ChatResponse::failed(e.message))
        }
        Err(e) => Err(e),
    }
}

/// Checks a chat request against the spec's rules and the configured bounds.
fn validate(req: ChatRequest, limits: &AgentSection) -> Result<AgentRequest, ApiError> {
    let max_chars = limits.max_message_chars;
    let too_long = |field: &str, text: &str| {
        if longer_than(text, max_chars) {
            Err(ApiError::invalid(
                field,
                format!("{field} must be at most {max_chars} characters"),
            ))
        } else {
            Ok(())
        }
    };
    if req.message.trim().is_empty() {
        return Err(ApiError::invalid("message", "message must not be empty"));
    }
    too_long("message", &req.message)?;
    if let Some(p) = &req.system_prompt {
        too_long("system_prompt", p)?;
    }
    let history = req.history.unwrap_or_default();
    let Items { field, max, .. } = ChatRequest::history(limits);
    if history.len() > max {
        return Err(ApiError::invalid(
            field,
            format!("history may hold at most {max} entries"),
        ));
    }
    let history = history
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            too_long(&format!("history[{i}].content"), &h.content)?;
            let role = match h.role {
                HistoryRole::User => Role::User,
                HistoryRole::Assistant => Role::Assistant,
            };
            Ok((role, h.content))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let (least, most, default) = TEMPERATURE;
    let temperature = req.temperature.unwrap_or(default);
    if !(least..=most).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature must be between {least:.1} and {most:.1}"),
        ));
    }
    let max_tokens = ChatRequest::max_tokens(limits).check(req.max_tokens)?;
    Ok(AgentRequest {
        message: req.message,
        system_prompt: req.system_prompt,
        history,
        temperature,
        max_tokens: max_tokens as u32,
    })
}

/// Answers a message with the tool-using agent.
///
/// The agent picks and calls built-in tools on its own; the answer lists each call. A run that
/// started but failed is still a 200, with `success: false` and a `stop_reason`
/// (docs/agent.md).
#[utoipa::path(
    post,
    path = "/v1/agent/chat",
    tag = "agent",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The run's answer, tool calls and usage; with `stream: true`, `text/event-stream` events as the run goes, the last `done` (whose data is this JSON answer) or `error` (docs/agent.md)",
            content(
                (ChatResponse = "application/json"),
                (ChatEvent = "text/event-stream"),
            )),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("no language-model provider is available, or the client closed the connection"), body = ErrorBody),
    ),
    security(("bearer" = ["agent"]), ("api_key" = ["agent"])),
)]
async fn chat(
    agent: web::Data<Agent>,
    limits: web::Data<AgentSection>,
    ws: web::ReqData<Workspace>,
    http: HttpRequest,
    ValidJson(req): ValidJson<ChatRequest>,
) -> Result<HttpResponse, ApiError> {
    let stream = req.stream.unwrap_or(false);
    let request = validate(req, &limits)?;
    let owner = http
        .extensions()
        .get::<KeyIdentity>()
        .map(|k| k.id.to_string())
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidApiKey, "an API key is required"))?;
    if stream {
        // Refusals (no provider, too many sessions) still answer before the stream begins.
        let (turn, events) = agent
            .chat_streamed(&ws, request, owner)
            .await
            .map_err(ApiError::from)?;
        return Ok(super::event_stream()
            .insert_header(("X-Accel-Buffering", "no"))
            .streaming(stream::body(turn, events, http)));
    }
    // Dropping the chat future kills the session.
    let response = unless_client_leaves(
        &http,
        outcome(agent.chat(&ws, request, owner)),
        "session cancelled",
    )
    .await??;
    if let Some(m) = http.app_data::<web::Data<crate::metrics::Metrics>>() {
        for call in &response.tool_calls {
            m.observe_tool_call(&call.tool, !call.result.failed());
        }
    }
    Ok(HttpResponse::Ok()
        .insert_header(ContentType::json())
        .body(chat_body(&response)))
}

/// The bytes `serde_json` writes for a [`ChatResponse`] (a unit test holds both ways to the
/// same bytes). The tool calls' results, documents' texts for the most part, go through
/// [`kbq_store::json`], which escapes long strings a word at a time.
fn chat_body(r: &ChatResponse) -> Vec<u8> {
    use kbq_store::json::{write_serialized, write_str, write_value};
    let mut out = String::with_capacity(4096);
    out.push_str(if r.success {
        "{\"success\":true"
    } else {
        "{\"success\":false"
    });
    if let Some(text) = &r.response {
        out.push_str(",\"response\":");
        write_str(&mut out, text);
    }
    out.push_str(",\"tool_calls\":[");
    for (i, call) in r.tool_calls.iter().enumerate() {
        out.push_str(if i > 0 { ",{\"tool\":" } else { "{\"tool\":" });
        write_str(&mut out, &call.tool);
        out.push_str(",\"arguments\":");
        write_value(&mut out, &call.arguments);
        out.push_str(",\"result\":");
        out.push_str(call.result.json());
        out.push('}');
    }
    out.push(']');
    if let Some(error) = &r.error {
        out.push_str(",\"error\":");
        write_str(&mut out, error);
    }
    out.push_str(",\"stop_reason\":");
    write_serialized(&mut out, &r.stop_reason);
    out.push_str(",\"usage\":");
    write_serialized(&mut out, &r.usage);
    out.push_str(",\"provider\":");
    write_serialized(&mut out, &r.provider);
    out.push('}');
    out.into_bytes()
}

/// The providers' health, from the cached report: never waits on a provider.
///
/// 200 when healthy or degraded, 503 when unhealthy (the body is the report either way).
#[utoipa::path(
    get,
    path = "/v1/agent/health",
    tag = "agent",
    responses(
        (status = 200, description = "`healthy` or `degraded`", body = HealthReport),
        (status = 503, description = "`unhealthy`: no provider is up. The body is the report, not an error", body = HealthReport),
    ),
    // Any key will do: no scope.
    security(("bearer" = []), ("api_key" = [])),
)]
pub(crate) async fn health(agent: web::Data<Agent>) -> HttpResponse {
    let mut body = String::with_capacity(256);
    let status = if agent.health().write_report(&mut body) == Health::Unhealthy {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    HttpResponse::build(status)
        .insert_header(ContentType::json())
        .insert_header(("Cache-Control", "no-store"))
        .body(body)
}

#[cfg(test)]
mod tests {
    use kbq_actors::{StopReason, ToolCallRecord};
    use serde_json::json;

    use super::*;

    /// The hand-written body of a chat is what serde_json writes: with and without an answer,
    /// an error, tool calls and a provider, for results that hold text needing escapes.
    #[test]
    fn chat_body_is_what_serde_json_writes() {
        let call = |tool: &str, result: serde_json::Value| ToolCallRecord {
            tool: tool.into(),
            arguments: json!({"query": "Ada \"L\"", "limit": 5, "w": 0.25}),
            result: kbq_tools::ToolResult::from_value(&result),
        };
        let usage = ChatUsage {
            prompt_tokens: 120,
            completion_tokens: 7,
            total_tokens: 127,
            steps: 2,
        };
        let answered = ChatResponse {
            success: true,
            response: Some("Ada wrote:\n\t\"notes\" \\ é 😀".into()),
            tool_calls: vec![
                call(
                    "hybrid_search",
                    json!({"results": [{"content": "a\u{1}b", "score": 0.5}], "total": 1}),
                ),
                call("memory_stats", json!({"error": "no \"memory\""})),
            ],
            error: None,
            stop_reason: StopReason::Answered,
            usage,
            provider: Some("builtin".into()),
        };
        let mut failed = ChatResponse::failed("provider \"x\" failed".into());
        failed.stop_reason = StopReason::TimeLimit;
        for r in [answered, failed, ChatResponse::failed(String::new())] {
            assert_eq!(
                String::from_utf8(chat_body(&r)).unwrap(),
                serde_json::to_string(&r).unwrap()
            );
        }
    }
}
