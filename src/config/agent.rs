//! The sections of the agent runtime: `[agent]` (a chat turn's bounds and the tool and
//! provider pools), `[[providers]]` (the language models, in priority order), `[chat]` (model
//! names of chat completions) and `[health]` (probes and ejection of providers), each with its
//! defaults and its rules. They are their own file because they all configure `kbq-actors`'
//! agent side, and `[chat]`'s rules read `[[providers]]`.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{ConfigError, bad, openai_endpoint, within};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Most provider calls in one chat turn.
    pub max_steps: u32,
    /// Longest time one chat turn may take.
    pub max_wall_ms: u64,
    /// Longest user message, system prompt or history entry, in characters.
    pub max_message_chars: usize,
    /// Most history entries in one request.
    pub max_history: usize,
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

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            max_steps: 8,
            max_wall_ms: 60_000,
            max_message_chars: 32 * 1024,
            max_history: 50,
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

impl AgentSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let a = self;
        within("agent.max_steps", a.max_steps, 1, 64)?;
        within("agent.max_wall_ms", a.max_wall_ms, 100, 3_600_000)?;
        within("agent.max_message_chars", a.max_message_chars, 1, 1 << 20)?;
        within("agent.max_history", a.max_history, 0, 1000)?;
        within("agent.max_tokens_limit", a.max_tokens_limit, 1, 1_000_000)?;
        within("agent.tool_workers", a.tool_workers, 1, 256)?;
        within("agent.tool_timeout_ms", a.tool_timeout_ms, 1, 600_000)?;
        within("agent.max_sessions", a.max_sessions, 1, 1_000_000)?;
        // A pool's most workers are bounded below by its least.
        within(
            "agent.tool_max_workers",
            a.tool_max_workers,
            a.tool_workers,
            1024,
        )?;
        within("agent.provider_workers", a.provider_workers, 1, 1024)?;
        within(
            "agent.provider_max_workers",
            a.provider_max_workers,
            a.provider_workers,
            8192,
        )?;
        within(
            "agent.provider_queue_capacity",
            a.provider_queue_capacity,
            0,
            1_000_000,
        )?;
        within(
            "agent.tool_queue_capacity",
            a.tool_queue_capacity,
            0,
            1_000_000,
        )
    }
}

/// One LLM provider.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    pub name: String,
    /// `openai` (any OpenAI-compatible endpoint) or `builtin`.
    pub kind: ProviderKindName,
    /// For `openai`: the API base, e.g. <https://api.openai.com/v1> or <http://localhost:11434/v1>.
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

/// The rules of `[[providers]]`: each provider's, and names unique across the list.
pub fn validate_providers(providers: &[ProviderSection]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, p) in providers.iter().enumerate() {
        if p.name.trim().is_empty() || !names.insert(p.name.as_str()) {
            return bad(
                &format!("providers[{i}].name"),
                "must be present and unique",
            );
        }
        p.validate(i)?;
    }
    Ok(())
}

impl ProviderSection {
    /// The rules of the `i`th provider, beyond its name.
    fn validate(&self, i: usize) -> Result<(), ConfigError> {
        let key = |field: &str| format!("providers[{i}].{field}");
        if self.kind == ProviderKindName::Openai {
            openai_endpoint(&format!("providers[{i}]"), &self.base_url, &self.model)?;
        }
        within(&key("timeout_ms"), self.timeout_ms, 1, 600_000)?;
        within(&key("max_retries"), self.max_retries, 0, 10)
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

impl ChatSection {
    /// Aliases name `providers` (or the built-in provider, when none is configured).
    pub fn validate(&self, providers: &[ProviderSection]) -> Result<(), ConfigError> {
        let providers: Vec<&str> = if providers.is_empty() {
            vec!["builtin"]
        } else {
            providers.iter().map(|p| p.name.as_str()).collect()
        };
        for (alias, chain) in &self.aliases {
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

impl HealthSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let h = self;
        within(
            "health.probe_interval_ms",
            h.probe_interval_ms,
            10,
            3_600_000,
        )?;
        within("health.failure_threshold", h.failure_threshold, 1, 100)?;
        within("health.cooldown_ms", h.cooldown_ms, 1, 3_600_000)?;
        within(
            "health.max_cooldown_ms",
            h.max_cooldown_ms,
            h.cooldown_ms,
            86_400_000,
        )
    }
}
