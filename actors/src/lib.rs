//! kbq's supervised runtime: every piece of work runs in a ractor actor under one root.
//!
//! # Supervision tree
//! ```text
//! RootSupervisor                      restarts any child that fails or stops
//! ├── HealthActor                     probes providers (own tasks), records live outcomes
//! ├── provider factory × providers    ProviderWorker × agent.provider_workers..=provider_max_workers
//! ├── graph factory × 3 lanes         GraphWorker × graph.workers..=graph.max_workers per lane
//! ├── CapacityController              sizes every elastic pool above to its queue
//! ├── tool factory × 6                ToolWorker × agent.tool_workers..=tool_max_workers per tool
//! ├── IngestActor                     queues ingestion jobs, runs max_jobs at once, resumes
//! │                                   unfinished ones; a job's model calls go to the providers
//! └── EdgeSupervisor                  parent of the actors beside the HTTP edge; restarts none
//!     ├── ChatSessionActor × chats    one chat turn's tool loop
//!     └── LocalGraphActor × HTTP workers × 2  a thread's lookups, and its graph documents;
//!                                     the thread starts another if one fails
//! ```
//! Every pool is a factory behind one kind of handle (`PoolHandle`): its most workers plus a
//! queue capacity are admitted at once, and the next request is shed at once (graph: 503;
//! tool: a "busy" result the model sees; provider: the next provider, then 503). Every call
//! has a timeout, and a worker drops a request whose caller has gone.
//!
//! A graph request travels: handler -> [`GraphPool`] (admission, timeout) -> its lane's
//! factory -> GraphWorker -> `KnowledgeBase`. Lanes ([`GraphLane`]): lookups (entity,
//! traverse; on a runtime of their own), search, documents, so that no class of request
//! waits behind another. An HTTP worker's own lookups and graph documents skip their lane's
//! factory when they are answered from memory: the lane's handle admits them and that lane's
//! [`LocalGraphActor`](local::LocalGraphActor) on the worker's own thread answers them (see
//! [`local`]).
//!
//! A chat travels: handler -> [`Agent`] -> a new ChatSessionActor (on the main runtime,
//! beside the workers it calls), which loops ProviderRouter (healthy providers in priority
//! order, fallback; each a worker pool) -> tool calls through [`ToolPool`] (concurrently) ->
//! provider again, until an answer or a cap.
//! The built-in provider's own answers call the tools through the same [`ToolPool`].
//!
//! # Layout
//! - [`runtime`]: the [`Runtime`]: builds the pools' handles and starts the tree.
//! - [`config`]: [`RuntimeConfig`] and the configured providers.
//! - [`root`]: the [`RootSupervisor`] and its restart policy.
//! - [`pool`]: the pool handle (admission, timeout, in flight, size), the `Slot` a
//!   supervisor refills, and the factory plumbing every pool shares.
//! - [`capacity`]: the CapacityController that sizes every elastic pool, and [`Pools`].
//! - [`graph`]: the graph worker, its request enum, the lanes, and the [`GraphPool`] handle.
//! - [`local`]: the LocalGraphActors of each HTTP worker thread, and how the pool finds them.
//! - [`tools`]: one factory of ToolWorkers per tool, and the [`ToolPool`] handle.
//! - [`backend`]: the chat protocol, the [`Backend`] trait, the OpenAI-compatible backend, and
//!   the retry policy.
//! - [`builtin`]: the built-in, offline provider (retrieval and rules, not a model).
//! - [`provider`]: the ProviderWorker pool that runs a backend with retries.
//! - [`health`]: the HealthBoard, its ejection rules, the HealthActor and its probes.
//! - [`router`]: the ProviderRouter: healthy providers in priority order, with fallback.
//! - [`chat`]: a chat turn's request, reply, errors and limits.
//! - [`session`]: the ChatSessionActor and its tool loop.
//! - [`edge_supervisor`]: the EdgeSupervisor, parent of the sessions and local graph actors.
//! - [`agent`]: [`Agent`], the edge's handle on chats and completions.
//! - [`embedder`]: the OpenAI-compatible embedder the knowledge base may use.
//! - [`ingest`]: raw documents into the graph: the [`IngestActor`](ingest::IngestActor) that
//!   queues and resumes jobs, the pipeline a job runs, and the edge's [`Ingestor`](ingest::Ingestor).
//! - [`parser`]: where a source's bytes are parsed: PDF and DOCX in a process of their own.

pub mod agent;
pub mod backend;
pub mod builtin;
pub mod capacity;
pub mod chat;
pub mod config;
pub mod edge_supervisor;
pub mod embedder;
pub mod graph;
pub mod health;
pub mod ingest;
pub mod local;
pub mod parser;
pub mod pool;
pub mod priority;
pub mod provider;
pub mod root;
pub mod router;
pub mod runtime;
pub mod session;
pub mod tools;

pub use agent::{Agent, ChatTurn};
pub use backend::{Backend, ChatRequest, ChatResponse, RetryPolicy, Usage};
pub use capacity::{PoolReading, Pools};
pub use chat::{
    AgentError, AgentReply, AgentRequest, Role, SessionEvent, SessionLimits, StopReason,
    ToolCallCompleted, ToolCallRecord, ToolCallStarted,
};
pub use config::{ProviderConfig, ProviderKind, RuntimeConfig};
pub use embedder::{Modality, OpenAiEmbedder, OpenAiEmbedderConfig};
pub use graph::{GraphError, GraphLane, GraphPool, GraphRequest, GraphWorker};
pub use health::{Health, HealthBoard, HealthPolicy, HealthReport};
pub use pool::PoolStats;
pub use root::{RootMessage, RootSupervisor};
pub use runtime::Runtime;
pub use tools::ToolPool;
