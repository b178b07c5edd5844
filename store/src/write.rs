//! Writes: entity, relationship and document upserts, the pipelined INSERTs they share, and
//! deletes, with the rows they write. Each write updates the in-memory indexes once its
//! statement has succeeded. Its own file because writing is one concern with one tuning (rows
//! per statement, statements in flight) apart from connecting and reading.

use std::sync::Arc;

use parking_lot::RwLockWriteGuard;
use serde_json::Value as Json;
use surrealdb::types::{RecordId, SurrealValue, Value};
use tokio_util::task::AbortOnDropHandle;

use crate::db::{
    Connected, RELATIONSHIP_NAME_FIELDS, entity_record_id, obj, relationship_record_id, row,
    vector_bytes, write_on,
};
use crate::doc_index::DocEntry;
use crate::embed::Embedder;
use crate::error::{Result, StoreError};
use crate::graph::GraphIndex;
use crate::kb::KnowledgeBase;
use crate::model::table::{self, DOCUMENT, ENTITY, EXTRACTION, RELATES};
use crate::model::{Entity, NewDocument, NewEntity, NewRelationship, Relationship, keys};
use crate::names;
use crate::text::Analysed;
use crate::vectors::DocTags;

/// How many records go into one INSERT statement. SurrealDB takes a savepoint per record of a
/// statement, copying the statement's writes so far, so a record's cost grows with its
/// statement's size: 100 rows wrote entities three times as fast as 1000 (docs/benchmarks.md).
pub(crate) const INSERT_ROWS: usize = 100;

/// How many written records go into the graph index per hold of its write lock; between
/// holds a waiting reader goes first. A statement's 100 new entities held the lock for up to
/// 2.5 ms (`kbq gen` names in no order) and 5 ms (package paths), every traversal and search
/// waiting; 16 hold it for a quarter of that, each new entity costing a quarter more than in a
/// batch of 100 and less than one at a time (`benches/names.rs`).
pub(crate) const LOCK_BATCH: usize = 16;

/// How many INSERT statements of one batch are written at once (see
/// [`KnowledgeBase::insert_pipelined_on`]): one per core, at least two, at most eight. With one,
/// the embedded engine used one core (user time equal to wall time); two took the benchmark
/// import from 136.9 s to 76.2 s on two cores, and four were no faster than two
/// (docs/benchmarks.md).
fn writers() -> usize {
    static WRITERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WRITERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(2, usize::from)
            .clamp(2, 8)
    })
}

/// What [`KnowledgeBase::delete_entity`] did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EntityDeletion {
    pub deleted: bool,
    /// Relationships removed with it.
    pub relationships: usize,
    /// Documents whose link to it was removed.
    pub documents_unlinked: usize,
}

impl KnowledgeBase {
    /// Inserts or updates entities by name. Records must be valid (see `NewEntity::validate`).
    pub async fn upsert_entities(&self, entities: &[NewEntity]) -> Result<()> {
        self.write_entities(entities, false).await
    }

    /// [`upsert_entities`](Self::upsert_entities) for entities whose supports are recorded
    /// (by an ingest): marked as [`mark_sourced`](Self::mark_sourced) does, in the same write.
    pub async fn upsert_sourced_entities(&self, entities: &[NewEntity]) -> Result<()> {
        self.write_entities(entities, true).await
    }

    async fn write_entities(&self, entities: &[NewEntity], sourced: bool) -> Result<()> {
        self.upsert_graph(
            &format!("INSERT INTO {ENTITY}"),
            "entity_type = $input.entity_type, properties = $input.properties",
            entities,
            sourced,
            || self.bump_generation(),
        )
        .await
    }

    /// Inserts or updates relationships by (source, target, type). Both ends must exist.
    pub async fn upsert_relationships(&self, rels: &[NewRelationship]) -> Result<()> {
        self.write_relationships(rels, false).await
    }

    /// [`upsert_relationships`](Self::upsert_relationships) for relationships whose supports
    /// are recorded, marked as [`upsert_sourced_entities`](Self::upsert_sourced_entities) does.
    pub async fn upsert_sourced_relationships(&self, rels: &[NewRelationship]) -> Result<()> {
        self.write_relationships(rels, true).await
    }

