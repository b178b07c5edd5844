//! The key matrix on every API route: no key, wrong key, Bearer, X-API-Key.

use serde_json::json;

use crate::support::{KEY, TestServer, assert_error, read, store_routes};

#[tokio::test]
async fn every_api_route_needs_a_valid_key_in_either_header() {
    let t = TestServer::start().await;
    for (method, path, body) in store_routes() {
        let request = |auth: Option<(&str, String)>| {
            let mut r = t.http.request(method.clone(), t.url(path));
            if let Some((h, v)) = auth {
                r = r.header(h, v);
            }
            if let Some(b) = &body {
                r = r.json(b);
            }
            r
        };
        let cases: Vec<(Option<(&str, String)>, u16)> = vec![
            (None, 401),
            (Some(("Authorization", "Bearer wrong-key".into())), 401),
            (Some(("X-API-Key", "wrong-key".into())), 401),
            (Some(("Authorization", format!("Basic {KEY}"))), 401),
            (Some(("Authorization", "Bearer ".into())), 401),
            (Some(("Authorization", format!("Bearer {KEY}"))), 200),
            (Some(("Authorization", format!("bearer {KEY}"))), 200),
            (Some(("X-API-Key", KEY.to_string())), 200),
        ];
        for (auth, want) in cases {
            let label = format!("{method} {path} with {auth:?}");
            let (status, headers, body) = read(request(auth).send().await.unwrap()).await;
            assert_eq!(status.as_u16(), want, "{label}: {body}");
            if want == 401 {
                assert_error(&body, "INVALID_API_KEY", None);
                assert_eq!(headers["www-authenticate"], "Bearer", "{label}");
            }
        }
    }
    t.stop().await;
}

#[tokio::test]
async fn probes_need_no_key_and_say_nothing_more() {
    let t = TestServer::start().await;
    for (path, want) in [
        ("/livez", json!({"status": "ok"})),
        ("/readyz", json!({"status": "ready"})),
    ] {
        let (status, _, body) = read(t.http.get(t.url(path)).send().await.unwrap()).await;
        assert_eq!((status.as_u16(), body), (200, want));
    }
    t.stop().await;
}

#[tokio::test]
async fn a_first_run_without_keys_generates_one_keeps_it_and_is_never_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::test_config();
    config.auth.keys.clear();
    config.data_dir = dir.path().to_path_buf();
    let t = TestServer::start_with(
        config.clone(),
        std::sync::Arc::new(kbq::versions::SystemClock),
        false,
    )
    .await;
    let key = std::fs::read_to_string(dir.path().join("api-key"))
        .unwrap()
        .trim()
        .to_string();
    assert!(key.starts_with("kbq_") && key.len() == 68, "{key}");
    let (status, _, _) = read(
        t.http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, _) = read(
        t.http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    t.stop().await;
    // The next start reuses the kept key.
    let t = TestServer::start_with(
        config,
        std::sync::Arc::new(kbq::versions::SystemClock),
        false,
    )
    .await;
    let (status, _, _) = read(
        t.http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    t.stop().await;
}
