//! [`Agent`], the edge's handle on the agent runtime: starts one chat session per chat turn
//! under the session supervisor (bounded by `max_sessions`, killed when its caller goes), and
//! makes single model calls through the router for the completions endpoint.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use kbq_tools::Workspace;
use ractor::actor::ActorRuntime;
use ractor::concurrency::JoinHandle;
use ractor::{ActorCell, ActorRef, SpawnErr};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::backend::{ChatRequest, ChatResponse};
use crate::chat::{AgentError, AgentReply, AgentRequest, SessionEvent};
use crate::edge_supervisor::EdgeSupervisorMessage;
use crate::health::HealthBoard;
use crate::pool::{Admission, Slot};
use crate::session::{ChatSessionActor, Events, SessionArguments, SessionDeps};
use crate::tools::ToolPool;

/// The edge's handle on the agent runtime.
#[derive(Clone)]
pub struct Agent {
    deps: Arc<SessionDeps>,
    /// The sessions' parent (the edge supervisor), followed across its restarts by the root.
    supervisor: Slot<ActorRef<EdgeSupervisorMessage>>,
    /// Sessions running now.
    running: Arc<AtomicUsize>,
    /// The runtime the sessions run on: the one the tool and provider workers run on (see
    /// [`start`](Self::start)).
    runtime: tokio::runtime::Handle,
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
    /// An agent whose sessions run on `runtime`.
    pub(crate) fn new(
        deps: SessionDeps,
        supervisor: Slot<ActorRef<EdgeSupervisorMessage>>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Agent {
            deps: Arc::new(deps),
            supervisor,
            running: Arc::default(),
            runtime,
        }
    }

    /// The health board, read without waiting on any provider.
    pub fn health(&self) -> &HealthBoard {
        &self.deps.router.board
    }

    pub fn tools(&self) -> &ToolPool {
        &self.deps.tools
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

    /// Answers one chat turn in `workspace` for the key `owner`. Dropping the future stops
    /// the session.
    pub async fn chat(
        &self,
        workspace: &Workspace,
        request: AgentRequest,
        owner: String,
    ) -> Result<AgentReply, AgentError> {
        self.start(workspace, request, owner, None)
            .await?
            .reply()
            .await
    }

    /// Starts one chat turn for the key `owner` whose session reports what it does as it
    /// runs: the turn, and its events. Refused at once (no provider, too many sessions) as
    /// [`chat`](Self::chat) is; dropping the turn stops the session.
    pub async fn chat_streamed(
        &self,
        workspace: &Workspace,
        request: AgentRequest,
        owner: String,
    ) -> Result<(ChatTurn, UnboundedReceiver<SessionEvent>), AgentError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Ok((self.start(workspace, request, owner, Some(tx)).await?, rx))
    }

    async fn start(
        &self,
        workspace: &Workspace,
        request: AgentRequest,
        owner: String,
        events: Option<Events>,
    ) -> Result<ChatTurn, AgentError> {
        if self.deps.router.board.available().is_empty() {
            return Err(AgentError::NoProvider);
        }
        let running = Admission::take(&self.running, self.deps.limits.max_sessions.max(1))
            .map_err(AgentError::Overloaded)?;
        let supervisor = self
            .supervisor
            .read()
            .clone()
            .ok_or_else(|| AgentError::SessionLost("sessions are not running".into()))?;
        let (tx, rx) = ractor::concurrency::oneshot();
        let args = SessionArguments {
            workspace: workspace.clone(),
            request,
            owner,
            deps: self.deps.clone(),
            reply: tx.into(),
            events,
            parent: tracing::Span::current(),
        };
        // The session runs on the runtime of the workers it calls, not on the caller's (an
        // HTTP worker's): each of a turn's calls (a model call, a tool call) is answered by a
        // worker on that runtime, and an answer to a task on the same runtime is handed over
        // on that runtime's threads, where one to the caller's thread wakes it. Only the
        // turn's reply (and its events) cross to the caller. The session starts on its own;
        // a start that fails drops the reply's sender and is read in `ChatTurn::reply`.
        let (session, started) = {
            let _on = self.runtime.enter();
            ActorRuntime::spawn_linked_instant(None, ChatSessionActor, args, supervisor.get_cell())
                .map_err(|e| AgentError::SessionLost(e.to_string()))?
        };
        Ok(ChatTurn {
            reply: rx,
            started,
            session: KillOnDrop(Some(session.get_cell())),
            _running: running,
            grace: self.deps.limits.max_wall
                + self.deps.limits.provider_timeout
                + Duration::from_secs(1),
        })
    }
}

/// A chat turn that has started: its session runs until it replies or this is dropped.
pub struct ChatTurn {
    reply: ractor::concurrency::OneshotReceiver<Result<AgentReply, AgentError>>,
    /// The session's start: an error when it did not start.
    started: JoinHandle<Result<JoinHandle<()>, SpawnErr>>,
    session: KillOnDrop,
    _running: Admission,
    /// The longest wait for the reply: the session's own limits, and a second.
    grace: Duration,
}

impl ChatTurn {
    /// The turn's outcome. Dropping the future stops the session.
    pub async fn reply(mut self) -> Result<AgentReply, AgentError> {
        let result = match tokio::time::timeout(self.grace, &mut self.reply).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(AgentError::SessionLost(match (&mut self.started).await {
                Ok(Err(e)) => e.to_string(),
                _ => "the session ended without a reply".into(),
            })),
            Err(_) => Err(AgentError::SessionLost(
                "the session overran its time limit".into(),
            )),
        };
        self.session.0 = None;
        result
    }
}
