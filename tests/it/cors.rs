//! CORS: preflights and responses for the origins `server.cors_origins` lists, and nothing
//! for any other origin (docs/configuration.md).

use reqwest::Method;
use serde_json::json;

use crate::support::{KEY, TestServer, test_config};

const PAGE: &str = "http://localhost:5173";
const OTHER: &str = "http://evil.example";

async fn server(origins: &[&str]) -> TestServer {
    let mut config = test_config();
    config.server.cors_origins = origins.iter().map(|o| o.to_string()).collect();
    TestServer::with_fixture(config).await
}

async fn preflight(t: &TestServer, path: &str, origin: &str) -> reqwest::Response {
    t.http
        .request(Method::OPTIONS, t.url(path))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap()
}

fn header<'a>(res: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    res.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn a_listed_origin_gets_preflights_and_readable_answers() {
    let t = server(&[PAGE]).await;
    // No key on a preflight: browsers send none.
    let res = preflight(&t, "/v1/agent/chat", PAGE).await;
    assert_eq!(res.status(), 204);
    assert_eq!(header(&res, "access-control-allow-origin"), Some(PAGE));
    let allowed = header(&res, "access-control-allow-headers").unwrap();
    for h in ["authorization", "x-api-key", "content-type"] {
        assert!(allowed.contains(h), "{allowed}");
    }
    assert!(
        header(&res, "access-control-allow-methods")
            .unwrap()
            .contains("POST")
    );
    assert!(header(&res, "vary").unwrap().contains("Origin"));

    // A streamed chat from the page: the stream is readable, as is its request id.
    let res = t
        .http
        .post(t.url("/v1/agent/chat"))
        .header("origin", PAGE)
        .bearer_auth(KEY)
        .json(&json!({"message": "Who was Ada?", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "access-control-allow-origin"), Some(PAGE));
    let exposed = header(&res, "access-control-expose-headers")
        .unwrap()
        .to_string();
    assert!(exposed.contains("x-request-id") && exposed.contains("retry-after"));
    assert_eq!(header(&res, "content-type"), Some("text/event-stream"));
    assert!(res.text().await.unwrap().contains("event: done"));

    // Errors too, so that the page can read why.
    let res = t
        .http
        .get(t.url("/data/v1/query/graph/entity/Ada"))
        .header("origin", PAGE)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(header(&res, "access-control-allow-origin"), Some(PAGE));
    t.stop().await;
}

#[tokio::test]
async fn an_origin_not_listed_gets_no_cors_headers_and_nothing_is_refused_for_it() {
    for origins in [&[][..], &[PAGE][..]] {
        let t = server(origins).await;
        let res = preflight(&t, "/v1/agent/chat", OTHER).await;
        assert_ne!(res.status(), 204, "{origins:?}");
        assert_eq!(header(&res, "access-control-allow-origin"), None);
        // The request itself is served as without an Origin (a same-origin page sends one).
        let res = t
            .http
            .get(t.url("/data/v1/query/graph/entity/Ada"))
            .header("origin", OTHER)
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "access-control-allow-origin"), None);
        assert_eq!(
            res.json::<serde_json::Value>().await.unwrap()["name"],
            "Ada"
        );
        t.stop().await;
    }
}

#[test]
fn origins_that_are_not_origins_stop_start_up() {
    let mut config = test_config();
    config.server.cors_origins = vec![PAGE.into(), "https://example.com/app".into()];
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("server.cors_origins[1]"), "{e}");
}
