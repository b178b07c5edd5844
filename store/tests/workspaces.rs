//! Workspaces against a real embedded SurrealDB: sibling knowledge bases on one connection,
//! each in a database of its own, the registry of workspaces and the keys minted for them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kbq_store::import::{self, Silent};
use kbq_store::{
    Counts, DEFAULT_WORKSPACE, Direction, HashingEmbedder, KnowledgeBase, QuotaOverrides,
    StoreConfig, StoreError, StoredKey, TraversalQuery,
};
use sha2::{Digest, Sha256};

/// A small graph whose entities all start with `prefix`: two entities, one relationship and
/// one document, so that whose data a knowledge base answers with shows in every answer.
fn graph(prefix: &str) -> String {
    format!(
        r#"{{"kind":"entity","name":"{prefix} One","entity_type":"thing","properties":{{}}}}
{{"kind":"entity","name":"{prefix} Two","entity_type":"thing","properties":{{}}}}
{{"kind":"relationship","source_name":"{prefix} One","target_name":"{prefix} Two","relationship_type":"knows","properties":{{}}}}
{{"kind":"document","title":"{prefix} notes","content":"All about {prefix}.","source":"t","source_id":"{prefix}","content_type":"text/plain","url":null,"entity_name":"{prefix} One"}}
"#
    )
}

