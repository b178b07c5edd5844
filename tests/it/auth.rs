//! The key matrix on every operation of the OpenAPI document: no key, an unknown key, a good
//! key in `Authorization: Bearer` and in `X-API-Key`, keys without the needed scope; and the
//! public routes, listed once with the reason they are public.

use std::sync::Arc;

use kbq::versions::SystemClock;
use reqwest::Method;
use serde_json::{Value, json};

use crate::openapi::{base_body, document, documented};
use crate::support::{KEY, TestServer, assert_error, key_entry, read, served, test_config};

/// The operations that need no key, and why. Every other operation of the document needs
/// one, and a new public route fails the test until it is listed here.
const PUBLIC: [(&str, &str, &str); 6] = [
    (
        "GET",
        "/livez",
        "a liveness probe: load balancers and orchestrators hold no key",
    ),
    ("HEAD", "/livez", "the liveness probe without a body"),
    (
        "GET",
        "/readyz",
        "a readiness probe: load balancers hold no key",
    ),
    ("HEAD", "/readyz", "the readiness probe without a body"),
    (
        "GET",
        "/metrics",
        "Prometheus scrapes it; it holds counts and latencies, no data of any key",
    ),
    (
        "GET",
        "/openapi.json",
        "the contract that clients are generated from",
    ),
];

/// Keys that hold one scope each, and `admin`, which holds them all.
const SCOPED: [(&str, &str); 4] = [
    ("read", "matrix-read-key"),
    ("write", "matrix-write-key"),
    ("agent", "matrix-agent-key"),
    ("admin", "matrix-admin-key"),
];

/// A request to `path` that a good key gets a 2xx for: the path's parameters filled with a
/// name or a document id that exists or may be missing, and a valid body.
fn valid_request(doc: &Value, path: &str, op: &Value) -> (String, Option<(String, Vec<u8>)>) {
    let url = path
        .replace("{entity_name}", "Ada")
        .replace("{name}", "No%20Such%20Entity")
        .replace("{workspace}", "no-such-workspace")
        .replace("{key_id}", &"0".repeat(32))
        .replace("{id}", &format!("document:d{}", "0".repeat(32)));
    if op.get("requestBody").is_none() {
        return (url, None);
    }
    let content = op["requestBody"]["content"].as_object().unwrap();
    if content.contains_key("application/x-ndjson") {
        let line = r#"{"kind":"entity","name":"Matrix","entity_type":"test"}"#;
        return (url, Some(("application/x-ndjson".into(), line.into())));
    }
    let body = base_body(doc, path, "the auth matrix");
    (
        url,
        Some((
            "application/json".into(),
            serde_json::to_vec(&body).unwrap(),
        )),
    )
}

