//! `[workspaces]`: what a node keeps open of the workspaces it serves (docs/workspaces.md).

use serde::{Deserialize, Serialize};

use super::{ConfigError, within};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspacesSection {
    /// Seconds a workspace other than `default` may go without a request before this node
    /// closes it (its indexes dropped; the next request opens it again). 0: never.
    pub idle_close_secs: u64,
    /// Most heap, in MiB, that the indexes of the open workspaces other than `default` may
    /// hold on this node; past it, the least recently used are closed. 0: no bound.
    pub index_budget_mb: u64,
    /// Seconds a request waits for its workspace to open before it gets a 503 that says so
    /// (the opening goes on); 0: answer at once while it opens.
    pub open_timeout_secs: u64,
    /// Most entities a workspace other than `default` may hold; 0: no bound.
    pub max_entities: u64,
    /// Most documents a workspace other than `default` may hold; 0: no bound.
    pub max_documents: u64,
    /// Most bytes of documents' content a workspace other than `default` may hold; 0: no
    /// bound.
    pub max_document_bytes: u64,
    /// How many open workspaces `/metrics` gives series of their own (those with the
    /// largest indexes, labelled by id); 0: none.
    pub metrics_series: u64,
}

impl Default for WorkspacesSection {
    fn default() -> Self {
        WorkspacesSection {
            idle_close_secs: 3600,
            index_budget_mb: 0,
            open_timeout_secs: 30,
            max_entities: 0,
            max_documents: 0,
            max_document_bytes: 0,
            metrics_series: 20,
        }
    }
}

impl WorkspacesSection {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        within(
            "workspaces.idle_close_secs",
            self.idle_close_secs,
            0,
            30 * 24 * 3600,
        )?;
        within(
            "workspaces.index_budget_mb",
            self.index_budget_mb,
            0,
            1 << 20,
        )?;
        within(
            "workspaces.open_timeout_secs",
            self.open_timeout_secs,
            0,
            3600,
        )?;
        within(
            "workspaces.max_entities",
            self.max_entities,
            0,
            1_000_000_000,
        )?;
        within(
            "workspaces.max_documents",
            self.max_documents,
            0,
            1_000_000_000,
        )?;
        within(
            "workspaces.max_document_bytes",
            self.max_document_bytes,
            0,
            1 << 50,
        )?;
        within("workspaces.metrics_series", self.metrics_series, 0, 1000)
    }
}
