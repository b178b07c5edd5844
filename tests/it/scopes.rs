//! Key scopes: each route needs one (read, agent; write for ingestion), `admin` holds them
//! all, and a key without the scope gets 403 `insufficient_scope` and changes nothing.

use reqwest::Method;
use serde_json::json;

use crate::support::{TestServer, assert_error, key_entry as key, read, test_config};

#[tokio::test]
async fn each_route_needs_its_scope() {
    let mut config = test_config();
    config.auth.keys.extend([
        key("reader", "reader-key", Some(&["read"])),
        key("agent", "agent-key", Some(&["agent"])),
        key("writer", "writer-key", Some(&["write"])),
        key("admin", "admin-key", Some(&["admin"])),
    ]);
    let t = TestServer::with_fixture(config).await;
    let routes: Vec<(Method, &str, Option<serde_json::Value>, &str)> = vec![
        (
            Method::POST,
            "/data/v1/query/graph",
            Some(json!({"entity_name": "Ada"})),
            "read",
        ),
        (Method::GET, "/data/v1/query/graph/entity/Ada", None, "read"),
        (
            Method::POST,
            "/v1/rag/keyword",
            Some(json!({"query": "Ada"})),
            "read",
        ),
        (Method::GET, "/v1/models", None, "read"),
        (
            Method::POST,
            "/v1/embeddings",
            Some(json!({"model": "kbq-hashing-v1", "input": "Ada"})),
            "read",
        ),
        (
            Method::POST,
            "/v1/agent/chat",
            Some(json!({"message": "Who is Ada?"})),
            "agent",
        ),
        (Method::GET, "/v1/agent/health", None, "any"),
        (
            Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": "kbq", "messages": [{"role": "user", "content": "Who is Ada?"}]})),
            "agent",
        ),
    ];
    for (method, path, body, needs) in routes {
        for (secret, holds) in [
            ("reader-key", "read"),
            ("agent-key", "agent"),
            ("writer-key", "write"),
            ("admin-key", "admin"),
            (crate::support::KEY, "all"),
        ] {
            let mut req = t
                .http
                .request(method.clone(), t.url(path))
                .bearer_auth(secret);
            if let Some(b) = &body {
                req = req.json(b);
            }
            let (status, _, err) = read(req.send().await.unwrap()).await;
            let allowed = needs == "any" || holds == needs || holds == "admin" || holds == "all";
            if allowed {
                assert_eq!(status, 200, "{path} with {holds}: {err}");
            } else {
                assert_eq!(status, 403, "{path} with {holds}: {err}");
                assert_error(&err, "insufficient_scope", None);
                assert!(err["error"]["message"].as_str().unwrap().contains(needs));
            }
        }
    }
    t.stop().await;
}
