//! [`KnowledgeBase`]: the one door to SurrealDB. This file holds the struct, its connection
//! (reaching the database, the schema and the in-memory indexes loaded on connecting, retried
//! after a failure), and the query methods every other part uses: `run`, `exec` and their
//! `*_on` forms for a connection in hand. The connection itself, record ids, row builders and
//! the stored form of vectors are in `db`, below this file.
//!
//! The rest of `impl KnowledgeBase` lives beside the code it belongs with (schema, write,
//! doc_index, graph_reads, search, related, memory, follow and workspaces; the crate's Layout
//! names each).
//! Those files use this one; this one imports none of them, and reaches them only as methods
//! on `self`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use surrealdb::Surreal;
use surrealdb::engine::local::Db;
use surrealdb::opt::auth::Root;
use surrealdb::types::Object;

use crate::db::{Connected, Database, query_on, rows_as};
use crate::documents::DocumentTable;
use crate::embed::Embedder;
use crate::error::{Result, StoreError};
use crate::graph::GraphIndex;
use crate::grouped::Grouped;
use crate::live::FirstSubscription;
use crate::model::table::{DOCUMENT, ENTITY, RELATES};
use crate::numbers::EntityNumbers;
use crate::parts::{DOCUMENT_PARTS, GRAPH_PARTS, Parts};
use crate::progress::{LoadProgress, Silent};
use crate::text::TextIndex;
use crate::vectors::VectorIndex;

/// How to reach the database and how to serve reads.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `mem://`, `surrealkv://PATH`, `ws://HOST:PORT` or `wss://HOST:PORT`.
    pub url: String,
    pub namespace: String,
    pub database: String,
    /// Root credentials for a remote server; embedded engines need none.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Serve graph reads from the in-memory index (true) or from SurrealDB queries (false).
    pub graph_index: bool,
    /// Longest wait for one query.
    pub query_timeout: Duration,
    /// Longest wait for a connection attempt.
    pub connect_timeout: Duration,
    /// The block cache of a `surrealkv://` store. kbq answers reads from its own indexes, so
    /// this need not hold much of the store.
    pub block_cache_bytes: u64,
    /// The largest memtable of a `surrealkv://` store, written to disk when full; `None`:
    /// surrealkv's default.
    pub memtable_bytes: Option<u64>,
}

impl StoreConfig {
    /// True for a SurrealDB server (`ws://`, `wss://`): it has users to sign in as, and
    /// other processes may write to it too. Embedded stores have one writer, this process.
    pub fn is_server(&self) -> bool {
        self.url.starts_with("ws://") || self.url.starts_with("wss://")
    }

    /// An embedded in-memory store with the index on: what tests and quick runs use.
    pub fn memory() -> Self {
        StoreConfig {
            url: "mem://".into(),
            namespace: "kbq".into(),
            database: "kb".into(),
            username: None,
            password: None,
            graph_index: true,
            query_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            block_cache_bytes: 16 << 20,
            memtable_bytes: None,
        }
    }
}

/// How many records an import hands to one upsert call (and its progress step).
pub const WRITE_BATCH: usize = 1000;

/// Counts of each table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub entities: u64,
    pub relationships: u64,
    pub documents: u64,
}

/// What the in-memory indexes hold, and their approximate heap bytes (see `heap`): for
/// `/metrics` and for sizing a node. An index that is off counts zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct IndexStats {
    /// Entities and relationships in the graph index.
    pub entities: u64,
    pub relationships: u64,
    /// Documents in the keyword index, and vectors in the vector index.
    pub documents: u64,
    pub vectors: u64,
    /// The graph index without its names; the name index; the vector index with its inverted
    /// file; the keyword index; the documents an embedded store holds.
    pub graph_bytes: u64,
    pub names_bytes: u64,
    pub vectors_bytes: u64,
    pub keyword_bytes: u64,
    pub documents_bytes: u64,
}

