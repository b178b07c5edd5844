//! KnowledgeGraphTool: an entity's relationships, by walking the graph.

use std::fmt::Write;

use async_trait::async_trait;
use kbq_store::json::{write_map, write_str};
use kbq_store::{Direction, Traversal, TraversalJson, TraversalQuery};
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
        let query = TraversalQuery {
            start: name.clone(),
            relationship_types,
            direction: Direction::Both,
            depth,
            limit,
        };
        // From the JSON the graph index keeps for each entity and relationship: one run of
        // bytes each, where the walk's records are four to six allocations of their own.
        let walk = ctx.kb.traverse_json(&query).await?;
        if let Some(json) = from_traversal_json(&name, &walk) {
            return Ok(ToolResult::from_json(json));
        }
        // Not written by serde_json as an entity or a relationship (never, while the models
        // are what they are): from the walk's records.
        let walk = ctx.kb.traverse(&query).await?;
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

/// [`walk_json`]'s text for the same walk, from its JSON (the objects `serde_json` writes for
/// each [`Entity`](kbq_store::Entity) with its depth, and each
/// [`Relationship`](kbq_store::Relationship)): each field's value is copied as written there.
/// `None` when an object lacks a field the result needs.
fn from_traversal_json(name: &str, walk: &TraversalJson) -> Option<String> {
    let mut out =
        String::with_capacity(walk.entities.len() + walk.relationships.len() + name.len() + 100);
    out.push_str("{\"entities\":[");
    let entities = Objects::new(
        &walk.entities,
        ["depth", "entity_type", "name", "properties"],
    );
    for (i, entity) in entities.enumerate() {
        let [depth, entity_type, name, properties] = entity?;
        out.push_str(if i > 0 { ",{\"depth\":" } else { "{\"depth\":" });
        out.push_str(depth);
        out.push_str(",\"entity_type\":");
        out.push_str(entity_type);
        out.push_str(",\"name\":");
        out.push_str(name);
        out.push_str(",\"properties\":");
        out.push_str(properties);
        out.push('}');
    }
    out.push_str("],\"entity\":");
    write_str(&mut out, name);
    out.push_str(",\"found\":true,\"relationships\":[");
    let relationships = Objects::new(
        &walk.relationships,
        ["relationship_type", "source_name", "target_name"],
    );
    for (i, rel) in relationships.enumerate() {
        let [ty, source, target] = rel?;
        out.push_str(if i > 0 {
            ",{\"relationship_type\":"
        } else {
            "{\"relationship_type\":"
        });
        out.push_str(ty);
        out.push_str(",\"source_name\":");
        out.push_str(source);
        out.push_str(",\"target_name\":");
        out.push_str(target);
        out.push('}');
    }
    out.push_str(if walk.truncated {
        "],\"truncated\":true}"
    } else {
        "],\"truncated\":false}"
    });
    Some(out)
}

/// The fields `names` of each object of a comma-separated run of compact JSON objects, as
/// `serde_json` writes them, each value as written there; `None` for an object that is not
/// well formed or lacks one of them, and then the end. Each byte is read once. (The text is
/// sliced only at ASCII bytes, so at its own character bounds.)
struct Objects<'a, const N: usize> {
    rest: &'a str,
    names: [&'static str; N],
}

impl<'a, const N: usize> Objects<'a, N> {
    fn new(run: &'a str, names: [&'static str; N]) -> Self {
        Objects { rest: run, names }
    }
}

impl<'a, const N: usize> Iterator for Objects<'a, N> {
    type Item = Option<[&'a str; N]>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let Some((values, end)) = fields(self.rest, self.names) else {
            self.rest = "";
            return Some(None);
        };
        let rest = &self.rest[end..];
        self.rest = rest.strip_prefix(',').unwrap_or(rest);
        Some(Some(values))
    }
}

