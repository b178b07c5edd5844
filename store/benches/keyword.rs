//! Keyword search at scale: kbq's in-process BM25 index against SurrealDB's FULLTEXT indexes,
//! on one generated document set in one run, and what keeping those indexes costs a write.
//!
//! `cargo bench -p kbq-store --bench keyword` (release). Scale with BENCH_DOCUMENTS (default
//! 100000) and BENCH_QUERIES (default 300). SurrealDB's OR queries take seconds each on a large
//! table, so they run on the first BENCH_FT_DOCUMENTS documents (default 10000) and
//! BENCH_FT_QUERIES queries (default 20), with the in-process index measured on that same
//! subset for the ratio. Then six-word questions made from the documents (as `kbq load
//! --data` makes them, BENCH_QUESTIONS, default 2000), each asked once: of the generated set,
//! and of the import file in BENCH_DATA when set (`scripts/debian-kb`'s, say). Prints a
//! Markdown report.

#[allow(dead_code)] // each bench uses part of it
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Stats, env, stats};
use kbq_store::generate::{self, Rng, WORDS};
use kbq_store::import::{self, Silent};
use kbq_store::text::{Analysed, TextIndex, query_terms};
use kbq_store::{DocTags, HashingEmbedder, KnowledgeBase, NewDocument, StoreConfig};
use surrealdb::Surreal;
use surrealdb::engine::any::Any;
use surrealdb::types::{Object, SurrealValue};

const K: usize = 10;

fn row(name: &str, s: &Stats, base: Option<&Stats>) -> String {
    format!(
        "| {name} | {} | {} |\n",
        s.cells(),
        base.map_or("(baseline)".into(), |b| format!(
            "{:.1}x faster",
            b.mean.as_secs_f64() / s.mean.as_secs_f64()
        ))
    )
}

fn tags(d: &NewDocument) -> DocTags {
    DocTags {
        source: d.source.as_str().into(),
        content_type: d.content_type.as_str().into(),
        entity_name: d.entity_name.as_deref().map(Into::into),
        mentions: Box::default(),
    }
}

fn index_of(docs: &[NewDocument]) -> TextIndex {
    let mut index = TextIndex::new();
    for (i, d) in docs.iter().enumerate() {
        index.upsert(
            &format!("d{i}"),
            &Analysed::new(&d.title, &d.content),
            tags(d),
        );
    }
    index
}

fn time_index(index: &TextIndex, queries: &[String]) -> (Stats, Vec<Vec<String>>) {
    let keep = |_: &DocTags| true;
    for q in queries.iter().take(20) {
        index.search(&query_terms(q), K, &keep);
    }
    let mut times = Vec::new();
    let mut found = Vec::new();
    for q in queries {
        let t = Instant::now();
        let hits = index.search(&query_terms(q), K, &keep);
        times.push(t.elapsed());
        found.push(hits.into_iter().map(|(k, _)| k.to_string()).collect());
    }
    (stats(times), found)
}

/// A table of the documents with SurrealDB FULLTEXT indexes on title and content (or none),
/// written 100 rows per INSERT; returns the time the writes took.
async fn surreal_table(
    db: &Surreal<Any>,
    table: &str,
    docs: &[NewDocument],
    indexed: bool,
) -> Duration {
    let mut schema = format!(
        "DEFINE TABLE {table} SCHEMALESS; DEFINE ANALYZER IF NOT EXISTS kbq_text TOKENIZERS class FILTERS lowercase, ascii;"
    );
    if indexed {
        schema.push_str(&format!(
            "DEFINE INDEX {table}_title ON {table} FIELDS title FULLTEXT ANALYZER kbq_text BM25; DEFINE INDEX {table}_content ON {table} FIELDS content FULLTEXT ANALYZER kbq_text BM25;"
        ));
    }
    db.query(schema).await.unwrap().check().unwrap();
    common::insert_numbered(db, table, docs, |d, o| {
        o.insert("title", d.title.clone().into_value());
        o.insert("content", d.content.clone().into_value());
        o.insert("source", d.source.clone().into_value());
    })
    .await
}

/// Times `sql` (binding `$q`) for each query; returns the timings and each top-k as keys.
async fn time_surreal(
    db: &Surreal<Any>,
    sql: &str,
    queries: &[String],
) -> (Stats, Vec<Vec<String>>) {
    let mut times = Vec::new();
    let mut found = Vec::new();
    for q in queries {
        let mut vars = Object::new();
        vars.insert("q", q.clone().into_value());
        let t = Instant::now();
        let mut resp = db.query(sql).bind(vars).await.unwrap();
        let n: Vec<i64> = resp.take(0).unwrap();
        times.push(t.elapsed());
        found.push(n.into_iter().map(|n| format!("d{n}")).collect());
    }
    (stats(times), found)
}

