//! The knowledge base against a real embedded SurrealDB.

use std::sync::Arc;

use kbq_store::generate::{self, Spec};
use kbq_store::import::{self, Silent};
use kbq_store::{Direction, HashingEmbedder, KnowledgeBase, Record, StoreConfig, TraversalQuery};

const SMALL: &str = r#"{"kind":"entity","name":"Ada","entity_type":"person","properties":{"born":1815}}
{"kind":"entity","name":"Babbage","entity_type":"person","properties":{}}
{"kind":"entity","name":"Engine","entity_type":"machine","properties":{}}
{"kind":"entity","name":"London","entity_type":"place","properties":{}}
{"kind":"entity","name":"Zed","entity_type":"person","properties":{}}
{"kind":"relationship","source_name":"Ada","target_name":"Babbage","relationship_type":"knows","properties":{}}
{"kind":"relationship","source_name":"Babbage","target_name":"Ada","relationship_type":"knows","properties":{}}
{"kind":"relationship","source_name":"Babbage","target_name":"Engine","relationship_type":"designed","properties":{"year":1837}}
{"kind":"relationship","source_name":"Engine","target_name":"London","relationship_type":"located_in","properties":{}}
{"kind":"relationship","source_name":"London","target_name":"Ada","relationship_type":"home_of","properties":{}}
{"kind":"relationship","source_name":"Zed","target_name":"Ada","relationship_type":"knows","properties":{}}
{"kind":"document","title":"Ada Lovelace","content":"Ada wrote notes on the engine.","source":"t","source_id":"ada","content_type":"text/plain","url":null,"entity_name":"Ada"}
{"kind":"document","title":"The Engine","content":"A mechanical computer designed by Babbage.","source":"t","source_id":"engine","content_type":"text/plain","url":"https://example.org/engine","entity_name":"Engine"}
"#;

async fn open(index: bool) -> Arc<KnowledgeBase> {
    let config = StoreConfig {
        graph_index: index,
        ..StoreConfig::memory()
    };
    KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await
}

fn q(start: &str, direction: Direction, depth: u32, limit: usize) -> TraversalQuery {
    TraversalQuery {
        start: start.into(),
        relationship_types: None,
        direction,
        depth,
        limit,
    }
}

fn names(t: &kbq_store::Traversal) -> Vec<(String, u32)> {
    t.entities
        .iter()
        .map(|r| (r.entity.name.clone(), r.depth))
        .collect()
}

#[tokio::test]
async fn small_graph_has_known_answers_on_both_paths() {
    for index in [true, false] {
        let kb = open(index).await;
        let report = import::import(&kb, SMALL.as_bytes(), &Silent)
            .await
            .unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert_eq!(
            (report.entities, report.relationships, report.documents),
            (5, 6, 2)
        );

        let t = kb.traverse(&q("Ada", Direction::Out, 1, 50)).await.unwrap();
        assert_eq!(names(&t), vec![("Ada".into(), 0), ("Babbage".into(), 1)]);
        assert_eq!(t.relationships.len(), 1);

        // Out, depth 3: Ada -> Babbage -> Engine -> London (-> Ada closes the cycle).
        let t = kb.traverse(&q("Ada", Direction::Out, 3, 50)).await.unwrap();
        assert_eq!(
            names(&t),
            vec![
                ("Ada".into(), 0),
                ("Babbage".into(), 1),
                ("Engine".into(), 2),
                ("London".into(), 3)
            ]
        );
        assert!(!t.truncated);
        // The back edge Babbage -> Ada is an examined edge between returned entities.
        let rels: Vec<(String, String)> = t
            .relationships
            .iter()
            .map(|r| (r.source_name.clone(), r.target_name.clone()))
            .collect();
        assert_eq!(
            rels,
            vec![
                ("Ada".into(), "Babbage".into()),
                ("Babbage".into(), "Ada".into()),
                ("Babbage".into(), "Engine".into()),
                ("Engine".into(), "London".into()),
            ]
        );

        // In, depth 1: Babbage (knows), London (home_of), Zed (knows): sorted by name.
        let t = kb.traverse(&q("Ada", Direction::In, 1, 50)).await.unwrap();
        assert_eq!(
            names(&t),
            vec![
                ("Ada".into(), 0),
                ("Babbage".into(), 1),
                ("London".into(), 1),
                ("Zed".into(), 1)
            ]
        );
        assert_eq!(t.entities[2].via.as_deref(), Some("home_of"));

        // Limit counts the start entity, and marks truncation.
        let t = kb.traverse(&q("Ada", Direction::Both, 2, 2)).await.unwrap();
        assert_eq!(names(&t), vec![("Ada".into(), 0), ("Babbage".into(), 1)]);
        assert!(t.truncated);

        // Relationship type filter.
        let mut only = q("Babbage", Direction::Both, 5, 50);
        only.relationship_types = Some(vec!["designed".into(), "located_in".into()]);
        let t = kb.traverse(&only).await.unwrap();
        assert_eq!(
            names(&t),
            vec![
                ("Babbage".into(), 0),
                ("Engine".into(), 1),
                ("London".into(), 2)
            ]
        );

        // Unknown start: empty answer, not an error.
        let t = kb
            .traverse(&q("Nobody", Direction::Both, 2, 50))
            .await
            .unwrap();
        assert!(t.entities.is_empty() && t.relationships.is_empty());

        // Search ranks exact, prefix, other.
        let hits = kb.search_entities("a", None, 10).await.unwrap();
        let hit_names: Vec<&str> = hits.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(hit_names, vec!["Ada", "Babbage"]);
        let hits = kb.search_entities("ADA", Some("person"), 10).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].properties["born"], 1815);
        assert!(
            kb.search_entities("a", Some("machine"), 10)
                .await
                .unwrap()
                .is_empty()
        );

        let e = kb.entity("Engine").await.unwrap().unwrap();
        assert_eq!(e.entity_type, "machine");
        assert!(e.id.starts_with("entity:"));
        assert!(kb.entity("engine").await.unwrap().is_none());

        let docs = kb
            .documents_of(&["Ada".into(), "Engine".into()], "Ada")
            .await
            .unwrap();
        assert_eq!(docs.len(), 2);
        let ada = docs
            .iter()
            .find(|d| d.document.entity_name.as_deref() == Some("Ada"))
            .unwrap();
        let engine = docs
            .iter()
            .find(|d| d.document.entity_name.as_deref() == Some("Engine"))
            .unwrap();
        assert!(ada.score > engine.score);
        assert_eq!(
            engine.document.url.as_deref(),
            Some("https://example.org/engine")
        );
        assert!(engine.document.id.starts_with("document:"));
    }
}

