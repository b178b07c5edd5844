//! Retrieval for the RAG endpoints: semantic (vector KNN), keyword (BM25) and hybrid (both,
//! plus the documents around entities named in the query, fused by reciprocal rank fusion),
//! each under the same document filters.

use std::collections::HashMap;
use std::sync::Arc;

use kbq_store::{
    Document, DocumentFilter, DocumentHit, DocumentsQuery, GraphDocument, KnowledgeBase, StoreError,
};
use serde::Serialize;

use crate::extract::EntityExtractor;
use crate::fusion::rrf;

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
    let mut seen = std::collections::HashSet::new();
    out.retain(|d| seen.insert(d.document.id.clone()));
    Ok(out)
}

/// How a graph-expanded document was reached.
struct Reached {
    score: f64,
    relationship: String,
    related_entity: Option<String>,
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
    let mut graph: Vec<DocumentHit> = Vec::new();
    let mut reached: HashMap<String, Reached> = HashMap::new();
    if q.graph_depth > 0 {
        entities = extractor.extract(&q.query).await?;
        entities.truncate(MAX_QUERY_ENTITIES);
        for r in around_entities(kb, &entities, q.graph_depth, pool).await? {
            if !q.filter.accepts_document(&r.document) {
                continue;
            }
            let better = reached
                .get(&r.document.id)
                .is_none_or(|seen| r.score > seen.score);
            if better {
                reached.insert(
                    r.document.id.clone(),
                    Reached {
                        score: r.score,
                        relationship: r.relationship.clone(),
                        related_entity: r.related_entity.clone(),
                    },
                );
            }
            graph.push(DocumentHit {
                document: r.document,
                score: r.score,
            });
        }
        graph.sort_by(|a, b| b.score.total_cmp(&a.score));
        let mut seen = std::collections::HashSet::new();
        graph.retain(|h| seen.insert(h.document.id.clone()));
        graph.truncate(pool);
    }
    let score_map = |hits: &[DocumentHit]| -> HashMap<String, f64> {
        hits.iter()
            .map(|h| (h.document.id.clone(), h.score))
            .collect()
    };
    let (s_scores, k_scores) = (score_map(&semantic), score_map(&keyword));
    let mut fused = rrf(
        vec![
            ("semantic", semantic),
            ("keyword", keyword),
            ("graph", graph),
        ],
        |h: &DocumentHit| h.document.id.clone(),
    );
    fused.truncate(q.limit);
    let results = fused
        .into_iter()
        .map(|f| {
            let id = f.item.document.id.clone();
            let via = reached.get(&id);
            let scores = Scores {
                semantic: s_scores.get(&id).copied(),
                keyword: k_scores.get(&id).copied(),
                graph: via.map(|r| r.score),
            };
            let mut r = result(f.item.document, f.score, scores);
            if let Some(via) = via {
                r.relationship = Some(via.relationship.clone());
                r.related_entity = via.related_entity.clone();
            }
            r
        })
        .collect();
    Ok((entities, results))
}
