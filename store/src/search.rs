//! Document search: semantic (KNN over the in-process [`VectorIndex`](crate::VectorIndex))
//! and keyword (BM25 over the in-process [`TextIndex`](crate::TextIndex) of titles and
//! contents). Both find keys in memory, then read those documents from SurrealDB.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use surrealdb::types::{RecordId, SurrealValue};

use crate::db::obj;
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::model::Document;
use crate::model::table::DOCUMENT;
use crate::vectors::{DocTags, VectorKey};

/// A document found by a search, with the method's own score.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentHit {
    /// Shared with the held documents of an embedded store: a hit does not copy its text.
    pub document: Arc<Document>,
    /// Cosine similarity for semantic search, BM25 for keyword search.
    pub score: f64,
}

/// Most hits one search may ask for.
pub const MAX_HITS: usize = 100;

/// What the document queries here select: a [`Document`] whose `id` is its record key
/// (see [`KnowledgeBase::documents_by_key`], which gives it its public id).
pub(crate) const FIELDS: &str = "meta::id(id) AS id, title, content, source, source_id, content_type, url, entity_name, mentions";

/// Exact-match conditions on documents; `None` accepts any value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocumentFilter {
    pub source: Option<String>,
    pub content_type: Option<String>,
    pub entity_name: Option<String>,
}

impl DocumentFilter {
    /// Whether a document of `source` and `content_type`, linked to the entities `links`
    /// accepts (`entity_name`: one of them), passes.
    fn accepts(&self, source: &str, content_type: &str, links: impl Fn(&str) -> bool) -> bool {
        self.source.as_deref().is_none_or(|s| s == source)
            && self
                .content_type
                .as_deref()
                .is_none_or(|c| c == content_type)
            && self.entity_name.as_deref().is_none_or(links)
    }

    pub fn accepts_document(&self, d: &crate::Document) -> bool {
        self.accepts(&d.source, &d.content_type, |e| d.links(e))
    }

    fn accepts_tags(&self, t: &DocTags) -> bool {
        self.accepts(&t.source, &t.content_type, |e| t.links(e))
    }
}

/// Most bytes of codes a vector search may read on the calling task (see
/// [`KnowledgeBase::in_memory`]).
pub(crate) const INLINE_CODE_BYTES: usize = 1 << 20;
/// Most postings a keyword search may read on the calling task (see
/// [`KnowledgeBase::in_memory`]).
const INLINE_POSTINGS: usize = 1 << 14;

/// Runs `search`, a search of an in-memory index, off the calling task: on `lane` when there
/// is one (a runtime of a few threads below the others' priority:
/// [`KnowledgeBase::set_scan_lane`]), else on tokio's blocking pool, so that a scan of every
/// code or of a common word's postings (milliseconds at 100k documents) holds no async
/// worker (see [`KnowledgeBase::in_memory`]).
///
/// On the blocking pool each large search has a thread of its own: under a load of many at
/// once (RAG's keyword searches of common words), the OS shares the cores among them all,
/// and the main runtime's few threads (chats, which search little) get a share each. On a
/// lane they take its threads' turn, and the rest wait.
pub(crate) async fn off_task<T: Send + 'static>(
    lane: Option<tokio::runtime::Handle>,
    what: &str,
    search: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let task = match lane {
        // Run on one of the lane's workers, which it holds until the search ends: the lane
        // runs as many searches at once as it has threads.
        Some(lane) => lane.spawn(async move { search() }),
        None => tokio::task::spawn_blocking(search),
    };
    task.await
        .map_err(|e| StoreError::Query(format!("{what} search failed: {e}")))
}

