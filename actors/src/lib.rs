//! kbq's supervised runtime: every piece of work runs in a ractor actor under one root.
//!
//! # Supervision tree
//! ```text
//! RootSupervisor                      restarts any child that fails or stops
//! ├── HealthActor                     probes providers, records live outcomes on the HealthBoard
//! ├── ProviderActor × providers       one per configured LLM provider, retries with backon
//! ├── graph factory                   GraphWorker × graph.workers..=graph.max_workers
//! ├── CapacityController              resizes the graph pool to its queue (when elastic)
//! ├── tool factory × 6                ToolWorker × agent.tool_workers per built-in tool
//! └── SessionSupervisor               parent of one ChatSessionActor per chat request
//! ```
//! A graph request travels: handler -> [`GraphPool`] (timeout) -> factory -> GraphWorker ->
//! `KnowledgeBase`. A chat travels: handler -> [`Agent`] -> a new ChatSessionActor, which loops
//! [`ProviderRouter`] (healthy providers in priority order, fallback) -> tool calls through
//! [`ToolPool`] (concurrently) -> provider again, until an answer or a cap.
//!
//! # Layout
//! - [`graph`]: the graph worker, its request enum, and the [`GraphPool`] handle.
//! - [`provider`]: the chat protocol, the OpenAI-compatible backend, and the ProviderActor.
//! - [`builtin`]: the built-in, offline provider (retrieval and rules, not a model).
//! - [`embedder`]: the OpenAI-compatible embedder the knowledge base may use.
//! - [`health`]: the HealthBoard, its ejection rules, and the HealthActor.
//! - [`tools`]: one factory of ToolWorkers per tool, and the [`ToolPool`] handle.
//! - [`session`]: [`Agent`], the ProviderRouter, the ChatSessionActor and its supervisor.
//! - [`root`]: the [`RootSupervisor`] and its restart policy.

pub mod builtin;
pub mod capacity;
pub mod embedder;
pub mod graph;
pub mod health;
pub mod provider;
pub mod root;
pub mod session;
pub mod tools;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use kbq_tools::{EntityExtractor, Toolbox};
use parking_lot::RwLock;
use ractor::{Actor, ActorRef, SpawnErr};

pub use embedder::{OpenAiEmbedder, OpenAiEmbedderConfig};
pub use graph::{GraphError, GraphPool, GraphRequest, GraphWorker};
pub use health::{Health, HealthBoard, HealthPolicy, HealthReport};
pub use provider::{Backend, ChatRequest, ChatResponse, RetryPolicy, Usage};
pub use root::{RootMessage, RootSupervisor};
pub use session::{
    Agent, AgentError, AgentReply, AgentRequest, Role, SessionLimits, StopReason, ToolCallRecord,
};
pub use tools::ToolPool;

/// One admitted request of a bounded pool; the place is given back when it drops.
pub(crate) struct Admission(Arc<std::sync::atomic::AtomicUsize>);

