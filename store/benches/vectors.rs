//! Semantic search at scale: the in-process vector index against exact search, and against
//! SurrealDB's own HNSW index, on one generated document set in one run.
//!
//! `cargo bench --workspace --bench vectors` (release). Scale with BENCH_DOCUMENTS (default
//! 100000) and BENCH_QUERIES (default 1000). Prints a Markdown report.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{Stats, env, stats};
use kbq_store::generate::{self, Rng, WORDS};
use kbq_store::import::{self, Silent};
use kbq_store::{Embedder, HashingEmbedder, KnowledgeBase, StoreConfig};
use surrealdb::types::{Object, SurrealValue};

/// Share of `exact`'s keys that `found` also has.
fn recall<K: PartialEq>(found: &[K], exact: &[K]) -> f64 {
    if exact.is_empty() {
        return 1.0;
    }
    found.iter().filter(|k| exact.contains(k)).count() as f64 / exact.len() as f64
}

fn row(name: &str, s: &Stats, recall: Option<f64>) -> String {
    format!(
        "| {name} | {} | {} |\n",
        s.cells(),
        recall.map_or("(reference)".into(), |r| format!("{r:.4}"))
    )
}

#[tokio::main]
async fn main() {
    let documents = env("BENCH_DOCUMENTS", 100_000);
    let queries = env("BENCH_QUERIES", 1_000);
    let k = 10;

    let (records, docs) = common::generated_documents(documents);
    let texts: Vec<String> = docs.iter().map(|d| d.embedding_text()).collect();
    let kb = KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
    let started = Instant::now();
    import::import_records(&kb, records.into_iter().enumerate().collect(), &Silent)
        .await
        .expect("import");
    let import_time = started.elapsed();

    let embedder = HashingEmbedder::default();
    let mut rng = Rng::new(7);
    let query_texts: Vec<String> = (0..queries)
        .map(|_| {
            let n = 2 + rng.below(4);
            let mut words: Vec<String> = (0..n)
                .map(|_| WORDS[rng.below(WORDS.len())].to_string())
                .collect();
            if rng.below(4) == 0 {
                words.push(generate::entity_name(rng.below(documents)));
            }
            words.join(" ")
        })
        .collect();
    let query_vectors: Vec<Vec<f32>> = query_texts.iter().map(|q| embedder.embed_one(q)).collect();

    // The index alone: the same VectorIndex the knowledge base keeps, built here from the
    // same embeddings so that its scan is timed without the document fetch.
    let mut index = kbq_store::VectorIndex::new(embedder.dimension());
    for (i, t) in texts.iter().enumerate() {
        index.upsert(&format!("d{i}"), &embedder.embed_one(t), Default::default());
    }
    let keep = |_: &kbq_store::DocTags| true;
    for q in query_vectors.iter().take(50) {
        index.search(q, k, &keep);
    }
    let (mut t_exact, mut t_index, mut r_index) = (Vec::new(), Vec::new(), 0.0);
    let mut exact_keys = Vec::new();
    for q in &query_vectors {
        let t = Instant::now();
        let exact = index.search_exact(q, k, &keep);
        t_exact.push(t.elapsed());
        let t = Instant::now();
        let fast = index.search(q, k, &keep);
        t_index.push(t.elapsed());
        let exact: Vec<_> = exact.into_iter().map(|h| h.0).collect();
        let fast: Vec<_> = fast.into_iter().map(|h| h.0).collect();
        r_index += recall(&fast, &exact);
        exact_keys.push(exact);
    }
    r_index /= queries as f64;

    // End to end through the knowledge base: embed, scan, fetch the documents.
    let (mut t_kb, mut r_kb) = (Vec::new(), 0.0);
    for q in query_texts.iter().take(50) {
        kb.semantic_search(q, k).await.unwrap();
    }
    for q in &query_texts {
        let t = Instant::now();
        let fast = kb.semantic_search(q, k).await.unwrap();
        t_kb.push(t.elapsed());
        let exact = kb.semantic_search_exact(q, k).await.unwrap();
        let fast: Vec<_> = fast.into_iter().map(|h| h.document.id).collect();
        let exact: Vec<_> = exact.into_iter().map(|h| h.document.id).collect();
        r_kb += recall(&fast, &exact);
    }
    r_kb /= queries as f64;

    // SurrealDB's HNSW index (M 12, EFC 150 by default; EF 64 at query time), on a table of
    // its own holding the same vectors as arrays of numbers.
    let db = surrealdb::engine::any::connect("mem://").await.unwrap();
    db.use_ns("bench").use_db("bench").await.unwrap();
    db.query(format!(
        "DEFINE TABLE v SCHEMALESS; DEFINE INDEX v_hnsw ON v FIELDS e HNSW DIMENSION {} DIST COSINE TYPE F32;",
        embedder.dimension()
    ))
    .await
    .unwrap()
    .check()
    .unwrap();
    let hnsw_build = common::insert_numbered(&db, "v", &texts, |t, o| {
        o.insert(
            "e",
            embedder
                .embed_one(t)
                .into_iter()
                .map(f64::from)
                .collect::<Vec<f64>>()
                .into_value(),
        );
    })
    .await;
    let hnsw_queries = queries.min(300);
    let (mut t_hnsw, mut r_hnsw) = (Vec::new(), 0.0);
    for (q, exact) in query_vectors.iter().zip(&exact_keys).take(hnsw_queries) {
        let mut vars = Object::new();
        vars.insert(
            "q",
            q.iter()
                .map(|x| f64::from(*x))
                .collect::<Vec<f64>>()
                .into_value(),
        );
        let t = Instant::now();
        let mut resp = db
            .query(format!("SELECT VALUE n FROM v WHERE e <|{k}, 64|> $q"))
            .bind(vars)
            .await
            .unwrap();
        let found: Vec<i64> = resp.take(0).unwrap();
        t_hnsw.push(t.elapsed());
        let found: Vec<String> = found.into_iter().map(|n| format!("d{n}")).collect();
        let exact: Vec<String> = exact.iter().map(|k| k.to_string()).collect();
        r_hnsw += recall(&found, &exact);
    }
    r_hnsw /= hnsw_queries as f64;

    println!(
        "{documents} generated documents (seed 42), {}-dimension hashing embeddings, {queries} queries of 2-5 words (a quarter with an entity name), k = {k}. Embedded `mem://` SurrealDB 3.3.5, release build.\n",
        embedder.dimension()
    );
    println!(
        "| search | mean | p50 | p95 | p99 | recall@{k} vs exact |\n|---|---|---|---|---|---|"
    );
    print!(
        "{}",
        row(
            "exact scan, f32 (`VectorIndex::search_exact`)",
            &stats(t_exact),
            None
        )
    );
    print!(
        "{}",
        row(
            "`VectorIndex::search` (8-bit scan + f32 re-score)",
            &stats(t_index),
            Some(r_index)
        )
    );
    print!(
        "{}",
        row(
            "`KnowledgeBase::semantic_search` (embed + search + fetch documents)",
            &stats(t_kb),
            Some(r_kb)
        )
    );
    print!(
        "{}",
        row(
            &format!("SurrealDB HNSW `<|{k}, 64|>` ({hnsw_queries} queries)"),
            &stats(t_hnsw),
            Some(r_hnsw)
        )
    );
    println!(
        "\nImport of the documents through `kbq_store::import`: {:.1} s. Writing the same vectors into SurrealDB's HNSW index: {:.1} s ({:.0} vectors/s).",
        import_time.as_secs_f64(),
        hnsw_build.as_secs_f64(),
        documents as f64 / hnsw_build.as_secs_f64()
    );
}
