//! Raw documents in: a source becomes chunks, entities and relationships (extracted by a
//! scripted OpenAI-compatible model on loopback, which answers the `kbq_extraction` schema
//! from the chunk's `[[Name]]` and `[[A]] -[type]-> [[B]]` markup), with the supports that
//! let a delete or a new version retract exactly what the source gave.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use kbq_ingest::provenance::SourceKey;
use kbq_store::sources::{extraction_key, summary_key};

use crate::agent::{agent_config, openai, start};
use crate::scripted::{ScriptedLlm, Step, pair_asked, schema_asked};
use crate::support::{
    KEY, TestServer, assert_error, eventually, key_entry, read, until_ended, wait_ready,
};

const SOURCES: &str = "/data/v1/ingest/sources";
const MERGES: &str = "/data/v1/query/graph/merges";

/// A server whose one provider is `llm`, and the fixture graph (Ada, Babbage, ...).
pub(crate) async fn with_model(llm: &ScriptedLlm) -> TestServer {
    start(agent_config(vec![openai("model", llm, 0, 5_000)])).await
}

/// Submits `body` as JSON and waits for its job to end: the job.
pub(crate) async fn ingest(t: &TestServer, body: Value) -> Value {
    let (status, job) = t.post(SOURCES, body).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["status"], "queued", "{job}");
    finished(t, job["job_id"].as_str().unwrap()).await
}

/// Polls the job until it has ended.
pub(crate) async fn finished(t: &TestServer, job_id: &str) -> Value {
    let path = format!("/data/v1/ingest/jobs/{job_id}");
    until_ended(Duration::from_secs(30), || async {
        let (status, job) = t.get(&path).await;
        assert_eq!(status, 200, "{job}");
        job
    })
    .await
}

pub(crate) fn markdown(source_id: &str, text: &str) -> Value {
    json!({
        "source": "notes",
        "source_id": source_id,
        "content": text,
        "content_type": "text/markdown",
    })
}

