//! The [`ChatSessionActor`]: one per chat turn, it runs the tool-selection loop and replies.
//!
//! The loop: ask the provider with every tool offered; if it answers with tool calls, run
//! them all concurrently, append their results, and ask again; stop at an answer, at
//! `max_steps` provider calls, or at `max_wall` time.

use std::sync::Arc;
use std::time::Instant;

use kbq_tools::{ToolContext, ToolResult, Toolbox, Workspace};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

use crate::backend::{ChatRequest, Usage};
use crate::chat::{
    AgentError, AgentReply, AgentRequest, Role, SessionEvent, SessionLimits, StopReason,
    ToolCallCompleted, ToolCallRecord, ToolCallStarted,
};
use crate::router::ProviderRouter;
use crate::tools::{ToolPool, malformed_arguments, raw_arguments};
use tracing::Instrument;

/// The system prompt when a request gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are kbq's knowledge base assistant. Use the tools to look things up in the knowledge base and in this user's memory before answering, store facts the user asks you to remember, and answer concisely, naming the entities and documents you used.";

/// What every session shares.
pub struct SessionDeps {
    pub toolbox: Toolbox,
    /// The toolbox's OpenAI tool definitions, made once and offered at every step.
    pub definitions: Arc<Vec<Value>>,
    pub tools: ToolPool,
    pub router: ProviderRouter,
    pub limits: SessionLimits,
}

/// One session's work: the turn, the workspace and key it runs for, and where its answer
/// goes.
pub struct SessionArguments {
    pub(crate) workspace: Workspace,
    pub(crate) request: AgentRequest,
    pub(crate) owner: String,
    pub(crate) deps: Arc<SessionDeps>,
    pub(crate) reply: RpcReplyPort<Result<AgentReply, AgentError>>,
    /// Where a streamed turn's events go; `None` for a turn answered whole.
    pub(crate) events: Option<Events>,
    /// The span of the request the turn answers: the session's span is its child, so that a
    /// trace holds the whole tool loop.
    pub(crate) parent: tracing::Span,
}

/// The sending end of a streamed turn's events.
pub type Events = tokio::sync::mpsc::UnboundedSender<SessionEvent>;

/// The arguments until the loop takes them.
pub struct SessionState {
    args: Option<SessionArguments>,
}

/// Messages to a session.
pub enum SessionMessage {
    /// Run the loop and reply.
    Run,
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
                    let span = tracing::debug_span!(
                        parent: &args.parent,
                        "agent.session",
                        otel.name = "invoke_agent kbq",
                        gen_ai.operation.name = "invoke_agent",
                        gen_ai.agent.name = "kbq",
                        kbq.workspace = %args.workspace.name,
                        kbq.steps = tracing::field::Empty,
                        kbq.tool_calls = tracing::field::Empty,
                        kbq.stop_reason = tracing::field::Empty,
                        gen_ai.input.messages = tracing::field::Empty,
                        gen_ai.output.messages = tracing::field::Empty,
                    );
                    let content = crate::backend::span_content();
                    if content {
                        span.record("gen_ai.input.messages", args.request.message.as_str());
                    }
                    let result = run(
                        &args.deps,
                        &args.workspace,
                        args.request,
                        args.owner,
                        args.events.as_ref(),
                    )
                    .instrument(span.clone())
                    .await;
                    if let Ok(reply) = &result {
                        span.record("kbq.steps", reply.steps);
                        span.record("kbq.tool_calls", reply.tool_calls.len());
                        span.record("kbq.stop_reason", tracing::field::debug(&reply.stop_reason));
                        if let (true, Some(answer)) = (content, &reply.response) {
                            span.record("gen_ai.output.messages", answer.as_str());
                        }
                    }
                    let _ = args.reply.send(result);
                }
                myself.stop(None);
            }
        }
        Ok(())
    }
}

