//! Configuration: built-in defaults, then a TOML file (`--config PATH` or `KBQ_CONFIG`), then
//! environment variables `KBQ_SECTION__KEY`. [`Config::validate`] names the key and the rule
//! of any bad value, and start-up stops on it.
//!
//! # Layout
//! Each section is a type with its defaults and a `validate` that checks its own rules;
//! [`Config::validate`] calls them one section after another.
//! - this file: [`Config`] itself, loading, the shared rule helpers, and the settings handed
//!   to the store and the actor runtime.
//! - `edge`: `[server]`, `[limits]`, `[auth]`, `[versions.vN]`, `[log]`: what the HTTP edge reads.
//! - `store`: `[store]`, `[embedder]`, `[graph]`: the knowledge base and its graph pool.
//! - `agent`: `[agent]`, `[[providers]]`, `[chat]`, `[health]`: the agent runtime.
//! - `ingest`: `[ingest]`: chunking, extraction and resolution of raw documents.
//! - `tests`: the shipped files, and each rule broken alone with the message it gives.

mod agent;
mod edge;
mod ingest;
mod store;
mod workspaces;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use agent::{
    AgentSection, ChatSection, DEFAULT_MODEL, HealthSection, ProviderKindName, ProviderSection,
};
pub use edge::{
    AuthSection, GRPC, HTTP_PROTOBUF, LimitsSection, LogColor, LogFormat, LogSection, ServerConfig,
    TelemetrySection, VersionSection, VersionStatus, is_version_name, parse_date,
};
pub use ingest::IngestSection;
pub use store::{EmbedderKind, EmbedderSection, GraphSection, RagSection, StoreSection};
pub use workspaces::WorkspacesSection;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where kbq keeps its own files (the generated API key).
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub store: StoreSection,
    /// What embeds documents and queries.
    pub embedder: EmbedderSection,
    /// RAG search.
    pub rag: RagSection,
    pub graph: GraphSection,
    pub agent: AgentSection,
    /// LLM providers in priority order; none means the built-in provider alone.
    pub providers: Vec<ProviderSection>,
    /// Model names of `POST /v1/chat/completions`.
    pub chat: ChatSection,
    pub health: HealthSection,
    /// Ingestion of raw documents.
    pub ingest: IngestSection,
    /// What a node keeps open of the workspaces it serves.
    pub workspaces: WorkspacesSection,
    pub limits: LimitsSection,
    pub auth: AuthSection,
    /// API versions by path prefix (`v1`, ...).
    pub versions: BTreeMap<String, VersionSection>,
    pub log: LogSection,
    /// Traces exported over OTLP.
    pub telemetry: TelemetrySection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("data"),
            server: ServerConfig::default(),
            store: StoreSection::default(),
            graph: GraphSection::default(),
            agent: AgentSection::default(),
            providers: Vec::new(),
            chat: ChatSection::default(),
            embedder: EmbedderSection::default(),
            rag: RagSection::default(),
            health: HealthSection::default(),
            ingest: IngestSection::default(),
            workspaces: WorkspacesSection::default(),
            limits: LimitsSection::default(),
            auth: AuthSection::default(),
            versions: BTreeMap::from([("v1".to_string(), VersionSection::v1())]),
            log: LogSection::default(),
            telemetry: TelemetrySection::default(),
        }
    }
}

/// A configuration that cannot be used, naming the key and the rule.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// The error for `key` breaking `rule`: "`key` `rule`".
fn bad<T>(key: &str, rule: &str) -> Result<T, ConfigError> {
    Err(ConfigError(format!("{key} {rule}")))
}

/// The rule of a number between `min` and `max` (both included).
fn within<T: Copy + PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        bad(key, &format!("must be between {min} and {max}"))
    }
}

/// The rules of an OpenAI-compatible endpoint (an embedder's or a provider's) under `prefix`:
/// an http(s) `base_url` and a model name.
fn openai_endpoint(
    prefix: &str,
    base_url: &Option<String>,
    model: &Option<String>,
) -> Result<(), ConfigError> {
    if !base_url
        .as_deref()
        .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"))
    {
        return bad(
            &format!("{prefix}.base_url"),
            "must be an http:// or https:// URL for kind openai",
        );
    }
    if model.as_deref().is_none_or(|m| m.trim().is_empty()) {
        return bad(&format!("{prefix}.model"), "is required for kind openai");
    }
    Ok(())
}

