//! SemanticSearchTool and HybridSearchTool.

use std::fmt::Write;

use async_trait::async_trait;
use kbq_store::DocumentHit;
use kbq_store::json::{write_f64, write_optional_str, write_str, write_str_array};
use serde_json::{Value, json};

use crate::fusion::rrf;
use crate::rag::around_entities;
use crate::tool::{Args, Tool, ToolContext, ToolError, ToolResult, snippet};

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

/// Appends a hit as `serde_json` writes the object `{"id", "title", "snippet", "source",
/// "entity_name", "score"}`, with `"sources"` too when given: keys in order.
fn write_hit(out: &mut String, d: &DocumentHit, score: f64, sources: Option<&[&str]>) {
    out.push_str("{\"entity_name\":");
    write_optional_str(out, d.document.entity_name.as_deref());
    out.push_str(",\"id\":");
    write_str(out, &d.document.id);
    out.push_str(",\"score\":");
    write_f64(out, score);
    out.push_str(",\"snippet\":");
    write_str(out, &snippet(&d.document.content, SNIPPET_CHARS));
    out.push_str(",\"source\":");
    write_str(out, &d.document.source);
    if let Some(sources) = sources {
        out.push_str(",\"sources\":");
        write_str_array(out, sources.iter().copied());
    }
    out.push_str(",\"title\":");
    write_str(out, &d.document.title);
    out.push('}');
}

/// The end of a search's result: `"query"`, the hits (each as [`write_hit`] writes it) and
/// `"total"`, after whatever keys come before `"query"`.
fn finish_search<'a>(
    mut out: String,
    query: &str,
    hits: impl ExactSizeIterator<Item = (&'a DocumentHit, f64, Option<&'a [&'a str]>)>,
) -> ToolResult {
    let total = hits.len();
    out.push_str("\"query\":");
    write_str(&mut out, query);
    out.push_str(",\"results\":[");
    for (i, (hit, score, sources)) in hits.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_hit(&mut out, hit, score, sources);
    }
    out.push_str("],\"total\":");
    let _ = write!(out, "{total}");
    out.push('}');
    ToolResult::from_json(out)
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
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError> {
        let args = Args::new(args, &["query", "limit"])?;
        let query = args.string("query", 1000)?;
        let limit = args.int("limit", 5, 1, 20)? as usize;
        let hits = ctx.kb.semantic_search(&query, limit).await?;
        let out = String::with_capacity(128 + 512 * hits.len());
        Ok(finish_search(
            out + "{",
            &query,
            hits.iter().map(|h| (h, h.score, None)),
        ))
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
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError> {
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
        let mut out = String::with_capacity(128 + 512 * fused.len());
        out.push_str("{\"entities\":");
        write_str_array(&mut out, entities.iter().map(String::as_str));
        out.push(',');
        Ok(finish_search(
            out,
            &query,
            fused.iter().map(|f| {
                let score = (f.score * 1e6).round() / 1e6;
                (f.item, score, Some(&f.sources[..]))
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kbq_store::Document;

    use super::*;

    /// A hit as it was built before it was written as text.
    fn hit_value(d: &DocumentHit, score: f64, sources: Option<&[&str]>) -> Value {
        let mut v = json!({
            "id": d.document.id,
            "title": d.document.title,
            "snippet": snippet(&d.document.content, SNIPPET_CHARS),
            "source": d.document.source,
            "entity_name": d.document.entity_name,
            "score": d.score,
        });
        v["score"] = json!(score);
        if let Some(sources) = sources {
            v["sources"] = json!(sources);
        }
        v
    }

    /// Both search tools' results are `serde_json`'s bytes for the values they replaced:
    /// no hits, texts that need escapes, long contents cut to a snippet, scores that are
    /// whole, tiny or not finite.
    #[test]
    fn search_results_are_written_as_serde_json_writes_their_values() {
        let long = "word \"quoted\"\n".repeat(60);
        let hits: Vec<DocumentHit> = [
            ("doc:1", "Ada \"L\"", "short\tcontent", Some("Ada")),
            ("doc:2", "é 😀 \u{1f}", long.as_str(), None),
            ("", "", "", Some("")),
        ]
        .iter()
        // Scores as the store gives them: f32 similarities widened, 17 digits when written.
        .zip([0.5, f64::from(-0.381_003_4_f32), f64::from(1e-9_f32)])
        .map(|(&(id, title, content, entity), score)| DocumentHit {
            document: Arc::new(Document {
                id: id.into(),
                title: title.into(),
                content: content.into(),
                source: "wiki\\src".into(),
                source_id: "s".into(),
                content_type: "text/plain".into(),
                url: None,
                entity_name: entity.map(str::to_string),
                mentions: Vec::new(),
            }),
            score,
        })
        .collect();
        let sources: [&'static str; 2] = ["graph", "semantic"];
        for n in 0..=hits.len() {
            for query in ["Ada", "q \"x\"\n"] {
                let semantic = finish_search(
                    String::from("{"),
                    query,
                    hits[..n].iter().map(|h| (h, h.score, None)),
                );
                let want = json!({
                    "query": query,
                    "total": n,
                    "results": hits[..n].iter().map(|h| hit_value(h, h.score, None)).collect::<Vec<_>>(),
                });
                assert_eq!(semantic.json(), serde_json::to_string(&want).unwrap());

                let entities = vec!["Ada".to_string(), "é \"x\"".to_string()];
                let scores = [f64::NAN, 2.0, f64::from(0.016_393_4_f32)];
                let mut out = String::from("{\"entities\":");
                write_str_array(&mut out, entities.iter().map(String::as_str));
                out.push(',');
                let hybrid = finish_search(
                    out,
                    query,
                    hits[..n]
                        .iter()
                        .zip(scores)
                        .map(|(h, s)| (h, s, Some(&sources[..]))),
                );
                let want = json!({
                    "query": query,
                    "entities": entities,
                    "total": n,
                    "results": hits[..n].iter().zip(scores).map(|(h, s)| hit_value(h, s, Some(&sources))).collect::<Vec<_>>(),
                });
                assert_eq!(hybrid.json(), serde_json::to_string(&want).unwrap());
            }
        }
    }
}