#[tokio::test]
async fn every_operation_in_the_document_checks_the_key_and_its_scope() {
    let mut config = test_config();
    for (scope, secret) in SCOPED {
        let entry = key_entry(&format!("matrix-{scope}"), secret, Some(&[scope]));
        config.auth.keys.push(entry);
    }
    let t = TestServer::with_fixture(config).await;
    let doc = document(&t).await;
    let mut public = Vec::new();
    let mut keyed = 0;
    for ((method, path), op) in documented(&doc) {
        let needed: Vec<String> = op["security"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r.as_object().unwrap().values())
            .flat_map(|scopes| scopes.as_array().unwrap().iter())
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        let (url, body) = valid_request(&doc, &path, &op);
        let http_method = Method::from_bytes(method.as_bytes()).unwrap();
        let send = |headers: Vec<(&'static str, String)>| {
            let mut r = t.http.request(http_method.clone(), t.url(&url));
            for (k, v) in headers {
                r = r.header(k, v);
            }
            if let Some((content_type, bytes)) = &body {
                r = r
                    .header("content-type", content_type.as_str())
                    .body(bytes.clone());
            }
            async move { read(r.send().await.unwrap()).await }
        };
        if op["security"].as_array().is_none_or(Vec::is_empty) {
            public.push((method.clone(), path.clone()));
            // A public route ignores keys, good or bad.
            for headers in [
                vec![],
                vec![("Authorization", "Bearer wrong-key".to_string())],
            ] {
                let (status, _, body) = send(headers.clone()).await;
                assert!(
                    status.is_success(),
                    "{method} {path} with {headers:?}: {status} {body}"
                );
            }
            continue;
        }
        keyed += 1;
        let label = format!("{method} {path}");
        // Refused: no key, unknown keys in either header, a malformed Authorization, and an
        // unknown Bearer key beside a good X-API-Key (Authorization is read first).
        for headers in [
            vec![],
            vec![("Authorization", "Bearer wrong-key".to_string())],
            vec![("X-API-Key", "wrong-key".to_string())],
            vec![("Authorization", format!("Basic {KEY}"))],
            vec![("Authorization", "Bearer ".to_string())],
            vec![
                ("Authorization", "Bearer wrong-key".to_string()),
                ("X-API-Key", KEY.to_string()),
            ],
        ] {
            let (status, response_headers, body) = send(headers.clone()).await;
            assert_eq!(status, 401, "{label} with {headers:?}: {body}");
            assert_error(&body, "INVALID_API_KEY", None);
            assert_eq!(response_headers["www-authenticate"], "Bearer", "{label}");
        }
        // Accepted alike: the key in either header, the scheme in any case.
        let mut answers = Vec::new();
        for headers in [
            vec![("Authorization", format!("Bearer {KEY}"))],
            vec![("Authorization", format!("bearer {KEY}"))],
            vec![("X-API-Key", KEY.to_string())],
        ] {
            let (status, _, body) = send(headers.clone()).await;
            assert!(
                served(&op, status, &body),
                "{label} with {headers:?}: {status} {body}"
            );
            answers.push(status);
        }
        // A key with one scope: 403 exactly when the operation needs another.
        for (scope, secret) in SCOPED {
            let (status, _, body) = send(vec![("Authorization", format!("Bearer {secret}"))]).await;
            let allowed =
                needed.is_empty() || scope == "admin" || needed.iter().any(|n| n == scope);
            if allowed {
                assert!(
                    served(&op, status, &body),
                    "{label} with a {scope} key: {status} {body}"
                );
            } else {
                assert_eq!(status, 403, "{label} with a {scope} key: {body}");
                assert_error(&body, "insufficient_scope", None);
            }
        }
    }
    let listed: Vec<(String, String)> = PUBLIC
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    public.sort();
    let mut expected = listed.clone();
    expected.sort();
    assert_eq!(
        public, expected,
        "the public operations are not the listed ones"
    );
    assert!(keyed >= 18, "too few keyed operations: {keyed}");
    t.stop().await;
}

/// Keys cannot expire or be revoked while the server runs: a key is revoked by taking it
/// out of the config (or `kbq keys`) and restarting. A key taken out is refused after the
/// restart on every keyed operation.
#[tokio::test]
async fn a_key_taken_out_of_the_config_is_refused_after_a_restart() {
    let t = TestServer::start().await;
    let (status, _) = t.get("/v1/agent/health").await;
    assert_eq!(status, 200);
    t.stop().await;
    let mut config = test_config();
    config
        .auth
        .keys
        .retain(|k| k.sha256 != hex::encode(kbq::auth::hash(KEY)));
    config
        .auth
        .keys
        .push(key_entry("other", "another-key", None));
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let doc = document(&t).await;
    for ((method, path), op) in documented(&doc) {
        if op["security"].as_array().is_none_or(Vec::is_empty) {
            continue;
        }
        let (url, body) = valid_request(&doc, &path, &op);
        let mut r = t
            .http
            .request(Method::from_bytes(method.as_bytes()).unwrap(), t.url(&url))
            .bearer_auth(KEY);
        if let Some((content_type, bytes)) = body {
            r = r.header("content-type", content_type).body(bytes);
        }
        let (status, _, answer) = read(r.send().await.unwrap()).await;
        assert_eq!(status, 401, "{method} {path}: {answer}");
    }
    t.stop().await;
}

#[tokio::test]
async fn probes_need_no_key_and_say_nothing_more() {
    let t = TestServer::start().await;
    for (path, want) in [
        ("/livez", json!({"status": "ok"})),
        // How many workspaces are open, never which.
        (
            "/readyz",
            json!({"status": "ready", "store": "up", "workspaces_open": 0}),
        ),
    ] {
        let (status, _, body) = read(t.http.get(t.url(path)).send().await.unwrap()).await;
        assert_eq!((status.as_u16(), body), (200, want));
    }
    t.stop().await;
}

