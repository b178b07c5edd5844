//! Traverse, then resolve the start entity and the entities it reaches to their documents.
//!
//! Scoring (a float in [0, 1], higher first):
//! `score = 0.7 * proximity + 0.3 * similarity`, where `proximity = 1 / (1 + depth)` (1 for the
//! start entity's own documents, 0.5 one hop away, ...) and `similarity` is the cosine
//! similarity, clamped to [0, 1], between the document's embedding and the embedding of the
//! start entity's name and type. Ties break by title, then id.

use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::graph::{Direction, NameList, TraversalQuery};
use crate::kb::KnowledgeBase;
use crate::model::Document;
use crate::search::{DocumentHit, INLINE_CODE_BYTES};
use crate::text::TextIndex;
use crate::vectors::{Linked, VectorIndex, VectorKey};

/// The `relationship` value that marks the start entity's own documents.
pub const SELF_RELATIONSHIP: &str = "self";
/// Most entities a documents walk may collect before resolving them.
pub const MAX_RELATED_ENTITIES: usize = 200;

const PROXIMITY_WEIGHT: f64 = 0.7;
const SIMILARITY_WEIGHT: f64 = 0.3;

/// What to resolve.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentsQuery {
    pub start: String,
    /// Keep only related entities of this type (the walk still passes through others).
    pub entity_type: Option<String>,
    pub relationship_types: Option<Vec<String>>,
    pub max_depth: u32,
    /// Most documents returned.
    pub limit: usize,
    /// When false, only `related_entities` is filled.
    pub resolve_documents: bool,
}

/// One resolved document.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphDocument {
    /// Shared with the held documents of an embedded store (see [`DocumentHit`]).
    pub document: Arc<Document>,
    pub score: f64,
    /// The type of the edge that reached the document's entity, or [`SELF_RELATIONSHIP`].
    pub relationship: String,
    /// The document's entity when it is not the start entity.
    pub related_entity: Option<String>,
}

/// The answer: documents by score, and the names of the connected entities in walk order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphDocuments {
    pub results: Vec<GraphDocument>,
    pub related_entities: NameList,
}

impl KnowledgeBase {
    pub async fn graph_documents(&self, query: &DocumentsQuery) -> Result<GraphDocuments> {
        let reach = self
            .documents_walk(
                &TraversalQuery {
                    start: query.start.clone(),
                    relationship_types: query.relationship_types.clone(),
                    direction: Direction::Both,
                    depth: query.max_depth,
                    limit: MAX_RELATED_ENTITIES + 1,
                },
                query.entity_type.as_deref(),
            )
            .await?;
        let Some(start) = reach.names.first() else {
            return Ok(GraphDocuments::default());
        };
        if !query.resolve_documents {
            return Ok(GraphDocuments {
                results: Vec::new(),
                related_entities: reach.names.without_first(),
            });
        }
        let names: Vec<&str> = reach.names.iter().collect();
        let text = format!("{start} {}", reach.start_type);
        let numbered = reach.numbered.as_ref().map(|(id, n)| (*id, n.as_slice()));
        let docs = self
            .best_documents_of(&names, numbered, &reach.depths, &text, query.limit)
            .await?;
        let mut results: Vec<GraphDocument> = docs
            .into_iter()
            .filter_map(|(d, i)| {
                let name = names.get(i)?.to_string();
                let depth = reach.depths[i];
                Some(GraphDocument {
                    relationship: reach.via[i]
                        .as_deref()
                        .unwrap_or(SELF_RELATIONSHIP)
                        .to_string(),
                    related_entity: (depth > 0).then_some(name),
                    score: score(depth, d.score),
                    document: d.document,
                })
            })
            .collect();
        results.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.document.title.cmp(&b.document.title))
                .then_with(|| a.document.id.cmp(&b.document.id))
        });
        results.truncate(query.limit);
        Ok(GraphDocuments {
            results,
            related_entities: reach.names.without_first(),
        })
    }
}

