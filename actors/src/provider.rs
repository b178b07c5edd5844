//! The [`ProviderWorker`] pool: one ractor factory per provider, whose workers run one
//! backend with retries and report every outcome to health.

use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

use ractor::factory::{FactoryMessage, Job, Worker, WorkerId};
use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::backend::{
    Backend, ChatRequest, ChatResponse, ProviderError, RetryPolicy, with_retries,
};
use crate::health::{HealthMessage, Outcome};
use crate::pool::{Slot, answer};

/// What a provider's workers are built from.
#[derive(Clone)]
pub struct ProviderArguments {
    pub name: String,
    pub backend: Arc<dyn Backend>,
    pub retry: RetryPolicy,
    /// The health actor, followed across its restarts.
    pub health: Slot<ActorRef<HealthMessage>>,
}

/// Messages to a provider's workers.
#[derive(Debug)]
pub enum ProviderMessage {
    /// Ask the model, retrying transient failures.
    Complete(
        ChatRequest,
        RpcReplyPort<Result<ChatResponse, ProviderError>>,
    ),
}

/// One worker of a provider's pool (a ractor factory per provider). A worker carries one
/// request, with its retries, at a time: the pool's size is how many calls the provider has
/// in flight, and the capacity controller grows it while requests wait.
pub struct ProviderWorker;

impl Worker for ProviderWorker {
    type Key = ();
    type Message = ProviderMessage;
    type Arguments = ProviderArguments;
    type State = ProviderArguments;

    async fn pre_start(
        &self,
        _wid: WorkerId,
        _factory: &ActorRef<FactoryMessage<(), ProviderMessage>>,
        args: ProviderArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _wid: WorkerId,
        _factory: &ActorRef<FactoryMessage<(), ProviderMessage>>,
        Job { key, msg, .. }: Job<(), ProviderMessage>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ProviderMessage::Complete(request, reply) = msg;
        // Under the router's span for this call: its start to here is the time queued.
        let span = tracing::debug_span!(parent: &*request.span, "provider.work", kbq.provider = %state.name);
        let retry = state.retry;
        let state = &*state;
        let work = async move {
            let attempt = || async {
                let started = Instant::now();
                let result = state.backend.complete(&request).await;
                report(
                    &state.health,
                    Outcome::of(state.name.clone(), started, &result, false),
                );
                result
            };
            let result = with_retries(attempt, retry).await;
            // The request goes before the answer: the session that sent it then holds the
            // only copy of the turn's tool results and takes them without copying them.
            drop(request);
            result
        };
        // A requester that went away (a cancelled session) stops the attempt in flight and
        // every retry after it.
        answer(reply, work.instrument(span)).await;
        Ok(key)
    }
}

fn report(health: &Slot<ActorRef<HealthMessage>>, outcome: Outcome) {
    if let Some(h) = health.read().clone() {
        let _ = h.cast(HealthMessage::Outcome(outcome));
    }
}
