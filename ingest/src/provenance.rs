//! Which sources support each fact, and what deleting or replacing a source takes away.
//!
//! Every fact in the graph (an entity, a relationship, an alias, a description) keeps the
//! set of its [`Support`]s: the chunks of the sources it was extracted from, and
//! [`Support::Import`] when an import (or a direct write) stated it. Deleting a source
//! removes a fact only when nothing else supports it; imports are never retracted by a
//! source's deletion. The planner is a pure function from the facts, their supports and the
//! source to a [`Plan`]; the store applies the plan (as [`apply`] does in memory).
//!
//! # The rules
//!
//! 1. A fact the source supported is removed when no other support remains.
//! 2. A fact that stays loses the source's supports (the new version's, on a replace, are
//!    kept or added).
//! 3. An entity is kept while a fact that stays refers to it: a relationship at either end,
//!    an alias or a description. Whoever supports "Ada -worked_with-> Babbage" supports
//!    that Babbage exists. So a relationship never loses an end, and an alias or a
//!    description goes with its entity only when nothing supports either of them.
//! 4. An entity kept by rule 3 with no support of its own is removed as soon as the last fact
//!    that kept it goes, by a later plan, even though that plan's source never supported the
//!    entity itself.
//! 5. Nothing else is touched: a fact that lists no support at all and that no removed fact
//!    kept is left alone. Data written before supports were recorded should be given
//!    [`Support::Import`] when it is migrated, or rule 4 may remove its entities.
//!
//! Entities are named by the identity the store knows them by (the resolved name); a
//! relationship, alias or description refers to its entities by that same string.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A source: a document as the client names it, `source_id` within a `source` (a
/// collection, a connector, an upload area).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SourceKey {
    /// The namespace of the source.
    pub source: String,
    /// The source's id within its namespace.
    pub source_id: String,
}

impl SourceKey {
    /// A source key.
    pub fn new(source: impl Into<String>, source_id: impl Into<String>) -> Self {
        SourceKey {
            source: source.into(),
            source_id: source_id.into(),
        }
    }
}

/// A chunk of a source's current version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChunkRef {
    /// The source.
    pub source: SourceKey,
    /// The chunk's [`index`](crate::chunk::Chunk::index).
    pub chunk: u32,
}

/// Why a fact is in the graph.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    /// A chunk stated it.
    Chunk(ChunkRef),
    /// An import or a direct write stated it; no source's deletion retracts it.
    Import,
}

impl Support {
    /// The source of a chunk support; none for an import.
    pub fn source(&self) -> Option<&SourceKey> {
        match self {
            Support::Chunk(chunk) => Some(&chunk.source),
            Support::Import => None,
        }
    }

    fn is_from(&self, source: &SourceKey) -> bool {
        self.source() == Some(source)
    }
}

/// A fact of the graph, by its identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fact {
    /// An entity exists.
    Entity {
        /// The entity.
        name: String,
    },
    /// `source` -`relationship_type`-> `target`.
    Relationship {
        /// The entity the relationship goes from.
        source: String,
        /// The entity it goes to.
        target: String,
        /// Its type.
        relationship_type: String,
    },
    /// `alias` is another name of `entity` (a name that resolution merged into it).
    Alias {
        /// The entity.
        entity: String,
        /// The other name.
        alias: String,
    },
    /// What one chunk said about `entity`. Each chunk's description is a fact of its own,
    /// so that the entity's description can be rebuilt from those that remain.
    Description {
        /// The entity.
        entity: String,
        /// The chunk that said it.
        chunk: ChunkRef,
    },
}

impl Fact {
    /// The entity fact of this name.
    pub fn entity(name: impl Into<String>) -> Self {
        Fact::Entity { name: name.into() }
    }

    /// The relationship fact `source` -`relationship_type`-> `target`.
    pub fn relationship(
        source: impl Into<String>,
        target: impl Into<String>,
        relationship_type: impl Into<String>,
    ) -> Self {
        Fact::Relationship {
            source: source.into(),
            target: target.into(),
            relationship_type: relationship_type.into(),
        }
    }

    /// The entities this fact refers to and cannot stand without (none for an entity).
    pub fn refers_to(&self) -> Vec<&str> {
        match self {
            Fact::Entity { .. } => Vec::new(),
            Fact::Relationship { source, target, .. } => vec![source, target],
            Fact::Alias { entity, .. } | Fact::Description { entity, .. } => vec![entity],
        }
    }
}

