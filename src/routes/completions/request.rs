//! The request of `POST /v1/chat/completions` and its checks: OpenAI's fields, each checked
//! with an error that names the field at fault, before any provider is asked. Its own file
//! because the rules (messages, tools, tool choice, ranges) are most of the route.

use std::collections::HashSet;

use kbq_actors::ChatRequest;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::AgentSection;
use crate::error::{ApiError, ErrorCode};
use crate::models::Models;

/// Most messages in one request.
pub const MAX_MESSAGES: usize = 1000;
/// Most tools in one request (OpenAI's own bound).
pub const MAX_TOOLS: usize = 128;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// The request body. Unknown fields are refused (as OpenAI does), naming the field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    /// `kbq`, an alias from `[chat.aliases]`, or a provider's name.
    pub model: String,
    /// OpenAI chat messages (`system`, `developer`, `user`, `assistant`, `tool`), 1 to 1000.
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub max_tokens: Option<i64>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub max_completion_tokens: Option<i64>,
    /// OpenAI function tools, at most 128.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "function": {"name": ...}}`.
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// Answer as server-sent events of `chat.completion.chunk`s, ending with `data: [DONE]`.
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Must be 1.
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub n: Option<i64>,
    /// A string or up to 4 strings.
    #[schema(value_type = Option<Object>)]
    pub stop: Option<Value>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    #[schema(value_type = Option<Object>)]
    pub response_format: Option<Value>,
    /// Accepted and ignored, as OpenAI uses it for abuse monitoring.
    pub user: Option<String>,
}

/// A validated request: what goes to the providers, and how to answer.
pub(super) struct Validated {
    /// The model asked for: a name in [`Models`].
    pub chain_model: String,
    pub request: ChatRequest,
    pub stream: bool,
    pub include_usage: bool,
}

fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `content` as OpenAI allows it: a string or an array of text parts.
fn check_content(content: &Value, field: &str) -> Result<(), ApiError> {
    let rule = format!("{field} must be a string or an array of text parts");
    match content {
        Value::String(_) => Ok(()),
        Value::Array(parts) if !parts.is_empty() => {
            for (j, part) in parts.iter().enumerate() {
                if part["type"] != "text" {
                    return Err(ApiError::invalid(
                        format!("{field}[{j}].type"),
                        format!("{field}[{j}].type must be `text`: kbq accepts text content only"),
                    ));
                }
                if !part["text"].is_string() {
                    return Err(ApiError::invalid(
                        format!("{field}[{j}].text"),
                        format!("{field}[{j}].text must be a string"),
                    ));
                }
            }
            Ok(())
        }
        _ => Err(ApiError::invalid(field, rule)),
    }
}

fn check_message(i: usize, m: &Value) -> Result<(), ApiError> {
    let at = |f: &str| format!("messages[{i}].{f}");
    let Some(obj) = m.as_object() else {
        return Err(ApiError::invalid(
            format!("messages[{i}]"),
            format!("messages[{i}] must be an object"),
        ));
    };
    const KNOWN: [&str; 6] = [
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "refusal",
    ];
    if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            at(k),
            format!("{} is not a known message field", at(k)),
        ));
    }
    let role = obj.get("role").and_then(Value::as_str).unwrap_or_default();
    let content = obj.get("content").unwrap_or(&Value::Null);
    match role {
        "system" | "developer" | "user" => check_content(content, &at("content")),
        "tool" => {
            if obj
                .get("tool_call_id")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(ApiError::invalid(
                    at("tool_call_id"),
                    format!(
                        "{} must be the id of the tool call answered",
                        at("tool_call_id")
                    ),
                ));
            }
            check_content(content, &at("content"))
        }
        "assistant" => {
            let calls = obj.get("tool_calls").unwrap_or(&Value::Null);
            if !calls.is_null() {
                let Some(calls) = calls.as_array() else {
                    return Err(ApiError::invalid(
                        at("tool_calls"),
                        format!("{} must be an array", at("tool_calls")),
                    ));
                };
                for (j, c) in calls.iter().enumerate() {
                    let ok = c["id"].as_str().is_some_and(|s| !s.is_empty())
                        && c["type"] == "function"
                        && c["function"]["name"].is_string()
                        && c["function"]["arguments"].is_string();
                    if !ok {
                        let f = format!("{}[{j}]", at("tool_calls"));
                        return Err(ApiError::invalid(
                            f.clone(),
                            format!(
                                "{f} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", \"arguments\" (a JSON string)}}}}"
                            ),
                        ));
                    }
                }
            }
            if content.is_null() {
                if calls.is_null() {
                    return Err(ApiError::invalid(
                        at("content"),
                        format!("{} is required unless tool_calls is given", at("content")),
                    ));
                }
                Ok(())
            } else {
                check_content(content, &at("content"))
            }
        }
        _ => Err(ApiError::invalid(
            at("role"),
            format!(
                "{} must be one of system, developer, user, assistant, tool",
                at("role")
            ),
        )),
    }
}

