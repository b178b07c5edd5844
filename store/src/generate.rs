//! A seeded synthetic knowledge base in the import format: power-law degrees, several types,
//! cycles, and generated document text. Used by benchmarks and tests.

use serde_json::json;

use crate::model::{NewDocument, NewEntity, NewRelationship, Record};

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub entities: usize,
    pub relationships: usize,
    /// Documents per entity, as a fraction (0.0 to 1.0).
    pub document_ratio: f64,
    pub seed: u64,
}

pub const ENTITY_TYPES: [&str; 5] = ["person", "organization", "concept", "place", "product"];
pub const RELATIONSHIP_TYPES: [&str; 6] = [
    "works_at",
    "knows",
    "part_of",
    "located_in",
    "uses",
    "cites",
];
/// The vocabulary of generated document text.
pub const WORDS: [&str; 24] = [
    "graph", "vector", "search", "memory", "agent", "query", "index", "actor", "store", "model",
    "signal", "entropy", "lattice", "kernel", "packet", "thread", "cache", "ledger", "sensor",
    "compiler", "theorem", "protocol", "matrix", "ontology",
];

/// The name of generated entity `i`.
pub fn entity_name(i: usize) -> String {
    format!("Entity {i:06}")
}

/// xorshift64*: small, fast, and the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Generates entities, then relationships, then documents.
pub fn generate(spec: Spec) -> Vec<Record> {
    let n = spec.entities.max(2);
    let mut rng = Rng::new(spec.seed);
    let mut out = Vec::with_capacity(n + spec.relationships + n);
    for i in 0..n {
        out.push(Record::Entity(NewEntity {
            name: entity_name(i),
            entity_type: ENTITY_TYPES[i % ENTITY_TYPES.len()].into(),
            properties: json!({"rank": i}).as_object().cloned().unwrap_or_default(),
        }));
    }
    let mut seen = std::collections::HashSet::with_capacity(spec.relationships);
    let mut made = 0;
    let mut tries = 0;
    while made < spec.relationships && tries < spec.relationships * 20 {
        tries += 1;
        let src = rng.below(n);
        // Targets skew towards low indices: a few hubs and a long tail.
        let dst = ((n as f64) * rng.unit().powf(3.0)) as usize % n;
        let ty = RELATIONSHIP_TYPES[rng.below(RELATIONSHIP_TYPES.len())];
        if src == dst || !seen.insert((src, dst, ty)) {
            continue;
        }
        made += 1;
        out.push(Record::Relationship(NewRelationship {
            source_name: entity_name(src),
            target_name: entity_name(dst),
            relationship_type: ty.into(),
            properties: Default::default(),
        }));
    }
    for i in 0..n {
        if rng.unit() >= spec.document_ratio {
            continue;
        }
        let words: Vec<&str> = (0..40).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        out.push(Record::Document(NewDocument {
            title: format!("About {}", entity_name(i)),
            content: format!(
                "{} is a {}. {}.",
                entity_name(i),
                ENTITY_TYPES[i % ENTITY_TYPES.len()],
                words.join(" ")
            ),
            source: "generated".into(),
            source_id: format!("doc-{i:06}"),
            content_type: "text/plain".into(),
            url: None,
            entity_name: Some(entity_name(i)),
            mentions: Vec::new(),
        }));
    }
    out
}

/// Words in a query made from a document.
pub const QUERY_WORDS: usize = 6;

/// Up to `n` distinct queries of [`QUERY_WORDS`] words, each a run of words at a random place
/// in a document drawn at random from `texts`; a shorter document gives all its words.
pub fn queries_from(texts: &[String], n: usize, rng: &mut Rng) -> Vec<String> {
    let texts: Vec<Vec<&str>> = (texts.iter())
        .map(|t| t.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    if texts.is_empty() {
        return out;
    }
    // Small knowledge bases have fewer distinct runs than asked for: stop after as many
    // draws again as found nothing new.
    let mut misses = 0;
    while out.len() < n && misses <= n.max(1000) {
        let words = &texts[rng.below(texts.len())];
        let start = rng.below(words.len().saturating_sub(QUERY_WORDS) + 1);
        let query = words[start..(start + QUERY_WORDS).min(words.len())].join(" ");
        if seen.insert(query.clone()) {
            out.push(query);
        } else {
            misses += 1;
        }
    }
    out
}
