//! The inverted-file (IVF) partition of a [`VectorIndex`](super::VectorIndex): k-means
//! centroids over the unit vectors, and per centroid the list of slots nearest to it.
//!
//! A search scores the query against every centroid, then scans the 8-bit codes of the
//! slots in the nearest few lists only (about a tenth of the index), and re-scores the best
//! candidates in `f32` as the full scan does. Each list keeps its own copy of its slots'
//! codes: read in slot order, the rows of a list are scattered over the index and every one
//! is a cache miss (a tenth of the rows took half the time of all). Within a list they are
//! kept by component (see [`List`]), so that a query reads only the components it has.
//! Its own file because training, probing and keeping the lists in step with the index's
//! slots are one piece apart from the scans.

use crate::generate::Rng;
use crate::heap;
use crate::hint::{prefetch, prefetch_far, prefetch_lines};

use super::{dot, quantise};

/// Lloyd iterations when training.
const ITERATIONS: usize = 8;
/// Training vectors per list (a sample of the index, for large indexes).
const SAMPLE_PER_LIST: usize = 48;

/// The centroids and the lists of slots nearest to each.
#[derive(Debug, Clone)]
pub(crate) struct Ivf {
    dimension: usize,
    /// Unit vectors, `dimension` per list.
    centroids: Vec<f32>,
    /// The same centroids by component: each component of every list, one run of `lists`
    /// per component, so that a probe reads only the runs of the query's components that
    /// are not zero (see [`probe`](Self::probe)).
    by_component: Vec<f32>,
    lists: Vec<List>,
    /// Per slot: its list and its position in that list.
    place: Vec<(u32, u32)>,
    /// Slots the index held when the centroids were trained.
    trained_on: usize,
}

/// The slots filed under one centroid, with their 8-bit codes and scales in the same order.
///
/// The codes are kept by component: the first component of every slot of the list, then
/// the second, and so on, each run `capacity` long. A scan reads, for each component the
/// query has (not zero), that component's run of the list's bytes, and adds its products
/// into one sum per slot, a block of slots at a time (see [`List::dots`]). The built-in
/// embedder's queries have a few dozen components of their 256, so a scan reads about a
/// tenth of the bytes a scan by slot read; a dense query reads them all. The sums are the
/// same integers either way.
#[derive(Debug, Clone, Default)]
pub(super) struct List {
    pub(super) slots: Vec<u32>,
    /// `dimension` runs of `capacity` codes; a run's places past the last slot are unused.
    /// Held as cache lines (see [`Line`]): with `capacity` a multiple of [`BLOCK`], each
    /// block of a run that [`List::dots`] reads is one line.
    lines: Vec<Line>,
    capacity: usize,
    pub(super) scales: Vec<f32>,
}

/// 64 codes on a 64-byte boundary: one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; BLOCK]);

/// `n` codes as whole lines, all zero.
fn zeroed_lines(n: usize) -> Vec<Line> {
    vec![Line([0; BLOCK]); n.div_ceil(BLOCK)]
}

impl List {
    /// An empty list with room for `capacity` slots (rounded up to whole blocks) of `d`
    /// components.
    fn with_capacity(capacity: usize, d: usize) -> Self {
        let capacity = capacity.next_multiple_of(BLOCK);
        List {
            slots: Vec::with_capacity(capacity),
            lines: zeroed_lines(capacity * d),
            capacity,
            scales: Vec::with_capacity(capacity),
        }
    }