fn check_tools(tools: &[Value]) -> Result<(), ApiError> {
    if tools.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            "tools",
            format!("tools may hold at most {MAX_TOOLS} tools"),
        ));
    }
    let mut names = HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        if t["type"] != "function" {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!("tools[{i}].type must be `function`"),
            ));
        }
        let name = t["function"]["name"].as_str().unwrap_or_default();
        if !is_tool_name(name) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                format!("tools[{i}].function.name must be 1 to 64 letters, digits, `_` or `-`"),
            ));
        }
        if !names.insert(name) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                format!("tools[{i}].function.name `{name}` is given twice"),
            ));
        }
        let params = &t["function"]["parameters"];
        if !(params.is_null() || params.is_object()) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.parameters"),
                format!("tools[{i}].function.parameters must be a JSON Schema object"),
            ));
        }
        let desc = &t["function"]["description"];
        if !(desc.is_null() || desc.is_string()) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.description"),
                format!("tools[{i}].function.description must be a string"),
            ));
        }
    }
    Ok(())
}

fn check_tool_choice(choice: &Value, tools: &[Value]) -> Result<(), ApiError> {
    let rule = "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    match choice {
        Value::String(s) if s == "none" => return Ok(()),
        Value::String(s) if s == "auto" || s == "required" => {}
        Value::Object(_)
            if choice["type"] == "function" && choice["function"]["name"].is_string() =>
        {
            let name = &choice["function"]["name"];
            if !tools.iter().any(|t| t["function"]["name"] == *name) {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("tool_choice names {name}, which is not among tools"),
                ));
            }
        }
        _ => return Err(ApiError::invalid("tool_choice", rule)),
    }
    if tools.is_empty() {
        return Err(ApiError::invalid(
            "tool_choice",
            "tool_choice is only allowed when tools are given",
        ));
    }
    Ok(())
}

/// The number fields' bounds, as OpenAI has them.
pub const TEMPERATURE: (f64, f64) = (0.0, 2.0);
pub const TOP_P: (f64, f64) = (0.0, 1.0);
pub const PENALTY: (f64, f64) = (-2.0, 2.0);
/// Most strings in `stop`.
pub const MAX_STOPS: usize = 4;