#[tokio::test]
async fn index_and_database_paths_agree_on_a_generated_graph() {
    let kb = open(true).await;
    let records = generate::generate(Spec {
        entities: 600,
        relationships: 2000,
        document_ratio: 0.0,
        seed: 7,
    });
    let records: Vec<(usize, Record)> = records.into_iter().enumerate().collect();
    let report = import::import_records(&kb, records, &Silent).await.unwrap();
    assert!(report.failures.is_empty());
    let mut rng = generate::Rng::new(11);
    let mut compared = 0;
    for _ in 0..40 {
        let start = generate::entity_name(rng.below(600));
        for direction in [Direction::In, Direction::Out, Direction::Both] {
            for (depth, limit) in [(1, 50), (2, 50), (3, 20), (5, 200)] {
                let mut query = q(&start, direction, depth, limit);
                if rng.below(3) == 0 {
                    query.relationship_types = Some(vec!["knows".into(), "cites".into()]);
                }
                let fast = kb.traverse(&query).await.unwrap();
                let slow = kb.traverse_in_db(&query).await.unwrap();
                assert_eq!(fast, slow, "paths disagree on {query:?}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 480);
}

#[tokio::test]
async fn importing_twice_changes_nothing_and_failures_carry_line_numbers() {
    let kb = open(true).await;
    let first = import::import(&kb, SMALL.as_bytes(), &Silent)
        .await
        .unwrap();
    let counts = kb.counts().await.unwrap();
    let second = import::import(&kb, SMALL.as_bytes(), &Silent)
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(kb.counts().await.unwrap(), counts);
    assert_eq!(
        (counts.entities, counts.relationships, counts.documents),
        (5, 6, 2)
    );

    let bad = "{\"kind\":\"entity\",\"name\":\"Ok\",\"entity_type\":\"t\"}\n\
               not json\n\
               \n\
               {\"kind\":\"planet\",\"name\":\"x\"}\n\
               {\"kind\":\"entity\",\"name\":\"\",\"entity_type\":\"t\"}\n\
               {\"kind\":\"relationship\",\"source_name\":\"Ok\",\"target_name\":\"Ghost\",\"relationship_type\":\"r\"}\n\
               {\"kind\":\"relationship\",\"source_name\":\"Ok\",\"target_name\":\"Ada\",\"relationship_type\":\"r\"}\n\
               {\"kind\":\"entity\",\"name\":5,\"entity_type\":\"t\"}\n";
    let report = import::import(&kb, bad.as_bytes(), &Silent).await.unwrap();
    let lines: Vec<usize> = report.failures.iter().map(|f| f.line).collect();
    assert_eq!(lines, vec![2, 4, 5, 6, 8], "{:?}", report.failures);
    assert!(report.failures[1].reason.contains("unknown kind `planet`"));
    assert!(report.failures[2].reason.contains("name"));
    assert!(report.failures[3].reason.contains("Ghost"));
    assert_eq!((report.entities, report.relationships), (1, 1));
    assert!(kb.entity("Ok").await.unwrap().is_some());
    let t = kb.traverse(&q("Ok", Direction::Out, 1, 10)).await.unwrap();
    assert_eq!(names(&t), vec![("Ok".into(), 0), ("Ada".into(), 1)]);
}

#[tokio::test]
async fn injection_looking_names_are_plain_data() {
    let kb = open(false).await;
    let evil = "x'; DELETE entity; --";
    let line = format!(
        "{{\"kind\":\"entity\",\"name\":{},\"entity_type\":\"t\"}}\n{{\"kind\":\"entity\",\"name\":\"REMOVE TABLE entity\",\"entity_type\":\"t\"}}\n",
        serde_json::to_string(evil).unwrap()
    );
    import::import(&kb, line.as_bytes(), &Silent).await.unwrap();
    assert_eq!(kb.entity(evil).await.unwrap().unwrap().name, evil);
    assert_eq!(
        kb.search_entities("'; delete", None, 5)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(kb.counts().await.unwrap().entities, 2);
}

#[tokio::test]
async fn surrealkv_store_persists_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("surrealkv://{}", dir.path().join("kb").display());
    let config = StoreConfig {
        url,
        ..StoreConfig::memory()
    };
    {
        let kb = KnowledgeBase::open(config.clone(), Arc::new(HashingEmbedder::default())).await;
        import::import(&kb, SMALL.as_bytes(), &Silent)
            .await
            .unwrap();
    }
    let kb = KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await;
    // The first instance lets go of its files in the background after it is dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let counts = loop {
        match kb.counts().await {
            Ok(c) => break c,
            Err(e) if std::time::Instant::now() > deadline => panic!("store did not reopen: {e}"),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    };
    assert_eq!(counts.entities, 5);
    // The index is rebuilt from the database at start.
    let t = kb.traverse(&q("Ada", Direction::Out, 3, 50)).await.unwrap();
    assert_eq!(t.entities.len(), 4);
    // So is the vector index, from the embeddings stored as bytes.
    let hits = kb
        .semantic_search("A mechanical computer designed by Babbage", 2)
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].document.title, "The Engine");
    assert!(hits[0].score > hits[1].score);
    // And the keyword index, from the stored titles and contents.
    let hits = kb.keyword_search("mechanical", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].document.title, "The Engine");
}

/// The store URL's query reaches SurrealDB: a store that fsyncs its log once a second (or
/// leaves it to the operating system) opens, keeps what was written, and opens again.
#[tokio::test]
async fn a_surrealkv_url_may_say_how_often_the_log_is_synced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kb");
    let config = |sync: &str| StoreConfig {
        url: format!("surrealkv://{}?sync={sync}", path.display()),
        ..StoreConfig::memory()
    };
    {
        let dimension = HashingEmbedder::DEFAULT_DIMENSION;
        let kb = reopen(&config("1s"), dimension, false).await.unwrap();
        import::import(&kb, SMALL.as_bytes(), &Silent)
            .await
            .unwrap();
    }
    let kb = reopen(&config("never"), HashingEmbedder::DEFAULT_DIMENSION, false)
        .await
        .unwrap();
    assert_eq!(kb.counts().await.unwrap().entities, 5);
    assert!(path.join("wal").is_dir(), "the store is at the URL's path");
}

/// Opens `config` with a hashing embedder of `dimension` (`reembed`: for reembedding) and
/// waits until it connects or fails for a reason other than the database being out of reach: a
/// dropped instance lets go of its files in the background.
async fn reopen(
    config: &StoreConfig,
    dimension: usize,
    reembed: bool,
) -> kbq_store::Result<Arc<KnowledgeBase>> {
    let embedder = Arc::new(HashingEmbedder::new(dimension));
    let kb = if reembed {
        KnowledgeBase::open_for_reembed(config.clone(), embedder).await
    } else {
        KnowledgeBase::open(config.clone(), embedder).await
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match kb.ping().await {
            Ok(()) => return Ok(kb),
            Err(kbq_store::StoreError::Unavailable(_)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[tokio::test]
async fn reembed_moves_a_store_to_another_embedder() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("surrealkv://{}", dir.path().join("kb").display());
    let config = StoreConfig {
        url,
        ..StoreConfig::memory()
    };
    {
        let kb = reopen(&config, 64, false).await.unwrap();
        import::import(&kb, SMALL.as_bytes(), &Silent)
            .await
            .unwrap();
    }
    // Another embedder may not serve the store's vectors...
    let refused = reopen(&config, 32, false).await;
    let Err(kbq_store::StoreError::Query(reason)) = refused else {
        panic!("a store of another embedder was opened");
    };
    assert!(reason.contains("kbq reindex"), "{reason}");
    // ...until reembed converts them and records it as the store's embedder.
    {
        let kb = reopen(&config, 32, true).await.unwrap();
        assert_eq!(kb.reembed(&Silent).await.unwrap(), 2);
    }
    let kb = reopen(&config, 32, false).await.unwrap();
    let hits = kb
        .semantic_search("A mechanical computer designed by Babbage", 2)
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].document.title, "The Engine");
    drop(kb);
    // The old embedder is now the stranger.
    assert!(matches!(
        reopen(&config, 64, false).await,
        Err(kbq_store::StoreError::Query(_))
    ));
}

#[tokio::test]
async fn unreachable_remote_store_is_unavailable_not_fatal() {
    let config = StoreConfig {
        url: "ws://127.0.0.1:9".into(),
        connect_timeout: std::time::Duration::from_secs(2),
        ..StoreConfig::memory()
    };
    let kb = KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await;
    let err = kb.entity("Ada").await.unwrap_err();
    assert!(
        matches!(err, kbq_store::StoreError::Unavailable(_)),
        "{err:?}"
    );
    assert!(kb.ping().await.is_err());
}

#[tokio::test]
async fn graph_documents_resolve_self_and_related_entities() {
    use kbq_store::{DocumentsQuery, SELF_RELATIONSHIP};
    let kb = open(true).await;
    import::import(&kb, SMALL.as_bytes(), &Silent)
        .await
        .unwrap();
    let query = DocumentsQuery {
        start: "Babbage".into(),
        entity_type: None,
        relationship_types: None,
        max_depth: 2,
        limit: 20,
        resolve_documents: true,
    };
    let found = kb.graph_documents(&query).await.unwrap();
    // Babbage has no document of its own; Ada (knows, depth 1) and Engine (designed, depth 1) do.
    assert_eq!(
        found.related_entities.iter().collect::<Vec<_>>(),
        ["Ada", "Engine", "London", "Zed"]
    );
    assert_eq!(found.results.len(), 2);
    assert!(
        found
            .results
            .iter()
            .all(|d| d.relationship != SELF_RELATIONSHIP)
    );
    assert!(found.results[0].score >= found.results[1].score);

    let own = kb
        .graph_documents(&DocumentsQuery {
            start: "Ada".into(),
            ..query.clone()
        })
        .await
        .unwrap();
    let first = &own.results[0];
    assert_eq!(
        (first.relationship.as_str(), first.related_entity.as_deref()),
        (SELF_RELATIONSHIP, None)
    );
    assert!(
        first.score > 0.7,
        "own document scores proximity 1: {}",
        first.score
    );

    let typed = kb
        .graph_documents(&DocumentsQuery {
            entity_type: Some("machine".into()),
            ..query.clone()
        })
        .await
        .unwrap();
    assert_eq!(
        typed.related_entities.iter().collect::<Vec<_>>(),
        ["Engine"]
    );
    assert_eq!(typed.results.len(), 1);

    let names_only = kb
        .graph_documents(&DocumentsQuery {
            resolve_documents: false,
            ..query.clone()
        })
        .await
        .unwrap();
    assert!(names_only.results.is_empty());
    assert_eq!(names_only.related_entities.len(), 4);

    let limited = kb
        .graph_documents(&DocumentsQuery { limit: 1, ..query })
        .await
        .unwrap();
    assert_eq!(limited.results.len(), 1);
}

/// A document linked to several entities (a chunk's mentions) is a document of each: graph
/// documents find it from every one, once, at the closest; the `entity_name` filter matches
/// any; deleting an entity drops its mention, in SurrealDB and in memory, and keeps the rest.
#[tokio::test]
async fn a_document_mentioning_several_entities_is_a_document_of_each() {
    use kbq_store::{DocumentFilter, DocumentsQuery, SELF_RELATIONSHIP};
    for index in [true, false] {
        let kb = open(index).await;
        import::import(&kb, SMALL.as_bytes(), &Silent)
            .await
            .unwrap();
        let chunk = kbq_store::NewDocument {
            title: "Notes".into(),
            content: "Babbage showed the engine to Zed in London.".into(),
            source: "notes".into(),
            source_id: "n#0".into(),
            content_type: "text/markdown".into(),
            url: None,
            entity_name: Some("Babbage".into()),
            mentions: vec!["Zed".into(), "London".into()],
        };
        kb.upsert_documents(std::slice::from_ref(&chunk))
            .await
            .unwrap();
        let query = |start: &str, depth: u32| DocumentsQuery {
            start: start.into(),
            entity_type: None,
            relationship_types: None,
            max_depth: depth,
            limit: 20,
            resolve_documents: true,
        };
        let titles = |found: &kbq_store::GraphDocuments| -> Vec<(String, String)> {
            let mut out: Vec<(String, String)> = found
                .results
                .iter()
                .map(|d| (d.document.title.clone(), d.relationship.clone()))
                .collect();
            out.sort();
            out
        };
        // Its own document for each entity it names, at depth 0.
        for start in ["Babbage", "Zed", "London"] {
            let found = kb.graph_documents(&query(start, 0)).await.unwrap();
            assert_eq!(
                titles(&found),
                [("Notes".to_string(), SELF_RELATIONSHIP.to_string())],
                "index {index}, {start}"
            );
        }
        // From Ada (Zed, London and Babbage one hop away): once, through the first reached.
        let found = kb.graph_documents(&query("Ada", 1)).await.unwrap();
        let notes: Vec<_> = found
            .results
            .iter()
            .filter(|d| d.document.title == "Notes")
            .collect();
        assert_eq!(notes.len(), 1, "index {index}: {:?}", found.results);
        let first_reached = found
            .related_entities
            .iter()
            .find(|n| ["Babbage", "Zed", "London"].contains(n))
            .unwrap()
            .to_string();
        assert_eq!(
            notes[0].related_entity.as_deref(),
            Some(first_reached.as_str())
        );
        // The filter matches a mention.
        let filter = DocumentFilter {
            entity_name: Some("Zed".into()),
            ..Default::default()
        };
        let hits = kb
            .keyword_search_filtered("engine London", 5, &filter)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "index {index}");
        assert_eq!(hits[0].document.mentions, ["Zed", "London"]);
        // Deleting Zed drops its mention and keeps the others.
        kb.delete_entity("Zed").await.unwrap();
        let found = kb.graph_documents(&query("London", 0)).await.unwrap();
        assert_eq!(found.results.len(), 1, "index {index}");
        assert_eq!(found.results[0].document.mentions, ["London"]);
        let hits = kb
            .keyword_search_filtered("engine London", 5, &filter)
            .await
            .unwrap();
        assert!(hits.is_empty(), "index {index}");
    }
}

