//! The sections of the knowledge base: `[store]` (where it lives), `[embedder]` (what embeds
//! its documents and queries) and `[graph]` (the worker pool that answers graph requests), each
//! with its defaults and its rules. They are their own file because they describe what
//! `kbq-store` opens and how the graph pool reads it, apart from the edge and the agent.

use serde::{Deserialize, Serialize};

use super::{ConfigError, bad, openai_endpoint, within};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// `mem://`, `surrealkv://PATH`, `ws://HOST:PORT` or `wss://HOST:PORT`.
    pub url: String,
    pub namespace: String,
    pub database: String,
    /// Root user and password for a remote server.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Serve graph reads from the in-memory index (else from SurrealDB queries).
    pub graph_index: bool,
    /// On a SurrealDB server, keep the in-memory indexes current with writes made by other
    /// nodes (LIVE queries). Embedded stores have one writer and ignore it.
    pub follow_changes: bool,
    pub query_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// The block cache of a `surrealkv://` store, in MiB.
    pub block_cache_mb: u64,
    /// The largest memtable of a `surrealkv://` store before it is written to disk, in MiB.
    pub memtable_mb: u64,
    /// Load the bundled demo knowledge base when the store has no entities.
    pub load_demo: bool,
}

impl Default for StoreSection {
    fn default() -> Self {
        StoreSection {
            url: "surrealkv://data/kb".into(),
            namespace: "kbq".into(),
            database: "kb".into(),
            username: None,
            password: None,
            graph_index: true,
            follow_changes: true,
            query_timeout_ms: 10_000,
            connect_timeout_ms: 5_000,
            block_cache_mb: 16,
            memtable_mb: 256,
            load_demo: true,
        }
    }
}

impl StoreSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.url;
        if !["mem://", "surrealkv://", "ws://", "wss://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            return bad(
                "store.url",
                "must start with mem://, surrealkv://, ws:// or wss://",
            );
        }
        if url.starts_with("surrealkv://") && url.len() == "surrealkv://".len() {
            return bad("store.url", "needs a path after surrealkv://");
        }
        if self.namespace.is_empty() || self.database.is_empty() {
            return bad("store.namespace and store.database", "must not be empty");
        }
        if self.username.is_some() != self.password.is_some() {
            return bad(
                "store.username and store.password",
                "must be given together",
            );
        }
        within("store.query_timeout_ms", self.query_timeout_ms, 1, 600_000)?;
        within(
            "store.connect_timeout_ms",
            self.connect_timeout_ms,
            1,
            600_000,
        )?;
        within("store.block_cache_mb", self.block_cache_mb, 1, 1 << 20)?;
        within("store.memtable_mb", self.memtable_mb, 1, 1 << 20)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EmbedderKind {
    /// The built-in, offline feature-hashing embedder.
    Hashing,
    /// Any OpenAI-compatible `/embeddings` endpoint.
    Openai,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EmbedderSection {
    pub kind: EmbedderKind,
    /// The vectors' length: for `hashing` any size, for `openai` the model's output size.
    pub dimension: usize,
    /// For `openai`: the API base, e.g. <https://api.openai.com/v1>.
    pub base_url: Option<String>,
    /// For `openai`: the embedding model's name.
    pub model: Option<String>,
    /// For `openai`: the environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// For `openai`: send `dimensions` with each request (text-embedding-3 and the like).
    pub send_dimensions: bool,
    /// For `openai`: most inputs per request.
    pub batch_size: usize,
    /// For `openai`: longest wait for one attempt.
    pub timeout_ms: u64,
    /// For `openai`: retries of a transient failure.
    pub max_retries: usize,
    /// For `openai`: the `input_type` sent with documents to embed (unset: none).
    pub document_input_type: Option<String>,
    /// For `openai`: the `input_type` sent with queries (unset: none).
    pub query_input_type: Option<String>,
    /// For `openai`: put before each document's text.
    pub document_prefix: String,
    /// For `openai`: put before each query.
    pub query_prefix: String,
}

impl Default for EmbedderSection {
    fn default() -> Self {
        EmbedderSection {
            kind: EmbedderKind::Hashing,
            dimension: kbq_store::HashingEmbedder::DEFAULT_DIMENSION,
            base_url: None,
            model: None,
            api_key_env: None,
            send_dimensions: false,
            batch_size: 64,
            timeout_ms: 30_000,
            max_retries: 2,
            document_input_type: None,
            query_input_type: None,
            document_prefix: String::new(),
            query_prefix: String::new(),
        }
    }
}

impl EmbedderSection {
    /// The endpoint settings are checked only for `openai`: the built-in embedder ignores them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        within("embedder.dimension", self.dimension, 8, 8192)?;
        if self.kind == EmbedderKind::Openai {
            openai_endpoint("embedder", &self.base_url, &self.model)?;
            within("embedder.batch_size", self.batch_size, 1, 2048)?;
            within("embedder.timeout_ms", self.timeout_ms, 1, 600_000)?;
            if self.max_retries > 10 {
                return bad("embedder.max_retries", "must be at most 10");
            }
            for (field, value) in [
                ("embedder.document_input_type", &self.document_input_type),
                ("embedder.query_input_type", &self.query_input_type),
            ] {
                if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                    return bad(field, "must not be blank (leave it unset to send none)");
                }
            }
        }
        Ok(())
    }
}