/// Writes the rules `validate` checks into the request's schema in the JSON document
/// `schemas` (its components): the served model names, the messages by role, the tools, the
/// tool choice, the bounds of numbers, and the rules between fields (a tool choice other
/// than `none` needs tools; `stream_options` needs `stream`). Two rules no JSON Schema can
/// say are in the descriptions: tool names are unique, and a named tool choice names one of
/// the tools.
pub fn state(schemas: &mut Value, models: &[&str], limits: &AgentSection) {
    use serde_json::json;
    let request = &mut schemas["CompletionRequest"];
    let p = &mut request["properties"];
    p["model"]["enum"] = json!(models);
    p["messages"] = json!({
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_MESSAGES,
        "items": message_schema(),
        "description": "OpenAI chat messages: `system`, `developer`, `user`, `assistant`, `tool`",
    });
    for (field, (least, most)) in [
        ("temperature", TEMPERATURE),
        ("top_p", TOP_P),
        ("presence_penalty", PENALTY),
        ("frequency_penalty", PENALTY),
    ] {
        p[field]["minimum"] = least.into();
        p[field]["maximum"] = most.into();
    }
    for field in ["max_tokens", "max_completion_tokens"] {
        p[field]["minimum"] = 1.into();
        p[field]["maximum"] = limits.max_tokens_limit.into();
    }
    p["n"]["minimum"] = 1.into();
    p["n"]["maximum"] = 1.into();
    p["n"]["default"] = 1.into();
    let text = json!({"type": "string"});
    p["tools"] = json!({
        "type": ["array", "null"],
        "maxItems": MAX_TOOLS,
        "items": {
            "type": "object",
            "required": ["type", "function"],
            "properties": {
                "type": {"const": "function"},
                "function": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                        "description": {"type": ["string", "null"]},
                        "parameters": {"type": ["object", "null"]},
                    },
                },
            },
        },
        "description": format!("OpenAI function tools, at most {MAX_TOOLS}, each name given once"),
    });
    p["tool_choice"] = json!({
        "oneOf": [
            {"enum": ["none", "auto", "required"]},
            {
                "type": "object",
                "required": ["type", "function"],
                "properties": {
                    "type": {"const": "function"},
                    "function": {"type": "object", "required": ["name"], "properties": {"name": text}},
                },
            },
            {"type": "null"},
        ],
        "description": "`none`, `auto`, `required`, or one of `tools` by name: `{\"type\": \"function\", \"function\": {\"name\": ...}}`",
    });
    p["stop"] = json!({
        "oneOf": [
            text,
            {"type": "array", "items": text, "maxItems": MAX_STOPS},
            {"type": "null"},
        ],
        "description": format!("A string or up to {MAX_STOPS} strings"),
    });
    p["response_format"] = json!({
        "type": ["object", "null"],
        "required": ["type"],
        "properties": {"type": text},
    });
    let object = request.take();
    *request = json!({
        "allOf": [
            object,
            {"anyOf": [
                {"not": {"required": ["tool_choice"]}},
                {"properties": {"tool_choice": {"enum": ["none", null]}}},
                {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}},
            ]},
            {"anyOf": [
                {"not": {"required": ["stream_options"]}},
                {"properties": {"stream_options": {"type": "null"}}},
                {"required": ["stream"], "properties": {"stream": {"const": true}}},
            ]},
        ],
    });
}