#[tokio::test]
async fn graph_documents_of_a_hub_keep_the_best_of_all_its_documents() {
    use kbq_store::DocumentsQuery;
    let kb = open(true).await;
    // A hub with 60 neighbours and 20 more two hops away, each with a document. Half the
    // documents share one text, so their scores tie and titles decide.
    let mut lines =
        vec![r#"{"kind":"entity","name":"Hub","entity_type":"hub","properties":{}}"#.to_string()];
    let document = |entity: &str, title: &str, content: &str| {
        format!(
            r#"{{"kind":"document","title":"{title}","content":"{content}","source":"t","source_id":"{entity}","content_type":"text/plain","url":null,"entity_name":"{entity}"}}"#
        )
    };
    for i in 0..80 {
        let name = format!("Spoke {i:02}");
        lines.push(format!(
            r#"{{"kind":"entity","name":"{name}","entity_type":"spoke","properties":{{}}}}"#
        ));
        let (source, ty) = if i < 60 {
            ("Hub".to_string(), "links")
        } else {
            (format!("Spoke {:02}", i - 60), "next")
        };
        lines.push(format!(
            r#"{{"kind":"relationship","source_name":"{source}","target_name":"{name}","relationship_type":"{ty}","properties":{{}}}}"#
        ));
        let content = if i % 2 == 0 {
            "hub spoke shared text".to_string()
        } else {
            format!("a hub note number {i} about spokes")
        };
        // Titles in an order unlike the names', so ties are not broken by accident.
        lines.push(document(&name, &format!("T{:02}", (i * 37) % 80), &content));
    }
    lines.push(document("Hub", "Hub itself", "the hub"));
    let ndjson = lines.join("\n");
    let report = import::import(&kb, ndjson.as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let query = DocumentsQuery {
        start: "Hub".into(),
        entity_type: None,
        relationship_types: None,
        max_depth: 2,
        limit: 1000,
        resolve_documents: true,
    };
    let all = kb.graph_documents(&query).await.unwrap();
    assert_eq!(all.results.len(), 81);
    for limit in [1, 2, 5, 10, 30, 31, 60, 80] {
        let best = kb
            .graph_documents(&DocumentsQuery {
                limit,
                ..query.clone()
            })
            .await
            .unwrap();
        assert_eq!(best.results, all.results[..limit], "limit {limit}");
        assert_eq!(best.related_entities, all.related_entities);
    }
}

#[tokio::test]
async fn semantic_search_finds_what_exact_search_finds() {
    let kb = open(true).await;
    let records = generate::generate(Spec {
        entities: 300,
        relationships: 0,
        document_ratio: 1.0,
        seed: 3,
    });
    import::import_records(&kb, records.into_iter().enumerate().collect(), &Silent)
        .await
        .unwrap();
    let mut agree = 0;
    let mut total = 0;
    for q in [
        "graph vector search",
        "Entity 000042",
        "kernel packet thread",
        "theorem ontology matrix",
    ] {
        let fast = kb.semantic_search(q, 10).await.unwrap();
        let exact = kb.semantic_search_exact(q, 10).await.unwrap();
        assert_eq!(fast.len(), 10, "{q}");
        assert!(fast.windows(2).all(|w| w[0].score >= w[1].score));
        let exact_ids: std::collections::HashSet<_> =
            exact.iter().map(|h| h.document.id.clone()).collect();
        agree += fast
            .iter()
            .filter(|h| exact_ids.contains(&h.document.id))
            .count();
        total += 10;
    }
    assert!(
        agree as f64 / total as f64 >= 0.9,
        "recall@10 {agree}/{total}"
    );
    let fast = kb.semantic_search("lattice kernel", 1).await.unwrap();
    let exact = kb.semantic_search_exact("lattice kernel", 1).await.unwrap();
    assert_eq!(fast[0].document.id, exact[0].document.id);
    // The exact answer is the brute-force answer, computed here from the embedder alone.
    let embedder = HashingEmbedder::default();
    let query = embedder.embed_one("lattice kernel");
    let best = records_text(3, 300)
        .into_iter()
        .map(|(title, text)| {
            (
                kbq_store::embed::cosine(&query, &embedder.embed_one(&text)),
                title,
            )
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap();
    assert_eq!(exact[0].document.title, best.1);
    assert!((exact[0].score - f64::from(best.0)).abs() < 1e-4);
}

/// (title, embedding text) of the documents `generate` makes with this seed.
fn records_text(seed: u64, entities: usize) -> Vec<(String, String)> {
    generate::generate(Spec {
        entities,
        relationships: 0,
        document_ratio: 1.0,
        seed,
    })
    .into_iter()
    .filter_map(|r| match r {
        kbq_store::Record::Document(d) => Some((d.title.clone(), d.embedding_text())),
        _ => None,
    })
    .collect()
}

#[tokio::test]
async fn keyword_search_ranks_by_bm25() {
    let kb = open(true).await;
    import::import(&kb, SMALL.as_bytes(), &Silent)
        .await
        .unwrap();
    let hits = kb.keyword_search("mechanical computer", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].document.title, "The Engine");
    // In the title of one document and the content of the other, each of average length: the
    // two fields weigh alike, and a word in half the documents still counts.
    let hits = kb.keyword_search("engine", 5).await.unwrap();
    assert_eq!(hits.len(), 2, "title and content both count");
    assert!(hits[1].score > 0.0);
    assert!((hits[0].score - hits[1].score).abs() < 1e-6);
    // Two of the words, in one document, beat one.
    let hits = kb.keyword_search("engine babbage", 5).await.unwrap();
    assert_eq!(hits[0].document.title, "The Engine");
    assert!(hits[0].score > hits[1].score);
    assert!(kb.keyword_search("'; --", 5).await.unwrap().is_empty());
    assert!(kb.keyword_search("zebra", 5).await.unwrap().is_empty());
    // Case and accents do not matter.
    let hits = kb.keyword_search("MÉCHANICAL", 5).await.unwrap();
    assert_eq!(hits.len(), 1);

    // Deleting an entity unlinks its document in the keyword index too.
    let filter = kbq_store::DocumentFilter {
        entity_name: Some("Engine".into()),
        ..Default::default()
    };
    let hits = kb
        .keyword_search_filtered("mechanical", 5, &filter)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    kb.delete_entity("Engine").await.unwrap();
    let hits = kb
        .keyword_search_filtered("mechanical", 5, &filter)
        .await
        .unwrap();
    assert!(hits.is_empty());
    let hits = kb.keyword_search("mechanical", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].document.entity_name, None);

    // Rewriting a document replaces its words; deleting it removes them.
    let doc = kbq_store::NewDocument {
        title: "The Engine".into(),
        content: "An analytical machine of brass.".into(),
        source: "t".into(),
        source_id: "engine".into(),
        content_type: "text/plain".into(),
        url: None,
        entity_name: None,
        mentions: Vec::new(),
    };
    kb.upsert_documents(std::slice::from_ref(&doc))
        .await
        .unwrap();
    assert!(kb.keyword_search("mechanical", 5).await.unwrap().is_empty());
    let hits = kb.keyword_search("brass", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert!(kb.delete_document(&hits[0].document.id).await.unwrap());
    assert!(kb.keyword_search("brass", 5).await.unwrap().is_empty());
}

#[tokio::test]
async fn memory_belongs_to_its_owner() {
    let kb = open(true).await;
    let m = kb
        .remember(
            "alice",
            "My favourite machine is the Analytical Engine",
            &["prefs".into()],
            &["Engine".into()],
        )
        .await
        .unwrap();
    assert!(m.id.starts_with("memory:"));
    kb.remember("alice", "The meeting is on Tuesday", &[], &[])
        .await
        .unwrap();
    kb.remember(
        "bob",
        "Bob's secret: the engine password is swordfish",
        &[],
        &["Engine".into()],
    )
    .await
    .unwrap();

    let v = kb
        .memory_by_vector("alice", "favourite machine", 5)
        .await
        .unwrap();
    assert_eq!(
        v[0].memory.content,
        "My favourite machine is the Analytical Engine"
    );
    assert!(v.iter().all(|h| !h.memory.content.contains("swordfish")));
    let k = kb.memory_by_keyword("alice", "engine", 5).await.unwrap();
    assert_eq!(k.len(), 1);
    assert_eq!(k[0].memory.tags, vec!["prefs"]);
    let g = kb
        .memory_by_entities("alice", &["Engine".into()], 5)
        .await
        .unwrap();
    assert_eq!(g.len(), 1);
    assert!(
        kb.memory_by_keyword("bob", "favourite", 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        kb.memory_by_entities("bob", &["Engine".into()], 5)
            .await
            .unwrap()
            .len(),
        1
    );

    let stats = kb.memory_stats("alice").await.unwrap();
    assert_eq!(stats.memories, 2);
    assert!(stats.oldest.unwrap() <= stats.newest.unwrap());
    assert_eq!(kb.memory_stats("carol").await.unwrap().memories, 0);
    assert!(kb.remember("alice", "  ", &[], &[]).await.is_err());
}

#[tokio::test]
async fn entity_names_follow_writes() {
    let kb = open(true).await;
    let before = kb.generation();
    import::import(&kb, SMALL.as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(kb.generation() > before);
    let mut names = kb.entity_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["Ada", "Babbage", "Engine", "London", "Zed"]);
}

#[test]
fn removing_from_the_graph_index_matches_building_without() {
    let records = generate::generate(Spec {
        entities: 400,
        relationships: 1500,
        document_ratio: 0.0,
        seed: 11,
    });
    let mut entities = Vec::new();
    let mut rels = Vec::new();
    for r in records {
        match r {
            Record::Entity(e) => entities.push(e.into_entity()),
            Record::Relationship(r) => rels.push(r.into_relationship()),
            Record::Document(_) => {}
        }
    }
    // Self-loops and a pair of opposite edges, the awkward cases for renumbering.
    for (s, d) in [(3, 3), (5, 6), (6, 5), (399, 399)] {
        rels.push(kbq_store::Relationship {
            source_name: generate::entity_name(s),
            target_name: generate::entity_name(d),
            relationship_type: "loops".into(),
            properties: Default::default(),
        });
    }
    let mut index = kbq_store::GraphIndex::build(entities.clone(), rels.clone());
    // Remove hubs (low indices get most edges), the last node, and some single edges.
    let gone: Vec<String> = [0, 3, 5, 17, 399, 200]
        .iter()
        .map(|&i| generate::entity_name(i))
        .collect();
    for name in &gone {
        assert!(index.remove_entity(name), "{name}");
        assert!(!index.remove_entity(name));
    }
    let mut removed_rels = Vec::new();
    for r in rels.iter().step_by(7) {
        if gone.contains(&r.source_name) || gone.contains(&r.target_name) {
            continue;
        }
        assert!(index.remove_relationship(&r.source_name, &r.target_name, &r.relationship_type));
        removed_rels.push(r.clone());
    }
    let kept_entities: Vec<_> = entities
        .into_iter()
        .filter(|e| !gone.contains(&e.name))
        .collect();
    let kept_rels: Vec<_> = rels
        .into_iter()
        .filter(|r| !gone.contains(&r.source_name) && !gone.contains(&r.target_name))
        .filter(|r| !removed_rels.contains(r))
        .collect();
    let fresh = kbq_store::GraphIndex::build(kept_entities.clone(), kept_rels.clone());
    assert_eq!(index.entity_count(), fresh.entity_count());
    assert_eq!(index.relationship_count(), fresh.relationship_count());
    for e in &kept_entities {
        for direction in [Direction::Out, Direction::In, Direction::Both] {
            let q = q(&e.name, direction, 3, 60);
            assert_eq!(
                index.traverse(&q),
                fresh.traverse(&q),
                "{} {direction:?}",
                e.name
            );
        }
    }
    for name in &gone {
        assert!(index.entity(name).is_none());
        assert!(
            index
                .traverse(&q(name, Direction::Both, 2, 50))
                .entities
                .is_empty()
        );
    }
    assert_eq!(
        index.search("entity 00", None, 500),
        fresh.search("entity 00", None, 500)
    );
}

/// Records every report of a load's progress.
#[derive(Default)]
struct Reports(parking_lot::Mutex<Vec<(u32, u32)>>);

impl kbq_store::progress::LoadProgress for Reports {
    fn advance(&self, done: u32, total: u32) {
        self.0.lock().push((done, total));
    }
}

#[tokio::test]
async fn a_reopened_store_loads_every_record_in_parts_and_reports_each_part() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        url: format!("surrealkv://{}", dir.path().join("kb").display()),
        ..StoreConfig::memory()
    };
    let records = generate::generate(Spec {
        entities: 600,
        relationships: 1500,
        document_ratio: 1.0,
        seed: 7,
    });
    let counts = {
        let kb = KnowledgeBase::open(config.clone(), Arc::new(HashingEmbedder::default())).await;
        let numbered = records.iter().cloned().enumerate().collect();
        let report = import::import_records(&kb, numbered, &Silent)
            .await
            .unwrap();
        assert!(report.failures.is_empty());
        kb.counts().await.unwrap()
    };
    let kb = KnowledgeBase::new(config, Arc::new(HashingEmbedder::default()));
    let reports = Reports::default();
    // The first instance lets go of its files in the background after it is dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(e) = kb.connect(&reports).await {
        assert!(
            std::time::Instant::now() < deadline,
            "store did not reopen: {e}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Each of the three tables in 16 parts, and the two indexes built: one report each,
    // counting up to the whole.
    let reports = reports.0.into_inner();
    assert_eq!(reports.len(), 50, "{reports:?}");
    assert!(reports.iter().all(|&(_, total)| total == 50));
    assert!(reports.windows(2).all(|w| w[0].0 < w[1].0), "{reports:?}");
    assert_eq!(reports.last(), Some(&(50, 50)));
    // Every record is in the indexes built from the parts.
    let held = kb.index_stats();
    assert_eq!(held.entities, counts.entities);
    assert_eq!(held.relationships, counts.relationships);
    assert_eq!(held.documents, counts.documents);
    assert_eq!(held.vectors, counts.documents);
    let names = kb.entity_names().await.unwrap();
    for r in &records {
        if let Record::Entity(e) = r {
            assert!(names.contains(&e.name), "{} not loaded", e.name);
        }
    }
}

/// Polls `future` once, without a waker to call.
fn poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    future.poll(&mut cx)
}

/// An embedded store with the graph index and the built-in embedder answers graph documents
/// from memory: a walk that links few documents is answered at its first poll (what the HTTP
/// workers' own graph actors rely on), and one from an entity with more documents than a tenth
/// of a millisecond of codes reads is chosen on tokio's blocking pool, with the same answer.
#[tokio::test]
async fn graph_documents_of_many_documents_leave_the_calling_task() {
    use kbq_store::DocumentsQuery;
    assert!(!open(false).await.answers_documents_in_memory());
    let kb = open(true).await;
    assert!(kb.answers_documents_in_memory());
    let mut lines = vec![
        r#"{"kind":"entity","name":"Hub","entity_type":"hub","properties":{}}"#.to_string(),
        r#"{"kind":"entity","name":"Spoke","entity_type":"spoke","properties":{}}"#.to_string(),
        r#"{"kind":"entity","name":"Leaf","entity_type":"leaf","properties":{}}"#.to_string(),
        r#"{"kind":"relationship","source_name":"Hub","target_name":"Spoke","relationship_type":"links","properties":{}}"#.to_string(),
        r#"{"kind":"relationship","source_name":"Spoke","target_name":"Leaf","relationship_type":"links","properties":{}}"#.to_string(),
    ];
    let document = |entity: &str, i: usize| {
        format!(
            r#"{{"kind":"document","title":"T{i:04}","content":"note {i} on hub topic {}","source":"t","source_id":"{entity}-{i}","content_type":"text/plain","url":null,"entity_name":"{entity}"}}"#,
            i % 37
        )
    };
    // 4,200 documents of 256 dimensions: more than the 1 MiB of codes read in place.
    lines.extend((0..4200).map(|i| document("Hub", i)));
    lines.push(document("Spoke", 0));
    lines.push(document("Leaf", 0));
    let report = import::import(&kb, lines.join("\n").as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let query = |start: &str, limit: usize| DocumentsQuery {
        start: start.into(),
        entity_type: None,
        relationship_types: None,
        max_depth: 1,
        limit,
        resolve_documents: true,
    };

    let small = query("Leaf", 10);
    let std::task::Poll::Ready(answer) = poll_once(std::pin::pin!(kb.graph_documents(&small)))
    else {
        panic!("a small walk waits on nothing");
    };
    assert_eq!(answer.unwrap().results.len(), 2);

    let big = query("Hub", 10);
    let mut answer = std::pin::pin!(kb.graph_documents(&big));
    assert!(
        poll_once(answer.as_mut()).is_pending(),
        "4,201 documents' codes are read off the calling task"
    );
    let best = answer.await.unwrap();
    let all = kb.graph_documents(&query("Hub", 5000)).await.unwrap();
    assert_eq!(all.results.len(), 4201);
    assert_eq!(best.results, all.results[..10]);
}

/// A source's planner reads all of the source's own supports of a fact, and one of another
/// origin's (not every one: a fact many sources name would make each job's read grow).
#[tokio::test]
async fn supports_of_reads_the_sources_own_and_one_of_another_origin() {
    use std::collections::BTreeMap;

    use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support};

    let kb = open(true).await;
    let chunk = |source: &SourceKey, chunk: u32| {
        Support::Chunk(ChunkRef {
            source: source.clone(),
            chunk,
        })
    };
    let mine = SourceKey::new("notes", "mine");
    let others: Vec<SourceKey> = (0..5)
        .map(|i| SourceKey::new("notes", format!("other-{i}")))
        .collect();
    let shared = Fact::entity("Ada");
    let theirs = Fact::entity("Babbage");
    let mut supports = vec![
        (shared.clone(), chunk(&mine, 0)),
        (shared.clone(), chunk(&mine, 3)),
        (theirs.clone(), chunk(&others[0], 1)),
        (theirs.clone(), chunk(&others[1], 1)),
    ];
    supports.extend(others.iter().map(|o| (shared.clone(), chunk(o, 0))));
    kb.add_supports(&supports, &BTreeMap::new()).await.unwrap();

    let nobodys = Fact::entity("Nobody");
    let read = kb
        .supports_of(&mine, &[theirs.clone(), nobodys.clone()])
        .await
        .unwrap();
    let of = |fact: &Fact| {
        read.iter()
            .find(|(f, _)| f == fact)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("{fact:?} not read"))
    };
    assert_eq!(read.len(), 3, "{read:?}");
    let shared_supports = of(&shared);
    assert_eq!(
        shared_supports
            .iter()
            .filter(|s| s.source() == Some(&mine))
            .count(),
        2
    );
    assert_eq!(
        shared_supports
            .iter()
            .filter(|s| s.source() != Some(&mine))
            .count(),
        1
    );
    let theirs_supports = of(&theirs);
    assert_eq!(theirs_supports.len(), 1);
    assert!(theirs_supports[0].source() != Some(&mine));
    assert!(of(&nobodys).is_empty());
}

/// Whoever names a fact the graph holds reads its supports only while the fact's record lacks
/// the mark of a fact with supports: an import's, or one written before supports were kept.
#[tokio::test]
async fn a_fact_is_unsourced_until_written_by_an_ingest_or_marked() {
    use kbq_ingest::provenance::Fact;
    use kbq_store::{NewEntity, NewRelationship};

    let kb = open(true).await;
    let entity = |name: &str| NewEntity {
        name: name.into(),
        entity_type: "person".into(),
        properties: Default::default(),
    };
    let rel = |s: &str, t: &str| NewRelationship {
        source_name: s.into(),
        target_name: t.into(),
        relationship_type: "knows".into(),
        properties: Default::default(),
    };
    kb.upsert_entities(&[entity("Ada"), entity("Babbage")])
        .await
        .unwrap();
    kb.upsert_relationships(&[rel("Ada", "Babbage")])
        .await
        .unwrap();
    kb.upsert_sourced_entities(&[entity("Cy")]).await.unwrap();
    kb.upsert_sourced_relationships(&[rel("Cy", "Ada")])
        .await
        .unwrap();
    let facts = [
        Fact::entity("Ada"),
        Fact::entity("Babbage"),
        Fact::entity("Cy"),
        Fact::entity("Nobody"),
        Fact::relationship("Ada", "Babbage", "knows"),
        Fact::relationship("Cy", "Ada", "knows"),
        Fact::relationship("Ada", "Cy", "knows"),
    ];
    let sorted = |mut v: Vec<Fact>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(kb.unsourced(&facts).await.unwrap()),
        sorted(vec![
            Fact::entity("Ada"),
            Fact::entity("Babbage"),
            Fact::relationship("Ada", "Babbage", "knows"),
        ])
    );
    kb.mark_sourced(&[
        Fact::entity("Ada"),
        Fact::relationship("Ada", "Babbage", "knows"),
        Fact::entity("Nobody"),
    ])
    .await
    .unwrap();
    assert_eq!(
        kb.unsourced(&facts).await.unwrap(),
        vec![Fact::entity("Babbage")]
    );
    // Marking wrote no record of its own, and an import's update keeps the mark.
    assert!(kb.entity("Nobody").await.unwrap().is_none());
    kb.upsert_entities(&[entity("Ada")]).await.unwrap();
    assert_eq!(
        kb.unsourced(&facts).await.unwrap(),
        vec![Fact::entity("Babbage")]
    );
}

