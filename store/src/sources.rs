//! Sources: raw documents ingested into the graph, and the provenance of what each gave.
//!
//! A source (`source`, `source_id`) is stored as one record naming its current version (the
//! content hash of each of its chunks, by position) and as one document per chunk (keyed by
//! `source` and `"{source_id}#{position}"`, so a chunk's id follows from its source and its
//! place). Every fact a chunk gave (an entity, a relationship, an alias, a description) has a
//! support naming the chunk (kept as the `supports` module says); a fact written by an
//! import, or present before any source named it, has an import support. The planner that decides what a deleted or changed source
//! retracts is pure ([`kbq_ingest::provenance`]); this file reads its inputs and carries out
//! its plan. Model answers are kept here too, by (chunk hash, model, prompt version), so that
//! no chunk is sent to a model twice.
//!
//! Every write here is idempotent (record ids follow from what the record says), so a job
//! that stopped half way is completed by running it again: nothing is written twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kbq_ingest::provenance::{Fact, Plan, SourceKey, Support};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use surrealdb::types::{Object, RecordId, SurrealValue, Value};

use crate::db::{obj, relationship_record_id, row};
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
pub use crate::model::SourceRecord;
use crate::model::table::{
    ENTITY, EXTRACTION, INGEST_INPUT, INGEST_JOB, INGEST_NODE, RELATES, SOURCE,
};
use crate::model::{JobWrite, NewRelationship, keys};
use crate::supports::SUPPORT_BATCH;
pub use crate::supports::{Described, Merge, MergeChunk};

/// A record's field read back with the record's key.
#[derive(Deserialize)]
struct KeyedRow {
    key: String,
    value: Json,
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

/// What the store did with a [`Plan`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Retracted {
    pub entities: u64,
    pub relationships: u64,
    pub aliases: u64,
    pub descriptions: u64,
}

