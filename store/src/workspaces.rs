//! Workspaces: many isolated knowledge bases on one server. A workspace is a SurrealDB database
//! of its own in kbq's namespace, served by a [`KnowledgeBase`] that
//! [`workspace_kb`](KnowledgeBase::workspace_kb) makes on the default workspace's connection.
//! The workspace [`DEFAULT_WORKSPACE`] is the configured database, what kbq served before there
//! were workspaces, and always exists; the others are listed in a registry in its database,
//! beside the API keys minted for each (only their SHA-256 hashes).
//!
//! A workspace's database is named `ws_` and a fresh random uuid, never after the workspace: a
//! workspace deleted and created again under the same name starts empty, and a late write meant
//! for the old one cannot appear in it. Being made here and hex only, that name is the one
//! value ever written into a statement (REMOVE DATABASE takes no parameter); every other value,
//! names above all, is bound.
//!
//! The registry is always the default workspace's: every method here reads and writes it
//! through that knowledge base, whichever workspace's it is called on.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use surrealdb::IndexedResults;
use surrealdb::types::{Datetime, Object, RecordId, SurrealValue, Uuid, Value};

use crate::db::{failure, obj, query_on, rows_as};
use crate::error::{Result, StoreError};
use crate::kb::{Counts, KnowledgeBase};
use crate::model::table::{API_KEY, DOCUMENT, ENTITY, MEMORY, RELATES, WORKSPACE};

/// The workspace that always exists: the configured database. It is not in the registry.
pub const DEFAULT_WORKSPACE: &str = "default";

/// Longest workspace name, in characters: a DNS label's length, so that a name can serve as a
/// host name or a path segment unchanged.
pub const MAX_WORKSPACE_NAME_CHARS: usize = 63;

/// How every workspace database's name starts; 32 hex digits (a uuid) follow.
const DATABASE_PREFIX: &str = "ws_";

/// Most runs of one registry write that keeps losing transaction conflicts: each loss means
/// another write committed, so a few suffice unless the registry is written in a tight loop.
const WRITE_ATTEMPTS: usize = 4;

/// A workspace in the registry.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    pub name: String,
    /// The SurrealDB database that holds the workspace's knowledge base.
    pub database: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// Its own bounds, over the configured ones.
    #[serde(default)]
    pub quota: QuotaOverrides,
}

/// What a workspace may hold, set for it alone over `[workspaces]`'s `max_entities`,
/// `max_documents` and `max_document_bytes`, and its rate budgets over `[limits]`'s
/// `workspace_*` ones: each left out (or `null`) for the configured one, 0 for none (a burst
/// is at least 1).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaOverrides {
    /// Entities; 0 for no bound, `null` for the configured `workspaces.max_entities`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub max_entities: Option<u64>,
    /// Documents; 0 for no bound, `null` for the configured `workspaces.max_documents`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub max_documents: Option<u64>,
    /// Bytes of the documents' content; 0 for no bound, `null` for the configured
    /// `workspaces.max_document_bytes`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub max_document_bytes: Option<u64>,
    /// Graph requests a minute, every key of the workspace together; 0 for no budget,
    /// `null` for the configured `limits.workspace_graph_per_minute`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 100_000_000))]
    pub graph_per_minute: Option<u64>,
    /// Graph requests at once; `null` for the configured `limits.workspace_graph_burst`.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000_000))]
    pub graph_burst: Option<u64>,
    /// Agent requests a minute, every key of the workspace together; 0 for no budget,
    /// `null` for the configured `limits.workspace_agent_per_minute`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 100_000_000))]
    pub agent_per_minute: Option<u64>,
    /// Agent requests at once; `null` for the configured `limits.workspace_agent_burst`.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000_000))]
    pub agent_burst: Option<u64>,
}

/// A minted API key as stored: its hash, never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredKey {
    /// Names the key in listings and revocation; not a secret.
    pub id: String,
    pub name: String,
    pub scopes: Vec<String>,
    /// The workspace the key opens: a registered one or [`DEFAULT_WORKSPACE`].
    pub workspace: String,
    /// SHA-256 of the key, 64 lowercase hex digits.
    pub sha256: String,
    /// RFC 3339, UTC; [`put_key`](KnowledgeBase::put_key) stamps a key given none.
    pub created_at: String,
    /// The database of the workspace the key was minted in, which
    /// [`put_key`](KnowledgeBase::put_key) reads from the workspace's record whatever this
    /// says: a workspace deleted and created again under its name has another, and the key
    /// does not open it. `None` for `default`'s keys (and keys stored before).
    #[serde(default)]
    pub database: Option<String>,
}

