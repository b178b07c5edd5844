//! Progress reporting for long store work: an import's phases and `kbq reindex`'s embeddings.
//! Its own module because both the import (`import::import_records`) and the knowledge base's
//! `KnowledgeBase::reembed` report through it, and neither should import the other for it.
//! `import` re-exports these types, where callers have always found them.

/// The stages of an import, for progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Entities,
    Relationships,
    Documents,
    /// Documents embedded again (`kbq reindex`).
    Embeddings,
    /// What an export kept beside the graph (memories, sources, supports, kept answers),
    /// restored by an import.
    Kept,
}

/// Receives progress: `start` once per phase with its total, then `advance` per batch.
pub trait Progress: Send + Sync {
    fn start(&self, phase: Phase, total: u64);
    fn advance(&self, done: u64);
}

/// Progress that goes nowhere.
pub struct Silent;

impl Progress for Silent {
    fn start(&self, _: Phase, _: u64) {}
    fn advance(&self, _: u64) {}
}

/// Receives the progress of connecting a store and building its in-memory indexes: the
/// store is read in parts (key ranges of each table) and the indexes built from them, and
/// `advance` reports after each part how many of how many are finished.
pub trait LoadProgress: Send + Sync {
    fn advance(&self, done: u32, total: u32);
}

impl LoadProgress for Silent {
    fn advance(&self, _: u32, _: u32) {}
}
