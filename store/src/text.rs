//! The in-process keyword index: BM25 over every document's title and content.
//!
//! SurrealDB keeps the documents (the source of truth); this index is rebuilt from them at
//! start and kept current on every write, as the graph and vector indexes are. SurrealDB's own
//! FULLTEXT indexes are not used for documents: a query matching any of its words (OR) in title
//! or content was planned as a filter over a table scan and took tens of seconds at 100k
//! documents, and keeping the two indexes current was about half of a document's import cost
//! (docs/benchmarks.md, "Keyword search").
//!
//! **Analysis.** A text's terms are its runs of letters and its runs of digits (a change of
//! class ends a term, so `gpt4` is `gpt` and `4`), lower-cased and folded to ASCII (`Café` is
//! `cafe`; a script without an ASCII form keeps its lower-cased letters). Everything else
//! separates terms. Queries and documents are analysed alike.
//!
//! **Scoring.** A document matches when any query term is in its title or content. Its score is
//! the sum, over the distinct query terms, of BM25 (k1 = 1.2, b = 0.75) on the title plus BM25
//! on the content, each field with its own document frequencies and average length. The
//! inverse document frequency is `ln(1 + (N - df + 0.5) / (df + 0.5))`, always positive.
//!
//! **Writes.** A document written again with the same title and content keeps its postings
//! (an import run twice costs nothing here). A changed or deleted document leaves a dead slot,
//! skipped by searches; when dead slots outnumber live ones the index is compacted.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::heap;
use crate::vectors::{DocTags, Interner, VectorKey};

/// BM25 term-frequency saturation.
pub const K1: f32 = 1.2;
/// BM25 length normalisation.
pub const B: f32 = 0.75;

/// Dead slots below this many are never compacted away.
const COMPACT_MIN_DEAD: usize = 1024;

/// Calls `f` with each term of `text`, in order (see the module docs).
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Class {
        Letter,
        Digit,
        Other,
    }
    let class_of = |c: char| {
        if c.is_alphabetic() {
            Class::Letter
        } else if c.is_numeric() {
            Class::Digit
        } else {
            Class::Other
        }
    };
    let mut start = 0;
    let mut class = Class::Other;
    for (at, c) in text.char_indices() {
        let this = class_of(c);
        if this != class {
            if class != Class::Other {
                emit(&text[start..at], &mut f);
            }
            start = at;
            class = this;
        }
    }
    if class != Class::Other {
        emit(&text[start..], &mut f);
    }
}

/// Lower-cases and folds one run of letters or digits, then hands on its terms.
fn emit(run: &str, f: &mut impl FnMut(&str)) {
    if run.is_ascii() {
        if run.bytes().any(|b| b.is_ascii_uppercase()) {
            f(&run.to_ascii_lowercase());
        } else {
            f(run);
        }
        return;
    }
    let lower = run.to_lowercase();
    let folded = deunicode::deunicode_with_tofu(&lower, " ");
    let mut any = false;
    // The folded form may hold several words (`Straße` is `strasse`, CJK is one word per sign).
    for word in folded.split(|c: char| !c.is_ascii_alphanumeric()) {
        if !word.is_empty() {
            any = true;
            f(&word.to_ascii_lowercase());
        }
    }
    if !any {
        f(&lower);
    }
}

/// The distinct terms of a query, in order of first appearance.
pub fn query_terms(text: &str) -> Vec<String> {
    let mut seen = FxHashSet::default();
    let mut out = Vec::new();
    for_each_term(text, |t| {
        if !seen.contains(t) {
            seen.insert(t.to_owned());
            out.push(t.to_owned());
        }
    });
    out
}

/// A document's title and content, analysed: what the index stores of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Analysed {
    /// Each distinct term with its count in the title and in the content.
    terms: Vec<(Box<str>, u16, u16)>,
    title_len: u32,
    content_len: u32,
    /// Identifies the text, so that a document written again unchanged is left alone.
    fingerprint: u64,
}

