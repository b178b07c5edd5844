//! Entity name search from the [`NameIndex`](kbq_store::names::NameIndex) vs the scan of every
//! name ([`GraphIndex::search_scan`]), query by query in one run, on two name sets: `kbq gen`'s
//! and one of another shape (dotted package paths with long shared prefixes, phrases of a few
//! very common words, a long tail of Unicode), so the result does not rest on the generator.
//! No database: the graphs are built in memory. Each query is timed three times on each path
//! and its shortest time counts. Every index answer is checked against the scan's.
//!
//! `cargo bench -p kbq-store --bench names` (release). Scale with BENCH_ENTITIES (default
//! 100000) and BENCH_QUERIES (queries per length class, default 300). Prints a Markdown report.

#[allow(dead_code)] // each bench uses part of it
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::env;
use kbq_store::generate::{self, Rng, Spec};
use kbq_store::names::NameIndex;
use kbq_store::{Entity, GraphIndex, Record};

/// The answer size of `kbq load`'s searches.
const LIMIT: usize = 10;

/// New entities per batch write: the rows of one INSERT statement of the write path
/// (`INSERT_ROWS` in store/src/write.rs).
const CHUNK: usize = 100;

/// New entities per hold of the graph index's write lock in the write path (`LOCK_BATCH` in
/// store/src/write.rs).
const LOCK_BATCH: usize = 16;

/// Timings per query and path; the shortest counts.
const RUNS: usize = 3;

/// Query length classes, in characters.
const CLASSES: [(&str, usize, usize); 5] = [
    ("1", 1, 1),
    ("2", 2, 2),
    ("3", 3, 3),
    ("4-8", 4, 8),
    ("9+", 9, 24),
];

fn entity(name: String, ty: &str) -> Entity {
    Entity {
        id: String::new(),
        name,
        entity_type: ty.to_string(),
        properties: Default::default(),
    }
}

fn generated(n: usize) -> Vec<Entity> {
    generate::generate(Spec {
        entities: n,
        relationships: 0,
        document_ratio: 0.0,
        seed: 42,
    })
    .into_iter()
    .filter_map(|r| match r {
        Record::Entity(e) => Some(e.into_entity()),
        _ => None,
    })
    .collect()
}

/// Names of another shape than `kbq gen`'s.
fn other_shape(n: usize) -> Vec<Entity> {
    const ORGS: [&str; 6] = [
        "org.apache",
        "com.google",
        "io.netty",
        "org.eclipse",
        "net.sf",
        "dev.kbq",
    ];
    const PARTS: [&str; 12] = [
        "commons",
        "lang3",
        "util",
        "concurrent",
        "http",
        "codec",
        "collections",
        "io",
        "core",
        "internal",
        "text",
        "json",
    ];
    const WORDS: [&str; 16] = [
        "the", "of", "and", "data", "Graph", "Memory", "Signal", "river", "North", "Index",
        "Agent", "Query", "Lattice", "Kernel", "Cache", "Ledger",
    ];
    const UNICODE: [&str; 16] = [
        "Zürich",
        "Straße",
        "Ærø",
        "Ελλάδα",
        "Москва",
        "北京",
        "大学",
        "東京",
        "ソフト",
        "한국",
        "café",
        "ÉCOLE",
        "naïve",
        "İzmir",
        "😀",
        "ﬁnance",
    ];
    let mut rng = Rng::new(11);
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut pick = |list: &[&'static str]| list[rng.below(list.len())];
        let name = match out.len() % 10 {
            0..=3 => format!(
                "{}.{}.{}.{}{}",
                pick(&ORGS),
                pick(&PARTS),
                pick(&PARTS),
                pick(&WORDS),
                out.len() % 997
            ),
            4..=6 => format!(
                "{} {} {} {}",
                pick(&WORDS),
                pick(&WORDS),
                pick(&WORDS),
                out.len() % 1009
            ),
            _ => format!("{} {}{}", pick(&UNICODE), pick(&UNICODE), out.len() % 1013),
        };
        // Types drawn apart from the shapes, so a type filter keeps a fifth of each.
        let ty = generate::ENTITY_TYPES[rng.below(generate::ENTITY_TYPES.len())];
        if seen.insert(name.clone()) {
            out.push(entity(name, ty));
        }
    }
    out
}

/// Queries of `min..=max` characters: four in five a piece of a name in a random case, one in
/// five random characters of the set's names (mostly misses at 3 characters and more).
fn queries(names: &[String], (min, max): (usize, usize), count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let chars: Vec<char> = names[rng.below(names.len())].chars().collect();
        let len = min + rng.below(max - min + 1);
        let q: String = if rng.below(5) == 0 {
            (0..len)
                .map(|_| {
                    let other: Vec<char> = names[rng.below(names.len())].chars().collect();
                    other[rng.below(other.len())]
                })
                .collect()
        } else {
            if chars.len() < len {
                continue;
            }
            let start = rng.below(chars.len() - len + 1);
            chars[start..start + len]
                .iter()
                .map(|c| match rng.below(3) {
                    0 => c.to_uppercase().collect::<String>(),
                    _ => c.to_lowercase().collect(),
                })
                .collect()
        };
        out.push(q);
    }
    out
}

