//! Semantic and hybrid search at scale, on one generated document set in one run: where the
//! time of one search goes (embedding, vector search, BM25, reading the hit documents from
//! SurrealDB), and the in-process vector index against exact search (latency and recall@10).
//!
//! `cargo bench --workspace --bench vectors` (release). Scale with BENCH_DOCUMENTS (default
//! 100000) and BENCH_QUERIES (default 1000; the end-to-end parts ask at most 300 of them).
//! BENCH_HNSW=1 adds SurrealDB's own HNSW index to the comparison (a few minutes more at
//! 100k: writing through it is slow). BENCH_DATA, an import file (`scripts/debian-kb`'s,
//! say), replaces the generated set with its records: the queries are then runs of 2-5 words
//! of its documents, a quarter followed by an entity's name, and the entities asked about
//! are its documents' own. Prints a Markdown report.

#[allow(dead_code)] // each bench uses part of it
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Stats, env, ms, stats};
use kbq_store::generate::{self, Rng, WORDS};
use kbq_store::import::{self, Silent};
use kbq_store::search::DocumentFilter;
use kbq_store::text::{Analysed, TextIndex, query_terms};
use kbq_store::{
    DocTags, DocumentsQuery, Embedder, HashingEmbedder, KnowledgeBase, NewDocument, StoreConfig,
    VectorIndex,
};
use surrealdb::types::{Object, SurrealValue};

const K: usize = 10;

/// Share of `exact`'s keys that `found` also has.
fn recall<K: PartialEq>(found: &[K], exact: &[K]) -> f64 {
    if exact.is_empty() {
        return 1.0;
    }
    found.iter().filter(|k| exact.contains(k)).count() as f64 / exact.len() as f64
}

/// [`recall`] that counts a found hit as one of the exact top `k` when its score ties the
/// exact `k`-th best (scores are `f32` re-scored alike): documents of the same words are as
/// near as each other, and which of them the exact scan keeps is arbitrary.
fn recall_with_ties(
    found: &[(kbq_store::vectors::VectorKey, f32)],
    exact: &[(kbq_store::vectors::VectorKey, f32)],
) -> f64 {
    let Some(&(_, kth)) = exact.last() else {
        return 1.0;
    };
    let near = found.iter().filter(|(_, s)| *s >= kth - 1e-6).count();
    near.min(exact.len()) as f64 / exact.len() as f64
}

fn tags(d: &NewDocument) -> DocTags {
    DocTags {
        source: d.source.as_str().into(),
        content_type: d.content_type.as_str().into(),
        entity_name: d.entity_name.as_deref().map(Into::into),
        mentions: Box::default(),
    }
}

/// Times `f` once per item, after `f` has run on the first few items to warm up.
fn time_each<T>(items: &[T], mut f: impl FnMut(&T)) -> Stats {
    for item in items.iter().take(20) {
        f(item);
    }
    let mut times = Vec::with_capacity(items.len());
    for item in items {
        let t = Instant::now();
        f(item);
        times.push(t.elapsed());
    }
    stats(times)
}

/// [`time_each`] for an async `f`.
async fn time_each_async<T>(items: &[T], f: impl AsyncFn(&T)) -> Stats {
    for item in items.iter().take(20) {
        f(item).await;
    }
    let mut times = Vec::with_capacity(items.len());
    for item in items {
        let t = Instant::now();
        f(item).await;
        times.push(t.elapsed());
    }
    stats(times)
}

/// A comma-separated list of numbers from the environment, or `default`.
fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// `a / b` of two durations, for the ratio columns.
fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