    /// The codes, by component.
    fn codes(&self) -> &[i8] {
        // SAFETY: `Line` is `repr(C)` around one `[i8; BLOCK]` and as large as it (its
        // alignment, 64, is its size): a slice of lines is a slice of those arrays.
        let lines: &[[i8; BLOCK]] =
            unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.lines.len()) };
        lines.as_flattened()
    }

    fn codes_mut(&mut self) -> &mut [i8] {
        // SAFETY: as in `codes`.
        let lines: &mut [[i8; BLOCK]] = unsafe {
            std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.lines.len())
        };
        lines.as_flattened_mut()
    }

    /// Appends `slot` with its codes and scale, moving the runs apart when they are full.
    fn push(&mut self, slot: u32, codes: &[i8], scale: f32) {
        let (pos, d) = (self.slots.len(), codes.len());
        if pos == self.capacity {
            let capacity = (2 * self.capacity).max(BLOCK);
            let mut grown = List {
                lines: zeroed_lines(capacity * d),
                ..List::default()
            };
            for (to, from) in (grown.codes_mut().chunks_exact_mut(capacity))
                .zip(self.codes().chunks_exact(self.capacity.max(1)))
            {
                to[..pos].copy_from_slice(&from[..pos]);
            }
            self.lines = grown.lines;
            self.capacity = capacity;
        }
        let capacity = self.capacity;
        let runs = self.codes_mut();
        for (j, &c) in codes.iter().enumerate() {
            runs[j * capacity + pos] = c;
        }
        self.slots.push(slot);
        self.scales.push(scale);
    }

    /// Removes the entry at `pos`, moving the last one into its place.
    fn swap_remove(&mut self, pos: usize, d: usize) {
        let last = self.slots.len() - 1;
        let capacity = self.capacity;
        let runs = self.codes_mut();
        for j in 0..d {
            let run = j * capacity;
            runs[run + pos] = runs[run + last];
        }
        self.slots.swap_remove(pos);
        self.scales.swap_remove(pos);
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        heap::vec(&self.slots) + heap::vec(&self.lines) + heap::vec(&self.scales)
    }

    /// The code of each slot, in order: for tests.
    #[cfg(test)]
    pub(super) fn rows(&self, d: usize) -> Vec<Vec<i8>> {
        (0..self.slots.len())
            .map(|pos| {
                (0..d)
                    .map(|j| self.codes()[j * self.capacity + pos])
                    .collect()
            })
            .collect()
    }

    /// Asks for every line [`dots`](Self::dots) reads for `query` (the query's runs, up to
    /// the last entry) to be fetched into the second-level cache, and for the scales the scan
    /// reads after it. A scan asks for the lists [`LISTS_AHEAD`] ahead of the one it sums:
    /// each list's runs are a few dozen short streams scattered over a hundred kilobytes,
    /// which the processor does not foresee, and a block or two fetched ahead within the
    /// list came too late (a search waited on memory for about a quarter of its time).
    /// `dots` then asks for its next blocks in the first-level cache.
    #[inline(always)]
    pub(super) fn fetch_runs(&self, query: &[(usize, i16)]) {
        let codes = self.codes();
        for &(j, _) in query {
            let run = &codes[j * self.capacity..][..self.slots.len()];
            for line in run.chunks(BLOCK) {
                prefetch_far(line.as_ptr());
            }
        }
        prefetch_lines(&self.scales);
    }

    /// Asks for the block at `start` of each of `query`'s runs, if the list reaches it.
    #[inline(always)]
    fn fetch_block(&self, query: &[(usize, i16)], start: usize) {
        if start < self.slots.len() {
            let codes = self.codes();
            for &(j, _) in query {
                prefetch(codes[j * self.capacity + start..].as_ptr());
            }
        }
    }

    /// Fills `sums` with the dot product of each entry's code and the query, in order. The
    /// query is given as its components that are not zero: (component, value).
    ///
    /// The entries are summed a block at a time: the block's sums stay in registers while
    /// each of the query's runs is read, and the runs of the blocks ahead are fetched
    /// meanwhile. A run at a time (a pass over every sum per component) waited on each of
    /// its cache misses in turn: a few dozen runs scattered over a list of a few hundred
    /// kilobytes, for each list probed. The last block is summed whole too, over the run's
    /// unused places (see `lines`), whose sums are then dropped. Each sum is the same integer
    /// whatever the `kernel`.
    #[inline(always)]
    pub(super) fn dots(&self, query: &[(usize, i16)], sums: &mut Vec<i32>, kernel: Kernel) {
        let codes = self.codes();
        sums.clear();
        sums.resize(self.slots.len().next_multiple_of(BLOCK), 0);
        for (b, out) in sums.as_chunks_mut::<BLOCK>().0.iter_mut().enumerate() {
            let start = b * BLOCK;
            self.fetch_block(query, start + BLOCKS_AHEAD * BLOCK);
            let block = Block {
                codes,
                capacity: self.capacity,
                start,
            };
            *out = block.dots(query, kernel);
        }
        sums.truncate(self.slots.len());
    }
}

