//! Chat sessions: [`Agent`] (the edge's handle), the [`ProviderRouter`] that picks a healthy
//! provider and falls back in priority order, and one [`ChatSessionActor`] per request that
//! runs the tool-selection loop under the [`SessionSupervisor`].
//!
//! The loop: ask the provider with every tool offered; if it answers with tool calls, run
//! them all concurrently, append their results, and ask again; stop at an answer, at
//! `max_steps` provider calls, or at `max_wall` time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kbq_store::KnowledgeBase;
use kbq_tools::{EntityExtractor, ToolContext, Toolbox};
use parking_lot::RwLock;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde::Serialize;
use serde_json::{Value, json};

use crate::health::HealthBoard;
use crate::pool::{Admission, PoolError, PoolHandle};
use crate::provider::{ChatRequest, ChatResponse, ProviderMessage, Usage};
use crate::tools::{ToolPool, malformed_arguments, raw_arguments};

/// The system prompt when a request gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are kbq's knowledge base assistant. Use the tools to look things up in the knowledge base and in this user's memory before answering, store facts the user asks you to remember, and answer concisely, naming the entities and documents you used.";

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
    pub result: Value,
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

/// One provider's worker pool as the router calls it.
#[derive(Clone)]
pub(crate) struct ProviderHandle {
    pub name: String,
    pub pool: PoolHandle<ProviderMessage>,
}

/// Picks providers in priority order, skipping ejected ones, and falls back on failure.
#[derive(Clone)]
pub struct ProviderRouter {
    pub(crate) providers: Vec<ProviderHandle>,
    pub board: HealthBoard,
}

impl ProviderRouter {
    /// Asks the first available provider, then the next, until one answers.
    pub async fn complete(
        &self,
        request: &ChatRequest,
        timeout: Duration,
    ) -> Result<ChatResponse, AgentError> {
        self.complete_in(None, request, timeout).await
    }

    /// As [`complete`](Self::complete), over the providers of `chain` in its order (all
    /// providers in priority order when `None`). Ejected providers are skipped.
    pub async fn complete_in(
        &self,
        chain: Option<&[String]>,
        request: &ChatRequest,
        timeout: Duration,
    ) -> Result<ChatResponse, AgentError> {
        let available = self.board.available();
        let available: Vec<String> = match chain {
            None => available,
            Some(chain) => chain
                .iter()
                .filter(|n| available.contains(n))
                .cloned()
                .collect(),
        };
        if available.is_empty() {
            return Err(AgentError::NoProvider);
        }
        let mut last_error = String::new();
        let (mut tried, mut busy) = (0, 0);
        for name in available {
            let Some(provider) = self.providers.iter().find(|p| p.name == name) else {
                continue;
            };
            let answer = provider
                .pool
                .call_within(Some(timeout), |reply| {
                    ProviderMessage::Complete(request.clone(), reply)
                })
                .await;
            last_error = match answer {
                Ok(Ok(answer)) => return Ok(answer),
                // Starting or restarting: not asked, so not counted.
                Err(PoolError::NotRunning) => continue,
                // A full pool sheds at once, and the next provider is tried.
                Err(PoolError::Overloaded(n)) => {
                    tried += 1;
                    busy += 1;
                    last_error = format!("{name}: {n} calls already running or queued");
                    tracing::warn!(provider = %name, "provider busy; falling back");
                    continue;
                }
                Ok(Err(e)) => format!("{name}: {e}"),
                Err(PoolError::Timeout(after)) => format!("{name}: no answer within {after:?}"),
                Err(PoolError::WorkerLost | PoolError::Refused(_)) => {
                    format!("{name}: provider stopped")
                }
            };
            tried += 1;
            tracing::warn!(provider = %name, error = %last_error, "provider failed; falling back");
        }
        if tried > 0 && busy == tried {
            return Err(AgentError::ProvidersBusy(last_error));
        }
        Err(AgentError::ProvidersFailed(last_error))
    }
}

/// What every session shares.
pub struct SessionDeps {
    pub kb: Arc<KnowledgeBase>,
    pub extractor: Arc<EntityExtractor>,
    pub toolbox: Toolbox,
    pub tools: ToolPool,
    pub router: ProviderRouter,
    pub limits: SessionLimits,
    /// Sessions running now.
    pub(crate) running: Arc<std::sync::atomic::AtomicUsize>,
}

