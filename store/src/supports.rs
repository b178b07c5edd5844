//! Supports: which chunk of which source (or an import) gave each fact of the graph.
//!
//! Two questions are asked of them: who supports a fact (is it still supported once a
//! source goes? what did the chunks say of an entity?) and what a source supports (what do
//! its chunks give?). Each is answered by a range of record keys, with no secondary index:
//! - `fact_support:[fact, origin, chunk]`, one row per support, answers the first: the
//!   range `[fact, NONE]..=[fact, {}]`. A chunk's support of an entity carries, as `text`,
//!   the description the chunk gave of it.
//! - `chunk_support:[origin, chunk]`, one row per chunk of a source, lists the facts the
//!   chunk supports (`facts`) and the entities it describes (`described`), as fact keys: the
//!   range `[origin, NONE]..=[origin, {}]` answers the second. An import has no such row:
//!   nothing asks what an import supports.
//! - `alias_support:[alias, entity, origin, chunk]` answers which entity a name was merged
//!   into, and lists the merges by alias.
//!
//! SurrealDB keeps a non-unique index at a cost of its own for every row written (ingestion
//! writes about fourteen supports per chunk), which is why the store held the same facts
//! in one table with three indexes before and was written several times slower.
//!
//! A fact's key is its JSON ([`fact_key`]); an origin is a source's `source` and
//! `source_id` joined by a unit separator, or `import` (with chunk -1). Writes list a fact
//! on its chunk's row before they write its support, and take a support away before they
//! unlist it, so that a job stopped half way leaves at worst a fact listed whose support is
//! missing (running the job again writes it; retracting it drops nothing) and never a
//! support that no source lists, which nothing would retract.

use std::collections::{BTreeMap, BTreeSet};

use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use surrealdb::types::{Array, Object, RecordId, SurrealValue, Value};

use crate::db::{Connected, obj, row};
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::model::table::{ALIAS_SUPPORT, CHUNK_SUPPORT, FACT_SUPPORT, META, SUPPORT};

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

/// Rows per statement when reading or changing supports by their keys.
pub(crate) const SUPPORT_BATCH: usize = 500;

/// Facts per request when asking which have a support of another origin: a statement each.
const OTHERS_BATCH: usize = 200;

const IMPORT_ORIGIN: &str = "import";

/// The fact whose support holds `fact`'s: a description's is its chunk's support of the
/// entity (the row's `text`); any other fact's is its own.
fn stored_fact(fact: &Fact) -> Fact {
    match fact {
        Fact::Description { entity, .. } => Fact::entity(entity.as_str()),
        other => other.clone(),
    }
}

/// A fact's stored key: its JSON, which serde writes in one order.
pub(crate) fn fact_key(fact: &Fact) -> String {
    serde_json::to_string(fact).expect("a fact serializes")
}

fn fact_of(key: &str) -> Result<Fact> {
    serde_json::from_str(key).map_err(|e| StoreError::Query(format!("stored fact {key}: {e}")))
}

/// The stored form of a support: its origin and chunk (-1 for an import).
pub(crate) fn origin_of(support: &Support) -> (String, i64) {
    match support {
        Support::Chunk(c) => (source_origin(&c.source), i64::from(c.chunk)),
        Support::Import => (IMPORT_ORIGIN.to_string(), -1),
    }
}

pub(crate) fn source_origin(source: &SourceKey) -> String {
    format!("{}\u{1f}{}", source.source, source.source_id)
}

/// The support an origin and chunk stand for; none for an origin kbq does not write.
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

fn key(parts: Vec<Value>) -> Array {
    Array::from(parts)
}

fn fact_support_id(fact: &str, origin: &str, chunk: i64) -> RecordId {
    RecordId::new(
        FACT_SUPPORT,
        key(vec![
            fact.to_string().into_value(),
            origin.to_string().into_value(),
            chunk.into_value(),
        ]),
    )
}

