//! Starting a server for a test, and a small client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kbq::config::Config;
use kbq::server::{self, Options, Server};
use kbq::versions::{Clock, SystemClock};
use kbq_store::import::{self, Silent};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub const KEY: &str = "test-key-0123";

/// A small graph with known answers: a two-way `knows` cycle, a longer cycle through London,
/// names with spaces, slashes, plus signs, quotes and non-ASCII letters.
pub const FIXTURE: &str = r#"{"kind":"entity","name":"Ada","entity_type":"person","properties":{"born":1815}}
{"kind":"entity","name":"Babbage","entity_type":"person","properties":{}}
{"kind":"entity","name":"Engine","entity_type":"machine","properties":{}}
{"kind":"entity","name":"London","entity_type":"place","properties":{}}
{"kind":"entity","name":"Zed","entity_type":"person","properties":{}}
{"kind":"entity","name":"Zürich","entity_type":"place","properties":{}}
{"kind":"entity","name":"OS/360","entity_type":"software","properties":{}}
{"kind":"entity","name":"C++","entity_type":"language","properties":{}}
{"kind":"entity","name":"Grace Hopper","entity_type":"person","properties":{}}
{"kind":"entity","name":"x'; DELETE entity; --","entity_type":"person","properties":{}}
{"kind":"relationship","source_name":"Ada","target_name":"Babbage","relationship_type":"knows","properties":{}}
{"kind":"relationship","source_name":"Babbage","target_name":"Ada","relationship_type":"knows","properties":{}}
{"kind":"relationship","source_name":"Babbage","target_name":"Engine","relationship_type":"designed","properties":{"year":1837}}
{"kind":"relationship","source_name":"Engine","target_name":"London","relationship_type":"located_in","properties":{}}
{"kind":"relationship","source_name":"London","target_name":"Ada","relationship_type":"home_of","properties":{}}
{"kind":"relationship","source_name":"Zed","target_name":"Ada","relationship_type":"knows","properties":{}}
{"kind":"relationship","source_name":"Grace Hopper","target_name":"C++","relationship_type":"influenced","properties":{}}
{"kind":"document","title":"Ada Lovelace","content":"Ada wrote the first published program, for the engine.","source":"t","source_id":"ada","content_type":"text/plain","url":null,"entity_name":"Ada"}
{"kind":"document","title":"The Engine","content":"A mechanical computer designed by Babbage.","source":"t","source_id":"engine","content_type":"text/plain","url":"https://example.org/engine","entity_name":"Engine"}
{"kind":"document","title":"London","content":"The city where Ada lived.","source":"t","source_id":"london","content_type":"text/plain","url":null,"entity_name":"London"}
"#;