pub(crate) async fn entity(t: &TestServer, name: &str) -> Value {
    let path = format!("/data/v1/query/graph/entity/{}", name.replace(' ', "%20"));
    let (status, body) = t.get(&path).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `DELETE /data/v1/ingest/sources/notes/{source_id}`, which must answer 200: its answer.
async fn delete_note(t: &TestServer, source_id: &str) -> Value {
    let path = format!("/data/v1/ingest/sources/notes/{source_id}");
    let (status, done) = t.call(Method::DELETE, &path, None).await.into_status_body();
    assert_eq!(status, 200, "{done}");
    done
}

/// The (target, type) pairs of `name`'s outgoing relationships, sorted.
pub(crate) async fn outgoing(t: &TestServer, name: &str) -> Vec<(String, String)> {
    let (status, body) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": name, "depth": 1, "direction": "out"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut out: Vec<(String, String)> = body["relationships"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source_name"] == name)
        .map(|r| {
            (
                r["target_name"].as_str().unwrap().to_string(),
                r["relationship_type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_markdown_source_becomes_chunks_entities_and_relationships() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let text =
        "# Engines\n\n[[Margaret Hamilton]] -[wrote]-> [[Apollo Software]]. She led the team.\n";
    let job = ingest(&t, markdown("hamilton", text)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["chunks"], 1, "{job}");
    assert_eq!(job["chunks_done"], 1, "{job}");
    assert_eq!(job["counts"]["model_calls"], 1, "{job}");
    assert_eq!(job["counts"]["entities_added"], 2, "{job}");
    assert_eq!(job["counts"]["relationships_added"], 1, "{job}");
    assert_eq!(job["counts"]["chunks_failed"], 0, "{job}");

    // The model was asked for the schema, with the chunk's text verbatim, last.
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request["response_format"]["type"], "json_schema");
    assert_eq!(
        request["response_format"]["json_schema"]["name"],
        "kbq_extraction"
    );
    let schema = &request["response_format"]["json_schema"]["schema"];
    assert!(schema["properties"]["entities"].is_object(), "{schema}");
    assert!(
        schema["properties"]["relationships"].is_object(),
        "{schema}"
    );
    let last = request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("[[Margaret Hamilton]] -[wrote]-> [[Apollo Software]]. She led the team."),
        "{last}"
    );

    let hamilton = entity(&t, "Margaret Hamilton").await;
    assert_eq!(hamilton["entity_type"], "thing", "{hamilton}");
    assert_eq!(
        hamilton["properties"]["description"], "Margaret Hamilton, as the text names it",
        "{hamilton}"
    );
    assert_eq!(
        outgoing(&t, "Margaret Hamilton").await,
        vec![("Apollo Software".to_string(), "wrote".to_string())]
    );
    // The chunk is a document of the source, searchable, and linked to what it names.
    let (status, hits) = t
        .post(
            "/v1/rag/keyword",
            json!({"query": "led the team", "limit": 5}),
        )
        .await;
    assert_eq!(status, 200, "{hits}");
    let hit = &hits["results"][0];
    assert_eq!(hit["source"], "notes", "{hits}");
    assert_eq!(hit["source_id"], "hamilton#0", "{hits}");
    assert_eq!(hit["title"], "Engines", "{hits}");
    assert_eq!(hit["entity_name"], "Margaret Hamilton", "{hits}");
    // It is a document of every entity it gave, the second as well as the first: graph
    // documents (once, as the entity's own, though the other is one hop away) and the
    // `entity_name` filter cite it from either.
    for name in ["Margaret Hamilton", "Apollo Software"] {
        let documents = graph_documents(&t, name, 1).await;
        assert_eq!(documents["total"], 1, "{name}: {documents}");
        let own = &documents["results"][0];
        assert_eq!(own["source_id"], "hamilton#0", "{documents}");
        assert_eq!(own["relationship"], "self", "{documents}");
        let (status, hits) = t
            .post(
                "/v1/rag/keyword",
                json!({"query": "led the team", "filters": {"entity_name": name}}),
            )
            .await;
        assert_eq!(status, 200, "{hits}");
        assert_eq!(hits["total"], 1, "{name}: {hits}");
    }
    t.stop().await;
    llm.stop().await;
}

/// `POST /data/v1/query/graph/documents` from `name`, `depth` hops: the answer.
pub(crate) async fn graph_documents(t: &TestServer, name: &str, depth: u32) -> Value {
    let (status, body) = t
        .post(
            "/data/v1/query/graph/documents",
            json!({"entity_name": name, "max_depth": depth, "limit": 10}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn submitting_unchanged_content_again_asks_no_model() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let mut text = String::from("# Notes\n\n");
    for i in 0..40 {
        text.push_str(&format!(
            "Paragraph {i}: [[Ada]] -[knew]-> [[Person {i}]], who worked on machines of many kinds for years.\n\n"
        ));
    }
    let first = ingest(&t, markdown("many", &text)).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    let chunks = first["counts"]["chunks"].as_u64().unwrap();
    assert!(chunks > 1, "{first}");
    assert_eq!(first["counts"]["model_calls"].as_u64(), Some(chunks));
    assert_eq!(llm.requests().len() as u64, chunks);

    let again = ingest(&t, markdown("many", &text)).await;
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(again["counts"]["model_calls"], 0, "{again}");
    assert_eq!(again["counts"]["entities_added"], 0, "{again}");
    assert_eq!(
        llm.requests().len() as u64,
        chunks,
        "no model call the second time"
    );

    // The same chunks under another source id: their kept answers serve, the model is not asked.
    let copy = ingest(&t, markdown("copy", &text)).await;
    assert_eq!(copy["status"], "succeeded", "{copy}");
    assert_eq!(copy["counts"]["model_calls"], 0, "{copy}");
    assert_eq!(llm.requests().len() as u64, chunks);
    t.stop().await;
    llm.stop().await;
}

/// A source's kept model answers go with it, when it is deleted or replaced, unless another
/// source holds the same chunk: what a retracted text gave the model does not outlive it.
/// Counted in model calls: the text asked about again is sent to the model again.
#[tokio::test]
async fn a_sources_kept_answers_go_with_it_unless_another_source_holds_the_chunk() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let shared = "[[Grace Hopper]] -[wrote]-> [[A-0]].";
    let alone = "[[Jean Bartik]] -[programmed]-> [[ENIAC]].";
    let calls = |job: &Value| job["counts"]["model_calls"].as_u64().unwrap();
    for (source_id, text, asked) in [("a", shared, 1), ("b", shared, 0), ("c", alone, 1)] {
        let job = ingest(&t, markdown(source_id, text)).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        assert_eq!(calls(&job), asked, "{source_id}: {job}");
    }
    // c alone held its chunk: deleted, its answer goes, and the text is asked about again.
    delete_note(&t, "c").await;
    let again = ingest(&t, markdown("c", alone)).await;
    assert_eq!(calls(&again), 1, "{again}");
    // b holds a's chunk: a's answer stays.
    delete_note(&t, "a").await;
    let again = ingest(&t, markdown("a", shared)).await;
    assert_eq!(calls(&again), 0, "{again}");
    // c replaced: its old chunk's answer goes with the old version.
    let changed = ingest(
        &t,
        markdown("c", "[[Jean Bartik]] -[taught]-> [[Programmers]]."),
    )
    .await;
    assert_eq!(calls(&changed), 1, "{changed}");
    let old_text = ingest(&t, markdown("d", alone)).await;
    assert_eq!(calls(&old_text), 1, "{old_text}");
    // Deleting both holders of the shared chunk takes its answer at the last.
    delete_note(&t, "a").await;
    delete_note(&t, "b").await;
    let last = ingest(&t, markdown("e", shared)).await;
    assert_eq!(calls(&last), 1, "{last}");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn deleting_a_source_retracts_only_what_no_other_source_or_import_supports() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    // "Ada" and "Babbage" are the fixture's (an import's); the sources add to them.
    let one = ingest(
        &t,
        markdown(
            "one",
            "[[Ada]] -[knew]-> [[Mary Somerville]]. [[Mary Somerville]] -[wrote]-> [[On the Connexion]]. [[Ada]] -[admired]-> [[Babbage]].",
        ),
    )
    .await;
    assert_eq!(one["status"], "succeeded", "{one}");
    let two = ingest(
        &t,
        markdown("two", "[[Ada]] -[knew]-> [[Mary Somerville]] too."),
    )
    .await;
    assert_eq!(two["status"], "succeeded", "{two}");

    let done = delete_note(&t, "one").await;
    assert_eq!(done["deleted"], true);
    assert_eq!(done["chunks"], 1, "{done}");

    // Source two still supports Ada -knew-> Mary Somerville, and so both ends.
    assert_eq!(
        entity(&t, "Mary Somerville").await["name"],
        "Mary Somerville"
    );
    let ada = outgoing(&t, "Ada").await;
    assert!(
        ada.contains(&("Mary Somerville".into(), "knew".into())),
        "{ada:?}"
    );
    // Only source one supported these: gone.
    assert!(
        !ada.contains(&("Babbage".into(), "admired".into())),
        "{ada:?}"
    );
    assert_eq!(entity(&t, "On the Connexion").await, Value::Null);
    assert!(outgoing(&t, "Mary Somerville").await.is_empty());
    // The import's entities and relationships stay.
    assert_eq!(entity(&t, "Babbage").await["name"], "Babbage");
    assert_eq!(entity(&t, "Ada").await["properties"]["born"], 1815);
    let (_, hits) = t
        .post("/v1/rag/keyword", json!({"query": "Connexion", "limit": 5}))
        .await;
    assert!(
        hits["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["source_id"] != "one#0"),
        "the deleted source's chunk is gone: {hits}"
    );

    // Deleting it again: there is nothing to delete.
    let (status, body) = t
        .call(Method::DELETE, "/data/v1/ingest/sources/notes/one", None)
        .await
        .into_status_body();
    assert_eq!(status, 404, "{body}");
    assert_error(&body, "not_found", None);
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_changed_source_replaces_its_contribution() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let v1 = ingest(
        &t,
        markdown(
            "doc",
            "[[Konrad Zuse]] -[built]-> [[Z1]]. [[Konrad Zuse]] -[built]-> [[Z2]].",
        ),
    )
    .await;
    assert_eq!(v1["status"], "succeeded", "{v1}");
    let v2 = ingest(
        &t,
        markdown(
            "doc",
            "[[Konrad Zuse]] -[built]-> [[Z3]]. [[Konrad Zuse]] -[built]-> [[Z2]].",
        ),
    )
    .await;
    assert_eq!(v2["status"], "succeeded", "{v2}");
    assert_eq!(v2["counts"]["entities_retracted"], 1, "{v2}");
    assert_eq!(v2["counts"]["relationships_retracted"], 1, "{v2}");
    assert_eq!(
        outgoing(&t, "Konrad Zuse").await,
        vec![
            ("Z2".to_string(), "built".to_string()),
            ("Z3".to_string(), "built".to_string())
        ]
    );
    assert_eq!(entity(&t, "Z1").await, Value::Null);
    t.stop().await;
    llm.stop().await;
}

/// Jobs that reach their writes together are written as one group; the outcome must be the
/// one some order of the jobs alone would give.
#[tokio::test]
async fn sources_written_together_count_each_fact_once_and_keep_what_another_names() {
    let llm = ScriptedLlm::start().await;
    // Every job at once, each model answer after the same wait, so that several jobs wait
    // to write while another writes.
    let mut config = agent_config(vec![openai("model", &llm, 0, 5_000)]);
    config.ingest.max_jobs = 12;
    config.ingest.max_calls_in_flight = 12;
    let t = start(config).await;
    let v1 = ingest(
        &t,
        markdown("changing", "[[Herman Hollerith]] -[built]-> [[Tabulator]]."),
    )
    .await;
    assert_eq!(v1["status"], "succeeded", "{v1}");

    // Submitted at once: eight sources naming one new entity, a new version of "changing"
    // that drops Hollerith -built-> Tabulator, and a source that names that relationship
    // (last, so that they are likely to wait together while the first writes).
    llm.set_extraction_delay(Duration::from_millis(300));
    let mut bodies: Vec<Value> = (0..8)
        .map(|i| {
            markdown(
                &format!("many-{i}"),
                &format!("[[Shared Hub]] -[lists]-> [[Item {i}]]."),
            )
        })
        .collect();
    bodies.push(markdown(
        "changing",
        "[[Herman Hollerith]] -[founded]-> [[TMC]].",
    ));
    bodies.push(markdown(
        "naming",
        "[[Herman Hollerith]] -[built]-> [[Tabulator]] too.",
    ));
    let mut ids = Vec::new();
    for body in bodies {
        let (status, job) = t.post(SOURCES, body).await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["job_id"].as_str().unwrap().to_string());
    }
    let (mut added, mut retracted) = (0, 0);
    for id in &ids {
        let job = finished(&t, id).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        added += job["counts"]["entities_added"].as_u64().unwrap();
        retracted += job["counts"]["entities_retracted"].as_u64().unwrap();
    }
    // "Shared Hub", eight items, "TMC": each counted by one job only (and "Tabulator" again
    // if the new version of "changing" retracted it before "naming" wrote).
    assert_eq!(
        added - retracted,
        10,
        "{added} added, {retracted} retracted"
    );
    let hub = outgoing(&t, "Shared Hub").await;
    assert_eq!(hub.len(), 8, "{hub:?}");
    // Whatever the order, "naming" supports the relationship the new version dropped.
    assert_eq!(
        outgoing(&t, "Herman Hollerith").await,
        vec![
            ("TMC".to_string(), "founded".to_string()),
            ("Tabulator".to_string(), "built".to_string())
        ]
    );
    delete_note(&t, "naming").await;
    assert_eq!(
        outgoing(&t, "Herman Hollerith").await,
        vec![("TMC".to_string(), "founded".to_string())]
    );
    assert_eq!(entity(&t, "Tabulator").await, Value::Null);
    for i in 0..7 {
        delete_note(&t, &format!("many-{i}")).await;
    }
    assert_eq!(
        outgoing(&t, "Shared Hub").await,
        vec![("Item 7".to_string(), "lists".to_string())]
    );
    t.stop().await;
    llm.stop().await;
}

/// Near spellings of one new name in sources that reach their writes together are one
/// entity, as they are when the sources are written one after another (the second then finds
/// the first's entity in the graph).
#[tokio::test]
async fn near_spellings_in_sources_written_together_are_one_entity() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 5_000)]);
    config.ingest.max_jobs = 12;
    config.ingest.max_calls_in_flight = 12;
    let t = start(config).await;
    // A source whose writes take a while (hundreds of new entities and relationships): the
    // sources below are extracted while it writes, and wait for the writer together.
    let text: String = (0..400)
        .map(|i| format!("[[Node {i}]] -[links]-> [[Node {}]].\n\n", i + 1))
        .collect();
    let (status, job) = t.post(SOURCES, markdown("blocker", &text)).await;
    assert_eq!(status, 202, "{job}");
    let blocker = job["job_id"].as_str().unwrap().to_string();
    let path = format!("/data/v1/ingest/jobs/{blocker}");
    let extracted = crate::support::eventually(Duration::from_secs(30), || async {
        let (_, job) = t.get(&path).await;
        job["chunks_total"].as_u64() > Some(0) && job["chunks_done"] == job["chunks_total"]
    })
    .await;
    assert!(extracted, "the blocker's chunks were not extracted");
    // Pairwise the same (one letter apart at most, or one key): whichever is resolved first,
    // every other is its near spelling. The letter is not in the longest word, which the
    // graph's name search is asked for (docs/ingest.md, "Limits").
    let variants = [
        "Massachusetts Institute of Technology",
        "Massachusetts Institue of Technology",
        "massachusetts institute of technology",
        "Massachusetts-Institute of Technology",
        "MASSACHUSETTS INSTITUTE OF TECHNOLOGY",
        "Massachusetts Institute Of Technology",
    ];
    let mut ids = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let body = markdown(
            &format!("near-{i}"),
            &format!("[[{v}]] -[admits]-> [[Student {i}]]."),
        );
        let (status, job) = t.post(SOURCES, body).await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["job_id"].as_str().unwrap().to_string());
    }
    assert_eq!(finished(&t, &blocker).await["status"], "succeeded");
    let mut added = 0;
    for id in &ids {
        let job = finished(&t, id).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        added += job["counts"]["entities_added"].as_u64().unwrap();
    }
    let mut names = BTreeSet::new();
    for v in variants {
        let found = entity(&t, v).await;
        names.insert(found["name"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(names.len(), 1, "every spelling finds one entity: {names:?}");
    // One institute and six students.
    assert_eq!(added, 7, "entities added by the six jobs");
    let name = names.into_iter().next().unwrap();
    assert_eq!(outgoing(&t, &name).await.len(), 6);
    t.stop().await;
    llm.stop().await;
}

/// A near spelling whose longest word is the one misspelt finds the graph's entity by another
/// word of the name.
#[tokio::test]
async fn a_misspelt_longest_word_still_finds_the_graphs_entity() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let (status, body) = t
        .post(
            "/data/v1/ingest/entities",
            json!([{"name": "Massachusetts Institute of Technology", "entity_type": "school"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let job = ingest(
        &t,
        markdown(
            "typo",
            "[[Massachusets Institute of Technology]] -[admits]-> [[A Student]].",
        ),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(
        job["counts"]["entities_added"], 1,
        "only the student: {job}"
    );
    assert_eq!(job["counts"]["entities_merged"], 1, "{job}");
    assert_eq!(
        outgoing(&t, "Massachusetts Institute of Technology").await,
        vec![("A Student".to_string(), "admits".to_string())]
    );
    assert_eq!(
        entity(&t, "Massachusets Institute of Technology").await["name"],
        "Massachusetts Institute of Technology"
    );
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn names_that_differ_in_case_and_punctuation_are_one_entity() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    // "babbage" and "BABBAGE." name the fixture's "Babbage".
    let job = ingest(
        &t,
        markdown("aliases", "[[babbage]] -[designed]-> [[Analytical-Engine]]. [[BABBAGE.]] -[designed]-> [[analytical engine]]."),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["entities_added"], 1, "{job}");
    assert!(
        job["counts"]["entities_merged"].as_u64().unwrap() >= 1,
        "{job}"
    );
    // The fixture's two, and the one the source gave, once.
    assert_eq!(
        outgoing(&t, "Babbage").await,
        vec![
            ("Ada".to_string(), "knows".to_string()),
            ("Analytical-Engine".to_string(), "designed".to_string()),
            ("Engine".to_string(), "designed".to_string())
        ]
    );
    // No second entity: the other names are aliases, and a lookup or a walk by one finds it.
    assert_eq!(entity(&t, "babbage").await["name"], "Babbage");
    assert_eq!(entity(&t, "BABBAGE.").await["name"], "Babbage");
    let (status, walk) = t
        .post(
            "/data/v1/query/graph",
            json!({"entity_name": "analytical engine", "depth": 1}),
        )
        .await;
    assert_eq!(status, 200, "{walk}");
    assert_eq!(
        walk["entities_found"][0]["name"], "Analytical-Engine",
        "{walk}"
    );
    // Every merge is listed, with the chunk that gave it.
    let (status, page) = t.post(MERGES, json!({})).await;
    assert_eq!(status, 200, "{page}");
    let pairs: Vec<(&str, &str)> = page["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["alias"].as_str().unwrap(), m["entity"].as_str().unwrap()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("BABBAGE.", "Babbage"),
            ("analytical engine", "Analytical-Engine"),
            ("babbage", "Babbage"),
        ],
        "{page}"
    );
    assert_eq!(
        page["merges"][0]["chunks"],
        json!([{"source": "notes", "source_id": "aliases", "position": 0}])
    );
    assert_eq!(page["next_after"], Value::Null);
    // A page at a time, and one entity's.
    let (_, first) = t.post(MERGES, json!({"limit": 2})).await;
    assert_eq!(first["merges"].as_array().unwrap().len(), 2, "{first}");
    assert_eq!(first["next_after"], "analytical engine");
    let (_, rest) = t
        .post(MERGES, json!({"limit": 2, "after": "analytical engine"}))
        .await;
    assert_eq!(rest["merges"][0]["alias"], "babbage", "{rest}");
    assert_eq!(rest["next_after"], Value::Null);
    let (_, babbage) = t.post(MERGES, json!({"entity_name": "Babbage"})).await;
    assert_eq!(babbage["merges"].as_array().unwrap().len(), 2, "{babbage}");
    let (status, _, body) = t
        .call(Method::POST, MERGES, Some(json!({"limit": 0})))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_error(&body, "invalid_request", Some("limit"));
    // Retracting the source takes its merges away.
    let (status, _, _) = t
        .call(
            Method::DELETE,
            "/data/v1/ingest/sources/notes/aliases",
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (_, none) = t.post(MERGES, json!({})).await;
    assert_eq!(none["merges"], json!([]), "{none}");
    t.stop().await;
    llm.stop().await;
}

/// The requests the scripted model got for the structured output `schema`.
fn asked(llm: &ScriptedLlm, schema: &str) -> Vec<Value> {
    llm.requests()
        .into_iter()
        .filter(|r| schema_asked(r) == schema)
        .collect()
}

/// Requests the scripted model got to confirm a doubtful pair, as (A, B).
fn confirmations(llm: &ScriptedLlm) -> Vec<(String, String)> {
    asked(llm, "kbq_same_entity")
        .iter()
        .map(pair_asked)
        .collect()
}

/// Ingests `first` as the source "one", then, with the model told to confirm `pair` as one
/// entity, `second` as "two": the second job's view. Both jobs must succeed.
async fn one_then_two(
    t: &TestServer,
    llm: &ScriptedLlm,
    first: &str,
    pair: (&str, &str),
    second: &str,
) -> Value {
    let one = ingest(t, markdown("one", first)).await;
    assert_eq!(one["status"], "succeeded", "{one}");
    llm.confirm_same(pair.0, pair.1);
    let two = ingest(t, markdown("two", second)).await;
    assert_eq!(two["status"], "succeeded", "{two}");
    two
}

/// The graph after "Seymour R. Cray" (confirmed as "Seymour Cray") and "IBM" (not confirmed
/// as "International Business Machines") were met: the first name is an alias of an entity
/// with both names' relationships, the second pair two entities.
async fn one_cray_and_two_ibms(t: &TestServer) {
    assert_eq!(entity(t, "Seymour R. Cray").await["name"], "Seymour Cray");
    assert_eq!(
        outgoing(t, "Seymour Cray").await,
        vec![
            ("CDC 6600".to_string(), "designed".to_string()),
            ("Cray Research".to_string(), "founded".to_string())
        ]
    );
    assert_eq!(entity(t, "IBM").await["name"], "IBM");
    assert_eq!(
        outgoing(t, "IBM").await,
        vec![("System/360".to_string(), "built".to_string())]
    );
    assert_eq!(
        entity(t, "International Business Machines").await["name"],
        "International Business Machines"
    );
}

#[tokio::test]
async fn a_doubtful_pair_merges_only_when_the_model_confirms_it_and_is_asked_once() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    // Both pairs of the second source are doubtful by name (one name's words among the
    // other's; an acronym); the model says only the first is one entity.
    let two = one_then_two(
        &t,
        &llm,
        "[[Seymour Cray]] -[founded]-> [[Cray Research]]. [[International Business Machines]] -[built]-> [[Stretch]].",
        ("Seymour R. Cray", "Seymour Cray"),
        "[[Seymour R. Cray]] -[designed]-> [[CDC 6600]]. [[IBM]] -[built]-> [[System/360]].",
    )
    .await;
    let asked = confirmations(&llm);
    assert!(
        asked.contains(&("Seymour R. Cray".to_string(), "Seymour Cray".to_string())),
        "{asked:?}"
    );
    assert_eq!(two["counts"]["entities_merged"], 1, "{two}");
    one_cray_and_two_ibms(&t).await;

    // A new version of "two": its changed chunk is read again, but the pairs' answers are
    // kept and not asked again.
    let again = ingest(
        &t,
        markdown(
            "two",
            "[[Seymour R. Cray]] -[designed]-> [[CDC 6600]]. [[IBM]] -[built]-> [[System/360]]. More.",
        ),
    )
    .await;
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(confirmations(&llm), asked);
    assert_eq!(entity(&t, "Seymour R. Cray").await["name"], "Seymour Cray");
    t.stop().await;
    llm.stop().await;
}

/// A confirmation's kept answer goes with the last source that used it: deleting the source
/// whose name was asked about, the same pair is asked again by the next source that names it,
/// while a source replaced by a version that still asks keeps it.
#[tokio::test]
async fn a_confirmation_is_forgotten_with_the_last_source_that_used_it() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let cray = "[[Seymour R. Cray]] -[designed]-> [[CDC 6600]].";
    let one = ingest(
        &t,
        markdown("one", "[[Seymour Cray]] -[founded]-> [[Cray Research]]."),
    )
    .await;
    assert_eq!(one["status"], "succeeded", "{one}");
    // The model says the pair is two entities (its default): "Seymour R. Cray" is added.
    let two = ingest(&t, markdown("two", cray)).await;
    assert_eq!(two["status"], "succeeded", "{two}");
    let pair = ("Seymour R. Cray".to_string(), "Seymour Cray".to_string());
    assert_eq!(confirmations(&llm), std::slice::from_ref(&pair));
    assert_eq!(
        entity(&t, "Seymour R. Cray").await["name"],
        "Seymour R. Cray"
    );

    // Only "two" used the answer: it goes with it, and the pair is asked again.
    delete_note(&t, "two").await;
    assert!(entity(&t, "Seymour R. Cray").await.is_null());
    let three = ingest(&t, markdown("three", cray)).await;
    assert_eq!(three["status"], "succeeded", "{three}");
    assert_eq!(confirmations(&llm), [pair.clone(), pair.clone()]);

    // "three" replaced by a version that names the pair no more: the answer goes too.
    let other = ingest(
        &t,
        markdown("three", "[[Cray Research]] -[built]-> [[Cray-1]]."),
    )
    .await;
    assert_eq!(other["status"], "succeeded", "{other}");
    assert!(entity(&t, "Seymour R. Cray").await.is_null());
    let four = ingest(&t, markdown("four", cray)).await;
    assert_eq!(four["status"], "succeeded", "{four}");
    assert_eq!(confirmations(&llm).len(), 3, "asked a third time");
    t.stop().await;
    llm.stop().await;
}

/// A name met after its acronym is in the graph is found by that acronym, which shares none
/// of its words, and merges when the model confirms the pair.
#[tokio::test]
async fn a_name_met_after_its_acronym_merges_when_the_model_confirms_it() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let two = one_then_two(
        &t,
        &llm,
        "[[IBM]] -[built]-> [[System/360]].",
        ("International Business Machines", "IBM"),
        "[[International Business Machines]] -[built]-> [[Stretch]].",
    )
    .await;
    assert_eq!(
        confirmations(&llm),
        [(
            "International Business Machines".to_string(),
            "IBM".to_string()
        )]
    );
    assert_eq!(two["counts"]["entities_merged"], 1, "{two}");
    assert_eq!(
        entity(&t, "International Business Machines").await["name"],
        "IBM"
    );
    assert_eq!(
        outgoing(&t, "IBM").await,
        vec![
            ("Stretch".to_string(), "built".to_string()),
            ("System/360".to_string(), "built".to_string())
        ]
    );
    t.stop().await;
    llm.stop().await;
}

/// The other way round: a name that is the acronym of one in the graph finds it by its
/// initials (the two share no word), and merges when the model confirms the pair.
#[tokio::test]
async fn an_acronym_met_after_its_name_merges_when_the_model_confirms_it() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    // "BoA" is asked about too (doubtful, as every acronym is), and not confirmed.
    let two = one_then_two(
        &t,
        &llm,
        "[[International Business Machines]] -[built]-> [[Stretch]]. [[Bank of America]] -[lent]-> [[Stretch]].",
        ("IBM", "International Business Machines"),
        "[[IBM]] -[built]-> [[System/360]]. [[BoA]] -[lent]-> [[System/360]].",
    )
    .await;
    let mut asked = confirmations(&llm);
    asked.sort();
    assert_eq!(
        asked,
        [
            ("BoA".to_string(), "Bank of America".to_string()),
            (
                "IBM".to_string(),
                "International Business Machines".to_string()
            )
        ]
    );
    assert_eq!(two["counts"]["entities_merged"], 1, "{two}");
    assert_eq!(
        entity(&t, "IBM").await["name"],
        "International Business Machines"
    );
    assert_eq!(
        outgoing(&t, "International Business Machines").await,
        vec![
            ("Stretch".to_string(), "built".to_string()),
            ("System/360".to_string(), "built".to_string())
        ]
    );
    assert_eq!(entity(&t, "BoA").await["name"], "BoA");
    t.stop().await;
    llm.stop().await;
}

/// Two new names of one source that are doubtful by name are asked about as a name and a
/// graph entity are: one entity when the model confirms it (the first met keeps its name),
/// two when it does not.
#[tokio::test]
async fn a_doubtful_pair_within_one_source_merges_only_when_the_model_confirms_it() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    llm.confirm_same("Seymour R. Cray", "Seymour Cray");
    let done = ingest(
        &t,
        markdown(
            "both",
            "[[Seymour Cray]] -[founded]-> [[Cray Research]]. [[International Business Machines]] -[built]-> [[Stretch]].\n\n[[Seymour R. Cray]] -[designed]-> [[CDC 6600]]. [[IBM]] -[built]-> [[System/360]].",
        ),
    )
    .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let asked = confirmations(&llm);
    for pair in [
        ("Seymour Cray", "Seymour R. Cray"),
        ("IBM", "International Business Machines"),
    ] {
        let (a, b) = (pair.0.to_string(), pair.1.to_string());
        assert!(
            asked.contains(&(a.clone(), b.clone())) || asked.contains(&(b, a)),
            "{pair:?} not asked: {asked:?}"
        );
    }
    one_cray_and_two_ibms(&t).await;
    t.stop().await;
    llm.stop().await;
}

/// Sources ingested at once, each naming one of a doubtful pair: a job that asked about its
/// pairs before another's name was written (or that meets it in its own write group) asks
/// again before it writes, so the pair merges when the model confirms it, as it would had the
/// sources come one after the other.
#[tokio::test]
async fn a_doubtful_pair_across_sources_ingested_at_once_is_asked_and_merged() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let pairs = [
        ("Seymour Cray", "Seymour R. Cray"),
        ("Mira Kaplan", "Mira J. Kaplan"),
        ("Tomas Ekberg", "Tomas L. Ekberg"),
        ("Ruth Okafor", "Ruth A. Okafor"),
    ];
    for (a, b) in pairs {
        llm.confirm_same(a, b);
    }
    // Every extraction waits, so that the jobs ask about their pairs at about the same time,
    // before any of them has written.
    llm.set_extraction_delay(Duration::from_millis(300));
    let mut sources: Vec<(String, String)> = Vec::new();
    for (i, (a, b)) in pairs.iter().enumerate() {
        sources.push((
            format!("a{i}"),
            format!("[[{a}]] -[built]-> [[Machine {i}]]."),
        ));
        sources.push((
            format!("b{i}"),
            format!("[[{b}]] -[wrote]-> [[Paper {i}]]."),
        ));
    }
    sources.push(("lena".into(), "[[Lena Voss]] -[built]-> [[Engine]].".into()));
    sources.push((
        "lena-k".into(),
        "[[Lena K. Voss]] -[wrote]-> [[Notes]].".into(),
    ));
    let mut ids = Vec::new();
    for (id, text) in &sources {
        let (status, job) = t.post(SOURCES, markdown(id, text)).await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["job_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let job = finished(&t, id).await;
        assert_eq!(job["status"], "succeeded", "{job}");
    }
    let asked = confirmations(&llm);
    for (i, (a, b)) in pairs.iter().enumerate() {
        let (one, two) = (entity(&t, a).await, entity(&t, b).await);
        assert_eq!(
            one["name"], two["name"],
            "{a} and {b} are two entities; asked {asked:?}"
        );
        // The entity has both names' relationships.
        let mut out = outgoing(&t, one["name"].as_str().unwrap()).await;
        out.sort();
        assert_eq!(
            out,
            [
                (format!("Machine {i}"), "built".to_string()),
                (format!("Paper {i}"), "wrote".to_string())
            ],
        );
    }
    // A pair the model does not confirm was asked too, and stays apart.
    let lena = ("Lena Voss".to_string(), "Lena K. Voss".to_string());
    let lena_back = (lena.1.clone(), lena.0.clone());
    assert!(
        asked.contains(&lena) || asked.contains(&lena_back),
        "{asked:?}"
    );
    assert_eq!(entity(&t, "Lena Voss").await["name"], "Lena Voss");
    assert_eq!(entity(&t, "Lena K. Voss").await["name"], "Lena K. Voss");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_chunk_answered_with_broken_json_is_retried_then_counted_failed() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    llm.push(Step::Answer("{\"entities\": [".into()));
    llm.push(Step::Answer("not json at all".into()));
    let job = ingest(
        &t,
        markdown(
            "broken",
            "[[Alan Turing]] -[wrote]-> [[On Computable Numbers]].",
        ),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["model_calls"], 2, "{job}");
    assert_eq!(job["counts"]["chunks_failed"], 1, "{job}");
    assert_eq!(job["counts"]["entities_added"], 0, "{job}");
    assert_eq!(entity(&t, "Alan Turing").await, Value::Null);

    // Submitted again, the failed chunk is asked again (its answer was not kept).
    let again = ingest(
        &t,
        markdown(
            "broken",
            "[[Alan Turing]] -[wrote]-> [[On Computable Numbers]].",
        ),
    )
    .await;
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(again["counts"]["model_calls"], 1, "{again}");
    assert_eq!(again["counts"]["chunks_failed"], 0, "{again}");
    assert_eq!(entity(&t, "Alan Turing").await["name"], "Alan Turing");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn an_unreadable_type_is_415_and_a_large_source_413_and_nothing_is_written() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 5_000)]);
    config.ingest.max_source_bytes = 1000;
    let t = start(config).await;
    let (status, body) = t
        .post(
            SOURCES,
            json!({"source": "s", "source_id": "x", "content": "a,b", "content_type": "text/csv"}),
        )
        .await;
    assert_eq!(status, 415, "{body}");
    assert_error(&body, "unsupported_media_type", Some("content_type"));
    let message = body["error"]["message"].as_str().unwrap();
    for accepted in [
        "text/markdown",
        "text/html",
        "application/pdf",
        ".md",
        ".pdf",
    ] {
        assert!(message.contains(accepted), "{message}");
    }
    let (status, body) = t.post(SOURCES, markdown("big", &"word ".repeat(300))).await;
    assert_eq!(status, 413, "{body}");
    assert_error(&body, "payload_too_large", Some("content"));
    // A multipart upload over the limit, too.
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(vec![b'a'; 2000]).file_name("big.txt"),
    );
    let res = t
        .http
        .post(t.url(SOURCES))
        .bearer_auth(KEY)
        .multipart(form)
        .send()
        .await
        .unwrap();
    let (status, _, body) = read(res).await;
    assert_eq!(status, 413, "{body}");
    assert_error(&body, "payload_too_large", Some("file"));
    // A missing field names itself.
    let (status, body) = t
        .post(SOURCES, json!({"source": "s", "content": "text"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_error(&body, "invalid_request", Some("source_id"));
    assert!(llm.requests().is_empty(), "nothing was sent to the model");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_multipart_upload_of_each_format_is_ingested() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let files: Vec<(&str, Option<&str>, Vec<u8>, &str)> = vec![
        (
            "page.html",
            Some("text/html"),
            b"<html><head><title>Page</title><script>[[Evil Script]]</script></head><body><h1>Hi</h1><p>[[HTML Person]] -[likes]-> [[HTML Thing]]</p></body></html>".to_vec(),
            "HTML Person",
        ),
        (
            "notes.md",
            None,
            b"# Notes\n\n[[Markdown Person]] -[likes]-> [[Markdown Thing]]\n".to_vec(),
            "Markdown Person",
        ),
        (
            "plain.txt",
            Some("text/plain"),
            b"[[Text Person]] -[likes]-> [[Text Thing]]".to_vec(),
            "Text Person",
        ),
        (
            "paper.pdf",
            Some("application/pdf"),
            pdf_with_text("[[PDF Person]] -[likes]-> [[PDF Thing]]"),
            "PDF Person",
        ),
    ];
    for (name, content_type, bytes, person) in files {
        let mut part = reqwest::multipart::Part::bytes(bytes).file_name(name);
        if let Some(ct) = content_type {
            part = part.mime_str(ct).unwrap();
        }
        let form = reqwest::multipart::Form::new()
            .part("file", part)
            .text("source", "uploads");
        let res = t
            .http
            .post(t.url(SOURCES))
            .bearer_auth(KEY)
            .multipart(form)
            .send()
            .await
            .unwrap();
        let (status, _, job) = read(res).await;
        assert_eq!(status, 202, "{name}: {job}");
        assert_eq!(job["source_id"], name);
        let job = finished(&t, job["job_id"].as_str().unwrap()).await;
        assert_eq!(job["status"], "succeeded", "{name}: {job}");
        assert_eq!(entity(&t, person).await["name"], person, "{name}");
    }
    assert_eq!(
        entity(&t, "Evil Script").await,
        Value::Null,
        "no script text is read"
    );
    // A PDF that cannot be read fails its job with a reason, and nothing of it is written.
    let job = upload_failing(&t, "bad.pdf", b"%PDF-1.4\n garbage".to_vec()).await;
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("pdf"),
        "{job}"
    );
    t.stop().await;
    llm.stop().await;
}

/// Uploads `bytes` as the file `name` (source `upload`), whose job must fail: the job, once
/// the source is known to hold nothing (its delete answers 404).
async fn upload_failing(t: &TestServer, name: &str, bytes: Vec<u8>) -> Value {
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name(name.to_string()),
    );
    let res = t
        .http
        .post(t.url(SOURCES))
        .bearer_auth(KEY)
        .multipart(form)
        .send()
        .await
        .unwrap();
    let (status, _, job) = read(res).await;
    assert_eq!(status, 202, "{job}");
    let job = finished(t, job["job_id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "failed", "{job}");
    let path = format!("/data/v1/ingest/sources/upload/{name}");
    let (status, body) = t.call(Method::DELETE, &path, None).await.into_status_body();
    assert_eq!(status, 404, "nothing of {name} was written: {body}");
    job
}

#[test]
fn kbq_parse_document_answers_a_parsed_document_or_why_not_as_json() {
    use std::io::Write;
    let run = |format: &str, bytes: &[u8]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
            .args(["parse-document", "--format", format])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run("pdf", &pdf_with_text("Hello from a PDF"));
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["parsed"]["text"], "Hello from a PDF", "{answer}");
    let out = run("pdf", b"%PDF-1.4\n garbage");
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        answer["failed"]
            .as_str()
            .unwrap()
            .starts_with("the PDF could not be read"),
        "{answer}"
    );
    let out = run("rtf", b"{\\rtf1}");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("must be one of text, markdown, html, pdf, docx"),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_parser_that_crashes_fails_its_job_and_the_node_goes_on() {
    // The PDF parser's process dies as a stack overflow would end it: the job fails with
    // the reason, nothing of the PDF is written, and the node and its next job go on.
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("crashing-parser");
    std::fs::write(
        &program,
        "#!/bin/sh\ncat > /dev/null\necho \"fatal runtime error: stack overflow\" >&2\nkill -SEGV $$\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 5_000)]);
    config.ingest.parser_program = program.display().to_string();
    let t = start(config).await;
    let pdf = pdf_with_text("[[Crash Person]] -[likes]-> [[Crash Thing]]");
    let job = upload_failing(&t, "crash.pdf", pdf).await;
    assert_eq!(
        job["error"],
        "the pdf parser was stopped by signal 11 (a crash: SIGSEGV, as when its stack is exhausted): fatal runtime error: stack overflow",
        "{job}"
    );
    assert_eq!(entity(&t, "Crash Person").await, Value::Null);
    // Text formats never go to the parser process, and the node still ingests them.
    let job = ingest(
        &t,
        markdown("after", "[[After Person]] -[likes]-> [[After Thing]]"),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(entity(&t, "After Person").await["name"], "After Person");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn an_ended_job_past_the_nodes_table_is_answered_from_its_record() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 5_000)]);
    config.ingest.keep_ended_jobs = 1;
    config
        .auth
        .keys
        .push(key_entry("other", "other-key-0123", Some(&["write"])));
    let t = start(config).await;
    let first = ingest(
        &t,
        markdown("first", "[[Grace Hopper]] -[wrote]-> [[FLOW-MATIC]]."),
    )
    .await;
    assert_eq!(first["status"], "succeeded", "{first}");
    // Two more ended jobs: the first is no longer in the node's table.
    for id in ["second", "third"] {
        let job = ingest(&t, markdown(id, &format!("[[Note {id}]]."))).await;
        assert_eq!(job["status"], "succeeded", "{job}");
    }
    // The node holds one ended job, the last (once the actor has heard that it ended, just
    // after its status says so).
    let metrics = || async {
        t.http
            .get(t.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let one_ended = eventually(Duration::from_secs(5), || async {
        metrics()
            .await
            .contains("kbq_ingest_jobs{state=\"ended\"} 1\n")
    })
    .await;
    assert!(one_ended, "{}", metrics().await);
    let path = format!("/data/v1/ingest/jobs/{}", first["job_id"].as_str().unwrap());
    let (status, again) = t.get(&path).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["status"], "succeeded");
    assert_eq!(again["counts"], first["counts"], "as recorded at its end");
    // Its events: the recorded end, at once.
    let events = t
        .http
        .get(t.url(&format!("{path}/events")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let text = tokio::time::timeout(Duration::from_secs(10), events.text())
        .await
        .expect("the stream of an ended job ends")
        .unwrap();
    assert!(text.contains("\"status\":\"succeeded\""), "{text}");
    // Still only its key's.
    let other = t
        .http
        .get(t.url(&path))
        .bearer_auth("other-key-0123")
        .send()
        .await
        .unwrap();
    let (status, _, body) = read(other).await;
    assert_eq!(status, 404, "{body}");
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn a_job_is_seen_only_by_its_key_and_can_be_followed_and_cancelled() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 30_000)]);
    config
        .auth
        .keys
        .push(key_entry("other", "other-key-0123", Some(&["write"])));
    let t = start(config).await;
    // The first answer waits, so the job is still running when it is cancelled.
    llm.push(Step::Delay(
        Duration::from_secs(20),
        Box::new(Step::Answer(r#"{"entities":[],"relationships":[]}"#.into())),
    ));
    let (status, job) = t.post(SOURCES, markdown("slow", "[[Slow Person]]")).await;
    assert_eq!(status, 202, "{job}");
    let id = job["job_id"].as_str().unwrap().to_string();
    let path = format!("/data/v1/ingest/jobs/{id}");

    // Another key does not see it.
    let other = t
        .http
        .get(t.url(&path))
        .bearer_auth("other-key-0123")
        .send()
        .await
        .unwrap();
    let (status, _, body) = read(other).await;
    assert_eq!(status, 404, "{body}");
    assert_error(&body, "not_found", None);

    let running = eventually(Duration::from_secs(10), || async {
        t.get(&path).await.1["status"] == "running"
    })
    .await;
    assert!(running);
    // Its events: the job as it is now, then its end once cancelled.
    let events = t
        .http
        .get(t.url(&format!("{path}/events")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let (status, cancelled) = t.call(Method::DELETE, &path, None).await.into_status_body();
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let text = tokio::time::timeout(Duration::from_secs(10), events.text())
        .await
        .expect("the stream ends with the job")
        .unwrap();
    assert!(text.starts_with("event: progress\ndata: {"), "{text}");
    assert!(text.contains("event: end\ndata: {"), "{text}");
    assert!(text.contains("\"status\":\"cancelled\""), "{text}");
    assert_eq!(entity(&t, "Slow Person").await, Value::Null);
    t.stop().await;
    llm.stop().await;
}

/// Jobs run in arrival order while their sources fit `ingest.max_running_mb` together: a
/// job that would pass it waits until enough have ended, and the jobs behind it wait with
/// it, however small.
#[tokio::test]
async fn jobs_wait_in_turn_for_room_under_the_running_bytes_bound() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 30_000)]);
    config.ingest.max_jobs = 8;
    config.ingest.max_running_mb = 1;
    config.ingest.chunk_chars = 100_000;
    let t = start(config).await;
    // Each answer waits, so that a job runs long enough to be seen running.
    llm.set_extraction_delay(Duration::from_millis(600));
    let big = |name: &str| {
        let text = format!(
            "[[{name}]] is large. {}",
            "Words of a long note. ".repeat(28_000)
        );
        assert!(text.len() > 600_000);
        markdown(name, &text)
    };
    let mut ids = Vec::new();
    for body in [
        big("First Big"),
        big("Second Big"),
        markdown("small", "[[Small One]]."),
    ] {
        let (status, job) = t.post(SOURCES, body).await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["job_id"].as_str().unwrap().to_string());
    }
    // Every status seen, by job, until all have ended. The three are read one after another,
    // the last submitted first: a status only moves on, so a job read later is seen at least
    // as far on as when the one read before it was, and a snapshot never shows a job started
    // before the one it waits for unless it was.
    let mut seen: Vec<[String; 3]> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut now: [String; 3] = Default::default();
        for (i, id) in ids.iter().enumerate().rev() {
            let (status, job) = t.get(&format!("/data/v1/ingest/jobs/{id}")).await;
            assert_eq!(status, 200, "{job}");
            now[i] = job["status"].as_str().unwrap().to_string();
        }
        let done = now.iter().all(|s| s == "succeeded");
        seen.push(now);
        if done {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = |s: &str| s != "queued";
    for [first, second, small] in &seen {
        // The second big source never runs beside the first, and the small one, which would
        // fit beside the first, waits behind the second: both are let in when the first ends.
        // (Which of those two is seen running first is not ordered: a job shows `running`
        // once its source is read back, and the small one's is read sooner.)
        assert!(
            !started(second) || first == "succeeded",
            "the second ran beside the first: {seen:?}"
        );
        assert!(
            !started(small) || first == "succeeded",
            "the small source overtook the second: {seen:?}"
        );
    }
    assert!(
        seen.iter()
            .any(|[first, second, _]| first == "running" && second == "queued"),
        "the first was seen running while the second waited: {seen:?}"
    );
    for name in ["First Big", "Second Big", "Small One"] {
        assert_eq!(entity(&t, name).await["name"], name);
    }
    t.stop().await;
    llm.stop().await;
}

