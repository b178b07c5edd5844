//! Ingestion: JSON-array upserts and NDJSON, per-record failures, indexes current at once,
//! idempotency, and the write scope.

use std::sync::Arc;

use kbq::auth::KeyEntry;
use kbq::versions::SystemClock;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestServer, assert_error, read, test_config};

fn failed_indexes(body: &Value) -> Vec<u64> {
    body["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["index"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn batches_write_the_valid_records_and_report_the_rest_by_index() {
    let t = TestServer::start().await;
    let (status, body) = t
        .post(
            "/data/v1/ingest/entities",
            json!([
                {"name": "Hopper Lab", "entity_type": "organization", "properties": {"founded": 1952}},
                {"name": "  ", "entity_type": "person"},
                {"name": "Lovelace Prize", "entity_type": "award"},
                {"name": "No Type"},
                {"name": "Hopper Lab", "entity_type": "place"}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["received"], 5);
    assert_eq!(body["written"], 2, "a repeated name counts once: {body}");
    assert_eq!(failed_indexes(&body), vec![1, 3]);
    assert!(
        body["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("name")
    );
    assert!(
        body["failures"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("entity_type")
    );
    // The last of two records with one name wins, and the graph index has it at once.
    let (_, e) = t.get("/data/v1/query/graph/entity/Hopper%20Lab").await;
    assert_eq!(e["entity_type"], "place");

    let (status, body) = t
        .post(
            "/data/v1/ingest/relationships",
            json!([
                {"source_name": "Grace Hopper", "target_name": "Hopper Lab", "relationship_type": "founded"},
                {"source_name": "Grace Hopper", "target_name": "Nowhere", "relationship_type": "visited"},
                {"source_name": "Ada", "target_name": "Lovelace Prize", "relationship_type": "inspired", "properties": {"since": 2001}}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["received"].as_u64(), body["written"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(failed_indexes(&body), vec![1]);
    assert!(
        body["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("Nowhere")
    );
    let (_, walk) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "Grace Hopper", "direction": "out", "depth": 1}),
        )
        .await;
    let names: Vec<&str> = walk["entities_found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"Hopper Lab"), "{walk}");

    let (status, body) = t
        .post(
            "/data/v1/ingest/documents",
            json!([
                {"title": "Hopper Lab", "content": "A laboratory for compiler research founded by Grace Hopper.", "source": "t", "source_id": "hopper-lab", "content_type": "text/plain", "url": null, "entity_name": "Hopper Lab"},
                {"title": "Orphan", "content": "Linked to nothing that exists.", "source": "t", "source_id": "orphan", "content_type": "text/plain", "entity_name": "Nobody"},
                {"title": "Empty", "content": " ", "source": "t", "source_id": "empty", "content_type": "text/plain"}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 1, "{body}");
    assert_eq!(failed_indexes(&body), vec![1, 2]);
    // Searchable at once, by vector and by keyword.
    for path in ["/v1/rag/semantic", "/v1/rag/keyword"] {
        let (_, found) = t
            .post(
                path,
                json!({"query": "compiler research laboratory", "limit": 1}),
            )
            .await;
        assert_eq!(
            found["results"][0]["title"], "Hopper Lab",
            "{path}: {found}"
        );
    }
    t.stop().await;
}

#[tokio::test]
async fn ndjson_shares_the_import_path_and_is_idempotent() {
    let t = TestServer::start_with(test_config(), Arc::new(SystemClock), false).await;
    let body = "{\"kind\":\"entity\",\"name\":\"A\",\"entity_type\":\"t\"}\n\
                \n\
                {\"kind\":\"relationship\",\"source_name\":\"A\",\"target_name\":\"B\",\"relationship_type\":\"r\"}\n\
                {\"kind\":\"entity\",\"name\":\"B\",\"entity_type\":\"t\"}\n\
                not json\n\
                {\"kind\":\"widget\"}\n";
    let post = || async {
        let res = t
            .http
            .post(t.url("/data/v1/ingest/ndjson"))
            .bearer_auth(crate::support::KEY)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        read(res).await
    };
    let (status, _, first) = post().await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["records"], 5);
    assert_eq!(
        (first["entities"].as_u64(), first["relationships"].as_u64()),
        (Some(2), Some(1))
    );
    let lines: Vec<u64> = first["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![5, 6]);
    let (_, _, second) = post().await;
    assert_eq!(second, first);
    let (_, walk) = t
        .post("/data/v1/query/graph", json!({"entity_name": "A"}))
        .await;
    assert_eq!(walk["total_entities"], 2);
    assert_eq!(walk["total_relationships"], 1);
    t.stop().await;
}

#[tokio::test]
async fn ingestion_checks_the_body_and_needs_the_write_scope() {
    let mut config = test_config();
    config.auth.keys.push(KeyEntry {
        name: "reader".into(),
        sha256: hex::encode(kbq::auth::hash("reader-key")),
        scopes: Some(vec!["read".into()]),
    });
    let t = TestServer::start_with(config, Arc::new(SystemClock), true).await;
    for (body, why) in [
        (
            json!({"name": "A", "entity_type": "t"}),
            "an object, not an array",
        ),
        (json!([]), "an empty array"),
    ] {
        let (status, err) = t.post("/data/v1/ingest/entities", body).await;
        assert_eq!(status, 400, "{why}: {err}");
        assert_error(&err, "invalid_request", Some("body"));
    }
    let res = t
        .http
        .post(t.url("/data/v1/ingest/entities"))
        .bearer_auth(crate::support::KEY)
        .body("[{")
        .send()
        .await
        .unwrap();
    let (status, _, err) = read(res).await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("body"));

    let res = t
        .http
        .post(t.url("/data/v1/ingest/entities"))
        .bearer_auth("reader-key")
        .json(&json!([{"name": "Sneaky", "entity_type": "t"}]))
        .send()
        .await
        .unwrap();
    let (status, _, err) = read(res).await;
    assert_eq!(status, 403, "{err}");
    assert_error(&err, "insufficient_scope", None);
    let (_, found) = t.get("/data/v1/query/graph/entity/Sneaky").await;
    assert_eq!(found, Value::Null, "a refused write changes nothing");
    t.stop().await;
}

#[tokio::test]
async fn deleting_an_entity_removes_its_edges_and_unlinks_its_documents() {
    let t = TestServer::start().await;
    let server = &t;
    let delete = |path: String| async move { server.call(Method::DELETE, &path, None).await };
    let (status, _, body) = delete("/data/v1/ingest/entities/Babbage".into()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"deleted": true, "relationships": 3, "documents_unlinked": 0})
    );
    let (_, found) = t.get("/data/v1/query/graph/entity/Babbage").await;
    assert_eq!(found, Value::Null);
    let (_, walk) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "Ada", "depth": 3}),
        )
        .await;
    let names: Vec<&str> = walk["entities_found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"Babbage"), "{walk}");
    assert!(
        names.contains(&"Engine"),
        "still reached through London: {walk}"
    );

    let (_, _, body) = delete("/data/v1/ingest/entities/London".into()).await;
    assert_eq!(
        body,
        json!({"deleted": true, "relationships": 2, "documents_unlinked": 1})
    );
    // The document stays, unlinked, and filters see the change at once.
    let (_, found) = t
        .post(
            "/v1/rag/semantic",
            json!({"query": "city", "filters": {"entity_name": "London"}}),
        )
        .await;
    assert_eq!(found["total"], 0, "{found}");
    let (_, found) = t.post("/v1/rag/keyword", json!({"query": "city"})).await;
    assert_eq!(found["results"][0]["title"], "London");
    assert_eq!(found["results"][0]["entity_name"], Value::Null);

    let (_, _, body) = delete("/data/v1/ingest/entities/London".into()).await;
    assert_eq!(
        body,
        json!({"deleted": false, "relationships": 0, "documents_unlinked": 0})
    );
    let (_, _, body) = delete("/data/v1/ingest/entities/OS%2F360".into()).await;
    assert_eq!(body["deleted"], true);
    let (status, _, err) = delete("/data/v1/ingest/entities/%20".into()).await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("name"));
    t.stop().await;
}

#[tokio::test]
async fn deleting_a_document_removes_it_from_every_search() {
    let t = TestServer::start().await;
    let (_, found) = t
        .post("/v1/rag/keyword", json!({"query": "mechanical"}))
        .await;
    let id = found["results"][0]["id"].as_str().unwrap().to_string();
    let server = &t;
    let delete = |id: String| async move {
        let path = format!("/data/v1/ingest/documents/{id}");
        server.call(Method::DELETE, &path, None).await
    };
    let (status, _, body) = delete(id.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"deleted": true}));
    let (_, body) = t
        .post("/v1/rag/keyword", json!({"query": "mechanical"}))
        .await;
    assert_eq!(body["total"], 0);
    let (_, body) = t
        .post(
            "/v1/rag/semantic",
            json!({"query": "A mechanical computer designed by Babbage", "limit": 100}),
        )
        .await;
    assert!(
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"] != id.as_str()),
        "{body}"
    );
    let (_, docs) = t
        .post(
            "/data/v1/query/graph/documents",
            json!({"entity_name": "Engine", "max_depth": 1}),
        )
        .await;
    assert!(
        docs["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"] != id.as_str()),
        "{docs}"
    );
    let (_, _, body) = delete(id).await;
    assert_eq!(body, json!({"deleted": false}));
    let (status, _, err) = delete("document:nothex".into()).await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("id"));
    t.stop().await;
}
