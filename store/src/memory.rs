//! Agent memory: facts stored by an API key and recalled only by that key. Every query here
//! filters on the owner; no call can reach another owner's memories.

use serde::{Deserialize, Serialize};
use surrealdb::types::{Object, SurrealValue, Value};

use crate::db::obj;
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::model::table::MEMORY;

/// Longest fact accepted, in characters.
pub const MAX_MEMORY_CHARS: usize = 8 * 1024;

/// A stored fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub id: String,
    pub content: String,
    pub tags: Vec<String>,
    /// Entities of the knowledge base the fact mentions.
    pub entities: Vec<String>,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// A memory found by a search, with the method's own score.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryHit {
    pub memory: Memory,
    pub score: f64,
}

/// Population of one owner's memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryStats {
    pub memories: u64,
    pub oldest: Option<i64>,
    pub newest: Option<i64>,
}

#[derive(Deserialize)]
struct Row {
    id: String,
    content: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    entities: Vec<String>,
    created_at: i64,
    score: Option<f64>,
}

impl Row {
    fn into_hit(self) -> MemoryHit {
        MemoryHit {
            score: self.score.unwrap_or(0.0),
            memory: Memory {
                id: format!("{MEMORY}:{}", self.id),
                content: self.content,
                tags: self.tags,
                entities: self.entities,
                created_at: self.created_at,
            },
        }
    }
}

/// The clauses of one way to recall memories: fixed SurrealQL, never user input (that is bound).
struct Recall {
    /// The score of a memory.
    score: &'static str,
    /// Conditions after the owner's, each starting with `AND`.
    matching: &'static str,
    /// What the best come first by.
    order: &'static str,
}

/// Nearest to `$q`, an embedding, by cosine similarity.
const BY_VECTOR: Recall = Recall {
    score: "vector::similarity::cosine(embedding, $q)",
    matching: "",
    order: "score",
};

/// Best BM25 for the words of `$q`.
const BY_KEYWORD: Recall = Recall {
    score: "search::score(1)",
    matching: "AND content @1@ $q",
    order: "score",
};

/// Mentioning any of `$entities`, newest first.
const BY_ENTITIES: Recall = Recall {
    score: "1.0",
    matching: "AND entities CONTAINSANY $entities",
    order: "created_at",
};

const FIELDS: &str = "meta::id(id) AS id, content, tags, entities, created_at";

impl KnowledgeBase {
    /// Stores a fact for `owner`. Returns the stored memory.
    pub async fn remember(
        &self,
        owner: &str,
        content: &str,
        tags: &[String],
        entities: &[String],
    ) -> Result<Memory> {
        if content.trim().is_empty() {
            return Err(StoreError::invalid("content", "must not be empty"));
        }
        if crate::model::longer_than(content, MAX_MEMORY_CHARS) {
            return Err(StoreError::invalid(
                "content",
                format!("must be at most {MAX_MEMORY_CHARS} characters"),
            ));
        }
        let embedding = self.embed_one(content).await?;
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let rows: Vec<Row> = self
            .run(
                &format!(
                    "CREATE {MEMORY} CONTENT {{ owner: $owner, content: $content, tags: $tags, entities: $entities, created_at: $created_at, embedding: $embedding }} RETURN {FIELDS}"
                ),
                obj([
                    ("owner", owner.to_string().into_value()),
                    ("content", content.to_string().into_value()),
                    ("tags", tags.to_vec().into_value()),
                    ("entities", entities.to_vec().into_value()),
                    ("created_at", created_at.into_value()),
                    ("embedding", vector(embedding)),
                ]),
            )
            .await?;
        rows.into_iter()
            .next()
            .map(|r| r.into_hit().memory)
            .ok_or_else(|| StoreError::Query(format!("CREATE {MEMORY} returned nothing")))
    }

    /// `owner`'s memories nearest to `text`.
    pub async fn memory_by_vector(
        &self,
        owner: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<MemoryHit>> {
        let q = self.embed_query(text).await?;
        let mut hits = self
            .recall(owner, &BY_VECTOR, ("q", vector(q)), limit)
            .await?;
        hits.retain(|h| h.score > 0.0);
        Ok(hits)
    }

    /// `owner`'s memories matching the words of `text`, best BM25 first.
    pub async fn memory_by_keyword(
        &self,
        owner: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<MemoryHit>> {
        if !text.chars().any(char::is_alphanumeric) {
            return Ok(Vec::new());
        }
        self.recall(
            owner,
            &BY_KEYWORD,
            ("q", text.to_string().into_value()),
            limit,
        )
        .await
    }

    /// `owner`'s memories that mention any of `entities`, newest first.
    pub async fn memory_by_entities(
        &self,
        owner: &str,
        entities: &[String],
        limit: usize,
    ) -> Result<Vec<MemoryHit>> {
        if entities.is_empty() {
            return Ok(Vec::new());
        }
        let entities = entities.to_vec().into_value();
        self.recall(owner, &BY_ENTITIES, ("entities", entities), limit)
            .await
    }

    /// The `limit` first of `owner`'s memories as `how` finds them, with `arg` bound as the
    /// one parameter its clauses name.
    async fn recall(
        &self,
        owner: &str,
        how: &Recall,
        arg: (&str, Value),
        limit: usize,
    ) -> Result<Vec<MemoryHit>> {
        let Recall {
            score,
            matching,
            order,
        } = how;
        let rows: Vec<Row> = self
            .run(
                &format!(
                    "SELECT {FIELDS}, {score} AS score FROM {MEMORY} WHERE owner = $owner {matching} ORDER BY {order} DESC LIMIT $limit"
                ),
                obj([
                    ("owner", owner.to_string().into_value()),
                    arg,
                    ("limit", (limit as i64).into_value()),
                ]),
            )
            .await?;
        Ok(rows.into_iter().map(Row::into_hit).collect())
    }

    /// Every memory in this knowledge base, whoever owns it: the size of a workspace's
    /// memory, for a listing of workspaces. The only query here not filtered on an owner, and
    /// it returns a number, never a memory.
    pub async fn memory_count(&self) -> Result<u64> {
        #[derive(Deserialize)]
        struct Row {
            memories: u64,
        }
        let rows: Vec<Row> = self
            .run(
                &format!("RETURN [{{ memories: count(SELECT VALUE id FROM {MEMORY}) }}]"),
                Object::new(),
            )
            .await?;
        Ok(rows.into_iter().next().map_or(0, |r| r.memories))
    }

    pub async fn memory_stats(&self, owner: &str) -> Result<MemoryStats> {
        let rows: Vec<MemoryStats> = self
            .run(
                &format!(
                    "LET $times = (SELECT VALUE created_at FROM {MEMORY} WHERE owner = $owner);
                 RETURN [{{ memories: array::len($times), oldest: math::min($times), newest: math::max($times) }}]"
                ),
                obj([("owner", owner.to_string().into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next().unwrap_or(MemoryStats {
            memories: 0,
            oldest: None,
            newest: None,
        }))
    }
}

/// A memory's embedding as stored: an array of numbers, which the cosine similarity in
/// [`KnowledgeBase::memory_by_vector`]'s query reads.
pub(crate) fn vector(v: Vec<f32>) -> Value {
    v.into_iter()
        .map(f64::from)
        .collect::<Vec<f64>>()
        .into_value()
}
