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

use futures::FutureExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use kbq_actors::ingest::{Ingestor, Ingestors};
use kbq_store::{KnowledgeBase, QuotaOverrides, WorkspaceRecord};

use crate::error::{ApiError, ErrorCode};
use crate::offload::Offload;

/// The workspace that always exists: the configured database.
pub const DEFAULT: &str = kbq_store::DEFAULT_WORKSPACE;

/// The header with which an `admin` key acts in another workspace.
pub const HEADER: &str = "x-kbq-workspace";

/// The longest name a workspace may have.
pub const MAX_NAME_CHARS: usize = kbq_store::MAX_WORKSPACE_NAME_CHARS;

/// The rule a workspace's name follows, as the API states it.
pub const NAME_RULE: &str = "1-63 characters of a-z, 0-9 and '-', starting with a letter";

/// [`NAME_RULE`] as a regular expression, for the OpenAPI document.
pub const NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,62}$";

/// True when `name` follows [`NAME_RULE`]: the store's rule
/// ([`kbq_store::check_workspace_name`]), which the registry holds names to as well.
pub fn valid_name(name: &str) -> bool {
    kbq_store::check_workspace_name(name).is_ok()
}

/// How long an open workspace is trusted to still exist before the registry is read again:
/// a workspace deleted through another node stops answering here within this window.
const RECHECK: Duration = Duration::from_secs(1);

/// How often [`Workspaces::sweep`] runs on a server.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// A workspace used this recently is not closed to keep the index budget: it is serving.
const IN_USE: Duration = Duration::from_secs(1);

/// What a node keeps open (`[workspaces]`).
#[derive(Debug, Clone, Copy)]
pub struct Keeping {
    /// Close a workspace unused this long; `None`: never.
    pub idle_close: Option<Duration>,
    /// Close the least recently used workspaces while their indexes hold more heap bytes
    /// than this; `None`: no bound.
    pub index_budget: Option<u64>,
    /// The longest a request waits for its workspace to open (connect and build its
    /// indexes) before it gets a 503 that says so.
    pub open_timeout: Duration,
    /// What each workspace but `default` may hold.
    pub quota: Quota,
    /// How many open workspaces `/metrics` gives series of their own: those with the
    /// largest indexes.
    pub metrics_series: usize,
}

impl Default for Keeping {
    fn default() -> Self {
        Keeping {
            idle_close: None,
            index_budget: None,
            open_timeout: Duration::from_secs(30),
            quota: Quota::default(),
            metrics_series: 20,
        }
    }
}

/// What a workspace may hold, as it applies (`workspaces.max_entities`, `max_documents`,
/// `max_document_bytes`, or its own bounds over them), and the rate budgets every key of it
/// shares (`limits.workspace_*`, or its own): each `null` for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[schema(as = WorkspaceQuota)]
pub struct Quota {
    #[serde(rename = "max_entities")]
    #[schema(required = true)]
    pub entities: Option<u64>,
    #[serde(rename = "max_documents")]
    #[schema(required = true)]
    pub documents: Option<u64>,
    /// Bytes of the documents' content.
    #[serde(rename = "max_document_bytes")]
    #[schema(required = true)]
    pub document_bytes: Option<u64>,
    /// The graph routes' budget: requests a minute, and at once.
    #[schema(required = true)]
    pub graph_per_minute: Option<u64>,
    #[schema(required = true)]
    pub graph_burst: Option<u64>,
    /// The agent routes' budget: requests a minute, and at once.
    #[schema(required = true)]
    pub agent_per_minute: Option<u64>,
    #[schema(required = true)]
    pub agent_burst: Option<u64>,
}

