//! KnowledgeGraphTool: an entity's relationships, by walking the graph.

use async_trait::async_trait;
use kbq_store::{Direction, TraversalQuery};
use serde_json::{Value, json};

use crate::tool::{Args, Tool, ToolContext, ToolError};

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
    async fn call(&self, ctx: &ToolContext, args: &Value) -> Result<Value, ToolError> {
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
            return Ok(
                json!({"entity": Value::Null, "found": false, "entities": [], "relationships": []}),
            );
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
        // Built as values, not through `json!`, which would serialize each field (and the
        // lists, a second time) into a copy.
        let entities: Vec<Value> = walk
            .entities
            .iter()
            .map(|r| {
                object([
                    ("name", Value::String(r.entity.name.clone())),
                    ("entity_type", Value::String(r.entity.entity_type.clone())),
                    ("depth", Value::from(r.depth)),
                    ("properties", Value::Object(r.entity.properties.clone())),
                ])
            })
            .collect();
        let relationships: Vec<Value> = walk
            .relationships
            .iter()
            .map(|r| {
                object([
                    ("source_name", Value::String(r.source_name.clone())),
                    ("target_name", Value::String(r.target_name.clone())),
                    (
                        "relationship_type",
                        Value::String(r.relationship_type.clone()),
                    ),
                ])
            })
            .collect();
        Ok(object([
            ("entity", Value::String(name)),
            ("found", Value::Bool(true)),
            ("entities", Value::Array(entities)),
            ("relationships", Value::Array(relationships)),
            ("truncated", Value::Bool(walk.truncated)),
        ]))
    }
}

/// A JSON object of `fields`.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}
