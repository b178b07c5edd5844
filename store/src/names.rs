//! [`NameIndex`]: entity name search from byte n-gram posting lists instead of a scan of every
//! name. Its own file because it is a self-contained structure with its own invariants; the
//! [`GraphIndex`](crate::GraphIndex) owns one and keeps it in step with its nodes.
//!
//! The answers are the scan's, byte for byte: every name whose case-folded form
//! ([`fold_case`]) contains the folded query, ranked exact, then prefix, then elsewhere, each
//! rank in byte order of the original name, cut at `limit`. The index gets there without
//! looking at every match:
//! - every list holds node ids **in name order**, so each rank is a walk from the front of one
//!   list that stops after `limit` hits: the work is the answer plus the candidates skipped
//!   (other entity types, other ranks, trigram false positives), never a sort of every match;
//! - exact hits come from a map folded name -> ids (several names can fold alike: `Foo`, `FOO`);
//! - prefix hits of a 1 to 3 byte query are its "starts-with" list, exactly; a longer ASCII
//!   query skip-scans the list of all names: the names whose folded form starts with an ASCII
//!   query are those whose first bytes are a case variant of it, and each variant's names lie
//!   together in name order, so the walk jumps (binary search) from one variant to the next
//!   instead of reading the names between. Walking the starts-with list of the query's first
//!   three bytes instead read half the list for `entity 05` in a `kbq gen` graph (every name
//!   starts `entity`, the hits sit in the middle). A longer non-ASCII query, or any long query
//!   while a name holds one of the two characters that fold to ASCII from outside it (U+0130,
//!   U+212A), walks that starts-with list and checks each name, skipping as below;
//! - substring hits of a 1 to 3 byte query are its n-gram list, exactly; a longer query walks
//!   the shortest list among its trigrams and checks each name with `contains`. A name that
//!   fails the check and lacks one of the query's trigrams sends the walk to the next name of
//!   that trigram's list, and the names after are checked against that list first (a
//!   galloping cursor), so a run of names that lack it costs a seek, not a check each:
//!   `lipse.core.collections` walked every `org.eclipse.*` name before its first hit, 197 µs;
//!   intersecting the three shortest lists was no better (a word's trigrams are in the same
//!   names: the shortest lists of `.index` are `dex`, `ind`, `nde`), and every list costs a
//!   seek per hit. Byte n-grams of UTF-8 are exact for substring tests (UTF-8 is
//!   self-synchronising), so Unicode names need no special case.
//!
//! Lists are kept in blocks of at most `BLOCK` ids: an insert moves at most a block, not a
//! list as long as the graph (a name's one-byte grams are in lists of nearly every name), so an
//! import in any order stays linear. A new name finds its place in each of its lists (about 36
//! for `kbq gen`'s names, 90 for dotted package paths) by comparing order labels, integers
//! that rise with the names' byte order, not the names: comparing names cost 62 µs per new
//! `kbq gen` name and 164 µs per package path (cache misses on every string), labels 28 µs and
//! 80 µs. Names come in batches ([`NameIndex::extend`]): a batch is sorted once, labelled gap
//! by gap, and merged into each list in one pass over the blocks it lands in, so that a list
//! many of the batch's names share (a common gram) is searched once (`benches/names.rs` gives
//! the costs one at a time and in batches). When a gap between labels has no room left, every
//! label is given again in name order, which moves nothing in the lists; names past either end
//! take labels a bounded step apart, so that an import in name order does not use up the room
//! at the end. [`NameIndex::build`] is the batch of every name into an empty index.
//!
//! Names are also found by their acronyms ([`NameIndex::by_acronym`]: "IBM" finds
//! "International Business Machines", which shares no gram with it), for ingestion's entity
//! resolution. That map is built at its first use, not with the index, and kept in step by
//! every change after: a knowledge base that never ingests pays nothing for it at start.

use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;

/// Lower-cases a name the way search compares names (Unicode lower case).
pub fn fold_case(s: &str) -> String {
    s.to_lowercase()
}

/// Ranks a search hit: 0 exact, 1 prefix, 2 elsewhere (all case-insensitive); `None` if no hit.
pub fn search_rank(name_lower: &str, query_lower: &str) -> Option<u8> {
    if name_lower == query_lower {
        Some(0)
    } else if name_lower.starts_with(query_lower) {
        Some(1)
    } else if name_lower.contains(query_lower) {
        Some(2)
    } else {
        None
    }
}

/// Most ids in one block of a [`NameList`]: a fuller block splits. The unit tests use small
/// blocks, so that their few names span many blocks.
const BLOCK: usize = if cfg!(test) { 8 } else { 512 };

/// Most room between the labels of new names that sort before or after every other name
/// (see [`NameIndex::label_new`]): a quarter of the label range lasts 2^22 such names. The
/// unit tests use a large step, so that their few names use up the ends.
const END_STEP: u64 = if cfg!(test) { 1 << 58 } else { 1 << 40 };

/// The two characters outside ASCII whose lower case holds an ASCII character: `İ` -> `i̇`
/// (`i`, then a combining dot outside ASCII, so it can only end an ASCII prefix) and the
/// Kelvin sign -> `k`. While a name holds one, a folded ASCII prefix ending in `i`, or holding
/// `k`, may come from bytes that are not a case variant of it, and such a query does not
/// skip-scan.
const FOLDS_INTO_ASCII: [char; 2] = ['\u{130}', '\u{212A}'];

/// A name's n-gram (n = 1, 2 or 3 bytes) packed with its length into one key.
fn gram_key(gram: &[u8]) -> u32 {
    gram.iter()
        .fold(gram.len() as u32, |key, &b| (key << 8) | u32::from(b))
}

/// The distinct n-grams (n = 1, 2, 3) of a folded name, each once.
fn grams_of(folded: &str) -> Vec<u32> {
    let bytes = folded.as_bytes();
    let mut grams: Vec<u32> = (1..=3)
        .flat_map(|n| bytes.windows(n).map(gram_key))
        .collect();
    grams.sort_unstable();
    grams.dedup();
    grams
}

/// The starts-with keys of a folded name: its first 1, 2 and 3 bytes.
fn starts_of(folded: &str) -> impl Iterator<Item = u32> + '_ {
    let bytes = folded.as_bytes();
    (1..=bytes.len().min(3)).map(|n| gram_key(&bytes[..n]))
}

