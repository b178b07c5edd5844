//! Workspaces: the admin API, keys minted at run time, the workspace a request works in, and
//! isolation between workspaces, route by route (the routes come from /openapi.json, so a
//! route added later without a probe here fails the matrix).

use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{KEY, TestServer, assert_error, read};

/// A request as `key`, in the workspace `header` names (none: the key's own).
async fn call_as(
    t: &TestServer,
    key: &str,
    header: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = t.http.request(method, t.url(path)).bearer_auth(key);
    if let Some(w) = header {
        req = req.header("X-KBQ-Workspace", w);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let (status, _, body) = read(req.send().await.expect("request sent")).await;
    (status, body)
}

/// Creates the workspace `name` with the operator's key (the test key: `admin` of
/// `default`), and mints a key of every scope for it.
async fn workspace_with_key(t: &TestServer, name: &str) -> String {
    let (s, made) = t.post("/admin/v1/workspaces", json!({"name": name})).await;
    assert_eq!(s, 201, "{made}");
    assert_eq!(made["name"], name);
    mint(t, name, &["read", "write", "agent"]).await
}

async fn mint(t: &TestServer, workspace: &str, scopes: &[&str]) -> String {
    let (s, key) = t
        .post(
            &format!("/admin/v1/workspaces/{workspace}/keys"),
            json!({"scopes": scopes, "name": format!("{workspace}-key")}),
        )
        .await;
    assert_eq!(s, 201, "{key}");
    assert_eq!(key["workspace"], workspace);
    key["key"].as_str().unwrap().to_string()
}

/// The marker a workspace's data is named by: `Alpha Marker` for `alpha`.
fn marker(workspace: &str) -> String {
    let mut c = workspace.chars();
    let first = c.next().unwrap().to_uppercase().collect::<String>();
    format!("{first}{} Marker", c.as_str())
}

/// What only `workspace`'s data holds and no request names (a request's name may come back
/// in its answer): its entities' type, its second entity's name, a word of its document.
fn secrets(workspace: &str) -> [String; 3] {
    [
        format!("{workspace}type"),
        format!("{} Friend", marker(workspace)),
        format!("{workspace}secret"),
    ]
}

/// Whether `answer` holds any of `workspace`'s secrets.
fn holds(answer: &str, workspace: &str) -> bool {
    secrets(workspace)
        .iter()
        .any(|s| answer.contains(s.as_str()))
}

/// Imports `workspace`'s own small graph with its key: its marker entity, linked to a
/// second entity, and a document about it.
async fn fill(t: &TestServer, key: &str, workspace: &str) {
    let m = marker(workspace);
    let word = format!("{workspace}word");
    let [kind, friend, secret] = secrets(workspace);
    let ndjson = [
        json!({"kind": "entity", "name": m, "entity_type": kind, "properties": {}}),
        json!({"kind": "entity", "name": friend, "entity_type": kind, "properties": {}}),
        json!({"kind": "relationship", "source_name": m, "target_name": friend, "relationship_type": "knows", "properties": {}}),
        json!({"kind": "document", "title": m, "content": format!("{m} is described here with the word {word} and the {secret}."), "source": "t", "source_id": workspace, "content_type": "text/plain", "url": null, "entity_name": m}),
    ]
    .iter()
    .map(Value::to_string)
    .collect::<Vec<_>>()
    .join("\n");
    let res = t
        .http
        .post(t.url("/data/v1/ingest/ndjson"))
        .bearer_auth(key)
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    let (s, _, report) = read(res).await;
    assert_eq!(s, 200, "{report}");
    assert!(
        report["failures"].as_array().unwrap().is_empty(),
        "{report}"
    );
}

/// A request of the route `(method, path)` that asks for `workspace`'s data, or `None` for a
/// route that reads and writes no knowledge (with why, in `SKIPPED`).
fn probe(method: &str, path: &str, workspace: &str) -> Option<(Method, String, Option<Value>)> {
    let m = marker(workspace);
    let word = format!("{workspace}word");
    let post = |path: &str, body: Value| Some((Method::POST, path.to_string(), Some(body)));
    match (method, path) {
        ("post", "/data/v1/query/graph") => post(path, json!({"entity_name": m})),
        ("post", "/data/v1/query/graph/search") => post(path, json!({"query": m})),
        ("get", "/data/v1/query/graph/entity/{entity_name}") => Some((
            Method::GET,
            format!("/data/v1/query/graph/entity/{}", m.replace(' ', "%20")),
            None,
        )),
        ("post", "/data/v1/query/graph/documents") => post(path, json!({"entity_name": m})),
        ("post", "/data/v1/query/graph/merges") => post(path, json!({})),
        ("post", "/v1/rag/semantic") => post(path, json!({"query": format!("{m} {word}")})),
        ("post", "/v1/rag/keyword") => post(path, json!({"query": word})),
        ("post", "/v1/rag/hybrid") => post(path, json!({"query": format!("{m} {word}")})),
        ("post", "/v1/agent/chat") => post(path, json!({"message": format!("Tell me about {m}")})),
        ("post", "/v1/chat/completions") => post(
            path,
            json!({"model": "kbq", "messages": [{"role": "user", "content": format!("Tell me about {m}")}]}),
        ),
        _ => None,
    }
}

/// Keyed routes that read no knowledge, or whose isolation is tested below by what they
/// write, with why.
const SKIPPED: &[(&str, &str, &str)] = &[
    (
        "get",
        "/v1/agent/health",
        "the providers' health: no knowledge",
    ),
    ("get", "/v1/models", "the model names: no knowledge"),
    (
        "post",
        "/v1/embeddings",
        "embeds the request's text: no knowledge",
    ),
    (
        "post",
        "/data/v1/ingest/entities",
        "writes: `writes_land_in_the_writers_workspace_only`",
    ),
    (
        "post",
        "/data/v1/ingest/relationships",
        "writes: `writes_land_in_the_writers_workspace_only`",
    ),
    (
        "post",
        "/data/v1/ingest/documents",
        "writes: `writes_land_in_the_writers_workspace_only`",
    ),
    (
        "post",
        "/data/v1/ingest/ndjson",
        "writes: every test here fills its workspaces through it",
    ),
    (
        "delete",
        "/data/v1/ingest/entities/{name}",
        "writes: `writes_land_in_the_writers_workspace_only`",
    ),
    (
        "delete",
        "/data/v1/ingest/documents/{id}",
        "writes: `writes_land_in_the_writers_workspace_only`",
    ),
    (
        "post",
        "/data/v1/ingest/sources",
        "jobs: `sources_and_jobs_stay_in_their_workspace`",
    ),
    (
        "get",
        "/data/v1/ingest/jobs/{job_id}",
        "jobs: `sources_and_jobs_stay_in_their_workspace`",
    ),
    (
        "delete",
        "/data/v1/ingest/jobs/{job_id}",
        "jobs: `sources_and_jobs_stay_in_their_workspace`",
    ),
    (
        "get",
        "/data/v1/ingest/jobs/{job_id}/events",
        "jobs: `sources_and_jobs_stay_in_their_workspace`",
    ),
    (
        "delete",
        "/data/v1/ingest/sources/{source}/{source_id}",
        "jobs: `sources_and_jobs_stay_in_their_workspace`",
    ),
];

/// The keyed, non-admin operations of the served OpenAPI document.
async fn knowledge_routes(t: &TestServer) -> Vec<(String, String)> {
    let (_, doc) = t.get("/openapi.json").await;
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let keyed = op["security"].as_array().is_some_and(|s| !s.is_empty());
            if keyed && !path.starts_with("/admin/") && method != "head" {
                routes.push((method.clone(), path.clone()));
            }
        }
    }
    routes
}

