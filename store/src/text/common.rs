//! The best documents by a query's common words alone, remembered per set of common words.
//!
//! A word in most documents ("is", "the", a word every document of one source has) has a
//! posting list nearly as long as the index, and scoring it was most of a keyword search's
//! time though the answer is a handful of documents. A document that has none of the query's
//! other words scores from the common words alone, and that score is the same for every query
//! with the same common words (in the same order, as floats are summed in query order). So the
//! best documents by the common words alone are kept per set of them until the next write, and
//! a search scores only the documents its other words reach, each exactly as the full
//! evaluation would, then takes the rest from the kept list (`TextIndex::search_beside_common`).
//!
//! Kept lists are bounded ([`KEPT`] documents each, [`SETS`] sets, all dropped when full), so a
//! query whose filter or limit needs more than a kept list holds is evaluated in full, as is
//! the first query of a set after a write.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

/// Posting lists this long or longer are a common word's.
const COMMON_POSTINGS: usize = 8192;
/// Documents kept per set of common words.
const KEPT: usize = 1024;
/// Sets of common words kept at once; the next one drops them all.
const SETS: usize = 256;

/// When a word is common, and how much is kept for a set of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Thresholds {
    /// Posting lists this long or longer are a common word's.
    pub(super) postings: usize,
    /// Documents kept per set of common words.
    pub(super) kept: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            postings: COMMON_POSTINGS,
            kept: KEPT,
        }
    }
}

/// The best documents by a set of common words alone: `(slot, score)`, best first, equal
/// scores in key order.
#[derive(Debug)]
pub(super) struct Top {
    pub(super) ranked: Vec<(u32, f32)>,
    /// Whether `ranked` holds every document the words reach (none was cut off by [`KEPT`]).
    pub(super) complete: bool,
}

/// The kept lists of one index, for the index's write generation they were made in.
#[derive(Default)]
pub(super) struct CommonTops(Mutex<Kept>);

#[derive(Default)]
struct Kept {
    generation: u64,
    sets: FxHashMap<Box<[u32]>, Arc<Top>>,
}

impl CommonTops {
    /// The kept list for the term ids `terms` (in query order), if one was made since the
    /// write that made `generation`.
    pub(super) fn get(&self, generation: u64, terms: &[u32]) -> Option<Arc<Top>> {
        let kept = self.0.lock();
        if kept.generation != generation {
            return None;
        }
        kept.sets.get(terms).cloned()
    }

    pub(super) fn put(&self, generation: u64, terms: &[u32], top: Arc<Top>) {
        let mut kept = self.0.lock();
        if kept.generation != generation || kept.sets.len() >= SETS {
            kept.sets.clear();
            kept.generation = generation;
        }
        kept.sets.insert(terms.into(), top);
    }

    /// Approximate heap bytes of the kept lists.
    pub(super) fn heap_bytes(&self) -> usize {
        let kept = self.0.lock();
        kept.sets
            .iter()
            .map(|(k, v)| k.len() * 4 + v.ranked.capacity() * 8 + std::mem::size_of::<Top>() + 32)
            .sum()
    }
}

/// A copy of an index starts with nothing kept.
impl Clone for CommonTops {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl fmt::Debug for CommonTops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = self.0.lock();
        f.debug_struct("CommonTops")
            .field("generation", &kept.generation)
            .field("sets", &kept.sets.len())
            .finish()
    }
}
