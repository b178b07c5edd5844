//! The built-in provider: retrieval and rules, not a language model. It speaks the same
//! tool-call protocol as a real model (answer with tool calls, read the tool results, write the
//! answer), so the chat loop has one code path for every provider, and a fresh kbq answers chats
//! with no model and no key.
//!
//! Tool choice, from the last user message: "remember ..." / "note that ..." stores a memory;
//! "what do you remember", "recall", "what did I tell you" search memory; memory stats, health
//! or "how many memories" check memory; a message naming a known entity gets
//! KnowledgeGraphTool and HybridSearchTool; anything else gets HybridSearchTool. Only the
//! tools a request offers are called.
//!
//! Through the OpenAI chat completions endpoint a client offers its own tools: a
//! `tool_choice` naming a function calls it (with the planned arguments when it is a kbq tool,
//! else the user's message in each required string parameter); `required` calls the planned
//! tools, or the first offered one; `auto` calls the planned tools that are offered. When
//! nothing is called (no tools, `none`, or no planned tool offered) the provider answers from
//! the knowledge base itself, calling the retrieval tools through their worker pools (so
//! within the pools' bounds and timeouts, and counted, like any model's tool calls).

use std::sync::atomic::{AtomicU64, Ordering};

use std::borrow::Cow;

use kbq_tools::{ToolContext, ToolResult, Workspace};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{Backend, ChatRequest, ChatResponse, ProviderError, Usage};
use crate::tools::ToolPool;

pub struct BuiltinBackend {
    name: String,
    /// The tools' pools, for answers the provider gives itself.
    tools: ToolPool,
    calls: AtomicU64,
}

/// The text of a message's `content`: a string, or the text parts of an array of parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Arguments for a tool the built-in provider has no plan for: the user's message in each
/// required string parameter (or the first string parameter when none is required).
fn generic_arguments(tool: &Value, text: &str) -> Value {
    let params = &tool["function"]["parameters"];
    let props = params["properties"].as_object();
    let is_string = |name: &str| {
        props
            .and_then(|p| p.get(name))
            .is_some_and(|p| p["type"] == "string")
    };
    let mut names: Vec<String> = params["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|n| is_string(n))
        .map(str::to_string)
        .collect();
    if names.is_empty()
        && let Some(first) = props.and_then(|p| p.iter().find(|(_, v)| v["type"] == "string"))
    {
        names.push(first.0.clone());
    }
    Value::Object(names.into_iter().map(|n| (n, json!(text))).collect())
}

impl BuiltinBackend {
    pub fn new(name: &str, tools: ToolPool) -> Self {
        BuiltinBackend {
            name: name.into(),
            tools,
            calls: AtomicU64::new(0),
        }
    }

    fn call_id(&self) -> String {
        format!("builtin_{}", self.calls.fetch_add(1, Ordering::Relaxed))
    }

    /// Answers from the knowledge base itself, for a request that offers no tools to call:
    /// runs the planned retrieval tools through their pools and describes what they found.
    /// Memory belongs to API keys, so it is only reachable through the agent.
    async fn answer_directly(
        &self,
        workspace: &Workspace,
        text: &str,
    ) -> Result<String, ProviderError> {
        let ctx = ToolContext::new(workspace, String::new());
        let mut parts = Vec::new();
        for (name, args) in self.plan(workspace, text).await? {
            if name.starts_with("Memory") {
                parts.push(
                    "Memory is kept per API key and only the agent (POST /v1/agent/chat) reaches it."
                        .to_string(),
                );
                continue;
            }
            let result = self.tools.call_for_model(name, &ctx, args).await;
            parts.push(describe_held(name, &result));
        }
        Ok(parts.join("\n\n"))
    }

    async fn plan(
        &self,
        workspace: &Workspace,
        text: &str,
    ) -> Result<Vec<(&'static str, Value)>, ProviderError> {
        let lower = text.trim().to_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
        if lower.contains("memor")
            && has(&[
                "stats",
                "statistic",
                "health",
                "how many",
                "status",
                "population",
            ])
        {
            return Ok(vec![("MemoryStatsTool", json!({}))]);
        }
        if has(&[
            "what do you remember",
            "do you remember",
            "recall",
            "what did i tell you",
            "what have i told you",
        ]) {
            return Ok(vec![(
                "MemorySearchTool",
                json!({"query": text, "limit": 5}),
            )]);
        }
        for prefix in [
            "please remember that ",
            "please remember ",
            "remember that ",
            "remember ",
            "note that ",
            "keep in mind that ",
        ] {
            if lower.starts_with(prefix) {
                let fact = text.trim()[prefix.len()..].trim();
                if !fact.is_empty() {
                    return Ok(vec![("MemoryStoreTool", json!({"content": fact}))]);
                }
            }
        }
        let entities = workspace
            .extractor
            .extract(text)
            .await
            .map_err(|e| ProviderError::Permanent(e.to_string()))?;
        let search = ("HybridSearchTool", json!({"query": text, "limit": 5}));
        Ok(match entities.first() {
            Some(entity) => vec![
                ("KnowledgeGraphTool", json!({"entity": entity, "depth": 1})),
                search,
            ],
            None => vec![search],
        })
    }
}

/// A string of a result's text: borrowed from it, or unescaped into a copy when it holds
/// escapes. (`Cow`'s own `Deserialize` always copies.)
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(Visit(std::marker::PhantomData))
    }
}