/// Every route that answers from the knowledge base answers a key from its own workspace
/// only: the other workspace's marker is never in the answer, its own is (so the probe can
/// fail), whether the workspace comes from the key or from an operator's header.
#[tokio::test]
async fn every_knowledge_route_answers_from_the_requests_workspace_only() {
    let t = TestServer::start().await;
    let alpha = workspace_with_key(&t, "alpha").await;
    let beta = workspace_with_key(&t, "beta").await;
    fill(&t, &alpha, "alpha").await;
    fill(&t, &beta, "beta").await;
    let routes = knowledge_routes(&t).await;
    let mut probed = 0;
    for (method, path) in &routes {
        let skipped = SKIPPED.iter().any(|(m, p, _)| m == method && p == path);
        let Some(_) = probe(method, path, "alpha") else {
            assert!(
                skipped,
                "{method} {path}: no probe and not skipped: add one"
            );
            continue;
        };
        assert!(!skipped, "{method} {path}: both probed and skipped");
        probed += 1;
        for (own, other, key) in [("alpha", "beta", &alpha), ("beta", "alpha", &beta)] {
            // The key's own workspace, and the same workspace named by the operator.
            for (key, header) in [(key.as_str(), None), (KEY, Some(own))] {
                for asked in [own, other] {
                    let (m, p, body) = probe(method, path, asked).unwrap();
                    let (status, answer) = call_as(&t, key, header, m, &p, body).await;
                    assert!(
                        status.is_success(),
                        "{method} {path} in {own}: {status} {answer}"
                    );
                    let text = answer.to_string();
                    assert!(
                        !holds(&text, other),
                        "{method} {path} in {own} (asked for {asked}) leaked {other}: {text}"
                    );
                    let finds_own = !matches!(path.as_str(), "/data/v1/query/graph/merges");
                    if asked == own && finds_own {
                        assert!(
                            holds(&text, own),
                            "{method} {path} in {own} did not find its own data: {text}"
                        );
                    }
                }
            }
        }
    }
    assert!(probed >= 10, "only {probed} routes probed");
    // The default workspace holds the fixture, and neither marker.
    let (s, found) = t.get("/data/v1/query/graph/entity/Alpha%20Marker").await;
    assert_eq!((s.as_u16(), found), (200, Value::Null));
    let (s, found) = t.get("/data/v1/query/graph/entity/Ada").await;
    assert_eq!(s, 200);
    assert_eq!(found["name"], "Ada");
    t.stop().await;
}

