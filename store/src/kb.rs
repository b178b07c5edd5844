//! [`KnowledgeBase`]: the one door to SurrealDB. It owns the connection, defines the schema,
//! writes records in batches and keeps the in-memory graph index current on every write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use surrealdb::Surreal;
use surrealdb::engine::any::Any;
use surrealdb::opt::auth::Root;
use surrealdb::types::{Object, RecordId, SurrealValue, Value};
use tokio_util::task::AbortOnDropHandle;

use crate::embed::Embedder;
use crate::error::{Result, StoreError};
use crate::graph::{
    self, Direction, GraphIndex, Reached, Traversal, TraversalQuery, Walk, candidate_order,
};
use crate::model::table::{self, DOCUMENT, ENTITY, MEMORY, META, RELATES};
use crate::model::{
    Entity, EntityRef, NewDocument, NewEntity, NewRelationship, Relationship, keys,
};
use crate::progress::{Phase, Progress};
use crate::text::{Analysed, TextIndex};
use crate::vectors::{DocTags, VectorIndex};

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
        }
    }
}

/// How many records an import hands to one upsert call (and its progress step).
pub const WRITE_BATCH: usize = 1000;

/// How many records go into one INSERT statement. SurrealDB takes a savepoint per record of a
/// statement, copying the statement's writes so far, so a record's cost grows with its
/// statement's size: 100 rows wrote entities three times as fast as 1000 (docs/benchmarks.md).
const INSERT_ROWS: usize = 100;

/// How many INSERT statements of one batch are written at once (see
/// [`KnowledgeBase::insert_pipelined`]): one per core, at least two, at most eight. With one,
/// the embedded engine used one core (user time equal to wall time); two took the benchmark
/// import from 136.9 s to 76.2 s on two cores, and four were no faster than two
/// (docs/benchmarks.md).
fn writers() -> usize {
    static WRITERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WRITERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(2, usize::from)
            .clamp(2, 8)
    })
}

/// What the in-process vector and keyword indexes read of a document (see [`DocEntry`]).
const DOCUMENT_ENTRY_FIELDS: &str =
    "meta::id(id) AS id, embedding, title, content, source, content_type, entity_name";

/// An entity row as [`Entity`] reads it; the id is filled in from the name (see [`with_id`]).
pub(crate) const ENTITY_FIELDS: &str = "name, entity_type, properties, '' AS id";

/// A relationship row as [`Relationship`] reads it.
pub(crate) const RELATIONSHIP_FIELDS: &str =
    "source_name, target_name, relationship_type, properties";

/// What names a relationship: its ends and its type.
pub(crate) const RELATIONSHIP_NAME_FIELDS: &str = "source_name, target_name, relationship_type";

/// A document as the in-process vector and keyword indexes hold it.
pub(crate) struct DocEntry {
    pub(crate) key: String,
    /// `None` when the stored vector could not be read.
    pub(crate) vector: Option<Vec<f32>>,
    pub(crate) tags: DocTags,
    pub(crate) text: Analysed,
}

impl DocEntry {
    /// Puts the document into both indexes, replacing what they held of it. Without a vector
    /// of the index's dimension it leaves the vector index; returns whether it is there.
    fn put(self, vectors: &mut VectorIndex, text: &mut TextIndex) -> bool {
        let vectored = match &self.vector {
            Some(v) if v.len() == vectors.dimension() => {
                vectors.upsert(&self.key, v, self.tags.clone());
                true
            }
            _ => {
                vectors.remove(&self.key);
                false
            }
        };
        text.upsert(&self.key, &self.text, self.tags);
        vectored
    }
}

/// What [`KnowledgeBase::delete_entity`] did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EntityDeletion {
    pub deleted: bool,
    /// Relationships removed with it.
    pub relationships: usize,
    /// Documents whose link to it was removed.
    pub documents_unlinked: usize,
}

/// Counts of each table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub entities: u64,
    pub relationships: u64,
    pub documents: u64,
}

pub(crate) struct Connected {
    pub(crate) db: Surreal<Any>,
}

pub struct KnowledgeBase {
    config: StoreConfig,
    embedder: Arc<dyn Embedder>,
    conn: RwLock<Option<Arc<Connected>>>,
    connecting: tokio::sync::Mutex<Option<Instant>>,
    index: Option<RwLock<GraphIndex>>,
    vectors: Arc<RwLock<VectorIndex>>,
    text: Arc<RwLock<TextIndex>>,
    /// Bumped on every entity write through this knowledge base.
    generation: std::sync::atomic::AtomicU64,
    /// Opened by [`KnowledgeBase::open_for_reembed`]: a store embedded by another embedder is
    /// accepted (and its vectors not loaded) so that [`KnowledgeBase::reembed`] can convert it.
    adopt_embedder: bool,
}

/// Longest wait for one of the queries that read a whole table to build the in-memory
/// indexes (at connection, and after a following node resubscribes): a large store takes
/// longer than an ordinary query may.
const INDEX_LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// After a failed connection attempt, requests fail fast for this long instead of each
/// waiting out its own attempt.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

