//! MCP at `/mcp` with the official MCP Python SDK as the client (tests/mcp/setup.sh installs
//! it; tests/mcp/mcp_client.py drives it), and the HTTP layers in front of it: keys, scopes,
//! the rate budget, and the tool calls in /metrics.

use std::sync::Arc;

use kbq::versions::SystemClock;
use serde_json::json;

use crate::support::{KEY, TestServer, key_entry, test_config};

const OTHER: &str = "mcp-other-key";
const READER: &str = "mcp-reader-key";
const WRITER: &str = "mcp-writer-key";

fn initialize() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "kbq-test", "version": "1"}
    }})
}

/// The JSON-RPC answer of a streamed reply: SSE events of one data line each, the answer
/// the last.
fn sse_answer(text: &str) -> serde_json::Value {
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .rfind(|d| !d.trim().is_empty())
        .unwrap_or_else(|| panic!("no data in {text:?}"));
    serde_json::from_str(data).unwrap()
}

async fn post_mcp(t: &TestServer, key: Option<&str>) -> reqwest::Response {
    let mut req = t
        .http
        .post(t.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&initialize());
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn the_official_python_sdk_lists_and_calls_every_tool_with_keys_and_scopes() {
    let venv = crate::support::python_venv("tests/mcp/setup.sh", "mcp-venv").await;
    let mut config = test_config();
    config.store.load_demo = true;
    config.auth.keys.extend([
        key_entry("other", OTHER, None),
        key_entry("reader", READER, Some(&["read"])),
        key_entry("writer", WRITER, Some(&["write"])),
    ]);
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    crate::support::python_checks(
        &venv,
        "tests/mcp/mcp_client.py",
        [t.url("/mcp").as_str(), KEY, OTHER, READER, WRITER],
    )
    .await;
    // Every call was counted, good and bad.
    let metrics = t.metrics_text().await;
    for line in [
        "kbq_tool_calls_total{tool=\"EntityLookupTool\",outcome=\"ok\"}",
        "kbq_tool_calls_total{tool=\"KeywordSearchTool\",outcome=\"error\"}",
        "kbq_tool_calls_total{tool=\"MemoryStoreTool\",outcome=\"ok\"}",
    ] {
        assert!(metrics.contains(line), "no {line} in /metrics");
    }
    t.stop().await;
}

/// `kbq mcp`, started by the SDK as a host starts a local server.
#[tokio::test]
async fn the_official_python_sdk_calls_every_tool_over_stdio() {
    let venv = crate::support::python_venv("tests/mcp/setup.sh", "mcp-venv").await;
    let data = tempfile::tempdir().unwrap();
    let args = [
        std::ffi::OsStr::new("--stdio"),
        std::ffi::OsStr::new(env!("CARGO_BIN_EXE_kbq")),
        data.path().as_os_str(),
    ];
    crate::support::python_checks(&venv, "tests/mcp/mcp_client.py", args).await;
}

#[tokio::test]
async fn mcp_is_behind_the_keys_scopes_and_budgets_of_the_api() {
    let mut config = test_config();
    config
        .auth
        .keys
        .push(key_entry("writer", WRITER, Some(&["write"])));
    config.limits.graph_per_minute = 60;
    config.limits.graph_burst = 2;
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let res = post_mcp(&t, None).await;
    assert_eq!(res.status(), 401);
    let res = post_mcp(&t, Some("not-a-key")).await;
    assert_eq!(res.status(), 401);
    let res = post_mcp(&t, Some(WRITER)).await;
    assert_eq!(res.status(), 403);
    // rmcp's own refusals keep their status, in kbq's error body.
    let res = t
        .http
        .post(t.url("/mcp"))
        .bearer_auth(KEY)
        .json(&initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 406);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("MCP: ")
    );
    // The key's graph budget (the 406 spent one): one more, then 429 with Retry-After.
    for _ in 0..1 {
        let res = post_mcp(&t, Some(KEY)).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers().contains_key("mcp-session-id"));
    }
    let res = post_mcp(&t, Some(KEY)).await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    t.stop().await;
}