impl IndexStats {
    /// The heap bytes of every index together.
    pub fn heap_bytes(&self) -> u64 {
        self.graph_bytes
            + self.names_bytes
            + self.vectors_bytes
            + self.keyword_bytes
            + self.documents_bytes
    }
}

pub struct KnowledgeBase {
    config: StoreConfig,
    embedder: Arc<dyn Embedder>,
    conn: RwLock<Option<Arc<Connected>>>,
    connecting: tokio::sync::Mutex<Option<Instant>>,
    index: Option<RwLock<GraphIndex>>,
    vectors: Arc<RwLock<VectorIndex>>,
    /// The entity numbering the graph index and the vector index share, whichever of them is
    /// rebuilt: a number keeps its name for the life of the knowledge base.
    numbers: EntityNumbers,
    text: Arc<RwLock<TextIndex>>,
    /// Every document, when the store is embedded (see [`crate::doc_index`]).
    documents: Option<RwLock<DocumentTable>>,
    /// Bumped on every entity write through this knowledge base.
    generation: std::sync::atomic::AtomicU64,
    /// Opened by [`KnowledgeBase::open_for_reembed`]: a store embedded by another embedder is
    /// accepted (and its vectors not loaded) so that [`KnowledgeBase::reembed`] can convert it.
    adopt_embedder: bool,
    /// Whether the first connection subscribes to changes before it builds the indexes, and
    /// the subscription it made, waiting for the follower (see
    /// [`follow_changes_from_start`](Self::follow_changes_from_start)).
    pub(crate) first_subscription: parking_lot::Mutex<FirstSubscription>,
    /// The default workspace's knowledge base, for one made by
    /// [`workspace_kb`](Self::workspace_kb): its connection is a session on the parent's, and
    /// the registry of workspaces is the parent's. Always a knowledge base without a parent.
    parent: Option<Arc<KnowledgeBase>>,
    /// When a statement last found the store unreachable (see [`guarded`](Self::guarded));
    /// `None` while it answers. A workspace's knowledge base uses its parent's.
    unreachable: parking_lot::Mutex<Option<Instant>>,
    /// Reads and writes of kept model answers, grouped across the jobs that make them at once.
    pub(crate) kept_reads: Grouped<String, Option<serde_json::Value>>,
    pub(crate) kept_writes: Grouped<(String, serde_json::Value), ()>,
    /// Reads of sources' records and of ingest jobs', and writes of jobs', grouped the same
    /// way: every job makes them.
    pub(crate) source_reads:
        Grouped<kbq_ingest::provenance::SourceKey, Option<crate::model::SourceRecord>>,
    pub(crate) job_reads: Grouped<String, Option<serde_json::Value>>,
    pub(crate) job_writes: Grouped<crate::model::JobWrite, ()>,
    /// Where a search too large for the calling task runs (see
    /// [`scan_lane`](Self::scan_lane)); `None`: tokio's blocking pool.
    scan_lane: parking_lot::RwLock<Option<tokio::runtime::Handle>>,
}

/// After a failed connection attempt, requests fail fast for this long instead of each
/// waiting out its own attempt.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// How long a statement waits for the store's health once the store was found unreachable,
/// and how long a statement runs before its store's health is asked (see
/// [`KnowledgeBase::guarded`]).
pub(crate) const RECHECK_UNREACHABLE: Duration = Duration::from_secs(1);

/// How long the health check of a statement still running after [`RECHECK_UNREACHABLE`]
/// may take: longer than the check before a statement, so that a server only slow to answer
/// (busy cores) is not taken for one that is gone.
const HEALTH_OF_A_SLOW_STATEMENT: Duration = Duration::from_secs(2);

impl KnowledgeBase {
    /// Creates the knowledge base and tries to connect once. An unreachable database is not an
    /// error here: requests answer `Unavailable` until a later attempt succeeds.
    pub async fn open(config: StoreConfig, embedder: Arc<dyn Embedder>) -> Arc<Self> {
        let kb = Self::new(config, embedder);
        kb.try_connect().await;
        kb
    }

