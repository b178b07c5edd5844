//! The schema, and the record of which embedder wrote the store's vectors: checked on every
//! connection, so that vectors of two embedders never mix, and moved to another embedder by
//! [`reembed`](KnowledgeBase::reembed). Its own file because the schema and the embedder
//! record change together and apart from the queries.

use serde_json::Value as Json;
use surrealdb::types::{Object, RecordId, SurrealValue, Value};

use crate::db::{Connected, obj, row, vector_bytes};
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::model::table::{
    self, ALIAS_SUPPORT, API_KEY, CHUNK_SUPPORT, DOCUMENT, ENTITY, EXTRACTION, FACT_SUPPORT,
    INGEST_INPUT, INGEST_JOB, INGEST_NODE, MEMORY, META, RELATES, SOURCE, WORKSPACE,
};
use crate::progress::{Phase, Progress};
use crate::write::INSERT_ROWS;

/// The key of the embedder record in the meta table.
const EMBEDDER_KEY: &str = "embedder";

impl KnowledgeBase {
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
            let vectors = self.embedder().embed(&texts).await?;
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
        let c = self.connection().await?;
        self.record_embedder(&c).await?;
        self.reload_document_indexes(&c).await?;
        Ok(docs.len() as u64)
    }

    /// Defines the tables, fields and indexes (idempotently), then checks that the store's
    /// vectors are this embedder's, recording it in a new store. The registry of workspaces
    /// is defined only in the default workspace's database, where it lives.
    pub(crate) async fn define_schema(&self, c: &Connected) -> Result<()> {
        let registry = match self.parent() {
            None => registry_schema(),
            Some(_) => String::new(),
        };
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
             DEFINE TABLE IF NOT EXISTS {META} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {SOURCE} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {FACT_SUPPORT} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {CHUNK_SUPPORT} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {ALIAS_SUPPORT} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {EXTRACTION} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {INGEST_JOB} SCHEMALESS;
             DEFINE INDEX IF NOT EXISTS ingest_job_open ON {INGEST_JOB} FIELDS finished;
             DEFINE INDEX IF NOT EXISTS ingest_job_cancel ON {INGEST_JOB} FIELDS cancel;
             DEFINE TABLE IF NOT EXISTS {INGEST_NODE} SCHEMALESS;
             DEFINE TABLE IF NOT EXISTS {INGEST_INPUT} SCHEMALESS;
             {registry}"
        );
        self.exec_on(c, &schema, Object::new()).await?;
        self.move_old_supports(c).await?;
        self.forget_unkeyed_summaries(c).await?;
        // Vectors of two embedders must never mix in one index.
        let found: Vec<Json> = self
            .run_on(
                c,
                &format!("SELECT name, dimension FROM {META}:{EMBEDDER_KEY}"),
                Object::new(),
            )
            .await?;
        let want = serde_json::json!({
            "name": self.embedder().name(),
            "dimension": self.embedder().dimension(),
        });
        match found.first() {
            None => self.record_embedder(c).await,
            Some(have) if *have == want => Ok(()),
            Some(have) if self.adopts_embedder() => {
                tracing::info!(%have, %want, "the store changes embedder");
                Ok(())
            }
            Some(have) => Err(StoreError::Query(format!(
                "the store's documents were embedded with {have}, but kbq is configured with {want}: run `kbq reindex` to embed them again with the configured embedder"
            ))),
        }
    }

    /// Records this knowledge base's embedder as the one that wrote the store's vectors.
    /// Model summaries were kept by their question, every one ever asked; they are kept one
    /// per entity now (`keys::summary`), with the question in the answer. The old rows are
    /// the kept answers that are a string (an extraction's is an object, a confirmation's a
    /// boolean), removed once: a store so marked costs one read at each open.
    pub(crate) async fn forget_unkeyed_summaries(&self, c: &Connected) -> Result<()> {
        self.exec_on(
            c,
            &format!(
                "IF !record::exists({META}:summaries_keyed) {{
                     DELETE {EXTRACTION} WHERE type::is_string(answer) RETURN NONE;
                     UPSERT {META}:summaries_keyed RETURN NONE;
                 }};"
            ),
            Object::new(),
        )
        .await
    }

    async fn record_embedder(&self, c: &Connected) -> Result<()> {
        self.exec_on(
            c,
            &format!(
                "UPSERT {META}:{EMBEDDER_KEY} CONTENT {{ name: $name, dimension: $dimension }}"
            ),
            obj([
                ("name", self.embedder().name().into_value()),
                (
                    "dimension",
                    (self.embedder().dimension() as i64).into_value(),
                ),
            ]),
        )
        .await
    }
}