impl Quota {
    /// This quota with a workspace's own bounds over it: a bound set there replaces this
    /// one's (0: none), one not set keeps it. A budget's burst goes with its rate: none
    /// without one.
    pub fn over(self, own: &QuotaOverrides) -> Quota {
        let pick = |own: Option<u64>, configured: Option<u64>| match own {
            Some(0) => None,
            Some(bound) => Some(bound),
            None => configured,
        };
        let budget = |rate: Option<u64>, burst: Option<u64>, own: (Option<u64>, Option<u64>)| {
            let rate = pick(own.0, rate);
            (rate, rate.and(own.1.or(burst)))
        };
        let (graph_per_minute, graph_burst) = budget(
            self.graph_per_minute,
            self.graph_burst,
            (own.graph_per_minute, own.graph_burst),
        );
        let (agent_per_minute, agent_burst) = budget(
            self.agent_per_minute,
            self.agent_burst,
            (own.agent_per_minute, own.agent_burst),
        );
        Quota {
            entities: pick(own.max_entities, self.entities),
            documents: pick(own.max_documents, self.documents),
            document_bytes: pick(own.max_document_bytes, self.document_bytes),
            graph_per_minute,
            graph_burst,
            agent_per_minute,
            agent_burst,
        }
    }

    /// Whether any bound on what the workspace holds is set (its rate budgets aside).
    pub fn bounds_holdings(&self) -> bool {
        self.entities.is_some() || self.documents.is_some() || self.document_bytes.is_some()
    }

    /// The rate budgets alone: `default`'s quota, which bounds no holdings.
    pub fn budgets_only(self) -> Quota {
        Quota {
            entities: None,
            documents: None,
            document_bytes: None,
            graph_burst: self.graph_per_minute.and(self.graph_burst),
            agent_burst: self.agent_per_minute.and(self.agent_burst),
            ..self
        }
    }

    /// The budget of `route` as (requests a minute, at once), if any.
    pub fn budget(&self, route: crate::limits::Route) -> Option<(u64, u64)> {
        let (rate, burst) = match route {
            crate::limits::Route::Graph => (self.graph_per_minute, self.graph_burst),
            crate::limits::Route::Agent => (self.agent_per_minute, self.agent_burst),
        };
        Some((rate?, burst.unwrap_or(1)))
    }
}

/// What a source is counted as adding when it is submitted: its chunks are not known until
/// it is parsed, so a workspace at its quota of documents or of their bytes takes none.
pub const SOURCE: Adding = Adding {
    entities: 0,
    documents: 1,
    document_bytes: 1,
};

/// What a write would add to a workspace, as its quota counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Adding {
    pub entities: u64,
    pub documents: u64,
    pub document_bytes: u64,
}

/// A request's workspace as the key middleware resolved it: its knowledge (what the actors,
/// tools and providers read; see [`kbq_tools::Workspace`]) and its ingestion. Handlers take
/// it from the request (`web::ReqData<Workspace>`) and pass it down.
#[derive(Clone)]
pub struct Workspace {
    pub knowledge: kbq_tools::Workspace,
    pub ingestor: Ingestor,
    /// What it may hold (none for `default`).
    pub quota: Quota,
}

impl Workspace {
    /// `403 quota_exceeded` unless the workspace has room for what a write `adding`: its
    /// holdings now (from its indexes when it has them) plus those, within its quota.
    pub async fn room_for(&self, adding: Adding) -> Result<(), ApiError> {
        let quota = self.quota;
        if !quota.bounds_holdings() || adding == Adding::default() {
            return Ok(());
        }
        let now = self.kb.record_counts().await?;
        let bytes = match quota.document_bytes {
            Some(_) if adding.document_bytes > 0 => self.kb.document_bytes().await?,
            _ => 0,
        };
        for (what, held, added, most) in [
            ("entities", now.entities, adding.entities, quota.entities),
            (
                "documents",
                now.documents,
                adding.documents,
                quota.documents,
            ),
            (
                "document_bytes",
                bytes,
                adding.document_bytes,
                quota.document_bytes,
            ),
        ] {
            if let Some(most) = most
                && added > 0
                && held + added > most
            {
                let unit = if what == "document_bytes" {
                    "bytes of documents"
                } else {
                    what
                };
                return Err(ApiError::new(
                    ErrorCode::QuotaExceeded,
                    format!(
                        "the workspace may hold at most {most} {unit} (workspaces.max_{what}); it holds {held}, and this would add {added}: nothing was written"
                    ),
                ));
            }
        }
        Ok(())
    }
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
    /// When a request last used it, in milliseconds since [`Workspaces`]' epoch.
    last_used: AtomicU64,
    /// The task that follows other nodes' writes to the workspace (a shared server), aborted
    /// when the workspace is closed here.
    follower: parking_lot::Mutex<Option<tokio_util::task::AbortOnDropHandle<()>>>,
    /// The opening under way, if one is: what the requests that wait for it share.
    opening: parking_lot::Mutex<Option<Opening>>,
    /// Its own bounds, as the registry last said.
    quota: parking_lot::Mutex<QuotaOverrides>,
}

