//! `POST /v1/agent/chat` with `stream: true`, against a scripted OpenAI-compatible server on
//! loopback: the events' order and shapes, the last event against the same turn unstreamed,
//! events that arrive while the turn still runs, an error after the stream began, and a
//! client that leaves.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::agent::{agent_config, openai, start};
use crate::scripted::{ScriptedLlm, Step};
use crate::support::{TestServer, eventually};

const CHAT: &str = "/v1/agent/chat";

/// One server-sent event: its name and its data as JSON.
#[derive(Debug, Clone)]
struct Event {
    name: String,
    data: Value,
}

/// Parses whole events out of `buf`, leaving a partial one there. Comment lines (keep-alives)
/// are skipped; every event must have a name and one line of JSON data.
fn parse_events(buf: &mut String) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(end) = buf.find("\n\n") {
        let block: String = buf.drain(..end + 2).collect();
        let (mut name, mut data) = (None, None);
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n.to_string());
            } else if let Some(d) = line.strip_prefix("data: ") {
                assert!(data.is_none(), "one data line per event: {block:?}");
                data = Some(serde_json::from_str(d).expect("data is JSON"));
            } else {
                assert!(line.is_empty() || line.starts_with(':'), "{line:?}");
            }
        }
        if let (Some(name), Some(data)) = (name, data) {
            out.push(Event { name, data });
        }
    }
    out
}

/// Every event of a streamed chat, read to its end.
async fn stream_all(t: &TestServer, body: Value) -> Vec<Event> {
    let text = t.post_stream(CHAT, body).await.text().await.unwrap();
    let mut buf = text;
    let events = parse_events(&mut buf);
    assert!(buf.is_empty(), "a partial event at the end: {buf:?}");
    events
}

fn script(llm: &ScriptedLlm) {
    llm.push(Step::ToolCalls(vec![
        (
            "HybridSearchTool".into(),
            json!({"query": "Who designed the engine?", "limit": 2}),
        ),
        ("MemoryStatsTool".into(), json!({})),
    ]));
    llm.push(Step::ToolCalls(vec![(
        "KnowledgeGraphTool".into(),
        json!({"entity": "Babbage", "depth": 1}),
    )]));
    llm.push(Step::Answer("Babbage designed the Engine.".into()));
}

