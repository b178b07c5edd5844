//! The knowledge base's records, named as in the v1 API contract.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};

/// Table names. Every query takes its table from here.
pub mod table {
    pub const ENTITY: &str = "entity";
    pub const RELATES: &str = "relates";
    pub const DOCUMENT: &str = "document";
    pub const META: &str = "kbq_meta";
    pub const MEMORY: &str = "memory";
    pub const SOURCE: &str = "source";
    /// Supports as stored before they were kept by key; moved once at open.
    pub const SUPPORT: &str = "support";
    pub const FACT_SUPPORT: &str = "fact_support";
    pub const CHUNK_SUPPORT: &str = "chunk_support";
    pub const ALIAS_SUPPORT: &str = "alias_support";
    pub const EXTRACTION: &str = "extraction";
    pub const INGEST_JOB: &str = "ingest_job";
    pub const INGEST_NODE: &str = "ingest_node";
    /// An unfinished ingest job's input (the source's bytes), apart from its record, which
    /// changes at every step.
    pub const INGEST_INPUT: &str = "ingest_input";
    /// The registry of workspaces, in the default workspace's database only.
    pub const WORKSPACE: &str = "kbq_workspace";
    /// The API keys minted for workspaces (their hashes), beside the registry.
    pub const API_KEY: &str = "kbq_api_key";
}

/// Longest entity name, relationship type or entity type accepted, in characters (Unicode
/// scalar values, as JSON Schema's `maxLength` counts them).
pub const MAX_NAME_CHARS: usize = 512;
/// Longest document title accepted, in characters.
pub const MAX_TITLE_CHARS: usize = 4 * MAX_NAME_CHARS;
/// Longest document content accepted, in characters.
pub const MAX_CONTENT_CHARS: usize = 1 << 20;

/// Whether `text` has more than `max` characters, as JSON Schema's `maxLength` counts them
/// (Unicode scalar values): every length rule of kbq counts this way, so the OpenAPI
/// document can state it exactly.
pub fn longer_than(text: &str, max: usize) -> bool {
    // A character takes at least one byte: few bytes are few characters.
    text.len() > max && text.chars().count() > max
}

/// A node of the graph.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entity {
    pub id: String,
    pub name: String,
    pub entity_type: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: Map<String, Value>,
}

/// A directed, typed edge between two entities, named by its ends.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relationship {
    pub source_name: String,
    pub target_name: String,
    pub relationship_type: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: Map<String, Value>,
}

/// A searchable document, optionally linked to the entity it describes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub id: String,
    pub title: String,
    pub content: String,
    pub source: String,
    pub source_id: String,
    pub content_type: String,
    pub url: Option<String>,
    pub entity_name: Option<String>,
    /// The other entities the document is linked to besides `entity_name`: those a chunk of
    /// an ingested source gave (docs/ingest.md). Graph documents, and the `entity_name`
    /// filter of searches, find the document by each of them. Not part of the answers.
    #[serde(default, skip_serializing, deserialize_with = "null_as_empty")]
    pub mentions: Vec<String>,
}

/// A list that a row may hold as null (a field the record does not have).
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// An entity as written by a client or an import file (no id: the id follows from the name).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEntity {
    pub name: String,
    pub entity_type: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: Map<String, Value>,
}

/// A relationship as written by a client or an import file.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRelationship {
    pub source_name: String,
    pub target_name: String,
    pub relationship_type: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: Map<String, Value>,
}

/// A document as written by a client or an import file (no id: it follows from source and source_id).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDocument {
    pub title: String,
    pub content: String,
    pub source: String,
    pub source_id: String,
    pub content_type: String,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub entity_name: Option<String>,
    /// Set by ingestion only (see [`Document::mentions`]): not read from a client or a file.
    #[serde(skip)]
    pub mentions: Vec<String>,
}

/// One line of the NDJSON import format; `kind` selects the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Entity(NewEntity),
    Relationship(NewRelationship),
    Document(NewDocument),
}

/// Record keys are derived from what makes a record unique, so every write is an
/// idempotent upsert and a relationship can be written without looking its ends up.
pub mod keys {
    use super::*;

    fn digest(kind: &str, parts: &[&str]) -> String {
        let mut h = Sha256::new();
        h.update(kind.as_bytes());
        for p in parts {
            h.update([0u8]);
            h.update(p.as_bytes());
        }
        // 128 bits, hex, with a letter in front so SurrealDB prints the id unquoted.
        let d = h.finalize();
        let mut key = String::with_capacity(33);
        key.push(kind.as_bytes()[0] as char);
        for b in &d[..16] {
            key.push_str(&format!("{b:02x}"));
        }
        key
    }

