//! Errors of the knowledge base. The HTTP edge maps each variant to a status code.

/// What went wrong inside the store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or did not answer in time: a 503 at the edge.
    #[error("knowledge base unavailable: {0}")]
    Unavailable(String),
    /// The database answered with an error to a query kbq wrote: a bug or a schema mismatch.
    #[error("knowledge base query failed: {0}")]
    Query(String),
    /// A record or argument broke a rule; `field` names the offending field.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The knowledge base's database is gone: its workspace was deleted while the statement
    /// ran (a 404 `workspace_not_found` at the edge).
    #[error("the workspace's database was removed: {0}")]
    Removed(String),
}

impl StoreError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
