//! Graph traversal: the breadth-first `Walk` both read paths share, and the in-memory
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
use std::sync::{Arc, OnceLock};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::heap;
use crate::hint::{fetched_ahead, prefetch};
use crate::model::{Entity, EntityRef, Relationship, RelationshipRef, keys};
use crate::names::{NameIndex, fold_case, search_rank};
use crate::numbers::EntityNumbers;

/// Which edges a walk may follow from an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// Names in order, held in one buffer: a hub's walk copies hundreds of names out of the
/// index, and a `String` each was an allocation each, freed on another thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameList {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
}

impl NameList {
    /// Room for `names` names of `bytes` bytes in all.
    pub fn with_capacity(names: usize, bytes: usize) -> NameList {
        NameList {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(names),
        }
    }

    pub fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    pub fn first(&self) -> Option<&str> {
        self.get(0)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("a place in the list"))
    }

    /// The list without its first name (an empty list stays empty).
    pub fn without_first(mut self) -> NameList {
        let Some(&first) = self.ends.first() else {
            return self;
        };
        self.text.drain(..first);
        self.ends.remove(0);
        self.ends.iter_mut().for_each(|end| *end -= first);
        self
    }
}

impl<'a> FromIterator<&'a str> for NameList {
    fn from_iter<I: IntoIterator<Item = &'a str>>(names: I) -> NameList {
        let mut list = NameList::default();
        names.into_iter().for_each(|name| list.push(name));
        list
    }
}

/// Written as a JSON array of strings.
impl serde::Serialize for NameList {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

/// The entities a graph-documents walk reached, as that request needs them: names, depths
/// and the types of the edges that reached them, copied out of the index. A hub's walk
/// reaches hundreds of entities, and cloning each one's shared handle (and its edge type's)
/// was an atomic write to memory that every core's walks read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reach {
    /// The start entity's type (empty for an unknown start).
    pub start_type: String,
    /// The start entity (none for an unknown start), then the entities reached that the
    /// type filter accepts, in walk order.
    pub names: NameList,
    /// Hops from the start entity, by place in `names`.
    pub depths: Vec<u32>,
    /// The type of the edge that first reached each entity, by place in `names` (`None` for
    /// the start). Each type is the request's own copy, shared only within it.
    pub via: Vec<Option<Arc<str>>>,
    /// When the graph index walked: the id of its [`EntityNumbers`] and each entity's number
    /// in it, by place in `names`, which a vector index of the same numbering reads instead of
    /// the names.
    pub numbered: Option<(u64, Vec<u32>)>,
}

impl Reach {
    /// The [`Reach`] of a walk's `entities` (the start entity first).
    pub fn of(entities: &[Reached], entity_type: Option<&str>) -> Reach {
        let mut reach = Reach::default();
        for r in entities {
            reach.add(
                &r.entity.name,
                || &r.entity.entity_type,
                r.depth,
                || r.via.clone(),
                entity_type,
            );
        }
        reach
    }

    /// Adds an entity the walk reached (the start entity first, whatever its type) when it
    /// is of `entity_type`; `ty` gives its type (read only for the start entity and a type
    /// filter) and `via` the type of the edge that reached it.
    fn add<'a>(
        &mut self,
        name: &str,
        ty: impl FnOnce() -> &'a str,
        depth: u32,
        via: impl FnOnce() -> Option<Arc<str>>,
        entity_type: Option<&str>,
    ) {
        if self.names.is_empty() {
            self.start_type = ty().to_string();
        } else if entity_type.is_some_and(|t| t != ty()) {
            return;
        }
        self.names.push(name);
        self.depths.push(depth);
        self.via.push(via());
    }
}

/// The answer of a walk. An unknown start entity gives an empty answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traversal {
    pub entities: Vec<Reached>,
    pub relationships: Vec<RelationshipRef>,
    /// True when `limit` stopped the walk before it met every reachable entity.
    pub truncated: bool,
}