/// RAG search (`[rag]`): how hybrid search weighs each method's list when it fuses them.
/// Unset: by the embedder, [`FusionWeights::MODEL`](kbq_tools::rag::FusionWeights::MODEL) for
/// `openai`, [`FusionWeights::LEXICAL`](kbq_tools::rag::FusionWeights::LEXICAL) for the
/// built-in one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RagSection {
    pub semantic_weight: Option<f64>,
    pub keyword_weight: Option<f64>,
    pub graph_weight: Option<f64>,
}

impl RagSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("rag.semantic_weight", self.semantic_weight),
            ("rag.keyword_weight", self.keyword_weight),
            ("rag.graph_weight", self.graph_weight),
        ] {
            if let Some(v) = value {
                within(key, v, 0.0, 100.0)?;
            }
        }
        Ok(())
    }

    /// The weights hybrid search fuses with, with `embedder`.
    pub fn weights(&self, embedder: &EmbedderSection) -> kbq_tools::rag::FusionWeights {
        let base = match embedder.kind {
            EmbedderKind::Hashing => kbq_tools::rag::FusionWeights::LEXICAL,
            EmbedderKind::Openai => kbq_tools::rag::FusionWeights::MODEL,
        };
        kbq_tools::rag::FusionWeights {
            semantic: self.semantic_weight.unwrap_or(base.semantic),
            keyword: self.keyword_weight.unwrap_or(base.keyword),
            graph: self.graph_weight.unwrap_or(base.graph),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GraphSection {
    /// Graph worker actors in the pool.
    pub workers: usize,
    /// Longest wait of a request for a graph worker's answer.
    pub call_timeout_ms: u64,
    /// Requests that may wait for a busy graph pool; more get 503 at once.
    pub queue_capacity: usize,
    /// Most graph workers: between `workers` and this, the pool follows its load.
    pub max_workers: usize,
    /// Threads of the runtime that answers entity lookups, traversals and name searches
    /// apart from every other kind of work; 0 shares the main runtime.
    pub lookup_threads: usize,
}

impl Default for GraphSection {
    fn default() -> Self {
        GraphSection {
            workers: 4,
            call_timeout_ms: 15_000,
            queue_capacity: 1024,
            max_workers: 16,
            lookup_threads: 2,
        }
    }
}

impl GraphSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        within("graph.call_timeout_ms", self.call_timeout_ms, 1, 600_000)?;
        within("graph.workers", self.workers, 1, 256)?;
        if !(self.workers..=1024).contains(&self.max_workers) {
            return bad(
                "graph.max_workers",
                "must be between graph.workers and 1024",
            );
        }
        within("graph.queue_capacity", self.queue_capacity, 0, 1_000_000)?;
        within("graph.lookup_threads", self.lookup_threads, 0, 64)
    }
}
