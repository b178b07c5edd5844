//! The in-process vector index: every document's embedding, held in memory and searched there.
//!
//! SurrealDB keeps the vectors (as little-endian `f32` bytes, the source of truth); this index
//! is rebuilt from them at start and kept current on every write, as the graph index is.
//! SurrealDB's own HNSW index is not used: writing through it cost more than half of an import
//! and its answers were neither fast nor exact enough (docs/benchmarks.md).
//!
//! Search scans 8-bit codes of the unit vectors (a quarter of the memory traffic of `f32`),
//! then scores the best candidates exactly in `f32`. With several times `k` candidates the
//! result is, in practice, the exact top `k`. A small index scans every code; from
//! [`IVF_MIN_VECTORS`] on, an inverted file (`ivf`: about `sqrt(n)` k-means lists) limits
//! the scan to the lists nearest the query, so a search reads a few percent of the codes.
//! Recall is measured by the `vectors` benchmark against [`VectorIndex::search_exact`] and
//! held by a test; a filter that passes too few of the probed vectors falls back to the full
//! scan, so that it never returns fewer hits than there are. The codes are kept flat, in slot
//! order, and from the inverted file on a second time in its lists (a full scan then reads
//! every list). Graph documents read the flat codes by slot: they bound each linked
//! document's similarity, so that only the few that can be kept are scored in `f32`
//! ([`VectorIndex::similarity_bounds`]).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::heap;
use crate::hint::{fetched_ahead, prefetch, prefetch_lines};
use crate::numbers::EntityNumbers;

use ivf::{Ivf, Kernel, LISTS_AHEAD, List};

mod ivf;

/// A document's key in the index: its record key (see `model::keys::document`).
pub type VectorKey = Arc<str>;

/// What searches may filter a document on, kept beside its vector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocTags {
    pub source: Arc<str>,
    pub content_type: Arc<str>,
    pub entity_name: Option<Arc<str>>,
    /// The other entities the document is linked to (`Document::mentions`).
    pub mentions: Box<[Arc<str>]>,
}

impl DocTags {
    /// The tags of `document`.
    pub fn of(document: &crate::Document) -> DocTags {
        DocTags {
            source: document.source.as_str().into(),
            content_type: document.content_type.as_str().into(),
            entity_name: document.entity_name.as_deref().map(Into::into),
            mentions: document
                .mentions
                .iter()
                .map(|m| m.as_str().into())
                .collect(),
        }
    }

    /// Every entity the document is linked to: its entity, then its mentions.
    pub fn entities(&self) -> impl Iterator<Item = &Arc<str>> {
        self.entity_name.iter().chain(self.mentions.iter())
    }

    /// Whether the document is linked to `name`: by its entity or a mention.
    pub fn links(&self, name: &str) -> bool {
        self.entities().any(|e| &**e == name)
    }

    /// The same tags with each string `intern`ed.
    pub(crate) fn interned(self, strings: &mut Interner) -> DocTags {
        DocTags {
            source: strings.intern(&self.source),
            content_type: strings.intern(&self.content_type),
            entity_name: self.entity_name.map(|n| strings.intern(&n)),
            mentions: self.mentions.iter().map(|m| strings.intern(m)).collect(),
        }
    }

    /// Pointers to every string of the tags (for dropping the strings no tag uses).
    pub(crate) fn strings(&self) -> impl Iterator<Item = *const u8> + '_ {
        [Some(self.source.as_ptr()), Some(self.content_type.as_ptr())]
            .into_iter()
            .chain([self.entity_name.as_ref().map(|n| n.as_ptr())])
            .flatten()
            .chain(self.mentions.iter().map(|m| m.as_ptr()))
    }
}

/// Documents found by entity at one [`generation`](VectorIndex) of the index (see
/// [`VectorIndex::linked`]).
#[derive(Debug, Clone)]
pub struct Linked {
    generation: u64,
    /// (slot, the entity's place in the names asked for)
    slots: Vec<(u32, u32)>,
}

impl Linked {
    /// For each document, in order: its entity's place in the names asked for.
    pub fn places(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.slots.iter().map(|&(_, i)| i as usize)
    }
}

/// A value no index has had as its generation before.
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One shared copy of each string (tag values repeat across documents).
#[derive(Debug, Clone, Default)]
pub(crate) struct Interner(rustc_hash::FxHashSet<Arc<str>>);

impl Interner {
    pub(crate) fn heap_bytes(&self) -> usize {
        heap::set(&self.0) + self.0.iter().map(|s| heap::arc_str(s)).sum::<usize>()
    }

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

/// Indexes of fewer vectors scan every code: below this, the scan takes well under a
/// millisecond and an inverted file would cost recall for nothing.
pub const IVF_MIN_VECTORS: usize = 4096;

/// Lists probed per search, as a share of the lists (and at least [`MIN_PROBES`]): chosen by
/// the `vectors` benchmark's sweep for recall@10 >= 0.95 on generated documents.
const PROBE_DIVISOR: usize = 8;
const MIN_PROBES: usize = 16;

#[derive(Debug, Clone)]
pub struct VectorIndex {
    dimension: usize,
    keys: Vec<VectorKey>,
    tags: Vec<DocTags>,
    slots: FxHashMap<VectorKey, u32>,
    /// The entity numbering this index shares with the graph index (see [`EntityNumbers`]).
    numbers: EntityNumbers,
    /// By entity number: the slots of the documents linked to the entity, so that a
    /// graph-documents request finds its documents' vectors by entity, without a lookup per
    /// document key or entity name.
    by_entity: Vec<EntitySlots>,
    /// Changes at every write, to a value no index has had before: a [`Linked`] taken at one
    /// generation is still exact while the index is at it.
    generation: u64,
    /// One copy of each tag value.
    strings: Interner,
    /// Unit vectors, `dimension` per slot.
    vectors: Vec<f32>,
    /// The same vectors as 8-bit codes, in slot order: component / scale, rounded. An
    /// inverted file's lists hold a second copy, by list.
    codes: Vec<i8>,
    /// Per slot: the largest absolute component / 127.
    scales: Vec<f32>,
    /// Per slot: the length of the difference between the unit vector and its codes times
    /// its scale, which bounds how far the codes' similarity to a unit query is from the
    /// vector's (see [`similarity_bounds`](Self::similarity_bounds)).
    errors: Vec<f32>,
    /// The inverted file, once the index holds [`IVF_MIN_VECTORS`]; trained again each time
    /// the index doubles.
    ivf: Option<Ivf>,
    /// Vectors from which the inverted file is used and kept.
    ivf_min: usize,
    /// Lists probed per search; `None`: derived from the number of lists.
    probes: Option<usize>,
    /// While set, upserts train no inverted file (see [`for_bulk_load`](Self::for_bulk_load)).
    deferred: bool,
}

impl VectorIndex {
    pub fn new(dimension: usize) -> Self {
        VectorIndex {
            dimension,
            keys: Vec::new(),
            tags: Vec::new(),
            slots: FxHashMap::default(),
            numbers: EntityNumbers::default(),
            by_entity: Vec::new(),
            generation: next_generation(),
            strings: Interner::default(),
            vectors: Vec::new(),
            codes: Vec::new(),
            scales: Vec::new(),
            errors: Vec::new(),
            ivf: None,
            ivf_min: IVF_MIN_VECTORS,
            probes: None,
            deferred: false,
        }
    }

