//! The OpenAPI document against the routes that are mounted.
//!
//! The mounted routes are read from actix's own router, not from a list kept here: the paths
//! from the `ResourceMap` of an app built by `kbq::routes::configure` (the function the server
//! mounts), the methods by asking a running server each method on each path (a path that does
//! not take a method answers 405). Then both ways: every mounted (method, path) is in the
//! document, and every (method, path) in the document answers on the running server. The
//! document's security requirements are held to the key and scope checks the same way, and
//! the fields of each 200 object answer to its schema.

use std::collections::{BTreeMap, BTreeSet};

use actix_web::{App, HttpRequest, HttpResponse, web};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::{TestServer, read, test_config};

/// Mounted paths that the document leaves out, and why: the Swagger UI's pages and files, and
/// the page at `/ui/`, are for people, not operations of the API (`/docs` and `/ui` only
/// redirect to their slash).
const NOT_OPERATIONS: [&str; 4] = ["/docs", "/docs/{_}", "/ui", "/ui/{file}"];

const METHODS: [Method; 8] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
    Method::TRACE,
];

/// Keys that hold one scope each, to check each operation's documented scope.
const SCOPED_KEYS: [(&str, &str); 3] = [
    ("read", "test-read-key-0123"),
    ("write", "test-write-key-0123"),
    ("agent", "test-agent-key-0123"),
];

async fn start() -> TestServer {
    let mut config = test_config();
    for (scope, key) in SCOPED_KEYS {
        let entry = crate::support::key_entry(&format!("only-{scope}"), key, Some(&[scope]));
        config.auth.keys.push(entry);
    }
    TestServer::with_fixture(config).await
}

pub(crate) async fn document(t: &TestServer) -> Value {
    let res = t.http.get(t.url("/openapi.json")).send().await.unwrap();
    let (status, headers, doc) = read(res).await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(headers["content-type"], "application/json");
    doc
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_needs_no_key() {
    let t = start().await;
    let doc = document(&t).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "kbq");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["api_key"]["in"], "header");
    assert_eq!(schemes["api_key"]["name"], "X-API-Key");
    let ops = documented(&doc);
    let ids: Vec<&str> = ops
        .values()
        .map(|op| op["operationId"].as_str().expect("an operationId"))
        .collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "operationIds repeat: {ids:?}");
    // Every error response has the one error body.
    for (code, response) in doc["components"]["responses"].as_object().unwrap() {
        assert_eq!(
            response["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody",
            "{code}"
        );
    }
    t.stop().await;
}