    async fn write_relationships(&self, rels: &[NewRelationship], sourced: bool) -> Result<()> {
        self.upsert_graph(
            &format!("INSERT RELATION INTO {RELATES}"),
            "properties = $input.properties",
            rels,
            sourced,
            || {},
        )
        .await
    }

    /// Writes graph records with `insert` (see [`insert_pipelined_on`](Self::insert_pipelined_on)),
    /// a record already there getting `updates`; with `sourced`, every record is marked
    /// `sourced: true` as well. Each statement's records go into the graph index once it has
    /// succeeded, then `then` is called.
    async fn upsert_graph<R: GraphRecord>(
        &self,
        insert: &str,
        updates: &str,
        records: &[R],
        sourced: bool,
        then: impl Fn(),
    ) -> Result<()> {
        let mark = if sourced { ", sourced = true" } else { "" };
        let sql = format!("{insert} $rows ON DUPLICATE KEY UPDATE {updates}{mark} RETURN NONE");
        let c = self.connection().await?;
        self.insert_pipelined_on(
            &c,
            &sql,
            records,
            |chunk: Vec<R>| async move {
                let rows = chunk
                    .iter()
                    .map(|r| {
                        let mut row = r.row();
                        if sourced && let Value::Object(o) = &mut row {
                            o.insert("sourced".to_string(), true.into_value());
                        }
                        row
                    })
                    .collect();
                Ok((rows, chunk.into_iter().map(R::indexed).collect::<Vec<_>>()))
            },
            |written: Vec<R::Indexed>| {
                if let Some(index) = self.graph_index() {
                    let mut index = index.write();
                    let mut written = written.into_iter().peekable();
                    while written.peek().is_some() {
                        R::put_all(&mut index, written.by_ref().take(LOCK_BATCH).collect());
                        // Lets a waiting reader in between parts, if there is one.
                        RwLockWriteGuard::bump(&mut index);
                    }
                }
                then();
            },
        )
        .await
    }

    /// Inserts or updates documents by (source, source_id), embedding each.
    pub async fn upsert_documents(&self, docs: &[NewDocument]) -> Result<()> {
        let embedder = self.embedder().clone();
        let c = self.connection().await?;
        self.insert_pipelined_on(
            &c,
            &format!("INSERT INTO {DOCUMENT} $rows ON DUPLICATE KEY UPDATE title = $input.title, content = $input.content, content_type = $input.content_type, url = $input.url, entity_name = $input.entity_name, entity = $input.entity, mentions = $input.mentions, embedding = $input.embedding RETURN NONE"),
            docs,
            move |chunk: Vec<NewDocument>| document_rows(embedder.clone(), chunk),
            |written: Vec<DocEntry>| self.index_documents(written),
        )
        .await
    }

    /// As [`insert_pipelined_on`](Self::insert_pipelined_on) of rows already built.
    pub(crate) async fn insert_rows_on(
        &self,
        c: &Connected,
        sql: &str,
        rows: &[Value],
    ) -> Result<()> {
        self.insert_pipelined_on(c, sql, rows, |rows| async move { Ok((rows, ())) }, |()| {})
            .await
    }