/// An opening under way, shared by the requests that wait for it.
type Opening =
    futures::future::Shared<futures::future::BoxFuture<'static, Result<Workspace, ApiError>>>;

/// The workspaces of this node: `default`, and those opened since start-up.
pub struct Workspaces {
    default: Workspace,
    open: DashMap<Arc<str>, Arc<Open>>,
    ingestors: Ingestors,
    /// Where registry reads and a workspace's opening run: not on an HTTP worker's thread.
    offload: Offload,
    /// Whether an opened workspace follows other nodes' writes (`store.follow_changes` on a
    /// shared server), as the default one does.
    follow: bool,
    keeping: Keeping,
    /// What `Open::last_used` counts from.
    epoch: Instant,
    /// What the last sweep left open, for `/metrics` and `/readyz`.
    last_sweep: parking_lot::Mutex<Swept>,
    /// Workspaces the sweeps closed since start-up: idle, and for the budget.
    closed: (AtomicU64, AtomicU64),
}

/// What [`Workspaces::sweep`] closed, and what stays open.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    pub closed_idle: usize,
    pub closed_for_budget: usize,
    /// Workspaces other than `default` open after the sweep, and their indexes' heap bytes.
    pub open: usize,
    pub index_bytes: u64,
    /// The `metrics_series` open workspaces with the largest indexes, largest first.
    pub largest: Vec<OpenWorkspace>,
}

/// An open workspace as `/metrics` shows it: by its database, not its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenWorkspace {
    /// Its database (`ws_` and a UUID), as the admin API shows it.
    pub database: String,
    pub index_bytes: u64,
    /// Seconds since a request last used it.
    pub idle_secs: u64,
}