/// Node ids in name order, in blocks (see [`BLOCK`]). The order is the caller's: every
/// method that places an id takes `before(x)`, true when `x`'s name sorts before the id's.
#[derive(Default)]
struct NameList {
    blocks: Vec<Vec<u32>>,
    len: usize,
}

/// A place in a [`NameList`]: block, then offset in it.
type Cursor = (usize, usize);

impl NameList {
    /// The first place whose id does not sort before (`before` is false), or the end.
    fn seek(&self, before: impl Fn(u32) -> bool) -> Cursor {
        let b = self
            .blocks
            .partition_point(|block| block.last().is_some_and(|&x| before(x)));
        match self.blocks.get(b) {
            Some(block) => (b, block.partition_point(|&x| before(x))),
            None => (b, 0),
        }
    }

    /// [`NameList::seek`] from `from`, when every id before `from` sorts before: gallops over
    /// the blocks, then within one, so a walk that moves forward pays for the distance it
    /// moves, not for the length of the list.
    fn seek_from(&self, (b, o): Cursor, before: impl Fn(u32) -> bool) -> Cursor {
        let Some(block) = self.blocks.get(b) else {
            return (b, 0);
        };
        if block.last().is_some_and(|&x| !before(x)) {
            return (b, o + gallop(&block[o..], |&x| before(x)));
        }
        let b = b
            + 1
            + gallop(&self.blocks[b + 1..], |block| {
                block.last().is_some_and(|&x| before(x))
            });
        match self.blocks.get(b) {
            Some(block) => (b, block.partition_point(|&x| before(x))),
            None => (b, 0),
        }
    }

    fn get(&self, (b, o): Cursor) -> Option<u32> {
        self.blocks.get(b).and_then(|block| block.get(o)).copied()
    }

    /// The id before a place, if any.
    fn prev(&self, (b, o): Cursor) -> Option<u32> {
        match o {
            0 => b
                .checked_sub(1)
                .and_then(|b| self.blocks[b].last().copied()),
            _ => Some(self.blocks[b][o - 1]),
        }
    }

    fn next(&self, (b, o): Cursor) -> Cursor {
        if o + 1 < self.blocks[b].len() {
            (b, o + 1)
        } else {
            (b + 1, 0)
        }
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.blocks.iter().flatten().copied()
    }

    /// Inserts `ids`, in name order and none of them here yet (`label` gives the order): each
    /// block they land in is merged with its new ids once, and split once if it overflows, so
    /// a batch costs a pass over the blocks it touches, not a search and a move per id.
    fn insert_sorted(&mut self, ids: &[u32], label: impl Fn(u32) -> u64) {
        self.len += ids.len();
        if self.blocks.is_empty() {
            self.blocks = ids.chunks(BLOCK / 2).map(<[u32]>::to_vec).collect();
            return;
        }
        let mut b = 0;
        let mut rest = ids;
        while let Some(&first) = rest.first() {
            // The first block whose last id sorts after `first` (or the last block) takes
            // `first` and every new id that sorts before its last id. The first search is a
            // binary one (the batch may land anywhere), the next ones gallop from there.
            let l = label(first);
            let ends_before = |block: &Vec<u32>| block.last().is_some_and(|&x| label(x) < l);
            b += if rest.len() < ids.len() {
                gallop(&self.blocks[b..], ends_before)
            } else if self.blocks.last().is_some_and(ends_before) {
                // After every id here, as in an import in name order.
                self.blocks.len()
            } else {
                self.blocks.partition_point(ends_before)
            };
            b = b.min(self.blocks.len() - 1);
            let n = match self.blocks.get(b + 1) {
                None => rest.len(),
                Some(_) => {
                    let last = self.blocks[b].last().map_or(0, |&x| label(x));
                    rest.partition_point(|&x| label(x) < last)
                }
            };
            merge_into(&mut self.blocks[b], &rest[..n], &label);
            rest = &rest[n..];
            let len = self.blocks[b].len();
            if len > BLOCK {
                let size = len.div_ceil(len.div_ceil(BLOCK * 3 / 4));
                let block = std::mem::take(&mut self.blocks[b]);
                let pieces = block.chunks(size).map(<[u32]>::to_vec);
                let count = pieces.len();
                self.blocks.splice(b..=b, pieces);
                b += count - 1;
            }
            // Every id left sorts after this block's.
            b += 1;
        }
    }

    /// The place of `id`, found by its name.
    fn find(&self, id: u32, before: impl Fn(u32) -> bool) -> Option<Cursor> {
        let at = self.seek(before);
        (self.get(at) == Some(id)).then_some(at)
    }

    fn remove(&mut self, id: u32, before: impl Fn(u32) -> bool) {
        if let Some((b, o)) = self.find(id, before) {
            self.len -= 1;
            self.blocks[b].remove(o);
            if self.blocks[b].is_empty() {
                self.blocks.remove(b);
            }
        }
    }

    /// Gives the entry of `old` the id `new` (same name, so the same place).
    fn renumber(&mut self, old: u32, new: u32, before: impl Fn(u32) -> bool) {
        if let Some((b, o)) = self.find(old, before) {
            self.blocks[b][o] = new;
        }
    }
}

/// Posting lists over the case-folded names of a graph's nodes, for ranked name search (see
/// the module doc). Ids are the [`GraphIndex`](crate::GraphIndex)'s node ids: a new name takes
/// the next id, and [`NameIndex::swap_remove`] renumbers the way `Vec::swap_remove` does.
#[derive(Default)]
pub struct NameIndex {
    /// Original names, by id.
    names: Vec<Arc<str>>,
    /// Order labels, by id: they rise with the names' byte order, the order of every list.
    labels: Vec<u64>,
    /// Folded names, by id: what queries compare.
    folded: Vec<Box<str>>,
    /// Folded name -> ids of the names that fold to it (any order).
    exact: FxHashMap<Box<str>, Vec<u32>>,
    /// N-gram -> names whose folded form contains it.
    grams: FxHashMap<u32, NameList>,
    /// N-gram -> names whose folded form starts with it.
    starts: FxHashMap<u32, NameList>,
    /// Every name.
    all: NameList,
    /// How many names hold each character of [`FOLDS_INTO_ASCII`].
    folds_into_ascii: [usize; 2],
    /// Acronym -> ids of the names that go by it ([`acronyms_of`]), in no order: built by the
    /// first [`NameIndex::by_acronym`], then kept in step by every change.
    acronyms: OnceLock<FxHashMap<Box<str>, Vec<u32>>>,
}

