//! Workspaces at the edge: which workspace a request works in, and the workspaces this node
//! has open.
//!
//! A request's workspace is decided once, in the key middleware, from its key (every key
//! belongs to one workspace) and, for an `admin` key only, the `X-KBQ-Workspace` header. The
//! middleware puts the [`Workspace`] into the request's extensions; handlers take it from
//! there and pass it down as a value. Nothing shared and mutable says which workspace is
//! "current", so two requests in two workspaces cannot see each other's knowledge (the bug
//! class of LightRAG #2904 and Graphiti #1795).
//!
//! `default` is the configured database, open from start-up. Any other workspace is a
//! database of its own, registered in the default database's registry (`kbq_store`), and
//! opened here the first time a request needs it: its knowledge base shares the store's
//! connection and builds its own indexes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use kbq_actors::ingest::{Ingestor, Ingestors};
use kbq_store::{KnowledgeBase, WorkspaceRecord};

use crate::error::{ApiError, ErrorCode};
use crate::offload::Offload;

/// The workspace that always exists: the configured database.
pub const DEFAULT: &str = "default";

/// The header with which an `admin` key acts in another workspace.
pub const HEADER: &str = "x-kbq-workspace";

/// The longest name a workspace may have.
pub const MAX_NAME_CHARS: usize = 63;

/// The rule a workspace's name follows, as the API states it.
pub const NAME_RULE: &str = "1-63 characters of a-z, 0-9 and '-', starting with a letter";

/// [`NAME_RULE`] as a regular expression, for the OpenAPI document.
pub const NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,62}$";

/// True when `name` follows [`NAME_RULE`].
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= MAX_NAME_CHARS
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

/// How long an open workspace is trusted to still exist before the registry is read again:
/// a workspace deleted through another node stops answering here within this window.
const RECHECK: Duration = Duration::from_secs(1);

/// The longest a request waits for a workspace to open (connect and build its indexes)
/// before it gets a 503 that says so.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A request's workspace as the key middleware resolved it: its knowledge (what the actors,
/// tools and providers read; see [`kbq_tools::Workspace`]) and its ingestion. Handlers take
/// it from the request (`web::ReqData<Workspace>`) and pass it down.
#[derive(Clone)]
pub struct Workspace {
    pub knowledge: kbq_tools::Workspace,
    pub ingestor: Ingestor,
}

impl std::ops::Deref for Workspace {
    type Target = kbq_tools::Workspace;

    fn deref(&self) -> &kbq_tools::Workspace {
        &self.knowledge
    }
}

/// A workspace this node has open, or is opening.
struct Open {
    /// The registry's record it was opened from: a workspace deleted and created again has a
    /// new database, and so is a different `Open`.
    database: String,
    workspace: tokio::sync::OnceCell<Workspace>,
    /// When the registry last said the workspace exists.
    checked: parking_lot::Mutex<Instant>,
}

/// The workspaces of this node: `default`, and those opened since start-up.
pub struct Workspaces {
    default: Workspace,
    open: DashMap<Arc<str>, Arc<Open>>,
    ingestors: Ingestors,
    /// Where registry reads and a workspace's opening run: not on an HTTP worker's thread.
    offload: Offload,
}

impl Workspaces {
    /// The workspaces of a node whose default workspace is `kb` (which also holds the
    /// registry) with `ingestor`; `ingestors` starts the ingestion of the others.
    pub fn new(
        kb: Arc<KnowledgeBase>,
        ingestor: Ingestor,
        ingestors: Ingestors,
        offload: Offload,
    ) -> Self {
        Workspaces {
            offload,
            default: Workspace {
                knowledge: kbq_tools::Workspace::new(DEFAULT, kb),
                ingestor,
            },
            open: DashMap::new(),
            ingestors,
        }
    }

    /// The default workspace.
    pub fn default_workspace(&self) -> &Workspace {
        &self.default
    }

    /// The knowledge base that holds the registry of workspaces and minted keys.
    pub fn registry(&self) -> &Arc<KnowledgeBase> {
        &self.default.kb
    }

