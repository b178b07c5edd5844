//! The agent API against a scripted OpenAI-compatible server on loopback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kbq::config::{Config, ProviderKindName, ProviderSection};
use kbq::versions::SystemClock;
use serde_json::{Value, json};

use crate::scripted::{MODEL_ID, ScriptedLlm, Step};
use crate::support::{KEY, TestServer, assert_error, eventually, read, test_config};

const CHAT: &str = "/v1/agent/chat";
const HEALTH: &str = "/v1/agent/health";

pub(crate) fn openai(
    name: &str,
    llm: &ScriptedLlm,
    retries: usize,
    timeout_ms: u64,
) -> ProviderSection {
    ProviderSection {
        name: name.into(),
        kind: ProviderKindName::Openai,
        base_url: Some(llm.base_url()),
        model: Some(MODEL_ID.into()),
        api_key_env: None,
        timeout_ms,
        max_retries: retries,
    }
}

pub(crate) fn builtin() -> ProviderSection {
    ProviderSection {
        name: "builtin".into(),
        kind: ProviderKindName::Builtin,
        base_url: None,
        model: None,
        api_key_env: None,
        timeout_ms: 5_000,
        max_retries: 0,
    }
}

/// Fast health rules so tests see ejection and recovery quickly.
pub(crate) fn agent_config(providers: Vec<ProviderSection>) -> Config {
    let mut c = test_config();
    c.providers = providers;
    c.health.probe_interval_ms = 50;
    c.health.failure_threshold = 2;
    c.health.cooldown_ms = 200;
    c.health.max_cooldown_ms = 2_000;
    c
}

pub(crate) async fn start(config: Config) -> TestServer {
    TestServer::with_fixture(config).await
}