    /// This empty index, numbering entities in `numbers` (shared with a graph index, so that
    /// [`linked`](Self::linked) takes the numbers of its walks).
    pub fn with_numbers(self, numbers: EntityNumbers) -> Self {
        assert!(
            self.is_empty(),
            "an index takes a numbering before any vector"
        );
        VectorIndex { numbers, ..self }
    }

    /// The entity numbering this index files documents under.
    pub fn numbers(&self) -> &EntityNumbers {
        &self.numbers
    }

    /// An empty index that trains no inverted file until [`train`](Self::train): for
    /// loading many vectors at once, trained once at the end rather than at each doubling.
    pub fn for_bulk_load(dimension: usize) -> Self {
        VectorIndex {
            deferred: true,
            ..Self::new(dimension)
        }
    }

    /// Trains the inverted file on the vectors held now, if there are enough of them, and
    /// ends [`for_bulk_load`](Self::for_bulk_load)'s deferral. The per-slot arrays, grown by
    /// doubling during the load, are cut to their length first.
    pub fn train(&mut self) {
        self.deferred = false;
        self.ivf = None;
        self.keys.shrink_to_fit();
        self.tags.shrink_to_fit();
        self.vectors.shrink_to_fit();
        self.codes.shrink_to_fit();
        self.scales.shrink_to_fit();
        self.errors.shrink_to_fit();
        self.maybe_train();
    }

    /// Sets the lists probed per search (`None`: the default, a share of the lists). More
    /// probes, better recall, slower searches; for measurements.
    pub fn set_probes(&mut self, probes: Option<usize>) {
        self.probes = probes;
    }

    /// The inverted file's number of lists (0 while the index scans every code).
    pub fn lists(&self) -> usize {
        self.ivf.as_ref().map_or(0, Ivf::lists)
    }

    /// Lists probed per search by the current inverted file.
    pub fn probes(&self) -> usize {
        let lists = self.lists();
        self.probes
            .unwrap_or((lists / PROBE_DIVISOR).max(MIN_PROBES))
            .min(lists)
    }

    /// Trains the inverted file when the index first reaches `ivf_min` vectors, and again
    /// each time it has doubled since, so that there stay about `sqrt(n)` lists.
    fn maybe_train(&mut self) {
        let n = self.len();
        if self.deferred || n < self.ivf_min {
            return;
        }
        if self
            .ivf
            .as_ref()
            .is_some_and(|ivf| n < 2 * ivf.trained_on())
        {
            return;
        }
        let lists = (n as f64).sqrt().round() as usize;
        self.ivf = Some(Ivf::train(&self.vectors, self.dimension, lists));
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
        let tags = tags.interned(&mut self.strings);
        let unit = unit(vector);
        let (codes, scale) = quantise(&unit);
        let error = code_error(&unit, &codes, scale);
        let d = self.dimension;
        self.generation = next_generation();
        match self.slots.get(key) {
            Some(&slot) => {
                let at = slot as usize * d;
                self.vectors[at..at + d].copy_from_slice(&unit);
                self.codes[at..at + d].copy_from_slice(&codes);
                self.scales[slot as usize] = scale;
                self.errors[slot as usize] = error;
                self.relink(slot, tags.entity_name.clone());
                self.remention(slot, tags.mentions.clone());
                self.tags[slot as usize] = tags;
                if let Some(ivf) = &mut self.ivf {
                    ivf.take_out(slot as usize);
                    ivf.add(slot as usize, &unit, &codes, scale);
                }
            }
            None => {
                let slot = self.keys.len();
                let key: VectorKey = Arc::from(key);
                self.slots.insert(key.clone(), slot as u32);
                self.keys.push(key);
                for entity in tags.entities() {
                    self.slots_of_entity(entity).push(slot as u32);
                }
                self.tags.push(tags);
                self.vectors.extend_from_slice(&unit);
                self.codes.extend_from_slice(&codes);
                self.scales.push(scale);
                self.errors.push(error);
                if let Some(ivf) = &mut self.ivf {
                    ivf.add(slot, &unit, &codes, scale);
                }
                self.maybe_train();
            }
        }
    }

    /// Removes the vector of `key`, if present.
    pub fn remove(&mut self, key: &str) {
        let Some(slot) = self.slots.remove(key) else {
            return;
        };
        self.generation = next_generation();
        self.relink(slot, None);
        self.remention(slot, Box::default());
        let slot = slot as usize;
        let last = self.keys.len() - 1;
        let d = self.dimension;
        if slot != last {
            // The last slot moves to `slot`: so do its places in the by-entity lists.
            for entity in self.tags[last].entities() {
                if let Some(n) = self.numbers.get(entity)
                    && let Some(at) = self.by_entity[n as usize]
                        .iter_mut()
                        .find(|s| **s as usize == last)
                {
                    *at = slot as u32;
                }
            }
        }
        if let Some(ivf) = &mut self.ivf {
            ivf.take_out(slot);
            ivf.moved(last, slot);
        }
        if slot != last {
            self.vectors.copy_within(last * d..(last + 1) * d, slot * d);
            self.codes.copy_within(last * d..(last + 1) * d, slot * d);
            self.scales[slot] = self.scales[last];
            self.errors[slot] = self.errors[last];
            self.keys.swap(slot, last);
            self.tags.swap(slot, last);
            self.slots.insert(self.keys[slot].clone(), slot as u32);
        }
        self.keys.pop();
        self.tags.pop();
        self.vectors.truncate(last * d);
        self.codes.truncate(last * d);
        self.scales.pop();
        self.errors.pop();
    }

    /// Sets the entity tag of `key`, if present.
    pub fn set_entity(&mut self, key: &str, entity_name: Option<&str>) {
        let entity_name = entity_name.map(|n| self.strings.intern(n));
        if let Some(&slot) = self.slots.get(key) {
            self.generation = next_generation();
            self.relink(slot, entity_name.clone());
            self.tags[slot as usize].entity_name = entity_name;
        }
    }

    /// Moves `slot` from the by-entity list of its current entity to that of `entity`.
    fn relink(&mut self, slot: u32, entity: Option<Arc<str>>) {
        let old = self.tags[slot as usize].entity_name.clone();
        if old == entity {
            return;
        }
        if let Some(old) = old {
            self.unlink_slot(&old, slot);
        }
        if let Some(entity) = entity {
            self.slots_of_entity(&entity).push(slot);
        }
    }