#[tokio::test]
async fn without_a_model_chunks_are_stored_and_linked_to_the_names_they_mention() {
    // No provider: the built-in one answers chats, and no model extracts.
    let t = start(agent_config(Vec::new())).await;
    let job = ingest(
        &t,
        json!({"source": "plain", "source_id": "p1", "content": "A letter from Babbage about his engine and its cards, sent from London."}),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["model_calls"], 0, "{job}");
    assert_eq!(job["counts"]["entities_added"], 0, "{job}");
    let (status, hits) = t
        .post(
            "/v1/rag/keyword",
            json!({"query": "letter cards", "limit": 3}),
        )
        .await;
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["results"][0]["source_id"], "p1#0", "{hits}");
    assert_eq!(
        hits["results"][0]["entity_name"], "Babbage",
        "linked to the entity it names: {hits}"
    );
    // And to every other one it names.
    let documents = graph_documents(&t, "London", 1).await;
    let chunk: Vec<&Value> = documents["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["source_id"] == "p1#0")
        .collect();
    assert_eq!(chunk.len(), 1, "{documents}");
    assert_eq!(chunk[0]["relationship"], "self", "{documents}");
    t.stop().await;
}

/// A one-page PDF whose text layer is `text` (Helvetica), with a correct cross-reference
/// table: what a PDF writer makes.
fn pdf_with_text(text: &str) -> Vec<u8> {
    let escaped = text
        .replace('\\', "\\\\")
        .replace('(', "\\(")
        .replace(')', "\\)");
    let stream = format!("BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_string(),
        format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    pdf.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        pdf.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

/// The status and body of a `TestServer::call`.
trait StatusBody {
    fn into_status_body(self) -> (reqwest::StatusCode, Value);
}

impl StatusBody for (reqwest::StatusCode, reqwest::header::HeaderMap, Value) {
    fn into_status_body(self) -> (reqwest::StatusCode, Value) {
        (self.0, self.2)
    }
}

/// `kbq serve` on a surrealkv store at `store`, with the scripted model as its provider and
/// `KEY` as its key: the process, and its port.
async fn serve_on(
    store: &std::path::Path,
    llm: &ScriptedLlm,
    dir: &std::path::Path,
) -> (tokio::process::Child, u16) {
    let config = dir.join("kbq.toml");
    std::fs::write(
        &config,
        format!(
            "[[providers]]\nname = \"model\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted-model\"\ntimeout_ms = 120000\nmax_retries = 0\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--store",
            &format!("surrealkv://{}", store.display()),
        ])
        .env("KBQ_CONFIG", &config)
        .env("KBQ_API_KEYS", KEY)
        .env("KBQ_DATA_DIR", dir)
        .env("KBQ_STORE__LOAD_DEMO", "false")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_ready(port).await;
    (child, port)
}

/// A node killed while its job waits for the model: started again on the same store, it
/// resumes the job, which ends with each fact and chunk written once.
#[tokio::test]
async fn a_job_of_a_killed_node_is_resumed_and_written_once() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kb");
    let mut text = String::from("# Pioneers\n\n");
    for i in 0..30 {
        text.push_str(&format!(
            "Paragraph {i}: [[Konrad Zuse]] -[met]-> [[Engineer {i}]] in the years of the first machines.\n\n"
        ));
    }
    // Every answer of the first node waits longer than the node lives.
    for _ in 0..20 {
        llm.push(Step::Delay(
            Duration::from_secs(60),
            Box::new(Step::Answer(r#"{"entities":[],"relationships":[]}"#.into())),
        ));
    }
    let (mut first, port) = serve_on(&store, &llm, dir.path()).await;
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let res = http
        .post(format!("{base}{SOURCES}"))
        .bearer_auth(KEY)
        .json(&markdown("pioneers", &text))
        .send()
        .await
        .unwrap();
    let (status, _, job) = read(res).await;
    assert_eq!(status, 202, "{job}");
    let id = job["job_id"].as_str().unwrap().to_string();
    assert!(
        eventually(Duration::from_secs(20), || async {
            !llm.requests().is_empty()
        })
        .await,
        "the job asks the model"
    );
    first.kill().await.unwrap();
    llm.clear();
    let asked_before = llm.requests().len();

    // The delayed answers are spent; the model now answers from the text at once.
    let (mut second, port) = serve_on(&store, &llm, dir.path()).await;
    let base = format!("http://127.0.0.1:{port}");
    let job_url = format!("{base}/data/v1/ingest/jobs/{id}");
    let job = until_ended(Duration::from_secs(60), || async {
        let res = http.get(&job_url).bearer_auth(KEY).send().await.unwrap();
        read(res).await.2
    })
    .await;
    assert_eq!(
        job["status"], "succeeded",
        "the job was resumed and ended: {job}"
    );
    let chunks = job["counts"]["chunks"].as_u64().unwrap();
    assert!(chunks > 1, "{job}");
    assert!(
        llm.requests().len() > asked_before,
        "the resumed job asked the model"
    );

    // Each engineer once, each relationship once, each chunk once.
    let res = http
        .post(format!("{base}/data/v1/query/graph"))
        .bearer_auth(KEY)
        .json(&json!({"entity_name": "Konrad Zuse", "depth": 1, "limit": 200}))
        .send()
        .await
        .unwrap();
    let (_, _, walk) = read(res).await;
    assert_eq!(walk["total_entities"], 31, "{walk}");
    assert_eq!(walk["total_relationships"], 30, "{walk}");
    let res = http
        .delete(format!("{base}/data/v1/ingest/sources/notes/pioneers"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let (status, _, done) = read(res).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["chunks"].as_u64(), Some(chunks), "{done}");
    assert_eq!(done["entities"], 31, "{done}");
    assert_eq!(done["relationships"], 30, "{done}");
    second.kill().await.unwrap();
    llm.stop().await;
}

/// `kbq ingest DIR` reads the folder's documents (not its hidden or unreadable files), prints
/// what it did, and a second run over unchanged files asks the model nothing.
/// Writes `dir/kbq.toml`, whose one provider is `llm`, for a `kbq` command: its path.
fn model_config(dir: &std::path::Path, llm: &ScriptedLlm) -> std::path::PathBuf {
    let config = dir.join("kbq.toml");
    std::fs::write(
        &config,
        format!(
            "[[providers]]\nname = \"model\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted-model\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    config
}

#[tokio::test]
async fn kbq_ingest_parses_a_pdf_in_a_process_of_its_own() {
    // The command runs its own executable as the parser: no configuration names it.
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("paper.pdf"),
        pdf_with_text("[[Grace Hopper]] -[designed]-> [[FLOW-MATIC]]"),
    )
    .unwrap();
    let config = model_config(dir.path(), &llm);
    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let run = |parser: Option<&str>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"));
        command
            .args(["ingest", "--store", &store, docs.to_str().unwrap()])
            .env("KBQ_CONFIG", &config)
            .env("KBQ_DATA_DIR", dir.path());
        if let Some(program) = parser {
            command.env("KBQ_INGEST__PARSER_PROGRAM", program);
        }
        command.output()
    };
    // A parser program that is not there fails the file: the PDF is not parsed in process.
    let out = run(Some("/nonexistent/kbq")).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the pdf parser could not be started (/nonexistent/kbq)"),
        "{stderr}"
    );
    let out = run(None).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("ingested 1 of 1 files (1 chunks)")
            && stdout.contains("2 entities and 1 relationships added"),
        "{stdout}"
    );
    llm.stop().await;
}

#[tokio::test]
async fn kbq_ingest_reads_a_folder_and_a_second_run_asks_no_model() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(docs.join("sub")).unwrap();
    std::fs::create_dir_all(docs.join(".git")).unwrap();
    std::fs::write(
        docs.join("a.md"),
        "# A\n\n[[Jean Sammet]] -[designed]-> [[FORMAC]]\n",
    )
    .unwrap();
    std::fs::write(
        docs.join("sub/b.txt"),
        "[[Jean Sammet]] -[worked_at]-> [[IBM]]",
    )
    .unwrap();
    std::fs::write(docs.join(".git/c.md"), "[[Hidden]]").unwrap();
    std::fs::write(docs.join("d.png"), [0u8, 1, 2]).unwrap();
    let config = model_config(dir.path(), &llm);
    let store = format!("surrealkv://{}", dir.path().join("kb").display());
    let run = || async {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
            .args(["ingest", "--store", &store, docs.to_str().unwrap()])
            .env("KBQ_CONFIG", &config)
            .env("KBQ_DATA_DIR", dir.path())
            .output()
            .await
            .unwrap()
    };
    let first = run().await;
    let stdout = String::from_utf8_lossy(&first.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&first.stderr).into_owned();
    assert!(first.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("ingested 2 of 2 files (2 chunks)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("3 entities and 2 relationships added"),
        "{stdout}"
    );
    assert!(stdout.contains("2 model calls"), "{stdout}");
    assert!(
        !stderr.contains(" INFO "),
        "a command prints its result, not logs: {stderr}"
    );
    assert_eq!(llm.requests().len(), 2);

    let second = run().await;
    let stdout = String::from_utf8_lossy(&second.stdout).into_owned();
    assert!(second.status.success(), "{stdout}");
    assert!(stdout.contains("0 model calls"), "{stdout}");
    assert!(
        stdout.contains("0 entities and 0 relationships added"),
        "{stdout}"
    );
    assert_eq!(llm.requests().len(), 2, "no model call the second time");

    // Into another workspace: its sources are its own, so the files are read again, and
    // what they give lands there only.
    let cli = |args: &[&str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
            .args(args)
            .env("KBQ_CONFIG", &config)
            .env("KBQ_DATA_DIR", dir.path())
            .output()
    };
    let made = cli(&["workspaces", "--store", &store, "create", "team"])
        .await
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let team = cli(&[
        "ingest",
        "--store",
        &store,
        "--workspace",
        "team",
        docs.to_str().unwrap(),
    ])
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&team.stdout).into_owned();
    assert!(team.status.success(), "{stdout}");
    assert!(
        stdout.contains("3 entities and 2 relationships added"),
        "{stdout}"
    );
    assert_eq!(llm.requests().len(), 4);
    let list = cli(&["workspaces", "--store", &store, "list"])
        .await
        .unwrap();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list["workspaces"][0]["counts"]["entities"], 3, "{list}");
    assert_eq!(list["workspaces"][1]["name"], "team", "{list}");
    assert_eq!(list["workspaces"][1]["counts"]["entities"], 3, "{list}");
    let none = cli(&[
        "ingest",
        "--store",
        &store,
        "--workspace",
        "nope",
        docs.to_str().unwrap(),
    ])
    .await
    .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("there is no workspace `nope`"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );

    // A path that is not there: exit status 2, as `kbq import`'s.
    let missing = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbq"))
        .args(["ingest", "--store", &store, "/no/such/path"])
        .env("KBQ_CONFIG", &config)
        .output()
        .await
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    // Each command recorded every job it ran as ended before it exited: none is left in the
    // store for a server to take over and run again.
    let kb = kbq_store::KnowledgeBase::open_for_reembed(
        kbq_store::StoreConfig {
            url: store.clone(),
            ..kbq_store::StoreConfig::memory()
        },
        std::sync::Arc::new(kbq_store::HashingEmbedder::default()),
    )
    .await;
    let unfinished = kb.claim_jobs("test", 0, 1, true).await.unwrap();
    assert!(unfinished.is_empty(), "{unfinished:?}");
    llm.stop().await;
}