    /// The workspace `name`, opened if it is not open yet: `404 workspace_not_found` when the
    /// registry has no such workspace, `503` when it does not open in time. An open workspace
    /// checked within `RECHECK` (a second) answers at once; otherwise the registry is read (and the
    /// workspace opened) on the main runtime.
    pub async fn get(self: &Arc<Self>, name: &str) -> Result<Workspace, ApiError> {
        if name == DEFAULT {
            return Ok(self.default.clone());
        }
        if let Some(open) = self.open.get(name).map(|o| o.clone())
            && open.checked.lock().elapsed() < RECHECK
            && let Some(workspace) = open.workspace.get()
        {
            return Ok(workspace.clone());
        }
        let (this, name) = (self.clone(), name.to_string());
        self.offload
            .run(async move { this.load(&name).await })
            .await?
    }

    /// [`get`](Self::get)'s slow path: the registry read, and the opening.
    async fn load(&self, name: &str) -> Result<Workspace, ApiError> {
        let open = self.open(name).await?;
        let opening = open.workspace.get_or_try_init(|| async {
            let kb = self.registry().workspace_kb(&open.database);
            tokio::time::timeout(OPEN_TIMEOUT, kb.connect(&kbq_store::progress::Silent))
                .await
                .map_err(|_| {
                    ApiError::new(
                        ErrorCode::ServiceUnavailable,
                        format!(
                            "the workspace `{name}` is still opening (building its indexes); retry later"
                        ),
                    )
                })?
                .map_err(ApiError::from)?;
            let ingestor = self
                .ingestors
                .start(kb.clone())
                .await
                .map_err(crate::routes::sources::ingest_error)?;
            Ok::<_, ApiError>(Workspace {
                knowledge: kbq_tools::Workspace::new(name, kb),
                ingestor,
            })
        });
        opening.await.cloned()
    }

    /// The open record of `name`, checked against the registry when it was last checked more
    /// than [`RECHECK`] ago.
    async fn open(&self, name: &str) -> Result<Arc<Open>, ApiError> {
        if let Some(open) = self.open.get(name).map(|o| o.clone())
            && open.checked.lock().elapsed() < RECHECK
        {
            return Ok(open);
        }
        let Some(record) = self.registry().workspace(name).await? else {
            self.close(name);
            return Err(not_found(name));
        };
        let mut replaced = None;
        let open = self
            .open
            .entry(name.into())
            .and_modify(|o| {
                if o.database != record.database {
                    replaced = Some(std::mem::replace(o, Arc::new(Open::from(&record))));
                }
            })
            .or_insert_with(|| Arc::new(Open::from(&record)))
            .clone();
        if let Some(old) = replaced {
            self.stop(&old);
        }
        *open.checked.lock() = Instant::now();
        Ok(open)
    }

    /// Forgets the open workspace `name` (it was deleted) and stops its ingestion: its
    /// indexes are dropped once the requests that hold it are done.
    pub fn close(&self, name: &str) {
        if let Some((_, open)) = self.open.remove(name) {
            self.stop(&open);
        }
    }

    fn stop(&self, open: &Open) {
        if let Some(workspace) = open.workspace.get() {
            self.ingestors.stop(&workspace.ingestor);
        }
    }

    /// Whether `name` is open on this node (its indexes built or being built).
    pub fn is_open(&self, name: &str) -> bool {
        name == DEFAULT || self.open.contains_key(name)
    }

    /// The names of the workspaces open on this node, `default` first.
    pub fn open_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.open.iter().map(|e| e.key().to_string()).collect();
        names.sort();
        names.insert(0, DEFAULT.into());
        names
    }
}

impl From<&WorkspaceRecord> for Open {
    fn from(record: &WorkspaceRecord) -> Self {
        Open {
            database: record.database.clone(),
            workspace: tokio::sync::OnceCell::new(),
            checked: parking_lot::Mutex::new(Instant::now()),
        }
    }
}

/// `404 workspace_not_found` for `name`.
pub fn not_found(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::WorkspaceNotFound,
        format!("there is no workspace `{name}`"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in ["a", "default", "team-1", "a0", &"a".repeat(63)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            "1a",
            "-a",
            "A",
            "a_b",
            "a.b",
            "a b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
