//! `kbq load` against a running server on loopback: bounded in requests, every route of the
//! mix exercised, JSON report; dedicated clients reported apart from the mix in the same
//! window, after a warm-up; refuses a target that is not on loopback.

use serde_json::Value;

use crate::support::{KEY, TestServer, kbq_cli};

async fn kbq_load(args: &[&str]) -> std::process::Output {
    kbq_cli(&[&["load"], args].concat()).await
}

/// `kbq load --json` against `t` with the test's key, that must succeed, and its report.
async fn kbq_load_json(t: &TestServer, args: &[&str]) -> Value {
    let out = kbq_load(&[&["--url", &t.base, "--key", KEY], args, &["--json"]].concat()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

#[tokio::test]
async fn load_drives_every_route_of_its_mix_and_reports_per_route() {
    let t = TestServer::start().await;
    let report = kbq_load_json(
        &t,
        &[
            "--concurrency",
            "4",
            "--requests",
            "240",
            "--duration",
            "120",
            "--mix",
            "traverse=3,search=2,entity=2,documents=1,rag=1,chat=1,health=1,livez=1",
        ],
    )
    .await;
    assert_eq!(report["requests"], 240, "bounded in requests: {report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["concurrency"], 4);
    let routes = report["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 8);
    let mut sum = 0;
    for r in routes {
        let n = r["requests"].as_u64().unwrap();
        assert!(n > 0, "{r}");
        sum += n;
        assert_eq!(r["statuses"]["200"].as_u64(), Some(n), "{r}");
        let (p50, p99, max) = (
            r["p50_ms"].as_f64().unwrap(),
            r["p99_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{r}");
        // The slowest request is named, to be sent again by hand.
        let slowest = &r["slowest"];
        assert_eq!(slowest["ms"].as_f64(), Some(max), "{r}");
        assert_eq!(slowest["status"], 200, "{r}");
        let request = slowest["request"].as_str().unwrap();
        let expected = match r["route"].as_str().unwrap() {
            "traverse" => "POST /data/v1/query/graph {",
            "search" => "POST /data/v1/query/graph/search {",
            "entity" => "GET /data/v1/query/graph/entity/",
            "documents" => "POST /data/v1/query/graph/documents {",
            "rag" => "POST /v1/rag/hybrid {",
            "chat" => "POST /v1/agent/chat {",
            "health" => "GET /v1/agent/health",
            "livez" => "GET /livez",
            other => panic!("route {other}"),
        };
        assert!(request.starts_with(expected), "{request} for {r}");
        if request.starts_with("POST") {
            let body = request
                .split_once(' ')
                .unwrap()
                .1
                .split_once(' ')
                .unwrap()
                .1;
            let body: serde_json::Value = serde_json::from_str(body).unwrap();
            assert!(body.is_object(), "{request}");
        }
    }
    assert_eq!(sum, 240);
    // From the server's answers: names from its search, queries from the documents found.
    assert_eq!(report["sampled_from"], "server");
    assert!(report["queries"].as_u64().unwrap() >= 3, "{report}");

    // From the file the store was loaded from: every entity of the fixture (fewer than
    // asked for), and its documents' runs of words.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("kb.ndjson");
    std::fs::write(&data, crate::support::FIXTURE).unwrap();
    let report = kbq_load_json(
        &t,
        &[
            "--requests",
            "40",
            "--mix",
            "rag=1,chat=1,traverse=1",
            "--data",
            data.to_str().unwrap(),
            "--names",
            "100",
        ],
    )
    .await;
    assert_eq!(report["sampled_from"], "data");
    assert_eq!(report["names"], 10, "{report}");
    assert!(report["queries"].as_u64().unwrap() >= 3, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let out = kbq_load(&[
        "--url",
        &t.base,
        "--key",
        KEY,
        "--data",
        "/nonexistent/kb.ndjson",
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data /nonexistent/kb.ndjson"));

    // A wrong key shows up as errors by status, not as a crash.
    let out = kbq_load(&["--url", &t.base, "--key", "wrong", "--requests", "5"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"));
    t.stop().await;

    let out = kbq_load(&["--url", "http://10.1.2.3:8080", "--key", KEY]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
    let out = kbq_load(&["--key", KEY, "--mix", "traverse=1,fly=2"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown route `fly`"));
}

#[tokio::test]
async fn dedicated_clients_run_beside_the_mix_and_are_reported_apart() {
    let t = TestServer::start().await;
    let report = kbq_load_json(
        &t,
        &[
            "--concurrency",
            "2",
            "--mix",
            "search=1,livez=1",
            "--route-concurrency",
            "livez=1,health=2",
            "--route-interval-ms",
            "20",
            "--search-len",
            "2",
            "--warmup",
            "1",
            "--duration",
            "1",
        ],
    )
    .await;
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["shed"], 0, "{report}");
    assert_eq!(report["warmup_s"], 1.0);
    assert_eq!(report["search_len"], 2);
    assert_eq!(report["route_concurrency"]["health"], 2);
    assert_eq!(report["route_interval_ms"], 20.0);
    // The window is the measured second, without the warm-up before it.
    assert_eq!(report["elapsed_s"], 1.0, "{report}");
    let routes: Vec<(&str, &str, u64)> = report["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r["requests"].as_u64().unwrap() > 0, "{r}");
            assert!(r["completed"].as_u64().unwrap() > 0, "{r}");
            let p999 = r["p999_ms"].as_f64().unwrap();
            assert!(r["p99_ms"].as_f64().unwrap() <= p999, "{r}");
            assert!(p999 <= r["max_ms"].as_f64().unwrap(), "{r}");
            (
                r["route"].as_str().unwrap(),
                r["clients"].as_str().unwrap(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        routes,
        [
            ("search", "mix", 2),
            ("livez", "mix", 2),
            ("livez", "dedicated", 1),
            ("health", "dedicated", 2),
        ]
    );

    // Paced: one request per 20 ms at most, in a window of 1 s.
    let livez = &report["routes"][2];
    assert!(livez["requests"].as_u64().unwrap() <= 51, "{livez}");

    // No mix at all: only the dedicated clients.
    let report = kbq_load_json(
        &t,
        &[
            "--concurrency",
            "0",
            "--route-concurrency",
            "entity=1",
            "--requests",
            "20",
        ],
    )
    .await;
    assert_eq!(report["requests"], 20, "{report}");
    assert_eq!(report["routes"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["routes"][0]["clients"], "dedicated");
    t.stop().await;

    let out = kbq_load(&["--key", KEY, "--concurrency", "0"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no clients"));
    let out = kbq_load(&["--key", KEY, "--route-concurrency", "livez"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--route-concurrency"));
}

/// `--dedicated-url` sends the dedicated clients elsewhere (a server's probe listener), and
/// the mix's to `--url`: the probe listener answers the probes and turns an entity lookup
/// away, so that each request shows where it went.
#[tokio::test]
async fn dedicated_clients_send_to_the_dedicated_url() {
    let mut config = crate::support::test_config();
    config.server.probe_listen = "127.0.0.1:0".into();
    let t = TestServer::with_fixture(config).await;
    let probes = format!(
        "http://{}",
        t.server().probe_addr().expect("a probe listener")
    );
    let report = kbq_load_json(
        &t,
        &[
            "--dedicated-url",
            &probes,
            "--concurrency",
            "2",
            "--mix",
            "entity=1",
            "--route-concurrency",
            "livez=1,health=1,entity=1",
            "--route-interval-ms",
            "20",
            "--duration",
            "1",
        ],
    )
    .await;
    assert_eq!(report["dedicated_url"], probes.as_str(), "{report}");
    let route = |route: &str, clients: &str| {
        let routes = report["routes"].as_array().unwrap();
        let r = routes
            .iter()
            .find(|r| r["route"] == route && r["clients"] == clients);
        r.unwrap_or_else(|| panic!("no {clients} {route} in {report}"))
            .clone()
    };
    // The mix's lookups went to the API's listener, the dedicated ones to the probes'.
    let mix = route("entity", "mix");
    assert!(mix["requests"].as_u64().unwrap() > 0, "{mix}");
    assert_eq!(mix["errors"], 0, "{mix}");
    let dedicated = route("entity", "dedicated");
    let n = dedicated["requests"].as_u64().unwrap();
    assert!(n > 0, "{dedicated}");
    assert_eq!(
        dedicated["statuses"]["404"].as_u64(),
        Some(n),
        "{dedicated}"
    );
    for probe in ["livez", "health"] {
        let r = route(probe, "dedicated");
        assert!(r["requests"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
    }
    t.stop().await;
}

/// `--turns-ms`: the mix's routes take turns, each route's req/s over its own settled turns
/// (a fifth of each turn settles), in the same window; a round longer than the window is
/// refused.
#[tokio::test]
async fn routes_in_turns_are_each_measured_over_their_own_turns() {
    let t = TestServer::start().await;
    let report = kbq_load_json(
        &t,
        &[
            "--concurrency",
            "2",
            "--mix",
            "livez=1,entity=3",
            "--turns-ms",
            "100",
            "--duration",
            "2",
        ],
    )
    .await;
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["turns_ms"], 100.0, "{report}");
    assert_eq!(report["elapsed_s"], 2.0, "{report}");
    // Rounds of 400 ms: livez 100 ms (80 measured), entity 300 ms (240 measured); five rounds.
    for (i, (route, measured)) in [("livez", 0.4), ("entity", 1.2)].into_iter().enumerate() {
        let r = &report["routes"][i];
        assert_eq!(r["route"], route, "{report}");
        let m = r["measured_s"].as_f64().unwrap();
        assert!((m - measured).abs() < 1e-9, "{r}");
        let completed = r["completed"].as_u64().unwrap();
        assert!(completed > 0 && r["requests"].as_u64().unwrap() > 0, "{r}");
        let rps = r["throughput_per_s"].as_f64().unwrap();
        assert!((rps - completed as f64 / measured).abs() < 1e-6, "{r}");
    }
    t.stop().await;

    let out = kbq_load(&[
        "--key",
        KEY,
        "--mix",
        "livez=1,entity=1",
        "--turns-ms",
        "1000",
        "--duration",
        "1",
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at most --duration"), "{stderr}");
}
