//! The SurrealDB connection and the helpers every query uses: the database handle
//! ([`Database`], [`Connected`]), statements with a time limit ([`query_on`]), the rows and
//! record ids kbq writes, and the stored form of vectors. It sits below every file that runs a
//! query, [`KnowledgeBase`](crate::KnowledgeBase)'s own included, and knows none of them.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use surrealdb::IndexedResults;
use surrealdb::Surreal;
use surrealdb::engine::any::Any;
use surrealdb::engine::local::Db;
use surrealdb::types::{Object, QueryError, RecordId, Value};

use tracing::Instrument;

use crate::error::{Result, StoreError};
use crate::model::keys;
use crate::model::table;

/// A relationship row as [`Relationship`] reads it.
pub(crate) const RELATIONSHIP_FIELDS: &str =
    "source_name, target_name, relationship_type, properties";

/// What names a relationship: its ends and its type.
pub(crate) const RELATIONSHIP_NAME_FIELDS: &str = "source_name, target_name, relationship_type";

pub(crate) struct Connected {
    pub(crate) db: Database,
}

/// A connection to SurrealDB: through the SDK's `any` engine (`mem://`, `ws://`, `wss://`),
/// or to a surrealkv datastore this process opened itself, to size its block cache (see
/// [`StoreConfig::block_cache_bytes`]).
///
/// A clone shares the connection (datastore or socket) but is a session of its own, which
/// starts as a copy of the original's (namespace, database, sign-in): choosing another
/// database on a clone ([`use_database`](Self::use_database)) leaves the original where it
/// was. That is how a workspace's knowledge base shares its parent's connection.
#[derive(Clone)]
pub(crate) enum Database {
    Any(Surreal<Any>),
    SurrealKv(Surreal<Db>),
}

impl Database {
    pub(crate) async fn query(&self, sql: &str, vars: Object) -> surrealdb::Result<IndexedResults> {
        match self {
            Database::Any(db) => db.query(sql).bind(vars).await,
            Database::SurrealKv(db) => db.query(sql).bind(vars).await,
        }
    }

    /// Selects namespace `ns` and database `db` for this handle's session (and only for it).
    /// SurrealDB defines the database when it does not exist yet.
    pub(crate) async fn use_database(&self, ns: &str, db: &str) -> surrealdb::Result<()> {
        match self {
            Database::Any(d) => d.use_ns(ns).use_db(db).await.map(drop),
            Database::SurrealKv(d) => d.use_ns(ns).use_db(db).await.map(drop),
        }
    }

    /// Begins a transaction on a session of its own (a clone of this handle, in the same
    /// namespace and database): every read through it sees the database as it was when it
    /// began, whatever is written meanwhile.
    pub(crate) async fn snapshot(&self) -> surrealdb::Result<Snapshot> {
        match self {
            Database::Any(db) => db.clone().begin().await.map(Snapshot::Any),
            Database::SurrealKv(db) => db.clone().begin().await.map(Snapshot::SurrealKv),
        }
    }

    pub(crate) async fn health(&self) -> surrealdb::Result<()> {
        match self {
            Database::Any(db) => db.health().await,
            Database::SurrealKv(db) => db.health().await,
        }
    }
}

/// A read-only transaction ([`Database::snapshot`]): its reads see one state of the
/// database. It writes nothing, and [`end`](Self::end) cancels it.
pub(crate) enum Snapshot {
    Any(surrealdb::method::Transaction<Any>),
    SurrealKv(surrealdb::method::Transaction<Db>),
}

impl Snapshot {
    /// Runs `sql` in the transaction, with a time limit.
    pub(crate) async fn query(
        &self,
        sql: &str,
        vars: Object,
        timeout: Duration,
    ) -> Result<IndexedResults> {
        let run = async {
            match self {
                Snapshot::Any(tx) => tx.query(sql).bind(vars).await,
                Snapshot::SurrealKv(tx) => tx.query(sql).bind(vars).await,
            }
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {timeout:?}"
            ))),
        }
    }

    /// Ends the transaction (it wrote nothing, so it is cancelled).
    pub(crate) async fn end(self) {
        let ended = match self {
            Snapshot::Any(tx) => tx.cancel().await.map(drop),
            Snapshot::SurrealKv(tx) => tx.cancel().await.map(drop),
        };
        if let Err(e) = ended {
            tracing::debug!(error = %e, "ending a read transaction failed");
        }
    }
}

/// Longest wait for one of the queries that read a whole table to build the in-memory
/// indexes (at connection, and after a following node resubscribes): a large store takes
/// longer than an ordinary query may.
pub(crate) const INDEX_LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// The record id of the entity named `name`.
pub(crate) fn entity_record_id(name: &str) -> RecordId {
    RecordId::new(table::ENTITY, keys::entity(name))
}

/// The record id of the relationship (source, target, type).
pub(crate) fn relationship_record_id(
    source: &str,
    target: &str,
    relationship_type: &str,
) -> RecordId {
    RecordId::new(
        table::RELATES,
        keys::relationship(source, target, relationship_type),
    )
}

/// A vector as SurrealDB stores document embeddings: little-endian `f32` bytes, a quarter of
/// the size of an array of numbers and far cheaper to write.
pub(crate) fn vector_bytes(v: &[f32]) -> Value {
    Value::Bytes(surrealdb::types::Bytes::from(
        v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    ))
}

