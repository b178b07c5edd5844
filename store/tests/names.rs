//! Name search from the index answers as the scan of every name does: a property test over
//! generated graphs (Unicode names, names that fold alike, entity types) and the writes that
//! keep the index current (new names, one at a time and in batches, re-upserts with another
//! type, removes that renumber nodes, relationships). Its own binary because it needs no
//! database.

use kbq_store::{Entity, GraphIndex, Relationship};
use proptest::prelude::*;
use proptest::sample::Index;

/// Small, so names share grams and fold alike; upper case, digits, spaces, dots, multi-byte
/// characters, and (in half the cases) the two characters that fold into ASCII from outside it,
/// with the letters they fold to.
const ALPHABET: [&str; 18] = [
    "a", "A", "b", "B", "1", " ", ".", "é", "É", "ß", "中", "😀", "ab", "Ab", "İ", "\u{212A}", "i",
    "k",
];
const TYPES: [&str; 3] = ["person", "place", "concept"];

fn name(odd: bool) -> impl Strategy<Value = String> {
    let alphabet = if odd { &ALPHABET[..] } else { &ALPHABET[..14] };
    prop::collection::vec(prop::sample::select(alphabet), 0..8).prop_map(|parts| parts.concat())
}

fn entity(name: &str, ty: usize) -> Entity {
    Entity {
        id: String::new(),
        name: name.to_string(),
        entity_type: TYPES[ty].to_string(),
        properties: Default::default(),
    }
}

#[derive(Debug, Clone)]
enum Write {
    /// A name, maybe new.
    Upsert(String, usize),
    /// Names in one batch, maybe new, maybe alike, maybe existing.
    Batch(Vec<(String, usize)>),
    /// An existing name again, with a (maybe) different type.
    Retype(Index, usize),
    Remove(Index),
    Relate(Index, Index, usize),
}

#[derive(Debug, Clone)]
enum Query {
    /// Part of an existing name (start and length in characters), in a random case.
    Part(Index, Index, usize, u64),
    Random(String),
}

#[derive(Debug, Clone)]
struct Case {
    names: Vec<(String, usize)>,
    rels: Vec<(Index, Index, usize)>,
    writes: Vec<Write>,
    queries: Vec<Query>,
}

fn case() -> impl Strategy<Value = Case> {
    any::<bool>().prop_flat_map(|odd| {
        let write = prop_oneof![
            (name(odd), 0..3usize).prop_map(|(n, t)| Write::Upsert(n, t)),
            prop::collection::vec((name(odd), 0..3usize), 0..12).prop_map(Write::Batch),
            (any::<Index>(), 0..3usize).prop_map(|(i, t)| Write::Retype(i, t)),
            any::<Index>().prop_map(Write::Remove),
            (any::<Index>(), any::<Index>(), 0..3usize)
                .prop_map(|(a, b, t)| Write::Relate(a, b, t)),
        ];
        let query = prop_oneof![
            (any::<Index>(), any::<Index>(), 0..7usize, any::<u64>())
                .prop_map(|(n, s, l, c)| Query::Part(n, s, l, c)),
            name(odd).prop_map(Query::Random),
        ];
        (
            prop::collection::vec((name(odd), 0..3usize), 0..40),
            prop::collection::vec((any::<Index>(), any::<Index>(), 0..3usize), 0..30),
            prop::collection::vec(write, 0..30),
            prop::collection::vec(query, 1..25),
        )
            .prop_map(|(names, rels, writes, queries)| Case {
                names,
                rels,
                writes,
                queries,
            })
    })
}

fn relationship(graph: &GraphIndex, a: &Index, b: &Index, ty: usize) -> Option<Relationship> {
    let names = graph.names();
    if names.is_empty() {
        return None;
    }
    Some(Relationship {
        source_name: a.get(&names).clone(),
        target_name: b.get(&names).clone(),
        relationship_type: TYPES[ty].to_string(),
        properties: Default::default(),
    })
}

fn apply(graph: &mut GraphIndex, write: &Write) {
    let names = graph.names();
    match write {
        Write::Upsert(n, t) => graph.upsert_entity(entity(n, *t)),
        Write::Batch(batch) => graph.upsert_entities(batch.iter().map(|(n, t)| entity(n, *t))),
        Write::Retype(i, t) if !names.is_empty() => {
            graph.upsert_entity(entity(i.get::<String>(&names), *t))
        }
        Write::Remove(i) if !names.is_empty() => {
            assert!(graph.remove_entity(i.get::<String>(&names)))
        }
        Write::Relate(a, b, t) => {
            if let Some(r) = relationship(graph, a, b, *t) {
                assert!(graph.upsert_relationship(r));
            }
        }
        Write::Retype(..) | Write::Remove(_) => {}
    }
}

fn query_text(graph: &GraphIndex, query: &Query) -> String {
    match query {
        Query::Random(q) => q.clone(),
        Query::Part(n, start, len, case) => {
            let names = graph.names();
            if names.is_empty() {
                return String::new();
            }
            let chars: Vec<char> = n.get(&names).chars().collect();
            let start = if chars.is_empty() {
                0
            } else {
                start.index(chars.len() + 1)
            };
            chars[start..(start + len).min(chars.len())]
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if case >> (i % 64) & 1 == 1 {
                        c.to_uppercase().collect::<String>()
                    } else {
                        c.to_lowercase().collect()
                    }
                })
                .collect()
        }
    }
}

fn assert_same(graph: &GraphIndex, queries: &[Query]) -> Result<(), TestCaseError> {
    for query in queries {
        let q = query_text(graph, query);
        for ty in [None, Some(TYPES[0]), Some(TYPES[2]), Some("unknown")] {
            for limit in [0, 1, 5, 100] {
                let index = graph.search(&q, ty, limit);
                let scan = graph.search_scan(&q, ty, limit);
                let names = |hits: &[kbq_store::EntityRef]| -> Vec<String> {
                    hits.iter().map(|e| e.name.clone()).collect()
                };
                prop_assert_eq!(
                    &index,
                    &scan,
                    "{:?} {:?} {}: index {:?}, scan {:?}",
                    q,
                    ty,
                    limit,
                    names(&index),
                    names(&scan)
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn index_search_equals_the_scan(case in case()) {
        let entities = case.names.iter().map(|(n, t)| entity(n, *t)).collect();
        let mut graph = GraphIndex::build(entities, Vec::new());
        for (a, b, t) in &case.rels {
            if let Some(r) = relationship(&graph, a, b, *t) {
                graph.upsert_relationship(r);
            }
        }
        assert_same(&graph, &case.queries)?;
        for (i, write) in case.writes.iter().enumerate() {
            apply(&mut graph, write);
            if i % 5 == 4 {
                assert_same(&graph, &case.queries)?;
            }
        }
        assert_same(&graph, &case.queries)?;
        // The index written to equals one built from the same names.
        let names = graph.names();
        let entities = names.iter().map(|n| graph.entity(n).unwrap().as_ref().clone()).collect();
        let rebuilt = GraphIndex::build(entities, Vec::new());
        prop_assert_eq!(rebuilt.name_index().postings(), graph.name_index().postings());
    }
}
