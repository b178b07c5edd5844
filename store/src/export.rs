//! Export and restore: a workspace's whole knowledge base written as NDJSON in the import
//! format (docs/import-format.md), and the records only an export holds (agent memory,
//! sources, the supports of what they gave, the model answers kept per chunk) written back
//! by an import.
//!
//! An export reads one transaction of its own: every line it writes comes from one state of
//! the database, whatever is written while it runs. It reads each table in pages of
//! [`EXPORT_PAGE`] records in key order and hands the lines to a channel as it goes, so that
//! neither side holds the whole knowledge base.

use std::collections::BTreeMap;
use std::ops::Bound;

use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use surrealdb::types::{Object, RecordId, RecordIdKey, RecordIdKeyRange, SurrealValue, Value};
use tokio::sync::mpsc;

use crate::db::{INDEX_LOAD_TIMEOUT, RELATIONSHIP_FIELDS, Snapshot, obj, row};
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::memory::MAX_MEMORY_CHARS;
use crate::model::table::{DOCUMENT, ENTITY, EXTRACTION, FACT_SUPPORT, MEMORY, RELATES, SOURCE};
use crate::model::{NewDocument, NewEntity, NewRelationship, Record, check_name, longer_than};
use crate::sources::{MergeChunk, SourceRecord};

/// Records read from the store per statement, and written per line batch.
pub const EXPORT_PAGE: usize = 500;

/// Memories embedded per call to the embedder when they are restored.
const MEMORY_BATCH: usize = 64;

/// What an export holds (or an import restored), by kind of record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportCounts {
    pub entities: u64,
    pub relationships: u64,
    pub documents: u64,
    pub memories: u64,
    pub sources: u64,
    pub supports: u64,
    pub extractions: u64,
}

impl ExportCounts {
    /// Every record, of every kind.
    pub fn total(&self) -> u64 {
        self.entities
            + self.relationships
            + self.documents
            + self.memories
            + self.sources
            + self.supports
            + self.extractions
    }
}

/// What an export hands its reader.
#[derive(Debug)]
pub enum ExportEvent {
    /// What the export is about to write, counted in its transaction, before any line.
    Totals(ExportCounts),
    /// NDJSON lines, each ending in a newline: `records` records.
    Lines { records: u64, bytes: Vec<u8> },
}

/// A line of the import format that only an export writes: what kbq keeps beside the
/// entities, relationships and documents (docs/import-format.md, "Records of an export").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kept {
    /// An agent memory, with its owner.
    Memory(KeptMemory),
    /// An ingested source's current version.
    Source(SourceRecord),
    /// One support of a fact: by a source's chunk, or by an import.
    Support(KeptSupport),
    /// A model's answer for a chunk, kept so that no chunk is sent to a model twice.
    Extraction(KeptExtraction),
    /// The last line of an export: what it holds. A file without it was cut short.
    End(ExportCounts),
}

/// An agent memory as an export writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptMemory {
    /// The memory's record key (its id is `memory:<id>`).
    pub id: String,
    /// The key that stored it, as agent memory names its owner.
    pub owner: String,
    pub content: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub entities: Vec<String>,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// A support as an export writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptSupport {
    /// The fact supported: an entity, a relationship or an alias.
    pub fact: Fact,
    /// The chunk that supports it; `null` when an import does.
    #[serde(default)]
    pub chunk: Option<MergeChunk>,
    /// What the chunk said of the entity (its description), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A model's kept answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptExtraction {
    /// The key it is kept under (from the chunk's hash, the model and the prompt's version).
    pub key: String,
    pub answer: Json,
}