/// What to do to the graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Facts to remove, with all their supports.
    pub remove: Vec<Fact>,
    /// Supports to take from facts that stay.
    pub drop_supports: Vec<(Fact, Support)>,
    /// Supports to give (on a replace: the new version's), creating the facts that are not
    /// there yet. Always empty for a delete.
    pub add_supports: Vec<(Fact, Support)>,
}

impl Plan {
    /// A plan that changes nothing.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.drop_supports.is_empty() && self.add_supports.is_empty()
    }

    /// Keeps every fact of `named` that the plan would remove, taking only `source`'s
    /// supports from it (as read in `facts`): for a plan made before another writer's
    /// supports of those facts are recorded, but carried out after.
    pub fn keep(
        &mut self,
        facts: &[(Fact, Vec<Support>)],
        source: &SourceKey,
        named: &BTreeSet<Fact>,
    ) {
        let kept: BTreeSet<&Fact> = self.remove.iter().filter(|f| named.contains(*f)).collect();
        if kept.is_empty() {
            return;
        }
        let mut dropped: BTreeSet<(Fact, Support)> = self.drop_supports.iter().cloned().collect();
        for (fact, supports) in facts {
            if kept.contains(fact) {
                dropped.extend(
                    supports
                        .iter()
                        .filter(|s| s.is_from(source))
                        .map(|s| (fact.clone(), s.clone())),
                );
            }
        }
        self.remove.retain(|f| !named.contains(f));
        self.drop_supports = dropped.into_iter().collect();
    }
}

/// The plan for deleting `source`: [`plan_replace`] with an empty new version.
pub fn plan_delete(facts: &[(Fact, Vec<Support>)], source: &SourceKey) -> Plan {
    plan_replace(facts, source, &[])
}

/// The plan for replacing `source` with a new version of it (a re-ingest of a changed
/// document): `new_version` lists each fact the new version supports, with the indexes of
/// its chunks that do. Facts only the old version supported go (by the rules above); facts
/// the new version supports stay, and their supports from the source become exactly the new
/// version's.
///
/// `facts` may list a fact more than once; its supports are merged. The plan's lists are
/// sorted, so equal inputs give equal plans.
pub fn plan_replace(
    facts: &[(Fact, Vec<Support>)],
    source: &SourceKey,
    new_version: &[(Fact, Vec<u32>)],
) -> Plan {
    let current = merge(
        facts
            .iter()
            .map(|(fact, supports)| (fact, supports.iter().cloned())),
    );
    let new = merge(new_version.iter().map(|(fact, chunks)| {
        (
            fact,
            chunks.iter().map(|&chunk| {
                Support::Chunk(ChunkRef {
                    source: source.clone(),
                    chunk,
                })
            }),
        )
    }));
    let no_support = BTreeSet::new();
    let remains = |fact: &Fact, supports: &BTreeSet<Support>| {
        supports.iter().any(|s| !s.is_from(source)) || new.get(fact).is_some_and(|n| !n.is_empty())
    };

    // Rule 1 for what is not an entity: nothing else decides whether it stays.
    let mut remove: BTreeSet<&Fact> = current
        .iter()
        .filter(|&(&fact, supports)| {
            !matches!(fact, Fact::Entity { .. })
                && supports.iter().any(|s| s.is_from(source))
                && !remains(fact, supports)
        })
        .map(|(&fact, _)| fact)
        .collect();
    // Rule 3: what stays keeps its entities.
    let kept_entities: BTreeSet<&str> = current
        .keys()
        .chain(new.keys())
        .copied()
        .filter(|fact| !remove.contains(fact))
        .flat_map(Fact::refers_to)
        .collect();
    // Rule 4: entities that only removed facts kept.
    let freed: BTreeSet<&str> = remove.iter().flat_map(|fact| fact.refers_to()).collect();
    for (&fact, supports) in &current {
        let Fact::Entity { name } = fact else {
            continue;
        };
        let lost_support = supports.iter().any(|s| s.is_from(source));
        let was_kept_by_others = supports.is_empty() && freed.contains(name.as_str());
        if (lost_support || was_kept_by_others)
            && !remains(fact, supports)
            && !kept_entities.contains(name.as_str())
        {
            remove.insert(fact);
        }
    }

    let mut drop_supports = Vec::new();
    for (&fact, supports) in &current {
        if remove.contains(fact) {
            continue;
        }
        let keep = new.get(fact).unwrap_or(&no_support);
        for support in supports
            .iter()
            .filter(|s| s.is_from(source) && !keep.contains(s))
        {
            drop_supports.push((fact.clone(), support.clone()));
        }
    }
    let mut add_supports = Vec::new();
    for (&fact, supports) in &new {
        let have = current.get(fact).unwrap_or(&no_support);
        for support in supports.difference(have) {
            add_supports.push((fact.clone(), support.clone()));
        }
    }
    Plan {
        remove: remove.into_iter().cloned().collect(),
        drop_supports,
        add_supports,
    }
}