/// A workspace as a query returns it.
const WORKSPACE_FIELDS: &str = "meta::id(id) AS name, database, created_at, quota ?? {} AS quota";
/// A key as a query returns it.
const KEY_FIELDS: &str =
    "meta::id(id) AS id, name, scopes, workspace, sha256, created_at, database";

/// Checks the rule for workspace names: 1 to [`MAX_WORKSPACE_NAME_CHARS`] characters of
/// `a-z`, `0-9` and `-`, starting with a letter. The edge checks names with it before they
/// reach the store, and [`KnowledgeBase::create_workspace`] again.
pub fn check_workspace_name(name: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-';
    let valid = name.len() <= MAX_WORKSPACE_NAME_CHARS
        && name.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && name.bytes().all(allowed);
    match valid {
        true => Ok(()),
        false => Err(StoreError::invalid(
            "name",
            format!(
                "must be 1 to {MAX_WORKSPACE_NAME_CHARS} characters of a-z, 0-9 and -, starting with a letter"
            ),
        )),
    }
}

impl KnowledgeBase {
    /// Registers the workspace `name` with a new, empty database; `None` when the name is
    /// taken. The registry record's key is the name, so of two creates of one name at once
    /// exactly one succeeds (the other meets the record, or a conflict and then the record).
    pub async fn create_workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>> {
        self.create_workspace_with(name, QuotaOverrides::default())
            .await
    }

    /// [`create_workspace`](Self::create_workspace), with bounds of its own over the
    /// configured ones.
    pub async fn create_workspace_with(
        &self,
        name: &str,
        quota: QuotaOverrides,
    ) -> Result<Option<WorkspaceRecord>> {
        check_workspace_name(name)?;
        if name == DEFAULT_WORKSPACE {
            return Err(StoreError::invalid("name", "`default` always exists"));
        }
        let record = WorkspaceRecord {
            name: name.to_string(),
            database: format!("{DATABASE_PREFIX}{}", Uuid::new_v4().simple()),
            created_at: now(),
            quota,
        };
        let (_, failed) = self
            .write_registry(
                "CREATE $ws CONTENT { database: $database, created_at: $created_at, quota: $quota } RETURN NONE",
                obj([
                    ("ws", workspace_id(name).into_value()),
                    ("database", record.database.clone().into_value()),
                    ("created_at", record.created_at.clone().into_value()),
                    ("quota", quota_value(&quota)),
                ]),
            )
            .await?;
        match failed {
            None => Ok(Some(record)),
            Some(e) if e.is_already_exists() => Ok(None),
            Some(e) => Err(StoreError::Query(e.to_string())),
        }
    }

    /// Sets the bounds of the workspace `name` over the configured ones (every field: a
    /// `None` goes back to the configured bound); its record as it is then, `None` when there
    /// is no such workspace. Nodes apply it when they next read the registry for it (within
    /// a second).
    pub async fn set_workspace_quota(
        &self,
        name: &str,
        quota: QuotaOverrides,
    ) -> Result<Option<WorkspaceRecord>> {
        check_workspace_name(name)?;
        if name == DEFAULT_WORKSPACE {
            return Err(StoreError::invalid("name", "`default` has no quota"));
        }
        let (_, failed) = self
            .write_registry(
                "UPDATE $ws SET quota = $quota RETURN NONE",
                obj([
                    ("ws", workspace_id(name).into_value()),
                    ("quota", quota_value(&quota)),
                ]),
            )
            .await?;
        if let Some(e) = failed {
            return Err(StoreError::Query(e.to_string()));
        }
        self.workspace(name).await
    }

    /// Every registered workspace, by name. [`DEFAULT_WORKSPACE`] is not among them.
    pub async fn workspaces(&self) -> Result<Vec<WorkspaceRecord>> {
        self.registry()
            .run(
                &format!("SELECT {WORKSPACE_FIELDS} FROM {WORKSPACE} ORDER BY name"),
                Object::new(),
            )
            .await
    }