/// One message, by role, as [`check_message`] reads it.
fn message_schema() -> Value {
    use serde_json::json;
    let content = json!({
        "oneOf": [
            {"type": "string"},
            {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["type", "text"],
                    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                },
            },
        ],
    });
    let call = json!({
        "type": "object",
        "required": ["id", "type", "function"],
        "properties": {
            "id": {"type": "string", "minLength": 1},
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "required": ["name", "arguments"],
                "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
            },
        },
    });
    // Every message may carry the known fields; a role reads only its own.
    let any = json!({});
    let known = |role: Value, content: Value, more: Value, required: Value| {
        let mut properties = json!({
            "role": role,
            "content": content,
            "name": any,
            "tool_calls": any,
            "tool_call_id": any,
            "refusal": any,
        });
        for (k, v) in more.as_object().into_iter().flatten() {
            properties[k] = v.clone();
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    };
    let mut assistant = known(
        json!({"const": "assistant"}),
        json!({"oneOf": [content, {"type": "null"}]}),
        json!({"tool_calls": {"type": ["array", "null"], "items": call}}),
        json!(["role"]),
    );
    // An assistant message says something or calls tools.
    assistant["anyOf"] = json!([
        {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
        {"required": ["tool_calls"], "properties": {"tool_calls": {"type": "array"}}},
    ]);
    json!({
        "oneOf": [
            known(
                json!({"enum": ["system", "developer", "user"]}),
                content.clone(),
                json!({}),
                json!(["role", "content"]),
            ),
            known(
                json!({"const": "tool"}),
                content,
                json!({"tool_call_id": {"type": "string", "minLength": 1}}),
                json!(["role", "content", "tool_call_id"]),
            ),
            assistant,
        ],
    })
}

fn in_range(field: &str, value: Option<f64>, (min, max): (f64, f64)) -> Result<(), ApiError> {
    match value {
        Some(v) if !(min..=max).contains(&v) => Err(ApiError::invalid(
            field,
            format!("{field} must be between {min:.1} and {max:.1}"),
        )),
        _ => Ok(()),
    }
}

/// Checks a request against OpenAI's rules and kbq's bounds, field by field, and turns it
/// into what the providers are asked.
pub(super) fn validate(
    req: CompletionRequest,
    models: &Models,
    limits: &AgentSection,
) -> Result<Validated, ApiError> {
    if models.chain(&req.model).is_none() {
        let known: Vec<&str> = models.names().iter().map(|(n, _)| n.as_str()).collect();
        return Err(ApiError {
            field: Some("model".into()),
            ..ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "model `{}` does not exist here; this server offers: {}",
                    req.model,
                    known.join(", ")
                ),
            )
        });
    }
    if req.messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    if req.messages.len() > MAX_MESSAGES {
        return Err(ApiError::invalid(
            "messages",
            format!("messages may hold at most {MAX_MESSAGES} messages"),
        ));
    }
    for (i, m) in req.messages.iter().enumerate() {
        check_message(i, m)?;
    }
    let tools = req.tools.unwrap_or_default();
    check_tools(&tools)?;
    if let Some(choice) = &req.tool_choice {
        check_tool_choice(choice, &tools)?;
    }
    in_range("temperature", req.temperature, TEMPERATURE)?;
    in_range("top_p", req.top_p, TOP_P)?;
    in_range("presence_penalty", req.presence_penalty, PENALTY)?;
    in_range("frequency_penalty", req.frequency_penalty, PENALTY)?;
    if req.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid(
            "n",
            "n must be 1: kbq answers one choice",
        ));
    }
    let limit = i64::from(limits.max_tokens_limit);
    let mut max_tokens = None;
    for (field, value) in [
        ("max_tokens", req.max_tokens),
        ("max_completion_tokens", req.max_completion_tokens),
    ] {
        if let Some(v) = value {
            if !(1..=limit).contains(&v) {
                return Err(ApiError::invalid(
                    field,
                    format!("{field} must be between 1 and {limit}"),
                ));
            }
            max_tokens = Some(v as u32);
        }
    }
    if let Some(stop) = &req.stop {
        let ok = match stop {
            Value::String(_) => true,
            Value::Array(a) => a.len() <= MAX_STOPS && a.iter().all(Value::is_string),
            _ => false,
        };
        if !ok {
            return Err(ApiError::invalid(
                "stop",
                format!("stop must be a string or an array of at most {MAX_STOPS} strings"),
            ));
        }
    }
    if let Some(format) = &req.response_format
        && !format["type"].is_string()
    {
        return Err(ApiError::invalid(
            "response_format",
            "response_format must be an object with a `type`",
        ));
    }
    let stream = req.stream.unwrap_or(false);
    if req.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    let mut options = Map::new();
    let mut pass = |name: &str, value: Option<Value>| {
        if let Some(v) = value {
            options.insert(name.to_string(), v);
        }
    };
    pass("top_p", req.top_p.map(Value::from));
    pass("stop", req.stop);
    pass("seed", req.seed.map(Value::from));
    pass("presence_penalty", req.presence_penalty.map(Value::from));
    pass("frequency_penalty", req.frequency_penalty.map(Value::from));
    pass("response_format", req.response_format);
    if !tools.is_empty() {
        pass(
            "parallel_tool_calls",
            req.parallel_tool_calls.map(Value::from),
        );
    }
    Ok(Validated {
        chain_model: req.model,
        request: ChatRequest {
            messages: req.messages.into(),
            tools: tools.into(),
            tool_results: Default::default(),
            tool_choice: req.tool_choice,
            temperature: req.temperature,
            max_tokens,
            options,
            // The handler sets it: the request's workspace.
            workspace: None,
            // The router sets it: the span of each provider it tries.
            span: Default::default(),
        },
        stream,
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
    })
}
