//! Per-key rate limits: separate budgets for graph and agent routes, 429 with Retry-After and
//! RateLimit headers, and recovery.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestServer, assert_error, eventually, read, test_config};

#[tokio::test]
async fn each_key_has_its_own_budget_per_route_group_and_recovers() {
    let other = "second-key-789";
    let mut config = test_config();
    config.limits.graph_per_minute = 120; // one request back every 500 ms
    config.limits.graph_burst = 2;
    config.limits.agent_per_minute = 60;
    config.limits.agent_burst = 1;
    config.auth.keys.push(kbq::auth::KeyEntry {
        name: "second".into(),
        sha256: hex::encode(kbq::auth::hash(other)),
        scopes: None,
    });
    let t = TestServer::with_fixture(config).await;
    let entity = "/data/v1/query/graph/entity/Ada";

    let (status, headers, _) = t.call(reqwest::Method::GET, entity, None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["ratelimit-limit"], "2");
    assert_eq!(headers["ratelimit-remaining"], "1");
    assert_eq!(headers["ratelimit-policy"], "120;w=60;burst=2");
    let (status, headers, _) = t.call(reqwest::Method::GET, entity, None).await;
    assert_eq!(
        (
            status.as_u16(),
            headers["ratelimit-remaining"].to_str().unwrap()
        ),
        (200, "0")
    );
    let (status, headers, body) = t.call(reqwest::Method::GET, entity, None).await;
    assert_eq!(status, 429);
    assert_error(&body, "RATE_LIMIT_EXCEEDED", None);
    assert_eq!(
        headers["retry-after"], "1",
        "500 ms rounds up to whole seconds"
    );
    assert_eq!(headers["ratelimit-remaining"], "0");
    assert!(headers.contains_key("x-request-id"));

    // Another key, and the agent budget, are untouched.
    let res = t
        .http
        .get(t.url(entity))
        .header("X-API-Key", other)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (status, _) = t.post("/v1/agent/chat", json!({"message": "hi"})).await;
    assert_eq!(status, 200);
    let (status, _) = t.post("/v1/agent/chat", json!({"message": "hi"})).await;
    assert_eq!(status, 429);
    // Rejected requests spend nothing: probes and unauthenticated calls are not limited.
    let (status, _, _) = read(t.http.get(t.url("/livez")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let (status, _, _) = read(t.http.get(t.url(entity)).send().await.unwrap()).await;
    assert_eq!(status, 401);

    let recovered = eventually(Duration::from_secs(3), || async {
        t.call(reqwest::Method::GET, entity, None).await.0 == 200
    })
    .await;
    assert!(recovered);
    t.stop().await;
}