#[tokio::test]
async fn the_docs_ui_is_served_by_kbq_itself() {
    let t = start().await;
    let res = t.http.get(t.url("/docs/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let page = res.text().await.unwrap();
    assert!(page.contains("swagger-ui"), "{page}");
    // The page's scripts and styles are relative: they come from kbq, not a CDN.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    let res = t
        .http
        .get(t.url("/docs/swagger-initializer.js"))
        .send()
        .await
        .unwrap();
    let init = res.text().await.unwrap();
    assert!(init.contains("\"/openapi.json\""), "{init}");
    assert!(init.contains("\"validatorUrl\": \"none\""), "{init}");
    for file in ["swagger-ui-bundle.js", "swagger-ui.css"] {
        let res = t
            .http
            .get(t.url(&format!("/docs/{file}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{file}");
    }
    let res = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(t.url("/docs"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 308);
    assert_eq!(res.headers()["location"], "/docs/");
    t.stop().await;
}

#[tokio::test]
async fn every_mounted_route_is_documented_and_every_documented_route_answers() {
    let t = start().await;
    let doc = document(&t).await;
    let documented = documented(&doc);

    let mut mounted = BTreeSet::new();
    let mut seen_patterns = BTreeSet::new();
    for (path, sample) in mounted_paths().await {
        seen_patterns.insert(path.clone());
        if NOT_OPERATIONS.contains(&path.as_str()) {
            continue;
        }
        for method in METHODS {
            let (status, _, body) = t.call(method.clone(), &sample, None).await;
            // A handler's own 404 (no job with the sample's id) is routed; the default
            // route's is not.
            let unrouted = status == StatusCode::METHOD_NOT_ALLOWED
                || (status == StatusCode::NOT_FOUND
                    && body["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("no route for"));
            if !unrouted {
                mounted.insert((method.to_string(), path.clone()));
            } else if method == Method::GET && status == StatusCode::NOT_FOUND {
                panic!("GET {sample} was routed to nothing: {body}");
            }
        }
    }
    for path in NOT_OPERATIONS {
        assert!(
            seen_patterns.contains(path),
            "{path} is excluded from the document but no longer mounted: drop it from NOT_OPERATIONS"
        );
    }
    assert!(mounted.len() >= 20, "too few routes found: {mounted:?}");

    let missing: Vec<_> = mounted
        .iter()
        .filter(|r| !documented.contains_key(*r))
        .collect();
    assert!(
        missing.is_empty(),
        "mounted but missing from the OpenAPI document: {missing:?}"
    );
    for ((method, path), op) in &documented {
        let sample = sample(path);
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let (status, _, body) = t.call(method.clone(), &sample, None).await;
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED
                && (status != StatusCode::NOT_FOUND || crate::support::served(op, status, &body)),
            "documented but not answered: {method} {path} gave {status} {body}"
        );
        if status == StatusCode::OK && body.is_object() {
            check_fields(
                &doc,
                &op["responses"]["200"],
                &body,
                &format!("{method} {path}"),
            );
        }
        check_security(&t, &method, &sample, op).await;
    }
    t.stop().await;
}

/// The document's `security` says whether a key is needed and which scope: a request without
/// a key gets 401 exactly when one is needed, and a key with one scope gets 403 exactly when
/// the operation needs another.
async fn check_security(t: &TestServer, method: &Method, path: &str, op: &Value) {
    let requirements = op["security"].as_array().cloned().unwrap_or_default();
    let mut scopes = BTreeSet::new();
    for requirement in &requirements {
        for (scheme, needed) in requirement.as_object().unwrap() {
            assert!(["bearer", "api_key"].contains(&scheme.as_str()), "{path}");
            scopes.extend(
                needed
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string()),
            );
        }
    }
    assert!(
        scopes.len() <= 1,
        "{method} {path} names several scopes: {scopes:?}"
    );
    let res = t
        .http
        .request(method.clone(), t.url(path))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status() == 401,
        !requirements.is_empty(),
        "{method} {path} without a key gave {}",
        res.status()
    );
    if requirements.is_empty() {
        return;
    }
    for (scope, key) in SCOPED_KEYS {
        let res = t
            .http
            .request(method.clone(), t.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let refused = !scopes.is_empty() && !scopes.contains(scope);
        assert_eq!(
            res.status() == 403,
            refused,
            "{method} {path} with a `{scope}` key gave {}; the document names {scopes:?}",
            res.status()
        );
    }
}

/// A 200 body's fields are the documented ones: none unknown, none required missing.
fn check_fields(doc: &Value, response: &Value, body: &Value, what: &str) {
    let schema = &response["content"]["application/json"]["schema"];
    let Some((properties, required)) = object_fields(doc, schema) else {
        return;
    };
    let keys: BTreeSet<String> = body.as_object().unwrap().keys().cloned().collect();
    let unknown: Vec<_> = keys.difference(&properties).collect();
    let missing: Vec<_> = required.difference(&keys).collect();
    assert!(
        unknown.is_empty() && missing.is_empty(),
        "{what}: undocumented fields {unknown:?}, missing required fields {missing:?} in {body}"
    );
}

/// The property names and required names of an object schema (following `$ref` and `allOf`),
/// or `None` when the schema is not one object.
fn object_fields(doc: &Value, schema: &Value) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    if let Some(target) = schema["$ref"].as_str() {
        let name = target.strip_prefix("#/components/schemas/")?;
        return object_fields(doc, &doc["components"]["schemas"][name]);
    }
    if let Some(parts) = schema["allOf"].as_array() {
        let mut fields = (BTreeSet::new(), BTreeSet::new());
        for part in parts {
            let (p, r) = object_fields(doc, part)?;
            fields.0.extend(p);
            fields.1.extend(r);
        }
        return Some(fields);
    }
    let properties = schema["properties"].as_object()?.keys().cloned().collect();
    let required = schema["required"]
        .as_array()
        .map(|r| r.iter().map(|n| n.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    Some((properties, required))
}

/// A valid JSON body for each operation whose request schema states a rule, for the probes
/// below. `EMBEDDER` stands for the served embedder's name.
const BASE_BODIES: [(&str, &str); 17] = [
    ("/data/v1/query/graph", r#"{"entity_name": "Ada"}"#),
    ("/data/v1/query/graph/search", r#"{"query": "Ada"}"#),
    (
        "/data/v1/query/graph/documents",
        r#"{"entity_name": "Ada"}"#,
    ),
    ("/data/v1/query/graph/merges", r#"{}"#),
    ("/v1/rag/semantic", r#"{"query": "mechanical computer"}"#),
    ("/v1/rag/keyword", r#"{"query": "mechanical computer"}"#),
    ("/v1/rag/hybrid", r#"{"query": "mechanical computer"}"#),
    ("/v1/agent/chat", r#"{"message": "Who was Ada Lovelace?"}"#),
    ("/v1/embeddings", r#"{"input": "Ada", "model": "EMBEDDER"}"#),
    (
        "/v1/chat/completions",
        r#"{"model": "kbq", "messages": [{"role": "user", "content": "Who was Ada?"}]}"#,
    ),
    (
        "/data/v1/ingest/entities",
        r#"[{"name": "Probe", "entity_type": "t"}]"#,
    ),
    (
        "/data/v1/ingest/relationships",
        r#"[{"source_name": "Ada", "target_name": "Babbage", "relationship_type": "t"}]"#,
    ),
    (
        "/data/v1/ingest/documents",
        r#"[{"title": "t", "content": "c", "source": "s", "source_id": "1", "content_type": "text/plain", "entity_name": "Ada"}]"#,
    ),
    (
        "/data/v1/ingest/sources",
        r#"{"source": "s", "source_id": "probe", "content": "A note about Ada."}"#,
    ),
    ("/admin/v1/workspaces", r#"{"name": "probe"}"#),
    (
        "/admin/v1/workspaces/{workspace}/keys",
        r#"{"scopes": ["read"], "name": "probe"}"#,
    ),
    (
        "/admin/v1/workspaces/{workspace}/quota",
        r#"{"max_entities": 100}"#,
    ),
];

/// The base body of `path`; an operation that states a rule and has none fails the test.
pub(crate) fn base_body(doc: &Value, path: &str, field: &str) -> Value {
    let base = BASE_BODIES
        .iter()
        .find(|(p, _)| *p == path)
        .unwrap_or_else(|| panic!("{path} states a rule on `{field}`: add a base body for it"))
        .1;
    let embedder = doc["components"]["schemas"]["EmbeddingsRequest"]["properties"]["model"]["enum"]
        [0]
    .as_str()
    .expect("the embedder's name is in the document");
    serde_json::from_str(&base.replace("EMBEDDER", embedder)).unwrap()
}

/// The schema a `$ref` points at.
fn schema_of(doc: &Value, reference: &Value) -> Option<Value> {
    let name = reference.as_str()?.rsplit('/').next()?;
    Some(doc["components"]["schemas"][name].clone())
}

/// An object schema's own properties, also when it is the first of an `allOf`.
fn own_properties(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    schema["properties"]
        .as_object()
        .or_else(|| schema["allOf"][0]["properties"].as_object())
}

/// Each property of `op`'s JSON request that can carry a rule: (where in the body, the name
/// errors give it, its schema). The properties of the body's object, or of the first item's
/// for an array body, and of an object one `$ref` below one of them.
fn request_fields(doc: &Value, op: &Value) -> Vec<(Vec<String>, String, Value)> {
    let schema = &op["requestBody"]["content"]["application/json"]["schema"];
    let (object, at, named) = if let Some(object) = schema_of(doc, &schema["$ref"]) {
        (object, vec![], String::new())
    } else if let Some(item) = schema_of(doc, &schema["items"]["$ref"]) {
        (item, vec!["0".to_string()], "[0].".to_string())
    } else {
        return Vec::new();
    };
    let mut fields = Vec::new();
    for (field, property) in own_properties(&object).into_iter().flatten() {
        let nested = property["oneOf"]
            .as_array()
            .into_iter()
            .flatten()
            .chain([property])
            .find_map(|p| schema_of(doc, &p["$ref"]))
            .filter(|o| o["properties"].is_object());
        let mut here = at.clone();
        here.push(field.clone());
        match nested {
            Some(object) => {
                for (inner, p) in object["properties"].as_object().unwrap() {
                    let mut deeper = here.clone();
                    deeper.push(inner.clone());
                    fields.push((deeper, format!("{named}{field}.{inner}"), p.clone()));
                }
            }
            None => fields.push((here, format!("{named}{field}"), property.clone())),
        }
    }
    fields
}

/// Every integer bound the document states is the server's: for each operation's JSON body
/// and each property with a `minimum` and `maximum`, both bounds are accepted, and one past
/// each is refused with 400 naming the property. An operation with a bounded property and no
/// base body above fails the test, so a new bound is probed as soon as it is documented.
#[tokio::test]
async fn every_integer_bound_in_the_document_is_the_servers() {
    let t = start().await;
    // A workspace whose quota the probes of `PUT .../quota` set.
    let (s, made) = t
        .post(
            "/admin/v1/workspaces",
            serde_json::json!({"name": "probed"}),
        )
        .await;
    assert_eq!(s, 201, "{made}");
    let doc = document(&t).await;
    let mut probed = BTreeMap::<String, usize>::new();
    for ((method, path), op) in documented(&doc) {
        for (at, field, property) in request_fields(&doc, &op) {
            let (Some(min), Some(max)) =
                (property["minimum"].as_i64(), property["maximum"].as_i64())
            else {
                continue;
            };
            let base = base_body(&doc, &path, &field);
            let default = &property["default"];
            assert!(
                default.is_null() || default.as_i64().is_some_and(|d| (min..=max).contains(&d)),
                "{path} {field}: default {default} outside {min}..={max}"
            );
            // JSON Schema's integers include numbers written with a zero fraction.
            let float = |n: i64| Value::from(n as f64);
            for (value, accepted) in [
                (min.into(), true),
                (max.into(), true),
                (float(max), true),
                (min.saturating_sub(1).into(), false),
                (max.saturating_add(1).into(), false),
                (Value::from(min as f64 + 0.5), false),
            ] {
                probe(&t, &method, &path, &base, &at, &field, value, accepted).await;
                *probed.entry(format!("{path} {field}")).or_default() += 1;
            }
        }
    }
    // depth and limit of traverse, limit of search, max_depth and limit of documents, limit
    // of merges, limit of the three RAG searches and graph_depth of hybrid, max_tokens of agent chat,
    // dimensions of embeddings, max_tokens, max_completion_tokens and n of chat completions,
    // and a workspace's four rate budgets, at its creation and set later: 23 bounds, 6 probes
    // each.
    assert_eq!(
        probed.values().sum::<usize>(),
        23 * 6,
        "a bound left or joined the document: {probed:#?}"
    );
}

/// Sends `base` with `value` put at `at` (a field, a field of an object field, or a field of
/// an array's item) to `path` with `method`: when `accepted`, the answer must be 200;
/// otherwise 400 (404 for an unknown model, as OpenAI answers) naming `field`. A workspace
/// created is named anew each time.
#[allow(clippy::too_many_arguments)]
async fn probe(
    t: &TestServer,
    method: &str,
    path: &str,
    base: &Value,
    at: &[String],
    field: &str,
    value: Value,
    accepted: bool,
) {
    let mut body = base.clone();
    let mut slot = &mut body;
    for key in at {
        slot = match key.parse::<usize>() {
            Ok(i) if slot.is_array() => &mut slot[i],
            _ => {
                if slot[key.as_str()].is_null() {
                    slot[key.as_str()] = serde_json::json!({});
                }
                &mut slot[key.as_str()]
            }
        };
    }
    *slot = value.clone();
    if path == "/admin/v1/workspaces" {
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        body["name"] = Value::from(format!("probe-{n}"));
    }
    let shown: String = value.to_string().chars().take(40).collect();
    // A workspace's path: one that exists (`default` has no quota to set).
    let workspace = match path.ends_with("/quota") {
        true => "probed",
        false => "default",
    };
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let (status, _, answer) = t
        .call(method, &path.replace("{workspace}", workspace), Some(body))
        .await;
    if accepted {
        // A source is accepted with 202 (its job queued), a key minted with 201; every other
        // body with 200.
        assert!(
            matches!(status.as_u16(), 200..=202),
            "{path} {field}={shown}: {status} {answer}"
        );
    } else {
        assert!(
            matches!(status.as_u16(), 400 | 404),
            "{path} {field}={shown}: {status} {answer}"
        );
        assert_eq!(answer["error"]["field"], field, "{path}: {answer}");
    }
}

/// Every name rule, not-blank rule, length, choice and array size the document states is the
/// server's. For each operation with a base body ([`BASE_BODIES`]) and each property of its
/// request schema, or of an object one `$ref` below it, that carries the name rule's
/// `pattern` (on the property, or on an array's items), the not-blank pattern, `maxLength`,
/// `enum`, or `minItems`/`maxItems`: valid values are accepted, and a blank name, a name with
/// a control character, text one character too long, a value not among the choices, and an
/// array one item short of or past its bounds are refused with 400 naming the field.
#[tokio::test]
async fn every_name_rule_length_choice_and_array_size_in_the_document_is_the_servers() {
    let t = start().await;
    let doc = document(&t).await;
    let pattern = kbq_store::model::NAME_PATTERN;
    let not_blank = kbq_store::model::NOT_BLANK_PATTERN;
    let mut probed = BTreeMap::<String, usize>::new();
    for ((method, path), op) in documented(&doc) {
        for (at, field, property) in request_fields(&doc, &op) {
            let names = property["pattern"] == pattern;
            let text = property["pattern"] == not_blank;
            let item_names = property["items"]["pattern"] == pattern;
            let longest = property["maxLength"].as_u64().map(|n| n as usize);
            let choices: Vec<&str> = property["enum"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let sized = property["minItems"]
                .as_u64()
                .zip(property["maxItems"].as_u64());
            if !names
                && !text
                && !item_names
                && longest.is_none()
                && choices.is_empty()
                && sized.is_none()
            {
                continue;
            }
            let base = base_body(&doc, &path, &field);
            let mut cases: Vec<(Value, bool)> = Vec::new();
            if names {
                cases.extend([
                    (Value::from("Ada Lovelace"), true),
                    (Value::from(""), false),
                    (Value::from(" \u{3000}"), false),
                    (Value::from("a\u{7}b"), false),
                ]);
            }
            if text {
                cases.extend([
                    (Value::from("mechanical computer"), true),
                    (Value::from(""), false),
                    (Value::from(" \u{3000}\t"), false),
                ]);
            }
            if item_names {
                cases.extend([
                    (serde_json::json!(["knows"]), true),
                    (serde_json::json!(["knows", " "]), false),
                    (serde_json::json!(["a\u{85}b"]), false),
                ]);
            }
            // Lengths count characters: two-byte ones show it. Content of a megabyte of
            // characters would pass the body limit first (413); it is checked in ingest.rs.
            if let Some(n) = longest.filter(|&n| n <= 100_000) {
                cases.extend([
                    (Value::from("é".repeat(n)), true),
                    (Value::from("é".repeat(n + 1)), false),
                ]);
            }
            if !choices.is_empty() {
                cases.extend(choices.iter().map(|c| (Value::from(*c), true)));
                cases.push((Value::from("no such choice"), false));
            }
            if let Some((min, max)) = sized {
                // Items like the base body's own, or names.
                let mut like = &base;
                for key in &at {
                    like = match key.parse::<usize>() {
                        Ok(i) if like.is_array() => &like[i],
                        _ => &like[key.as_str()],
                    };
                }
                let like = like[0].clone();
                // Items that must differ (`uniqueItems`) are drawn from their choices, in turn.
                let items = match property["items"]["$ref"].as_str() {
                    Some(r) => &doc["components"]["schemas"][r.rsplit('/').next().unwrap()],
                    None => &property["items"],
                };
                let distinct: Vec<Value> = match property["uniqueItems"] == true {
                    true => items["enum"].as_array().cloned().unwrap_or_default(),
                    false => Vec::new(),
                };
                let list = |n: u64| {
                    Value::from(
                        (0..n)
                            .map(|i| match &like {
                                _ if !distinct.is_empty() => {
                                    distinct[i as usize % distinct.len()].clone()
                                }
                                Value::Null => Value::from(format!("t{i}")),
                                item => item.clone(),
                            })
                            .collect::<Vec<_>>(),
                    )
                };
                cases.extend([(list(min), true), (list(max), true), (list(max + 1), false)]);
                if min > 0 {
                    cases.push((list(min - 1), false));
                }
            }
            for (value, accepted) in cases {
                probe(&t, &method, &path, &base, &at, &field, value, accepted).await;
                *probed.entry(format!("{path} {field}")).or_default() += 1;
            }
        }
    }
    let total: usize = probed.values().sum();
    assert_eq!(
        total, EXPECTED_RULE_PROBES,
        "a rule left or joined the document: {probed:#?}"
    );
}

/// What [`every_name_rule_length_choice_and_array_size_in_the_document_is_the_servers`]
/// probes. Names, 6 probes each (4 for the rule, 2 for the length): traverse (1), search (2),
/// documents (2), merges (2), the three RAG searches' filters (3 each), ingested entities (2),
/// relationships (3) and documents (4), a submitted source (2), a minted key (1). Arrays of names, 3 each and 4 for their size, in
/// traverse and documents. Text not blank, 3 each and 2 for its length: the three RAG
/// searches' query and agent chat's message; an ingested document's content, whose length is
/// too long to probe. Lengths alone, 2 each: agent chat's system_prompt, a document's
/// title, and a submitted source's title and url. Choices, one probe per choice and one more: the embedder's name (1), the encoding
/// format (2) and a completion's model (`kbq` and the test config's provider). Array sizes,
/// 4: a completion's messages, and a minted key's scopes (each once).
const EXPECTED_RULE_PROBES: usize = 6 * (1 + 2 + 2 + 2 + 9 + 2 + 3 + 4 + 2 + 1)
    + 7 * 2
    + 5 * 4
    + 3
    + 2 * 4
    + (1 + 1)
    + (2 + 1)
    + (2 + 1)
    + 4 * 2;

/// Every path parameter's `pattern` in the document is the server's: for each parameter
/// with one, a value it matches is not refused (the answer is 200 or 404), and values it does
/// not match (percent-encoded in the path) are refused with 400 naming the parameter.
#[tokio::test]
async fn every_path_parameter_pattern_in_the_document_is_the_servers() {
    let t = start().await;
    let doc = document(&t).await;
    let name = kbq_store::model::NAME_PATTERN;
    let id = kbq_store::write::DOCUMENT_ID_PATTERN;
    let document = format!("document:d{}", "0".repeat(32));
    let mut probed = 0;
    for ((method, path), op) in documented(&doc) {
        for p in op["parameters"].as_array().into_iter().flatten() {
            let pattern = &p["schema"]["pattern"];
            if p["in"] != "path" || pattern.is_null() {
                continue;
            }
            let parameter = p["name"].as_str().unwrap();
            let (good, bad): (&[&str], &[&str]) = if pattern == name {
                (
                    &["Ada", "Ada%20Lovelace"],
                    &["%20", "%E3%80%80", "a%07b", "a%C2%85"],
                )
            } else if pattern == kbq::workspaces::NAME_PATTERN {
                (&["no-such-workspace", "a1"], &["Ada", "%20", "a_b", "1a"])
            } else if pattern == kbq::routes::admin::KEY_ID_PATTERN {
                (
                    &["0123456789abcdef0123456789abcdef"],
                    &["xyz", "0123456789ABCDEF0123456789ABCDEF"],
                )
            } else if pattern == id {
                (
                    &[document.as_str()],
                    &["document:x", "d123", "document%0Ad"],
                )
            } else {
                panic!("{path}: no probes for the pattern {pattern}");
            };
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            for (value, accepted) in good
                .iter()
                .map(|v| (v, true))
                .chain(bad.iter().map(|v| (v, false)))
            {
                // The path's other parameters hold values they accept.
                let url = path
                    .replace(&format!("{{{parameter}}}"), value)
                    .replace("{workspace}", "no-such-workspace")
                    .replace("{key_id}", &"0".repeat(32));
                // A body the operation accepts, so that only the parameter is at fault.
                let body = matches!(method, Method::POST | Method::PUT)
                    .then(|| base_body(&doc, &path, parameter));
                let (status, _, answer) = t.call(method.clone(), &url, body).await;
                if accepted {
                    assert!(
                        matches!(status.as_u16(), 200 | 201 | 404),
                        "{url}: {status} {answer}"
                    );
                } else {
                    assert_eq!(status, 400, "{url}: {answer}");
                    assert_eq!(answer["error"]["field"], parameter, "{url}: {answer}");
                }
                probed += 1;
            }
        }
    }
    // The entity lookup and the entity delete (names, 6 each), the document delete (4), a
    // source's retraction (two names, 6 each); the admin API's six operations on a
    // workspace (6 each), and a key's revocation (its id, 3).
    assert_eq!(
        probed,
        6 + 6 + 4 + 6 + 6 + 6 * 6 + 3,
        "a pattern left the document"
    );
}

/// (method, path) of each documented operation, with the operation.
pub(crate) fn documented(doc: &Value) -> BTreeMap<(String, String), Value> {
    let mut ops = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if METHODS
                .iter()
                .any(|m| m.as_str().eq_ignore_ascii_case(method))
            {
                ops.insert((method.to_uppercase(), path.clone()), op.clone());
            }
        }
    }
    ops
}

/// A concrete path for an OpenAPI path: each `{param}` becomes `x`.
fn sample(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        out.push('x');
        let close = rest[open..].find('}').expect("closed parameter") + open;
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// actix's pattern in OpenAPI's form: `{name:regex}` becomes `{name}`.
fn openapi_path(pattern: &str) -> String {
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..=open]);
        let close = rest[open..].find('}').expect("closed parameter") + open;
        let inner = &rest[open + 1..close];
        out.push_str(inner.split(':').next().unwrap());
        out.push('}');
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Every path that `kbq::routes::configure` mounts (OpenAPI form) with a concrete path that
/// actix routes to it, read from the app's `ResourceMap`.
async fn mounted_paths() -> Vec<(String, String)> {
    let app = actix_web::test::init_service(
        App::new()
            .configure(kbq::routes::configure)
            .default_service(web::to(|req: HttpRequest| async move {
                let rmap = req.resource_map();
                let tree = DebugValue::parse(&format!("{rmap:?}"));
                let mut patterns = Vec::new();
                resources(&tree, "", &mut patterns);
                let found: Vec<(String, String, Option<String>)> = patterns
                    .into_iter()
                    .map(|p| {
                        let sample = sample(&openapi_path(&p));
                        let matched = rmap.match_pattern(&sample);
                        (p, sample, matched)
                    })
                    .collect();
                HttpResponse::Ok().json(found)
            })),
    )
    .await;
    let req = actix_web::test::TestRequest::get()
        .uri("/resource-map-for-the-test")
        .to_request();
    let found: Vec<(String, String, Option<String>)> =
        actix_web::test::call_and_read_body_json(&app, req).await;
    found
        .into_iter()
        .map(|(pattern, sample, matched)| {
            // Another resource must not catch the sample first.
            assert_eq!(matched.as_deref(), Some(pattern.as_str()), "{sample}");
            (openapi_path(&pattern), sample)
        })
        .collect()
}

/// The full patterns of the resources (the leaves) in a `ResourceMap`'s debug form: each node
/// is `ResourceMap { pattern: ResourceDef { patterns: Single("...") | List([...]), .. },
/// nodes: None | Some([children]), .. }`. actix exposes no iterator over its routes, and its
/// `Debug` is the one public view of them all; if that form changes, this fails loudly.
fn resources(node: &DebugValue, prefix: &str, out: &mut Vec<String>) {
    let DebugValue::Struct(name, fields) = node else {
        panic!("not a ResourceMap: {node:?}")
    };
    assert_eq!(name, "ResourceMap");
    let field = |f: &str| {
        fields
            .iter()
            .find(|(n, _)| n == f)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no `{f}` in {node:?}"))
    };
    let DebugValue::Struct(_, def) = field("pattern") else {
        panic!("no ResourceDef in {node:?}")
    };
    let patterns = &def
        .iter()
        .find(|(n, _)| n == "patterns")
        .expect("patterns")
        .1;
    let patterns: Vec<String> = match patterns {
        DebugValue::Tuple(kind, items) if kind == "Single" => vec![items[0].string()],
        DebugValue::Tuple(kind, items) if kind == "List" => match &items[0] {
            DebugValue::List(items) => items.iter().map(DebugValue::string).collect(),
            other => panic!("patterns: {other:?}"),
        },
        other => panic!("patterns: {other:?}"),
    };
    for pattern in patterns {
        let full = format!("{prefix}{pattern}");
        match field("nodes") {
            DebugValue::Atom(none) if none == "None" => out.push(full),
            DebugValue::Tuple(some, items) if some == "Some" => match &items[0] {
                DebugValue::List(children) => {
                    for child in children {
                        resources(child, &full, out);
                    }
                }
                other => panic!("nodes: {other:?}"),
            },
            other => panic!("nodes: {other:?}"),
        }
    }
}

/// A value in Rust's `{:?}` form.
#[derive(Debug)]
enum DebugValue {
    /// `Name { field: value, .. }`
    Struct(String, Vec<(String, DebugValue)>),
    /// `Name(value, ..)`, or `(value, ..)` with an empty name.
    Tuple(String, Vec<DebugValue>),
    /// `[value, ..]`
    List(Vec<DebugValue>),
    /// `{key: value, ..}`
    Map(Vec<(DebugValue, DebugValue)>),
    Str(String),
    /// A unit, a number, a bool, `None`.
    Atom(String),
}

impl DebugValue {
    fn parse(text: &str) -> DebugValue {
        let chars: Vec<char> = text.chars().collect();
        let mut at = 0;
        let value = Self::value(&chars, &mut at);
        skip_space(&chars, &mut at);
        assert_eq!(at, chars.len(), "trailing text in {text}");
        value
    }

    fn string(&self) -> String {
        match self {
            DebugValue::Str(s) => s.clone(),
            other => panic!("not a string: {other:?}"),
        }
    }

    fn value(c: &[char], at: &mut usize) -> DebugValue {
        skip_space(c, at);
        match c[*at] {
            '"' => DebugValue::Str(quoted(c, at)),
            '[' => DebugValue::List(Self::items(c, at, ']')),
            '(' => DebugValue::Tuple(String::new(), Self::items(c, at, ')')),
            '{' => DebugValue::Map(Self::entries(c, at)),
            _ => {
                let start = *at;
                while *at < c.len() && !",:{}()[] ".contains(c[*at]) {
                    *at += 1;
                }
                // `a::B` paths are part of a name.
                while *at + 1 < c.len() && c[*at] == ':' && c[*at + 1] == ':' {
                    *at += 2;
                    while *at < c.len() && !",:{}()[] ".contains(c[*at]) {
                        *at += 1;
                    }
                }
                let name: String = c[start..*at].iter().collect();
                let mut look = *at;
                skip_space(c, &mut look);
                match c.get(look) {
                    Some('{') => {
                        *at = look;
                        DebugValue::Struct(name, Self::fields(c, at))
                    }
                    Some('(') if look == *at => DebugValue::Tuple(name, Self::items(c, at, ')')),
                    _ => DebugValue::Atom(name),
                }
            }
        }
    }

    /// `open value, value close`, with `at` on `open`.
    fn items(c: &[char], at: &mut usize, close: char) -> Vec<DebugValue> {
        *at += 1;
        let mut items = Vec::new();
        loop {
            skip_space(c, at);
            if c[*at] == close {
                *at += 1;
                return items;
            }
            items.push(Self::value(c, at));
            skip_space(c, at);
            if c[*at] == ',' {
                *at += 1;
            }
        }
    }

    /// `{ name: value, .. }`, with `at` on `{`.
    fn fields(c: &[char], at: &mut usize) -> Vec<(String, DebugValue)> {
        Self::entries(c, at)
            .into_iter()
            .map(|(k, v)| match k {
                DebugValue::Atom(name) => (name, v),
                other => panic!("field name {other:?}"),
            })
            .collect()
    }

    fn entries(c: &[char], at: &mut usize) -> Vec<(DebugValue, DebugValue)> {
        *at += 1;
        let mut entries = Vec::new();
        loop {
            skip_space(c, at);
            if c[*at] == '}' {
                *at += 1;
                return entries;
            }
            if c[*at] == '.' && c.get(*at + 1) == Some(&'.') {
                // `..` of a non-exhaustive debug struct.
                *at += 2;
                continue;
            }
            let key = Self::value(c, at);
            skip_space(c, at);
            assert_eq!(c[*at], ':', "expected `:` after {key:?}");
            *at += 1;
            let value = Self::value(c, at);
            entries.push((key, value));
            skip_space(c, at);
            if c[*at] == ',' {
                *at += 1;
            }
        }
    }
}

fn skip_space(c: &[char], at: &mut usize) {
    while *at < c.len() && c[*at].is_whitespace() {
        *at += 1;
    }
}

/// A `"..."` string with Rust's debug escapes, with `at` on the opening quote.
fn quoted(c: &[char], at: &mut usize) -> String {
    *at += 1;
    let mut s = String::new();
    while c[*at] != '"' {
        if c[*at] == '\\' {
            *at += 1;
            match c[*at] {
                'n' => s.push('\n'),
                't' => s.push('\t'),
                'r' => s.push('\r'),
                '0' => s.push('\0'),
                'u' => {
                    // \u{XXXX}
                    let close = c[*at..].iter().position(|&ch| ch == '}').unwrap() + *at;
                    let hex: String = c[*at + 2..close].iter().collect();
                    s.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                    *at = close;
                }
                other => s.push(other),
            }
        } else {
            s.push(c[*at]);
        }
        *at += 1;
    }
    *at += 1;
    s
}

#[test]
fn the_debug_reader_reads_structs_tuples_lists_maps_and_strings() {
    let v = DebugValue::parse(
        r#"A { b: Some([C { d: "x\"{y}\\", e: None }]), f: {"k": (Weak)}, g: Single("/p/{n:.*}"), h: 1.5 }"#,
    );
    let mut out = Vec::new();
    let tree = DebugValue::parse(
        r#"ResourceMap { pattern: ResourceDef { id: 0, patterns: Single(""), is_prefix: true }, named: {}, parent: RefCell { value: (Weak) }, nodes: Some([ResourceMap { pattern: ResourceDef { patterns: Single("/v1"), segments: [Const("/v1")] }, named: {}, nodes: Some([ResourceMap { pattern: ResourceDef { patterns: List(["/a/{n:.*}", "/b"]) }, nodes: None }]) }]) }"#,
    );
    resources(&tree, "", &mut out);
    assert_eq!(out, vec!["/v1/a/{n:.*}", "/v1/b"]);
    let DebugValue::Struct(name, fields) = &v else {
        panic!("{v:?}")
    };
    assert_eq!((name.as_str(), fields.len()), ("A", 4));
    assert!(matches!(&fields[1].1, DebugValue::Map(entries) if entries.len() == 1));
    assert_eq!(openapi_path("/v1/a/{n:.*}/{m}"), "/v1/a/{n}/{m}");
    assert_eq!(sample("/v1/a/{n}/b"), "/v1/a/x/b");
}
