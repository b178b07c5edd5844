//! Every document of an embedded store, held in memory by key so that a search or a
//! graph-documents request copies its hits from here instead of reading them back through
//! SurrealDB. [`doc_index`](crate::doc_index) keeps it equal to what SurrealDB holds.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::Document;

/// Every document of an embedded store by key, as SurrealDB holds it (see [`doc_index`](crate::doc_index)).
#[derive(Default)]
pub(crate) struct DocumentTable {
    /// Shared with the hits that return them: a hit is a handle, not a copy.
    by_key: FxHashMap<Box<str>, Arc<Document>>,
}

impl DocumentTable {
    /// Approximate heap bytes: the table, the keys and every document's strings.
    pub(crate) fn heap_bytes(&self) -> usize {
        let owned: usize = self
            .by_key
            .iter()
            .map(|(k, d)| {
                k.len()
                    + crate::heap::arc::<Document>()
                    + d.id.capacity()
                    + d.title.capacity()
                    + d.content.capacity()
                    + d.source.capacity()
                    + d.source_id.capacity()
                    + d.content_type.capacity()
                    + d.url.as_ref().map_or(0, String::capacity)
                    + d.entity_name.as_ref().map_or(0, String::capacity)
                    + d.mentions.iter().map(String::capacity).sum::<usize>()
            })
            .sum();
        crate::heap::map(&self.by_key) + owned
    }

    /// Every document, in no order.
    #[cfg(test)]
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Document>> {
        self.by_key.values()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Arc<Document>> {
        self.by_key.get(key)
    }

    pub(crate) fn put(&mut self, key: &str, document: Document) {
        self.by_key.insert(key.into(), Arc::new(document));
    }

    pub(crate) fn remove(&mut self, key: &str) {
        self.by_key.remove(key);
    }

    /// Unlinks the document `key` from its entity (the entity was deleted).
    pub(crate) fn unlink(&mut self, key: &str) {
        if let Some(d) = self.by_key.get_mut(key) {
            // A hit handed out before keeps the document as it was.
            Arc::make_mut(d).entity_name = None;
        }
    }

    /// Drops the mention of the entity `name` from the document `key` (the entity was
    /// deleted).
    pub(crate) fn unmention(&mut self, key: &str, name: &str) {
        if let Some(d) = self.by_key.get_mut(key)
            && d.mentions.iter().any(|m| m == name)
        {
            Arc::make_mut(d).mentions.retain(|m| m != name);
        }
    }
}
