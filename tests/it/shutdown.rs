//! Graceful shutdown: a stopping server refuses new connections and lets the requests in
//! flight finish.

use std::time::Duration;

use serde_json::json;

use crate::agent::{agent_config, openai, start};
use crate::scripted::{ScriptedLlm, Step};
use crate::support::{KEY, eventually};

/// A chat whose provider answers `finished while stopping` after `delay`, started and in
/// flight (the provider has its request) when this returns.
async fn chat_in_flight(
    t: &crate::support::TestServer,
    llm: &ScriptedLlm,
    delay: Duration,
) -> tokio::task::JoinHandle<(reqwest::StatusCode, serde_json::Value)> {
    llm.push(Step::Delay(
        delay,
        Box::new(Step::Answer("finished while stopping".into())),
    ));
    let (http, url) = (t.http.clone(), t.url("/v1/agent/chat"));
    let chat = tokio::spawn(async move {
        let res = http
            .post(url)
            .bearer_auth(KEY)
            .json(&json!({"message": "hello"}))
            .send()
            .await
            .unwrap();
        (res.status(), res.json::<serde_json::Value>().await.unwrap())
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            !llm.requests().is_empty()
        })
        .await
    );
    chat
}

/// Asserts that the stopping server refuses new connections (within 5 s), that `chat`
/// finishes with its answer, and that the stop completes.
async fn drains(
    t: &crate::support::TestServer,
    chat: tokio::task::JoinHandle<(reqwest::StatusCode, serde_json::Value)>,
    stopping: tokio::task::JoinHandle<()>,
) {
    let fresh = reqwest::Client::new();
    let livez = t.url("/livez");
    assert!(
        eventually(Duration::from_secs(5), || async {
            fresh.get(&livez).send().await.is_err()
        })
        .await,
        "a stopping server still accepts connections"
    );
    let (status, body) = chat.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "finished while stopping");
    stopping.await.unwrap();
}

#[tokio::test]
async fn a_graceful_stop_drains_in_flight_requests_and_refuses_new_ones() {
    let llm = ScriptedLlm::start().await;
    let mut t = start(agent_config(vec![openai("slow", &llm, 0, 10_000)])).await;
    let chat = chat_in_flight(&t, &llm, Duration::from_millis(800)).await;
    let server = t.server.take().unwrap();
    let stopping = tokio::spawn(server.stop(true));

    // New connections are refused while the chat drains.
    drains(&t, chat, stopping).await;
    llm.stop().await;
}

/// From the first moment of a stop `/readyz` fails, while kbq serves on for
/// `server.shutdown_delay_ms` (a load balancer still sending requests gets answers); then it
/// refuses new connections, and the request in flight finishes.
#[tokio::test]
async fn a_stopping_server_fails_readiness_at_once_and_serves_through_its_delay() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("slow", &llm, 0, 10_000)]);
    config.server.shutdown_delay_ms = 800;
    let mut t = start(config).await;
    // One client, one connection kept open: a load balancer's probe connection.
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let readyz = t.url("/readyz");
    let ready = probe.get(&readyz).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let chat = chat_in_flight(&t, &llm, Duration::from_millis(1500)).await;
    let server = t.server.take().unwrap();
    let stopping = tokio::spawn(server.stop(true));
    tokio::time::sleep(Duration::from_millis(100)).await;

    let res = probe
        .get(&readyz)
        .send()
        .await
        .expect("the open connection answers");
    assert_eq!(res.status(), 503);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["error"]["message"], "not ready: stopping", "{body}");
    let res = probe
        .post(t.url("/data/v1/query/graph"))
        .bearer_auth(KEY)
        .json(&json!({"entity_name": "Ada"}))
        .send()
        .await
        .expect("the open connection answers");
    assert_eq!(res.status(), 200, "served through the delay");
    // Then new connections are refused while the chat drains.
    drains(&t, chat, stopping).await;
    llm.stop().await;
}

/// SIGTERM to the process: `/readyz` fails at once while kbq serves on through its delay,
/// then it drains, stops and exits with 0.
#[cfg(unix)]
#[tokio::test]
async fn sigterm_fails_readiness_then_drains_and_exits_cleanly() {
    let serve = crate::support::ServeProcess::start(
        &[
            ("KBQ_SERVER__SHUTDOWN_DELAY_MS", "1000"),
            ("RUST_LOG", "info"),
        ],
        std::process::Stdio::piped(),
    )
    .await;
    let base = format!("http://127.0.0.1:{}", serve.port);
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    assert_eq!(
        probe
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    crate::support::terminate(&serve.child);
    let not_ready = eventually(Duration::from_secs(5), || async {
        probe
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    assert!(not_ready, "/readyz did not fail after SIGTERM");
    let livez = probe.get(format!("{base}/livez")).send().await.unwrap();
    assert_eq!(livez.status(), 200, "serving on through the delay");
    let out = crate::support::exited(serve.child).await;
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{logs}", out.status);
    assert!(logs.contains("stopping"), "{logs}");
}