fn chunk_support_id(origin: &str, chunk: i64) -> RecordId {
    RecordId::new(
        CHUNK_SUPPORT,
        key(vec![origin.to_string().into_value(), chunk.into_value()]),
    )
}

fn alias_support_id(alias: &str, entity: &str, origin: &str, chunk: i64) -> RecordId {
    RecordId::new(
        ALIAS_SUPPORT,
        key(vec![
            alias.to_string().into_value(),
            entity.to_string().into_value(),
            origin.to_string().into_value(),
            chunk.into_value(),
        ]),
    )
}

/// Per chunk of a source (origin, chunk): fact keys, and the keys of entities described.
type ChunkLists = BTreeMap<(String, i64), (BTreeSet<String>, BTreeSet<String>)>;

/// Rows of `chunk_support` saying `lists` (to add, or to take away).
fn chunk_rows(lists: ChunkLists) -> Vec<Value> {
    lists
        .into_iter()
        .map(|((origin, chunk), (facts, described))| {
            row([
                ("id", chunk_support_id(&origin, chunk).into_value()),
                ("facts", facts.into_value()),
                ("described", described.into_value()),
            ])
        })
        .collect()
}

/// The fields of a fact support read by key.
const FACT_ROW: &str = "id[0] AS fact, id[1] AS origin, id[2] AS chunk";

/// The rows that record a set of supports, by table.
#[derive(Default)]
struct SupportRows {
    /// Fact supports: (fact key, origin, chunk) and the description's words, if any.
    facts: BTreeMap<(String, String, i64), Option<String>>,
    /// Per chunk of a source: the fact keys it supports and the entities it describes.
    chunks: ChunkLists,
    /// Merges: (alias, entity, origin, chunk).
    aliases: BTreeSet<(String, String, String, i64)>,
}

impl SupportRows {
    /// `supports`' rows; a description's words come from `texts` (by fact).
    fn of(supports: &[(Fact, Support)], texts: &BTreeMap<Fact, String>) -> Self {
        let mut rows = SupportRows::default();
        for (fact, support) in supports {
            let (origin, chunk) = origin_of(support);
            let key = fact_key(&stored_fact(fact));
            let described = matches!(fact, Fact::Description { .. });
            let text = rows
                .facts
                .entry((key.clone(), origin.clone(), chunk))
                .or_default();
            if described {
                *text = Some(texts.get(fact).cloned().unwrap_or_default());
            }
            if let Fact::Alias { entity, alias } = fact {
                rows.aliases
                    .insert((alias.clone(), entity.clone(), origin.clone(), chunk));
            }
            if let Support::Chunk(_) = support {
                let (facts, descriptions) = rows.chunks.entry((origin, chunk)).or_default();
                if described {
                    descriptions.insert(key.clone());
                }
                facts.insert(key);
            }
        }
        rows
    }
}

/// A chunk's row as read: its position and what it lists.
#[derive(Deserialize)]
struct ChunkRow {
    chunk: i64,
    #[serde(default)]
    facts: Vec<String>,
    #[serde(default)]
    described: Vec<String>,
}

/// A fact support as read by key.
#[derive(Deserialize)]
struct FactRow {
    fact: String,
    origin: String,
    chunk: i64,
}

