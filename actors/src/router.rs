//! The [`ProviderRouter`]: asks healthy providers in priority order, each through its bounded
//! worker pool, and falls back to the next when one is busy or fails. Its own file because
//! both the chat sessions and the OpenAI-compatible completions (`Agent::complete`) use it.

use std::time::Duration;

use crate::backend::{ChatRequest, ChatResponse};
use crate::chat::AgentError;
use crate::health::HealthBoard;
use crate::pool::{PoolError, PoolHandle};
use crate::provider::ProviderMessage;
use tracing::Instrument;

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
            let span = tracing::debug_span!(
                "provider.call",
                otel.name = %format!("chat {name}"),
                otel.kind = "client",
                gen_ai.operation.name = "chat",
                gen_ai.provider.name = %name,
                gen_ai.request.temperature = request.temperature,
                gen_ai.request.max_tokens = request.max_tokens,
                gen_ai.request.model = tracing::field::Empty,
                gen_ai.response.finish_reasons = tracing::field::Empty,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
                kbq.pool.in_flight = provider.pool.in_flight(),
                error.type = tracing::field::Empty,
            );
            let answer = provider
                .pool
                .call_within(Some(timeout), |reply| {
                    let mut request = request.clone();
                    request.span = crate::backend::CallSpan(span.clone());
                    ProviderMessage::Complete(request, reply)
                })
                .instrument(span.clone())
                .await;
            match &answer {
                Ok(Ok(answer)) => {
                    span.record("gen_ai.usage.input_tokens", answer.usage.prompt_tokens);
                    span.record("gen_ai.usage.output_tokens", answer.usage.completion_tokens);
                    if let Some(reason) = &answer.finish_reason {
                        span.record("gen_ai.response.finish_reasons", reason.as_str());
                    }
                }
                Ok(Err(e)) => {
                    span.record("error.type", tracing::field::display(e));
                }
                Err(e) => {
                    span.record("error.type", tracing::field::debug(e));
                }
            }
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