/// A traversal as JSON, for an answer that only writes it out: the entities and relationships
/// as `serde_json` writes them, in the same order, each list's items comma-separated.
///
/// The index serializes each entity and relationship once, when a walk first reaches it, and
/// copies that JSON here on the walk's own thread: serializing was most of the time of a
/// traversal over HTTP, and handing out a shared handle per entity and relationship (counted
/// up on one thread and down on another) most of what was left.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraversalJson {
    /// Each reached entity's JSON object (an [`Entity`]'s fields) with its `depth` after
    /// them, in the order of [`Traversal::entities`].
    pub entities: String,
    /// Each relationship's JSON object, in the order of [`Traversal::relationships`].
    pub relationships: String,
    pub total_entities: usize,
    pub total_relationships: usize,
    /// As [`Traversal::truncated`].
    pub truncated: bool,
}

impl TraversalJson {
    /// Room for `entities` and `relationships` bytes of JSON.
    fn with_capacity(entities: usize, relationships: usize) -> Self {
        TraversalJson {
            entities: String::with_capacity(entities),
            relationships: String::with_capacity(relationships),
            ..TraversalJson::default()
        }
    }

    /// A traversal the SurrealDB path answered, serialized here (the index renders its own
    /// from the JSON it keeps).
    pub fn of(walk: &Traversal) -> Self {
        let mut json = TraversalJson::default();
        for r in &walk.entities {
            // A model of maps, strings and JSON values always serializes.
            json.push_entity(
                &serde_json::to_string(&*r.entity).unwrap_or_default(),
                r.depth,
            );
        }
        for r in &walk.relationships {
            json.push_relationship(&serde_json::to_string(&**r).unwrap_or_default());
        }
        json.truncated = walk.truncated;
        json
    }

    /// Adds an entity, given as the JSON object of its fields (never `{}`: an entity has an
    /// id, a name, a type and properties), with `depth` after them.
    fn push_entity(&mut self, entity: &str, depth: u32) {
        if self.total_entities > 0 {
            self.entities.push(',');
        }
        let fields = entity.strip_suffix('}').unwrap_or(entity);
        self.entities.push_str(fields);
        self.entities.push_str(",\"depth\":");
        // A walk is at most a few hops deep: one digit, without the formatting machinery.
        match char::from_digit(depth, 10) {
            Some(digit) => self.entities.push(digit),
            None => self.entities.push_str(&depth.to_string()),
        }
        self.entities.push('}');
        self.total_entities += 1;
    }

    /// Adds a relationship, given as its JSON object.
    fn push_relationship(&mut self, rel: &str) {
        if self.total_relationships > 0 {
            self.relationships.push(',');
        }
        self.relationships.push_str(rel);
        self.total_relationships += 1;
    }
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

/// Nodes fetched ahead by [`GraphIndex::reach`].
const NODES_AHEAD: usize = 8;

struct Node {
    entity: EntityRef,
    /// The entity's name: the key of `GraphIndex::ids`, shared with it and the numbering. A
    /// walk reads names from here, one pointer from the node rather than two (through the
    /// entity).
    name: Arc<str>,
    /// The entity's number in `GraphIndex::numbers`.
    number: u32,
    /// `entity` as JSON, made when a walk first returns it (see [`TraversalJson`]).
    json: OnceLock<Box<str>>,
    /// Every edge touching this node, in canonical order (neighbour name, type, outgoing
    /// first), with what the walk needs inline: the walk reads one sequential list and
    /// compares no strings.
    adj: Vec<Adj>,
}

/// The edge by which the in-memory walk reached a node, with its type as the adjacency list
/// gives it: a reader of the walk that needs only the type looks up no edge (a miss each).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Via {
    edge: u32,
    ty: u32,
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
    /// `rel` as JSON, made when a walk first returns it (see [`TraversalJson`]).
    json: OnceLock<Box<str>>,
}

/// What a shared entity owns: its allocation and strings.
fn entity_bytes(e: &Entity) -> usize {
    16 + std::mem::size_of::<Entity>()
        + e.id.capacity()
        + e.name.capacity()
        + e.entity_type.capacity()
        + heap::json_map(&e.properties)
}

/// What a shared relationship owns: its allocation and strings.
fn relationship_bytes(r: &Relationship) -> usize {
    16 + std::mem::size_of::<Relationship>()
        + r.source_name.capacity()
        + r.target_name.capacity()
        + r.relationship_type.capacity()
        + heap::json_map(&r.properties)
}