/// The instructions [`List::dots`] sums a block with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// Plain code, which the compiler vectorises for the target it builds for.
    Portable,
    /// AVX2's multiply-and-add of 16-bit pairs: two of the query's components at once.
    /// Only where the processor has AVX2 (see [`Kernel::detect`]).
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    /// The best kernel this processor runs.
    pub(super) fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// Every kernel this processor runs: for tests.
    #[cfg(test)]
    pub(super) fn available() -> Vec<Kernel> {
        let mut all = vec![Kernel::Portable];
        if Kernel::detect() != Kernel::Portable {
            all.push(Kernel::detect());
        }
        all
    }
}

/// One block of a [`List`]'s codes: [`BLOCK`] places from `start` of each run.
#[derive(Clone, Copy)]
struct Block<'a> {
    codes: &'a [i8],
    capacity: usize,
    start: usize,
}

impl Block<'_> {
    /// The run of component `j` in this block.
    #[inline(always)]
    fn run(&self, j: usize) -> &[i8; BLOCK] {
        let run = &self.codes[j * self.capacity + self.start..][..BLOCK];
        run.try_into().expect("a block is BLOCK long")
    }

    /// The block's sums with `kernel`.
    #[inline(always)]
    fn dots(&self, query: &[(usize, i16)], kernel: Kernel) -> [i32; BLOCK] {
        match kernel {
            Kernel::Portable => self.dots_portable(query),
            // SAFETY: `Kernel::Avx2` is only made where the processor has AVX2.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { self.dots_avx2(query) },
        }
    }

    /// A component at a time, into sums the compiler keeps in registers and unrolls.
    #[inline(always)]
    fn dots_portable(&self, query: &[(usize, i16)]) -> [i32; BLOCK] {
        let mut acc = [0i32; BLOCK];
        for &(j, q) in query {
            let q = i32::from(q);
            for (a, &c) in acc.iter_mut().zip(self.run(j)) {
                *a += i32::from(c) * q;
            }
        }
        acc
    }

    /// Two components at a time: each place's two codes, widened to 16 bits side by side,
    /// times the two values side by side, summed by `vpmaddwd` into one 32-bit product per
    /// place: 32 instructions per pair of components and block, against 48 a component at a
    /// time (which widens each code to 32 bits and multiplies it alone). An odd last
    /// component is paired with itself, times zero.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn dots_avx2(&self, query: &[(usize, i16)]) -> [i32; BLOCK] {
        use std::arch::x86_64::*;
        // Sums by register: `acc[2h]` holds places 16h..16h+4 in its low half and
        // 16h+8..16h+12 in its high half, `acc[2h + 1]` the four after each (the unpacks
        // work within each half).
        let mut acc = [_mm256_setzero_si256(); BLOCK / 8];
        for pair in query.chunks(2) {
            let (ja, qa) = pair[0];
            let (jb, qb) = pair.get(1).copied().unwrap_or((ja, 0));
            let (a, b) = (self.run(ja), self.run(jb));
            let both = _mm256_set1_epi32(i32::from(qa as u16) | (i32::from(qb as u16) << 16));
            for h in 0..BLOCK / 16 {
                // SAFETY: each run is BLOCK codes long, and 16h + 16 <= BLOCK.
                let (a, b) = unsafe {
                    (
                        _mm_loadu_si128(a.as_ptr().add(16 * h).cast()),
                        _mm_loadu_si128(b.as_ptr().add(16 * h).cast()),
                    )
                };
                let (a, b) = (_mm256_cvtepi8_epi16(a), _mm256_cvtepi8_epi16(b));
                let lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), both);
                let hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), both);
                acc[2 * h] = _mm256_add_epi32(acc[2 * h], lo);
                acc[2 * h + 1] = _mm256_add_epi32(acc[2 * h + 1], hi);
            }
        }
        let mut out = [0i32; BLOCK];
        for h in 0..BLOCK / 16 {
            let (first, second) = (acc[2 * h], acc[2 * h + 1]);
            // SAFETY: 16h + 16 <= BLOCK, so both stores are within `out`.
            unsafe {
                let at = out.as_mut_ptr().add(16 * h);
                _mm256_storeu_si256(at.cast(), _mm256_permute2x128_si256::<0x20>(first, second));
                _mm256_storeu_si256(
                    at.add(8).cast(),
                    _mm256_permute2x128_si256::<0x31>(first, second),
                );
            }
        }
        out
    }
}

