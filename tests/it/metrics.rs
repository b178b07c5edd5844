//! `GET /metrics`: Prometheus text, with no key; requests by route pattern, method and
//! status, latency histograms, pools, providers, tool calls and rate-limit rejections.

use std::collections::HashMap;

use serde_json::json;

use crate::support::{TestServer, test_config};

/// Series name with labels -> value.
fn scrape(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_requests_pools_providers_tools_and_rejections() {
    let mut config = test_config();
    config.graph.workers = 3;
    config.limits.graph_per_minute = 5;
    config.limits.graph_burst = 5;
    let t = TestServer::with_fixture(config).await;
    for _ in 0..2 {
        let (status, _) = t
            .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
            .await;
        assert_eq!(status, 200);
    }
    let (status, _) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "Ada", "depth": 99}),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = t.get("/data/v1/query/graph/entity/Ada%20Lovelace").await;
    assert_eq!(status, 200);
    let (status, _) = t.get("/no/such/path/12345").await;
    assert_eq!(status, 404);
    // The graph budget (5) is spent by the four graph requests above and this one; the next is refused.
    let (status, _) = t.get("/data/v1/query/graph/entity/Ada").await;
    assert_eq!(status, 200);
    let (status, _) = t.get("/data/v1/query/graph/entity/Ada").await;
    assert_eq!(status, 429);
    let (status, body) = t
        .post("/v1/agent/chat", json!({"message": "Tell me about Ada"}))
        .await;
    assert_eq!(status, 200, "{body}");

    // No key needed, and not under a version.
    let res = t.http.get(t.url("/metrics")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = res.text().await.unwrap();
    let m = scrape(&text);
    let get = |s: &str| {
        *m.get(s)
            .unwrap_or_else(|| panic!("no series {s} in\n{text}"))
    };

    let graph = r#"route="/data/v1/query/graph""#;
    assert_eq!(
        get(&format!(
            r#"kbq_http_requests_total{{{graph},method="POST",status="200"}}"#
        )),
        2.0
    );
    assert_eq!(
        get(&format!(
            r#"kbq_http_requests_total{{{graph},method="POST",status="400"}}"#
        )),
        1.0
    );
    // Path parameters stay in the pattern; unmatched paths share one label.
    let entity = r#"route="/data/v1/query/graph/entity/{entity_name:.*}""#;
    assert_eq!(
        get(&format!(
            r#"kbq_http_requests_total{{{entity},method="GET",status="200"}}"#
        )),
        2.0
    );
    assert_eq!(
        get(&format!(
            r#"kbq_http_requests_total{{{entity},method="GET",status="429"}}"#
        )),
        1.0
    );
    assert_eq!(
        get(r#"kbq_http_requests_total{route="unmatched",method="GET",status="404"}"#),
        1.0
    );
    assert!(!text.contains("12345"));

    // Histogram: cumulative buckets, +Inf equals the count.
    let buckets: Vec<f64> = kbq::metrics::BUCKETS
        .iter()
        .map(|le| {
            get(&format!(
                r#"kbq_http_request_duration_seconds_bucket{{{graph},le="{le}"}}"#
            ))
        })
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    let inf = get(&format!(
        r#"kbq_http_request_duration_seconds_bucket{{{graph},le="+Inf"}}"#
    ));
    assert_eq!(inf, 3.0);
    assert_eq!(
        get(&format!(
            r#"kbq_http_request_duration_seconds_count{{{graph}}}"#
        )),
        3.0
    );
    assert!(
        get(&format!(
            r#"kbq_http_request_duration_seconds_sum{{{graph}}}"#
        )) > 0.0
    );

    // The fixture's records in each index, and each index's size.
    assert_eq!(get("kbq_ready"), 1.0);
    assert_eq!(get("kbq_store_up"), 1.0);
    assert_eq!(get(r#"kbq_index_records{kind="entities"}"#), 10.0);
    assert_eq!(get(r#"kbq_index_records{kind="relationships"}"#), 7.0);
    assert_eq!(get(r#"kbq_index_records{kind="documents"}"#), 3.0);
    assert_eq!(get(r#"kbq_index_records{kind="vectors"}"#), 3.0);
    // Only an embedded store keeps its documents in memory (docs/architecture.md); on a
    // SurrealDB server (scripts/test-remote) that index is empty.
    let remote = std::env::var("TEST_SURREALDB_URL").is_ok();
    for index in ["graph", "names", "vectors", "keyword", "documents"] {
        let bytes = get(&format!(r#"kbq_index_bytes{{index="{index}"}}"#));
        if index == "documents" && remote {
            assert_eq!(bytes, 0.0, "{index}");
        } else {
            assert!(bytes > 0.0, "{index}: {bytes}");
        }
    }
    // 3 vectors of 256 floats, and their codes, at the least.
    assert!(get(r#"kbq_index_bytes{index="vectors"}"#) >= 3.0 * 256.0 * 5.0);
    assert!(get("process_resident_memory_bytes") > 1e6);

    assert_eq!(get(r#"kbq_pool_workers{pool="graph"}"#), 3.0);
    assert_eq!(get(r#"kbq_pool_queue_depth{pool="graph"}"#), 0.0);
    assert_eq!(get(r#"kbq_pool_in_flight{pool="graph"}"#), 0.0);
    assert!(m.contains_key(r#"kbq_pool_active_workers{pool="graph"}"#));
    assert!(m.contains_key(r#"kbq_pool_queue_depth{pool="tool:HybridSearchTool"}"#));
    assert_eq!(
        get(r#"kbq_provider_up{provider="builtin",kind="builtin"}"#),
        1.0
    );
    assert_eq!(
        get(r#"kbq_provider_consecutive_failures{provider="builtin"}"#),
        0.0
    );
    assert!(get(r#"kbq_tool_calls_total{tool="HybridSearchTool",outcome="ok"}"#) >= 1.0);
    assert_eq!(get(r#"kbq_rate_limited_total{budget="graph"}"#), 1.0);
    t.stop().await;
}
