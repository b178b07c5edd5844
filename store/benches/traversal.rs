//! Graph traversal through the in-memory index vs the SurrealDB query path, on one generated
//! graph in one run, plus the import that builds it, with a traversal every millisecond on
//! another thread meanwhile: how long one waits while the import writes the index.
//!
//! `cargo bench -p kbq-store --bench traversal` (release). Scale with BENCH_ENTITIES and
//! BENCH_RELATIONSHIPS (defaults 100000 and 300000), or give BENCH_DATA, an import file
//! (`scripts/debian-kb`'s, say), to walk its graph instead; the starts are 2,000 of its
//! entities drawn at random, hubs and leaves as they come. Prints a Markdown report.

#[allow(dead_code)] // each bench uses part of it
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{env, stats};
use kbq_store::generate::{self, Rng, Spec};
use kbq_store::import::{self, Phase, Progress};
use kbq_store::{Direction, HashingEmbedder, KnowledgeBase, Record, StoreConfig, TraversalQuery};

struct Timer(parking_lot::Mutex<Vec<(Phase, Instant, u64)>>);

impl Progress for Timer {
    fn start(&self, phase: Phase, total: u64) {
        self.0.lock().push((phase, Instant::now(), total));
    }
    fn advance(&self, _: u64) {}
}

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main]
async fn main() {
    let entities = env("BENCH_ENTITIES", 100_000);
    let relationships = env("BENCH_RELATIONSHIPS", 300_000);
    let kb = Arc::new(
        KnowledgeBase::open(StoreConfig::memory(), Arc::new(HashingEmbedder::default())).await,
    );

    let data = std::env::var("BENCH_DATA").ok();
    let records: Vec<(usize, Record)> = match &data {
        Some(path) => common::records_of_file(path),
        None => generate::generate(Spec {
            entities,
            relationships,
            document_ratio: 1.0,
            seed: 42,
        })
        .into_iter()
        .enumerate()
        .collect(),
    };
    let names: Vec<String> = records
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Entity(e) => Some(e.name.clone()),
            _ => None,
        })
        .collect();
    let relationships_read = records
        .iter()
        .filter(|(_, r)| matches!(r, Record::Relationship(_)))
        .count();
    let (entities, relationships) = (names.len(), relationships_read);
    let probe_start = names.first().cloned().expect("an entity to walk from");
    let timer = Timer(parking_lot::Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let probe = std::thread::spawn({
        let (kb, done) = (kb.clone(), done.clone());
        move || probe_traversals(&kb, &probe_start, &done)
    });
    let started = Instant::now();
    let report = import::import_records(&kb, records, &timer)
        .await
        .expect("import");
    let import_total = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let waits = probe.join().expect("probe");
    assert!(report.failures.is_empty());
    let phases = timer.0.into_inner();
    let mut phase_rows = String::new();
    for (i, (phase, at, total)) in phases.iter().enumerate() {
        let end = phases.get(i + 1).map_or(started + import_total, |p| p.1);
        let secs = (end - *at).as_secs_f64();
        let during: Vec<Duration> = waits
            .iter()
            .filter(|(t, _)| (*at..end).contains(t))
            .map(|(_, wait)| *wait)
            .collect();
        let (p99, max) = match during.iter().max() {
            Some(&max) => (us(stats(during).p99), us(max)),
            None => ("-".into(), "-".into()),
        };
        phase_rows.push_str(&format!(
            "| {phase:?} | {total} | {secs:.1} s | {:.0} records/s | {p99} | {max} |\n",
            *total as f64 / secs.max(1e-9)
        ));
    }

    let mut rng = Rng::new(7);
    let starts: Vec<String> = (0..2000)
        .map(|_| names[rng.below(entities)].clone())
        .collect();
    let mut rows = String::new();
    for (depth, limit, db_samples) in [(2u32, 50usize, 300usize), (5, 200, 60)] {
        let query = |start: &str| TraversalQuery {
            start: start.to_string(),
            relationship_types: None,
            direction: Direction::Both,
            depth,
            limit,
        };
        // Warm up both paths.
        for s in starts.iter().take(50) {
            kb.traverse(&query(s)).await.unwrap();
            kb.traverse_in_db(&query(s)).await.unwrap();
        }
        // Both index measurements see the same warm caches.
        for s in &starts {
            std::hint::black_box(kb.traverse_indexed(&query(s)));
        }
        let mut bare = Vec::with_capacity(starts.len());
        for s in &starts {
            let q = query(s);
            let t = Instant::now();
            let walk = kb.traverse_indexed(&q).unwrap();
            bare.push(t.elapsed());
            std::hint::black_box(walk);
        }
        let mut fast = Vec::with_capacity(starts.len());
        let mut found = 0usize;
        let mut slowest = (Duration::ZERO, "");
        for s in &starts {
            let t = Instant::now();
            let walk = kb.traverse(&query(s)).await.unwrap();
            let took = t.elapsed();
            fast.push(took);
            slowest = slowest.max((took, s.as_str()));
            found += walk.entities.len();
        }
        let mut slow = Vec::with_capacity(db_samples);
        for s in starts.iter().take(db_samples) {
            let t = Instant::now();
            let walk = kb.traverse_in_db(&query(s)).await.unwrap();
            slow.push(t.elapsed());
            assert_eq!(
                walk,
                kb.traverse(&query(s)).await.unwrap(),
                "paths disagree"
            );
        }
        let (b, f, s) = (stats(bare), stats(fast), stats(slow));
        rows.push_str(&format!(
            "| depth {depth} / limit {limit} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {:.0}x | {:.1} |\n",
            us(b.p50),
            us(f.p50),
            us(f.p99),
            us(f.mean),
            us(slowest.0),
            slowest.1,
            us(s.p50),
            us(s.p99),
            us(s.mean),
            s.mean.as_secs_f64() / f.mean.as_secs_f64(),
            found as f64 / starts.len() as f64,
        ));
    }

    println!("## Graph traversal: in-memory index vs SurrealDB path\n");
    let graph = match &data {
        Some(path) => format!("The graph of {path}"),
        None => "Generated graph (seed 42)".to_string(),
    };
    println!(
        "{graph}: {entities} entities, {relationships} relationships, {} documents, embedded `mem://` SurrealDB 3.3.5, release build, direction both.\n",
        report.documents
    );
    println!(
        "| query | bare walk p50 | index p50 | index p99 | index mean | index slowest (its start) | SurrealDB p50 | SurrealDB p99 | SurrealDB mean | speed-up (mean) | entities per answer |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    print!("{rows}");
    println!("\n### Import of the same graph\n");
    println!("Total: {:.1} s.\n", import_total.as_secs_f64());
    println!(
        "A traversal (depth 1) every millisecond on another thread meanwhile: p99 and longest time each took, waiting for the index's write lock included.\n"
    );
    println!(
        "| phase | records | time | rate | traversal p99 | longest traversal |\n|---|---|---|---|---|---|"
    );
    print!("{phase_rows}");
}

/// Traverses from `start` (the first entity) every millisecond until `done`: when each
/// started and how long it took.
fn probe_traversals(
    kb: &KnowledgeBase,
    start: &str,
    done: &AtomicBool,
) -> Vec<(Instant, Duration)> {
    let query = TraversalQuery {
        start: start.to_string(),
        relationship_types: None,
        direction: Direction::Both,
        depth: 1,
        limit: 10,
    };
    let mut waits = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let at = Instant::now();
        std::hint::black_box(kb.traverse_indexed(&query));
        waits.push((at, at.elapsed()));
        std::thread::sleep(Duration::from_millis(1));
    }
    waits
}