/// `KBQ_` variables that are not configuration keys: `KBQ_CONFIG` (the file), `KBQ_API_KEYS`
/// (plaintext keys, read at `serve`), and the client libraries' `KBQ_BASE_URL` and
/// `KBQ_API_KEY` (docs/clients.md), which a shell that runs both kbq and a client may hold.
/// Every other `KBQ_` variable is read as a key, and an unknown one stops start-up.
pub const NOT_CONFIG: [&str; 4] = ["KBQ_CONFIG", "KBQ_API_KEYS", "KBQ_BASE_URL", "KBQ_API_KEY"];

impl Config {
    /// Loads defaults, then `file` (if given), then `KBQ_*` variables, and validates.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ConfigError(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            figment = figment.merge(Toml::file(path));
        }
        figment = figment.merge(Env::prefixed("KBQ_").split("__").filter(|k| {
            !NOT_CONFIG
                .iter()
                .any(|v| v["KBQ_".len()..].eq_ignore_ascii_case(k.as_str()))
        }));
        let config: Config = figment.extract().map_err(|e| {
            let errors: Vec<String> = e.into_iter().map(|e| e.to_string()).collect();
            ConfigError(errors.join("; "))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every rule that types alone do not, section by section; the first broken rule
    /// is the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.store.validate()?;
        self.graph.validate()?;
        self.agent.validate()?;
        self.health.validate()?;
        self.limits.validate()?;
        agent::validate_providers(&self.providers)?;
        self.ingest.validate(&self.providers)?;
        self.workspaces.validate()?;
        self.auth.validate()?;
        self.telemetry.validate()?;
        for (name, version) in &self.versions {
            version.validate(name)?;
        }
        self.log.validate()?;
        self.embedder.validate()?;
        self.rag.validate()?;
        self.chat.validate(&self.providers)
    }

    /// What a node keeps open of its workspaces (`[workspaces]`).
    pub fn keeping(&self) -> crate::workspaces::Keeping {
        let (w, l) = (&self.workspaces, &self.limits);
        crate::workspaces::Keeping {
            idle_close: (w.idle_close_secs > 0).then(|| Duration::from_secs(w.idle_close_secs)),
            index_budget: (w.index_budget_mb > 0).then_some(w.index_budget_mb << 20),
            open_timeout: Duration::from_secs(w.open_timeout_secs),
            metrics_series: w.metrics_series as usize,
            quota: crate::workspaces::Quota {
                entities: (w.max_entities > 0).then_some(w.max_entities),
                documents: (w.max_documents > 0).then_some(w.max_documents),
                document_bytes: (w.max_document_bytes > 0).then_some(w.max_document_bytes),
                graph_per_minute: (l.workspace_graph_per_minute > 0)
                    .then_some(u64::from(l.workspace_graph_per_minute)),
                // The burst stands even without a rate: a workspace's own rate takes it.
                graph_burst: Some(u64::from(l.workspace_graph_burst)),
                agent_per_minute: (l.workspace_agent_per_minute > 0)
                    .then_some(u64::from(l.workspace_agent_per_minute)),
                agent_burst: Some(u64::from(l.workspace_agent_burst)),
            },
        }
    }

    /// The configured embedder. The API key is read from its variable here.
    pub fn embedder(&self) -> std::sync::Arc<dyn kbq_store::Embedder> {
        let e = &self.embedder;
        match e.kind {
            EmbedderKind::Hashing => {
                std::sync::Arc::new(kbq_store::HashingEmbedder::new(e.dimension))
            }
            EmbedderKind::Openai => std::sync::Arc::new(kbq_actors::OpenAiEmbedder::new(
                kbq_actors::OpenAiEmbedderConfig {
                    base_url: e.base_url.clone().unwrap_or_default(),
                    model: e.model.clone().unwrap_or_default(),
                    api_key: e.api_key_env.as_deref().and_then(|v| std::env::var(v).ok()),
                    dimension: e.dimension,
                    send_dimensions: e.send_dimensions,
                    batch_size: e.batch_size,
                    timeout: Duration::from_millis(e.timeout_ms),
                    max_retries: e.max_retries,
                    documents: kbq_actors::Modality {
                        input_type: e.document_input_type.clone(),
                        prefix: e.document_prefix.clone(),
                    },
                    queries: kbq_actors::Modality {
                        input_type: e.query_input_type.clone(),
                        prefix: e.query_prefix.clone(),
                    },
                },
            )),
        }
    }

    /// The actor runtime's settings. API keys of providers are read from their variables here.
    pub fn runtime_config(&self) -> kbq_actors::RuntimeConfig {
        use kbq_actors::{ProviderConfig, ProviderKind, RetryPolicy, SessionLimits};
        let ms = Duration::from_millis;
        let providers = self
            .providers
            .iter()
            .map(|p| ProviderConfig {
                name: p.name.clone(),
                kind: match p.kind {
                    ProviderKindName::Builtin => ProviderKind::Builtin,
                    ProviderKindName::Openai => ProviderKind::OpenAi {
                        base_url: p.base_url.clone().unwrap_or_default(),
                        model: p.model.clone().unwrap_or_default(),
                        api_key: p.api_key_env.as_deref().and_then(|v| std::env::var(v).ok()),
                    },
                },
                timeout: ms(p.timeout_ms),
                retry: RetryPolicy {
                    max_retries: p.max_retries,
                    min_delay: ms(100),
                    max_delay: ms(2_000),
                },
            })
            .collect::<Vec<_>>();
        // One provider's whole budget: every attempt, plus the pauses between them.
        let provider_timeout = self
            .providers
            .iter()
            .map(|p| {
                ms(p.timeout_ms) * (p.max_retries as u32 + 1) + ms(2_000) * p.max_retries as u32
            })
            .max()
            .unwrap_or(ms(30_000));
        kbq_actors::RuntimeConfig {
            graph_workers: self.graph.workers,
            graph_call_timeout: ms(self.graph.call_timeout_ms),
            graph_queue_capacity: self.graph.queue_capacity,
            graph_max_workers: self.graph.max_workers,
            graph_lane_threads: self.graph.lookup_threads,
            scan_threads: match self.server.scan_threads {
                0 => std::thread::available_parallelism().map_or(2, |n| n.get().min(64)),
                n => n,
            },
            scan_nice: self.server.scan_nice,
            tool_workers: self.agent.tool_workers,
            tool_max_workers: self.agent.tool_max_workers,
            tool_timeout: ms(self.agent.tool_timeout_ms),
            tool_queue_capacity: self.agent.tool_queue_capacity,
            provider_workers: self.agent.provider_workers,
            provider_max_workers: self.agent.provider_max_workers,
            provider_queue_capacity: self.agent.provider_queue_capacity,
            providers,
            health: kbq_actors::HealthPolicy {
                probe_interval: ms(self.health.probe_interval_ms),
                failure_threshold: self.health.failure_threshold,
                cooldown: ms(self.health.cooldown_ms),
                max_cooldown: ms(self.health.max_cooldown_ms),
            },
            session: SessionLimits {
                max_steps: self.agent.max_steps,
                max_wall: ms(self.agent.max_wall_ms),
                provider_timeout,
                max_sessions: self.agent.max_sessions,
            },
            ingest: self.ingest.runtime(),
        }
    }

    pub fn store_config(&self) -> kbq_store::StoreConfig {
        kbq_store::StoreConfig {
            url: self.store.url.clone(),
            namespace: self.store.namespace.clone(),
            database: self.store.database.clone(),
            username: self.store.username.clone(),
            password: self.store.password.clone(),
            graph_index: self.store.graph_index,
            query_timeout: Duration::from_millis(self.store.query_timeout_ms),
            connect_timeout: Duration::from_millis(self.store.connect_timeout_ms),
            block_cache_bytes: self.store.block_cache_mb << 20,
            memtable_bytes: Some(self.store.memtable_mb << 20),
        }
    }
}

#[cfg(test)]
mod tests;