impl Text<'_> {
    fn of(v: &Value) -> Option<Text<'_>> {
        v.as_str().map(|s| Text(Cow::Borrowed(s)))
    }
}

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// `T` read only from a JSON object. A derived `Deserialize` also takes an array, as the
/// fields in order, where [`describe`] reads no fields at all.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        deserializer.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// What [`describe`] reads of a KnowledgeGraphTool result. Each field is absent, `null` or
/// of the type `describe` reads it as; anything else fails to read.
#[derive(Deserialize)]
struct GraphFields<'a> {
    #[serde(borrow)]
    entity: Option<Text<'a>>,
    found: Option<bool>,
    #[serde(borrow)]
    entities: Option<Vec<Obj<EntityFields<'a>>>>,
    #[serde(borrow)]
    relationships: Option<Vec<Obj<RelationshipFields<'a>>>>,
}

#[derive(Deserialize)]
struct EntityFields<'a> {
    #[serde(borrow)]
    entity_type: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct RelationshipFields<'a> {
    #[serde(borrow)]
    source_name: Option<Text<'a>>,
    #[serde(borrow)]
    target_name: Option<Text<'a>>,
    #[serde(borrow)]
    relationship_type: Option<Text<'a>>,
}

/// What [`describe`] reads of a search tool's result.
#[derive(Deserialize)]
struct SearchFields<'a> {
    #[serde(borrow)]
    results: Option<Vec<Obj<HitFields<'a>>>>,
}

#[derive(Deserialize)]
struct HitFields<'a> {
    #[serde(borrow)]
    title: Option<Text<'a>>,
    #[serde(borrow)]
    snippet: Option<Text<'a>>,
}

/// [`describe`] of a result a tool of this process returned, read from its text.
///
/// The graph and search tools' results are read into the few fields the sentence needs,
/// skipping the rest (the entities' properties, the documents' ids and sources) rather than
/// building all of it as values. A result those fields do not read (not an object, a field
/// of another type or given twice) is described from its value, as any other.
fn describe_held(tool: &str, result: &ToolResult) -> String {
    if let Some(err) = result.error() {
        return format!("({tool} could not answer: {err})");
    }
    describe_read(tool, result.json()).unwrap_or_else(|| describe(tool, &result.value()))
}

/// [`describe`] of a graph or search tool's result read into the fields it needs, or `None`
/// for another tool's, or a result those fields do not read.
fn describe_read(tool: &str, text: &str) -> Option<String> {
    if !text.starts_with('{') {
        return None;
    }
    match tool {
        "KnowledgeGraphTool" => serde_json::from_str::<Obj<GraphFields>>(text)
            .ok()
            .map(|r| describe_graph(&r.0)),
        "HybridSearchTool" | "SemanticSearchTool" => {
            serde_json::from_str::<Obj<SearchFields>>(text)
                .ok()
                .map(|r| describe_search(r.0.results.as_deref().unwrap_or_default()))
        }
        _ => None,
    }
}