    pub fn entity(name: &str) -> String {
        digest("e", &[name])
    }
    pub fn relationship(source: &str, target: &str, relationship_type: &str) -> String {
        digest("r", &[source, target, relationship_type])
    }
    pub fn document(source: &str, source_id: &str) -> String {
        digest("d", &[source, source_id])
    }
    /// The record of a source's current version (its chunks are documents).
    pub fn source(source: &str, source_id: &str) -> String {
        digest("o", &[source, source_id])
    }
    /// A model's kept answer for a chunk.
    pub fn extraction(chunk_hash: &str, model: &str, prompt_version: u32) -> String {
        digest("x", &[chunk_hash, model, &prompt_version.to_string()])
    }
    /// The model's kept summary of an entity's descriptions: one per entity, the last asked
    /// (its question is in the answer), gone with the entity.
    pub fn summary(entity_name: &str) -> String {
        digest("s", &[entity_name])
    }
    /// The public id of an entity: `entity:<key>`.
    pub fn entity_id(name: &str) -> String {
        format!("{}:{}", table::ENTITY, entity(name))
    }
    pub fn document_id(source: &str, source_id: &str) -> String {
        format!("{}:{}", table::DOCUMENT, document(source, source_id))
    }
}

/// [`check_name`]'s rules but the length, as a JSON Schema `pattern` (ECMA-262; Python's
/// `re` and Rust's `regex` read it alike): no control character (Unicode Cc), and at least
/// one character that is neither a control character nor white space (Unicode White_Space,
/// what `str::trim` takes off). The OpenAPI document states it on every name field.
pub const NAME_PATTERN: &str = r"^[^\u0000-\u001F\u007F-\u009F]*[^\u0000-\u0020\u007F-\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000][^\u0000-\u001F\u007F-\u009F]*$";

/// "Not blank" as a JSON Schema `pattern`: some character that is not white space (Unicode
/// White_Space, what `str::trim` takes off). A pattern matches anywhere in the text.
pub const NOT_BLANK_PATTERN: &str =
    r"[^\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";

