//! SemanticSearchTool and HybridSearchTool.

use async_trait::async_trait;
use kbq_store::DocumentHit;
use serde_json::{Value, json};

use crate::fusion::rrf;
use crate::rag::around_entities;
use crate::tool::{Args, Tool, ToolContext, ToolError, snippet};

const SNIPPET_CHARS: usize = 320;
/// Entities from a query whose neighbourhoods a hybrid search reads.
const MAX_QUERY_ENTITIES: usize = 3;

fn query_schema(what: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": what, "maxLength": 1000},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5, "description": "Most results to return"}
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

fn hit_json(d: &DocumentHit) -> Value {
    json!({
        "id": d.document.id,
        "title": d.document.title,
        "snippet": snippet(&d.document.content, SNIPPET_CHARS),
        "source": d.document.source,
        "entity_name": d.document.entity_name,
        "score": d.score,
    })
}

/// Vector similarity search across the knowledge base's documents.
pub struct SemanticSearchTool;

#[async_trait]
impl Tool for SemanticSearchTool {
    fn name(&self) -> &'static str {
        "SemanticSearchTool"
    }
    fn output_schema(&self) -> Value {
        crate::outputs::semantic_search()
    }
    fn description(&self) -> &'static str {
        "Vector similarity search across the knowledge base's documents. Use for open questions about a topic."
    }
    fn parameters(&self) -> Value {
        query_schema("What to search for, in natural language")
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<Value, ToolError> {
        let args = Args::new(args, &["query", "limit"])?;
        let query = args.string("query", 1000)?;
        let limit = args.int("limit", 5, 1, 20)? as usize;
        let hits = ctx.kb.semantic_search(&query, limit).await?;
        let mut answer = json!({"query": query, "total": hits.len()});
        answer["results"] = Value::Array(hits.iter().map(hit_json).collect());
        Ok(answer)
    }
}

/// Semantic search fused with the documents around the entities the query names.
pub struct HybridSearchTool;

#[async_trait]
impl Tool for HybridSearchTool {
    fn name(&self) -> &'static str {
        "HybridSearchTool"
    }
    fn output_schema(&self) -> Value {
        crate::outputs::hybrid_search()
    }
    fn description(&self) -> &'static str {
        "Combined semantic and graph search: finds entity names in the query, gathers documents of those entities and their neighbours, and fuses them with semantic matches by reciprocal rank fusion."
    }
    fn parameters(&self) -> Value {
        query_schema("The question or search text; entity names in it are recognised")
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<Value, ToolError> {
        let args = Args::new(args, &["query", "limit"])?;
        let query = args.string("query", 1000)?;
        let limit = args.int("limit", 5, 1, 20)? as usize;
        let mut entities = ctx.extractor.extract(&query).await?;
        entities.truncate(MAX_QUERY_ENTITIES);
        let semantic = ctx.kb.semantic_search(&query, limit * 2).await?;
        let mut graph: Vec<DocumentHit> = around_entities(&ctx.kb, &entities, 1, limit * 2)
            .await?
            .into_iter()
            .map(|r| DocumentHit {
                document: r.document,
                score: r.score,
            })
            .collect();
        graph.sort_by(|a, b| b.score.total_cmp(&a.score));
        let mut fused = rrf(&[("graph", &graph[..]), ("semantic", &semantic)], |h| {
            h.document.id.as_str()
        });
        fused.truncate(limit);
        let results: Vec<Value> = fused
            .iter()
            .map(|f| {
                let mut v = hit_json(f.item);
                v["score"] = json!((f.score * 1e6).round() / 1e6);
                v["sources"] = json!(f.sources);
                v
            })
            .collect();
        // The results move into the answer (`json!` would copy them).
        let mut answer = json!({"query": query, "entities": entities, "total": results.len()});
        answer["results"] = Value::Array(results);
        Ok(answer)
    }
}
