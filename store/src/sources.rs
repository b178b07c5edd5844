//! Sources: raw documents ingested into the graph, and the provenance of what each gave.
//!
//! A source (`source`, `source_id`) is stored as one record naming its current version (the
//! content hash of each of its chunks, by position) and as one document per chunk (keyed by
//! `source` and `"{source_id}#{position}"`, so a chunk's id follows from its source and its
//! place). Every fact a chunk gave (an entity, a relationship, an alias, a description) has a
//! support row naming the chunk; a fact written by an import, or present before any source
//! named it, has an import support. The planner that decides what a deleted or changed source
//! retracts is pure ([`kbq_ingest::provenance`]); this file reads its inputs and carries out
//! its plan. Model answers are kept here too, by (chunk hash, model, prompt version), so that
//! no chunk is sent to a model twice.
//!
//! Every write here is idempotent (record ids follow from what the record says), so a job
//! that stopped half way is completed by running it again: nothing is written twice.

use std::collections::{BTreeMap, BTreeSet};

use kbq_ingest::provenance::{ChunkRef, Fact, Plan, SourceKey, Support};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use surrealdb::types::{Object, RecordId, SurrealValue, Value};

use crate::db::{Connected, obj, relationship_record_id, row};
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::model::table::{
    ENTITY, EXTRACTION, INGEST_JOB, INGEST_NODE, META, RELATES, SOURCE, SUPPORT,
};
use crate::model::{NewRelationship, keys};

/// The key of the meta record saying the store's description supports are folded (see
/// [`KnowledgeBase::fold_descriptions`]).
const FOLDED_KEY: &str = "descriptions_folded";

/// The supports a query reads at once.
const SUPPORT_BATCH: usize = 500;

/// Facts per request when asking which have a support of another origin: a statement each.
const OTHERS_BATCH: usize = 200;

/// A source's current version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    pub source: String,
    pub source_id: String,
    pub title: String,
    pub url: Option<String>,
    pub content_type: String,
    /// SHA-256 of the bytes ingested, hex.
    pub content_hash: String,
    /// Each chunk's content hash, by position (empty for a chunk whose extraction failed).
    pub chunks: Vec<String>,
    /// What read the chunks: the model (and prompt settings) that extracted them, or `None`
    /// when no model did (the chunks were linked to the names they mention).
    #[serde(default)]
    pub extracted_by: Option<String>,
    /// Unix milliseconds of the ingest that wrote this version.
    pub updated_at: i64,
}

impl SourceRecord {
    pub fn key(&self) -> SourceKey {
        SourceKey::new(&self.source, &self.source_id)
    }
}

/// The `source_id` of a source's chunk at `position`: its document is keyed by the source's
/// `source` and this.
pub fn chunk_source_id(source_id: &str, position: u32) -> String {
    format!("{source_id}#{position}")
}

/// The public id of the document of chunk `position` of `source`.
pub fn chunk_document_id(source: &SourceKey, position: u32) -> String {
    keys::document_id(
        &source.source,
        &chunk_source_id(&source.source_id, position),
    )
}

/// A name that resolution merged into an entity (an alias), with the chunks that gave it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Merge {
    /// The name as a source gave it.
    pub alias: String,
    /// The entity it was merged into.
    pub entity: String,
    /// The chunks that gave the name, by source and position.
    pub chunks: Vec<MergeChunk>,
}

/// A chunk that gave a merged name.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeChunk {
    pub source: String,
    pub source_id: String,
    /// The chunk's position in the source, from 0; its document's `source_id` is
    /// `"{source_id}#{position}"`.
    pub position: u32,
}

/// What the chunks said of an entity ([`KnowledgeBase::descriptions_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub entity: String,
    /// Its description supports with their texts, by source and chunk.
    pub texts: Vec<(Support, String)>,
    /// Whether an import supports the entity.
    pub imported: bool,
}

/// What the store did with a [`Plan`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Retracted {
    pub entities: u64,
    pub relationships: u64,
    pub aliases: u64,
    pub descriptions: u64,
}

/// One support row as stored.
#[derive(Debug, Deserialize)]
struct SupportRow {
    fact: String,
    origin: String,
    chunk: i64,
    /// Whether the row carries a description (see [`stored_fact`]).
    #[serde(default)]
    described: bool,
}

/// A support row to write.
struct SupportDraft {
    fact: String,
    origin: String,
    chunk: i64,
    kind: &'static str,
    entity: Option<String>,
    alias: Option<String>,
    text: Option<String>,
}

impl SupportDraft {
    /// The support of `stored` (a fact as [`stored_fact`] gives it) by `origin`'s `chunk`,
    /// with no description, and its record key.
    fn new(stored: &Fact, origin: String, chunk: i64) -> (String, Self) {
        let fact = fact_key(stored);
        let key = keys::support(&fact, &origin, chunk);
        let draft = SupportDraft {
            kind: fact_kind(stored),
            entity: fact_entity(stored),
            alias: fact_alias(stored),
            fact,
            origin,
            chunk,
            text: None,
        };
        (key, draft)
    }