impl Workspaces {
    /// The workspaces of a node whose default workspace is `kb` (which also holds the
    /// registry) with `ingestor`; `ingestors` starts the ingestion of the others. With
    /// `follow`, each workspace opened follows the writes other nodes make to it.
    pub fn new(
        kb: Arc<KnowledgeBase>,
        ingestor: Ingestor,
        ingestors: Ingestors,
        offload: Offload,
        follow: bool,
        keeping: Keeping,
    ) -> Self {
        let default_quota = keeping.quota.budgets_only();
        Workspaces {
            offload,
            follow,
            keeping,
            epoch: Instant::now(),
            last_sweep: parking_lot::Mutex::new(Swept::default()),
            closed: (AtomicU64::new(0), AtomicU64::new(0)),
            default: Workspace {
                knowledge: kbq_tools::Workspace::new(DEFAULT, kb),
                ingestor,
                quota: default_quota,
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
            self.touch(&open);
            return Ok(self.serving(&open, workspace));
        }
        let (this, name) = (self.clone(), name.to_string());
        self.offload
            .run(async move { this.load(&name).await })
            .await?
    }

    /// [`get`](Self::get)'s slow path, [`load_once`](Self::load_once); but a workspace that
    /// fails to open because it was deleted meanwhile (its database removed while its indexes
    /// were read: on a server, as a database or a table that does not exist) is `404
    /// workspace_not_found`, as it is for a request that comes after, not a 500.
    async fn load(self: &Arc<Self>, name: &str) -> Result<Workspace, ApiError> {
        match self.load_once(name).await {
            Err(e) if e.code == ErrorCode::Internal => {
                match self.registry().workspace(name).await {
                    Ok(None) => {
                        self.close(name);
                        Err(not_found(name))
                    }
                    _ => Err(e),
                }
            }
            loaded => loaded,
        }
    }

    /// The registry read, and the wait for the opening, which goes on when the wait times
    /// out (see [`opening`](Self::opening)).
    async fn load_once(self: &Arc<Self>, name: &str) -> Result<Workspace, ApiError> {
        let open = self.open(name).await?;
        self.touch(&open);
        if let Some(workspace) = open.workspace.get() {
            return Ok(self.serving(&open, workspace));
        }
        let opening = self.opening(&open, name);
        let opened = tokio::time::timeout(self.keeping.open_timeout, opening)
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    format!(
                        "the workspace `{name}` is still opening (building its indexes); retry later"
                    ),
                ))
            })?;
        Ok(self.serving(&open, &opened))
    }

    /// `workspace` as a request gets it: with the quota its registry record says now.
    fn serving(&self, open: &Open, workspace: &Workspace) -> Workspace {
        let mut workspace = workspace.clone();
        workspace.quota = self.keeping.quota.over(&open.quota.lock());
        workspace
    }

    /// The quota of a workspace whose own bounds are `own`; for `default`, the configured
    /// rate budgets alone.
    pub fn quota_of(&self, name: &str, own: &QuotaOverrides) -> Quota {
        match name {
            DEFAULT => self.keeping.quota.budgets_only(),
            _ => self.keeping.quota.over(own),
        }
    }

    /// The opening of `open`'s workspace: one task on the main runtime however many requests
    /// wait for it. A request that stops waiting (its timeout) leaves it running, and a later
    /// one finds the workspace open; an opening that fails is forgotten, so the next request
    /// tries again.
    fn opening(self: &Arc<Self>, open: &Arc<Open>, name: &str) -> Opening {
        let mut slot = open.opening.lock();
        if let Some(opening) = &*slot {
            return opening.clone();
        }
        let (this, of, name) = (self.clone(), open.clone(), name.to_string());
        // The slot is held until the task is recorded in it: the task clears it when it
        // ends, which is after that.
        let task = self.offload.0.spawn(async move {
            let opened = this.build(&of, &name).await;
            if let Ok(workspace) = &opened {
                let _ = of.workspace.set(workspace.clone());
            }
            *of.opening.lock() = None;
            opened
        });
        let opening = async move {
            task.await.unwrap_or_else(|e| {
                Err(ApiError::new(
                    ErrorCode::Internal,
                    format!("opening the workspace stopped: {e}"),
                ))
            })
        }
        .boxed()
        .shared();
        *slot = Some(opening.clone());
        opening
    }

    /// Opens `open`'s workspace: its knowledge base connected and its indexes built, the
    /// follower of other nodes' writes, and its ingestion.
    async fn build(&self, open: &Open, name: &str) -> Result<Workspace, ApiError> {
        let kb = self.registry().workspace_kb(&open.database);
        if self.follow {
            kb.follow_changes_from_start();
        }
        kb.connect(&kbq_store::progress::Silent).await?;
        if self.follow {
            let (task, _) = kb.follow_changes();
            *open.follower.lock() = Some(tokio_util::task::AbortOnDropHandle::new(task));
        }
        let ingestor = self
            .ingestors
            .start(kb.clone())
            .await
            .map_err(crate::routes::sources::ingest_error)?;
        Ok(Workspace {
            knowledge: kbq_tools::Workspace::new(name, kb),
            ingestor,
            quota: self.keeping.quota,
        })
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
        *open.quota.lock() = record.quota;
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
        open.follower.lock().take();
        if let Some(workspace) = open.workspace.get() {
            self.ingestors.stop(&workspace.ingestor);
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn touch(&self, open: &Open) {
        open.last_used.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Closes what `[workspaces]` says not to keep: the workspaces unused for
    /// `idle_close_secs`, then, while the open workspaces' indexes hold more than
    /// `index_budget_mb`, the least recently used. `default` is never closed, nor a workspace
    /// with ingestion jobs queued or running here, nor (for the budget) one used within the
    /// last second. A request that holds a closed workspace finishes with it; the next one
    /// opens it again. It walks every open index: run it off the async threads.
    pub fn sweep(&self) -> Swept {
        /// An open workspace as the sweep sees it.
        struct Seen {
            name: Arc<str>,
            database: String,
            used: u64,
            bytes: u64,
            busy: bool,
        }
        let now = self.now_ms();
        let mut swept = Swept::default();
        let mut open: Vec<Seen> = Vec::new();
        for entry in self.open.iter() {
            let Some(workspace) = entry.value().workspace.get() else {
                continue;
            };
            let (queued, running, _) = workspace.ingestor.jobs_here();
            open.push(Seen {
                name: entry.key().clone(),
                database: entry.value().database.clone(),
                used: entry.value().last_used.load(Ordering::Relaxed),
                bytes: workspace.kb.index_stats().heap_bytes(),
                busy: queued + running > 0,
            });
        }
        let idle =
            |used: u64, limit: Duration| now.saturating_sub(used) >= limit.as_millis() as u64;
        if let Some(limit) = self.keeping.idle_close {
            open.retain(|w| {
                let close = !w.busy && idle(w.used, limit);
                if close {
                    tracing::info!(workspace = %w.name, "closed an idle workspace");
                    self.close(&w.name);
                    swept.closed_idle += 1;
                }
                !close
            });
        }
        let mut total: u64 = open.iter().map(|w| w.bytes).sum();
        if let Some(budget) = self.keeping.index_budget {
            open.sort_by_key(|w| w.used);
            open.retain(|w| {
                let close = total > budget && !w.busy && idle(w.used, IN_USE);
                if close {
                    tracing::info!(workspace = %w.name, index_bytes = w.bytes, "closed a workspace to keep the index budget");
                    self.close(&w.name);
                    total -= w.bytes;
                    swept.closed_for_budget += 1;
                }
                !close
            });
        }
        swept.open = open.len();
        swept.index_bytes = total;
        open.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
        swept.largest = open
            .into_iter()
            .take(self.keeping.metrics_series)
            .map(|w| OpenWorkspace {
                database: w.database,
                index_bytes: w.bytes,
                idle_secs: now.saturating_sub(w.used) / 1000,
            })
            .collect();
        *self.last_sweep.lock() = swept.clone();
        self.closed
            .0
            .fetch_add(swept.closed_idle as u64, Ordering::Relaxed);
        self.closed
            .1
            .fetch_add(swept.closed_for_budget as u64, Ordering::Relaxed);
        swept
    }

    /// Workspaces the sweeps closed since start-up: (idle, for the index budget).
    pub fn closed(&self) -> (u64, u64) {
        (
            self.closed.0.load(Ordering::Relaxed),
            self.closed.1.load(Ordering::Relaxed),
        )
    }

    /// What the last [`sweep`](Self::sweep) left open.
    pub fn last_sweep(&self) -> Swept {
        self.last_sweep.lock().clone()
    }

    /// How often to sweep: every [`SWEEP_EVERY`], or a quarter of `idle_close` when that is
    /// shorter (at least every 250 ms).
    pub fn sweep_every(&self) -> Duration {
        match self.keeping.idle_close {
            Some(idle) => (idle / 4).clamp(Duration::from_millis(250), SWEEP_EVERY),
            None => SWEEP_EVERY,
        }
    }

    /// Sweeps every [`sweep_every`](Self::sweep_every) until the returned task is dropped.
    pub fn keep_sweeping(self: &Arc<Self>) -> tokio_util::task::AbortOnDropHandle<()> {
        let this = self.clone();
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            let mut tick = tokio::time::interval(this.sweep_every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let sweeping = this.clone();
                let _ = tokio::task::spawn_blocking(move || sweeping.sweep()).await;
            }
        }))
    }

    /// Applies a workspace's own bounds on this node at once (other nodes read them from
    /// the registry within a second).
    pub fn set_quota(&self, name: &str, own: QuotaOverrides) {
        if let Some(open) = self.open.get(name) {
            *open.quota.lock() = own;
        }
    }

    /// The workspace `name` when this node has it open (its indexes built), without
    /// opening it.
    pub fn opened(&self, name: &str) -> Option<Workspace> {
        let open = self.open.get(name)?.clone();
        open.workspace.get().cloned()
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
            last_used: AtomicU64::new(0),
            follower: parking_lot::Mutex::new(None),
            opening: parking_lot::Mutex::new(None),
            quota: parking_lot::Mutex::new(record.quota),
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
