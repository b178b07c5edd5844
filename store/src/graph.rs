//! Graph traversal: the breadth-first [`Walk`] both read paths share, and the in-memory
//! [`GraphIndex`] that serves it without a database round trip.
//!
//! The walk's rules, which the index path and the SurrealDB path both follow:
//! - breadth-first from the start entity (depth 0, always the first entity returned);
//! - a node's candidate edges are taken in canonical order: neighbour name (byte order), then
//!   relationship type, then outgoing before incoming, so answers never depend on insertion order;
//! - every entity is visited once, so cycles end; `limit` counts the start entity;
//! - when `limit` entities are held and the walk meets one more, it stops and sets `truncated`;
//! - `relationships` are the edges examined from an expanded entity whose other end is returned,
//!   each once, in the order first seen.

use std::hash::Hash;
use std::ops::Range;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{Entity, EntityRef, Relationship, RelationshipRef, keys};

/// Which edges a walk may follow from an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Incoming edges: from target to source.
    In,
    /// Outgoing edges: from source to target.
    Out,
    /// Either way.
    Both,
}

impl Direction {
    pub fn follows_out(self) -> bool {
        matches!(self, Direction::Out | Direction::Both)
    }
    pub fn follows_in(self) -> bool {
        matches!(self, Direction::In | Direction::Both)
    }
}

/// What to walk.
#[derive(Debug, Clone, PartialEq)]
pub struct TraversalQuery {
    pub start: String,
    /// Follow only these relationship types; `None` follows all.
    pub relationship_types: Option<Vec<String>>,
    pub direction: Direction,
    /// Hops from the start entity.
    pub depth: u32,
    /// Most entities returned, the start entity included.
    pub limit: usize,
}

/// An entity the walk reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Reached {
    pub entity: EntityRef,
    /// Hops from the start entity (0 for the start entity itself).
    pub depth: u32,
    /// The type of the edge that first reached this entity; `None` for the start entity.
    pub via: Option<Arc<str>>,
}

/// The answer of a walk. An unknown start entity gives an empty answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traversal {
    pub entities: Vec<Reached>,
    pub relationships: Vec<RelationshipRef>,
    /// True when `limit` stopped the walk before it met every reachable entity.
    pub truncated: bool,
}

/// The breadth-first walk, generic over how nodes (`K`) and edges (`E`) are named, so the
/// index path (integers) and the SurrealDB path (names and record keys) share every rule.
pub(crate) struct Walk<K, E> {
    limit: usize,
    max_depth: u32,
    /// Reached nodes in order: key, depth, the edge that reached it.
    pub(crate) slots: Vec<(K, u32, Option<E>)>,
    index_of: FxHashMap<K, usize>,
    pub(crate) edges: Vec<E>,
    seen_edges: FxHashSet<E>,
    level_start: usize,
    new_depth: u32,
    pub(crate) truncated: bool,
}

impl<K: Hash + Eq + Clone, E: Hash + Eq + Clone> Walk<K, E> {
    pub(crate) fn new(start: K, limit: usize, max_depth: u32) -> Self {
        // Sized for the usual answer, so small walks never rehash.
        let room = limit.clamp(1, 256);
        let mut index_of = FxHashMap::with_capacity_and_hasher(room, Default::default());
        index_of.insert(start.clone(), 0);
        let mut slots = Vec::with_capacity(room);
        slots.push((start, 0, None));
        Walk {
            limit: limit.max(1),
            max_depth,
            slots,
            index_of,
            edges: Vec::with_capacity(room * 2),
            seen_edges: FxHashSet::with_capacity_and_hasher(room * 2, Default::default()),
            level_start: 0,
            new_depth: 0,
            truncated: false,
        }
    }

    /// The slots to expand next (all nodes of the deepest level so far), or `None` when the
    /// walk is over.
    pub(crate) fn next_level(&mut self) -> Option<Range<usize>> {
        if self.truncated || self.new_depth >= self.max_depth {
            return None;
        }
        let level = self.level_start..self.slots.len();
        if level.is_empty() {
            return None;
        }
        self.level_start = self.slots.len();
        self.new_depth += 1;
        Some(level)
    }

    /// Offers an edge from an expanded node to `neighbour`. Returns false when the walk must
    /// stop (limit reached and a new entity met).
    pub(crate) fn offer(&mut self, neighbour: &K, edge: &E) -> bool {
        if self.index_of.contains_key(neighbour) {
            if self.seen_edges.insert(edge.clone()) {
                self.edges.push(edge.clone());
            }
            return true;
        }
        if self.slots.len() >= self.limit {
            self.truncated = true;
            return false;
        }
        self.index_of.insert(neighbour.clone(), self.slots.len());
        self.slots
            .push((neighbour.clone(), self.new_depth, Some(edge.clone())));
        self.seen_edges.insert(edge.clone());
        self.edges.push(edge.clone());
        true
    }
}