#[tokio::test]
async fn an_ended_jobs_record_keeps_its_view_and_drops_the_sources_content() {
    let kb = open(false).await;
    let record = |id: &str, status: &str, content: Option<&str>| {
        let mut input = serde_json::json!({"source": "s", "source_id": "a"});
        if let Some(content) = content {
            input["content"] = content.into();
        }
        serde_json::json!({"view": {"job_id": id, "status": status}, "owner": "k", "input": input})
    };
    let view = |id: &str, status: &str| serde_json::json!({"job_id": id, "status": status});
    // j1's input is kept apart; j2's record is of before, with its input as hex.
    let bytes = b"hello".to_vec();
    kb.put_job(
        "j1",
        record("j1", "queued", None),
        "node-a",
        Some(bytes.clone()),
    )
    .await
    .unwrap();
    kb.put_job(
        "j2",
        record("j2", "queued", Some("68656c6c6f")),
        "node-a",
        None,
    )
    .await
    .unwrap();
    for id in ["j1", "j2"] {
        kb.put_job_view(id, view(id, "running")).await.unwrap();
    }
    let running = kb.job("j1").await.unwrap().unwrap();
    assert_eq!(running["view"]["status"], "running");
    assert_eq!(running["input"].get("content"), None, "{running}");
    assert_eq!(
        kb.job_input("j1").await.unwrap(),
        Some(bytes),
        "kept while it may run"
    );
    let older = kb.job("j2").await.unwrap().unwrap();
    assert_eq!(
        older["input"]["content"], "68656c6c6f",
        "kept while it may run"
    );
    assert_eq!(kb.job_input("j2").await.unwrap(), None);
    for id in ["j1", "j2"] {
        kb.put_job_view(id, view(id, "succeeded")).await.unwrap();
        let ended = kb.job(id).await.unwrap().unwrap();
        assert_eq!(ended["view"]["status"], "succeeded");
        assert_eq!(ended["input"]["source_id"], "a");
        assert_eq!(ended["input"]["content"], "", "dropped once it has ended");
        assert_eq!(
            kb.job_input(id).await.unwrap(),
            None,
            "dropped once it has ended"
        );
    }
}