/// The acronyms a name goes by: those of its key ([`kbq_ingest::acronyms`], which says which).
fn acronyms_of(name: &str) -> Vec<String> {
    kbq_ingest::acronyms(&kbq_ingest::name_key(name))
}

/// Adds name `id` under each of its acronyms.
fn add_acronyms(map: &mut FxHashMap<Box<str>, Vec<u32>>, id: u32, name: &str) {
    for a in acronyms_of(name) {
        map.entry(a.into_boxed_str()).or_default().push(id);
    }
}

impl NameIndex {
    /// Indexes `names` (ids 0, 1, ... in the order given): [`NameIndex::extend`] of an empty
    /// index, which sorts the names once and fills each list in name order.
    pub fn build(names: Vec<Arc<str>>) -> Self {
        let mut index = NameIndex::default();
        index.extend(names);
        index
    }

    /// How many names are indexed.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The folded form of name `id`.
    pub fn folded(&self, id: u32) -> &str {
        &self.folded[id as usize]
    }

    /// Adds a name (not already indexed) under the next id, [`NameIndex::len`].
    pub fn push(&mut self, name: Arc<str>) {
        self.extend([name]);
    }

    /// Adds names (none already indexed, no two alike) under the next ids, in the order given.
    /// The batch is sorted once, labelled by the gaps between the names it lands among, and
    /// merged into each of its lists in one pass (`NameList::insert_sorted`): a list that
    /// takes many of the batch's names (a common gram) is walked once, not searched per name.
    pub fn extend(&mut self, names: impl IntoIterator<Item = Arc<str>>) {
        let first = self.names.len() as u32;
        for name in names {
            self.folds_into_ascii = add(self.folds_into_ascii, &name, 1);
            self.folded.push(fold_case(&name).into_boxed_str());
            self.names.push(name);
            self.labels.push(0);
        }
        let mut new: Vec<u32> = (first..self.names.len() as u32).collect();
        new.sort_unstable_by(|&a, &b| self.name(a).cmp(self.name(b)));
        self.label_new(&new);
        // (key, rank in `new`) pairs, sorted: each key's new names come together, in name
        // order, with one allocation for the batch rather than one per key.
        let (mut grams, mut starts) = (Vec::new(), Vec::new());
        for (rank, &id) in new.iter().enumerate() {
            let f = &self.folded[id as usize];
            let pair = |key: u32| (u64::from(key) << 32) | rank as u64;
            grams.extend((1..=3).flat_map(|n| f.as_bytes().windows(n).map(gram_key).map(pair)));
            starts.extend(starts_of(f).map(pair));
            self.exact.entry(f.clone()).or_default().push(id);
        }
        let labels = &self.labels;
        let label = |x: u32| labels[x as usize];
        let mut ids = Vec::new();
        for (lists, mut pairs) in [(&mut self.grams, grams), (&mut self.starts, starts)] {
            sort_by_key(&mut pairs);
            pairs.dedup();
            for group in pairs.chunk_by(|a, b| a >> 32 == b >> 32) {
                ids.clear();
                ids.extend(group.iter().map(|&p| new[p as u32 as usize]));
                let key = (group[0] >> 32) as u32;
                lists.entry(key).or_default().insert_sorted(&ids, label);
            }
        }
        self.all.insert_sorted(&new, label);
        if let Some(acronyms) = self.acronyms.get_mut() {
            for id in first..self.names.len() as u32 {
                add_acronyms(acronyms, id, &self.names[id as usize]);
            }
        }
    }

    /// The ids of the names that go by `acronym` (lower case, as [`kbq_ingest::acronyms`]
    /// gives them): "ibm" finds "International Business Machines". The first call builds the
    /// map from every name.
    pub fn by_acronym(&self, acronym: &str) -> &[u32] {
        let acronyms = self.acronyms.get_or_init(|| {
            let mut map = FxHashMap::default();
            for (id, name) in self.names.iter().enumerate() {
                add_acronyms(&mut map, id as u32, name);
            }
            map
        });
        acronyms.get(acronym).map_or(&[], Vec::as_slice)
    }

    /// Removes name `id`; the last name takes its id (as `Vec::swap_remove` moves elements).
    pub fn swap_remove(&mut self, id: u32) {
        let f = self.folded[id as usize].clone();
        {
            let before = label_before(&self.labels, id);
            for g in grams_of(&f) {
                remove_from(&mut self.grams, g, id, &before);
            }
            for g in starts_of(&f) {
                remove_from(&mut self.starts, g, id, &before);
            }
            self.all.remove(id, &before);
        }
        if let Some(ids) = self.exact.get_mut(&f) {
            ids.retain(|&x| x != id);
            if ids.is_empty() {
                self.exact.remove(&f);
            }
        }
        self.folds_into_ascii = add(self.folds_into_ascii, &self.names[id as usize], -1);

        let last = (self.names.len() - 1) as u32;
        if let Some(acronyms) = self.acronyms.get_mut() {
            for a in acronyms_of(&self.names[id as usize]) {
                if let Some(ids) = acronyms.get_mut(a.as_str()) {
                    ids.retain(|&x| x != id);
                    if ids.is_empty() {
                        acronyms.remove(a.as_str());
                    }
                }
            }
            if id != last {
                for a in acronyms_of(&self.names[last as usize]) {
                    if let Some(x) = acronyms
                        .get_mut(a.as_str())
                        .and_then(|ids| ids.iter_mut().find(|x| **x == last))
                    {
                        *x = id;
                    }
                }
            }
        }
        if id != last {
            // The last name keeps its place in every list: only its id changes.
            let f = self.folded[last as usize].clone();
            let before = label_before(&self.labels, last);
            for g in grams_of(&f) {
                if let Some(list) = self.grams.get_mut(&g) {
                    list.renumber(last, id, &before);
                }
            }
            for g in starts_of(&f) {
                if let Some(list) = self.starts.get_mut(&g) {
                    list.renumber(last, id, &before);
                }
            }
            self.all.renumber(last, id, &before);
            if let Some(x) = self
                .exact
                .get_mut(&f)
                .and_then(|ids| ids.iter_mut().find(|x| **x == last))
            {
                *x = id;
            }
        }
        self.names.swap_remove(id as usize);
        self.folded.swap_remove(id as usize);
        self.labels.swap_remove(id as usize);
    }