/// Ordering of candidate edges: neighbour name, relationship type, outgoing first.
pub(crate) fn candidate_order(a: (&str, &str, bool), b: (&str, &str, bool)) -> std::cmp::Ordering {
    a.0.cmp(b.0)
        .then_with(|| a.1.cmp(b.1))
        .then_with(|| b.2.cmp(&a.2))
}

/// Ranks a search hit: 0 exact, 1 prefix, 2 elsewhere (all case-insensitive); `None` if no hit.
pub fn search_rank(name_lower: &str, query_lower: &str) -> Option<u8> {
    if name_lower == query_lower {
        Some(0)
    } else if name_lower.starts_with(query_lower) {
        Some(1)
    } else if name_lower.contains(query_lower) {
        Some(2)
    } else {
        None
    }
}

/// Sorts search hits by rank, then name, and keeps `limit`.
pub fn rank_hits(hits: Vec<(u8, EntityRef)>, limit: usize) -> Vec<EntityRef> {
    best_ranked(hits, limit, |e| &e.name)
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

/// The best `limit` of `hits` by rank, then name, in that order. A short name matching
/// everything (`e`) matches most of a large graph: only the kept hits are sorted.
fn best_ranked<T>(mut hits: Vec<(u8, T)>, limit: usize, name: impl Fn(&T) -> &str) -> Vec<(u8, T)> {
    let order = |a: &(u8, T), b: &(u8, T)| a.0.cmp(&b.0).then_with(|| name(&a.1).cmp(name(&b.1)));
    if limit == 0 {
        return Vec::new();
    }
    if hits.len() > limit {
        hits.select_nth_unstable_by(limit - 1, order);
        hits.truncate(limit);
    }
    hits.sort_by(order);
    hits
}

/// Lower-cases a name the way search compares names (Unicode lower case).
pub fn fold_case(s: &str) -> String {
    s.to_lowercase()
}

struct Node {
    entity: EntityRef,
    lower: Box<str>,
    /// Every edge touching this node, in canonical order (neighbour name, type, outgoing
    /// first), with what the walk needs inline: the walk reads one sequential list and
    /// compares no strings.
    adj: Vec<Adj>,
}

/// One entry of a node's adjacency list.
#[derive(Clone, Copy)]
struct Adj {
    neighbour: u32,
    edge: u32,
    ty: u32,
    out: bool,
}

struct Edge {
    src: u32,
    dst: u32,
    ty: u32,
    rel: RelationshipRef,
}

/// The whole graph in memory: names to nodes, and each node's typed edges in canonical order.
/// SurrealDB stays the source of truth; the knowledge base writes there first and then here.
#[derive(Default)]
pub struct GraphIndex {
    ids: FxHashMap<Arc<str>, u32>,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    edge_ids: FxHashMap<(u32, u32, u32), u32>,
    types: Vec<Arc<str>>,
    type_ids: FxHashMap<Arc<str>, u32>,
}

impl GraphIndex {
    /// Builds an index from whole tables, sorting each adjacency list once.
    pub fn build(entities: Vec<Entity>, relationships: Vec<Relationship>) -> Self {
        let mut index = GraphIndex::default();
        for e in entities {
            index.put_entity(e);
        }
        for r in relationships {
            let _ = index.put_edge(r);
        }
        let mut lists: Vec<Vec<Adj>> = vec![Vec::new(); index.nodes.len()];
        for (e, edge) in index.edges.iter().enumerate() {
            let (e, ty) = (e as u32, edge.ty);
            lists[edge.src as usize].push(Adj {
                neighbour: edge.dst,
                edge: e,
                ty,
                out: true,
            });
            lists[edge.dst as usize].push(Adj {
                neighbour: edge.src,
                edge: e,
                ty,
                out: false,
            });
        }
        for list in &mut lists {
            list.sort_by(|a, b| index.adj_cmp(a, b));
        }
        for (node, list) in index.nodes.iter_mut().zip(lists) {
            node.adj = list;
        }
        index
    }

    pub fn entity_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn relationship_count(&self) -> usize {
        self.edges.len()
    }

    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.entity.name.clone()).collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.ids.contains_key(name)
    }

    pub fn entity(&self, name: &str) -> Option<EntityRef> {
        self.ids
            .get(name)
            .map(|&i| self.nodes[i as usize].entity.clone())
    }

    /// Inserts or replaces an entity (its edges stay).
    pub fn upsert_entity(&mut self, entity: Entity) {
        self.put_entity(entity);
    }

    /// Inserts or replaces a relationship. Both ends must already be in the index; returns
    /// false (and changes nothing) when one is missing.
    pub fn upsert_relationship(&mut self, rel: Relationship) -> bool {
        let Some((e, new)) = self.put_edge(rel) else {
            return false;
        };
        if new {
            let edge = &self.edges[e as usize];
            let (src, dst, ty) = (edge.src, edge.dst, edge.ty);
            for (node, adj) in [
                (
                    src,
                    Adj {
                        neighbour: dst,
                        edge: e,
                        ty,
                        out: true,
                    },
                ),
                (
                    dst,
                    Adj {
                        neighbour: src,
                        edge: e,
                        ty,
                        out: false,
                    },
                ),
            ] {
                let pos = self.nodes[node as usize]
                    .adj
                    .partition_point(|x| self.adj_cmp(x, &adj).is_lt());
                self.nodes[node as usize].adj.insert(pos, adj);
            }
        }
        true
    }

    /// Removes a relationship; returns whether it was there.
    pub fn remove_relationship(&mut self, source: &str, target: &str, ty: &str) -> bool {
        let (Some(&src), Some(&dst), Some(&t)) = (
            self.ids.get(source),
            self.ids.get(target),
            self.type_ids.get(ty),
        ) else {
            return false;
        };
        let Some(e) = self.edge_ids.remove(&(src, dst, t)) else {
            return false;
        };
        self.nodes[src as usize].adj.retain(|a| a.edge != e);
        self.nodes[dst as usize].adj.retain(|a| a.edge != e);
        // The last edge moves into the hole: its id changes from `last` to `e`.
        let last = (self.edges.len() - 1) as u32;
        self.edges.swap_remove(e as usize);
        if e != last {
            let moved = &self.edges[e as usize];
            let (ms, md, mt) = (moved.src, moved.dst, moved.ty);
            self.edge_ids.insert((ms, md, mt), e);
            for n in [ms, md] {
                for a in &mut self.nodes[n as usize].adj {
                    if a.edge == last {
                        a.edge = e;
                    }
                }
            }
        }
        true
    }

    /// Removes an entity and every relationship touching it; returns whether it was there.
    pub fn remove_entity(&mut self, name: &str) -> bool {
        let Some(&i) = self.ids.get(name) else {
            return false;
        };
        let mut touching: Vec<(String, String, Arc<str>)> = self.nodes[i as usize]
            .adj
            .iter()
            .map(|a| {
                let e = &self.edges[a.edge as usize];
                (
                    self.name_of(e.src).to_string(),
                    self.name_of(e.dst).to_string(),
                    self.types[e.ty as usize].clone(),
                )
            })
            .collect();
        touching.sort();
        touching.dedup();
        for (s, d, t) in touching {
            self.remove_relationship(&s, &d, &t);
        }
        self.ids.remove(name);
        // The last node moves into the hole: every reference to `last` becomes `i`. It has
        // no edge to the removed node any more, so no reference to `i` is left behind.
        let last = (self.nodes.len() - 1) as u32;
        self.nodes.swap_remove(i as usize);
        if i != last {
            if let Some(id) = self
                .ids
                .get_mut(self.nodes[i as usize].entity.name.as_str())
            {
                *id = i;
            }
            let adj = self.nodes[i as usize].adj.clone();
            for a in &adj {
                let m = if a.neighbour == last { i } else { a.neighbour };
                for b in &mut self.nodes[m as usize].adj {
                    if b.neighbour == last {
                        b.neighbour = i;
                    }
                }
                let edge = &mut self.edges[a.edge as usize];
                if edge.src == last || edge.dst == last {
                    let old = (edge.src, edge.dst, edge.ty);
                    if edge.src == last {
                        edge.src = i;
                    }
                    if edge.dst == last {
                        edge.dst = i;
                    }
                    let new = (edge.src, edge.dst, edge.ty);
                    self.edge_ids.remove(&old);
                    self.edge_ids.insert(new, a.edge);
                }
            }
        }
        true
    }

    /// Case-insensitive substring search over names, ranked exact, prefix, other.
    pub fn search(&self, query: &str, entity_type: Option<&str>, limit: usize) -> Vec<EntityRef> {
        let q = fold_case(query);
        let hits: Vec<(u8, &Node)> = self
            .nodes
            .iter()
            .filter(|n| entity_type.is_none_or(|t| n.entity.entity_type == t))
            .filter_map(|n| search_rank(&n.lower, &q).map(|r| (r, n)))
            .collect();
        best_ranked(hits, limit, |n| &n.entity.name)
            .into_iter()
            .map(|(_, n)| n.entity.clone())
            .collect()
    }

    /// Walks the graph from `query.start`.
    pub fn traverse(&self, query: &TraversalQuery) -> Traversal {
        let Some(&start) = self.ids.get(query.start.as_str()) else {
            return Traversal::default();
        };
        let allowed: Option<FxHashSet<u32>> = query.relationship_types.as_ref().map(|ts| {
            ts.iter()
                .filter_map(|t| self.type_ids.get(t.as_str()).copied())
                .collect()
        });
        let allows = |ty: u32| allowed.as_ref().is_none_or(|a| a.contains(&ty));
        let (follow_out, follow_in) = (query.direction.follows_out(), query.direction.follows_in());
        let mut walk: Walk<u32, u32> = Walk::new(start, query.limit, query.depth);
        'walk: while let Some(level) = walk.next_level() {
            for slot in level {
                let u = walk.slots[slot].0;
                for a in &self.nodes[u as usize].adj {
                    let wanted = if a.out { follow_out } else { follow_in };
                    if wanted && allows(a.ty) && !walk.offer(&a.neighbour, &a.edge) {
                        break 'walk;
                    }
                }
            }
        }
        Traversal {
            entities: walk
                .slots
                .iter()
                .map(|(n, depth, via)| Reached {
                    entity: self.nodes[*n as usize].entity.clone(),
                    depth: *depth,
                    via: via.map(|e| self.types[self.edges[e as usize].ty as usize].clone()),
                })
                .collect(),
            relationships: walk
                .edges
                .iter()
                .map(|e| self.edges[*e as usize].rel.clone())
                .collect(),
            truncated: walk.truncated,
        }
    }

    fn name_of(&self, node: u32) -> &str {
        &self.nodes[node as usize].entity.name
    }

    /// Canonical order of adjacency entries: neighbour name, type, outgoing first.
    fn adj_cmp(&self, a: &Adj, b: &Adj) -> std::cmp::Ordering {
        candidate_order(
            (self.name_of(a.neighbour), &self.types[a.ty as usize], a.out),
            (self.name_of(b.neighbour), &self.types[b.ty as usize], b.out),
        )
    }

    fn intern(&mut self, ty: &str) -> u32 {
        if let Some(&t) = self.type_ids.get(ty) {
            return t;
        }
        let t = self.types.len() as u32;
        let ty: Arc<str> = ty.into();
        self.types.push(ty.clone());
        self.type_ids.insert(ty, t);
        t
    }

    fn put_entity(&mut self, mut entity: Entity) {
        entity.id = keys::entity_id(&entity.name);
        let lower = fold_case(&entity.name).into_boxed_str();
        if let Some(&i) = self.ids.get(entity.name.as_str()) {
            let node = &mut self.nodes[i as usize];
            node.entity = Arc::new(entity);
            node.lower = lower;
            return;
        }
        let i = self.nodes.len() as u32;
        let name: Arc<str> = entity.name.as_str().into();
        self.nodes.push(Node {
            entity: Arc::new(entity),
            lower,
            adj: Vec::new(),
        });
        self.ids.insert(name, i);
    }

    /// Records an edge (replacing the properties of an existing one). Returns its id and
    /// whether it is new, or `None` when an end is missing. Adjacency is the caller's job.
    fn put_edge(&mut self, rel: Relationship) -> Option<(u32, bool)> {
        let src = *self.ids.get(&*rel.source_name)?;
        let dst = *self.ids.get(&*rel.target_name)?;
        let ty = self.intern(&rel.relationship_type);
        if let Some(&e) = self.edge_ids.get(&(src, dst, ty)) {
            self.edges[e as usize].rel = Arc::new(rel);
            return Some((e, false));
        }
        let e = self.edges.len() as u32;
        self.edges.push(Edge {
            src,
            dst,
            ty,
            rel: Arc::new(rel),
        });
        self.edge_ids.insert((src, dst, ty), e);
        Some((e, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_ranked_keeps_what_a_full_sort_keeps() {
        // Names in a scrambled order, three ranks.
        let hits: Vec<(u8, String)> = (0..500u32)
            .map(|i| ((i * 7 % 3) as u8, format!("n{:03}", (i * 37) % 500)))
            .collect();
        let mut sorted = hits.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        for limit in [0, 1, 10, 499, 500, 501] {
            let best = best_ranked(hits.clone(), limit, |s| s.as_str());
            let want: Vec<_> = sorted.iter().take(limit).cloned().collect();
            assert_eq!(best, want, "limit {limit}");
        }
    }
}