/// A config for tests: in-memory store, no demo, one known key, two HTTP workers.
///
/// With `TEST_SURREALDB_URL=ws://HOST:PORT` (what `scripts/test-remote` sets) the store is that
/// SurrealDB server instead, signed in as root/root, with a fresh database for each config.
pub fn test_config() -> Config {
    // `TEST_KBQ_LOG=FILTER` (e.g. `kbq_store=debug`) prints the servers' logs to the test's
    // output, which cargo shows for a test that fails.
    static LOG: std::sync::Once = std::sync::Once::new();
    LOG.call_once(|| {
        if let Ok(filter) = std::env::var("TEST_KBQ_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
    let mut c = Config::default();
    c.server.listen = "127.0.0.1:0".into();
    c.server.workers = 2;
    match std::env::var("TEST_SURREALDB_URL") {
        Ok(url) if !url.is_empty() => {
            c.store.url = url;
            c.store.database = format!("t{}", uuid::Uuid::new_v4().simple());
            c.store.username = Some("root".into());
            c.store.password = Some("root".into());
        }
        _ => c.store.url = "mem://".into(),
    }
    c.store.load_demo = false;
    // The tests share two cores: an ingestion job in the idle class would wait for every other
    // test's work. The class itself is tested on a lane runtime (actors/src/runtime.rs).
    c.ingest.idle_class = false;
    // PDF and DOCX are parsed apart by the kbq executable, as in a server: this test binary
    // has no `parse-document` command.
    c.ingest.parser_program = env!("CARGO_BIN_EXE_kbq").to_string();
    c.data_dir = std::env::temp_dir().join("kbq-tests-unused");
    // Tests send bursts; the rate-limit test sets its own budgets.
    c.limits.graph_per_minute = 0;
    c.limits.agent_per_minute = 0;
    c.auth.keys = vec![kbq::auth::KeyEntry {
        name: "test".into(),
        sha256: hex::encode(kbq::auth::hash(KEY)),
        scopes: None,
    }];
    c
}

pub struct TestServer {
    pub server: Option<Server>,
    pub base: String,
    pub http: reqwest::Client,
}

impl TestServer {
    /// The fixture graph on a fresh in-memory store.
    pub async fn start() -> TestServer {
        Self::with_fixture(test_config()).await
    }

    /// [`start_with`](Self::start_with) `config` on the system clock, with the fixture graph.
    pub async fn with_fixture(config: Config) -> TestServer {
        Self::start_with(config, Arc::new(SystemClock), true).await
    }

    /// Starts `config` and waits until start-up is done, then imports the fixture graph
    /// when asked.
    pub async fn start_with(config: Config, clock: Arc<dyn Clock>, fixture: bool) -> TestServer {
        let t = Self::start_unready(config, clock).await;
        assert!(
            t.server().wait_ready(Duration::from_secs(60)).await,
            "start-up did not finish"
        );
        if fixture {
            let report = import::import(&t.server().kb, FIXTURE.as_bytes(), &Silent)
                .await
                .expect("fixture imports");
            assert!(report.failures.is_empty(), "{:?}", report.failures);
        }
        t
    }

    /// Starts `config` and returns as soon as the listener is bound, before start-up is done.
    pub async fn start_unready(config: Config, clock: Arc<dyn Clock>) -> TestServer {
        config.validate().expect("test config is valid");
        let server = server::start(
            config,
            Options {
                clock,
                ..Options::default()
            },
        )
        .await
        .expect("server starts");
        let base = format!("http://{}", server.addr);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        TestServer {
            server: Some(server),
            base,
            http,
        }
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request with the test key as a Bearer token.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(KEY);
        if let Some(b) = body {
            req = req.json(&b);
        }
        read(req.send().await.expect("request sent")).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (s, _, b) = self.call(Method::POST, path, Some(body)).await;
        (s, b)
    }

    /// POSTs `body` as JSON with the test key and asserts that an event stream (200,
    /// `text/event-stream`) answers: the response, its events still to be read.
    pub async fn post_stream(&self, path: &str, body: Value) -> reqwest::Response {
        let res = self
            .http
            .post(self.url(path))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .expect("request sent");
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        res
    }

    /// POSTs `body` as it is, with `content_type` and the test key: the status and the
    /// answer's JSON.
    pub async fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let res = self
            .http
            .post(self.url(path))
            .bearer_auth(KEY)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request sent");
        let (status, _, body) = read(res).await;
        (status.as_u16(), body)
    }

    /// The text of `/metrics`.
    pub async fn metrics_text(&self) -> String {
        let res = self.http.get(self.url("/metrics")).send().await;
        res.expect("request sent")
            .text()
            .await
            .expect("a text body")
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (s, _, b) = self.call(Method::GET, path, None).await;
        (s, b)
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.stop(true).await;
        }
    }
}

pub async fn read(res: reqwest::Response) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let status = res.status();
    let headers = res.headers().clone();
    let text = res.text().await.expect("body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, headers, body)
}

/// Asserts kbq's error body: exactly `error.code`, `error.message` and, when given, `error.field`.
pub fn assert_error(body: &Value, code: &str, field: Option<&str>) {
    let err = body
        .get("error")
        .unwrap_or_else(|| panic!("no error object in {body}"));
    assert_eq!(err["code"], code, "{body}");
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert_eq!(err.get("field").and_then(Value::as_str), field, "{body}");
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, vec!["error"], "{body}");
}

