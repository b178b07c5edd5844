//! `POST /v1/chat/completions`: OpenAI's request and response, through the provider actors,
//! against a scripted OpenAI-compatible server and the built-in provider.

use std::sync::Arc;

use kbq::versions::SystemClock;
use reqwest::Method;
use serde_json::{Value, json};

use crate::agent::{agent_config, builtin, openai, start};
use crate::scripted::{MODEL_ID, ScriptedLlm, Step};
use crate::support::{KEY, TestServer, assert_error, read, test_config};

const PATH: &str = "/v1/chat/completions";

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn lookup_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "lookup",
        "description": "Looks a person up",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    }})
}

/// A scripted upstream (`upstream`, one retry) before the built-in provider (`fallback`),
/// and an alias `fast` over both.
async fn two_providers(llm: &ScriptedLlm) -> TestServer {
    let mut fallback = builtin();
    fallback.name = "fallback".into();
    let mut config = agent_config(vec![openai("upstream", llm, 1, 5_000), fallback]);
    // No ejection during a test: every call goes where the model name says.
    config.health.failure_threshold = 100;
    config
        .chat
        .aliases
        .insert("fast".into(), vec!["upstream".into(), "fallback".into()]);
    start(config).await
}

#[tokio::test]
async fn a_completion_goes_through_the_named_provider_with_tools_and_options() {
    let llm = ScriptedLlm::start().await;
    let t = two_providers(&llm).await;
    llm.push(Step::Error(500, None));
    llm.push(Step::ToolCalls(vec![(
        "lookup".into(),
        json!({"name": "Ada Lovelace"}),
    )]));
    let messages = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Who is Ada?"}]}
    ]);
    let (status, headers, body) = t
        .call(
            Method::POST,
            PATH,
            Some(json!({
                "model": "upstream",
                "messages": messages,
                "tools": [lookup_tool()],
                "tool_choice": {"type": "function", "function": {"name": "lookup"}},
                "temperature": 0.2,
                "top_p": 0.9,
                "stop": ["\n\n"],
                "seed": 7,
                "max_completion_tokens": 99
            })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-kbq-provider"], "upstream");
    assert_eq!(body["object"], "chat.completion");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(body["model"], "upstream");
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "lookup");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"name": "Ada Lovelace"}));
    assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(body["usage"]["total_tokens"].is_u64(), "{body}");

    // The 500 was retried by the provider actor; both attempts carried the request as given.
    let sent = llm.requests();
    assert_eq!(sent.len(), 2);
    for s in &sent {
        assert_eq!(s["model"], MODEL_ID);
        assert_eq!(s["messages"], messages);
        assert_eq!(s["tools"], json!([lookup_tool()]));
        assert_eq!(
            s["tool_choice"],
            json!({"type": "function", "function": {"name": "lookup"}})
        );
        assert_eq!(s["temperature"], json!(0.2));
        assert_eq!(s["top_p"], json!(0.9));
        assert_eq!(s["stop"], json!(["\n\n"]));
        assert_eq!(s["seed"], 7);
        assert_eq!(s["max_tokens"], 99);
        assert_eq!(s["stream"], false);
    }

    // The tool's result goes back to the model in the next request, as the client sends it.
    llm.push(Step::Answer("Ada Lovelace wrote the first program.".into()));
    let id = call["id"].as_str().unwrap();
    let follow_up = json!([
        {"role": "user", "content": "Who is Ada?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": id, "content": "{\"born\": 1815}"}
    ]);
    let (status, body) = t
        .post(
            PATH,
            json!({"model": "upstream", "messages": follow_up, "tools": [lookup_tool()]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Ada Lovelace wrote the first program."
    );
    let last = llm.requests().pop().unwrap();
    assert_eq!(last["messages"], follow_up);
    // Unset options are left to the model.
    assert!(last.get("temperature").is_none() && last.get("max_tokens").is_none());
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn an_alias_falls_back_and_a_provider_alone_does_not() {
    let llm = ScriptedLlm::start().await;
    let t = two_providers(&llm).await;
    let (status, models) = t.get("/v1/models").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec!["kbq", "fast", "upstream", "fallback", "kbq-hashing-v1"]
    );

    // A permanent failure (400) is not retried; the alias goes on to the built-in provider.
    llm.push(Step::Error(400, None));
    let (status, body) = t
        .post(
            PATH,
            json!({"model": "fast", "messages": user("Who is Ada?")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "fallback");
    assert!(
        !body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    assert_eq!(llm.requests().len(), 1);

    // The provider alone has nowhere to go: 502 upstream_error, with the provider's reason.
    llm.push(Step::Error(400, None));
    let (status, body) = t
        .post(
            PATH,
            json!({"model": "upstream", "messages": user("Who is Ada?")}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    assert_error(&body, "upstream_error", None);
    assert!(body["error"]["message"].as_str().unwrap().contains("400"));
    assert_eq!(llm.requests().len(), 2);

    // `kbq` is every provider in priority order.
    llm.push(Step::Answer("from upstream".into()));
    let (status, body) = t
        .post(
            PATH,
            json!({"model": "kbq", "messages": user("Who is Ada?")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "upstream");
    t.stop().await;
    llm.stop().await;
}

/// The `data:` payloads of a server-sent event stream.
fn events(text: &str) -> Vec<String> {
    assert!(text.ends_with("\n\n"), "{text:?}");
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}

async fn stream(t: &TestServer, body: Value) -> (Vec<Value>, String) {
    let res = t.post_stream(PATH, body).await;
    let mut data = events(&res.text().await.unwrap());
    let last = data.pop().unwrap();
    let chunks = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    (chunks, last)
}

#[tokio::test]
async fn streaming_sends_openai_chunks_ending_with_done() {
    let llm = ScriptedLlm::start().await;
    let t = two_providers(&llm).await;
    let answer = "Ada Lovelace, born 1815, wrote notes on the Analytical Engine that hold the first published program.";
    llm.push(Step::Answer(answer.into()));
    let (chunks, last) = stream(
        &t,
        json!({"model": "upstream", "messages": user("Who is Ada?"), "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(last, "[DONE]");
    let id = &chunks[0]["id"];
    assert!(chunks.iter().all(|c| c["id"] == *id
        && c["object"] == "chat.completion.chunk"
        && c["model"] == "upstream"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    // Content arrives in several pieces that add up to the answer.
    let content_chunks: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .collect();
    assert!(content_chunks.len() > 3);
    let text: String = content_chunks
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, answer);
    // The finish reason, then the usage in a chunk with no choices.
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    assert!(chunks[n - 1]["usage"]["total_tokens"].is_u64());
    assert!(chunks[..n - 1].iter().all(|c| c["usage"].is_null()));
    // Upstream was asked without streaming: kbq streams what it got whole.
    assert_eq!(llm.requests()[0]["stream"], false);

    // Tool calls stream as deltas with an index; no usage chunk unless asked.
    llm.push(Step::ToolCalls(vec![
        ("lookup".into(), json!({"name": "Ada"})),
        ("lookup".into(), json!({"name": "Babbage"})),
    ]));
    let (chunks, last) = stream(
        &t,
        json!({"model": "upstream", "messages": user("Ada and Babbage?"), "stream": true,
               "tools": [lookup_tool()]}),
    )
    .await;
    assert_eq!(last, "[DONE]");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(calls.len(), 2);
    for (i, c) in calls.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["function"]["name"], "lookup");
    }
    assert!(
        calls[1]["function"]["arguments"]
            .as_str()
            .unwrap()
            .contains("Babbage")
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn the_builtin_model_answers_from_the_knowledge_base_or_calls_offered_tools() {
    let mut config = test_config();
    config.store.load_demo = true;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    // No tools: the answer comes from the knowledge base itself.
    let (status, body) = t
        .post(
            PATH,
            json!({"model": "kbq", "messages": user("Who influenced Alan Turing?")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "builtin");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        answer.contains("Kurt Gödel influenced Alan Turing"),
        "{answer}"
    );

    // A conversation with no user message is answered too, from its instructions, or from
    // its first message when it has none.
    for messages in [
        json!([{"role": "system", "content": "Who influenced Alan Turing?"}]),
        json!([{"role": "assistant", "content": "Who influenced Alan Turing?"}]),
    ] {
        let (status, body) = t
            .post(PATH, json!({"model": "kbq", "messages": messages}))
            .await;
        assert_eq!(status, 200, "{messages}: {body}");
        let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(answer.contains("Kurt Gödel"), "{messages}: {answer}");
    }

    // A named tool is called, with the user's message in its required string parameter.
    let (status, body) = t
        .post(
            PATH,
            json!({"model": "builtin", "messages": user("Alan Turing"), "tools": [lookup_tool()],
                   "tool_choice": {"type": "function", "function": {"name": "lookup"}}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup");
    assert_eq!(call["function"]["arguments"], r#"{"name":"Alan Turing"}"#);

    // With `none` it answers instead; with a tool result it describes the result.
    let (_, body) = t
        .post(
            PATH,
            json!({"model": "builtin", "messages": user("Alan Turing"), "tools": [lookup_tool()],
                   "tool_choice": "none"}),
        )
        .await;
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    let (_, body) = t
        .post(
            PATH,
            json!({"model": "builtin", "messages": [
                {"role": "user", "content": "Alan Turing"},
                {"role": "assistant", "content": null, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "born 1912 in London"}
            ]}),
        )
        .await;
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer.contains("born 1912 in London"), "{answer}");
    t.stop().await;
}

#[tokio::test]
async fn bad_requests_name_the_field_and_the_rule() {
    let t = TestServer::start().await;
    let ok = user("hi");
    let tools = json!([lookup_tool()]);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"messages": ok}), "model"),
        (json!({"model": "kbq"}), "messages"),
        (json!({"model": "kbq", "messages": []}), "messages"),
        (json!({"model": "kbq", "messages": "hi"}), "messages"),
        (
            json!({"model": "kbq", "messages": [{"role": "robot", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "user"}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "user", "content": "x", "mood": 1}]}),
            "messages[0].mood",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].tool_call_id",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "assistant", "content": null}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "kbq", "messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]}),
            "messages[0].tool_calls[0]",
        ),
        (
            json!({"model": "kbq", "messages": ok, "temperature": 2.5}),
            "temperature",
        ),
        (
            json!({"model": "kbq", "messages": ok, "top_p": -0.1}),
            "top_p",
        ),
        (
            json!({"model": "kbq", "messages": ok, "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"model": "kbq", "messages": ok, "max_completion_tokens": 4097}),
            "max_completion_tokens",
        ),
        (json!({"model": "kbq", "messages": ok, "n": 2}), "n"),
        (json!({"model": "kbq", "messages": ok, "stop": [1]}), "stop"),
        (
            json!({"model": "kbq", "messages": ok, "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (
            json!({"model": "kbq", "messages": ok, "tools": [{"type": "web"}]}),
            "tools[0].type",
        ),
        (
            json!({"model": "kbq", "messages": ok, "tools": [{"type": "function", "function": {"name": "a b"}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"model": "kbq", "messages": ok, "tools": [lookup_tool(), lookup_tool()]}),
            "tools[1].function.name",
        ),
        (
            json!({"model": "kbq", "messages": ok, "tool_choice": "auto"}),
            "tool_choice",
        ),
        (
            json!({"model": "kbq", "messages": ok, "tools": tools, "tool_choice": "always"}),
            "tool_choice",
        ),
        (
            json!({"model": "kbq", "messages": ok, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "other"}}}),
            "tool_choice",
        ),
        (
            json!({"model": "kbq", "messages": ok, "logit_bias": {}}),
            "logit_bias",
        ),
    ];
    for (body, field) in cases {
        let (status, err) = t.post(PATH, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    // An unknown model is a 404 naming `model`, as OpenAI answers it.
    let (status, err) = t
        .post(PATH, json!({"model": "gpt-9", "messages": ok}))
        .await;
    assert_eq!(status, 404, "{err}");
    assert_error(&err, "not_found", Some("model"));
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("builtin")
    );
    t.stop().await;
}

#[tokio::test]
async fn both_key_headers_work_and_a_bad_key_gets_401() {
    let t = TestServer::start().await;
    let body = json!({"model": "kbq", "messages": user("hello")});
    let res = t
        .http
        .post(t.url(PATH))
        .header("X-API-Key", KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (status, _, err) = read(
        t.http
            .post(t.url(PATH))
            .bearer_auth("not-a-key")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    assert_error(&err, "INVALID_API_KEY", None);
    t.stop().await;
}
