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