#[tokio::test]
async fn a_job_is_held_by_its_node_while_the_node_beats() {
    let kb = open(false).await;
    let record = |id: &str| serde_json::json!({"view": {"job_id": id, "status": "queued"}, "owner": "k", "input": {}});
    let ids = |records: Vec<serde_json::Value>| {
        let mut ids: Vec<String> = records
            .iter()
            .map(|r| r["view"]["job_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    kb.put_job("j1", record("j1"), "a", None).await.unwrap();
    kb.put_job("j2", record("j2"), "b", None).await.unwrap();
    kb.heartbeat("a", 1_000).await.unwrap();
    kb.heartbeat("b", 5_000).await.unwrap();
    // At 2,000 only a has stopped beating.
    let taken = kb.claim_jobs("c", 2_000, 9_000, false).await.unwrap();
    assert_eq!(ids(taken), ["j1"]);
    assert!(
        kb.claim_jobs("d", 3_000, 9_000, false)
            .await
            .unwrap()
            .is_empty(),
        "b and c beat"
    );
    // b beats on; nothing asks it to cancel.
    kb.heartbeat("b", 10_000).await.unwrap();
    assert!(kb.cancels_asked("b").await.unwrap().is_empty());
    assert!(
        kb.claim_jobs("d", 8_500, 20_000, false)
            .await
            .unwrap()
            .is_empty()
    );
    // Another node asks for j2's cancellation: b hears it when it next looks.
    assert!(kb.request_cancel("j2").await.unwrap());
    assert_eq!(kb.cancels_asked("b").await.unwrap(), ["j2"]);
    assert!(kb.cancels_asked("a").await.unwrap().is_empty());
    // A job that has ended is nobody's to take, nor to cancel.
    kb.put_job_view(
        "j1",
        serde_json::json!({"job_id": "j1", "status": "succeeded"}),
    )
    .await
    .unwrap();
    assert!(!kb.request_cancel("j1").await.unwrap());
    // An embedded store's only node takes every unfinished job, its node alive or not.
    assert_eq!(ids(kb.claim_jobs("e", 0, 1, true).await.unwrap()), ["j2"]);
    assert!(
        kb.cancels_asked("b").await.unwrap().is_empty(),
        "j2 is e's now"
    );
}

/// The merges are listed by alias, a page at a time, with the chunks that gave each, and
/// for one entity.
#[tokio::test]
async fn merges_are_listed_by_alias_with_their_chunks() {
    use std::collections::BTreeMap;

    use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support};

    let kb = open(false).await;
    let chunk = |source_id: &str, chunk: u32| {
        Support::Chunk(ChunkRef {
            source: SourceKey::new("notes", source_id),
            chunk,
        })
    };
    let alias = |entity: &str, alias: &str| Fact::Alias {
        entity: entity.into(),
        alias: alias.into(),
    };
    let supports = vec![
        (alias("Ada Lovelace", "Ada King"), chunk("a", 0)),
        (alias("Ada Lovelace", "Ada King"), chunk("b", 2)),
        (alias("Ada Lovelace", "Countess of Lovelace"), chunk("a", 1)),
        (alias("Charles Babbage", "C. Babbage"), chunk("c", 0)),
        // Not merges: an entity and a description.
        (Fact::entity("Ada Lovelace"), chunk("a", 0)),
    ];
    kb.add_supports(&supports, &BTreeMap::new()).await.unwrap();

    let (all, more) = kb.merges(None, None, 10).await.unwrap();
    assert!(!more);
    let names: Vec<(&str, &str)> = all
        .iter()
        .map(|m| (m.alias.as_str(), m.entity.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("Ada King", "Ada Lovelace"),
            ("C. Babbage", "Charles Babbage"),
            ("Countess of Lovelace", "Ada Lovelace"),
        ]
    );
    let chunks: Vec<(&str, u32)> = all[0]
        .chunks
        .iter()
        .map(|c| (c.source_id.as_str(), c.position))
        .collect();
    assert_eq!(chunks, [("a", 0), ("b", 2)]);

    // A page at a time.
    let (first, more) = kb.merges(None, None, 2).await.unwrap();
    assert!(more);
    assert_eq!(first.len(), 2);
    let (rest, more) = kb.merges(None, Some(&first[1].alias), 2).await.unwrap();
    assert!(!more);
    assert_eq!(rest, all[2..]);

    // One entity's.
    let (ada, _) = kb.merges(Some("Ada Lovelace"), None, 10).await.unwrap();
    let aliases: Vec<&str> = ada.iter().map(|m| m.alias.as_str()).collect();
    assert_eq!(aliases, ["Ada King", "Countess of Lovelace"]);
    assert!(
        kb.merges(Some("Nobody"), None, 10)
            .await
            .unwrap()
            .0
            .is_empty()
    );
}

/// An entity's descriptions are read from every source's description supports, and no
/// other entity's (not one whose name starts with this one's); an import's entity says so.
#[tokio::test]
async fn descriptions_of_reads_each_entitys_description_supports() {
    use std::collections::BTreeMap;

    use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support};

    let kb = open(false).await;
    let chunk = |source_id: &str, chunk: u32| ChunkRef {
        source: SourceKey::new("notes", source_id),
        chunk,
    };
    let described = |entity: &str, c: ChunkRef| {
        (
            Fact::Description {
                entity: entity.into(),
                chunk: c.clone(),
            },
            Support::Chunk(c),
        )
    };
    let supports = vec![
        described("Ada", chunk("b", 0)),
        described("Ada", chunk("a", 1)),
        described("Ada Lovelace", chunk("a", 0)),
        described("Babbage", chunk("a", 2)),
        (Fact::entity("Babbage"), Support::Import),
    ];
    let texts: BTreeMap<Fact, String> = supports
        .iter()
        .map(|(f, s)| match (f, s) {
            (Fact::Description { entity, chunk }, _) => (
                f.clone(),
                format!("{entity} in {}#{}", chunk.source.source_id, chunk.chunk),
            ),
            _ => (f.clone(), String::new()),
        })
        .collect();
    kb.add_supports(&supports, &texts).await.unwrap();
    let read = kb
        .descriptions_of(&["Ada".into(), "Babbage".into(), "Nobody".into()])
        .await
        .unwrap();
    assert_eq!(read[0].entity, "Ada");
    let texts = |i: usize| -> Vec<&str> { read[i].texts.iter().map(|(_, t)| t.as_str()).collect() };
    assert_eq!(texts(0), ["Ada in a#1", "Ada in b#0"]);
    assert_eq!(read[0].texts[0].0, Support::Chunk(chunk("a", 1)));
    assert!(!read[0].imported);
    assert_eq!(texts(1), ["Babbage in a#2"]);
    assert!(read[1].imported);
    assert!(read[2].texts.is_empty());
}

#[tokio::test]
async fn document_bytes_count_content_bytes_on_both_paths() {
    // Two documents, one of them not ASCII, then the second replaced by a shorter one.
    let first = "{\"kind\":\"document\",\"title\":\"A\",\"content\":\"abc\",\"source\":\"t\",\"source_id\":\"a\",\"content_type\":\"text/plain\",\"url\":null,\"entity_name\":null}\n";
    let second = |content: &str| {
        format!(
            "{{\"kind\":\"document\",\"title\":\"B\",\"content\":\"{content}\",\"source\":\"t\",\"source_id\":\"b\",\"content_type\":\"text/plain\",\"url\":null,\"entity_name\":null}}\n"
        )
    };
    for index in [true, false] {
        let kb = open(index).await;
        assert_eq!(kb.document_bytes().await.unwrap(), 0);
        let input = format!("{first}{}", second("Zürich café"));
        import::import(&kb, input.as_bytes(), &Silent)
            .await
            .unwrap();
        // "abc" is 3 bytes; "Zürich café" is 11 characters and 13 bytes.
        assert_eq!(kb.document_bytes().await.unwrap(), 16, "index: {index}");
        assert_eq!(kb.stored_document_bytes().await.unwrap(), 16);
        import::import(&kb, second("x").as_bytes(), &Silent)
            .await
            .unwrap();
        assert_eq!(kb.document_bytes().await.unwrap(), 4, "index: {index}");
        assert_eq!(kb.stored_document_bytes().await.unwrap(), 4);
    }
}

/// Every line of an export, read to its end, and what the export returned.
async fn drain(
    mut rx: tokio::sync::mpsc::Receiver<kbq_store::export::ExportEvent>,
) -> (
    Option<kbq_store::export::ExportCounts>,
    Vec<serde_json::Value>,
) {
    use kbq_store::export::ExportEvent;
    let mut totals = None;
    let mut lines = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            ExportEvent::Totals(t) => totals = Some(t),
            ExportEvent::Lines { bytes, .. } => {
                for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    lines.push(serde_json::from_slice(line).unwrap());
                }
            }
        }
    }
    (totals, lines)
}

