//! Each built-in tool against a real embedded knowledge base.

use std::sync::Arc;

use kbq_store::import::{self, Silent};
use kbq_store::{HashingEmbedder, KnowledgeBase, StoreConfig};
use kbq_tools::{EntityExtractor, ToolContext, ToolError, Toolbox};
use serde_json::{Value, json};

const KB: &str = r#"{"kind":"entity","name":"Alan Turing","entity_type":"person","properties":{}}
{"kind":"entity","name":"Turing machine","entity_type":"concept","properties":{}}
{"kind":"entity","name":"ACE","entity_type":"machine","properties":{}}
{"kind":"entity","name":"Kurt Gödel","entity_type":"person","properties":{}}
{"kind":"relationship","source_name":"Alan Turing","target_name":"Turing machine","relationship_type":"invented","properties":{}}
{"kind":"relationship","source_name":"Alan Turing","target_name":"ACE","relationship_type":"designed","properties":{}}
{"kind":"relationship","source_name":"Kurt Gödel","target_name":"Alan Turing","relationship_type":"influenced","properties":{}}
{"kind":"document","title":"Alan Turing","content":"Alan Turing described the universal machine in 1936.","source":"t","source_id":"turing","content_type":"text/plain","url":null,"entity_name":"Alan Turing"}
{"kind":"document","title":"ACE","content":"The Automatic Computing Engine was a stored-program computer design.","source":"t","source_id":"ace","content_type":"text/plain","url":null,"entity_name":"ACE"}
{"kind":"document","title":"Incompleteness","content":"Gödel proved the incompleteness theorems.","source":"t","source_id":"godel","content_type":"text/plain","url":null,"entity_name":"Kurt Gödel"}
"#;

async fn context(owner: &str) -> ToolContext {
    let kb = KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
    import::import(&kb, KB.as_bytes(), &Silent).await.unwrap();
    ToolContext {
        extractor: Arc::new(EntityExtractor::new(kb.clone())),
        kb,
        owner: owner.into(),
        span: tracing::Span::none(),
    }
}

async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<Value, ToolError> {
    Toolbox::default()
        .get(tool)
        .unwrap()
        .call(ctx, &args)
        .await
        .map(|r| r.value())
}

#[tokio::test]
async fn schemas_are_openai_function_definitions() {
    let defs = Toolbox::default().openai_definitions();
    let names: Vec<&str> = defs
        .iter()
        .map(|d| d["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "SemanticSearchTool",
            "KnowledgeGraphTool",
            "HybridSearchTool",
            "MemorySearchTool",
            "MemoryStoreTool",
            "MemoryStatsTool"
        ]
    );
    for d in &defs {
        assert_eq!(d["type"], "function");
        assert_eq!(d["function"]["parameters"]["type"], "object");
        assert_eq!(d["function"]["parameters"]["additionalProperties"], false);
    }
}

#[tokio::test]
async fn entity_extraction_is_case_insensitive_whole_word_and_longest_first() {
    let ctx = context("k").await;
    let found = ctx
        .extractor
        .extract("what did alan turing build? the turing machine and ACE. also kurt gödel")
        .await
        .unwrap();
    assert_eq!(
        found,
        vec!["Alan Turing", "Turing machine", "ACE", "Kurt Gödel"]
    );
    assert!(
        ctx.extractor
            .extract("a race to the space age")
            .await
            .unwrap()
            .is_empty(),
        "ACE inside words is no match"
    );
}

#[tokio::test]
async fn knowledge_graph_tool_walks_from_the_entity() {
    let ctx = context("k").await;
    let r = call(
        &ctx,
        "KnowledgeGraphTool",
        json!({"entity": "Alan Turing", "depth": 1}),
    )
    .await
    .unwrap();
    assert_eq!(r["found"], true);
    let names: Vec<&str> = r["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["Alan Turing", "ACE", "Kurt Gödel", "Turing machine"]
    );
    assert_eq!(r["relationships"].as_array().unwrap().len(), 3);
    // A loose spelling resolves through search.
    let r = call(&ctx, "KnowledgeGraphTool", json!({"entity": "gödel"}))
        .await
        .unwrap();
    assert_eq!(r["entity"], "Kurt Gödel");
    let r = call(
        &ctx,
        "KnowledgeGraphTool",
        json!({"entity": "Nobody at all"}),
    )
    .await
    .unwrap();
    assert_eq!(r["found"], false);
}

