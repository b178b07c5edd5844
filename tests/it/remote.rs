//! kbq on a real SurrealDB server over `ws://`: two nodes on one server, answers equal to the
//! embedded store's, an outage and the recovery after it. These tests need the server binary
//! that `scripts/surrealdb-server` builds (once, several minutes), so they are ignored by
//! default; `scripts/test-remote` builds it, starts a server and runs them with the rest of
//! the suite in remote mode:
//!
//! ```sh
//! scripts/test-remote remote
//! ```

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kbq::config::Config;
use kbq::versions::SystemClock;
use reqwest::Method;
use serde_json::{Value, json};

use crate::export::ok;
use crate::import_cli::kbq_with;
use crate::support::{TestServer, eventually, test_config};

/// A SurrealDB server on a loopback port, killed when dropped.
pub(crate) struct SurrealServer {
    child: Child,
    port: u16,
}

impl SurrealServer {
    /// Starts the server on `port` (0: a free one) with `storage` (`memory` or
    /// `surrealkv://PATH`), and waits until it accepts connections.
    pub(crate) async fn start(port: u16, storage: &str) -> SurrealServer {
        Self::start_with(port, storage, &[]).await
    }

    /// As [`start`](Self::start), with `env` set for the server's process.
    pub(crate) async fn start_with(
        port: u16,
        storage: &str,
        env: &[(&str, &str)],
    ) -> SurrealServer {
        let bin = std::env::var("TEST_SURREALDB_SERVER")
            .expect("TEST_SURREALDB_SERVER names the binary scripts/surrealdb-server prints");
        let port = if port == 0 {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        } else {
            port
        };
        let child = Command::new(Path::new(&bin))
            .args([
                "start",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--user",
                "root",
                "--pass",
                "root",
                "--log",
                "warn",
                storage,
            ])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the SurrealDB server starts");
        let up = eventually(Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(up, "the SurrealDB server did not listen on {port}");
        SurrealServer { child, port }
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SurrealServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn remote_config(db: &SurrealServer, graph_index: bool) -> Config {
    let mut c = test_config();
    c.store.url = db.url();
    c.store.username = Some("root".into());
    c.store.password = Some("root".into());
    c.store.graph_index = graph_index;
    c
}

/// The variables that point a `kbq` command at `config`'s database on the server, as root.
fn server_store(config: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("KBQ_STORE__DATABASE", config.store.database.clone()),
        ("KBQ_STORE__USERNAME", "root".into()),
        ("KBQ_STORE__PASSWORD", "root".into()),
    ]
}

/// The graph API's answers to a fixed set of requests.
async fn answers(t: &TestServer) -> Vec<Value> {
    let mut out = Vec::new();
    for (method, path, body) in crate::support::store_routes() {
        let (status, _, body) = t.call(method, path, body).await;
        assert_eq!(status, 200, "{path}: {body}");
        out.push(body);
    }
    let (status, _, body) = t
        .call(
            Method::POST,
            "/data/v1/query/graph",
            Some(json!({"entity_name": "Ada", "depth": 3, "direction": "out"})),
        )
        .await;
    assert_eq!(status, 200);
    out.push(body);
    out
}

#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_graph_api_answers_as_the_embedded_store_does() {
    let embedded = TestServer::start().await;
    let want = answers(&embedded).await;
    embedded.stop().await;
    for graph_index in [true, false] {
        let db = SurrealServer::start(0, "memory").await;
        let t = TestServer::with_fixture(remote_config(&db, graph_index)).await;
        let got = answers(&t).await;
        assert_eq!(got, want, "graph_index = {graph_index}");
        t.stop().await;
    }
}

#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_outage_gives_503_and_kbq_recovers_when_the_server_returns() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("surrealkv://{}", dir.path().join("db").display());
    let mut db = SurrealServer::start(0, &storage).await;
    let port = db.port;
    // Graph queries go to SurrealDB, so an outage shows on them; /readyz stays 200 and says
    // the store is down, /metrics too, and writes get 503 with Retry-After.
    let t = TestServer::with_fixture(remote_config(&db, false)).await;
    let traverse = || async {
        t.call(
            Method::POST,
            "/data/v1/query/graph",
            Some(json!({"entity_name": "Ada"})),
        )
        .await
    };
    assert_eq!(traverse().await.0, 200);

