//! The tool workers: one ractor factory per built-in tool, and [`ToolPool`], which the chat
//! sessions call. A failed call becomes an error result the model sees, never a crashed chat.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kbq_tools::{Tool, ToolContext, ToolError};
use parking_lot::RwLock;
use ractor::factory::{FactoryMessage, FactoryRef, Job, Worker, WorkerId};
use ractor::rpc::CallResult;
use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

/// Work for a tool worker.
pub enum ToolJob {
    /// Run the tool with these arguments for this caller.
    Call {
        ctx: Box<ToolContext>,
        args: Value,
        reply: RpcReplyPort<Result<Value, ToolError>>,
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
                crate::pool::answer(reply, tool.call(&ctx, &args)).await
            }
            #[cfg(feature = "fault-injection")]
            ToolJob::Panic => panic!("tool worker panicked on request (fault injection)"),
            #[cfg(feature = "fault-injection")]
            ToolJob::Hold(release, reply) => {
                crate::pool::answer(reply, async {
                    let _ = release.await;
                })
                .await
            }
        }
        Ok(key)
    }
}

pub(crate) type ToolSlot = Arc<RwLock<Option<FactoryRef<(), ToolJob>>>>;

/// Calls tools by name, each through its own pool, with a timeout.
#[derive(Clone)]
pub struct ToolPool {
    pub(crate) slots: Arc<HashMap<String, ToolSlot>>,
    timeout: Duration,
    /// Calls admitted and not yet answered, per tool.
    in_flight: Arc<HashMap<String, Arc<std::sync::atomic::AtomicUsize>>>,
    /// Most calls admitted at once per tool: most workers plus queue capacity.
    admit: usize,
}

impl ToolPool {
    pub(crate) fn new(slots: HashMap<String, ToolSlot>, timeout: Duration, admit: usize) -> Self {
        let in_flight = slots.keys().map(|k| (k.clone(), Arc::default())).collect();
        ToolPool {
            slots: Arc::new(slots),
            timeout,
            in_flight: Arc::new(in_flight),
            admit: admit.max(1),
        }
    }

    /// Bounded like the graph pool: a full tool pool fails the call at once.
    fn admit(&self, name: &str) -> Result<Option<crate::pool::Admission>, ToolError> {
        match self.in_flight.get(name) {
            Some(counter) => crate::pool::Admission::take(counter, self.admit)
                .map(Some)
                .map_err(|n| {
                    ToolError::Failed(format!(
                        "{name} is busy: {n} calls are already running or queued; try again later"
                    ))
                }),
            None => Ok(None),
        }
    }

    /// Holds one worker of `name` until `release` sends or is dropped, as a call would (it
    /// takes a place in the pool). Only for tests of load.
    #[cfg(feature = "fault-injection")]
    pub async fn hold(
        &self,
        name: &str,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), ToolError> {
        let Some(factory) = self.slots.get(name).and_then(|s| s.read().clone()) else {
            return Err(ToolError::UnknownTool(name.to_string()));
        };
        let _admitted = self.admit(name)?;
        factory
            .call_job((), |reply| ToolJob::Hold(release, reply), None)
            .await
            .map(|_| ())
            .map_err(|e| ToolError::Failed(e.to_string()))
    }

    /// Calls of `name` running or queued now.
    pub fn in_flight(&self, name: &str) -> usize {
        self.in_flight
            .get(name)
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Runs `name` and returns its result, or the error result the model should see.
    pub async fn call(
        &self,
        name: &str,
        ctx: &ToolContext,
        args: Value,
    ) -> Result<Value, ToolError> {
        let Some(factory) = self.slots.get(name).and_then(|s| s.read().clone()) else {
            return Err(ToolError::UnknownTool(name.to_string()));
        };
        let _admitted = self.admit(name)?;
        let ctx = Box::new(ctx.clone());
        match factory
            .call_job(
                (),
                |reply| ToolJob::Call { ctx, args, reply },
                Some(self.timeout),
            )
            .await
        {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => Err(ToolError::Failed(format!(
                "no answer within {:?}",
                self.timeout
            ))),
            Ok(CallResult::SenderError) => Err(ToolError::Failed(
                "the tool worker stopped; it has been restarted".into(),
            )),
            Err(e) => Err(ToolError::Failed(format!("the tool is not running: {e}"))),
        }
    }

    /// The result object for a call, successful or not.
    pub async fn call_for_model(&self, name: &str, ctx: &ToolContext, args: Value) -> Value {
        match self.call(name, ctx, args).await {
            Ok(v) => v,
            Err(e) => e.to_result(),
        }
    }

    /// Makes one worker of `tool` panic. Only for tests of supervision.
    #[cfg(feature = "fault-injection")]
    pub fn inject_panic(&self, tool: &str) {
        if let Some(f) = self.slots.get(tool).and_then(|s| s.read().clone()) {
            let _ = f.dispatch((), ToolJob::Panic);
        }
    }
}

/// An error result for a call the model made with arguments that are not a JSON object.
pub fn malformed_arguments(raw: &str) -> Value {
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