    /// Writes `items`, on `c`, in INSERT statements of [`INSERT_ROWS`] rows: `sql` binds them as
    /// `$rows`. Up to [`writers`] statements are in flight at once, each built (by `build`)
    /// and written on a task of its own: SurrealDB's embedded engine runs a statement inside
    /// the future that awaits it, so statements awaited by one task would take turns on one
    /// thread. `written` gets what `build` returned beside the rows, in the order of `items`,
    /// once their statement has succeeded.
    pub(crate) async fn insert_pipelined_on<T, X, F, Fut>(
        &self,
        c: &Connected,
        sql: &str,
        items: &[T],
        build: F,
        mut written: impl FnMut(X),
    ) -> Result<()>
    where
        T: Clone + Send + 'static,
        X: Send + 'static,
        F: Fn(Vec<T>) -> Fut,
        Fut: std::future::Future<Output = Result<(Vec<Value>, X)>> + Send + 'static,
    {
        // Guarded as one statement: its parts run on tasks of their own.
        self.guarded(c, async {
            let sql: Arc<str> = Arc::from(sql);
            let mut chunks = items.chunks(INSERT_ROWS);
            let mut in_flight = std::collections::VecDeque::new();
            loop {
                while in_flight.len() < writers() {
                    let Some(chunk) = chunks.next() else { break };
                    let rows = build(chunk.to_vec());
                    let db = c.db.clone();
                    let sql = sql.clone();
                    let timeout = self.config().query_timeout;
                    // Aborted when dropped: a write whose caller has gone stops with it, rather
                    // than landing in the database after the caller stopped updating the indexes.
                    in_flight.push_back(AbortOnDropHandle::new(tokio::spawn(async move {
                        let (rows, extra) = rows.await?;
                        let vars = obj([("rows", rows.into_value())]);
                        write_on(&db, &sql, vars, timeout).await?;
                        Ok::<X, StoreError>(extra)
                    })));
                }
                let Some(task) = in_flight.pop_front() else {
                    return Ok(());
                };
                match task.await {
                    Ok(Ok(extra)) => written(extra),
                    Ok(Err(e)) => return Err(e),
                    Err(e) => return Err(StoreError::Query(format!("writing rows failed: {e}"))),
                }
            }
        })
        .await
    }

