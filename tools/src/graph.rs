//! KnowledgeGraphTool: an entity's relationships, by walking the graph.

use std::fmt::Write;

use async_trait::async_trait;
use kbq_store::json::{write_map, write_str};
use kbq_store::{Direction, Traversal, TraversalQuery};
use serde_json::{Value, json};

use crate::tool::{Args, Tool, ToolContext, ToolError, ToolResult};

pub struct KnowledgeGraphTool;

#[async_trait]
impl Tool for KnowledgeGraphTool {
    fn name(&self) -> &'static str {
        "KnowledgeGraphTool"
    }
    fn output_schema(&self) -> Value {
        crate::outputs::knowledge_graph()
    }
    fn description(&self) -> &'static str {
        "Entity relationship queries in the graph store: the entities connected to a named entity and how they are related."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "entity": {"type": "string", "description": "Entity name (exact, or the best case-insensitive match)", "maxLength": 512},
                "depth": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1, "description": "Hops to walk"},
                "relationship_types": {"type": "array", "items": {"type": "string"}, "maxItems": 16, "description": "Follow only these relationship types"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 25, "description": "Most entities to return"}
            },
            "required": ["entity"],
            "additionalProperties": false
        })
    }
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<ToolResult, ToolError> {
        let args = Args::new(args, &["entity", "depth", "relationship_types", "limit"])?;
        let asked = args.string("entity", 512)?;
        let depth = args.int("depth", 1, 1, 3)? as u32;
        let relationship_types = args.strings("relationship_types", 16)?;
        let limit = args.int("limit", 25, 1, 100)? as usize;
        // Models rarely spell names exactly: fall back to the best search hit.
        let name = match ctx.kb.entity(&asked).await? {
            Some(e) => Some(e.name.clone()),
            None => ctx
                .kb
                .search_entities(&asked, None, 1)
                .await?
                .first()
                .map(|e| e.name.clone()),
        };
        let Some(name) = name else {
            return Ok(ToolResult::from_value(
                &json!({"entity": Value::Null, "found": false, "entities": [], "relationships": []}),
            ));
        };
        let walk = ctx
            .kb
            .traverse(&TraversalQuery {
                start: name.clone(),
                relationship_types,
                direction: Direction::Both,
                depth,
                limit,
            })
            .await?;
        Ok(ToolResult::from_json(walk_json(&name, &walk)))
    }
}

/// The result of a walk from `name`, written as `serde_json` writes the object
/// `{"entity", "found": true, "entities": [{"name", "entity_type", "depth", "properties"}],
/// "relationships": [{"source_name", "target_name", "relationship_type"}], "truncated"}`:
/// keys in order, without building the values (the entities' strings and property maps
/// would each be copied into them, and dropped again).
fn walk_json(name: &str, walk: &Traversal) -> String {
    let mut out = String::with_capacity(256 + 160 * walk.entities.len());
    out.push_str("{\"entities\":[");
    for (i, r) in walk.entities.iter().enumerate() {
        out.push_str(if i > 0 { ",{\"depth\":" } else { "{\"depth\":" });
        let _ = write!(out, "{}", r.depth);
        out.push_str(",\"entity_type\":");
        write_str(&mut out, &r.entity.entity_type);
        out.push_str(",\"name\":");
        write_str(&mut out, &r.entity.name);
        out.push_str(",\"properties\":");
        write_map(&mut out, &r.entity.properties);
        out.push('}');
    }
    out.push_str("],\"entity\":");
    write_str(&mut out, name);
    out.push_str(",\"found\":true,\"relationships\":[");
    for (i, r) in walk.relationships.iter().enumerate() {
        out.push_str(if i > 0 {
            ",{\"relationship_type\":"
        } else {
            "{\"relationship_type\":"
        });
        write_str(&mut out, &r.relationship_type);
        out.push_str(",\"source_name\":");
        write_str(&mut out, &r.source_name);
        out.push_str(",\"target_name\":");
        write_str(&mut out, &r.target_name);
        out.push('}');
    }
    out.push_str(if walk.truncated {
        "],\"truncated\":true}"
    } else {
        "],\"truncated\":false}"
    });
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kbq_store::{Entity, Reached, Relationship};

    use super::*;

    /// The result as it was built before it was written as text: values, then `serde_json`.
    fn as_values(name: &str, walk: &Traversal) -> Value {
        json!({
            "entity": name,
            "found": true,
            "entities": walk.entities.iter().map(|r| json!({
                "name": r.entity.name,
                "entity_type": r.entity.entity_type,
                "depth": r.depth,
                "properties": r.entity.properties,
            })).collect::<Vec<_>>(),
            "relationships": walk.relationships.iter().map(|r| json!({
                "source_name": r.source_name,
                "target_name": r.target_name,
                "relationship_type": r.relationship_type,
            })).collect::<Vec<_>>(),
            "truncated": walk.truncated,
        })
    }

    /// The written result is `serde_json`'s bytes for the values it replaced: empty and
    /// full walks, names that need escapes, nested and odd properties, depths past 9.
    #[test]
    fn a_walk_is_written_as_serde_json_writes_its_values() {
        let entity = |name: &str, kind: &str, properties: Value| {
            Arc::new(Entity {
                id: format!("entity:{name}"),
                name: name.into(),
                entity_type: kind.into(),
                properties: properties.as_object().cloned().unwrap_or_default(),
            })
        };
        let rel = |s: &str, t: &str, ty: &str| {
            Arc::new(Relationship {
                source_name: s.into(),
                target_name: t.into(),
                relationship_type: ty.into(),
                properties: Default::default(),
            })
        };
        let names = [
            "Ada",
            "O'Brien \"Jr\"",
            "tab\there\\",
            "é 😀 \u{1}",
            "a.b.c",
            "",
        ];
        let mut walks = vec![Traversal {
            entities: Vec::new(),
            relationships: Vec::new(),
            truncated: false,
        }];
        let entities: Vec<Reached> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Reached {
                entity: entity(
                    n,
                    if i % 2 == 0 { "person" } else { "place \"x\"" },
                    json!({"z": [1, 2.5, null], "a": {"n": "\n", "b": true}, "k": i, "f": 1e300, "w": f64::from(0.381_003_4_f32) * i as f64}),
                ),
                depth: [0, 1, 2, 3, 10, 123][i],
                via: None,
            })
            .collect();
        walks.push(Traversal {
            entities,
            relationships: vec![
                rel("Ada", "O'Brien \"Jr\"", "knows"),
                rel("é 😀 \u{1}", "Ada", "works_at"),
                rel("", "", ""),
            ],
            truncated: true,
        });
        for walk in &walks {
            for name in names {
                let text = walk_json(name, walk);
                assert_eq!(text, serde_json::to_string(&as_values(name, walk)).unwrap());
                assert_eq!(ToolResult::from_json(text).value(), as_values(name, walk));
            }
        }
    }
}
