//! Readiness and the store being unreachable.

use std::sync::Arc;
use std::time::Duration;

use kbq::versions::SystemClock;
use serde_json::json;

use crate::support::{TestServer, assert_error, assert_not_ready, read, store_routes, test_config};

#[tokio::test]
async fn an_unreachable_store_gives_503_and_not_ready_but_the_process_lives() {
    // Nothing listens on port 9 (discard) here: the connection is refused.
    let mut config = test_config();
    config.store.url = "ws://127.0.0.1:9".into();
    config.store.connect_timeout_ms = 1000;
    let t = TestServer::start_unready(config, Arc::new(SystemClock)).await;

    let (status, _, _) = read(t.http.get(t.url("/livez")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_not_ready(&t, "not ready: store connecting").await;

    for (method, path, body) in store_routes() {
        let started = std::time::Instant::now();
        let (status, _, err) = t.call(method, path, body).await;
        assert_eq!(status, 503, "{path}: {err}");
        assert_error(&err, "service_unavailable", None);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{path} must not hang"
        );
    }
    t.stop().await;
}

#[tokio::test]
async fn a_surrealkv_store_keeps_its_data_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config();
    config.store.url = format!("surrealkv://{}", dir.path().join("kb").display());
    let t = TestServer::start_with(config.clone(), Arc::new(SystemClock), true).await;
    t.stop().await;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let ready = crate::support::eventually(Duration::from_secs(10), || async {
        t.get("/data/v1/query/graph/entity/Ada").await.0 == 200
    })
    .await;
    assert!(ready, "the reopened store did not answer");
    let (_, body) = t
        .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
        .await;
    assert_eq!(body["total_entities"], 5);
    t.stop().await;
}