    /// Every relationship at either end of the entity `name`, as (source, target, type),
    /// sorted, each once; `None` when there is no such entity. Read along the entity's own
    /// edges, not by a scan of the relationships.
    pub(crate) async fn relationships_at(
        &self,
        name: &str,
    ) -> Result<Option<Vec<(String, String, String)>>> {
        #[derive(serde::Deserialize)]
        struct EdgeRow {
            source_name: String,
            target_name: String,
            relationship_type: String,
        }
        #[derive(serde::Deserialize)]
        struct Row {
            #[serde(default)]
            outs: Vec<EdgeRow>,
            #[serde(default)]
            ins: Vec<EdgeRow>,
        }
        let rows: Vec<Row> = self
            .run(
                &format!("SELECT ->{RELATES}.{{{RELATIONSHIP_NAME_FIELDS}}} AS outs, <-{RELATES}.{{{RELATIONSHIP_NAME_FIELDS}}} AS ins FROM $ids"),
                obj([("ids", vec![entity_record_id(name)].into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next().map(|row| {
            let mut edges: Vec<(String, String, String)> = row
                .outs
                .into_iter()
                .chain(row.ins)
                .map(|e| (e.source_name, e.target_name, e.relationship_type))
                .collect();
            edges.sort();
            edges.dedup();
            edges
        }))
    }

    /// Deletes an entity, every relationship touching it, and the link of its documents to it
    /// (the documents stay, with `entity_name` null). Deleting an entity that does not exist
    /// changes nothing. Each step is its own write, in an order that a retry completes.
    pub async fn delete_entity(&self, name: &str) -> Result<EntityDeletion> {
        crate::model::check_name("name", name)?;
        let id = entity_record_id(name);
        let Some(edges) = self.relationships_at(name).await? else {
            return Ok(EntityDeletion::default());
        };
        let edge_ids: Vec<RecordId> = edges
            .iter()
            .map(|(s, d, t)| relationship_record_id(s, d, t))
            .collect();
        // The model's kept summary of its descriptions goes with it.
        let summary = RecordId::new(EXTRACTION, keys::summary(name));
        self.exec(
            "DELETE $edges; DELETE $id; DELETE $summary",
            obj([
                ("edges", edge_ids.into_value()),
                ("id", id.into_value()),
                ("summary", summary.into_value()),
            ]),
        )
        .await?;
        let unlinked: Vec<String> = self
            .run(
                &format!("UPDATE {DOCUMENT} SET entity_name = NONE, entity = NONE WHERE entity_name = $name RETURN VALUE meta::id(id)"),
                obj([("name", name.to_string().into_value())]),
            )
            .await?;
        // The documents that mention it (chunks of ingested sources) are found in the
        // keyword index, which holds every document's links: `mentions` has no index in
        // SurrealDB.
        let mentioning: Vec<RecordId> = self
            .text()
            .read()
            .mentioning(name)
            .iter()
            .map(|key| RecordId::new(DOCUMENT, &**key))
            .collect();
        let unmentioned: Vec<String> = if mentioning.is_empty() {
            Vec::new()
        } else {
            self.run(
                "UPDATE $ids SET mentions -= $name RETURN VALUE meta::id(id)",
                obj([
                    ("ids", mentioning.into_value()),
                    ("name", name.to_string().into_value()),
                ]),
            )
            .await?
        };
        if let Some(index) = self.graph_index() {
            index.write().remove_entity(name);
        }
        {
            let mut vectors = self.vectors().write();
            let mut text = self.text().write();
            let mut documents = self.held_documents().map(|d| d.write());
            for key in &unlinked {
                vectors.set_entity(key, None);
                text.set_entity(key, None);
                if let Some(documents) = documents.as_deref_mut() {
                    documents.unlink(key);
                }
            }
            for key in &unmentioned {
                vectors.unmention(key, name);
                text.unmention(key, name);
                if let Some(documents) = documents.as_deref_mut() {
                    documents.unmention(key, name);
                }
            }
        }
        self.bump_generation();
        Ok(EntityDeletion {
            deleted: true,
            relationships: edges.len(),
            documents_unlinked: unlinked.len(),
        })
    }

    /// Deletes one document by id (`document:<key>` or the key, [`DOCUMENT_ID_PATTERN`]);
    /// false when there was none.
    pub async fn delete_document(&self, id: &str) -> Result<bool> {
        let Some(key) = document_key(id) else {
            return Err(StoreError::invalid(
                "id",
                "must be a document id: document:d followed by 32 hex digits",
            ));
        };
        let rid = RecordId::new(table::DOCUMENT, key);
        let found: Vec<String> = self
            .run(
                "SELECT VALUE meta::id(id) FROM $ids",
                obj([("ids", vec![rid.clone()].into_value())]),
            )
            .await?;
        if found.is_empty() {
            return Ok(false);
        }
        self.exec("DELETE $id", obj([("id", rid.into_value())]))
            .await?;
        self.unindex_documents(&[key]);
        Ok(true)
    }
}

/// What the entity and relationship upserts share: each record is a row of its INSERT and,
/// once written, a part of the graph index.
trait GraphRecord: Clone + Send + 'static {
    /// What the graph index keeps of the record.
    type Indexed: Send + 'static;
    fn row(&self) -> Value;
    fn indexed(self) -> Self::Indexed;
    /// Puts written records into the index.
    fn put_all(index: &mut GraphIndex, indexed: Vec<Self::Indexed>);
}

impl GraphRecord for NewEntity {
    type Indexed = Entity;

    fn row(&self) -> Value {
        row([
            ("id", entity_record_id(&self.name).into_value()),
            ("name", self.name.clone().into_value()),
            ("name_lower", names::fold_case(&self.name).into_value()),
            ("entity_type", self.entity_type.clone().into_value()),
            ("properties", json(Json::Object(self.properties.clone()))),
        ])
    }

    fn indexed(self) -> Entity {
        self.into_entity()
    }

    fn put_all(index: &mut GraphIndex, entities: Vec<Entity>) {
        index.upsert_entities(entities);
    }
}

impl GraphRecord for NewRelationship {
    type Indexed = Relationship;

    fn row(&self) -> Value {
        row([
            (
                "id",
                relationship_record_id(
                    &self.source_name,
                    &self.target_name,
                    &self.relationship_type,
                )
                .into_value(),
            ),
            ("in", entity_record_id(&self.source_name).into_value()),
            ("out", entity_record_id(&self.target_name).into_value()),
            ("source_name", self.source_name.clone().into_value()),
            ("target_name", self.target_name.clone().into_value()),
            (
                "relationship_type",
                self.relationship_type.clone().into_value(),
            ),
            ("properties", json(Json::Object(self.properties.clone()))),
        ])
    }

    fn indexed(self) -> Relationship {
        self.into_relationship()
    }

    fn put_all(index: &mut GraphIndex, rels: Vec<Relationship>) {
        for r in rels {
            index.upsert_relationship(r);
        }
    }
}

/// The rows of `docs`, embedded, and each document as the in-process indexes hold it.
async fn document_rows(
    embedder: Arc<dyn Embedder>,
    docs: Vec<NewDocument>,
) -> Result<(Vec<Value>, Vec<DocEntry>)> {
    let texts: Vec<String> = docs.iter().map(NewDocument::embedding_text).collect();
    let vectors = embedder.embed(&texts).await?;
    let mut rows = Vec::with_capacity(docs.len());
    let mut keyed = Vec::with_capacity(docs.len());
    for (d, v) in docs.into_iter().zip(vectors) {
        let key = keys::document(&d.source, &d.source_id);
        let entity = match &d.entity_name {
            Some(n) => entity_record_id(n).into_value(),
            None => Value::None,
        };
        let text = Analysed::new(&d.title, &d.content);
        let document = d.clone().into_document();
        let tags = DocTags::of(&document);
        rows.push(row([
            (
                "id",
                RecordId::new(table::DOCUMENT, key.as_str()).into_value(),
            ),
            ("title", d.title.into_value()),
            ("content", d.content.into_value()),
            ("source", d.source.into_value()),
            ("source_id", d.source_id.into_value()),
            ("content_type", d.content_type.into_value()),
            ("url", d.url.map_or(Value::Null, Value::String)),
            (
                "entity_name",
                d.entity_name.map_or(Value::Null, Value::String),
            ),
            ("entity", entity),
            (
                "mentions",
                if d.mentions.is_empty() {
                    Value::None
                } else {
                    d.mentions.into_value()
                },
            ),
            ("embedding", vector_bytes(&v)),
        ]));
        keyed.push(DocEntry {
            key,
            vector: Some(v),
            tags,
            text,
            document,
        });
    }
    Ok((rows, keyed))
}

fn json(v: Json) -> Value {
    v.into_value()
}

/// A document id as `delete_document` takes it, as a JSON Schema `pattern`: `document:` (or
/// nothing), `d`, and 32 hex digits.
pub const DOCUMENT_ID_PATTERN: &str = "^(document:)?d[0-9A-Fa-f]{32}$";

/// The key of a document id (`document:<key>` or the key), when it has a document key's
/// shape ([`DOCUMENT_ID_PATTERN`]).
fn document_key(id: &str) -> Option<&str> {
    let key = id
        .strip_prefix(DOCUMENT)
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or(id);
    let valid =
        key.len() == 33 && key.starts_with('d') && key[1..].bytes().all(|b| b.is_ascii_hexdigit());
    valid.then_some(key)
}

#[cfg(test)]
mod document_id_tests {
    use super::*;

    /// The pattern accepts exactly the ids `document_key` does.
    #[test]
    fn the_document_id_pattern_is_document_key() {
        let pattern = regex::Regex::new(DOCUMENT_ID_PATTERN).unwrap();
        let hex = "0123456789abcdef0123456789ABCDEF";
        let mut ids = vec![
            String::new(),
            "d".into(),
            format!("d{hex}"),
            format!("document:d{hex}"),
            format!("document:d{hex}0"),
            format!("d{}", &hex[1..]),
            format!("e{hex}"),
            format!("document:e{hex}"),
            format!("documents:d{hex}"),
            format!("document:document:d{hex}"),
            format!(":d{hex}"),
            format!("d{hex}\n"),
        ];
        for c in (0..=0x2000).filter_map(char::from_u32) {
            ids.push(format!("d{}{c}", &hex[1..]));
            ids.push(format!("document{c}d{hex}"));
        }
        for id in ids {
            assert_eq!(document_key(&id).is_some(), pattern.is_match(&id), "{id:?}");
        }
    }
}