    /// Creates the knowledge base without reaching the database: the first use connects, or
    /// [`connect`](Self::connect) does, reporting its progress. A server binds its listener
    /// between the two, so that it answers probes while a large store loads.
    pub fn new(config: StoreConfig, embedder: Arc<dyn Embedder>) -> Arc<Self> {
        Self::unconnected(config, embedder, false, None)
    }

    /// The knowledge base of another workspace on this one's server: the same configuration
    /// but `database`, not connected yet. When first used it does not open a connection of its
    /// own (a second surrealkv datastore over the same files could not be opened, and a
    /// socket per workspace would not scale): it takes a new session on this knowledge base's
    /// connection and selects `database` in it, then defines the schema and builds its own
    /// in-memory indexes there, as any knowledge base does on connecting.
    pub fn workspace_kb(self: &Arc<Self>, database: &str) -> Arc<KnowledgeBase> {
        self.sibling(database, false)
    }

    /// As [`workspace_kb`](Self::workspace_kb), for [`reembed`](Self::reembed), as
    /// [`open_for_reembed`](Self::open_for_reembed) opens the default one.
    pub fn workspace_kb_for_reembed(self: &Arc<Self>, database: &str) -> Arc<KnowledgeBase> {
        self.sibling(database, true)
    }

    fn sibling(self: &Arc<Self>, database: &str, adopt_embedder: bool) -> Arc<KnowledgeBase> {
        // A sibling's sibling shares the same connection and registry: the root's.
        let parent = self.parent.clone().unwrap_or_else(|| self.clone());
        let config = StoreConfig {
            database: database.to_string(),
            ..self.config.clone()
        };
        Self::unconnected(config, self.embedder.clone(), adopt_embedder, Some(parent))
    }

    /// As [`open`](Self::open), for [`reembed`](Self::reembed): a store whose documents
    /// another embedder wrote is accepted, and its old vectors are not loaded.
    pub async fn open_for_reembed(config: StoreConfig, embedder: Arc<dyn Embedder>) -> Arc<Self> {
        let kb = Self::unconnected(config, embedder, true, None);
        kb.try_connect().await;
        kb
    }

    fn unconnected(
        config: StoreConfig,
        embedder: Arc<dyn Embedder>,
        adopt_embedder: bool,
        parent: Option<Arc<KnowledgeBase>>,
    ) -> Arc<Self> {
        let numbers = EntityNumbers::default();
        Arc::new(KnowledgeBase {
            adopt_embedder,
            index: config
                .graph_index
                .then(|| RwLock::new(GraphIndex::numbered(numbers.clone()))),
            vectors: Arc::new(RwLock::new(
                VectorIndex::new(embedder.dimension()).with_numbers(numbers.clone()),
            )),
            numbers,
            text: Arc::new(RwLock::new(TextIndex::new())),
            documents: (!config.is_server()).then(RwLock::default),
            config,
            embedder,
            conn: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
            first_subscription: parking_lot::Mutex::new(Default::default()),
            parent,
            unreachable: parking_lot::Mutex::new(None),
            kept_reads: Grouped::default(),
            kept_writes: Grouped::default(),
            source_reads: Grouped::default(),
            job_reads: Grouped::default(),
            job_writes: Grouped::default(),
            scan_lane: parking_lot::RwLock::new(None),
        })
    }

    /// One attempt to connect; a failure is logged, and later uses try again.
    async fn try_connect(&self) {
        if let Err(e) = self.connection().await {
            tracing::warn!(error = %e, url = %self.config.url, "knowledge base not ready yet");
        }
    }

