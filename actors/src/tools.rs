//! The tool workers: one ractor factory per built-in tool, and [`ToolPool`], which the chat
//! sessions call. A failed call becomes an error result the model sees, never a crashed chat.

use std::collections::HashMap;
use std::sync::Arc;

use kbq_tools::{Tool, ToolContext, ToolError, ToolResult};
use ractor::factory::{FactoryMessage, Job, Worker, WorkerId};
use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

use crate::pool::{PoolError, PoolHandle, answer};
use tracing::Instrument;

/// Work for a tool worker.
pub enum ToolJob {
    /// Run the tool with these arguments for this caller.
    Call {
        ctx: Box<ToolContext>,
        args: Value,
        reply: RpcReplyPort<Result<ToolResult, ToolError>>,
    },
    /// Panic inside the worker: only for tests of supervision.
    #[cfg(feature = "fault-injection")]
    Panic,
    /// Hold the worker until the sender sends or is dropped: only for tests of load.
    #[cfg(feature = "fault-injection")]
    Hold(tokio::sync::oneshot::Receiver<()>, RpcReplyPort<()>),
}

/// A worker that runs one tool.
pub struct ToolWorker;

impl Worker for ToolWorker {
    type Key = ();
    type Message = ToolJob;
    type Arguments = Arc<dyn Tool>;
    type State = Arc<dyn Tool>;

    async fn pre_start(
        &self,
        _wid: WorkerId,
        _f: &ActorRef<FactoryMessage<(), ToolJob>>,
        tool: Arc<dyn Tool>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tool)
    }

    async fn handle(
        &self,
        _wid: WorkerId,
        _f: &ActorRef<FactoryMessage<(), ToolJob>>,
        Job { key, msg, .. }: Job<(), ToolJob>,
        tool: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolJob::Call { ctx, args, reply } => {
                // Under the session's span for this call: its start to here is the time queued.
                let span =
                    tracing::debug_span!(parent: &ctx.span, "tool.work", kbq.tool = tool.name());
                answer(reply, tool.call(&ctx, &args).instrument(span)).await
            }
            #[cfg(feature = "fault-injection")]
            ToolJob::Panic => panic!("tool worker panicked on request (fault injection)"),
            #[cfg(feature = "fault-injection")]
            ToolJob::Hold(release, reply) => {
                answer(reply, async {
                    let _ = release.await;
                })
                .await
            }
        }
        Ok(key)
    }
}

/// Calls tools by name, each through its own bounded pool, with a timeout.
#[derive(Clone)]
pub struct ToolPool {
    pools: Arc<HashMap<String, PoolHandle<ToolJob>>>,
}

/// The error result the model sees for a call `name`'s pool did not answer.
fn tool_error(name: &str, e: PoolError) -> ToolError {
    match e {
        PoolError::NotRunning => ToolError::UnknownTool(name.to_string()),
        PoolError::Refused(reason) => {
            ToolError::Failed(format!("the tool is not running: {reason}"))
        }
        PoolError::Overloaded(n) => ToolError::Failed(format!(
            "{name} is busy: {n} calls are already running or queued; try again later"
        )),
        PoolError::Timeout(after) => ToolError::Failed(format!("no answer within {after:?}")),
        PoolError::WorkerLost => {
            ToolError::Failed("the tool worker stopped; it has been restarted".into())
        }
    }
}

impl ToolPool {
    pub(crate) fn new(pools: HashMap<String, PoolHandle<ToolJob>>) -> Self {
        ToolPool {
            pools: Arc::new(pools),
        }
    }

    fn pool(&self, name: &str) -> Result<&PoolHandle<ToolJob>, ToolError> {
        self.pools
            .get(name)
            .ok_or_else(|| ToolError::UnknownTool(name.to_string()))
    }

    /// Holds one worker of `name` until `release` sends or is dropped, as a call would (it
    /// takes a place in the pool, but waits without a timeout). Only for tests of load.
    #[cfg(feature = "fault-injection")]
    pub async fn hold(
        &self,
        name: &str,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), ToolError> {
        self.pool(name)?
            .call_within(None, |reply| ToolJob::Hold(release, reply))
            .await
            .map_err(|e| tool_error(name, e))
    }

    /// Calls of `name` running or queued now.
    pub fn in_flight(&self, name: &str) -> usize {
        self.pools.get(name).map_or(0, PoolHandle::in_flight)
    }

    /// Runs `name` and returns its result, or the error result the model should see.
    pub async fn call(
        &self,
        name: &str,
        ctx: &ToolContext,
        args: Value,
    ) -> Result<ToolResult, ToolError> {
        let pool = self.pool(name)?;
        let ctx = Box::new(ctx.clone());
        pool.call(|reply| ToolJob::Call { ctx, args, reply })
            .await
            .map_err(|e| tool_error(name, e))?
    }

    /// The result object for a call, successful or not.
    pub async fn call_for_model(&self, name: &str, ctx: &ToolContext, args: Value) -> ToolResult {
        match self.call(name, ctx, args).await {
            Ok(v) => v,
            Err(e) => e.to_result(),
        }
    }

    /// Makes one worker of `tool` panic. Only for tests of supervision.
    #[cfg(feature = "fault-injection")]
    pub fn inject_panic(&self, tool: &str) {
        if let Some(f) = self.pools.get(tool).and_then(PoolHandle::factory) {
            let _ = f.dispatch((), ToolJob::Panic);
        }
    }
}

/// An error result for a call the model made with arguments that are not a JSON object.
pub fn malformed_arguments(raw: &str) -> ToolResult {
    ToolError::InvalidArguments(format!(
        "arguments are not a JSON object: {}",
        raw.chars().take(200).collect::<String>()
    ))
    .to_result()
}

/// `{}` as the record of a call whose arguments could not be read.
pub fn raw_arguments(raw: &str) -> Value {
    json!({"_raw": raw})
}
