//! Graph reads: one entity, entity names, name search and traversal, each answered from the
//! in-memory [`GraphIndex`] when it is on and from SurrealDB otherwise, and the loading of that
//! index. [`traverse_in_db`](KnowledgeBase::traverse_in_db) walks with the same `Walk` as
//! `GraphIndex::traverse` in [`graph`](mod@crate::graph), one query per level, so that both paths
//! give the same answer. Its own file because it is the one place that knows both read paths.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use surrealdb::types::{Object, SurrealValue, Value};

use crate::db::{Connected, RELATIONSHIP_FIELDS, entity_record_id, obj};
use crate::error::{Result, StoreError};
use crate::graph::{
    self, Direction, GraphIndex, Reach, Reached, Traversal, TraversalJson, TraversalQuery, Walk,
    candidate_order,
};
use crate::kb::{KnowledgeBase, WRITE_BATCH};
use crate::model::table::{ENTITY, RELATES};
use crate::model::{Entity, EntityRef, Relationship, keys};
use crate::names;
use crate::parts::{self, Parts};

/// An entity row as [`Entity`] reads it; the id is filled in from the name (see [`with_id`]).
pub(crate) const ENTITY_FIELDS: &str = "name, entity_type, properties, '' AS id";

/// The fields of a row that selects plain fields, to be taken out one by one.
struct Row(surrealdb::types::Object);

impl Row {
    fn new(row: Value) -> Result<Row> {
        match row {
            Value::Object(o) => Ok(Row(o)),
            other => Err(unexpected(format!(
                "a row that is not an object: {other:?}"
            ))),
        }
    }

    /// The string `field`, moved out of the row.
    fn string(&mut self, field: &str) -> Result<String> {
        match self.0.remove(field) {
            Some(Value::String(s)) => Ok(s),
            other => Err(unexpected(format!("{field} is {other:?}"))),
        }
    }

    /// The object `field` as JSON; none when it is absent.
    fn properties(&mut self) -> Result<serde_json::Map<String, serde_json::Value>> {
        match self.0.remove("properties") {
            None | Some(Value::None) | Some(Value::Null) => Ok(Default::default()),
            Some(v) => match serde_json::Value::from_value(v) {
                Ok(serde_json::Value::Object(map)) => Ok(map),
                other => Err(unexpected(format!("properties is {other:?}"))),
            },
        }
    }
}

fn unexpected(what: String) -> StoreError {
    StoreError::Query(format!("unexpected row shape: {what}"))
}

/// Entity rows ([`ENTITY_FIELDS`]) decoded from SurrealDB's values, their strings moved
/// rather than copied and without going through JSON: what loading the graph index reads.
fn entities_from(rows: Vec<Value>) -> Result<Vec<Entity>> {
    rows.into_iter()
        .map(|row| {
            let mut row = Row::new(row)?;
            Ok(Entity {
                id: String::new(),
                name: row.string("name")?,
                entity_type: row.string("entity_type")?,
                properties: row.properties()?,
            })
        })
        .collect()
}

/// Relationship rows ([`RELATIONSHIP_FIELDS`]), as [`entities_from`] decodes entities.
fn relationships_from(rows: Vec<Value>) -> Result<Vec<Relationship>> {
    rows.into_iter()
        .map(|row| {
            let mut row = Row::new(row)?;
            Ok(Relationship {
                source_name: row.string("source_name")?,
                target_name: row.string("target_name")?,
                relationship_type: row.string("relationship_type")?,
                properties: row.properties()?,
            })
        })
        .collect()
}

impl KnowledgeBase {
    /// Rebuilds the graph index (when there is one) from the entities and relationships
    /// SurrealDB holds.
    pub(crate) async fn load_graph_index(&self, c: &Connected, parts: &Parts<'_>) -> Result<()> {
        let Some(index) = self.graph_index() else {
            return Ok(());
        };
        let started = Instant::now();
        // Both tables at once: each is read in parts on tasks of their own.
        let (entities, rels) = futures::try_join!(
            parts::read_table(c, ENTITY, 'e', ENTITY_FIELDS, entities_from, parts),
            parts::read_table(
                c,
                RELATES,
                'r',
                RELATIONSHIP_FIELDS,
                relationships_from,
                parts
            ),
        )?;
        let read_ms = started.elapsed().as_millis() as u64;
        let numbers = self.numbers().clone();
        let built = tokio::task::spawn_blocking(move || {
            GraphIndex::build_numbered(
                numbers,
                entities.into_iter().flatten().collect(),
                rels.into_iter().flatten().collect(),
            )
        })
        .await
        .map_err(|e| StoreError::Query(format!("building the graph index failed: {e}")))?;
        parts.finished();
        tracing::info!(
            entities = built.entity_count(),
            relationships = built.relationship_count(),
            read_ms,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "graph index built"
        );
        *index.write() = built;
        self.bump_generation();
        Ok(())
    }