#[tokio::test]
async fn a_streamed_chat_reports_each_call_and_ends_with_the_unstreamed_answer() {
    let llm = ScriptedLlm::start().await;
    script(&llm);
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let events = stream_all(
        &t,
        json!({"message": "Who designed the engine?", "stream": true}),
    )
    .await;
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    // Both calls of the first step start before either ends; the second step's call comes
    // after both; the text, then the answer.
    assert_eq!(names.len(), 8, "{names:?}");
    assert_eq!(&names[..2], ["tool_call.started", "tool_call.started"]);
    assert_eq!(&names[2..4], ["tool_call.completed", "tool_call.completed"]);
    assert_eq!(
        &names[4..],
        ["tool_call.started", "tool_call.completed", "delta", "done"]
    );
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e.name == "tool_call.started")
        .map(|e| &e.data)
        .collect();
    assert_eq!(started[0]["index"], 0);
    assert_eq!(started[0]["step"], 1);
    assert_eq!(started[0]["tool"], "HybridSearchTool");
    assert_eq!(
        started[0]["arguments"],
        json!({"query": "Who designed the engine?", "limit": 2})
    );
    assert_eq!(started[1]["index"], 1);
    assert_eq!(started[1]["tool"], "MemoryStatsTool");
    assert_eq!(started[2]["index"], 2);
    assert_eq!(started[2]["step"], 2);
    assert_eq!(started[2]["tool"], "KnowledgeGraphTool");
    assert!(
        started
            .iter()
            .all(|s| s["id"].as_str().is_some_and(|id| !id.is_empty()))
    );
    let done = &events[7].data;
    assert_eq!(
        events[6].data,
        json!({"text": "Babbage designed the Engine."})
    );
    assert_eq!(done["response"], "Babbage designed the Engine.");
    assert_eq!(done["success"], true);
    assert_eq!(done["usage"]["steps"], 3);
    // Each completed call is its record in the answer, with the id it started with.
    for e in events.iter().filter(|e| e.name == "tool_call.completed") {
        let i = e.data["index"].as_u64().unwrap() as usize;
        let record = &done["tool_calls"][i];
        assert_eq!(e.data["tool"], record["tool"]);
        assert_eq!(e.data["arguments"], record["arguments"]);
        assert_eq!(e.data["result"], record["result"]);
        assert_eq!(e.data["id"], started[i]["id"]);
        assert!(e.data["duration_ms"].as_f64().unwrap() >= 0.0);
        assert!(e.data.get("error").is_none(), "{}", e.data);
    }
    // The same turn unstreamed answers exactly the last event's data.
    script(&llm);
    let (status, body) = t
        .post(CHAT, json!({"message": "Who designed the engine?"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(&body, done);
    // `stream: false` is the JSON answer too.
    llm.push(Step::Answer("plain".into()));
    let (status, body) = t
        .post(CHAT, json!({"message": "hello", "stream": false}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "plain");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_failed_call_streams_its_error_and_the_stream_still_ends_with_done() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::ToolCalls(vec![(
        "KnowledgeGraphTool".into(),
        json!({"entity": "Ada", "depth": 99}),
    )]));
    llm.push(Step::Answer("sorry".into()));
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let events = stream_all(&t, json!({"message": "go", "stream": true})).await;
    let completed = events
        .iter()
        .find(|e| e.name == "tool_call.completed")
        .unwrap();
    assert_eq!(completed.data["result"]["error_type"], "invalid_arguments");
    assert!(
        completed.data["error"]
            .as_str()
            .is_some_and(|m| m.contains("depth")),
        "{}",
        completed.data
    );
    assert_eq!(events.last().unwrap().name, "done");
    assert_eq!(events.last().unwrap().data["response"], "sorry");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn events_arrive_while_the_turn_still_runs() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::ToolCalls(vec![("MemoryStatsTool".into(), json!({}))]));
    llm.push(Step::Delay(
        Duration::from_millis(2_000),
        Box::new(Step::Answer("later".into())),
    ));
    let t = start(agent_config(vec![openai("primary", &llm, 0, 10_000)])).await;
    let began = Instant::now();
    let mut res = t
        .post_stream(CHAT, json!({"message": "stats", "stream": true}))
        .await;
    let mut buf = String::new();
    let mut seen: Vec<(Event, Duration)> = Vec::new();
    while let Some(chunk) = res.chunk().await.unwrap() {
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        for e in parse_events(&mut buf) {
            seen.push((e, began.elapsed()));
        }
    }
    let names: Vec<&str> = seen.iter().map(|(e, _)| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["tool_call.started", "tool_call.completed", "delta", "done"]
    );
    // The call's events came before the provider's delayed answer; the end came after it.
    let (completed_at, done_at) = (seen[1].1, seen[3].1);
    assert!(done_at >= Duration::from_millis(2_000), "{done_at:?}");
    assert!(
        done_at - completed_at >= Duration::from_millis(1_500),
        "completed at {completed_at:?}, done at {done_at:?}"
    );
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_turn_that_cannot_run_after_the_stream_began_ends_with_an_error_event() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::Delay(
        Duration::from_millis(1_500),
        Box::new(Step::Answer("slow".into())),
    ));
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
        // The provider's only worker is busy: the turn starts, then cannot ask anyone.
        stream_all(
            &t,
            json!({"message": "Tell me about Babbage", "stream": true}),
        )
        .await
    };
    let ((slow_status, _), events) = tokio::join!(slow, shed);
    assert_eq!(slow_status, 200);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].name, "error");
    assert_eq!(events[0].data["error"]["code"], "service_unavailable");
    assert!(
        events[0].data["error"]["message"]
            .as_str()
            .unwrap()
            .contains("busy")
    );
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_a_stream_cancels_its_session() {
    let llm = ScriptedLlm::start().await;
    llm.push(Step::ToolCalls(vec![("MemoryStatsTool".into(), json!({}))]));
    llm.push(Step::Hang);
    llm.push(Step::Answer("too late".into()));
    // One retry after a 1 s timeout: a session still running would ask the provider again.
    let t = start(agent_config(vec![openai("slow", &llm, 1, 1_000)])).await;
    let mut res = t
        .post_stream(CHAT, json!({"message": "stats", "stream": true}))
        .await;
    // Read up to the call's end, then leave while the provider hangs.
    let mut buf = String::new();
    let mut names = Vec::new();
    while !names.contains(&"tool_call.completed".to_string()) {
        let chunk = res.chunk().await.unwrap().expect("the stream went on");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        names.extend(parse_events(&mut buf).into_iter().map(|e| e.name));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            llm.requests().len() == 2
        })
        .await
    );
    drop(res);
    // Past the attempt's timeout and the retry's back-off: no third request came.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(llm.requests().len(), 2, "the session outlived its client");
    // The server is fine and the scripted answer is still there for the next chat.
    let (status, body) = t.post(CHAT, json!({"message": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "too late");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn stream_must_be_a_boolean() {
    let llm = ScriptedLlm::start().await;
    let t = start(agent_config(vec![openai("primary", &llm, 0, 5_000)])).await;
    let (status, body) = t
        .post(CHAT, json!({"message": "hi", "stream": "yes"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "stream", "{body}");
    assert!(llm.requests().is_empty());
    t.stop().await;
    llm.stop().await;
}
