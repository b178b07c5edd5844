//! The [`Tool`] trait, the context a call runs in, and argument validation.

use std::sync::Arc;

use async_trait::async_trait;
use kbq_store::{KnowledgeBase, StoreError};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::extract::EntityExtractor;

/// One workspace's knowledge as a request carries it: its name, its knowledge base and the
/// entity extractor over that knowledge base's names.
///
/// The edge resolves it once per request, from the request's key, and hands it down as a
/// value: the actors, tools and providers that serve the request read this and nothing else,
/// so no shared state decides which knowledge a request sees.
#[derive(Clone)]
pub struct Workspace {
    pub name: Arc<str>,
    pub kb: Arc<KnowledgeBase>,
    pub extractor: Arc<EntityExtractor>,
}

impl Workspace {
    /// The workspace `name` over `kb`, with an extractor of its own.
    pub fn new(name: impl Into<Arc<str>>, kb: Arc<KnowledgeBase>) -> Self {
        Workspace {
            name: name.into(),
            extractor: Arc::new(EntityExtractor::new(kb.clone())),
            kb,
        }
    }
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Workspace").field(&self.name).finish()
    }
}

/// What a tool call may use: the knowledge base, the entity extractor, and the caller's
/// identity, which owns any memory the call touches.
#[derive(Clone)]
pub struct ToolContext {
    pub kb: Arc<KnowledgeBase>,
    pub extractor: Arc<EntityExtractor>,
    /// The API key's stable id. Memory is stored under it and recalled only with it.
    pub owner: String,
    /// The span of the call (the session's tool call): the tool's work is traced under it
    /// on whichever worker runs it.
    pub span: tracing::Span,
}

impl ToolContext {
    /// A call in `workspace` for the key `owner`.
    pub fn new(workspace: &Workspace, owner: String) -> Self {
        ToolContext {
            kb: workspace.kb.clone(),
            extractor: workspace.extractor.clone(),
            owner,
            span: tracing::Span::none(),
        }
    }
}

/// Why a call produced no result. Both become an error result the model sees.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    #[error("the tool failed: {0}")]
    Failed(String),
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid { field, reason } => {
                ToolError::InvalidArguments(format!("{field} {reason}"))
            }
            StoreError::Unavailable(m) | StoreError::Query(m) => ToolError::Failed(m),
            e @ StoreError::Removed(_) => ToolError::Failed(e.to_string()),
        }
    }
}

impl ToolError {
    /// The result object a model sees for a failed call.
    pub fn to_result(&self) -> ToolResult {
        let kind = match self {
            ToolError::InvalidArguments(_) => "invalid_arguments",
            ToolError::UnknownTool(_) => "unknown_tool",
            ToolError::Failed(_) => "failed",
        };
        ToolResult::from_value(&json!({"error": self.to_string(), "error_type": kind}))
    }
}

/// A call's result: a JSON object, held as the text `serde_json` writes for it.
///
/// A tool writes its result once. The model's tool message, the answer's `tool_calls` and a
/// streamed event take that text as it is; [`ToolResult::value`] reads it back where a
/// caller needs its fields. Building the result as `serde_json::Value`s first (each object a
/// B-tree, every string and property map a copy) and dropping them again was about a sixth
/// of a chat's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    json: String,
    /// The `error` field of the result, when it is a string: the message of a failed call.
    error: Option<String>,
    /// Whether the result has an `error` field (of any type): the call failed.
    failed: bool,
}