#[tokio::main]
async fn main() {
    let documents = env("BENCH_DOCUMENTS", 100_000);
    let queries = env("BENCH_QUERIES", 1_000);
    let kb_queries = queries.min(300);

    let data = std::env::var("BENCH_DATA").ok();
    let (records, docs) = match &data {
        Some(path) => {
            let records: Vec<_> = (common::records_of_file(path).into_iter())
                .map(|(_, r)| r)
                .collect();
            let docs = common::documents_of(&records);
            (records, docs)
        }
        None => common::generated_documents(documents),
    };
    let documents = docs.len();
    // The entity of each document, by position: the generated set's are `Entity NNNNNN`.
    let names: Vec<String> = match &data {
        Some(_) => docs
            .iter()
            .map(|d| d.entity_name.clone().unwrap_or_else(|| d.title.clone()))
            .collect(),
        None => (0..documents).map(generate::entity_name).collect(),
    };
    let name = |i: usize| names[i % documents].clone();
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
            let mut words: Vec<String> = match &data {
                None => (0..n)
                    .map(|_| WORDS[rng.below(WORDS.len())].to_string())
                    .collect(),
                Some(_) => {
                    let content = &docs[rng.below(documents)].content;
                    let all: Vec<&str> = content.split_whitespace().collect();
                    let from = rng.below(all.len().saturating_sub(n) + 1);
                    all.iter()
                        .skip(from)
                        .take(n)
                        .map(|w| w.to_string())
                        .collect()
                }
            };
            if rng.below(4) == 0 {
                words.push(name(rng.below(documents)));
            }
            words.join(" ")
        })
        .collect();
    let query_vectors: Vec<Vec<f32>> = query_texts.iter().map(|q| embedder.embed_one(q)).collect();
    // What `kbq load` asks `/v1/rag/hybrid`: "What is <entity>?", limit 5, so each method
    // contributes 10 candidates, plus the documents around the entity (graph_depth 1).
    let entities: Vec<usize> = (0..kb_queries).map(|_| rng.below(documents)).collect();
    let entities: Vec<(usize, String)> = entities.into_iter().map(|i| (i, name(i))).collect();
    let hybrid_texts: Vec<String> = entities
        .iter()
        .map(|(_, e)| format!("What is {e}?"))
        .collect();

    // The indexes alone: the same VectorIndex and TextIndex the knowledge base keeps, built
    // here from the same documents so that they are timed without the document fetch.
    let started = Instant::now();
    let mut index = VectorIndex::for_bulk_load(embedder.dimension());
    for (i, d) in docs.iter().enumerate() {
        index.upsert(
            &format!("d{i}"),
            &embedder.embed_one(&d.embedding_text()),
            tags(d),
        );
    }
    let vector_fill = started.elapsed();
    let started = Instant::now();
    index.train();
    let vector_train = started.elapsed();
    let mut text = TextIndex::new();
    for (i, d) in docs.iter().enumerate() {
        text.upsert(
            &format!("d{i}"),
            &Analysed::new(&d.title, &d.content),
            tags(d),
        );
    }
    let keep = |_: &DocTags| true;

    // Exact search and the index, per query, with recall.
    let mut exact_keys = Vec::with_capacity(queries);
    let t_exact = time_each(&query_vectors, |q| {
        exact_keys.push(index.search_exact(q, K, &keep));
    });
    exact_keys.drain(..20.min(exact_keys.len()));
    let mut found = Vec::with_capacity(queries);
    let t_index = time_each(&query_vectors, |q| found.push(index.search(q, K, &keep)));
    found.drain(..20.min(found.len()));
    let keys = |hits: &[(kbq_store::vectors::VectorKey, f32)]| -> Vec<String> {
        hits.iter().map(|h| h.0.to_string()).collect()
    };
    let r_index = found
        .iter()
        .zip(&exact_keys)
        .map(|(f, e)| recall(&keys(f), &keys(e)))
        .sum::<f64>()
        / queries as f64;
    let r_index_ties = found
        .iter()
        .zip(&exact_keys)
        .map(|(f, e)| recall_with_ties(f, e))
        .sum::<f64>()
        / queries as f64;
    let mut scanned = Vec::with_capacity(queries);
    let t_scan = time_each(&query_vectors, |q| {
        scanned.push(index.search_scan(q, K, &keep))
    });
    scanned.drain(..20.min(scanned.len()));
    let r_scan = scanned
        .iter()
        .zip(&exact_keys)
        .map(|(f, e)| recall(&keys(f), &keys(e)))
        .sum::<f64>()
        / queries as f64;
    // Lists probed against recall: what the default is chosen from.
    let default_probes = index.probes();
    let mut sweep = Vec::new();
    for probes in env_list("BENCH_PROBES", &[8, 16, 24, 32, 48, 64]) {
        index.set_probes(Some(probes));
        let mut found = Vec::with_capacity(queries);
        let t = time_each(&query_vectors, |q| found.push(index.search(q, K, &keep)));
        found.drain(..20.min(found.len()));
        let r = found
            .iter()
            .zip(&exact_keys)
            .map(|(f, e)| recall(&keys(f), &keys(e)))
            .sum::<f64>()
            / queries as f64;
        sweep.push((probes, t, r));
    }
    index.set_probes(None);
    // A selective filter (one entity's documents): the index must still find them.
    let filter_name = name(documents / 2);
    let selective = |t: &DocTags| t.entity_name.as_deref() == Some(filter_name.as_str());
    let filtered_found = index.search(&query_vectors[0], K, &selective).len();

    // Where one search's time goes.
    let embed = time_each(&query_texts[..kb_queries], |q| {
        std::hint::black_box(embedder.embed_one(q));
    });
    let bm25 = time_each(&query_texts[..kb_queries], |q| {
        std::hint::black_box(text.search(&query_terms(q), K, &keep));
    });
    let bm25_hybrid = time_each(&hybrid_texts, |q| {
        std::hint::black_box(text.search(&query_terms(q), 2 * 5, &keep));
    });
    let corpus_buffer = time_each(&query_texts[..kb_queries], |_| {
        std::hint::black_box(vec![0f32; documents]);
    });
    // Reading ten documents by key: `documents_of` ten entities finds their keys in memory,
    // embeds an empty text and reads the ten documents, as every search does for its hits.
    let fetch = time_each_async(&entities, async |(start, _): &(usize, String)| {
        let names: Vec<String> = (0..10).map(|i| name(start + i)).collect();
        std::hint::black_box(kb.documents_of(&names, "").await.unwrap());
    })
    .await;
    let semantic = time_each_async(&query_texts[..kb_queries], async |q: &String| {
        std::hint::black_box(kb.semantic_search(q, K).await.unwrap());
    })
    .await;
    let keyword = time_each_async(&query_texts[..kb_queries], async |q: &String| {
        std::hint::black_box(kb.keyword_search(q, K).await.unwrap());
    })
    .await;
    // The store's part of a hybrid search, as kbq_tools::rag runs it.
    let hybrid = time_each_async(&entities, async |(_, e): &(usize, String)| {
        let q = format!("What is {e}?");
        let all = DocumentFilter::default();
        let (s, k) = futures::try_join!(
            kb.semantic_search_filtered(&q, 10, &all),
            kb.keyword_search_filtered(&q, 10, &all),
        )
        .unwrap();
        let g = kb
            .graph_documents(&DocumentsQuery {
                start: e.clone(),
                entity_type: None,
                relationship_types: None,
                max_depth: 1,
                limit: 10,
                resolve_documents: true,
            })
            .await
            .unwrap();
        std::hint::black_box((s, k, g));
    })
    .await;
    let mut r_kb = 0.0;
    for q in &query_texts[..kb_queries] {
        let fast = kb.semantic_search(q, K).await.unwrap();
        let exact = kb.semantic_search_exact(q, K).await.unwrap();
        let fast: Vec<_> = fast.into_iter().map(|h| h.document.id.clone()).collect();
        let exact: Vec<_> = exact.into_iter().map(|h| h.document.id.clone()).collect();
        r_kb += recall(&fast, &exact);
    }
    r_kb /= kb_queries as f64;

    println!(
        "{documents} {}, {}-dimension hashing embeddings, k = {K}. Embedded `mem://` SurrealDB 3.3.5, release build.\n",
        match &data {
            Some(path) => format!("documents of {path}"),
            None => "generated documents (seed 42)".to_string(),
        },
        embedder.dimension()
    );
    println!(
        "**Vector search, {queries} queries of 2-5 words (a quarter with an entity name):**\n"
    );
    println!(
        "| search | mean | p50 | p95 | p99 | p50 vs exact | p99 vs exact | recall@{K} vs exact |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, s, r) in [
        (
            "exact scan, f32 (`VectorIndex::search_exact`)",
            &t_exact,
            None,
        ),
        (
            "8-bit scan of every code + f32 re-score (`VectorIndex::search_scan`)",
            &t_scan,
            Some(r_scan),
        ),
        (
            &*format!(
                "`VectorIndex::search`: inverted file, {default_probes} of {} lists + f32 re-score",
                index.lists()
            ),
            &t_index,
            Some(r_index),
        ),
    ] {
        println!(
            "| {name} | {} | {:.1}x faster | {:.1}x faster | {} |",
            s.cells(),
            ratio(t_exact.p50, s.p50),
            ratio(t_exact.p99, s.p99),
            r.map_or("(reference)".into(), |r| format!("{r:.4}"))
        );
    }
    println!(
        "\nLists probed (of {}) against recall:\n\n| probes | mean | p50 | p95 | p99 | p50 vs exact | recall@{K} |\n|---|---|---|---|---|---|---|",
        index.lists()
    );
    for (probes, t, r) in &sweep {
        println!(
            "| {probes} | {} | {:.1}x faster | {r:.4} |",
            t.cells(),
            ratio(t_exact.p50, t.p50)
        );
    }
    println!(
        "\nWith a filter only one document passes, `VectorIndex::search` found {filtered_found} (of 1)."
    );
    println!(
        "\n**Where one search's time goes, {kb_queries} queries:**\n\n| part | mean | p50 | p95 | p99 |\n|---|---|---|---|---|"
    );
    for (name, s) in [
        ("embedding the query (`HashingEmbedder`)", &embed),
        ("`VectorIndex::search`, k = 10", &t_index),
        ("`TextIndex::search`, the same queries, k = 10", &bm25),
        (
            "`TextIndex::search`, \"What is <entity>?\", k = 10 (hybrid's keyword part)",
            &bm25_hybrid,
        ),
        (
            "allocating and zeroing one f32 per document (a corpus-sized buffer)",
            &corpus_buffer,
        ),
        (
            "reading 10 documents by key (`documents_of` 10 entities; an embedded store holds them in memory)",
            &fetch,
        ),
        (
            "`KnowledgeBase::semantic_search` (embed + search + read)",
            &semantic,
        ),
        ("`KnowledgeBase::keyword_search` (search + read)", &keyword),
        (
            "hybrid's store part: semantic + keyword (10 each, joined) + graph documents, depth 1",
            &hybrid,
        ),
    ] {
        println!("| {name} | {} |", s.cells());
    }
    println!(
        "\n`VectorIndex::search`'s recall@{K} counting a hit that ties the exact {K}th best as found: {r_index_ties:.4}."
    );
    println!(
        "\nRecall@{K} of `KnowledgeBase::semantic_search` against `semantic_search_exact`: {r_kb:.4}. Import of the documents through `kbq_store::import`: {:.1} s; filling the vector index alone: {:.2} s, then training its inverted file ({} lists): {:.2} s.",
        import_time.as_secs_f64(),
        vector_fill.as_secs_f64(),
        index.lists(),
        vector_train.as_secs_f64()
    );

    if env("BENCH_HNSW", 0) != 0 {
        hnsw(&docs, &query_vectors, &exact_keys, &t_index).await;
    }
}

