//! Helpers the store benchmarks share.

use std::time::Duration;

/// A numeric setting from the environment, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Summary of latency samples.
pub struct Stats {
    pub mean: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
}

pub fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let n = samples.len();
    let at = |q: usize| samples[(n * q / 100).min(n - 1)];
    Stats {
        mean: samples.iter().sum::<Duration>() / n as u32,
        p50: at(50),
        p95: at(95),
        p99: at(99),
    }
}

/// `n` generated documents (seed 42, one per entity, no relationships): the records to
/// import, and the documents alone.
pub fn generated_documents(n: usize) -> (Vec<kbq_store::Record>, Vec<kbq_store::NewDocument>) {
    let records = kbq_store::generate::generate(kbq_store::generate::Spec {
        entities: n,
        relationships: 0,
        document_ratio: 1.0,
        seed: 42,
    });
    let docs = documents_of(&records);
    (records, docs)
}

/// The documents among `records`.
pub fn documents_of(records: &[kbq_store::Record]) -> Vec<kbq_store::NewDocument> {
    records
        .iter()
        .filter_map(|r| match r {
            kbq_store::Record::Document(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// The records of the import file at `path` (BENCH_DATA), each with its line number; a
/// line that does not parse stops the benchmark.
pub fn records_of_file(path: &str) -> Vec<(usize, kbq_store::Record)> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("BENCH_DATA {path}: {e}"));
    let parsed = kbq_store::import::parse(std::io::BufReader::new(file));
    assert!(
        parsed.failures.is_empty(),
        "BENCH_DATA {path}: {:?}",
        parsed.failures.first()
    );
    parsed.records
}

/// Writes `items` into `table`, 100 rows per INSERT, each row numbered `n` (its index) and
/// given its other fields by `fields`. Returns how long the writes took.
pub async fn insert_numbered<T>(
    db: &surrealdb::Surreal<surrealdb::engine::any::Any>,
    table: &str,
    items: &[T],
    fields: impl Fn(&T, &mut surrealdb::types::Object),
) -> Duration {
    use surrealdb::types::{Object, SurrealValue, Value};
    let started = std::time::Instant::now();
    for (c, chunk) in items.chunks(100).enumerate() {
        let rows: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let mut o = Object::new();
                o.insert("n", ((c * 100 + i) as i64).into_value());
                fields(item, &mut o);
                Value::Object(o)
            })
            .collect();
        let mut vars = Object::new();
        vars.insert("rows", rows.into_value());
        db.query(format!("INSERT INTO {table} $rows RETURN NONE"))
            .bind(vars)
            .await
            .unwrap()
            .check()
            .unwrap();
    }
    started.elapsed()
}

/// A duration in milliseconds, for the reports.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

impl Stats {
    /// Mean, p50, p95 and p99 as Markdown table cells.
    pub fn cells(&self) -> String {
        format!(
            "{} | {} | {} | {}",
            ms(self.mean),
            ms(self.p50),
            ms(self.p95),
            ms(self.p99)
        )
    }
}