impl KnowledgeBase {
    /// Reads rows of type `T` from the `i`th answer of a request.
    fn answer<T: serde::de::DeserializeOwned>(
        &self,
        answers: &mut surrealdb::IndexedResults,
        i: usize,
    ) -> Result<Vec<T>> {
        let rows: Vec<Json> = answers.take(i).map_err(|e| self.statement_error(e))?;
        rows.into_iter()
            .map(|r| {
                serde_json::from_value(r)
                    .map_err(|e| StoreError::Query(format!("unexpected row shape: {e}")))
            })
            .collect()
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
        let own: Vec<ChunkRow> = self
            .run(
                &format!(
                    "SELECT id[1] AS chunk, facts, described FROM {CHUNK_SUPPORT}:[$origin, NONE]..=[$origin, {{}}]"
                ),
                obj([("origin", origin.clone().into_value())]),
            )
            .await?;
        let mut by_fact: BTreeMap<String, Vec<Support>> = BTreeMap::new();
        // A description is its chunk's alone: no other origin supports it.
        let mut descriptions: BTreeSet<String> = BTreeSet::new();
        for r in own {
            let Ok(chunk) = u32::try_from(r.chunk) else {
                continue;
            };
            let chunk = ChunkRef {
                source: source.clone(),
                chunk,
            };
            let support = Support::Chunk(chunk.clone());
            for key in r.described {
                if let Ok(Fact::Entity { name }) = fact_of(&key) {
                    let description = Fact::Description {
                        entity: name,
                        chunk: chunk.clone(),
                    };
                    let key = fact_key(&description);
                    by_fact
                        .entry(key.clone())
                        .or_default()
                        .push(support.clone());
                    descriptions.insert(key);
                }
            }
            for key in r.facts {
                by_fact.entry(key).or_default().push(support.clone());
            }
        }
        for fact in also {
            let key = fact_key(fact);
            if let Fact::Description { .. } = fact {
                descriptions.insert(key.clone());
            }
            by_fact.entry(key).or_default();
        }
        let named: Vec<String> = by_fact
            .keys()
            .filter(|key| !descriptions.contains(*key))
            .cloned()
            .collect();
        let c = self.connection().await?;
        for batch in named.chunks(OTHERS_BATCH) {
            // One statement per fact, in one request: each stops at its first match.
            let vars = obj([("origin", origin.clone().into_value())]);
            let tail = " WHERE id[1] != $origin LIMIT 1";
            let mut answers = self.per_fact(&c, FACT_ROW, tail, batch, vars).await?;
            for i in 0..batch.len() {
                for r in self.answer::<FactRow>(&mut answers, i)? {
                    if let Some(s) = support_of(&r.origin, r.chunk) {
                        by_fact.entry(r.fact).or_default().push(s);
                    }
                }
            }
        }
        by_fact
            .into_iter()
            .map(|(key, supports)| Ok((fact_of(&key)?, supports)))
            .collect()
    }

    /// One request of a statement per fact key: `fields` of the supports of `keys[i]` (the
    /// range of its key), then `tail` (a filter, a limit), with `vars` bound beside each
    /// key's `$f{i}`. The `i`th answer is `keys[i]`'s.
    async fn per_fact(
        &self,
        c: &Connected,
        fields: &str,
        tail: &str,
        keys: &[String],
        mut vars: Object,
    ) -> Result<surrealdb::IndexedResults> {
        let sql: String = (0..keys.len())
            .map(|i| {
                format!("SELECT {fields} FROM {FACT_SUPPORT}:[$f{i}, NONE]..=[$f{i}, {{}}]{tail};")
            })
            .collect();
        for (i, key) in keys.iter().enumerate() {
            vars.insert(format!("f{i}"), key.clone().into_value());
        }
        self.send(c, &sql, vars).await
    }

    /// Records supports; one already recorded is left as it is, but for the words of a
    /// description, which `texts` gives (by fact). A description's support is stored on
    /// its chunk's support of the entity, which every description comes with.
    pub async fn add_supports(
        &self,
        supports: &[(Fact, Support)],
        texts: &BTreeMap<Fact, String>,
    ) -> Result<()> {
        let c = self.connection().await?;
        self.write_supports(&c, SupportRows::of(supports, texts))
            .await
    }