/// Entries of a [`List`] summed at once by [`List::dots`]: 64 sums are eight AVX2 registers.
const BLOCK: usize = 64;
/// Lists ahead of the one a scan sums whose runs it asks for (see [`List::fetch_runs`]):
/// measured, two to six did about as well, one or none worse.
pub(super) const LISTS_AHEAD: usize = 3;
/// Blocks ahead of the one summed whose codes [`List::dots`] asks the processor to fetch.
const BLOCKS_AHEAD: usize = 2;

impl Ivf {
    /// Trains `lists` centroids on `vectors` (unit, `dimension` each) and files every slot
    /// under its nearest.
    pub(crate) fn train(vectors: &[f32], dimension: usize, lists: usize) -> Ivf {
        let n = vectors.len() / dimension;
        let lists = lists.clamp(1, n.max(1));
        let row = |slot: usize| &vectors[slot * dimension..(slot + 1) * dimension];
        let mut rng = Rng::new(0x1f);
        // A sample of distinct slots (a partial Fisher-Yates shuffle): the first `lists`
        // of it seed the centroids.
        let mut order: Vec<u32> = (0..n as u32).collect();
        let sample = (lists * SAMPLE_PER_LIST).min(n);
        for i in 0..sample {
            let j = i + rng.below(n - i);
            order.swap(i, j);
        }
        let sample = &order[..sample];
        let mut centroids: Vec<f32> = Vec::with_capacity(lists * dimension);
        for &slot in &sample[..lists] {
            centroids.extend_from_slice(row(slot as usize));
        }
        let mut sums = vec![0f32; lists * dimension];
        let mut counts = vec![0usize; lists];
        let sample_rows: Vec<&[f32]> = sample.iter().map(|&slot| row(slot as usize)).collect();
        for _ in 0..ITERATIONS {
            sums.fill(0.0);
            counts.fill(0);
            let nearest = nearest_each(&centroids, dimension, &sample_rows);
            for (&v, &c) in sample_rows.iter().zip(&nearest) {
                let c = c as usize;
                counts[c] += 1;
                for (s, x) in sums[c * dimension..(c + 1) * dimension].iter_mut().zip(v) {
                    *s += x;
                }
            }
            for (c, &count) in counts.iter().enumerate() {
                let at = c * dimension..(c + 1) * dimension;
                if count == 0 {
                    // An empty list takes a random sample vector as its new centroid.
                    let slot = sample[rng.below(sample.len())] as usize;
                    centroids[at].copy_from_slice(row(slot));
                } else {
                    centroids[at.clone()].copy_from_slice(&super::unit(&sums[at]));
                }
            }
        }
        let rows: Vec<&[f32]> = (0..n).map(row).collect();
        let nearest = nearest_each(&centroids, dimension, &rows);
        // Each list made as large as it will be, so that no run moves while it is filled.
        let mut sizes = vec![0usize; lists];
        for &list in &nearest {
            sizes[list as usize] += 1;
        }
        let mut ivf = Ivf {
            dimension,
            by_component: by_component(&centroids, dimension),
            centroids,
            lists: sizes
                .iter()
                .map(|&size| List::with_capacity(size, dimension))
                .collect(),
            place: Vec::with_capacity(n),
            trained_on: n,
        };
        for (slot, (v, list)) in rows.iter().zip(nearest).enumerate() {
            let (codes, scale) = quantise(v);
            ivf.file(list as usize, slot, &codes, scale);
        }
        ivf
    }