    /// Labels the new names `new` (in name order, not in the lists yet). The new names that
    /// fall between the same two neighbours share the room between their labels evenly; past
    /// either end they step by at most [`END_STEP`], so that names arriving in name order (an
    /// import) leave room for the next. When a gap has no room left, every label is given
    /// again in name order.
    fn label_new(&mut self, new: &[u32]) {
        let mut runs = Vec::new();
        let mut at = (0, 0);
        let mut i = 0;
        while let Some(&id) = new.get(i) {
            // As in `NameList::insert_sorted`: a binary search, then gallops.
            let before = name_before(&self.names, id);
            at = match i {
                0 => self.all.seek(before),
                _ => self.all.seek_from(at, before),
            };
            let end = match self.all.get(at) {
                Some(next) => i + new[i..].partition_point(|&x| self.name(x) < self.name(next)),
                None => new.len(),
            };
            runs.push((at, i..end));
            i = end;
        }
        let label = |x: Option<u32>| x.map(|x| self.labels[x as usize]);
        let mut given = Vec::with_capacity(new.len());
        for (at, run) in runs {
            let (low, high) = (label(self.all.prev(at)), label(self.all.get(at)));
            let k = run.len() as u64;
            let (from, to) = (low.unwrap_or(0), high.unwrap_or(u64::MAX));
            let mut step = (to - from) / (k + 1);
            if low.is_none() || high.is_none() {
                step = step.min(END_STEP);
            }
            if step == 0 || low.is_none() && high.is_none() {
                // No room (or no names yet).
                break;
            }
            given.extend((1..=k).map(|j| match low {
                Some(_) => from + j * step,
                None => to - (k + 1 - j) * step,
            }));
        }
        if given.len() < new.len() {
            let order = merge_by(&self.all.iter().collect::<Vec<_>>(), new, |a, b| {
                self.name(a) < self.name(b)
            });
            spread_labels(&mut self.labels, &order);
            return;
        }
        for (&id, l) in new.iter().zip(given) {
            self.labels[id as usize] = l;
        }
    }

    /// The ids of the names containing `query` case-insensitively, among those `accept` takes:
    /// exact, then prefix, then elsewhere, each in name order, at most `limit`.
    pub fn search(&self, query: &str, limit: usize, accept: impl Fn(u32) -> bool) -> Vec<u32> {
        let q = fold_case(query);
        let mut hits = Vec::new();
        if limit == 0 {
            return hits;
        }
        if let Some(ids) = self.exact.get(q.as_str()) {
            hits.extend(ids.iter().copied().filter(|&id| accept(id)));
            hits.sort_unstable_by(|&a, &b| self.name(a).cmp(self.name(b)));
            hits.truncate(limit);
        }
        // Each stage offers candidates in name order until the answer is full.
        if hits.len() == limit {
            return hits;
        }
        let mut take = |id: u32| {
            if accept(id) {
                hits.push(id);
            }
            hits.len() < limit
        };
        if self.prefix_hits(&q, &mut take) && !q.is_empty() {
            self.substring_hits(&q, &mut take);
        }
        hits
    }

    /// Offers the names whose folded form starts with `q` and is longer, in name order, until
    /// `take` says stop. Returns whether it ran to the end.
    fn prefix_hits(&self, q: &str, take: &mut impl FnMut(u32) -> bool) -> bool {
        let is_prefix_hit = |id: u32| {
            let f = self.folded(id);
            f.len() > q.len() && f.starts_with(q)
        };
        let walk = |list: Option<&NameList>, take: &mut dyn FnMut(u32) -> bool| {
            list.into_iter()
                .flat_map(NameList::iter)
                .filter(|&id| is_prefix_hit(id))
                .all(take)
        };
        let bytes = q.as_bytes();
        match bytes.len() {
            0 => walk(Some(&self.all), take),
            1..=3 => walk(self.starts.get(&gram_key(bytes)), take),
            _ if self.skip_scans(q) => self.ascii_prefix_hits(q, take),
            _ => {
                // The names starting with the first three bytes, skipping those that lack a
                // trigram of the query.
                let (Some(starts), Some(grams)) = (
                    self.starts.get(&gram_key(&bytes[..3])),
                    self.trigram_lists(bytes),
                ) else {
                    return true;
                };
                self.walk(starts, &grams, is_prefix_hit, take)
            }
        }
    }

