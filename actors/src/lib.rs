//! kbq's supervised runtime: every piece of work runs in a ractor actor under one root.
//!
//! # Supervision tree
//! ```text
//! RootSupervisor                      restarts any child that fails or stops
//! ├── HealthActor                     probes providers (own tasks), records live outcomes
//! ├── provider factory × providers    ProviderWorker × agent.provider_workers..=provider_max_workers
//! ├── graph factory                   GraphWorker × graph.workers..=graph.max_workers
//! ├── CapacityController              sizes every elastic pool above to its queue
//! ├── tool factory × 6                ToolWorker × agent.tool_workers..=tool_max_workers per tool
//! └── SessionSupervisor               parent of one ChatSessionActor per chat request
//! ```
//! Every pool is bounded: its most workers plus a queue capacity are admitted at once, and
//! the next request is shed at once (graph: 503; tool: a "busy" result the model sees;
//! provider: the next provider, then 503). A worker drops a request whose caller has gone.
//!
//! A graph request travels: handler -> [`GraphPool`] (timeout) -> factory -> GraphWorker ->
//! `KnowledgeBase`. A chat travels: handler -> [`Agent`] -> a new ChatSessionActor, which loops
//! [`ProviderRouter`] (healthy providers in priority order, fallback; each a worker pool) ->
//! tool calls through [`ToolPool`] (concurrently) -> provider again, until an answer or a cap.
//!
//! # Layout
//! - [`graph`]: the graph worker, its request enum, and the [`GraphPool`] handle.
//! - [`provider`]: the chat protocol, the OpenAI-compatible backend, and the ProviderWorker.
//! - [`builtin`]: the built-in, offline provider (retrieval and rules, not a model).
//! - [`embedder`]: the OpenAI-compatible embedder the knowledge base may use.
//! - [`health`]: the HealthBoard, its ejection rules, and the HealthActor.
//! - [`tools`]: one factory of ToolWorkers per tool, and the [`ToolPool`] handle.
//! - [`session`]: [`Agent`], the ProviderRouter, the ChatSessionActor and its supervisor.
//! - [`capacity`]: the CapacityController that sizes every elastic pool.
//! - [`root`]: the [`RootSupervisor`] and its restart policy.

pub mod agent;
pub mod backend;
pub mod builtin;
pub mod capacity;
pub mod chat;
pub mod embedder;
pub mod graph;
pub mod health;
pub mod pool;
pub mod provider;
pub mod root;
pub mod router;
pub mod session;
pub mod session_supervisor;
pub mod tools;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use kbq_tools::{EntityExtractor, Toolbox};
use parking_lot::RwLock;
use ractor::{Actor, ActorRef, SpawnErr};

use crate::capacity::ElasticPool;
use crate::pool::PoolHandle;

pub use agent::Agent;
pub use backend::{Backend, ChatRequest, ChatResponse, RetryPolicy, Usage};
pub use chat::{
    AgentError, AgentReply, AgentRequest, Role, SessionLimits, StopReason, ToolCallRecord,
};
pub use embedder::{OpenAiEmbedder, OpenAiEmbedderConfig};
pub use graph::{GraphError, GraphPool, GraphRequest, GraphWorker};
pub use health::{Health, HealthBoard, HealthPolicy, HealthReport};
pub use pool::PoolStats;
pub use root::{RootMessage, RootSupervisor};
pub use tools::ToolPool;

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
    /// Most workers of each tool; above `tool_workers`, the controller sizes each tool's pool.
    pub tool_max_workers: usize,
    pub tool_timeout: Duration,
    /// Calls that may wait for each tool's workers; more fail at once (the model sees why).
    pub tool_queue_capacity: usize,
    /// Workers of each provider (calls it has in flight) at the least.
    pub provider_workers: usize,
    /// Most workers of each provider; above `provider_workers`, the controller sizes it.
    pub provider_max_workers: usize,
    /// Calls that may wait for each provider's workers; more skip to the next provider.
    pub provider_queue_capacity: usize,
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
            tool_max_workers: 16,
            tool_timeout: Duration::from_secs(10),
            tool_queue_capacity: 256,
            provider_workers: 8,
            provider_max_workers: 512,
            provider_queue_capacity: 1024,
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