/// The places, in order, of the `candidates` (each its entity's place in `depths` and its
/// similarity) that can be among the best `limit` by score: those that reach the `limit`-th
/// best score, ties included (ties break by title, which is not read yet). All of them when
/// there are no more than `limit`, or `limit` is 0.
fn best_places(
    candidates: impl Iterator<Item = (usize, f32)>,
    depths: &[u32],
    limit: usize,
) -> Vec<usize> {
    let scores: Vec<f64> = candidates
        .map(|(i, similarity)| score(depths[i], f64::from(similarity)))
        .collect();
    let all = 0..scores.len();
    if scores.len() <= limit || limit == 0 {
        return all.collect();
    }
    let cutoff = nth_best(scores.clone(), limit);
    all.filter(|&n| scores[n] >= cutoff).collect()
}

/// The `n`-th best (largest) of `scores`, `n` from 1; `scores` holds at least `n`.
fn nth_best(mut scores: Vec<f64>, n: usize) -> f64 {
    *scores
        .select_nth_unstable_by(n - 1, |a, b| b.total_cmp(a))
        .1
}

/// The places, in order, of the `candidates` (each its entity's place in `depths` and a range
/// that holds its similarity) whose score can reach the `limit`-th best: those whose best
/// possible score reaches the `limit`-th best of the worst possible ones. Every document that
/// [`best_places`] keeps among all of them is among these (its score is at least the
/// `limit`-th best, which is at least that of the worst possible ones), and so are the
/// `limit` best, so `best_places` over these alone keeps the same documents. For more than
/// `limit` candidates, `limit` > 0.
fn within_reach(
    candidates: impl Iterator<Item = (usize, (f32, f32))>,
    depths: &[u32],
    limit: usize,
) -> Vec<usize> {
    let (worst, best): (Vec<f64>, Vec<f64>) = candidates
        .map(|(i, (lo, hi))| {
            let depth = depths[i];
            (score(depth, f64::from(lo)), score(depth, f64::from(hi)))
        })
        .unzip();
    debug_assert!(limit > 0 && worst.len() > limit);
    let floor = nth_best(worst, limit);
    (0..best.len()).filter(|&n| best[n] >= floor).collect()
}

/// Asks for the fields of every document of `hits` at once (see [`Document::prefetch_text`]):
/// each is an allocation of its own, and read in turn each was a miss that waited on the last.
fn fetch_fields(hits: &[DocumentHit]) {
    for h in hits {
        h.document.prefetch_text();
    }
}

/// A document's score from its entity's depth and its similarity (rounded to 6 places, so
/// that ties are ties whatever the float noise).
fn score(depth: u32, similarity: f64) -> f64 {
    let proximity = 1.0 / (1.0 + f64::from(depth));
    let score = PROXIMITY_WEIGHT * proximity + SIMILARITY_WEIGHT * similarity.clamp(0.0, 1.0);
    (score * 1e6).round() / 1e6
}