fn tools_called(body: &Value) -> Vec<String> {
    body["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tool"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_multi_step_loop_records_every_call_in_order() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::ToolCalls(vec![(
        "HybridSearchTool".into(),
        json!({"query": "Who designed the engine?", "limit": 2}),
    )]));
    llm.push(Step::ToolCalls(vec![(
        "KnowledgeGraphTool".into(),
        json!({"entity": "Babbage", "depth": 1}),
    )]));
    llm.push(Step::Answer("Babbage designed the Engine.".into()));
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let (status, body) = t
        .post(CHAT, json!({"message": "Who designed the engine?"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["response"], "Babbage designed the Engine.");
    assert_eq!(body["stop_reason"], "answered");
    assert_eq!(body["provider"], "primary");
    assert_eq!(body["usage"]["steps"], 3);
    assert_eq!(body["usage"]["total_tokens"], 45);
    assert_eq!(
        tools_called(&body),
        vec!["HybridSearchTool", "KnowledgeGraphTool"]
    );
    let hybrid = &body["tool_calls"][0];
    assert_eq!(
        hybrid["arguments"],
        json!({"query": "Who designed the engine?", "limit": 2})
    );
    assert_eq!(hybrid["result"]["total"], 2);
    assert!(hybrid["result"]["results"].is_array());
    let graph = &body["tool_calls"][1];
    assert_eq!(graph["arguments"], json!({"entity": "Babbage", "depth": 1}));
    let names: Vec<&str> = graph["result"]["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["Babbage", "Ada", "Engine"]);
    assert!(graph["result"]["relationships"].is_array());

    // What the model saw: all six tools offered, then each tool result fed back.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered.len(), 6);
    assert_eq!(requests[0]["temperature"], json!(0.7));
    assert_eq!(requests[0]["max_tokens"], 1024);
    let last = requests[2]["messages"].as_array().unwrap();
    let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        vec!["system", "user", "assistant", "tool", "assistant", "tool"]
    );
    let fed_back: Value = serde_json::from_str(last[5]["content"].as_str().unwrap()).unwrap();
    assert_eq!(fed_back, graph["result"]);
    assert_eq!(last[3]["tool_call_id"], last[2]["tool_calls"][0]["id"]);
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn calls_in_one_step_run_together_and_bad_calls_become_error_results() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::ToolCalls(vec![
        ("MemoryStatsTool".into(), json!({})),
        ("KnowledgeGraphTool".into(), json!({"entity": "Ada"})),
        ("NoSuchTool".into(), json!({"x": 1})),
        (
            "KnowledgeGraphTool".into(),
            json!({"entity": "Ada", "depth": 99}),
        ),
    ]));
    llm.push(Step::RawToolCalls(vec![(
        "SemanticSearchTool".into(),
        "{not json".into(),
    )]));
    llm.push(Step::Answer("done".into()));
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let (status, body) = t.post(CHAT, json!({"message": "go"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(
        tools_called(&body),
        vec![
            "MemoryStatsTool",
            "KnowledgeGraphTool",
            "NoSuchTool",
            "KnowledgeGraphTool",
            "SemanticSearchTool"
        ]
    );
    let calls = body["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["result"]["memories"], 0);
    assert_eq!(calls[1]["result"]["found"], true);
    assert_eq!(calls[2]["result"]["error_type"], "unknown_tool");
    assert_eq!(calls[3]["result"]["error_type"], "invalid_arguments");
    assert!(
        calls[3]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("depth")
    );
    assert_eq!(calls[4]["arguments"], json!({"_raw": "{not json"}));
    assert_eq!(calls[4]["result"]["error_type"], "invalid_arguments");
    // Four results went back after the first step, in call order.
    let second = &llm.requests()[1]["messages"];
    let tool_msgs: Vec<&Value> = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_msgs.len(), 4);
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn transient_failures_are_retried_then_succeed() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Error(500, None));
    llm.push(Step::Error(429, Some(1)));
    llm.push(Step::Answer("third time lucky".into()));
    let t = start(agent_config(vec![openai("primary", &llm, 2, 5_000)])).await;
    let (status, body) = t.post(CHAT, json!({"message": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "third time lucky");
    assert_eq!(llm.requests().len(), 3);
    // A 400 is not retried.
    llm.push(Step::Error(400, None));
    let (_, body) = t.post(CHAT, json!({"message": "hello"})).await;
    assert_eq!(body["success"], false);
    assert_eq!(body["stop_reason"], "provider_error");
    assert!(body["error"].as_str().unwrap().contains("400"), "{body}");
    assert_eq!(llm.requests().len(), 4);
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_failing_primary_falls_back_and_health_degrades_then_recovers() {
    let llm = ScriptedLlm::start().await;
    let t = start(agent_config(vec![
        openai("primary", &llm, 1, 2_000),
        builtin(),
    ]))
    .await;
    let (status, _, health) = t.call(reqwest::Method::GET, HEALTH, None).await;
    assert_eq!(
        (status.as_u16(), health["status"].as_str()),
        (200, Some("healthy"))
    );

    llm.set_down(true);
    let (status, body) = t
        .post(CHAT, json!({"message": "Tell me about Babbage"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(
        body["provider"], "builtin",
        "the built-in provider answered: {body}"
    );
    assert_eq!(
        tools_called(&body),
        vec!["KnowledgeGraphTool", "HybridSearchTool"]
    );
    let degraded = eventually(Duration::from_secs(5), || async {
        let (_, _, h) = t.call(reqwest::Method::GET, HEALTH, None).await;
        h["status"] == "degraded"
    })
    .await;
    assert!(degraded);
    let (status, _, h) = t.call(reqwest::Method::GET, HEALTH, None).await;
    assert_eq!(status, 200);
    let primary = &h["providers"][0];
    assert_eq!(
        (primary["name"].as_str(), primary["status"].as_str()),
        (Some("primary"), Some("down"))
    );
    assert!(
        primary["last_error"].as_str().unwrap().contains("503"),
        "{primary}"
    );

    llm.set_down(false);
    let healthy = eventually(Duration::from_secs(5), || async {
        t.call(reqwest::Method::GET, HEALTH, None).await.2["status"] == "healthy"
    })
    .await;
    assert!(
        healthy,
        "a successful probe after the cooldown brings the primary back"
    );
    llm.push(Step::Answer("primary again".into()));
    let (_, body) = t.post(CHAT, json!({"message": "hi"})).await;
    assert_eq!(body["provider"], "primary");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn with_every_provider_down_chat_is_503_and_health_unhealthy_until_recovery() {
    let llm = ScriptedLlm::start().await;
    llm.set_down(true);
    let t = start(agent_config(vec![openai("only", &llm, 0, 2_000)])).await;
    let unhealthy = eventually(Duration::from_secs(5), || async {
        t.call(reqwest::Method::GET, HEALTH, None).await.0 == 503
    })
    .await;
    assert!(unhealthy, "probes alone eject a dead provider");
    let (_, _, h) = t.call(reqwest::Method::GET, HEALTH, None).await;
    assert_eq!(h["status"], "unhealthy");
    let (status, headers, body) = t
        .call(reqwest::Method::POST, CHAT, Some(json!({"message": "hi"})))
        .await;
    assert_eq!(status, 503);
    assert_error(&body, "service_unavailable", None);
    assert_eq!(headers["retry-after"], "1");

    llm.set_down(false);
    assert!(
        eventually(Duration::from_secs(5), || async {
            t.call(reqwest::Method::GET, HEALTH, None).await.0 == 200
        })
        .await
    );
    llm.push(Step::Answer("back".into()));
    let (status, body) = t.post(CHAT, json!({"message": "hi"})).await;
    assert_eq!(
        (status.as_u16(), body["response"].as_str()),
        (200, Some("back"))
    );
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn health_answers_from_cache_while_a_provider_hangs() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Hang);
    let t = start(agent_config(vec![openai("slow", &llm, 0, 500), builtin()])).await;
    let chat = async {
        let answer = t.post(CHAT, json!({"message": "Tell me about Ada"})).await;
        (answer, Instant::now())
    };
    let probe = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, _, _) = t.call(reqwest::Method::GET, HEALTH, None).await;
        (status, Instant::now())
    };
    let (((status, body), chat_done), (health_status, health_done)) = tokio::join!(chat, probe);
    assert_eq!(health_status, 200);
    // The chat waits out the hung attempt; health, asked while it hangs, does not wait.
    assert!(health_done < chat_done, "health waited on the provider");
    // The hung attempt timed out after 500 ms and the built-in provider answered.
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["provider"], "builtin");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_session_that_runs_out_of_time_stops_its_provider_call_and_retries() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Hang);
    llm.push(Step::Answer("too late".into()));
    // One retry after a 2 s timeout; the session gives up after 500 ms.
    let mut config = agent_config(vec![openai("slow", &llm, 1, 2_000)]);
    config.agent.max_wall_ms = 500;
    let t = start(config).await;
    let (status, body) = t.post(CHAT, json!({"message": "Tell me about Ada"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(llm.requests().len(), 1);
    // Past the attempt's timeout and the retry's back-off: nobody asked again.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        llm.requests().len(),
        1,
        "the provider kept retrying for nobody"
    );
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_its_session() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Hang);
    llm.push(Step::Answer("too late".into()));
    // One retry after a 1 s timeout: a session still running would ask the provider again.
    let t = start(agent_config(vec![openai("slow", &llm, 1, 1_000)])).await;
    let gone = t
        .http
        .post(t.url(CHAT))
        .bearer_auth(crate::support::KEY)
        .timeout(Duration::from_millis(200))
        .json(&json!({"message": "Tell me about Ada"}))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    assert_eq!(llm.requests().len(), 1);
    // Past the attempt's timeout and the retry's back-off: no second request came.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(llm.requests().len(), 1, "the session outlived its client");
    // The server is fine and the scripted answer is still there for the next chat.
    let (status, body) = t.post(CHAT, json!({"message": "Tell me about Ada"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "too late");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn the_step_cap_ends_a_loop_that_never_answers() {
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push(Step::ToolCalls(vec![("MemoryStatsTool".into(), json!({}))]));
    }
    let mut config = agent_config(vec![openai("primary", &llm, 0, 5_000)]);
    config.agent.max_steps = 3;
    let t = start(config).await;
    let (status, body) = t.post(CHAT, json!({"message": "loop forever"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["success"], false);
    assert_eq!(body["stop_reason"], "step_limit");
    assert_eq!(body["tool_calls"].as_array().unwrap().len(), 3);
    assert!(body["error"].as_str().unwrap().contains("3 steps"));
    assert!(body.get("response").is_none());
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn history_and_system_prompt_reach_the_provider() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Answer("ok".into()));
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let (status, _) = t
        .post(
            CHAT,
            json!({
                "message": "and now?",
                "system_prompt": "Be brief.",
                "history": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}],
                "temperature": 0.0,
                "max_tokens": 77
            }),
        )
        .await;
    assert_eq!(status, 200);
    let sent = &llm.requests()[0];
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "second"},
            {"role": "user", "content": "and now?"}
        ])
    );
    assert_eq!(sent["temperature"], json!(0.0));
    assert_eq!(sent["max_tokens"], 77);
    assert_eq!(sent["model"], MODEL_ID);
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_panicking_tool_is_restarted_and_the_next_chat_succeeds() {
    let mut config = agent_config(vec![]);
    config.agent.tool_workers = 1;
    let t = start(config).await;
    t.server().agent.tools().inject_panic("HybridSearchTool");
    let ok = eventually(Duration::from_secs(10), || async {
        let (s, b) = t
            .post(CHAT, json!({"message": "mechanical computer"}))
            .await;
        s == 200 && b["success"] == true && b["tool_calls"][0]["result"].get("error").is_none()
    })
    .await;
    assert!(ok);
    t.stop().await;
}

#[tokio::test]
async fn memory_belongs_to_the_key_that_stored_it() {
    let other_key = "other-key-456";
    let mut config = agent_config(vec![]);
    config.auth.keys.push(kbq::auth::KeyEntry {
        name: "other".into(),
        sha256: hex::encode(kbq::auth::hash(other_key)),
        scopes: None,
    });
    let t = start(config).await;
    let (_, body) = t
        .post(
            CHAT,
            json!({"message": "Remember that the vault code is 4711"}),
        )
        .await;
    assert_eq!(body["tool_calls"][0]["tool"], "MemoryStoreTool", "{body}");
    assert_eq!(body["tool_calls"][0]["result"]["stored"], true);
    let (_, mine) = t
        .post(
            CHAT,
            json!({"message": "What do you remember about the vault code?"}),
        )
        .await;
    assert!(
        mine["response"].as_str().unwrap().contains("4711"),
        "{mine}"
    );
    let res = t
        .http
        .post(t.url(CHAT))
        .header("X-API-Key", other_key)
        .json(&json!({"message": "What do you remember about the vault code?"}))
        .send()
        .await
        .unwrap();
    let (_, _, theirs) = read(res).await;
    assert_eq!(theirs["success"], true);
    assert!(
        !theirs.to_string().contains("4711"),
        "another key's memory leaked: {theirs}"
    );
    let (_, stats) = t.post(CHAT, json!({"message": "memory stats"})).await;
    assert_eq!(stats["tool_calls"][0]["result"]["memories"], 1);
    t.stop().await;
}

#[tokio::test]
async fn the_builtin_provider_answers_on_the_demo_knowledge_base() {
    let mut config = test_config();
    config.store.load_demo = true;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let (status, body) = t
        .post(CHAT, json!({"message": "Who influenced Alan Turing?"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["provider"], "builtin");
    assert_eq!(
        tools_called(&body),
        vec!["KnowledgeGraphTool", "HybridSearchTool"]
    );
    let answer = body["response"].as_str().unwrap();
    assert!(answer.contains("Alan Turing"), "{answer}");
    assert!(
        answer.contains("Kurt Gödel influenced Alan Turing"),
        "{answer}"
    );
    assert!(body["tool_calls"][1]["result"]["total"].as_u64().unwrap() > 0);
    let (_, health) = t.get(HEALTH).await;
    assert_eq!(health["status"], "healthy");
    assert_eq!(health["providers"][0]["kind"], "builtin");
    t.stop().await;
}

#[tokio::test]
async fn chat_requests_are_validated_field_by_field() {
    let t = TestServer::start().await;
    let long = "x".repeat(40 * 1024);
    for (body, field) in [
        (json!({}), "message"),
        (json!({"message": ""}), "message"),
        (json!({"message": 5}), "message"),
        (json!({"message": long}), "message"),
        (json!({"message": "hi", "temperature": -0.1}), "temperature"),
        (json!({"message": "hi", "temperature": 2.01}), "temperature"),
        (
            json!({"message": "hi", "temperature": "hot"}),
            "temperature",
        ),
        (json!({"message": "hi", "max_tokens": 0}), "max_tokens"),
        (json!({"message": "hi", "max_tokens": 4097}), "max_tokens"),
        (
            json!({"message": "hi", "history": [{"role": "system", "content": "x"}]}),
            "history[0].role",
        ),
        (
            json!({"message": "hi", "history": [{"role": "user"}]}),
            "history[0].content",
        ),
        (json!({"message": "hi", "history": "nope"}), "history"),
        (json!({"message": "hi", "tools": []}), "tools"),
    ] {
        let (status, err) = t.post(CHAT, body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    for (body, ok) in [
        (json!({"message": "hi", "temperature": 0.0}), true),
        (json!({"message": "hi", "temperature": 2.0}), true),
        (json!({"message": "hi", "max_tokens": 1}), true),
        (json!({"message": "hi", "max_tokens": 4096}), true),
    ] {
        let (status, b) = t.post(CHAT, body.clone()).await;
        assert_eq!(status == 200, ok, "{body}: {b}");
    }
    for path in [CHAT, HEALTH] {
        let res = t.http.get(t.url(path)).send().await.unwrap();
        assert!(res.status() == 401 || res.status() == 405, "{path}");
        let res = t
            .http
            .post(t.url(CHAT))
            .header("X-API-Key", "nope")
            .json(&json!({"message": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401);
    }
    let res = t.http.get(t.url(HEALTH)).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let res = t
        .http
        .get(t.url(HEALTH))
        .header("Authorization", format!("Bearer {KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    t.stop().await;
}

#[tokio::test]
async fn kbq_is_the_only_layer_that_retries_and_it_honours_retry_after() {
    let llm = ScriptedLlm::start().await;
    // No retries configured: one failed request, and the queued answer stays unused.
    llm.push(Step::Error(500, None));
    llm.push(Step::Answer("not reached".into()));
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let (_, body) = t.post(CHAT, json!({"message": "hi"})).await;
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(llm.requests().len(), 1, "nothing below kbq retried");
    t.stop().await;

    let llm2 = ScriptedLlm::start().await;
    llm2.push(Step::Error(429, Some(1)));
    llm2.push(Step::Answer("after waiting".into()));
    let t = start(agent_config(vec![openai("primary", &llm2, 1, 5_000)])).await;
    let started = Instant::now();
    let (_, body) = t.post(CHAT, json!({"message": "hi"})).await;
    assert_eq!(body["response"], "after waiting", "{body}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
    assert_eq!(llm2.requests().len(), 2);
    t.stop().await;
    llm.stop().await;
    llm2.stop().await;
}

#[tokio::test]
async fn chats_beyond_max_sessions_get_503_at_once() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("slow", &llm, 0, 10_000)]);
    config.agent.max_sessions = 1;
    let t = start(config).await;
    llm.push(Step::Delay(
        Duration::from_millis(800),
        Box::new(Step::Answer("first".into())),
    ));
    let first = {
        let (http, url) = (t.http.clone(), t.url(CHAT));
        tokio::spawn(async move {
            let res = http
                .post(url)
                .bearer_auth(KEY)
                .json(&json!({"message": "one"}))
                .send()
                .await
                .unwrap();
            (res.status(), res.json::<Value>().await.unwrap())
        })
    };
    // The first session is running once the provider has its request.
    assert!(
        eventually(Duration::from_secs(10), || async {
            llm.requests().len() == 1
        })
        .await
    );
    let (status, headers, body) = t
        .call(reqwest::Method::POST, CHAT, Some(json!({"message": "two"})))
        .await;
    assert_eq!(status, 503, "{body}");
    assert_error(&body, "service_unavailable", None);
    assert!(body["error"]["message"].as_str().unwrap().contains("busy"));
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        llm.requests().len(),
        1,
        "the refused chat reached no provider"
    );

    let (status, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "first");
    llm.push(Step::Answer("again".into()));
    let (status, body) = t.post(CHAT, json!({"message": "three"})).await;
    assert_eq!(status, 200, "{body}");
    t.stop().await;
    llm.stop().await;
}

/// The size of pool `pool` in `/metrics`.
async fn pool_size(t: &TestServer, pool: &str) -> Option<u64> {
    let text = t.metrics_text().await;
    let prefix = format!("kbq_pool_workers{{pool=\"{pool}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.parse().ok())
}

#[tokio::test]
async fn a_provider_pool_grows_while_calls_wait_and_shrinks_after() {
    let llm = ScriptedLlm::start().await;
    for i in 0..3 {
        llm.push(Step::Delay(
            Duration::from_millis(800),
            Box::new(Step::Answer(format!("answer {i}"))),
        ));
    }
    let mut config = agent_config(vec![openai("primary", &llm, 0, 5_000)]);
    config.agent.provider_workers = 1;
    config.agent.provider_max_workers = 4;
    let t = start(config).await;
    assert_eq!(pool_size(&t, "provider:primary").await, Some(1));
    let chats = futures::future::join_all(
        (0..3).map(|_| t.post(CHAT, json!({"message": "Tell me about Ada"}))),
    );
    let watch = async {
        // All three calls reach the provider at once: the pool grew to carry them.
        eventually(Duration::from_secs(5), || async {
            llm.requests().len() == 3
        })
        .await
    };
    let (answers, concurrent) = tokio::join!(chats, watch);
    assert!(
        concurrent,
        "the provider saw {} calls",
        llm.requests().len()
    );
    for (status, body) in answers {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["success"], true, "{body}");
    }
    let grown = pool_size(&t, "provider:primary").await.unwrap();
    assert!((3..=4).contains(&grown), "size {grown}");
    assert!(
        eventually(Duration::from_secs(15), || async {
            pool_size(&t, "provider:primary").await == Some(1)
        })
        .await,
        "the pool did not shrink back"
    );
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_full_provider_pool_sheds_with_503_and_serves_again_after() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Delay(
        Duration::from_millis(1_500),
        Box::new(Step::Answer("slow".into())),
    ));
    llm.push(Step::Answer("fast".into()));
    let mut config = agent_config(vec![openai("primary", &llm, 0, 5_000)]);
    config.agent.provider_workers = 1;
    config.agent.provider_max_workers = 1;
    config.agent.provider_queue_capacity = 0;
    let t = start(config).await;
    let slow = t.post(CHAT, json!({"message": "Tell me about Ada"}));
    let shed = async {
        assert!(
            eventually(Duration::from_secs(5), || async {
                llm.requests().len() == 1
            })
            .await
        );
        t.call(
            reqwest::Method::POST,
            CHAT,
            Some(json!({"message": "Tell me about Babbage"})),
        )
        .await
    };
    let ((slow_status, slow_body), (status, headers, body)) = tokio::join!(slow, shed);
    assert_eq!(status, 503, "{body}");
    assert_error(&body, "service_unavailable", None);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("busy"),
        "{body}"
    );
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(llm.requests().len(), 1, "a shed chat reaches no provider");
    assert_eq!(slow_status, 200, "{slow_body}");
    assert_eq!(slow_body["response"], "slow");
    // The worker is free again.
    let (status, body) = t
        .post(CHAT, json!({"message": "Tell me about Babbage"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "fast");
    t.stop().await;
    llm.stop().await;
}
