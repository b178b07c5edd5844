//! Bad input: one error body shape, a 4xx naming the field, and nothing changed; and the
//! table of codes in docs/errors.md is the one in `ErrorCode`.

use kbq::error::ErrorCode;
use reqwest::Method;
use serde_json::json;

use crate::support::{TestServer, assert_error};

const TRAVERSE: &str = "/data/v1/query/graph";

async fn raw(t: &TestServer, body: &str) -> (u16, serde_json::Value) {
    t.post_bytes(TRAVERSE, "application/json", body.to_string())
        .await
}

#[tokio::test]
async fn malformed_or_mistyped_bodies_name_the_field() {
    let t = TestServer::start().await;
    for (body, field) in [
        ("", "body"),
        ("{", "body"),
        ("not json", "body"),
        ("[]", "body"),
        (r#"["Ada", null, null, null, null]"#, "body"),
        ("\"Ada\"", "body"),
        ("null", "body"),
        ("{}", "entity_name"),
        (r#"{"entity_name": 5}"#, "entity_name"),
        (r#"{"entity_name": "Ada", "depth": "2"}"#, "depth"),
        (r#"{"entity_name": "Ada", "depth": 2.5}"#, "depth"),
        (r#"{"entity_name": "Ada", "limit": 1e9}"#, "limit"),
        (
            r#"{"entity_name": "Ada", "direction": "sideways"}"#,
            "direction",
        ),
        (r#"{"entity_name": "Ada", "direction": 1}"#, "direction"),
        (
            r#"{"entity_name": "Ada", "relationship_types": "knows"}"#,
            "relationship_types",
        ),
        (
            r#"{"entity_name": "Ada", "relationship_types": []}"#,
            "relationship_types",
        ),
        (
            r#"{"entity_name": "Ada", "relationship_types": [""]}"#,
            "relationship_types",
        ),
        (
            r#"{"entity_name": "Ada", "relationship_types": [1]}"#,
            "relationship_types[0]",
        ),
        (r#"{"entity_name": "Ada", "dpeth": 2}"#, "dpeth"),
        (r#"{"entity_name": ""}"#, "entity_name"),
        (r#"{"entity_name": "   "}"#, "entity_name"),
        (r#"{"entity_name": "Ada"} trailing"#, "body"),
    ] {
        let (status, err) = raw(&t, body).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_error(&err, "invalid_request", Some(field));
    }
    let long = "x".repeat(600);
    let (status, err) = t.post(TRAVERSE, json!({"entity_name": long})).await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("entity_name"));
    let (status, err) = t
        .post(
            "/data/v1/query/graph/documents",
            json!({"entity_name": "Ada", "resolve_documents": "yes"}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(&err, "invalid_request", Some("resolve_documents"));
    assert_eq!(t.server().kb.counts().await.unwrap().entities, 10);
    t.stop().await;
}

#[tokio::test]
async fn oversized_bodies_unknown_paths_and_wrong_methods_use_the_same_body() {
    let mut config = crate::support::test_config();
    config.server.max_body_bytes = 2048;
    let t = TestServer::with_fixture(config).await;
    let big = format!(r#"{{"entity_name": "{}"}}"#, "a".repeat(4096));
    let (status, body) = raw(&t, &big).await;
    assert_eq!(status, 413);
    assert_error(&body, "payload_too_large", None);

    let (status, _, body) = t.call(Method::GET, "/data/v1/query/nothing", None).await;
    assert_eq!(status, 404);
    assert_error(&body, "not_found", None);
    let (status, _, body) = t.call(Method::GET, "/nothing/at/all", None).await;
    assert_eq!(status, 404);
    assert_error(&body, "not_found", None);
    let (status, _, body) = t.call(Method::GET, TRAVERSE, None).await;
    assert_eq!(status, 405);
    assert_error(&body, "method_not_allowed", None);
    let (status, _, body) = t
        .call(
            Method::POST,
            "/data/v1/query/graph/entity/Ada",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 405);
    assert_error(&body, "method_not_allowed", None);
    let res = t.http.head(t.url("/livez")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let (status, _, body) = t.call(Method::DELETE, "/livez", None).await;
    assert_eq!(status, 405);
    assert_error(&body, "method_not_allowed", None);
    t.stop().await;
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let t = TestServer::start().await;
    let res = t
        .http
        .get(t.url("/livez"))
        .header("x-request-id", "caller-id-42")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-request-id"], "caller-id-42");
    let res = t.http.get(t.url("/livez")).send().await.unwrap();
    let id = res.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    // Errors too, and an unusable caller id is replaced.
    let res = t
        .http
        .get(t.url("/data/v1/query/graph/entity/Ada"))
        .header("x-request-id", "bad id with spaces")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert!(uuid::Uuid::parse_str(res.headers()["x-request-id"].to_str().unwrap()).is_ok());
    let res = t.http.get(t.url("/nowhere")).send().await.unwrap();
    assert!(res.headers().contains_key("x-request-id"));
    t.stop().await;
}

const ERRORS_PAGE: &str = include_str!("../../docs/errors.md");

/// One row of the "Codes" table of docs/errors.md: its line, code, status and meaning cells.
struct CodeRow<'a> {
    line: usize,
    code: &'a str,
    status: &'a str,
    meaning: &'a str,
}

/// The rows of the table under `## Codes`, up to the next heading.
fn code_rows(page: &str) -> Vec<CodeRow<'_>> {
    let mut in_codes = false;
    let mut rows = Vec::new();
    for (i, line) in page.lines().enumerate() {
        if line.starts_with("## ") {
            in_codes = line == "## Codes";
            continue;
        }
        // Data rows open with a code in backticks; the header and the rule do not.
        if !in_codes || !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 4, "docs/errors.md:{}: {line}", i + 1);
        rows.push(CodeRow {
            line: i + 1,
            code: cells[0].trim_matches('`'),
            status: cells[1],
            meaning: cells[2],
        });
    }
    rows
}

/// The code's meaning as the table opens its cell: a sentence, capitalised, with a full stop.
fn as_sentence(meaning: &str) -> String {
    let mut chars = meaning.chars();
    let first = chars.next().map(|c| c.to_uppercase().to_string());
    format!("{}{}.", first.unwrap_or_default(), chars.as_str())
}

/// Every code the OpenAPI document lists for the type (its schema). `ErrorCode::ALL` itself is
/// held to the enum's variants by a unit test in src/error.rs.
fn every_code_string() -> Vec<String> {
    let schema = serde_json::to_value(<ErrorCode as utoipa::PartialSchema>::schema()).unwrap();
    schema["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("ErrorCode's schema lists no enum: {schema}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_docs_table_of_codes_is_error_code_all() {
    let rows = code_rows(ERRORS_PAGE);
    for code in ErrorCode::ALL {
        // The string a client sees in the body is the one the table names.
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        let found: Vec<&CodeRow> = rows.iter().filter(|r| r.code == code.as_str()).collect();
        let [row] = found.as_slice() else {
            panic!(
                "docs/errors.md has {} rows for `{}`; it needs exactly one",
                found.len(),
                code.as_str()
            );
        };
        assert_eq!(
            row.status,
            code.status().as_u16().to_string(),
            "docs/errors.md:{}: the status of `{}`",
            row.line,
            code.as_str()
        );
        // The cell may explain further, after the meaning's own sentence.
        let meaning = as_sentence(code.meaning());
        let rest = row.meaning.strip_prefix(&meaning);
        assert!(
            rest.is_some_and(|rest| rest.is_empty() || rest.starts_with(' ')),
            "docs/errors.md:{}: the meaning of `{}` should open with {meaning:?}, not {:?}",
            row.line,
            code.as_str(),
            row.meaning
        );
    }
    for row in &rows {
        assert!(
            ErrorCode::ALL.iter().any(|c| c.as_str() == row.code),
            "docs/errors.md:{}: `{}` is not in ErrorCode::ALL",
            row.line,
            row.code
        );
    }
    let mut every = every_code_string();
    let mut all: Vec<String> = ErrorCode::ALL.iter().map(|c| c.as_str().into()).collect();
    every.sort();
    all.sort();
    assert_eq!(
        every, all,
        "ErrorCode::ALL should hold every ErrorCode once"
    );
}
