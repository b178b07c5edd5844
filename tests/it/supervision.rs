//! A crashed graph worker, or the whole graph pool, is restarted and the next request succeeds.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestServer, eventually};

#[tokio::test]
async fn a_panicking_graph_worker_is_replaced() {
    // One worker, so only a restarted worker can answer afterwards.
    let mut config = crate::support::test_config();
    config.graph.workers = 1;
    let t = TestServer::with_fixture(config).await;
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

#[tokio::test]
async fn a_full_graph_pool_sheds_with_503_while_probes_and_health_answer() {
    let mut config = crate::support::test_config();
    config.graph.workers = 1;
    config.graph.max_workers = 1;
    config.graph.queue_capacity = 1;
    let t = crate::agent::start(config).await;
    let pool = t.server().graph.clone();
    // One request holds the worker, one waits in the queue: the pool is full.
    let (release_running, running) = tokio::sync::oneshot::channel();
    let (release_queued, queued) = tokio::sync::oneshot::channel();
    let holds = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let p2 = pool.clone();
            let queued_call = tokio::spawn(async move { p2.hold(queued).await });
            let first = pool.hold(running).await;
            (first, queued_call.await.unwrap())
        })
    };
    assert!(
        crate::support::eventually(std::time::Duration::from_secs(10), || async {
            pool.in_flight() == 2
        })
        .await
    );
    let (status, headers, body) = t
        .call(
            reqwest::Method::POST,
            "/data/v1/query/graph",
            Some(serde_json::json!({"entity_name": "Ada"})),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    crate::support::assert_error(&body, "service_unavailable", None);
    assert!(body["error"]["message"].as_str().unwrap().contains("busy"));
    assert_eq!(headers["retry-after"], "1");
    // Probes and health do not queue behind the pool.
    assert_eq!(
        t.http.get(t.url("/livez")).send().await.unwrap().status(),
        200
    );
    assert_eq!(t.get("/v1/agent/health").await.0, 200);
    assert_eq!(pool.in_flight(), 2, "a shed request holds no place");

    release_running.send(()).unwrap();
    release_queued.send(()).unwrap();
    let (first, second) = holds.await.unwrap();
    assert!(first.is_ok() && second.is_ok());
    assert_eq!(pool.in_flight(), 0);
    let (status, body) = t
        .post(
            "/data/v1/query/graph",
            serde_json::json!({"entity_name": "Ada"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    t.stop().await;
}

#[tokio::test]
async fn a_graph_request_whose_caller_timed_out_frees_its_worker() {
    let mut config = crate::support::test_config();
    config.graph.workers = 1;
    config.graph.max_workers = 1;
    config.graph.call_timeout_ms = 300;
    let t = crate::agent::start(config).await;
    let pool = t.server().graph.clone();
    // A request that would hold the only worker for ever (its release is never sent): its
    // caller gives up after the call timeout.
    let (_never_released, held) = tokio::sync::oneshot::channel();
    let err = pool.hold(held).await.unwrap_err();
    assert!(matches!(err, kbq_actors::GraphError::Timeout(_)), "{err}");
    // The worker dropped the abandoned request, so the next one is answered instead of
    // waiting behind it until it, too, times out.
    let (status, body) = t
        .post(
            "/data/v1/query/graph",
            serde_json::json!({"entity_name": "Ada"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        eventually(Duration::from_secs(5), || async { pool.in_flight() == 0 }).await,
        "in flight: {}",
        pool.in_flight()
    );
    t.stop().await;
}

#[tokio::test]
async fn the_graph_pool_grows_while_requests_queue_and_shrinks_after() {
    let mut config = crate::support::test_config();
    config.graph.workers = 1;
    config.graph.max_workers = 4;
    let t = crate::agent::start(config).await;
    let pool = t.server().graph.clone();
    assert_eq!(pool.size(), 1);
    // Three requests that hold their workers: one worker runs one, two queue, then the
    // controller adds workers until all three run.
    let mut releases = Vec::new();
    let mut holds = Vec::new();
    for _ in 0..3 {
        let (tx, rx) = tokio::sync::oneshot::channel();
        releases.push(tx);
        let pool = pool.clone();
        holds.push(tokio::spawn(async move { pool.hold(rx).await }));
    }
    let grown = crate::support::eventually(std::time::Duration::from_secs(10), || async {
        pool.stats()
            .await
            .is_some_and(|s| s.active_workers == 3 && s.queue_depth == 0)
    })
    .await;
    assert!(grown, "size {} stats {:?}", pool.size(), pool.stats().await);
    assert!((3..=4).contains(&pool.size()));
    let (_, metrics) = {
        let res = t.http.get(t.url("/metrics")).send().await.unwrap();
        (res.status(), res.text().await.unwrap())
    };
    assert!(
        metrics.contains(&format!(
            "kbq_pool_workers{{pool=\"graph\"}} {}",
            pool.size()
        )),
        "{metrics}"
    );

    for tx in releases {
        tx.send(()).unwrap();
    }
    for h in holds {
        assert!(h.await.unwrap().is_ok());
    }
    // Quiet now: back to the least size.
    assert!(
        crate::support::eventually(std::time::Duration::from_secs(15), || async {
            pool.size() == 1
        })
        .await,
        "size {}",
        pool.size()
    );
    let (status, _) = t
        .post(
            "/data/v1/query/graph",
            serde_json::json!({"entity_name": "Ada"}),
        )
        .await;
    assert_eq!(status, 200);
    t.stop().await;
}

#[tokio::test]
async fn a_full_tool_pool_fails_the_call_at_once_and_the_model_sees_why() {
    let mut config = crate::support::test_config();
    config.store.load_demo = true;
    config.agent.tool_workers = 1;
    config.agent.tool_max_workers = 1;
    config.agent.tool_queue_capacity = 0;
    let t = crate::support::TestServer::start_with(
        config,
        std::sync::Arc::new(kbq::versions::SystemClock),
        false,
    )
    .await;
    let tools = t.server().agent.tools().clone();
    let (release, held) = tokio::sync::oneshot::channel();
    let hold = {
        let tools = tools.clone();
        tokio::spawn(async move { tools.hold("HybridSearchTool", held).await })
    };
    assert!(
        crate::support::eventually(std::time::Duration::from_secs(10), || async {
            tools.in_flight("HybridSearchTool") == 1
        })
        .await
    );
    // The built-in provider calls KnowledgeGraphTool and HybridSearchTool: the first
    // answers, the second is refused at once rather than queued behind the held worker.
    let (status, body) = t
        .post(
            "/v1/agent/chat",
            serde_json::json!({"message": "Who influenced Alan Turing?"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let calls = body["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["tool"], "KnowledgeGraphTool");
    assert!(calls[0]["result"].get("error").is_none(), "{body}");
    assert_eq!(calls[1]["tool"], "HybridSearchTool");
    assert!(
        calls[1]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("busy"),
        "{body}"
    );
    release.send(()).unwrap();
    assert!(hold.await.unwrap().is_ok());
    let (_, body) = t
        .post(
            "/v1/agent/chat",
            serde_json::json!({"message": "Who influenced Alan Turing?"}),
        )
        .await;
    assert!(
        body["tool_calls"][1]["result"].get("error").is_none(),
        "{body}"
    );
    t.stop().await;
}