    /// The chunks' rows first, which list the facts: a write stopped half way must leave no
    /// support that no chunk lists (the module doc). Then the other three kinds of row at once
    /// (each statement on a task of its own): they are of other tables, or other rows of one.
    async fn write_supports(&self, c: &Connected, rows: SupportRows) -> Result<()> {
        let chunks = chunk_rows(rows.chunks);
        let chunk_sql = format!(
            "INSERT INTO {CHUNK_SUPPORT} $rows ON DUPLICATE KEY UPDATE facts = array::union(facts ?? [], $input.facts), described = array::union(described ?? [], $input.described) RETURN NONE"
        );
        let aliases: Vec<Value> = rows
            .aliases
            .iter()
            .map(|(alias, entity, origin, chunk)| {
                row([(
                    "id",
                    alias_support_id(alias, entity, origin, *chunk).into_value(),
                )])
            })
            .collect();
        let alias_sql = format!("INSERT IGNORE INTO {ALIAS_SUPPORT} $rows RETURN NONE");
        let (described, plain): (Vec<_>, Vec<_>) =
            rows.facts.into_iter().partition(|(_, text)| text.is_some());
        let fact_rows = |facts: Vec<((String, String, i64), Option<String>)>| -> Vec<Value> {
            facts
                .into_iter()
                .map(|((fact, origin, chunk), text)| {
                    let id = fact_support_id(&fact, &origin, chunk).into_value();
                    match text {
                        Some(text) => row([("id", id), ("text", text.into_value())]),
                        None => row([("id", id)]),
                    }
                })
                .collect()
        };
        let (described, plain) = (fact_rows(described), fact_rows(plain));
        let plain_sql = format!("INSERT IGNORE INTO {FACT_SUPPORT} $rows RETURN NONE");
        let described_sql = format!(
            "INSERT INTO {FACT_SUPPORT} $rows ON DUPLICATE KEY UPDATE text = $input.text RETURN NONE"
        );
        self.insert_rows_on(c, &chunk_sql, &chunks).await?;
        tokio::try_join!(
            self.insert_rows_on(c, &alias_sql, &aliases),
            self.insert_rows_on(c, &plain_sql, &plain),
            self.insert_rows_on(c, &described_sql, &described),
        )
        .map(drop)
    }