/// An embedding read back from SurrealDB: bytes as [`vector_bytes`] writes them, or an array
/// of numbers.
pub(crate) fn vector_from(v: &Value) -> Option<Vec<f32>> {
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

/// How many times a write that lost a transaction conflict is run.
const CONFLICT_ATTEMPTS: u32 = 8;

/// The longest wait before a write that lost a conflict runs again, in milliseconds.
const CONFLICT_MAX_WAIT_MS: u64 = 160;

/// Runs `sql`, a write whose rows kbq does not read, on `db` with a time limit, and checks
/// every statement. A write that lost a transaction conflict to another (two nodes writing
/// one database at once) did nothing, and is run again, up to [`CONFLICT_ATTEMPTS`] times,
/// after a wait drawn at random below a bound that doubles each time (5, 10, 20 ms and so
/// on, at most [`CONFLICT_MAX_WAIT_MS`]): writers that conflicted and then waited alike
/// would meet again at each next attempt.
pub(crate) async fn write_on(
    db: &Database,
    sql: &str,
    vars: Object,
    timeout: Duration,
) -> Result<()> {
    let mut attempt = 1;
    loop {
        let (conflict, error) = match query_on(db, sql, vars.clone(), timeout).await {
            Ok(resp) => match resp.check() {
                Ok(_) => return Ok(()),
                Err(e) => (is_conflict(&e), StoreError::Query(e.to_string())),
            },
            // A server can report the conflict for the whole request rather than its
            // statement: the write did nothing either way.
            Err(StoreError::Unavailable(m)) if m.contains("can be retried") => {
                (true, StoreError::Unavailable(m))
            }
            Err(e) => return Err(e),
        };
        if !conflict || attempt >= CONFLICT_ATTEMPTS {
            return Err(error);
        }
        tracing::debug!(
            attempt,
            "a write lost a transaction conflict; running it again"
        );
        conflict_wait(attempt).await;
        attempt += 1;
    }
}

/// Waits before the `attempt`+1-th run of something that lost a transaction conflict: a
/// random time below a bound that doubles with each attempt (see [`write_on`]).
async fn conflict_wait(attempt: u32) {
    let bound = (5u64 << (attempt.clamp(1, 16) - 1)).min(CONFLICT_MAX_WAIT_MS);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let wait = crate::generate::Rng::new(seed).below(bound as usize + 1) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

/// Runs `step` again while it fails with a transaction conflict (it did nothing), up to
/// [`CONFLICT_ATTEMPTS`] times, waiting as [`write_on`] does: for what SurrealDB does in a
/// transaction of its own beside kbq's statements (selecting a database, registering a LIVE
/// query), which meets the other nodes' writes as they do.
pub(crate) async fn retry_conflicts<T, F, Fut>(mut step: F) -> surrealdb::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = surrealdb::Result<T>>,
{
    let mut attempt = 1;
    loop {
        match step().await {
            Err(e) if attempt < CONFLICT_ATTEMPTS && retryable(&e) => {
                conflict_wait(attempt).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// Whether `e` is a statement's transaction conflict: the transaction did nothing, and may be
/// run again.
pub(crate) fn is_conflict(e: &surrealdb::Error) -> bool {
    matches!(e.query_details(), Some(QueryError::TransactionConflict))
}

/// Whether `e` says the transaction lost a conflict and did nothing: a statement's, or one the
/// server reports for the whole request.
fn retryable(e: &surrealdb::Error) -> bool {
    is_conflict(e) || e.to_string().contains("can be retried")
}

/// The error that failed `resp`, if a statement failed. When one statement of a transaction
/// fails, SurrealDB reports the others as not executed or cancelled: the cause is the first
/// error that is neither.
pub(crate) fn failure(resp: &mut IndexedResults) -> Option<surrealdb::Error> {
    let mut errors: Vec<(usize, surrealdb::Error)> = resp.take_errors().into_iter().collect();
    errors.sort_unstable_by_key(|(statement, _)| *statement);
    let collateral = |e: &surrealdb::Error| {
        matches!(
            e.query_details(),
            Some(QueryError::NotExecuted | QueryError::Cancelled)
        )
    };
    let cause = errors.iter().position(|(_, e)| !collateral(e)).unwrap_or(0);
    errors.into_iter().nth(cause).map(|(_, e)| e)
}

/// Rows a statement returned, each read as `T`.
pub(crate) fn rows_as<T: DeserializeOwned>(rows: Vec<Json>) -> Result<Vec<T>> {
    rows.into_iter()
        .map(|r| {
            serde_json::from_value(r)
                .map_err(|e| StoreError::Query(format!("unexpected row shape: {e}")))
        })
        .collect()
}

pub(crate) fn row<const N: usize>(fields: [(&str, Value); N]) -> Value {
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
/// task of its own (see [`KnowledgeBase::insert_pipelined_on`]).
pub(crate) async fn query_on(
    db: &Database,
    sql: &str,
    vars: Object,
    timeout: Duration,
) -> Result<surrealdb::IndexedResults> {
    let run = async move {
        match tokio::time::timeout(timeout, db.query(sql, vars)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {timeout:?}"
            ))),
        }
    };
    // A span per statement, inside a traced request or job only: a statement of background
    // work (the follower, a sweep) would otherwise start a trace of its own.
    let span = tracing::debug_span!(
        "db.query",
        otel.name = %statement_summary(sql),
        otel.kind = "client",
        db.system.name = "surrealdb",
    );
    if span.is_disabled() || tracing::Span::current().is_none() {
        return run.await;
    }
    run.instrument(span).await
}

/// A statement's first words (kbq's own SurrealQL, never a value: those are bound), as a
/// span's name.
fn statement_summary(sql: &str) -> String {
    let mut summary: String = sql.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    if summary.len() > 60 {
        let mut end = 60;
        while !summary.is_char_boundary(end) {
            end -= 1;
        }
        summary.truncate(end);
    }
    summary
}