    /// Approximate heap bytes: centroids, lists (slots, codes, scales) and places.
    pub(crate) fn heap_bytes(&self) -> usize {
        let lists: usize = self.lists.iter().map(List::heap_bytes).sum();
        heap::vec(&self.centroids)
            + heap::vec(&self.by_component)
            + heap::vec(&self.lists)
            + lists
            + heap::vec(&self.place)
    }

    /// Slots the index held when the centroids were trained.
    pub(crate) fn trained_on(&self) -> usize {
        self.trained_on
    }

    pub(crate) fn lists(&self) -> usize {
        self.lists.len()
    }

    /// Files `slot` (which must be the next slot, or one just taken out) under the list
    /// nearest to its unit vector, with its codes and scale.
    pub(crate) fn add(&mut self, slot: usize, unit: &[f32], codes: &[i8], scale: f32) {
        let list = nearest(&self.centroids, self.dimension, unit);
        self.file(list, slot, codes, scale);
    }

    /// Files `slot` (as [`add`](Self::add) takes it) under `list`.
    fn file(&mut self, list: usize, slot: usize, codes: &[i8], scale: f32) {
        let entries = &mut self.lists[list];
        let at = (list as u32, entries.slots.len() as u32);
        entries.push(slot as u32, codes, scale);
        if slot == self.place.len() {
            self.place.push(at);
        } else {
            self.place[slot] = at;
        }
    }

    /// Takes `slot` out of its list (its place stays until it is added again or dropped).
    pub(crate) fn take_out(&mut self, slot: usize) {
        let (list, pos) = self.place[slot];
        let (d, pos) = (self.dimension, pos as usize);
        let entries = &mut self.lists[list as usize];
        entries.swap_remove(pos, d);
        if let Some(&moved) = entries.slots.get(pos) {
            self.place[moved as usize].1 = pos as u32;
        }
    }

    /// The index moved its last slot, `from`, into `to` (after taking `to` out): `to` takes
    /// `from`'s place and `from` is dropped.
    pub(crate) fn moved(&mut self, from: usize, to: usize) {
        if from != to {
            let (list, pos) = self.place[from];
            self.lists[list as usize].slots[pos as usize] = to as u32;
            self.place[to] = (list, pos);
        }
        self.place.truncate(from);
    }

    /// Every list, in order.
    pub(crate) fn all_lists(&self) -> Vec<&List> {
        self.lists.iter().collect()
    }

    /// The `probes` lists whose centroids are nearest to the unit vector `query`.
    ///
    /// The scores are summed by component, over the query's components that are not zero:
    /// the built-in embedder's queries have a few dozen of 256, so a probe reads a tenth of
    /// the centroids' bytes (a dense query reads them all, as a dot product per centroid
    /// did). Each list's score is the same sum in another order, so it may differ from the
    /// dot product in its last bits.
    pub(crate) fn probe(&self, query: &[f32], probes: usize) -> Vec<&List> {
        let mut scored: Vec<(f32, usize)> = self.scores(query).into_iter().zip(0..).collect();
        let probes = probes.clamp(1, scored.len());
        let best_first = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0);
        if probes < scored.len() {
            scored.select_nth_unstable_by(probes - 1, best_first);
            scored.truncate(probes);
        }
        // Nearest first: a scan meets the best candidates early, and its bar rises before
        // the farther lists, so that fewer of their entries go into its heap.
        scored.sort_unstable_by(best_first);
        scored.into_iter().map(|(_, i)| &self.lists[i]).collect()
    }

    /// Each list's centroid's dot product with `query`, in list order.
    fn scores(&self, query: &[f32]) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { self.scores_avx2(query) };
            }
        }
        self.scores_portable(query)
    }

    /// [`scores_portable`](Self::scores_portable), compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn scores_avx2(&self, query: &[f32]) -> Vec<f32> {
        self.scores_portable(query)
    }

    #[inline(always)]
    fn scores_portable(&self, query: &[f32]) -> Vec<f32> {
        let lists = self.lists.len();
        let mut scores = vec![0f32; lists];
        for (run, &q) in self.by_component.chunks_exact(lists).zip(query) {
            if q != 0.0 {
                for (s, &c) in scores.iter_mut().zip(run) {
                    *s += q * c;
                }
            }
        }
        scores
    }
}