/// `value` as `serde_json` writes it, made into `cell` the first time it is asked for.
fn json_of<'a, T: serde::Serialize>(cell: &'a OnceLock<Box<str>>, value: &T) -> &'a str {
    cell.get_or_init(|| {
        // A model of maps, strings and JSON values always serializes.
        serde_json::to_string(value).unwrap_or_default().into()
    })
}

/// The whole graph in memory: names to nodes, and each node's typed edges in canonical order.
/// SurrealDB stays the source of truth; the knowledge base writes there first and then here.
#[derive(Default)]
pub struct GraphIndex {
    /// Node ids by name. A node's id changes when another node is removed (the last one moves
    /// into its place); its entity number (see `numbers`) does not.
    ids: FxHashMap<Arc<str>, u32>,
    /// The numbering this index shares with the vector index: a walk gives each entity's
    /// number with its name (see [`Reach::numbered`]).
    numbers: EntityNumbers,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    edge_ids: FxHashMap<(u32, u32, u32), u32>,
    types: Vec<Arc<str>>,
    type_ids: FxHashMap<Arc<str>, u32>,
    /// The nodes' names (same ids), for search; kept in step by `upsert_entities` and
    /// `remove_entity`, which every write goes through.
    names: NameIndex,
}

impl GraphIndex {
    /// An empty index numbering entities in `numbers` (shared with a vector index).
    pub fn numbered(numbers: EntityNumbers) -> Self {
        GraphIndex {
            numbers,
            ..GraphIndex::default()
        }
    }

    /// Builds an index from whole tables, sorting each adjacency list once.
    pub fn build(entities: Vec<Entity>, relationships: Vec<Relationship>) -> Self {
        Self::build_numbered(EntityNumbers::default(), entities, relationships)
    }

    /// [`build`](Self::build), numbering entities in `numbers` (shared with a vector index).
    pub fn build_numbered(
        numbers: EntityNumbers,
        entities: Vec<Entity>,
        relationships: Vec<Relationship>,
    ) -> Self {
        let mut index = GraphIndex::numbered(numbers);
        index.upsert_entities(entities);
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
        // Sorted by integers in the order `adj_cmp` gives: the name index's order labels
        // rise with the names, and the types' ranks with theirs; no list holds one key twice.
        let mut by_name: Vec<u32> = (0..index.types.len() as u32).collect();
        by_name.sort_by(|&a, &b| index.types[a as usize].cmp(&index.types[b as usize]));
        let mut type_rank = vec![0u32; by_name.len()];
        for (rank, &ty) in by_name.iter().enumerate() {
            type_rank[ty as usize] = rank as u32;
        }
        let names = &index.names;
        for list in &mut lists {
            list.sort_unstable_by_key(|a| {
                (names.label(a.neighbour), type_rank[a.ty as usize], !a.out)
            });
        }
        for (node, list) in index.nodes.iter_mut().zip(lists) {
            node.adj = list;
        }
        index
    }

    pub fn entity_count(&self) -> usize {
        self.nodes.len()
    }

    /// Approximate heap bytes of the graph: nodes, edges and their entities, relationships
    /// and cached JSON, the maps and the types; not the name index ([`name_index`](Self::name_index)).
    pub fn heap_bytes(&self) -> usize {
        let cached = |cell: &OnceLock<Box<str>>| cell.get().map_or(0, |j| j.len());
        let nodes: usize = self
            .nodes
            .iter()
            .map(|n| entity_bytes(&n.entity) + cached(&n.json) + heap::vec(&n.adj))
            .sum();
        let edges: usize = self
            .edges
            .iter()
            .map(|e| relationship_bytes(&e.rel) + cached(&e.json))
            .sum();
        let names: usize = self.ids.keys().map(|k| heap::arc_str(k)).sum();
        let types: usize = self.types.iter().map(|t| heap::arc_str(t)).sum();
        heap::map(&self.ids)
            + names
            + heap::vec(&self.nodes)
            + nodes
            + heap::vec(&self.edges)
            + edges
            + heap::map(&self.edge_ids)
            + heap::vec(&self.types)
            + types
            + heap::map(&self.type_ids)
    }

