//! Retrieval for the RAG endpoints: semantic (vector KNN), keyword (BM25) and hybrid (both,
//! plus the documents around entities named in the query, fused by weighted relative scores),
//! each under the same document filters.

use std::sync::Arc;

use kbq_store::{
    Document, DocumentFilter, DocumentHit, DocumentsQuery, GraphDocument, KnowledgeBase, StoreError,
};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::extract::EntityExtractor;
use crate::fusion::relative_score;

/// Most entities from one query whose neighbourhoods hybrid search expands.
pub const MAX_QUERY_ENTITIES: usize = 5;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Semantic,
    Keyword,
    Hybrid,
}

#[derive(Debug, Clone)]
pub struct RagQuery {
    pub query: String,
    pub limit: usize,
    pub filter: DocumentFilter,
    /// Hybrid only: hops walked from each entity named in the query (0: no graph expansion).
    pub graph_depth: u32,
    /// Hybrid only: how much each method's list counts in the fusion.
    pub weights: FusionWeights,
}

/// The weight of each method's list in hybrid search's relative score fusion (see
/// [`crate::fusion::relative_score`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FusionWeights {
    pub semantic: f64,
    pub keyword: f64,
    pub graph: f64,
}

impl FusionWeights {
    /// Measured with `kbq eval` on the demo's questions and Debian's synopses (docs/eval.md):
    /// hybrid is at least as good as the better of semantic and keyword when the weaker of
    /// the two counts less. With a real embedding model semantic search is the better;
    /// the built-in embedder is lexical, weaker than keyword search at what keyword search
    /// does. The documents around the entities a query names help little on both sets (a
    /// weight of 0.3 made hybrid worse than keyword search alone on Debian's).
    pub const MODEL: FusionWeights = FusionWeights {
        semantic: 1.0,
        keyword: 0.5,
        graph: 0.1,
    };
    pub const LEXICAL: FusionWeights = FusionWeights {
        semantic: 0.3,
        keyword: 1.0,
        graph: 0.1,
    };
}

/// Each method's own score for a result; `None` when that method did not find it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scores {
    /// Cosine similarity, -1 to 1.
    pub semantic: Option<f64>,
    /// BM25 over title and content.
    pub keyword: Option<f64>,
    /// The graph documents score (see docs/api.md), 0 to 1.
    pub graph: Option<f64>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RagResult {
    /// `id`, `title`, `content`, `source`, `source_id`, `content_type`, `url`, `entity_name`.
    #[serde(flatten)]
    pub document: Arc<Document>,
    /// The method's score (semantic, keyword) or the fused score (hybrid).
    pub score: f64,
    pub scores: Scores,
    /// Set when graph expansion reached the document: the edge type that reached its
    /// entity, or `self` for an entity named in the query.
    pub relationship: Option<String>,
    /// As in graph documents: the document's entity when graph expansion reached it from an
    /// entity named in the query; `None` for that entity's own documents and for documents
    /// not reached by graph expansion.
    pub related_entity: Option<String>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RagAnswer {
    pub query: String,
    pub method: Method,
    /// Hybrid only: the entity names found in the query (empty otherwise).
    pub entities: Vec<String>,
    /// The number of results.
    pub total: usize,
    pub results: Vec<RagResult>,
}

impl RagAnswer {
    /// The bytes `serde_json` writes for this answer (a unit test holds both to the same
    /// bytes), written through [`kbq_store::json`], which escapes the documents' contents a
    /// word at a time.
    pub fn to_json(&self) -> String {
        use std::fmt::Write as _;

        use kbq_store::json::{
            write_f64, write_optional_f64, write_optional_str, write_str, write_str_array,
        };
        let text: usize = (self.results.iter())
            .map(|r| r.document.content.len() + r.document.title.len() + 300)
            .sum();
        for r in &self.results {
            r.document.prefetch_text();
        }
        let mut out = String::with_capacity(text + self.query.len() + 100);
        out.push_str("{\"query\":");
        write_str(&mut out, &self.query);
        out.push_str(",\"method\":");
        kbq_store::json::write_serialized(&mut out, &self.method);
        out.push_str(",\"entities\":");
        write_str_array(&mut out, self.entities.iter().map(String::as_str));
        // Writing to a `String` cannot fail.
        let _ = write!(out, ",\"total\":{},\"results\":[", self.total);
        for (i, r) in self.results.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let d = &r.document;
            for (field, value) in [
                ("{\"id\":", &d.id),
                (",\"title\":", &d.title),
                (",\"content\":", &d.content),
                (",\"source\":", &d.source),
                (",\"source_id\":", &d.source_id),
                (",\"content_type\":", &d.content_type),
            ] {
                out.push_str(field);
                write_str(&mut out, value);
            }
            out.push_str(",\"url\":");
            write_optional_str(&mut out, d.url.as_deref());
            out.push_str(",\"entity_name\":");
            write_optional_str(&mut out, d.entity_name.as_deref());
            out.push_str(",\"score\":");
            write_f64(&mut out, r.score);
            for (field, value) in [
                (",\"scores\":{\"semantic\":", r.scores.semantic),
                (",\"keyword\":", r.scores.keyword),
                (",\"graph\":", r.scores.graph),
            ] {
                out.push_str(field);
                write_optional_f64(&mut out, value);
            }
            out.push_str("},\"relationship\":");
            write_optional_str(&mut out, r.relationship.as_deref());
            out.push_str(",\"related_entity\":");
            write_optional_str(&mut out, r.related_entity.as_deref());
            out.push('}');
        }
        out.push_str("]}");
        out
    }
}