/// `centroids` (`dimension` per list) by component: for each component, its value in
/// every list in order.
fn by_component(centroids: &[f32], dimension: usize) -> Vec<f32> {
    let lists = centroids.len() / dimension.max(1);
    let mut out = vec![0f32; centroids.len()];
    for (i, c) in centroids.chunks_exact(dimension).enumerate() {
        for (j, &x) in c.iter().enumerate() {
            out[j * lists + i] = x;
        }
    }
    out
}

/// [`nearest`] of each of `rows`, in order, computed in as many chunks at once as there are
/// cores: the same answer as one call per row, in a part of the time. Training calls it for
/// every sample in each iteration and for every vector at the end, which was most of the
/// time an index of 100,000 vectors took to build.
fn nearest_each(centroids: &[f32], dimension: usize, rows: &[&[f32]]) -> Vec<u32> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Below a few thousand rows a thread costs more than it saves.
    if threads < 2 || rows.len() < 4096 {
        return nearest_of_rows(centroids, dimension, rows);
    }
    let chunk = rows.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = rows
            .chunks(chunk)
            .map(|part| s.spawn(move || nearest_of_rows(centroids, dimension, part)))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("nearest does not panic"))
            .collect()
    })
}

/// [`nearest`] of each of `rows`, four rows at a time: each centroid is read once for four
/// dot products, whose sums are independent, so the processor works on four at once instead
/// of waiting on one chain of additions. Each dot product adds in the same order as [`dot`],
/// so the answer is exactly [`nearest`]'s.
fn nearest_of_rows(centroids: &[f32], dimension: usize, rows: &[&[f32]]) -> Vec<u32> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { nearest_of_rows_avx2(centroids, dimension, rows) };
        }
    }
    nearest_of_rows_portable(centroids, dimension, rows)
}

/// [`nearest_of_rows_portable`], compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn nearest_of_rows_avx2(centroids: &[f32], dimension: usize, rows: &[&[f32]]) -> Vec<u32> {
    nearest_of_rows_portable(centroids, dimension, rows)
}

#[inline(always)]
fn nearest_of_rows_portable(centroids: &[f32], dimension: usize, rows: &[&[f32]]) -> Vec<u32> {
    let mut out = Vec::with_capacity(rows.len());
    let (fours, rest) = rows.as_chunks::<4>();
    for four in fours {
        let mut best = [(f32::NEG_INFINITY, 0u32); 4];
        for (i, c) in centroids.chunks_exact(dimension).enumerate() {
            let s = dot4(c, four);
            for (b, s) in best.iter_mut().zip(s) {
                if s > b.0 {
                    *b = (s, i as u32);
                }
            }
        }
        out.extend(best.map(|b| b.1));
    }
    out.extend(
        rest.iter()
            .map(|v| nearest_portable(centroids, dimension, v) as u32),
    );
    out
}

