//! Traverse, then resolve the start entity and the entities it reaches to their documents.
//!
//! Scoring (a float in [0, 1], higher first):
//! `score = 0.7 * proximity + 0.3 * similarity`, where `proximity = 1 / (1 + depth)` (1 for the
//! start entity's own documents, 0.5 one hop away, ...) and `similarity` is the cosine
//! similarity, clamped to [0, 1], between the document's embedding and the embedding of the
//! start entity's name and type. Ties break by title, then id.

use std::collections::HashMap;

use crate::error::Result;
use crate::graph::{Direction, TraversalQuery};
use crate::kb::KnowledgeBase;
use crate::model::Document;

/// The `relationship` value that marks the start entity's own documents.
pub const SELF_RELATIONSHIP: &str = "self";
/// Most entities a documents walk may collect before resolving them.
pub const MAX_RELATED_ENTITIES: usize = 200;

const PROXIMITY_WEIGHT: f64 = 0.7;
const SIMILARITY_WEIGHT: f64 = 0.3;

/// What to resolve.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentsQuery {
    pub start: String,
    /// Keep only related entities of this type (the walk still passes through others).
    pub entity_type: Option<String>,
    pub relationship_types: Option<Vec<String>>,
    pub max_depth: u32,
    /// Most documents returned.
    pub limit: usize,
    /// When false, only `related_entities` is filled.
    pub resolve_documents: bool,
}

/// One resolved document.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphDocument {
    pub document: Document,
    pub score: f64,
    /// The type of the edge that reached the document's entity, or [`SELF_RELATIONSHIP`].
    pub relationship: String,
    /// The document's entity when it is not the start entity.
    pub related_entity: Option<String>,
}

/// The answer: documents by score, and the names of the connected entities in walk order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphDocuments {
    pub results: Vec<GraphDocument>,
    pub related_entities: Vec<String>,
}

impl KnowledgeBase {
    pub async fn graph_documents(&self, query: &DocumentsQuery) -> Result<GraphDocuments> {
        let walk = self
            .traverse(&TraversalQuery {
                start: query.start.clone(),
                relationship_types: query.relationship_types.clone(),
                direction: Direction::Both,
                depth: query.max_depth,
                limit: MAX_RELATED_ENTITIES + 1,
            })
            .await?;
        let Some(start) = walk.entities.first() else {
            return Ok(GraphDocuments::default());
        };
        let related: Vec<_> = walk.entities[1..]
            .iter()
            .filter(|r| {
                query
                    .entity_type
                    .as_ref()
                    .is_none_or(|t| &r.entity.entity_type == t)
            })
            .collect();
        let related_entities: Vec<String> = related.iter().map(|r| r.entity.name.clone()).collect();
        if !query.resolve_documents {
            return Ok(GraphDocuments {
                results: Vec::new(),
                related_entities,
            });
        }
        // name -> (depth, relationship)
        let mut reach: HashMap<&str, (u32, Option<&str>)> = HashMap::new();
        reach.insert(start.entity.name.as_str(), (0, None));
        for r in &related {
            reach.insert(r.entity.name.as_str(), (r.depth, r.via.as_deref()));
        }
        let names: Vec<String> = reach.keys().map(|n| n.to_string()).collect();
        let text = format!("{} {}", start.entity.name, start.entity.entity_type);
        let docs = self.documents_of(&names, &text).await?;
        let mut results: Vec<GraphDocument> = docs
            .into_iter()
            .filter_map(|d| {
                let name = d.document.entity_name.clone()?;
                let &(depth, via) = reach.get(name.as_str())?;
                let proximity = 1.0 / (1.0 + f64::from(depth));
                let similarity = d.score.clamp(0.0, 1.0);
                let score = PROXIMITY_WEIGHT * proximity + SIMILARITY_WEIGHT * similarity;
                Some(GraphDocument {
                    relationship: via.unwrap_or(SELF_RELATIONSHIP).to_string(),
                    related_entity: (depth > 0).then_some(name),
                    score: (score * 1e6).round() / 1e6,
                    document: d.document,
                })
            })
            .collect();
        results.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.document.title.cmp(&b.document.title))
                .then_with(|| a.document.id.cmp(&b.document.id))
        });
        results.truncate(query.limit);
        Ok(GraphDocuments {
            results,
            related_entities,
        })
    }
}
