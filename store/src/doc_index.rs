//! The document index bookkeeping: the in-process vector and keyword indexes hold every
//! document, loaded from SurrealDB on connecting and kept in step with each write, delete and
//! followed change. Its own file because writes, deletes, `reembed` and following all go
//! through the same few steps here.

use std::time::{Duration, Instant};

use surrealdb::types::{Object, RecordId, SurrealValue, Value};

use crate::error::{Result, StoreError};
use crate::kb::{Connected, INDEX_LOAD_TIMEOUT, KnowledgeBase, obj, query_on, vector_from};
use crate::model::table::DOCUMENT;
use crate::text::{Analysed, TextIndex};
use crate::vectors::{DocTags, VectorIndex};

/// What the in-process vector and keyword indexes read of a document (see [`DocEntry`]).
const DOCUMENT_ENTRY_FIELDS: &str =
    "meta::id(id) AS id, embedding, title, content, source, content_type, entity_name";

/// A document as the in-process vector and keyword indexes hold it.
pub(crate) struct DocEntry {
    pub(crate) key: String,
    /// `None` when the stored vector could not be read.
    pub(crate) vector: Option<Vec<f32>>,
    pub(crate) tags: DocTags,
    pub(crate) text: Analysed,
}

impl DocEntry {
    /// Puts the document into both indexes, replacing what they held of it. Without a vector
    /// of the index's dimension it leaves the vector index; returns whether it is there.
    fn put(self, vectors: &mut VectorIndex, text: &mut TextIndex) -> bool {
        let vectored = match &self.vector {
            Some(v) if v.len() == vectors.dimension() => {
                vectors.upsert(&self.key, v, self.tags.clone());
                true
            }
            _ => {
                vectors.remove(&self.key);
                false
            }
        };
        text.upsert(&self.key, &self.text, self.tags);
        vectored
    }
}

impl KnowledgeBase {
    /// Puts `entries` into the vector and keyword indexes, replacing what they held of each.
    /// A document without a vector of this embedder's dimension leaves the vector index.
    pub(crate) fn index_documents(&self, entries: Vec<DocEntry>) {
        let mut vectors = self.vectors().write();
        let mut text = self.text().write();
        for e in entries {
            e.put(&mut vectors, &mut text);
        }
    }

    /// Takes the documents `keys` out of the vector and keyword indexes.
    pub(crate) fn unindex_documents<K: AsRef<str>>(&self, keys: &[K]) {
        let mut vectors = self.vectors().write();
        let mut text = self.text().write();
        for key in keys {
            vectors.remove(key.as_ref());
            text.remove(key.as_ref());
        }
    }

    /// Rebuilds the vector and keyword indexes from the documents SurrealDB holds.
    pub(crate) async fn load_document_indexes(&self, c: &Connected) -> Result<()> {
        let started = Instant::now();
        let entries = self
            .document_entries_on(
                c,
                &format!("SELECT {DOCUMENT_ENTRY_FIELDS} FROM {DOCUMENT}"),
                Object::new(),
                INDEX_LOAD_TIMEOUT,
            )
            .await?;
        let read_ms = started.elapsed().as_millis() as u64;
        let dimension = self.embedder().dimension();
        // Analysing every text takes a while for a large store: keep it off the async workers.
        let (vectors, text, skipped) = tokio::task::spawn_blocking(move || {
            // The inverted file is trained once, on every vector, rather than at each doubling.
            let mut vectors = VectorIndex::for_bulk_load(dimension);
            let mut text = TextIndex::new();
            let mut skipped = 0usize;
            for e in entries {
                skipped += usize::from(!e.put(&mut vectors, &mut text));
            }
            vectors.train();
            (vectors, text, skipped)
        })
        .await
        .map_err(|e| StoreError::Query(format!("building the document indexes failed: {e}")))?;
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "documents without a vector of this embedder's dimension are left out of semantic search; `kbq reindex` embeds them"
            );
        }
        tracing::info!(
            documents = text.len(),
            vectors = vectors.len(),
            vector_lists = vectors.lists(),
            terms = text.terms(),
            read_ms,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "document indexes built"
        );
        *self.vectors().write() = vectors;
        *self.text().write() = text;
        Ok(())
    }

    /// The documents `ids` as the in-process indexes hold them; a missing one is left out.
    pub(crate) async fn document_entries(&self, ids: Vec<RecordId>) -> Result<Vec<DocEntry>> {
        let c = self.connection().await?;
        self.document_entries_on(
            &c,
            &format!("SELECT {DOCUMENT_ENTRY_FIELDS} FROM $ids"),
            obj([("ids", ids.into_value())]),
            self.config().query_timeout,
        )
        .await
    }

    /// Runs a query that selects [`DOCUMENT_ENTRY_FIELDS`].
    async fn document_entries_on(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
        timeout: Duration,
    ) -> Result<Vec<DocEntry>> {
        let mut resp = query_on(&c.db, sql, vars, timeout).await?;
        let rows: Vec<Value> = resp.take(0).map_err(|e| StoreError::Query(e.to_string()))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Value::Object(row) = row else { continue };
            let Some(Value::String(id)) = row.get("id") else {
                continue;
            };
            let string = |field: &str| match row.get(field) {
                Some(Value::String(s)) => Some(s.as_str()),
                _ => None,
            };
            let tags = DocTags {
                source: string("source").unwrap_or_default().into(),
                content_type: string("content_type").unwrap_or_default().into(),
                entity_name: string("entity_name").map(Into::into),
            };
            out.push(DocEntry {
                key: id.clone(),
                vector: row.get("embedding").and_then(vector_from),
                text: Analysed::new(
                    string("title").unwrap_or_default(),
                    string("content").unwrap_or_default(),
                ),
                tags,
            });
        }
        Ok(out)
    }
}