    /// Connects (when not connected yet), defines the schema and builds the in-memory
    /// indexes, reporting each finished part to `progress`. An error leaves it unconnected.
    pub async fn connect(&self, progress: &dyn LoadProgress) -> Result<()> {
        self.connection_reporting(progress).await.map(|_| ())
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The SurrealDB database this knowledge base lives in: its workspace's.
    pub fn database(&self) -> &str {
        &self.config.database
    }

    /// The knowledge base whose connection this one shares, when it was made by
    /// [`workspace_kb`](Self::workspace_kb).
    pub(crate) fn parent(&self) -> Option<&Arc<KnowledgeBase>> {
        self.parent.as_ref()
    }

    /// Runs the searches of the in-memory indexes that are too large for the calling task (a
    /// keyword search's common words, a scan of many vector codes, graph documents' choice
    /// among many: milliseconds each) on `lane`, a runtime whose threads bound how many run
    /// at once, the rest waiting in its queue; `None` puts them back on tokio's blocking
    /// pool, a thread each. The workspaces made from this knowledge base use its lane.
    pub fn set_scan_lane(&self, lane: Option<tokio::runtime::Handle>) {
        *self.scan_lane.write() = lane;
    }

    /// The lane [`set_scan_lane`](Self::set_scan_lane) gave this knowledge base, or its
    /// parent's.
    pub fn scan_lane(&self) -> Option<tokio::runtime::Handle> {
        self.parent
            .as_deref()
            .unwrap_or(self)
            .scan_lane
            .read()
            .clone()
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// True when graph reads are served from the in-memory index.
    pub fn uses_index(&self) -> bool {
        self.index.is_some()
    }

    /// True when a graph-documents request is answered from memory alone: the walk from the
    /// graph index, the documents held (an embedded store), and the start entity's text
    /// embedded in process ([`Embedder::is_local`]). Its only waits are then the connection
    /// made at start-up and, for a walk that links more codes than a tenth of a millisecond
    /// reads, the scan lane ([`set_scan_lane`](Self::set_scan_lane); without one, tokio's
    /// blocking pool; `kbq_store::related`).
    pub fn answers_documents_in_memory(&self) -> bool {
        self.uses_index() && self.documents.is_some() && self.embedder.is_local()
    }

    pub(crate) async fn connection(&self) -> Result<Arc<Connected>> {
        self.connection_reporting(&Silent).await
    }

    async fn connection_reporting(&self, progress: &dyn LoadProgress) -> Result<Arc<Connected>> {
        if let Some(c) = self.conn.read().clone() {
            return Ok(c);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(c) = self.conn.read().clone() {
            return Ok(c);
        }
        if last_failure.is_some_and(|t| t.elapsed() < RECONNECT_PAUSE) {
            return Err(StoreError::Unavailable("not connected".into()));
        }
        match self.establish(progress).await {
            Ok(c) => {
                let c = Arc::new(c);
                *self.conn.write() = Some(c.clone());
                *last_failure = None;
                Ok(c)
            }
            Err(e) => {
                *last_failure = Some(Instant::now());
                Err(e)
            }
        }
    }

    /// Connects, defines the schema and builds the in-memory indexes. Only reaching the
    /// database is bounded by `connect_timeout`: building the indexes of a large store takes
    /// longer, and cutting it short would abandon an embedded store half open (and, for
    /// surrealkv, locked).
    async fn establish(&self, progress: &dyn LoadProgress) -> Result<Connected> {
        // The parent's connection is awaited whole, outside the limit: connecting it may build
        // its indexes, which must not be cut short (above). Boxed: it is this same future.
        let shared = match &self.parent {
            Some(parent) => Some(Box::pin(parent.connection()).await?.db.clone()),
            None => None,
        };
        let db = tokio::time::timeout(self.config.connect_timeout, self.reach(shared))
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "no connection to {} within {:?}",
                    self.config.url, self.config.connect_timeout
                ))
            })??;
        let c = Connected { db };
        self.define_schema(&c).await?;
        // Subscribed before the build, no write falls between the two (follow.rs). Kept for
        // the follower only once the build is done: a failed attempt subscribes again.
        let wanted = matches!(*self.first_subscription.lock(), FirstSubscription::Wanted);
        let notifications = match wanted {
            true => Some(self.subscribe_beside(&c).await?),
            false => None,
        };
        self.load_indexes(&c, progress).await?;
        if let Some(notifications) = notifications {
            *self.first_subscription.lock() = FirstSubscription::Made(notifications);
        }
        Ok(c)
    }

    /// Opens the connection and signs in, or takes `shared`, a new session on the parent's
    /// connection (signed in as the parent is), then selects the namespace and database.
    pub(crate) async fn reach(&self, shared: Option<Database>) -> Result<Database> {
        let unavailable = |e: surrealdb::Error| StoreError::Unavailable(e.to_string());
        let db = match shared {
            Some(db) => db,
            None => self.open_connection().await?,
        };
        crate::db::retry_conflicts(|| {
            db.use_database(&self.config.namespace, &self.config.database)
        })
        .await
        .map_err(unavailable)?;
        Ok(db)
    }

    /// Opens a connection of this knowledge base's own and signs in.
    async fn open_connection(&self) -> Result<Database> {
        let unavailable = |e: surrealdb::Error| StoreError::Unavailable(e.to_string());
        if self.config.url.starts_with("surrealkv://") {
            // Boxed: building a datastore is a large future, and inline it would make every
            // future that may connect as large (too large for a test thread's stack).
            let db = Box::pin(open_surrealkv(&self.config)).await?;
            return Ok(Database::SurrealKv(db));
        }
        let db = surrealdb::engine::any::connect(self.config.url.as_str())
            .await
            .map_err(unavailable)?;
        // Credentials are for a server; an embedded engine has no users to sign in as.
        if let (true, Some(username), Some(password)) = (
            self.config.is_server(),
            &self.config.username,
            &self.config.password,
        ) {
            db.signin(Root {
                username: username.clone(),
                password: password.clone(),
            })
            .await
            .map_err(unavailable)?;
        }
        Ok(Database::Any(db))
    }

    /// Rebuilds the graph and vector indexes from the database: after a time in which writes
    /// made elsewhere may have been missed (see [`follow_changes`](Self::follow_changes)).
    pub(crate) async fn reload_indexes(&self) -> Result<()> {
        let c = self.connection().await?;
        self.load_indexes(&c, &Silent).await
    }

    /// Builds the graph index (when there is one) and the vector index from the store. A
    /// store opened for `reembed` keeps no vectors: they are another embedder's.
    async fn load_indexes(&self, c: &Connected, progress: &dyn LoadProgress) -> Result<()> {
        // Each table is read in parts and each index built once its tables are read: the
        // parts of the load are counted here, and reported as each finishes.
        let graph_parts = if self.index.is_some() { GRAPH_PARTS } else { 0 };
        let document_parts = if self.adopt_embedder {
            0
        } else {
            DOCUMENT_PARTS
        };
        let parts = Parts::new(graph_parts + document_parts, progress);
        // The graph and the documents load at once: their reading and building overlap.
        futures::try_join!(self.load_graph_index(c, &parts), async {
            if self.adopt_embedder {
                Ok(())
            } else {
                self.load_document_indexes(c, &parts).await
            }
        })?;
        Ok(())
    }

    pub(crate) fn graph_index(&self) -> Option<&RwLock<GraphIndex>> {
        self.index.as_ref()
    }

    /// True when opened by [`open_for_reembed`](Self::open_for_reembed).
    pub(crate) fn adopts_embedder(&self) -> bool {
        self.adopt_embedder
    }

    pub(crate) fn bump_generation(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Changes whenever entities are written through this knowledge base, so that a cache of
    /// [`entity_names`](Self::entity_names) knows when to refresh.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The in-process vector index of document embeddings.
    /// The entity numbering of the graph index and the vector index.
    pub(crate) fn numbers(&self) -> &EntityNumbers {
        &self.numbers
    }

    pub(crate) fn vectors(&self) -> &Arc<RwLock<VectorIndex>> {
        &self.vectors
    }

    /// The in-process keyword index of document titles and contents.
    pub(crate) fn text(&self) -> &Arc<RwLock<TextIndex>> {
        &self.text
    }

    /// Every document, when the store is embedded; `None` when documents are read from
    /// SurrealDB (a remote store, which other nodes write too).
    pub(crate) fn held_documents(&self) -> Option<&RwLock<DocumentTable>> {
        self.documents.as_ref()
    }

    pub(crate) async fn exec_on(&self, c: &Connected, sql: &str, vars: Object) -> Result<()> {
        self.guarded(
            c,
            crate::db::write_on(&c.db, sql, vars, self.config.query_timeout),
        )
        .await
    }

    /// Runs `statement` unless the store is known to be unreachable: once a statement has
    /// found it so, each later one first asks the store's health for at most
    /// [`RECHECK_UNREACHABLE`], and fails at once with 503 if it does not answer. The SDK
    /// holds statements sent while it reconnects until it has reconnected, so without this
    /// every request during an outage would wait its whole `query_timeout`, once per
    /// statement.
    ///
    /// A statement finds the store unreachable when the connection is gone, when it gets no
    /// answer within `query_timeout`, or when it has run for [`RECHECK_UNREACHABLE`] and the
    /// store's health then gets no answer within [`HEALTH_OF_A_SLOW_STATEMENT`]: so the first
    /// statement sent after a server went away fails within about 3 s, not `query_timeout`.
    /// A statement that is only slow is waited for as long as its health check passes.
    pub(crate) async fn guarded<T>(
        &self,
        c: &Connected,
        statement: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let state = self.parent.as_deref().unwrap_or(self);
        let since = *state.unreachable.lock();
        if let Some(since) = since {
            match tokio::time::timeout(RECHECK_UNREACHABLE, c.db.health()).await {
                Ok(Ok(())) => *state.unreachable.lock() = None,
                _ => {
                    return Err(StoreError::Unavailable(format!(
                        "the store has not answered for {:.1} s",
                        since.elapsed().as_secs_f64()
                    )));
                }
            }
        }
        let answer = match Self::watched(c, statement).await {
            Err(StoreError::Query(m)) => Err(self.statement_error(m)),
            answer => answer,
        };
        if matches!(answer, Err(StoreError::Unavailable(_))) {
            state.unreachable.lock().get_or_insert_with(Instant::now);
        }
        answer
    }

    /// The error of a statement that SurrealDB failed with `message`. In a workspace's
    /// knowledge base, a message that its database or one of its tables does not exist means
    /// that the workspace was deleted while the statement ran (its tables are all defined
    /// when it is created, and kbq asks `INFO FOR DB` before reading any that may be
    /// missing): that is [`StoreError::Removed`], a 404 `workspace_not_found` at the edge,
    /// not a failed query. Every statement's error goes through here, whether the request
    /// failed or one of its statements did, so that no handler answers 500 for a deleted
    /// workspace.
    pub(crate) fn statement_error(&self, message: impl std::fmt::Display) -> StoreError {
        let message = message.to_string();
        let gone = self.parent.is_some()
            && (message.contains(&format!(
                "database '{}' does not exist",
                self.config.database
            )) || (message.contains("table '") && message.contains("' does not exist")));
        if gone {
            StoreError::Removed(self.config.database.clone())
        } else {
            StoreError::Query(message)
        }
    }

    /// `statement`'s answer; but one that has run for [`RECHECK_UNREACHABLE`] asks the
    /// store's health, again after each interval, and fails as unavailable when a check gets
    /// no answer within [`HEALTH_OF_A_SLOW_STATEMENT`] (see [`guarded`](Self::guarded)).
    async fn watched<T>(
        c: &Connected,
        statement: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut statement = std::pin::pin!(statement);
        loop {
            if let Ok(answer) = tokio::time::timeout(RECHECK_UNREACHABLE, &mut statement).await {
                return answer;
            }
            let health = tokio::time::timeout(HEALTH_OF_A_SLOW_STATEMENT, c.db.health());
            tokio::select! {
                answer = &mut statement => return answer,
                checked = health => {
                    if !matches!(checked, Ok(Ok(()))) {
                        return Err(StoreError::Unavailable(
                            "the store did not answer its health check while a statement ran"
                                .into(),
                        ));
                    }
                }
            }
        }
    }

    pub(crate) async fn run_on<T: DeserializeOwned>(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
    ) -> Result<Vec<T>> {
        self.run_within(c, sql, vars, self.config.query_timeout)
            .await
    }

    /// As [`run_on`](Self::run_on), with a time limit of its own.
    pub(crate) async fn run_within<T: DeserializeOwned>(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
        timeout: Duration,
    ) -> Result<Vec<T>> {
        let mut resp = self.guarded(c, query_on(&c.db, sql, vars, timeout)).await?;
        let last = resp.num_statements().saturating_sub(1);
        let rows: Vec<Json> = resp.take(last).map_err(|e| self.statement_error(e))?;
        rows_as(rows)
    }

    pub(crate) async fn send(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
    ) -> Result<surrealdb::IndexedResults> {
        self.guarded(c, query_on(&c.db, sql, vars, self.config.query_timeout))
            .await
    }

    pub(crate) async fn run<T: DeserializeOwned>(&self, sql: &str, vars: Object) -> Result<Vec<T>> {
        let c = self.connection().await?;
        self.run_on(&c, sql, vars).await
    }

    pub(crate) async fn exec(&self, sql: &str, vars: Object) -> Result<()> {
        let c = self.connection().await?;
        self.exec_on(&c, sql, vars).await
    }

    /// The embedding of one text to store (a memory).
    pub(crate) async fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self
            .embedder
            .embed(&[text.to_string()])
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// The embedding of one query (see [`Embedder::embed_queries`]).
    pub(crate) async fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self
            .embedder
            .embed_queries(&[text.to_string()])
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// Answers when the database answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        let c = self.connection().await?;
        match tokio::time::timeout(self.config.query_timeout, c.db.health()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
            Err(_) => Err(StoreError::Unavailable("health check timed out".into())),
        }
    }

    /// What the in-memory indexes hold now, and their sizes. It walks every index under its
    /// read lock: a few milliseconds for 100,000 documents.
    pub fn index_stats(&self) -> IndexStats {
        let mut stats = IndexStats::default();
        if let Some(index) = self.graph_index() {
            let index = index.read();
            stats.entities = index.entity_count() as u64;
            stats.relationships = index.relationship_count() as u64;
            stats.graph_bytes = index.heap_bytes() as u64;
            stats.names_bytes = index.name_index().heap_bytes() as u64;
        }
        {
            let vectors = self.vectors.read();
            stats.vectors = vectors.len() as u64;
            stats.vectors_bytes = vectors.heap_bytes() as u64;
        }
        {
            let text = self.text.read();
            stats.documents = text.len() as u64;
            stats.keyword_bytes = text.heap_bytes() as u64;
        }
        if let Some(documents) = self.held_documents() {
            stats.documents_bytes = documents.read().heap_bytes() as u64;
        }
        stats
    }

    /// Entities, relationships and documents, from the in-memory indexes when the graph is
    /// indexed (no store read), else from the store: what a quota is checked against.
    pub async fn record_counts(&self) -> Result<Counts> {
        self.connection().await?;
        match self.graph_index() {
            Some(index) => Ok({
                let graph = index.read();
                Counts {
                    entities: graph.entity_count() as u64,
                    relationships: graph.relationship_count() as u64,
                    documents: self.text.read().len() as u64,
                }
            }),
            None => self.counts().await,
        }
    }

    /// The `k` entities with the most relationships, most first, with their counts: from the
    /// graph index, so empty when the graph is not indexed.
    pub async fn most_connected(&self, k: usize) -> Result<Vec<(crate::model::Entity, u64)>> {
        self.connection().await?;
        Ok(match self.graph_index() {
            Some(index) => index
                .read()
                .most_connected(k)
                .into_iter()
                .map(|(e, n)| ((*e).clone(), n as u64))
                .collect(),
            None => Vec::new(),
        })
    }

    /// The bytes of the documents' content (UTF-8), from the keyword index when the graph
    /// is indexed, else from the store: what `max_document_bytes` is checked against.
    pub async fn document_bytes(&self) -> Result<u64> {
        self.connection().await?;
        match self.graph_index() {
            Some(_) => Ok(self.text.read().content_bytes()),
            None => self.stored_document_bytes().await,
        }
    }

    /// The bytes of the documents' content as the store sums them (a scan of every document).
    pub async fn stored_document_bytes(&self) -> Result<u64> {
        let rows: Vec<Option<u64>> = self
            .run(
                &format!(
                    "RETURN [math::sum((SELECT VALUE bytes::len(<bytes> content) FROM {DOCUMENT}))]"
                ),
                Object::new(),
            )
            .await?;
        Ok(rows.into_iter().flatten().next().unwrap_or(0))
    }

    pub async fn counts(&self) -> Result<Counts> {
        #[derive(serde::Deserialize)]
        struct Row {
            entities: u64,
            relationships: u64,
            documents: u64,
        }
        let rows: Vec<Row> = self
            .run(
                &format!(
                    "RETURN [{{ entities: count(SELECT VALUE id FROM {ENTITY}), relationships: count(SELECT VALUE id FROM {RELATES}), documents: count(SELECT VALUE id FROM {DOCUMENT}) }}]"
                ),
                Object::new(),
            )
            .await?;
        let r = rows.into_iter().next().unwrap_or(Row {
            entities: 0,
            relationships: 0,
            documents: 0,
        });
        Ok(Counts {
            entities: r.entities,
            relationships: r.relationships,
            documents: r.documents,
        })
    }
}