    /// Sets the mentions of `slot`, moving it between the by-entity lists to match (the tags
    /// themselves are the caller's to set).
    fn remention(&mut self, slot: u32, mentions: Box<[Arc<str>]>) {
        let old = std::mem::take(&mut self.tags[slot as usize].mentions);
        if old == mentions {
            self.tags[slot as usize].mentions = old;
            return;
        }
        for m in old.iter() {
            self.unlink_slot(m, slot);
        }
        for m in mentions.iter() {
            self.slots_of_entity(m).push(slot);
        }
        self.tags[slot as usize].mentions = mentions;
    }

    /// Drops the mention of the entity `name` from the document `key`, if it has it (the
    /// entity was deleted).
    pub fn unmention(&mut self, key: &str, name: &str) {
        if let Some(&slot) = self.slots.get(key) {
            let tags = &self.tags[slot as usize];
            if tags.mentions.iter().any(|m| &**m == name) {
                self.generation = next_generation();
                let kept = tags
                    .mentions
                    .iter()
                    .filter(|m| &***m != name)
                    .cloned()
                    .collect();
                self.remention(slot, kept);
            }
        }
    }

    /// Takes one link of `slot` out of the by-entity list of `entity` (a document linked to
    /// an entity twice, as its entity and a mention, is listed twice).
    fn unlink_slot(&mut self, entity: &str, slot: u32) {
        if let Some(n) = self.numbers.get(entity) {
            let of = &mut self.by_entity[n as usize];
            if let Some(at) = of.iter().position(|s| *s == slot) {
                of.swap_remove(at);
            }
            if of.is_empty() {
                // Gives back a list that had spilled to the heap.
                *of = EntitySlots::new();
            }
        }
    }

    /// The by-entity list of `entity`, numbering it if it is new.
    fn slots_of_entity(&mut self, entity: &str) -> &mut EntitySlots {
        let (n, _) = self.numbers.number(entity);
        let n = n as usize;
        if n >= self.by_entity.len() {
            self.by_entity.resize_with(n + 1, EntitySlots::new);
        }
        &mut self.by_entity[n]
    }

    /// The slots of the documents linked to each of the entities `names`, with the entity's
    /// place in it; `None` when there are none. Good for
    /// [`similarities_of`](Self::similarities_of) while the index stays at this generation.
    ///
    /// `numbered` is the same entities' numbers and the id of their numbering (a graph
    /// index's walk gives both): when it is this index's numbering, the lists are found by
    /// number, with no name read; else by name.
    pub fn linked(&self, names: &[&str], numbered: Option<(u64, &[u32])>) -> Option<Linked> {
        let mut slots = Vec::new();
        let mut add = |i: usize, n: u32| {
            if let Some(of) = self.by_entity.get(n as usize) {
                slots.extend(of.iter().map(|&slot| (slot, i as u32)));
            }
        };
        match numbered {
            Some((numbering, numbers)) if numbering == self.numbers.id() => {
                debug_assert_eq!(numbers.len(), names.len());
                // The lists of a walk's entities are scattered: fetched a few ahead.
                let fetch = |&n: &u32| {
                    if let Some(list) = self.by_entity.get(n as usize) {
                        prefetch(list);
                    }
                };
                for (i, &n) in fetched_ahead(numbers, PREFETCH_AHEAD, fetch).enumerate() {
                    add(i, n);
                }
            }
            _ => {
                for (i, n) in self.numbers.get_all(names).into_iter().enumerate() {
                    if let Some(n) = n {
                        add(i, n);
                    }
                }
            }
        }
        // A document linked to several of the names counts once, at the first of them (the
        // closest: a walk's names come in order of depth).
        slots.sort_unstable();
        slots.dedup_by_key(|&mut (slot, _)| slot);
        (!slots.is_empty()).then_some(Linked {
            generation: self.generation,
            slots,
        })
    }

    /// The similarity to `query` of the documents of `linked` at `picks` (places in its
    /// order), in that order: what [`similarities`](Self::similarities) gives for their keys.
    /// `None` when the index has changed since `linked` was taken, or `query` is of another
    /// dimension.
    ///
    /// No key is read or cloned here: a hub's walk links hundreds of documents and keeps ten,
    /// and cloning a shared key is an atomic write to memory both cores read. The kept ones'
    /// keys come from [`keys_of`](Self::keys_of).
    pub fn similarities_of(
        &self,
        linked: &Linked,
        picks: &[usize],
        query: &[f32],
    ) -> Option<Vec<f32>> {
        if !self.fits(linked, query) {
            return None;
        }
        let q = unit(query);
        let slots: Vec<u32> = picks.iter().map(|&n| linked.slots[n].0).collect();
        // The slots are scattered over the index, so each one's vector is a run of cache
        // misses: they are fetched a few slots ahead, so that the misses overlap.
        let fetch = |&slot: &u32| self.prefetch(slot as usize);
        Some(
            fetched_ahead(&slots, PREFETCH_AHEAD, fetch)
                .map(|&slot| dot(self.slot(slot as usize), &q))
                .collect(),
        )
    }

    /// Whether `linked` was taken at this generation of the index and `query` is of its
    /// dimension.
    fn fits(&self, linked: &Linked, query: &[f32]) -> bool {
        linked.generation == self.generation && query.len() == self.dimension
    }