    /// The `k` entities with the most relationships (in and out), most first, ties by name;
    /// with their counts. One pass over the nodes.
    pub fn most_connected(&self, k: usize) -> Vec<(EntityRef, usize)> {
        let mut best: Vec<&Node> = Vec::with_capacity(k + 1);
        let better = |a: &Node, b: &Node| {
            a.adj.len() > b.adj.len() || (a.adj.len() == b.adj.len() && a.name < b.name)
        };
        for node in &self.nodes {
            if best.len() == k && best.last().is_none_or(|last| !better(node, last)) {
                continue;
            }
            let at = best.partition_point(|b| better(b, node));
            best.insert(at, node);
            best.truncate(k);
        }
        best.into_iter()
            .map(|n| (n.entity.clone(), n.adj.len()))
            .collect()
    }

    pub fn relationship_count(&self) -> usize {
        self.edges.len()
    }

    /// The name index search reads, for its size.
    pub fn name_index(&self) -> &NameIndex {
        &self.names
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
        self.upsert_entities([entity]);
    }

    /// Inserts or replaces entities (their edges stay), a later one of the same name
    /// replacing an earlier one. The new names go into the name index in one batch
    /// ([`NameIndex::extend`]), which costs a fraction of adding them one by one.
    pub fn upsert_entities(&mut self, entities: impl IntoIterator<Item = Entity>) {
        let entities: Vec<Entity> = entities.into_iter().collect();
        // Numbered in one batch too: one lock of the shared numbering, not one per entity.
        let numbered = self
            .numbers
            .number_all(entities.iter().map(|e| e.name.as_str()));
        let new: Vec<Arc<str>> = entities
            .into_iter()
            .zip(numbered)
            .filter_map(|(e, numbered)| self.put_node(e, numbered))
            .collect();
        self.names.extend(new);
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
        self.names.swap_remove(i);
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

    /// Case-insensitive substring search over names, ranked exact, prefix, other, from the
    /// name index: the same answer as [`GraphIndex::search_scan`].
    pub fn search(&self, query: &str, entity_type: Option<&str>, limit: usize) -> Vec<EntityRef> {
        let accept =
            |id: u32| entity_type.is_none_or(|t| self.nodes[id as usize].entity.entity_type == t);
        self.names
            .search(query, limit, accept)
            .into_iter()
            .map(|id| self.nodes[id as usize].entity.clone())
            .collect()
    }

    /// The entities that go by `acronym` (lower case: "ibm" for "International Business
    /// Machines"; see [`NameIndex::by_acronym`]), in name order, at most `limit`.
    pub fn by_acronym(&self, acronym: &str, limit: usize) -> Vec<EntityRef> {
        let mut found: Vec<EntityRef> = (self.names.by_acronym(acronym).iter())
            .map(|&id| self.nodes[id as usize].entity.clone())
            .collect();
        found.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        found.truncate(limit);
        found
    }

    /// [`GraphIndex::search`] by a scan of every name: the reference the index is tested and
    /// benchmarked against.
    pub fn search_scan(
        &self,
        query: &str,
        entity_type: Option<&str>,
        limit: usize,
    ) -> Vec<EntityRef> {
        let q = fold_case(query);
        let hits: Vec<(u8, &Node)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| entity_type.is_none_or(|t| n.entity.entity_type == t))
            .filter_map(|(i, n)| search_rank(self.names.folded(i as u32), &q).map(|r| (r, n)))
            .collect();
        best_ranked(hits, limit, |n| &n.entity.name)
            .into_iter()
            .map(|(_, n)| n.entity.clone())
            .collect()
    }

    /// Walks the graph from `query.start`.
    pub fn traverse(&self, query: &TraversalQuery) -> Traversal {
        let Some(walk) = self.walk(query) else {
            return Traversal::default();
        };
        Traversal {
            entities: self.reached(&walk),
            relationships: (walk.edges.iter())
                .map(|v| self.edges[v.edge as usize].rel.clone())
                .collect(),
            truncated: walk.truncated,
        }
    }

