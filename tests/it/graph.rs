//! The four graph endpoints on the fixture graph, with known answers.

use serde_json::{Value, json};

use crate::support::{TestServer, assert_error, names};

const TRAVERSE: &str = "/data/v1/query/graph";
const SEARCH: &str = "/data/v1/query/graph/search";
const DOCUMENTS: &str = "/data/v1/query/graph/documents";

fn depths(entities: &Value) -> Vec<(String, u64)> {
    entities
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["depth"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn edges(rels: &Value) -> Vec<String> {
    rels.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}-{}->{}",
                r["source_name"].as_str().unwrap(),
                r["relationship_type"].as_str().unwrap(),
                r["target_name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn traverse_with_defaults_walks_both_ways_two_hops() {
    let t = TestServer::start().await;
    let (status, body) = t.post(TRAVERSE, json!({"entity_name": "Ada"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entity_name"], "Ada");
    assert_eq!(
        depths(&body["entities_found"]),
        vec![
            ("Ada".into(), 0),
            ("Babbage".into(), 1),
            ("London".into(), 1),
            ("Zed".into(), 1),
            ("Engine".into(), 2)
        ]
    );
    assert_eq!(
        edges(&body["relationships"]),
        vec![
            "Ada-knows->Babbage",
            "Babbage-knows->Ada",
            "London-home_of->Ada",
            "Zed-knows->Ada",
            "Babbage-designed->Engine",
            "Engine-located_in->London",
        ]
    );
    assert_eq!(body["total_entities"], 5);
    assert_eq!(body["total_relationships"], 6);
    assert_eq!(body["truncated"], false);
    let ada = &body["entities_found"][0];
    assert_eq!(ada["entity_type"], "person");
    assert_eq!(ada["properties"], json!({"born": 1815}));
    assert!(ada["id"].as_str().unwrap().starts_with("entity:"));
    assert_eq!(
        body["relationships"][4]["properties"],
        json!({"year": 1837})
    );
    t.stop().await;
}

#[tokio::test]
async fn each_direction_and_type_filter_has_its_answer() {
    let t = TestServer::start().await;
    let walk = |body: Value| async { t.post(TRAVERSE, body).await };
    let (_, out) = walk(json!({"entity_name": "Ada", "direction": "out", "depth": 1})).await;
    assert_eq!(names(&out["entities_found"]), vec!["Ada", "Babbage"]);
    let (_, inc) = walk(json!({"entity_name": "Ada", "direction": "in", "depth": 1})).await;
    assert_eq!(
        names(&inc["entities_found"]),
        vec!["Ada", "Babbage", "London", "Zed"]
    );
    assert_eq!(
        edges(&inc["relationships"]),
        vec![
            "Babbage-knows->Ada",
            "London-home_of->Ada",
            "Zed-knows->Ada"
        ]
    );
    let (_, both) = walk(json!({"entity_name": "Ada", "direction": "both", "depth": 1})).await;
    assert_eq!(
        names(&both["entities_found"]),
        vec!["Ada", "Babbage", "London", "Zed"]
    );
    // The out-cycle Ada -> Babbage -> Engine -> London -> Ada visits each entity once.
    let (_, cycle) = walk(json!({"entity_name": "Ada", "direction": "out", "depth": 5})).await;
    assert_eq!(
        depths(&cycle["entities_found"]),
        vec![
            ("Ada".into(), 0),
            ("Babbage".into(), 1),
            ("Engine".into(), 2),
            ("London".into(), 3)
        ]
    );
    assert!(edges(&cycle["relationships"]).contains(&"London-home_of->Ada".to_string()));
    let (_, typed) =
        walk(json!({"entity_name": "Babbage", "depth": 5, "relationship_types": ["designed", "located_in"]})).await;
    assert_eq!(
        names(&typed["entities_found"]),
        vec!["Babbage", "Engine", "London"]
    );
    assert_eq!(
        edges(&typed["relationships"]),
        vec!["Babbage-designed->Engine", "Engine-located_in->London"]
    );
    let (_, none) =
        walk(json!({"entity_name": "Ada", "relationship_types": ["no_such_type"]})).await;
    assert_eq!(names(&none["entities_found"]), vec!["Ada"]);
    t.stop().await;
}

#[tokio::test]
async fn traverse_ranges_are_enforced_at_each_edge() {
    let t = TestServer::start().await;
    for (field, value, ok) in [
        ("depth", 0, false),
        ("depth", 1, true),
        ("depth", 5, true),
        ("depth", 6, false),
        ("depth", -1, false),
        ("limit", 0, false),
        ("limit", 1, true),
        ("limit", 200, true),
        ("limit", 201, false),
    ] {
        let (status, body) = t
            .post(TRAVERSE, json!({"entity_name": "Ada", field: value}))
            .await;
        if ok {
            assert_eq!(status, 200, "{field}={value}: {body}");
        } else {
            assert_eq!(status, 400, "{field}={value}: {body}");
            assert_error(&body, "invalid_request", Some(field));
            let rule = if field == "depth" {
                "depth must be between 1 and 5"
            } else {
                "limit must be between 1 and 200"
            };
            assert_eq!(body["error"]["message"], rule);
        }
    }
    let (_, one) = t
        .post(TRAVERSE, json!({"entity_name": "Ada", "limit": 1}))
        .await;
    assert_eq!(names(&one["entities_found"]), vec!["Ada"]);
    assert_eq!(one["truncated"], true);
    let (_, three) = t
        .post(TRAVERSE, json!({"entity_name": "Ada", "limit": 3}))
        .await;
    assert_eq!(
        names(&three["entities_found"]),
        vec!["Ada", "Babbage", "London"]
    );
    assert_eq!(three["total_entities"], 3);
    t.stop().await;
}

#[tokio::test]
async fn unknown_start_entity_is_an_empty_answer() {
    let t = TestServer::start().await;
    let (status, body) = t.post(TRAVERSE, json!({"entity_name": "Nobody"})).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"entity_name": "Nobody", "entities_found": [], "relationships": [], "total_entities": 0, "total_relationships": 0, "truncated": false})
    );
    t.stop().await;
}

#[tokio::test]
async fn search_ranks_exact_then_prefix_then_other_case_insensitively() {
    let t = TestServer::start().await;
    let (status, body) = t.post(SEARCH, json!({"query": "e"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        names(&body["results"]),
        vec![
            "Engine",
            "Babbage",
            "Grace Hopper",
            "Zed",
            "x'; DELETE entity; --"
        ]
    );
    assert_eq!(body["total"], 5);
    assert_eq!(body["query"], "e");
    assert_eq!(body["entity_type"], Value::Null);
    assert!(body["results"][0]["entity_type"].is_string());

    let (_, exact) = t.post(SEARCH, json!({"query": "ADA"})).await;
    assert_eq!(names(&exact["results"]), vec!["Ada"]);
    let (_, unicode) = t.post(SEARCH, json!({"query": "ZÜR"})).await;
    assert_eq!(names(&unicode["results"]), vec!["Zürich"]);
    let (_, typed) = t
        .post(SEARCH, json!({"query": "e", "entity_type": "machine"}))
        .await;
    assert_eq!(names(&typed["results"]), vec!["Engine"]);
    assert_eq!(typed["entity_type"], "machine");
    let (_, limited) = t.post(SEARCH, json!({"query": "e", "limit": 1})).await;
    assert_eq!(names(&limited["results"]), vec!["Engine"]);
    let (_, nothing) = t.post(SEARCH, json!({"query": "qqq"})).await;
    assert_eq!(nothing["results"], json!([]));

    for (limit, ok) in [(0, false), (1, true), (100, true), (101, false)] {
        let (status, body) = t.post(SEARCH, json!({"query": "a", "limit": limit})).await;
        assert_eq!(status == 200, ok, "limit={limit}: {body}");
        if !ok {
            assert_error(&body, "invalid_request", Some("limit"));
        }
    }
    let (status, body) = t.post(SEARCH, json!({"query": ""})).await;
    assert_eq!(status, 400);
    assert_error(&body, "invalid_request", Some("query"));
    t.stop().await;
}

#[tokio::test]
async fn entity_by_exact_name_decodes_the_path_and_answers_null_when_missing() {
    let t = TestServer::start().await;
    for (path, name) in [
        ("Ada", "Ada"),
        ("Grace%20Hopper", "Grace Hopper"),
        ("OS%2F360", "OS/360"),
        ("C%2B%2B", "C++"),
        ("Z%C3%BCrich", "Zürich"),
        ("x%27%3B%20DELETE%20entity%3B%20--", "x'; DELETE entity; --"),
    ] {
        let (status, body) = t.get(&format!("/data/v1/query/graph/entity/{path}")).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["name"], name, "{path}");
        let mut keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, vec!["entity_type", "id", "name", "properties"]);
    }
    // A raw slash is part of the name too.
    let (_, raw) = t.get("/data/v1/query/graph/entity/OS/360").await;
    assert_eq!(raw["name"], "OS/360");
    for missing in ["ada", "Nobody", "Ada%20"] {
        let (status, body) = t
            .get(&format!("/data/v1/query/graph/entity/{missing}"))
            .await;
        assert_eq!((status.as_u16(), body), (200, Value::Null), "{missing}");
    }
    let (status, body) = t.get("/data/v1/query/graph/entity/%FF").await;
    assert_eq!(status, 400);
    assert_error(&body, "invalid_request", Some("entity_name"));
    t.stop().await;
}

#[tokio::test]
async fn documents_resolve_reached_entities_and_mark_the_start_entitys_own() {
    let t = TestServer::start().await;
    let (status, body) = t.post(DOCUMENTS, json!({"entity_name": "Babbage"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entity_name"], "Babbage");
    assert_eq!(body["entity_type"], Value::Null);
    assert_eq!(
        body["related_entities"],
        json!(["Ada", "Engine", "London", "Zed"])
    );
    assert_eq!(body["total"], 3);
    let results = body["results"].as_array().unwrap();
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let london = results.last().unwrap();
    assert_eq!(
        (london["title"].as_str(), london["relationship"].as_str()),
        (Some("London"), Some("home_of"))
    );
    assert_eq!(london["related_entity"], "London");
    let engine = results.iter().find(|r| r["title"] == "The Engine").unwrap();
    assert_eq!(engine["relationship"], "designed");
    assert_eq!(engine["url"], "https://example.org/engine");
    for field in [
        "id",
        "title",
        "content",
        "source",
        "source_id",
        "content_type",
        "url",
        "score",
        "relationship",
        "related_entity",
    ] {
        assert!(engine.get(field).is_some(), "missing {field}");
    }

    let (_, own) = t
        .post(DOCUMENTS, json!({"entity_name": "Ada", "max_depth": 1}))
        .await;
    assert_eq!(own["results"][0]["relationship"], "self");
    assert_eq!(own["results"][0]["related_entity"], Value::Null);
    assert_eq!(own["results"][0]["url"], Value::Null);

    let (_, typed) = t
        .post(
            DOCUMENTS,
            json!({"entity_name": "Babbage", "entity_type": "place"}),
        )
        .await;
    assert_eq!(typed["entity_type"], "place");
    assert_eq!(typed["related_entities"], json!(["London"]));
    assert_eq!(typed["total"], 1);

    let (_, bare) = t
        .post(
            DOCUMENTS,
            json!({"entity_name": "Babbage", "resolve_documents": false}),
        )
        .await;
    assert_eq!(bare["results"], json!([]));
    assert_eq!(bare["total"], 0);
    assert_eq!(
        bare["related_entities"],
        json!(["Ada", "Engine", "London", "Zed"])
    );

    let (_, one) = t
        .post(DOCUMENTS, json!({"entity_name": "Babbage", "limit": 1}))
        .await;
    assert_eq!(one["total"], 1);

    for (field, value, ok) in [
        ("max_depth", 0, false),
        ("max_depth", 1, true),
        ("max_depth", 5, true),
        ("max_depth", 6, false),
        ("limit", 0, false),
        ("limit", 1, true),
        ("limit", 100, true),
        ("limit", 101, false),
    ] {
        let (status, body) = t
            .post(DOCUMENTS, json!({"entity_name": "Ada", field: value}))
            .await;
        assert_eq!(status == 200, ok, "{field}={value}: {body}");
        if !ok {
            assert_error(&body, "invalid_request", Some(field));
        }
    }
    let (_, unknown) = t.post(DOCUMENTS, json!({"entity_name": "Nobody"})).await;
    assert_eq!(unknown["total"], 0);
    assert_eq!(unknown["related_entities"], json!([]));
    t.stop().await;
}

#[tokio::test]
async fn injection_looking_input_is_data_and_changes_nothing() {
    let t = TestServer::start().await;
    for q in [
        "\"; REMOVE TABLE entity; --",
        "' OR 1=1 --",
        "$q",
        "DELETE entity",
        "⟨entity⟩",
        "\\",
    ] {
        let (status, body) = t.post(SEARCH, json!({"query": q})).await;
        assert_eq!(status, 200, "{q}: {body}");
        let (status, _) = t
            .post(
                TRAVERSE,
                json!({"entity_name": q, "relationship_types": [q]}),
            )
            .await;
        assert_eq!(status, 200, "{q}");
        let (status, _) = t
            .post(DOCUMENTS, json!({"entity_name": q, "entity_type": q}))
            .await;
        assert_eq!(status, 200, "{q}");
    }
    let (_, body) = t
        .post(TRAVERSE, json!({"entity_name": "x'; DELETE entity; --"}))
        .await;
    assert_eq!(
        names(&body["entities_found"]),
        vec!["x'; DELETE entity; --"]
    );
    assert_eq!(t.server().kb.counts().await.unwrap().entities, 10);
    // The SurrealDB read path binds input the same way.
    t.stop().await;
    let mut config = crate::support::test_config();
    config.store.graph_index = false;
    let t = TestServer::with_fixture(config).await;
    for q in ["\"; REMOVE TABLE entity; --", "x'; DELETE entity; --"] {
        let (status, _) = t.post(SEARCH, json!({"query": q})).await;
        assert_eq!(status, 200);
        let (status, _) = t.post(TRAVERSE, json!({"entity_name": q})).await;
        assert_eq!(status, 200);
    }
    let (_, body) = t.post(TRAVERSE, json!({"entity_name": "Ada"})).await;
    assert_eq!(body["total_entities"], 5);
    assert_eq!(t.server().kb.counts().await.unwrap().entities, 10);
    t.stop().await;
}