impl KnowledgeBase {
    /// The current version of `source`, if it was ingested. Reads that jobs make at once are
    /// one statement (a group commit, `store/src/grouped.rs`).
    pub async fn source_record(&self, source: &SourceKey) -> Result<Option<SourceRecord>> {
        self.source_reads
            .run(source.clone(), |sources| async move {
                let ids: Vec<Value> = sources
                    .iter()
                    .map(|s| source_record_id(s).into_value())
                    .collect();
                let rows: Vec<SourceRecord> = self
                    .run(
                        "SELECT source, source_id, title, url, content_type, content_hash, chunks, extracted_by, confirmations ?? [] AS confirmations, updated_at FROM $ids",
                        obj([("ids", Value::Array(ids.into()))]),
                    )
                    .await?;
                let found: HashMap<SourceKey, SourceRecord> =
                    rows.into_iter().map(|r| (r.key(), r)).collect();
                Ok(sources.iter().map(|s| found.get(s).cloned()).collect())
            })
            .await
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

    /// Carries out `plan`'s retractions: supports dropped, then facts removed from SurrealDB
    /// and the indexes (an entity with its relationships; documents linked to it stay,
    /// unlinked). The plan's additions are written by the caller, before, with the facts
    /// themselves. An entity that a relationship outside the plan still reaches is kept.
    pub async fn retract(&self, plan: &Plan) -> Result<Retracted> {
        let mut done = Retracted::default();
        // A description removed had the one support of its own chunk.
        let removed_descriptions = plan.remove.iter().filter_map(|fact| match fact {
            Fact::Description { chunk, .. } => Some((fact.clone(), Support::Chunk(chunk.clone()))),
            _ => None,
        });
        let dropped: Vec<(Fact, Support)> = plan
            .drop_supports
            .iter()
            .cloned()
            .chain(removed_descriptions)
            .collect();
        let forgotten: Vec<Fact> = plan
            .remove
            .iter()
            .filter(|fact| !matches!(fact, Fact::Description { .. }))
            .cloned()
            .collect();
        self.drop_supports(&dropped, &forgotten).await?;
        let removed: BTreeSet<&Fact> = plan.remove.iter().collect();
        let mut edges = Vec::new();
        for fact in &plan.remove {
            match fact {
                Fact::Relationship {
                    source,
                    target,
                    relationship_type,
                } => edges.push((source.as_str(), target.as_str(), relationship_type.as_str())),
                Fact::Alias { .. } => done.aliases += 1,
                Fact::Description { .. } => done.descriptions += 1,
                Fact::Entity { .. } => {}
            }
        }
        done.relationships = self.delete_relationships(&edges).await?;
        for fact in &plan.remove {
            if let Fact::Entity { name } = fact {
                let edges = self.relationships_at(name).await?.unwrap_or_default();
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
        Ok(done)
    }

    /// Removes the relationships `edges` (source, target, type), a statement per 500;
    /// answers how many there were.
    pub async fn delete_relationships(&self, edges: &[(&str, &str, &str)]) -> Result<u64> {
        let mut deleted = 0;
        for batch in edges.chunks(SUPPORT_BATCH) {
            let ids: Vec<RecordId> = batch
                .iter()
                .map(|(s, t, ty)| relationship_record_id(s, t, ty))
                .collect();
            let gone: Vec<Json> = self
                .run(
                    "DELETE $ids RETURN BEFORE",
                    obj([("ids", ids.into_value())]),
                )
                .await?;
            deleted += gone.len() as u64;
            if let Some(index) = self.graph_index() {
                let mut index = index.write();
                for (s, t, ty) in batch {
                    index.remove_relationship(s, t, ty);
                }
            }
        }
        Ok(deleted)
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

    /// The kept answer of a model for `key` (see [`extraction_key`]). Reads that jobs make
    /// at once are one statement (a group commit, `store/src/grouped.rs`).
    pub async fn cached_extraction(&self, key: &str) -> Result<Option<Json>> {
        self.kept_reads
            .run(key.to_string(), |keys| self.cached_extractions(keys))
            .await
    }

    /// The kept answers of `keys`, one per key, in their order.
    async fn cached_extractions(&self, keys: Vec<String>) -> Result<Vec<Option<Json>>> {
        self.values_by_key(EXTRACTION, "answer", &keys).await
    }

    /// The field `field` of the records of `table` keyed `keys`, one per key, in their order
    /// (none for a record that is not there; a key asked twice is answered twice).
    async fn values_by_key(
        &self,
        table: &str,
        field: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Json>>> {
        let ids: Vec<Value> = keys
            .iter()
            .map(|k| RecordId::new(table, k.as_str()).into_value())
            .collect();
        let rows: Vec<KeyedRow> = self
            .run(
                &format!("SELECT meta::id(id) AS key, {field} AS value FROM $ids"),
                obj([("ids", Value::Array(ids.into()))]),
            )
            .await?;
        let found: HashMap<String, Json> = rows.into_iter().map(|r| (r.key, r.value)).collect();
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }

    /// Keeps a model's answer for `key`. Answers kept at once are one statement
    /// (a group commit, `store/src/grouped.rs`), written before any of their callers returns.
    pub async fn cache_extraction(&self, key: &str, answer: Json) -> Result<()> {
        self.kept_writes
            .run((key.to_string(), answer), |kept| async move {
                let count = kept.len();
                let rows: Vec<Value> = kept
                    .into_iter()
                    .map(|(key, answer)| {
                        row([
                            ("id", RecordId::new(EXTRACTION, key).into_value()),
                            ("answer", answer.into_value()),
                        ])
                    })
                    .collect();
                let c = self.connection().await?;
                self.insert_rows_on(
                    &c,
                    &format!("INSERT INTO {EXTRACTION} $rows ON DUPLICATE KEY UPDATE answer = $input.answer RETURN NONE"),
                    &rows,
                )
                .await?;
                Ok(vec![(); count])
            })
            .await
    }

    /// Forgets kept model answers of a source's chunks that no other source holds: of
    /// `candidates` (each a chunk's content hash and the key its answer is kept under), those
    /// whose hash is in no chunk of another source's record than `own`'s. A candidate with an
    /// empty hash is a confirmation's answer: it is forgotten when no other source's record
    /// lists its key among its `confirmations`. Called when `own` is deleted or replaced, with
    /// the chunks (and confirmations) its old version had and its new one has not, so that
    /// what a retracted text gave the model does not outlive it. Answers how many keys it
    /// removed (records that were not there included).
    pub async fn forget_kept_answers(
        &self,
        own: &SourceKey,
        candidates: &[(String, String)],
    ) -> Result<u64> {
        self.forget_answers_unheld(Some(own), candidates).await
    }

    /// [`forget_kept_answers`](Self::forget_kept_answers), every source's record (but
    /// `own`'s, if given) holding a chunk, or listing a confirmation, against forgetting its
    /// answer.
    async fn forget_answers_unheld(
        &self,
        own: Option<&SourceKey>,
        candidates: &[(String, String)],
    ) -> Result<u64> {
        if candidates.is_empty() {
            return Ok(0);
        }
        // A chunk's answer is held by a record with its hash among its chunks; a
        // confirmation's (no chunk hash) by a record that lists its key. One read of the
        // records that hold any.
        #[derive(serde::Deserialize)]
        struct Holder {
            chunks: Vec<String>,
            confirmations: Vec<String>,
        }
        let (confirmations, chunks): (Vec<_>, Vec<_>) =
            candidates.iter().partition(|(hash, _)| hash.is_empty());
        let hashes: Vec<Value> = (chunks.iter())
            .map(|(hash, _)| hash.clone().into_value())
            .collect();
        let keys: Vec<Value> = (confirmations.iter())
            .map(|(_, key)| key.clone().into_value())
            .collect();
        let holders: Vec<Holder> = self
            .run(
                &format!(
                    "SELECT chunks, confirmations ?? [] AS confirmations FROM {SOURCE} WHERE id != $own AND (chunks CONTAINSANY $hashes OR confirmations CONTAINSANY $keys)"
                ),
                obj([
                    ("own", own.map(source_record_id).into_value()),
                    ("hashes", Value::Array(hashes.into())),
                    ("keys", Value::Array(keys.into())),
                ]),
            )
            .await?;
        let held: BTreeSet<&str> = holders
            .iter()
            .flat_map(|h| &h.chunks)
            .map(String::as_str)
            .collect();
        let listed: BTreeSet<&str> = (holders.iter())
            .flat_map(|h| &h.confirmations)
            .map(String::as_str)
            .collect();
        let ids: Vec<Value> = (candidates.iter())
            .filter(|(hash, key)| match hash.is_empty() {
                true => !listed.contains(key.as_str()),
                false => !held.contains(hash.as_str()),
            })
            .map(|(_, key)| RecordId::new(EXTRACTION, key.as_str()).into_value())
            .collect();
        let removed = ids.len() as u64;
        if removed > 0 {
            self.exec(
                "DELETE $ids RETURN NONE",
                obj([("ids", Value::Array(ids.into()))]),
            )
            .await?;
        }
        Ok(removed)
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
    /// by the node `node` (see [`heartbeat`](Self::heartbeat)), and its `input` (the
    /// source's bytes) in a row of its own, kept until the job ends
    /// ([`job_input`](Self::job_input)): the record is rewritten at every step, the input
    /// never. `None` leaves the input as it is.
    pub async fn put_job(
        &self,
        job_id: &str,
        record: Json,
        node: &str,
        input: Option<Vec<u8>>,
    ) -> Result<()> {
        self.write_job(JobWrite::Record {
            id: job_id.to_string(),
            record,
            node: node.to_string(),
            input,
        })
        .await
    }

    /// The input [`put_job`](Self::put_job) stored for the job `job_id`; `None` once the job
    /// has ended (or for a record written before inputs were kept apart, which holds its
    /// own).
    pub async fn job_input(&self, job_id: &str) -> Result<Option<Vec<u8>>> {
        let c = self.connection().await?;
        let mut answers = self
            .send(
                &c,
                "SELECT VALUE content FROM $id",
                obj([("id", RecordId::new(INGEST_INPUT, job_id).into_value())]),
            )
            .await?;
        let rows: Vec<Value> = answers.take(0).map_err(|e| self.statement_error(e))?;
        Ok(rows.into_iter().find_map(|v| match v {
            Value::Bytes(b) => Some(b.to_vec()),
            _ => None,
        }))
    }

    /// Writes `write`, in one transaction with the job writes made at the same time (a group
    /// commit, `store/src/grouped.rs`): jobs update their records at every step.
    async fn write_job(&self, write: JobWrite) -> Result<()> {
        self.job_writes
            .run(write, |writes| async move {
                let count = writes.len();
                let (mut records, mut open, mut ended) = (Vec::new(), Vec::new(), Vec::new());
                let (mut inputs, mut gone) = (Vec::new(), Vec::new());
                for write in writes {
                    match write {
                        JobWrite::Record {
                            id,
                            record,
                            node,
                            input,
                        } => {
                            let finished = record.get("view").is_some_and(has_ended);
                            if let Some(input) = input {
                                inputs.push(row([
                                    ("id", RecordId::new(INGEST_INPUT, id.as_str()).into_value()),
                                    ("content", Value::Bytes(input.into())),
                                ]));
                            }
                            records.push(row([
                                ("id", RecordId::new(INGEST_JOB, id).into_value()),
                                ("record", record.into_value()),
                                ("finished", finished.into_value()),
                                ("node", node.into_value()),
                            ]));
                        }
                        JobWrite::View { id, view, kept } => {
                            let kept: Vec<Value> = (kept.into_iter())
                                .map(|(hash, key)| vec![hash, key].into_value())
                                .collect();
                            let kept = (!kept.is_empty()).then(|| Value::Array(kept.into()));
                            let views = match has_ended(&view) {
                                true => {
                                    gone.push(RecordId::new(INGEST_INPUT, id.as_str()).into_value());
                                    &mut ended
                                }
                                false => &mut open,
                            };
                            views.push(row([
                                ("id", RecordId::new(INGEST_JOB, id).into_value()),
                                ("view", view.into_value()),
                                ("kept", kept.into_value()),
                            ]));
                        }
                    }
                }
                // In the order written: a record before any view of it (a job's record is
                // written before the job runs, so a round never holds both). An ended job's
                // input goes (a record from before inputs were kept apart empties its own).
                self.exec(
                    "BEGIN;
                     FOR $i IN $inputs { UPSERT $i.id CONTENT { content: $i.content } RETURN NONE; };
                     FOR $r IN $records { UPSERT $r.id CONTENT { record: $r.record, finished: $r.finished, node: $r.node, cancel: false } RETURN NONE; };
                     FOR $v IN $open { UPDATE $v.id SET record.view = $v.view, finished = false RETURN NONE; };
                     FOR $v IN $ended { UPDATE $v.id SET record.view = $v.view, finished = true, record.input.content = '', kept = $v.kept RETURN NONE; };
                     FOR $g IN $gone { DELETE $g RETURN NONE; };
                     COMMIT;",
                    obj([
                        ("inputs", Value::Array(inputs.into())),
                        ("records", Value::Array(records.into())),
                        ("open", Value::Array(open.into())),
                        ("ended", Value::Array(ended.into())),
                        ("gone", Value::Array(gone.into())),
                    ]),
                )
                .await?;
                Ok(vec![(); count])
            })
            .await
    }

    /// Replaces the `view` of an ingest job's stored record (its status, progress and
    /// counts), leaving the rest unread. The job's input is kept while the job may run
    /// again, and removed in the same transaction once the view says it has ended.
    pub async fn put_job_view(&self, job_id: &str, view: Json) -> Result<()> {
        self.put_job_end(job_id, view, Vec::new()).await
    }

    /// As [`put_job_view`](Self::put_job_view), with, for a job that failed or was cancelled,
    /// the (chunk hash, key) of the model answers it may have kept: they go with the job's
    /// record ([`forget_ended_jobs`](Self::forget_ended_jobs)).
    pub async fn put_job_end(
        &self,
        job_id: &str,
        view: Json,
        kept: Vec<(String, String)>,
    ) -> Result<()> {
        self.write_job(JobWrite::View {
            id: job_id.to_string(),
            view,
            kept,
        })
        .await
    }

    /// Deletes the records of the jobs that ended before `before` (Unix milliseconds, the
    /// `updated_at` of their view), and the model answers that those of them that failed or
    /// were cancelled kept, unless a source's record holds the chunk; answers how many
    /// records.
    pub async fn forget_ended_jobs(&self, before: i64) -> Result<u64> {
        let ended =
            format!("{INGEST_JOB} WHERE finished = true AND record.view.updated_at < $before");
        let vars = obj([("before", before.into_value())]);
        let kept: Vec<Vec<(String, String)>> = self
            .run(
                &format!("SELECT VALUE kept FROM {ended} AND kept != NONE"),
                vars.clone(),
            )
            .await?;
        // One row per record deleted, to count, without the records.
        let gone: Vec<Json> = self.run(&format!("DELETE {ended} RETURN id"), vars).await?;
        let candidates: BTreeSet<(String, String)> = kept.into_iter().flatten().collect();
        let candidates: Vec<(String, String)> = candidates.into_iter().collect();
        self.forget_answers_unheld(None, &candidates).await?;
        Ok(gone.len() as u64)
    }

    /// An ingest job's record. Reads that jobs make at once are one statement (a group commit,
    /// `store/src/grouped.rs`).
    pub async fn job(&self, job_id: &str) -> Result<Option<Json>> {
        self.job_reads
            .run(job_id.to_string(), |ids| async move {
                self.values_by_key(INGEST_JOB, "record", &ids).await
            })
            .await
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
            .map_err(|e| self.statement_error(e))
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

fn source_record_id(source: &SourceKey) -> RecordId {
    RecordId::new(SOURCE, keys::source(&source.source, &source.source_id))
}

/// The key under which a model's answer for a chunk is kept: the chunk's content hash, the
/// model (or provider chain) asked, and the prompt's version.
pub fn extraction_key(chunk_hash: &str, model: &str, prompt_version: u32) -> String {
    keys::extraction(chunk_hash, model, prompt_version)
}

/// The key under which the model's summary of an entity's descriptions is kept: one per
/// entity (the last asked, its question in the answer), removed with the entity.
pub fn summary_key(entity_name: &str) -> String {
    keys::summary(entity_name)
}