/// `[dot(c, v[0]), .., dot(c, v[3])]`, each summed exactly as [`dot`] sums it.
#[inline(always)]
fn dot4(c: &[f32], v: &[&[f32]; 4]) -> [f32; 4] {
    let mut acc = [[0f32; 8]; 4];
    let (cc, cr) = c.as_chunks::<8>();
    let chunks = v.map(|v| v.as_chunks::<8>());
    for (k, x) in cc.iter().enumerate() {
        for (acc, (rows, _)) in acc.iter_mut().zip(&chunks) {
            let y = &rows[k];
            for i in 0..8 {
                acc[i] += x[i] * y[i];
            }
        }
    }
    let mut out = [0f32; 4];
    for ((o, acc), (_, tail)) in out.iter_mut().zip(&acc).zip(&chunks) {
        let tail: f32 = cr.iter().zip(*tail).map(|(x, y)| x * y).sum();
        *o = acc.iter().sum::<f32>() + tail;
    }
    out
}

/// The index of the centroid nearest to `v` (largest dot product).
fn nearest(centroids: &[f32], dimension: usize, v: &[f32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { nearest_avx2(centroids, dimension, v) };
        }
    }
    nearest_portable(centroids, dimension, v)
}

/// [`nearest_portable`], compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn nearest_avx2(centroids: &[f32], dimension: usize, v: &[f32]) -> usize {
    nearest_portable(centroids, dimension, v)
}

#[inline(always)]
fn nearest_portable(centroids: &[f32], dimension: usize, v: &[f32]) -> usize {
    let mut best = (f32::NEG_INFINITY, 0);
    for (i, c) in centroids.chunks_exact(dimension).enumerate() {
        let s = dot(c, v);
        if s > best.0 {
            best = (s, i);
        }
    }
    best.1
}

#[cfg(test)]
impl Ivf {
    /// The list each slot is filed under.
    pub(crate) fn list_of(&self, slot: usize) -> usize {
        self.place[slot].0 as usize
    }

