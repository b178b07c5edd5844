//! MCP at `/mcp` with the official MCP Python SDK as the client (tests/mcp/setup.sh installs
//! it; tests/mcp/mcp_client.py drives it), and the HTTP layers in front of it: keys, scopes,
//! the rate budget, and the tool calls in /metrics; ingestion's tools for a `write` key.

use std::sync::Arc;
use std::time::Duration;

use kbq::versions::SystemClock;
use serde_json::{Value, json};

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

/// One request in 2026-07-28's form as `key` (no handshake: the version, the method and a
/// tool's name in headers as well as in the body): its JSON-RPC answer.
pub(crate) async fn request(t: &TestServer, key: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let mut req = t
        .http
        .post(t.url("/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        req = req.header("mcp-name", name);
    }
    let res = req
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{method} {params}");
    sse_answer(&res.text().await.unwrap())
}

/// A call of `tool` as `key`: the tool's result (`isError`, `structuredContent`, `content`).
pub(crate) async fn call(t: &TestServer, key: &str, tool: &str, arguments: Value) -> Value {
    let answer = request(
        t,
        key,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    answer["result"].clone()
}

/// A successful call's structured result.
async fn answer(t: &TestServer, key: &str, tool: &str, arguments: Value) -> Value {
    let result = call(t, key, tool, arguments.clone()).await;
    assert_eq!(result["isError"], false, "{tool} {arguments}: {result}");
    result["structuredContent"].clone()
}

/// A failed call's error object, which kbq sends as the text only.
async fn refusal(t: &TestServer, key: &str, tool: &str, arguments: Value) -> Value {
    let result = call(t, key, tool, arguments.clone()).await;
    assert_eq!(result["isError"], true, "{tool} {arguments}: {result}");
    assert_eq!(result.get("structuredContent"), None, "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// The tools `key` is shown, by name, with their annotations.
async fn tools(t: &TestServer, key: &str) -> Vec<(String, Value)> {
    let answer = request(t, key, "tools/list", json!({})).await;
    answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {answer}"))
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap().to_string(),
                tool["annotations"].clone(),
            )
        })
        .collect()
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

/// `kbq mcp` over standard input and output with a key minted for a workspace other than
/// `default` answers from that workspace only: its own entity is found, `default`'s is not.
#[tokio::test]
async fn kbq_mcp_with_a_workspace_key_answers_from_that_workspace() {
    use crate::export::ok;
    use crate::import_cli::kbq;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let fixture = dir.path().join("fixture.ndjson");
    std::fs::write(&fixture, crate::support::FIXTURE).unwrap();
    let theirs = dir.path().join("team.ndjson");
    std::fs::write(
        &theirs,
        "{\"kind\":\"entity\",\"name\":\"Grace Hopper\",\"entity_type\":\"person\"}\n",
    )
    .unwrap();
    ok(&kbq(&[
        "import",
        "--store",
        &store,
        fixture.to_str().unwrap(),
    ]));
    ok(&kbq(&["workspaces", "--store", &store, "create", "team"]));
    ok(&kbq(&[
        "import",
        "--store",
        &store,
        "--workspace",
        "team",
        theirs.to_str().unwrap(),
    ]));
    let minted: Value = serde_json::from_str(&ok(&kbq(&[
        "workspaces",
        "--store",
        &store,
        "mint",
        "team",
        "--scopes",
        "read",
    ])))
    .unwrap();
    assert_eq!(minted["workspace"], "team", "{minted}");

    let data = dir.path().to_str().unwrap();
    let mut mcp = StdioMcp::start(
        &store,
        minted["key"].as_str().unwrap(),
        &[("KBQ_DATA_DIR", data)],
    )
    .await;
    let found = mcp.lookup("Grace Hopper").await;
    assert_eq!(
        found["result"]["structuredContent"]["entity"]["name"], "Grace Hopper",
        "{found}"
    );
    let other = mcp.lookup("Ada").await;
    assert_ne!(
        other["result"]["structuredContent"]["entity"]["name"], "Ada",
        "default's entity seen through a team key: {other}"
    );
    assert!(!other.to_string().contains("Babbage"), "{other}");
    mcp.stop().await;
}

/// The current stable protocol version (2026-07-28: no handshake, the version and the method
/// in every request) and the one before it (2025-11-25, with `initialize`); an older host is
/// offered 2025-11-25.
#[tokio::test]
async fn both_protocol_versions_are_served() {
    let t = TestServer::with_fixture(test_config()).await;
    let found = answer(&t, KEY, "EntityLookupTool", json!({"name": "Ada"})).await;
    assert_eq!(found["entity"]["name"], "Ada", "{found}");
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
    let t = TestServer::with_fixture(test_config()).await;
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
        let mcp = answer(&t, KEY, "GraphDocumentsTool", args.clone()).await;
        assert_eq!(mcp, http, "{args}");
        if n == 0 {
            assert!(http["total"].as_u64() > Some(0), "{http}");
        }
    }
    t.stop().await;
}

const INGESTION: [&str; 3] = ["AddSourceTool", "IngestJobTool", "DeleteSourceTool"];

/// Calls IngestJobTool until the job has ended: the job.
async fn job_ended(t: &TestServer, key: &str, job_id: &str) -> Value {
    crate::support::until_ended(Duration::from_secs(30), || {
        answer(t, key, "IngestJobTool", json!({"job_id": job_id}))
    })
    .await
}

/// Ingestion's tools are shown to a key with `write` only, and refused to one without it.
#[tokio::test]
async fn ingestion_tools_are_a_write_key_s_only() {
    let mut config = test_config();
    config
        .auth
        .keys
        .push(key_entry("reader", READER, Some(&["read"])));
    let t = TestServer::with_fixture(config).await;
    let shown = tools(&t, KEY).await;
    let names: Vec<&str> = shown.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[names.len() - 3..], INGESTION, "{names:?}");
    // What each does, said to a host: adding a source again replaces what it said before, a
    // retraction removes; the job is only read.
    for (name, annotations) in &shown {
        let (read_only, destructive, idempotent) = match name.as_str() {
            "AddSourceTool" | "DeleteSourceTool" => (false, true, true),
            "MemoryStoreTool" => (false, false, false),
            _ => (true, false, true),
        };
        assert_eq!(annotations["readOnlyHint"], read_only, "{name}");
        assert_eq!(annotations["destructiveHint"], destructive, "{name}");
        assert_eq!(annotations["idempotentHint"], idempotent, "{name}");
    }
    // A read key is shown neither them nor MemoryStoreTool: only the tools it may call.
    let read: Vec<String> = tools(&t, READER)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let expected: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !INGESTION.contains(n) && *n != "MemoryStoreTool")
        .collect();
    assert_eq!(read, expected);
    // Called by name all the same, each is refused for the scope, and nothing is added.
    for (tool, args) in [
        (
            "AddSourceTool",
            json!({"source": "notes", "source_id": "n1", "content": "A reader's zebra note."}),
        ),
        (
            "IngestJobTool",
            json!({"job_id": "00000000-0000-0000-0000-000000000000"}),
        ),
        (
            "DeleteSourceTool",
            json!({"source": "notes", "source_id": "n1"}),
        ),
    ] {
        let e = refusal(&t, READER, tool, args).await;
        assert_eq!(e["error_type"], "insufficient_scope", "{tool}: {e}");
        assert!(e["error"].as_str().unwrap().contains("`write`"), "{e}");
    }
    let hits = answer(&t, READER, "KeywordSearchTool", json!({"query": "zebra"})).await;
    assert_eq!(hits["total"], 0, "{hits}");
    t.stop().await;
}