    /// For each document of `linked`, in its order, a range that holds the similarity to
    /// `query` that [`similarities_of`](Self::similarities_of) gives: from its 8-bit codes, a
    /// quarter of the memory of its vector, widened by its quantisation error. `None` as for
    /// `similarities_of`.
    ///
    /// For unit `q` and `v` with codes `c` and scale `s`, `|q.v - q.(s c)| <= |v - s c|`
    /// (Cauchy-Schwarz), the slot's error; a slack covers the rounding of the two `f32` sums
    /// (each off by at most about `dimension` x 2^-24 for unit vectors).
    /// A hub's documents are bounded this way and only those whose bound reaches the kept
    /// ones are scored in `f32` (`kbq_store::related`).
    pub fn similarity_bounds(&self, linked: &Linked, query: &[f32]) -> Option<Vec<(f32, f32)>> {
        if !self.fits(linked, query) {
            return None;
        }
        let q = unit(query);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return Some(unsafe { self.bounds_avx2(&linked.slots, &q) });
            }
        }
        Some(self.bounds(&linked.slots, &q))
    }

    /// [`bounds`](Self::bounds), compiled for AVX2 (a code to `f32` is one instruction per
    /// eight, several without).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn bounds_avx2(&self, slots: &[(u32, u32)], unit_query: &[f32]) -> Vec<(f32, f32)> {
        self.bounds(slots, unit_query)
    }

    /// For each of `slots`, a range that holds its vector's similarity to `unit_query`. A
    /// plain loop, not [`fetched_ahead`]'s iterator: what `bounds_avx2` compiles must be
    /// inlined into it, and an iterator's `collect` is not.
    #[inline(always)]
    fn bounds(&self, slots: &[(u32, u32)], unit_query: &[f32]) -> Vec<(f32, f32)> {
        let d = self.dimension;
        let slack = (2 * d + 16) as f32 * f32::EPSILON;
        let mut out = Vec::with_capacity(slots.len());
        for n in 0..slots.len() + PREFETCH_AHEAD {
            // Each slot's codes, scale and error are three scattered reads: fetched ahead.
            if let Some(&(ahead, _)) = slots.get(n) {
                let ahead = ahead as usize;
                prefetch_lines(&self.codes[ahead * d..(ahead + 1) * d]);
                prefetch(&self.scales[ahead]);
                prefetch(&self.errors[ahead]);
            }
            let Some(&(slot, _)) = n.checked_sub(PREFETCH_AHEAD).and_then(|m| slots.get(m)) else {
                continue;
            };
            let slot = slot as usize;
            let codes = &self.codes[slot * d..(slot + 1) * d];
            let approx = dot(codes, unit_query) * self.scales[slot];
            let margin = self.errors[slot] * (1.0 + 1e-3) + slack;
            out.push((approx - margin, approx + margin));
        }
        out
    }

    /// The keys of the documents of `linked` at `picks` (places in its order), in that order;
    /// `None` when the index has changed since `linked` was taken.
    pub fn keys_of(&self, linked: &Linked, picks: &[usize]) -> Option<Vec<VectorKey>> {
        (linked.generation == self.generation).then(|| {
            picks
                .iter()
                .map(|&n| self.keys[linked.slots[n].0 as usize].clone())
                .collect()
        })
    }

    /// Asks the processor to fetch `slot`'s vector into its caches.
    #[inline(always)]
    fn prefetch(&self, slot: usize) {
        prefetch_lines(self.slot(slot));
    }

    /// Approximate heap bytes: the vectors, their codes, scales and errors, the keys and
    /// tags, and the inverted file.
    pub fn heap_bytes(&self) -> usize {
        let keys: usize = self.keys.iter().map(|k| heap::arc_str(k)).sum();
        heap::vec(&self.keys)
            + keys
            + heap::vec(&self.tags)
            + self
                .tags
                .iter()
                .map(|t| t.mentions.len() * size_of::<Arc<str>>())
                .sum::<usize>()
            + heap::map(&self.slots)
            + heap::vec(&self.by_entity)
            + self
                .by_entity
                .iter()
                .filter(|s| s.spilled())
                .map(|s| s.capacity() * size_of::<u32>())
                .sum::<usize>()
            + self.strings.heap_bytes()
            + self.numbers.heap_bytes()
            + heap::vec(&self.vectors)
            + heap::vec(&self.codes)
            + heap::vec(&self.scales)
            + heap::vec(&self.errors)
            + self.ivf.as_ref().map_or(0, Ivf::heap_bytes)
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
        self.similarities(&[key], query).pop().flatten()
    }

    /// [`similarity`](Self::similarity) of each of `keys` to one `query`, which is scaled
    /// to length 1 once rather than per key.
    pub fn similarities<K: AsRef<str>>(&self, keys: &[K], query: &[f32]) -> Vec<Option<f32>> {
        if query.len() != self.dimension {
            return vec![None; keys.len()];
        }
        let q = unit(query);
        keys.iter()
            .map(|k| Some(dot(self.get(k.as_ref())?, &q)))
            .collect()
    }

    /// The `k` keys whose vectors are nearest to `query` by cosine similarity, nearest first,
    /// among those `keep` accepts: from the inverted file's nearest lists when the index has
    /// one, else (or when `keep` passes too few of those lists' vectors) from every code.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        keep: &dyn Fn(&DocTags) -> bool,
    ) -> Vec<(VectorKey, f32)> {
        self.search_with(query, k, Some(keep))
    }

    /// About how many bytes of codes [`search`](Self::search) reads for `query`
    /// (`filtered`: with a `keep` that may turn vectors away), so that a caller can tell a
    /// search that costs an answer's worth of work from one that costs a scan. With an
    /// inverted file a search reads the probed lists' share of the index, and of each code
    /// only the query's components that are not zero (see `List`); without one, or when a
    /// filter may send it to the full scan, it reads every code.
    pub fn search_reads(&self, query: &[f32], filtered: bool) -> usize {
        match self.live_ivf() {
            Some(ivf) if !filtered => {
                let components = query.iter().filter(|&&x| x != 0.0).count();
                let probed = self.len() * self.probes() / ivf.lists().max(1);
                probed * components
            }
            _ => self.len() * self.dimension,
        }
    }

    /// The inverted file, when a search uses it: trained, and the index holds at least
    /// `ivf_min` vectors.
    fn live_ivf(&self) -> Option<&Ivf> {
        self.ivf.as_ref().filter(|_| self.len() >= self.ivf_min)
    }

    /// [`search`](Self::search) among every document. The same answer as a `keep` that
    /// accepts all, without reading each candidate's tags (a cache miss per vector scanned).
    pub fn search_all(&self, query: &[f32], k: usize) -> Vec<(VectorKey, f32)> {
        self.search_with(query, k, None)
    }

    fn search_with(
        &self,
        query: &[f32],
        k: usize,
        keep: Option<&dyn Fn(&DocTags) -> bool>,
    ) -> Vec<(VectorKey, f32)> {
        let Some((q, pool)) = self.prepare(query, k) else {
            return Vec::new();
        };
        if let Some(ivf) = self.live_ivf() {
            let lists = ivf.probe(&q, self.probes());
            let scan = self.code_scan(&q, pool, keep, Some(&lists));
            let (candidates, examined, passed) = scan.run();
            // A filter that passes few vectors has its nearest ones spread over lists not
            // probed: only the full scan finds them all.
            if passed >= pool && 2 * passed >= examined {
                return self.rerank(candidates, &q, k);
            }
        }
        self.full_scan(&q, pool, k, keep)
    }

    /// [`search`](Self::search) by a scan of every code, without the inverted file.
    pub fn search_scan(
        &self,
        query: &[f32],
        k: usize,
        keep: &dyn Fn(&DocTags) -> bool,
    ) -> Vec<(VectorKey, f32)> {
        match self.prepare(query, k) {
            Some((q, pool)) => self.full_scan(&q, pool, k, Some(keep)),
            None => Vec::new(),
        }
    }

    /// The unit query and the candidate pool for a search of `k`, or `None` when it has no
    /// answer (`k` = 0, a query of another dimension, an empty index).
    fn prepare(&self, query: &[f32], k: usize) -> Option<(Vec<f32>, usize)> {
        (k > 0 && query.len() == self.dimension && !self.is_empty())
            .then(|| (unit(query), (k * RERANK_FACTOR).max(RERANK_MIN)))
    }

    /// The scan of every code for `unit_query`, re-scored: the best `k`.
    fn full_scan(
        &self,
        unit_query: &[f32],
        pool: usize,
        k: usize,
        keep: Option<&dyn Fn(&DocTags) -> bool>,
    ) -> Vec<(VectorKey, f32)> {
        // With an inverted file every code is in its lists: scanning all of them is the same
        // scan (the kept candidates do not depend on the order slots are met in, see TopK).
        let all = self.ivf.as_ref().map(Ivf::all_lists);
        let (candidates, _, _) = self.code_scan(unit_query, pool, keep, all.as_deref()).run();
        self.rerank(candidates, unit_query, k)
    }

    /// The scan of the 8-bit codes of `lists` (`None`: every slot) for `unit_query`.
    fn code_scan<'a>(
        &'a self,
        unit_query: &[f32],
        pool: usize,
        keep: Option<&'a dyn Fn(&DocTags) -> bool>,
        lists: Option<&'a [&'a List]>,
    ) -> CodeScan<'a> {
        CodeScan {
            codes: &self.codes,
            scales: &self.scales,
            query: quantise(unit_query).0,
            dimension: self.dimension,
            pool,
            tags: &self.tags,
            keep,
            lists,
        }
    }

    /// `candidates` scored exactly against `q`: the best `k`.
    fn rerank(&self, candidates: Vec<usize>, q: &[f32], k: usize) -> Vec<(VectorKey, f32)> {
        // The candidates' vectors are scattered over the index: fetched a few ahead.
        let fetch = |&slot: &usize| self.prefetch(slot);
        let mut scored: Vec<(usize, f32)> = fetched_ahead(&candidates, PREFETCH_AHEAD, fetch)
            .map(|&slot| (slot, dot(self.slot(slot), q)))
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
            if top.admits(s, slot) && keep(&self.tags[slot]) {
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

/// `v`'s 8-bit codes and their scale: each component / scale, rounded.
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

/// The length of `v - scale * codes`, rounded up a little (computed in `f64`).
fn code_error(v: &[f32], codes: &[i8], scale: f32) -> f32 {
    let squares: f64 = v
        .iter()
        .zip(codes)
        .map(|(&x, &c)| (f64::from(x) - f64::from(scale) * f64::from(c)).powi(2))
        .sum();
    (squares.sqrt() * (1.0 + 1e-6)) as f32
}

/// The slots of one entity's documents: most entities have one or two, held inline, so that
/// finding them reads no more memory than the list's entry.
type EntitySlots = smallvec::SmallVec<[u32; 2]>;

/// Slots fetched ahead by [`VectorIndex::similarities_of`] and the loops like it.
const PREFETCH_AHEAD: usize = 4;

/// Dot product with eight independent sums, which the compiler turns into vector code: of
/// two vectors, or of 8-bit codes (`T = i8`, each widened to `f32`) and a vector.
#[inline(always)]
fn dot<T: Copy>(a: &[T], b: &[f32]) -> f32
where
    f32: From<T>,
{
    let mut acc = [0f32; 8];
    let (ca, ra) = a.as_chunks::<8>();
    let (cb, rb) = b.as_chunks::<8>();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            acc[i] += f32::from(x[i]) * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(&x, y)| f32::from(x) * y).sum();
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
    query: Vec<i8>,
    dimension: usize,
    pool: usize,
    tags: &'a [DocTags],
    /// `None`: every document.
    keep: Option<&'a dyn Fn(&DocTags) -> bool>,
    /// The lists to scan, with their own codes; `None`: every slot, from `codes`.
    lists: Option<&'a [&'a List]>,
}