impl ToolResult {
    /// The result `value` is.
    pub fn from_value(value: &Value) -> Self {
        ToolResult {
            json: kbq_store::json::to_string(value),
            error: value
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string),
            failed: value.get("error").is_some(),
        }
    }

    /// A result a tool wrote as text: a JSON object without an `error` field, in exactly the
    /// bytes `serde_json` writes for the value it reads back as (keys in order, numbers and
    /// strings as `serde_json` writes them). Debug builds, and so every test, check it.
    pub(crate) fn from_json(json: String) -> Self {
        #[cfg(debug_assertions)]
        {
            let value: Value = serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("a tool wrote invalid JSON ({e}): {json}"));
            assert!(
                value.is_object() && value.get("error").is_none(),
                "a tool's result must be an object without `error`: {json}"
            );
            assert_eq!(
                kbq_store::json::to_string(&value),
                json,
                "a tool's result must be the bytes serde_json writes for it"
            );
        }
        ToolResult {
            json,
            error: None,
            failed: false,
        }
    }

    /// The result as JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The result's `error` message: `Some` for a failed call.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Whether the result has an `error` field: a failed call's does.
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The result read back as a value (exactly: serde_json reads its floats back with
    /// `float_roundtrip`).
    pub fn value(&self) -> Value {
        // Only ever made from a value or checked text: it reads back.
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }
}

/// Serializes as the JSON object it holds.
impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// A built-in tool an agent can call.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// JSON Schema of the arguments (an object schema).
    fn parameters(&self) -> Value;
    /// JSON Schema of a successful call's result (an object schema; see [`crate::outputs`]).
    fn output_schema(&self) -> Value;
    /// Whether the call only reads (every tool but MemoryStoreTool).
    fn read_only(&self) -> bool {
        true
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError>;
}

/// The OpenAI function-tool definition of a tool.
pub fn openai_definition(tool: &dyn Tool) -> Value {
    json!({
        "type": "function",
        "function": {"name": tool.name(), "description": tool.description(), "parameters": tool.parameters()}
    })
}

/// Validated access to a call's arguments; rejects fields the schema does not name.
pub struct Args<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    pub fn new(args: &'a Value, known: &[&str]) -> Result<Self, ToolError> {
        let map = args
            .as_object()
            .ok_or_else(|| ToolError::InvalidArguments("arguments must be a JSON object".into()))?;
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ToolError::InvalidArguments(format!(
                "unknown argument `{k}` (expected {})",
                known.join(", ")
            )));
        }
        Ok(Args { map })
    }

    /// A required, non-blank string of at most `max` characters.
    pub fn string(&self, name: &str, max: usize) -> Result<String, ToolError> {
        match self.map.get(name) {
            None | Some(Value::Null) => {
                Err(ToolError::InvalidArguments(format!("`{name}` is required")))
            }
            Some(Value::String(s)) if s.trim().is_empty() => Err(ToolError::InvalidArguments(
                format!("`{name}` must not be empty"),
            )),
            Some(Value::String(s)) if s.chars().count() > max => Err(ToolError::InvalidArguments(
                format!("`{name}` must be at most {max} characters"),
            )),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(ToolError::InvalidArguments(format!(
                "`{name}` must be a string"
            ))),
        }
    }

    /// An optional integer in `min..=max`, else `default`.
    pub fn int(&self, name: &str, default: i64, min: i64, max: i64) -> Result<i64, ToolError> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v
                .as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            {
                Some(i) if (min..=max).contains(&i) => Ok(i),
                _ => Err(ToolError::InvalidArguments(format!(
                    "`{name}` must be an integer from {min} to {max}"
                ))),
            },
        }
    }

    /// An optional list of at most `max` non-blank strings.
    pub fn strings(&self, name: &str, max: usize) -> Result<Option<Vec<String>>, ToolError> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) if items.len() <= max => items
                .iter()
                .map(|v| match v.as_str() {
                    Some(s) if !s.trim().is_empty() && s.len() <= 200 => Ok(s.to_string()),
                    _ => Err(ToolError::InvalidArguments(format!(
                        "`{name}` must hold non-empty strings"
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(ToolError::InvalidArguments(format!(
                "`{name}` must be an array of at most {max} strings"
            ))),
        }
    }
}

/// The first `max` characters of a text, cut at a word where possible.
pub fn snippet(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(head, _)| head);
    format!("{cut}…")
}
