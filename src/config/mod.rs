//! Configuration: built-in defaults, then a TOML file (`--config PATH` or `KBQ_CONFIG`), then
//! environment variables `KBQ_SECTION__KEY`. [`Config::validate`] names the key and the rule
//! of any bad value, and start-up stops on it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{Months, NaiveDate};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The entry type of `[[auth.keys]]` lives with the keys it configures; this name stays for
/// the callers that still spell it `config::KeyEntry`.
pub use crate::auth::KeyEntry;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where kbq keeps its own files (the generated API key).
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub store: StoreSection,
    /// What embeds documents and queries.
    pub embedder: EmbedderSection,
    pub graph: GraphSection,
    pub agent: AgentSection,
    /// LLM providers in priority order; none means the built-in provider alone.
    pub providers: Vec<ProviderSection>,
    /// Model names of `POST /v1/chat/completions`.
    pub chat: ChatSection,
    pub health: HealthSection,
    pub limits: LimitsSection,
    pub auth: AuthSection,
    /// API versions by path prefix (`v1`, ...).
    pub versions: BTreeMap<String, VersionSection>,
    pub log: LogSection,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    /// Largest request body accepted; larger bodies get 413.
    pub max_body_bytes: usize,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// How long in-flight requests may finish after a stop signal.
    pub shutdown_timeout_secs: u64,
}

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
    /// Load the bundled demo knowledge base when the store has no entities.
    pub load_demo: bool,
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Most provider calls in one chat turn.
    pub max_steps: u32,
    /// Longest time one chat turn may take.
    pub max_wall_ms: u64,
    /// Longest user message, in bytes.
    pub max_message_bytes: usize,
    /// Most history entries in one request.
    pub max_history: usize,
    /// Largest total size of the history, in bytes.
    pub max_history_bytes: usize,
    /// Upper bound of a request's max_tokens.
    pub max_tokens_limit: u32,
    /// Workers per built-in tool, at the least.
    pub tool_workers: usize,
    /// Most workers per built-in tool; between the two, each tool's pool follows its load.
    pub tool_max_workers: usize,
    /// Longest wait for one tool call.
    pub tool_timeout_ms: u64,
    /// Calls that may wait for each tool's workers; more fail at once.
    pub tool_queue_capacity: usize,
    /// Most chat sessions running at once; one more gets 503.
    pub max_sessions: usize,
    /// Workers per provider (calls in flight to it), at the least.
    pub provider_workers: usize,
    /// Most workers per provider; between the two, each provider's pool follows its load.
    pub provider_max_workers: usize,
    /// Calls that may wait for each provider's workers; one more tries the next provider.
    pub provider_queue_capacity: usize,
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
    /// For `openai`: the API base, e.g. https://api.openai.com/v1.
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
        }
    }
}

/// The model name that means every provider in priority order, with fallback.
pub const DEFAULT_MODEL: &str = "kbq";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ChatSection {
    /// Model names beyond `kbq` and the provider names: each tries its providers in order.
    pub aliases: BTreeMap<String, Vec<String>>,
}

/// One LLM provider.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    pub name: String,
    /// `openai` (any OpenAI-compatible endpoint) or `builtin`.
    pub kind: ProviderKindName,
    /// For `openai`: the API base, e.g. https://api.openai.com/v1 or http://localhost:11434/v1.
    #[serde(default)]
    pub base_url: Option<String>,
    /// For `openai`: the model name.
    #[serde(default)]
    pub model: Option<String>,
    /// For `openai`: the environment variable holding the API key (none for local servers).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Longest wait for one attempt.
    #[serde(default = "default_provider_timeout")]
    pub timeout_ms: u64,
    /// Retries of a transient failure before falling back to the next provider.
    #[serde(default = "default_retries")]
    pub max_retries: usize,
}

fn default_provider_timeout() -> u64 {
    30_000
}