/// Polls `check` until it returns true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The names in a list of entities.
pub fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// Every route that answers from the knowledge base (the four graph routes and the three RAG
/// routes), each with a valid request for the fixture.
pub fn store_routes() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (
            Method::POST,
            "/data/v1/query/graph",
            Some(serde_json::json!({"entity_name": "Ada"})),
        ),
        (
            Method::POST,
            "/data/v1/query/graph/search",
            Some(serde_json::json!({"query": "a"})),
        ),
        (Method::GET, "/data/v1/query/graph/entity/Ada", None),
        (
            Method::POST,
            "/data/v1/query/graph/documents",
            Some(serde_json::json!({"entity_name": "Ada"})),
        ),
        (
            Method::POST,
            "/v1/rag/semantic",
            Some(serde_json::json!({"query": "Ada"})),
        ),
        (
            Method::POST,
            "/v1/rag/keyword",
            Some(serde_json::json!({"query": "Ada"})),
        ),
        (
            Method::POST,
            "/v1/rag/hybrid",
            Some(serde_json::json!({"query": "Ada"})),
        ),
    ]
}

/// A key entry for the config: `secret`'s hash under `name`, with `scopes` (`None`: all).
pub fn key_entry(name: &str, secret: &str, scopes: Option<&[&str]>) -> kbq::auth::KeyEntry {
    kbq::auth::KeyEntry {
        name: name.into(),
        sha256: hex::encode(kbq::auth::hash(secret)),
        scopes: scopes.map(|s| s.iter().map(|x| x.to_string()).collect()),
    }
}

/// Runs the `kbq` binary with `args` (no `KBQ_CONFIG` from the environment), without
/// blocking the runtime, so servers in this test keep answering it.
pub async fn kbq_cli(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(args)
        .env_remove("KBQ_CONFIG")
        .output()
        .await
        .expect("kbq runs")
}

/// A `kbq serve` process on a free loopback port, on a fresh in-memory store unless told another.
pub struct ServeProcess {
    pub child: tokio::process::Child,
    pub port: u16,
    _data: tempfile::TempDir,
}

impl ServeProcess {
    /// Starts `kbq serve` with `env` (no `KBQ_CONFIG` or `NO_COLOR` from the environment)
    /// and standard error to `stderr`, and waits until `/readyz` answers 200: ready, not only
    /// live, since the store starts behind the listener.
    pub async fn start(env: &[(&str, &str)], stderr: std::process::Stdio) -> ServeProcess {
        Self::start_on("mem://", env, stderr).await
    }

    /// As [`start`](Self::start), on the store `store` (a URL, as `--store` takes it).
    pub async fn start_on(
        store: &str,
        env: &[(&str, &str)],
        stderr: std::process::Stdio,
    ) -> ServeProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data = tempfile::tempdir().unwrap();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"));
        command
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--store",
                store,
            ])
            .env_remove("KBQ_CONFIG")
            .env_remove("NO_COLOR")
            .env("KBQ_DATA_DIR", data.path())
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        let child = command.spawn().unwrap();
        wait_ready(port).await;
        ServeProcess {
            child,
            port,
            _data: data,
        }
    }
}

/// Sends SIGTERM to `child`, a kbq this test started, as a service manager stops it.
#[cfg(unix)]
pub fn terminate(child: &tokio::process::Child) {
    let pid = child.id().expect("kbq is running") as i32;
    // SAFETY: kill(2) sends a signal to the child this test started; no memory is touched.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// The output of `child` once it has exited after [`terminate`]; at most 30 s.
pub async fn exited(child: tokio::process::Child) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("kbq did not exit after SIGTERM")
        .unwrap()
}