fn result(d: Arc<Document>, score: f64, scores: Scores) -> RagResult {
    RagResult {
        document: d,
        score,
        scores,
        relationship: None,
        related_entity: None,
    }
}

/// Runs one RAG search.
pub async fn search(
    kb: &KnowledgeBase,
    extractor: &EntityExtractor,
    method: Method,
    q: &RagQuery,
) -> Result<RagAnswer, StoreError> {
    let (entities, results) = match method {
        Method::Semantic => {
            let hits = kb
                .semantic_search_filtered(&q.query, q.limit, &q.filter)
                .await?;
            let results = hits
                .into_iter()
                .map(|h| {
                    let scores = Scores {
                        semantic: Some(h.score),
                        ..Scores::default()
                    };
                    result(h.document, h.score, scores)
                })
                .collect();
            (Vec::new(), results)
        }
        Method::Keyword => {
            let hits = kb
                .keyword_search_filtered(&q.query, q.limit, &q.filter)
                .await?;
            let results = hits
                .into_iter()
                .map(|h| {
                    let scores = Scores {
                        keyword: Some(h.score),
                        ..Scores::default()
                    };
                    result(h.document, h.score, scores)
                })
                .collect();
            (Vec::new(), results)
        }
        Method::Hybrid => hybrid(kb, extractor, q).await?,
    };
    Ok(RagAnswer {
        query: q.query.clone(),
        method,
        entities,
        total: results.len(),
        results,
    })
}

/// The graph documents of each of `entities` (walked `depth` hops, at most `limit` each),
/// best score first, each document once.
pub async fn around_entities(
    kb: &KnowledgeBase,
    entities: &[String],
    depth: u32,
    limit: usize,
) -> Result<Vec<GraphDocument>, StoreError> {
    let mut out = Vec::new();
    for entity in entities {
        let found = kb
            .graph_documents(&DocumentsQuery {
                start: entity.clone(),
                entity_type: None,
                relationship_types: None,
                max_depth: depth,
                limit,
                resolve_documents: true,
            })
            .await?;
        out.extend(found.results);
    }
    // A document reached from two named entities counts once, where it scored best: a
    // fusion then ranks it once in the graph list rather than adding two of its ranks.
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut seen = FxHashSet::default();
    let first: Vec<bool> = out
        .iter()
        .map(|d| seen.insert(d.document.id.as_str()))
        .collect();
    drop(seen);
    let mut first = first.into_iter();
    out.retain(|_| first.next().unwrap_or(false));
    Ok(out)
}