/// The rule for names and types: not blank, at most [`MAX_NAME_CHARS`], no control characters.
pub fn check_name(field: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(StoreError::invalid(field, "must not be empty"));
    }
    if longer_than(value, MAX_NAME_CHARS) {
        return Err(StoreError::invalid(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    if value.chars().any(|c| c.is_control()) {
        return Err(StoreError::invalid(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// [`check_name`] for each `(field, value)`, in order; the first failure is the answer.
fn check_names(fields: &[(&str, &str)]) -> Result<()> {
    fields
        .iter()
        .try_for_each(|(field, value)| check_name(field, value))
}

impl Document {
    /// Asks the processor to fetch every text field ahead of writing the document out (see
    /// [`crate::json::prefetch_str`]).
    pub fn prefetch_text(&self) {
        use crate::json::prefetch_str;
        for field in [
            &self.id,
            &self.title,
            &self.content,
            &self.source,
            &self.source_id,
            &self.content_type,
        ] {
            prefetch_str(field);
        }
        for field in [&self.url, &self.entity_name].into_iter().flatten() {
            prefetch_str(field);
        }
    }

    /// Every entity the document is linked to: its `entity_name`, then its mentions.
    pub fn entities(&self) -> impl Iterator<Item = &String> {
        self.entity_name.iter().chain(&self.mentions)
    }

    /// Whether the document is linked to the entity `name`: by `entity_name` or a mention.
    pub fn links(&self, name: &str) -> bool {
        self.entities().any(|e| e == name)
    }
}

impl NewEntity {
    pub fn validate(&self) -> Result<()> {
        check_names(&[("name", &self.name), ("entity_type", &self.entity_type)])
    }
    pub fn into_entity(self) -> Entity {
        Entity {
            id: keys::entity_id(&self.name),
            name: self.name,
            entity_type: self.entity_type,
            properties: self.properties,
        }
    }
}

impl NewRelationship {
    pub fn validate(&self) -> Result<()> {
        check_names(&[
            ("source_name", &self.source_name),
            ("target_name", &self.target_name),
            ("relationship_type", &self.relationship_type),
        ])
    }
    pub fn into_relationship(self) -> Relationship {
        Relationship {
            source_name: self.source_name,
            target_name: self.target_name,
            relationship_type: self.relationship_type,
            properties: self.properties,
        }
    }
}

impl NewDocument {
    pub fn validate(&self) -> Result<()> {
        check_names(&[
            ("source", &self.source),
            ("source_id", &self.source_id),
            ("content_type", &self.content_type),
        ])?;
        if longer_than(&self.title, MAX_TITLE_CHARS) {
            return Err(StoreError::invalid(
                "title",
                format!("must be at most {MAX_TITLE_CHARS} characters"),
            ));
        }
        if self.content.trim().is_empty() {
            return Err(StoreError::invalid("content", "must not be empty"));
        }
        if longer_than(&self.content, MAX_CONTENT_CHARS) {
            return Err(StoreError::invalid(
                "content",
                format!("must be at most {MAX_CONTENT_CHARS} characters"),
            ));
        }
        if let Some(name) = &self.entity_name {
            check_name("entity_name", name)?;
        }
        Ok(())
    }
    pub fn into_document(self) -> Document {
        Document {
            id: keys::document_id(&self.source, &self.source_id),
            title: self.title,
            content: self.content,
            source: self.source,
            source_id: self.source_id,
            content_type: self.content_type,
            url: self.url,
            entity_name: self.entity_name,
            mentions: self.mentions,
        }
    }
    /// The text that is embedded for similarity search.
    pub fn embedding_text(&self) -> String {
        embedding_text(&self.title, &self.content)
    }
}

/// What a document's vector is computed from: its title, a newline, its content. Import
/// and `KnowledgeBase::reembed` both use it, so their vectors agree.
pub fn embedding_text(title: &str, content: &str) -> String {
    format!("{title}\n{content}")
}

impl Record {
    pub fn validate(&self) -> Result<()> {
        match self {
            Record::Entity(e) => e.validate(),
            Record::Relationship(r) => r.validate(),
            Record::Document(d) => d.validate(),
        }
    }
}

/// Shared handles: the graph index and traversal results hand these out without copying.
pub type EntityRef = Arc<Entity>;
pub type RelationshipRef = Arc<Relationship>;

/// A write of an ingest job's record, grouped with the others made at the same time.
#[derive(Clone)]
pub(crate) enum JobWrite {
    /// The whole record, held by a node.
    Record {
        id: String,
        record: Value,
        node: String,
        /// The job's input, written once, beside the record; `None` leaves it as it is.
        input: Option<Vec<u8>>,
    },
    /// The record's view (status, progress, counts) alone, and for a job that failed or was
    /// cancelled, the (chunk hash, key) of the model answers it may have kept (an empty hash
    /// for a confirmation's).
    View {
        id: String,
        view: Value,
        kept: Vec<(String, String)>,
    },
}

/// A source's current version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    pub source: String,
    pub source_id: String,
    pub title: String,
    pub url: Option<String>,
    pub content_type: String,
    /// SHA-256 of the bytes ingested, hex.
    pub content_hash: String,
    /// Each chunk's content hash, by position (empty for a chunk whose extraction failed).
    pub chunks: Vec<String>,
    /// What read the chunks: the model (and prompt settings) that extracted them, or `None`
    /// when no model did (the chunks were linked to the names they mention).
    #[serde(default)]
    pub extracted_by: Option<String>,
    /// The keys of the model's kept answers on doubtful pairs that this version's
    /// resolution asked for or read (its confirmations): they go when no source's record
    /// lists them any more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmations: Vec<String>,
    /// Unix milliseconds of the ingest that wrote this version.
    pub updated_at: i64,
}

impl SourceRecord {
    pub fn key(&self) -> kbq_ingest::provenance::SourceKey {
        kbq_ingest::provenance::SourceKey::new(&self.source, &self.source_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pattern says what `check_name` does (but the length), for every character alone,
    /// between letters, and beside white space.
    #[test]
    fn the_name_pattern_is_the_name_rule() {
        let pattern = regex::Regex::new(NAME_PATTERN).unwrap();
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            for s in [c.to_string(), format!("a{c}b"), format!(" {c} ")] {
                assert_eq!(
                    check_name("name", &s).is_ok(),
                    pattern.is_match(&s),
                    "{c:?} in {s:?}"
                );
            }
        }
        assert!(!pattern.is_match(""));
    }

    /// "Not blank" is what `str::trim` leaves something of, for every character.
    #[test]
    fn the_not_blank_pattern_is_trim() {
        let pattern = regex::Regex::new(NOT_BLANK_PATTERN).unwrap();
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            for s in [c.to_string(), format!(" {c}\t")] {
                assert_eq!(!s.trim().is_empty(), pattern.is_match(&s), "{c:?} in {s:?}");
            }
        }
        assert!(!pattern.is_match(""));
    }
}
