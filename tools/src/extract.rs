//! Entity extraction: finds the knowledge base's entity names in a text with one Aho-Corasick
//! automaton, rebuilt only when the store's entity names change.

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

/// Finds entity names in text: case-insensitive, whole words, longest match first.
pub struct EntityExtractor {
    kb: Arc<KnowledgeBase>,
    cache: RwLock<Option<Arc<Automaton>>>,
    /// Held while an automaton is built, so that the requests that find the cache stale at
    /// once (after start, after a write) wait for one build instead of each running its own
    /// over every entity name.
    building: futures::lock::Mutex<()>,
    builds: std::sync::atomic::AtomicU64,
}

impl EntityExtractor {
    pub fn new(kb: Arc<KnowledgeBase>) -> Self {
        EntityExtractor {
            kb,
            cache: RwLock::new(None),
            building: futures::lock::Mutex::new(()),
            builds: std::sync::atomic::AtomicU64::new(0),
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
        let generation = self.kb.generation();
        if let Some(a) = self.current(generation) {
            return Ok(a);
        }
        let _building = self.building.lock().await;
        // Built by the request this one waited for.
        if let Some(a) = self.current(generation) {
            return Ok(a);
        }
        let mut names = self.kb.entity_names().await?;
        names.retain(|n| n.chars().count() >= MIN_NAME_CHARS);
        let patterns: Vec<String> = names.iter().map(|n| n.to_lowercase()).collect();
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|e| StoreError::Query(format!("entity automaton: {e}")))?;
        let built = Arc::new(Automaton {
            generation,
            matcher,
            names,
        });
        *self.cache.write() = Some(built.clone());
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(built)
    }

    /// How many automata have been built so far.
    pub fn builds(&self) -> u64 {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
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
}