/// A source read again by another model loses the answers the first model gave for its
/// chunks, its unchanged chunks' too: no job asks for them again.
#[tokio::test]
async fn a_source_read_by_another_model_forgets_the_first_models_answers() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = agent_config(vec![openai("model", &llm, 0, 5_000)]);
    if config.store.url == "mem://" {
        // The second server opens the first one's store.
        config.store.url = format!("surrealkv://{}", dir.path().join("kb").display());
    }
    let text = |second: &str| {
        format!("## One\n\n[[Grace Hopper]] -[wrote]-> [[A-0]].\n\n## Two\n\n{second}\n")
    };
    let source = SourceKey::new("notes", "a");
    let kept = |kb: &std::sync::Arc<kbq_store::KnowledgeBase>, hash: &str, model: &str| {
        let key = extraction_key(hash, model, kbq_ingest::PROMPT_VERSION);
        let kb = kb.clone();
        async move { kb.cached_extraction(&key).await.unwrap().is_some() }
    };

    let t = start(config.clone()).await;
    let job = ingest(
        &t,
        markdown("a", &text("[[Jean Bartik]] -[built]-> [[ENIAC]].")),
    )
    .await;
    let kb = t.server().runtime().ingest.knowledge_base().clone();
    let first = kb.source_record(&source).await.unwrap().unwrap();
    assert_eq!(job["counts"]["model_calls"], first.chunks.len(), "{job}");
    let first_model = first.extracted_by.clone().unwrap();
    for hash in &first.chunks {
        assert!(kept(&kb, hash, &first_model).await);
    }
    // The store is let go of before the next server opens it.
    drop(kb);
    t.stop().await;

    config.providers[0].model = Some("another-model".into());
    let t = start(config).await;
    let job = ingest(
        &t,
        markdown("a", &text("[[Jean Bartik]] -[ran]-> [[ENIAC]].")),
    )
    .await;
    let kb = t.server().runtime().ingest.knowledge_base().clone();
    let second = kb.source_record(&source).await.unwrap().unwrap();
    let calls = job["counts"]["model_calls"].as_u64().unwrap() as usize;
    assert_eq!(
        calls,
        second.chunks.len(),
        "another model reads every chunk: {job}"
    );
    let second_model = second.extracted_by.clone().unwrap();
    assert_ne!(first_model, second_model);
    let unchanged: Vec<&String> = (first.chunks.iter())
        .filter(|h| second.chunks.contains(h))
        .collect();
    assert!(!unchanged.is_empty(), "{first:?} {second:?}");
    for hash in &first.chunks {
        assert!(!kept(&kb, hash, &first_model).await, "{hash}");
    }
    for hash in &second.chunks {
        assert!(kept(&kb, hash, &second_model).await, "{hash}");
    }
    t.stop().await;
    llm.stop().await;
}