impl KnowledgeBase {
    /// Creates the knowledge base and tries to connect once. An unreachable database is not an
    /// error here: requests answer `Unavailable` until a later attempt succeeds.
    pub async fn open(config: StoreConfig, embedder: Arc<dyn Embedder>) -> Arc<Self> {
        Self::open_with(config, embedder, false).await
    }

    /// As [`open`](Self::open), for [`reembed`](Self::reembed): a store whose documents
    /// another embedder wrote is accepted, and its old vectors are not loaded.
    pub async fn open_for_reembed(config: StoreConfig, embedder: Arc<dyn Embedder>) -> Arc<Self> {
        Self::open_with(config, embedder, true).await
    }

    async fn open_with(
        config: StoreConfig,
        embedder: Arc<dyn Embedder>,
        adopt_embedder: bool,
    ) -> Arc<Self> {
        let kb = Arc::new(KnowledgeBase {
            adopt_embedder,
            index: config
                .graph_index
                .then(|| RwLock::new(GraphIndex::default())),
            vectors: Arc::new(RwLock::new(VectorIndex::new(embedder.dimension()))),
            text: Arc::new(RwLock::new(TextIndex::new())),
            config,
            embedder,
            conn: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
        });
        if let Err(e) = kb.connection().await {
            tracing::warn!(error = %e, url = %kb.config.url, "knowledge base not ready yet");
        }
        kb
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// True when graph reads are served from the in-memory index.
    pub fn uses_index(&self) -> bool {
        self.index.is_some()
    }

    pub(crate) async fn connection(&self) -> Result<Arc<Connected>> {
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
        match self.connect().await {
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
    async fn connect(&self) -> Result<Connected> {
        let db = tokio::time::timeout(self.config.connect_timeout, self.reach())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "no connection to {} within {:?}",
                    self.config.url, self.config.connect_timeout
                ))
            })??;
        let c = Connected { db };
        self.define_schema(&c).await?;
        self.load_indexes(&c).await?;
        Ok(c)
    }

    /// Opens the connection, signs in and selects the namespace and database.
    async fn reach(&self) -> Result<Surreal<Any>> {
        let unavailable = |e: surrealdb::Error| StoreError::Unavailable(e.to_string());
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
        db.use_ns(self.config.namespace.as_str())
            .use_db(self.config.database.as_str())
            .await
            .map_err(unavailable)?;
        Ok(db)
    }

    /// Rebuilds the graph index (when there is one) from the entities and relationships
    /// SurrealDB holds.
    async fn load_graph_index(&self, c: &Connected) -> Result<()> {
        let Some(index) = &self.index else {
            return Ok(());
        };
        let entities: Vec<Entity> = self
            .run_within(
                c,
                &format!("SELECT {ENTITY_FIELDS} FROM {ENTITY}"),
                Object::new(),
                INDEX_LOAD_TIMEOUT,
            )
            .await?;
        let rels: Vec<Relationship> = self
            .run_within(
                c,
                &format!("SELECT {RELATIONSHIP_FIELDS} FROM {RELATES}"),
                Object::new(),
                INDEX_LOAD_TIMEOUT,
            )
            .await?;
        let started = Instant::now();
        let built = GraphIndex::build(entities, rels);
        tracing::info!(
            entities = built.entity_count(),
            relationships = built.relationship_count(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "graph index built"
        );
        *index.write() = built;
        self.bump_generation();
        Ok(())
    }

    /// Rebuilds the graph and vector indexes from the database: after a time in which writes
    /// made elsewhere may have been missed (see [`follow_changes`](Self::follow_changes)).
    pub(crate) async fn reload_indexes(&self) -> Result<()> {
        let c = self.connection().await?;
        self.load_indexes(&c).await
    }

    /// Builds the graph index (when there is one) and the vector index from the store. A
    /// store opened for `reembed` keeps no vectors: they are another embedder's.
    async fn load_indexes(&self, c: &Connected) -> Result<()> {
        self.load_graph_index(c).await?;
        if !self.adopt_embedder {
            self.load_document_indexes(c).await?;
        }
        Ok(())
    }

    pub(crate) fn graph_index(&self) -> Option<&RwLock<GraphIndex>> {
        self.index.as_ref()
    }

    pub(crate) fn bump_generation(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Embeds every document again with this knowledge base's embedder, then records that
    /// embedder as the store's: how a store moves to another embedder (`kbq reindex`), so that
    /// vectors of two models never mix in a search. The old record stays until every document
    /// is done: after an interrupted run the old configuration still serves the store (the
    /// documents already converted, if their dimension differs, are left out of semantic
    /// search), and a second run finishes the work. Returns the number of documents embedded.
    pub async fn reembed(&self, progress: &dyn Progress) -> Result<u64> {
        #[derive(serde::Deserialize)]
        struct Doc {
            id: String,
            title: String,
            content: String,
        }
        let docs: Vec<Doc> = self
            .run(
                &format!("SELECT meta::id(id) AS id, title, content FROM {DOCUMENT}"),
                Object::new(),
            )
            .await?;
        progress.start(Phase::Embeddings, docs.len() as u64);
        for chunk in docs.chunks(INSERT_ROWS) {
            let texts: Vec<String> = chunk
                .iter()
                .map(|d| crate::model::embedding_text(&d.title, &d.content))
                .collect();
            let vectors = self.embedder.embed(&texts).await?;
            let rows: Vec<Value> = chunk
                .iter()
                .zip(&vectors)
                .map(|(d, v)| {
                    row([
                        (
                            "id",
                            RecordId::new(table::DOCUMENT, d.id.as_str()).into_value(),
                        ),
                        ("embedding", vector_bytes(v)),
                    ])
                })
                .collect();
            self.exec(
                "FOR $r IN $rows { UPDATE $r.id SET embedding = $r.embedding };",
                obj([("rows", rows.into_value())]),
            )
            .await?;
            progress.advance(chunk.len() as u64);
        }
        let dim = self.embedder.dimension();
        self.exec(
            &format!("UPSERT {META}:embedder CONTENT {{ name: $name, dimension: $dimension }}"),
            obj([
                ("name", self.embedder.name().into_value()),
                ("dimension", (dim as i64).into_value()),
            ]),
        )
        .await?;
        let c = self.connection().await?;
        self.load_document_indexes(&c).await?;
        Ok(docs.len() as u64)
    }

    async fn define_schema(&self, c: &Connected) -> Result<()> {
        let dim = self.embedder.dimension();
        let schema = format!(
            "DEFINE TABLE IF NOT EXISTS {ENTITY} SCHEMALESS;
             DEFINE FIELD IF NOT EXISTS name ON {ENTITY} TYPE string;
             DEFINE FIELD IF NOT EXISTS name_lower ON {ENTITY} TYPE string;
             DEFINE FIELD IF NOT EXISTS entity_type ON {ENTITY} TYPE string;
             REMOVE INDEX IF EXISTS entity_name ON {ENTITY};
             REMOVE INDEX IF EXISTS entity_type_idx ON {ENTITY};
             DEFINE TABLE IF NOT EXISTS {RELATES} TYPE RELATION IN {ENTITY} OUT {ENTITY} SCHEMALESS;
             DEFINE FIELD IF NOT EXISTS relationship_type ON {RELATES} TYPE string;
             DEFINE TABLE IF NOT EXISTS {DOCUMENT} SCHEMALESS;
             DEFINE INDEX IF NOT EXISTS document_entity ON {DOCUMENT} FIELDS entity_name;
             DEFINE ANALYZER IF NOT EXISTS kbq_text TOKENIZERS class FILTERS lowercase, ascii;
             REMOVE INDEX IF EXISTS document_title_text ON {DOCUMENT};
             REMOVE INDEX IF EXISTS document_content_text ON {DOCUMENT};
             DEFINE FIELD IF NOT EXISTS embedding ON {DOCUMENT} TYPE bytes;
             REMOVE INDEX IF EXISTS document_embedding ON {DOCUMENT};
             DEFINE TABLE IF NOT EXISTS {MEMORY} SCHEMALESS;
             DEFINE INDEX IF NOT EXISTS memory_owner ON {MEMORY} FIELDS owner;
             DEFINE INDEX IF NOT EXISTS memory_content_text ON {MEMORY} FIELDS content FULLTEXT ANALYZER kbq_text BM25;
             DEFINE TABLE IF NOT EXISTS {META} SCHEMALESS;"
        );
        self.exec_on(c, &schema, Object::new()).await?;
        // Vectors of two embedders must never mix in one index.
        let found: Vec<Json> = self
            .run_on(
                c,
                &format!("SELECT name, dimension FROM {META}:embedder"),
                Object::new(),
            )
            .await?;
        let want = serde_json::json!({"name": self.embedder.name(), "dimension": dim});
        match found.first() {
            None => {
                self.exec_on(
                    c,
                    &format!(
                        "UPSERT {META}:embedder CONTENT {{ name: $name, dimension: $dimension }}"
                    ),
                    obj([
                        ("name", self.embedder.name().into_value()),
                        ("dimension", (dim as i64).into_value()),
                    ]),
                )
                .await
            }
            Some(have) if *have == want => Ok(()),
            Some(have) if self.adopt_embedder => {
                tracing::info!(%have, %want, "the store changes embedder");
                Ok(())
            }
            Some(have) => Err(StoreError::Query(format!(
                "the store's documents were embedded with {have}, but kbq is configured with {want}: run `kbq reindex` to embed them again with the configured embedder"
            ))),
        }
    }

    async fn exec_on(&self, c: &Connected, sql: &str, vars: Object) -> Result<()> {
        let resp = self.send(c, sql, vars).await?;
        resp.check()
            .map(|_| ())
            .map_err(|e| StoreError::Query(e.to_string()))
    }

    async fn run_on<T: DeserializeOwned>(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
    ) -> Result<Vec<T>> {
        self.run_within(c, sql, vars, self.config.query_timeout)
            .await
    }

    /// As [`run_on`](Self::run_on), with a time limit of its own.
    async fn run_within<T: DeserializeOwned>(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
        timeout: Duration,
    ) -> Result<Vec<T>> {
        let mut resp = query_on(&c.db, sql, vars, timeout).await?;
        let last = resp.num_statements().saturating_sub(1);
        let rows: Vec<Json> = resp
            .take(last)
            .map_err(|e| StoreError::Query(e.to_string()))?;
        rows.into_iter()
            .map(|r| {
                serde_json::from_value(r)
                    .map_err(|e| StoreError::Query(format!("unexpected row shape: {e}")))
            })
            .collect()
    }

    async fn send(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
    ) -> Result<surrealdb::IndexedResults> {
        query_on(&c.db, sql, vars, self.config.query_timeout).await
    }

    pub(crate) async fn run<T: DeserializeOwned>(&self, sql: &str, vars: Object) -> Result<Vec<T>> {
        let c = self.connection().await?;
        self.run_on(&c, sql, vars).await
    }

    async fn exec(&self, sql: &str, vars: Object) -> Result<()> {
        let c = self.connection().await?;
        self.exec_on(&c, sql, vars).await
    }

    /// The embedding of one text.
    pub(crate) async fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self
            .embedder
            .embed(&[text.to_string()])
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

    // ---- writes -------------------------------------------------------------------------

    /// Inserts or updates entities by name. Records must be valid (see `NewEntity::validate`).
    pub async fn upsert_entities(&self, entities: &[NewEntity]) -> Result<()> {
        self.insert_pipelined(
            &format!("INSERT INTO {ENTITY} $rows ON DUPLICATE KEY UPDATE entity_type = $input.entity_type, properties = $input.properties RETURN NONE"),
            entities,
            |chunk: Vec<NewEntity>| async move {
                let rows = chunk.iter().map(entity_row).collect();
                Ok((rows, chunk.into_iter().map(NewEntity::into_entity).collect::<Vec<_>>()))
            },
            |written| {
                if let Some(index) = &self.index {
                    let mut index = index.write();
                    for e in written {
                        index.upsert_entity(e);
                    }
                }
                self.bump_generation();
            },
        )
        .await
    }

    /// Inserts or updates relationships by (source, target, type). Both ends must exist.
    pub async fn upsert_relationships(&self, rels: &[NewRelationship]) -> Result<()> {
        self.insert_pipelined(
            &format!("INSERT RELATION INTO {RELATES} $rows ON DUPLICATE KEY UPDATE properties = $input.properties RETURN NONE"),
            rels,
            |chunk: Vec<NewRelationship>| async move {
                let rows = chunk.iter().map(relationship_row).collect();
                Ok((rows, chunk.into_iter().map(NewRelationship::into_relationship).collect::<Vec<_>>()))
            },
            |written| {
                if let Some(index) = &self.index {
                    let mut index = index.write();
                    for r in written {
                        index.upsert_relationship(r);
                    }
                }
            },
        )
        .await
    }

    /// Inserts or updates documents by (source, source_id), embedding each.
    pub async fn upsert_documents(&self, docs: &[NewDocument]) -> Result<()> {
        let embedder = self.embedder.clone();
        self.insert_pipelined(
            &format!("INSERT INTO {DOCUMENT} $rows ON DUPLICATE KEY UPDATE title = $input.title, content = $input.content, content_type = $input.content_type, url = $input.url, entity_name = $input.entity_name, entity = $input.entity, embedding = $input.embedding RETURN NONE"),
            docs,
            move |chunk: Vec<NewDocument>| document_rows(embedder.clone(), chunk),
            |written: Vec<DocEntry>| self.index_documents(written),
        )
        .await
    }

    /// Writes `items` in INSERT statements of [`INSERT_ROWS`] rows: `sql` binds them as
    /// `$rows`. Up to [`writers`] statements are in flight at once, each built (by `build`)
    /// and written on a task of its own: SurrealDB's embedded engine runs a statement inside
    /// the future that awaits it, so statements awaited by one task would take turns on one
    /// thread. `written` gets what `build` returned beside the rows, in the order of `items`,
    /// once their statement has succeeded.
    async fn insert_pipelined<T, X, F, Fut>(
        &self,
        sql: &str,
        items: &[T],
        build: F,
        mut written: impl FnMut(X),
    ) -> Result<()>
    where
        T: Clone + Send + 'static,
        X: Send + 'static,
        F: Fn(Vec<T>) -> Fut,
        Fut: std::future::Future<Output = Result<(Vec<Value>, X)>> + Send + 'static,
    {
        let c = self.connection().await?;
        let sql: Arc<str> = Arc::from(sql);
        let mut chunks = items.chunks(INSERT_ROWS);
        let mut in_flight = std::collections::VecDeque::new();
        loop {
            while in_flight.len() < writers() {
                let Some(chunk) = chunks.next() else { break };
                let rows = build(chunk.to_vec());
                let db = c.db.clone();
                let sql = sql.clone();
                let timeout = self.config.query_timeout;
                // Aborted when dropped: a write whose caller has gone stops with it, rather
                // than landing in the database after the caller stopped updating the indexes.
                in_flight.push_back(AbortOnDropHandle::new(tokio::spawn(async move {
                    let (rows, extra) = rows.await?;
                    let vars = obj([("rows", rows.into_value())]);
                    query_on(&db, &sql, vars, timeout)
                        .await?
                        .check()
                        .map_err(|e| StoreError::Query(e.to_string()))?;
                    Ok::<X, StoreError>(extra)
                })));
            }
            let Some(task) = in_flight.pop_front() else {
                return Ok(());
            };
            match task.await {
                Ok(Ok(extra)) => written(extra),
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(StoreError::Query(format!("writing rows failed: {e}"))),
            }
        }
    }

    /// Deletes an entity, every relationship touching it, and the link of its documents to it
    /// (the documents stay, with `entity_name` null). Deleting an entity that does not exist
    /// changes nothing. Each step is its own write, in an order that a retry completes.
    pub async fn delete_entity(&self, name: &str) -> Result<EntityDeletion> {
        crate::model::check_name("name", name)?;
        #[derive(serde::Deserialize)]
        struct EdgeRow {
            source_name: String,
            target_name: String,
            relationship_type: String,
        }
        #[derive(serde::Deserialize)]
        struct Row {
            #[serde(default)]
            outs: Vec<EdgeRow>,
            #[serde(default)]
            ins: Vec<EdgeRow>,
        }
        let id = RecordId::new(table::ENTITY, keys::entity(name));
        let rows: Vec<Row> = self
            .run(
                &format!("SELECT ->{RELATES}.{{{RELATIONSHIP_NAME_FIELDS}}} AS outs, <-{RELATES}.{{{RELATIONSHIP_NAME_FIELDS}}} AS ins FROM $ids"),
                obj([("ids", vec![id.clone()].into_value())]),
            )
            .await?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(EntityDeletion::default());
        };
        let mut edges: Vec<(String, String, String)> = row
            .outs
            .into_iter()
            .chain(row.ins)
            .map(|e| (e.source_name, e.target_name, e.relationship_type))
            .collect();
        edges.sort();
        edges.dedup();
        let edge_ids: Vec<RecordId> = edges
            .iter()
            .map(|(s, d, t)| relationship_id(s, d, t))
            .collect();
        self.exec(
            "DELETE $edges; DELETE $id",
            obj([("edges", edge_ids.into_value()), ("id", id.into_value())]),
        )
        .await?;
        let unlinked: Vec<String> = self
            .run(
                &format!("UPDATE {DOCUMENT} SET entity_name = NONE, entity = NONE WHERE entity_name = $name RETURN VALUE meta::id(id)"),
                obj([("name", name.to_string().into_value())]),
            )
            .await?;
        if let Some(index) = &self.index {
            index.write().remove_entity(name);
        }
        {
            let mut vectors = self.vectors.write();
            let mut text = self.text.write();
            for key in &unlinked {
                vectors.set_entity(key, None);
                text.set_entity(key, None);
            }
        }
        self.bump_generation();
        Ok(EntityDeletion {
            deleted: true,
            relationships: edges.len(),
            documents_unlinked: unlinked.len(),
        })
    }

    /// Deletes one document by id (`document:<key>` or the key); false when there was none.
    pub async fn delete_document(&self, id: &str) -> Result<bool> {
        let key = id
            .strip_prefix(DOCUMENT)
            .and_then(|rest| rest.strip_prefix(':'))
            .unwrap_or(id);
        let valid = key.len() == 33
            && key.starts_with('d')
            && key[1..].bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(StoreError::invalid(
                "id",
                "must be a document id: document:d followed by 32 hex digits",
            ));
        }
        let rid = RecordId::new(table::DOCUMENT, key);
        let found: Vec<String> = self
            .run(
                "SELECT VALUE meta::id(id) FROM $ids",
                obj([("ids", vec![rid.clone()].into_value())]),
            )
            .await?;
        if found.is_empty() {
            return Ok(false);
        }
        self.exec("DELETE $id", obj([("id", rid.into_value())]))
            .await?;
        self.unindex_documents(&[key]);
        Ok(true)
    }

    /// The in-process vector index of document embeddings.
    pub(crate) fn vectors(&self) -> &Arc<RwLock<VectorIndex>> {
        &self.vectors
    }

    /// The in-process keyword index of document titles and contents.
    pub(crate) fn text(&self) -> &Arc<RwLock<TextIndex>> {
        &self.text
    }

    /// Puts `entries` into the vector and keyword indexes, replacing what they held of each.
    /// A document without a vector of this embedder's dimension leaves the vector index.
    pub(crate) fn index_documents(&self, entries: Vec<DocEntry>) {
        let mut vectors = self.vectors.write();
        let mut text = self.text.write();
        for e in entries {
            e.put(&mut vectors, &mut text);
        }
    }

    /// Takes the documents `keys` out of the vector and keyword indexes.
    pub(crate) fn unindex_documents<K: AsRef<str>>(&self, keys: &[K]) {
        let mut vectors = self.vectors.write();
        let mut text = self.text.write();
        for key in keys {
            vectors.remove(key.as_ref());
            text.remove(key.as_ref());
        }
    }

    /// Rebuilds the vector and keyword indexes from the documents SurrealDB holds.
    async fn load_document_indexes(&self, c: &Connected) -> Result<()> {
        let started = Instant::now();
        let entries = self
            .document_entries_on(
                c,
                &format!("SELECT {DOCUMENT_ENTRY_FIELDS} FROM {DOCUMENT}"),
                Object::new(),
                INDEX_LOAD_TIMEOUT,
            )
            .await?;
        let read_ms = started.elapsed().as_millis() as u64;
        let dimension = self.embedder.dimension();
        // Analysing every text takes a while for a large store: keep it off the async workers.
        let (vectors, text, skipped) = tokio::task::spawn_blocking(move || {
            let mut vectors = VectorIndex::new(dimension);
            let mut text = TextIndex::new();
            let mut skipped = 0usize;
            for e in entries {
                skipped += usize::from(!e.put(&mut vectors, &mut text));
            }
            (vectors, text, skipped)
        })
        .await
        .map_err(|e| StoreError::Query(format!("building the document indexes failed: {e}")))?;
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "documents without a vector of this embedder's dimension are left out of semantic search; `kbq reindex` embeds them"
            );
        }
        tracing::info!(
            documents = text.len(),
            vectors = vectors.len(),
            terms = text.terms(),
            read_ms,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "document indexes built"
        );
        *self.vectors.write() = vectors;
        *self.text.write() = text;
        Ok(())
    }

    /// The documents `ids` as the in-process indexes hold them; a missing one is left out.
    pub(crate) async fn document_entries(&self, ids: Vec<RecordId>) -> Result<Vec<DocEntry>> {
        let c = self.connection().await?;
        self.document_entries_on(
            &c,
            &format!("SELECT {DOCUMENT_ENTRY_FIELDS} FROM $ids"),
            obj([("ids", ids.into_value())]),
            self.config.query_timeout,
        )
        .await
    }

    /// Runs a query that selects [`DOCUMENT_ENTRY_FIELDS`].
    async fn document_entries_on(
        &self,
        c: &Connected,
        sql: &str,
        vars: Object,
        timeout: Duration,
    ) -> Result<Vec<DocEntry>> {
        let mut resp = query_on(&c.db, sql, vars, timeout).await?;
        let rows: Vec<Value> = resp.take(0).map_err(|e| StoreError::Query(e.to_string()))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Value::Object(row) = row else { continue };
            let Some(Value::String(id)) = row.get("id") else {
                continue;
            };
            let string = |field: &str| match row.get(field) {
                Some(Value::String(s)) => Some(s.as_str()),
                _ => None,
            };
            let tags = DocTags {
                source: string("source").unwrap_or_default().into(),
                content_type: string("content_type").unwrap_or_default().into(),
                entity_name: string("entity_name").map(Into::into),
            };
            out.push(DocEntry {
                key: id.clone(),
                vector: row.get("embedding").and_then(vector_from),
                text: Analysed::new(
                    string("title").unwrap_or_default(),
                    string("content").unwrap_or_default(),
                ),
                tags,
            });
        }
        Ok(out)
    }

    /// Changes whenever entities are written through this knowledge base, so that a cache of
    /// [`entity_names`](Self::entity_names) knows when to refresh.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Every entity name.
    pub async fn entity_names(&self) -> Result<Vec<String>> {
        if let Some(index) = &self.index {
            self.connection().await?;
            return Ok(index.read().names());
        }
        self.run(&format!("SELECT VALUE name FROM {ENTITY}"), Object::new())
            .await
    }

    /// The names among `names` that are not entities of the store.
    pub async fn missing_entities(&self, names: &[String]) -> Result<Vec<String>> {
        if let Some(index) = &self.index {
            self.connection().await?;
            let index = index.read();
            return Ok(names
                .iter()
                .filter(|n| !index.contains(n))
                .cloned()
                .collect());
        }
        let mut missing = Vec::new();
        for chunk in names.chunks(WRITE_BATCH) {
            let found: Vec<String> = self
                .run(
                    "SELECT VALUE name FROM $ids",
                    obj([("ids", entity_ids(chunk))]),
                )
                .await?;
            let found: std::collections::HashSet<&str> = found.iter().map(String::as_str).collect();
            missing.extend(
                chunk
                    .iter()
                    .filter(|n| !found.contains(n.as_str()))
                    .cloned(),
            );
        }
        Ok(missing)
    }

    // ---- graph reads --------------------------------------------------------------------

    /// One entity by exact name.
    pub async fn entity(&self, name: &str) -> Result<Option<EntityRef>> {
        if let Some(index) = &self.index {
            self.connection().await?;
            return Ok(index.read().entity(name));
        }
        let rows = self.entities_by_name(&[name.to_string()]).await?;
        Ok(rows.into_iter().next().map(with_id))
    }

    /// The stored entities among `names` (missing ones are left out), in batches.
    pub(crate) async fn entities_by_name(&self, names: &[String]) -> Result<Vec<Entity>> {
        let mut found = Vec::with_capacity(names.len());
        for chunk in names.chunks(WRITE_BATCH) {
            let rows: Vec<Entity> = self
                .run(
                    &format!("SELECT {ENTITY_FIELDS} FROM $ids"),
                    obj([("ids", entity_ids(chunk))]),
                )
                .await?;
            found.extend(rows);
        }
        Ok(found)
    }

    /// Entities whose name contains `query`, case-insensitively; exact, then prefix, then other.
    pub async fn search_entities(
        &self,
        query: &str,
        entity_type: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EntityRef>> {
        if let Some(index) = &self.index {
            self.connection().await?;
            return Ok(index.read().search(query, entity_type, limit));
        }
        let q = graph::fold_case(query);
        let rows: Vec<Entity> = self
            .run(
                &format!("SELECT {ENTITY_FIELDS} FROM {ENTITY} WHERE string::contains(name_lower, $q) AND ($type = NONE OR entity_type = $type)"),
                obj([
                    ("q", q.clone().into_value()),
                    ("type", entity_type.map_or(Value::None, |t| Value::String(t.to_string()))),
                ]),
            )
            .await?;
        let hits = rows
            .into_iter()
            .filter_map(|e| {
                let rank = graph::search_rank(&graph::fold_case(&e.name), &q)?;
                Some((rank, with_id(e)))
            })
            .collect();
        Ok(graph::rank_hits(hits, limit))
    }

    /// Walks the graph from `query.start`: from the index when it is on, else one SurrealDB
    /// graph query per level. Both give the same answer.
    pub async fn traverse(&self, query: &TraversalQuery) -> Result<Traversal> {
        if let Some(index) = &self.index {
            self.connection().await?;
            return Ok(index.read().traverse(query));
        }
        self.traverse_in_db(query).await
    }

    /// The in-memory walk alone, without the async call or the connection check: what the
    /// benchmark reports as the bare walk. `None` when the index is off.
    pub fn traverse_indexed(&self, query: &TraversalQuery) -> Option<Traversal> {
        self.index
            .as_ref()
            .map(|index| index.read().traverse(query))
    }

    /// The SurrealDB read path of [`traverse`](Self::traverse), public so that tests and
    /// benchmarks can compare the two paths on one store.
    pub async fn traverse_in_db(&self, query: &TraversalQuery) -> Result<Traversal> {
        #[derive(serde::Deserialize)]
        struct Level {
            name: String,
            #[serde(default)]
            outs: Vec<Relationship>,
            #[serde(default)]
            ins: Vec<Relationship>,
        }
        if self
            .entities_by_name(std::slice::from_ref(&query.start))
            .await?
            .is_empty()
        {
            return Ok(Traversal::default());
        }
        let types = query.relationship_types.clone();
        let outs = format!("->{RELATES}.{{{RELATIONSHIP_FIELDS}}} AS outs");
        let ins = format!("<-{RELATES}.{{{RELATIONSHIP_FIELDS}}} AS ins");
        let sql = match query.direction {
            Direction::Out => format!("SELECT name, {outs} FROM $ids"),
            Direction::In => format!("SELECT name, {ins} FROM $ids"),
            Direction::Both => format!("SELECT name, {outs}, {ins} FROM $ids"),
        };
        let mut walk: Walk<String, String> =
            Walk::new(query.start.clone(), query.limit, query.depth);
        let mut rels: HashMap<String, Relationship> = HashMap::new();
        'walk: while let Some(level) = walk.next_level() {
            let names: Vec<String> = walk.slots[level].iter().map(|s| s.0.clone()).collect();
            let rows: Vec<Level> = self.run(&sql, obj([("ids", entity_ids(&names))])).await?;
            let mut by_name: HashMap<String, Level> =
                rows.into_iter().map(|l| (l.name.clone(), l)).collect();
            for name in &names {
                let Some(level) = by_name.remove(name) else {
                    continue;
                };
                let mut candidates: Vec<(String, bool, Relationship)> = Vec::new();
                for r in level.outs {
                    candidates.push((r.target_name.clone(), true, r));
                }
                for r in level.ins {
                    candidates.push((r.source_name.clone(), false, r));
                }
                candidates.retain(|(_, _, r)| {
                    types
                        .as_ref()
                        .is_none_or(|t| t.contains(&r.relationship_type))
                });
                candidates.sort_by(|a, b| {
                    candidate_order(
                        (&a.0, &a.2.relationship_type, a.1),
                        (&b.0, &b.2.relationship_type, b.1),
                    )
                });
                for (neighbour, _, r) in candidates {
                    let key =
                        keys::relationship(&r.source_name, &r.target_name, &r.relationship_type);
                    let go_on = walk.offer(&neighbour, &key);
                    rels.entry(key).or_insert(r);
                    if !go_on {
                        break 'walk;
                    }
                }
            }
        }
        let names: Vec<String> = walk.slots.iter().map(|s| s.0.clone()).collect();
        let mut entities: HashMap<String, Entity> = self
            .entities_by_name(&names)
            .await?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        let mut reached = Vec::with_capacity(walk.slots.len());
        for (name, depth, via) in &walk.slots {
            // An entity deleted while the walk ran is left out rather than invented.
            let Some(e) = entities.remove(name) else {
                continue;
            };
            reached.push(Reached {
                entity: with_id(e),
                depth: *depth,
                via: via
                    .as_ref()
                    .and_then(|k| rels.get(k))
                    .map(|r| Arc::from(r.relationship_type.as_str())),
            });
        }
        Ok(Traversal {
            entities: reached,
            relationships: walk
                .edges
                .iter()
                .filter_map(|k| rels.get(k).cloned().map(Arc::new))
                .collect(),
            truncated: walk.truncated,
        })
    }

    // ---- documents ----------------------------------------------------------------------
}

