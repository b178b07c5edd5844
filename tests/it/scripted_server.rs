//! The scripted LLM server itself: what agent tests rely on it to do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::scripted::*;
use crate::support::{eventually, read};

// These tests wait on the real clock, briefly: the server answers on its own worker
// thread and runtime, which a paused tokio clock in the test cannot reach.

fn chat_body(model: &str, content: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": content}]})
}

async fn chat(
    llm: &ScriptedLlm,
    body: &Value,
    key: Option<&str>,
) -> (reqwest::StatusCode, HeaderMap, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .timeout(Duration::from_secs(30))
        .json(body);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    read(req.send().await.expect("request sent")).await
}

async fn list_models(llm: &ScriptedLlm) -> (reqwest::StatusCode, Value) {
    let res = reqwest::get(format!("{}/models", llm.base_url()))
        .await
        .expect("request sent");
    let (status, _, body) = read(res).await;
    (status, body)
}

fn assert_openai_error(body: &Value, kind: &str, message: &str) {
    assert_eq!(
        body,
        &json!({"error": {"message": message, "type": kind, "code": null}})
    );
}

#[tokio::test]
async fn scripted_tool_calls_and_answers_come_back_as_chat_completions() {
    let llm = ScriptedLlm::start().await;
    assert!(llm.base_url().starts_with("http://127.0.0.1:"));
    assert!(llm.base_url().ends_with("/v1"));
    llm.push(Step::ToolCalls(vec![
        ("search".into(), json!({"query": "Ada", "limit": 3})),
        ("traverse".into(), json!({"entity_name": "Ada"})),
    ]));
    llm.push(Step::Answer("Ada knows Babbage.".into()));
    llm.push(Step::RawToolCalls(vec![(
        "search".into(),
        "{not json".into(),
    )]));

    let first = chat_body("gpt-test", "who is Ada?");
    let (status, _, calls) = chat(&llm, &first, Some("sk-one")).await;
    assert_eq!(status, 200, "{calls}");
    assert_eq!(calls["object"], "chat.completion");
    assert!(calls["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(calls["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(calls["model"], "gpt-test");
    assert_eq!(
        calls["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    );
    let choice = &calls["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], Value::Null);
    let tool_calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(tool_calls.len(), 2);
    assert_eq!(tool_calls[0]["type"], "function");
    assert_eq!(tool_calls[0]["function"]["name"], "search");
    let arguments = tool_calls[0]["function"]["arguments"]
        .as_str()
        .expect("arguments is a JSON string");
    assert_eq!(
        serde_json::from_str::<Value>(arguments).unwrap(),
        json!({"query": "Ada", "limit": 3})
    );
    assert_eq!(tool_calls[1]["function"]["name"], "traverse");

    let second = chat_body("gpt-test", "and then?");
    let (status, _, answer) = chat(&llm, &second, None).await;
    assert_eq!(status, 200, "{answer}");
    assert_ne!(answer["id"], calls["id"]);
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["content"], "Ada knows Babbage.");
    assert!(choice["message"].get("tool_calls").is_none(), "{answer}");

    let (status, _, raw) = chat(&llm, &second, None).await;
    assert_eq!(status, 200, "{raw}");
    let raw_call = &raw["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(raw_call["function"]["arguments"], "{not json");

    // Tool call ids are unique across responses, not just within one.
    let mut ids: Vec<&Value> = tool_calls.iter().map(|c| &c["id"]).collect();
    ids.push(&raw_call["id"]);
    assert!(
        ids.iter()
            .all(|id| id.as_str().unwrap().starts_with("call_"))
    );
    assert_ne!(ids[0], ids[1]);
    assert_ne!(ids[0], ids[2]);
    assert_ne!(ids[1], ids[2]);

    assert_eq!(llm.requests(), vec![first, second.clone(), second]);
    assert_eq!(
        llm.auth_headers(),
        vec![Some("Bearer sk-one".to_string()), None, None]
    );
    llm.stop().await;
}

#[tokio::test]
async fn an_empty_script_or_a_stream_request_is_an_error() {
    let llm = ScriptedLlm::start().await;
    let (status, _, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 500);
    assert_openai_error(&body, "server_error", "script exhausted");

    // A stream request is refused without using up the queued step.
    llm.push(Step::Answer("still here".into()));
    let mut streamed = chat_body("m", "hi");
    streamed["stream"] = json!(true);
    let (status, _, body) = chat(&llm, &streamed, None).await;
    assert_eq!(status, 400);
    assert_openai_error(&body, "invalid_request_error", "streaming is not scripted");
    let (status, _, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["choices"][0]["message"]["content"], "still here");
    assert_eq!(llm.requests().len(), 3);
    llm.stop().await;
}

#[tokio::test]
async fn scripted_errors_carry_openai_bodies_and_retry_after() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Error(429, Some(2)));
    llm.push(Step::Error(502, None));
    llm.push(Step::Error(401, None));

    let (status, headers, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["error"]["code"], Value::Null);

    let (status, headers, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 502);
    assert!(headers.get("retry-after").is_none());
    assert_eq!(body["error"]["type"], "server_error");

    let (status, _, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("401"));
    llm.stop().await;
}

#[tokio::test]
async fn while_down_every_endpoint_is_503_and_probes_are_counted() {
    let llm = ScriptedLlm::start().await;
    let (status, body) = list_models(&llm).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"object": "list", "data": [{
            "id": "scripted-model", "object": "model", "created": 0, "owned_by": "kbq-tests"
        }]})
    );
    assert_eq!(llm.probes(), 1);

    llm.push(Step::Answer("after the outage".into()));
    llm.set_down(true);
    let (status, body) = list_models(&llm).await;
    assert_eq!(status, 503);
    assert_openai_error(&body, "server_error", "the scripted LLM is down");
    assert_eq!(llm.probes(), 2);
    let (status, _, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 503, "{body}");
    let res = reqwest::get(format!("{}/embeddings", llm.base_url()))
        .await
        .unwrap();
    assert_eq!(res.status(), 503);

    llm.set_down(false);
    let res = reqwest::get(format!("{}/embeddings", llm.base_url()))
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let (status, _, body) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["choices"][0]["message"]["content"], "after the outage");
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(llm.probes(), 2);
    llm.stop().await;
}

