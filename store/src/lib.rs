//! kbq's knowledge base on SurrealDB: the records, the schema, every query, embeddings and the
//! in-memory graph index. Nothing outside this crate writes SurrealQL.
//!
//! # Layout
//! - [`model`]: entities, relationships, documents, the import record, table names and record keys.
//! - `db`: the SurrealDB connection, statements with a time limit, rows, record ids and the
//!   stored form of vectors; below every file that runs a query.
//! - [`kb`]: [`KnowledgeBase`], the store's facade: reaching the database, loading the indexes
//!   and the query methods (`impl KnowledgeBase` continues in schema, write, doc_index,
//!   graph_reads, search, related, memory, follow and workspaces, each of which uses `kb` and
//!   `db`; `kb` uses none of them).
//! - [`schema`]: the schema, the embedder record that guards it, and `reembed`.
//! - [`write`](mod@write): upserts through pipelined INSERTs, and deletes.
//! - [`doc_index`]: the document indexes (vectors, keywords) and, for an embedded store, the
//!   documents themselves, kept in step with SurrealDB.
//! - `documents`: the table of every document an embedded store holds in memory.
//! - [`graph_reads`]: entity lookup, name search and traversal, from the index or SurrealDB.
//! - [`graph`]: the breadth-first walk both read paths share, and the in-memory [`GraphIndex`].
//! - `grouped`: statements of one kind that concurrent callers send, run as one (a group
//!   commit led by one of the callers).
//! - [`names`]: the [`NameIndex`](names::NameIndex) of n-gram posting lists that name search
//!   reads, and how names are compared (`fold_case`, `search_rank`).
//! - [`numbers`]: [`EntityNumbers`](numbers::EntityNumbers), one number per entity name, that
//!   the graph index and the vector index share so that a walk hands numbers, not names, over.
//! - [`embed`]: the [`Embedder`] trait and the offline [`HashingEmbedder`].
//! - [`import`]: the NDJSON import format, with line-numbered failures.
//! - [`export`]: a knowledge base written in the import format from one transaction, and
//!   the restore of what only an export holds (memory, sources, supports, kept answers).
//! - [`progress`]: the [`Progress`](progress::Progress) an import and a reembed report to, and
//!   the [`LoadProgress`](progress::LoadProgress) of connecting.
//! - [`json`]: JSON written as `serde_json` writes it, a word at a time through long strings.
//! - `hint`: prefetch hints, for loops that read scattered memory.
//! - `parts`: reads whole tables in key ranges, several at once, to build the indexes.
//! - [`follow`]: keeps the in-memory indexes current with writes made by other nodes.
//! - `live`: the LIVE SELECT subscriptions the follower and the first connection hold.
//! - [`related`]: traverse, then resolve entities to their documents, scored.
//! - [`search`]: semantic (KNN over [`vectors`]) and keyword (BM25 over [`text`]) document search.
//! - [`vectors`]: the in-process vector index of document embeddings, with its inverted file.
//! - [`text`]: the in-process keyword (BM25) index of document titles and contents.
//! - [`memory`]: agent memory, owned by an API key and recalled only by it.
//! - [`workspaces`]: many isolated knowledge bases on one server, a database each: the
//!   registry of workspaces and the hashes of the API keys minted for them.
//! - [`sources`]: ingested sources, their chunks' documents, the model answers kept per
//!   chunk, and carrying out a retraction plan.
//! - `supports`: which chunk of which source (or an import) gave each fact, kept by key so
//!   that both "who supports this fact" and "what does this source support" read a range.
//! - [`generate`]: a seeded synthetic knowledge base for benchmarks and tests.
//! - [`error`]: the error type, [`StoreError`].

pub(crate) mod db;
pub mod doc_index;
pub(crate) mod documents;
pub mod embed;
pub mod error;
pub mod export;
pub mod follow;
pub mod generate;
pub mod graph;
pub mod graph_reads;
pub(crate) mod grouped;
pub(crate) mod heap;
pub(crate) mod hint;
pub mod import;
pub mod json;
pub mod kb;
pub(crate) mod live;
pub mod memory;
pub mod model;
pub mod names;
pub mod numbers;
pub(crate) mod parts;
pub mod progress;
pub mod related;
pub mod schema;
pub mod search;
pub mod sources;
pub(crate) mod supports;
pub mod text;
pub mod vectors;
pub mod workspaces;
pub mod write;

pub use embed::{Embedder, HashingEmbedder, cosine};
pub use error::{Result, StoreError};
pub use graph::{
    Direction, GraphIndex, NameList, Reach, Reached, Traversal, TraversalJson, TraversalQuery,
};
pub use kb::{Counts, IndexStats, KnowledgeBase, StoreConfig};
pub use memory::{Memory, MemoryHit, MemoryStats};
pub use model::{
    Document, Entity, EntityRef, NewDocument, NewEntity, NewRelationship, Record, Relationship,
};
pub use related::{DocumentsQuery, GraphDocument, GraphDocuments, SELF_RELATIONSHIP};
pub use search::{DocumentFilter, DocumentHit};
pub use text::TextIndex;
pub use vectors::{DocTags, VectorIndex};
pub use workspaces::{
    DEFAULT_WORKSPACE, MAX_WORKSPACE_NAME_CHARS, QuotaOverrides, StoredKey, WorkspaceRecord,
    check_workspace_name,
};
pub use write::EntityDeletion;