/// An entity's description is the most representative of those every source's chunks gave;
/// from `ingest.summarise_after` (4) distinct ones, the model's summary, asked again only at
/// the next doubling or when one goes (and a question asked before is not asked again); a
/// retraction remakes it from the rest.
#[tokio::test]
async fn an_entitys_description_is_selected_then_summarised_from_every_source() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let summaries = || asked(&llm, "kbq_summary").len();
    let said = [
        "German engineer who built the Z3 computer.",
        "German civil engineer and computer pioneer who built the Z3.",
        "A painter.",
        "Computer pioneer who built the first programmable computer, the Z3.",
        "Engineer and inventor of the Z3 computer.",
    ];
    let describe = |i: usize| {
        markdown(
            &format!("zuse-{i}"),
            &format!("[[Konrad Zuse|{}]] -[built]-> [[Z{i}]].", said[i]),
        )
    };
    let description = || async {
        entity(&t, "Konrad Zuse").await["properties"]["description"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(ingest(&t, describe(0)).await["status"], "succeeded");
    assert_eq!(description().await, said[0]);
    // Two, then three: the one that shares most words with the others (the longer of two).
    ingest(&t, describe(1)).await;
    assert_eq!(description().await, said[1]);
    ingest(&t, describe(2)).await;
    assert_eq!(description().await, said[1], "the odd one out loses");
    assert_eq!(summaries(), 0);
    // Four: the model summarises, once, and the summary is kept as the entity's.
    let job = ingest(&t, describe(3)).await;
    assert_eq!(summaries(), 1);
    let summary = description().await;
    let kb = t.server().runtime().ingest.knowledge_base().clone();
    let kept = || async {
        kb.cached_extraction(&summary_key("Konrad Zuse"))
            .await
            .unwrap()
    };
    assert_eq!(kept().await.unwrap()["description"], summary.as_str());
    assert!(summary.ends_with("(one of 4)"), "{summary}");
    assert!(!summary.starts_with("A painter."), "{summary}");
    assert_eq!(
        job["counts"]["model_calls"], 2,
        "extraction and summary: {job}"
    );
    // Five: not the next doubling, so the summary stays.
    ingest(&t, describe(4)).await;
    assert_eq!(summaries(), 1);
    assert_eq!(description().await, summary);
    // Back to the same four: the same question, answered from the kept answer.
    delete_note(&t, "zuse-4").await;
    assert_eq!(summaries(), 1);
    assert_eq!(description().await, summary);
    // Three: selection again, from what remains.
    delete_note(&t, "zuse-3").await;
    assert_eq!(description().await, said[1]);
    // The entity's last sources gone, it goes, and its kept summary with it.
    for i in 0..3 {
        delete_note(&t, &format!("zuse-{i}")).await;
    }
    assert!(entity(&t, "Konrad Zuse").await.is_null());
    assert_eq!(kept().await, None);
    // An import's entity keeps its own description whatever sources say of it.
    let before = entity(&t, "Ada").await["properties"].clone();
    for (i, words) in said.iter().enumerate() {
        ingest(
            &t,
            markdown(
                &format!("ada-{i}"),
                &format!("[[Ada|{words}]] wrote notes."),
            ),
        )
        .await;
    }
    assert_eq!(entity(&t, "Ada").await["properties"], before);
    t.stop().await;
    llm.stop().await;
}

/// A chunk that a new version of its source changes in place may describe an entity
/// otherwise: the entity's description follows the new words.
#[tokio::test]
async fn a_changed_chunk_changes_the_description_it_gave() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let version = |words: &str| {
        markdown(
            "hopper",
            &format!("[[Kathleen Booth|{words}]] -[wrote]-> [[ARC assembly]]."),
        )
    };
    ingest(&t, version("A rear admiral.")).await;
    let description =
        || async { entity(&t, "Kathleen Booth").await["properties"]["description"].clone() };
    assert_eq!(description().await, "A rear admiral.");
    let job = ingest(
        &t,
        version("Computer scientist who wrote the first compiler."),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(
        description().await,
        "Computer scientist who wrote the first compiler."
    );
    t.stop().await;
    llm.stop().await;
}

/// Within one source, a near spelling of a name the source adds is that entity, kept as an
/// alias of it.
#[tokio::test]
async fn a_near_spelling_within_a_source_is_one_new_entity() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let job = ingest(
        &t,
        markdown(
            "mit",
            "[[Massachusetts Institute of Technology]] -[hosted]-> [[Project Whirlwind]].\n\n\
             [[Massachusets Institute of Technology]] -[hosted]-> [[Project MAC]].",
        ),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["entities_merged"], 1, "{job}");
    assert_eq!(
        outgoing(&t, "Massachusetts Institute of Technology").await,
        vec![
            ("Project MAC".to_string(), "hosted".to_string()),
            ("Project Whirlwind".to_string(), "hosted".to_string())
        ]
    );
    assert_eq!(
        entity(&t, "Massachusets Institute of Technology").await["name"],
        "Massachusetts Institute of Technology"
    );
    t.stop().await;
    llm.stop().await;
}