fn with_id(mut e: Entity) -> EntityRef {
    e.id = keys::entity_id(&e.name);
    Arc::new(e)
}

/// The record id of the relationship (source, target, type).
pub(crate) fn relationship_id(source: &str, target: &str, relationship_type: &str) -> RecordId {
    RecordId::new(
        table::RELATES,
        keys::relationship(source, target, relationship_type),
    )
}

fn entity_ids(names: &[String]) -> Value {
    names
        .iter()
        .map(|n| RecordId::new(table::ENTITY, keys::entity(n)))
        .collect::<Vec<_>>()
        .into_value()
}

fn entity_row(e: &NewEntity) -> Value {
    row([
        (
            "id",
            RecordId::new(table::ENTITY, keys::entity(&e.name)).into_value(),
        ),
        ("name", e.name.clone().into_value()),
        ("name_lower", graph::fold_case(&e.name).into_value()),
        ("entity_type", e.entity_type.clone().into_value()),
        ("properties", json(Json::Object(e.properties.clone()))),
    ])
}

fn relationship_row(r: &NewRelationship) -> Value {
    row([
        (
            "id",
            relationship_id(&r.source_name, &r.target_name, &r.relationship_type).into_value(),
        ),
        (
            "in",
            RecordId::new(table::ENTITY, keys::entity(&r.source_name)).into_value(),
        ),
        (
            "out",
            RecordId::new(table::ENTITY, keys::entity(&r.target_name)).into_value(),
        ),
        ("source_name", r.source_name.clone().into_value()),
        ("target_name", r.target_name.clone().into_value()),
        (
            "relationship_type",
            r.relationship_type.clone().into_value(),
        ),
        ("properties", json(Json::Object(r.properties.clone()))),
    ])
}