    let readyz = || async {
        let (status, _, body) =
            crate::support::read(t.http.get(t.url("/readyz")).send().await.unwrap()).await;
        (
            status.as_u16(),
            body["store"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(readyz().await, (200, "up".to_string()));

    db.stop();
    // Every write fails fast, the first included: a statement that runs for 1 s asks the
    // store's health and fails when it gets no answer within 2 s, and once the store is
    // known gone each statement fails within its 1 s health check (store::kb::guarded).
    // Without this each waited the 10 s query timeout, as the SDK holds statements while it
    // reconnects. The bound asserted is 5 s, wide for a shared machine and far below 10.
    for i in 0..5 {
        let started = std::time::Instant::now();
        let (status, headers, body) = t
            .call(
                Method::POST,
                "/data/v1/ingest/entities",
                Some(json!([{"name": format!("During the outage {i}"), "entity_type": "t"}])),
            )
            .await;
        let took = started.elapsed();
        assert_eq!(status, 503, "{body}");
        assert_eq!(headers["retry-after"], "1");
        assert!(took < Duration::from_secs(5), "write {i} took {took:?}");
    }
    let down = eventually(Duration::from_secs(30), || async {
        traverse().await.0 == 503 && readyz().await == (200, "down".to_string())
    })
    .await;
    assert!(down, "no 503, or /readyz did not report the store down");
    let (_, _, body) = traverse().await;
    crate::support::assert_error(&body, "service_unavailable", None);
    let metrics = t.metrics_text().await;
    assert!(metrics.contains("\nkbq_store_up 0\n"), "{metrics}");

    let _db = SurrealServer::start(port, &storage).await;
    let back = eventually(Duration::from_secs(60), || async {
        readyz().await == (200, "up".to_string()) && traverse().await.0 == 200
    })
    .await;
    assert!(back, "kbq did not recover when the server came back");
    let (_, _, body) = traverse().await;
    assert!(body["total_entities"].as_u64().unwrap() > 1, "{body}");
    t.stop().await;
}

/// Whether `node` answers the traversal from Ada with `name` among the entities found.
async fn reaches(node: &TestServer, name: &str) -> bool {
    let (_, _, walk) = node
        .call(
            Method::POST,
            "/data/v1/query/graph",
            Some(json!({"entity_name": "Ada", "depth": 1})),
        )
        .await;
    crate::support::names(&walk["entities_found"])
        .iter()
        .any(|n| n == name)
}

/// The semantic-search results `node` gives for `query`.
async fn semantic(node: &TestServer, query: &str) -> Vec<Value> {
    rag(node, "semantic", query).await
}

/// The results of `/v1/rag/{method}` on `node` for `query`.
async fn rag(node: &TestServer, method: &str, query: &str) -> Vec<Value> {
    let (_, _, found) = node
        .call(
            Method::POST,
            &format!("/v1/rag/{method}"),
            Some(json!({"query": query, "limit": 100})),
        )
        .await;
    found["results"].as_array().unwrap().clone()
}

#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_two_nodes_see_each_others_writes_in_their_indexes() {
    let db = SurrealServer::start(0, "memory").await;
    let config = remote_config(&db, true);
    let a = TestServer::with_fixture(config.clone()).await;
    let b = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let soon = Duration::from_secs(10);
    // B started after the fixture was written: its indexes were built with it.
    assert!(reaches(&b, "Babbage").await);

    // Writes through A reach B's graph, vector and keyword indexes.
    let (status, body) = a
        .post(
            "/data/v1/ingest/entities",
            json!([{"name": "Tesla", "entity_type": "person"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = a
        .post(
            "/data/v1/ingest/relationships",
            json!([{"source_name": "Ada", "target_name": "Tesla", "relationship_type": "admired"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = a
        .post(
            "/data/v1/ingest/documents",
            json!([{"title": "Tesla", "content": "Alternating current induction motors and wireless power.", "source": "t", "source_id": "tesla", "content_type": "text/plain", "entity_name": "Tesla"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let query = "alternating current induction motors";
    assert!(
        eventually(soon, || async {
            let (_, e) = b.get("/data/v1/query/graph/entity/Tesla").await;
            e["entity_type"] == "person"
                && reaches(&b, "Tesla").await
                && semantic(&b, query)
                    .await
                    .first()
                    .is_some_and(|r| r["title"] == "Tesla")
                && rag(&b, "keyword", "induction")
                    .await
                    .first()
                    .is_some_and(|r| r["title"] == "Tesla")
        })
        .await,
        "B did not see A's writes"
    );
    let first = semantic(&b, query).await.remove(0);
    assert_eq!(first["entity_name"], "Tesla", "{first}");
    let tesla_doc = first["id"].as_str().unwrap().to_string();

    // An update through B reaches A.
    let (status, _) = b
        .post(
            "/data/v1/ingest/entities",
            json!([{"name": "Tesla", "entity_type": "inventor"}]),
        )
        .await;
    assert_eq!(status, 200);
    assert!(
        eventually(soon, || async {
            let (_, e) = a.get("/data/v1/query/graph/entity/Tesla").await;
            e["entity_type"] == "inventor"
        })
        .await,
        "A did not see B's update"
    );

    // Deletes through A reach B: the entity and its relationship go, its document is unlinked,
    // then the document goes.
    let (status, _, _) = a
        .call(Method::DELETE, "/data/v1/ingest/entities/Tesla", None)
        .await;
    assert_eq!(status, 200);
    assert!(
        eventually(soon, || async {
            let (_, e) = b.get("/data/v1/query/graph/entity/Tesla").await;
            let first = semantic(&b, query).await.remove(0);
            e.is_null()
                && !reaches(&b, "Tesla").await
                && first["id"] == tesla_doc.as_str()
                && first["entity_name"].is_null()
        })
        .await,
        "B did not see A's entity delete"
    );
    let path = format!("/data/v1/ingest/documents/{tesla_doc}");
    let (status, _, _) = a.call(Method::DELETE, &path, None).await;
    assert_eq!(status, 200);
    assert!(
        eventually(soon, || async {
            semantic(&b, query)
                .await
                .iter()
                .all(|r| r["id"] != tesla_doc.as_str())
                && rag(&b, "keyword", "induction").await.is_empty()
        })
        .await,
        "B did not see A's document delete"
    );
    a.stop().await;
    b.stop().await;
}

/// Two nodes with a model on one server: a job is run by the node that took it, not by the
/// other (its lease is renewed); a cancellation asked on the other node reaches it; and when
/// the node stops, the other takes its unfinished job over once the lease ends, and writes
/// it once.
#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_writes_go_on_when_the_server_ends_a_lagging_subscription() {
    // A server that queues two live-query notifications per connection: one write of many
    // records sends each node more than that at once, and the server ends the connection of
    // a node that has not read them yet. Writes must not ride on that connection.
    let db = SurrealServer::start_with(
        0,
        "memory",
        &[("SURREAL_WEBSOCKET_RESPONSE_CHANNEL_SIZE", "2")],
    )
    .await;
    let config = remote_config(&db, true);
    let a = TestServer::start_with(config.clone(), Arc::new(SystemClock), false).await;
    let b = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    for round in 0..6 {
        let node = if round % 2 == 0 { &a } else { &b };
        let entities: Vec<Value> = (0..500)
            .map(|i| json!({"name": format!("E{round}-{i}"), "entity_type": "thing"}))
            .collect();
        let (status, body) = node.post("/data/v1/ingest/entities", json!(entities)).await;
        assert_eq!(status, 200, "round {round}: {body}");
    }
    // Each node's follower subscribes again and rebuilds: both end with every entity.
    for (name, node) in [("A", &a), ("B", &b)] {
        assert!(
            eventually(Duration::from_secs(30), || async {
                let (status, _) = node.get("/data/v1/query/graph/entity/E5-499").await;
                let (first, _) = node.get("/data/v1/query/graph/entity/E0-0").await;
                status == 200 && first == 200
            })
            .await,
            "{name} did not see every write"
        );
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_a_job_is_run_by_one_node_and_taken_over_when_it_stops() {
    use crate::agent::{agent_config, openai};
    use crate::scripted::{ScriptedLlm, Step};
    let db = SurrealServer::start(0, "memory").await;
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 120_000)]);
    config.store.url = db.url();
    config.store.username = Some("root".into());
    config.store.password = Some("root".into());
    config.ingest.job_lease_secs = 6;
    let a = TestServer::with_fixture(config.clone()).await;
    let b = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    // Every answer A gets waits longer than A lives.
    for _ in 0..40 {
        llm.push(Step::Delay(
            Duration::from_secs(60),
            Box::new(Step::Answer(r#"{"entities":[],"relationships":[]}"#.into())),
        ));
    }
    let mut text = String::from("# Pioneers\n\n");
    for i in 0..12 {
        text.push_str(&format!(
            "Paragraph {i}: [[Konrad Zuse]] -[met]-> [[Engineer {i}]] in the years of the first machines.\n\n"
        ));
    }
    let mut ids = Vec::new();
    for source_id in ["kept", "cancelled"] {
        let (status, job) = a
            .post(
                "/data/v1/ingest/sources",
                json!({"source": "notes", "source_id": source_id, "content": text, "content_type": "text/markdown"}),
            )
            .await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["job_id"].as_str().unwrap().to_string());
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            !llm.requests().is_empty()
        })
        .await,
        "A's jobs ask the model"
    );
    // Longer than a lease: A renews, so B takes nothing over and asks the model nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = llm.requests().len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(llm.requests().len(), asked, "only A runs its jobs");

    // B asks for the second job's cancellation; A hears it and ends the job.
    let path = format!("/data/v1/ingest/jobs/{}", ids[1]);
    let (status, _, job) = b.call(Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{job}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            b.get(&path).await.1["status"] == "cancelled"
        })
        .await,
        "the job A ran was cancelled from B"
    );

    // A stops with the first job unfinished; B takes it over when its lease ends.
    a.stop().await;
    llm.clear();
    let path = format!("/data/v1/ingest/jobs/{}", ids[0]);
    let job =
        crate::support::until_ended(Duration::from_secs(60), || async { b.get(&path).await.1 })
            .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let (_, walk) = b
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "Konrad Zuse", "depth": 1, "limit": 100}),
        )
        .await;
    assert_eq!(walk["total_entities"], 13, "{walk}");
    assert_eq!(walk["total_relationships"], 12, "{walk}");
    b.stop().await;
    llm.stop().await;
}

/// Two nodes with `config` (the first writes the fixture), once each counts the other among
/// the nodes its rate budgets are shared by.
pub(crate) async fn two_counted_nodes(config: Config) -> (TestServer, TestServer) {
    let a = TestServer::with_fixture(config.clone()).await;
    let b = TestServer::start_with(config, Arc::new(SystemClock), false).await;
    let both = eventually(Duration::from_secs(20), || async {
        let (a, b) = (a.metrics_text().await, b.metrics_text().await);
        a.contains("\nkbq_rate_limit_nodes 2\n") && b.contains("\nkbq_rate_limit_nodes 2\n")
    })
    .await;
    assert!(both, "the nodes did not count each other");
    (a, b)
}

/// Two nodes on one server share a key's rate budget: once each counts the other, each
/// enforces half of it, so the key gets the budget in all, not twice it.
#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_two_nodes_share_a_keys_rate_budget() {
    let db = SurrealServer::start(0, "memory").await;
    let mut config = remote_config(&db, true);
    config.limits.graph_per_minute = 1;
    config.limits.graph_burst = 4;
    let (a, b) = two_counted_nodes(config).await;
    for node in [&a, &b] {
        let statuses: Vec<u16> = {
            let mut out = Vec::new();
            for _ in 0..3 {
                let (s, _) = node
                    .post("/data/v1/query/graph/search", json!({"query": "Ada"}))
                    .await;
                out.push(s.as_u16());
            }
            out
        };
        assert_eq!(
            statuses,
            [200, 200, 429],
            "each node's share is half the burst"
        );
    }
    a.stop().await;
    b.stop().await;
}

/// `kbq mcp` on a server store, with a key minted there: a tool call answers; once another
/// node revokes the key, the next call (past the minted keys' window) is refused, as over
/// HTTP, and the process keeps serving.
#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_kbq_mcp_stops_answering_a_key_another_node_revoked() {
    let db = SurrealServer::start(0, "memory").await;
    let config = remote_config(&db, true);
    let node = TestServer::with_fixture(config.clone()).await;
    let (s, minted) = node
        .post(
            "/admin/v1/workspaces/default/keys",
            json!({"scopes": ["read"], "name": "mcp"}),
        )
        .await;
    assert_eq!(s, 201, "{minted}");
    let data = tempfile::tempdir().unwrap();
    let mut env = server_store(&config);
    env.push(("KBQ_DATA_DIR", data.path().display().to_string()));
    let mut mcp =
        crate::mcp::StdioMcp::start(&db.url(), minted["key"].as_str().unwrap(), &env).await;
    let found = mcp.lookup("Ada").await;
    assert_eq!(
        found["result"]["structuredContent"]["entity"]["name"], "Ada",
        "{found}"
    );

    let (s, _, body) = node
        .call(
            Method::DELETE,
            &format!(
                "/admin/v1/workspaces/default/keys/{}",
                minted["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert!(s.is_success(), "{s} {body}");
    tokio::time::sleep(kbq::auth::MINTED_KEY_WINDOW + Duration::from_millis(500)).await;
    let refused = mcp.lookup("Ada").await;
    assert!(refused.get("result").is_none(), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no longer a key")),
        "{refused}"
    );
    mcp.stop().await;
    node.stop().await;
}

/// `kbq export --store ws://...` against a server that a node is serving: the file restores
/// the same knowledge base (imported into a workspace of the same server, it exports the same
/// lines), the node answers all the while, and the workspace is exported on its own.
#[tokio::test]
#[ignore = "needs TEST_SURREALDB_SERVER (scripts/surrealdb-server)"]
async fn remote_kbq_export_reads_a_serving_store_and_restores_into_a_workspace() {
    let db = SurrealServer::start(0, "memory").await;
    let config = remote_config(&db, true);
    let node = TestServer::with_fixture(config.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let url = db.url();
    let env = server_store(&config);
    let cli = move |args: &[&str]| ok(&kbq_with(args, &env));
    let file = dir.path().join("backup.ndjson");
    let file = file.to_str().unwrap().to_string();
    let exporting = {
        let (cli, url, file) = (cli.clone(), url.clone(), file.clone());
        tokio::task::spawn_blocking(move || cli(&["export", "--store", &url, "-o", &file]))
    };
    // The node serves while the export reads.
    let mut answered = 0;
    while !exporting.is_finished() {
        let (s, body) = node
            .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
            .await;
        assert_eq!(s, 200, "{body}");
        answered += 1;
    }
    let said = exporting.await.unwrap();
    assert!(answered > 0);
    assert!(
        said.contains("exported 10 entities, 7 relationships, 3 documents, 0 memories"),
        "{said}"
    );
    let written = std::fs::read_to_string(&file).unwrap();

    let (s, body) = node
        .post("/admin/v1/workspaces", json!({"name": "team"}))
        .await;
    assert_eq!(s, 201, "{body}");
    let said = cli(&["import", "--store", &url, "--workspace", "team", &file]);
    assert!(
        said.contains("imported 10 entities, 7 relationships, 3 documents"),
        "{said}"
    );
    let again = cli(&["export", "--store", &url, "--workspace", "team"]);
    assert_eq!(again, written);
    // The default workspace is as it was.
    assert_eq!(cli(&["export", "--store", &url]), written);
    node.stop().await;
}