    /// The row, with record key `id`.
    fn row(self, id: String) -> Value {
        row([
            ("id", RecordId::new(SUPPORT, id).into_value()),
            ("fact", self.fact.into_value()),
            ("origin", self.origin.into_value()),
            ("chunk", self.chunk.into_value()),
            ("kind", self.kind.to_string().into_value()),
            ("entity", self.entity.into_value()),
            ("alias", self.alias.into_value()),
            ("text", self.text.into_value()),
        ])
    }
}

/// The fact whose support row holds `fact`'s support: a description's is its chunk's
/// support of the entity (the row's `text`); any other fact's is its own. A description
/// was a row of its own in stores written before, which [`KnowledgeBase::fold_descriptions`]
/// folds once.
fn stored_fact(fact: &Fact) -> Fact {
    match fact {
        Fact::Description { entity, .. } => Fact::entity(entity.as_str()),
        other => other.clone(),
    }
}

/// The stored form of a support: its origin (`source` and `source_id` joined by a unit
/// separator, or `import`) and chunk (-1 for an import).
fn origin_of(support: &Support) -> (String, i64) {
    match support {
        Support::Chunk(c) => (source_origin(&c.source), i64::from(c.chunk)),
        Support::Import => (IMPORT_ORIGIN.to_string(), -1),
    }
}

const IMPORT_ORIGIN: &str = "import";

fn source_origin(source: &SourceKey) -> String {
    format!("{}\u{1f}{}", source.source, source.source_id)
}

pub(crate) fn support_of(origin: &str, chunk: i64) -> Option<Support> {
    if origin == IMPORT_ORIGIN {
        return Some(Support::Import);
    }
    let (source, source_id) = origin.split_once('\u{1f}')?;
    Some(Support::Chunk(ChunkRef {
        source: SourceKey::new(source, source_id),
        chunk: u32::try_from(chunk).ok()?,
    }))
}

/// A fact's stored key: its JSON, which serde writes in one order.
fn fact_key(fact: &Fact) -> String {
    serde_json::to_string(fact).expect("a fact serializes")
}

fn support_record_id(fact: &str, origin: &str, chunk: i64) -> RecordId {
    RecordId::new(SUPPORT, keys::support(fact, origin, chunk))
}