/// The values of the fields `names` of the compact JSON object at the start of `text`, each
/// as written there, and the object's length; `None` when one is missing or the object is not
/// well formed.
fn fields<'a, const N: usize>(text: &'a str, names: [&str; N]) -> Option<([&'a str; N], usize)> {
    let mut found: [Option<&'a str>; N] = [None; N];
    let mut rest = text.strip_prefix('{')?;
    while let Some(after_quote) = rest.strip_prefix('"') {
        // Keys here are field names: no escapes.
        let close = after_quote.find(['"', '\\'])?;
        let (key, after_key) = after_quote.split_at(close);
        let value = after_key.strip_prefix("\":")?;
        let end = value_end(value.as_bytes())?;
        if let Some(i) = names.iter().position(|&n| n == key) {
            found[i] = Some(&value[..end]);
        }
        rest = &value[end..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    let after = rest.strip_prefix('}')?;
    let mut out = [""; N];
    for (o, f) in out.iter_mut().zip(found) {
        *o = f?;
    }
    Some((out, text.len() - after.len()))
}

/// The length of the compact JSON value at the start of `json`: a string (to its closing
/// quote), an object or an array (to its closing bracket, brackets inside strings not
/// counted), else a number or a literal (to the next `,`, `}` or `]`). `None` when it does not
/// end.
fn value_end(json: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                i = string_end(json, i + 1)?;
                if depth == 0 {
                    return Some(i);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b',' | b'}' | b']' if depth == 0 => return (i > 0).then_some(i),
            _ => {}
        }
        i += 1;
    }
    (depth == 0 && !json.is_empty() && !matches!(json[0], b'"' | b'{' | b'[')).then_some(json.len())
}

/// Where the JSON string whose text starts at `from` (after its opening quote) ends: just
/// after its closing quote, skipping escaped characters; `None` when it does not end. Its
/// bytes are skipped in a loop of their own, without the value's state.
fn string_end(json: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let at = from
            + json
                .get(from..)?
                .iter()
                .position(|&b| b == b'"' || b == b'\\')?;
        if json[at] == b'"' {
            return Some(at + 1);
        }
        from = at + 2;
    }
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
                let json = TraversalJson::of(walk);
                assert_eq!(from_traversal_json(name, &json).as_deref(), Some(&*text));
                assert_eq!(ToolResult::from_json(text).value(), as_values(name, walk));
            }
        }
    }

    /// What the tool writes from the graph index's JSON is what it wrote from the walk's
    /// records, byte for byte: every entity of a graph with hubs, names with dots, quotes,
    /// backslashes and other scripts, and nested properties, at depths 1 to 3, with limits
    /// and type filters; and with the graph index off (SurrealDB's walk).
    #[tokio::test]
    async fn the_walk_is_written_from_the_index_json_as_from_its_records() {
        use kbq_store::generate::Rng;
        use kbq_store::import::{Silent, import};
        use kbq_store::{HashingEmbedder, KnowledgeBase, StoreConfig};

        let names: Vec<String> = (0..60)
            .map(|i| match i % 6 {
                0 => format!("Node {i}"),
                1 => format!("a.b.{i}"),
                2 => format!("O'Brien \"{i}\" \\ x"),
                3 => format!("é 😀 {i}"),
                4 => format!("{{[{i}]}},"),
                _ => format!("{i}"),
            })
            .collect();
        let mut ndjson = String::new();
        let kinds = ["person", "place \"x\""];
        for (i, n) in names.iter().enumerate() {
            let properties = json!({
                "rank": i, "w": f64::from(0.381_003_4_f32) * i as f64,
                "nested": {"s": "\"}{,\\", "list": [1, {"a": null}, "]"]}, "": true,
            });
            let line = json!({"kind": "entity", "name": n, "entity_type": kinds[i % 2], "properties": properties});
            ndjson.push_str(&format!("{line}\n"));
        }
        let mut rng = Rng::new(11);
        for _ in 0..240 {
            // Node 0 and a.b.1 are hubs.
            let source = match rng.below(4) {
                0 => 0,
                1 => 1,
                _ => rng.below(names.len()),
            };
            let target = rng.below(names.len());
            let ty = ["knows", "works_at", "part \"of\""][rng.below(3)];
            let line = json!({"kind": "relationship", "source_name": names[source], "target_name": names[target], "relationship_type": ty, "properties": {"since": 1}});
            ndjson.push_str(&format!("{line}\n"));
        }
        for graph_index in [true, false] {
            let mut config = StoreConfig::memory();
            config.graph_index = graph_index;
            let kb = KnowledgeBase::open(config, Arc::new(HashingEmbedder::default())).await;
            import(&kb, ndjson.as_bytes(), &Silent).await.unwrap();
            let mut compared = 0;
            for name in &names {
                for depth in 1..=3 {
                    for (limit, types) in [
                        (25, None),
                        (1, None),
                        (100, None),
                        (5, Some(vec!["knows".to_string()])),
                    ] {
                        let query = TraversalQuery {
                            start: name.clone(),
                            relationship_types: types,
                            direction: Direction::Both,
                            depth,
                            limit,
                        };
                        let want = walk_json(name, &kb.traverse(&query).await.unwrap());
                        let json = kb.traverse_json(&query).await.unwrap();
                        assert_eq!(from_traversal_json(name, &json).as_deref(), Some(&*want));
                        compared += 1;
                    }
                }
            }
            assert_eq!(compared, names.len() * 12);
        }
    }

    /// A value's end is where `serde_json` finds it: strings with escapes and brackets in
    /// them, nested objects and arrays, numbers and literals before a comma or a bracket;
    /// none for text that does not end.
    #[test]
    fn a_value_ends_where_serde_json_ends_it() {
        for value in [
            r#""""#,
            r#""a""#,
            r#""a\"b\\""#,
            r#""}],{\u0022""#,
            r#"{"a":{"b":["}",1,{"c":"]"}]},"d":"\\"}"#,
            r#"[[],[{}],"[",-1.5e3]"#,
            "12",
            "-0.5",
            "true",
            "null",
        ] {
            assert!(serde_json::from_str::<Value>(value).is_ok(), "{value}");
            for after in ["", ",\"x\":1", "}", "]"] {
                let text = format!("{value}{after}");
                assert_eq!(value_end(text.as_bytes()), Some(value.len()), "{text}");
            }
        }
        for unended in [
            r#"""#,
            r#""a"#,
            r#""a\"#,
            r#""a\""#,
            "{",
            r#"{"a":"}"#,
            "[1,[2]",
        ] {
            assert_eq!(value_end(unended.as_bytes()), None, "{unended}");
        }
    }

    /// Text that is not objects of the fields the result needs is left to the walk's records.
    #[test]
    fn json_without_the_fields_is_not_read() {
        let entities = |entities: &str| TraversalJson {
            entities: entities.into(),
            ..TraversalJson::default()
        };
        for bad in [
            "{\"name\":\"a\",\"entity_type\":\"t\",\"properties\":{}}",
            "{\"name\":\"a\",\"entity_type\":\"t\",\"properties\":{},\"depth\":1",
            "[1]",
            "{\"name\":\"a\\\"\",\"entity_type\":\"t\",\"properties\":{\"x\":\"}\"},\"depth\":1},7",
            "{\"na\\u006de\":\"a\",\"entity_type\":\"t\",\"properties\":{},\"depth\":1}",
        ] {
            assert_eq!(from_traversal_json("a", &entities(bad)), None, "{bad}");
        }
        let good = "{\"id\":\"entity:a\",\"name\":\"a\\\"\",\"entity_type\":\"t\",\"properties\":{\"x\":\"}\"},\"depth\":1}";
        let text = from_traversal_json("a", &entities(good)).unwrap();
        assert_eq!(
            text,
            "{\"entities\":[{\"depth\":1,\"entity_type\":\"t\",\"name\":\"a\\\"\",\"properties\":{\"x\":\"}\"}}],\"entity\":\"a\",\"found\":true,\"relationships\":[],\"truncated\":false}"
        );
    }
}
