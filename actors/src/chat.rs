//! What a chat turn takes and gives: [`AgentRequest`], [`AgentReply`] (with its
//! [`ToolCallRecord`]s and [`StopReason`]), the [`SessionEvent`]s of a streamed turn,
//! [`AgentError`], and the [`SessionLimits`] that cap a session. Its own file, below the router, the session actor and the `Agent` handle,
//! so that all three use these types without importing one another.

use std::time::Duration;

use kbq_tools::ToolResult;
use serde::Serialize;
use serde_json::Value;

use crate::backend::Usage;

/// One earlier turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// A chat turn to answer.
#[derive(Debug, Clone)]
pub struct AgentRequest {
    pub message: String,
    pub system_prompt: Option<String>,
    pub history: Vec<(Role, String)>,
    pub temperature: f64,
    pub max_tokens: u32,
}

/// One tool call the agent made, in call order.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallRecord {
    pub tool: String,
    pub arguments: Value,
    // Held as JSON text, which the answer's body takes as it is.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub result: ToolResult,
}

/// What a session reports while it runs, for a streamed chat: each tool call as it starts
/// and as it ends, and the answer's text. Sent in this order; the reply comes after the last.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    ToolCallStarted(ToolCallStarted),
    ToolCallCompleted(ToolCallCompleted),
    /// Text of the answer. A provider that answers whole gives all of it in one.
    Delta(String),
}

/// A tool call the model asked for, about to run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallStarted {
    /// The call's position in the answer's `tool_calls`, from 0.
    pub index: usize,
    /// The provider call that asked for it, from 1.
    pub step: u32,
    /// The model's id for the call.
    pub id: String,
    pub tool: String,
    /// As the answer's `tool_calls` will show them.
    pub arguments: Value,
}

/// A tool call that ended: its record as the answer's `tool_calls` will show it, and how long
/// it ran.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallCompleted {
    pub index: usize,
    pub step: u32,
    pub id: String,
    pub tool: String,
    pub arguments: Value,
    /// The tool's result; a failed call's holds `error`.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub result: ToolResult,
    /// The failure's message when the call failed, else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub error: Option<String>,
    /// Milliseconds the call ran.
    pub duration_ms: f64,
}

/// Why the loop ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered.
    Answered,
    /// `max_steps` provider calls were made without an answer.
    StepLimit,
    /// `max_wall` passed without an answer.
    TimeLimit,
    /// Every provider failed during the run.
    ProviderError,
}

/// The outcome of a chat that started.
#[derive(Debug, Clone, Serialize)]
pub struct AgentReply {
    pub success: bool,
    pub response: Option<String>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub error: Option<String>,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// Provider calls made.
    pub steps: u32,
    /// The provider that gave the last answer.
    pub provider: Option<String>,
}

/// Why a chat did not start or did not finish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    /// Every provider is ejected: nothing can answer now.
    #[error("no language-model provider is available")]
    NoProvider,
    /// The session stopped without answering (it crashed, or the runtime is stopping).
    #[error("the chat session stopped before answering: {0}")]
    SessionLost(String),
    /// `max_sessions` sessions are running: the request was not started.
    #[error("the agent is busy: {0} chat sessions are already running")]
    Overloaded(usize),
    /// Every provider that could answer has its workers and queue full: nothing was asked.
    #[error("every available provider is busy: {0}")]
    ProvidersBusy(String),
    /// Every available provider was asked and failed (errors, timeouts, stopped workers).
    #[error("every provider failed; last error: {0}")]
    ProvidersFailed(String),
}

/// Caps on one session.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub max_steps: u32,
    pub max_wall: Duration,
    /// Longest wait for one provider (its retries included) before falling back.
    pub provider_timeout: Duration,
    /// Most sessions running at once; one more is refused at once.
    pub max_sessions: usize,
}
