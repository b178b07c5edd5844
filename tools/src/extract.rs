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
}

impl EntityExtractor {
    pub fn new(kb: Arc<KnowledgeBase>) -> Self {
        EntityExtractor {
            kb,
            cache: RwLock::new(None),
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
        if let Some(a) = self
            .cache
            .read()
            .as_ref()
            .filter(|a| a.generation == generation)
        {
            return Ok(a.clone());
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
        Ok(built)
    }
}