    /// [`traverse`](Self::traverse)'s answer as JSON, copied from the JSON this index keeps
    /// of each entity and relationship (made when a walk first returns it).
    pub fn traverse_json(&self, query: &TraversalQuery) -> TraversalJson {
        let Some(walk) = self.walk(query) else {
            return TraversalJson::default();
        };
        // No prefetching here: fetching the nodes, their JSON and the edges ahead was not
        // told apart from the noise in traverse's req/s and server CPU (docs/benchmarks.md,
        // "Switches").
        let nodes: Vec<(&str, u32)> = walk
            .slots
            .iter()
            .map(|&(n, depth, _)| {
                let node = &self.nodes[n as usize];
                (json_of(&node.json, &*node.entity), depth)
            })
            .collect();
        let edges: Vec<&str> = walk
            .edges
            .iter()
            .map(|v| {
                let edge = &self.edges[v.edge as usize];
                json_of(&edge.json, &*edge.rel)
            })
            .collect();
        // `,"depth":` and its digits, and each list's commas.
        let size = nodes.iter().map(|(j, _)| j.len() + 16).sum();
        let mut json = TraversalJson::with_capacity(size, edges.iter().map(|j| j.len() + 1).sum());
        for (entity, depth) in nodes {
            json.push_entity(entity, depth);
        }
        for rel in edges {
            json.push_relationship(rel);
        }
        json.truncated = walk.truncated;
        json
    }

    /// What a graph-documents request needs of [`traverse`](Self::traverse)'s entities
    /// (see [`Reach`]), copied out: no relationships, no JSON and no shared handle.
    pub fn reach(&self, query: &TraversalQuery, entity_type: Option<&str>) -> Reach {
        let Some(walk) = self.walk(query) else {
            return Reach::default();
        };
        let reached = walk.slots.len();
        let mut reach = Reach {
            names: NameList::with_capacity(reached, reached * 16),
            depths: Vec::with_capacity(reached),
            via: Vec::with_capacity(reached),
            ..Reach::default()
        };
        let mut numbers = Vec::with_capacity(reached);
        // This request's own copy of each edge type it meets (see `Reach::via`).
        let mut types: FxHashMap<u32, Arc<str>> = FxHashMap::default();
        // A hub's walk reaches hundreds of nodes scattered over the index, and each node's
        // name is a miss of its own beyond it. So the nodes are read first, each fetched
        // `NODES_AHEAD` places ahead, and each accepted node's name is fetched as soon as
        // its address is known; the names are copied once they have all been asked for.
        let fetch = |s: &(u32, u32, Option<Via>)| prefetch(&self.nodes[s.0 as usize]);
        let mut accepted: Vec<(&Node, u32, Option<Via>)> = Vec::with_capacity(walk.slots.len());
        for (k, &(n, depth, via)) in fetched_ahead(&walk.slots, NODES_AHEAD, fetch).enumerate() {
            let node = &self.nodes[n as usize];
            // The start entity is always in, whatever its type.
            if k == 0 || entity_type.is_none_or(|t| node.entity.entity_type == t) {
                prefetch(node.name.as_ptr());
                accepted.push((node, depth, via));
            }
        }
        for (node, depth, via) in accepted {
            let via = || {
                via.map(|v| {
                    types
                        .entry(v.ty)
                        .or_insert_with(|| Arc::from(&*self.types[v.ty as usize]))
                        .clone()
                })
            };
            reach.add(&node.name, || &node.entity.entity_type, depth, via, None);
            numbers.push(node.number);
        }
        reach.numbered = Some((self.numbers.id(), numbers));
        reach
    }

    fn reached(&self, walk: &Walk<u32, Via>) -> Vec<Reached> {
        walk.slots
            .iter()
            .map(|(n, depth, via)| Reached {
                entity: self.nodes[*n as usize].entity.clone(),
                depth: *depth,
                via: via.map(|v| self.types[v.ty as usize].clone()),
            })
            .collect()
    }