/// The edge's handle on the agent runtime.
#[derive(Clone)]
pub struct Agent {
    pub(crate) deps: Arc<SessionDeps>,
    pub(crate) supervisor: Arc<RwLock<Option<ActorRef<SessionSupervisorMessage>>>>,
}

/// Kills the session if the caller goes away before it answers.
struct KillOnDrop(Option<ActorCell>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(cell) = self.0.take() {
            cell.kill();
        }
    }
}

impl Agent {
    /// The health board, read without waiting on any provider.
    pub fn health(&self) -> &HealthBoard {
        &self.deps.router.board
    }

    pub fn tools(&self) -> &ToolPool {
        &self.deps.tools
    }

    /// Finds known entity names in text (shared with the RAG endpoints).
    pub fn extractor(&self) -> &Arc<EntityExtractor> {
        &self.deps.extractor
    }

    /// The configured providers' names, in priority order.
    pub fn providers(&self) -> Vec<String> {
        self.deps
            .router
            .providers
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    /// One model call through the provider actors (retries, health, fallback along `chain`;
    /// every provider in priority order when `None`), without tools run by kbq: the OpenAI
    /// chat completions endpoint. Dropping the future abandons the call and its retries.
    pub async fn complete(
        &self,
        chain: Option<&[String]>,
        request: &ChatRequest,
    ) -> Result<ChatResponse, AgentError> {
        self.deps
            .router
            .complete_in(chain, request, self.deps.limits.provider_timeout)
            .await
    }

    /// Answers one chat turn for the key `owner`. Dropping the future stops the session.
    pub async fn chat(
        &self,
        request: AgentRequest,
        owner: String,
    ) -> Result<AgentReply, AgentError> {
        if self.deps.router.board.available().is_empty() {
            return Err(AgentError::NoProvider);
        }
        let _running = Admission::take(&self.deps.running, self.deps.limits.max_sessions.max(1))
            .map_err(AgentError::Overloaded)?;
        let supervisor = self
            .supervisor
            .read()
            .clone()
            .ok_or_else(|| AgentError::SessionLost("sessions are not running".into()))?;
        let (tx, rx) = ractor::concurrency::oneshot();
        let args = SessionArguments {
            request,
            owner,
            deps: self.deps.clone(),
            reply: tx.into(),
        };
        let (session, _) = Actor::spawn_linked(None, ChatSessionActor, args, supervisor.get_cell())
            .await
            .map_err(|e| AgentError::SessionLost(e.to_string()))?;
        let mut guard = KillOnDrop(Some(session.get_cell()));
        let grace =
            self.deps.limits.max_wall + self.deps.limits.provider_timeout + Duration::from_secs(1);
        let result = match tokio::time::timeout(grace, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(AgentError::SessionLost(
                "the session ended without a reply".into(),
            )),
            Err(_) => Err(AgentError::SessionLost(
                "the session overran its time limit".into(),
            )),
        };
        guard.0 = None;
        result
    }
}

pub struct SessionArguments {
    request: AgentRequest,
    owner: String,
    deps: Arc<SessionDeps>,
    reply: RpcReplyPort<Result<AgentReply, AgentError>>,
}

/// Messages to a session.
pub enum SessionMessage {
    /// Run the loop and reply.
    Run,
}

pub struct SessionState {
    args: Option<SessionArguments>,
}

/// One chat turn: builds the conversation and runs the tool loop.
pub struct ChatSessionActor;

impl Actor for ChatSessionActor {
    type Msg = SessionMessage;
    type State = SessionState;
    type Arguments = SessionArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SessionArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(SessionMessage::Run)?;
        Ok(SessionState { args: Some(args) })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: SessionMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SessionMessage::Run => {
                if let Some(args) = state.args.take() {
                    let result = run(&args.deps, args.request, args.owner).await;
                    let _ = args.reply.send(result);
                }
                myself.stop(None);
            }
        }
        Ok(())
    }
}