    /// The posting lists of `q`'s trigrams, each once with its trigram, shortest first;
    /// `None` when a trigram has no list, so that no name contains `q`.
    fn trigram_lists<'a>(&'a self, q: &'a [u8]) -> Option<Vec<(&'a [u8], &'a NameList)>> {
        let mut grams: Vec<&[u8]> = q.windows(3).collect();
        grams.sort_unstable();
        grams.dedup();
        let mut lists: Vec<(&[u8], &NameList)> = grams
            .into_iter()
            .map(|g| self.grams.get(&gram_key(g)).map(|list| (g, list)))
            .collect::<Option<_>>()?;
        lists.sort_by_key(|(_, list)| list.len);
        Some(lists)
    }

    /// Offers the names of `list` that `is_hit` takes, in name order, until `take` says stop;
    /// returns whether it ran to the end. Every hit holds each of `grams` (trigrams, with
    /// their lists): when a name is not a hit and lacks one, the walk jumps to the next name
    /// of that trigram's list, and checks the names after against that list first (a cursor
    /// in it that gallops forward), so a stretch of `list` that lacks it costs one seek,
    /// not a check of every name. The lists of one query's trigrams are often nearly the
    /// same (all of a word's trigrams): the jump comes from a trigram that a name lacked,
    /// found in the name itself, not from intersecting every list.
    fn walk(
        &self,
        list: &NameList,
        grams: &[(&[u8], &NameList)],
        is_hit: impl Fn(u32) -> bool,
        take: &mut impl FnMut(u32) -> bool,
    ) -> bool {
        let label = |x: u32| self.labels[x as usize];
        let (mut at, mut target) = ((0, 0), 0);
        // The list that last ruled a name out, and its cursor.
        let mut skip: Option<(&NameList, Cursor)> = None;
        loop {
            at = list.seek_from(at, |x| label(x) < target);
            let Some(id) = list.get(at) else {
                return true;
            };
            let l = label(id);
            if let Some((other, cursor)) = &mut skip {
                *cursor = other.seek_from(*cursor, |x| label(x) < l);
                match other.get(*cursor) {
                    None => return true,
                    Some(x) if x != id => {
                        target = label(x);
                        continue;
                    }
                    Some(_) => {}
                }
            }
            target = l + 1;
            if is_hit(id) {
                if !take(id) {
                    return false;
                }
                continue;
            }
            let folded = self.folded(id).as_bytes();
            let lacked = grams
                .iter()
                .find(|(g, _)| !folded.windows(3).any(|w| w == *g));
            if let Some(&(_, other)) = lacked {
                let cursor = other.seek(|x| label(x) < l);
                let Some(x) = other.get(cursor) else {
                    return true;
                };
                target = label(x);
                skip = Some((other, cursor));
            }
        }
    }

    /// Whether a long query's prefix hits are exactly the names starting with a case variant
    /// of it (see [`FOLDS_INTO_ASCII`]).
    fn skip_scans(&self, q: &str) -> bool {
        let [dotted_i, kelvin] = self.folds_into_ascii;
        q.is_ascii() && (dotted_i == 0 || !q.ends_with('i')) && (kelvin == 0 || !q.contains('k'))
    }

    /// [`NameIndex::prefix_hits`] for an ASCII query while no name folds into ASCII from
    /// outside it: a name is a hit when its first bytes are a case variant of `q`, and the
    /// walk jumps over the names between one variant and the next (see the module doc).
    fn ascii_prefix_hits(&self, q: &str, take: &mut impl FnMut(u32) -> bool) -> bool {
        let q = q.as_bytes();
        let seek = |target: &[u8]| self.all.seek(|id| self.name(id).as_bytes() < target);
        let mut at = seek(&q.to_ascii_uppercase());
        while let Some(id) = self.all.get(at) {
            let name = self.name(id).as_bytes();
            let matched = name
                .iter()
                .zip(q)
                .take_while(|(a, b)| a.to_ascii_lowercase() == **b)
                .count();
            if matched == q.len() {
                if name.len() > q.len() && !take(id) {
                    return false;
                }
                at = self.all.next(at);
                continue;
            }
            match next_case_variant(name, q, matched) {
                Some(target) => at = seek(&target),
                None => break,
            }
        }
        true
    }

    /// Offers the names whose folded form contains `q` but does not start with it, in name
    /// order, until `take` says stop. A 1 to 3 byte query's n-gram list holds exactly the
    /// names containing it; a longer query walks the shortest list of its trigrams and checks
    /// each name with `contains`, skipping as [`NameIndex::walk`] does.
    fn substring_hits(&self, q: &str, take: &mut impl FnMut(u32) -> bool) {
        let bytes = q.as_bytes();
        if bytes.len() <= 3 {
            let Some(list) = self.grams.get(&gram_key(bytes)) else {
                return;
            };
            for id in list.iter() {
                if !self.folded(id).starts_with(q) && !take(id) {
                    return;
                }
            }
            return;
        }
        let Some(grams) = self.trigram_lists(bytes) else {
            return;
        };
        let is_hit = |id: u32| {
            let f = self.folded(id);
            !f.starts_with(q) && f.contains(q)
        };
        self.walk(grams[0].1, &grams, is_hit, take);
    }

    /// Posting entries held: every list's ids, plus the exact map's.
    pub fn postings(&self) -> usize {
        let lists: usize = self
            .grams
            .values()
            .chain(self.starts.values())
            .map(|l| l.len)
            .sum();
        lists + self.all.len + self.names.len()
    }

    /// Approximate heap bytes: posting entries, list and map overhead, and the names held
    /// (the original names are shared with the graph and not counted).
    pub fn heap_bytes(&self) -> usize {
        let lists = self.grams.len() + self.starts.len();
        let blocks: usize = self
            .grams
            .values()
            .chain(self.starts.values())
            .chain([&self.all])
            .map(|l| l.blocks.len())
            .sum();
        let folded: usize = self.folded.iter().map(|f| f.len()).sum();
        let acronyms: usize = self.acronyms.get().map_or(0, |map| {
            map.iter()
                .map(|(a, ids)| a.len() + ids.capacity() * 4 + 16 + 24 + 8)
                .sum()
        });
        acronyms
            + self.postings() * 4
            + blocks * 24
            + lists * (4 + 32 + 8)
            + self.exact.len() * (16 + 24 + 8)
            + folded * 2
            + self.names.len() * (16 + 16)
    }

    /// The order label of name `id`: labels rise with the names' byte order.
    pub(crate) fn label(&self, id: u32) -> u64 {
        self.labels[id as usize]
    }

    fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// `before(x)`: whether name `x` sorts before name `id`, by the names.
fn name_before(names: &[Arc<str>], id: u32) -> impl Fn(u32) -> bool + '_ {
    let name = &names[id as usize];
    move |x| *names[x as usize] < **name
}

fn remove_from(
    lists: &mut FxHashMap<u32, NameList>,
    key: u32,
    id: u32,
    before: &impl Fn(u32) -> bool,
) {
    if let Some(list) = lists.get_mut(&key) {
        list.remove(id, before);
        if list.len == 0 {
            lists.remove(&key);
        }
    }
}

/// `counts` of names holding each character of [`FOLDS_INTO_ASCII`], with `name` added
/// (`by` 1) or taken away (-1).
fn add(mut counts: [usize; 2], name: &str, by: isize) -> [usize; 2] {
    for (count, c) in counts.iter_mut().zip(FOLDS_INTO_ASCII) {
        if name.contains(c) {
            *count = count.wrapping_add_signed(by);
        }
    }
    counts
}

/// `before(x)`: whether name `x` sorts before name `id`, by their labels.
fn label_before(labels: &[u64], id: u32) -> impl Fn(u32) -> bool + '_ {
    let label = labels[id as usize];
    move |x| labels[x as usize] < label
}