/// Opens the surrealkv datastore of `config.url` (`surrealkv://PATH`) as the SDK's local
/// engine would, but with the block cache and memtable sizes of `config`. The SDK opens every
/// embedded store with surrealkv's defaults, which size them for a database server (a block
/// cache of half the machine's memory less 1 GiB, a memtable of up to 1 GiB): kbq serves reads
/// from its own indexes, and reading the store once at start filled that cache with a copy of
/// the whole store. The steps are the local
/// engine's own (check the storage version, bootstrap, start the maintenance tasks); its
/// datastore is then served to the SDK through `unstable_from_datastore`, the SDK's way to
/// run a datastore its caller built, which SurrealDB marks as not covered by semver: the
/// version of surrealdb is pinned in Cargo.toml, and tests/it/probes.rs and the store's tests
/// open, write and reopen such stores.
async fn open_surrealkv(config: &StoreConfig) -> Result<Surreal<Db>> {
    fn failed(e: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable(e.to_string())
    }
    let mut sizes = surrealdb_cnf::ConfigMap::empty().with_key_value(
        "surrealkv_block_cache_capacity",
        config.block_cache_bytes.to_string(),
    );
    if let Some(bytes) = config.memtable_bytes {
        sizes = sizes.with_key_value("surrealkv_max_memtable_size", bytes.to_string());
    }
    let datastore = surrealdb_core::kvs::Datastore::builder()
        .with_config(sizes)
        // The capabilities the SDK gives an embedded engine by default.
        .with_capabilities(surrealdb::opt::capabilities::Capabilities::new().into())
        .without_maintenance_tasks()
        .build_with_path(&config.url)
        .await
        .map_err(failed)?;
    datastore.check_version().await.map_err(failed)?;
    datastore.bootstrap().await.map_err(failed)?;
    datastore.start_maintenance_tasks();
    Surreal::<Db>::unstable_from_datastore(datastore, None)
        .await
        .map_err(failed)
}