impl Analysed {
    pub fn new(title: &str, content: &str) -> Self {
        // Per term: its count in the title, then in the content.
        let mut counts: FxHashMap<Box<str>, [u16; 2]> = FxHashMap::default();
        let mut lens = [0u32; 2];
        for (field, text) in [title, content].into_iter().enumerate() {
            for_each_term(text, |t| {
                lens[field] = lens[field].saturating_add(1);
                match counts.get_mut(t) {
                    Some(c) => c[field] = c[field].saturating_add(1),
                    None => {
                        let mut c = [0; 2];
                        c[field] = 1;
                        counts.insert(t.into(), c);
                    }
                }
            });
        }
        let [title_len, content_len] = lens;
        let mut hasher = FxHasher::default();
        title.hash(&mut hasher);
        content.hash(&mut hasher);
        Analysed {
            terms: counts.into_iter().map(|(t, [a, b])| (t, a, b)).collect(),
            title_len,
            content_len,
            fingerprint: hasher.finish(),
        }
    }
}

/// One document's counts of one term.
#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    title: u16,
    content: u16,
}

/// The keyword index of every document (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct TextIndex {
    term_ids: FxHashMap<Box<str>, u32>,
    postings: Vec<Vec<Posting>>,
    /// Per term: its postings with the term in the title, and in the content, dead slots'
    /// included. While no slot is dead these are the document frequencies, so a search need
    /// not count them over a list that holds most of the documents.
    df: Vec<[u32; 2]>,
    /// Per slot: the document's key, or `None` once the slot is dead.
    keys: Vec<Option<VectorKey>>,
    /// Per slot: the first eight bytes of its key, big-endian, zero-padded. Equal scores
    /// rank by key, and most ties are decided here, without reading the key itself.
    key_prefixes: Vec<u64>,
    /// Per slot: whether it is live (what searches test per posting).
    alive: Vec<bool>,
    tags: Vec<DocTags>,
    /// Per slot: title and content length in terms.
    lens: Vec<(u32, u32)>,
    fingerprints: Vec<u64>,
    slots: FxHashMap<VectorKey, u32>,
    /// Per entity name: the live slots of the documents linked to it.
    by_entity: FxHashMap<Arc<str>, Vec<u32>>,
    /// One copy of each tag value.
    strings: Interner,
    dead: usize,
    title_total: u64,
    content_total: u64,
}