/// Share of the queries naming an entity whose first result is that entity's document.
fn named_first(top: &[Vec<String>], named: &[Option<String>]) -> String {
    let (mut asked, mut first) = (0, 0);
    for (t, n) in top.iter().zip(named) {
        if let Some(n) = n {
            asked += 1;
            first += usize::from(t.first() == Some(n));
        }
    }
    if asked == 0 {
        return "n/a (no query named one)".into();
    }
    format!("{:.2} of {asked}", first as f64 / asked as f64)
}

/// Mean share of one top-k's keys the other has too.
fn overlap(a: &[Vec<String>], b: &[Vec<String>]) -> f64 {
    let n = a.len().min(b.len()).max(1);
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if y.is_empty() {
                return 1.0;
            }
            x.iter().filter(|k| y.contains(k)).count() as f64 / y.len() as f64
        })
        .sum::<f64>()
        / n as f64
}

/// The title and content of each document record of the import file at `path`.
fn documents_of_file(path: &str) -> Vec<(String, String)> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("BENCH_DATA {path}: {e}"));
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| {
            let v: serde_json::Value = serde_json::from_str(&line).ok()?;
            (v["kind"] == "document").then(|| {
                let text = |f: &str| v[f].as_str().unwrap_or_default().to_string();
                (text("title"), text("content"))
            })
        })
        .collect()
}

/// A row of the questions' table: `n` distinct six-word questions made from the contents of
/// `docs`, each asked once of their index, timed one at a time.
fn questions_row(set: &str, docs: &[(String, String)], n: usize) -> String {
    let mut index = TextIndex::new();
    for (i, (title, content)) in docs.iter().enumerate() {
        let tags = DocTags {
            source: "bench".into(),
            content_type: "text/plain".into(),
            entity_name: None,
            mentions: Box::default(),
        };
        index.upsert(&format!("d{i}"), &Analysed::new(title, content), tags);
    }
    let texts: Vec<String> = docs.iter().map(|d| d.1.clone()).collect();
    let questions = generate::queries_from(&texts, n, &mut Rng::new(11));
    let keep = |_: &DocTags| true;
    let (mut times, mut worst) = (Vec::new(), (Duration::ZERO, String::new()));
    for q in &questions {
        let terms = query_terms(q);
        let t = Instant::now();
        std::hint::black_box(index.search(&terms, K, &keep));
        let took = t.elapsed();
        times.push(took);
        if took > worst.0 {
            worst = (took, q.clone());
        }
    }
    let s = stats(times);
    format!(
        "| {set} | {} | {} | {} | {:.3} ms (\"{}\") |\n",
        docs.len(),
        questions.len(),
        s.cells(),
        worst.0.as_secs_f64() * 1e3,
        worst.1
    )
}

