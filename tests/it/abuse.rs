//! Slow and abusive clients: each gets a quick, documented answer (408, 413, 431, 400, 401),
//! and the server's other clients are served meanwhile. The bounds are in
//! docs/operations.md ("Slow and abusive clients").

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{KEY, TestServer, assert_error, test_config};

/// A test server whose heads must arrive within 2 s and bodies within 2.5 s: short for the
/// test, long enough that a good client's head on a loaded machine (the suite runs its tests
/// at once on two cores) is not taken for a slow one.
async fn impatient_server() -> TestServer {
    let mut config = test_config();
    config.server.header_timeout_ms = 2_000;
    config.server.body_timeout_ms = 2_500;
    TestServer::with_fixture(config).await
}

/// Everything the server sends on `stream` until it closes it (or 10 s pass).
async fn answer(mut stream: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn slow_heads_and_bodies_get_408_and_other_clients_are_served_meanwhile() {
    let t = impatient_server().await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let mut heads = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..40 {
        // Half a head, then nothing.
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /data/v1/query/graph HTTP/1.1\r\nHost: kbq\r\n")
            .await
            .unwrap();
        heads.push(s);
        // A whole head, then one byte of a 100-byte body.
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(
            format!(
                "POST /data/v1/query/graph HTTP/1.1\r\nHost: kbq\r\nAuthorization: Bearer {KEY}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        bodies.push(s);
    }
    // The other clients are answered while 80 connections hang.
    for _ in 0..20 {
        let (status, body) = t
            .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    for s in heads {
        let text = answer(s).await;
        assert!(text.starts_with("HTTP/1.1 408"), "a slow head: {text:?}");
    }
    for s in bodies {
        let text = answer(s).await;
        assert!(text.starts_with("HTTP/1.1 408"), "a slow body: {text:?}");
        assert!(text.contains("\"request_timeout\""), "{text}");
        assert!(text.to_lowercase().contains("connection: close"), "{text}");
    }
    let (status, _) = t
        .post("/data/v1/query/graph", json!({"entity_name": "Ada"}))
        .await;
    assert_eq!(status, 200);
    t.stop().await;
}

/// A body that arrives whole, however slowly within the bound, is read as usual.
#[tokio::test]
async fn a_body_within_its_time_is_answered() {
    let t = impatient_server().await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let body = br#"{"entity_name": "Ada"}"#;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        format!(
            "POST /data/v1/query/graph HTTP/1.1\r\nHost: kbq\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    for chunk in body.chunks(8) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(chunk).await.unwrap();
    }
    let text = answer(s).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    t.stop().await;
}

async fn post_raw(t: &TestServer, path: &str, body: Vec<u8>) -> (u16, Value) {
    t.post_bytes(path, "application/json", body).await
}

#[tokio::test]
async fn deep_long_and_broken_input_gets_a_quick_4xx_and_changes_nothing() {
    let t = TestServer::start().await;
    // JSON nested 100,000 deep where any JSON value is allowed: refused by the parser's depth
    // bound, not by the stack.
    let deep = format!(
        r#"[{{"name": "Deep", "entity_type": "t", "properties": {{"p": {}1{}}}}}]"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (status, err) = post_raw(&t, "/data/v1/ingest/entities", deep.into_bytes()).await;
    assert_eq!(status, 400, "{err}");
    assert_error(&err, "invalid_request", Some("body"));
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("recursion limit"),
        "{err}"
    );
    let (_, found) = t.get("/data/v1/query/graph/entity/Deep").await;
    assert_eq!(found, Value::Null);

    // A megabyte name: over the body limit in a body, over the head limit in a path, and
    // over the name rule when it fits.
    let long = "a".repeat(1 << 20);
    let (status, err) = t
        .post("/data/v1/query/graph", json!({"entity_name": long}))
        .await;
    assert_eq!(status, 413, "{err}");
    assert_error(&err, "payload_too_large", None);
    let addr = t.base.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "GET /data/v1/query/graph/entity/{long} HTTP/1.1\r\nHost: kbq\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    );
    // The server may answer and close before it has read the whole head.
    let _ = s.write_all(head.as_bytes()).await;
    let text = answer(s).await;
    assert!(
        text.starts_with("HTTP/1.1 431"),
        "{}",
        &text[..text.len().min(200)]
    );
    let (status, err) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "a".repeat(600_000)}),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert_error(&err, "invalid_request", Some("entity_name"));

    // Bytes that are not UTF-8, in a body and in a path.
    let (status, err) = post_raw(
        &t,
        "/data/v1/query/graph",
        b"{\"entity_name\": \"\xff\xfe\"}".to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{err}");
    assert_error(&err, "invalid_request", Some("body"));
    let (status, _, err) = t
        .call(
            reqwest::Method::GET,
            "/data/v1/query/graph/entity/%FF%FE",
            None,
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert_error(&err, "invalid_request", Some("entity_name"));
    t.stop().await;
}

/// 10,000 requests with a key kbq does not know, 64 at a time: every one 401, while the
/// good key is served in between.
#[tokio::test]
async fn a_burst_with_a_bad_key_gets_401_each_and_the_good_key_is_served() {
    let t = TestServer::start().await;
    let url = t.url("/data/v1/query/graph/entity/Ada");
    let mut unauthorized = 0;
    let mut batch = Vec::new();
    for i in 0..10_000 {
        let (http, url) = (t.http.clone(), url.clone());
        batch.push(tokio::spawn(async move {
            http.get(url)
                .bearer_auth(format!("wrong-key-{}", i % 7))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }));
        if batch.len() == 64 {
            for h in batch.drain(..) {
                if h.await.unwrap().unwrap() == 401 {
                    unauthorized += 1;
                }
            }
            if i % 2_000 < 64 {
                let (status, body) = t.get("/data/v1/query/graph/entity/Ada").await;
                assert_eq!(status, 200, "{body}");
            }
        }
    }
    for h in batch {
        if h.await.unwrap().unwrap() == 401 {
            unauthorized += 1;
        }
    }
    assert_eq!(unauthorized, 10_000);
    let (status, _) = t.get("/data/v1/query/graph/entity/Ada").await;
    assert_eq!(status, 200);
    t.stop().await;
}