impl KnowledgeBase {
    /// Runs `search`, a search of an in-memory index, on the calling task when it is `small`
    /// (about a tenth of a millisecond: the limits above), else [`off_task`] on this
    /// knowledge base's scan lane. Handing every search off the task cost two thread
    /// wake-ups per search, about a tenth of a hybrid search's CPU when the searches
    /// themselves were small.
    pub(crate) async fn in_memory<T: Send + 'static>(
        &self,
        small: bool,
        what: &str,
        search: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        if small {
            return Ok(search());
        }
        off_task(self.scan_lane(), what, search).await
    }

    /// The `limit` documents nearest to `text` by cosine similarity, nearest first.
    pub async fn semantic_search(&self, text: &str, limit: usize) -> Result<Vec<DocumentHit>> {
        self.nearest(text, limit, &DocumentFilter::default(), false)
            .await
    }

    /// [`semantic_search`](Self::semantic_search) among the documents `filter` accepts.
    pub async fn semantic_search_filtered(
        &self,
        text: &str,
        limit: usize,
        filter: &DocumentFilter,
    ) -> Result<Vec<DocumentHit>> {
        self.nearest(text, limit, filter, false).await
    }

    /// The same answer as [`semantic_search`](Self::semantic_search) by exact comparison with
    /// every document: the reference for recall measurements.
    pub async fn semantic_search_exact(
        &self,
        text: &str,
        limit: usize,
    ) -> Result<Vec<DocumentHit>> {
        self.nearest(text, limit, &DocumentFilter::default(), true)
            .await
    }

    async fn nearest(
        &self,
        text: &str,
        limit: usize,
        filter: &DocumentFilter,
        exact: bool,
    ) -> Result<Vec<DocumentHit>> {
        let limit = limit.clamp(1, MAX_HITS);
        // The vector index is loaded on connecting: without a connection it knows nothing.
        self.connection().await?;
        let q = self.embed_query(text).await?;
        let vectors = self.vectors().clone();
        let filter = filter.clone();
        let filtered = filter != DocumentFilter::default();
        let reads = if exact {
            usize::MAX
        } else {
            vectors.read().search_reads(&q, filtered)
        };
        let search = move || {
            let index = vectors.read();
            let keep = |t: &DocTags| filter.accepts_tags(t);
            if exact {
                index.search_exact(&q, limit, &keep)
            } else if filtered {
                index.search(&q, limit, &keep)
            } else {
                index.search_all(&q, limit)
            }
        };
        let hits = self
            .in_memory(reads <= INLINE_CODE_BYTES, "vector", search)
            .await?;
        self.documents_by_key(hits).await
    }

    /// The documents of `hits`, in that order, each with its score. A document deleted since
    /// the search is left out.
    pub(crate) async fn documents_by_key(
        &self,
        hits: Vec<(VectorKey, f32)>,
    ) -> Result<Vec<DocumentHit>> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(held) = self.held_documents() {
            let held = held.read();
            return Ok(hits
                .into_iter()
                .filter_map(|(key, score)| {
                    Some(DocumentHit {
                        document: held.get(&key)?.clone(),
                        score: f64::from(score),
                    })
                })
                .collect());
        }
        let ids: Vec<RecordId> = hits
            .iter()
            .map(|(key, _)| RecordId::new(DOCUMENT, &**key))
            .collect();
        let rows: Vec<Document> = self
            .run(
                &format!("SELECT {FIELDS} FROM $ids"),
                obj([("ids", ids.into_value())]),
            )
            .await?;
        let mut by_key: HashMap<String, Document> =
            rows.into_iter().map(|d| (d.id.clone(), d)).collect();
        Ok(hits
            .into_iter()
            .filter_map(|(key, score)| {
                let mut document = by_key.remove(&*key)?;
                document.id = format!("{DOCUMENT}:{key}");
                Some(DocumentHit {
                    document: Arc::new(document),
                    score: f64::from(score),
                })
            })
            .collect())
    }

    /// Documents matching the words of `text` in title or content, best BM25 first.
    pub async fn keyword_search(&self, text: &str, limit: usize) -> Result<Vec<DocumentHit>> {
        self.keyword_search_filtered(text, limit, &DocumentFilter::default())
            .await
    }

    /// [`keyword_search`](Self::keyword_search) among the documents `filter` accepts.
    pub async fn keyword_search_filtered(
        &self,
        text: &str,
        limit: usize,
        filter: &DocumentFilter,
    ) -> Result<Vec<DocumentHit>> {
        let terms = crate::text::query_terms(text);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        // The keyword index is loaded on connecting: without a connection it knows nothing.
        self.connection().await?;
        let limit = limit.clamp(1, MAX_HITS);
        let index = self.text().clone();
        let filter = filter.clone();
        let reads = index.read().search_reads(&terms);
        let search = move || {
            index
                .read()
                .search(&terms, limit, &|t: &DocTags| filter.accepts_tags(t))
        };
        let hits = self
            .in_memory(reads <= INLINE_POSTINGS, "keyword", search)
            .await?;
        self.documents_by_key(hits).await
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
        // The keyword index knows every document's entity: the documents are then read by
        // key, not found by a scan (SurrealDB does not answer `entity_name IN $names` from
        // the `document_entity` index).
        self.connection().await?;
        let keys = self
            .text()
            .read()
            .documents_of(entity_names.iter().map(String::as_str));
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let q = self.embed_query(text).await?;
        let similarities = self.vectors().read().similarities(&keys, &q);
        let scored: Vec<(VectorKey, f32)> = keys
            .into_iter()
            .zip(similarities)
            .map(|(key, similarity)| (key, similarity.unwrap_or(0.0)))
            .collect();
        let wanted: HashSet<&str> = entity_names.iter().map(String::as_str).collect();
        let mut hits = self.documents_by_key(scored).await?;
        // A document relinked by another node since the index last heard of it.
        hits.retain(|hit| hit.document.entities().any(|n| wanted.contains(n.as_str())));
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kb() -> Arc<KnowledgeBase> {
        KnowledgeBase::new(
            crate::StoreConfig::memory(),
            Arc::new(crate::HashingEmbedder::default()),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_small_search_runs_on_the_calling_thread_and_a_large_one_on_the_pool() {
        let kb = kb();
        let here = std::thread::current().id();
        let small = kb
            .in_memory(true, "test", || (std::thread::current().id(), 7))
            .await
            .unwrap();
        assert_eq!(small, (here, 7));
        let (there, answer) = kb
            .in_memory(false, "test", || (std::thread::current().id(), 7))
            .await
            .unwrap();
        assert_ne!(there, here);
        assert_eq!(answer, 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_search_runs_on_the_lane_and_no_more_at_once_than_its_threads() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let lane = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-scan")
            .build()
            .unwrap();
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let searches = (0..4).map(|i| {
            let (running, most) = (running.clone(), most.clone());
            off_task(Some(lane.handle().clone()), "test", move || {
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                running.fetch_sub(1, SeqCst);
                (std::thread::current().name().map(str::to_string), i)
            })
        });
        let answers = futures::future::try_join_all(searches).await.unwrap();
        for (i, (thread, answer)) in answers.into_iter().enumerate() {
            assert_eq!(thread.as_deref(), Some("test-scan"));
            assert_eq!(answer, i);
        }
        assert_eq!(most.load(SeqCst), 1, "one thread, one search at a time");
        // A small search stays on the calling task, lane or not; a large one goes to the
        // knowledge base's lane.
        let kb = kb();
        kb.set_scan_lane(Some(lane.handle().clone()));
        let here = std::thread::current().id();
        let small = kb.in_memory(true, "test", || std::thread::current().id());
        assert_eq!(small.await.unwrap(), here);
        let large = kb.in_memory(false, "test", || {
            std::thread::current().name().map(str::to_string)
        });
        assert_eq!(large.await.unwrap().as_deref(), Some("test-scan"));
        // A search that panics there is an error, and the lane goes on.
        let failed = off_task(Some(lane.handle().clone()), "keyword", || -> u32 {
            panic!("boom")
        });
        let message = failed.await.unwrap_err().to_string();
        assert!(message.contains("keyword search failed"), "{message}");
        let after = off_task(Some(lane.handle().clone()), "test", || 7);
        assert_eq!(after.await.unwrap(), 7);
        lane.shutdown_background();
    }

    #[tokio::test]
    async fn a_search_that_panics_on_the_pool_is_an_error() {
        let failed = off_task(None, "vector", || -> u32 { panic!("boom") }).await;
        let message = failed.unwrap_err().to_string();
        assert!(message.contains("vector search failed"), "{message}");
    }
}