/// A name with several doubtful candidates in the graph is asked about each, in the name
/// search's order, until the model confirms one.
#[tokio::test]
async fn a_name_with_several_doubtful_candidates_merges_into_the_one_confirmed() {
    let llm = ScriptedLlm::start().await;
    let t = with_model(&llm).await;
    let one = ingest(
        &t,
        markdown(
            "labels",
            "[[Apple Inc.]] -[made]-> [[Macintosh]]. [[Apple Records]] -[signed]-> [[Badfinger]].",
        ),
    )
    .await;
    assert_eq!(one["status"], "succeeded", "{one}");
    llm.confirm_same("Apple", "Apple Records");
    let two = ingest(
        &t,
        markdown("abbey", "[[Apple]] -[released]-> [[Abbey Road]]."),
    )
    .await;
    assert_eq!(two["status"], "succeeded", "{two}");
    let asked: Vec<(String, String)> = confirmations(&llm)
        .into_iter()
        .filter(|(a, _)| a == "Apple")
        .collect();
    assert_eq!(
        asked,
        [
            ("Apple".to_string(), "Apple Inc.".to_string()),
            ("Apple".to_string(), "Apple Records".to_string())
        ]
    );
    assert_eq!(entity(&t, "Apple").await["name"], "Apple Records");
    assert_eq!(
        outgoing(&t, "Apple Records").await,
        vec![
            ("Abbey Road".to_string(), "released".to_string()),
            ("Badfinger".to_string(), "signed".to_string())
        ]
    );
    t.stop().await;
    llm.stop().await;
}

