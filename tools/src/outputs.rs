//! The JSON Schema of each tool's result, for hosts that check results (MCP's
//! `outputSchema`). Each states the fields every successful result has; a failed call's
//! result is `{error, error_type}` instead (see [`ToolError`](crate::ToolError)), which MCP
//! sends as an error result's text, with no structured content to check.

use serde_json::{Value, json};

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// A document hit of the search tools.
fn hit() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "title": {"type": "string"},
            "snippet": {"type": "string"},
            "source": {"type": "string"},
            "entity_name": {"type": ["string", "null"]},
            "score": {"type": "number"},
            "sources": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["id", "title", "snippet", "source", "score"]
    })
}

pub fn semantic_search() -> Value {
    object(
        json!({"query": {"type": "string"}, "total": {"type": "integer"}, "results": {"type": "array", "items": hit()}}),
        &["query", "total", "results"],
    )
}

pub fn hybrid_search() -> Value {
    object(
        json!({
            "query": {"type": "string"},
            "entities": {"type": "array", "items": {"type": "string"}},
            "total": {"type": "integer"},
            "results": {"type": "array", "items": hit()}
        }),
        &["query", "entities", "total", "results"],
    )
}

pub fn knowledge_graph() -> Value {
    object(
        json!({
            "entity": {"type": ["string", "null"]},
            "found": {"type": "boolean"},
            "entities": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "entity_type": {"type": "string"},
                "depth": {"type": "integer"}, "properties": {"type": "object"}
            }, "required": ["name", "entity_type", "depth", "properties"]}},
            "relationships": {"type": "array", "items": {"type": "object", "properties": {
                "source_name": {"type": "string"}, "target_name": {"type": "string"},
                "relationship_type": {"type": "string"}
            }, "required": ["source_name", "target_name", "relationship_type"]}},
            "truncated": {"type": "boolean"}
        }),
        &["entity", "found", "entities", "relationships"],
    )
}

pub fn memory_search() -> Value {
    object(
        json!({
            "query": {"type": "string"},
            "total": {"type": "integer"},
            "memories_found": {"type": "integer"},
            "results": {"type": "array", "items": {"type": "object", "properties": {
                "kind": {"enum": ["memory", "document"]}, "id": {"type": "string"},
                "score": {"type": "number"}, "sources": {"type": "array", "items": {"type": "string"}}
            }, "required": ["kind", "id", "score"]}}
        }),
        &["query", "total", "memories_found", "results"],
    )
}

pub fn memory_store() -> Value {
    object(
        json!({
            "stored": {"type": "boolean"},
            "id": {"type": "string"},
            "content": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "entities": {"type": "array", "items": {"type": "string"}}
        }),
        &["stored", "id", "content", "tags", "entities"],
    )
}

pub fn memory_stats() -> Value {
    object(
        json!({
            "healthy": {"type": "boolean"},
            "memories": {"type": "integer"},
            "oldest": {"type": ["integer", "null"], "description": "When the oldest memory was stored, in milliseconds since 1970"},
            "newest": {"type": ["integer", "null"], "description": "When the newest memory was stored, in milliseconds since 1970"},
            "knowledge_base": {"type": "object", "properties": {
                "entities": {"type": "integer"}, "relationships": {"type": "integer"}, "documents": {"type": "integer"}
            }, "required": ["entities", "relationships", "documents"]}
        }),
        &["healthy", "memories", "knowledge_base"],
    )
}