impl KnowledgeBase {
    /// The documents of the entities `names` (at `depths`, by place; `numbered`: their
    /// numbers, see [`VectorIndex::linked`](crate::VectorIndex::linked)) that can be among the
    /// best `limit` by score, each with its similarity to `text` as its score and its entity's
    /// place in `names`. A document relinked by another node since the indexes last heard of
    /// it, to an entity not in `names`, is left out.
    ///
    /// A hub reaches hundreds of entities, and reading every one of their documents from
    /// SurrealDB to keep ten was most of the time of a graph-documents request. Both parts
    /// of a score are known before reading: the depth of the document's entity (the keyword
    /// index knows each document's entity) and its similarity (the vector index). So only
    /// the documents whose score reaches the `limit`-th best are read, ties included, since
    /// ties break by title. When what is read disagrees with the indexes (a document deleted
    /// or relinked by another node since they heard of it), every candidate is read, as the
    /// answer then depends on documents the selection did not foresee.
    async fn best_documents_of(
        &self,
        names: &[&str],
        numbered: Option<(u64, &[u32])>,
        depths: &[u32],
        text: &str,
        limit: usize,
    ) -> Result<Vec<(DocumentHit, usize)>> {
        self.connection().await?;
        let Some(found) = self.linked_documents(names, numbered) else {
            return Ok(Vec::new());
        };
        let q = self.embed_query(text).await?;
        let chosen = self.choose(names, found, depths, &q, limit).await?;
        let expected: FxHashMap<VectorKey, usize> =
            chosen.iter().map(|(key, i, _)| (key.clone(), *i)).collect();
        let hits = self
            .documents_by_key(chosen.into_iter().map(|(k, _, s)| (k, s)).collect())
            .await?;
        // The foreseen check below reads each document, and the answer's writer all of it.
        fetch_fields(&hits);
        // Each read document with its entity's place, when every one is as foreseen.
        let foreseen: Option<Vec<usize>> = (hits.len() == expected.len())
            .then(|| {
                hits.iter()
                    .map(|h| {
                        let key = h.document.id.split_once(':').map_or("", |(_, k)| k);
                        let &i = expected.get(key)?;
                        h.document.links(names[i]).then_some(i)
                    })
                    .collect()
            })
            .flatten();
        if let Some(places) = foreseen {
            return Ok(hits.into_iter().zip(places).collect());
        }
        let every = candidates_by_key(self.vectors(), self.text(), names, None, &q);
        let hits = self
            .documents_by_key(every.into_iter().map(|(k, _, s)| (k, s)).collect())
            .await?;
        fetch_fields(&hits);
        // What was read decides: each document's place is the first of its entities'.
        let places: FxHashMap<&str, usize> = names
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &n)| (n, i))
            .collect();
        Ok(hits
            .into_iter()
            .filter_map(|h| {
                let i = (h.document.entities())
                    .filter_map(|n| places.get(n.as_str()).copied())
                    .min()?;
                Some((h, i))
            })
            .collect())
    }

    /// The documents of `found` that can be among the best `limit` by score (see
    /// [`choose`]). On the calling task when reading their codes takes about a tenth of a
    /// millisecond (the limit semantic search keeps), else on the scan lane or tokio's
    /// blocking pool (`KnowledgeBase::in_memory`): a graph-documents request may run beside
    /// an HTTP worker (`kbq_actors::local`), and the walk from a hub whose entities have
    /// thousands of documents must not hold it.
    async fn choose(
        &self,
        names: &[&str],
        found: Found,
        depths: &[u32],
        q: &[f32],
        limit: usize,
    ) -> Result<Vec<(VectorKey, usize, f32)>> {
        let (vectors, text) = (self.vectors(), self.text());
        // The query is of the index's dimension (else nothing is chosen by slot).
        let reads = found.reads(q.len());
        if reads <= INLINE_CODE_BYTES {
            return Ok(choose(vectors, text, names, found, depths, q, limit));
        }
        let (vectors, text) = (vectors.clone(), text.clone());
        let names: Vec<String> = names.iter().map(|&n| n.to_string()).collect();
        let (depths, q) = (depths.to_vec(), q.to_vec());
        self.in_memory(false, "graph documents", move || {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            choose(&vectors, &text, &names, found, &depths, &q, limit)
        })
        .await
    }

    /// The documents linked to `names` (`numbered`: their numbers), or `None` when there are
    /// none. By slot in the vector index when it holds every document (the usual case: only a
    /// document without a vector of the embedder's dimension is missing from it), else by key
    /// from the keyword index, which holds them all.
    fn linked_documents(&self, names: &[&str], numbered: Option<(u64, &[u32])>) -> Option<Found> {
        let vectors = self.vectors().read();
        let text = self.text().read();
        if vectors.len() == text.len() {
            return vectors.linked(names, numbered).map(Found::Slots);
        }
        let keyed = text.documents_by_entity(names.iter().copied());
        (!keyed.is_empty()).then_some(Found::Keys(keyed))
    }
}

/// How [`KnowledgeBase::linked_documents`] found the documents of some entities.
enum Found {
    Slots(Linked),
    /// (key, the entity's place in the names)
    Keys(Vec<(VectorKey, usize)>),
}

impl Found {
    /// About the bytes of vectors [`choose`] reads for these documents, each of `dimension`
    /// components: each one's 8-bit codes by slot, its whole `f32` vector by key.
    fn reads(&self, dimension: usize) -> usize {
        match self {
            Found::Slots(linked) => linked.places().len() * dimension,
            Found::Keys(keyed) => keyed.len() * dimension * size_of::<f32>(),
        }
    }
}