/// A KnowledgeGraphTool result in a sentence: the entity, its type and up to eight of its
/// relationships.
fn describe_graph(r: &GraphFields) -> String {
    if r.found != Some(true) {
        return "I found no entity by that name in the knowledge graph.".into();
    }
    let entity = r.entity.as_deref().unwrap_or_default();
    let kind = r
        .entities
        .as_ref()
        .and_then(|e| e.first())
        .and_then(|e| e.0.entity_type.as_deref())
        .unwrap_or("entity");
    let links: Vec<String> = r
        .relationships
        .iter()
        .flatten()
        .filter_map(|Obj(r)| {
            let (s, t, ty) = (
                r.source_name.as_deref()?,
                r.target_name.as_deref()?,
                r.relationship_type.as_deref()?,
            );
            Some(link(entity, s, t, ty))
        })
        .take(8)
        .collect();
    graph_sentence(entity, kind, &links)
}

/// One relationship of `entity` in words.
fn link(entity: &str, source: &str, target: &str, ty: &str) -> String {
    let ty = ty.replace('_', " ");
    if source == entity {
        format!("{ty} {target}")
    } else {
        format!("{source} {ty} {entity}")
    }
}

fn graph_sentence(entity: &str, kind: &str, links: &[String]) -> String {
    if links.is_empty() {
        format!("{entity} is a {kind} in the knowledge base, with no recorded relationships.")
    } else {
        format!("{entity} ({kind}): {}.", links.join("; "))
    }
}

/// A search tool's hits in words: the first sentence of the best, and every title.
fn describe_search(docs: &[Obj<HitFields>]) -> String {
    let Some(Obj(top)) = docs.first() else {
        return "I found no documents about that in the knowledge base.".into();
    };
    let titles: Vec<String> = docs
        .iter()
        .filter_map(|d| d.0.title.as_deref())
        .map(|t| format!("\"{t}\""))
        .collect();
    let lead = top.snippet.as_deref().unwrap_or_default();
    let first_sentence = lead.split_inclusive(". ").next().unwrap_or(lead).trim();
    format!("{first_sentence}\n\nSources: {}.", titles.join(", "))
}

