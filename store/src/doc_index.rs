//! The document index bookkeeping: the in-process vector and keyword indexes hold every
//! document, loaded from SurrealDB on connecting and kept in step with each write, delete and
//! followed change. Its own file because writes, deletes, `reembed` and following all go
//! through the same few steps here.
//!
//! An embedded store also keeps every document itself here (the `DocumentTable`), so that
//! the documents a search or a graph-documents request found are copied from memory rather
//! than read back through a SurrealDB statement, which cost more than the search did. Only
//! this process writes an embedded store, and every write goes through the steps here, so the
//! table is exactly what SurrealDB holds. A remote store, which other nodes write too, is
//! read from SurrealDB as before.

use std::time::Instant;

use surrealdb::types::{RecordId, SurrealValue, Value};

use crate::db::{Connected, obj, query_on, vector_from};
use crate::documents::DocumentTable;
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::model::Document;
use crate::model::table::DOCUMENT;
use crate::numbers::EntityNumbers;
use crate::parts::{self, Parts};
use crate::text::{Analysed, TextIndex};
use crate::vectors::{DocTags, VectorIndex};

/// What the in-process vector and keyword indexes read of a document (see [`DocEntry`]).
const DOCUMENT_ENTRY_FIELDS: &str = "meta::id(id) AS id, embedding, title, content, source, source_id, content_type, url, entity_name, mentions";

/// A document as the in-process vector and keyword indexes hold it.
pub(crate) struct DocEntry {
    pub(crate) key: String,
    /// `None` when the stored vector could not be read.
    pub(crate) vector: Option<Vec<f32>>,
    pub(crate) tags: DocTags,
    pub(crate) text: Analysed,
    /// The document itself, its id public (`document:<key>`).
    pub(crate) document: Document,
}

impl DocEntry {
    /// Puts the document into both indexes and, when `documents` holds them, there too,
    /// replacing what they held of it. Without a vector of the index's dimension it leaves the
    /// vector index; returns whether it is there.
    fn put(
        self,
        vectors: &mut VectorIndex,
        text: &mut TextIndex,
        documents: Option<&mut DocumentTable>,
    ) -> bool {
        if let Some(documents) = documents {
            documents.put(&self.key, self.document);
        }
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
        let mut documents = self.held_documents().map(|d| d.write());
        for e in entries {
            e.put(&mut vectors, &mut text, documents.as_deref_mut());
        }
    }

    /// Takes the documents `keys` out of the vector and keyword indexes.
    pub(crate) fn unindex_documents<K: AsRef<str>>(&self, keys: &[K]) {
        let mut vectors = self.vectors().write();
        let mut text = self.text().write();
        let mut documents = self.held_documents().map(|d| d.write());
        for key in keys {
            vectors.remove(key.as_ref());
            text.remove(key.as_ref());
            if let Some(documents) = documents.as_deref_mut() {
                documents.remove(key.as_ref());
            }
        }
    }

    /// Rebuilds the vector and keyword indexes (and the held documents) from the documents
    /// SurrealDB holds, read in parts.
    pub(crate) async fn load_document_indexes(
        &self,
        c: &Connected,
        parts: &Parts<'_>,
    ) -> Result<()> {
        let started = Instant::now();
        // Each part's texts are analysed on the task that read it, on several cores.
        let entries = parts::read_table(
            c,
            DOCUMENT,
            'd',
            DOCUMENT_ENTRY_FIELDS,
            |rows| Ok(doc_entries(rows)),
            parts,
        )
        .await?;
        let read_ms = started.elapsed().as_millis() as u64;
        let dimension = self.embedder().dimension();
        let hold = self.held_documents().is_some();
        let numbers = self.numbers().clone();
        let (vectors, text, documents, skipped) = tokio::task::spawn_blocking(move || {
            build_document_indexes(entries, dimension, &numbers, hold)
        })
        .await
        .map_err(|e| StoreError::Query(format!("building the document indexes failed: {e}")))?;
        parts.finished();
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
        if let Some(held) = self.held_documents() {
            *held.write() = documents;
        }
        Ok(())
    }

    /// [`load_document_indexes`](Self::load_document_indexes) on its own, reporting nowhere:
    /// after the documents were written again (`reembed`).
    pub(crate) async fn reload_document_indexes(&self, c: &Connected) -> Result<()> {
        let parts = Parts::new(parts::DOCUMENT_PARTS, &crate::progress::Silent);
        self.load_document_indexes(c, &parts).await
    }

