//! Reciprocal rank fusion: merges ranked lists from different methods by
//! `score(d) = sum over lists of 1 / (K + rank)`, with rank starting at 1.

use std::hash::Hash;

use rustc_hash::FxHashMap;

/// The usual damping constant.
pub const K: f64 = 60.0;

/// One fused item: the item, its fused score, and the methods that found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<'a, T> {
    pub item: &'a T,
    pub score: f64,
    pub sources: Vec<&'static str>,
}

/// Fuses `lists` (method name, items best first), keyed by `key`; an item found by several
/// methods is the first one seen. Ties keep first-seen order. The keys are borrowed from the
/// items, and the lists stay the caller's, to read each method's own scores from.
pub fn rrf<'a, T, Q: Hash + Eq + ?Sized + 'a>(
    lists: &[(&'static str, &'a [T])],
    key: impl Fn(&'a T) -> &'a Q,
) -> Vec<Fused<'a, T>> {
    let mut at: FxHashMap<&Q, usize> = FxHashMap::default();
    let mut out: Vec<Fused<'a, T>> = Vec::new();
    for &(source, items) in lists {
        for (rank, item) in items.iter().enumerate() {
            let add = 1.0 / (K + rank as f64 + 1.0);
            let next = out.len();
            let i = *at.entry(key(item)).or_insert(next);
            if i == next {
                out.push(Fused {
                    item,
                    score: add,
                    sources: vec![source],
                });
                continue;
            }
            out[i].score += add;
            if !out[i].sources.contains(&source) {
                out[i].sources.push(source);
            }
        }
    }
    // A stable sort keeps first-seen order among equal scores.
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_found_by_both_methods_rise() {
        let (a, b) = (["x", "y", "z"], ["z", "w", "z"]);
        let fused = rrf(&[("a", &a[..]), ("b", &b[..])], |s: &&str| *s);
        let order: Vec<&str> = fused.iter().map(|f| *f.item).collect();
        assert_eq!(order, vec!["z", "x", "y", "w"]);
        assert_eq!(fused[0].sources, vec!["a", "b"]);
        // "z" is ranked 3rd in a, 1st and 3rd in b: each rank adds.
        let z = 1.0 / 63.0 + 1.0 / 61.0 + 1.0 / 63.0;
        assert!((fused[0].score - z).abs() < 1e-12);
        assert!((fused[1].score - 1.0 / 61.0).abs() < 1e-12);
    }

    #[test]
    fn equal_scores_keep_first_seen_order_and_the_first_item_seen() {
        // (key, tag): the same key with two tags is one item, the first seen.
        let a = [("p", 1), ("q", 1)];
        let b = [("q", 2), ("p", 2)];
        let fused = rrf(&[("a", &a[..]), ("b", &b[..])], |t: &(&str, i32)| t.0);
        let got: Vec<(&str, i32)> = fused.iter().map(|f| *f.item).collect();
        assert_eq!(got, vec![("p", 1), ("q", 1)]);
        assert_eq!(fused[0].score, fused[1].score);
        assert!(rrf::<(&str, i32), str>(&[], |t| t.0).is_empty());
    }
}