/// The tool-selection loop of one turn.
async fn run(
    deps: &SessionDeps,
    workspace: &Workspace,
    request: AgentRequest,
    owner: String,
    events: Option<&Events>,
) -> Result<AgentReply, AgentError> {
    // A stream whose client left is dropped with the session, so a failed send is ignored.
    // Built only for a streamed turn: a call's events copy its arguments and result.
    let emit = |event: &dyn Fn() -> SessionEvent| {
        if let Some(events) = events {
            let _ = events.send(event());
        }
    };
    let started = Instant::now();
    let limits = deps.limits;
    let ctx = ToolContext::new(workspace, owner);
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
    // Shared with each step's request; a step's request is dropped before the next one's
    // messages are added, so they are not copied.
    let mut messages = Arc::new(messages);
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
    // Each call's tool and arguments, and (by the same place) its result: the results stay
    // shared with the provider's requests until the turn ends (see `ChatRequest::tool_results`;
    // a provider drops its request before it answers).
    let mut called: Vec<(String, Value)> = Vec::new();
    let mut results: Arc<Vec<ToolResult>> = Arc::default();
    let outcome = loop {
        if reply.steps >= limits.max_steps {
            reply.stop_reason = StopReason::StepLimit;
            reply.error = Some(format!("no answer within {} steps", limits.max_steps));
            break Ok(());
        }
        let left = limits.max_wall.saturating_sub(started.elapsed());
        if left.is_zero() {
            reply.stop_reason = StopReason::TimeLimit;
            reply.error = Some(format!("no answer within {:?}", limits.max_wall));
            break Ok(());
        }
        let ask = ChatRequest {
            messages: messages.clone(),
            tools: deps.definitions.clone(),
            tool_results: results.clone(),
            temperature: Some(request.temperature),
            max_tokens: Some(request.max_tokens),
            workspace: Some(workspace.clone()),
            ..ChatRequest::default()
        };
        let asked = tokio::time::timeout(
            left,
            deps.router
                .complete(&ask, limits.provider_timeout.min(left)),
        )
        .await;
        drop(ask);
        let answer = match asked {
            Err(_) => {
                reply.stop_reason = StopReason::TimeLimit;
                reply.error = Some(format!("no answer within {:?}", limits.max_wall));
                break Ok(());
            }
            // Nothing could even be asked on the first step: the caller gets 503.
            Ok(Err(e @ (AgentError::NoProvider | AgentError::ProvidersBusy(_))))
                if reply.steps == 0 =>
            {
                break Err(e);
            }
            Ok(Err(e)) => {
                reply.stop_reason = StopReason::ProviderError;
                reply.error = Some(e.to_string());
                break Ok(());
            }
            Ok(Ok(answer)) => answer,
        };
        reply.steps += 1;
        reply.usage.add(answer.usage);
        reply.provider = Some(answer.provider);
        let mut message = answer.message;
        let calls: Vec<Value> = match message.get_mut("tool_calls").map(Value::take) {
            Some(Value::Array(calls)) => calls,
            _ => Vec::new(),
        };
        if calls.is_empty() {
            let text = message["content"].as_str().unwrap_or_default().to_string();
            if !text.is_empty() {
                emit(&|| SessionEvent::Delta(text.clone()));
            }
            reply.success = true;
            reply.stop_reason = StopReason::Answered;
            reply.response = Some(text);
            break Ok(());
        }
        // Every call of one step runs at once; results keep call order.
        let step = reply.steps;
        let first = called.len();
        let runs = calls.iter().enumerate().map(|(i, call)| {
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
            let id = call["id"].as_str().unwrap_or_default().to_string();
            let tools = deps.tools.clone();
            let ctx = ctx.clone();
            let arguments = parsed.clone().unwrap_or_else(|| raw_arguments(&raw));
            emit(&|| {
                SessionEvent::ToolCallStarted(ToolCallStarted {
                    index: first + i,
                    step,
                    id: id.clone(),
                    tool: name.clone(),
                    arguments: arguments.clone(),
                })
            });
            let span = tracing::debug_span!(
                "agent.tool",
                otel.name = %format!("execute_tool {name}"),
                gen_ai.operation.name = "execute_tool",
                gen_ai.tool.name = %name,
                gen_ai.tool.call.id = %id,
                kbq.result_bytes = tracing::field::Empty,
                kbq.error = tracing::field::Empty,
                gen_ai.tool.call.arguments = tracing::field::Empty,
                gen_ai.tool.call.result = tracing::field::Empty,
            );
            let content = crate::backend::span_content();
            if content {
                span.record("gen_ai.tool.call.arguments", raw.as_str());
            }
            async move {
                let began = Instant::now();
                let result = match parsed {
                    Some(args) => {
                        let mut ctx = ctx;
                        ctx.span = tracing::Span::current();
                        tools.call_for_model(&name, &ctx, args).await
                    }
                    None => malformed_arguments(&raw),
                };
                let current = tracing::Span::current();
                current.record("kbq.result_bytes", result.json().len());
                if content {
                    current.record("gen_ai.tool.call.result", result.json());
                }
                if let Some(error) = result.error() {
                    current.record("kbq.error", error);
                }
                emit(&|| {
                    SessionEvent::ToolCallCompleted(ToolCallCompleted {
                        index: first + i,
                        step,
                        id: id.clone(),
                        tool: name.clone(),
                        arguments: arguments.clone(),
                        result: result.clone(),
                        error: result.error().map(str::to_string),
                        duration_ms: began.elapsed().as_secs_f64() * 1000.0,
                    })
                });
                (name, arguments, result)
            }
            .instrument(span)
        });
        let done = futures::future::join_all(runs).await;
        let mut told = Vec::with_capacity(done.len());
        let held = Arc::make_mut(&mut results);
        for (call, (tool, arguments, result)) in calls.iter().zip(done) {
            told.push(json!({
                "role": "tool",
                "tool_call_id": call["id"].as_str().unwrap_or_default(),
                "content": result.json(),
            }));
            called.push((tool, arguments));
            held.push(result);
        }
        // The assistant's message goes into the conversation as it came, tool calls included,
        // then the results.
        message["tool_calls"] = Value::Array(calls);
        let conversation = Arc::make_mut(&mut messages);
        conversation.push(message);
        conversation.extend(told);
    };
    let results = Arc::try_unwrap(results).unwrap_or_else(|shared| (*shared).clone());
    reply.tool_calls = called
        .into_iter()
        .zip(results)
        .map(|((tool, arguments), result)| ToolCallRecord {
            tool,
            arguments,
            result,
        })
        .collect();
    outcome.map(|()| reply)
}
