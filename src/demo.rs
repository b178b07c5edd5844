//! The bundled demo knowledge base (the history of computing), compiled into the binary so a
//! fresh `kbq serve` has something to query.

use kbq_store::import::{self, ImportReport, Silent};
use kbq_store::{KnowledgeBase, StoreError};

pub const DEMO: &str = include_str!("../config/demo/history-of-computing.ndjson");

/// Attempts at importing the demo when the store breaks off the import.
const ATTEMPTS: u32 = 5;

/// Pause between two attempts.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Imports the demo when the store has no entities. Returns what was imported, if anything.
///
/// An import the store broke off (a SurrealDB server's connection lost part way) is run
/// again, up to five times: it upserts by identity, so the next attempt completes
/// what the last one wrote. Once part of the demo is written the store is no longer empty,
/// and a node that gave up then would serve a part of the demo until restarted by hand.
pub async fn load_if_empty(kb: &KnowledgeBase) -> Result<Option<ImportReport>, StoreError> {
    if !kb.has_no_entities().await? {
        return Ok(None);
    }
    let mut attempt = 1;
    loop {
        match import::import(kb, DEMO.as_bytes(), &Silent).await {
            Ok(report) => return Ok(Some(report)),
            Err(StoreError::Unavailable(e)) if attempt < ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "the demo's import was broken off; importing it again");
                tokio::time::sleep(PAUSE).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
