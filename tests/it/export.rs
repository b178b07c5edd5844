//! Export and restore: `GET /admin/v1/export` and `kbq export` write a workspace in the import
//! format, and `kbq import` of that into an empty store gives the same answers, provenance
//! and memory included.

use std::sync::Arc;

use kbq_store::import::{self, Silent};
use reqwest::Method;
use serde_json::{Value, json};

use crate::agent::{agent_config, openai};
use crate::import_cli::kbq;
use crate::scripted::{ScriptedLlm, Step};
use crate::sources::{entity, graph_documents, ingest, markdown, outgoing, with_model};
use crate::support::{KEY, TestServer};
use kbq::versions::SystemClock;

const EXPORT: &str = "/admin/v1/export";
const CHAT: &str = "/v1/agent/chat";

/// The body of an export, checked to be NDJSON that ends with its `end` line.
async fn export(t: &TestServer, query: &str) -> (String, Value) {
    let res = t
        .http
        .get(t.url(&format!("{EXPORT}{query}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/x-ndjson");
    let text = res.text().await.unwrap();
    let end: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(end["kind"], "end", "{end}");
    let lines = text.lines().count() as u64;
    let counted: u64 = end
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(_, v)| v.as_u64())
        .sum();
    assert_eq!(counted + 1, lines, "the end line counts every other line");
    (text, end)
}

/// What a set of queries answers, without timings: to compare two stores.
async fn answers(t: &TestServer) -> Vec<Value> {
    let mut out = vec![
        entity(t, "Margaret Hamilton").await,
        entity(t, "Apollo Software").await,
        json!(outgoing(t, "Margaret Hamilton").await),
        graph_documents(t, "Apollo Software", 1).await,
        graph_documents(t, "Ada", 2).await,
    ];
    for (path, body) in [
        (
            "/v1/rag/keyword",
            json!({"query": "led the team", "limit": 5}),
        ),
        (
            "/v1/rag/hybrid",
            json!({"query": "Who wrote the Apollo software?", "limit": 5}),
        ),
        (
            "/data/v1/query/graph",
            json!({"entity_name": "Ada", "depth": 2}),
        ),
        (
            "/data/v1/query/graph/search",
            json!({"query": "apollo", "limit": 10}),
        ),
        ("/data/v1/query/graph/merges", json!({})),
    ] {
        let (status, mut body) = t.post(path, body).await;
        assert_eq!(status, 200, "{path}: {body}");
        if let Some(o) = body.as_object_mut() {
            o.remove("took_ms");
        }
        out.push(body);
    }
    out
}

#[tokio::test]
async fn an_export_imported_into_an_empty_store_answers_the_same() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let job = ingest(
        &t,
        markdown(
            "hamilton",
            "# Engines\n\n[[Margaret Hamilton]] -[wrote]-> [[Apollo Software]]. She led the team.\n",
        ),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let job = ingest(
        &t,
        markdown(
            "apollo",
            "# Flight\n\n[[Apollo Software]] -[ran_on]-> [[Apollo Guidance Computer]], which [[Ada]] never saw.\n",
        ),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    llm.push(Step::ToolCalls(vec![(
        "MemoryStoreTool".into(),
        json!({"content": "The vault code is 4711", "tags": ["vault"]}),
    )]));
    llm.push(Step::Answer("Stored.".into()));
    let (status, chat) = t
        .post(CHAT, json!({"message": "Remember the vault code 4711"}))
        .await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["tool_calls"][0]["result"]["stored"], true, "{chat}");

    let (text, end) = export(&t, "").await;
    assert_eq!(end["memories"], 1, "{end}");
    assert_eq!(end["sources"], 2, "{end}");
    assert_eq!(end["extractions"], 2, "{end}");
    assert!(end["supports"].as_u64().unwrap() >= 6, "{end}");
    let (_, counts) = t.get("/data/v1/query/graph/stats").await;
    assert_eq!(end["entities"], counts["entities"], "{counts}");
    assert_eq!(end["documents"], counts["documents"], "{counts}");

    // An empty store, with the same model: the file gives back the same knowledge base.
    let copy = TestServer::start_with(
        agent_config(vec![openai("model", &llm, 0, 5_000)]),
        Arc::new(SystemClock),
        false,
    )
    .await;
    let report = import::import(&copy.server().kb, text.as_bytes(), &Silent)
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.restored.memories, 1);
    let (again, _) = export(&copy, "").await;
    assert_eq!(again, text, "the copy exports the same lines");
    assert_eq!(answers(&copy).await, answers(&t).await);

    // Its memory is the same key's.
    llm.push(Step::ToolCalls(vec![(
        "MemorySearchTool".into(),
        json!({"query": "vault code"}),
    )]));
    llm.push(Step::Answer("It is 4711.".into()));
    let (status, chat) = copy
        .post(CHAT, json!({"message": "What is the vault code?"}))
        .await;
    assert_eq!(status, 200, "{chat}");
    let recalled = chat["tool_calls"][0]["result"].to_string();
    assert!(recalled.contains("The vault code is 4711"), "{chat}");

    // Its kept answers: the same source again asks the model nothing.
    let asked = llm.requests().len();
    let job = ingest(
        &copy,
        markdown(
            "hamilton",
            "# Engines\n\n[[Margaret Hamilton]] -[wrote]-> [[Apollo Software]]. She led the team.\n",
        ),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(llm.requests().len(), asked, "no model call: {job}");

    // Its provenance: deleting a source retracts what only it gave, and keeps what the
    // other source gave too.
    let (status, _, gone) = copy
        .call(
            Method::DELETE,
            "/data/v1/ingest/sources/notes/hamilton",
            None,
        )
        .await;
    assert_eq!(status, 200, "{gone}");
    let (_, hamilton) = copy
        .get("/data/v1/query/graph/entity/Margaret%20Hamilton")
        .await;
    assert_eq!(hamilton, Value::Null, "only the deleted source named her");
    assert_eq!(
        entity(&copy, "Apollo Software").await["name"],
        "Apollo Software"
    );
    assert_eq!(entity(&copy, "Ada").await["name"], "Ada", "an import's");
    copy.stop().await;
    t.stop().await;
    llm.stop().await;
}

/// The workspace is named by the query, and checked; the header is not the admin API's.
#[tokio::test]
async fn an_export_names_its_workspace_in_the_query() {
    let t = TestServer::start().await;
    let (s, _) = t
        .post("/admin/v1/workspaces", json!({"name": "team"}))
        .await;
    assert_eq!(s, 201);
    let res = t
        .http
        .post(t.url("/data/v1/ingest/entities"))
        .bearer_auth(KEY)
        .header("X-KBQ-Workspace", "team")
        .json(&json!([{"name": "Team Only", "entity_type": "thing"}]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (team, end) = export(&t, "?workspace=team").await;
    assert_eq!(end["entities"], 1, "{team}");
    assert!(team.contains("Team Only"));
    let (default, end) = export(&t, "").await;
    assert_eq!(end["entities"], 10, "the fixture: {end}");
    assert!(!default.contains("Team Only"));
    for (query, status, code, names) in [
        ("?workspace=Team!", 400, "invalid_request", "workspace"),
        ("?workspace=team&depth=2", 400, "invalid_request", "query"),
        ("?workspace=nowhere", 404, "workspace_not_found", "nowhere"),
    ] {
        let (s, body) = t.get(&format!("{EXPORT}{query}")).await;
        assert_eq!(s.as_u16(), status, "{query}: {body}");
        assert_eq!(body["error"]["code"], code, "{query}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(names),
            "{query}: {body}"
        );
    }
    t.stop().await;
}

/// The standard output of a `kbq` command that must have succeeded (its standard error in
/// the failure's message).
pub(crate) fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kbq export -o FILE` writes what `kbq import` restores into an empty store, which then
/// exports the same lines (to standard output); a workspace is exported on its own.
#[test]
fn kbq_export_writes_a_file_that_kbq_import_restores() {
    let dir = tempfile::tempdir().unwrap();
    let first = format!("surrealkv://{}", dir.path().join("first").display());
    let second = format!("surrealkv://{}", dir.path().join("second").display());
    let input = dir.path().join("in.ndjson");
    std::fs::write(&input, crate::support::FIXTURE).unwrap();
    ok(&kbq(&[
        "import",
        "--store",
        &first,
        input.to_str().unwrap(),
    ]));
    let file = dir.path().join("backup.ndjson");
    let out = ok(&kbq(&[
        "export",
        "--store",
        &first,
        "-o",
        file.to_str().unwrap(),
    ]));
    assert!(
        out.contains("exported 10 entities, 7 relationships, 3 documents, 0 memories"),
        "{out}"
    );
    assert!(!dir.path().join("backup.ndjson.partial").exists());
    let written = std::fs::read_to_string(&file).unwrap();
    let imported = ok(&kbq(&[
        "import",
        "--store",
        &second,
        file.to_str().unwrap(),
    ]));
    assert!(
        imported.contains("imported 10 entities, 7 relationships, 3 documents from 21 records"),
        "{imported}"
    );
    let again = kbq(&["export", "--store", &second]);
    assert_eq!(ok(&again), written, "the same lines, on standard output");
    assert!(String::from_utf8_lossy(&again.stderr).contains("exported 10 entities"));

    ok(&kbq(&["workspaces", "--store", &second, "create", "team"]));
    let empty = ok(&kbq(&["export", "--store", &second, "--workspace", "team"]));
    assert_eq!(
        empty.trim(),
        r#"{"kind":"end","entities":0,"relationships":0,"documents":0,"memories":0,"sources":0,"supports":0,"extractions":0}"#
    );
    let missing = kbq(&["export", "--store", &second, "--workspace", "nowhere"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("there is no workspace `nowhere`"));
}
