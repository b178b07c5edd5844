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
    let t = TestServer::with_fixture(config.clone()).await;
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

/// With `server.probe_listen`, a second address answers the probes as the API's does, key
/// rule included, turns every other path away with 404, and stops with the server.
#[tokio::test]
async fn the_probes_listener_answers_the_probes_only() {
    let mut config = test_config();
    config.server.probe_listen = "127.0.0.1:0".into();
    let t = TestServer::with_fixture(config).await;
    let probe_addr = t.server().probe_addr().expect("a probe listener");
    assert_ne!(probe_addr, t.server().addr);
    let on = |base: String| {
        let http = t.http.clone();
        move |method: reqwest::Method, path: &str, key: bool| {
            let mut req = http.request(method, format!("{base}{path}"));
            if key {
                req = req.bearer_auth(crate::support::KEY);
            }
            async move { read(req.send().await.expect("request sent")).await }
        }
    };
    let (api, probes) = (on(t.base.clone()), on(format!("http://{probe_addr}")));
    use reqwest::Method;
    for (method, path, key) in [
        (Method::GET, "/livez", false),
        (Method::HEAD, "/livez", false),
        (Method::GET, "/readyz", false),
        (Method::HEAD, "/readyz", false),
        (Method::GET, "/v1/agent/health", true),
        (Method::GET, "/v1/agent/health", false),
    ] {
        let (a_status, a_headers, a_body) = api(method.clone(), path, key).await;
        let (p_status, p_headers, p_body) = probes(method.clone(), path, key).await;
        assert_eq!(p_status, a_status, "{method} {path}");
        // The health board carries when each provider was checked; the rest is the same.
        if path == "/v1/agent/health" && key {
            assert_eq!(p_status, 200);
            assert_eq!(p_body["status"], a_body["status"]);
        } else {
            assert_eq!(p_body, a_body, "{method} {path}");
        }
        assert_eq!(
            p_headers.get("cache-control"),
            a_headers.get("cache-control")
        );
        assert!(p_headers.contains_key("x-request-id"), "{method} {path}");
    }
    let (status, _, body) = probes(Method::GET, "/v1/agent/health", false).await;
    assert_eq!(status, 401, "{body}");

    // Everything else: the API's listener answers, the probes' gives 404.
    for (method, path) in [
        (Method::GET, "/data/v1/query/graph/entity/Ada"),
        (Method::GET, "/metrics"),
        (Method::GET, "/openapi.json"),
        (Method::POST, "/v1/agent/chat"),
        (Method::GET, "/livez/"),
    ] {
        let (status, _, body) = probes(method.clone(), path, true).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_error(&body, "not_found", None);
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("server.probe_listen"), "{message}");
    }
    let (status, _, _) = api(Method::GET, "/data/v1/query/graph/entity/Ada", true).await;
    assert_eq!(status, 200);

    t.stop().await;
    let refused = reqwest::get(format!("http://{probe_addr}/livez")).await;
    assert!(refused.is_err(), "the probes' listener outlived the server");
}
