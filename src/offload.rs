//! Store work off the HTTP threads. actix-web serves requests on worker threads of its own,
//! each a single-threaded runtime; a handler that awaited the knowledge base there would run
//! SurrealDB's embedded engine (which executes a statement inside the future awaiting it) and
//! kbq's writers on the same threads that answer `/livez` and `/v1/agent/health`. Handlers
//! that call the knowledge base directly (RAG search, ingestion) hand the call to the main
//! runtime, where the actors run, and only await the answer.

use std::future::Future;

use tokio_util::task::AbortOnDropHandle;

use crate::error::{ApiError, ErrorCode};

/// The main runtime's handle, shared with every HTTP worker.
#[derive(Clone)]
pub struct Offload(pub tokio::runtime::Handle);

impl Offload {
    /// The runtime of the calling task: call it from the main runtime.
    pub fn current() -> Self {
        Offload(tokio::runtime::Handle::current())
    }

    /// Runs `work` on the main runtime and waits for it. If the request is dropped (the
    /// client went away), the work is dropped with it, as it would have been in the handler.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, ApiError> {
        AbortOnDropHandle::new(self.0.spawn(work))
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::Internal,
                    format!("the work for this request stopped before it answered: {e}"),
                )
            })
    }
}