/// A key acts in its own workspace; naming another is 403 unless it is an operator's; a
/// workspace that does not exist is 404 `workspace_not_found`; a header that is no name, 400.
#[tokio::test]
async fn the_header_is_an_operators_alone_and_names_an_existing_workspace() {
    let t = TestServer::start().await;
    let alpha = workspace_with_key(&t, "alpha").await;
    workspace_with_key(&t, "beta").await;
    let alpha_admin = mint(&t, "alpha", &["admin"]).await;
    let path = "/data/v1/query/graph/search";
    let body = || Some(json!({"query": "a"}));
    for (key, header, status, code) in [
        (
            alpha.as_str(),
            Some("beta"),
            403,
            Some("workspace_forbidden"),
        ),
        (
            alpha.as_str(),
            Some("default"),
            403,
            Some("workspace_forbidden"),
        ),
        // An admin key of another workspace is no operator.
        (
            alpha_admin.as_str(),
            Some("beta"),
            403,
            Some("workspace_forbidden"),
        ),
        (alpha.as_str(), Some("alpha"), 200, None),
        (KEY, Some("nowhere"), 404, Some("workspace_not_found")),
        (KEY, Some("Not_A_Name"), 400, Some("invalid_request")),
        (KEY, Some("beta"), 200, None),
    ] {
        let (s, answer) = call_as(&t, key, header, Method::POST, path, body()).await;
        assert_eq!(s.as_u16(), status, "{header:?}: {answer}");
        if let Some(code) = code {
            assert_eq!(answer["error"]["code"], code, "{answer}");
            assert!(!answer.to_string().contains("Marker"));
        }
    }
    let (s, answer) = call_as(&t, KEY, Some("Not_A_Name"), Method::POST, path, body()).await;
    assert_eq!(s, 400);
    assert_error(&answer, "invalid_request", Some("X-KBQ-Workspace"));
    // The admin API is an operator's: not a workspace's admin key.
    let (s, answer) = call_as(
        &t,
        &alpha_admin,
        None,
        Method::GET,
        "/admin/v1/workspaces",
        None,
    )
    .await;
    assert_eq!(s, 403, "{answer}");
    let (s, _) = call_as(&t, &alpha, None, Method::GET, "/admin/v1/workspaces", None).await;
    assert_eq!(s, 403);
    t.stop().await;
}

