//! The runtime's configuration: [`RuntimeConfig`] (sizes, timeouts and policies) and the
//! providers it talks to. Its own file so that lib.rs stays a map of the crate.

use std::time::Duration;

use crate::backend::RetryPolicy;
use crate::chat::SessionLimits;
use crate::health::HealthPolicy;

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

/// Sizes, timeouts and policies of the runtime. It has no defaults of its own: kbq builds it
/// from its configuration (`kbq::config::Config::runtime_config`), whose defaults
/// (config/default.toml) are the only ones, so the two cannot disagree.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub graph_workers: usize,
    /// Longest wait of an edge call into the graph workers.
    pub graph_call_timeout: Duration,
    /// Requests that may wait for a graph worker; more are shed at once.
    pub graph_queue_capacity: usize,
    /// Most graph workers; above `graph_workers`, a controller sizes the pool to its load.
    /// The bounds above hold for each [`GraphLane`](crate::GraphLane).
    pub graph_max_workers: usize,
    /// Threads of the runtime the lookup lane (entity lookups, traversals) runs on, apart
    /// from everything else; 0 runs it on the caller's runtime with the rest.
    pub graph_lane_threads: usize,
    /// Threads of the runtime the large searches of the in-memory indexes run on
    /// ([`KnowledgeBase::set_scan_lane`](kbq_store::KnowledgeBase::set_scan_lane)), at most
    /// that many at once; 0 leaves them on tokio's blocking pool, a thread each.
    pub scan_threads: usize,
    /// How many nice steps below the caller's runtime those threads run.
    pub scan_nice: u8,
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
    /// Ingestion of raw documents.
    pub ingest: crate::ingest::IngestConfig,
}