/// An export reads one transaction: what is written or deleted while it runs (here, while
/// it waits for its reader with most of the graph still to read) is not in it, and the
/// counts it announced, the lines it wrote and its `end` line agree.
#[tokio::test]
async fn an_export_is_one_state_of_the_store_while_writes_go_on() {
    let kb = open(true).await;
    let records = generate::generate(Spec {
        entities: 3_000,
        relationships: 6_000,
        document_ratio: 0.1,
        seed: 3,
    });
    let report = import::import_records(&kb, records.into_iter().enumerate().collect(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty());
    // A reader that holds one event at a time: the export waits on it page by page.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let export = tokio::spawn({
        let kb = kb.clone();
        async move { kb.export(None, tx).await }
    });
    let first = rx.recv().await.unwrap();
    let kbq_store::export::ExportEvent::Totals(totals) = first else {
        panic!("the first event is the totals");
    };
    assert_eq!(totals.entities, 3_000);
    // Mid-export: a new entity, and one of the exported ones deleted.
    let victim = kb.entity_names().await.unwrap().into_iter().max().unwrap();
    kb.upsert_entities(&[kbq_store::NewEntity {
        name: "Written during the export".into(),
        entity_type: "late".into(),
        properties: Default::default(),
    }])
    .await
    .unwrap();
    kb.delete_entity(&victim).await.unwrap();
    assert!(!export.is_finished(), "the export waits for its reader");
    let (_, lines) = drain(rx).await;
    let written = export.await.unwrap().unwrap();
    assert_eq!(written, totals);
    let names: Vec<&str> = lines
        .iter()
        .filter(|l| l["kind"] == "entity")
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len() as u64, totals.entities);
    assert!(!names.contains(&"Written during the export"));
    assert!(
        names.contains(&victim.as_str()),
        "{victim} was deleted after the export began"
    );
    let relationships = lines.iter().filter(|l| l["kind"] == "relationship").count();
    assert_eq!(relationships as u64, totals.relationships);
    let end = lines.last().unwrap();
    assert_eq!(end["kind"], "end", "{end}");
    assert_eq!(end["entities"], 3_000, "{end}");
    assert_eq!(end["documents"], totals.documents, "{end}");
}

