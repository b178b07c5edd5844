//! [`Agent`], the edge's handle on the agent runtime: starts one chat session per chat turn
//! under the session supervisor (bounded by `max_sessions`, killed when its caller goes), and
//! makes single model calls through the router for the completions endpoint.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use kbq_tools::EntityExtractor;
use ractor::{Actor, ActorCell, ActorRef};

use crate::backend::{ChatRequest, ChatResponse};
use crate::chat::{AgentError, AgentReply, AgentRequest};
use crate::health::HealthBoard;
use crate::pool::{Admission, Slot};
use crate::session::{ChatSessionActor, SessionArguments, SessionDeps};
use crate::session_supervisor::SessionSupervisorMessage;
use crate::tools::ToolPool;

/// The edge's handle on the agent runtime.
#[derive(Clone)]
pub struct Agent {
    deps: Arc<SessionDeps>,
    /// The session supervisor, followed across its restarts by the root.
    supervisor: Slot<ActorRef<SessionSupervisorMessage>>,
    /// Sessions running now.
    running: Arc<AtomicUsize>,
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
    pub(crate) fn new(
        deps: SessionDeps,
        supervisor: Slot<ActorRef<SessionSupervisorMessage>>,
    ) -> Self {
        Agent {
            deps: Arc::new(deps),
            supervisor,
            running: Arc::default(),
        }
    }

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
        let _running = Admission::take(&self.running, self.deps.limits.max_sessions.max(1))
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