/// Waits until the `kbq serve` on `port` answers `/readyz` with 200: ready, not only live,
/// since the store starts behind the listener.
pub async fn wait_ready(port: u16) {
    let http = reqwest::Client::new();
    let ready = eventually(Duration::from_secs(60), || async {
        http.get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ready, "kbq serve did not become ready");
}

/// Asserts that `/readyz` answers 503 `service_unavailable` with `Retry-After: 1` and the
/// message `message`.
pub async fn assert_not_ready(t: &TestServer, message: &str) {
    let (status, headers, body) = read(t.http.get(t.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert_error(&body, "service_unavailable", None);
    assert_eq!(body["error"]["message"], message);
    assert_eq!(headers["retry-after"], "1");
}

/// Runs the npm tests of the package `dir` (a path under the repository) against this build
/// of kbq (`KBQ_BIN`), after `setup` (a script under the repository that readies them);
/// `command` adds what the package's tests need. Fails the test, naming `what`, unless both
/// succeed.
pub async fn npm_tests(
    setup: &str,
    dir: &str,
    what: &str,
    command: impl FnOnce(&mut tokio::process::Command),
) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ready = tokio::process::Command::new("bash")
        .arg(root.join(setup))
        .status()
        .await
        .expect("bash runs");
    assert!(
        ready.success(),
        "{setup} failed: it needs node 18+ with npm, a reachable npm registry, and Debian's chromium"
    );
    let mut npm = tokio::process::Command::new("npm");
    npm.args(["test", "--silent"])
        .current_dir(root.join(dir))
        .env("KBQ_BIN", env!("CARGO_BIN_EXE_kbq"));
    command(&mut npm);
    let out = npm.output().await.expect("npm runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
}

/// Runs `script` (a path under the repository, e.g. `tests/compat/setup.sh`) to make the
/// Python virtual environment `name` under the tests' temporary directory, and returns it.
/// The scripts install pinned packages, from PyPI the first time.
pub async fn python_venv(script: &str, name: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let setup = tokio::process::Command::new("bash")
        .arg(root.join(script))
        .arg(&venv)
        .status()
        .await
        .expect("bash runs");
    assert!(
        setup.success(),
        "{script} failed: it needs python3 with venv and a reachable PyPI"
    );
    venv
}

/// Runs the check script `script` (a path under the repository) with the Python of `venv` and
/// `args`; fails the test unless it exits 0 having printed "all checks passed".
pub async fn python_checks<S: AsRef<std::ffi::OsStr>>(
    venv: &std::path::Path,
    script: &str,
    args: impl IntoIterator<Item = S>,
) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(venv.join("bin/python"))
        .arg(root.join(script))
        .args(args)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{script} failed:\n{stdout}\n{stderr}"
    );
}

/// Whether a request reached its handler and was served: a success, or the `not_found` (or
/// `workspace_not_found`) that the operation `op` documents for a thing its path names and
/// that does not exist (a job id in a fresh store), which is not the default route's "no
/// route for", or the `conflict` it documents for a thing it would create twice.
pub fn served(op: &Value, status: reqwest::StatusCode, body: &Value) -> bool {
    let code = &body["error"]["code"];
    status.is_success()
        || (status == 404
            && op["responses"]["404"].is_object()
            && (code == "not_found" || code == "workspace_not_found")
            && !body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("no route for"))
        || (status == 409 && op["responses"]["409"].is_object() && code == "conflict")
}

/// Reads an ingestion job with `read` until it has ended (`succeeded`, `failed` or
/// `cancelled`), for at most `limit`: the job as last read.
pub async fn until_ended<F, Fut>(limit: Duration, mut read: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        let job = read().await;
        if matches!(
            job["status"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        ) {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not end: {job}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