/// The model answers that a job kept before it was cancelled go with its record
/// (`ingest.forget_ended_jobs_after_secs` after it ended), unless a source's record holds the
/// chunk: counted in model calls when the same text comes again.
#[tokio::test]
async fn a_cancelled_jobs_kept_answers_go_with_its_record_unless_a_source_holds_the_chunk() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 30_000)]);
    config.ingest.forget_ended_jobs_after_secs = 1;
    // One call at a time, in the chunks' order: the first two answered, the third held.
    config.ingest.max_calls_in_flight = 1;
    let t = start(config).await;
    let calls = |job: &Value| job["counts"]["model_calls"].as_u64().unwrap();
    let one = "# One\n\n[[Grace Hopper]] -[wrote]-> [[FLOW-MATIC]].";
    let whole = format!(
        "{one}\n\n# Two\n\n[[Jean Bartik]] -[programmed]-> [[ENIAC]].\n\n# Three\n\n[[Kay McNulty]] -[programmed]-> [[ENIAC]]."
    );
    let empty = || Step::Answer(r#"{"entities":[],"relationships":[]}"#.into());
    llm.push(empty());
    llm.push(empty());
    llm.push(Step::Delay(Duration::from_secs(20), Box::new(empty())));
    let (status, job) = t.post(SOURCES, markdown("cancelled", &whole)).await;
    assert_eq!(status, 202, "{job}");
    let path = format!("/data/v1/ingest/jobs/{}", job["job_id"].as_str().unwrap());
    let two_done = eventually(Duration::from_secs(10), || async {
        let (_, job) = t.get(&path).await;
        job["chunks_total"] == 3 && job["chunks_done"] == 2
    })
    .await;
    assert!(two_done, "{}", t.get(&path).await.1);
    let (status, cancelled) = t.call(Method::DELETE, &path, None).await.into_status_body();
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    // A source that holds the first chunk: its kept answer serves.
    let held = ingest(&t, markdown("held", one)).await;
    assert_eq!(held["status"], "succeeded", "{held}");
    assert_eq!(calls(&held), 0, "{held}");

    let forgotten = eventually(Duration::from_secs(15), || async {
        t.get(&path).await.0 == 404
    })
    .await;
    assert!(forgotten, "the cancelled job was not forgotten");
    // The second chunk's answer went with the record, the first stayed (held), and the
    // third was never answered.
    let again = ingest(&t, markdown("again", &whole)).await;
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(calls(&again), 2, "{again}");
    t.stop().await;
    llm.stop().await;
}