#[tokio::test]
async fn a_delay_holds_up_only_its_own_request() {
    let llm = Arc::new(ScriptedLlm::start().await);
    let delay = Duration::from_millis(500);
    llm.push(Step::Delay(delay, Box::new(Step::Answer("slow".into()))));
    llm.push(Step::Answer("fast".into()));

    let started = Instant::now();
    let slow = tokio::spawn({
        let llm = llm.clone();
        async move { chat(&llm, &chat_body("m", "slow"), None).await }
    });
    // The slow request must take the Delay step before the fast one is sent.
    assert!(
        eventually(Duration::from_secs(10), || async {
            llm.requests().len() == 1
        })
        .await
    );
    let (status, _, body) = chat(&llm, &chat_body("m", "fast"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["choices"][0]["message"]["content"], "fast");
    assert!(
        !slow.is_finished(),
        "the fast answer came after the slow one"
    );

    let (status, _, body) = slow.await.unwrap();
    assert!(started.elapsed() >= delay);
    assert_eq!(status, 200);
    assert_eq!(body["choices"][0]["message"]["content"], "slow");
    let llm = Arc::into_inner(llm).expect("the slow request let go of the server");
    llm.stop().await;
}

#[tokio::test]
async fn a_hang_times_the_client_out_and_does_not_hold_up_stop() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Hang);
    llm.push(Step::Answer("answered meanwhile".into()));
    let hung = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .timeout(Duration::from_millis(300))
        .json(&chat_body("m", "hi"))
        .send()
        .await;
    assert!(hung.expect_err("a hung step never answers").is_timeout());
    let (status, _, _) = chat(&llm, &chat_body("m", "hi"), None).await;
    assert_eq!(status, 200);
    tokio::time::timeout(Duration::from_secs(10), llm.stop())
        .await
        .expect("stop does not wait for the hung step");
}