    /// The registered workspace `name`, if there is one ([`DEFAULT_WORKSPACE`] is not).
    pub async fn workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>> {
        let rows: Vec<WorkspaceRecord> = self
            .registry()
            .run(
                &format!("SELECT {WORKSPACE_FIELDS} FROM $ws"),
                obj([("ws", workspace_id(name).into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Deletes the workspace `name`: its registry record and every key of it in one
    /// transaction (a key written at once for it conflicts with this, see
    /// [`put_key`](Self::put_key)), then its database with all it holds. `None` when there is
    /// no such workspace. Should removing the database fail, the workspace is gone from the
    /// registry all the same: the error is returned, and logged with the database left behind
    /// for an operator to remove.
    pub async fn delete_workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>> {
        #[derive(Deserialize)]
        struct Deleted {
            database: String,
            created_at: String,
        }
        if name == DEFAULT_WORKSPACE {
            return Err(StoreError::invalid("name", "`default` cannot be deleted"));
        }
        let (mut resp, failed) = self
            .write_registry(
                &format!(
                    "BEGIN;
                     DELETE {API_KEY} WHERE workspace = $name RETURN NONE;
                     DELETE $ws RETURN BEFORE;
                     COMMIT;"
                ),
                obj([
                    ("name", name.to_string().into_value()),
                    ("ws", workspace_id(name).into_value()),
                ]),
            )
            .await?;
        if let Some(e) = failed {
            return Err(StoreError::Query(e.to_string()));
        }
        // BEGIN counts as a statement: the workspace's DELETE is the third.
        let rows: Vec<Json> = resp.take(2).map_err(|e| StoreError::Query(e.to_string()))?;
        let Some(deleted) = rows_as::<Deleted>(rows)?.into_iter().next() else {
            return Ok(None);
        };
        // The name goes into the statement: only one of the shape made here may.
        if !is_workspace_database(&deleted.database) {
            return Err(StoreError::Query(format!(
                "workspace {name} named database {:?}, which kbq did not make: left in place",
                deleted.database
            )));
        }
        // The workspace is gone once its record is: no request reaches its database after
        // this, and a workspace made again with the name gets another. A database that could
        // not be removed now only takes room.
        let removed = self
            .registry()
            .exec(
                &format!("REMOVE DATABASE IF EXISTS `{}`", deleted.database),
                Object::new(),
            )
            .await;
        if let Err(e) = removed {
            tracing::error!(
                workspace = name,
                database = %deleted.database,
                error = %e,
                "a deleted workspace's database was not removed; it is unreachable, and takes room"
            );
        }
        Ok(Some(WorkspaceRecord {
            name: name.to_string(),
            database: deleted.database,
            created_at: deleted.created_at,
            quota: QuotaOverrides::default(),
        }))
    }

    /// Stores a minted key. Its workspace must be registered (or be [`DEFAULT_WORKSPACE`]):
    /// that is checked in the transaction that writes the key, which also bumps the
    /// workspace's record, so that it conflicts with a concurrent
    /// [`delete_workspace`](Self::delete_workspace) and no key outlives its workspace. A key
    /// with the id of a stored one is refused; so is one with a stored key's hash, by the
    /// unique index, as a failed query: keys are minted at random, so that is a bug.
    pub async fn put_key(&self, key: &StoredKey) -> Result<()> {
        if !is_lower_hex(&key.sha256, 64) {
            return Err(StoreError::invalid(
                "sha256",
                "must be 64 lowercase hex digits",
            ));
        }
        // An empty `created_at` is the store's clock now.
        let created_at = match key.created_at.is_empty() {
            true => now(),
            false => key.created_at.clone(),
        };
        let (_, failed) = self
            .write_registry(
                "BEGIN;
                 IF $workspace != $default {
                     IF !record::exists($ws) { THROW 'no such workspace' };
                     UPDATE $ws SET keys_written += 1 RETURN NONE;
                 };
                 CREATE $key CONTENT {
                     name: $name, scopes: $scopes, workspace: $workspace, sha256: $sha256,
                     created_at: $created_at,
                     database: IF $workspace != $default { $ws.database } ELSE { NONE }
                 } RETURN NONE;
                 COMMIT;",
                obj([
                    ("default", DEFAULT_WORKSPACE.into_value()),
                    ("ws", workspace_id(&key.workspace).into_value()),
                    ("key", key_id(&key.id).into_value()),
                    ("name", key.name.clone().into_value()),
                    ("scopes", key.scopes.clone().into_value()),
                    ("workspace", key.workspace.clone().into_value()),
                    ("sha256", key.sha256.clone().into_value()),
                    ("created_at", created_at.into_value()),
                ]),
            )
            .await?;
        match failed {
            None => Ok(()),
            // The only THROW in the statement.
            Some(e) if e.is_thrown() => Err(StoreError::invalid("workspace", "no such workspace")),
            Some(e) if e.is_already_exists() => Err(StoreError::invalid(
                "id",
                "a key with this id exists already",
            )),
            Some(e) => Err(StoreError::Query(e.to_string())),
        }
    }

    /// The keys of `workspace`, oldest first (then by id).
    pub async fn keys_of(&self, workspace: &str) -> Result<Vec<StoredKey>> {
        self.registry()
            .run(
                &format!(
                    "SELECT {KEY_FIELDS} FROM {API_KEY} WHERE workspace = $workspace ORDER BY created_at, id"
                ),
                obj([("workspace", workspace.to_string().into_value())]),
            )
            .await
    }

    /// The key whose SHA-256 is `sha256_hex`: what authenticating a request reads, one lookup
    /// in the unique index on the hash.
    pub async fn key_by_hash(&self, sha256_hex: &str) -> Result<Option<StoredKey>> {
        let rows: Vec<StoredKey> = self
            .registry()
            .run(
                &format!("SELECT {KEY_FIELDS} FROM {API_KEY} WHERE sha256 = $sha256 LIMIT 1"),
                obj([("sha256", sha256_hex.to_string().into_value())]),
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Deletes the key `id` if it belongs to `workspace`, so that a workspace's keys can be
    /// revoked only through it. True when a key was deleted.
    pub async fn revoke_key(&self, workspace: &str, id: &str) -> Result<bool> {
        let deleted: Vec<Json> = self
            .registry()
            .run(
                "DELETE $key WHERE workspace = $workspace RETURN BEFORE",
                obj([
                    ("key", key_id(id).into_value()),
                    ("workspace", workspace.to_string().into_value()),
                ]),
            )
            .await?;
        Ok(!deleted.is_empty())
    }

    /// The knowledge base that holds the registry: the default workspace's.
    /// What the database `database` holds (entities, relationships, documents) and its
    /// memories, counted on a session of the registry's connection: without opening a
    /// knowledge base over it, and so without building its indexes.
    pub async fn database_counts(&self, database: &str) -> Result<(Counts, u64)> {
        #[derive(Deserialize)]
        struct Row {
            entities: u64,
            relationships: u64,
            documents: u64,
            memories: u64,
        }
        let registry = self.registry();
        let c = registry.connection().await?;
        let session = c.db.clone();
        session
            .use_database(&registry.config().namespace, database)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let mut resp = query_on(
            &session,
            // A workspace never opened has no tables yet, and counting one that does not
            // exist is an error: each is counted only if the database has it.
            &format!(
                "LET $t = (INFO FOR DB).tables;
                 RETURN {{
                     entities: IF $t.{ENTITY} {{ count(SELECT VALUE id FROM {ENTITY}) }} ELSE {{ 0 }},
                     relationships: IF $t.{RELATES} {{ count(SELECT VALUE id FROM {RELATES}) }} ELSE {{ 0 }},
                     documents: IF $t.{DOCUMENT} {{ count(SELECT VALUE id FROM {DOCUMENT}) }} ELSE {{ 0 }},
                     memories: IF $t.{MEMORY} {{ count(SELECT VALUE id FROM {MEMORY}) }} ELSE {{ 0 }}
                 }}"
            ),
            Object::new(),
            registry.config().query_timeout,
        )
        .await?;
        let row: Option<Row> = resp
            .take::<Option<Json>>(1)
            .map_err(|e| StoreError::Query(e.to_string()))?
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| StoreError::Query(e.to_string()))?;
        let row = row.unwrap_or(Row {
            entities: 0,
            relationships: 0,
            documents: 0,
            memories: 0,
        });
        let counts = Counts {
            entities: row.entities,
            relationships: row.relationships,
            documents: row.documents,
        };
        Ok((counts, row.memories))
    }

    fn registry(&self) -> &KnowledgeBase {
        self.parent().map_or(self, |parent| parent)
    }

    /// Runs `sql`, a write to the registry, and again when it lost a transaction conflict to
    /// a concurrent write (a key written for a workspace being deleted, two creates of one
    /// name): run again, it meets what the other left, and answers as if it had come after
    /// it. Returns the response and the error that failed it, if one did.
    async fn write_registry(
        &self,
        sql: &str,
        vars: Object,
    ) -> Result<(IndexedResults, Option<surrealdb::Error>)> {
        let registry = self.registry();
        let c = registry.connection().await?;
        let mut attempt = 1;
        loop {
            let mut resp = registry.send(&c, sql, vars.clone()).await?;
            match failure(&mut resp) {
                Some(e) if crate::db::is_conflict(&e) && attempt < WRITE_ATTEMPTS => attempt += 1,
                failed => return Ok((resp, failed)),
            }
        }
    }
}

/// A quota as the registry stores it: the bounds set, a bound not set left out.
fn quota_value(quota: &QuotaOverrides) -> Value {
    let set = [
        ("max_entities", quota.max_entities),
        ("max_documents", quota.max_documents),
        ("max_document_bytes", quota.max_document_bytes),
        ("graph_per_minute", quota.graph_per_minute),
        ("graph_burst", quota.graph_burst),
        ("agent_per_minute", quota.agent_per_minute),
        ("agent_burst", quota.agent_burst),
    ];
    let mut o = Object::new();
    for (field, bound) in set {
        if let Some(bound) = bound {
            o.insert(field.to_string(), (bound as i64).into_value());
        }
    }
    Value::Object(o)
}

fn workspace_id(name: &str) -> RecordId {
    RecordId::new(WORKSPACE, name)
}

fn key_id(id: &str) -> RecordId {
    RecordId::new(API_KEY, id)
}

/// Whether `database` has the shape [`KnowledgeBase::create_workspace`] gives a workspace's
/// database: the prefix and 32 lowercase hex digits.
fn is_workspace_database(database: &str) -> bool {
    database
        .strip_prefix(DATABASE_PREFIX)
        .is_some_and(|uuid| is_lower_hex(uuid, 32))
}

/// Whether `text` is `digits` lowercase hex digits.
fn is_lower_hex(text: &str, digits: usize) -> bool {
    text.len() == digits
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Now, in RFC 3339 with milliseconds, UTC.
fn now() -> String {
    Datetime::now()
        .into_inner()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in ["a", "team-1", "x0", &"a".repeat(63)] {
            assert!(check_workspace_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1a", "-a", "A", "a_b", "a b", "ä", &"a".repeat(64)] {
            assert!(check_workspace_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_generated_databases_may_be_removed() {
        let made = format!("{DATABASE_PREFIX}{}", Uuid::new_v4().simple());
        assert!(is_workspace_database(&made));
        for other in [
            "kb",
            "ws_",
            "ws_x`; REMOVE NAMESPACE kbq; `",
            &made.to_uppercase(),
        ] {
            assert!(!is_workspace_database(other), "{other}");
        }
    }

    /// A workspace deleted while its requests run: every kind of statement in its knowledge
    /// base (a read, a request of several statements whose answers are read one by one, a
    /// write) fails as [`StoreError::Removed`], which the edge answers 404
    /// `workspace_not_found`, never as a failed query (500). The default workspace's own
    /// errors stay what they are.
    #[tokio::test]
    async fn statements_in_a_deleted_workspace_fail_as_removed() {
        use std::sync::Arc;

        use kbq_ingest::provenance::{Fact, SourceKey};

        use crate::embed::HashingEmbedder;
        use crate::kb::StoreConfig;

        let kb =
            KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
        let team = kb.create_workspace("team").await.unwrap().unwrap();
        let theirs = kb.workspace_kb(&team.database);
        assert!(theirs.entity("Ada").await.unwrap().is_none());
        let source = SourceKey::new("files", "a.md");
        let facts = [Fact::entity("Ada"), Fact::entity("Engine")];
        assert_eq!(theirs.supports_of(&source, &facts).await.unwrap().len(), 2);

        kb.delete_workspace("team").await.unwrap().unwrap();
        let removed = |what: &str, e: StoreError| {
            assert!(
                matches!(&e, StoreError::Removed(db) if *db == team.database),
                "{what}: {e:?}"
            );
        };
        removed(
            "a read",
            theirs
                .run::<Json>("SELECT * FROM entity", Object::new())
                .await
                .unwrap_err(),
        );
        removed(
            "answers read one by one",
            theirs.supports_of(&source, &facts).await.unwrap_err(),
        );
        removed(
            "a write",
            theirs
                .exec("UPDATE entity SET seen = true", Object::new())
                .await
                .unwrap_err(),
        );
        // Not a workspace's: a statement's own error is a failed query.
        let e = kb
            .run::<Json>("SELECT * FROM nothing_here", Object::new())
            .await;
        assert!(!matches!(e, Err(StoreError::Removed(_))), "{e:?}");
    }

    /// A store written before there were workspaces has no registry (no workspace or key
    /// tables): opened by this release, what it holds is the `default` workspace's, the
    /// registry is made, and workspaces and keys are added beside it, changing nothing of it.
    #[tokio::test]
    async fn a_store_from_before_workspaces_opens_as_the_default_workspace() {
        use std::sync::Arc;

        use crate::embed::HashingEmbedder;
        use crate::import::{Silent, import};
        use crate::kb::StoreConfig;

        const OLD: &str = "{\"kind\":\"entity\",\"name\":\"Ada\",\"entity_type\":\"person\"}\n\
             {\"kind\":\"entity\",\"name\":\"Engine\",\"entity_type\":\"machine\"}\n\
             {\"kind\":\"relationship\",\"source_name\":\"Ada\",\"target_name\":\"Engine\",\"relationship_type\":\"described\"}\n\
             {\"kind\":\"document\",\"title\":\"Notes\",\"content\":\"On the engine\",\"source\":\"s\",\"source_id\":\"1\",\"content_type\":\"text/plain\"}\n";
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            url: format!("surrealkv://{}", dir.path().join("kb").display()),
            ..StoreConfig::memory()
        };
        let open = || KnowledgeBase::open(config.clone(), Arc::new(HashingEmbedder::default()));
        let tables = |kb: Arc<KnowledgeBase>| async move {
            let info: Vec<Json> = kb
                .run("RETURN (INFO FOR DB).tables", Object::new())
                .await
                .unwrap();
            let tables = info[0].as_object().cloned().unwrap_or_default();
            (tables.contains_key(WORKSPACE), tables.contains_key(API_KEY))
        };
        let before = {
            let kb = open().await;
            let report = import(&kb, OLD.as_bytes(), &Silent).await.unwrap();
            assert!(report.failures.is_empty(), "{report:?}");
            kb.exec(
                &format!("REMOVE TABLE {WORKSPACE}; REMOVE TABLE {API_KEY};"),
                Object::new(),
            )
            .await
            .unwrap();
            assert_eq!(tables(kb.clone()).await, (false, false));
            kb.counts().await.unwrap()
        };
        assert_eq!(
            (before.entities, before.relationships, before.documents),
            (2, 1, 1)
        );

        // The first instance lets go of its files in the background after it is dropped.
        let kb = open().await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let counts = loop {
            match kb.counts().await {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() > deadline => panic!("not reopened: {e}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        };
        assert_eq!(counts, before);
        assert_eq!(tables(kb.clone()).await, (true, true));
        assert_eq!(kb.workspaces().await.unwrap(), []);
        assert!(kb.entity("Ada").await.unwrap().is_some());

        let team = kb.create_workspace("team").await.unwrap().unwrap();
        let theirs = kb.workspace_kb(&team.database);
        assert_eq!(theirs.counts().await.unwrap().entities, 0);
        assert!(theirs.entity("Ada").await.unwrap().is_none());
        let key = StoredKey {
            id: "k1".into(),
            name: "operator".into(),
            scopes: vec!["admin".into()],
            workspace: DEFAULT_WORKSPACE.into(),
            sha256: "a".repeat(64),
            created_at: String::new(),
            database: None,
        };
        kb.put_key(&key).await.unwrap();
        let found = kb.key_by_hash(&key.sha256).await.unwrap().unwrap();
        assert_eq!(
            (found.id.as_str(), found.workspace.as_str()),
            ("k1", DEFAULT_WORKSPACE)
        );
        assert_eq!(kb.counts().await.unwrap(), before);
    }
}
