//! Approximate heap sizes of the in-memory indexes, for `/metrics` and sizing a node: what
//! each collection has allocated (its capacity, not its length) and the strings and JSON
//! values it owns. Hash tables count one control byte per slot beside each entry. A string
//! shared through an `Arc` by two structures is counted by each of them.

use std::collections::HashMap;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::mem::size_of;

/// A vector's buffer (not what its elements own).
pub(crate) fn vec<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

/// A hash map's table (not what its keys and values own).
pub(crate) fn map<K, V, S: BuildHasher>(m: &HashMap<K, V, S>) -> usize {
    m.capacity() * (size_of::<(K, V)>() + 1)
}

/// A hash set's table (not what its items own).
pub(crate) fn set<K, S: BuildHasher>(s: &HashSet<K, S>) -> usize {
    s.capacity() * (size_of::<K>() + 1)
}

/// A value held in an `Arc<T>`: the value and the two counts (not what the value owns).
pub(crate) fn arc<T>() -> usize {
    size_of::<T>() + 16
}

/// A string held in an `Arc<str>`: its bytes and the two counts.
pub(crate) fn arc_str(s: &str) -> usize {
    s.len() + 16
}

/// What a JSON value owns on the heap.
pub(crate) fn json(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => s.capacity(),
        Value::Array(a) => vec(a) + a.iter().map(json).sum::<usize>(),
        Value::Object(o) => json_map(o),
    }
}

/// What a JSON object owns on the heap (keys, values and its entries).
pub(crate) fn json_map(o: &serde_json::Map<String, serde_json::Value>) -> usize {
    o.iter()
        .map(|(k, v)| k.capacity() + size_of::<(String, serde_json::Value)>() + json(v))
        .sum()
}