/// Every worker pool of the runtime (the graph workers, each tool's, each provider's), as
/// metrics read them.
#[derive(Clone)]
pub struct Pools(Arc<Vec<ElasticPool>>);

/// One pool as read now.
#[derive(Debug, Clone)]
pub struct PoolReading {
    /// `graph`, `tool:NAME` or `provider:NAME`.
    pub name: String,
    /// Workers in the pool.
    pub size: usize,
    /// Busy workers and queued requests; `None` while the pool restarts.
    pub stats: Option<PoolStats>,
}

impl Pools {
    /// Reads every pool, in a fixed order.
    pub async fn read(&self) -> Vec<PoolReading> {
        let stats = futures::future::join_all(self.0.iter().map(|p| p.pool.stats())).await;
        self.0
            .iter()
            .zip(stats)
            .map(|(p, stats)| PoolReading {
                name: p.name.clone(),
                size: p.pool.size(),
                stats,
            })
            .collect()
    }
}

/// The running actor system.
pub struct Runtime {
    pub graph: GraphPool,
    pub agent: Agent,
    pub pools: Pools,
    root: ActorRef<RootMessage>,
    root_handle: tokio::task::JoinHandle<()>,
}

impl Runtime {
    /// Starts the root supervisor and its children.
    pub async fn start(kb: Arc<KnowledgeBase>, config: RuntimeConfig) -> Result<Runtime, SpawnErr> {
        let extractor = Arc::new(EntityExtractor::new(kb.clone()));
        let toolbox = Toolbox::default();
        // Every pool's least and most workers; the capacity controller sizes it in between.
        let bounds = |min: usize, max: usize| (min.max(1), max.max(min.max(1)));
        let (graph_min, graph_max) = bounds(config.graph_workers, config.graph_max_workers);
        let (tool_min, tool_max) = bounds(config.tool_workers, config.tool_max_workers);
        let (provider_min, provider_max) =
            bounds(config.provider_workers, config.provider_max_workers);

        let graph = PoolHandle::new(
            graph_min,
            graph_max + config.graph_queue_capacity,
            config.graph_call_timeout,
        );
        let tool_pools: HashMap<String, PoolHandle<tools::ToolJob>> = toolbox
            .tools()
            .iter()
            .map(|t| {
                let pool = PoolHandle::new(
                    tool_min,
                    tool_max + config.tool_queue_capacity,
                    config.tool_timeout,
                );
                (t.name().to_string(), pool)
            })
            .collect();
        let tools = ToolPool::new(tool_pools.clone());

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
                        tools.clone(),
                    )),
                    ProviderKind::OpenAi {
                        base_url,
                        model,
                        api_key,
                    } => Arc::new(backend::OpenAiBackend::new(
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
                    pool: PoolHandle::new(
                        provider_min,
                        provider_max + config.provider_queue_capacity,
                        config.session.provider_timeout,
                    ),
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

        // Every pool the capacity controller sizes, in the order metrics list them.
        let mut pools = vec![ElasticPool::new("graph".into(), &graph, graph_max)];
        let mut tool_names: Vec<&String> = tool_pools.keys().collect();
        tool_names.sort();
        for name in tool_names {
            let pool = &tool_pools[name];
            pools.push(ElasticPool::new(format!("tool:{name}"), pool, tool_max));
        }
        for p in &providers {
            let name = format!("provider:{}", p.name);
            pools.push(ElasticPool::new(name, &p.pool, provider_max));
        }
        let pools = Arc::new(pools);

        let router = router::ProviderRouter {
            providers: providers
                .iter()
                .map(|p| router::ProviderHandle {
                    name: p.name.clone(),
                    pool: p.pool.clone(),
                })
                .collect(),
            board: board.clone(),
        };
        let session_slot = Arc::new(RwLock::new(None));
        let args = root::RootArguments {
            kb: kb.clone(),
            graph: graph.clone(),
            capacity_slot: Arc::new(RwLock::new(None)),
            pools: pools.clone(),
            toolbox: toolbox.clone(),
            tools: tool_pools,
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
        };
        Ok(Runtime {
            graph: GraphPool::new(graph),
            pools: Pools(pools),
            agent: Agent::new(deps, session_slot),
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