    /// Panics unless each of the `n` slots is in exactly one list, at the place recorded.
    pub(crate) fn assert_consistent(&self, n: usize) {
        assert_eq!(self.place.len(), n);
        let mut seen = vec![false; n];
        for (l, list) in self.lists.iter().enumerate() {
            assert_eq!(list.codes().len(), list.capacity * self.dimension);
            assert_eq!(list.capacity % BLOCK, 0);
            assert_eq!(list.lines.as_ptr() as usize % 64, 0);
            assert!(list.slots.len() <= list.capacity);
            assert_eq!(list.scales.len(), list.slots.len());
            for (p, &slot) in list.slots.iter().enumerate() {
                assert!(!seen[slot as usize], "slot {slot} listed twice");
                seen[slot as usize] = true;
                assert_eq!(self.place[slot as usize], (l as u32, p as u32));
            }
        }
        assert!(seen.iter().all(|&s| s), "a slot in no list");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` random unit vectors of `dimension`, with some repeated (exact ties).
    fn vectors(n: usize, dimension: usize) -> Vec<f32> {
        let mut rng = Rng::new(5);
        let mut out = Vec::with_capacity(n * dimension);
        for i in 0..n {
            if i % 97 == 3 {
                let copy = out[..dimension].to_vec();
                out.extend_from_slice(&copy);
                continue;
            }
            let v: Vec<f32> = (0..dimension).map(|_| rng.unit() as f32 - 0.5).collect();
            out.extend(super::super::unit(&v));
        }
        out
    }

    #[test]
    fn the_blocked_nearest_is_nearest_exactly() {
        // A dimension that leaves a tail after the chunks of eight, and row counts that
        // leave rows after the blocks of four, on one thread and on several.
        for (n, dimension) in [(4101, 37), (4096, 256), (10, 8), (7, 3)] {
            let data = vectors(n, dimension);
            let rows: Vec<&[f32]> = data.chunks_exact(dimension).collect();
            let centroids: Vec<f32> = data[..dimension * 40.min(n)].to_vec();
            let one_by_one: Vec<u32> = rows
                .iter()
                .map(|v| nearest(&centroids, dimension, v) as u32)
                .collect();
            assert_eq!(nearest_each(&centroids, dimension, &rows), one_by_one);
            assert_eq!(nearest_of_rows(&centroids, dimension, &rows), one_by_one);
            for (v, &c) in rows.iter().zip(&one_by_one) {
                let c = c as usize;
                assert_eq!(
                    dot4(
                        &centroids[c * dimension..(c + 1) * dimension],
                        &[v, v, v, v]
                    )[2]
                    .to_bits(),
                    dot(&centroids[c * dimension..(c + 1) * dimension], v).to_bits()
                );
            }
        }
    }

    #[test]
    fn training_files_every_vector_under_its_nearest_centroid() {
        let dimension = 16;
        let data = vectors(5000, dimension);
        let ivf = Ivf::train(&data, dimension, 70);
        ivf.assert_consistent(5000);
        for (slot, v) in data.chunks_exact(dimension).enumerate() {
            assert_eq!(ivf.list_of(slot), nearest(&ivf.centroids, dimension, v));
        }
    }

    #[test]
    fn a_probe_takes_the_lists_whose_centroids_score_best_nearest_first() {
        let dimension = 37;
        let data = vectors(3000, dimension);
        let ivf = Ivf::train(&data, dimension, 50);
        let mut rng = Rng::new(5);
        for query in data.chunks_exact(dimension).step_by(97) {
            // The vector itself, and a sparse query of a few of its components.
            let mut sparse = vec![0f32; dimension];
            for _ in 0..4 {
                let j = rng.below(dimension);
                sparse[j] = query[j];
            }
            for q in [query.to_vec(), super::super::unit(&sparse)] {
                let exact: Vec<f32> = ivf
                    .centroids
                    .chunks_exact(dimension)
                    .map(|c| dot(c, &q))
                    .collect();
                let scores = ivf.scores(&q);
                for (s, e) in scores.iter().zip(&exact) {
                    assert!((s - e).abs() <= 1e-5, "{s} against {e}");
                }
                let probed = ivf.probe(&q, 7);
                assert_eq!(probed.len(), 7);
                let mut order: Vec<usize> = (0..scores.len()).collect();
                order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
                let seventh = scores[order[6]];
                let probed: Vec<f32> = probed
                    .into_iter()
                    .map(|list| {
                        let i = ivf.lists.iter().position(|l| std::ptr::eq(l, list));
                        scores[i.expect("one of its lists")]
                    })
                    .collect();
                assert!(probed.iter().all(|&s| s >= seventh), "{probed:?}");
                assert!(
                    probed.is_sorted_by(|a, b| a >= b),
                    "nearest first: {probed:?}"
                );
            }
        }
    }

    #[test]
    fn a_lists_dots_are_each_rows_dot_with_the_query() {
        // Lengths below one block, of whole blocks, and with a shorter last block; queries
        // of a few components (an odd number), of the extreme values, and of every one; by
        // every kernel this processor runs.
        let d = 20;
        let mut rng = Rng::new(11);
        for n in [0, 1, 63, 64, 128, 200, 317] {
            let mut list = List::default();
            for slot in 0..n {
                let codes: Vec<i8> = (0..d)
                    .map(|_| (rng.below(256) as i32 - 128) as i8)
                    .collect();
                list.push(slot as u32, &codes, 1.0);
            }
            let rows = list.rows(d);
            for query in [
                vec![(3, 127), (7, -127), (19, 5)],
                vec![(0, i16::MIN), (1, i16::MAX), (2, -1), (5, 1)],
                (0..d).map(|j| (j, j as i16 - 10)).collect::<Vec<_>>(),
                Vec::new(),
            ] {
                let expected: Vec<i32> = rows
                    .iter()
                    .map(|row| {
                        query
                            .iter()
                            .map(|&(j, q)| i32::from(row[j]) * i32::from(q))
                            .sum()
                    })
                    .collect();
                for kernel in Kernel::available() {
                    let mut sums = vec![99];
                    list.dots(&query, &mut sums, kernel);
                    assert_eq!(sums, expected, "{n} entries, {kernel:?}");
                }
            }
        }
    }
}