/// The documents of `found` (of the entities `names`, at `depths`) that can be among the best
/// `limit` by score, ties included (see [`best_places`]), with their similarity to `q`:
/// (key, its entity's place, its similarity).
fn choose(
    vectors: &RwLock<VectorIndex>,
    text: &RwLock<TextIndex>,
    names: &[&str],
    found: Found,
    depths: &[u32],
    q: &[f32],
    limit: usize,
) -> Vec<(VectorKey, usize, f32)> {
    let chosen = match &found {
        Found::Slots(linked) => chosen_by_slot(&vectors.read(), linked, depths, q, limit),
        Found::Keys(_) => None,
    };
    if let Some(chosen) = chosen {
        return chosen;
    }
    // The index changed while the query was embedded, or it does not hold every document:
    // by key.
    let keyed = match found {
        Found::Keys(keyed) => Some(keyed),
        Found::Slots(_) => None,
    };
    let candidates = candidates_by_key(vectors, text, names, keyed, q);
    let picks = best_places(candidates.iter().map(|&(_, i, s)| (i, s)), depths, limit);
    let mut candidates: Vec<Option<_>> = candidates.into_iter().map(Some).collect();
    picks
        .into_iter()
        .filter_map(|n| candidates[n].take())
        .collect()
}

/// The documents of `linked` that can be among the best `limit` (see
/// [`best_places`]): (key, its entity's place, its similarity). Every similarity is read
/// by slot, and only the kept documents' keys. `None` when the index has changed since
/// `linked` was taken.
fn chosen_by_slot(
    vectors: &VectorIndex,
    linked: &Linked,
    depths: &[u32],
    q: &[f32],
    limit: usize,
) -> Option<Vec<(VectorKey, usize, f32)>> {
    let places: Vec<usize> = linked.places().collect();
    // The documents to score exactly: all when all are kept, else those whose score can
    // reach the kept ones' by their codes' bounds (a hub's walk links hundreds).
    let exact: Vec<usize> = if places.len() <= limit || limit == 0 {
        (0..places.len()).collect()
    } else {
        let bounds = vectors.similarity_bounds(linked, q)?;
        within_reach(places.iter().copied().zip(bounds), depths, limit)
    };
    let similar = vectors.similarities_of(linked, &exact, q)?;
    let kept = best_places(
        exact.iter().zip(&similar).map(|(&n, &s)| (places[n], s)),
        depths,
        limit,
    );
    let picks: Vec<usize> = kept.iter().map(|&m| exact[m]).collect();
    let keys = vectors.keys_of(linked, &picks)?;
    Some(
        keys.into_iter()
            .zip(kept)
            .map(|(key, m)| (key, places[exact[m]], similar[m]))
            .collect(),
    )
}