/// SurrealDB's HNSW index (M 12, EFC 150 by default; EF 64 at query time), on a table of its
/// own holding the same vectors as arrays of numbers.
async fn hnsw(
    docs: &[NewDocument],
    query_vectors: &[Vec<f32>],
    exact: &[Vec<(kbq_store::vectors::VectorKey, f32)>],
    index: &Stats,
) {
    let embedder = HashingEmbedder::default();
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
    let build = common::insert_numbered(&db, "v", docs, |d, o| {
        o.insert(
            "e",
            embedder
                .embed_one(&d.embedding_text())
                .into_iter()
                .map(f64::from)
                .collect::<Vec<f64>>()
                .into_value(),
        );
    })
    .await;
    let pairs: Vec<_> = query_vectors.iter().zip(exact).take(300).collect();
    let (mut times, mut r) = (Vec::new(), 0.0);
    for (q, exact) in &pairs {
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
            .query(format!("SELECT VALUE n FROM v WHERE e <|{K}, 64|> $q"))
            .bind(vars)
            .await
            .unwrap();
        let found: Vec<i64> = resp.take(0).unwrap();
        times.push(t.elapsed());
        let found: Vec<String> = found.into_iter().map(|n| format!("d{n}")).collect();
        let exact: Vec<String> = exact.iter().map(|k| k.0.to_string()).collect();
        r += recall(&found, &exact);
    }
    let s = stats(times);
    println!(
        "\nSurrealDB HNSW `<|{K}, 64|>`, {} queries: {} (mean | p50 | p95 | p99), recall@{K} {:.4}, p50 {:.0}x `VectorIndex::search`'s. Writing the vectors through it: {:.1} s ({:.0} vectors/s); `VectorIndex::search` p50 {}.",
        pairs.len(),
        s.cells(),
        r / pairs.len() as f64,
        ratio(s.p50, index.p50),
        build.as_secs_f64(),
        docs.len() as f64 / build.as_secs_f64(),
        ms(index.p50)
    );
}
