//! Deprecation headers and sunset, driven by config and a clock the test moves.

use chrono::{TimeZone, Utc};
use kbq::versions::ManualClock;
use reqwest::Method;
use serde_json::json;

use crate::support::{TestServer, assert_error, read, test_config};

#[tokio::test]
async fn a_version_gains_headers_when_deprecated_and_answers_410_after_sunset() {
    let mut config = test_config();
    let v1 = config.versions.get_mut("v1").unwrap();
    v1.deprecated_at = Some("2026-06-01".into());
    v1.sunset_at = Some("2027-01-01".into());
    v1.migration_guide = Some("https://kbq.example/migrate-v2".into());
    v1.successor = Some("v2".into());
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 5, 31, 23, 59, 59).unwrap());
    let t = TestServer::start_with(config, clock.clone(), true).await;
    let graph = "/data/v1/query/graph/entity/Ada";

    let (status, headers, _) = t.call(Method::GET, graph, None).await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("x-api-deprecated"));
    assert!(!headers.contains_key("deprecation"));

    clock.set(Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).unwrap());
    let (status, headers, body) = t.call(Method::GET, graph, None).await;
    assert_eq!(status, 200);
    assert_eq!(body["name"], "Ada");
    assert_eq!(headers["x-api-deprecated"], "true");
    assert_eq!(
        headers["deprecation"],
        format!(
            "@{}",
            Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0)
                .unwrap()
                .timestamp()
        )
    );
    assert_eq!(headers["sunset"], "Fri, 01 Jan 2027 00:00:00 GMT");
    let link = headers["link"].to_str().unwrap();
    assert!(
        link.contains("<https://kbq.example/migrate-v2>; rel=\"deprecation\""),
        "{link}"
    );
    assert!(
        link.contains("</data/v2/query/graph/entity/Ada>; rel=\"successor-version\""),
        "{link}"
    );
    // Errors under a deprecated version carry the headers too; probes never do.
    let (status, headers, _) = t
        .call(Method::POST, "/data/v1/query/graph", Some(json!({})))
        .await;
    assert_eq!(status, 400);
    assert_eq!(headers["x-api-deprecated"], "true");
    let res = t.http.get(t.url("/livez")).send().await.unwrap();
    assert!(!res.headers().contains_key("x-api-deprecated"));

    clock.set(Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap());
    for (method, path) in [
        (Method::GET, graph),
        (Method::POST, "/data/v1/query/graph"),
        (Method::POST, "/data/v1/query/graph/search"),
        (Method::GET, "/data/v1/no/such/route"),
    ] {
        let (status, _, body) = t.call(method, path, Some(json!({"query": "a"}))).await;
        assert_eq!(status, 410, "{path}");
        assert_error(&body, "version_sunset", None);
    }
    let (_, headers, _) = t.call(Method::GET, graph, None).await;
    assert!(
        headers["link"].to_str().unwrap().contains("migrate-v2"),
        "a 410 points to the migration guide"
    );
    // Gone even without a key: the version no longer exists to authenticate against.
    let (status, _, body) = read(t.http.get(t.url(graph)).send().await.unwrap()).await;
    assert_eq!(status, 410);
    assert_error(&body, "version_sunset", None);
    let res = t.http.get(t.url("/livez")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    t.stop().await;
}

#[tokio::test]
async fn an_unknown_version_prefix_is_not_found() {
    let t = TestServer::start().await;
    for path in [
        "/data/v2/query/graph",
        "/data/v0/query/graph",
        "/v9/agent/chat",
    ] {
        let (status, _, body) = t
            .call(Method::POST, path, Some(json!({"entity_name": "Ada"})))
            .await;
        assert_eq!(status, 404, "{path}");
        assert_error(&body, "not_found", None);
    }
    t.stop().await;
}