    /// The documents `ids` as the in-process indexes hold them; a missing one is left out.
    pub(crate) async fn document_entries(&self, ids: Vec<RecordId>) -> Result<Vec<DocEntry>> {
        let c = self.connection().await?;
        let mut resp = query_on(
            &c.db,
            &format!("SELECT {DOCUMENT_ENTRY_FIELDS} FROM $ids"),
            obj([("ids", ids.into_value())]),
            self.config().query_timeout,
        )
        .await?;
        let rows: Vec<Value> = resp.take(0).map_err(|e| self.statement_error(e))?;
        Ok(doc_entries(rows))
    }
}

/// The vector index, the keyword index and (when `hold`) the document table of `parts`'
/// entries, with how many had no vector of `dimension`: each built on a thread of its own,
/// from the entries in the same order as [`DocEntry::put`] would give them, so that each is
/// the index those puts build.
fn build_document_indexes(
    parts: Vec<Vec<DocEntry>>,
    dimension: usize,
    numbers: &EntityNumbers,
    hold: bool,
) -> (VectorIndex, TextIndex, DocumentTable, usize) {
    let n = parts.iter().map(Vec::len).sum();
    let mut for_vectors = Vec::with_capacity(n);
    let mut for_text = Vec::with_capacity(n);
    let mut for_table = Vec::with_capacity(if hold { n } else { 0 });
    for e in parts.into_iter().flatten() {
        for_vectors.push((e.key.clone(), e.vector, e.tags.clone()));
        if hold {
            for_table.push((e.key.clone(), e.document));
        }
        for_text.push((e.key, e.text, e.tags));
    }
    std::thread::scope(|s| {
        let vectors = s.spawn(move || {
            // The inverted file is trained once, on every vector, rather than at each doubling.
            let mut vectors = VectorIndex::for_bulk_load(dimension).with_numbers(numbers.clone());
            let mut skipped = 0;
            for (key, vector, tags) in for_vectors {
                match vector {
                    Some(v) if v.len() == dimension => vectors.upsert(&key, &v, tags),
                    _ => {
                        vectors.remove(&key);
                        skipped += 1;
                    }
                }
            }
            vectors.train();
            (vectors, skipped)
        });
        let text = s.spawn(move || {
            let mut text = TextIndex::new();
            for (key, analysed, tags) in for_text {
                text.upsert(&key, &analysed, tags);
            }
            text
        });
        let mut documents = DocumentTable::default();
        for (key, document) in for_table {
            documents.put(&key, document);
        }
        let (vectors, skipped) = vectors.join().expect("the vector index builds");
        let text = text.join().expect("the keyword index builds");
        (vectors, text, documents, skipped)
    })
}

