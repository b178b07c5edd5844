//! The bundled demo knowledge base (the history of computing), compiled into the binary so a
//! fresh `kbq serve` has something to query.

use kbq_store::import::{self, ImportReport, Silent};
use kbq_store::{KnowledgeBase, StoreError};

pub const DEMO: &str = include_str!("../config/demo/history-of-computing.ndjson");

/// Imports the demo when the store has no entities. Returns what was imported, if anything.
pub async fn load_if_empty(kb: &KnowledgeBase) -> Result<Option<ImportReport>, StoreError> {
    if !kb.has_no_entities().await? {
        return Ok(None);
    }
    let report = import::import(kb, DEMO.as_bytes(), &Silent).await?;
    Ok(Some(report))
}