    /// The breadth-first walk from `query.start`; `None` for an unknown start.
    fn walk(&self, query: &TraversalQuery) -> Option<Walk<u32, Via>> {
        let &start = self.ids.get(query.start.as_str())?;
        let allowed: Option<FxHashSet<u32>> = query.relationship_types.as_ref().map(|ts| {
            ts.iter()
                .filter_map(|t| self.type_ids.get(t.as_str()).copied())
                .collect()
        });
        let allows = |ty: u32| allowed.as_ref().is_none_or(|a| a.contains(&ty));
        let (follow_out, follow_in) = (query.direction.follows_out(), query.direction.follows_in());
        let mut walk: Walk<u32, Via> = Walk::new(start, query.limit, query.depth);
        'walk: while let Some(level) = walk.next_level() {
            for slot in level {
                let u = walk.slots[slot].0;
                for a in &self.nodes[u as usize].adj {
                    let wanted = if a.out { follow_out } else { follow_in };
                    let via = Via {
                        edge: a.edge,
                        ty: a.ty,
                    };
                    if wanted && allows(a.ty) && !walk.offer(&a.neighbour, &via) {
                        break 'walk;
                    }
                }
            }
        }
        Some(walk)
    }

    fn name_of(&self, node: u32) -> &str {
        &self.nodes[node as usize].name
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

    /// Records an entity's node, leaving the name index to the caller: returns the name of a
    /// new node (the last one), `None` for a replaced one, which keeps its name and so its
    /// name index entries.
    fn put_node(
        &mut self,
        mut entity: Entity,
        (number, name): (u32, Arc<str>),
    ) -> Option<Arc<str>> {
        entity.id = keys::entity_id(&entity.name);
        if let Some(&i) = self.ids.get(entity.name.as_str()) {
            let node = &mut self.nodes[i as usize];
            node.entity = Arc::new(entity);
            node.json = OnceLock::new();
            return None;
        }
        let i = self.nodes.len() as u32;
        self.nodes.push(Node {
            entity: Arc::new(entity),
            name: name.clone(),
            number,
            json: OnceLock::new(),
            adj: Vec::new(),
        });
        self.ids.insert(name.clone(), i);
        Some(name)
    }

    /// Records an edge (replacing the properties of an existing one). Returns its id and
    /// whether it is new, or `None` when an end is missing. Adjacency is the caller's job.
    fn put_edge(&mut self, rel: Relationship) -> Option<(u32, bool)> {
        let src = *self.ids.get(&*rel.source_name)?;
        let dst = *self.ids.get(&*rel.target_name)?;
        let ty = self.intern(&rel.relationship_type);
        if let Some(&e) = self.edge_ids.get(&(src, dst, ty)) {
            let edge = &mut self.edges[e as usize];
            edge.rel = Arc::new(rel);
            edge.json = OnceLock::new();
            return Some((e, false));
        }
        let e = self.edges.len() as u32;
        self.edges.push(Edge {
            src,
            dst,
            ty,
            rel: Arc::new(rel),
            json: OnceLock::new(),
        });
        self.edge_ids.insert((src, dst, ty), e);
        Some((e, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name list reads back what was pushed, empty names and multi-byte ones included, and
    /// without its first name it is the list of the others.
    #[test]
    fn a_name_list_holds_its_names_in_order() {
        let names = ["Ada", "", "Zoë \"Z\"", "中文", "x"];
        let list: NameList = names.into_iter().collect();
        assert_eq!(list.len(), 5);
        assert_eq!(list.iter().collect::<Vec<_>>(), names);
        assert_eq!(list.get(2), Some("Zoë \"Z\""));
        assert_eq!(list.get(5), None);
        let rest = list.clone().without_first();
        assert_eq!(rest.iter().collect::<Vec<_>>(), names[1..]);
        assert_eq!(rest, names[1..].iter().copied().collect());
        assert_eq!(
            serde_json::to_value(&rest).unwrap(),
            serde_json::json!(names[1..])
        );
        let empty = NameList::default().without_first();
        assert!(empty.is_empty() && empty.first().is_none());
        assert_eq!(serde_json::to_string(&empty).unwrap(), "[]");
    }

    /// Every node's adjacency list as (neighbour name, type, outgoing).
    fn adjacency(index: &GraphIndex) -> Vec<Vec<(String, String, bool)>> {
        index
            .nodes
            .iter()
            .map(|n| {
                n.adj
                    .iter()
                    .map(|a| {
                        let name = index.name_of(a.neighbour).to_string();
                        (name, index.types[a.ty as usize].to_string(), a.out)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_built_index_orders_each_list_as_one_made_by_upserts() {
        let mut rng = crate::generate::Rng::new(11);
        // Names that share prefixes, hold dots and non-ASCII letters; types out of order;
        // self loops and both directions between two nodes.
        let names: Vec<String> = (0..300)
            .map(|i| match i % 5 {
                0 => format!("org.example.pkg{}", i % 37),
                1 => format!("Zürich {i}"),
                2 => format!("a{}", i * 7919 % 300),
                3 => format!("{i}"),
                _ => format!("Ωmega.{}", i % 11),
            })
            .collect();
        let entities: Vec<Entity> = names
            .iter()
            .map(|n| Entity {
                id: String::new(),
                name: n.clone(),
                entity_type: "t".into(),
                properties: Default::default(),
            })
            .collect();
        let types = ["works_at", "Knows", "b", "a.b", "zeta", "ä"];
        let rels: Vec<Relationship> = (0..2000)
            .map(|_| Relationship {
                source_name: names[rng.below(names.len())].clone(),
                target_name: names[rng.below(40)].clone(),
                relationship_type: types[rng.below(types.len())].into(),
                properties: Default::default(),
            })
            .collect();
        let built = GraphIndex::build(entities.clone(), rels.clone());
        let mut upserted = GraphIndex::default();
        upserted.upsert_entities(entities);
        for r in rels {
            upserted.upsert_relationship(r);
        }
        assert_eq!(built.relationship_count(), upserted.relationship_count());
        assert_eq!(adjacency(&built), adjacency(&upserted));
    }

    #[test]
    fn a_walk_renders_the_json_of_what_the_index_holds_now() {
        let entity = |name: &str, rank: i64| Entity {
            id: String::new(),
            name: name.into(),
            entity_type: "t".into(),
            properties: serde_json::json!({ "rank": rank })
                .as_object()
                .unwrap()
                .clone(),
        };
        let rel = |note: &str| Relationship {
            source_name: "a".into(),
            target_name: "b".into(),
            relationship_type: "r".into(),
            properties: serde_json::json!({ "note": note })
                .as_object()
                .unwrap()
                .clone(),
        };
        let mut index = GraphIndex::build(vec![entity("a", 1), entity("b", 2)], vec![rel("x")]);
        let walk = |index: &GraphIndex| {
            let query = TraversalQuery {
                start: "a".into(),
                relationship_types: None,
                direction: Direction::Both,
                depth: 1,
                limit: 10,
            };
            let json = index.traverse_json(&query);
            // The same as serializing the walk's answer anew.
            assert_eq!(json, TraversalJson::of(&index.traverse(&query)));
            json
        };
        let parse = |items: &str| -> Vec<serde_json::Value> {
            serde_json::from_str(&format!("[{items}]")).unwrap()
        };
        let before = walk(&index);
        assert_eq!((before.total_entities, before.total_relationships), (2, 1));
        assert!(!before.truncated);
        // Each entity is its own fields, in their order, then its depth.
        let b = &index.nodes[index.ids["b"] as usize].entity;
        let fields = serde_json::to_string(&**b).unwrap();
        assert!(before.entities.ends_with(&format!(
            ",{},\"depth\":1}}",
            fields.strip_suffix('}').unwrap()
        )));
        let entities = parse(&before.entities);
        assert_eq!(entities.len(), 2);
        assert_eq!(
            (entities[0]["name"].clone(), entities[0]["depth"].clone()),
            ("a".into(), 0.into())
        );
        assert_eq!(entities[1]["properties"]["rank"], 2);
        assert_eq!(parse(&before.relationships)[0]["properties"]["note"], "x");
        // Updates made after a walk rendered the old values are rendered anew.
        index.upsert_entity(entity("b", 3));
        assert!(index.upsert_relationship(rel("y")));
        let after = walk(&index);
        assert_eq!(parse(&after.entities)[1]["properties"]["rank"], 3);
        assert_eq!(parse(&after.relationships)[0]["properties"]["note"], "y");
        // An unknown start entity: nothing.
        let nobody = index.traverse_json(&TraversalQuery {
            start: "nobody".into(),
            relationship_types: None,
            direction: Direction::Both,
            depth: 1,
            limit: 10,
        });
        assert_eq!(nobody, TraversalJson::default());
        // Depths of more than one digit.
        let mut deep = TraversalJson::default();
        deep.push_entity(r#"{"a":1}"#, 9);
        deep.push_entity(r#"{"a":2}"#, 12);
        assert_eq!(deep.entities, r#"{"a":1,"depth":9},{"a":2,"depth":12}"#);
    }

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
