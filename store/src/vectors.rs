//! The in-process vector index: every document's embedding, held in memory and searched there.
//!
//! SurrealDB keeps the vectors (as little-endian `f32` bytes, the source of truth); this index
//! is rebuilt from them at start and kept current on every write, as the graph index is.
//! SurrealDB's own HNSW index is not used: writing through it cost more than half of an import
//! and its answers were neither fast nor exact enough (docs/benchmarks.md).
//!
//! Search is a scan of 8-bit codes of the unit vectors (a quarter of the memory traffic of
//! `f32`), whose best candidates are then scored exactly in `f32`. With several times `k`
//! candidates the result is, in practice, the exact top `k` (recall is measured by the
//! `vectors` benchmark against [`VectorIndex::search_exact`]).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// A document's key in the index: its record key (see `model::keys::document`).
pub type VectorKey = Arc<str>;

/// What searches may filter a document on, kept beside its vector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocTags {
    pub source: Arc<str>,
    pub content_type: Arc<str>,
    pub entity_name: Option<Arc<str>>,
}

/// One shared copy of each string (tag values repeat across documents).
#[derive(Debug, Clone, Default)]
pub(crate) struct Interner(rustc_hash::FxHashSet<Arc<str>>);

impl Interner {
    pub(crate) fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.0.get(s) {
            return found.clone();
        }
        let s: Arc<str> = Arc::from(s);
        self.0.insert(s.clone());
        s
    }

    /// Keeps only the strings `keep` accepts.
    pub(crate) fn retain(&mut self, keep: impl FnMut(&Arc<str>) -> bool) {
        self.0.retain(keep);
    }
}

/// Candidates scored exactly per result asked for, and at least this many in all.
const RERANK_FACTOR: usize = 4;
const RERANK_MIN: usize = 40;

#[derive(Debug, Clone)]
pub struct VectorIndex {
    dimension: usize,
    keys: Vec<VectorKey>,
    tags: Vec<DocTags>,
    slots: FxHashMap<VectorKey, u32>,
    /// One copy of each tag value.
    strings: Interner,
    /// Unit vectors, `dimension` per slot.
    vectors: Vec<f32>,
    /// The same vectors as 8-bit codes: component / scale, rounded.
    codes: Vec<i8>,
    /// Per slot: the largest absolute component / 127.
    scales: Vec<f32>,
}

impl VectorIndex {
    pub fn new(dimension: usize) -> Self {
        VectorIndex {
            dimension,
            keys: Vec::new(),
            tags: Vec::new(),
            slots: FxHashMap::default(),
            strings: Interner::default(),
            vectors: Vec::new(),
            codes: Vec::new(),
            scales: Vec::new(),
        }
    }

