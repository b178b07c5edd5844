//! One number per entity name, shared by a knowledge base's graph index and vector index.
//!
//! A graph-documents request walks the graph, then looks up the documents of every entity it
//! reached. With names as the join, each reached entity cost a copy of its name and a lookup by
//! string in the vector index's per-entity lists, and both were cache misses: a hub reaches
//! two hundred entities. With a number that both indexes know, the walk hands numbers over and
//! the vector index finds each entity's documents at that place in a list.
//!
//! A name keeps its number for the life of the numbering, also after its entity and its
//! documents are deleted, so that no reader holding a number from one index can meet it in the
//! other meaning another entity. The table holds every name met since the indexes were built:
//! a store's entities, and those deleted since.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::heap;

/// A numbering of entity names. Clones share one table.
#[derive(Debug, Clone)]
pub struct EntityNumbers(Arc<Numbering>);

#[derive(Debug)]
struct Numbering {
    /// No two numberings have the same id: numbers are only compared within one.
    id: u64,
    numbers: RwLock<FxHashMap<Arc<str>, u32>>,
}

impl Default for EntityNumbers {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        EntityNumbers(Arc::new(Numbering {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            numbers: RwLock::default(),
        }))
    }
}

impl EntityNumbers {
    /// Which numbering this is: the numbers of two numberings with one id mean the same names.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The number of `name` and the table's copy of it, numbering it now if it is new.
    pub fn number(&self, name: &str) -> (u32, Arc<str>) {
        if let Some((name, &n)) = self.0.numbers.read().get_key_value(name) {
            return (n, name.clone());
        }
        number_in(&mut self.0.numbers.write(), name)
    }

    /// [`number`](Self::number) for each of `names`, in order, under one lock.
    pub fn number_all<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<(u32, Arc<str>)> {
        let mut numbers = self.0.numbers.write();
        names
            .into_iter()
            .map(|name| number_in(&mut numbers, name))
            .collect()
    }

    /// The number of `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<u32> {
        self.0.numbers.read().get(name).copied()
    }

    /// [`get`](Self::get) for each of `names`, in order, under one lock.
    pub fn get_all(&self, names: &[&str]) -> Vec<Option<u32>> {
        let numbers = self.0.numbers.read();
        names
            .iter()
            .map(|&name| numbers.get(name).copied())
            .collect()
    }

    /// How many names have a number: every number is below it.
    pub fn len(&self) -> usize {
        self.0.numbers.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate heap bytes of the table and its names.
    pub fn heap_bytes(&self) -> usize {
        let numbers = self.0.numbers.read();
        heap::map(&numbers) + numbers.keys().map(|k| heap::arc_str(k)).sum::<usize>()
    }
}

/// The number of `name` in `numbers` and the table's copy of it, numbering it if it is new.
fn number_in(numbers: &mut FxHashMap<Arc<str>, u32>, name: &str) -> (u32, Arc<str>) {
    if let Some((name, &n)) = numbers.get_key_value(name) {
        return (n, name.clone());
    }
    let n = u32::try_from(numbers.len()).expect("fewer than 2^32 entity names");
    let name: Arc<str> = Arc::from(name);
    numbers.insert(name.clone(), n);
    (n, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name keeps its first number, new names take the next one, and two numberings never
    /// share an id.
    #[test]
    fn names_keep_their_numbers() {
        let numbers = EntityNumbers::default();
        assert_eq!(numbers.number("a").0, 0);
        assert_eq!(numbers.number("b").0, 1);
        assert_eq!(numbers.number("a").0, 0);
        let all: Vec<u32> = numbers
            .number_all(["c", "a", "c", "d"])
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(all, [2, 0, 2, 3]);
        assert_eq!(numbers.get_all(&["d", "x", "b"]), [Some(3), None, Some(1)]);
        assert_eq!(numbers.len(), 4);
        // The name handed back is the table's own copy.
        let (_, a1) = numbers.number("a");
        let (_, a2) = numbers.number("a");
        assert!(Arc::ptr_eq(&a1, &a2));
        let clone = numbers.clone();
        assert_eq!(clone.id(), numbers.id());
        assert_eq!(clone.get("c"), Some(2));
        assert_ne!(EntityNumbers::default().id(), numbers.id());
    }
}