/// The admin API: create (409 when the name exists, 400 for a bad name), list and show with
/// counts, mint, list and revoke keys (the secret shown once, never listed), and delete
/// (`default` cannot be), after which the workspace's keys stop at once and a workspace
/// created again with the name holds nothing of the old one.
#[tokio::test]
async fn workspaces_and_keys_are_managed_through_the_admin_api() {
    let t = TestServer::start().await;
    let alpha = workspace_with_key(&t, "alpha").await;
    fill(&t, &alpha, "alpha").await;
    let (s, again) = t
        .post("/admin/v1/workspaces", json!({"name": "alpha"}))
        .await;
    assert_eq!(s, 409, "{again}");
    assert_error(&again, "conflict", None);
    let (s, _) = t
        .post("/admin/v1/workspaces", json!({"name": "default"}))
        .await;
    assert_eq!(s, 409);
    for bad in ["", "Alpha", "1abc", "a_b", &"a".repeat(64)] {
        let (s, answer) = t.post("/admin/v1/workspaces", json!({"name": bad})).await;
        assert_eq!(s, 400, "{bad}: {answer}");
        assert_error(&answer, "invalid_request", Some("name"));
    }
    let (s, list) = t.get("/admin/v1/workspaces").await;
    assert_eq!(s, 200, "{list}");
    let by_name: BTreeMap<String, Value> = list["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap().to_string(), w.clone()))
        .collect();
    assert_eq!(list["workspaces"][0]["name"], "default");
    assert_eq!(by_name["alpha"]["counts"]["entities"], 2);
    assert_eq!(by_name["alpha"]["counts"]["relationships"], 1);
    assert_eq!(by_name["alpha"]["counts"]["documents"], 1);
    assert_eq!(by_name["default"]["counts"]["entities"], 10);
    assert!(by_name["alpha"]["index_bytes"].as_u64().unwrap() > 0);
    let (s, one) = t.get("/admin/v1/workspaces/alpha").await;
    assert_eq!(s, 200);
    assert_eq!(one["counts"], by_name["alpha"]["counts"]);
    let (s, missing) = t.get("/admin/v1/workspaces/nowhere").await;
    assert_eq!(s, 404);
    assert_error(&missing, "workspace_not_found", None);

    // Keys: listed without their secrets; a revoked one stops at once.
    let reader = mint(&t, "alpha", &["read"]).await;
    let (s, keys) = t.get("/admin/v1/workspaces/alpha/keys").await;
    assert_eq!(s, 200);
    let listed = keys["keys"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{keys}");
    assert!(!keys.to_string().contains(&reader) && !keys.to_string().contains(&alpha));
    assert_eq!(listed[1]["scopes"], json!(["read"]));
    let search = || Some(json!({"query": "Marker"}));
    let (s, _) = call_as(
        &t,
        &reader,
        None,
        Method::POST,
        "/data/v1/query/graph/search",
        search(),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = call_as(
        &t,
        &reader,
        None,
        Method::POST,
        "/data/v1/ingest/entities",
        Some(json!([])),
    )
    .await;
    assert_eq!(s, 403, "a read key cannot write");
    let id = listed[1]["id"].as_str().unwrap();
    let (s, _, _) = t
        .call(
            Method::DELETE,
            &format!("/admin/v1/workspaces/beta/keys/{id}"),
            None,
        )
        .await;
    assert_eq!(s, 404, "a key is revoked only in its own workspace");
    let (s, _, revoked) = t
        .call(
            Method::DELETE,
            &format!("/admin/v1/workspaces/alpha/keys/{id}"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{revoked}");
    let (s, answer) = call_as(
        &t,
        &reader,
        None,
        Method::POST,
        "/data/v1/query/graph/search",
        search(),
    )
    .await;
    assert_eq!(s, 401, "{answer}");
    for (body, field) in [
        (json!({"scopes": [], "name": "k"}), "scopes"),
        (json!({"scopes": ["read", "read"], "name": "k"}), "scopes"),
        (json!({"scopes": ["root"], "name": "k"}), "scopes[0]"),
        (json!({"scopes": ["read"], "name": ""}), "name"),
    ] {
        let (s, answer) = t
            .post("/admin/v1/workspaces/alpha/keys", body.clone())
            .await;
        assert_eq!(s, 400, "{body}: {answer}");
        assert_error(&answer, "invalid_request", Some(field));
    }
    let (s, answer) = t
        .post(
            "/admin/v1/workspaces/nowhere/keys",
            json!({"scopes": ["read"], "name": "k"}),
        )
        .await;
    assert_eq!(s, 404, "{answer}");

    // Delete: `default` cannot go; `alpha` goes with its keys and its data.
    let (s, _, answer) = t
        .call(Method::DELETE, "/admin/v1/workspaces/default", None)
        .await;
    assert_eq!(s, 409, "{answer}");
    let (s, _, gone) = t
        .call(Method::DELETE, "/admin/v1/workspaces/alpha", None)
        .await;
    assert_eq!(s, 200, "{gone}");
    let (s, _) = call_as(
        &t,
        &alpha,
        None,
        Method::POST,
        "/data/v1/query/graph/search",
        search(),
    )
    .await;
    assert_eq!(s, 401, "the deleted workspace's key stops at once");
    let (s, _, _) = t
        .call(Method::DELETE, "/admin/v1/workspaces/alpha", None)
        .await;
    assert_eq!(s, 404);
    let (s, answer) = call_as(
        &t,
        KEY,
        Some("alpha"),
        Method::POST,
        "/data/v1/query/graph/search",
        search(),
    )
    .await;
    assert_eq!(s, 404, "{answer}");
    let fresh = workspace_with_key(&t, "alpha").await;
    let (s, answer) = call_as(
        &t,
        &fresh,
        None,
        Method::POST,
        "/data/v1/query/graph/search",
        search(),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        answer["total"], 0,
        "nothing of the old alpha comes back: {answer}"
    );
    let (s, one) = t.get("/admin/v1/workspaces/alpha").await;
    assert_eq!(s, 200);
    assert_eq!(one["counts"]["entities"], 0);
    t.stop().await;
}

/// The upserts and deletes of `/data/v1/ingest` write the key's workspace and no other, also
/// when several clients write to two workspaces at once.
#[tokio::test]
async fn writes_land_in_the_writers_workspace_only() {
    let t = TestServer::start().await;
    let alpha = workspace_with_key(&t, "alpha").await;
    let beta = workspace_with_key(&t, "beta").await;
    let mut writers = Vec::new();
    for i in 0..8 {
        let (key, workspace) = match i % 2 {
            0 => (alpha.clone(), "alpha"),
            _ => (beta.clone(), "beta"),
        };
        let http = t.http.clone();
        let url = t.url("/data/v1/ingest/entities");
        writers.push(tokio::spawn(async move {
            for j in 0..10 {
                let name = format!("{workspace}-{i}-{j}");
                let res = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!([{"name": name, "entity_type": workspace}]))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200);
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    for (key, own, other) in [(&alpha, "alpha", "beta"), (&beta, "beta", "alpha")] {
        let (s, found) = call_as(
            &t,
            key,
            None,
            Method::POST,
            "/data/v1/query/graph/search",
            Some(json!({"query": "a-", "limit": 100})),
        )
        .await;
        assert_eq!(s, 200);
        let names: Vec<&str> = found["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 40, "{own}: {names:?}");
        assert!(names.iter().all(|n| n.starts_with(own)), "{own}: {names:?}");
        assert!(!found.to_string().contains(other));
    }
    // A delete by one workspace's key leaves the other's entity of the same name.
    for key in [&alpha, &beta] {
        let (s, _) = call_as(
            &t,
            key,
            None,
            Method::POST,
            "/data/v1/ingest/entities",
            Some(json!([{"name": "Shared", "entity_type": "thing"}])),
        )
        .await;
        assert_eq!(s, 200);
    }
    let (s, deleted) = call_as(
        &t,
        &alpha,
        None,
        Method::DELETE,
        "/data/v1/ingest/entities/Shared",
        None,
    )
    .await;
    assert_eq!(s, 200, "{deleted}");
    let (_, in_alpha) = call_as(
        &t,
        &alpha,
        None,
        Method::GET,
        "/data/v1/query/graph/entity/Shared",
        None,
    )
    .await;
    let (_, in_beta) = call_as(
        &t,
        &beta,
        None,
        Method::GET,
        "/data/v1/query/graph/entity/Shared",
        None,
    )
    .await;
    assert_eq!(in_alpha, Value::Null);
    assert_eq!(in_beta["name"], "Shared");
    // And the default workspace saw none of it.
    for query in ["alpha-", "beta-", "Shared"] {
        let (_, found) = t
            .post("/data/v1/query/graph/search", json!({"query": query}))
            .await;
        assert_eq!(found["total"], 0, "{query}: {found}");
    }
    t.stop().await;
}

/// A source ingested in one workspace is chunked into that workspace; its job is read,
/// followed and cancelled only there, and its delete there only.
#[tokio::test]
async fn sources_and_jobs_stay_in_their_workspace() {
    let t = TestServer::start().await;
    let alpha = workspace_with_key(&t, "alpha").await;
    let beta = workspace_with_key(&t, "beta").await;
    let (s, job) = call_as(
        &t,
        &alpha,
        None,
        Method::POST,
        "/data/v1/ingest/sources",
        Some(json!({"source": "notes", "source_id": "one", "content": "# Notes\n\nThe alphaword lives here.", "content_type": "text/markdown"})),
    )
    .await;
    assert_eq!(s, 202, "{job}");
    let id = job["job_id"].as_str().unwrap().to_string();
    let path = format!("/data/v1/ingest/jobs/{id}");
    let ended = crate::support::until_ended(std::time::Duration::from_secs(30), || async {
        call_as(&t, &alpha, None, Method::GET, &path, None).await.1
    })
    .await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    for method in [Method::GET, Method::DELETE] {
        let (s, answer) = call_as(&t, &beta, None, method.clone(), &path, None).await;
        assert_eq!(s, 404, "{method} from beta: {answer}");
    }
    let (s, _) = call_as(
        &t,
        &beta,
        None,
        Method::GET,
        &format!("{path}/events"),
        None,
    )
    .await;
    assert_eq!(s, 404);
    let keyword = || Some(json!({"query": "alphaword"}));
    let (_, found) = call_as(&t, &alpha, None, Method::POST, "/v1/rag/keyword", keyword()).await;
    assert_eq!(found["total"], 1, "{found}");
    let (_, found) = call_as(&t, &beta, None, Method::POST, "/v1/rag/keyword", keyword()).await;
    assert_eq!(found["total"], 0, "{found}");
    let (_, found) = t
        .post("/v1/rag/keyword", json!({"query": "alphaword"}))
        .await;
    assert_eq!(found["total"], 0, "{found}");
    let source = "/data/v1/ingest/sources/notes/one";
    let (s, _) = call_as(&t, &beta, None, Method::DELETE, source, None).await;
    assert_eq!(s, 404, "beta has no such source");
    let (s, retracted) = call_as(&t, &alpha, None, Method::DELETE, source, None).await;
    assert_eq!(s, 200, "{retracted}");
    assert_eq!(retracted["chunks"], 1);
    t.stop().await;
}