/// What an export writes, imported into an empty store, gives the same export again: the
/// graph, the documents with the entities they are linked to, memories, sources, supports
/// (descriptions and aliases) and kept answers; and reading stops when the reader goes away.
#[tokio::test]
async fn an_export_imported_into_an_empty_store_exports_the_same() {
    use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support};
    let kb = open(true).await;
    let report = import::import(&kb, SMALL.as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty());
    kb.remember(
        "owner-a",
        "The vault code is 4711",
        &["vault".into()],
        &["Ada".into()],
    )
    .await
    .unwrap();
    let source = SourceKey::new("notes", "ada.md");
    kb.put_source_records(&[kbq_store::sources::SourceRecord {
        source: "notes".into(),
        source_id: "ada.md".into(),
        title: "Ada".into(),
        url: None,
        content_type: "text/markdown".into(),
        content_hash: "abc".into(),
        chunks: vec!["h0".into()],
        extracted_by: Some("model".into()),
        confirmations: Vec::new(),
        updated_at: 1,
    }])
    .await
    .unwrap();
    let chunk = Support::Chunk(ChunkRef {
        source: source.clone(),
        chunk: 0,
    });
    let described = Fact::Description {
        entity: "Ada".into(),
        chunk: ChunkRef {
            source: source.clone(),
            chunk: 0,
        },
    };
    let supports = vec![
        (Fact::entity("Ada"), chunk.clone()),
        (Fact::entity("Ada"), Support::Import),
        (described.clone(), chunk.clone()),
        (
            Fact::Alias {
                entity: "Ada".into(),
                alias: "Countess of Lovelace".into(),
            },
            chunk.clone(),
        ),
    ];
    let texts = [(described, "Ada wrote the first program".to_string())].into();
    kb.add_supports(&supports, &texts).await.unwrap();
    kb.cache_extraction("x123", serde_json::json!({"entities": []}))
        .await
        .unwrap();
    let mut chunk_doc = kbq_store::NewDocument {
        title: "Ada".into(),
        content: "Ada and Babbage and the Engine.".into(),
        source: "notes".into(),
        source_id: "ada.md#0".into(),
        content_type: "text/markdown".into(),
        url: None,
        entity_name: Some("Ada".into()),
        mentions: Vec::new(),
    };
    chunk_doc.mentions = vec!["Babbage".into(), "Engine".into()];
    kb.upsert_documents(&[chunk_doc]).await.unwrap();

    let export = |kb: Arc<KnowledgeBase>| async move {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let task = tokio::spawn(async move { kb.export(None, tx).await });
        let (_, lines) = drain(rx).await;
        (task.await.unwrap().unwrap(), lines)
    };
    let (counts, lines) = export(kb.clone()).await;
    assert_eq!(
        (counts.entities, counts.relationships, counts.documents),
        (5, 6, 3)
    );
    assert_eq!(
        (counts.memories, counts.sources, counts.extractions),
        (1, 1, 1)
    );
    assert_eq!(counts.supports, 3, "Ada's two supports and the alias's");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let chunk_line = lines.iter().find(|l| l["source_id"] == "ada.md#0").unwrap();
    assert_eq!(
        chunk_line["mentions"],
        serde_json::json!(["Babbage", "Engine"])
    );

    let copy = open(true).await;
    let report = import::import(&copy, text.as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.restored.supports, 3);
    assert_eq!(report.restored.memories, 1);
    let (again, lines_again) = export(copy.clone()).await;
    assert_eq!(again, counts);
    assert_eq!(lines_again, lines, "the copy exports the same lines");
    // The restored store answers as the first: the alias finds Ada, the memory is recalled
    // by its owner only, and the description is Ada's.
    let merges = copy.merges(Some("Ada"), None, 10).await.unwrap().0;
    assert_eq!(merges[0].alias, "Countess of Lovelace");
    let recalled = copy.memory_by_keyword("owner-a", "vault", 5).await.unwrap();
    assert_eq!(recalled[0].memory.content, "The vault code is 4711");
    assert!(
        copy.memory_by_keyword("owner-b", "vault", 5)
            .await
            .unwrap()
            .is_empty()
    );
    let described = copy.descriptions_of(&["Ada".to_string()]).await.unwrap();
    assert_eq!(described[0].texts[0].1, "Ada wrote the first program");
    assert!(described[0].imported);

    // A reader that goes away stops the export.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let task = tokio::spawn({
        let kb = kb.clone();
        async move { kb.export(None, tx).await }
    });
    rx.recv().await.unwrap();
    drop(rx);
    assert!(task.await.unwrap().is_err());
}

