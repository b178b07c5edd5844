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

/// A record that breaks its schema or rules refuses the whole array with a 400 naming the
/// element and field, and nothing of it is written.
#[tokio::test]
async fn a_record_against_its_schema_refuses_the_whole_batch() {
    let t = TestServer::start().await;
    let good = json!({"name": "Hopper Lab", "entity_type": "organization"});
    for (path, bad, field) in [
        (
            "/data/v1/ingest/entities",
            json!({"name": "  ", "entity_type": "person"}),
            "[1].name",
        ),
        (
            "/data/v1/ingest/entities",
            json!({"name": "No Type"}),
            "[1].entity_type",
        ),
        (
            "/data/v1/ingest/entities",
            json!({"name": "X", "entity_type": "t", "colour": "red"}),
            "[1].colour",
        ),
        (
            "/data/v1/ingest/entities",
            json!({"name": "é".repeat(513), "entity_type": "t"}),
            "[1].name",
        ),
        (
            "/data/v1/ingest/relationships",
            json!({"source_name": "A", "target_name": "B", "relationship_type": "a\u{7}b"}),
            "[1].relationship_type",
        ),
        (
            "/data/v1/ingest/documents",
            json!({"title": "t", "content": " ", "source": "s", "source_id": "1", "content_type": "text/plain"}),
            "[1].content",
        ),
    ] {
        let first = if path.ends_with("entities") {
            good.clone()
        } else if path.ends_with("relationships") {
            json!({"source_name": "Ada", "target_name": "Babbage", "relationship_type": "wrote_to"})
        } else {
            json!({"title": "t", "content": "c", "source": "s", "source_id": "0", "content_type": "text/plain"})
        };
        let (status, err) = t.post(path, json!([first, bad])).await;
        assert_eq!(status, 400, "{path} {bad}: {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    let (_, found) = t.get("/data/v1/query/graph/entity/Hopper%20Lab").await;
    assert_eq!(found, Value::Null, "a refused batch writes nothing");
    // 512 characters is a name, however many bytes they take.
    let long = "é".repeat(512);
    let (status, body) = t
        .post(
            "/data/v1/ingest/entities",
            json!([{"name": long, "entity_type": "t"}]),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &body["written"]),
        (200, &json!(1)),
        "{body}"
    );
    t.stop().await;
}

/// Records by their schema are written; those that name what does not exist are reported by
/// their position, and the rest written.
#[tokio::test]
async fn batches_write_the_records_and_report_what_the_data_refuses() {
    let t = TestServer::start().await;
    let (status, body) = t
        .post(
            "/data/v1/ingest/entities",
            json!([
                {"name": "Hopper Lab", "entity_type": "organization", "properties": {"founded": 1952}},
                {"name": "Lovelace Prize", "entity_type": "award"},
                {"name": "Hopper Lab", "entity_type": "place"}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["received"], 3);
    assert_eq!(body["written"], 2, "a repeated name counts once: {body}");
    assert_eq!(failed_indexes(&body), Vec::<u64>::new());
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
                {"title": "Orphan", "content": "Linked to nothing that exists.", "source": "t", "source_id": "orphan", "content_type": "text/plain", "entity_name": "Nobody"}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 1, "{body}");
    assert_eq!(failed_indexes(&body), vec![1]);
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

async fn post_ndjson(t: &TestServer, body: &'static str) -> (u16, Value) {
    t.post_bytes("/data/v1/ingest/ndjson", "application/x-ndjson", body)
        .await
}

#[tokio::test]
async fn ndjson_shares_the_import_path_and_is_idempotent() {
    let t = TestServer::start_with(test_config(), Arc::new(SystemClock), false).await;
    let body = "{\"kind\":\"entity\",\"name\":\"A\",\"entity_type\":\"t\"}\n\
                \n\
                {\"kind\":\"relationship\",\"source_name\":\"A\",\"target_name\":\"B\",\"relationship_type\":\"r\"}\n\
                {\"kind\":\"entity\",\"name\":\"B\",\"entity_type\":\"t\"}\r\n\
                {\"kind\":\"relationship\",\"source_name\":\"A\",\"target_name\":\"Nowhere\",\"relationship_type\":\"r\"}\n";
    let (status, first) = post_ndjson(&t, body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["records"], 4);
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
    assert_eq!(lines, vec![5], "the missing end, by its line");
    let (_, second) = post_ndjson(&t, body).await;
    assert_eq!(second, first);
    let (_, walk) = t
        .post("/data/v1/query/graph", json!({"entity_name": "A"}))
        .await;
    assert_eq!(walk["total_entities"], 2);
    assert_eq!(walk["total_relationships"], 1);
    t.stop().await;
}

/// A line against the import format refuses the whole body, naming the line and field, and
/// writes nothing.
#[tokio::test]
async fn an_ndjson_line_against_its_schema_refuses_the_whole_body() {
    let t = TestServer::start_with(test_config(), Arc::new(SystemClock), false).await;
    const GOOD: &str = "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n";
    for (body, field) in [
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n",
                "not json\n"
            ),
            "line 2",
        ),
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n\n",
                "{\"kind\":\"widget\"}\n"
            ),
            "line 3.kind",
        ),
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n",
                "{\"name\":\"D\"}\n"
            ),
            "line 2.kind",
        ),
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n",
                "{\"kind\":\"entity\",\"name\":\"D\"}\n"
            ),
            "line 2.entity_type",
        ),
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n",
                "{\"kind\":\"entity\",\"name\":\" \",\"entity_type\":\"t\"}\n"
            ),
            "line 2.name",
        ),
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n",
                "{\"kind\":\"entity\",\"name\":\"D\",\"entity_type\":\"t\",\"x\":1}\n"
            ),
            "line 2.x",
        ),
        (
            concat!(
                "{\"kind\":\"entity\",\"name\":\"C\",\"entity_type\":\"t\"}\n",
                "[1]\n"
            ),
            "line 2",
        ),
        ("\n \n", "body"),
    ] {
        let (status, err) = post_ndjson(&t, body).await;
        assert_eq!(status, 400, "{body:?}: {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    let (_, found) = t.get("/data/v1/query/graph/entity/C").await;
    assert_eq!(found, Value::Null, "a refused body writes nothing");
    let (status, _) = post_ndjson(&t, GOOD).await;
    assert_eq!(status, 200);
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
    let t = TestServer::with_fixture(config).await;
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
