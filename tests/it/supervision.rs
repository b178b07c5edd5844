//! A crashed graph worker, or the whole graph pool, is restarted and the next request succeeds.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestServer, eventually};

#[tokio::test]
async fn a_panicking_graph_worker_is_replaced() {
    // One worker, so only a restarted worker can answer afterwards.
    let mut config = crate::support::test_config();
    config.graph.workers = 1;
    let t = TestServer::start_with(
        config,
        std::sync::Arc::new(kbq::versions::SystemClock),
        true,
    )
    .await;
    for _ in 0..3 {
        t.server().graph.inject_panic();
    }
    let healthy = eventually(Duration::from_secs(10), || async {
        t.post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
            .await
            .0
            == 200
    })
    .await;
    assert!(healthy);
    // And keeps answering.
    for _ in 0..20 {
        assert_eq!(
            t.post("/data/v1/query/graph/search", json!({"query": "a"}))
                .await
                .0,
            200
        );
    }
    t.stop().await;
}

#[tokio::test]
async fn a_stopped_graph_pool_is_restarted_by_the_root_supervisor() {
    let t = TestServer::start().await;
    let before = t.server().graph.factory().unwrap().get_id();
    t.server().graph.factory().unwrap().kill();
    let restarted = eventually(Duration::from_secs(10), || async {
        t.server().graph.factory().unwrap().get_id() != before
            && t.post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
                .await
                .0
                == 200
    })
    .await;
    assert!(restarted);
    assert_eq!(t.server().runtime().restarts().await, 1);
    t.stop().await;
}