#[tokio::test]
async fn hybrid_search_fuses_graph_and_semantic_results() {
    let ctx = context("k").await;
    let r = call(
        &ctx,
        "HybridSearchTool",
        json!({"query": "What did Alan Turing design?", "limit": 3}),
    )
    .await
    .unwrap();
    assert_eq!(r["entities"], json!(["Alan Turing"]));
    assert_eq!(r["total"], 3);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results[0]["title"], "Alan Turing");
    assert!(
        results[0]["sources"].as_array().unwrap().len() == 2,
        "found by both methods: {}",
        results[0]
    );
    let scores: Vec<f64> = results
        .iter()
        .map(|x| x["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]));
    let r = call(
        &ctx,
        "SemanticSearchTool",
        json!({"query": "incompleteness theorems"}),
    )
    .await
    .unwrap();
    assert_eq!(r["results"][0]["title"], "Incompleteness");
}

#[tokio::test]
async fn a_document_reached_from_two_named_entities_counts_once() {
    let ctx = context("k").await;
    // Alan Turing's document is his own and, one hop away, Kurt Gödel's neighbour's.
    let r = call(
        &ctx,
        "HybridSearchTool",
        json!({"query": "Alan Turing and Kurt Gödel", "limit": 5}),
    )
    .await
    .unwrap();
    assert_eq!(r["entities"], json!(["Alan Turing", "Kurt Gödel"]));
    // Reciprocal rank fusion of two lists: one rank from each list at most, 2 / 61 at best.
    for x in r["results"].as_array().unwrap() {
        let score = x["score"].as_f64().unwrap();
        // (Scores are rounded to six decimals.)
        assert!(score <= 2.0 / 61.0 + 1e-6, "counted twice in a list: {x}");
    }
}

#[tokio::test]
async fn memory_is_stored_recalled_and_counted_per_key() {
    let alice = context("alice").await;
    let bob = ToolContext {
        owner: "bob".into(),
        ..alice.clone()
    };
    let stored = call(
        &alice,
        "MemoryStoreTool",
        json!({"content": "My favourite machine is ACE", "tags": ["prefs"]}),
    )
    .await
    .unwrap();
    assert_eq!(stored["stored"], true);
    assert_eq!(stored["entities"], json!(["ACE"]));
    let recalled = call(
        &alice,
        "MemorySearchTool",
        json!({"query": "favourite machine"}),
    )
    .await
    .unwrap();
    assert_eq!(recalled["results"][0]["kind"], "memory");
    assert_eq!(
        recalled["results"][0]["content"],
        "My favourite machine is ACE"
    );
    let theirs = call(
        &bob,
        "MemorySearchTool",
        json!({"query": "favourite machine"}),
    )
    .await
    .unwrap();
    assert_eq!(theirs["memories_found"], 0, "{theirs}");
    assert_eq!(
        call(&alice, "MemoryStatsTool", json!({})).await.unwrap()["memories"],
        1
    );
    assert_eq!(
        call(&bob, "MemoryStatsTool", Value::Null).await.unwrap()["memories"],
        0
    );
    assert_eq!(
        call(&bob, "MemoryStatsTool", json!({})).await.unwrap()["knowledge_base"]["entities"],
        4
    );
}

#[tokio::test]
async fn invalid_arguments_are_errors_not_crashes() {
    let ctx = context("k").await;
    for (tool, args, needle) in [
        ("HybridSearchTool", json!({}), "`query` is required"),
        ("HybridSearchTool", json!({"query": 5}), "must be a string"),
        (
            "HybridSearchTool",
            json!({"query": "x", "limit": 0}),
            "from 1 to 20",
        ),
        (
            "HybridSearchTool",
            json!({"query": "x", "limt": 3}),
            "unknown argument `limt`",
        ),
        (
            "KnowledgeGraphTool",
            json!({"entity": "ACE", "depth": 9}),
            "from 1 to 3",
        ),
        ("KnowledgeGraphTool", json!(["ACE"]), "JSON object"),
        (
            "MemoryStoreTool",
            json!({"content": "  "}),
            "must not be empty",
        ),
        (
            "MemoryStoreTool",
            json!({"content": "x", "tags": "a"}),
            "array",
        ),
        ("MemoryStatsTool", json!({"x": 1}), "unknown argument"),
    ] {
        let err = call(&ctx, tool, args.clone()).await.unwrap_err();
        assert!(
            matches!(err, ToolError::InvalidArguments(_)),
            "{tool} {args}: {err:?}"
        );
        assert!(err.to_string().contains(needle), "{tool} {args}: {err}");
        assert_eq!(err.to_result().value()["error_type"], "invalid_arguments");
    }
}