/// The facts after a plan, with their supports, sorted: what a store holds once it has
/// carried the plan out.
pub fn apply(facts: &[(Fact, Vec<Support>)], plan: &Plan) -> Vec<(Fact, Vec<Support>)> {
    let mut after: BTreeMap<Fact, BTreeSet<Support>> = merge(
        facts
            .iter()
            .map(|(fact, supports)| (fact, supports.iter().cloned())),
    )
    .into_iter()
    .map(|(fact, supports)| (fact.clone(), supports))
    .collect();
    for fact in &plan.remove {
        after.remove(fact);
    }
    for (fact, support) in &plan.drop_supports {
        if let Some(supports) = after.get_mut(fact) {
            supports.remove(support);
        }
    }
    for (fact, support) in &plan.add_supports {
        after
            .entry(fact.clone())
            .or_default()
            .insert(support.clone());
    }
    after
        .into_iter()
        .map(|(fact, supports)| (fact, supports.into_iter().collect()))
        .collect()
}

fn merge<'a, S>(facts: impl Iterator<Item = (&'a Fact, S)>) -> BTreeMap<&'a Fact, BTreeSet<Support>>
where
    S: Iterator<Item = Support>,
{
    let mut merged: BTreeMap<&Fact, BTreeSet<Support>> = BTreeMap::new();
    for (fact, supports) in facts {
        merged.entry(fact).or_default().extend(supports);
    }
    merged
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn src(id: &str) -> SourceKey {
        SourceKey::new("docs", id)
    }

    fn chunk(id: &str, chunk: u32) -> Support {
        Support::Chunk(ChunkRef {
            source: src(id),
            chunk,
        })
    }

    fn entity(name: &str) -> Fact {
        Fact::entity(name)
    }

    fn rel(source: &str, target: &str) -> Fact {
        Fact::relationship(source, target, "related_to")
    }

    fn alias(entity: &str, alias: &str) -> Fact {
        Fact::Alias {
            entity: entity.into(),
            alias: alias.into(),
        }
    }

    fn description(entity: &str, id: &str, chunk: u32) -> Fact {
        Fact::Description {
            entity: entity.into(),
            chunk: ChunkRef {
                source: src(id),
                chunk,
            },
        }
    }

    fn facts_of(plan: &[Fact]) -> Vec<Fact> {
        let mut facts = plan.to_vec();
        facts.sort();
        facts
    }

    #[test]
    fn a_fact_kept_for_another_writer_loses_only_this_sources_supports() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0), chunk("a", 1)]),
            (rel("Ada", "Babbage"), vec![chunk("a", 0)]),
            (entity("Babbage"), vec![chunk("a", 0)]),
        ];
        let mut plan = plan_delete(&facts, &src("a"));
        assert_eq!(
            facts_of(&plan.remove),
            facts_of(&[entity("Ada"), entity("Babbage"), rel("Ada", "Babbage")])
        );
        let named: BTreeSet<Fact> = [rel("Ada", "Babbage"), entity("Babbage")].into();
        plan.keep(&facts, &src("a"), &named);
        assert_eq!(plan.remove, vec![entity("Ada")]);
        assert_eq!(
            plan.drop_supports,
            vec![
                (entity("Babbage"), chunk("a", 0)),
                (rel("Ada", "Babbage"), chunk("a", 0)),
            ]
        );
        // Nothing named: the plan is unchanged.
        let before = plan.clone();
        plan.keep(&facts, &src("a"), &BTreeSet::new());
        assert_eq!(plan, before);
    }

    #[test]
    fn a_fact_only_the_source_supports_is_removed() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (entity("Babbage"), vec![chunk("a", 0), chunk("b", 3)]),
            (entity("Engine"), vec![chunk("a", 1), Support::Import]),
            (entity("Other"), vec![chunk("b", 0)]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert_eq!(plan.remove, [entity("Ada")]);
        assert_eq!(
            plan.drop_supports,
            [
                (entity("Babbage"), chunk("a", 0)),
                (entity("Engine"), chunk("a", 1)),
            ]
        );
        assert!(plan.add_supports.is_empty());
        assert_eq!(
            apply(&facts, &plan),
            [
                (entity("Babbage"), vec![chunk("b", 3)]),
                (entity("Engine"), vec![Support::Import]),
                (entity("Other"), vec![chunk("b", 0)]),
            ]
        );
    }

    #[test]
    fn a_relationship_that_stays_keeps_its_ends() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (entity("Babbage"), vec![chunk("a", 0)]),
            (entity("Menabrea"), vec![chunk("a", 2)]),
            (rel("Ada", "Babbage"), vec![chunk("a", 0), chunk("b", 1)]),
            (rel("Menabrea", "Babbage"), vec![chunk("a", 2)]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert_eq!(
            facts_of(&plan.remove),
            [entity("Menabrea"), rel("Menabrea", "Babbage")]
        );
        let after = apply(&facts, &plan);
        assert_eq!(
            after,
            [
                (entity("Ada"), vec![]),
                (entity("Babbage"), vec![]),
                (rel("Ada", "Babbage"), vec![chunk("b", 1)]),
            ]
        );
        // Once the relationship goes, so do the entities it alone kept (rule 4).
        let plan = plan_delete(&after, &src("b"));
        assert_eq!(
            facts_of(&plan.remove),
            [entity("Ada"), entity("Babbage"), rel("Ada", "Babbage")]
        );
        assert!(apply(&after, &plan).is_empty());
    }

    #[test]
    fn an_import_is_never_retracted_and_keeps_what_it_refers_to() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (entity("Babbage"), vec![chunk("a", 0)]),
            (rel("Ada", "Babbage"), vec![chunk("a", 0), Support::Import]),
            (alias("Ada", "Countess of Lovelace"), vec![Support::Import]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert!(plan.remove.is_empty());
        assert_eq!(plan.drop_supports.len(), 3);
        let after = apply(&facts, &plan);
        assert!(after.iter().all(|(f, _)| facts.iter().any(|(g, _)| f == g)));
        assert_eq!(after.len(), 4);
    }

    #[test]
    fn aliases_and_descriptions_go_with_their_support_and_their_entity() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0), chunk("b", 0)]),
            (alias("Ada", "Lady Lovelace"), vec![chunk("a", 0)]),
            (alias("Ada", "Augusta Ada King"), vec![chunk("b", 0)]),
            (description("Ada", "a", 0), vec![chunk("a", 0)]),
            (description("Ada", "b", 0), vec![chunk("b", 0)]),
            (entity("Byron"), vec![chunk("a", 4)]),
            (alias("Byron", "Lord Byron"), vec![chunk("a", 4)]),
            (description("Byron", "a", 4), vec![chunk("a", 4)]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert_eq!(
            facts_of(&plan.remove),
            [
                entity("Byron"),
                alias("Ada", "Lady Lovelace"),
                alias("Byron", "Lord Byron"),
                description("Ada", "a", 0),
                description("Byron", "a", 4),
            ]
        );
        assert_eq!(plan.drop_supports, [(entity("Ada"), chunk("a", 0))]);
    }

    #[test]
    fn another_sources_alias_keeps_the_entity() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (alias("Ada", "Lady Lovelace"), vec![chunk("b", 2)]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert!(plan.remove.is_empty());
        assert_eq!(plan.drop_supports, [(entity("Ada"), chunk("a", 0))]);
    }

    #[test]
    fn untouched_facts_without_supports_are_left_alone() {
        let facts = vec![
            (entity("Legacy"), vec![]),
            (rel("Legacy", "Old"), vec![]),
            (entity("Old"), vec![]),
            (entity("Ada"), vec![chunk("a", 0)]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert_eq!(plan.remove, [entity("Ada")]);
        assert!(plan.drop_supports.is_empty());
    }

    #[test]
    fn deleting_an_unknown_source_changes_nothing() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (rel("Ada", "Ada"), vec![chunk("a", 0)]),
        ];
        assert!(plan_delete(&facts, &src("zzz")).is_empty());
        assert!(plan_delete(&[], &src("a")).is_empty());
    }

    #[test]
    fn repeated_facts_merge_their_supports() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (entity("Ada"), vec![chunk("b", 0)]),
        ];
        let plan = plan_delete(&facts, &src("a"));
        assert!(plan.remove.is_empty());
        assert_eq!(plan.drop_supports, [(entity("Ada"), chunk("a", 0))]);
    }

    #[test]
    fn replace_keeps_what_the_new_version_still_says() {
        let facts = vec![
            (entity("Ada"), vec![chunk("a", 0)]),
            (entity("Babbage"), vec![chunk("a", 0), chunk("a", 1)]),
            (entity("Menabrea"), vec![chunk("a", 1)]),
            (rel("Ada", "Babbage"), vec![chunk("a", 0)]),
            (rel("Menabrea", "Babbage"), vec![chunk("a", 1)]),
            (description("Babbage", "a", 1), vec![chunk("a", 1)]),
        ];
        // The new version dropped Menabrea, and its chunks moved.
        let new_version = vec![
            (entity("Ada"), vec![0]),
            (entity("Babbage"), vec![0, 2]),
            (entity("Turing"), vec![2]),
            (rel("Ada", "Babbage"), vec![0]),
            (rel("Turing", "Babbage"), vec![2]),
            (description("Babbage", "a", 2), vec![2]),
        ];
        let plan = plan_replace(&facts, &src("a"), &new_version);
        assert_eq!(
            facts_of(&plan.remove),
            [
                entity("Menabrea"),
                rel("Menabrea", "Babbage"),
                description("Babbage", "a", 1)
            ]
        );
        assert_eq!(plan.drop_supports, [(entity("Babbage"), chunk("a", 1))]);
        assert_eq!(
            plan.add_supports,
            [
                (entity("Babbage"), chunk("a", 2)),
                (entity("Turing"), chunk("a", 2)),
                (rel("Turing", "Babbage"), chunk("a", 2)),
                (description("Babbage", "a", 2), chunk("a", 2)),
            ]
        );
        let after = apply(&facts, &plan);
        assert!(
            plan_replace(&after, &src("a"), &new_version).is_empty(),
            "idempotent"
        );
        assert_eq!(
            apply(&after, &plan_delete(&after, &src("a"))),
            [],
            "the new version alone is then deletable"
        );
    }

    #[test]
    fn plans_serialize() {
        let plan = plan_delete(&[(entity("Ada"), vec![chunk("a", 0)])], &src("a"));
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(
            json["remove"][0],
            serde_json::json!({"kind": "entity", "name": "Ada"})
        );
        assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), plan);
    }

    // Generated graphs: a few entities, relationships, aliases and descriptions among them,
    // each with one or more supports from three sources and imports.

    const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];
    const SOURCES: [&str; 3] = ["s1", "s2", "s3"];

    fn support() -> impl Strategy<Value = Support> {
        prop_oneof![
            6 => (0..SOURCES.len(), 0u32..3).prop_map(|(s, c)| chunk(SOURCES[s], c)),
            1 => Just(Support::Import),
        ]
    }

    fn fact() -> impl Strategy<Value = Fact> {
        let name = (0..NAMES.len()).prop_map(|i| NAMES[i].to_owned());
        prop_oneof![
            3 => name.clone().prop_map(|n| entity(&n)),
            3 => (name.clone(), name.clone(), 0..2usize)
                .prop_map(|(s, t, k)| Fact::relationship(s, t, ["r", "q"][k])),
            1 => (name.clone(), 0..2usize).prop_map(|(e, a)| alias(&e, ["x", "y"][a])),
            1 => (name, 0..SOURCES.len(), 0u32..3)
                .prop_map(|(e, s, c)| description(&e, SOURCES[s], c)),
        ]
    }

    fn graph() -> impl Strategy<Value = Vec<(Fact, Vec<Support>)>> {
        prop::collection::vec((fact(), prop::collection::vec(support(), 1..4)), 0..24)
    }

    /// The facts that a plan removed are gone, and what is left obeys the rules.
    fn check_delete(
        facts: &[(Fact, Vec<Support>)],
        source: &SourceKey,
    ) -> Result<(), TestCaseError> {
        let plan = plan_delete(facts, source);
        prop_assert!(plan.add_supports.is_empty());
        let after = apply(facts, &plan);
        let referenced: BTreeSet<&str> = after.iter().flat_map(|(f, _)| f.refers_to()).collect();
        for (fact, supports) in &after {
            prop_assert!(
                supports.iter().all(|s| !s.is_from(source)),
                "{fact:?} keeps a support of the source"
            );
            let kept_by_reference =
                matches!(fact, Fact::Entity { name } if referenced.contains(name.as_str()));
            prop_assert!(
                !supports.is_empty() || kept_by_reference,
                "{fact:?} stays unsupported"
            );
        }
        let before: BTreeSet<&str> = facts
            .iter()
            .filter_map(|(f, _)| match f {
                Fact::Entity { name } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let now: BTreeSet<&str> = after
            .iter()
            .filter_map(|(f, _)| match f {
                Fact::Entity { name } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        for name in referenced {
            prop_assert!(
                !before.contains(name) || now.contains(name),
                "{name} lost while referred to"
            );
        }
        for removed in &plan.remove {
            let supported_elsewhere = facts
                .iter()
                .filter(|(f, _)| f == removed)
                .flat_map(|(_, s)| s)
                .any(|s| !s.is_from(source));
            prop_assert!(
                !supported_elsewhere,
                "{removed:?} removed though supported elsewhere"
            );
        }
        prop_assert!(
            plan_delete(&after, source).is_empty(),
            "a second delete does nothing"
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn deletes_follow_the_rules(facts in graph(), s in 0..SOURCES.len()) {
            check_delete(&facts, &src(SOURCES[s]))?;
        }

        #[test]
        fn deleting_every_source_leaves_only_what_imports_hold(facts in graph()) {
            let mut current = facts.clone();
            for s in SOURCES {
                check_delete(&current, &src(s))?;
                current = apply(&current, &plan_delete(&current, &src(s)));
            }
            let referenced: BTreeSet<String> = current
                .iter()
                .flat_map(|(f, _)| f.refers_to().into_iter().map(str::to_owned))
                .collect();
            for (fact, supports) in &current {
                let imported = supports.contains(&Support::Import);
                let kept = matches!(fact, Fact::Entity { name } if referenced.contains(name));
                prop_assert!(imported || kept, "{fact:?} outlived every source");
            }
        }

        #[test]
        fn replaces_leave_exactly_the_new_versions_supports(
            facts in graph(),
            new_facts in prop::collection::vec((fact(), prop::collection::vec(0u32..3, 1..3)), 0..10),
            s in 0..SOURCES.len(),
        ) {
            let source = src(SOURCES[s]);
            let plan = plan_replace(&facts, &source, &new_facts);
            let after = apply(&facts, &plan);
            let mut expected: BTreeMap<&Fact, BTreeSet<Support>> = BTreeMap::new();
            for (fact, chunks) in &new_facts {
                expected.entry(fact).or_default().extend(chunks.iter().map(|&c| chunk(SOURCES[s], c)));
            }
            let none = BTreeSet::new();
            for (fact, supports) in &after {
                let from_source: BTreeSet<Support> =
                    supports.iter().filter(|s| s.is_from(&source)).cloned().collect();
                prop_assert_eq!(&from_source, expected.get(fact).unwrap_or(&none), "{:?}", fact);
            }
            for fact in expected.keys() {
                prop_assert!(after.iter().any(|(f, _)| f == *fact), "{fact:?} of the new version is missing");
            }
            for removed in &plan.remove {
                let supported_elsewhere = facts
                    .iter()
                    .filter(|(f, _)| f == removed)
                    .flat_map(|(_, s)| s)
                    .any(|s| !s.is_from(&source));
                prop_assert!(!supported_elsewhere, "{removed:?} removed though supported elsewhere");
            }
            prop_assert!(plan_replace(&after, &source, &new_facts).is_empty(), "idempotent");
            prop_assert_eq!(plan_delete(&facts, &source), plan_replace(&facts, &source, &[]));
        }
    }
}