/// A confirmation's kept answer (a candidate with no chunk hash) stays while another source's
/// record lists its key among its confirmations, and goes with the last that does.
#[tokio::test]
async fn a_confirmation_stays_while_another_source_lists_it() {
    let kb = open(false).await;
    let record = |id: &str, confirmations: &[&str]| kbq_store::sources::SourceRecord {
        source: "notes".into(),
        source_id: id.into(),
        title: id.into(),
        url: None,
        content_type: "text/markdown".into(),
        content_hash: format!("h-{id}"),
        chunks: vec![format!("c-{id}")],
        extracted_by: Some("model".into()),
        confirmations: confirmations.iter().map(|k| k.to_string()).collect(),
        updated_at: 1,
    };
    kb.put_source_records(&[record("a", &["k1", "k2"]), record("b", &["k1"])])
        .await
        .unwrap();
    let a = kbq_ingest::provenance::SourceKey::new("notes", "a");
    assert_eq!(
        kb.source_record(&a).await.unwrap().unwrap().confirmations,
        ["k1", "k2"]
    );
    for key in ["k1", "k2"] {
        kb.cache_extraction(key, serde_json::json!({"same": false}))
            .await
            .unwrap();
    }
    let candidates = [
        (String::new(), "k1".to_string()),
        (String::new(), "k2".to_string()),
    ];
    assert_eq!(kb.forget_kept_answers(&a, &candidates).await.unwrap(), 1);
    assert!(
        kb.cached_extraction("k1").await.unwrap().is_some(),
        "b lists k1"
    );
    assert!(kb.cached_extraction("k2").await.unwrap().is_none());
    kb.delete_source_record(&kbq_ingest::provenance::SourceKey::new("notes", "b"))
        .await
        .unwrap();
    assert_eq!(
        kb.forget_kept_answers(&a, &candidates[..1]).await.unwrap(),
        1
    );
    assert!(kb.cached_extraction("k1").await.unwrap().is_none());
}

/// Forgetting ended jobs deletes the records of those that ended before the time given,
/// never a running one's, and counts what it deleted.
#[tokio::test]
async fn ended_jobs_are_forgotten_by_their_end_and_counted() {
    let kb = open(false).await;
    for (id, status, updated_at) in [
        ("early", "succeeded", 1),
        ("late", "failed", 5),
        ("running", "running", 1),
    ] {
        let record = serde_json::json!({"view": {"status": status, "updated_at": updated_at}});
        kb.put_job(id, record, "node", None).await.unwrap();
    }
    assert_eq!(kb.forget_ended_jobs(3).await.unwrap(), 1);
    assert!(kb.job("early").await.unwrap().is_none());
    assert!(kb.job("late").await.unwrap().is_some());
    assert_eq!(kb.forget_ended_jobs(9).await.unwrap(), 1);
    assert!(kb.job("late").await.unwrap().is_none());
    assert!(kb.job("running").await.unwrap().is_some());
    assert_eq!(kb.forget_ended_jobs(9).await.unwrap(), 0);
}

/// Model answers kept by many jobs at once (written and read in grouped statements) are
/// each read back under their own key, a key never kept reads as none, and a key kept again
/// holds the later answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_kept_at_once_are_each_read_back_under_their_own_key() {
    let kb = open(true).await;
    let writes: Vec<_> = (0..60)
        .map(|i| {
            let kb = kb.clone();
            tokio::spawn(async move {
                kb.cache_extraction(&format!("k{i}"), serde_json::json!({"n": i}))
                    .await
            })
        })
        .collect();
    for w in writes {
        w.await.unwrap().unwrap();
    }
    kb.cache_extraction("k7", serde_json::json!({"n": "again"}))
        .await
        .unwrap();
    let reads: Vec<_> = (0..64)
        .map(|i| {
            let kb = kb.clone();
            tokio::spawn(async move { (i, kb.cached_extraction(&format!("k{i}")).await) })
        })
        .collect();
    for r in reads {
        let (i, kept) = r.await.unwrap();
        let expected = match i {
            7 => Some(serde_json::json!({"n": "again"})),
            60.. => None,
            _ => Some(serde_json::json!({"n": i})),
        };
        assert_eq!(kept.unwrap(), expected, "key k{i}");
    }
}

/// Job records and views written by many jobs at once (in grouped statements) each land on
/// their own job: an ended view drops its job's content, an open one keeps it, a job never
/// written reads as none. Sources' records read at once are each their own. Every key is
/// read twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_records_and_sources_written_and_read_at_once_are_each_their_own() {
    let kb = open(false).await;
    async fn put(kb: Arc<KnowledgeBase>, i: usize) -> kbq_store::Result<()> {
        let record = serde_json::json!({
            "view": {"job_id": format!("j{i}"), "status": "queued"},
            "input": {"source_id": format!("s{i}"), "content": format!("c{i}")},
        });
        kb.put_job(&format!("j{i}"), record, "node", None).await
    }
    async fn view(kb: Arc<KnowledgeBase>, i: usize) -> kbq_store::Result<()> {
        let status = if i.is_multiple_of(2) {
            "succeeded"
        } else {
            "running"
        };
        let view = serde_json::json!({"job_id": format!("j{i}"), "status": status, "n": i});
        kb.put_job_view(&format!("j{i}"), view).await
    }
    let puts: Vec<_> = (0..40).map(|i| tokio::spawn(put(kb.clone(), i))).collect();
    for w in puts {
        w.await.unwrap().unwrap();
    }
    let views: Vec<_> = (0..40).map(|i| tokio::spawn(view(kb.clone(), i))).collect();
    for w in views {
        w.await.unwrap().unwrap();
    }
    // Each key twice, so that a round may hold one key twice.
    let reads: Vec<_> = (0..88usize)
        .map(|n| {
            let (kb, i) = (kb.clone(), n % 44);
            tokio::spawn(async move { (i, kb.job(&format!("j{i}")).await.unwrap()) })
        })
        .collect();
    for r in reads {
        let (i, record) = r.await.unwrap();
        if i >= 40 {
            assert!(record.is_none(), "j{i} was never written");
            continue;
        }
        let record = record.unwrap_or_else(|| panic!("j{i} not read back"));
        assert_eq!(record["view"]["n"], i, "j{i}'s view");
        assert_eq!(
            record["input"]["source_id"],
            format!("s{i}"),
            "j{i}'s input"
        );
        let content = if i.is_multiple_of(2) {
            String::new()
        } else {
            format!("c{i}")
        };
        assert_eq!(record["input"]["content"], content, "j{i}'s content");
    }

    let source = |i: usize| kbq_store::sources::SourceRecord {
        source: "notes".into(),
        source_id: format!("n{i}.md"),
        title: format!("Note {i}"),
        url: None,
        content_type: "text/markdown".into(),
        content_hash: format!("h{i}"),
        chunks: vec![format!("c{i}")],
        extracted_by: None,
        confirmations: Vec::new(),
        updated_at: i as i64,
    };
    let written: Vec<_> = (0..20).map(source).collect();
    kb.put_source_records(&written).await.unwrap();
    let reads: Vec<_> = (0..48)
        .map(|n| {
            let (kb, i) = (kb.clone(), n % 24);
            tokio::spawn(async move {
                let key = kbq_ingest::provenance::SourceKey::new("notes", format!("n{i}.md"));
                (i, kb.source_record(&key).await.unwrap())
            })
        })
        .collect();
    for r in reads {
        let (i, read) = r.await.unwrap();
        let expected = (i < 20).then(|| source(i));
        assert_eq!(read, expected, "source n{i}.md");
    }
}