/// Every document of `names` by key: `keyed` when the keyword index was already asked
/// for them, else from it, as it holds them all. (key, its entity's place, its similarity
/// to `q`, 0 without a vector).
fn candidates_by_key(
    vectors: &RwLock<VectorIndex>,
    text: &RwLock<TextIndex>,
    names: &[&str],
    keyed: Option<Vec<(VectorKey, usize)>>,
    q: &[f32],
) -> Vec<(VectorKey, usize, f32)> {
    let keyed = match keyed {
        Some(keyed) => keyed,
        None => text.read().documents_by_entity(names.iter().copied()),
    };
    let keys: Vec<&VectorKey> = keyed.iter().map(|(key, _)| key).collect();
    let similarities = vectors.read().similarities(&keys, q);
    keyed
        .into_iter()
        .zip(similarities)
        .map(|((key, i), s)| (key, i, s.unwrap_or(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::generate::{Spec, generate};
    use crate::{HashingEmbedder, StoreConfig};

    /// A knowledge base of `records`, with the graph index on or off.
    async fn opened(records: Vec<crate::Record>, graph_index: bool) -> Arc<KnowledgeBase> {
        let mut config = StoreConfig::memory();
        config.graph_index = graph_index;
        let kb = KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await;
        crate::import::import_records(
            &kb,
            records.into_iter().enumerate().collect(),
            &crate::progress::Silent,
        )
        .await
        .unwrap();
        kb
    }

    /// Graph documents from `start` to depth 2, the best 10, of `entity_type` (any: `None`).
    fn query(start: String, entity_type: Option<&str>) -> DocumentsQuery {
        DocumentsQuery {
            start,
            entity_type: entity_type.map(str::to_string),
            relationship_types: None,
            max_depth: 2,
            limit: 10,
            resolve_documents: true,
        }
    }

    /// The graph index's walk hands the vector index entity numbers, the SurrealDB walk (graph
    /// index off) hands names: both find the same documents, also after an entity is deleted
    /// (its documents unlinked), made again, and given new documents.
    #[tokio::test]
    async fn documents_found_by_number_and_by_name_agree() {
        let records = generate(Spec {
            entities: 300,
            relationships: 900,
            document_ratio: 1.0,
            seed: 9,
        });
        let by_number = opened(records.clone(), true).await;
        let by_name = opened(records, false).await;
        let starts: Vec<String> = (0..300)
            .step_by(11)
            .map(crate::generate::entity_name)
            .collect();
        let compare = |round: &'static str| {
            let (by_number, by_name, starts) = (&by_number, &by_name, &starts);
            async move {
                let mut documents = 0;
                for start in starts {
                    for ty in [None, Some("person")] {
                        let a = by_number.graph_documents(&query(start.clone(), ty)).await;
                        let b = by_name.graph_documents(&query(start.clone(), ty)).await;
                        let (a, b) = (a.unwrap(), b.unwrap());
                        assert_eq!(a, b, "{round}: from {start}, type {ty:?}");
                        documents += a.results.len();
                    }
                }
                assert!(documents > starts.len() * 5, "{round}: {documents}");
            }
        };
        // The graph index's walks are numbered in the vector index's numbering.
        let walk = TraversalQuery {
            start: starts[0].clone(),
            relationship_types: None,
            direction: Direction::Both,
            depth: 1,
            limit: 10,
        };
        let reach = by_number.documents_walk(&walk, None).await.unwrap();
        let numbering = by_number.vectors().read().numbers().id();
        assert_eq!(reach.numbered.map(|(id, _)| id), Some(numbering));
        compare("as imported").await;
        let reached = crate::generate::entity_name(11);
        for kb in [&by_number, &by_name] {
            assert!(kb.delete_entity(&reached).await.unwrap().deleted);
        }
        compare("deleted").await;
        for kb in [&by_number, &by_name] {
            kb.upsert_entities(&[crate::NewEntity {
                name: reached.clone(),
                entity_type: "person".into(),
                properties: Default::default(),
            }])
            .await
            .unwrap();
            kb.upsert_relationships(&[crate::NewRelationship {
                source_name: reached.clone(),
                target_name: starts[0].clone(),
                relationship_type: "knows".into(),
                properties: Default::default(),
            }])
            .await
            .unwrap();
            kb.upsert_documents(&[crate::NewDocument {
                title: "Made again".into(),
                content: "The entity was deleted and made again.".into(),
                source: "test".into(),
                source_id: "again".into(),
                content_type: "text/plain".into(),
                url: None,
                entity_name: Some(reached.clone()),
                mentions: Vec::new(),
            }])
            .await
            .unwrap();
        }
        compare("made again").await;
        let again = by_number
            .graph_documents(&query(reached.clone(), None))
            .await
            .unwrap();
        assert_eq!(again.results[0].document.title, "Made again");
    }

    /// The documents of a walk are found by slot in the vector index while it holds every
    /// document, and by key from the keyword index while it does not: both give the same
    /// answers, and a document without a vector scores on proximity alone.
    #[tokio::test]
    async fn documents_found_by_slot_and_by_key_agree() {
        let records = generate(Spec {
            entities: 400,
            relationships: 1200,
            document_ratio: 1.0,
            seed: 5,
        });
        let kb = opened(records, true).await;
        let starts: Vec<String> = (0..400)
            .step_by(7)
            .map(crate::generate::entity_name)
            .collect();
        let mut by_slot = Vec::new();
        for start in &starts {
            by_slot.push(
                kb.graph_documents(&query(start.clone(), None))
                    .await
                    .unwrap(),
            );
        }
        assert!(by_slot.iter().any(|d| d.results.len() == 10));
        // One document loses its vector: every answer is now found by key.
        let (lost, lost_entity) = {
            let text = kb.text().read();
            let name = crate::generate::entity_name(0);
            let key = text.documents_of([name.as_str()])[0].clone();
            (key, name)
        };
        kb.vectors().write().remove(&lost);
        for (start, before) in starts.iter().zip(&by_slot) {
            let after = kb
                .graph_documents(&query(start.clone(), None))
                .await
                .unwrap();
            let reached =
                *start == lost_entity || before.related_entities.iter().any(|n| n == lost_entity);
            if !reached {
                assert_eq!(&after, before, "from {start}");
                continue;
            }
            assert_eq!(after.related_entities, before.related_entities);
            if *start == lost_entity {
                // Its own document, at depth 0, is still first.
                let first = &after.results[0];
                assert_eq!(first.document.entity_name.as_deref(), Some(start.as_str()));
                assert_eq!(first.score, PROXIMITY_WEIGHT);
            }
            for d in &after.results {
                if d.document.entity_name.as_deref() == Some(lost_entity.as_str()) {
                    let depth = if d.related_entity.is_some() { 1.0 } else { 0.0 };
                    let proximity = PROXIMITY_WEIGHT / (1.0 + depth);
                    assert!(d.score <= proximity + 1e-6, "{d:?}");
                }
            }
        }
    }

    /// A hub's documents are scored exactly only where their codes' bounds say they can be
    /// kept: the same documents, with the same similarities, as scoring every one, for every
    /// limit, also when many tie at the cut-off (one text, so one vector, for many).
    #[tokio::test]
    async fn documents_chosen_by_bounds_are_those_chosen_by_every_similarity() {
        let records = generate(Spec {
            entities: 300,
            relationships: 1500,
            document_ratio: 1.0,
            seed: 13,
        });
        let kb = opened(records, true).await;
        let walk = |start: String, depth: u32| TraversalQuery {
            start,
            relationship_types: None,
            direction: Direction::Both,
            depth,
            limit: MAX_RELATED_ENTITIES + 1,
        };
        // Ties: the first hubs' neighbours get one more document each, all of one text.
        for hub in 0..3 {
            let reach = kb
                .documents_walk(&walk(crate::generate::entity_name(hub), 1), None)
                .await
                .unwrap();
            let tied: Vec<crate::NewDocument> = (reach.names.iter().skip(1))
                .enumerate()
                .map(|(i, name)| crate::NewDocument {
                    title: format!("Tie {hub} {i}"),
                    content: "One text for many entities.".into(),
                    source: "test".into(),
                    source_id: format!("tie-{hub}-{i}"),
                    content_type: "text/plain".into(),
                    url: None,
                    entity_name: Some(name.to_string()),
                    mentions: Vec::new(),
                })
                .collect();
            kb.upsert_documents(&tied).await.unwrap();
        }
        let mut compared = 0;
        for start in (0..300).step_by(13).map(crate::generate::entity_name) {
            for depth in [1, 2] {
                let reach = kb.documents_walk(&walk(start.clone(), depth), None).await;
                let reach = reach.unwrap();
                let names: Vec<&str> = reach.names.iter().collect();
                let numbered = reach.numbered.as_ref().map(|(id, n)| (*id, n.as_slice()));
                let Some(Found::Slots(linked)) = kb.linked_documents(&names, numbered) else {
                    continue;
                };
                let text = format!("{start} {}", reach.start_type);
                let q = kb.embed_one(&text).await.unwrap();
                for limit in [0, 1, 2, 5, 10, 40] {
                    let chosen =
                        chosen_by_slot(&kb.vectors().read(), &linked, &reach.depths, &q, limit);
                    let every = {
                        let vectors = kb.vectors().read();
                        let places: Vec<usize> = linked.places().collect();
                        let all: Vec<usize> = (0..places.len()).collect();
                        let similar = vectors.similarities_of(&linked, &all, &q).unwrap();
                        let scored = places.iter().copied().zip(similar.iter().copied());
                        let picks = best_places(scored, &reach.depths, limit);
                        let keys = vectors.keys_of(&linked, &picks).unwrap();
                        keys.into_iter()
                            .zip(picks)
                            .map(|(key, n)| (key, places[n], similar[n]))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(chosen, Some(every), "from {start}, depth {depth}, {limit}");
                    compared += 1;
                }
            }
        }
        assert!(compared > 100, "{compared}");
    }
}
