//! `kbq load` against a running server on loopback: bounded in requests, every route of the
//! mix exercised, JSON report; refuses a target that is not on loopback.

use serde_json::Value;

use crate::support::{KEY, TestServer, kbq_cli};

async fn kbq_load(args: &[&str]) -> std::process::Output {
    kbq_cli(&[&["load"], args].concat()).await
}

#[tokio::test]
async fn load_drives_every_route_of_its_mix_and_reports_per_route() {
    let t = TestServer::start().await;
    let out = kbq_load(&[
        "--url",
        &t.base,
        "--key",
        KEY,
        "--concurrency",
        "4",
        "--requests",
        "240",
        "--duration",
        "120",
        "--mix",
        "traverse=3,search=2,entity=2,documents=1,rag=1,chat=1,health=1,livez=1",
        "--json",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
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
    }
    assert_eq!(sum, 240);

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