impl Admission {
    /// Takes a place if fewer than `limit` are taken; else says how many are.
    pub(crate) fn take(
        counter: &Arc<std::sync::atomic::AtomicUsize>,
        limit: usize,
    ) -> Result<Admission, usize> {
        use std::sync::atomic::Ordering;
        let before = counter.fetch_add(1, Ordering::AcqRel);
        let admission = Admission(counter.clone());
        if before >= limit {
            return Err(before);
        }
        Ok(admission)
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A worker pool's state as its factory reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers busy with a request.
    pub active_workers: usize,
    /// Requests waiting for a worker.
    pub queue_depth: usize,
}

/// Resolves once nobody waits for the reply any more (the caller timed out, or was dropped
/// with its client's connection).
async fn requester_gone<T>(reply: &ractor::RpcReplyPort<T>) {
    while !reply.is_closed() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `work` and sends what it gives, unless its caller gives up first. A request whose
/// caller has already gone (it timed out while the request waited in a queue) is not started;
/// one whose caller goes while it runs is dropped at once, freeing its worker.
pub(crate) async fn answer<T>(reply: ractor::RpcReplyPort<T>, work: impl Future<Output = T>) {
    if reply.is_closed() {
        return;
    }
    tokio::select! {
        result = work => {
            let _ = reply.send(result);
        }
        () = requester_gone(&reply) => {}
    }
}

/// Asks a factory for its stats; `None` when it does not answer within 100 ms.
pub(crate) async fn pool_stats<K, M>(
    factory: ractor::factory::FactoryRef<K, M>,
) -> Option<PoolStats>
where
    K: ractor::factory::JobKey,
    M: ractor::Message,
{
    let wait = Some(Duration::from_millis(100));
    let (active, queued) = futures::join!(factory.active_workers(wait), factory.queue_depth(wait));
    match (active, queued) {
        (
            Ok(ractor::rpc::CallResult::Success(active_workers)),
            Ok(ractor::rpc::CallResult::Success(queue_depth)),
        ) => Some(PoolStats {
            active_workers,
            queue_depth,
        }),
        _ => None,
    }
}

/// Which model a provider talks to.
#[derive(Debug, Clone)]
pub enum ProviderKind {
    /// The offline, rule-based provider.
    Builtin,
    /// Any OpenAI-compatible endpoint.
    OpenAi {
        base_url: String,
        model: String,
        api_key: Option<String>,
    },
}

/// One configured provider, in priority order.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    /// Longest wait for one attempt.
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

/// Sizes, timeouts and policies of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub graph_workers: usize,
    /// Longest wait of an edge call into the graph workers.
    pub graph_call_timeout: Duration,
    /// Requests that may wait for a graph worker; more are shed at once.
    pub graph_queue_capacity: usize,
    /// Most graph workers; above `graph_workers`, a controller sizes the pool to its load.
    pub graph_max_workers: usize,
    pub tool_workers: usize,
    pub tool_timeout: Duration,
    /// Calls that may wait for each tool's workers; more fail at once (the model sees why).
    pub tool_queue_capacity: usize,
    /// Providers in priority order; empty means the built-in provider alone.
    pub providers: Vec<ProviderConfig>,
    pub health: HealthPolicy,
    pub session: SessionLimits,
}

impl RuntimeConfig {
    /// Defaults for tests and embedding: the built-in provider only.
    pub fn new() -> Self {
        RuntimeConfig {
            graph_workers: 4,
            graph_call_timeout: Duration::from_secs(15),
            graph_queue_capacity: 1024,
            graph_max_workers: 4,
            tool_workers: 4,
            tool_timeout: Duration::from_secs(10),
            tool_queue_capacity: 256,
            providers: Vec::new(),
            health: HealthPolicy {
                probe_interval: Duration::from_secs(5),
                failure_threshold: 3,
                cooldown: Duration::from_secs(5),
                max_cooldown: Duration::from_secs(300),
            },
            session: SessionLimits {
                max_steps: 8,
                max_wall: Duration::from_secs(60),
                provider_timeout: Duration::from_secs(90),
                max_sessions: 1024,
            },
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// The running actor system.
pub struct Runtime {
    pub graph: GraphPool,
    pub agent: Agent,
    root: ActorRef<RootMessage>,
    root_handle: tokio::task::JoinHandle<()>,
}

impl Runtime {
    /// Starts the root supervisor and its children.
    pub async fn start(kb: Arc<KnowledgeBase>, config: RuntimeConfig) -> Result<Runtime, SpawnErr> {
        let extractor = Arc::new(EntityExtractor::new(kb.clone()));
        let toolbox = Toolbox::default();
        let provider_configs = if config.providers.is_empty() {
            vec![ProviderConfig {
                name: "builtin".into(),
                kind: ProviderKind::Builtin,
                timeout: Duration::from_secs(30),
                retry: RetryPolicy {
                    max_retries: 0,
                    min_delay: Duration::from_millis(50),
                    max_delay: Duration::from_secs(1),
                },
            }]
        } else {
            config.providers.clone()
        };
        let providers: Vec<root::ProviderSpec> = provider_configs
            .iter()
            .map(|p| {
                let backend: Arc<dyn Backend> = match &p.kind {
                    ProviderKind::Builtin => Arc::new(builtin::BuiltinBackend::new(
                        &p.name,
                        kb.clone(),
                        extractor.clone(),
                    )),
                    ProviderKind::OpenAi {
                        base_url,
                        model,
                        api_key,
                    } => Arc::new(provider::OpenAiBackend::new(
                        &p.name,
                        base_url,
                        model,
                        api_key.clone(),
                        p.timeout,
                    )),
                };
                root::ProviderSpec {
                    name: p.name.clone(),
                    backend,
                    retry: p.retry,
                    slot: Arc::new(RwLock::new(None)),
                }
            })
            .collect();
        let board = HealthBoard::new(
            &providers
                .iter()
                .map(|p| (p.name.clone(), p.backend.kind()))
                .collect::<Vec<_>>(),
            config.health,
        );
        let tool_slots: HashMap<String, tools::ToolSlot> = toolbox
            .tools()
            .iter()
            .map(|t| (t.name().to_string(), Arc::new(RwLock::new(None))))
            .collect();
        let router = session::ProviderRouter {
            providers: providers
                .iter()
                .map(|p| (p.name.clone(), p.slot.clone()))
                .collect(),
            board: board.clone(),
        };
        let graph_slot = Arc::new(RwLock::new(None));
        let graph_min = config.graph_workers.max(1);
        let graph_max = config.graph_max_workers.max(graph_min);
        let graph_size = Arc::new(std::sync::atomic::AtomicUsize::new(graph_min));
        let session_slot = Arc::new(RwLock::new(None));
        let tools = ToolPool::new(
            tool_slots.clone(),
            config.tool_timeout,
            config.tool_workers.max(1) + config.tool_queue_capacity,
        );
        let args = root::RootArguments {
            kb: kb.clone(),
            graph_workers: graph_min,
            graph_max_workers: graph_max,
            graph_size: graph_size.clone(),
            graph_slot: graph_slot.clone(),
            capacity_slot: Arc::new(RwLock::new(None)),
            toolbox: toolbox.clone(),
            tool_workers: config.tool_workers.max(1),
            tool_slots,
            providers,
            health_board: board,
            health_slot: Arc::new(RwLock::new(None)),
            session_slot: session_slot.clone(),
        };
        let (root, root_handle) = Actor::spawn(None, RootSupervisor, args).await?;
        let deps = session::SessionDeps {
            kb,
            extractor,
            toolbox,
            tools,
            router,
            limits: config.session,
            running: Arc::default(),
        };
        Ok(Runtime {
            graph: GraphPool::new(
                graph_slot,
                config.graph_call_timeout,
                graph_max + config.graph_queue_capacity,
                graph_size,
            ),
            agent: Agent {
                deps: Arc::new(deps),
                supervisor: session_slot,
            },
            root,
            root_handle,
        })
    }

    /// How many times the root has restarted a child.
    pub async fn restarts(&self) -> u64 {
        ractor::call!(self.root, RootMessage::Restarts).unwrap_or(0)
    }

    /// Stops the tree and waits for it.
    pub async fn stop(self) {
        self.root.stop(None);
        let _ = self.root_handle.await;
    }
}