impl Kept {
    /// The rules a line must keep to be restored.
    pub fn validate(&self) -> Result<()> {
        match self {
            Kept::Memory(m) => {
                check_name("owner", &m.owner)?;
                check_name("id", &m.id)?;
                if m.content.trim().is_empty() {
                    return Err(StoreError::invalid("content", "must not be empty"));
                }
                if longer_than(&m.content, MAX_MEMORY_CHARS) {
                    return Err(StoreError::invalid(
                        "content",
                        format!("must be at most {MAX_MEMORY_CHARS} characters"),
                    ));
                }
                Ok(())
            }
            Kept::Source(s) => {
                check_name("source", &s.source)?;
                check_name("source_id", &s.source_id)?;
                check_name("content_type", &s.content_type)
            }
            Kept::Support(s) => {
                match &s.fact {
                    Fact::Entity { name } => check_name("fact.name", name)?,
                    Fact::Relationship {
                        source,
                        target,
                        relationship_type,
                    } => {
                        check_name("fact.source", source)?;
                        check_name("fact.target", target)?;
                        check_name("fact.relationship_type", relationship_type)?;
                    }
                    Fact::Alias { entity, alias } => {
                        check_name("fact.entity", entity)?;
                        check_name("fact.alias", alias)?;
                    }
                    Fact::Description { .. } => {
                        return Err(StoreError::invalid(
                            "fact",
                            "a description is the `text` of its chunk's support of the entity",
                        ));
                    }
                }
                if let Some(c) = &s.chunk {
                    check_name("chunk.source", &c.source)?;
                    check_name("chunk.source_id", &c.source_id)?;
                }
                if s.text.is_some() && !(matches!(s.fact, Fact::Entity { .. }) && s.chunk.is_some())
                {
                    return Err(StoreError::invalid(
                        "text",
                        "only a chunk's support of an entity carries a description",
                    ));
                }
                Ok(())
            }
            Kept::Extraction(x) => check_name("key", &x.key),
            Kept::End(_) => Ok(()),
        }
    }
}

/// The kinds of line [`Kept`] reads.
pub const KEPT_KINDS: [&str; 5] = ["memory", "source", "support", "extraction", "end"];

/// The tables an export reads, in the order it writes them, with the fields it reads.
const TABLES: [(&str, &str); 7] = [
    (ENTITY, "name, entity_type, properties"),
    (RELATES, RELATIONSHIP_FIELDS),
    (
        DOCUMENT,
        "title, content, source, source_id, content_type, url, entity_name, mentions",
    ),
    (
        SOURCE,
        "source, source_id, title, url, content_type, content_hash, chunks, extracted_by, updated_at",
    ),
    (
        FACT_SUPPORT,
        "id[0] AS fact, id[1] AS origin, id[2] AS chunk, text",
    ),
    (EXTRACTION, "answer"),
    (MEMORY, "owner, content, tags, entities, created_at"),
];

fn count_of<'a>(counts: &'a mut ExportCounts, table: &str) -> &'a mut u64 {
    match table {
        ENTITY => &mut counts.entities,
        RELATES => &mut counts.relationships,
        DOCUMENT => &mut counts.documents,
        SOURCE => &mut counts.sources,
        FACT_SUPPORT => &mut counts.supports,
        EXTRACTION => &mut counts.extractions,
        _ => &mut counts.memories,
    }
}

fn count_in(mut counts: ExportCounts, table: &str) -> u64 {
    *count_of(&mut counts, table)
}