/// What a [`CodeScan`] found: the candidate slots, the slots it examined and, of those
/// (counted for lists only), how many `keep` passed.
type Scanned = (Vec<usize>, usize, usize);

impl CodeScan<'_> {
    #[inline(always)]
    fn keeps(&self, slot: usize) -> bool {
        self.keep.is_none_or(|keep| keep(&self.tags[slot]))
    }

    /// The scan, in AVX2 code where the CPU has it.
    fn run(&self) -> Scanned {
        #[cfg(target_arch = "x86_64")]
        {
            if Kernel::detect() == Kernel::Avx2 {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { self.run_avx2() };
            }
        }
        self.run_with(Kernel::Portable)
    }

    /// [`run_with`](Self::run_with) AVX2's kernel, compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn run_avx2(&self) -> Scanned {
        self.run_with(Kernel::Avx2)
    }

    #[inline(always)]
    fn run_with(&self, kernel: Kernel) -> Scanned {
        let mut top = TopK::new(self.pool);
        let d = self.dimension;
        let (mut examined, mut passed) = (0, 0);
        match self.lists {
            None => {
                // Scoring first: most slots fail the heap's bound and never meet `keep`.
                for (slot, row) in self.codes.chunks_exact(d).enumerate() {
                    let s = dot_i8(row, &self.query) as f32 * self.scales[slot];
                    if top.admits(s, slot) && self.keeps(slot) {
                        top.push(s, slot);
                    }
                }
                examined = self.scales.len();
            }
            Some(lists) => {
                // The lists are read by component (see `List`): only the query's components
                // that are not zero.
                let query: Vec<(usize, i16)> = self
                    .query
                    .iter()
                    .enumerate()
                    .filter(|&(_, &q)| q != 0)
                    .map(|(j, &q)| (j, i16::from(q)))
                    .collect();
                let mut sums = Vec::new();
                for list in lists.iter().take(LISTS_AHEAD) {
                    list.fetch_runs(&query);
                }
                for (i, list) in lists.iter().enumerate() {
                    if let Some(ahead) = lists.get(i + LISTS_AHEAD) {
                        ahead.fetch_runs(&query);
                    }
                    list.dots(&query, &mut sums, kernel);
                    if self.keep.is_none() {
                        examined += list.slots.len();
                        passed += list.slots.len();
                        top.offer_scaled(&list.slots, &sums, &list.scales);
                        continue;
                    }
                    for ((&slot, &dot), &scale) in list.slots.iter().zip(&sums).zip(&list.scales) {
                        let slot = slot as usize;
                        examined += 1;
                        // `keep` before the bound: the search needs its pass rate to trust
                        // the lists.
                        if !self.keeps(slot) {
                            continue;
                        }
                        passed += 1;
                        let s = dot as f32 * scale;
                        if top.admits(s, slot) {
                            top.push(s, slot);
                        }
                    }
                }
            }
        }
        let slots = top.into_vec().into_iter().map(|(slot, _)| slot).collect();
        (slots, examined, passed)
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

    /// Whether `score` of `slot` would be kept: better than the worst kept, or as good and
    /// of a lower slot. The kept pairs are then the best by score, then slot, whatever order
    /// the slots are offered in (a scan in slot order keeps what it kept before: a later slot
    /// never wins a tie).
    fn admits(&self, score: f32, slot: usize) -> bool {
        self.heap.len() < self.k
            || self
                .heap
                .peek()
                .is_some_and(|w| score > w.0 || (score == w.0 && slot < w.1))
    }

    /// The score below which [`admits`](Self::admits) turns every slot away: the worst kept
    /// score once `k` are kept, minus infinity before.
    fn bar(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.heap.peek().map_or(f32::INFINITY, |w| w.0)
        }
    }

    /// Offers each of `slots` with its score, `dots` x `scales` (by place): keeps the same
    /// pairs as [`admits`](Self::admits) then [`push`](Self::push) for each in turn.
    ///
    /// Most slots of a scan fall below the bar: a chunk's scores are compared with it at
    /// once, in vector code, and only those that reach it are offered one by one (the bar
    /// only rises, so a slot under it at the chunk's start is under it at its turn). One at
    /// a time, the loop was a fifth of the scan's time.
    #[inline(always)]
    fn offer_scaled(&mut self, slots: &[u32], dots: &[i32], scales: &[f32]) {
        const CHUNK: usize = 16;
        let n = slots.len().min(dots.len()).min(scales.len());
        let (slots, dots, scales) = (&slots[..n], &dots[..n], &scales[..n]);
        let mut bar = self.bar();
        for start in (0..n).step_by(CHUNK) {
            let end = (start + CHUNK).min(n);
            let mut reaching = reaching(&dots[start..end], &scales[start..end], bar);
            while reaching != 0 {
                let i = start + reaching.trailing_zeros() as usize;
                reaching &= reaching - 1;
                let s = dots[i] as f32 * scales[i];
                #[allow(clippy::neg_cmp_op_on_partial_ord)]
                if !(s < bar) && self.admits(s, slots[i] as usize) {
                    self.push(s, slots[i] as usize);
                    bar = self.bar();
                }
            }
        }
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

/// Bit `i` set for each score `dots[i]` x `scales[i]` (up to 32) that is not below `bar`.
/// Written as "not below" so that a NaN, which [`TopK::admits`] takes while there is room,
/// is offered to it. A whole chunk of 16 is compared at once, a shorter one place by place.
#[inline(always)]
fn reaching(dots: &[i32], scales: &[f32], bar: f32) -> u32 {
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let reaches = |d: i32, s: f32| !(d as f32 * s < bar);
    if let (Ok(dots), Ok(scales)) = (<&[i32; 16]>::try_from(dots), <&[f32; 16]>::try_from(scales)) {
        let mut each = [false; 16];
        for ((r, &d), &s) in each.iter_mut().zip(dots).zip(scales) {
            *r = reaches(d, s);
        }
        return each
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &r)| bits | (u32::from(r) << i));
    }
    dots.iter()
        .zip(scales)
        .enumerate()
        .fold(0, |bits, (i, (&d, &s))| {
            bits | (u32::from(reaches(d, s)) << i)
        })
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
            mentions: Box::default(),
        }
    }

    fn random(rng: &mut Rng, d: usize) -> Vec<f32> {
        (0..d).map(|_| rng.unit() as f32 - 0.5).collect()
    }

    /// The codes' bounds hold the `f32` similarity of every vector to every query, for
    /// vectors that quantise well and badly (one large component among tiny ones, which round
    /// to 0), in a small and a large dimension, and are narrow for dense vectors.
    #[test]
    fn similarity_bounds_hold_the_exact_similarity() {
        let mut rng = Rng::new(5);
        for d in [7, 256, 1536] {
            let mut vectors: Vec<Vec<f32>> = (0..40).map(|_| random(&mut rng, d)).collect();
            let mut one_hot = vec![0.0; d];
            one_hot[d / 2] = 3.0;
            let mut spike = vec![1e-4; d];
            spike[0] = 1.0;
            let alternating: Vec<f32> = (0..d)
                .map(|j| if j % 2 == 0 { 1.0 } else { -1e-3 })
                .collect();
            let tiny: Vec<f32> = random(&mut rng, d).iter().map(|x| x * 1e-30).collect();
            vectors.extend([
                one_hot,
                spike,
                alternating,
                tiny,
                vec![0.0; d],
                vec![1.0; d],
            ]);
            let mut index = VectorIndex::new(d);
            let names: Vec<String> = (0..vectors.len()).map(|i| format!("e{i}")).collect();
            for (i, v) in vectors.iter().enumerate() {
                let tags = DocTags {
                    entity_name: Some(Arc::from(names[i].as_str())),
                    ..tags("s")
                };
                index.upsert(&format!("d{i}"), v, tags);
            }
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let linked = index.linked(&names, None).unwrap();
            let all: Vec<usize> = (0..vectors.len()).collect();
            let mut queries = vectors.clone();
            queries.extend(
                vectors
                    .iter()
                    .map(|v| v.iter().map(|x| -x).collect::<Vec<_>>()),
            );
            for q in &queries {
                let exact = index.similarities_of(&linked, &all, q).unwrap();
                let bounds = index.similarity_bounds(&linked, q).unwrap();
                for (n, (s, (lo, hi))) in exact.iter().zip(&bounds).enumerate() {
                    assert!(lo <= s && s <= hi, "d {d}, vector {n}: {lo} <= {s} <= {hi}");
                    if n < 40 && d >= 256 {
                        assert!(hi - lo < 0.05, "d {d}, vector {n}: {lo}..{hi}");
                    }
                }
            }
        }
    }

    /// Through random upserts, relinks and removals (which move the last slot), the
    /// documents found by entity are those whose tag names the entity, with the similarity
    /// `similarities` gives by key; a write in between makes the found slots stale.
    #[test]
    fn documents_by_entity_follow_every_write() {
        let mut rng = Rng::new(11);
        let mut index = VectorIndex::new(8);
        let entities = ["Ada", "Bob", "Cy", "Dee"];
        let entity = |rng: &mut Rng| {
            let i = rng.below(entities.len() + 1);
            entities.get(i).map(|&e| Arc::<str>::from(e))
        };
        // Up to two mentions, any of the entities (the document's own entity too).
        let mentions = |rng: &mut Rng| -> Box<[Arc<str>]> {
            (0..rng.below(3))
                .map(|_| Arc::from(entities[rng.below(entities.len())]))
                .collect()
        };
        for step in 0..3000 {
            let key = format!("d{}", rng.below(60));
            match rng.below(5) {
                0 => index.remove(&key),
                1 => index.set_entity(&key, entity(&mut rng).as_deref()),
                2 => index.unmention(&key, entities[rng.below(entities.len())]),
                _ => {
                    let tags = DocTags {
                        entity_name: entity(&mut rng),
                        mentions: mentions(&mut rng),
                        ..tags("s")
                    };
                    index.upsert(&key, &random(&mut rng, 8), tags);
                }
            }
            if step % 50 != 0 {
                continue;
            }
            let q = random(&mut rng, 8);
            let names: Vec<&str> = entities.iter().copied().chain(["Nobody"]).collect();
            let mut expected: Vec<(VectorKey, usize, f32)> = index
                .keys
                .iter()
                .filter_map(|key| {
                    // Found once, at the first of the names it is linked to.
                    let tags = index.tags(key)?;
                    let i = names.iter().position(|n| tags.links(n))?;
                    Some((key.clone(), i, index.similarity(key, &q)?))
                })
                .collect();
            let linked = index.linked(&names, None);
            let mut found: Vec<(VectorKey, usize, f32)> = linked
                .as_ref()
                .map(|l| {
                    let all: Vec<usize> = (0..l.slots.len()).collect();
                    let similar = index.similarities_of(l, &all, &q).expect("same generation");
                    // The codes' bounds hold each similarity.
                    let bounds = index.similarity_bounds(l, &q).expect("same generation");
                    for (s, (lo, hi)) in similar.iter().zip(bounds) {
                        assert!(lo <= *s && *s <= hi, "{lo} <= {s} <= {hi}");
                    }
                    let keys = index.keys_of(l, &all).expect("same generation");
                    keys.into_iter()
                        .zip(l.places())
                        .zip(similar)
                        .map(|((key, i), s)| (key, i, s))
                        .collect()
                })
                .unwrap_or_default();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            found.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(found, expected, "step {step}");
            // By number, in the index's numbering, the same; in another, by name.
            let numbers: Vec<u32> = names.iter().map(|n| index.numbers().number(n).0).collect();
            let slots = |l: Option<Linked>| l.map(|l| l.slots);
            let by_number = index.linked(&names, Some((index.numbers().id(), &numbers)));
            assert_eq!(slots(by_number), slots(linked.clone()), "step {step}");
            let other = EntityNumbers::default();
            let foreign: Vec<u32> = names.iter().map(|n| other.number(n).0 + 1).collect();
            let by_name = index.linked(&names, Some((other.id(), &foreign)));
            assert_eq!(slots(by_name), slots(linked.clone()), "step {step}");
            if let Some(linked) = linked {
                index.upsert("new", &random(&mut rng, 8), tags("s"));
                assert!(index.similarities_of(&linked, &[0], &q).is_none());
                assert!(index.similarity_bounds(&linked, &q).is_none());
                assert!(index.keys_of(&linked, &[0]).is_none());
                index.remove("new");
            }
        }
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

    /// `n` generated documents' embeddings in an index whose inverted file starts at
    /// `ivf_min` vectors, with each document's entity as its source.
    fn generated(n: usize, ivf_min: usize) -> VectorIndex {
        use crate::generate::{Spec, generate};
        let embedder = crate::HashingEmbedder::default();
        let mut index = VectorIndex::new(crate::HashingEmbedder::DEFAULT_DIMENSION);
        index.ivf_min = ivf_min;
        let records = generate(Spec {
            entities: n,
            relationships: 0,
            document_ratio: 1.0,
            seed: 42,
        });
        for (i, r) in records.iter().enumerate() {
            if let crate::Record::Document(d) = r {
                let v = embedder.embed_one(&d.embedding_text());
                let source = d.entity_name.clone().unwrap_or_default();
                index.upsert(&format!("d{i}"), &v, tags(&source));
            }
        }
        index
    }

    /// Queries like the benchmark's: 2 to 5 generated words, a quarter with an entity name.
    fn queries(n: usize, documents: usize) -> Vec<Vec<f32>> {
        use crate::generate::{WORDS, entity_name};
        let embedder = crate::HashingEmbedder::default();
        let mut rng = Rng::new(7);
        (0..n)
            .map(|_| {
                let words = 2 + rng.below(4);
                let mut text: Vec<String> = (0..words)
                    .map(|_| WORDS[rng.below(WORDS.len())].to_string())
                    .collect();
                if rng.below(4) == 0 {
                    text.push(entity_name(rng.below(documents)));
                }
                embedder.embed_one(&text.join(" "))
            })
            .collect()
    }

    #[test]
    fn the_inverted_file_keeps_recall_at_10_above_095() {
        let index = generated(3000, 1000);
        assert!(index.lists() > 1, "the inverted file is on");
        assert!(index.probes() < index.lists());
        let (mut found, mut wanted) = (0, 0);
        for q in queries(100, 3000) {
            let fast = index.search(&q, 10, &|_| true);
            let exact = index.search_exact(&q, 10, &|_| true);
            // Without a filter, the same answer without reading tags.
            assert_eq!(index.search_all(&q, 10), fast);
            assert_eq!(fast.len(), 10);
            assert!(fast.windows(2).all(|w| w[0].1 >= w[1].1));
            wanted += exact.len();
            found += fast
                .iter()
                .filter(|(k, _)| exact.iter().any(|(e, _)| e == k))
                .count();
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.95, "recall@10 {recall:.3}");
    }

    #[test]
    fn search_reads_counts_the_codes_a_search_reads() {
        let d = crate::HashingEmbedder::DEFAULT_DIMENSION;
        let sparse = crate::HashingEmbedder::default().embed_one("kernel graph");
        let components = sparse.iter().filter(|&&x| x != 0.0).count();
        assert!(components > 0 && components < d);
        // Without an inverted file every code is read.
        let small = generated(300, 1000);
        assert_eq!(small.lists(), 0);
        assert_eq!(small.search_reads(&sparse, false), 300 * d);
        // With one: the probed share of the slots, the query's components of each.
        let index = generated(3000, 1000);
        assert!(index.lists() > 1);
        let probed = 3000 * index.probes() / index.lists();
        assert_eq!(index.search_reads(&sparse, false), probed * components);
        assert!(index.search_reads(&sparse, false) < 3000 * d / 4);
        // A filter may send the search to the full scan.
        assert_eq!(index.search_reads(&sparse, true), 3000 * d);
    }

    #[test]
    fn the_inverted_file_follows_upserts_and_removals() {
        let mut index = generated(1500, 500);
        let lists = index.lists();
        assert!(lists > 1);
        let mut rng = Rng::new(3);
        let d = index.dimension();
        for i in 0..600 {
            let key = format!("d{}", 1500 + rng.below(1500));
            match i % 3 {
                0 => index.remove(&key),
                1 => index.upsert(&key, &random(&mut rng, d), tags("moved")),
                _ => index.upsert(&format!("new{i}"), &random(&mut rng, d), tags("new")),
            }
            index.ivf.as_ref().unwrap().assert_consistent(index.len());
        }
        // A vector just written is found first by itself.
        let v = random(&mut rng, d);
        index.upsert("probe", &v, tags("new"));
        assert_eq!(&*index.search(&v, 1, &|_| true)[0].0, "probe");
        index.remove("probe");
        assert!(
            index
                .search(&v, 10, &|_| true)
                .iter()
                .all(|h| &*h.0 != "probe")
        );
        // Doubling trains it again, with more lists.
        for i in 0..index.len() {
            index.upsert(&format!("more{i}"), &random(&mut rng, d), tags("new"));
        }
        assert!(index.lists() > lists);
        index.ivf.as_ref().unwrap().assert_consistent(index.len());
    }

    /// A list's slots offered at once under the bar keep the pairs that offering them one
    /// at a time keeps: for every size of the kept set, with scores tied at the bar, slots
    /// out of order, and a NaN.
    #[test]
    fn offers_under_the_bar_keep_what_offers_one_at_a_time_keep() {
        let mut rng = Rng::new(21);
        for k in [0, 1, 3, 10, 64] {
            for round in 0..20 {
                let n = 1 + rng.below(300);
                let slots: Vec<u32> = (0..n).map(|_| rng.below(1000) as u32).collect();
                // Few distinct dots and scales: many equal scores.
                let dots: Vec<i32> = (0..n).map(|_| rng.below(7) as i32 - 3).collect();
                let mut scales: Vec<f32> = (0..n).map(|_| [0.5, 1.0, 2.0][rng.below(3)]).collect();
                if round == 0 {
                    scales[n / 2] = f32::NAN;
                }
                let (mut one, mut all) = (TopK::new(k), TopK::new(k));
                for ((&slot, &dot), &scale) in slots.iter().zip(&dots).zip(&scales) {
                    let s = dot as f32 * scale;
                    if one.admits(s, slot as usize) {
                        one.push(s, slot as usize);
                    }
                }
                all.offer_scaled(&slots, &dots, &scales);
                let sorted = |top: TopK| {
                    let mut v: Vec<(usize, u32)> = top
                        .into_vec()
                        .into_iter()
                        .map(|(slot, s)| (slot, s.to_bits()))
                        .collect();
                    v.sort_unstable();
                    v
                };
                assert_eq!(sorted(one), sorted(all), "k {k}, round {round}");
            }
        }
    }

    #[test]
    fn the_full_scan_of_the_lists_is_the_scan_of_the_flat_codes() {
        // The same vectors, many repeated (equal scores: ties at the candidate pool's edge),
        // in an index with an inverted file and in one without.
        let mut rng = Rng::new(9);
        let d = 32;
        let base: Vec<Vec<f32>> = (0..40).map(|_| random(&mut rng, d)).collect();
        let mut with = VectorIndex::new(d);
        with.ivf_min = 300;
        let mut without = VectorIndex::new(d);
        without.ivf_min = usize::MAX;
        for i in 0..1200 {
            let v = &base[rng.below(base.len())];
            let source = if i % 3 == 0 { "a" } else { "b" };
            with.upsert(&format!("d{i:04}"), v, tags(source));
            without.upsert(&format!("d{i:04}"), v, tags(source));
        }
        // Writes after the lists exist keep the codes in the lists and flat alike.
        for i in 0..200 {
            let key = format!("d{:04}", rng.below(1200));
            if i % 2 == 0 {
                with.remove(&key);
                without.remove(&key);
            } else {
                let v = &base[rng.below(base.len())];
                with.upsert(&key, v, tags("b"));
                without.upsert(&key, v, tags("b"));
            }
        }
        assert!(with.lists() > 0);
        for slot in 0..with.len() {
            let flat = &with.codes[slot * d..(slot + 1) * d];
            assert_eq!(flat, quantise(with.slot(slot)).0, "slot {slot}");
        }
        assert_eq!(without.lists(), 0);
        for q in base.iter().take(10) {
            for k in [1, 7, 30] {
                let keep = |t: &DocTags| &*t.source == "a";
                assert_eq!(
                    with.search_scan(q, k, &keep),
                    without.search_scan(q, k, &keep)
                );
                assert_eq!(
                    with.search_scan(q, k, &|_| true),
                    without.search_scan(q, k, &|_| true)
                );
            }
        }
        // Every list holds each of its slots' codes, whatever the upserts and removals
        // moved within and between its blocks.
        let all = with.ivf.as_ref().unwrap().all_lists();
        for list in &all {
            for (row, &slot) in list.rows(d).iter().zip(&list.slots) {
                assert_eq!(*row, quantise(with.slot(slot as usize)).0);
            }
        }
        // The candidates themselves, with a pool that ends inside a group of equal scores,
        // for dense queries and for sparse ones (a few components), as the built-in
        // embedder's are.
        let sparse: Vec<Vec<f32>> = base
            .iter()
            .take(10)
            .map(|v| {
                let mut v = v.clone();
                v.iter_mut()
                    .enumerate()
                    .for_each(|(j, x)| *x *= f32::from(u8::from(j % 7 == 3)));
                v
            })
            .collect();
        for q in base.iter().take(10).chain(&sparse) {
            let q = unit(q);
            for pool in [1, 5, 17] {
                let (mut a, _, _) = with.code_scan(&q, pool, None, Some(&all)).run();
                let (mut b, _, _) = without.code_scan(&q, pool, None, None).run();
                a.sort_unstable();
                b.sort_unstable();
                assert_eq!(a, b, "pool {pool}");
            }
        }
        // Training again after a bulk load with too few vectors for lists leaves the flat
        // codes alone to answer.
        with.ivf_min = usize::MAX;
        with.train();
        assert_eq!(with.lists(), 0);
        assert_eq!(with.codes.len(), with.len() * d);
        // And holds no room the removals left.
        assert_eq!(with.codes.capacity(), with.codes.len());
        assert_eq!(with.vectors.capacity(), with.vectors.len());
        assert_eq!(with.errors.capacity(), with.len());
        let q = &base[0];
        assert_eq!(
            with.search_scan(q, 7, &|_| true),
            without.search_scan(q, 7, &|_| true)
        );
    }

    #[test]
    fn a_selective_filter_gets_every_hit_the_scan_gets() {
        let index = generated(3000, 1000);
        let q = queries(1, 3000).remove(0);
        // One document passes.
        let one = crate::generate::entity_name(1234);
        let hits = index.search(&q, 10, &|t| *t.source == *one);
        assert_eq!(hits.len(), 1);
        // About one in ten pass.
        let some = |t: &DocTags| t.source.ends_with('7');
        assert_eq!(
            index.search(&q, 10, &some),
            index.search_scan(&q, 10, &some)
        );
        assert!(index.search_scan(&q, 10, &some).len() == 10);
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