    pub fn dimension(&self) -> usize {
        self.dimension
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Adds or replaces the vector of `key`. A vector of another dimension is ignored (the
    /// store never writes one: the embedder's dimension is fixed per store).
    pub fn upsert(&mut self, key: &str, vector: &[f32], tags: DocTags) {
        if vector.len() != self.dimension {
            return;
        }
        let tags = DocTags {
            source: self.strings.intern(&tags.source),
            content_type: self.strings.intern(&tags.content_type),
            entity_name: tags.entity_name.map(|n| self.strings.intern(&n)),
        };
        let unit = unit(vector);
        let (codes, scale) = quantise(&unit);
        let d = self.dimension;
        match self.slots.get(key) {
            Some(&slot) => {
                let at = slot as usize * d;
                self.vectors[at..at + d].copy_from_slice(&unit);
                self.codes[at..at + d].copy_from_slice(&codes);
                self.scales[slot as usize] = scale;
                self.tags[slot as usize] = tags;
            }
            None => {
                let key: VectorKey = Arc::from(key);
                self.slots.insert(key.clone(), self.keys.len() as u32);
                self.keys.push(key);
                self.tags.push(tags);
                self.vectors.extend_from_slice(&unit);
                self.codes.extend_from_slice(&codes);
                self.scales.push(scale);
            }
        }
    }

    /// Removes the vector of `key`, if present.
    pub fn remove(&mut self, key: &str) {
        let Some(slot) = self.slots.remove(key) else {
            return;
        };
        let slot = slot as usize;
        let last = self.keys.len() - 1;
        let d = self.dimension;
        if slot != last {
            self.vectors.copy_within(last * d..(last + 1) * d, slot * d);
            self.codes.copy_within(last * d..(last + 1) * d, slot * d);
            self.scales[slot] = self.scales[last];
            self.keys.swap(slot, last);
            self.tags.swap(slot, last);
            self.slots.insert(self.keys[slot].clone(), slot as u32);
        }
        self.keys.pop();
        self.tags.pop();
        self.vectors.truncate(last * d);
        self.codes.truncate(last * d);
        self.scales.pop();
    }

    /// Sets the entity tag of `key`, if present.
    pub fn set_entity(&mut self, key: &str, entity_name: Option<&str>) {
        let entity_name = entity_name.map(|n| self.strings.intern(n));
        if let Some(&slot) = self.slots.get(key) {
            self.tags[slot as usize].entity_name = entity_name;
        }
    }

    /// The tags of `key`.
    pub fn tags(&self, key: &str) -> Option<&DocTags> {
        Some(&self.tags[*self.slots.get(key)? as usize])
    }

    /// The stored unit vector of `key`.
    pub fn get(&self, key: &str) -> Option<&[f32]> {
        let slot = *self.slots.get(key)? as usize;
        Some(&self.vectors[slot * self.dimension..(slot + 1) * self.dimension])
    }

    /// Cosine similarity between `key`'s vector and `query`.
    pub fn similarity(&self, key: &str, query: &[f32]) -> Option<f32> {
        if query.len() != self.dimension {
            return None;
        }
        Some(dot(self.get(key)?, &unit(query)))
    }

    /// The `k` keys whose vectors are nearest to `query` by cosine similarity, nearest first,
    /// among those `keep` accepts.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        keep: &dyn Fn(&DocTags) -> bool,
    ) -> Vec<(VectorKey, f32)> {
        if k == 0 || query.len() != self.dimension || self.is_empty() {
            return Vec::new();
        }
        let q = unit(query);
        let (qcodes, _) = quantise(&q);
        let pool = (k * RERANK_FACTOR).max(RERANK_MIN);
        let candidates = CodeScan {
            codes: &self.codes,
            scales: &self.scales,
            query: &qcodes,
            dimension: self.dimension,
            pool,
            keep: &|slot| keep(&self.tags[slot]),
        }
        .run();
        let mut scored: Vec<(usize, f32)> = candidates
            .into_iter()
            .map(|slot| (slot, dot(self.slot(slot), &q)))
            .collect();
        self.best(&mut scored, k)
    }

    /// The exact answer to [`search`](Self::search): every vector scored in `f32`.
    pub fn search_exact(
        &self,
        query: &[f32],
        k: usize,
        keep: &dyn Fn(&DocTags) -> bool,
    ) -> Vec<(VectorKey, f32)> {
        if k == 0 || query.len() != self.dimension {
            return Vec::new();
        }
        let q = unit(query);
        let mut top = TopK::new(k);
        for slot in 0..self.len() {
            let s = dot(self.slot(slot), &q);
            if top.admits(s) && keep(&self.tags[slot]) {
                top.push(s, slot);
            }
        }
        let mut scored: Vec<(usize, f32)> = top.into_vec();
        self.best(&mut scored, k)
    }

    fn slot(&self, slot: usize) -> &[f32] {
        &self.vectors[slot * self.dimension..(slot + 1) * self.dimension]
    }

    /// Sorts by score, best first, ties by key, and keeps `k`.
    fn best(&self, scored: &mut [(usize, f32)], k: usize) -> Vec<(VectorKey, f32)> {
        scored.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| self.keys[a.0].cmp(&self.keys[b.0]))
        });
        scored
            .iter()
            .take(k)
            .map(|&(slot, s)| (self.keys[slot].clone(), s))
            .collect()
    }
}

/// `v` scaled to length 1 (the zero vector stays zero).
fn unit(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter().map(|x| x / norm).collect()
    } else {
        vec![0.0; v.len()]
    }
}

fn quantise(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        return (vec![0; v.len()], 0.0);
    }
    let scale = max / 127.0;
    (
        v.iter()
            .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
            .collect(),
        scale,
    )
}

/// Dot product with eight independent sums, which the compiler turns into vector code.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, ra) = a.as_chunks::<8>();
    let (cb, rb) = b.as_chunks::<8>();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// A scan of the 8-bit codes for the slots of the `pool` best approximate scores among those
/// `keep` accepts.
struct CodeScan<'a> {
    codes: &'a [i8],
    scales: &'a [f32],
    query: &'a [i8],
    dimension: usize,
    pool: usize,
    keep: &'a dyn Fn(usize) -> bool,
}