async fn load(kb: &KnowledgeBase, prefix: &str) {
    let report = import::import(kb, graph(prefix).as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
}

async fn open(config: StoreConfig) -> Arc<KnowledgeBase> {
    KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await
}

const ONE_GRAPH: Counts = Counts {
    entities: 2,
    relationships: 1,
    documents: 1,
};

/// What `kb` holds of the graph of `prefix`, through every read path: the counts in its
/// database, the entity from the graph index and a walk read from the database, and the
/// document from the keyword index.
async fn assert_holds(kb: &KnowledgeBase, prefix: &str) {
    assert_eq!(kb.counts().await.unwrap(), ONE_GRAPH, "{}", kb.database());
    let one = format!("{prefix} One");
    assert!(kb.entity(&one).await.unwrap().is_some(), "{one}");
    let walk = kb
        .traverse_in_db(&TraversalQuery {
            start: one.clone(),
            relationship_types: None,
            direction: Direction::Out,
            depth: 1,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(walk.entities.len(), 2, "{one}");
    let hits = kb.keyword_search(prefix, 5).await.unwrap();
    assert_eq!(hits.len(), 1, "{prefix}");
    assert_eq!(hits[0].document.title, format!("{prefix} notes"));
}

/// Asserts that `kb` knows nothing of the graph of `prefix`.
async fn assert_lacks(kb: &KnowledgeBase, prefix: &str) {
    let one = format!("{prefix} One");
    assert!(kb.entity(&one).await.unwrap().is_none(), "{one}");
    assert!(kb.keyword_search(prefix, 5).await.unwrap().is_empty());
}

#[tokio::test]
async fn sibling_knowledge_bases_see_only_their_own_database() {
    let parent = open(StoreConfig::memory()).await;
    load(&parent, "Root").await;
    let a = parent.workspace_kb("ws_a");
    let b = parent.workspace_kb("ws_b");
    assert_eq!(a.database(), "ws_a");
    assert_eq!(parent.database(), StoreConfig::memory().database);

    // Each sibling starts empty, its schema defined and its indexes built on first use.
    assert_eq!(a.counts().await.unwrap(), Counts::default());
    load(&a, "Alpha").await;
    load(&b, "Beta").await;
    a.remember("alice", "alpha remembers", &[], &[])
        .await
        .unwrap();
    a.remember("bob", "so does bob", &[], &[]).await.unwrap();

    assert_holds(&a, "Alpha").await;
    assert_lacks(&a, "Beta").await;
    assert_lacks(&a, "Root").await;
    assert_holds(&b, "Beta").await;
    assert_lacks(&b, "Alpha").await;
    assert_lacks(&b, "Root").await;
    assert_eq!(a.memory_count().await.unwrap(), 2);
    assert_eq!(b.memory_count().await.unwrap(), 0);

    // The parent's session still uses its own database: it reads, and writes, there.
    assert_holds(&parent, "Root").await;
    assert_lacks(&parent, "Alpha").await;
    assert_eq!(parent.memory_count().await.unwrap(), 0);
    load(&parent, "Later").await;
    assert_eq!(parent.counts().await.unwrap().entities, 4);
    assert_eq!(a.counts().await.unwrap(), ONE_GRAPH);
    assert_eq!(b.counts().await.unwrap(), ONE_GRAPH);

    // A sibling of a sibling shares the same connection, and sees what `a` wrote.
    let again = b.workspace_kb("ws_a");
    assert_holds(&again, "Alpha").await;
    assert_eq!(again.memory_count().await.unwrap(), 2);
    assert_eq!(b.counts().await.unwrap(), ONE_GRAPH);
}

#[tokio::test]
async fn siblings_share_a_surrealkv_store_and_outlive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        url: format!("surrealkv://{}", dir.path().join("kb").display()),
        ..StoreConfig::memory()
    };
    let database = {
        let parent = open(config.clone()).await;
        load(&parent, "Root").await;
        let record = parent.create_workspace("team").await.unwrap().unwrap();
        let team = parent.workspace_kb(&record.database);
        load(&team, "Team").await;
        assert_holds(&team, "Team").await;
        assert_lacks(&team, "Root").await;
        assert_holds(&parent, "Root").await;
        assert_lacks(&parent, "Team").await;
        record.database
    };
    // A dropped store lets go of its files in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    let parent = loop {
        let kb = open(config.clone()).await;
        match kb.ping().await {
            Ok(()) => break kb,
            Err(e) if Instant::now() > deadline => panic!("store did not reopen: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert_eq!(
        parent.workspace("team").await.unwrap().unwrap().database,
        database
    );
    // The sibling's indexes are rebuilt from its own database.
    let team = parent.workspace_kb(&database);
    assert_holds(&team, "Team").await;
    assert_lacks(&team, "Root").await;
    assert_holds(&parent, "Root").await;
}

/// A workspace's own bounds are kept in its record, read back as set (a bound not set is
/// the configured one), changed as a whole, and not set on `default` or a missing workspace.
#[tokio::test]
async fn a_workspaces_quota_is_kept_read_and_changed() {
    let kb = open(StoreConfig::memory()).await;
    let plain = kb.create_workspace("plain").await.unwrap().unwrap();
    assert_eq!(plain.quota, QuotaOverrides::default());
    let bounded = QuotaOverrides {
        max_entities: Some(10),
        max_documents: Some(0),
        graph_per_minute: Some(120),
        agent_burst: Some(3),
        ..QuotaOverrides::default()
    };
    let made = kb
        .create_workspace_with("bounded", bounded)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(made.quota, bounded);
    assert_eq!(kb.workspace("bounded").await.unwrap(), Some(made.clone()));
    assert_eq!(kb.workspace("plain").await.unwrap(), Some(plain));
    let changed = QuotaOverrides {
        max_document_bytes: Some(1_000_000),
        ..QuotaOverrides::default()
    };
    let after = kb.set_workspace_quota("bounded", changed).await.unwrap();
    assert_eq!(
        after.map(|r| (r.quota, r.database)),
        Some((changed, made.database))
    );
    assert_eq!(kb.workspaces().await.unwrap()[0].quota, changed);
    assert_eq!(
        kb.set_workspace_quota("missing", changed).await.unwrap(),
        None
    );
    assert!(
        kb.set_workspace_quota(DEFAULT_WORKSPACE, changed)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn workspaces_are_created_listed_found_and_deleted() {
    let kb = open(StoreConfig::memory()).await;
    assert!(kb.workspaces().await.unwrap().is_empty());
    let beta = kb.create_workspace("beta").await.unwrap().unwrap();
    let alpha = kb.create_workspace("alpha").await.unwrap().unwrap();
    assert_eq!(alpha.name, "alpha");
    assert!(alpha.database.starts_with("ws_") && alpha.database.len() == 35);
    assert_ne!(alpha.database, beta.database);
    // RFC 3339 in UTC.
    assert!(alpha.created_at.ends_with('Z') && alpha.created_at.contains('T'));

    assert!(kb.create_workspace("alpha").await.unwrap().is_none());
    assert_eq!(
        kb.workspaces().await.unwrap(),
        vec![alpha.clone(), beta.clone()]
    );
    assert_eq!(kb.workspace("alpha").await.unwrap(), Some(alpha.clone()));
    assert_eq!(kb.workspace("gamma").await.unwrap(), None);
    assert_eq!(kb.workspace(DEFAULT_WORKSPACE).await.unwrap(), None);

    // A workspace's own knowledge base reaches the same registry.
    let in_alpha = kb.workspace_kb(&alpha.database);
    assert_eq!(in_alpha.workspaces().await.unwrap().len(), 2);

    assert_eq!(kb.delete_workspace("alpha").await.unwrap(), Some(alpha));
    assert_eq!(kb.delete_workspace("alpha").await.unwrap(), None);
    assert_eq!(kb.workspace("alpha").await.unwrap(), None);
    assert_eq!(kb.workspaces().await.unwrap(), vec![beta]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_of_one_name_make_one_workspace() {
    let kb = open(StoreConfig::memory()).await;
    for i in 0..20 {
        let name = format!("race-{i}");
        let (first, second) = tokio::join!(kb.create_workspace(&name), kb.create_workspace(&name));
        let made: Vec<_> = [first.unwrap(), second.unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(made.len(), 1, "{name}: {made:?}");
        assert_eq!(kb.workspace(&name).await.unwrap().as_ref(), made.first());
    }
    // Across tasks too, not only within one.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let kb = kb.clone();
            tokio::spawn(async move { kb.create_workspace("crowd").await.unwrap() })
        })
        .collect();
    let mut made = 0;
    for h in handles {
        made += usize::from(h.await.unwrap().is_some());
    }
    assert_eq!(made, 1);
}

#[tokio::test]
async fn a_workspace_created_again_starts_from_a_new_empty_database() {
    let kb = open(StoreConfig::memory()).await;
    let first = kb.create_workspace("team").await.unwrap().unwrap();
    let old = kb.workspace_kb(&first.database);
    load(&old, "Old").await;
    old.remember("alice", "an old memory", &[], &[])
        .await
        .unwrap();
    assert_holds(&old, "Old").await;

    assert!(kb.delete_workspace("team").await.unwrap().is_some());
    // A late write through the old workspace's knowledge base finds no database: SurrealDB
    // defines a database on USE, not on a write after it was removed.
    let late_write = old.remember("alice", "too late", &[], &[]).await;
    assert!(late_write.is_err(), "{late_write:?}");
    assert!(old.counts().await.is_err());

    let second = kb.create_workspace("team").await.unwrap().unwrap();
    assert_ne!(second.database, first.database);
    let new = kb.workspace_kb(&second.database);
    assert_eq!(new.counts().await.unwrap(), Counts::default());
    assert_eq!(new.memory_count().await.unwrap(), 0);
    assert_lacks(&new, "Old").await;
}

fn key(id: &str, workspace: &str, created_at: &str) -> (String, StoredKey) {
    let secret = format!("kbq_secret_{id}");
    let sha256 = format!("{:x}", Sha256::digest(secret.as_bytes()));
    let stored = StoredKey {
        id: id.into(),
        name: format!("key {id}"),
        scopes: vec!["read".into(), "write".into()],
        workspace: workspace.into(),
        sha256: sha256.clone(),
        created_at: created_at.into(),
        database: None,
    };
    (sha256, stored)
}

/// `key` as the store answers it: with the database of the workspace it was minted in.
fn minted_in(key: &StoredKey, database: &str) -> StoredKey {
    StoredKey {
        database: Some(database.into()),
        ..key.clone()
    }
}

fn is_invalid(result: kbq_store::Result<impl std::fmt::Debug>, field: &str) -> bool {
    matches!(result, Err(StoreError::Invalid { field: f, .. }) if f == field)
}

#[tokio::test]
async fn keys_are_found_by_hash_and_revoked_only_through_their_workspace() {
    let kb = open(StoreConfig::memory()).await;
    let acme = kb.create_workspace("acme").await.unwrap().unwrap();
    let (_, later) = key("k2", "acme", "2025-01-02T00:00:00.000Z");
    let (hash, earlier) = key("k1", "acme", "2025-01-01T00:00:00.000Z");
    let (default_hash, in_default) = key("k3", DEFAULT_WORKSPACE, "2025-01-01T00:00:00.000Z");
    kb.put_key(&later).await.unwrap();
    kb.put_key(&earlier).await.unwrap();
    kb.put_key(&in_default).await.unwrap();
    // Read back, a key of `acme` names acme's database; one of `default`, none.
    let (later, earlier) = (
        minted_in(&later, &acme.database),
        minted_in(&earlier, &acme.database),
    );

    assert_eq!(kb.key_by_hash(&hash).await.unwrap(), Some(earlier.clone()));
    assert_eq!(
        kb.key_by_hash(&default_hash).await.unwrap(),
        Some(in_default.clone())
    );
    assert_eq!(kb.key_by_hash(&"0".repeat(64)).await.unwrap(), None);
    assert_eq!(
        kb.keys_of("acme").await.unwrap(),
        vec![earlier.clone(), later.clone()]
    );
    assert_eq!(
        kb.keys_of(DEFAULT_WORKSPACE).await.unwrap(),
        vec![in_default.clone()]
    );

    // A key is revoked only through its own workspace.
    assert!(!kb.revoke_key(DEFAULT_WORKSPACE, "k1").await.unwrap());
    assert!(kb.key_by_hash(&hash).await.unwrap().is_some());
    assert!(kb.revoke_key("acme", "k1").await.unwrap());
    assert!(!kb.revoke_key("acme", "k1").await.unwrap());
    assert_eq!(kb.key_by_hash(&hash).await.unwrap(), None);
    assert_eq!(kb.keys_of("acme").await.unwrap(), vec![later.clone()]);

    // No key for a workspace that does not exist, none stored twice (by id or by hash), no
    // hash but a hash.
    let (_, nowhere) = key("k4", "nowhere", "2025-01-03T00:00:00.000Z");
    assert!(is_invalid(kb.put_key(&nowhere).await, "workspace"));
    assert!(kb.keys_of("nowhere").await.unwrap().is_empty());
    assert!(is_invalid(kb.put_key(&later).await, "id"));
    let same_hash = StoredKey {
        id: "k5".into(),
        ..later.clone()
    };
    assert!(kb.put_key(&same_hash).await.is_err());
    let not_a_hash = StoredKey {
        id: "k6".into(),
        sha256: "not hex".into(),
        ..later.clone()
    };
    assert!(is_invalid(kb.put_key(&not_a_hash).await, "sha256"));
    assert_eq!(kb.keys_of("acme").await.unwrap(), vec![later]);
}

#[tokio::test]
async fn deleting_a_workspace_deletes_its_keys_and_only_its() {
    let kb = open(StoreConfig::memory()).await;
    let acme = kb.create_workspace("acme").await.unwrap().unwrap();
    let other = kb.create_workspace("other").await.unwrap().unwrap();
    let (acme_hash, acme_key) = key("a1", "acme", "2025-01-01T00:00:00.000Z");
    let (other_hash, other_key) = key("o1", "other", "2025-01-01T00:00:00.000Z");
    let (default_hash, default_key) = key("d1", DEFAULT_WORKSPACE, "2025-01-01T00:00:00.000Z");
    for k in [&acme_key, &other_key, &default_key] {
        kb.put_key(k).await.unwrap();
    }
    // A workspace's own knowledge base writes to the registry too.
    let (second_hash, second) = key("a2", "acme", "2025-01-02T00:00:00.000Z");
    kb.workspace_kb(&acme.database)
        .put_key(&second)
        .await
        .unwrap();

    kb.delete_workspace("acme").await.unwrap().unwrap();
    assert!(kb.keys_of("acme").await.unwrap().is_empty());
    assert_eq!(kb.key_by_hash(&acme_hash).await.unwrap(), None);
    assert_eq!(kb.key_by_hash(&second_hash).await.unwrap(), None);
    assert_eq!(
        kb.key_by_hash(&other_hash).await.unwrap(),
        Some(minted_in(&other_key, &other.database))
    );
    assert_eq!(
        kb.key_by_hash(&default_hash).await.unwrap(),
        Some(default_key)
    );
    // And no key can be added to it now.
    let (_, late) = key("a3", "acme", "2025-01-03T00:00:00.000Z");
    assert!(is_invalid(kb.put_key(&late).await, "workspace"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_key_outlives_a_workspace_deleted_while_it_was_written() {
    let kb = open(StoreConfig::memory()).await;
    for i in 0..30 {
        let name = format!("doomed-{i}");
        kb.create_workspace(&name).await.unwrap().unwrap();
        let (_, k) = key(&format!("k{i}"), &name, "2025-01-01T00:00:00.000Z");
        let writer = {
            let kb = kb.clone();
            tokio::spawn(async move { kb.put_key(&k).await })
        };
        let deleted = kb.delete_workspace(&name).await.unwrap();
        let written = writer.await.unwrap();
        // Whichever came first, the delete removes the workspace and every key of it, and a
        // key that came after is refused as for any missing workspace.
        assert!(deleted.is_some(), "{name}");
        assert!(
            written.is_ok() || is_invalid(written, "workspace"),
            "{name}"
        );
        assert!(kb.keys_of(&name).await.unwrap().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn bad_workspace_names_are_refused() {
    let kb = open(StoreConfig::memory()).await;
    let long = "a".repeat(64);
    for bad in [
        "", "Team", "1team", "-team", "team_1", "team 1", "té", &long,
    ] {
        assert!(is_invalid(kb.create_workspace(bad).await, "name"), "{bad}");
    }
    let default = kb.create_workspace(DEFAULT_WORKSPACE).await;
    assert!(
        matches!(&default, Err(StoreError::Invalid { field, reason }) if field == "name" && reason.contains("always exists")),
        "{default:?}"
    );
    assert!(is_invalid(
        kb.delete_workspace(DEFAULT_WORKSPACE).await,
        "name"
    ));
    assert!(
        kb.create_workspace(&"a".repeat(63))
            .await
            .unwrap()
            .is_some()
    );
    assert!(kb.create_workspace("t-1").await.unwrap().is_some());
    assert_eq!(kb.workspaces().await.unwrap().len(), 2);
}

/// The same isolation on a SurrealDB server, where a sibling is a second session on the
/// parent's socket. Needs a server: `TEST_SURREALDB_URL=ws://HOST:PORT` (root/root), as
/// `scripts/test-remote` sets it; `cargo test -p kbq-store -- --ignored` runs it.
#[tokio::test]
#[ignore = "needs a SurrealDB server in TEST_SURREALDB_URL"]
async fn siblings_are_sessions_on_one_socket_of_a_server() {
    let url = std::env::var("TEST_SURREALDB_URL").expect("TEST_SURREALDB_URL");
    let suffix = format!("{:x}", Sha256::digest(format!("{:?}", Instant::now())));
    let config = StoreConfig {
        url,
        database: format!("t{}", &suffix[..16]),
        username: Some("root".into()),
        password: Some("root".into()),
        ..StoreConfig::memory()
    };
    let parent = open(config).await;
    load(&parent, "Root").await;
    let a = parent.create_workspace("a").await.unwrap().unwrap();
    let b = parent.create_workspace("b").await.unwrap().unwrap();
    let (a_kb, b_kb) = (
        parent.workspace_kb(&a.database),
        parent.workspace_kb(&b.database),
    );
    load(&a_kb, "Alpha").await;
    load(&b_kb, "Beta").await;
    assert_holds(&a_kb, "Alpha").await;
    assert_lacks(&a_kb, "Beta").await;
    assert_holds(&b_kb, "Beta").await;
    assert_lacks(&b_kb, "Root").await;
    assert_holds(&parent, "Root").await;
    assert_lacks(&parent, "Alpha").await;
    for name in ["a", "b"] {
        parent.delete_workspace(name).await.unwrap().unwrap();
    }
    assert!(a_kb.remember("alice", "too late", &[], &[]).await.is_err());
    assert_holds(&parent, "Root").await;
}

/// A key names the database of the workspace it was minted in, and a workspace created
/// again under a deleted one's name has another: so a node that still remembers the old
/// key (for up to a second) does not let it into the new workspace.
#[tokio::test]
async fn a_key_names_the_database_of_the_workspace_it_was_minted_in() {
    let kb = open(StoreConfig::memory()).await;
    let first = kb.create_workspace("acme").await.unwrap().unwrap();
    let (hash, old) = key("a1", "acme", "2025-01-01T00:00:00.000Z");
    // Whatever the key says, the store records the workspace's own database.
    let claims_another = StoredKey {
        database: Some("ws_00000000000000000000000000000000".into()),
        ..old.clone()
    };
    kb.put_key(&claims_another).await.unwrap();
    assert_eq!(
        kb.key_by_hash(&hash).await.unwrap(),
        Some(minted_in(&old, &first.database))
    );
    kb.delete_workspace("acme").await.unwrap().unwrap();
    let second = kb.create_workspace("acme").await.unwrap().unwrap();
    assert_ne!(second.database, first.database);
    let (hash, new) = key("a2", "acme", "2025-01-02T00:00:00.000Z");
    kb.put_key(&new).await.unwrap();
    assert_eq!(
        kb.key_by_hash(&hash).await.unwrap().unwrap().database,
        Some(second.database)
    );
}
