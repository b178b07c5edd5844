//! The crate's parts in the order the ingestion pipeline calls them, through the public API
//! only: upload -> format -> parse -> chunk -> prompt -> (a canned model answer) -> validate
//! -> resolve -> provenance.

use kbq_ingest::extraction::{self, UNKNOWN_TYPE};
use kbq_ingest::{
    ChunkConfig, ChunkRef, Decision, Fact, Format, ResolveConfig, SourceKey, Support, apply, chunk,
    compare, detect, name_key, parse, plan_delete, plan_replace,
};

const DOC: &str = "\
---
title: Early Computing
---

# Pioneers

Alan Turing worked at Bletchley Park during the war. He later designed the ACE.

## Church

Alonzo Church supervised Turing at Princeton.
";

#[test]
fn a_markdown_upload_becomes_supported_facts() {
    let format = detect(Some("application/octet-stream"), Some("notes/early.md")).unwrap();
    assert_eq!(format, Format::Markdown);
    let parsed = parse(DOC.as_bytes(), format).unwrap();
    assert_eq!(parsed.title.as_deref(), Some("Early Computing"));

    let chunks = chunk(&parsed, &ChunkConfig::default());
    assert_eq!(chunks.len(), 2, "one per section");
    assert_eq!(chunks[1].heading_path, ["Pioneers", "Church"]);
    for c in &chunks {
        assert_eq!(c.text, parsed.text[c.start..c.end]);
    }

    let source = SourceKey::new("uploads", "early.md");
    let mut facts: Vec<(Fact, Vec<Support>)> = Vec::new();
    for c in &chunks {
        let types = ["person".to_owned(), "place".to_owned()];
        let (system, user) =
            extraction::messages(&c.text, &c.heading_path, parsed.title.as_deref(), &types);
        assert!(system.contains("person, place"));
        assert!(user.ends_with(&c.text));

        // What a model might answer for this chunk.
        let answer = if c.index == 0 {
            r#"{"entities": [{"name": "Alan Turing", "type": "person", "description": "Worked at Bletchley Park."},
                              {"name": "Bletchley Park", "type": "place", "description": ""}],
                "relationships": [{"source": "Alan Turing", "target": "Bletchley Park", "type": "worked_at", "description": ""},
                                  {"source": "Alan Turing", "target": "ACE", "type": "designed", "description": ""}]}"#
        } else {
            "```json\n{\"entities\": [{\"name\": \"Alonzo Church\", \"type\": \"person\", \"description\": \"\"}, {\"name\": \"Turing\", \"type\": \"person\", \"description\": \"\"}],\n \"relationships\": [{\"source\": \"Alonzo Church\", \"target\": \"Turing\", \"type\": \"supervised\", \"description\": \"\"}]}\n```"
        };
        let found = extraction::validate(answer).unwrap();
        let entities = found.entities_with_relationship_ends();
        let support = Support::Chunk(ChunkRef {
            source: source.clone(),
            chunk: c.index,
        });
        for entity in &entities {
            // "Turing" is doubtful against "Alan Turing": the pipeline would ask before
            // merging; here it stays a name of its own.
            let known = facts.iter().find_map(|(f, _)| match f {
                Fact::Entity { name } => {
                    (compare(name, &entity.name, None, &ResolveConfig::default()) == Decision::Same)
                        .then(|| name.clone())
                }
                _ => None,
            });
            let name = known.unwrap_or_else(|| entity.name.clone());
            facts.push((Fact::entity(name), vec![support.clone()]));
        }
        for r in &found.relationships {
            facts.push((
                Fact::relationship(&r.source, &r.target, &r.relationship_type),
                vec![support.clone()],
            ));
        }
        if c.index == 0 {
            assert!(
                entities
                    .iter()
                    .any(|e| e.name == "ACE" && e.entity_type == UNKNOWN_TYPE)
            );
        }
    }
    assert_eq!(
        compare("Turing", "Alan Turing", None, &ResolveConfig::default()),
        Decision::Doubtful
    );
    assert_eq!(name_key("ALAN  turing"), name_key("Alan Turing"));

    // An import states one of the relationships too; deleting the upload keeps it and its ends.
    facts.push((
        Fact::relationship("Alonzo Church", "Turing", "supervised"),
        vec![Support::Import],
    ));
    let plan = plan_delete(&facts, &source);
    let after = apply(&facts, &plan);
    let names: Vec<&Fact> = after.iter().map(|(f, _)| f).collect();
    assert_eq!(
        names,
        [
            &Fact::entity("Alonzo Church"),
            &Fact::entity("Turing"),
            &Fact::relationship("Alonzo Church", "Turing", "supervised"),
        ]
    );

    // Re-ingesting the same version changes nothing.
    let new_version: Vec<(Fact, Vec<u32>)> = facts
        .iter()
        .filter_map(|(f, s)| match s.first() {
            Some(Support::Chunk(c)) => Some((f.clone(), vec![c.chunk])),
            _ => None,
        })
        .collect();
    assert!(plan_replace(&facts, &source, &new_version).is_empty());
}