impl TextIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Approximate heap bytes: terms, posting lists, per-slot arrays, keys, tags and the
    /// by-entity lists.
    pub fn heap_bytes(&self) -> usize {
        let terms: usize = self.term_ids.keys().map(|t| t.len()).sum();
        let postings: usize = self.postings.iter().map(heap::vec).sum();
        let keys: usize = self.keys.iter().flatten().map(|k| heap::arc_str(k)).sum();
        let by_entity: usize = self.by_entity.values().map(heap::vec).sum();
        heap::map(&self.term_ids)
            + terms
            + heap::vec(&self.postings)
            + postings
            + heap::vec(&self.df)
            + heap::vec(&self.keys)
            + keys
            + heap::vec(&self.key_prefixes)
            + heap::vec(&self.alive)
            + heap::vec(&self.tags)
            + heap::vec(&self.lens)
            + heap::vec(&self.fingerprints)
            + heap::map(&self.slots)
            + heap::map(&self.by_entity)
            + by_entity
            + self.strings.heap_bytes()
    }

    /// Documents indexed.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Distinct terms indexed.
    pub fn terms(&self) -> usize {
        self.term_ids.len()
    }

    /// Adds or replaces the document `key`.
    pub fn upsert(&mut self, key: &str, text: &Analysed, tags: DocTags) {
        let tags = DocTags {
            source: self.strings.intern(&tags.source),
            content_type: self.strings.intern(&tags.content_type),
            entity_name: tags.entity_name.map(|n| self.strings.intern(&n)),
        };
        if let Some(&slot) = self.slots.get(key) {
            let slot = slot as usize;
            if self.fingerprints[slot] == text.fingerprint
                && self.lens[slot] == (text.title_len, text.content_len)
            {
                self.link(slot, tags.entity_name.clone());
                self.tags[slot] = tags;
                return;
            }
            self.kill(slot);
        }
        let slot = self.keys.len() as u32;
        let key: VectorKey = Arc::from(key);
        self.slots.insert(key.clone(), slot);
        self.key_prefixes.push(key_prefix(&key));
        self.keys.push(Some(key));
        self.alive.push(true);
        if let Some(entity) = &tags.entity_name {
            self.by_entity.entry(entity.clone()).or_default().push(slot);
        }
        self.tags.push(tags);
        self.lens.push((text.title_len, text.content_len));
        self.fingerprints.push(text.fingerprint);
        self.title_total += u64::from(text.title_len);
        self.content_total += u64::from(text.content_len);
        for (term, title, content) in &text.terms {
            let id = match self.term_ids.get(term) {
                Some(&id) => id,
                None => {
                    let id = self.postings.len() as u32;
                    self.term_ids.insert(term.clone(), id);
                    self.postings.push(Vec::new());
                    self.df.push([0, 0]);
                    id
                }
            };
            let df = &mut self.df[id as usize];
            df[0] += u32::from(*title > 0);
            df[1] += u32::from(*content > 0);
            self.postings[id as usize].push(Posting {
                slot,
                title: *title,
                content: *content,
            });
        }
        self.maybe_compact();
    }

    /// Removes the document `key`, if present.
    pub fn remove(&mut self, key: &str) {
        if let Some(&slot) = self.slots.get(key) {
            self.kill(slot as usize);
            self.maybe_compact();
        }
    }

    /// Sets the entity a document is linked to (after its entity was deleted).
    pub fn set_entity(&mut self, key: &str, entity_name: Option<&str>) {
        let entity_name = entity_name.map(|n| self.strings.intern(n));
        if let Some(&slot) = self.slots.get(key) {
            self.link(slot as usize, entity_name);
        }
    }

    /// Links the live `slot` to `entity_name` instead of the entity it had.
    fn link(&mut self, slot: usize, entity_name: Option<Arc<str>>) {
        let old = std::mem::replace(&mut self.tags[slot].entity_name, entity_name.clone());
        if old == entity_name {
            return;
        }
        if let Some(old) = old {
            self.unlink(&old, slot as u32);
        }
        if let Some(new) = entity_name {
            self.by_entity.entry(new).or_default().push(slot as u32);
        }
    }

    fn unlink(&mut self, entity_name: &str, slot: u32) {
        if let Some(slots) = self.by_entity.get_mut(entity_name) {
            slots.retain(|&s| s != slot);
            if slots.is_empty() {
                self.by_entity.remove(entity_name);
            }
        }
    }

    /// The keys of the documents linked to each of `entity_names`, each with the position of
    /// its entity's name there: each document once, in no particular order.
    pub fn documents_by_entity<'a>(
        &self,
        entity_names: impl IntoIterator<Item = &'a str>,
    ) -> Vec<(VectorKey, usize)> {
        let mut slots: Vec<(u32, usize)> = Vec::new();
        for (i, name) in entity_names.into_iter().enumerate() {
            if let Some(of) = self.by_entity.get(name) {
                slots.extend(of.iter().map(|&slot| (slot, i)));
            }
        }
        slots.sort_unstable_by_key(|&(slot, _)| slot);
        slots.dedup_by_key(|(slot, _)| *slot);
        slots
            .into_iter()
            .filter_map(|(slot, i)| Some((self.keys[slot as usize].clone()?, i)))
            .collect()
    }

    /// The keys of the documents linked to any of `entity_names`, in key order.
    pub fn documents_of<'a>(
        &self,
        entity_names: impl IntoIterator<Item = &'a str>,
    ) -> Vec<VectorKey> {
        let mut out: Vec<VectorKey> = self
            .documents_by_entity(entity_names)
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        out.sort_unstable();
        out
    }

    fn kill(&mut self, slot: usize) {
        if let Some(key) = self.keys[slot].take() {
            self.alive[slot] = false;
            self.slots.remove(&key);
            self.dead += 1;
            let (t, c) = self.lens[slot];
            self.title_total -= u64::from(t);
            self.content_total -= u64::from(c);
            let tags = std::mem::take(&mut self.tags[slot]);
            if let Some(entity) = tags.entity_name {
                self.unlink(&entity, slot as u32);
            }
        }
    }

    fn maybe_compact(&mut self) {
        if self.dead >= COMPACT_MIN_DEAD && self.dead > self.slots.len() {
            self.compact();
        }
    }

    /// Drops dead slots, and terms left with no document.
    pub fn compact(&mut self) {
        if self.dead == 0 {
            return;
        }
        let mut renumber = vec![u32::MAX; self.keys.len()];
        let mut next = 0u32;
        let old_keys = std::mem::take(&mut self.keys);
        let old_tags = std::mem::take(&mut self.tags);
        let old_lens = std::mem::take(&mut self.lens);
        let old_fingerprints = std::mem::take(&mut self.fingerprints);
        self.alive.clear();
        self.key_prefixes.clear();
        for (slot, key) in old_keys.into_iter().enumerate() {
            let Some(key) = key else { continue };
            renumber[slot] = next;
            self.slots.insert(key.clone(), next);
            self.key_prefixes.push(key_prefix(&key));
            self.keys.push(Some(key));
            self.alive.push(true);
            self.tags.push(old_tags[slot].clone());
            self.lens.push(old_lens[slot]);
            self.fingerprints.push(old_fingerprints[slot]);
            next += 1;
        }
        let old_ids = std::mem::take(&mut self.term_ids);
        let mut old_postings = std::mem::take(&mut self.postings);
        self.df.clear();
        for (term, id) in old_ids {
            let mut list = std::mem::take(&mut old_postings[id as usize]);
            list.retain_mut(|p| {
                p.slot = renumber[p.slot as usize];
                p.slot != u32::MAX
            });
            if !list.is_empty() {
                self.term_ids.insert(term, self.postings.len() as u32);
                self.df.push(document_frequencies(&list));
                self.postings.push(list);
            }
        }
        self.dead = 0;
        self.by_entity.clear();
        for (slot, tags) in self.tags.iter().enumerate() {
            if let Some(entity) = &tags.entity_name {
                self.by_entity
                    .entry(entity.clone())
                    .or_default()
                    .push(slot as u32);
            }
        }
        // Tag values no document uses any more.
        let used: FxHashSet<*const u8> = self
            .tags
            .iter()
            .flat_map(|t| {
                [
                    Some(t.source.as_ptr()),
                    Some(t.content_type.as_ptr()),
                    t.entity_name.as_ref().map(|n| n.as_ptr()),
                ]
            })
            .flatten()
            .collect();
        self.strings.retain(|s| used.contains(&s.as_ptr()));
    }

    /// The `limit` best documents for `terms` (see [`query_terms`]) among those `keep`
    /// accepts: best first, equal scores in key order.
    pub fn search(
        &self,
        terms: &[String],
        limit: usize,
        keep: &dyn Fn(&DocTags) -> bool,
    ) -> Vec<(VectorKey, f32)> {
        if self.slots.is_empty() || limit == 0 {
            return Vec::new();
        }
        SCRATCH.with_borrow_mut(|scratch| self.score_into(terms, limit, keep, scratch))
    }

    /// [`search`](Self::search) with its per-document scores in `scratch`, which it leaves
    /// as it found it: every score zero, nothing touched.
    fn score_into(
        &self,
        terms: &[String],
        limit: usize,
        keep: &dyn Fn(&DocTags) -> bool,
        scratch: &mut Scratch,
    ) -> Vec<(VectorKey, f32)> {
        let n = self.slots.len() as f32;
        let avg_title = (self.title_total as f32 / n).max(1.0);
        let avg_content = (self.content_total as f32 / n).max(1.0);
        if scratch.scores.len() < self.keys.len() {
            scratch.scores.resize(self.keys.len(), 0.0);
        }
        let Scratch { scores, touched } = scratch;
        for term in terms {
            let Some(&id) = self.term_ids.get(term.as_str()) else {
                continue;
            };
            let list = &self.postings[id as usize];
            let [df_title, df_content] = if self.dead == 0 {
                self.df[id as usize]
            } else {
                document_frequencies(list.iter().filter(|p| self.alive[p.slot as usize]))
            };
            let idf_title = idf(n, df_title);
            let idf_content = idf(n, df_content);
            // BM25's length normalisation of each field, per unit of length.
            let per_title = K1 * B / avg_title;
            let per_content = K1 * B / avg_content;
            let base = K1 * (1.0 - B);
            for p in list {
                let slot = p.slot as usize;
                if !self.alive[slot] {
                    continue;
                }
                let (title_len, content_len) = self.lens[slot];
                let mut s = 0.0;
                if p.title > 0 {
                    let tf = f32::from(p.title);
                    s += idf_title * tf * (K1 + 1.0) / (tf + base + per_title * title_len as f32);
                }
                if p.content > 0 {
                    let tf = f32::from(p.content);
                    s += idf_content * tf * (K1 + 1.0)
                        / (tf + base + per_content * content_len as f32);
                }
                if scores[slot] == 0.0 {
                    touched.push(p.slot);
                }
                scores[slot] += s;
            }
        }
        // The best `limit`: a heap whose top is the worst kept, so most candidates cost one
        // comparison with it. An equal score loses to the kept one unless its key comes
        // first: when most documents tie (a word in every document, documents of one shape)
        // that comparison, not a push, is what they cost.
        let mut best: BinaryHeap<Ranked> = BinaryHeap::with_capacity(limit + 1);
        for slot in touched.drain(..) {
            let score = std::mem::take(&mut scores[slot as usize]);
            let Some(key) = &self.keys[slot as usize] else {
                continue;
            };
            let prefix = self.key_prefixes[slot as usize];
            let loses = |w: &Ranked| {
                score < w.score || (score == w.score && (prefix, key) > (w.prefix, &w.key))
            };
            if best.len() == limit && best.peek().is_some_and(loses) {
                continue;
            }
            if !keep(&self.tags[slot as usize]) {
                continue;
            }
            best.push(Ranked {
                score,
                prefix,
                key: key.clone(),
            });
            if best.len() > limit {
                best.pop();
            }
        }
        best.into_sorted_vec()
            .into_iter()
            .map(|r| (r.key, r.score))
            .collect()
    }
}

