//! MemorySearchTool, MemoryStoreTool and MemoryStatsTool. Memory belongs to the calling key.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::fusion::rrf;
use crate::tool::{Args, Tool, ToolContext, ToolError, ToolResult, snippet};

#[derive(Clone)]
enum Recalled {
    Memory(kbq_store::Memory),
    Document(kbq_store::DocumentHit),
}

impl Recalled {
    fn id(&self) -> &str {
        match self {
            Recalled::Memory(m) => &m.id,
            Recalled::Document(d) => &d.document.id,
        }
    }
}

/// Recall: vector, keyword and entity search over the key's memory, plus the knowledge base.
pub struct MemorySearchTool;

#[async_trait]
impl Tool for MemorySearchTool {
    fn name(&self) -> &'static str {
        "MemorySearchTool"
    }
    fn output_schema(&self) -> Value {
        crate::outputs::memory_search()
    }
    fn description(&self) -> &'static str {
        "Search companion memory: facts stored earlier by this user (by vector, keyword and mentioned entities) together with the knowledge base, fused by rank."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to recall", "maxLength": 1000},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError> {
        let args = Args::new(args, &["query", "limit"])?;
        let query = args.string("query", 1000)?;
        let limit = args.int("limit", 5, 1, 20)? as usize;
        let entities = ctx.extractor.extract(&query).await?;
        let memories = |hits: Vec<kbq_store::MemoryHit>| {
            hits.into_iter()
                .map(|h| Recalled::Memory(h.memory))
                .collect::<Vec<_>>()
        };
        let vector = memories(
            ctx.kb
                .memory_by_vector(&ctx.owner, &query, limit * 2)
                .await?,
        );
        let keyword = memories(
            ctx.kb
                .memory_by_keyword(&ctx.owner, &query, limit * 2)
                .await?,
        );
        let graph = memories(
            ctx.kb
                .memory_by_entities(&ctx.owner, &entities, limit * 2)
                .await?,
        );
        let documents: Vec<Recalled> = ctx
            .kb
            .semantic_search(&query, limit)
            .await?
            .into_iter()
            .map(Recalled::Document)
            .collect();
        let mut fused = rrf(
            &[
                ("vector", &vector[..]),
                ("keyword", &keyword),
                ("graph", &graph),
                ("knowledge_base", &documents),
            ],
            Recalled::id,
        );
        fused.truncate(limit);
        let results: Vec<Value> = fused
            .iter()
            .map(|f| {
                let score = (f.score * 1e6).round() / 1e6;
                match f.item {
                    Recalled::Memory(m) => json!({
                        "kind": "memory", "id": m.id, "content": m.content, "tags": m.tags,
                        "created_at": m.created_at, "score": score, "sources": f.sources
                    }),
                    Recalled::Document(d) => json!({
                        "kind": "document", "id": d.document.id, "title": d.document.title,
                        "snippet": snippet(&d.document.content, 320), "score": score, "sources": f.sources
                    }),
                }
            })
            .collect();
        let memories_found = results.iter().filter(|r| r["kind"] == "memory").count();
        let mut answer =
            json!({"query": query, "total": results.len(), "memories_found": memories_found});
        answer["results"] = Value::Array(results);
        Ok(ToolResult::from_value(&answer))
    }
}

/// Stores a fact for later recall by the same key.
pub struct MemoryStoreTool;

#[async_trait]
impl Tool for MemoryStoreTool {
    fn name(&self) -> &'static str {
        "MemoryStoreTool"
    }
    fn output_schema(&self) -> Value {
        crate::outputs::memory_store()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn description(&self) -> &'static str {
        "Store an important fact for future recall by this user."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "The fact to remember, as a sentence", "maxLength": 4000},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10, "description": "Optional labels"}
            },
            "required": ["content"],
            "additionalProperties": false
        })
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError> {
        let args = Args::new(args, &["content", "tags"])?;
        let content = args.string("content", 4000)?;
        let tags = args.strings("tags", 10)?.unwrap_or_default();
        let entities = ctx.extractor.extract(&content).await?;
        let memory = ctx
            .kb
            .remember(&ctx.owner, &content, &tags, &entities)
            .await?;
        Ok(ToolResult::from_value(
            &json!({"stored": true, "id": memory.id, "content": memory.content, "tags": memory.tags, "entities": memory.entities}),
        ))
    }
}

/// Population and health of the memory system.
pub struct MemoryStatsTool;

#[async_trait]
impl Tool for MemoryStatsTool {
    fn name(&self) -> &'static str {
        "MemoryStatsTool"
    }
    fn output_schema(&self) -> Value {
        crate::outputs::memory_stats()
    }
    fn description(&self) -> &'static str {
        "Check memory system health and population: how many facts this user has stored, and the size of the knowledge base."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError> {
        // Models sometimes send null for no arguments.
        if !args.is_null() {
            Args::new(args, &[])?;
        }
        let stats = ctx.kb.memory_stats(&ctx.owner).await?;
        let counts = ctx.kb.counts().await?;
        Ok(ToolResult::from_value(&json!({
            "healthy": true,
            "memories": stats.memories,
            "oldest": stats.oldest,
            "newest": stats.newest,
            "knowledge_base": {"entities": counts.entities, "relationships": counts.relationships, "documents": counts.documents}
        })))
    }
}