/// `ingest.forget_ended_jobs_after_secs` after it ended, a job is forgotten: it answers 404,
/// from the node that ran it and from the store, while a job still running stays, and what
/// the ended job wrote stays in the graph.
#[tokio::test]
async fn an_ended_job_is_forgotten_after_its_time_and_its_writes_stay() {
    let llm = ScriptedLlm::start().await;
    let mut config = agent_config(vec![openai("model", &llm, 0, 30_000)]);
    config.ingest.forget_ended_jobs_after_secs = 1;
    let t = start(config).await;
    let done = ingest(
        &t,
        markdown("kept", "[[Grace Hopper]] -[wrote]-> [[COBOL]]."),
    )
    .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let done_path = format!("/data/v1/ingest/jobs/{}", done["job_id"].as_str().unwrap());
    // A job that runs on past the others' forgetting.
    llm.push(Step::Delay(
        Duration::from_secs(8),
        Box::new(Step::Answer(r#"{"entities":[],"relationships":[]}"#.into())),
    ));
    let (status, slow) = t.post(SOURCES, markdown("slow", "[[Slow Person]]")).await;
    assert_eq!(status, 202, "{slow}");
    let slow_path = format!("/data/v1/ingest/jobs/{}", slow["job_id"].as_str().unwrap());

    let forgotten = eventually(Duration::from_secs(15), || async {
        t.get(&done_path).await.0 == 404
    })
    .await;
    assert!(forgotten, "the ended job was not forgotten");
    let (_, body) = t.get(&done_path).await;
    assert_error(&body, "not_found", None);
    let (status, running) = t.get(&slow_path).await;
    assert_eq!(status, 200, "a running job is not forgotten: {running}");
    assert!(!running["status"].as_str().unwrap().is_empty());
    assert_eq!(entity(&t, "Grace Hopper").await["name"], "Grace Hopper");
    t.stop().await;
    llm.stop().await;
}
