//! Fusion of ranked lists from different methods: reciprocal rank fusion, `score(d) = sum
//! over lists of 1 / (K + rank)` with rank starting at 1 (the agent's hybrid tool), and
//! relative score fusion, `score(d) = sum over lists of weight * (s - min) / (max - min)`
//! with each list's own scores (RAG hybrid search, docs/eval.md).

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
    fuse(lists, key, |_, rank, _| 1.0 / (K + rank as f64 + 1.0))
}

/// Relative score fusion: each list's scores scaled to 0..1 by its own lowest and highest
/// (1 for every item of a list whose scores are all equal), times the list's weight, summed
/// per item. Unlike rank fusion it keeps how far apart a method put its results: a keyword
/// match far above the rest stays far above. Ties keep first-seen order.
pub fn relative_score<'a, T, Q: Hash + Eq + ?Sized + 'a>(
    lists: &[(&'static str, f64, &'a [T])],
    key: impl Fn(&'a T) -> &'a Q,
    score: impl Fn(&T) -> f64,
) -> Vec<Fused<'a, T>> {
    // Per list: its weight, lowest and highest score.
    let scales: Vec<(f64, f64, f64)> = (lists.iter())
        .map(|&(_, weight, items)| {
            let (lo, hi) = (items.iter().map(&score))
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), s| {
                    (lo.min(s), hi.max(s))
                });
            (weight, lo, hi)
        })
        .collect();
    let lists: Vec<(&'static str, &'a [T])> = lists
        .iter()
        .map(|&(source, _, items)| (source, items))
        .collect();
    fuse(&lists, key, |list, _, item| {
        let (weight, lo, hi) = scales[list];
        weight
            * if hi > lo {
                (score(item) - lo) / (hi - lo)
            } else {
                1.0
            }
    })
}

/// Sums, per item of `lists` (by `key`), what `add` gives it in each list it is in (`add`
/// of the list's place, the item's rank from 0, the item); best first, ties in first-seen
/// order, each item the first of its key seen.
fn fuse<'a, T, Q: Hash + Eq + ?Sized + 'a>(
    lists: &[(&'static str, &'a [T])],
    key: impl Fn(&'a T) -> &'a Q,
    add: impl Fn(usize, usize, &T) -> f64,
) -> Vec<Fused<'a, T>> {
    let mut at: FxHashMap<&Q, usize> = FxHashMap::default();
    let mut out: Vec<Fused<'a, T>> = Vec::new();
    for (list, &(source, items)) in lists.iter().enumerate() {
        for (rank, item) in items.iter().enumerate() {
            let add = add(list, rank, item);
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

    #[test]
    fn relative_scores_keep_the_gaps_and_the_weights() {
        // (name, score)
        let keyword = [("a", 12.0), ("b", 3.0), ("c", 2.0)];
        let semantic = [("c", 0.9), ("b", 0.8), ("a", 0.5)];
        let fused = relative_score(
            &[
                ("keyword", 1.0, &keyword[..]),
                ("semantic", 0.5, &semantic[..]),
            ],
            |t: &(&str, f64)| t.0,
            |t| t.1,
        );
        let got: Vec<(&str, f64)> = fused.iter().map(|f| (f.item.0, f.score)).collect();
        // a: 1 + 0; b: 0.1 + 0.5 * 0.75; c: 0 + 0.5 * 1.
        assert_eq!(got[0].0, "a");
        assert!((got[0].1 - 1.0).abs() < 1e-12);
        assert_eq!(got[1].0, "c");
        assert!((got[1].1 - 0.5).abs() < 1e-12);
        assert!((got[2].1 - (0.1 + 0.375)).abs() < 1e-12);
        assert_eq!(fused[0].sources, ["keyword", "semantic"]);
        // One item, or equal scores: each counts in full.
        let one = [("x", 0.2)];
        let fused = relative_score(&[("s", 0.3, &one[..])], |t: &(&str, f64)| t.0, |t| t.1);
        assert!((fused[0].score - 0.3).abs() < 1e-12);
    }
}
