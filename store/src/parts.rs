//! Reading whole tables in parts, to build the in-memory indexes: each table is read as
//! [`PARTS`] ranges of record keys, several at once, each decoded on the task that read it,
//! and every finished part reported to a [`LoadProgress`]. Reading one table in one
//! statement held every decoded row of it at once, used one core, and could report nothing
//! until it was done.

use std::ops::Bound;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::StreamExt;
use surrealdb::types::{RecordId, RecordIdKey, RecordIdKeyRange, SurrealValue, Value};

use crate::db::{Connected, INDEX_LOAD_TIMEOUT, obj, query_on};
use crate::error::{Result, StoreError};
use crate::progress::LoadProgress;

/// How many key ranges a table is read in. Keys are a letter and 32 hex digits
/// ([`keys`](crate::model::keys)), so ranges by the first digit hold about as many records
/// each.
pub(crate) const PARTS: u32 = 16;

/// The parts of loading the graph index: its two tables' ranges, and the build.
pub(crate) const GRAPH_PARTS: u32 = 2 * PARTS + 1;

/// The parts of loading the document indexes: the table's ranges, and the build.
pub(crate) const DOCUMENT_PARTS: u32 = PARTS + 1;

/// The key ranges that cover a table whose keys start with `letter`: by the first hex digit
/// after it, the first range open below and the last open above, so that a key of any other
/// shape is read too, exactly once.
fn key_ranges(letter: char) -> Vec<RecordIdKeyRange> {
    let bound = |digit: u32| {
        RecordIdKey::String(format!(
            "{letter}{}",
            char::from_digit(digit, 16).expect("a hex digit")
        ))
    };
    (0..PARTS)
        .map(|i| RecordIdKeyRange {
            start: if i == 0 {
                Bound::Unbounded
            } else {
                Bound::Included(bound(i))
            },
            end: if i + 1 == PARTS {
                Bound::Unbounded
            } else {
                Bound::Excluded(bound(i + 1))
            },
        })
        .collect()
}

/// Counts finished parts of the whole load and reports each to `sink`.
pub(crate) struct Parts<'a> {
    done: AtomicU32,
    total: u32,
    sink: &'a dyn LoadProgress,
}

impl<'a> Parts<'a> {
    /// A load of `total` parts.
    pub(crate) fn new(total: u32, sink: &'a dyn LoadProgress) -> Self {
        Parts {
            done: AtomicU32::new(0),
            total,
            sink,
        }
    }

    /// One more part is finished.
    pub(crate) fn finished(&self) {
        let done = self.done.fetch_add(1, Ordering::AcqRel) + 1;
        self.sink.advance(done.min(self.total), self.total);
    }
}

/// Reads `fields` of every record of `table` (whose keys start with `letter`) in [`PARTS`]
/// key ranges, as many at once as there are cores, each part's rows turned into a `T` by
/// `decode` on the task that read them. The parts come back in key order.
pub(crate) async fn read_table<T, F>(
    c: &Connected,
    table: &str,
    letter: char,
    fields: &str,
    decode: F,
    parts: &Parts<'_>,
) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(Vec<Value>) -> Result<T> + Send + Sync + Clone + 'static,
{
    let sql = format!("SELECT {fields} FROM $range");
    let at_once = std::thread::available_parallelism().map_or(2, |n| n.get());
    let reads = key_ranges(letter).into_iter().map(|range| {
        let db = c.db.clone();
        let sql = sql.clone();
        let decode = decode.clone();
        let range = RecordId::new(table, RecordIdKey::Range(Box::new(range)));
        // A task of its own, so that parts are read and decoded on several cores.
        tokio::spawn(async move {
            let mut resp = query_on(
                &db,
                &sql,
                obj([("range", range.into_value())]),
                INDEX_LOAD_TIMEOUT,
            )
            .await?;
            let rows: Vec<Value> = resp.take(0).map_err(|e| StoreError::Query(e.to_string()))?;
            decode(rows)
        })
    });
    let mut read = futures::stream::iter(reads).buffered(at_once);
    let mut out = Vec::with_capacity(PARTS as usize);
    while let Some(part) = read.next().await {
        let part = part.map_err(|e| StoreError::Query(format!("reading {table} failed: {e}")))?;
        out.push(part?);
        parts.finished();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranges_cover_every_key_once_in_order() {
        let ranges = key_ranges('d');
        assert_eq!(ranges.len(), PARTS as usize);
        let contains = |r: &RecordIdKeyRange, key: &str| {
            let k = RecordIdKey::String(key.into());
            let above = match &r.start {
                Bound::Unbounded => true,
                Bound::Included(s) => &k >= s,
                Bound::Excluded(s) => &k > s,
            };
            let below = match &r.end {
                Bound::Unbounded => true,
                Bound::Included(e) => &k <= e,
                Bound::Excluded(e) => &k < e,
            };
            above && below
        };
        for key in [
            "", "a", "d", "d0", "d0ff", "d7a", "d9z", "da0", "dfff", "dg", "e0", "z",
        ] {
            let holders: Vec<usize> = ranges
                .iter()
                .enumerate()
                .filter(|(_, r)| contains(r, key))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(holders.len(), 1, "{key:?} is in {holders:?}");
        }
        assert!(contains(&ranges[0], "d0ff"));
        assert!(contains(&ranges[9], "d9z"));
        assert!(contains(&ranges[10], "da0"));
        assert!(contains(&ranges[15], "dfff"));
    }
}