/// Describes one tool result in a sentence or a short list.
fn describe(tool: &str, result: &Value) -> String {
    if let Some(err) = result.get("error").and_then(Value::as_str) {
        return format!("({tool} could not answer: {err})");
    }
    match tool {
        "KnowledgeGraphTool" => describe_graph(&GraphFields {
            entity: Text::of(&result["entity"]),
            found: Some(result["found"] == true),
            entities: Some(vec![Obj(EntityFields {
                entity_type: Text::of(&result["entities"][0]["entity_type"]),
            })]),
            relationships: result["relationships"].as_array().map(|rels| {
                rels.iter()
                    .map(|r| {
                        Obj(RelationshipFields {
                            source_name: Text::of(&r["source_name"]),
                            target_name: Text::of(&r["target_name"]),
                            relationship_type: Text::of(&r["relationship_type"]),
                        })
                    })
                    .collect()
            }),
        }),
        "HybridSearchTool" | "SemanticSearchTool" => {
            let docs = result["results"].as_array().map_or(&[][..], Vec::as_slice);
            let hits: Vec<Obj<HitFields>> = docs
                .iter()
                .map(|d| {
                    Obj(HitFields {
                        title: Text::of(&d["title"]),
                        snippet: Text::of(&d["snippet"]),
                    })
                })
                .collect();
            describe_search(&hits)
        }
        "MemoryStoreTool" => format!(
            "I'll remember that: {}",
            result["content"].as_str().unwrap_or_default()
        ),
        "MemorySearchTool" => {
            let memories: Vec<&str> = result["results"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter(|x| x["kind"] == "memory")
                        .filter_map(|x| x["content"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            if memories.is_empty() {
                "I don't have anything stored about that yet.".into()
            } else {
                format!("Here is what I remember:\n- {}", memories.join("\n- "))
            }
        }
        "MemoryStatsTool" => format!(
            "Memory is healthy and holds {} fact(s) for your key. The knowledge base has {} entities, {} relationships and {} documents.",
            result["memories"],
            result["knowledge_base"]["entities"],
            result["knowledge_base"]["relationships"],
            result["knowledge_base"]["documents"]
        ),
        other => {
            let text = match result {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let cut = (0..=text.len().min(400))
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            format!("{other} answered: {}", &text[..cut])
        }
    }
}

/// Words in `text`, as `split_whitespace` counts them. The prompt's count reads every
/// message, the tools' results with them (kilobytes of JSON a turn): ASCII text is read eight
/// bytes at a time.
fn words(text: &str) -> u64 {
    ascii_words(text.as_bytes()).unwrap_or_else(|| {
        let mut count = 0;
        let mut in_word = false;
        for c in text.chars() {
            let space = c.is_whitespace();
            count += u64::from(in_word && space);
            in_word = !space;
        }
        count + u64::from(in_word)
    })
}

/// Words in `bytes` as [`words`] counts them, or `None` when they are not all ASCII. In
/// ASCII the whitespace is space and 9 to 13 (tab, line feed, vertical tab, form feed,
/// carriage return); a word starts at each other byte that follows whitespace or the start.
fn ascii_words(bytes: &[u8]) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte of `v` (ASCII) that is whitespace.
    let spaces = |v: u64| {
        // A byte is a space when `v ^ 0x20` is zero there: adding 0x7f to its low bits sets
        // its high bit for any non-zero byte, and carries into no other byte.
        let x = v ^ (0x20 * ONES);
        let space = !(((x & !HIGH) + !HIGH) | x) & HIGH;
        // 9 to 13: at least 9 (adding 0x77 reaches 0x80) and not at least 14.
        let control = (v + 0x77 * ONES) & !(v + 0x72 * ONES) & HIGH;
        space | control
    };
    let mut count = 0u64;
    // The high bit of the byte before the next word of eight: whitespace (the start counts).
    let mut before = 0x80u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let v = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        if v & HIGH != 0 {
            return None;
        }
        let space = spaces(v);
        // Each byte's high bit: it is no space and the byte before it (one lower) was.
        let starts = !space & HIGH & ((space << 8) | before);
        count += u64::from(starts.count_ones());
        before = space >> 56;
    }
    let mut in_word = before == 0;
    for &b in chunks.remainder() {
        if !b.is_ascii() {
            return None;
        }
        let space = b == b' ' || (9..=13).contains(&b);
        count += u64::from(!in_word && !space);
        in_word = !space;
    }
    Some(count)
}

/// Words in a message's `content` ([`text_of`]'s text), without copying it.
fn words_of(content: &Value) -> u64 {
    match content {
        Value::String(s) => words(s),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .map(words)
            .sum(),
        _ => 0,
    }
}

#[async_trait::async_trait]
impl Backend for BuiltinBackend {
    fn kind(&self) -> &'static str {
        "builtin"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        // The built-in provider answers from a knowledge base: only a request made in a
        // workspace has one (every chat and completion does).
        let workspace = request.workspace.as_ref().ok_or_else(|| {
            ProviderError::Permanent("the built-in provider answers only from a workspace".into())
        })?;
        // The question is the last user message; a conversation without one (instructions
        // alone, or an assistant's turn) is answered from its last instructions, or from its
        // first message, as a language model answers whatever it is given.
        let messages = &request.messages;
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .or_else(|| {
                messages
                    .iter()
                    .rposition(|m| m["role"] == "system" || m["role"] == "developer")
            })
            .or((!messages.is_empty()).then_some(0))
            .ok_or_else(|| ProviderError::Permanent("no messages".into()))?;
        let prompt_tokens = request
            .messages
            .iter()
            .map(|m| words_of(&m["content"]))
            .sum();
        let after = &request.messages[last_user + 1..];
        let mut finish = "stop";
        let message = if !after.iter().any(|m| m["role"] == "tool") {
            let text = text_of(&request.messages[last_user]["content"]);
            let offered = |name: &str| {
                request
                    .tools
                    .iter()
                    .find(|t| t["function"]["name"] == *name)
            };
            let planned = || async {
                Ok::<_, ProviderError>(
                    self.plan(workspace, &text)
                        .await?
                        .into_iter()
                        .filter(|(name, _)| offered(name).is_some())
                        .map(|(name, args)| (name.to_string(), args))
                        .collect::<Vec<_>>(),
                )
            };
            let choice = request.tool_choice.clone().unwrap_or(json!("auto"));
            let calls: Vec<(String, Value)> = if request.tools.is_empty() || choice == "none" {
                Vec::new()
            } else if let Some(name) = choice["function"]["name"].as_str() {
                let args = match planned().await?.into_iter().find(|(n, _)| n == name) {
                    Some((_, args)) => args,
                    None => generic_arguments(offered(name).unwrap_or(&Value::Null), &text),
                };
                vec![(name.to_string(), args)]
            } else {
                let mut calls = planned().await?;
                if calls.is_empty() && choice == "required" {
                    let first = &request.tools[0];
                    let name = first["function"]["name"].as_str().unwrap_or_default();
                    calls.push((name.to_string(), generic_arguments(first, &text)));
                }
                calls
            };
            if calls.is_empty() {
                json!({"role": "assistant", "content": self.answer_directly(workspace, &text).await?})
            } else {
                finish = "tool_calls";
                let calls: Vec<Value> = calls
                    .into_iter()
                    .map(|(name, args)| {
                        json!({"id": self.call_id(), "type": "function", "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
                json!({"role": "assistant", "content": Value::Null, "tool_calls": calls})
            }
        } else {
            // Name each tool result by the call that asked for it.
            let mut names = std::collections::HashMap::new();
            for m in after.iter().filter(|m| m["role"] == "assistant") {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    names.insert(
                        c["id"].as_str().unwrap_or_default().to_string(),
                        c["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    );
                }
            }
            // The session's own results when it sent them (one per tool message), else each
            // message's JSON text read back.
            let tool_messages = messages.iter().filter(|m| m["role"] == "tool");
            let held = (request.tool_results.len() == tool_messages.count()).then(|| {
                let before = request.messages[..=last_user]
                    .iter()
                    .filter(|m| m["role"] == "tool")
                    .count();
                &request.tool_results[before..]
            });
            let parts: Vec<String> = after
                .iter()
                .filter(|m| m["role"] == "tool")
                .enumerate()
                .map(|(k, m)| {
                    let tool = names
                        .get(m["tool_call_id"].as_str().unwrap_or_default())
                        .map_or("tool", String::as_str);
                    match held {
                        Some(held) => describe_held(tool, &held[k]),
                        None => {
                            let content = text_of(&m["content"]);
                            let result: Value =
                                serde_json::from_str(&content).unwrap_or(Value::String(content));
                            describe(tool, &result)
                        }
                    }
                })
                .collect();
            let mut answer = parts.join("\n\n");
            let budget = request.max_tokens.unwrap_or(u32::MAX) as usize * 4;
            if answer.len() > budget {
                finish = "length";
                let cut = (0..=budget)
                    .rev()
                    .find(|i| answer.is_char_boundary(*i))
                    .unwrap_or(0);
                answer.truncate(cut);
            }
            json!({"role": "assistant", "content": answer})
        };
        let completion_tokens = words(message["content"].as_str().unwrap_or_default());
        Ok(ChatResponse {
            finish_reason: Some(finish.to_string()),
            usage: Usage {
                prompt_tokens,
                completion_tokens,
                total_tokens: prompt_tokens + completion_tokens,
            },
            message,
            provider: self.name.clone(),
        })
    }

    async fn probe(&self) -> Result<(), ProviderError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `describe` as it was before results were held as text, word for word: the reference
    /// both ways of describing are held to.
    fn old_describe(tool: &str, result: &Value) -> String {
        if let Some(err) = result.get("error").and_then(Value::as_str) {
            return format!("({tool} could not answer: {err})");
        }
        match tool {
            "KnowledgeGraphTool" if result["found"] == true => {
                let entity = result["entity"].as_str().unwrap_or_default();
                let kind = result["entities"][0]["entity_type"]
                    .as_str()
                    .unwrap_or("entity");
                let links: Vec<String> = result["relationships"]
                    .as_array()
                    .map(|rels| {
                        rels.iter()
                            .filter_map(|r| {
                                let (s, t, ty) = (
                                    r["source_name"].as_str()?,
                                    r["target_name"].as_str()?,
                                    r["relationship_type"].as_str()?,
                                );
                                let ty = ty.replace('_', " ");
                                Some(if s == entity {
                                    format!("{ty} {t}")
                                } else {
                                    format!("{s} {ty} {entity}")
                                })
                            })
                            .take(8)
                            .collect()
                    })
                    .unwrap_or_default();
                if links.is_empty() {
                    format!(
                        "{entity} is a {kind} in the knowledge base, with no recorded relationships."
                    )
                } else {
                    format!("{entity} ({kind}): {}.", links.join("; "))
                }
            }
            "KnowledgeGraphTool" => "I found no entity by that name in the knowledge graph.".into(),
            "HybridSearchTool" | "SemanticSearchTool" => {
                let docs = result["results"].as_array().map_or(&[][..], Vec::as_slice);
                let Some(top) = docs.first() else {
                    return "I found no documents about that in the knowledge base.".into();
                };
                let titles: Vec<String> = docs
                    .iter()
                    .filter_map(|d| d["title"].as_str())
                    .map(|t| format!("\"{t}\""))
                    .collect();
                let lead = top["snippet"].as_str().unwrap_or_default();
                let first_sentence = lead.split_inclusive(". ").next().unwrap_or(lead).trim();
                format!("{first_sentence}\n\nSources: {}.", titles.join(", "))
            }
            "MemoryStoreTool" => format!(
                "I'll remember that: {}",
                result["content"].as_str().unwrap_or_default()
            ),
            "MemorySearchTool" => {
                let memories: Vec<&str> = result["results"]
                    .as_array()
                    .map(|r| {
                        r.iter()
                            .filter(|x| x["kind"] == "memory")
                            .filter_map(|x| x["content"].as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                if memories.is_empty() {
                    "I don't have anything stored about that yet.".into()
                } else {
                    format!("Here is what I remember:\n- {}", memories.join("\n- "))
                }
            }
            "MemoryStatsTool" => format!(
                "Memory is healthy and holds {} fact(s) for your key. The knowledge base has {} entities, {} relationships and {} documents.",
                result["memories"],
                result["knowledge_base"]["entities"],
                result["knowledge_base"]["relationships"],
                result["knowledge_base"]["documents"]
            ),
            other => {
                let text = match result {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                let cut = (0..=text.len().min(400))
                    .rev()
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(0);
                format!("{other} answered: {}", &text[..cut])
            }
        }
    }

    /// A result is described as it was before results were held as text, from its value and
    /// from its text, for results of every shape the fields may take: absent, null, of the
    /// type read, of another type, objects given as arrays, in lists with items of other
    /// types, texts with escapes, floats that print with 17 digits; and results that are not
    /// objects, or hold `error`.
    #[test]
    fn held_results_are_described_as_their_values_are() {
        let text = [
            None,
            Some(Value::Null),
            Some(json!("Ada")),
            Some(json!("O'Brien \"Jr\"\nline")),
            Some(json!(5)),
        ];
        let rel = |s: &str, t: &str| json!({"source_name": s, "target_name": t, "relationship_type": "works_at", "x": {"y": [1]}});
        let many: Vec<Value> = (0..12)
            .map(|i| rel(if i % 2 == 0 { "Ada" } else { "Bob \"B\"" }, "Ada"))
            .collect();
        let lists = [
            None,
            Some(Value::Null),
            Some(json!([])),
            Some(Value::Array(many.clone())),
            Some(json!([{"source_name": 1, "target_name": "Ada", "relationship_type": "x"}])),
            Some(json!([{"source_name": "Ada", "relationship_type": "x"}, rel("Ada", "Cy")])),
            Some(json!([rel("Ada", "Cy"), "x"])),
            Some(json!([["Ada", "Cy", "works_at"], rel("Ada", "Dee")])),
            Some(json!("x")),
        ];
        let entities = [
            None,
            Some(Value::Null),
            Some(json!([])),
            Some(json!([{"entity_type": "person", "properties": {"a": "\t"}}, {"entity_type": 3}])),
            Some(json!([{"entity_type": 7}])),
            Some(json!([["person"]])),
            Some(json!([1])),
            Some(json!({"0": {"entity_type": "person"}})),
        ];
        let found = [
            None,
            Some(json!(true)),
            Some(json!(false)),
            Some(json!("true")),
            Some(Value::Null),
        ];
        let mut results = Vec::new();
        for e in &text {
            for f in &found {
                for es in &entities {
                    for rs in &lists {
                        let mut m = serde_json::Map::new();
                        for (k, v) in [
                            ("entity", e),
                            ("found", f),
                            ("entities", es),
                            ("relationships", rs),
                        ] {
                            if let Some(v) = v {
                                m.insert(k.into(), v.clone());
                            }
                        }
                        results.push(("KnowledgeGraphTool", Value::Object(m)));
                    }
                }
            }
        }
        let hits = [
            None,
            Some(Value::Null),
            Some(json!([])),
            Some(
                json!([{"title": "A \"t\"", "snippet": "First. Second. Third"}, {"title": "B"}, {"snippet": "x"}]),
            ),
            Some(json!([{"title": 1, "snippet": "x"}])),
            Some(json!([{"title": "A", "snippet": ["x"]}])),
            Some(json!([{"title": "A"}, 2])),
            Some(json!([["T", "S. more"]])),
            Some(json!([{"title": "A", "snippet": "S", "score": 0.381_003_4_f32 as f64}])),
            Some(json!({"title": "A"})),
        ];
        for tool in ["HybridSearchTool", "SemanticSearchTool"] {
            for h in &hits {
                let mut v = json!({"query": "q", "total": 1});
                if let Some(h) = h {
                    v["results"] = h.clone();
                }
                results.push((tool, v));
            }
        }
        for tool in [
            "KnowledgeGraphTool",
            "HybridSearchTool",
            "MemoryStoreTool",
            "OtherTool",
        ] {
            for v in [
                json!({"error": "no \"x\"", "error_type": "failed"}),
                json!({"error": 5, "found": true, "entity": "Ada"}),
                json!([1, 2]),
                json!("text"),
                Value::Null,
                json!({"content": "kept", "results": []}),
                json!({"score": -0.381_003_4_f32 as f64, "n": 1e-7_f32 as f64}),
            ] {
                results.push((tool, v));
            }
        }
        assert!(results.len() > 1000);
        let mut read = 0;
        for (tool, v) in &results {
            let held = ToolResult::from_value(v);
            read +=
                usize::from(held.error().is_none() && describe_read(tool, held.json()).is_some());
            let want = old_describe(tool, v);
            assert_eq!(describe(tool, v), want, "{tool}: {v}");
            assert_eq!(describe_held(tool, &held), want, "{tool}: {v}");
        }
        // Many are read from their fields (every result whose fields are absent, null or of
        // the type read), not only described from their values.
        assert!(read > results.len() / 8, "{read} of {}", results.len());
    }

    #[test]
    fn words_are_counted_as_split_whitespace_counts_them() {
        let texts = [
            "",
            " ",
            "one",
            "  two words  ",
            "tab\tnew\nline\rreturn\x0bvertical\x0cfeed",
            "{\"results\":[{\"title\":\"A b\"}]}",
            "non\u{a0}breaking\u{2003}em\u{3000}ideographic \u{85}next",
            "é à ü \u{1680}ogham",
            "exactly8 and sixteen!bytes....\x0b\x0c\r\n\t",
            "\x08\x0e\x1f!~\x7f \x1c\x1d\x1e\x1f words around controls that are not spaces",
        ];
        for text in texts {
            assert_eq!(
                words(text),
                text.split_whitespace().count() as u64,
                "{text:?}"
            );
        }
        // Every ASCII byte, at every offset of a word of eight, beside spaces and words.
        let mut rng = kbq_store::generate::Rng::new(7);
        for len in 0..200 {
            for _ in 0..20 {
                let text: String = (0..len)
                    .map(|_| match rng.below(4) {
                        0 => char::from(rng.below(128) as u8),
                        1 => [' ', '\t', '\n', '\x0b', '\x0c', '\r'][rng.below(6)],
                        _ => 'w',
                    })
                    .collect();
                let want = text.split_whitespace().count() as u64;
                assert_eq!(ascii_words(text.as_bytes()), Some(want), "{text:?}");
                assert_eq!(words(&text), want, "{text:?}");
            }
        }
        assert_eq!(ascii_words("eight by é".as_bytes()), None);
        assert_eq!(ascii_words("é".as_bytes()), None);
        let parts = json!([{"type": "text", "text": "a b"}, {"type": "text", "text": "c"}]);
        assert_eq!(words_of(&parts), words(&text_of(&parts)));
        assert_eq!(words_of(&json!("x y z")), 3);
    }
}
