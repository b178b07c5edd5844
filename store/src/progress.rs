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