impl KnowledgeBase {
    /// The current version of `source`, if it was ingested.
    pub async fn source_record(&self, source: &SourceKey) -> Result<Option<SourceRecord>> {
        let rows: Vec<SourceRecord> = self
            .run(
                "SELECT source, source_id, title, url, content_type, content_hash, chunks, extracted_by, updated_at FROM $id",
                obj([("id", source_record_id(source).into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// The `limit` sources ingested most recently (newest first, then by source and id), and
    /// how many there are in all.
    pub async fn recent_sources(&self, limit: usize) -> Result<(Vec<SourceRecord>, u64)> {
        #[derive(serde::Deserialize)]
        struct Total {
            total: u64,
        }
        let rows: Vec<SourceRecord> = self
            .run(
                &format!(
                    "SELECT source, source_id, title, url, content_type, content_hash, chunks, extracted_by, updated_at FROM {SOURCE} ORDER BY updated_at DESC, source, source_id LIMIT $limit"
                ),
                obj([("limit", (limit as i64).into_value())]),
            )
            .await?;
        let total: Vec<Total> = self
            .run(
                &format!("RETURN [{{ total: count(SELECT VALUE id FROM {SOURCE}) }}]"),
                Object::new(),
            )
            .await?;
        Ok((rows, total.first().map_or(0, |t| t.total)))
    }

    /// Writes each of `records` as the current version of its source, in one transaction.
    pub async fn put_source_records(&self, records: &[SourceRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let rows = records
            .iter()
            .map(|record| {
                let value = serde_json::to_value(record)
                    .map_err(|e| StoreError::Query(format!("source record: {e}")))?;
                Ok(row([
                    ("id", source_record_id(&record.key()).into_value()),
                    ("record", value.into_value()),
                ]))
            })
            .collect::<Result<Vec<Value>>>()?;
        self.exec(
            "FOR $r IN $records { UPSERT $r.id CONTENT $r.record RETURN NONE; }",
            obj([("records", rows.into_value())]),
        )
        .await
    }

    /// Every fact that `source` or `also` names, with what the planner needs of its
    /// supports: all of `source`'s own, and one of another origin's if there is any (which
    /// one does not matter: a fact another origin supports stays). Reading every support of
    /// each fact instead made a job's reads grow with the corpus, a fact named by many
    /// sources having a support from each.
    pub async fn supports_of(
        &self,
        source: &SourceKey,
        also: &[Fact],
    ) -> Result<Vec<(Fact, Vec<Support>)>> {
        let origin = source_origin(source);
        let own: Vec<SupportRow> = self
            .run(
                &format!("SELECT fact, origin, chunk, text != NONE AS described FROM {SUPPORT} WHERE origin = $origin"),
                obj([("origin", origin.clone().into_value())]),
            )
            .await?;
        let mut by_fact: BTreeMap<String, Vec<Support>> = BTreeMap::new();
        for r in own {
            let Some(support) = support_of(&r.origin, r.chunk) else {
                continue;
            };
            if r.described
                && let Support::Chunk(chunk) = &support
                && let Ok(Fact::Entity { name }) = serde_json::from_str::<Fact>(&r.fact)
            {
                let description = Fact::Description {
                    entity: name,
                    chunk: chunk.clone(),
                };
                by_fact
                    .entry(fact_key(&description))
                    .or_default()
                    .push(support.clone());
            }
            by_fact.entry(r.fact).or_default().push(support);
        }
        for fact in also {
            by_fact.entry(fact_key(fact)).or_default();
        }
        let named: Vec<String> = by_fact.keys().cloned().collect();
        let c = self.connection().await?;
        for batch in named.chunks(OTHERS_BATCH) {
            // One statement per fact, in one request: each stops at its first match.
            let sql: String = (0..batch.len())
                .map(|i| {
                    format!(
                        "SELECT fact, origin, chunk FROM {SUPPORT} WHERE fact = $f{i} AND origin != $origin LIMIT 1;"
                    )
                })
                .collect();
            let mut vars = obj([("origin", origin.clone().into_value())]);
            for (i, key) in batch.iter().enumerate() {
                vars.insert(format!("f{i}"), key.clone().into_value());
            }
            let mut answers = self.send(&c, &sql, vars).await?;
            for i in 0..batch.len() {
                let rows: Vec<Json> = answers
                    .take(i)
                    .map_err(|e| StoreError::Query(e.to_string()))?;
                for r in rows {
                    let r: SupportRow = serde_json::from_value(r)
                        .map_err(|e| StoreError::Query(format!("unexpected row shape: {e}")))?;
                    if let Some(s) = support_of(&r.origin, r.chunk) {
                        by_fact.entry(r.fact).or_default().push(s);
                    }
                }
            }
        }
        by_fact
            .into_iter()
            .map(|(key, supports)| {
                let fact: Fact = serde_json::from_str(&key)
                    .map_err(|e| StoreError::Query(format!("stored fact {key}: {e}")))?;
                Ok((fact, supports))
            })
            .collect()
    }

    /// Records supports; one already recorded is left as it is, but for the words of a
    /// description, which `texts` gives (by fact). A description's support is stored on
    /// its chunk's support of the entity, which every description comes with.
    pub async fn add_supports(
        &self,
        supports: &[(Fact, Support)],
        texts: &BTreeMap<Fact, String>,
    ) -> Result<()> {
        let mut rows: BTreeMap<String, SupportDraft> = BTreeMap::new();
        for (fact, support) in supports {
            let (origin, chunk) = origin_of(support);
            let (key, new) = SupportDraft::new(&stored_fact(fact), origin, chunk);
            let draft = rows.entry(key).or_insert(new);
            if matches!(fact, Fact::Description { .. }) {
                draft.text = Some(texts.get(fact).cloned().unwrap_or_default());
            }
        }
        let (described, plain): (Vec<_>, Vec<_>) = rows
            .into_iter()
            .partition(|(_, draft)| draft.text.is_some());
        let rows_of = |drafts: Vec<(String, SupportDraft)>| -> Vec<Value> {
            drafts
                .into_iter()
                .map(|(id, draft)| draft.row(id))
                .collect()
        };
        let (described, plain) = (rows_of(described), rows_of(plain));
        self.insert_pipelined(
            &format!("INSERT IGNORE INTO {SUPPORT} $rows RETURN NONE"),
            &plain,
            |rows: Vec<Value>| async move { Ok((rows, ())) },
            |()| {},
        )
        .await?;
        self.insert_pipelined(
            &format!(
                "INSERT INTO {SUPPORT} $rows ON DUPLICATE KEY UPDATE text = $input.text RETURN NONE"
            ),
            &described,
            |rows: Vec<Value>| async move { Ok((rows, ())) },
            |()| {},
        )
        .await
    }

    /// The merges recorded, by alias in code-point order: the aliases after `after` (all when
    /// `None`), at most `limit` of them, with `entity` only those merged into that entity.
    /// Each alias comes with the entity (or entities, when sources merged it into two) and
    /// the chunks that gave it. The second value says whether more aliases follow.
    pub async fn merges(
        &self,
        entity: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Merge>, bool)> {
        let of_entity = match entity {
            Some(_) => " AND entity = $entity",
            None => "",
        };
        let mut vars = obj([
            ("after", after.unwrap_or("").to_string().into_value()),
            ("n", (limit as i64 + 1).into_value()),
        ]);
        if let Some(e) = entity {
            vars.insert("entity".to_string(), e.to_string().into_value());
        }
        let aliases: Vec<String> = self
            .run(
                &format!(
                    "SELECT VALUE alias FROM (SELECT alias FROM {SUPPORT} WHERE kind = 'alias' AND alias > $after{of_entity} GROUP BY alias) ORDER BY alias LIMIT $n"
                ),
                vars.clone(),
            )
            .await?;
        let more = aliases.len() > limit;
        let aliases: Vec<String> = aliases.into_iter().take(limit).collect();
        if aliases.is_empty() {
            return Ok((Vec::new(), false));
        }
        vars.insert("aliases".to_string(), aliases.into_value());
        #[derive(Deserialize)]
        struct AliasRow {
            alias: String,
            entity: String,
            origin: String,
            chunk: i64,
        }
        let rows: Vec<AliasRow> = self
            .run(
                &format!(
                    "SELECT alias, entity, origin, chunk FROM {SUPPORT} WHERE kind = 'alias' AND alias IN $aliases{of_entity}"
                ),
                vars,
            )
            .await?;
        let mut by_pair: BTreeMap<(String, String), BTreeSet<MergeChunk>> = BTreeMap::new();
        for r in rows {
            let chunks = by_pair.entry((r.alias, r.entity)).or_default();
            if let Some(Support::Chunk(c)) = support_of(&r.origin, r.chunk) {
                chunks.insert(MergeChunk {
                    source: c.source.source,
                    source_id: c.source.source_id,
                    position: c.chunk,
                });
            }
        }
        let merges = by_pair
            .into_iter()
            .map(|((alias, entity), chunks)| Merge {
                alias,
                entity,
                chunks: chunks.into_iter().collect(),
            })
            .collect();
        Ok((merges, more))
    }

    /// What every source's chunks said of each of `entities`: the texts of its description
    /// supports, by source and chunk, and whether an import supports the entity (a source
    /// never changes an import's entity).
    pub async fn descriptions_of(&self, entities: &[String]) -> Result<Vec<Described>> {
        #[derive(Deserialize)]
        struct TextRow {
            origin: String,
            chunk: i64,
            text: Option<String>,
        }
        let c = self.connection().await?;
        let mut out = Vec::with_capacity(entities.len());
        for batch in entities.chunks(OTHERS_BATCH) {
            // A statement per entity, in one request: every support of the entity, whose
            // chunks' rows carry the descriptions (an entity's supports are its chunks' and
            // at most one import's).
            let sql: String = (0..batch.len())
                .map(|i| format!("SELECT origin, chunk, text FROM {SUPPORT} WHERE fact = $e{i};"))
                .collect();
            let mut vars = Object::new();
            for (i, entity) in batch.iter().enumerate() {
                vars.insert(
                    format!("e{i}"),
                    fact_key(&Fact::entity(entity.as_str())).into_value(),
                );
            }
            let mut answers = self.send(&c, &sql, vars).await?;
            for (i, entity) in batch.iter().enumerate() {
                let rows: Vec<Json> = answers
                    .take(i)
                    .map_err(|e| StoreError::Query(e.to_string()))?;
                let rows: Vec<TextRow> = rows
                    .into_iter()
                    .filter_map(|r| serde_json::from_value::<TextRow>(r).ok())
                    .collect();
                let imported = rows.iter().any(|r| r.origin == IMPORT_ORIGIN);
                let mut texts: Vec<(Support, String)> = rows
                    .into_iter()
                    .filter_map(|r| Some((support_of(&r.origin, r.chunk)?, r.text?)))
                    .collect();
                texts.sort();
                out.push(Described {
                    entity: entity.clone(),
                    texts,
                    imported,
                });
            }
        }
        Ok(out)
    }

    /// Replaces the text of recorded description supports: a chunk at the same place in a
    /// new version of its source may describe the entity otherwise.
    pub async fn set_support_texts(&self, rows: &[(Fact, Support, String)]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let rows: Vec<Value> = rows
            .iter()
            .map(|(fact, support, text)| {
                let (origin, chunk) = origin_of(support);
                row([
                    (
                        "id",
                        support_record_id(&fact_key(&stored_fact(fact)), &origin, chunk)
                            .into_value(),
                    ),
                    ("text", text.clone().into_value()),
                ])
            })
            .collect();
        self.exec_in_batches(
            "FOR $r IN $rows { UPDATE $r.id SET text = $r.text RETURN NONE };",
            "rows",
            &rows,
        )
        .await
    }

    /// The entity that `name` is an alias of (a name resolution merged into it), if any.
    pub async fn alias_target(&self, name: &str) -> Result<Option<String>> {
        let found: Vec<Option<String>> = self
            .run(
                &format!(
                    "SELECT VALUE entity FROM {SUPPORT} WHERE kind = 'alias' AND alias = $name LIMIT 1"
                ),
                obj([("name", name.to_string().into_value())]),
            )
            .await?;
        Ok(found.into_iter().flatten().next())
    }

    /// Carries out `plan`'s retractions: supports dropped, then facts removed from SurrealDB
    /// and the indexes (an entity with its relationships; documents linked to it stay,
    /// unlinked). The plan's additions are written by the caller, before, with the facts
    /// themselves. An entity that a relationship outside the plan still reaches is kept.
    pub async fn retract(&self, plan: &Plan) -> Result<Retracted> {
        let mut done = Retracted::default();
        // A description's support goes by taking the words from its row (see
        // `stored_fact`), every other support by deleting its row; a description removed
        // had the one support of its own chunk.
        let mut dropped: Vec<RecordId> = Vec::new();
        let mut undescribed: Vec<RecordId> = Vec::new();
        let removed_descriptions = plan.remove.iter().filter_map(|fact| match fact {
            Fact::Description { chunk, .. } => Some((fact, Support::Chunk(chunk.clone()))),
            _ => None,
        });
        let supports = plan
            .drop_supports
            .iter()
            .map(|(fact, support)| (fact, support.clone()))
            .chain(removed_descriptions);
        for (fact, support) in supports {
            let (origin, chunk) = origin_of(&support);
            let id = support_record_id(&fact_key(&stored_fact(fact)), &origin, chunk);
            match fact {
                Fact::Description { .. } => undescribed.push(id),
                _ => dropped.push(id),
            }
        }
        self.exec_in_batches(
            "UPDATE $ids SET text = NONE RETURN NONE",
            "ids",
            &undescribed,
        )
        .await?;
        self.exec_in_batches("DELETE $ids", "ids", &dropped).await?;
        let removed: BTreeSet<&Fact> = plan.remove.iter().collect();
        for fact in &plan.remove {
            match fact {
                Fact::Relationship {
                    source,
                    target,
                    relationship_type,
                } => {
                    if self
                        .delete_relationship(source, target, relationship_type)
                        .await?
                    {
                        done.relationships += 1;
                    }
                }
                Fact::Alias { .. } => done.aliases += 1,
                Fact::Description { .. } => done.descriptions += 1,
                Fact::Entity { .. } => {}
            }
        }
        for fact in &plan.remove {
            if let Fact::Entity { name } = fact {
                let edges = self.relationships_of(name).await?;
                let reached = edges.iter().any(|(s, t, ty)| {
                    !removed.contains(&Fact::relationship(s.clone(), t.clone(), ty.clone()))
                });
                if reached {
                    // Still an end of a relationship someone else stated: the entity stays.
                    continue;
                }
                if self.delete_entity(name).await?.deleted {
                    done.entities += 1;
                }
            }
        }
        let gone: Vec<String> = plan
            .remove
            .iter()
            .filter(|fact| !matches!(fact, Fact::Description { .. }))
            .map(fact_key)
            .collect();
        self.exec_in_batches(
            &format!("DELETE {SUPPORT} WHERE fact IN $facts"),
            "facts",
            &gone,
        )
        .await?;
        Ok(done)
    }

    /// Removes the relationship (source, target, type); false when there was none.
    pub async fn delete_relationship(
        &self,
        source: &str,
        target: &str,
        relationship_type: &str,
    ) -> Result<bool> {
        let id = relationship_record_id(source, target, relationship_type);
        let gone: Vec<Json> = self
            .run("DELETE $id RETURN BEFORE", obj([("id", id.into_value())]))
            .await?;
        if let Some(index) = self.graph_index() {
            index
                .write()
                .remove_relationship(source, target, relationship_type);
        }
        Ok(!gone.is_empty())
    }

    /// Every relationship at either end of `name`, as (source, target, type).
    async fn relationships_of(&self, name: &str) -> Result<Vec<(String, String, String)>> {
        #[derive(Deserialize)]
        struct Edge {
            source_name: String,
            target_name: String,
            relationship_type: String,
        }
        let edges: Vec<Edge> = self
            .run(
                &format!("SELECT source_name, target_name, relationship_type FROM {RELATES} WHERE source_name = $name OR target_name = $name"),
                obj([("name", name.to_string().into_value())]),
            )
            .await?;
        Ok(edges
            .into_iter()
            .map(|e| (e.source_name, e.target_name, e.relationship_type))
            .collect())
    }

    /// Removes the chunk documents of `source` at `positions`.
    pub async fn delete_chunks(&self, source: &SourceKey, positions: &[u32]) -> Result<u64> {
        let mut deleted = 0;
        for &p in positions {
            if self.delete_document(&chunk_document_id(source, p)).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    /// Removes the record of `source` (its chunks and facts are the caller's).
    pub async fn delete_source_record(&self, source: &SourceKey) -> Result<()> {
        self.exec(
            "DELETE $id",
            obj([("id", source_record_id(source).into_value())]),
        )
        .await
    }

    /// The kept answer of a model for `key` (see [`extraction_key`]).
    pub async fn cached_extraction(&self, key: &str) -> Result<Option<Json>> {
        let rows: Vec<Json> = self
            .run(
                "SELECT VALUE answer FROM $id",
                obj([("id", RecordId::new(EXTRACTION, key).into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Keeps a model's answer for `key`.
    pub async fn cache_extraction(&self, key: &str, answer: Json) -> Result<()> {
        self.exec(
            "UPSERT $id CONTENT { answer: $answer } RETURN NONE",
            obj([
                ("id", RecordId::new(EXTRACTION, key).into_value()),
                ("answer", answer.into_value()),
            ]),
        )
        .await
    }

    /// The entity and relationship facts among `facts` whose records are in the graph without
    /// the mark [`mark_sourced`](Self::mark_sourced) gives: those that may have no support
    /// at all (an import's, or written before supports were recorded), so that whoever
    /// names one must read its supports. A fact the graph does not hold, or of another
    /// kind, is left out. Exact reads of the facts' own records.
    pub async fn unsourced(&self, facts: &[Fact]) -> Result<Vec<Fact>> {
        let mut out = Vec::new();
        for table in [ENTITY, RELATES] {
            let by_key: BTreeMap<String, &Fact> = facts
                .iter()
                .filter_map(|f| {
                    fact_record_key(f)
                        .filter(|(t, _)| *t == table)
                        .map(|(_, k)| (k, f))
                })
                .collect();
            let keys: Vec<&String> = by_key.keys().collect();
            for batch in keys.chunks(SUPPORT_BATCH) {
                let ids: Vec<RecordId> = batch
                    .iter()
                    .map(|k| RecordId::new(table, k.as_str()))
                    .collect();
                let found: Vec<String> = self
                    .run(
                        "SELECT VALUE meta::id(id) FROM $ids WHERE sourced != true",
                        obj([("ids", ids.into_value())]),
                    )
                    .await?;
                out.extend(
                    found
                        .iter()
                        .filter_map(|k| by_key.get(k).map(|f| (*f).clone())),
                );
            }
        }
        Ok(out)
    }

    /// Marks the records of entity and relationship `facts` as having supports recorded
    /// (see [`unsourced`](Self::unsourced)); a fact not in the graph is skipped.
    pub async fn mark_sourced(&self, facts: &[Fact]) -> Result<()> {
        let ids: Vec<RecordId> = facts
            .iter()
            .filter_map(fact_record_key)
            .map(|(table, key)| RecordId::new(table, key))
            .collect();
        self.exec_in_batches("UPDATE $ids SET sourced = true RETURN NONE", "ids", &ids)
            .await
    }

    /// Runs `sql` once per [`SUPPORT_BATCH`] of `items`, bound as `$var`.
    async fn exec_in_batches<T: SurrealValue + Clone>(
        &self,
        sql: &str,
        var: &str,
        items: &[T],
    ) -> Result<()> {
        for batch in items.chunks(SUPPORT_BATCH) {
            self.exec(sql, obj([(var, batch.to_vec().into_value())]))
                .await?;
        }
        Ok(())
    }

    /// Folds the description supports of a store written before descriptions were kept on
    /// their chunk's support of the entity ([`stored_fact`]): each becomes the words of that
    /// row, written whole before the old row goes, in one transaction per batch. Done once
    /// per store (a meta record says so); running it twice, or on two nodes at once, changes
    /// nothing more.
    pub(crate) async fn fold_descriptions(&self, c: &Connected) -> Result<()> {
        let done: Vec<Json> = self
            .run_on(
                c,
                &format!("SELECT VALUE id FROM {META}:{FOLDED_KEY}"),
                Object::new(),
            )
            .await?;
        if !done.is_empty() {
            return Ok(());
        }
        #[derive(Deserialize)]
        struct Old {
            key: String,
            fact: String,
            origin: String,
            chunk: i64,
            text: Option<String>,
        }
        loop {
            let old: Vec<Old> = self
                .run_on(
                    c,
                    &format!(
                        "SELECT meta::id(id) AS key, fact, origin, chunk, text FROM {SUPPORT} WHERE kind = 'description' LIMIT {SUPPORT_BATCH}"
                    ),
                    Object::new(),
                )
                .await?;
            if old.is_empty() {
                break;
            }
            let mut rows: BTreeMap<String, SupportDraft> = BTreeMap::new();
            let mut ids = Vec::with_capacity(old.len());
            for o in old {
                ids.push(RecordId::new(SUPPORT, o.key));
                let Ok(Fact::Description { entity, .. }) = serde_json::from_str::<Fact>(&o.fact)
                else {
                    continue;
                };
                let (key, mut draft) = SupportDraft::new(&Fact::entity(entity), o.origin, o.chunk);
                draft.text = Some(o.text.unwrap_or_default());
                rows.insert(key, draft);
            }
            let rows: Vec<Value> = rows.into_iter().map(|(id, draft)| draft.row(id)).collect();
            self.exec_on(
                c,
                &format!(
                    "BEGIN; INSERT INTO {SUPPORT} $rows ON DUPLICATE KEY UPDATE text = $input.text RETURN NONE; DELETE $ids; COMMIT;"
                ),
                obj([("rows", rows.into_value()), ("ids", ids.into_value())]),
            )
            .await?;
        }
        self.exec_on(
            c,
            &format!("UPSERT {META}:{FOLDED_KEY} CONTENT {{ at: time::now() }} RETURN NONE"),
            Object::new(),
        )
        .await
    }

    /// The relationships among `relationships` that are not in the graph.
    pub async fn missing_relationships(
        &self,
        relationships: &[NewRelationship],
    ) -> Result<Vec<NewRelationship>> {
        let mut missing = Vec::new();
        for batch in relationships.chunks(SUPPORT_BATCH) {
            let ids: Vec<RecordId> = batch
                .iter()
                .map(|r| {
                    relationship_record_id(&r.source_name, &r.target_name, &r.relationship_type)
                })
                .collect();
            let present: BTreeSet<String> = self
                .run::<String>(
                    "SELECT VALUE meta::id(id) FROM $ids",
                    obj([("ids", ids.into_value())]),
                )
                .await?
                .into_iter()
                .collect();
            missing.extend(
                batch
                    .iter()
                    .filter(|r| {
                        !present.contains(&keys::relationship(
                            &r.source_name,
                            &r.target_name,
                            &r.relationship_type,
                        ))
                    })
                    .cloned(),
            );
        }
        Ok(missing)
    }

    /// Stores an ingest job's record (JSON, the job's owner's business), replacing it, held
    /// by the node `node` (see [`heartbeat`](Self::heartbeat)).
    pub async fn put_job(&self, job_id: &str, record: Json, node: &str) -> Result<()> {
        let finished = record.get("view").is_some_and(has_ended);
        self.exec(
            "UPSERT $id CONTENT { record: $record, finished: $finished, node: $node, cancel: false } RETURN NONE",
            obj([
                ("id", RecordId::new(INGEST_JOB, job_id).into_value()),
                ("record", record.into_value()),
                ("finished", finished.into_value()),
                ("node", node.into_value()),
            ]),
        )
        .await
    }

    /// Replaces the `view` of an ingest job's stored record (its status, progress and
    /// counts), leaving the rest unread. The source's content (`record.input.content`) is
    /// kept while the job may run again, and emptied once the view says it has ended: only
    /// a resumed job reads it.
    pub async fn put_job_view(&self, job_id: &str, view: Json) -> Result<()> {
        let finished = has_ended(&view);
        let sql = match finished {
            true => {
                "UPDATE $id SET record.view = $view, finished = $finished, record.input.content = '' RETURN NONE"
            }
            false => "UPDATE $id SET record.view = $view, finished = $finished RETURN NONE",
        };
        self.exec(
            sql,
            obj([
                ("id", RecordId::new(INGEST_JOB, job_id).into_value()),
                ("view", view.into_value()),
                ("finished", finished.into_value()),
            ]),
        )
        .await
    }

    /// An ingest job's record.
    pub async fn job(&self, job_id: &str) -> Result<Option<Json>> {
        let rows: Vec<Json> = self
            .run(
                "SELECT VALUE record FROM $id",
                obj([("id", RecordId::new(INGEST_JOB, job_id).into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// The nodes alive at `now` (Unix milliseconds): those whose lease, renewed by every
    /// node's default ingestor every 2 s, has not ended. Nodes on one server share rate
    /// budgets by it.
    pub async fn live_nodes(&self, now: i64) -> Result<u64> {
        let rows: Vec<u64> = self
            .run(
                &format!(
                    "RETURN [count(SELECT VALUE id FROM {INGEST_NODE} WHERE lease_until > $now)]"
                ),
                obj([("now", now.into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next().unwrap_or(0))
    }

    /// Says that the node `node` is alive until `until` (Unix milliseconds): while it is, no
    /// other node takes its jobs. One row per node, whatever the number of its jobs.
    pub async fn heartbeat(&self, node: &str, until: i64) -> Result<()> {
        self.exec(
            "UPSERT $id SET lease_until = $until RETURN NONE",
            obj([
                ("id", RecordId::new(INGEST_NODE, node).into_value()),
                ("until", until.into_value()),
            ]),
        )
        .await
    }

    /// The unfinished jobs of `node` whose cancellation another node asked for
    /// ([`request_cancel`](Self::request_cancel)).
    pub async fn cancels_asked(&self, node: &str) -> Result<Vec<String>> {
        self.run(
            &format!(
                "SELECT VALUE meta::id(id) FROM {INGEST_JOB} WITH INDEX ingest_job_cancel WHERE cancel = true AND finished = false AND node = $node"
            ),
            obj([("node", node.into_value())]),
        )
        .await
    }

    /// Takes for `node` (alive until `until`) the unfinished jobs whose node is no longer
    /// alive at `now` (every unfinished job when `every`: an embedded store has no other
    /// node), and answers their records. A job is taken by one node: two nodes that claim it
    /// at once conflict in the store, and the one refused tries again at its next claim.
    /// Nodes dead for a day are forgotten.
    pub async fn claim_jobs(
        &self,
        node: &str,
        now: i64,
        until: i64,
        every: bool,
    ) -> Result<Vec<Json>> {
        self.heartbeat(node, until).await?;
        let c = self.connection().await?;
        let mut answers = self
            .send(
                &c,
                &format!(
                    "DELETE {INGEST_NODE} WHERE lease_until < $forgotten;
                     LET $live = (SELECT VALUE meta::id(id) FROM {INGEST_NODE} WHERE lease_until >= $now);
                     UPDATE {INGEST_JOB} SET node = $node WHERE finished = false AND ($every OR node NOT IN $live) RETURN VALUE record;"
                ),
                obj([
                    ("node", node.into_value()),
                    ("now", now.into_value()),
                    ("forgotten", (now - 86_400_000).into_value()),
                    ("every", every.into_value()),
                ]),
            )
            .await?;
        answers
            .take::<Vec<Json>>(2)
            .map_err(|e| StoreError::Query(e.to_string()))
    }

    /// Asks the node that holds the job `job_id` to cancel it (it reads the request when it
    /// next renews its lease). False when the job has ended or is not known.
    pub async fn request_cancel(&self, job_id: &str) -> Result<bool> {
        let rows: Vec<Json> = self
            .run(
                "UPDATE $id SET cancel = true WHERE finished = false RETURN VALUE meta::id(id)",
                obj([("id", RecordId::new(INGEST_JOB, job_id).into_value())]),
            )
            .await?;
        Ok(!rows.is_empty())
    }
}

/// Whether a job's view says it has ended: any status but `queued` and `running`.
fn has_ended(view: &Json) -> bool {
    view.get("status")
        .and_then(Json::as_str)
        .is_some_and(|s| !matches!(s, "queued" | "running"))
}

/// The table and key of an entity's or a relationship's record; none for another fact.
fn fact_record_key(fact: &Fact) -> Option<(&'static str, String)> {
    match fact {
        Fact::Entity { name } => Some((ENTITY, keys::entity(name))),
        Fact::Relationship {
            source,
            target,
            relationship_type,
        } => Some((
            RELATES,
            keys::relationship(source, target, relationship_type),
        )),
        _ => None,
    }
}

fn fact_kind(fact: &Fact) -> &'static str {
    match fact {
        Fact::Entity { .. } => "entity",
        Fact::Relationship { .. } => "relationship",
        Fact::Alias { .. } => "alias",
        Fact::Description { .. } => "description",
    }
}

/// The other name an alias fact gives its entity.
fn fact_alias(fact: &Fact) -> Option<String> {
    match fact {
        Fact::Alias { alias, .. } => Some(alias.clone()),
        _ => None,
    }
}

/// The entity a fact is about (a relationship: none), for finding descriptions by entity.
fn fact_entity(fact: &Fact) -> Option<String> {
    match fact {
        Fact::Entity { name } => Some(name.clone()),
        Fact::Alias { entity, .. } | Fact::Description { entity, .. } => Some(entity.clone()),
        Fact::Relationship { .. } => None,
    }
}

fn source_record_id(source: &SourceKey) -> RecordId {
    RecordId::new(SOURCE, keys::source(&source.source, &source.source_id))
}

/// The key under which a model's answer for a chunk is kept: the chunk's content hash, the
/// model (or provider chain) asked, and the prompt's version.
pub fn extraction_key(chunk_hash: &str, model: &str, prompt_version: u32) -> String {
    keys::extraction(chunk_hash, model, prompt_version)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{HashingEmbedder, StoreConfig};

    /// A store written when each description support was a row of its own reads, once
    /// folded, as one written now: the same descriptions, supports and plans.
    #[tokio::test]
    async fn description_rows_of_an_older_store_are_folded_once() {
        let kb =
            KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
        let source = SourceKey::new("notes", "a");
        let chunk = |i: u32| ChunkRef {
            source: source.clone(),
            chunk: i,
        };
        // As the older store wrote them: an entity support, and a description of its own.
        let mut rows = Vec::new();
        for (fact, position, text) in [
            (Fact::entity("Ada"), 0, None),
            (
                Fact::Description {
                    entity: "Ada".into(),
                    chunk: chunk(0),
                },
                0,
                Some("Ada wrote the first program"),
            ),
            (
                Fact::Description {
                    entity: "Babbage".into(),
                    chunk: chunk(1),
                },
                1,
                Some("Babbage designed the engine"),
            ),
        ] {
            let key = fact_key(&fact);
            let origin = source_origin(&source);
            rows.push(row([
                (
                    "id",
                    support_record_id(&key, &origin, position).into_value(),
                ),
                ("fact", key.into_value()),
                ("origin", origin.into_value()),
                ("chunk", position.into_value()),
                ("kind", fact_kind(&fact).to_string().into_value()),
                ("entity", fact_entity(&fact).into_value()),
                ("alias", None::<String>.into_value()),
                ("text", text.map(str::to_string).into_value()),
            ]));
        }
        kb.exec(
            &format!("INSERT INTO {SUPPORT} $rows RETURN NONE; DELETE {META}:{FOLDED_KEY};"),
            obj([("rows", rows.into_value())]),
        )
        .await
        .unwrap();
        let c = kb.connection().await.unwrap();
        kb.fold_descriptions(&c).await.unwrap();

        let rows = || async {
            kb.run::<String>(
                &format!("SELECT VALUE meta::id(id) FROM {SUPPORT}"),
                Object::new(),
            )
            .await
            .unwrap()
            .len()
        };
        assert_eq!(rows().await, 2, "one row per entity and chunk");
        let described = kb
            .descriptions_of(&["Ada".into(), "Babbage".into()])
            .await
            .unwrap();
        let texts: Vec<Vec<&str>> = described
            .iter()
            .map(|d| d.texts.iter().map(|(_, t)| t.as_str()).collect())
            .collect();
        assert_eq!(
            texts,
            [
                vec!["Ada wrote the first program"],
                vec!["Babbage designed the engine"]
            ]
        );
        let mut facts: Vec<Fact> = kb
            .supports_of(&source, &[])
            .await
            .unwrap()
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        facts.sort();
        let mut want = vec![
            Fact::entity("Ada"),
            Fact::entity("Babbage"),
            Fact::Description {
                entity: "Ada".into(),
                chunk: chunk(0),
            },
            Fact::Description {
                entity: "Babbage".into(),
                chunk: chunk(1),
            },
        ];
        want.sort();
        assert_eq!(facts, want);

        // Marked done: later opens skip the scan.
        let done: Vec<Json> = kb
            .run(&format!("SELECT * FROM {META}:{FOLDED_KEY}"), Object::new())
            .await
            .unwrap();
        assert_eq!(done.len(), 1);

        // Deleting the source takes every row, words and all.
        let plan = kbq_ingest::provenance::plan_delete(
            &kb.supports_of(&source, &[]).await.unwrap(),
            &source,
        );
        kb.retract(&plan).await.unwrap();
        assert_eq!(rows().await, 0);
    }
}
