//! The RAG endpoints on the fixture: semantic, keyword and hybrid search, filters, scores and
//! request rules.

use serde_json::{Value, json};

use crate::support::{TestServer, assert_error};

fn titles(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["title"].as_str().unwrap().to_string())
        .collect()
}

fn scores_descend(body: &Value) -> bool {
    let s: Vec<f64> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["score"].as_f64().unwrap())
        .collect();
    s.windows(2).all(|w| w[0] >= w[1])
}

#[tokio::test]
async fn semantic_search_ranks_by_cosine_and_carries_document_fields() {
    let t = TestServer::start().await;
    let (status, body) = t
        .post(
            "/v1/rag/semantic",
            json!({"query": "a mechanical computer designed by Babbage"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["method"], "semantic");
    assert_eq!(body["total"], 3);
    assert_eq!(titles(&body)[0], "The Engine");
    assert!(scores_descend(&body));
    let top = &body["results"][0];
    let fields: Vec<&str> = top
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for f in [
        "id",
        "title",
        "content",
        "source",
        "source_id",
        "content_type",
        "url",
        "entity_name",
        "score",
        "scores",
        "relationship",
        "related_entity",
    ] {
        assert!(fields.contains(&f), "missing {f} in {top}");
    }
    assert!(top["id"].as_str().unwrap().starts_with("document:"));
    assert_eq!(top["url"], "https://example.org/engine");
    assert_eq!(top["entity_name"], "Engine");
    assert_eq!(top["scores"]["semantic"], top["score"]);
    assert_eq!(top["scores"]["keyword"], Value::Null);
    assert_eq!(top["relationship"], Value::Null);

    let (_, body) = t
        .post("/v1/rag/semantic", json!({"query": "Ada", "limit": 1}))
        .await;
    assert_eq!(body["total"], 1);
    t.stop().await;
}

#[tokio::test]
async fn keyword_search_matches_words_and_filters_narrow_every_method() {
    let t = TestServer::start().await;
    let (status, body) = t
        .post("/v1/rag/keyword", json!({"query": "mechanical"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(titles(&body), vec!["The Engine"]);
    assert!(body["results"][0]["scores"]["keyword"].as_f64().unwrap() > 0.0);
    assert_eq!(body["results"][0]["scores"]["semantic"], Value::Null);

    // "Ada" appears in two documents; a filter on the entity keeps one.
    let (_, body) = t.post("/v1/rag/keyword", json!({"query": "Ada"})).await;
    assert_eq!(body["total"], 2, "{body}");
    for path in ["/v1/rag/semantic", "/v1/rag/keyword", "/v1/rag/hybrid"] {
        let (status, body) = t
            .post(
                path,
                json!({"query": "Ada", "filters": {"entity_name": "London"}}),
            )
            .await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(titles(&body), vec!["London"], "{path}");
        let (_, body) = t
            .post(
                path,
                json!({"query": "Ada", "filters": {"source": "elsewhere"}}),
            )
            .await;
        assert_eq!(body["total"], 0, "{path}: {body}");
        assert_eq!(body["results"], json!([]));
        let (_, body) = t
            .post(
                path,
                json!({"query": "Ada", "filters": {"source": "t", "content_type": "text/plain"}}),
            )
            .await;
        let want = if path.ends_with("keyword") { 2 } else { 3 };
        assert_eq!(body["total"], want, "{path}: {body}");
    }
    // Nothing to match: no words.
    let (status, body) = t.post("/v1/rag/keyword", json!({"query": "; --"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["total"], 0);
    t.stop().await;
}

#[tokio::test]
async fn hybrid_search_fuses_methods_and_expands_around_named_entities() {
    let t = TestServer::start().await;
    let (status, body) = t
        .post("/v1/rag/hybrid", json!({"query": "Who did Babbage know?"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["method"], "hybrid");
    assert_eq!(body["entities"], json!(["Babbage"]));
    assert!(scores_descend(&body));
    let results = body["results"].as_array().unwrap();
    // Babbage has no document; one hop reaches Ada (knows) and the Engine (designed).
    let ada = results
        .iter()
        .find(|r| r["title"] == "Ada Lovelace")
        .unwrap();
    assert_eq!(ada["relationship"], "knows");
    assert_eq!(ada["related_entity"], "Ada");
    assert!(ada["scores"]["graph"].as_f64().unwrap() > 0.0);
    let engine = results.iter().find(|r| r["title"] == "The Engine").unwrap();
    assert_eq!(engine["relationship"], "designed");
    // Found by semantic and keyword search ("Babbage" is in its text) and by the graph.
    assert!(engine["scores"]["keyword"].as_f64().is_some());
    assert!(engine["scores"]["semantic"].as_f64().is_some());
    assert!(engine["scores"]["graph"].as_f64().is_some());
    // The fused score is the relative score fusion: each method's scores scaled to 0..1
    // over its list (the fixture's three documents are all in each list they reach), with
    // the built-in embedder's weights, semantic 0.3, keyword 1, graph 0.1.
    for r in results {
        let mut want = 0.0;
        for (m, weight) in [("semantic", 0.3), ("keyword", 1.0), ("graph", 0.1)] {
            let Some(s) = r["scores"][m].as_f64() else {
                continue;
            };
            let all: Vec<f64> = results
                .iter()
                .filter_map(|x| x["scores"][m].as_f64())
                .collect();
            let (lo, hi) = all
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
            want += weight * if hi > lo { (s - lo) / (hi - lo) } else { 1.0 };
        }
        let fused = r["score"].as_f64().unwrap();
        assert!(
            (fused - want).abs() < 1e-6,
            "{fused} against {want}: {body}"
        );
    }

    // An entity's own document is marked `self`; depth 0 turns the expansion off.
    let (_, body) = t.post("/v1/rag/hybrid", json!({"query": "London"})).await;
    let london = &body["results"][0];
    assert_eq!(london["title"], "London");
    assert_eq!(london["relationship"], "self");
    assert_eq!(london["related_entity"], Value::Null);
    let (_, body) = t
        .post(
            "/v1/rag/hybrid",
            json!({"query": "Who did Babbage know?", "graph_depth": 0}),
        )
        .await;
    assert_eq!(body["entities"], json!([]));
    assert!(
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["scores"]["graph"].is_null() && r["relationship"].is_null()),
        "{body}"
    );
    t.stop().await;
}

#[tokio::test]
async fn rag_requests_are_checked_field_by_field() {
    let t = TestServer::start().await;
    let long = "x".repeat(4097);
    let cases: Vec<(&str, Value, &str)> = vec![
        ("/v1/rag/semantic", json!({}), "query"),
        ("/v1/rag/semantic", json!({"query": 7}), "query"),
        ("/v1/rag/semantic", json!({"query": "  "}), "query"),
        ("/v1/rag/keyword", json!({"query": long}), "query"),
        (
            "/v1/rag/semantic",
            json!({"query": "a", "limit": 0}),
            "limit",
        ),
        (
            "/v1/rag/keyword",
            json!({"query": "a", "limit": 101}),
            "limit",
        ),
        (
            "/v1/rag/hybrid",
            json!({"query": "a", "limit": "5"}),
            "limit",
        ),
        (
            "/v1/rag/semantic",
            json!({"query": "a", "graph_depth": 1}),
            "graph_depth",
        ),
        (
            "/v1/rag/hybrid",
            json!({"query": "a", "graph_depth": 4}),
            "graph_depth",
        ),
        (
            "/v1/rag/hybrid",
            json!({"query": "a", "graph_depth": -1}),
            "graph_depth",
        ),
        (
            "/v1/rag/hybrid",
            json!({"query": "a", "filters": {"source": ""}}),
            "filters.source",
        ),
        (
            "/v1/rag/hybrid",
            json!({"query": "a", "filters": {"colour": "red"}}),
            "filters.colour",
        ),
        (
            "/v1/rag/semantic",
            json!({"query": "a", "sort": "asc"}),
            "sort",
        ),
    ];
    for (path, body, field) in cases {
        let (status, err) = t.post(path, body.clone()).await;
        assert_eq!(status, 400, "{path} {body}: {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    // Edges of the ranges are accepted.
    for (path, body) in [
        ("/v1/rag/semantic", json!({"query": "a", "limit": 1})),
        ("/v1/rag/keyword", json!({"query": "a", "limit": 100})),
        ("/v1/rag/hybrid", json!({"query": "a", "graph_depth": 0})),
        ("/v1/rag/hybrid", json!({"query": "a", "graph_depth": 3})),
        (
            "/v1/rag/hybrid",
            json!({"query": "x'; DELETE document; --"}),
        ),
    ] {
        let (status, err) = t.post(path, body.clone()).await;
        assert_eq!(status, 200, "{path} {body}: {err}");
    }
    let (_, body) = t.post("/v1/rag/keyword", json!({"query": "engine"})).await;
    assert_eq!(
        body["total"], 2,
        "injection-looking queries changed nothing: {body}"
    );
    t.stop().await;
}
