//! Start-up: the listener answers before the store is connected and indexed; until then
//! `/readyz` and every API route answer 503 with the reason, and afterwards the right answers.

use std::sync::Arc;
use std::time::Duration;

use kbq::versions::SystemClock;
use kbq_store::KnowledgeBase;
use kbq_store::import::{self, Silent};
use reqwest::Method;
use serde_json::json;

use crate::support::{
    FIXTURE, KEY, ServeProcess, TestServer, assert_error, assert_not_ready, eventually, read,
    store_routes, test_config,
};

/// A server on a surrealkv store of the fixture that the test holds open: an embedded store
/// has one user at a time, so the server's start-up cannot connect, and stays in its first
/// stage until the holder is dropped.
async fn server_behind_a_held_store() -> (TestServer, Arc<KnowledgeBase>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config();
    config.store.url = format!("surrealkv://{}", dir.path().join("kb").display());
    let holder = KnowledgeBase::open(config.store_config(), config.embedder()).await;
    let report = import::import(&holder, FIXTURE.as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let t = TestServer::start_unready(config, Arc::new(SystemClock)).await;
    (t, holder, dir)
}

#[tokio::test]
async fn requests_during_start_up_get_503_with_the_reason_then_the_right_answers() {
    let (t, holder, _dir) = server_behind_a_held_store().await;
    let (status, _, body) = read(t.http.get(t.url("/livez")).send().await.unwrap()).await;
    assert_eq!((status.as_u16(), &body["status"]), (200, &json!("ok")));
    assert_not_ready(&t, "not ready: store connecting").await;
    for (method, path, body) in store_routes() {
        let (status, headers, err) = t.call(method, path, body).await;
        assert_eq!(status, 503, "{path}: {err}");
        assert_error(&err, "service_unavailable", None);
        assert_eq!(
            err["error"]["message"], "kbq is starting: store connecting",
            "{path}"
        );
        assert_eq!(headers["retry-after"], "1", "{path}");
        assert!(headers.contains_key("x-request-id"), "{path}");
    }
    // The API's description, the metrics and the routes that read no knowledge base are
    // served while starting.
    for path in ["/openapi.json", "/metrics"] {
        let (status, _, _) = read(t.http.get(t.url(path)).send().await.unwrap()).await;
        assert_eq!(status, 200, "{path}");
    }
    for path in ["/v1/models", "/v1/agent/health"] {
        let (status, body) = t.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }

    drop(holder);
    let ready = eventually(Duration::from_secs(30), || async {
        read(t.http.get(t.url("/readyz")).send().await.unwrap())
            .await
            .0
            == 200
    })
    .await;
    assert!(ready, "start-up did not finish once the store was free");
    let (status, body) = t.get("/data/v1/query/graph/entity/Ada").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "Ada");
    let (status, body) = t
        .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total_entities"], 5);
    let (status, _, body) = t
        .call(
            Method::POST,
            "/v1/rag/keyword",
            Some(json!({"query": "mechanical computer"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(!body["results"].as_array().unwrap().is_empty(), "{body}");
    t.stop().await;
}

/// `kbq load` started beside a starting server says that it waits, then runs once the server
/// is ready, with no errors (scripts/bench-load starts the two together).
#[tokio::test]
async fn load_waits_for_a_starting_server_then_runs() {
    use tokio::io::AsyncBufReadExt;

    let (t, holder, _dir) = server_behind_a_held_store().await;
    let mut load = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(["load", "--url", &t.base, "--key", KEY, "--concurrency", "2"])
        .args(["--requests", "40", "--duration", "60", "--json"])
        .env_remove("KBQ_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(load.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), stderr.next_line())
        .await
        .expect("kbq load said nothing while the server was starting")
        .unwrap()
        .unwrap_or_default();
    assert_eq!(
        line,
        format!(
            "kbq load: waiting for {} (not ready: store connecting)",
            t.base
        )
    );
    drop(holder);
    let out = tokio::time::timeout(Duration::from_secs(120), load.wait_with_output())
        .await
        .expect("kbq load did not finish once the server was ready")
        .unwrap();
    assert!(out.status.success(), "{:?}", out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&report["requests"], &report["errors"]),
        (&json!(40), &json!(0)),
        "{report}"
    );
    t.stop().await;
}

/// Runs `kbq serve` on a fresh in-memory store with standard error piped (not a terminal)
/// and `env`, until it is ready; returns what it logged. On Linux it also checks that the
/// process runs without transparent huge pages, which it turns off before it builds its
/// indexes and keeps off (src/huge_pages.rs says why).
async fn serve_logs(env: &[(&str, &str)]) -> String {
    let mut serve = ServeProcess::start(env, std::process::Stdio::piped()).await;
    #[cfg(target_os = "linux")]
    {
        let pid = serve.child.id().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        // Kernels before 6.x do not show the flag.
        if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
    }
    serve.child.start_kill().unwrap();
    let out = serve.child.wait_with_output().await.unwrap();
    String::from_utf8(out.stderr).unwrap()
}

#[cfg(unix)]
#[tokio::test]
async fn serve_listens_before_it_loads_and_colours_logs_only_when_asked() {
    let logs = serve_logs(&[]).await;
    let at = |line: &str| {
        logs.find(line)
            .unwrap_or_else(|| panic!("no {line:?} in the log:\n{logs}"))
    };
    // The listener binds before the store is connected and the demo loaded.
    assert!(at("kbq listening") < at("knowledge base connected and indexed"));
    assert!(at("knowledge base connected and indexed") < at("loaded the demo knowledge base"));
    assert!(at("loaded the demo knowledge base") < at(" ready"));
    assert!(
        !logs.contains('\u{1b}'),
        "escape codes in piped logs:\n{logs}"
    );

    let logs = serve_logs(&[("KBQ_LOG__COLOR", "always")]).await;
    assert!(logs.contains("\u{1b}["), "no colour when asked:\n{logs}");
}

/// Each request logs one `request done` line carrying the request's id, its key's name and its
/// workspace, as JSON with `log.format = "json"`; with trace export off, no `otel.*` or
/// `http.*` field clutters it.
#[cfg(unix)]
#[tokio::test]
async fn each_request_logs_one_line_with_its_id_key_and_workspace() {
    let mut serve = ServeProcess::start(
        &[
            ("KBQ_API_KEYS", "log-test-key"),
            ("KBQ_LOG__FORMAT", "json"),
            ("RUST_LOG", "warn,kbq::middleware=info"),
        ],
        std::process::Stdio::piped(),
    )
    .await;
    let res = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/data/v1/query/graph/search",
            serve.port
        ))
        .bearer_auth("log-test-key")
        .header("X-Request-Id", "log-test-0001")
        .json(&json!({"query": "Ada"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    serve.child.start_kill().unwrap();
    let out = serve.child.wait_with_output().await.unwrap();
    let logs = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &serde_json::Value| l["fields"]["message"] == "request done")
        .filter(|l| l["span"]["request_id"] == "log-test-0001")
        .collect();
    assert_eq!(lines.len(), 1, "{logs}");
    let line = &lines[0];
    assert_eq!(line["fields"]["status"], 200, "{line}");
    assert_eq!(line["span"]["key"], "env-0", "{line}");
    assert_eq!(line["span"]["workspace"], "default", "{line}");
    assert_eq!(
        line["span"]["path"], "/data/v1/query/graph/search",
        "{line}"
    );
    let span = line["span"].as_object().unwrap();
    assert!(
        span.keys()
            .all(|k| !k.starts_with("otel.") && !k.starts_with("http.")),
        "{line}"
    );
}

/// A shell that holds the client libraries' variables still starts the server, which warns
/// that `KBQ_API_KEY` is not its key; any other unknown `KBQ_` variable stops start-up,
/// naming it.
#[cfg(unix)]
#[tokio::test]
async fn the_clients_variables_are_left_alone_and_other_unknown_ones_refused() {
    let logs = serve_logs(&[
        ("KBQ_BASE_URL", "http://127.0.0.1:1"),
        ("KBQ_API_KEY", "the-clients-key"),
    ])
    .await;
    assert!(logs.contains(" ready"), "{logs}");
    assert!(
        logs.contains("KBQ_API_KEY is the clients' key"),
        "no warning:\n{logs}"
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "mem://"])
        .env_remove("KBQ_CONFIG")
        .env("KBQ_BASE_URLS", "http://127.0.0.1:1")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("base_urls"), "{stderr}");
}