/// Gives the ids of `order` (in name order) labels evenly spread over the middle half of the
/// range, leaving a quarter at each end for names that sort before or after every other.
fn spread_labels(labels: &mut [u64], order: &[u32]) {
    let step = (u64::MAX / 2) / (order.len() as u64 + 1);
    for (rank, &x) in order.iter().enumerate() {
        labels[x as usize] = u64::MAX / 4 + (rank as u64 + 1) * step;
    }
}

/// Sorts (key, rank) pairs, the key in the upper 32 bits, by key, keeping the order of equal
/// keys (ranks pushed in order stay in order): a radix sort, a byte of the key per pass. A
/// comparison sort of a whole graph's pairs took 60% of a build.
fn sort_by_key(pairs: &mut Vec<u64>) {
    let mut sorted = vec![0; pairs.len()];
    for shift in [32, 40, 48, 56] {
        let byte = |p: u64| (p >> shift) as usize & 0xFF;
        let mut at = [0usize; 256];
        for &p in pairs.iter() {
            at[byte(p)] += 1;
        }
        if at.contains(&pairs.len()) {
            continue;
        }
        let mut start = 0;
        for slot in &mut at {
            (*slot, start) = (start, start + *slot);
        }
        for &p in pairs.iter() {
            sorted[at[byte(p)]] = p;
            at[byte(p)] += 1;
        }
        std::mem::swap(pairs, &mut sorted);
    }
}