    /// Takes away supports: `dropped` entirely (a description's words only, as a
    /// description is the words of its chunk's support of the entity), and every support of
    /// each of `forgotten` (facts the graph no longer holds).
    pub(crate) async fn drop_supports(
        &self,
        dropped: &[(Fact, Support)],
        forgotten: &[Fact],
    ) -> Result<()> {
        let mut undescribed: Vec<RecordId> = Vec::new();
        let mut gone: Vec<RecordId> = Vec::new();
        // What each chunk's row stops listing: facts, and entities described.
        let mut unlisted = ChunkLists::new();
        for (fact, support) in dropped {
            let (origin, chunk) = origin_of(support);
            let key = fact_key(&stored_fact(fact));
            let id = fact_support_id(&key, &origin, chunk);
            let is_chunk = matches!(support, Support::Chunk(_));
            match fact {
                Fact::Description { .. } => {
                    undescribed.push(id);
                    if is_chunk {
                        unlisted.entry((origin, chunk)).or_default().1.insert(key);
                    }
                }
                _ => {
                    gone.push(id);
                    if let Fact::Alias { entity, alias } = fact {
                        gone.push(alias_support_id(alias, entity, &origin, chunk));
                    }
                    if is_chunk {
                        let (facts, described) = unlisted.entry((origin, chunk)).or_default();
                        facts.insert(key.clone());
                        described.insert(key);
                    }
                }
            }
        }
        let c = self.connection().await?;
        for batch in forgotten.chunks(OTHERS_BATCH) {
            let keys: Vec<String> = batch.iter().map(fact_key).collect();
            let mut answers = self
                .per_fact(&c, FACT_ROW, "", &keys, Object::new())
                .await?;
            for (i, fact) in batch.iter().enumerate() {
                for r in self.answer::<FactRow>(&mut answers, i)? {
                    gone.push(fact_support_id(&r.fact, &r.origin, r.chunk));
                    if let Fact::Alias { entity, alias } = fact {
                        gone.push(alias_support_id(alias, entity, &r.origin, r.chunk));
                    }
                    if r.origin != IMPORT_ORIGIN {
                        let (facts, described) = unlisted.entry((r.origin, r.chunk)).or_default();
                        facts.insert(r.fact.clone());
                        described.insert(r.fact);
                    }
                }
            }
        }
        self.exec_in_batches(
            "UPDATE $ids SET text = NONE RETURN NONE",
            "ids",
            &undescribed,
        )
        .await?;
        self.exec_in_batches("DELETE $ids", "ids", &gone).await?;
        let rows = chunk_rows(unlisted);
        // A chunk's row that lists nothing more goes.
        self.exec_in_batches(
            "FOR $r IN $rows { UPDATE $r.id SET facts = array::complement(facts ?? [], $r.facts), described = array::complement(described ?? [], $r.described) RETURN NONE; }; DELETE $rows.id WHERE array::len(facts ?? []) = 0;",
            "rows",
            &rows,
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
            Some(_) => " WHERE id[1] = $entity",
            None => "",
        };
        let mut vars = obj([
            ("after", after.unwrap_or("").to_string().into_value()),
            ("n", (limit as i64 + 1).into_value()),
        ]);
        if let Some(e) = entity {
            vars.insert("entity".to_string(), e.to_string().into_value());
        }
        // `[$after, {}]` sorts after every key of the alias `$after` itself.
        let aliases: Vec<String> = self
            .run(
                &format!(
                    "SELECT VALUE alias FROM (SELECT id[0] AS alias FROM {ALIAS_SUPPORT}:[$after, {{}}]..{of_entity} GROUP BY alias) ORDER BY alias LIMIT $n"
                ),
                vars.clone(),
            )
            .await?;
        let more = aliases.len() > limit;
        let aliases: Vec<String> = aliases.into_iter().take(limit).collect();
        let (Some(first), Some(last)) = (aliases.first(), aliases.last()) else {
            return Ok((Vec::new(), false));
        };
        vars.insert("first".to_string(), first.clone().into_value());
        vars.insert("last".to_string(), last.clone().into_value());
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
                    "SELECT id[0] AS alias, id[1] AS entity, id[2] AS origin, id[3] AS chunk FROM {ALIAS_SUPPORT}:[$first, NONE]..=[$last, {{}}]{of_entity}"
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
            let keys: Vec<String> = batch
                .iter()
                .map(|entity| fact_key(&Fact::entity(entity.as_str())))
                .collect();
            let fields = "id[1] AS origin, id[2] AS chunk, text";
            let mut answers = self.per_fact(&c, fields, "", &keys, Object::new()).await?;
            for (i, entity) in batch.iter().enumerate() {
                let rows: Vec<TextRow> = self.answer(&mut answers, i)?;
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
        let rows: Vec<Value> = rows
            .iter()
            .map(|(fact, support, text)| {
                let (origin, chunk) = origin_of(support);
                let id = fact_support_id(&fact_key(&stored_fact(fact)), &origin, chunk);
                row([("id", id.into_value()), ("text", text.clone().into_value())])
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
        let found: Vec<String> = self
            .run(
                &format!(
                    "SELECT VALUE id[1] FROM {ALIAS_SUPPORT}:[$name, NONE]..=[$name, {{}}] LIMIT 1"
                ),
                obj([("name", name.to_string().into_value())]),
            )
            .await?;
        Ok(found.into_iter().next())
    }

    /// Runs `sql` once per [`SUPPORT_BATCH`] of `items`, bound as `$var`.
    pub(crate) async fn exec_in_batches<T: SurrealValue + Clone>(
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

    /// Moves the supports of a store written before they were kept by key (one `support`
    /// table, three indexes) into the tables above, a batch at a time: each batch is written
    /// whole before its old rows go, so a move stopped half way is finished by the next
    /// open, and two nodes moving at once write the same rows. Descriptions that the oldest
    /// stores kept as rows of their own become the words of their chunk's support of the
    /// entity on the way. Done when the old table is empty; it stays, empty and unindexed.
    pub(crate) async fn move_old_supports(&self, c: &Connected) -> Result<()> {
        // Whether there is anything to move: no old table (a store written since), or an
        // old table already emptied, costs one statement at each open.
        let old_rows: Vec<u64> = self
            .run_on(
                c,
                &format!(
                    "RETURN [IF (INFO FOR DB).tables.{SUPPORT} {{ count(SELECT VALUE id FROM {SUPPORT} LIMIT 1) }} ELSE {{ 0 }}]"
                ),
                Object::new(),
            )
            .await?;
        if old_rows.first().copied().unwrap_or(0) == 0 {
            return Ok(());
        }
        self.exec_on(
            c,
            &format!(
                "REMOVE INDEX IF EXISTS support_fact ON {SUPPORT};
                 REMOVE INDEX IF EXISTS support_origin ON {SUPPORT};
                 REMOVE INDEX IF EXISTS support_alias ON {SUPPORT};
                 DELETE {META}:descriptions_folded;"
            ),
            Object::new(),
        )
        .await?;
        #[derive(Deserialize)]
        struct Old {
            key: Json,
            fact: String,
            origin: String,
            chunk: i64,
            text: Option<String>,
        }
        let mut moved = 0usize;
        loop {
            let old: Vec<Old> = self
                .run_on(
                    c,
                    &format!(
                        "SELECT meta::id(id) AS key, fact, origin, chunk, text FROM {SUPPORT} LIMIT {SUPPORT_BATCH}"
                    ),
                    Object::new(),
                )
                .await?;
            if old.is_empty() {
                break;
            }
            let mut supports = Vec::with_capacity(old.len());
            let mut texts = BTreeMap::new();
            let mut ids = Vec::with_capacity(old.len());
            for o in old {
                if let Json::String(key) = &o.key {
                    ids.push(RecordId::new(SUPPORT, key.as_str()));
                }
                let (Ok(fact), Some(support)) = (fact_of(&o.fact), support_of(&o.origin, o.chunk))
                else {
                    continue;
                };
                // A description was either a row of its own or the words of the entity's.
                let description = match (&fact, &support, o.text) {
                    (Fact::Description { .. }, _, text) => Some((fact.clone(), text)),
                    (Fact::Entity { name }, Support::Chunk(chunk), Some(text)) => Some((
                        Fact::Description {
                            entity: name.clone(),
                            chunk: chunk.clone(),
                        },
                        Some(text),
                    )),
                    _ => None,
                };
                if let Some((description, text)) = description {
                    texts.insert(description.clone(), text.unwrap_or_default());
                    supports.push((description, support.clone()));
                }
                supports.push((fact, support));
            }
            self.write_supports(c, SupportRows::of(&supports, &texts))
                .await?;
            moved += ids.len();
            self.exec_on(c, "DELETE $ids", obj([("ids", ids.into_value())]))
                .await?;
        }
        tracing::info!(moved, "supports moved to their keyed tables");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{HashingEmbedder, StoreConfig};

    /// A store written when supports were rows of one indexed table, with descriptions both
    /// as rows of their own (the oldest form) and as the words of an entity's row, reads,
    /// once its supports are moved, as one written now: the same descriptions, supports,
    /// merges and plans.
    #[tokio::test]
    async fn supports_of_an_older_store_are_moved_once() {
        let kb =
            KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
        let source = SourceKey::new("notes", "a");
        let chunk = |i: u32| ChunkRef {
            source: source.clone(),
            chunk: i,
        };
        let origin = source_origin(&source);
        let alias = Fact::Alias {
            entity: "Ada".into(),
            alias: "Ada Lovelace".into(),
        };
        let wrote = Fact::relationship("Ada", "Babbage", "wrote_to");
        let mut rows = Vec::new();
        for (i, (fact, origin, position, text)) in [
            (
                Fact::entity("Ada"),
                &origin,
                0,
                Some("Ada wrote the first program"),
            ),
            (Fact::entity("Babbage"), &origin, 1, None),
            (
                Fact::Description {
                    entity: "Babbage".into(),
                    chunk: chunk(1),
                },
                &origin,
                1,
                Some("Babbage designed the engine"),
            ),
            (wrote.clone(), &origin, 0, None),
            (alias.clone(), &origin, 0, None),
            (
                Fact::entity("Charles"),
                &IMPORT_ORIGIN.to_string(),
                -1,
                None,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let (kind, alias_name) = match &fact {
                Fact::Alias { alias, .. } => ("alias", Some(alias.clone())),
                Fact::Description { .. } => ("description", None),
                _ => ("other", None),
            };
            rows.push(row([
                ("id", RecordId::new(SUPPORT, format!("old{i}")).into_value()),
                ("fact", fact_key(&fact).into_value()),
                ("origin", origin.clone().into_value()),
                ("chunk", i64::from(position).into_value()),
                ("kind", kind.to_string().into_value()),
                ("alias", alias_name.into_value()),
                ("text", text.map(str::to_string).into_value()),
            ]));
        }
        kb.exec(
            &format!(
                "DEFINE TABLE {SUPPORT} SCHEMALESS;
                 DEFINE INDEX support_fact ON {SUPPORT} FIELDS fact;
                 DEFINE INDEX support_origin ON {SUPPORT} FIELDS origin;
                 DEFINE INDEX support_alias ON {SUPPORT} FIELDS alias;
                 INSERT INTO {SUPPORT} $rows RETURN NONE;"
            ),
            obj([("rows", rows.into_value())]),
        )
        .await
        .unwrap();
        let c = kb.connection().await.unwrap();
        let count = |table: &'static str| {
            let kb = &kb;
            async move {
                kb.run::<Json>(&format!("SELECT VALUE id FROM {table}"), Object::new())
                    .await
                    .unwrap()
                    .len()
            }
        };
        for _ in 0..2 {
            kb.move_old_supports(&c).await.unwrap();
            assert_eq!(count(SUPPORT).await, 0, "every old row moved");
            assert_eq!(count(FACT_SUPPORT).await, 5, "one per fact and chunk");
            assert_eq!(count(CHUNK_SUPPORT).await, 2, "one per chunk of a source");
            assert_eq!(count(ALIAS_SUPPORT).await, 1);
        }

        let described = kb
            .descriptions_of(&["Ada".into(), "Babbage".into(), "Charles".into()])
            .await
            .unwrap();
        let texts: Vec<(Vec<&str>, bool)> = described
            .iter()
            .map(|d| {
                let texts = d.texts.iter().map(|(_, t)| t.as_str()).collect();
                (texts, d.imported)
            })
            .collect();
        assert_eq!(
            texts,
            [
                (vec!["Ada wrote the first program"], false),
                (vec!["Babbage designed the engine"], false),
                (vec![], true)
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
            wrote,
            alias,
        ];
        want.sort();
        assert_eq!(facts, want);
        let (merges, more) = kb.merges(None, None, 10).await.unwrap();
        assert!(!more);
        assert_eq!(
            merges,
            [Merge {
                alias: "Ada Lovelace".into(),
                entity: "Ada".into(),
                chunks: vec![MergeChunk {
                    source: "notes".into(),
                    source_id: "a".into(),
                    position: 0
                }],
            }]
        );
        assert_eq!(
            kb.alias_target("Ada Lovelace").await.unwrap().as_deref(),
            Some("Ada")
        );
        assert_eq!(kb.alias_target("Ada").await.unwrap(), None);

        // Deleting the source takes every support of its own, words and all; the import's
        // stays.
        let plan = kbq_ingest::provenance::plan_delete(
            &kb.supports_of(&source, &[]).await.unwrap(),
            &source,
        );
        kb.retract(&plan).await.unwrap();
        assert_eq!(count(FACT_SUPPORT).await, 1);
        assert_eq!(count(CHUNK_SUPPORT).await, 0);
        assert_eq!(count(ALIAS_SUPPORT).await, 0);
        assert!(kb.supports_of(&source, &[]).await.unwrap().is_empty());
    }
}