/// The shortest of [`RUNS`] timings of `f`, and its answer: the machine is shared, and a
/// query preempted once says nothing about the query.
fn best_of<T>(f: impl Fn() -> T) -> (Duration, T) {
    let mut best = None;
    for _ in 0..RUNS {
        let started = Instant::now();
        let answer = f();
        let took = started.elapsed();
        if best.as_ref().is_none_or(|(b, _)| took < *b) {
            best = Some((took, answer));
        }
    }
    best.expect("RUNS > 0")
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// p50, p99 and max of `samples`.
fn spread(mut samples: Vec<Duration>) -> [Duration; 3] {
    samples.sort();
    let at = |q: usize| samples[(samples.len() * q / 100).min(samples.len() - 1)];
    [at(50), at(99), samples[samples.len() - 1]]
}

fn report(set: &str, entities: Vec<Entity>, per_class: usize) {
    let names: Vec<String> = entities.iter().map(|e| e.name.clone()).collect();
    let started = Instant::now();
    let graph = GraphIndex::build(entities, Vec::new());
    let graph_build = started.elapsed();
    let started = Instant::now();
    let names_only = NameIndex::build(names.iter().map(|n| n.as_str().into()).collect());
    let name_build = started.elapsed();
    let index = graph.name_index();
    println!("\n### {set}: {} names\n", names.len());
    println!(
        "Name index build: {:.1} ms (whole graph index build: {:.1} ms); {} posting entries, about {:.1} MB.\n",
        name_build.as_secs_f64() * 1e3,
        graph_build.as_secs_f64() * 1e3,
        index.postings(),
        index.heap_bytes() as f64 / 1e6
    );
    drop(names_only);

    println!(
        "| query chars | queries | index p50 µs | index p99 µs | index max µs | scan p50 µs | scan p99 µs | scan max µs | p99 scan/index | index slower than scan | worst index query |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rng = Rng::new(5);
    let rows = CLASSES
        .iter()
        .map(|&(label, min, max)| (label.to_string(), min, max, false))
        .chain([("4-8, entity_type".to_string(), 4, 8, true)]);
    for (seed, (label, min, max, typed)) in rows.enumerate() {
        let qs = queries(&names, (min, max), per_class, seed as u64 + 1);
        let (mut index_t, mut scan_t, mut slower) = (Vec::new(), Vec::new(), 0);
        let mut worst = (Duration::ZERO, String::new());
        for q in &qs {
            let ty = typed.then(|| generate::ENTITY_TYPES[rng.below(5)]);
            let (took, hits) = best_of(|| graph.search(q, ty, LIMIT));
            let (scan, want) = best_of(|| graph.search_scan(q, ty, LIMIT));
            assert_eq!(hits, want, "{q:?}");
            if took > worst.0 {
                worst = (took, q.clone());
            }
            slower += usize::from(took > scan);
            index_t.push(took);
            scan_t.push(scan);
        }
        let [ip50, ip99, imax] = spread(index_t);
        let [sp50, sp99, smax] = spread(scan_t);
        println!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {:.0}x | {slower} | `{}` ({} µs) |",
            qs.len(),
            us(ip50),
            us(ip99),
            us(imax),
            us(sp50),
            us(sp99),
            us(smax),
            sp99.as_secs_f64() / ip99.as_secs_f64().max(1e-9),
            worst.1,
            us(worst.0),
        );
    }

    // Writes: new names one at a time and in batches of the sizes the write path uses, in no
    // particular order and in name order, each time followed by their removal (which
    // renumbers nodes).
    let mut graph = graph;
    let mut added: Vec<Entity> = (0..10_000)
        .map(|i| format!("{} {i}", names[(i * 7919) % names.len()]))
        .filter(|n| !graph.contains(n))
        .map(|n| entity(n, "concept"))
        .collect();
    println!(
        "\nWrites of {} new names to the graph index, name index included: µs per new entity, and the longest write (one call, as long as the write lock is held).\n",
        added.len()
    );
    println!("| names | batch | µs per new entity | longest write µs | µs per removal |");
    println!("|---|---|---|---|---|");
    for order in ["in no order", "in name order"] {
        if order == "in name order" {
            added.sort_by(|a, b| a.name.cmp(&b.name));
        }
        for batch in [1, LOCK_BATCH, CHUNK] {
            let (mut total, mut longest) = (Duration::ZERO, Duration::ZERO);
            for chunk in added.chunks(batch) {
                let chunk = chunk.to_vec();
                let started = Instant::now();
                graph.upsert_entities(chunk);
                let took = started.elapsed();
                total += took;
                longest = longest.max(took);
            }
            let started = Instant::now();
            for e in &added {
                graph.remove_entity(&e.name);
            }
            let removal = started.elapsed();
            let per = |d: Duration| us(d / added.len() as u32);
            println!(
                "| {order} | {batch} | {} | {} | {} |",
                per(total),
                us(longest),
                per(removal)
            );
        }
    }
}

fn main() {
    let n = env("BENCH_ENTITIES", 100_000);
    let per_class = env("BENCH_QUERIES", 300);
    println!(
        "## Name search: index vs scan, limit {LIMIT}, one query at a time (best of {RUNS} runs each)"
    );
    report("`kbq gen` names", generated(n), per_class);
    report("names of another shape", other_shape(n), per_class);
}