async fn hybrid(
    kb: &KnowledgeBase,
    extractor: &EntityExtractor,
    q: &RagQuery,
) -> Result<(Vec<String>, Vec<RagResult>), StoreError> {
    // Each method contributes twice the asked-for number of candidates to the fusion.
    let pool = (q.limit * 2).min(kbq_store::search::MAX_HITS);
    let (semantic, keyword) = futures::try_join!(
        kb.semantic_search_filtered(&q.query, pool, &q.filter),
        kb.keyword_search_filtered(&q.query, pool, &q.filter),
    )?;
    let mut entities = Vec::new();
    // The documents graph expansion reached that the filter accepts, best first, each once.
    let mut reached: Vec<GraphDocument> = Vec::new();
    if q.graph_depth > 0 {
        entities = extractor.extract(&q.query).await?;
        entities.truncate(MAX_QUERY_ENTITIES);
        reached = around_entities(kb, &entities, q.graph_depth, pool).await?;
        reached.retain(|r| q.filter.accepts_document(&r.document));
    }
    // The best `pool` of them are the graph's list; a document further down still tells how
    // it was reached when another method finds it.
    let graph: Vec<DocumentHit> = (reached.iter().take(pool))
        .map(|r| DocumentHit {
            document: r.document.clone(),
            score: r.score,
        })
        .collect();
    fn id(h: &DocumentHit) -> &str {
        &h.document.id
    }
    fn scores(hits: &[DocumentHit]) -> FxHashMap<&str, f64> {
        hits.iter().map(|h| (id(h), h.score)).collect()
    }
    let (s_scores, k_scores) = (scores(&semantic), scores(&keyword));
    let via: FxHashMap<&str, &GraphDocument> = (reached.iter())
        .map(|r| (r.document.id.as_str(), r))
        .collect();
    let w = q.weights;
    let fused = relative_score(
        &[
            ("semantic", w.semantic, &semantic[..]),
            ("keyword", w.keyword, &keyword),
            ("graph", w.graph, &graph),
        ],
        id,
        |h| h.score,
    );
    let results = (fused.into_iter().take(q.limit))
        .map(|f| {
            let id = id(f.item);
            let via = via.get(id);
            let scores = Scores {
                semantic: s_scores.get(id).copied(),
                keyword: k_scores.get(id).copied(),
                graph: via.map(|r| r.score),
            };
            let mut r = result(f.item.document.clone(), f.score, scores);
            if let Some(via) = via {
                r.relationship = Some(via.relationship.clone());
                r.related_entity = via.related_entity.clone();
            }
            r
        })
        .collect();
    Ok((entities, results))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(n: usize, content: &str, url: Option<&str>, entity: Option<&str>) -> Arc<Document> {
        Arc::new(Document {
            id: format!("document:d{n}"),
            title: format!("About \"{n}\""),
            content: content.to_string(),
            source: "generated".into(),
            source_id: format!("doc-{n}"),
            content_type: "text/plain".into(),
            url: url.map(str::to_string),
            entity_name: entity.map(str::to_string),
            mentions: Vec::new(),
        })
    }

    /// The hand-written answer is what serde_json writes: every method, optional fields set
    /// and not, text that needs escapes, no results.
    #[test]
    fn to_json_is_what_serde_json_writes() {
        let hybrid = RagAnswer {
            query: "What is \"Ada\"?\n".into(),
            method: Method::Hybrid,
            entities: vec!["Ada".into(), "C\\D \u{1}".into()],
            total: 3,
            results: vec![
                RagResult {
                    document: document(1, "a line\nand a tab\t, \\ é 😀 \u{1}", None, Some("Ada")),
                    score: 0.032_522_474_881_015_35,
                    scores: Scores {
                        semantic: Some(0.812_345_678_9),
                        keyword: Some(7.25),
                        graph: Some(1.0),
                    },
                    relationship: Some("self".into()),
                    related_entity: None,
                },
                RagResult {
                    document: document(2, "", Some("https://example.org/a?b=\"c\""), None),
                    score: 1e-7,
                    scores: Scores {
                        semantic: None,
                        keyword: Some(-0.5),
                        graph: None,
                    },
                    relationship: None,
                    related_entity: None,
                },
                RagResult {
                    document: document(3, "plain", None, Some("Bob")),
                    score: 0.0,
                    scores: Scores::default(),
                    relationship: Some("works_at".into()),
                    related_entity: Some("Bob".into()),
                },
            ],
        };
        let empty = |method| RagAnswer {
            query: "nothing".into(),
            method,
            entities: Vec::new(),
            total: 0,
            results: Vec::new(),
        };
        for answer in [hybrid, empty(Method::Semantic), empty(Method::Keyword)] {
            assert_eq!(answer.to_json(), serde_json::to_string(&answer).unwrap());
        }
    }
}