/// A stored row as a line of the import format.
fn line_of(table: &str, key: &str, mut row: serde_json::Map<String, Json>) -> Result<Json> {
    let shape = |e: serde_json::Error| StoreError::Query(format!("unexpected {table} row: {e}"));
    // Fields a record does not have come back as null.
    row.retain(|_, v| !v.is_null());
    let value = Json::Object(row);
    let line = match table {
        ENTITY => serde_json::to_value(Record::Entity(
            serde_json::from_value::<NewEntity>(value).map_err(shape)?,
        )),
        RELATES => serde_json::to_value(Record::Relationship(
            serde_json::from_value::<NewRelationship>(value).map_err(shape)?,
        )),
        DOCUMENT => {
            #[derive(Deserialize)]
            struct Stored {
                #[serde(flatten)]
                document: NewDocumentFields,
                #[serde(default)]
                mentions: Vec<String>,
            }
            #[derive(Deserialize)]
            struct NewDocumentFields {
                title: String,
                content: String,
                source: String,
                source_id: String,
                content_type: String,
                #[serde(default)]
                url: Option<String>,
                #[serde(default)]
                entity_name: Option<String>,
            }
            let stored: Stored = serde_json::from_value(value).map_err(shape)?;
            let d = stored.document;
            let mut line = serde_json::to_value(Record::Document(NewDocument {
                title: d.title,
                content: d.content,
                source: d.source,
                source_id: d.source_id,
                content_type: d.content_type,
                url: d.url,
                entity_name: d.entity_name,
                mentions: Vec::new(),
            }))
            .map_err(shape)?;
            if !stored.mentions.is_empty()
                && let Json::Object(o) = &mut line
            {
                o.insert("mentions".into(), Json::from(stored.mentions));
            }
            return Ok(line);
        }
        SOURCE => serde_json::to_value(Kept::Source(
            serde_json::from_value::<SourceRecord>(value).map_err(shape)?,
        )),
        FACT_SUPPORT => {
            #[derive(Deserialize)]
            struct Stored {
                fact: String,
                origin: String,
                chunk: i64,
                #[serde(default)]
                text: Option<String>,
            }
            let stored: Stored = serde_json::from_value(value).map_err(shape)?;
            let fact: Fact = serde_json::from_str(&stored.fact).map_err(shape)?;
            let chunk = match crate::supports::support_of(&stored.origin, stored.chunk) {
                Some(Support::Import) => None,
                Some(Support::Chunk(c)) => Some(MergeChunk {
                    source: c.source.source,
                    source_id: c.source.source_id,
                    position: c.chunk,
                }),
                None => {
                    return Err(StoreError::Query(format!(
                        "support {key} has an origin kbq does not write"
                    )));
                }
            };
            serde_json::to_value(Kept::Support(KeptSupport {
                fact,
                chunk,
                text: stored.text,
            }))
        }
        EXTRACTION => {
            let Json::Object(mut o) = value else {
                return Err(StoreError::Query(format!(
                    "extraction {key} is not a record"
                )));
            };
            serde_json::to_value(Kept::Extraction(KeptExtraction {
                key: key.to_string(),
                answer: o.remove("answer").unwrap_or(Json::Null),
            }))
        }
        _ => {
            let Json::Object(mut o) = value else {
                return Err(StoreError::Query(format!("memory {key} is not a record")));
            };
            o.insert("id".into(), Json::from(key));
            serde_json::to_value(Kept::Memory(
                serde_json::from_value::<KeptMemory>(Json::Object(o)).map_err(shape)?,
            ))
        }
    };
    line.map_err(shape)
}

/// The record key of a row, as the next page starts after it.
fn key_of(row: &serde_json::Map<String, Json>) -> Option<RecordIdKey> {
    key_from(row.get("key")?)
}

/// A record key read as JSON: a string, an integer, or an array of them (a support's).
fn key_from(key: &Json) -> Option<RecordIdKey> {
    match key {
        Json::String(s) => Some(RecordIdKey::String(s.clone())),
        Json::Number(n) => n.as_i64().map(RecordIdKey::Number),
        Json::Array(parts) => {
            let parts = parts
                .iter()
                .map(|p| match p {
                    Json::String(s) => Some(s.clone().into_value()),
                    Json::Number(n) => n.as_i64().map(SurrealValue::into_value),
                    _ => None,
                })
                .collect::<Option<Vec<Value>>>()?;
            Some(RecordIdKey::Array(parts.into()))
        }
        _ => None,
    }
}

impl KnowledgeBase {
    /// Writes this knowledge base (or, with `database`, that database of its namespace, on a
    /// session of this one's connection, without opening a knowledge base over it) to `sink`
    /// as NDJSON: entities, relationships, documents, then sources, supports, kept answers
    /// and memories, and an `end` line. Every line comes from one transaction. Returns what
    /// it wrote; fails if the store fails or `sink` is dropped.
    pub async fn export(
        &self,
        database: Option<&str>,
        sink: mpsc::Sender<ExportEvent>,
    ) -> Result<ExportCounts> {
        let c = self.connection().await?;
        let session = c.db.clone();
        if let Some(database) = database {
            session
                .use_database(&self.config().namespace, database)
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        }
        let snapshot = session
            .snapshot()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let written = self.export_from(&snapshot, &sink).await;
        snapshot.end().await;
        written
    }

