//! The built-in provider: retrieval and rules, not a language model. It speaks the same
//! tool-call protocol as a real model (answer with tool calls, read the tool results, write the
//! answer), so the chat loop has one code path for every provider, and a fresh kbq answers chats
//! with no model and no key.
//!
//! Tool choice, from the last user message: "remember ..." / "note that ..." stores a memory;
//! "what do you remember", "recall", "what did I tell you" search memory; memory stats, health
//! or "how many memories" check memory; a message naming a known entity gets
//! KnowledgeGraphTool and HybridSearchTool; anything else gets HybridSearchTool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kbq_tools::EntityExtractor;
use serde_json::{Value, json};

use crate::provider::{Backend, ChatRequest, ChatResponse, ProviderError, Usage};

pub struct BuiltinBackend {
    name: String,
    extractor: Arc<EntityExtractor>,
    calls: AtomicU64,
}

impl BuiltinBackend {
    pub fn new(name: &str, extractor: Arc<EntityExtractor>) -> Self {
        BuiltinBackend {
            name: name.into(),
            extractor,
            calls: AtomicU64::new(0),
        }
    }

    async fn plan(&self, text: &str) -> Result<Vec<(&'static str, Value)>, ProviderError> {
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
        let entities = self
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

/// Describes one tool result in a sentence or a short list.
fn describe(tool: &str, result: &Value) -> String {
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
            let docs = result["results"].as_array().cloned().unwrap_or_default();
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
        other => format!("({other} answered.)"),
    }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

#[async_trait::async_trait]
impl Backend for BuiltinBackend {
    fn kind(&self) -> &'static str {
        "builtin"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let last_user = request
            .messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .ok_or_else(|| ProviderError::Permanent("no user message".into()))?;
        let prompt_tokens = request
            .messages
            .iter()
            .map(|m| words(m["content"].as_str().unwrap_or_default()))
            .sum();
        let after = &request.messages[last_user + 1..];
        let message = if !after.iter().any(|m| m["role"] == "tool") {
            let text = request.messages[last_user]["content"]
                .as_str()
                .unwrap_or_default();
            let calls: Vec<Value> = self
                .plan(text)
                .await?
                .into_iter()
                .filter(|(name, _)| request.tools.iter().any(|t| t["function"]["name"] == *name))
                .map(|(name, args)| {
                    let id = format!("builtin_{}", self.calls.fetch_add(1, Ordering::Relaxed));
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            if calls.is_empty() {
                json!({"role": "assistant", "content": "I have no tools available to answer that."})
            } else {
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
            let parts: Vec<String> = after
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| {
                    let tool = names
                        .get(m["tool_call_id"].as_str().unwrap_or_default())
                        .map_or("tool", String::as_str);
                    let result: Value =
                        serde_json::from_str(m["content"].as_str().unwrap_or("null"))
                            .unwrap_or(Value::Null);
                    describe(tool, &result)
                })
                .collect();
            let mut answer = parts.join("\n\n");
            let budget = request.max_tokens as usize * 4;
            if answer.len() > budget {
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