async fn run(
    deps: &SessionDeps,
    request: AgentRequest,
    owner: String,
) -> Result<AgentReply, AgentError> {
    let started = Instant::now();
    let limits = deps.limits;
    let ctx = ToolContext {
        kb: deps.kb.clone(),
        extractor: deps.extractor.clone(),
        owner,
    };
    let mut messages = vec![
        json!({"role": "system", "content": request.system_prompt.as_deref().unwrap_or(DEFAULT_SYSTEM_PROMPT)}),
    ];
    for (role, content) in &request.history {
        let role = if *role == Role::User {
            "user"
        } else {
            "assistant"
        };
        messages.push(json!({"role": role, "content": content}));
    }
    messages.push(json!({"role": "user", "content": request.message}));
    let tools = deps.toolbox.openai_definitions();
    let mut reply = AgentReply {
        success: false,
        response: None,
        tool_calls: Vec::new(),
        error: None,
        stop_reason: StopReason::StepLimit,
        usage: Usage::default(),
        steps: 0,
        provider: None,
    };
    loop {
        if reply.steps >= limits.max_steps {
            reply.stop_reason = StopReason::StepLimit;
            reply.error = Some(format!("no answer within {} steps", limits.max_steps));
            return Ok(reply);
        }
        let left = limits.max_wall.saturating_sub(started.elapsed());
        if left.is_zero() {
            reply.stop_reason = StopReason::TimeLimit;
            reply.error = Some(format!("no answer within {:?}", limits.max_wall));
            return Ok(reply);
        }
        let ask = ChatRequest {
            messages: messages.clone(),
            tools: tools.clone(),
            temperature: Some(request.temperature),
            max_tokens: Some(request.max_tokens),
            ..ChatRequest::default()
        };
        let answer = match tokio::time::timeout(
            left,
            deps.router
                .complete(&ask, limits.provider_timeout.min(left)),
        )
        .await
        {
            Err(_) => {
                reply.stop_reason = StopReason::TimeLimit;
                reply.error = Some(format!("no answer within {:?}", limits.max_wall));
                return Ok(reply);
            }
            // Nothing could even be asked on the first step: the caller gets 503.
            Ok(Err(e @ (AgentError::NoProvider | AgentError::ProvidersBusy(_))))
                if reply.steps == 0 =>
            {
                return Err(e);
            }
            Ok(Err(e)) => {
                reply.stop_reason = StopReason::ProviderError;
                reply.error = Some(e.to_string());
                return Ok(reply);
            }
            Ok(Ok(answer)) => answer,
        };
        reply.steps += 1;
        reply.usage.add(answer.usage);
        reply.provider = Some(answer.provider.clone());
        let calls: Vec<Value> = answer.message["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if calls.is_empty() {
            reply.success = true;
            reply.stop_reason = StopReason::Answered;
            reply.response = Some(
                answer.message["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            return Ok(reply);
        }
        messages.push(answer.message.clone());
        // Every call of one step runs at once; results keep call order.
        let runs = calls.iter().map(|call| {
            let name = call["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let raw = call["function"]["arguments"]
                .as_str()
                .unwrap_or("{}")
                .to_string();
            let parsed: Option<Value> = serde_json::from_str::<Value>(&raw)
                .ok()
                .filter(Value::is_object);
            let tools = deps.tools.clone();
            let ctx = ctx.clone();
            async move {
                let (arguments, result) = match parsed {
                    Some(args) => (args.clone(), tools.call_for_model(&name, &ctx, args).await),
                    None => (raw_arguments(&raw), malformed_arguments(&raw)),
                };
                ToolCallRecord {
                    tool: name,
                    arguments,
                    result,
                }
            }
        });
        let records = futures::future::join_all(runs).await;
        for (call, record) in calls.iter().zip(records) {
            messages.push(json!({
                "role": "tool",
                "tool_call_id": call["id"].as_str().unwrap_or_default(),
                "content": record.result.to_string(),
            }));
            reply.tool_calls.push(record);
        }
    }
}

/// Messages to the session supervisor.
#[derive(Debug)]
pub enum SessionSupervisorMessage {}

/// Parent of every chat session. A session is one request: it is never restarted; its
/// failure is logged and its caller gets an error.
pub struct SessionSupervisor;

impl Actor for SessionSupervisor {
    type Msg = SessionSupervisorMessage;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            tracing::error!(session = %cell.get_id(), error = %err, "chat session failed");
        }
        Ok(())
    }
}