fn default_retries() -> usize {
    2
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKindName {
    Openai,
    Builtin,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    /// How often every provider is probed.
    pub probe_interval_ms: u64,
    /// Failures in a row that eject a provider.
    pub failure_threshold: u32,
    /// First ejection's length; each repeat doubles it.
    pub cooldown_ms: u64,
    /// Longest ejection.
    pub max_cooldown_ms: u64,
}

/// Per-key request budgets; a rate of 0 turns a budget off.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub graph_per_minute: u32,
    pub graph_burst: u32,
    pub agent_per_minute: u32,
    pub agent_burst: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            graph_per_minute: 1200,
            graph_burst: 100,
            agent_per_minute: 60,
            agent_burst: 10,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    pub keys: Vec<KeyEntry>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum VersionStatus {
    Current,
    Stable,
    Deprecated,
    Sunset,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VersionSection {
    pub status: VersionStatus,
    /// `YYYY-MM-DD`.
    pub released: String,
    /// From this date (00:00 UTC) responses carry the deprecation headers.
    #[serde(default)]
    pub deprecated_at: Option<String>,
    /// From this date (00:00 UTC) every request under the version gets 410.
    #[serde(default)]
    pub sunset_at: Option<String>,
    #[serde(default)]
    pub migration_guide: Option<String>,
    /// The version that replaces this one, e.g. `v2`.
    #[serde(default)]
    pub successor: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// A tracing filter, e.g. `info` or `kbq=debug,info`. `RUST_LOG` overrides it.
    pub level: String,
    pub format: LogFormat,
}

impl Default for Config {
    fn default() -> Self {
        let mut versions = BTreeMap::new();
        versions.insert(
            "v1".to_string(),
            VersionSection {
                status: VersionStatus::Current,
                released: "2026-01-16".into(),
                deprecated_at: None,
                sunset_at: None,
                migration_guide: None,
                successor: None,
            },
        );
        Config {
            data_dir: PathBuf::from("data"),
            server: ServerConfig::default(),
            store: StoreSection::default(),
            graph: GraphSection::default(),
            agent: AgentSection::default(),
            providers: Vec::new(),
            chat: ChatSection::default(),
            embedder: EmbedderSection::default(),
            health: HealthSection::default(),
            limits: LimitsSection::default(),
            auth: AuthSection::default(),
            versions,
            log: LogSection::default(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            max_body_bytes: 1 << 20,
            workers: 0,
            shutdown_timeout_secs: 30,
        }
    }
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
            load_demo: true,
        }
    }
}

impl Default for GraphSection {
    fn default() -> Self {
        GraphSection {
            workers: 4,
            call_timeout_ms: 15_000,
            queue_capacity: 1024,
            max_workers: 16,
        }
    }
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            max_steps: 8,
            max_wall_ms: 60_000,
            max_message_bytes: 32 * 1024,
            max_history: 50,
            max_history_bytes: 256 * 1024,
            max_tokens_limit: 4096,
            tool_workers: 4,
            tool_max_workers: 16,
            tool_timeout_ms: 10_000,
            tool_queue_capacity: 256,
            max_sessions: 1024,
            provider_workers: 8,
            provider_max_workers: 512,
            provider_queue_capacity: 1024,
        }
    }
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            probe_interval_ms: 5_000,
            failure_threshold: 3,
            cooldown_ms: 5_000,
            max_cooldown_ms: 300_000,
        }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// A configuration that cannot be used, naming the key and the rule.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

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
        figment = figment.merge(
            Env::prefixed("KBQ_")
                .split("__")
                .filter(|k| k != "config" && k != "api_keys"),
        );
        let config: Config = figment.extract().map_err(|e| {
            let errors: Vec<String> = e.into_iter().map(|e| e.to_string()).collect();
            ConfigError(errors.join("; "))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every rule that types alone do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, rule: &str| Err(ConfigError(format!("{key} {rule}")));
        if self.server.listen.parse::<std::net::SocketAddr>().is_err() {
            return bad("server.listen", "must be an address like 127.0.0.1:8080");
        }
        if !(1024..=(256 << 20)).contains(&self.server.max_body_bytes) {
            return bad(
                "server.max_body_bytes",
                "must be between 1024 and 268435456",
            );
        }
        if self.server.workers > 256 {
            return bad("server.workers", "must be between 0 (one per core) and 256");
        }
        let url = &self.store.url;
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
        if self.store.namespace.is_empty() || self.store.database.is_empty() {
            return bad("store.namespace and store.database", "must not be empty");
        }
        if self.store.username.is_some() != self.store.password.is_some() {
            return bad(
                "store.username and store.password",
                "must be given together",
            );
        }
        for (key, ms) in [
            ("store.query_timeout_ms", self.store.query_timeout_ms),
            ("store.connect_timeout_ms", self.store.connect_timeout_ms),
            ("graph.call_timeout_ms", self.graph.call_timeout_ms),
        ] {
            if !(1..=600_000).contains(&ms) {
                return bad(key, "must be between 1 and 600000");
            }
        }
        let a = &self.agent;
        for (key, value, min, max) in [
            ("agent.max_steps", u64::from(a.max_steps), 1, 64),
            ("agent.max_wall_ms", a.max_wall_ms, 100, 3_600_000),
            (
                "agent.max_message_bytes",
                a.max_message_bytes as u64,
                1,
                1 << 20,
            ),
            ("agent.max_history", a.max_history as u64, 0, 1000),
            (
                "agent.max_history_bytes",
                a.max_history_bytes as u64,
                0,
                16 << 20,
            ),
            (
                "agent.max_tokens_limit",
                u64::from(a.max_tokens_limit),
                1,
                1_000_000,
            ),
            ("agent.tool_workers", a.tool_workers as u64, 1, 256),
            ("agent.tool_timeout_ms", a.tool_timeout_ms, 1, 600_000),
            ("agent.max_sessions", a.max_sessions as u64, 1, 1_000_000),
            (
                "agent.tool_max_workers",
                a.tool_max_workers as u64,
                a.tool_workers as u64,
                1024,
            ),
            ("agent.provider_workers", a.provider_workers as u64, 1, 1024),
            (
                "agent.provider_max_workers",
                a.provider_max_workers as u64,
                a.provider_workers as u64,
                8192,
            ),
            (
                "agent.provider_queue_capacity",
                a.provider_queue_capacity as u64,
                0,
                1_000_000,
            ),
            (
                "health.probe_interval_ms",
                self.health.probe_interval_ms,
                10,
                3_600_000,
            ),
            (
                "health.failure_threshold",
                u64::from(self.health.failure_threshold),
                1,
                100,
            ),
            ("health.cooldown_ms", self.health.cooldown_ms, 1, 3_600_000),
            (
                "health.max_cooldown_ms",
                self.health.max_cooldown_ms,
                self.health.cooldown_ms,
                86_400_000,
            ),
            (
                "limits.graph_per_minute",
                u64::from(self.limits.graph_per_minute),
                0,
                10_000_000,
            ),
            (
                "limits.graph_burst",
                u64::from(self.limits.graph_burst),
                1,
                1_000_000,
            ),
            (
                "limits.agent_per_minute",
                u64::from(self.limits.agent_per_minute),
                0,
                10_000_000,
            ),
            (
                "limits.agent_burst",
                u64::from(self.limits.agent_burst),
                1,
                1_000_000,
            ),
        ] {
            if !(min..=max).contains(&value) {
                return bad(key, &format!("must be between {min} and {max}"));
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, p) in self.providers.iter().enumerate() {
            let key = |field: &str| format!("providers[{i}].{field}");
            if p.name.trim().is_empty() || !names.insert(p.name.as_str()) {
                return bad(&key("name"), "must be present and unique");
            }
            if p.kind == ProviderKindName::Openai {
                if !p
                    .base_url
                    .as_deref()
                    .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"))
                {
                    return bad(
                        &key("base_url"),
                        "must be an http:// or https:// URL for kind openai",
                    );
                }
                if p.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
                    return bad(&key("model"), "is required for kind openai");
                }
            }
            if !(1..=600_000).contains(&p.timeout_ms) {
                return bad(&key("timeout_ms"), "must be between 1 and 600000");
            }
            if p.max_retries > 10 {
                return bad(&key("max_retries"), "must be between 0 and 10");
            }
        }
        if !(1..=256).contains(&self.graph.workers) {
            return bad("graph.workers", "must be between 1 and 256");
        }
        if !(self.graph.workers..=1024).contains(&self.graph.max_workers) {
            return bad(
                "graph.max_workers",
                "must be between graph.workers and 1024",
            );
        }
        if self.agent.tool_queue_capacity > 1_000_000 {
            return bad("agent.tool_queue_capacity", "must be between 0 and 1000000");
        }
        if self.graph.queue_capacity > 1_000_000 {
            return bad("graph.queue_capacity", "must be between 0 and 1000000");
        }
        for (i, k) in self.auth.keys.iter().enumerate() {
            if k.name.trim().is_empty() {
                return bad(&format!("auth.keys[{i}].name"), "must not be empty");
            }
            if k.sha256.len() != 64 || !k.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return bad(
                    &format!("auth.keys[{i}].sha256"),
                    "must be 64 hex digits (see `kbq keys new`)",
                );
            }
            if let Some(scopes) = &k.scopes {
                let field = format!("auth.keys[{i}].scopes");
                if scopes.is_empty() {
                    return bad(&field, "must name at least one scope; omit it for all");
                }
                if scopes
                    .iter()
                    .any(|s| crate::auth::Scope::parse(s).is_none())
                {
                    return bad(&field, "each must be one of read, write, agent, admin");
                }
            }
        }
        for (name, v) in &self.versions {
            let ok_name = name.len() > 1
                && name.starts_with('v')
                && name[1..].bytes().all(|b| b.is_ascii_digit());
            if !ok_name {
                return bad(
                    &format!("versions.{name}"),
                    "must be named v<major>, e.g. v1",
                );
            }
            let date = |field: &str, value: &str| -> Result<NaiveDate, ConfigError> {
                NaiveDate::parse_from_str(value, "%Y-%m-%d").map_err(|_| {
                    ConfigError(format!("versions.{name}.{field} must be a date YYYY-MM-DD"))
                })
            };
            let released = date("released", &v.released)?;
            let deprecated = v
                .deprecated_at
                .as_deref()
                .map(|d| date("deprecated_at", d))
                .transpose()?;
            let sunset = v
                .sunset_at
                .as_deref()
                .map(|d| date("sunset_at", d))
                .transpose()?;
            // The dates drive behaviour; the status must not contradict them.
            if v.status == VersionStatus::Deprecated && deprecated.is_none() {
                return bad(
                    &format!("versions.{name}.deprecated_at"),
                    "is required when status is deprecated",
                );
            }
            if v.status == VersionStatus::Sunset && sunset.is_none() {
                return bad(
                    &format!("versions.{name}.sunset_at"),
                    "is required when status is sunset",
                );
            }
            if deprecated.is_some_and(|d| d < released) {
                return bad(
                    &format!("versions.{name}.deprecated_at"),
                    "must not be before released",
                );
            }
            if let Some(sunset) = sunset {
                let Some(deprecated) = deprecated else {
                    return bad(
                        &format!("versions.{name}.sunset_at"),
                        "needs deprecated_at (a version is deprecated before it is sunset)",
                    );
                };
                if sunset < deprecated + Months::new(6) {
                    return bad(
                        &format!("versions.{name}.sunset_at"),
                        "must be at least 6 months after deprecated_at (the deprecation support period)",
                    );
                }
            }
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return bad(
                "log.level",
                "must be a tracing filter such as info or kbq=debug,info",
            );
        }
        let e = &self.embedder;
        if !(8..=8192).contains(&e.dimension) {
            return bad("embedder.dimension", "must be between 8 and 8192");
        }
        if e.kind == EmbedderKind::Openai {
            if !e
                .base_url
                .as_deref()
                .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"))
            {
                return bad(
                    "embedder.base_url",
                    "must be an http:// or https:// URL for kind openai",
                );
            }
            if e.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
                return bad("embedder.model", "is required for kind openai");
            }
            if !(1..=2048).contains(&e.batch_size) {
                return bad("embedder.batch_size", "must be between 1 and 2048");
            }
            if !(1..=600_000).contains(&e.timeout_ms) {
                return bad("embedder.timeout_ms", "must be between 1 and 600000");
            }
            if e.max_retries > 10 {
                return bad("embedder.max_retries", "must be at most 10");
            }
        }
        let providers: Vec<&str> = if self.providers.is_empty() {
            vec!["builtin"]
        } else {
            self.providers.iter().map(|p| p.name.as_str()).collect()
        };
        for (alias, chain) in &self.chat.aliases {
            let key = format!("chat.aliases.{alias}");
            if alias.trim().is_empty()
                || alias == DEFAULT_MODEL
                || providers.contains(&alias.as_str())
            {
                return bad(
                    &key,
                    "must be a new model name (not empty, `kbq` or a provider's name)",
                );
            }
            if chain.is_empty() {
                return bad(&key, "must list at least one provider");
            }
            if let Some(p) = chain.iter().find(|p| !providers.contains(&p.as_str())) {
                return bad(
                    &key,
                    &format!("names `{p}`, which is not a configured provider"),
                );
            }
        }
        Ok(())
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    fn from_file(path: &str) -> Config {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(file))
            .extract()
            .unwrap()
    }

    #[test]
    fn the_shipped_default_file_is_the_built_in_defaults() {
        assert_eq!(from_file("config/default.toml"), Config::default());
    }

    #[test]
    fn the_shipped_examples_are_valid() {
        for example in [
            "config/examples/remote.toml",
            "config/examples/deprecation.toml",
        ] {
            from_file(example).validate().unwrap();
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = Config::default();
        c.graph.workers = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("graph.workers")
        );
        let mut c = Config::default();
        c.store.url = "postgres://x".into();
        assert!(c.validate().unwrap_err().to_string().contains("store.url"));
        // A pool's most workers may not be fewer than its least.
        let mut c = Config::default();
        c.agent.provider_workers = 16;
        c.agent.provider_max_workers = 8;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("agent.provider_max_workers"), "{err}");
        let mut c = Config::default();
        c.agent.tool_max_workers = 2;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("agent.tool_max_workers"), "{err}");
        let mut c = Config::default();
        c.agent.provider_queue_capacity = 2_000_000;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("agent.provider_queue_capacity"), "{err}");
        let mut c = Config::default();
        let v1 = c.versions.get_mut("v1").unwrap();
        v1.deprecated_at = Some("2026-06-01".into());
        v1.sunset_at = Some("2026-09-01".into());
        assert!(c.validate().unwrap_err().to_string().contains("6 months"));
        let mut c = Config::default();
        c.versions.get_mut("v1").unwrap().status = VersionStatus::Sunset;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("versions.v1.sunset_at is required")
        );
        for scopes in [vec![], vec!["read".to_string(), "root".to_string()]] {
            let mut c = Config::default();
            c.auth.keys = vec![KeyEntry {
                name: "k".into(),
                sha256: "ab".repeat(32),
                scopes: Some(scopes),
            }];
            assert!(
                c.validate()
                    .unwrap_err()
                    .to_string()
                    .contains("auth.keys[0].scopes")
            );
        }
    }
}