/// The rows of `docs`, embedded, and each document as the in-process indexes hold it.
async fn document_rows(
    embedder: Arc<dyn Embedder>,
    docs: Vec<NewDocument>,
) -> Result<(Vec<Value>, Vec<DocEntry>)> {
    let texts: Vec<String> = docs.iter().map(NewDocument::embedding_text).collect();
    let vectors = embedder.embed(&texts).await?;
    let mut rows = Vec::with_capacity(docs.len());
    let mut keyed = Vec::with_capacity(docs.len());
    for (d, v) in docs.into_iter().zip(vectors) {
        let key = keys::document(&d.source, &d.source_id);
        let tags = DocTags {
            source: d.source.as_str().into(),
            content_type: d.content_type.as_str().into(),
            entity_name: d.entity_name.as_deref().map(Into::into),
        };
        let entity = match &d.entity_name {
            Some(n) => RecordId::new(table::ENTITY, keys::entity(n)).into_value(),
            None => Value::None,
        };
        let text = Analysed::new(&d.title, &d.content);
        rows.push(row([
            (
                "id",
                RecordId::new(table::DOCUMENT, key.as_str()).into_value(),
            ),
            ("title", d.title.into_value()),
            ("content", d.content.into_value()),
            ("source", d.source.into_value()),
            ("source_id", d.source_id.into_value()),
            ("content_type", d.content_type.into_value()),
            ("url", d.url.map_or(Value::Null, Value::String)),
            (
                "entity_name",
                d.entity_name.map_or(Value::Null, Value::String),
            ),
            ("entity", entity),
            ("embedding", vector_bytes(&v)),
        ]));
        keyed.push(DocEntry {
            key,
            vector: Some(v),
            tags,
            text,
        });
    }
    Ok((rows, keyed))
}