    async fn export_from(
        &self,
        snapshot: &Snapshot,
        sink: &mpsc::Sender<ExportEvent>,
    ) -> Result<ExportCounts> {
        let gone = || StoreError::Unavailable("the export's reader went away".into());
        let totals = table_counts(snapshot).await?;
        sink.send(ExportEvent::Totals(totals))
            .await
            .map_err(|_| gone())?;
        let mut written = ExportCounts::default();
        for (table, fields) in TABLES {
            if count_in(totals, table) == 0 {
                continue;
            }
            let sql =
                format!("SELECT meta::id(id) AS key, {fields} FROM $range LIMIT {EXPORT_PAGE}");
            let mut after: Option<RecordIdKey> = None;
            loop {
                let range = RecordIdKeyRange {
                    start: after.take().map_or(Bound::Unbounded, Bound::Excluded),
                    end: Bound::Unbounded,
                };
                let range = RecordId::new(table, RecordIdKey::Range(Box::new(range)));
                let mut resp = snapshot
                    .query(
                        &sql,
                        obj([("range", range.into_value())]),
                        self.config().query_timeout,
                    )
                    .await?;
                let rows: Vec<Json> = resp.take(0).map_err(|e| self.statement_error(e))?;
                let n = rows.len();
                let mut bytes = Vec::with_capacity(n * 256);
                for r in rows {
                    let Json::Object(mut r) = r else {
                        return Err(StoreError::Query(format!("a {table} row is not a record")));
                    };
                    after = key_of(&r);
                    let key = match r.remove("key") {
                        Some(Json::String(s)) => s,
                        Some(other) => other.to_string(),
                        None => String::new(),
                    };
                    serde_json::to_writer(&mut bytes, &line_of(table, &key, r)?)
                        .map_err(|e| StoreError::Query(e.to_string()))?;
                    bytes.push(b'\n');
                }
                *count_of(&mut written, table) += n as u64;
                if n > 0 {
                    sink.send(ExportEvent::Lines {
                        records: n as u64,
                        bytes,
                    })
                    .await
                    .map_err(|_| gone())?;
                }
                if n < EXPORT_PAGE || after.is_none() {
                    break;
                }
            }
        }
        let mut end = serde_json::to_vec(&Kept::End(written))
            .map_err(|e| StoreError::Query(e.to_string()))?;
        end.push(b'\n');
        sink.send(ExportEvent::Lines {
            records: 0,
            bytes: end,
        })
        .await
        .map_err(|_| gone())?;
        Ok(written)
    }

