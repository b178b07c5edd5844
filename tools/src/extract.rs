//! Entity extraction: finds the knowledge base's entity names in a text with one Aho-Corasick
//! automaton, rebuilt only when the store's entity names change.
//!
//! Building it over every name is CPU work that grows with the graph (about 0.8 s for the
//! 107,000 names of Debian's package index, release build). A small automaton is rebuilt by
//! the request that finds it stale; a large one on tokio's blocking pool, while requests
//! go on with the one before, which misses only the names written since. So no request and
//! no runtime worker waits for a large build after a write, which during an ingestion would
//! be every few moments. The server builds the first one as soon as it is ready
//! ([`EntityExtractor::warm`]).

use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use kbq_store::{KnowledgeBase, StoreError};
use parking_lot::RwLock;

/// Names shorter than this (in characters) are not looked for: they match too much.
const MIN_NAME_CHARS: usize = 2;

struct Automaton {
    generation: u64,
    matcher: AhoCorasick,
    names: Vec<String>,
}

/// Automata of fewer names than this are rebuilt by the request that finds them stale (a
/// few milliseconds); larger ones in the background (see the module docs).
pub const INLINE_NAMES: usize = 10_000;

/// Finds entity names in text: case-insensitive, whole words, longest match first.
pub struct EntityExtractor {
    shared: Arc<Shared>,
}

struct Shared {
    kb: Arc<KnowledgeBase>,
    /// See [`INLINE_NAMES`].
    inline_names: usize,
    cache: RwLock<Option<Arc<Automaton>>>,
    /// Held while an automaton is built, so that the requests that find the cache stale at
    /// once (after start, after a write) wait for one build instead of each running its own
    /// over every entity name.
    building: futures::lock::Mutex<()>,
    /// Whether a background build is under way or about to be.
    rebuilding: std::sync::atomic::AtomicBool,
    builds: std::sync::atomic::AtomicU64,
}

impl EntityExtractor {
    pub fn new(kb: Arc<KnowledgeBase>) -> Self {
        Self::with_inline_names(kb, INLINE_NAMES)
    }