#[tokio::test]
async fn a_first_run_without_keys_generates_one_keeps_it_and_is_never_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::test_config();
    config.auth.keys.clear();
    config.data_dir = dir.path().to_path_buf();
    let t = TestServer::start_with(
        config.clone(),
        std::sync::Arc::new(kbq::versions::SystemClock),
        false,
    )
    .await;
    let key = std::fs::read_to_string(dir.path().join("api-key"))
        .unwrap()
        .trim()
        .to_string();
    assert!(key.starts_with("kbq_") && key.len() == 68, "{key}");
    let (status, _, _) = read(
        t.http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, _) = read(
        t.http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    t.stop().await;
    // The next start reuses the kept key.
    let t = TestServer::start_with(
        config,
        std::sync::Arc::new(kbq::versions::SystemClock),
        false,
    )
    .await;
    let (status, _, _) = read(
        t.http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    t.stop().await;
}

/// Per-key data never crosses keys: a fact stored under one key is found by that key, and by
/// no operation of the document called with another key, each asked about it.
#[tokio::test]
async fn a_keys_memory_reaches_no_other_key_on_any_operation() {
    const SECRET: &str = "4711-XQ";
    const QUESTION: &str = "What do you remember about the vault code of zebra?";
    let other = "isolation-other-key";
    let mut config = test_config();
    config.auth.keys.push(key_entry("other", other, None));
    let t = TestServer::with_fixture(config).await;
    let (_, stored) = t
        .post(
            "/v1/agent/chat",
            json!({"message": format!("Remember that the vault code of zebra is {SECRET}")}),
        )
        .await;
    assert_eq!(
        stored["tool_calls"][0]["tool"], "MemoryStoreTool",
        "{stored}"
    );
    // The key that stored it finds it: the probe below can see a leak.
    let (_, mine) = t.post("/v1/agent/chat", json!({"message": QUESTION})).await;
    assert!(mine.to_string().contains(SECRET), "{mine}");

    let doc = document(&t).await;
    let mut asked = 0;
    for ((method, path), op) in documented(&doc) {
        if op["security"].as_array().is_none_or(Vec::is_empty) {
            continue;
        }
        // The operator's backup of a workspace holds every key's memory by design
        // (docs/operations.md, "Backup and restore"): no other operation may.
        if path == "/admin/v1/export" {
            continue;
        }
        let (url, body) = valid_request(&doc, &path, &op);
        // Every text a request carries asks about the fact.
        let body = body.map(|(content_type, bytes)| {
            let mut value: Value = match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                Err(_) => return (content_type, bytes),
            };
            ask(&mut value);
            (content_type, serde_json::to_vec(&value).unwrap())
        });
        for question in [None, Some("memory stats")] {
            let mut body = body.clone();
            if let (Some(q), Some((_, bytes))) = (question, body.as_mut()) {
                let mut value: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
                if value.get("message").is_none() {
                    continue;
                }
                value["message"] = q.into();
                *bytes = serde_json::to_vec(&value).unwrap();
            } else if question.is_some() {
                continue;
            }
            let mut r = t
                .http
                .request(Method::from_bytes(method.as_bytes()).unwrap(), t.url(&url))
                .header("X-API-Key", other);
            if let Some((content_type, bytes)) = body {
                r = r.header("content-type", content_type).body(bytes);
            }
            let (status, _, answer) = read(r.send().await.unwrap()).await;
            assert!(
                served(&op, status, &answer),
                "{method} {path}: {status} {answer}"
            );
            assert!(
                !answer.to_string().contains(SECRET),
                "{method} {path} showed another key's memory: {answer}"
            );
            if question.is_some() {
                assert_eq!(
                    answer["tool_calls"][0]["result"]["memories"], 0,
                    "{path}: {answer}"
                );
            }
            asked += 1;
        }
    }
    assert!(asked >= 19, "too few operations asked: {asked}");
    t.stop().await;
}

/// Puts the question into every free-text field of a request: a query, a message, an input,
/// a message's content.
fn ask(value: &mut Value) {
    const QUESTION: &str = "What do you remember about the vault code of zebra?";
    match value {
        Value::Object(fields) => {
            for (k, v) in fields.iter_mut() {
                match (k.as_str(), v.is_string()) {
                    ("query" | "message" | "input" | "content", true) => *v = QUESTION.into(),
                    _ => ask(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(ask),
        _ => {}
    }
}