/// A vector as SurrealDB stores document embeddings: little-endian `f32` bytes, a quarter of
/// the size of an array of numbers and far cheaper to write.
fn vector_bytes(v: &[f32]) -> Value {
    Value::Bytes(surrealdb::types::Bytes::from(
        v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    ))
}

/// An embedding read back from SurrealDB: bytes as [`vector_bytes`] writes them, or an array
/// of numbers.
fn vector_from(v: &Value) -> Option<Vec<f32>> {
    match v {
        Value::Bytes(b) => {
            let (chunks, rest) = b.as_chunks::<4>();
            rest.is_empty()
                .then(|| chunks.iter().map(|c| f32::from_le_bytes(*c)).collect())
        }
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::Number(n) => Some(n.to_f64()? as f32),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

pub(crate) fn vector(v: Vec<f32>) -> Value {
    v.into_iter()
        .map(f64::from)
        .collect::<Vec<f64>>()
        .into_value()
}

fn json(v: Json) -> Value {
    v.into_value()
}

fn row<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(obj(fields))
}

pub(crate) fn obj<const N: usize>(fields: [(&str, Value); N]) -> Object {
    let mut o = Object::new();
    for (k, v) in fields {
        o.insert(k, v);
    }
    o
}

/// Runs `sql` on `db` with a time limit. A free function, so that a statement can run on a
/// task of its own (see [`KnowledgeBase::insert_pipelined`]).
async fn query_on(
    db: &Surreal<Any>,
    sql: &str,
    vars: Object,
    timeout: Duration,
) -> Result<surrealdb::IndexedResults> {
    match tokio::time::timeout(timeout, db.query(sql).bind(vars)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer within {timeout:?}"
        ))),
    }
}
