//! A store written by the release before workspaces (tests/fixtures/store-7af75f2, made by its
//! `make` with kbq built at 7af75f2), opened by this kbq with the configuration it was
//! served with: everything it held is the workspace `default`, its key works as before, and
//! workspaces made afterwards start empty.

use std::path::Path;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::ServeProcess;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-7af75f2");

/// The plaintext key the old server was given in `KBQ_API_KEYS`.
const OLD_KEY: &str = "oldkey";

/// The chunks of the ingested note (`make` printed them).
const CHUNKS: u64 = 3;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn expected(name: &str) -> Value {
    let path = format!("{FIXTURE}/expected/{name}.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn of(serve: &ServeProcess) -> Client {
        Client {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: format!("http://127.0.0.1:{}", serve.port),
        }
    }

    async fn call(
        &self,
        key: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let (status, _, body) = crate::support::read(request.send().await.unwrap()).await;
        (status, body)
    }

    /// The names `GET /admin/v1/workspaces` lists, in its order.
    async fn workspaces(&self) -> Vec<String> {
        let listed = self.ok(Method::GET, "/admin/v1/workspaces", None).await;
        let names = listed["workspaces"].as_array().expect("a list");
        (names.iter())
            .map(|w| w["name"].as_str().expect("a name").to_string())
            .collect()
    }

    async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.call(OLD_KEY, method, path, body).await;
        assert!(status.is_success(), "{path}: {status} {answer}");
        answer
    }
}

/// The fields of `expected` (an object, recursively) as `actual` has them: what the old
/// release answered must be answered the same, and later releases may only add fields.
fn holds_all(actual: &Value, expected: &Value, at: &str) {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            // A document's score is computed afresh, not stored: ranking may change.
            for (k, v) in e.iter().filter(|(k, _)| *k != "score") {
                let got = a.get(k).unwrap_or(&Value::Null);
                holds_all(got, v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(e)) => {
            assert_eq!(a.len(), e.len(), "{at}: {actual} against {expected}");
            for (i, (a, e)) in a.iter().zip(e).enumerate() {
                holds_all(a, e, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(actual, expected, "{at}"),
    }
}

#[cfg(unix)]
async fn stop(serve: ServeProcess) {
    crate::support::terminate(&serve.child);
    let out = crate::support::exited(serve.child).await;
    assert!(out.status.success(), "{:?}", out.status);
}

#[cfg(unix)]
#[tokio::test]
async fn a_store_of_the_release_before_workspaces_is_served_unchanged_as_default() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    copy_dir(&Path::new(FIXTURE).join("store"), &store_dir);
    let store = format!("surrealkv://{}", store_dir.display());
    // The configuration the old server had, and nothing else.
    let env = [("KBQ_API_KEYS", OLD_KEY)];
    let serve = ServeProcess::start_on(&store, &env, std::process::Stdio::null()).await;
    let c = Client::of(&serve);

    // What the old release answered, answered the same.
    let walk = json!({"entity_name": "Ada Lovelace", "depth": 2});
    let traversal = c.ok(Method::POST, "/data/v1/query/graph", Some(walk)).await;
    holds_all(&traversal, &expected("traverse"), "traverse");
    let ada = c
        .ok(
            Method::GET,
            "/data/v1/query/graph/entity/Ada%20Lovelace",
            None,
        )
        .await;
    holds_all(&ada, &expected("entity"), "entity");
    let engine = json!({"entity_name": "Difference Engine", "max_depth": 1, "limit": 20});
    let documents = c
        .ok(
            Method::POST,
            "/data/v1/query/graph/documents",
            Some(engine.clone()),
        )
        .await;
    holds_all(&documents, &expected("documents"), "documents");
    assert!(
        documents.to_string().contains("notes/engines.md#1"),
        "the ingested note's chunk is a document of the entity it names: {documents}"
    );
    // The ingested file's source, which that release could not list.
    let sources = c.ok(Method::GET, "/data/v1/ingest/sources", None).await;
    assert_eq!(sources["total"], 1, "{sources}");
    assert_eq!(sources["sources"][0]["source_id"], "notes/engines.md");
    assert_eq!(sources["sources"][0]["chunks"], CHUNKS, "{sources}");

    // All of it is the workspace `default`, the only one.
    assert_eq!(c.workspaces().await, ["default"]);
    let default = c
        .ok(Method::GET, "/admin/v1/workspaces/default", None)
        .await;
    assert_eq!(
        default["counts"],
        json!({"entities": 5, "relationships": 5, "documents": 2 + CHUNKS, "memories": 1}),
        "{default}"
    );
    let stats = c.ok(Method::GET, "/data/v1/query/graph/stats", None).await;

    // The key's memory, as before.
    let walked = c
        .ok(
            Method::POST,
            "/data/v1/query/graph",
            Some(json!({"entity_name": "Charles Babbage", "depth": 1})),
        )
        .await;
    let mut found: Vec<&str> = walked["entities_found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "Ada Lovelace",
            "Analytical Engine",
            "Charles Babbage",
            "Difference Engine"
        ],
        "{walked}"
    );
    let recalled = c
        .ok(
            Method::POST,
            "/v1/agent/chat",
            Some(json!({"message": "What do you remember about the vault code?"})),
        )
        .await;
    assert!(recalled.to_string().contains("4711"), "{recalled}");

    // A workspace made now starts empty, and its key sees nothing of `default`.
    let (status, made) = c
        .call(
            OLD_KEY,
            Method::POST,
            "/admin/v1/workspaces",
            Some(json!({"name": "fresh"})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let (status, key) = c
        .call(
            OLD_KEY,
            Method::POST,
            "/admin/v1/workspaces/fresh/keys",
            Some(json!({"scopes": ["read", "write", "agent"], "name": "fresh-key"})),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let fresh = key["key"].as_str().unwrap();
    let (status, none) = c
        .call(
            fresh,
            Method::GET,
            "/data/v1/query/graph/entity/Ada%20Lovelace",
            None,
        )
        .await;
    assert_eq!(
        (status, &none),
        (StatusCode::OK, &Value::Null),
        "not found is null"
    );
    let (_, fresh_stats) = c
        .call(fresh, Method::GET, "/data/v1/query/graph/stats", None)
        .await;
    assert_eq!(fresh_stats["entities"], 0, "{fresh_stats}");

    // The old source is retracted as any: its chunk goes, the imported facts stay.
    let (status, gone) = c
        .call(
            OLD_KEY,
            Method::DELETE,
            "/data/v1/ingest/sources/files/notes%2Fengines.md",
            None,
        )
        .await;
    assert_eq!(status, 200, "{gone}");
    let documents = c
        .ok(Method::POST, "/data/v1/query/graph/documents", Some(engine))
        .await;
    assert!(
        !documents.to_string().contains("notes/engines.md"),
        "{documents}"
    );
    let after = c.ok(Method::GET, "/data/v1/query/graph/stats", None).await;
    assert_eq!(after["entities"], stats["entities"], "{after}");
    assert_eq!(after["relationships"], stats["relationships"], "{after}");
    assert_eq!(after["documents"], 2, "{after}");

    // Opened again, the store is the same: `default` and the workspace made since.
    stop(serve).await;
    let serve = ServeProcess::start_on(&store, &env, std::process::Stdio::null()).await;
    let c = Client::of(&serve);
    assert_eq!(c.workspaces().await, ["default", "fresh"]);
    let again = c.ok(Method::GET, "/data/v1/query/graph/stats", None).await;
    assert_eq!(again["entities"], stats["entities"], "{again}");
    stop(serve).await;
}
