//! The page at `/ui/`: its files and the headers a page needs, here; its flows in a real
//! browser, by ui/test/ui.test.js (headless Chromium driven by playwright-core), which
//! `the_page_passes_its_browser_tests` runs after tests/ui/setup.sh readies it.

use std::path::Path;

use crate::support::TestServer;

/// Every `src` and `href` of the page's HTML that is one of its own files.
fn linked_files(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for (i, _) in html.match_indices(attribute) {
            let rest = &html[i + attribute.len()..];
            let value = &rest[..rest.find('"').unwrap()];
            if !value.starts_with('#') && !value.contains(':') {
                out.push(value.to_string());
            }
        }
    }
    out
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_the_headers_a_page_needs() {
    let t = TestServer::start().await;
    let res = t.http.get(t.url("/ui/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let headers = res.headers().clone();
    let html = res.text().await.unwrap();
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    // No inline script, style or handler: every script has a source.
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=").count(),
        "an inline script"
    );
    assert!(!html.contains("<style"), "an inline style element");
    assert!(!html.contains(" style=\""), "an inline style attribute");
    assert!(!html.contains(" onclick=") && !html.contains(" onload="));
    let files = linked_files(&html);
    assert!(files.len() >= 6, "{files:?}");
    for file in &files {
        let res = t
            .http
            .get(t.url(&format!("/ui/{file}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{file}");
        let etag = res.headers()["etag"].clone();
        assert_eq!(res.headers()["x-content-type-options"], "nosniff");
        // A browser that has the file asks again and gets 304, with nothing to read.
        let again = t
            .http
            .get(t.url(&format!("/ui/{file}")))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{file}");
    }
    // The libraries' licences ship with them.
    let res = t
        .http
        .get(t.url("/ui/vendor/LICENSES.txt"))
        .send()
        .await
        .unwrap();
    let licences = res.text().await.unwrap();
    for library in [
        "sigma 4.0.4",
        "graphology 0.26.0",
        "graphology-library 0.8.0",
    ] {
        assert!(licences.contains(library), "{library}");
    }
    // `/ui` leads to the page; a file it does not have is a 404 in the usual shape; no key is
    // needed for any of it (the page asks for one).
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let res = client.get(t.url("/ui")).send().await.unwrap();
    assert_eq!(res.status(), 308);
    assert_eq!(res.headers()["location"], "/ui/");
    assert_eq!(
        res.headers()["content-security-policy"],
        csp,
        "the redirect's"
    );
    assert_eq!(res.headers()["x-content-type-options"], "nosniff");
    let (status, headers, body) =
        crate::support::read(client.get(t.url("/ui/nope.js")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    crate::support::assert_error(&body, "not_found", None);
    assert_eq!(headers["content-security-policy"], csp, "the 404's");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["x-frame-options"], "DENY");
    // The OpenAPI document names the page in its description, not in its paths.
    let (_, doc) = t.get("/openapi.json").await;
    assert!(
        doc["info"]["description"]
            .as_str()
            .unwrap()
            .contains("`/ui/`")
    );
    assert!(
        doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .all(|p| !p.starts_with("/ui"))
    );
    t.stop().await;
}

#[tokio::test]
async fn the_page_passes_its_browser_tests() {
    // The tests start their own kbq from this build.
    crate::support::npm_tests(
        "tests/ui/setup.sh",
        "ui",
        "the page's browser tests",
        |npm| {
            npm.env(
                "KBQ_UI_SHOTS",
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots"),
            );
        },
    )
    .await;
}
