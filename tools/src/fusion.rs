//! Reciprocal rank fusion: merges ranked lists from different methods by
//! `score(d) = sum over lists of 1 / (K + rank)`, with rank starting at 1.

use std::collections::HashMap;
use std::hash::Hash;

/// The usual damping constant.
pub const K: f64 = 60.0;

/// One fused item: its key, fused score, and the methods that found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<T> {
    pub item: T,
    pub score: f64,
    pub sources: Vec<&'static str>,
}

/// Fuses `lists` (method name, items best first), keyed by `key`. Ties keep first-seen order.
pub fn rrf<T: Clone, Q: Hash + Eq>(
    lists: Vec<(&'static str, Vec<T>)>,
    key: impl Fn(&T) -> Q,
) -> Vec<Fused<T>> {
    let mut at: HashMap<Q, usize> = HashMap::new();
    let mut out: Vec<Fused<T>> = Vec::new();
    for (source, items) in lists {
        for (rank, item) in items.into_iter().enumerate() {
            let add = 1.0 / (K + rank as f64 + 1.0);
            match at.get(&key(&item)) {
                Some(&i) => {
                    out[i].score += add;
                    if !out[i].sources.contains(&source) {
                        out[i].sources.push(source);
                    }
                }
                None => {
                    at.insert(key(&item), out.len());
                    out.push(Fused {
                        item,
                        score: add,
                        sources: vec![source],
                    });
                }
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
        let fused = rrf(
            vec![("a", vec!["x", "y", "z"]), ("b", vec!["z", "w"])],
            |s| *s,
        );
        let order: Vec<&str> = fused.iter().map(|f| f.item).collect();
        assert_eq!(order, vec!["z", "x", "y", "w"]);
        assert_eq!(fused[0].sources, vec!["a", "b"]);
        assert!((fused[0].score - (1.0 / 63.0 + 1.0 / 61.0)).abs() < 1e-12);
    }
}