#[tokio::main]
async fn main() {
    let documents = env("BENCH_DOCUMENTS", 100_000);
    let queries = env("BENCH_QUERIES", 300);
    let ft_documents = env("BENCH_FT_DOCUMENTS", 10_000).min(documents);
    let ft_queries = env("BENCH_FT_QUERIES", 20).min(queries);

    let (records, docs) = common::generated_documents(documents);
    let mut rng = Rng::new(7);
    // Each query, and the key of the document about the entity it names, if it names one.
    let (query_texts, named): (Vec<String>, Vec<Option<String>>) = (0..queries)
        .map(|_| {
            let n = 1 + rng.below(3);
            let mut words: Vec<String> = (0..n)
                .map(|_| WORDS[rng.below(WORDS.len())].to_string())
                .collect();
            let mut named = None;
            if rng.below(2) == 0 {
                let i = rng.below(ft_documents);
                words.push(generate::entity_name(i));
                named = Some(format!("d{i}"));
            }
            (words.join(" "), named)
        })
        .unzip();

    let asked = env("BENCH_QUESTIONS", 2000);
    let mut question_rows = questions_row(
        "generated",
        &(docs.iter())
            .map(|d| (d.title.clone(), d.content.clone()))
            .collect::<Vec<_>>(),
        asked,
    );
    if let Ok(path) = std::env::var("BENCH_DATA") {
        question_rows.push_str(&questions_row(&path, &documents_of_file(&path), asked));
    }

    // The whole set: build the index, then search it alone and through the knowledge base.
    let started = Instant::now();
    let full = index_of(&docs);
    let build = started.elapsed();
    let (t_full, full_top) = time_index(&full, &query_texts);

    let kb = KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await;
    import::import_records(&kb, records.into_iter().enumerate().collect(), &Silent)
        .await
        .expect("import");
    for q in query_texts.iter().take(20) {
        kb.keyword_search(q, K).await.unwrap();
    }
    let mut t_kb = Vec::new();
    for q in &query_texts {
        let t = Instant::now();
        let hits = kb.keyword_search(q, K).await.unwrap();
        t_kb.push(t.elapsed());
        assert!(!hits.is_empty(), "no hit for {q}");
    }
    drop(kb);

    // The subset SurrealDB's FULLTEXT indexes can answer in the time.
    let subset = &docs[..ft_documents];
    let sub_queries = &query_texts[..ft_queries];
    let sub = index_of(subset);
    let (t_sub, kbq_top) = time_index(&sub, sub_queries);

    let db = surrealdb::engine::any::connect("mem://").await.unwrap();
    db.use_ns("bench").use_db("bench").await.unwrap();
    let plain_write = surreal_table(&db, "plain", subset, false).await;
    let ft_write = surreal_table(&db, "doc", subset, true).await;
    let (t_or2, or2_top) = time_surreal(
        &db,
        &format!(
            "SELECT VALUE n FROM (SELECT n, (search::score(1) ?? 0) + (search::score(2) ?? 0) AS score FROM doc WHERE title @1,OR@ $q OR content @2,OR@ $q ORDER BY score DESC LIMIT {K});"
        ),
        sub_queries,
    )
    .await;
    let (t_or1, _) = time_surreal(
        &db,
        &format!(
            "SELECT VALUE n FROM (SELECT n, search::score(1) AS score FROM doc WHERE content @1,OR@ $q ORDER BY score DESC LIMIT {K});"
        ),
        sub_queries,
    )
    .await;
    let (t_and1, _) = time_surreal(
        &db,
        &format!(
            "SELECT VALUE n FROM (SELECT n, search::score(1) AS score FROM doc WHERE content @1@ $q ORDER BY score DESC LIMIT {K});"
        ),
        sub_queries,
    )
    .await;

    println!(
        "{documents} generated documents (seed 42; a title naming the entity, content of 40 words from a vocabulary of {}), queries of 1-3 of those words, half with an entity name; top {K}. Embedded `mem://` SurrealDB 3.3.5, release build.\n",
        WORDS.len()
    );
    println!(
        "**On the first {ft_documents} documents, {ft_queries} queries** (SurrealDB's OR queries are too slow for more):\n"
    );
    println!("| search | mean | p50 | p95 | p99 | vs baseline |\n|---|---|---|---|---|---|");
    print!(
        "{}",
        row(
            "SurrealDB FULLTEXT, title OR content, any word (kbq's former query)",
            &t_or2,
            None
        )
    );
    print!(
        "{}",
        row(
            "SurrealDB FULLTEXT, content only, any word",
            &t_or1,
            Some(&t_or2)
        )
    );
    print!(
        "{}",
        row(
            "SurrealDB FULLTEXT, content only, every word (AND)",
            &t_and1,
            Some(&t_or2)
        )
    );
    print!(
        "{}",
        row(
            "`TextIndex::search`, title and content, any word",
            &t_sub,
            Some(&t_or2)
        )
    );
    let sub_named = &named[..ft_queries];
    println!(
        "\nQueries naming an entity whose first result is that entity's document: {} for `TextIndex`, {} for SurrealDB's title-or-content query. Top-{K} agreement of the two: {:.2} (both BM25, with different inverse document frequencies: most of these words are in most documents, where the two rank near-ties differently).\n",
        named_first(&kbq_top, sub_named),
        named_first(&or2_top, sub_named),
        overlap(&kbq_top, &or2_top)
    );
    println!("**On all {documents} documents, {queries} queries:**\n");
    println!("| search | mean | p50 | p95 | p99 |\n|---|---|---|---|---|");
    for (name, s) in [
        ("`TextIndex::search`", t_full),
        (
            "`KnowledgeBase::keyword_search` (search + fetch documents)",
            stats(t_kb),
        ),
    ] {
        println!("| {name} | {} |", s.cells());
    }
    println!(
        "\nQueries naming an entity whose first result is that entity's document: {}.",
        named_first(&full_top, &named)
    );
    println!(
        "Building the index of {documents} documents: {:.2} s ({:.0} documents/s, {} terms).",
        build.as_secs_f64(),
        documents as f64 / build.as_secs_f64(),
        full.terms()
    );
    println!(
        "Writing {ft_documents} documents (100 per INSERT) into SurrealDB: {:.2} s with the two FULLTEXT indexes, {:.2} s without ({:.1}x).",
        ft_write.as_secs_f64(),
        plain_write.as_secs_f64(),
        ft_write.as_secs_f64() / plain_write.as_secs_f64()
    );
    println!(
        "\n**Six-word questions made from the documents, each asked once** (`TextIndex::search`, top {K}):\n"
    );
    println!(
        "| documents of | documents | questions | mean | p50 | p95 | p99 | slowest (question) |\n|---|---|---|---|---|---|---|---|"
    );
    print!("{question_rows}");
}