    /// True when the store holds no entity. Reads one key, not the table: `counts` would
    /// read every record of a large store.
    pub async fn has_no_entities(&self) -> Result<bool> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().entity_count() == 0);
        }
        let keys: Vec<String> = self
            .run(
                &format!("SELECT VALUE meta::id(id) FROM {ENTITY} LIMIT 1"),
                Object::new(),
            )
            .await?;
        Ok(keys.is_empty())
    }

    /// Every entity name.
    pub async fn entity_names(&self) -> Result<Vec<String>> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().names());
        }
        self.run(&format!("SELECT VALUE name FROM {ENTITY}"), Object::new())
            .await
    }

    /// The names among `names` that are not entities of the store.
    pub async fn missing_entities(&self, names: &[String]) -> Result<Vec<String>> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            let index = index.read();
            return Ok(names
                .iter()
                .filter(|n| !index.contains(n))
                .cloned()
                .collect());
        }
        let mut missing = Vec::new();
        for chunk in names.chunks(WRITE_BATCH) {
            let found: Vec<String> = self
                .run(
                    "SELECT VALUE name FROM $ids",
                    obj([("ids", entity_ids(chunk))]),
                )
                .await?;
            let found: std::collections::HashSet<&str> = found.iter().map(String::as_str).collect();
            missing.extend(
                chunk
                    .iter()
                    .filter(|n| !found.contains(n.as_str()))
                    .cloned(),
            );
        }
        Ok(missing)
    }

    /// One entity by exact name.
    pub async fn entity(&self, name: &str) -> Result<Option<EntityRef>> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().entity(name));
        }
        let rows = self.entities_by_name(&[name.to_string()]).await?;
        Ok(rows.into_iter().next().map(with_id))
    }

    /// The stored entities among `names` (missing ones are left out), in batches.
    pub(crate) async fn entities_by_name(&self, names: &[String]) -> Result<Vec<Entity>> {
        let mut found = Vec::with_capacity(names.len());
        for chunk in names.chunks(WRITE_BATCH) {
            let rows: Vec<Entity> = self
                .run(
                    &format!("SELECT {ENTITY_FIELDS} FROM $ids"),
                    obj([("ids", entity_ids(chunk))]),
                )
                .await?;
            found.extend(rows);
        }
        Ok(found)
    }

    /// Entities whose name contains `query`, case-insensitively; exact, then prefix, then other.
    pub async fn search_entities(
        &self,
        query: &str,
        entity_type: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EntityRef>> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().search(query, entity_type, limit));
        }
        let q = names::fold_case(query);
        let rows: Vec<Entity> = self
            .run(
                &format!("SELECT {ENTITY_FIELDS} FROM {ENTITY} WHERE string::contains(name_lower, $q) AND ($type = NONE OR entity_type = $type)"),
                obj([
                    ("q", q.clone().into_value()),
                    ("type", entity_type.map_or(Value::None, |t| Value::String(t.to_string()))),
                ]),
            )
            .await?;
        let hits = rows
            .into_iter()
            .filter_map(|e| {
                let rank = names::search_rank(&names::fold_case(&e.name), &q)?;
                Some((rank, with_id(e)))
            })
            .collect();
        Ok(graph::rank_hits(hits, limit))
    }

    /// The entities that go by `acronym` (lower case: "ibm" for "International Business
    /// Machines"), in name order, at most `limit`: from the graph index, whose map of
    /// acronyms is built at the first call. Without a graph index (`store.graph_index =
    /// false`), none: the store keeps no names by their initials.
    pub async fn entities_by_acronym(&self, acronym: &str, limit: usize) -> Result<Vec<EntityRef>> {
        match self.graph_index() {
            Some(index) => {
                self.connection().await?;
                Ok(index.read().by_acronym(acronym, limit))
            }
            None => Ok(Vec::new()),
        }
    }

    /// Walks the graph from `query.start`: from the index when it is on, else one SurrealDB
    /// graph query per level. Both give the same answer.
    pub async fn traverse(&self, query: &TraversalQuery) -> Result<Traversal> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().traverse(query));
        }
        self.traverse_in_db(query).await
    }

    /// [`traverse`](Self::traverse)'s answer as JSON, for an answer that only writes it out
    /// (see [`TraversalJson`]).
    pub async fn traverse_json(&self, query: &TraversalQuery) -> Result<TraversalJson> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().traverse_json(query));
        }
        Ok(TraversalJson::of(&self.traverse_in_db(query).await?))
    }

    /// The entities [`traverse`](Self::traverse) reaches, as graph documents need them (see
    /// [`Reach`]): the start entity, then those of `entity_type` (any when `None`).
    pub async fn documents_walk(
        &self,
        query: &TraversalQuery,
        entity_type: Option<&str>,
    ) -> Result<Reach> {
        if let Some(index) = self.graph_index() {
            self.connection().await?;
            return Ok(index.read().reach(query, entity_type));
        }
        let walk = self.traverse_in_db(query).await?;
        Ok(Reach::of(&walk.entities, entity_type))
    }

    /// The in-memory walk alone, without the async call or the connection check: what the
    /// benchmark reports as the bare walk. `None` when the index is off.
    pub fn traverse_indexed(&self, query: &TraversalQuery) -> Option<Traversal> {
        self.graph_index().map(|index| index.read().traverse(query))
    }

    /// The SurrealDB read path of [`traverse`](Self::traverse), public so that tests and
    /// benchmarks can compare the two paths on one store.
    pub async fn traverse_in_db(&self, query: &TraversalQuery) -> Result<Traversal> {
        #[derive(serde::Deserialize)]
        struct Level {
            name: String,
            #[serde(default)]
            outs: Vec<Relationship>,
            #[serde(default)]
            ins: Vec<Relationship>,
        }
        if self
            .entities_by_name(std::slice::from_ref(&query.start))
            .await?
            .is_empty()
        {
            return Ok(Traversal::default());
        }
        let types = query.relationship_types.clone();
        let outs = format!("->{RELATES}.{{{RELATIONSHIP_FIELDS}}} AS outs");
        let ins = format!("<-{RELATES}.{{{RELATIONSHIP_FIELDS}}} AS ins");
        let sql = match query.direction {
            Direction::Out => format!("SELECT name, {outs} FROM $ids"),
            Direction::In => format!("SELECT name, {ins} FROM $ids"),
            Direction::Both => format!("SELECT name, {outs}, {ins} FROM $ids"),
        };
        let mut walk: Walk<String, String> =
            Walk::new(query.start.clone(), query.limit, query.depth);
        let mut rels: HashMap<String, Relationship> = HashMap::new();
        'walk: while let Some(level) = walk.next_level() {
            let names: Vec<String> = walk.slots[level].iter().map(|s| s.0.clone()).collect();
            let rows: Vec<Level> = self.run(&sql, obj([("ids", entity_ids(&names))])).await?;
            let mut by_name: HashMap<String, Level> =
                rows.into_iter().map(|l| (l.name.clone(), l)).collect();
            for name in &names {
                let Some(level) = by_name.remove(name) else {
                    continue;
                };
                let mut candidates: Vec<(String, bool, Relationship)> = Vec::new();
                for r in level.outs {
                    candidates.push((r.target_name.clone(), true, r));
                }
                for r in level.ins {
                    candidates.push((r.source_name.clone(), false, r));
                }
                candidates.retain(|(_, _, r)| {
                    types
                        .as_ref()
                        .is_none_or(|t| t.contains(&r.relationship_type))
                });
                candidates.sort_by(|a, b| {
                    candidate_order(
                        (&a.0, &a.2.relationship_type, a.1),
                        (&b.0, &b.2.relationship_type, b.1),
                    )
                });
                for (neighbour, _, r) in candidates {
                    let key =
                        keys::relationship(&r.source_name, &r.target_name, &r.relationship_type);
                    let go_on = walk.offer(&neighbour, &key);
                    rels.entry(key).or_insert(r);
                    if !go_on {
                        break 'walk;
                    }
                }
            }
        }
        let names: Vec<String> = walk.slots.iter().map(|s| s.0.clone()).collect();
        let mut entities: HashMap<String, Entity> = self
            .entities_by_name(&names)
            .await?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        let mut reached = Vec::with_capacity(walk.slots.len());
        for (name, depth, via) in &walk.slots {
            // An entity deleted while the walk ran is left out rather than invented.
            let Some(e) = entities.remove(name) else {
                continue;
            };
            reached.push(Reached {
                entity: with_id(e),
                depth: *depth,
                via: via
                    .as_ref()
                    .and_then(|k| rels.get(k))
                    .map(|r| Arc::from(r.relationship_type.as_str())),
            });
        }
        Ok(Traversal {
            entities: reached,
            relationships: walk
                .edges
                .iter()
                .filter_map(|k| rels.get(k).cloned().map(Arc::new))
                .collect(),
            truncated: walk.truncated,
        })
    }
}

fn with_id(mut e: Entity) -> EntityRef {
    e.id = keys::entity_id(&e.name);
    Arc::new(e)
}

fn entity_ids(names: &[String]) -> Value {
    names
        .iter()
        .map(|n| entity_record_id(n))
        .collect::<Vec<_>>()
        .into_value()
}