/// Two sorted lists as one (`before(a, b)`: `a` sorts before `b`).
fn merge_by(a: &[u32], b: &[u32], before: impl Fn(u32, u32) -> bool) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        if before(y, x) {
            out.push(y);
            j += 1;
        } else {
            out.push(x);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The first index of sorted `items` that is not `before`, found by probing 1, 2, 4, ...
/// items ahead and then searching the last stride: the cost grows with the answer, not
/// with `items.len()`.
fn gallop<T>(items: &[T], before: impl Fn(&T) -> bool) -> usize {
    let (mut low, mut stride) = (0, 1);
    while low + stride <= items.len() && before(&items[low + stride - 1]) {
        low += stride;
        stride *= 2;
    }
    let high = (low + stride).min(items.len());
    low + items[low..high].partition_point(before)
}

/// Inserts `new` (sorted by `label`, none in `block`) into sorted `block`: finds every place
/// first, then moves each stretch of the block once, from the back.
fn merge_into(block: &mut Vec<u32>, new: &[u32], label: impl Fn(u32) -> u64) {
    if let [id] = new {
        let l = label(*id);
        let at = block.partition_point(|&x| label(x) < l);
        block.insert(at, *id);
        return;
    }
    let mut places = Vec::with_capacity(new.len());
    let mut low = 0;
    for &id in new {
        let l = label(id);
        low += block[low..].partition_point(|&x| label(x) < l);
        places.push(low);
    }
    let mut end = block.len();
    block.resize(end + new.len(), 0);
    for (j, (&id, &at)) in new.iter().zip(&places).enumerate().rev() {
        block.copy_within(at..end, at + j + 1);
        block[at + j] = id;
        end = at;
    }
}

/// The smallest byte string after `name` that starts with a case variant of the ASCII query
/// `q` (lower case), given that `name`'s first `matched` bytes are a case variant of `q`'s and
/// the next is not; `None` when no string after `name` does.
fn next_case_variant(name: &[u8], q: &[u8], matched: usize) -> Option<Vec<u8>> {
    // `name[..at]`, then byte `b`, then the smallest variant of the rest (upper case sorts
    // before lower case).
    let target = |at: usize, b: u8| {
        let mut t = name[..at].to_vec();
        t.push(b);
        t.extend(q[at + 1..].iter().map(u8::to_ascii_uppercase));
        t
    };
    let Some(&byte) = name.get(matched) else {
        // `name` is a variant of the front of `q`: the smallest longer variant follows it.
        return Some(target(matched, q[matched].to_ascii_uppercase()));
    };
    let (upper, lower) = (q[matched].to_ascii_uppercase(), q[matched]);
    if upper > byte {
        return Some(target(matched, upper));
    }
    if lower > byte {
        return Some(target(matched, lower));
    }
    // Nothing at `matched` comes after `byte`: turn the last upper-case letter before it to
    // lower case.
    (0..matched)
        .rev()
        .find(|&i| name[i].is_ascii_uppercase())
        .map(|i| target(i, name[i].to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The scan the index must equal.
    fn scan(names: &[&str], query: &str, limit: usize) -> Vec<String> {
        let q = fold_case(query);
        let mut hits: Vec<(u8, &str)> = names
            .iter()
            .filter_map(|n| search_rank(&fold_case(n), &q).map(|r| (r, *n)))
            .collect();
        hits.sort();
        hits.into_iter()
            .take(limit)
            .map(|(_, n)| n.to_string())
            .collect()
    }

    fn found(index: &NameIndex, query: &str, limit: usize) -> Vec<String> {
        index
            .search(query, limit, |_| true)
            .into_iter()
            .map(|id| index.name(id).to_string())
            .collect()
    }

    fn index_of(names: &[&str]) -> NameIndex {
        NameIndex::build(names.iter().map(|&n| Arc::from(n)).collect())
    }

    const NAMES: [&str; 16] = [
        "Foo",
        "FOO",
        "foo",
        "Foobar",
        "fOOd",
        "barfoo",
        "Bar Foo",
        "x",
        "",
        "Éclair",
        "éclair",
        "straße",
        "中文名",
        "İstanbul",
        "\u{212A}elvin",
        "kelvin",
    ];

    #[test]
    fn answers_as_the_scan_does_for_every_query_shape() {
        let index = index_of(&NAMES);
        let queries = [
            "", "f", "F", "fo", "foo", "FOO", "food", "foob", "oo", "ar", "bar f", "É", "é", "cla",
            "éclair", "ß", "中", "文名", "i", "i̇s", "kel", "kelv", "K", "zzz", "zzzz", "o", "x",
            "X",
        ];
        for q in queries {
            for limit in [0, 1, 2, 5, 100] {
                assert_eq!(
                    found(&index, q, limit),
                    scan(&NAMES, q, limit),
                    "{q:?} {limit}"
                );
            }
        }
    }

    #[test]
    fn the_skip_scan_jumps_between_case_variants() {
        // No name folds into ASCII from outside it, so a long ASCII query skip-scans.
        let names: Vec<String> = (0..2000)
            .map(|i| match i % 4 {
                0 => format!("Entity {i:05}"),
                1 => format!("entity {i:05}"),
                2 => format!("ENTITY {i:05}"),
                _ => format!("EnTiTy{i:05}"),
            })
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let index = index_of(&refs);
        assert_eq!(index.folds_into_ascii, [0, 0]);
        for q in [
            "entity 0",
            "entity 01",
            "ENTITY 019",
            "entity",
            "entity0",
            "tity 01",
            "entity 2",
            "entity 00001",
            "entitx",
            "entiuy",
            "entity 019999",
        ] {
            for limit in [1, 5, 100, 5000] {
                assert_eq!(
                    found(&index, q, limit),
                    scan(&refs, q, limit),
                    "{q:?} {limit}"
                );
            }
        }
    }

    #[test]
    fn only_two_characters_fold_into_ascii_from_outside_it() {
        let outside: Vec<char> = (0x80..=0x10FFFF)
            .filter_map(char::from_u32)
            .filter(|c| c.to_lowercase().any(|l| l.is_ascii()))
            .collect();
        assert_eq!(outside, FOLDS_INTO_ASCII);
        assert_eq!(fold_case("\u{130}"), "i\u{307}");
        assert_eq!(fold_case("\u{212A}"), "k");
    }

    #[test]
    fn inserts_removes_and_renumbering_keep_the_answers() {
        let mut names: Vec<String> = Vec::new();
        let mut index = NameIndex::default();
        // Enough names that lists split into blocks, inserted out of order.
        for i in 0..3000u32 {
            let name = format!(
                "N{:04} {}",
                (i * 7919) % 3000,
                ["ab", "Ab", "é"][i as usize % 3]
            );
            index.push(name.as_str().into());
            names.push(name);
        }
        for i in (0..3000).step_by(7).rev() {
            index.swap_remove(i as u32);
            names.swap_remove(i);
        }
        assert_eq!(index.len(), names.len());
        for (id, n) in names.iter().enumerate() {
            assert_eq!(index.name(id as u32), n);
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for q in ["n", "ab", "n01", "n0123 ab", "é", "1 a", "", "zz"] {
            for limit in [1, 10, 4000] {
                assert_eq!(
                    found(&index, q, limit),
                    scan(&refs, q, limit),
                    "{q:?} {limit}"
                );
            }
        }
        let rebuilt = index_of(&refs);
        assert_eq!(rebuilt.postings(), index.postings());
    }

    #[test]
    fn labels_that_run_out_are_given_again_in_name_order() {
        // Each name lands between the last one and `b`, halving the room there.
        let mut names = vec!["a".to_string(), "b".to_string()];
        let mut index = index_of(&["a", "b"]);
        for i in 1..300 {
            let name = "a".repeat(i + 1);
            index.push(name.as_str().into());
            names.push(name);
        }
        let order: Vec<u32> = index.all.iter().collect();
        assert!(
            order
                .windows(2)
                .all(|w| index.labels[w[0] as usize] < index.labels[w[1] as usize])
        );
        assert!(
            order
                .windows(2)
                .all(|w| index.name(w[0]) < index.name(w[1]))
        );
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for q in ["a", "aaaa", "b", "aaab"] {
            assert_eq!(found(&index, q, 20), scan(&refs, q, 20), "{q:?}");
        }
    }

    #[test]
    fn folds_into_ascii_from_outside_it_turn_the_skip_scan_off_only_where_they_could_match() {
        let names = [
            "Abaİx",
            "abaix",
            "ABAI",
            "Abab",
            "\u{212A}elvin",
            "Kelvin",
            "kelp",
        ];
        let index = index_of(&names);
        for (q, skips) in [
            ("abai", false),
            ("abab", true),
            ("kelv", false),
            ("aba.", true),
        ] {
            assert_eq!(index.skip_scans(q), skips, "{q:?}");
            assert_eq!(found(&index, q, 10), scan(&names, q, 10), "{q:?}");
        }
    }

    /// Every list in label order, labels in name order, blocks neither empty nor too full.
    fn assert_consistent(index: &NameIndex) {
        let lists = index.grams.values().chain(index.starts.values());
        for list in lists.chain([&index.all]) {
            assert!(
                list.blocks
                    .iter()
                    .all(|b| !b.is_empty() && b.len() <= BLOCK)
            );
            assert_eq!(list.iter().count(), list.len);
            let labels: Vec<u64> = list.iter().map(|x| index.labels[x as usize]).collect();
            assert!(labels.windows(2).all(|w| w[0] < w[1]), "{labels:?}");
        }
        let order: Vec<u32> = index.all.iter().collect();
        assert_eq!(order.len(), index.len());
        assert!(
            order
                .windows(2)
                .all(|w| index.name(w[0]) < index.name(w[1]))
        );
    }

    /// Adds `batch`'s names not in `names` yet (once each) to the index and to `names`, then
    /// takes away the name at each of `removes` from both: the proptests' steps.
    fn add_and_remove<'a>(
        index: &mut NameIndex,
        names: &mut Vec<String>,
        batch: impl IntoIterator<Item = String>,
        removes: impl IntoIterator<Item = &'a prop::sample::Index>,
    ) {
        let mut fresh: Vec<String> = Vec::new();
        for n in batch {
            if !names.contains(&n) && !fresh.contains(&n) {
                fresh.push(n);
            }
        }
        index.extend(fresh.iter().map(|n| Arc::from(n.as_str())));
        names.extend(fresh);
        for r in removes {
            if !names.is_empty() {
                let id = r.index(names.len());
                index.swap_remove(id as u32);
                names.swap_remove(id);
            }
        }
    }

    /// Names of a few pieces, so that they share grams, fold alike and sort together.
    fn name() -> impl Strategy<Value = String> {
        const PIECES: [&str; 9] = ["a", "A", "b", "B", "ab", ".", "é", "1", "İ"];
        prop::collection::vec(prop::sample::select(&PIECES[..]), 0..9)
            .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Batches of new names (landing between, before and after the names there, in
        /// blocks of a few ids), removes between them, and queries of every length.
        #[test]
        fn batches_and_removes_keep_the_answers(
            batches in prop::collection::vec(prop::collection::vec(name(), 0..60), 1..8),
            removes in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
            queries in prop::collection::vec(name(), 1..20),
        ) {
            let mut index = NameIndex::default();
            let mut names: Vec<String> = Vec::new();
            for (i, batch) in batches.iter().enumerate() {
                let removes = removes.iter().skip(i).step_by(batches.len());
                add_and_remove(&mut index, &mut names, batch.iter().cloned(), removes);
                assert_consistent(&index);
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let parts = names.iter().flat_map(|n| {
                let chars: Vec<char> = n.chars().collect();
                (0..chars.len()).map(move |i| chars[i..].iter().take(6).collect::<String>())
            });
            for q in queries.into_iter().chain(parts.take(40)) {
                for limit in [1, 3, 1000] {
                    prop_assert_eq!(found(&index, &q, limit), scan(&refs, &q, limit), "{:?}", q);
                }
            }
            prop_assert_eq!(index_of(&refs).postings(), index.postings());
        }
    }

    /// What `by_acronym` must answer: the names whose acronyms hold `acronym`.
    fn by_acronym_scan(names: &[String], acronym: &str) -> Vec<String> {
        let mut hits: Vec<String> = names
            .iter()
            .filter(|n| acronyms_of(n).iter().any(|a| a == acronym))
            .cloned()
            .collect();
        hits.sort();
        hits
    }

    fn by_acronym_found(index: &NameIndex, acronym: &str) -> Vec<String> {
        let mut hits: Vec<String> = (index.by_acronym(acronym).iter())
            .map(|&id| index.name(id).to_string())
            .collect();
        hits.sort();
        hits
    }

    #[test]
    fn a_name_is_found_by_its_acronyms_only() {
        let index = index_of(&[
            "International Business Machines",
            "IBM",
            "Bank of America",
            "Ice Berg Mountain",
            "Person 500",
        ]);
        assert_eq!(
            by_acronym_found(&index, "ibm"),
            ["Ice Berg Mountain", "International Business Machines"]
        );
        assert_eq!(by_acronym_found(&index, "ba"), ["Bank of America"]);
        assert_eq!(by_acronym_found(&index, "boa"), ["Bank of America"]);
        assert!(index.by_acronym("p5").is_empty(), "digits are not initials");
        assert!(
            index.by_acronym("IBM").is_empty(),
            "acronyms are asked in lower case"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        /// The acronyms' map, built at its first use between the batches and removes, answers
        /// after each as a scan of the names then held does.
        #[test]
        fn acronyms_stay_in_step_with_batches_and_removes(
            batches in prop::collection::vec(
                prop::collection::vec(prop::collection::vec(prop::sample::select(&WORDS[..]), 1..4), 0..20),
                1..6,
            ),
            removes in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
            first_use in 0usize..6,
        ) {
            let mut index = NameIndex::default();
            let mut names: Vec<String> = Vec::new();
            for (i, batch) in batches.iter().enumerate() {
                let removes = removes.iter().skip(i).step_by(batches.len());
                let batch = batch.iter().map(|words| words.join(" "));
                add_and_remove(&mut index, &mut names, batch, removes);
                if i >= first_use {
                    for a in ["ab", "ba", "aab", "abc", "bc", "ac"] {
                        prop_assert_eq!(by_acronym_found(&index, a), by_acronym_scan(&names, a), "{}", a);
                    }
                }
            }
        }
    }

    /// Words whose initials make few acronyms, so that names share them.
    const WORDS: [&str; 6] = ["alpha", "Beta", "able", "be", "Cat", "of"];

    #[test]
    fn names_in_name_order_use_up_the_room_at_the_end_and_are_labelled_again() {
        let mut index = NameIndex::default();
        let mut names = Vec::new();
        for batch in 0..40 {
            let new: Vec<String> = (0..3).map(|i| format!("n{batch:03}{i}")).collect();
            index.extend(new.iter().map(|n| Arc::from(n.as_str())));
            names.extend(new);
            // And one before every other.
            let first = format!("m{:03}", 999 - batch);
            index.push(first.as_str().into());
            names.push(first);
            assert_consistent(&index);
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for q in ["n", "n01", "m9", "0", "n0391"] {
            assert_eq!(found(&index, q, 500), scan(&refs, q, 500), "{q:?}");
        }
    }

    #[test]
    fn a_walk_intersects_lists_across_their_blocks() {
        // "xyz" in every name, "q" in every tenth: the trigram lists span many blocks.
        let names: Vec<String> = (0..2000)
            .map(|i| match i % 10 {
                0 => format!("{i:04} xyzq{}", i % 7),
                _ => format!("{i:04} xyz{}", i % 7),
            })
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let index = index_of(&refs);
        assert_consistent(&index);
        for q in ["xyzq", "yzq3", "xyz3", "zq", "4 xyzq", "0 xyzq0", "xyzqq"] {
            for limit in [1, 10, 3000] {
                assert_eq!(found(&index, q, limit), scan(&refs, q, limit), "{q:?}");
            }
        }
    }

    #[test]
    fn accept_filters_before_the_limit() {
        let index = index_of(&NAMES);
        let even = index.search("o", 3, |id| id % 2 == 0);
        let all = index.search("o", 100, |_| true);
        let want: Vec<u32> = all.into_iter().filter(|id| id % 2 == 0).take(3).collect();
        assert_eq!(even, want);
    }

    #[test]
    fn next_case_variant_is_the_smallest_following_string() {
        let next = |name: &str, q: &str, m| next_case_variant(name.as_bytes(), q.as_bytes(), m);
        assert_eq!(next("Ab", "abc", 2), Some(b"AbC".to_vec()));
        assert_eq!(next("AbA", "abc", 2), Some(b"AbC".to_vec()));
        assert_eq!(next("AbD", "abc", 2), Some(b"Abc".to_vec()));
        assert_eq!(next("Abd", "abc", 2), Some(b"aBC".to_vec()));
        assert_eq!(next("abd", "abc", 2), None);
        assert_eq!(next("a1", "a2", 1), Some(b"a2".to_vec()));
        assert_eq!(next("a3", "a2", 1), None);
    }
}