    /// Writes back what an export kept beside the graph (see [`Kept`]): sources, supports
    /// (marking the entities and relationships they support as sourced), kept answers, and
    /// memories (embedded again). Each is an upsert by its identity, so restoring twice
    /// changes nothing. The graph and documents are the import's.
    pub async fn restore(&self, kept: Vec<Kept>) -> Result<ExportCounts> {
        let mut done = ExportCounts::default();
        let mut sources = Vec::new();
        let mut supports: Vec<(Fact, Support)> = Vec::new();
        let mut texts: BTreeMap<Fact, String> = BTreeMap::new();
        let mut extractions = Vec::new();
        let mut memories = Vec::new();
        for k in kept {
            match k {
                Kept::Source(s) => sources.push(s),
                Kept::Support(s) => {
                    let support = match s.chunk {
                        None => Support::Import,
                        Some(c) => Support::Chunk(ChunkRef {
                            source: SourceKey::new(&c.source, &c.source_id),
                            chunk: c.position,
                        }),
                    };
                    if let (Some(text), Fact::Entity { name }, Support::Chunk(chunk)) =
                        (s.text, &s.fact, &support)
                    {
                        let description = Fact::Description {
                            entity: name.clone(),
                            chunk: chunk.clone(),
                        };
                        texts.insert(description.clone(), text);
                        supports.push((description, support.clone()));
                    }
                    supports.push((s.fact, support));
                    done.supports += 1;
                }
                Kept::Extraction(x) => extractions.push(x),
                Kept::Memory(m) => memories.push(m),
                Kept::End(_) => {}
            }
        }
        for batch in sources.chunks(EXPORT_PAGE) {
            self.put_source_records(batch).await?;
            done.sources += batch.len() as u64;
        }
        let sourced: Vec<Fact> = supports
            .iter()
            .filter(|(f, _)| matches!(f, Fact::Entity { .. } | Fact::Relationship { .. }))
            .map(|(f, _)| f.clone())
            .collect();
        for batch in supports.chunks(10 * EXPORT_PAGE) {
            self.add_supports(batch, &texts).await?;
        }
        for batch in sourced.chunks(EXPORT_PAGE) {
            self.mark_sourced(batch).await?;
        }
        for batch in extractions.chunks(EXPORT_PAGE) {
            let rows: Vec<Value> = batch
                .iter()
                .map(|x| {
                    row([
                        ("id", RecordId::new(EXTRACTION, x.key.as_str()).into_value()),
                        ("answer", x.answer.clone().into_value()),
                    ])
                })
                .collect();
            self.exec(
                "FOR $r IN $rows { UPSERT $r.id CONTENT { answer: $r.answer } RETURN NONE; }",
                obj([("rows", rows.into_value())]),
            )
            .await?;
            done.extractions += batch.len() as u64;
        }
        for batch in memories.chunks(MEMORY_BATCH) {
            let texts: Vec<String> = batch.iter().map(|m| m.content.clone()).collect();
            let vectors = self.embedder().embed(&texts).await?;
            let rows: Vec<Value> = batch
                .iter()
                .zip(vectors)
                .map(|(m, v)| {
                    row([
                        ("id", RecordId::new(MEMORY, m.id.as_str()).into_value()),
                        (
                            "body",
                            Value::Object(obj([
                                ("owner", m.owner.clone().into_value()),
                                ("content", m.content.clone().into_value()),
                                ("tags", m.tags.clone().into_value()),
                                ("entities", m.entities.clone().into_value()),
                                ("created_at", m.created_at.into_value()),
                                ("embedding", crate::memory::vector(v)),
                            ])),
                        ),
                    ])
                })
                .collect();
            self.exec(
                "FOR $r IN $rows { UPSERT $r.id CONTENT $r.body RETURN NONE; }",
                obj([("rows", rows.into_value())]),
            )
            .await?;
            done.memories += batch.len() as u64;
        }
        Ok(done)
    }
}

/// How many records each table an export reads holds, in `snapshot`; a table the database
/// does not have (a workspace never opened) holds none.
async fn table_counts(snapshot: &Snapshot) -> Result<ExportCounts> {
    let fields: Vec<String> = TABLES
        .iter()
        .map(|(t, _)| format!("{t}: IF $t.{t} {{ count(SELECT VALUE id FROM {t}) }} ELSE {{ 0 }}"))
        .collect();
    let sql = format!(
        "LET $t = (INFO FOR DB).tables; RETURN {{ {} }}",
        fields.join(", ")
    );
    let mut resp = snapshot
        .query(&sql, Object::new(), INDEX_LOAD_TIMEOUT)
        .await?;
    let row: Option<BTreeMap<String, u64>> = resp
        .take::<Option<Json>>(1)
        .map_err(|e| StoreError::Query(e.to_string()))?
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::Query(e.to_string()))?;
    let row = row.unwrap_or_default();
    let mut counts = ExportCounts::default();
    for (table, _) in TABLES {
        *count_of(&mut counts, table) = row.get(table).copied().unwrap_or(0);
    }
    Ok(counts)
}