impl CodeScan<'_> {
    /// The scan, in AVX2 code where the CPU has it.
    fn run(&self) -> Vec<usize> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { self.run_avx2() };
            }
        }
        self.run_portable()
    }

    /// [`run_portable`](Self::run_portable), compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn run_avx2(&self) -> Vec<usize> {
        self.run_portable()
    }

    #[inline(always)]
    fn run_portable(&self) -> Vec<usize> {
        let mut top = TopK::new(self.pool);
        for (slot, row) in self.codes.chunks_exact(self.dimension).enumerate() {
            let s = dot_i8(row, self.query) as f32 * self.scales[slot];
            if top.admits(s) && (self.keep)(slot) {
                top.push(s, slot);
            }
        }
        top.into_vec().into_iter().map(|(slot, _)| slot).collect()
    }
}

/// The `k` best (score, slot) pairs seen.
struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

/// Ordered so that the heap's top is the worst kept score.
struct Worst(f32, usize);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    fn admits(&self, score: f32) -> bool {
        self.heap.len() < self.k || self.heap.peek().is_some_and(|w| score > w.0)
    }

    fn push(&mut self, score: f32, slot: usize) {
        self.heap.push(Worst(score, slot));
        if self.heap.len() > self.k {
            self.heap.pop();
        }
    }

    fn into_vec(self) -> Vec<(usize, f32)> {
        self.heap.into_iter().map(|w| (w.1, w.0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Rng;

    fn tags(source: &str) -> DocTags {
        DocTags {
            source: source.into(),
            content_type: "text/plain".into(),
            entity_name: None,
        }
    }

    fn random(rng: &mut Rng, d: usize) -> Vec<f32> {
        (0..d).map(|_| rng.unit() as f32 - 0.5).collect()
    }

    #[test]
    fn search_finds_what_the_exact_scan_finds() {
        let mut rng = Rng::new(7);
        let mut index = VectorIndex::new(64);
        for i in 0..2000 {
            index.upsert(&format!("d{i}"), &random(&mut rng, 64), tags("s"));
        }
        let mut agree = 0;
        for _ in 0..50 {
            let q = random(&mut rng, 64);
            let fast = index.search(&q, 10, &|_| true);
            let exact = index.search_exact(&q, 10, &|_| true);
            assert_eq!(fast.len(), 10);
            assert!(fast.windows(2).all(|w| w[0].1 >= w[1].1));
            agree += fast
                .iter()
                .filter(|(k, _)| exact.iter().any(|(e, _)| e == k))
                .count();
        }
        assert!(agree >= 490, "recall {agree}/500");
    }

    #[test]
    fn upsert_replaces_and_remove_keeps_the_rest_findable() {
        let mut index = VectorIndex::new(4);
        index.upsert("a", &[1.0, 0.0, 0.0, 0.0], tags("s"));
        index.upsert("b", &[0.0, 1.0, 0.0, 0.0], tags("s"));
        index.upsert("c", &[0.0, 0.0, 1.0, 0.0], tags("s"));
        index.upsert("a", &[0.0, 0.0, 0.0, 2.0], tags("s"));
        assert_eq!(index.len(), 3);
        assert_eq!(index.get("a"), Some(&[0.0, 0.0, 0.0, 1.0][..]));
        index.remove("a");
        index.remove("a");
        assert_eq!(index.len(), 2);
        let hit = index.search(&[0.0, 0.0, 3.0, 0.0], 1, &|_| true);
        assert_eq!(&*hit[0].0, "c");
        assert!((hit[0].1 - 1.0).abs() < 1e-6);
        assert_eq!(index.similarity("b", &[0.0, 5.0, 0.0, 0.0]), Some(1.0));
        index.upsert("c", &[0.0, 0.0, 1.0, 0.0], tags("other"));
        assert_eq!(&*index.tags("c").unwrap().source, "other");
        let filtered = index.search(&[0.0, 0.0, 3.0, 0.0], 5, &|t| &*t.source == "s");
        assert_eq!(filtered.len(), 1);
        assert_eq!(&*filtered[0].0, "b");
    }

    #[test]
    fn wrong_dimensions_and_empty_indexes_answer_nothing() {
        let mut index = VectorIndex::new(3);
        assert!(index.search(&[1.0, 0.0, 0.0], 5, &|_| true).is_empty());
        index.upsert("x", &[1.0, 0.0], tags("s"));
        assert!(index.is_empty());
        index.upsert("x", &[0.0, 0.0, 0.0], tags("s"));
        assert_eq!(index.search(&[1.0, 0.0], 5, &|_| true), vec![]);
        assert_eq!(index.search(&[1.0, 0.0, 0.0], 5, &|_| true).len(), 1);
    }
}
