//! Graceful shutdown: a stopping server refuses new connections and lets the requests in
//! flight finish.

use std::time::Duration;

use serde_json::json;

use crate::agent::{agent_config, openai, start};
use crate::scripted::{ScriptedLlm, Step};
use crate::support::{KEY, eventually};

#[tokio::test]
async fn a_graceful_stop_drains_in_flight_requests_and_refuses_new_ones() {
    let llm = ScriptedLlm::start().await;
    let mut t = start(agent_config(vec![openai("slow", &llm, 0, 10_000)])).await;
    llm.push(Step::Delay(
        Duration::from_millis(800),
        Box::new(Step::Answer("finished while stopping".into())),
    ));
    let chat = {
        let (http, url) = (t.http.clone(), t.url("/v1/agent/chat"));
        tokio::spawn(async move {
            let res = http
                .post(url)
                .bearer_auth(KEY)
                .json(&json!({"message": "hello"}))
                .send()
                .await
                .unwrap();
            (res.status(), res.json::<serde_json::Value>().await.unwrap())
        })
    };
    // The chat is in flight once the provider has its request.
    assert!(
        eventually(Duration::from_secs(10), || async {
            !llm.requests().is_empty()
        })
        .await
    );
    let server = t.server.take().unwrap();
    let stopping = tokio::spawn(server.stop(true));

    // New connections are refused while the chat drains.
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
    llm.stop().await;
}
