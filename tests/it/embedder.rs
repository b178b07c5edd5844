//! The OpenAI-compatible embedder (against the scripted server's `/v1/embeddings`) and
//! `kbq reindex`, which moves a store from one embedder to another.

use std::sync::Arc;

use kbq::config::{Config, EmbedderKind};
use kbq::versions::SystemClock;
use kbq_actors::GraphLane;
use serde_json::{Value, json};

use crate::scripted::{EMBEDDING_DIMENSION, ScriptedLlm};
use crate::support::{TestServer, assert_error, kbq_cli, test_config};

const MODEL: &str = "scripted-embed";

fn with_openai_embedder(mut config: Config, llm: &ScriptedLlm) -> Config {
    config.embedder.kind = EmbedderKind::Openai;
    config.embedder.base_url = Some(llm.base_url());
    config.embedder.model = Some(MODEL.into());
    config.embedder.dimension = EMBEDDING_DIMENSION;
    config.embedder.send_dimensions = true;
    config.embedder.batch_size = 2;
    config
}

fn norm(v: &Value) -> f64 {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap().powi(2))
        .sum::<f64>()
        .sqrt()
}

#[tokio::test]
async fn an_openai_compatible_embedder_serves_documents_queries_and_the_api() {
    let llm = ScriptedLlm::start().await;
    let config = with_openai_embedder(test_config(), &llm);
    // The fixture's three documents are embedded upstream, two inputs per request.
    let t = TestServer::with_fixture(config).await;
    let sent = llm.embedding_requests();
    assert!(!sent.is_empty());
    for r in &sent {
        assert_eq!(r["model"], MODEL);
        assert_eq!(r["dimensions"], EMBEDDING_DIMENSION);
        assert!(r["input"].as_array().unwrap().len() <= 2, "{r}");
    }

    let (status, body) = t
        .post(
            "/v1/embeddings",
            json!({"model": MODEL, "input": ["zebra quantum harp", "zebra"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], MODEL);
    for d in body["data"].as_array().unwrap() {
        assert_eq!(
            d["embedding"].as_array().unwrap().len(),
            EMBEDDING_DIMENSION
        );
        assert!((norm(&d["embedding"]) - 1.0).abs() < 1e-4, "kbq normalises");
    }
    // This model can shorten its vectors, so `dimensions` passes through; up to the configured size.
    let (status, body) = t
        .post(
            "/v1/embeddings",
            json!({"model": MODEL, "input": "zebra", "dimensions": 8}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(llm.embedding_requests().last().unwrap()["dimensions"], 8);
    let (status, err) = t
        .post(
            "/v1/embeddings",
            json!({"model": MODEL, "input": "zebra", "dimensions": 64}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("dimensions"));
    let (status, err) = t
        .post(
            "/v1/embeddings",
            json!({"model": "kbq-hashing-v1", "input": "zebra"}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("model"));
    let (_, models) = t.get("/v1/models").await;
    assert_eq!(
        models["data"].as_array().unwrap().last().unwrap()["id"],
        MODEL
    );

    // A document written now is embedded upstream and found by its own words.
    let (status, body) = t
        .post(
            "/data/v1/ingest/documents",
            json!([{"title": "Zebra", "content": "quantum harp", "source": "t", "source_id": "z",
                    "content_type": "text/plain", "url": null, "entity_name": null}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = t
        .post(
            "/v1/rag/semantic",
            json!({"query": "zebra quantum harp", "limit": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["source_id"], "z", "{body}");
    assert!(body["results"][0]["score"].as_f64().unwrap() > 0.99);

    // Graph documents embed the start entity's text upstream, so the documents lane's
    // factory answers them, not a graph actor beside the HTTP worker (kbq_actors::local).
    kbq_actors::local::serve_graph_on_this_thread();
    let graph = &t.server().graph;
    assert!(graph.local_actor_here(GraphLane::Documents).is_none());
    assert!(graph.local_actor_here(GraphLane::Lookup).is_some());
    let before = llm.embedding_requests().len();
    let (status, body) = t
        .post(
            "/data/v1/query/graph/documents",
            json!({"entity_name": "Ada", "max_depth": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(!body["results"].as_array().unwrap().is_empty(), "{body}");
    assert_eq!(llm.embedding_requests().len(), before + 1);

    // An embedder that is down is retried (twice by default), then the request gets 503.
    llm.set_down(true);
    let before = llm.embedding_requests().len();
    let (status, err) = t
        .post("/v1/embeddings", json!({"model": MODEL, "input": "zebra"}))
        .await;
    assert_eq!(status, 503, "{err}");
    assert_error(&err, "service_unavailable", None);
    assert_eq!(llm.embedding_requests().len(), before + 3);
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn reindex_moves_a_store_to_another_embedder() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let fixture = dir.path().join("in.ndjson");
    std::fs::write(&fixture, crate::support::FIXTURE).unwrap();
    let empty = dir.path().join("empty.ndjson");
    std::fs::write(&empty, "").unwrap();
    let openai = dir.path().join("openai.toml");
    std::fs::write(
        &openai,
        format!(
            "[embedder]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"{MODEL}\"\ndimension = {EMBEDDING_DIMENSION}\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let openai = openai.to_str().unwrap();

    // Written with the built-in embedder.
    let out = kbq_cli(&["import", "--store", &store, fixture.to_str().unwrap()]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Another embedder may not use the store before it is reindexed.
    let out = kbq_cli(&[
        "import",
        "--config",
        openai,
        "--store",
        &store,
        empty.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kbq-hashing-v1") && err.contains("kbq reindex"),
        "{err}"
    );
    assert!(llm.embedding_requests().is_empty());

    let out = kbq_cli(&["reindex", "--config", openai, "--store", &store]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "embedded 3 documents with {MODEL} ({EMBEDDING_DIMENSION} dimensions)"
        )),
        "{stdout}"
    );
    let inputs: usize = llm
        .embedding_requests()
        .iter()
        .map(|r| r["input"].as_array().unwrap().len())
        .sum();
    assert_eq!(inputs, 3);

    // A workspace keeps the embedder that wrote it: written with the built-in one (the
    // command reads only the registry of `default`, whose embedder now differs), refused to
    // the new one until `kbq reindex --workspace` embeds its documents again.
    let out = kbq_cli(&["workspaces", "--store", &store, "create", "team"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fixture = fixture.to_str().unwrap();
    let out = kbq_cli(&["import", "--store", &store, "--workspace", "team", fixture]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let into_team = [
        "import",
        "--config",
        openai,
        "--store",
        &store,
        "--workspace",
        "team",
    ];
    let empty = empty.to_str().unwrap();
    let out = kbq_cli(&[&into_team[..], &[empty]].concat()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kbq reindex"));
    let out = kbq_cli(&[
        "reindex",
        "--config",
        openai,
        "--store",
        &store,
        "--workspace",
        "team",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("embedded 3 documents"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kbq_cli(&[&into_team[..], &[empty]].concat()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let empty = std::path::Path::new(empty);

    // The store now refuses the old embedder, and serves with the new one.
    let out = kbq_cli(&["import", "--store", &store, empty.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(MODEL), "{err}");
    let mut config = with_openai_embedder(test_config(), &llm);
    config.store.url = store.clone();
    // The database the CLI wrote to (remote mode gives each test config a database of its own).
    config.store.database = kbq::config::Config::default().store.database;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let (status, body) = t
        .post(
            "/v1/rag/semantic",
            json!({"query": "Ada wrote the first published program", "limit": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["source_id"], "ada", "{body}");
    t.stop().await;
    llm.stop().await;
}

/// A model that embeds queries and passages differently (e5) is told which it is given: by
/// `input_type`, by a prefix, or both, as configured; `/v1/embeddings` embeds as documents.
#[tokio::test]
async fn documents_and_queries_are_sent_as_the_model_asks() {
    let llm = ScriptedLlm::start().await;
    let mut config = with_openai_embedder(test_config(), &llm);
    config.embedder.document_input_type = Some("passage".into());
    config.embedder.query_input_type = Some("query".into());
    config.embedder.document_prefix = "passage: ".into();
    config.embedder.query_prefix = "query: ".into();
    let t = TestServer::with_fixture(config).await;
    let sent = llm.embedding_requests();
    assert!(!sent.is_empty());
    for r in &sent {
        assert_eq!(r["input_type"], "passage", "{r}");
        for input in r["input"].as_array().unwrap() {
            assert!(input.as_str().unwrap().starts_with("passage: "), "{r}");
        }
    }
    let (status, body) = t
        .post(
            "/v1/rag/semantic",
            json!({"query": "zebra quantum harp", "limit": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let last = llm.embedding_requests().last().unwrap().clone();
    assert_eq!(last["input_type"], "query");
    assert_eq!(last["input"], json!(["query: zebra quantum harp"]));
    let (status, _) = t
        .post("/v1/embeddings", json!({"model": MODEL, "input": "zebra"}))
        .await;
    assert_eq!(status, 200);
    let last = llm.embedding_requests().last().unwrap().clone();
    assert_eq!(
        (&last["input_type"], &last["input"]),
        (&json!("passage"), &json!(["passage: zebra"]))
    );
    t.stop().await;
    llm.stop().await;
}