/// `kbq mcp` with a key that is not one of its configuration's refuses to start.
#[tokio::test]
async fn kbq_mcp_refuses_an_unknown_key() {
    let data = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(["mcp", "--store", "mem://"])
        .env_remove("KBQ_CONFIG")
        .env_remove("KBQ_API_KEYS")
        .env("KBQ_DATA_DIR", data.path())
        .env("KBQ_API_KEY", "not-a-key")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("KBQ_API_KEY is not one of"));
}

/// The current stable protocol version (2026-07-28: no handshake, the version and the method
/// in every request) and the one before it (2025-11-25, with `initialize`); an older host is
/// offered 2025-11-25.
#[tokio::test]
async fn both_protocol_versions_are_served() {
    let t = TestServer::start_with(test_config(), Arc::new(SystemClock), true).await;
    // 2026-07-28 names the version, the method and the tool in headers as well.
    let send = |version: &'static str, method: &'static str, body: serde_json::Value| {
        t.http
            .post(t.url("/mcp"))
            .bearer_auth(KEY)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .header("mcp-method", method)
            .header("mcp-name", "EntityLookupTool")
            .json(&body)
            .send()
    };
    let res = send(
        "2026-07-28",
        "tools/call",
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "EntityLookupTool", "arguments": {"name": "Ada"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }}),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let body = sse_answer(&res.text().await.unwrap());
    assert_eq!(
        body["result"]["structuredContent"]["entity"]["name"], "Ada",
        "{body}"
    );
    for (asked, given) in [("2025-11-25", "2025-11-25"), ("2025-03-26", "2025-11-25")] {
        let mut init = initialize();
        init["params"]["protocolVersion"] = json!(asked);
        // A handshake names its version in the body only.
        let res = t
            .http
            .post(t.url("/mcp"))
            .bearer_auth(KEY)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let body = sse_answer(&res.text().await.unwrap());
        assert_eq!(body["result"]["protocolVersion"], given, "{body}");
    }
    t.stop().await;
}

/// A session belongs to the key that opened it: another key naming it is answered as if
/// there were no such session, and cannot end it.
#[tokio::test]
async fn a_session_is_the_key_s_that_opened_it() {
    let mut config = test_config();
    config.auth.keys.push(key_entry("other", OTHER, None));
    let t = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let res = post_mcp(&t, Some(KEY)).await;
    assert_eq!(res.status(), 200);
    let session = res.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let end = |key: &'static str| {
        t.http
            .delete(t.url("/mcp"))
            .bearer_auth(key)
            .header("mcp-session-id", &session)
            .send()
    };
    let res = end(OTHER).await.unwrap();
    assert_eq!(res.status(), 404);
    let refused: serde_json::Value = res.json().await.unwrap();
    let res = end(KEY).await.unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    // Ended: a message to it finds no session.
    let res = t
        .http
        .post(t.url("/mcp"))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    // The same answer as to another key: neither tells whether the session exists.
    let gone: serde_json::Value = res.json().await.unwrap();
    assert_eq!(gone, refused);
    assert_eq!(gone["error"]["code"], "not_found");
    t.stop().await;
}

/// Graph documents are answered two ways: the HTTP route has the worker that found them write
/// its body, the MCP tool serializes them on its own side. Both answer the same, with and
/// without a type filter, resolved or not.
#[tokio::test]
async fn graph_documents_over_mcp_are_the_http_routes_answer() {
    let t = TestServer::start_with(test_config(), Arc::new(SystemClock), true).await;
    for (n, args) in [
        json!({"entity_name": "Babbage"}),
        json!({"entity_name": "Ada", "max_depth": 1}),
        json!({"entity_name": "Babbage", "entity_type": "place"}),
        json!({"entity_name": "Babbage", "resolve_documents": false, "limit": 2}),
        json!({"entity_name": "nobody at all"}),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, http) = t.post("/data/v1/query/graph/documents", args.clone()).await;
        assert_eq!(status, 200, "{http}");
        let res = t
            .http
            .post(t.url("/mcp"))
            .bearer_auth(KEY)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "GraphDocumentsTool")
            .json(
                &json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                    "name": "GraphDocumentsTool", "arguments": args,
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {}
                    }
                }}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let body = sse_answer(&res.text().await.unwrap());
        assert_eq!(body["result"]["structuredContent"], http, "{args}");
        if n == 0 {
            assert!(http["total"].as_u64() > Some(0), "{http}");
        }
    }
    t.stop().await;
}