/// A note added through MCP: its job followed to the end, its chunk found by keyword search,
/// then retracted; the same job as the HTTP route reads, and none of another key's.
#[tokio::test]
async fn a_write_key_adds_a_note_finds_it_and_retracts_it() {
    let mut config = test_config();
    config.auth.keys.push(key_entry("other", OTHER, None));
    let t = TestServer::with_fixture(config).await;
    // The routes' rules: a format ingestion does not read, a missing field, an unknown one.
    for (args, field) in [
        (
            json!({"source": "notes", "source_id": "n1", "content": "x", "content_type": "application/zip"}),
            "content_type",
        ),
        (json!({"source": "notes", "source_id": "n1"}), "content"),
        (
            json!({"source": " ", "source_id": "n1", "content": "x"}),
            "source",
        ),
        (
            json!({"source": "notes", "source_id": "n1", "content": "x", "tags": []}),
            "tags",
        ),
    ] {
        let e = refusal(&t, KEY, "AddSourceTool", args.clone()).await;
        assert_eq!(e["error_type"], "invalid_arguments", "{args}: {e}");
        assert_eq!(e["field"], field, "{args}: {e}");
    }

    let note = json!({
        "source": "notes",
        "source_id": "lighthouse",
        "title": "Keeper's log",
        "content": "# Keeper's log\n\nThe lighthouse keeper wrote to Babbage about a storm.\n",
        "content_type": "text/markdown",
    });
    let job = answer(&t, KEY, "AddSourceTool", note).await;
    assert_eq!(job["status"], "queued", "{job}");
    assert_eq!(
        (&job["source"], &job["source_id"]),
        (&json!("notes"), &json!("lighthouse"))
    );
    let job_id = job["job_id"].as_str().unwrap().to_string();
    let job = job_ended(&t, KEY, &job_id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["chunks"], 1, "{job}");
    // The job the route reads.
    let (status, http) = t.get(&format!("/data/v1/ingest/jobs/{job_id}")).await;
    assert_eq!(status, 200, "{http}");
    assert_eq!(http, job);
    // A job is the key's that started it, and an id that names none is not found.
    for (key, id) in [(OTHER, job_id.as_str()), (KEY, "no-such-job")] {
        let e = refusal(&t, key, "IngestJobTool", json!({"job_id": id})).await;
        assert_eq!(e["error_type"], "not_found", "{e}");
    }

    let found = answer(
        &t,
        KEY,
        "KeywordSearchTool",
        json!({"query": "lighthouse keeper storm", "limit": 3}),
    )
    .await;
    let top = &found["results"][0];
    assert_eq!(top["source_id"], "lighthouse#0", "{found}");
    assert_eq!(top["title"], "Keeper's log", "{found}");
    assert!(
        top["content"]
            .as_str()
            .unwrap()
            .contains("lighthouse keeper"),
        "{found}"
    );

    let source = json!({"source": "notes", "source_id": "lighthouse"});
    let retracted = answer(&t, KEY, "DeleteSourceTool", source.clone()).await;
    assert_eq!(retracted["deleted"], true, "{retracted}");
    assert_eq!(retracted["chunks"], 1, "{retracted}");
    let found = answer(
        &t,
        KEY,
        "KeywordSearchTool",
        json!({"query": "lighthouse keeper storm"}),
    )
    .await;
    assert!(
        found["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["source_id"] != "lighthouse#0"),
        "{found}"
    );
    let e = refusal(&t, KEY, "DeleteSourceTool", source).await;
    assert_eq!(e["error_type"], "not_found", "{e}");
    let e = refusal(
        &t,
        KEY,
        "DeleteSourceTool",
        json!({"source": "notes", "source_id": ""}),
    )
    .await;
    assert_eq!(
        (&e["error_type"], &e["field"]),
        (&json!("invalid_arguments"), &json!("source_id")),
        "{e}"
    );
    let metrics = t.metrics_text().await;
    for line in [
        "kbq_tool_calls_total{tool=\"AddSourceTool\",outcome=\"ok\"}",
        "kbq_tool_calls_total{tool=\"DeleteSourceTool\",outcome=\"error\"}",
    ] {
        assert!(metrics.contains(line), "no {line} in /metrics");
    }
    t.stop().await;
}

/// `kbq mcp` over standard input and output, as a host runs it: one JSON-RPC message a line.
pub(crate) struct StdioMcp {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    next_id: u32,
}

impl StdioMcp {
    /// Spawns `kbq mcp --no-demo --store STORE` with `env` and the key `key`, without the
    /// test's configuration and keys, and opens the session (protocol 2025-11-25).
    pub(crate) async fn start<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        store: &str,
        key: &str,
        env: &[(K, V)],
    ) -> StdioMcp {
        use tokio::io::AsyncBufReadExt;

        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
            .args(["mcp", "--no-demo", "--store", store])
            .env_remove("KBQ_CONFIG")
            .env_remove("KBQ_API_KEYS")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("KBQ_API_KEY", key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = StdioMcp {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        let init = mcp
            .call(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"}}),
            )
            .await;
        assert!(init.get("result").is_some(), "{init}");
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        mcp
    }

    async fn send(&mut self, message: &Value) {
        use tokio::io::AsyncWriteExt;

        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Sends a request of `method` and answers its response.
    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("kbq mcp answers within 30 s")
            .unwrap()
            .expect("kbq mcp is still serving");
        serde_json::from_str(&line).unwrap()
    }

    /// EntityLookupTool's response for `name`.
    pub(crate) async fn lookup(&mut self, name: &str) -> Value {
        self.call(
            "tools/call",
            json!({"name": "EntityLookupTool", "arguments": {"name": name}}),
        )
        .await
    }

    /// Closes standard input, which ends the process, and waits for it.
    pub(crate) async fn stop(self) {
        let StdioMcp {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait().await;
    }
}
