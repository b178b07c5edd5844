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
//!
//! **Pruning.** A search reads the postings of a query's rarer words and looks up only the
//! documents they reach in the lists of its common words ("the", "is", a word every document
//! of one source has), whose lists are nearly as long as the index. Each word is two lists,
//! its titles and its contents, scored apart: a common word that a few titles hold ("for" in
//! a package's name) is a short list of high scores and a long one of low scores. BM25 bounds
//! what a list can add to a score: its field's part for the highest count of the word in one
//! document and the shortest document of the list (both kept per word as documents are
//! written; one left behind by a removal only loosens the bound). The lists are read rarest
//! first; once the `limit`-th best score so far (counting only the
//! lists read) is above what the unread lists could add together, no document they alone
//! reach can be among the best, and the documents already reached are scored from every list
//! (MaxScore). The answer is the full evaluation's, ties included, for a query asked the first
//! time as for one asked before: nothing is kept between searches.

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

/// What looking up a document in one unread list costs, in postings read in order: a binary
/// search of a long list, most of whose steps miss the cache. A pruned search looks up the
/// documents it reached only when that costs less than reading the unread lists (see
/// `TextIndex::search_pruned`); the tests make look-ups cheap, so that they take both paths.
const LOOKUP_COST: usize = if cfg!(test) { 1 } else { 4 };

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
    /// The content's UTF-8 bytes (what a workspace's `max_document_bytes` counts).
    content_bytes: u32,
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
            content_bytes: u32::try_from(content.len()).unwrap_or(u32::MAX),
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
    /// Per term: where in its postings the term is in the title (its title list).
    titled: Vec<Vec<u32>>,
    /// Per term and field: the highest count of the term in one document's field, and the
    /// shortest such field, over its postings (dead slots' included until a compaction).
    peaks: Vec<[Peak; 2]>,
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
    /// Per slot: the content's bytes; and their sum over the live slots.
    bytes: Vec<u32>,
    bytes_total: u64,
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
            + heap::vec(&self.titled)
            + self.titled.iter().map(heap::vec).sum::<usize>()
            + heap::vec(&self.peaks)
            + heap::vec(&self.keys)
            + keys
            + heap::vec(&self.key_prefixes)
            + heap::vec(&self.alive)
            + heap::vec(&self.tags)
            + self
                .tags
                .iter()
                .map(|t| t.mentions.len() * size_of::<Arc<str>>())
                .sum::<usize>()
            + heap::vec(&self.lens)
            + heap::vec(&self.bytes)
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

    /// The bytes of the documents' content, summed over the documents indexed.
    pub fn content_bytes(&self) -> u64 {
        self.bytes_total
    }

    /// Distinct terms indexed.
    pub fn terms(&self) -> usize {
        self.term_ids.len()
    }

    /// Adds or replaces the document `key`.
    pub fn upsert(&mut self, key: &str, text: &Analysed, tags: DocTags) {
        let tags = tags.interned(&mut self.strings);
        if let Some(&slot) = self.slots.get(key) {
            let slot = slot as usize;
            if self.fingerprints[slot] == text.fingerprint
                && self.lens[slot] == (text.title_len, text.content_len)
                && self.bytes[slot] == text.content_bytes
            {
                self.link(slot, tags.entity_name.clone());
                self.remention(slot, tags.mentions.clone());
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
        for entity in tags.entities() {
            self.by_entity.entry(entity.clone()).or_default().push(slot);
        }
        self.tags.push(tags);
        self.lens.push((text.title_len, text.content_len));
        self.bytes.push(text.content_bytes);
        self.bytes_total += u64::from(text.content_bytes);
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
                    self.titled.push(Vec::new());
                    self.peaks.push([Peak::NONE; 2]);
                    id
                }
            };
            let df = &mut self.df[id as usize];
            df[0] += u32::from(*title > 0);
            df[1] += u32::from(*content > 0);
            let list = &mut self.postings[id as usize];
            if *title > 0 {
                self.titled[id as usize].push(list.len() as u32);
            }
            let peaks = &mut self.peaks[id as usize];
            peaks[0].add(*title, text.title_len);
            peaks[1].add(*content, text.content_len);
            list.push(Posting {
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

    /// Sets the mentions of the live `slot`, moving it between the by-entity lists to match.
    fn remention(&mut self, slot: usize, mentions: Box<[Arc<str>]>) {
        let old = std::mem::replace(&mut self.tags[slot].mentions, mentions.clone());
        if old == mentions {
            return;
        }
        for m in old.iter() {
            self.unlink(m, slot as u32);
        }
        for m in mentions.iter() {
            self.by_entity
                .entry(m.clone())
                .or_default()
                .push(slot as u32);
        }
    }

    /// Drops the mention of the entity `name` from the document `key`, if it has it (the
    /// entity was deleted).
    pub fn unmention(&mut self, key: &str, name: &str) {
        if let Some(&slot) = self.slots.get(key) {
            let slot = slot as usize;
            let mentions = &self.tags[slot].mentions;
            if mentions.iter().any(|m| &**m == name) {
                let kept = mentions.iter().filter(|m| &***m != name).cloned().collect();
                self.remention(slot, kept);
            }
        }
    }

    /// The documents that mention the entity `name` (not by their `entity_name`).
    pub fn mentioning(&self, name: &str) -> Vec<VectorKey> {
        let Some(slots) = self.by_entity.get(name) else {
            return Vec::new();
        };
        slots
            .iter()
            .filter(|&&slot| {
                self.tags[slot as usize]
                    .mentions
                    .iter()
                    .any(|m| &**m == name)
            })
            .filter_map(|&slot| self.keys[slot as usize].clone())
            .collect()
    }

    /// Takes one link of `slot` out of the list of `entity_name` (a document linked to an
    /// entity twice, as its entity and a mention, is listed twice).
    fn unlink(&mut self, entity_name: &str, slot: u32) {
        if let Some(slots) = self.by_entity.get_mut(entity_name) {
            if let Some(at) = slots.iter().position(|&s| s == slot) {
                slots.swap_remove(at);
            }
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
        // A document linked to several of the names counts once, at the first of them.
        slots.sort_unstable();
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
            self.bytes_total -= u64::from(self.bytes[slot]);
            let tags = std::mem::take(&mut self.tags[slot]);
            for entity in tags.entities() {
                self.unlink(entity, slot as u32);
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
        let old_bytes = std::mem::take(&mut self.bytes);
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
            self.bytes.push(old_bytes[slot]);
            self.fingerprints.push(old_fingerprints[slot]);
            next += 1;
        }
        let old_ids = std::mem::take(&mut self.term_ids);
        let mut old_postings = std::mem::take(&mut self.postings);
        self.df.clear();
        self.titled.clear();
        self.peaks.clear();
        for (term, id) in old_ids {
            let mut list = std::mem::take(&mut old_postings[id as usize]);
            list.retain_mut(|p| {
                p.slot = renumber[p.slot as usize];
                p.slot != u32::MAX
            });
            if !list.is_empty() {
                self.term_ids.insert(term, self.postings.len() as u32);
                self.df.push(document_frequencies(&list));
                let mut peaks = [Peak::NONE; 2];
                let mut titled = Vec::new();
                for (at, p) in list.iter().enumerate() {
                    let (title_len, content_len) = self.lens[p.slot as usize];
                    peaks[0].add(p.title, title_len);
                    peaks[1].add(p.content, content_len);
                    if p.title > 0 {
                        titled.push(at as u32);
                    }
                }
                self.titled.push(titled);
                self.peaks.push(peaks);
                self.postings.push(list);
            }
        }
        self.dead = 0;
        self.by_entity.clear();
        for (slot, tags) in self.tags.iter().enumerate() {
            for entity in tags.entities() {
                self.by_entity
                    .entry(entity.clone())
                    .or_default()
                    .push(slot as u32);
            }
        }
        // Tag values no document uses any more.
        let used: FxHashSet<*const u8> = self.tags.iter().flat_map(DocTags::strings).collect();
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
        let norms = self.norms();
        let lists = self.reading_order(&self.ids(terms), &norms);
        let found = SCRATCH
            .with_borrow_mut(|scratch| self.search_pruned(&lists, &norms, limit, keep, scratch));
        found
            .into_iter()
            .filter_map(|(slot, score)| Some((self.keys[slot as usize].clone()?, score)))
            .collect()
    }

    /// The ids of the `terms` the index knows, in query order.
    fn ids(&self, terms: &[String]) -> Vec<u32> {
        terms
            .iter()
            .filter_map(|t| self.term_ids.get(t.as_str()).copied())
            .collect()
    }

    /// About how many postings [`search`](Self::search) reads for `terms`, so that a caller
    /// can tell a search that costs an answer's worth of work from one that costs a scan: the
    /// postings of every word but the one of the longest list, which a query of several words
    /// rarely needs read (see the module docs, "Pruning"), each counted twice, for the look-ups
    /// of the documents they reach. A query of one word reads its list.
    pub fn search_reads(&self, terms: &[String]) -> usize {
        let mut lens: Vec<usize> = (self.ids(terms).into_iter())
            .map(|id| self.postings[id as usize].len())
            .collect();
        lens.sort_unstable();
        match lens.len() {
            0 => 0,
            1 => lens[0],
            n => 2 * lens[..n - 1].iter().sum::<usize>(),
        }
    }

    /// The BM25 parts every posting of one search shares.
    fn norms(&self) -> Norms {
        let n = self.slots.len() as f32;
        let avg_title = (self.title_total as f32 / n).max(1.0);
        let avg_content = (self.content_total as f32 / n).max(1.0);
        Norms {
            n,
            per_len: [K1 * B / avg_title, K1 * B / avg_content],
            base: K1 * (1.0 - B),
        }
    }

    /// The inverse document frequencies of the term `id`, in title and content.
    fn idfs(&self, id: u32, norms: &Norms) -> [f32; 2] {
        let list = &self.postings[id as usize];
        let [df_title, df_content] = if self.dead == 0 {
            self.df[id as usize]
        } else {
            document_frequencies(list.iter().filter(|p| self.alive[p.slot as usize]))
        };
        [idf(norms.n, df_title), idf(norms.n, df_content)]
    }

    /// The query's words `ids` as the lists a search reads and sums, in that order: each
    /// word's titles and its contents (one that no document holds in a field has no list of
    /// it), rarest first (highest inverse document frequency), then query order, titles
    /// first. The order depends only on the live documents, never on what was written
    /// before, so that an index and one built afresh from the same documents sum each score
    /// in the same order, to the same float. Rarer lists tend to have the higher bounds (see
    /// the module docs, "Pruning"), but any order gives the same answer.
    fn reading_order(&self, ids: &[u32], norms: &Norms) -> Vec<List> {
        let mut lists = Vec::with_capacity(2 * ids.len());
        for &id in ids {
            let idfs = self.idfs(id, norms);
            for field in [TITLE, CONTENT] {
                if self.df[id as usize][field] == 0 {
                    continue;
                }
                let peak = self.peaks[id as usize][field];
                lists.push(List {
                    id,
                    field,
                    idf: idfs[field],
                    bound: idfs[field] * norms.saturation(field, peak.count, peak.len),
                });
            }
        }
        lists.sort_by(|a, b| b.idf.total_cmp(&a.idf));
        lists
    }

    /// One posting's part of its document's score in `list`. Every path sums these, per
    /// document, in the query's reading order (`reading_order`), starting from zero: so
    /// each gives the same floats.
    #[inline]
    fn part(&self, p: &Posting, list: &List, norms: &Norms) -> f32 {
        let lens = self.lens[p.slot as usize];
        let (count, len) = match list.field {
            TITLE => (p.title, lens.0),
            _ => (p.content, lens.1),
        };
        list.idf * norms.saturation(list.field, count, len)
    }

    /// Adds every live posting of the `lists`, in that order, to its document's score in
    /// `scratch` (the tests' full evaluation).
    #[cfg(test)]
    fn accumulate(&self, lists: &[List], norms: &Norms, scratch: &mut Scratch) {
        if scratch.scores.len() < self.keys.len() {
            scratch.scores.resize(self.keys.len(), 0.0);
        }
        for list in lists {
            self.add_postings(list, norms, scratch);
        }
    }

    /// The best `limit` of the documents scored in `scratch` that `keep` accepts, best first;
    /// leaves every score in `scratch` zero.
    fn best_touched(
        &self,
        limit: usize,
        keep: &dyn Fn(&DocTags) -> bool,
        scratch: &mut Scratch,
    ) -> Vec<(u32, f32)> {
        // Only documents at the `limit`-th best score or above can be among the best.
        let least = self.kth_score(limit, keep, scratch).unwrap_or(f32::MIN);
        let mut best = Best::new(self, limit, keep);
        for slot in scratch.touched.drain(..) {
            let score = std::mem::take(&mut scratch.scores[slot as usize]);
            if score >= least {
                best.offer(slot, score);
            }
        }
        best.ranked()
    }

    /// The best `limit` documents for the `lists` (see the module docs, "Pruning"): exactly
    /// the answer of scoring every posting of the lists in their order then
    /// [`best_touched`](Self::best_touched), reading the lists in that order until the
    /// unread ones cannot change it.
    fn search_pruned(
        &self,
        lists: &[List],
        norms: &Norms,
        limit: usize,
        keep: &dyn Fn(&DocTags) -> bool,
        scratch: &mut Scratch,
    ) -> Vec<(u32, f32)> {
        // unread[j]: the most the lists from the `j`-th on can add together.
        let mut unread = vec![0.0f32; lists.len() + 1];
        for j in (0..lists.len()).rev() {
            unread[j] = unread[j + 1] + lists[j].bound;
        }
        // Bounds are summed apart from the scores: compare with room for their rounding, so
        // that a document is passed over only when it is plainly below.
        let below = |score: f32, threshold: f32| score * (1.0 + 1e-4) + 1e-6 < threshold;
        if scratch.scores.len() < self.keys.len() {
            scratch.scores.resize(self.keys.len(), 0.0);
        }
        // Before the last list, each list read may end the reading.
        for j in 0..lists.len().saturating_sub(1) {
            self.add_postings(&lists[j], norms, scratch);
            let rest = unread[j + 1];
            // No score so far exceeds what the lists read can add: none can exceed the rest.
            if scratch.touched.len() < limit || !below(rest, unread[0] - rest) {
                continue;
            }
            let Some(threshold) = self.kth_score(limit, keep, scratch) else {
                continue;
            };
            if !below(rest, threshold) {
                continue;
            }
            // A document no list read reaches scores at most `rest`, below the `limit`
            // documents already at `threshold` or more: the best are among those reached, and
            // only those that the unread lists could lift to `threshold` need their score.
            let mut reached: Vec<u32> = (scratch.touched.iter().copied())
                .filter(|&slot| !below(scratch.scores[slot as usize] + rest, threshold))
                .collect();
            // Thousands of documents that may still make it (a word in every document of one
            // shape) are cheaper summed in one pass than looked up one by one: read on.
            let unread: usize = lists[j + 1..].iter().map(|l| self.list_len(l)).sum();
            if reached.len() * (lists.len() - j - 1) * LOOKUP_COST > unread {
                continue;
            }
            let mut best = Best::new(self, limit, keep);
            let scores = self.scores_from(&mut reached, &scratch.scores, &lists[j + 1..], norms);
            for (slot, score) in reached.into_iter().zip(scores) {
                best.offer(slot, score);
            }
            for slot in scratch.touched.drain(..) {
                scratch.scores[slot as usize] = 0.0;
            }
            return best.ranked();
        }
        // Every list read: the scores are whole.
        if let Some(last) = lists.last() {
            self.add_postings(last, norms, scratch);
        }
        self.best_touched(limit, keep, scratch)
    }

    /// Adds every live posting of `list` to its document's score in `scratch`.
    fn add_postings(&self, list: &List, norms: &Norms, scratch: &mut Scratch) {
        let Scratch { scores, touched } = scratch;
        let postings = &self.postings[list.id as usize];
        #[cfg(test)]
        POSTINGS_READ.with(|r| r.set(r.get() + self.list_len(list)));
        let mut add = |p: &Posting| {
            let at = p.slot as usize;
            if !self.alive[at] {
                return;
            }
            if scores[at] == 0.0 {
                touched.push(p.slot);
            }
            scores[at] += self.part(p, list, norms);
        };
        match list.field {
            TITLE => {
                (self.titled[list.id as usize].iter()).for_each(|&at| add(&postings[at as usize]))
            }
            _ => postings.iter().filter(|p| p.content > 0).for_each(add),
        }
    }

    /// The `limit`-th best score in `scratch` among the live documents `keep` accepts, if
    /// there are that many. Only scores are kept, not which documents have them: most
    /// documents cost one comparison with the lowest of the best so far, and `keep` is asked
    /// only of those above it.
    fn kth_score(
        &self,
        limit: usize,
        keep: &dyn Fn(&DocTags) -> bool,
        scratch: &Scratch,
    ) -> Option<f32> {
        if limit == 0 {
            return None;
        }
        // The best scores so far, lowest first.
        let mut top: Vec<f32> = Vec::with_capacity(limit + 1);
        for &slot in &scratch.touched {
            let score = scratch.scores[slot as usize];
            if top.len() == limit && score <= top[0] {
                continue;
            }
            if !self.alive[slot as usize] || !keep(&self.tags[slot as usize]) {
                continue;
            }
            top.insert(top.partition_point(|&s| s < score), score);
            if top.len() > limit {
                top.remove(0);
            }
        }
        (top.len() == limit).then(|| top[0])
    }

    /// Postings `list` reads.
    fn list_len(&self, list: &List) -> usize {
        match list.field {
            TITLE => self.titled[list.id as usize].len(),
            _ => self.postings[list.id as usize].len(),
        }
    }

    /// The score of `slot` for the `lists`, summed from zero in their order as the scan sums
    /// it, so both give the same float.
    #[cfg(test)]
    fn score_of(&self, slot: u32, lists: &[List], norms: &Norms) -> f32 {
        self.score_from(slot, 0.0, lists, norms)
    }

    /// The scores of the `slots` (sorted here) for the lists before `lists` (`read`, by slot)
    /// and `lists`, in the sorted order: each the float the scan sums (its parts added in
    /// the lists' order), the
    /// lists read one after another, each looked up for the slots in increasing order
    /// ([`gallop`]).
    fn scores_from(
        &self,
        slots: &mut [u32],
        read: &[f32],
        lists: &[List],
        norms: &Norms,
    ) -> Vec<f32> {
        slots.sort_unstable();
        let mut scores: Vec<f32> = slots.iter().map(|&s| read[s as usize]).collect();
        for list in lists {
            let postings = &self.postings[list.id as usize];
            let mut at = 0;
            for (score, &slot) in scores.iter_mut().zip(slots.iter()) {
                at = gallop(postings, at, slot);
                match postings.get(at) {
                    Some(p) if p.slot == slot => *score += self.part(p, list, norms),
                    Some(_) => {}
                    None => break,
                }
            }
        }
        scores
    }

    /// `read` (the score of `slot` from the lists before `lists`) plus its parts in `lists`,
    /// added in their order as the scan adds them, so both give the same float. Posting
    /// lists are in slot order: slots are only ever appended, and compaction keeps their
    /// order.
    #[cfg(test)]
    fn score_from(&self, slot: u32, read: f32, lists: &[List], norms: &Norms) -> f32 {
        let mut score = read;
        for list in lists {
            let postings = &self.postings[list.id as usize];
            // A posting without the list's field adds nothing: its part is zero, as the scan
            // never reads it.
            if let Ok(i) = postings.binary_search_by_key(&slot, |p| p.slot) {
                score += self.part(&postings[i], list, norms);
            }
        }
        score
    }
}

/// The index of the first of `postings[from..]` whose slot is at least `slot` (or the
/// length): steps that double from `from`, then a binary search of the last step. Slots looked
/// up in increasing order from where the last one was found cost the log of the gap between
/// them, mostly in memory just read, where a binary search of the whole list costs its log,
/// most steps missing the cache.
fn gallop(postings: &[Posting], from: usize, slot: u32) -> usize {
    let mut step = 1;
    let mut lo = from;
    while lo + step < postings.len() && postings[lo + step].slot < slot {
        lo += step;
        step *= 2;
    }
    let hi = (lo + step + 1).min(postings.len());
    lo + postings[lo..hi].partition_point(|p| p.slot < slot)
}

/// The fields, as indexes of per-field pairs.
const TITLE: usize = 0;
const CONTENT: usize = 1;

/// The BM25 parts every posting of one search shares.
struct Norms {
    /// Live documents.
    n: f32,
    /// Each field's length normalisation, per unit of length.
    per_len: [f32; 2],
    base: f32,
}

impl Norms {
    /// BM25's saturation of a term counted `count` times in a `field` of `len` terms: what
    /// multiplies its inverse document frequency. It grows with `count` and falls with
    /// `len`, so a list's highest count and shortest field bound its parts.
    #[inline]
    fn saturation(&self, field: usize, count: u16, len: u32) -> f32 {
        if count == 0 {
            return 0.0;
        }
        let tf = f32::from(count);
        tf * (K1 + 1.0) / (tf + self.base + self.per_len[field] * len as f32)
    }
}

/// One list a search reads: a word's titles or its contents.
struct List {
    id: u32,
    field: usize,
    idf: f32,
    /// The most one posting of the list adds to a score.
    bound: f32,
}

/// The highest count of a term in one document's field and the shortest such field, over a
/// list's postings.
#[derive(Debug, Clone, Copy)]
struct Peak {
    count: u16,
    len: u32,
}

impl Peak {
    const NONE: Peak = Peak {
        count: 0,
        len: u32::MAX,
    };

    fn add(&mut self, count: u16, len: u32) {
        if count > 0 {
            self.count = self.count.max(count);
            self.len = self.len.min(len);
        }
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

#[cfg(test)]
thread_local! {
    /// Postings a search on this thread scanned (look-ups not counted), for the tests.
    static POSTINGS_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The best `limit` documents offered, among those `keep` accepts: a heap whose top is the
/// worst kept, so most candidates cost one comparison with it. An equal score loses to the
/// kept one unless its key comes first: when most documents tie (a word in every document,
/// documents of one shape) that comparison, not a push, is what they cost.
struct Best<'a> {
    index: &'a TextIndex,
    limit: usize,
    keep: &'a dyn Fn(&DocTags) -> bool,
    heap: BinaryHeap<Ranked<'a>>,
}

impl<'a> Best<'a> {
    fn new(index: &'a TextIndex, limit: usize, keep: &'a dyn Fn(&DocTags) -> bool) -> Self {
        Best {
            index,
            limit,
            keep,
            heap: BinaryHeap::with_capacity(limit + 1),
        }
    }

    /// Offers the live `slot` with `score`; a dead slot is passed over.
    fn offer(&mut self, slot: u32, score: f32) {
        let Some(key) = &self.index.keys[slot as usize] else {
            return;
        };
        let prefix = self.index.key_prefixes[slot as usize];
        let loses = |w: &Ranked| {
            score < w.score || (score == w.score && (prefix, &**key) > (w.prefix, w.key))
        };
        if self.heap.len() == self.limit && self.heap.peek().is_some_and(loses) {
            return;
        }
        if !(self.keep)(&self.index.tags[slot as usize]) {
            return;
        }
        self.heap.push(Ranked {
            score,
            prefix,
            key,
            slot,
        });
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
    }

    /// `(slot, score)`, best first.
    fn ranked(self) -> Vec<(u32, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|r| (r.slot, r.score))
            .collect()
    }
}

/// A search result in the heap: ordered best first (higher score, then lower key), so the
/// heap's top is the worst result kept.
struct Ranked<'a> {
    score: f32,
    /// The key's first bytes (see `TextIndex::key_prefixes`).
    prefix: u64,
    key: &'a str,
    slot: u32,
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| (self.prefix, self.key).cmp(&(other.prefix, other.key)))
    }
}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked<'_> {}

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
            mentions: Box::default(),
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
    fn gallop_finds_what_a_binary_search_finds_from_any_start() {
        let postings: Vec<Posting> = [1u32, 3, 4, 9, 10, 11, 30, 31, 64, 100]
            .into_iter()
            .map(|slot| Posting {
                slot,
                title: 0,
                content: 1,
            })
            .collect();
        for from in 0..=postings.len() {
            for slot in 0..110 {
                let want = from + postings[from..].partition_point(|p| p.slot < slot);
                assert_eq!(
                    gallop(&postings, from, slot),
                    want,
                    "from {from} slot {slot}"
                );
            }
        }
        assert_eq!(gallop(&[], 0, 5), 0);
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
    fn search_reads_counts_the_postings_a_search_reads() {
        let index = index(&[
            ("a", "kernel", "the graph"),
            ("b", "", "the graph of the kernel"),
            ("c", "", "the rare word"),
            ("d", "", "the end"),
        ]);
        // "kernel" 2 postings, "rare" 1, "graph" 2, "the" 4; "nothing" none.
        let q = |s: &str| query_terms(s);
        assert_eq!(index.search_reads(&q("the")), 4);
        assert_eq!(index.search_reads(&q("nothing")), 0);
        // Every list but the longest, and as many look-ups.
        assert_eq!(index.search_reads(&q("kernel rare nothing")), 2);
        assert_eq!(index.search_reads(&q("the rare graph")), 2 * (1 + 2));
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
        // Mentions link a document to more entities; it is found once, at the first.
        let mentioning = |e: &str, m: &[&str]| DocTags {
            mentions: m.iter().map(|&m| Arc::from(m)).collect(),
            ..linked(e)
        };
        index.upsert(
            "d5",
            &Analysed::new("e", "five"),
            mentioning("Ada", &["Bob", "Cy"]),
        );
        assert_eq!(of(&index, &["Cy"]), ["d5"]);
        assert_eq!(of(&index, &["Bob"]), ["d1", "d5"]);
        let places = index.documents_by_entity(["Cy", "Bob", "Ada"]);
        assert!(
            places.iter().any(|(k, i)| &**k == "d5" && *i == 0),
            "{places:?}"
        );
        assert_eq!(places.len(), 3, "{places:?}");
        assert_eq!(index.mentioning("Bob"), [Arc::from("d5")]);
        assert!(
            index.mentioning("Ada").is_empty(),
            "Ada is d5's entity, not a mention"
        );
        // A mention dropped; rewritten with other mentions; removed.
        index.unmention("d5", "Cy");
        assert!(of(&index, &["Cy"]).is_empty());
        index.upsert(
            "d5",
            &Analysed::new("e", "five"),
            mentioning("Ada", &["Dee"]),
        );
        assert_eq!(of(&index, &["Bob"]), ["d1"]);
        assert_eq!(of(&index, &["Dee"]), ["d5"]);
        index.remove("d5");
        assert!(of(&index, &["Dee"]).is_empty());
        assert_eq!(of(&index, &["Ada"]), ["d4"]);
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
    /// The pruned search answers every query, limit and filter exactly as the full
    /// evaluation does (every posting of every word scored), through writes, removals and
    /// compactions, with some words in most documents and some in few.
    mod pruned {
        use super::*;
        use proptest::prelude::*;

        fn full(
            index: &TextIndex,
            terms: &[String],
            limit: usize,
            keep: &dyn Fn(&DocTags) -> bool,
        ) -> Vec<(VectorKey, f32)> {
            let norms = index.norms();
            let lists = index.reading_order(&index.ids(terms), &norms);
            let mut scratch = Scratch::default();
            index.accumulate(&lists, &norms, &mut scratch);
            (index.best_touched(limit, keep, &mut scratch).into_iter())
                .filter_map(|(slot, score)| Some((index.keys[slot as usize].clone()?, score)))
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn answers_as_the_full_evaluation(seed in any::<u64>()) {
                let mut rng = crate::generate::Rng::new(seed);
                let mut next = move |n: u64| rng.below(n as usize) as u64;
                // Skewed: the first words are in most documents.
                let words = ["is", "the", "of", "graph", "kernel", "x1", "x2", "rare"];
                let word = |next: &mut dyn FnMut(u64) -> u64| words[(next(8) * next(8) / 7) as usize];
                let mut index = TextIndex::new();
                for _ in 0..300 {
                    let key = format!("k{:02}", next(40));
                    if next(6) == 0 {
                        index.remove(&key);
                    } else if next(50) == 0 {
                        index.compact();
                    } else {
                        let title: Vec<&str> = (0..next(3)).map(|_| word(&mut next)).collect();
                        let content: Vec<&str> = (0..1 + next(6)).map(|_| word(&mut next)).collect();
                        let source = if next(2) == 0 { "a" } else { "b" };
                        let text = Analysed::new(&title.join(" "), &content.join(" "));
                        index.upsert(&key, &text, tags(source));
                    }
                    if next(3) != 0 {
                        continue;
                    }
                    for _ in 0..6 {
                        let q: Vec<&str> = (0..1 + next(5)).map(|_| word(&mut next)).collect();
                        let terms = query_terms(&q.join(" "));
                        let limit = 1 + next(8) as usize;
                        let only = ["", "a", "b"][next(3) as usize];
                        let keep = |t: &DocTags| only.is_empty() || &*t.source == only;
                        let want = full(&index, &terms, limit, &keep);
                        let got = index.search(&terms, limit, &keep);
                        prop_assert_eq!(&got, &want, "{:?} limit {} only {:?}", terms, limit, only);
                    }
                }
            }
        }

        /// 2,000 documents shaped as real text: "the", "package", "of" and "tools" in every
        /// one, "zebra" in five (every 400th), and the title `title(i)`.
        fn zebras(title: impl Fn(usize) -> &'static str) -> TextIndex {
            let mut index = TextIndex::new();
            for i in 0..2000 {
                let rare = if i % 400 == 0 { " zebra" } else { "" };
                let text = format!("the package of the tools w{}{rare}", i % 50);
                index.upsert(
                    &format!("k{i:04}"),
                    &Analysed::new(title(i), &text),
                    tags("s"),
                );
            }
            index
        }

        /// On an index shaped as real text (a few words in nearly every document, many in
        /// few), a query of rare and common words stops before the common words' lists.
        #[test]
        fn common_words_lists_are_not_read_when_rare_words_decide() {
            let index = zebras(|_| "");
            let terms = query_terms("the zebra of");
            POSTINGS_READ.with(|r| r.set(0));
            let got = index.search(&terms, 3, &|_| true);
            // zebra's five postings, not the 2,000 of "the" or of "of".
            assert_eq!(POSTINGS_READ.with(|r| r.get()), 5);
            assert_eq!(got, full(&index, &terms, 3, &|_| true));
            assert_eq!(got.len(), 3);
            // Only zebra's five documents were scored, each from every word.
            let norms = index.norms();
            let lists = index.reading_order(&index.ids(&terms), &norms);
            let mut scratch = Scratch::default();
            let pruned = index.search_pruned(&lists, &norms, 3, &|_| true, &mut scratch);
            assert!(scratch.touched.is_empty() && scratch.scores.iter().all(|s| *s == 0.0));
            for (slot, score) in pruned {
                assert_eq!(score, index.score_of(slot, &lists, &norms));
            }
        }

        /// A common word that a few titles hold is read as those titles alone: its long list
        /// of contents, whose every part is small, is not read once rare words decide.
        #[test]
        fn a_common_words_few_titles_do_not_make_its_contents_read() {
            let index = zebras(|i| if i % 1000 == 1 { "the" } else { "" });
            let terms = query_terms("the zebra");
            POSTINGS_READ.with(|r| r.set(0));
            let got = index.search(&terms, 5, &|_| true);
            // The two titles with "the", then zebra's five contents; not the 2,000 contents.
            assert_eq!(POSTINGS_READ.with(|r| r.get()), 7);
            assert_eq!(got, full(&index, &terms, 5, &|_| true));
            assert_eq!(got.len(), 5);
        }
    }
}