/// What a search scores into, kept per thread: one score per slot (all zero between
/// searches) and the slots scored, so that no search allocates or zeroes a buffer the size
/// of the index.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// A search result in the heap: ordered best first (higher score, then lower key), so the
/// heap's top is the worst result kept.
struct Ranked {
    score: f32,
    /// The key's first bytes (see `TextIndex::key_prefixes`).
    prefix: u64,
    key: VectorKey,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| (self.prefix, &self.key).cmp(&(other.prefix, &other.key)))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// The first eight bytes of `key`, big-endian, zero-padded: keys that differ there compare
/// as these do, and keys that do not are compared whole.
fn key_prefix(key: &str) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key.as_bytes()[..n]);
    u64::from_be_bytes(bytes)
}

/// How many of `postings` have their term in the title, and in the content.
fn document_frequencies<'a>(postings: impl IntoIterator<Item = &'a Posting>) -> [u32; 2] {
    postings.into_iter().fold([0, 0], |[t, c], p| {
        [t + u32::from(p.title > 0), c + u32::from(p.content > 0)]
    })
}

fn idf(n: f32, df: u32) -> f32 {
    let df = df as f32;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_term(text, |t| out.push(t.to_owned()));
        out
    }

    fn tags(source: &str) -> DocTags {
        DocTags {
            source: source.into(),
            content_type: "text/plain".into(),
            entity_name: None,
        }
    }

    fn index(docs: &[(&str, &str, &str)]) -> TextIndex {
        let mut index = TextIndex::new();
        for (key, title, content) in docs {
            index.upsert(key, &Analysed::new(title, content), tags("s"));
        }
        index
    }

    fn search(index: &TextIndex, q: &str) -> Vec<String> {
        index
            .search(&query_terms(q), 10, &|_| true)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect()
    }

    #[test]
    fn terms_are_letter_and_digit_runs_lower_cased_and_folded() {
        assert_eq!(
            terms("Ada Lovelace's GPT4, in 1843!"),
            ["ada", "lovelace", "s", "gpt", "4", "in", "1843"]
        );
        assert_eq!(terms("Café Straße"), ["cafe", "strasse"]);
        assert_eq!(terms("ÉCOLE"), ["ecole"]);
        assert_eq!(terms("'; DROP --"), ["drop"]);
        assert!(terms("  ... !!! ").is_empty());
        // A script is folded to ASCII words where it has a form there.
        assert!(!terms("東京").is_empty());
        assert_eq!(terms("東京"), terms("東京"));
    }

    #[test]
    fn query_terms_are_distinct_in_order() {
        assert_eq!(query_terms("b a B c a"), ["b", "a", "c"]);
    }

    #[test]
    fn any_term_matches_and_more_matches_rank_higher() {
        let index = index(&[
            ("d1", "Graphs", "A graph has nodes and edges."),
            ("d2", "Trees", "A tree is a graph without cycles."),
            ("d3", "Music", "Counterpoint and harmony."),
        ]);
        assert_eq!(search(&index, "graph cycles"), ["d2", "d1"]);
        assert_eq!(search(&index, "harmony"), ["d3"]);
        assert!(search(&index, "absent").is_empty());
        assert!(search(&index, "").is_empty());
    }

    #[test]
    fn a_title_match_counts_besides_the_content() {
        let index = index(&[
            ("d1", "Other", "Rust is a language."),
            ("d2", "Rust", "Rust is a language."),
        ]);
        let hits = index.search(&query_terms("rust"), 10, &|_| true);
        assert_eq!(&*hits[0].0, "d2");
        assert!(hits[0].1 > hits[1].1);
    }

    #[test]
    fn scores_follow_bm25() {
        // Two documents, one term in one content: idf = ln(1 + 1.5 / 1.5) = ln 2; the
        // content length equals the average of the two, so saturation is tf(k1+1)/(tf+k1).
        let index = index(&[("d1", "", "apple pear"), ("d2", "", "plum fig")]);
        let hits = index.search(&query_terms("apple"), 10, &|_| true);
        let want = 2f32.ln() * (1.0 * (K1 + 1.0)) / (1.0 + K1);
        assert_eq!(hits.len(), 1);
        assert!((hits[0].1 - want).abs() < 1e-6, "{} vs {want}", hits[0].1);
    }

    #[test]
    fn equal_scores_come_in_key_order() {
        let index = index(&[("d3", "", "same"), ("d1", "", "same"), ("d2", "", "same")]);
        assert_eq!(search(&index, "same"), ["d1", "d2", "d3"]);
    }

    #[test]
    fn limit_and_filter_apply() {
        let mut index = TextIndex::new();
        for i in 0..20 {
            let source = if i % 2 == 0 { "even" } else { "odd" };
            let body = "word ".repeat(i + 1);
            index.upsert(&format!("d{i:02}"), &Analysed::new("", &body), tags(source));
        }
        let hits = index.search(&query_terms("word"), 3, &|t| &*t.source == "odd");
        assert_eq!(hits.len(), 3);
        // More occurrences in a longer document still score higher here (saturation).
        let keys: Vec<&str> = hits.iter().map(|(k, _)| &**k).collect();
        assert_eq!(keys, ["d19", "d17", "d15"]);
    }

    #[test]
    fn updates_and_removals_are_seen_at_once() {
        let mut index = index(&[("d1", "", "old words"), ("d2", "", "other words")]);
        index.upsert("d1", &Analysed::new("", "new text"), tags("s"));
        assert!(search(&index, "old").is_empty());
        assert_eq!(search(&index, "new"), ["d1"]);
        assert_eq!(search(&index, "words"), ["d2"]);
        index.remove("d2");
        assert!(search(&index, "words").is_empty());
        assert_eq!(index.len(), 1);
        index.remove("absent");
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn an_unchanged_document_keeps_its_slot_and_takes_new_tags() {
        let mut index = index(&[("d1", "T", "body")]);
        index.upsert("d1", &Analysed::new("T", "body"), tags("moved"));
        assert_eq!(index.dead, 0);
        let hits = index.search(&query_terms("body"), 10, &|t| &*t.source == "moved");
        assert_eq!(hits.len(), 1);
        index.set_entity("d1", Some("Ada"));
        let hits = index.search(&query_terms("body"), 10, &|t| {
            t.entity_name.as_deref() == Some("Ada")
        });
        assert_eq!(hits.len(), 1);
    }

    #[test]
    fn documents_are_found_by_entity_through_every_change() {
        let mut index = TextIndex::new();
        let linked = |e: &str| DocTags {
            entity_name: Some(e.into()),
            ..tags("s")
        };
        index.upsert("d1", &Analysed::new("a", "one"), linked("Ada"));
        index.upsert("d2", &Analysed::new("b", "two"), linked("Ada"));
        index.upsert("d3", &Analysed::new("c", "three"), linked("Bob"));
        index.upsert("d4", &Analysed::new("d", "four"), tags("s"));
        let of = |index: &TextIndex, names: &[&str]| -> Vec<String> {
            index
                .documents_of(names.iter().copied())
                .iter()
                .map(|k| k.to_string())
                .collect()
        };
        assert_eq!(of(&index, &["Ada"]), ["d1", "d2"]);
        assert_eq!(of(&index, &["Bob", "Ada", "Bob"]), ["d1", "d2", "d3"]);
        assert!(of(&index, &["Nobody"]).is_empty());
        // Rewritten unchanged but moved to another entity; rewritten with new text.
        index.upsert("d1", &Analysed::new("a", "one"), linked("Bob"));
        index.upsert("d2", &Analysed::new("b", "changed"), linked("Ada"));
        assert_eq!(of(&index, &["Ada"]), ["d2"]);
        assert_eq!(of(&index, &["Bob"]), ["d1", "d3"]);
        // Unlinked, removed, compacted.
        index.set_entity("d3", None);
        index.remove("d2");
        assert!(of(&index, &["Ada"]).is_empty());
        assert_eq!(of(&index, &["Bob"]), ["d1"]);
        index.set_entity("d4", Some("Ada"));
        index.compact();
        assert_eq!(of(&index, &["Ada"]), ["d4"]);
        assert_eq!(of(&index, &["Bob"]), ["d1"]);
    }

    #[test]
    fn compaction_keeps_every_answer() {
        let mut index = TextIndex::new();
        let n = 3 * COMPACT_MIN_DEAD;
        for i in 0..n {
            let text = format!("common w{} w{}", i, i % 7);
            index.upsert(&format!("d{i}"), &Analysed::new("", &text), tags("s"));
        }
        let before: Vec<_> = (0..n)
            .filter(|i| i % 3 != 0)
            .map(|i| format!("d{i}"))
            .collect();
        for i in (0..n).step_by(3) {
            index.remove(&format!("d{i}"));
        }
        // Rewrite two thirds of the rest: dead slots now outnumber live ones.
        for i in 0..n {
            if i % 3 == 1 {
                let text = format!("common w{} w{} again", i, i % 7);
                index.upsert(&format!("d{i}"), &Analysed::new("", &text), tags("s"));
            }
        }
        let mut reference = TextIndex::new();
        for key in &before {
            let i: usize = key[1..].parse().unwrap();
            let again = if i % 3 == 1 { " again" } else { "" };
            let text = format!("common w{} w{}{}", i, i % 7, again);
            reference.upsert(key, &Analysed::new("", &text), tags("s"));
        }
        assert_eq!(index.len(), reference.len());
        index.compact();
        assert_eq!(index.dead, 0);
        assert_eq!(index.keys.len(), index.len());
        assert_eq!(index.terms(), reference.terms());
        for q in ["common", "w5", "w3 again", "w0", "w1"] {
            let got = index.search(&query_terms(q), 50, &|_| true);
            let want = reference.search(&query_terms(q), 50, &|_| true);
            assert_eq!(got, want, "query {q}");
        }
    }

    /// Keys that share their first eight bytes, or are shorter than eight, tie-break as whole
    /// keys do; counts of document frequencies kept on writes give the answers that counting
    /// over the live postings gives, before and after a compaction.
    #[test]
    fn ties_and_frequencies_follow_every_write() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let words = ["same", "tie", "rare", "common", "x1", "x2"];
        // Keys of 1 to 12 characters, some sharing their first eight.
        let key_of = |i: u64| {
            let hex = format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            if i.is_multiple_of(3) {
                format!("shared08{}", &hex[..1 + (i % 4) as usize])
            } else {
                hex[..1 + (i % 12) as usize].to_string()
            }
        };
        let mut index = TextIndex::new();
        let mut live: std::collections::BTreeMap<String, (String, String)> = Default::default();
        for step in 0..3000 {
            let key = key_of(next(200));
            if next(5) == 0 {
                index.remove(&key);
                live.remove(&key);
            } else {
                let mut text = || {
                    let words: Vec<&str> =
                        (0..1 + next(3)).map(|_| words[next(6) as usize]).collect();
                    words.join(" ")
                };
                let (title, content) = (text(), text());
                index.upsert(&key, &Analysed::new(&title, &content), tags("s"));
                live.insert(key, (title, content));
            }
            if step % 300 == 299 {
                if step % 600 == 599 {
                    index.compact();
                    assert_eq!(index.dead, 0);
                }
                let mut reference = TextIndex::new();
                for (k, (title, content)) in &live {
                    reference.upsert(k, &Analysed::new(title, content), tags("s"));
                }
                assert_eq!(reference.dead, 0);
                for q in ["same", "tie rare", "common x1", "x2 same tie"] {
                    let want = reference.search(&query_terms(q), 25, &|_| true);
                    // Best first, equal scores in the keys' own order.
                    for w in want.windows(2) {
                        assert!(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0));
                    }
                    assert_eq!(index.search(&query_terms(q), 25, &|_| true), want, "{q}");
                }
            }
        }
    }
}