/// The registry of workspaces and their API keys (see [`crate::workspaces`]). A workspace's
/// record key is its name. `keys_written` is bumped by every key written for the workspace,
/// so that the write conflicts with a concurrent delete of the workspace. A key is found by
/// its hash on every authenticated request: hence the unique index.
fn registry_schema() -> String {
    format!(
        "DEFINE TABLE IF NOT EXISTS {WORKSPACE} SCHEMAFULL;
         DEFINE FIELD IF NOT EXISTS database ON {WORKSPACE} TYPE string;
         DEFINE FIELD IF NOT EXISTS created_at ON {WORKSPACE} TYPE string;
         DEFINE FIELD IF NOT EXISTS keys_written ON {WORKSPACE} TYPE int DEFAULT 0;
         DEFINE FIELD IF NOT EXISTS quota ON {WORKSPACE} TYPE option<object>;
         DEFINE FIELD IF NOT EXISTS quota.max_entities ON {WORKSPACE} TYPE option<int>;
         DEFINE FIELD IF NOT EXISTS quota.max_documents ON {WORKSPACE} TYPE option<int>;
         DEFINE FIELD IF NOT EXISTS quota.max_document_bytes ON {WORKSPACE} TYPE option<int>;
         DEFINE FIELD IF NOT EXISTS quota.graph_per_minute ON {WORKSPACE} TYPE option<int>;
         DEFINE FIELD IF NOT EXISTS quota.graph_burst ON {WORKSPACE} TYPE option<int>;
         DEFINE FIELD IF NOT EXISTS quota.agent_per_minute ON {WORKSPACE} TYPE option<int>;
         DEFINE FIELD IF NOT EXISTS quota.agent_burst ON {WORKSPACE} TYPE option<int>;
         DEFINE TABLE IF NOT EXISTS {API_KEY} SCHEMAFULL;
         DEFINE FIELD IF NOT EXISTS name ON {API_KEY} TYPE string;
         DEFINE FIELD IF NOT EXISTS scopes ON {API_KEY} TYPE array<string>;
         DEFINE FIELD IF NOT EXISTS workspace ON {API_KEY} TYPE string;
         DEFINE FIELD IF NOT EXISTS sha256 ON {API_KEY} TYPE string;
         DEFINE FIELD IF NOT EXISTS created_at ON {API_KEY} TYPE string;
         DEFINE FIELD IF NOT EXISTS database ON {API_KEY} TYPE option<string>;
         DEFINE INDEX IF NOT EXISTS api_key_sha256 ON {API_KEY} FIELDS sha256 UNIQUE;
         DEFINE INDEX IF NOT EXISTS api_key_workspace ON {API_KEY} FIELDS workspace;"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::{HashingEmbedder, StoreConfig};

    /// A store from before summaries were kept one per entity loses its summaries (the
    /// string answers) once, and keeps extractions, confirmations and summaries kept now.
    #[tokio::test]
    async fn summaries_kept_by_their_question_are_forgotten_once() {
        let kb =
            KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
        let c = kb.connection().await.unwrap();
        let kept = |key: &str, answer: Json| {
            row([
                ("id", RecordId::new(EXTRACTION, key).into_value()),
                ("answer", answer.into_value()),
            ])
        };
        let rows = vec![
            kept("old-summary", json!("German engineer who built the Z3.")),
            kept("extraction", json!({"entities": [], "relationships": []})),
            kept("confirmation", json!(true)),
            kept(
                "summary-now",
                json!({"asked": "ab12", "description": "Engineer."}),
            ),
        ];
        let keys = || async {
            let mut keys: Vec<String> = kb
                .run(
                    &format!("SELECT VALUE meta::id(id) FROM {EXTRACTION}"),
                    Object::new(),
                )
                .await
                .unwrap();
            keys.sort();
            keys
        };
        // Opened before this change: the mark is not there.
        kb.exec(
            &format!("DELETE {META}:summaries_keyed; INSERT INTO {EXTRACTION} $rows RETURN NONE"),
            obj([("rows", rows.into_value())]),
        )
        .await
        .unwrap();
        kb.forget_unkeyed_summaries(&c).await.unwrap();
        assert_eq!(keys().await, ["confirmation", "extraction", "summary-now"]);
        // Marked: a string answer written since (none is) would stay.
        kb.exec(
            &format!("INSERT INTO {EXTRACTION} $rows RETURN NONE"),
            obj([("rows", vec![kept("later", json!("text"))].into_value())]),
        )
        .await
        .unwrap();
        kb.forget_unkeyed_summaries(&c).await.unwrap();
        assert_eq!(
            keys().await,
            ["confirmation", "extraction", "later", "summary-now"]
        );
    }
}