    /// As [`new`](Self::new), rebuilding inline below `inline_names` names.
    pub fn with_inline_names(kb: Arc<KnowledgeBase>, inline_names: usize) -> Self {
        EntityExtractor {
            shared: Arc::new(Shared {
                kb,
                inline_names,
                cache: RwLock::new(None),
                building: futures::lock::Mutex::new(()),
                rebuilding: std::sync::atomic::AtomicBool::new(false),
                builds: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// Builds the automaton in the background if none is built yet, so that the first
    /// request that needs it does not wait for it (or waits less). Needs a tokio runtime.
    pub fn warm(&self) {
        if self.shared.cache.read().is_none() {
            self.rebuild_in_background();
        }
    }

    /// The entity names that occur in `text`, in order of first occurrence, each once.
    pub async fn extract(&self, text: &str) -> Result<Vec<String>, StoreError> {
        let automaton = self.automaton().await?;
        let lower = text.to_lowercase();
        let mut found: Vec<String> = Vec::new();
        for m in automaton.matcher.find_iter(&lower) {
            let before = lower[..m.start()].chars().next_back();
            let after = lower[m.end()..].chars().next();
            let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
            if boundary(before) && boundary(after) {
                let name = &automaton.names[m.pattern().as_usize()];
                if !found.contains(name) {
                    found.push(name.clone());
                }
            }
        }
        Ok(found)
    }

    async fn automaton(&self) -> Result<Arc<Automaton>, StoreError> {
        let shared = &self.shared;
        let generation = shared.kb.generation();
        if let Some(a) = shared.current(generation) {
            return Ok(a);
        }
        let stale = shared.cache.read().clone();
        if let Some(stale) = stale
            && stale.names.len() >= shared.inline_names
        {
            self.rebuild_in_background();
            return Ok(stale);
        }
        shared.build(generation, false).await
    }

    /// Starts a build on the blocking pool unless one is under way.
    fn rebuild_in_background(&self) {
        use std::sync::atomic::Ordering;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.shared.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = self.shared.clone();
        runtime.spawn(async move {
            // Written to meanwhile: once more, from the names as they are now.
            for round in 1..=2 {
                let generation = shared.kb.generation();
                if let Err(e) = shared.build(generation, true).await {
                    tracing::warn!(error = %e, "the entity automaton could not be rebuilt");
                }
                shared.rebuilding.store(false, Ordering::Release);
                if round == 2
                    || shared.current(shared.kb.generation()).is_some()
                    || shared.rebuilding.swap(true, Ordering::AcqRel)
                {
                    break;
                }
            }
        });
    }

    /// How many automata have been built so far.
    pub fn builds(&self) -> u64 {
        self.shared
            .builds
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Shared {
    /// Builds the automaton of the names as of `generation` (or later), unless another build
    /// made one meanwhile; `blocking`: its CPU work on tokio's blocking pool.
    async fn build(&self, generation: u64, blocking: bool) -> Result<Arc<Automaton>, StoreError> {
        let _building = self.building.lock().await;
        // Built by the request this one waited for.
        if let Some(a) = self.current(generation) {
            return Ok(a);
        }
        let mut names = self.kb.entity_names().await?;
        names.retain(|n| n.chars().count() >= MIN_NAME_CHARS);
        let make = move || -> Result<Automaton, StoreError> {
            let patterns: Vec<String> = names.iter().map(|n| n.to_lowercase()).collect();
            let matcher = AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .map_err(|e| StoreError::Query(format!("entity automaton: {e}")))?;
            Ok(Automaton {
                generation,
                matcher,
                names,
            })
        };
        let built = if blocking {
            tokio::task::spawn_blocking(make)
                .await
                .map_err(|e| StoreError::Query(format!("entity automaton: {e}")))??
        } else {
            make()?
        };
        let built = Arc::new(built);
        *self.cache.write() = Some(built.clone());
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(built)
    }

    /// The cached automaton, if it was built at `generation` or later.
    fn current(&self, generation: u64) -> Option<Arc<Automaton>> {
        self.cache
            .read()
            .as_ref()
            .filter(|a| a.generation >= generation)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbq_store::{HashingEmbedder, NewEntity, StoreConfig};

    fn entity(name: &str) -> NewEntity {
        NewEntity {
            name: name.into(),
            entity_type: "thing".into(),
            properties: Default::default(),
        }
    }

    #[tokio::test]
    async fn requests_that_find_the_automaton_stale_together_wait_for_one_build() {
        // Without the graph index the names are read from SurrealDB, so a build awaits, and
        // the other requests are polled while it does.
        let config = StoreConfig {
            graph_index: false,
            ..StoreConfig::memory()
        };
        let kb = KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await;
        kb.upsert_entities(&[entity("Ada Lovelace"), entity("Analytical Engine")])
            .await
            .unwrap();
        let extractor = EntityExtractor::new(kb.clone());
        let asks = (0..8).map(|_| extractor.extract("Ada Lovelace wrote on the Analytical Engine"));
        for found in futures::future::join_all(asks).await {
            assert_eq!(found.unwrap(), ["Ada Lovelace", "Analytical Engine"]);
        }
        assert_eq!(extractor.builds(), 1);

        // A write makes it stale: the next requests build it once more, with the new name.
        kb.upsert_entities(&[entity("Babbage")]).await.unwrap();
        let asks = (0..8).map(|_| extractor.extract("Babbage and Ada Lovelace"));
        for found in futures::future::join_all(asks).await {
            assert_eq!(found.unwrap(), ["Babbage", "Ada Lovelace"]);
        }
        assert_eq!(extractor.builds(), 2);
    }

    #[tokio::test]
    async fn a_large_automaton_is_rebuilt_in_the_background_while_the_last_one_answers() {
        let kb =
            KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
        kb.upsert_entities(&[entity("Ada Lovelace")]).await.unwrap();
        // Every automaton counts as large.
        let extractor = EntityExtractor::with_inline_names(kb.clone(), 0);
        extractor.warm();
        let built = async {
            while extractor.builds() == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), built)
            .await
            .unwrap();
        assert_eq!(
            extractor.extract("Ada Lovelace and Babbage").await.unwrap(),
            ["Ada Lovelace"]
        );

        // After a write, requests answer from the last automaton at once, and one build runs.
        kb.upsert_entities(&[entity("Babbage")]).await.unwrap();
        let asks = (0..8).map(|_| extractor.extract("Ada Lovelace and Babbage"));
        for found in futures::future::join_all(asks).await {
            let found = found.unwrap();
            assert!(
                found == ["Ada Lovelace"] || found == ["Ada Lovelace", "Babbage"],
                "{found:?}"
            );
        }
        let rebuilt = async {
            while extractor
                .extract("Ada Lovelace and Babbage")
                .await
                .unwrap()
                .len()
                < 2
            {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), rebuilt)
            .await
            .unwrap();
        assert_eq!(extractor.builds(), 2);
    }
}