/// The strings of an array field (`mentions`); none for any other value.
fn names(value: Option<Value>) -> Vec<String> {
    match value {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Rows that select [`DOCUMENT_ENTRY_FIELDS`] as index entries, their texts analysed; a row
/// without an id is left out.
fn doc_entries(rows: Vec<Value>) -> Vec<DocEntry> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let Value::Object(mut row) = row else {
            continue;
        };
        let vector = row.get("embedding").and_then(vector_from);
        // The strings are moved out of the row, not copied: a large store's texts are most
        // of what its load allocates.
        let mut take = |field: &str| match row.remove(field) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let Some(key) = take("id") else { continue };
        let document = Document {
            id: format!("{DOCUMENT}:{key}"),
            title: take("title").unwrap_or_default(),
            content: take("content").unwrap_or_default(),
            source: take("source").unwrap_or_default(),
            source_id: take("source_id").unwrap_or_default(),
            content_type: take("content_type").unwrap_or_default(),
            url: take("url"),
            entity_name: take("entity_name"),
            mentions: names(row.remove("mentions")),
        };
        let tags = DocTags::of(&document);
        out.push(DocEntry {
            key,
            vector,
            text: Analysed::new(&document.title, &document.content),
            tags,
            document,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::kb::{KnowledgeBase, StoreConfig};
    use crate::model::{Document, NewDocument, NewEntity, table::DOCUMENT};
    use crate::search::FIELDS;
    use crate::{HashingEmbedder, Result};

    fn doc(source_id: &str, content: &str, url: Option<&str>, entity: Option<&str>) -> NewDocument {
        NewDocument {
            title: format!("About {source_id}"),
            content: content.into(),
            source: "t".into(),
            source_id: source_id.into(),
            content_type: "text/plain".into(),
            url: url.map(Into::into),
            entity_name: entity.map(Into::into),
            mentions: Vec::new(),
        }
    }

    /// The held documents, and the documents SurrealDB holds, each sorted by id.
    async fn held_and_stored(kb: &KnowledgeBase) -> Result<(Vec<Document>, Vec<Document>)> {
        let mut held: Vec<Document> = kb
            .held_documents()
            .expect("an embedded store holds its documents")
            .read()
            .all()
            .map(|d| Document::clone(d))
            .collect();
        let mut stored: Vec<Document> = kb
            .run(
                &format!("SELECT {FIELDS} FROM {DOCUMENT}"),
                surrealdb::types::Object::new(),
            )
            .await?;
        for d in &mut stored {
            d.id = format!("{DOCUMENT}:{}", d.id);
        }
        held.sort_by(|a, b| a.id.cmp(&b.id));
        stored.sort_by(|a, b| a.id.cmp(&b.id));
        Ok((held, stored))
    }

    async fn assert_in_step(kb: &KnowledgeBase, documents: usize) {
        let (held, stored) = held_and_stored(kb).await.unwrap();
        assert_eq!(held.len(), documents);
        assert_eq!(held, stored);
    }

    #[tokio::test]
    async fn the_held_documents_are_what_surrealdb_holds_after_every_kind_of_write() {
        let kb =
            KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
        let entity = |name: &str| NewEntity {
            name: name.into(),
            entity_type: "thing".into(),
            properties: Default::default(),
        };
        kb.upsert_entities(&[entity("Ada"), entity("Engine"), entity("Cy")])
            .await
            .unwrap();
        kb.upsert_documents(&[
            doc("a", "notes on the engine", None, Some("Ada")),
            doc(
                "b",
                "a mechanical computer",
                Some("https://e.org/b"),
                Some("Engine"),
            ),
            doc("c", "unlinked words", None, None),
        ])
        .await
        .unwrap();
        assert_in_step(&kb, 3).await;

        // An update changes content, url and entity in place; the same document twice in
        // one write keeps the last, as SurrealDB does.
        kb.upsert_documents(&[
            doc("a", "first version", None, Some("Ada")),
            doc(
                "a",
                "second version",
                Some("https://e.org/a"),
                Some("Engine"),
            ),
        ])
        .await
        .unwrap();
        assert_in_step(&kb, 3).await;
        let hits = kb.keyword_search("second version", 5).await.unwrap();
        assert_eq!(hits[0].document.content, "second version");
        assert_eq!(hits[0].document.url.as_deref(), Some("https://e.org/a"));

        // A document with mentions (as ingestion writes a chunk).
        kb.upsert_documents(&[NewDocument {
            mentions: vec!["Engine".into(), "Cy".into()],
            ..doc("d", "a chunk naming three", None, Some("Ada"))
        }])
        .await
        .unwrap();
        assert_in_step(&kb, 4).await;

        // Deleting an entity unlinks its documents, and drops it from their mentions.
        let deleted = kb.delete_entity("Engine").await.unwrap();
        assert_eq!(deleted.documents_unlinked, 2);
        assert_in_step(&kb, 4).await;
        let hits = kb.keyword_search("mechanical computer", 5).await.unwrap();
        assert_eq!(hits[0].document.entity_name, None);
        let hits = kb.keyword_search("chunk naming", 5).await.unwrap();
        assert_eq!(hits[0].document.mentions, ["Cy"]);

        // Deleting a document takes it out.
        for id in ["c", "d"] {
            let id = crate::model::keys::document_id("t", id);
            assert!(kb.delete_document(&id).await.unwrap());
        }
        assert_in_step(&kb, 2).await;
        assert!(kb.keyword_search("unlinked", 5).await.unwrap().is_empty());

        // Loading the indexes again (as on reconnecting) builds the same table.
        let c = kb.connection().await.unwrap();
        kb.reload_document_indexes(&c).await.unwrap();
        assert_in_step(&kb, 2).await;
    }

    #[tokio::test]
    async fn a_remote_store_holds_no_documents() {
        let config = StoreConfig {
            url: "ws://127.0.0.1:9".into(),
            ..StoreConfig::memory()
        };
        let kb = KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await;
        assert!(kb.held_documents().is_none());
    }
}
