//! Document search: semantic (vector KNN over the HNSW index) and keyword (BM25 over the
//! full-text indexes on title and content).

use serde::Deserialize;
use surrealdb::types::SurrealValue;

use crate::error::Result;
use crate::kb::{KnowledgeBase, obj, vector};
use crate::model::{Document, table};

/// A document found by a search, with the method's own score.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentHit {
    pub document: Document,
    /// Cosine similarity for semantic search, BM25 for keyword search.
    pub score: f64,
}

/// Most hits one search may ask for.
pub const MAX_HITS: usize = 100;
/// HNSW search effort: candidates examined per query (higher is slower and more exact).
const HNSW_EF: usize = 64;

/// A document row as every document query here selects it (see [`FIELDS`]).
#[derive(Deserialize)]
pub(crate) struct Row {
    id: String,
    title: String,
    content: String,
    source: String,
    source_id: String,
    content_type: String,
    url: Option<String>,
    entity_name: Option<String>,
    score: Option<f64>,
}

impl Row {
    pub(crate) fn into_hit(self) -> DocumentHit {
        DocumentHit {
            score: self.score.unwrap_or(0.0),
            document: Document {
                id: format!("{}:{}", table::DOCUMENT, self.id),
                title: self.title,
                content: self.content,
                source: self.source,
                source_id: self.source_id,
                content_type: self.content_type,
                url: self.url,
                entity_name: self.entity_name,
            },
        }
    }
}

pub(crate) const FIELDS: &str =
    "meta::id(id) AS id, title, content, source, source_id, content_type, url, entity_name";

impl KnowledgeBase {
    /// The `limit` documents nearest to `text` by cosine similarity, nearest first.
    pub async fn semantic_search(&self, text: &str, limit: usize) -> Result<Vec<DocumentHit>> {
        let limit = limit.clamp(1, MAX_HITS);
        let q = self.embed_one(text).await?;
        // K and EF must be literals in SurrealQL; both are bounded integers from here, never
        // user text.
        let sql = format!(
            "SELECT {FIELDS}, vector::similarity::cosine(embedding, $q) AS score FROM document WHERE embedding <|{limit}, {ef}|> $q ORDER BY score DESC",
            ef = HNSW_EF.max(limit)
        );
        let rows: Vec<Row> = self.run(&sql, obj([("q", vector(q))])).await?;
        Ok(rows.into_iter().map(Row::into_hit).collect())
    }

    /// The same answer as [`semantic_search`](Self::semantic_search) by exact comparison with
    /// every document: the reference for recall measurements.
    pub async fn semantic_search_exact(
        &self,
        text: &str,
        limit: usize,
    ) -> Result<Vec<DocumentHit>> {
        let q = self.embed_one(text).await?;
        let rows: Vec<Row> = self
            .run(
                &format!("SELECT {FIELDS}, vector::similarity::cosine(embedding, $q) AS score FROM document ORDER BY score DESC LIMIT $limit"),
                obj([("q", vector(q)), ("limit", (limit.clamp(1, MAX_HITS) as i64).into_value())]),
            )
            .await?;
        Ok(rows.into_iter().map(Row::into_hit).collect())
    }

    /// Documents matching the words of `text` in title or content, best BM25 first.
    pub async fn keyword_search(&self, text: &str, limit: usize) -> Result<Vec<DocumentHit>> {
        if !text.chars().any(char::is_alphanumeric) {
            return Ok(Vec::new());
        }
        let rows: Vec<Row> = self
            .run(
                &format!(
                    "SELECT {FIELDS}, (search::score(1) ?? 0) + (search::score(2) ?? 0) AS score FROM document WHERE title @1@ $q OR content @2@ $q ORDER BY score DESC LIMIT $limit"
                ),
                obj([("q", text.to_string().into_value()), ("limit", (limit.clamp(1, MAX_HITS) as i64).into_value())]),
            )
            .await?;
        Ok(rows.into_iter().map(Row::into_hit).collect())
    }

    /// Documents linked to any of `entity_names`, each scored by its cosine similarity to `text`.
    pub async fn documents_of(
        &self,
        entity_names: &[String],
        text: &str,
    ) -> Result<Vec<DocumentHit>> {
        if entity_names.is_empty() {
            return Ok(Vec::new());
        }
        let q = self.embed_one(text).await?;
        let rows: Vec<Row> = self
            .run(
                &format!("SELECT {FIELDS}, vector::similarity::cosine(embedding, $q) AS score FROM document WHERE entity_name IN $names"),
                obj([("names", entity_names.to_vec().into_value()), ("q", vector(q))]),
            )
            .await?;
        Ok(rows.into_iter().map(Row::into_hit).collect())
    }
}
