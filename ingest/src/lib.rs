//! The pure parts of kbq's document ingestion: everything between the bytes of an upload
//! and the facts written to the graph that needs neither the store, the network nor a model.
//! No async, no I/O: each function takes values and returns values, so each is tested on its
//! own and the pipeline's actors stay thin.
//!
//! A document's path through it, with the actor stages (in kbq-actors) that call each part:
//!
//! ```text
//! upload ── format::detect ──> Format                      (HTTP edge: 415 on UnsupportedFormat)
//!        ── parse::parse ────> Parsed { title, text, sections }
//!        ── chunk::chunk ────> [Chunk { text, start..end, heading_path, hash }]
//!        ── extraction::messages ──> model ──> extraction::validate ──> Extraction
//!        ── resolve::compare ──> Same | Doubtful | Different (against the graph's names)
//!        ── confirm::messages ──> model ──> confirm::validate ──> a doubtful pair same or not
//!        ── provenance::plan_replace / plan_delete ──> Plan (applied by the store)
//!        ── summary::select, or summary::messages ──> model ──> summary::validate
//!                                                  ──> an entity's description
//! ```
//!
//! # Layout
//! - [`format`](mod@format): the accepted formats, content types and extensions, and [`detect`].
//! - [`parse`](mod@parse): bytes to [`Parsed`], normalised text and its heading sections
//!   (Markdown, HTML, PDF, DOCX, plain text).
//! - [`chunk`](mod@chunk): [`Parsed`] to [`Chunk`]s that follow the sections, with exact
//!   offsets and content hashes.
//! - [`extraction`]: the model's contract: prompt, strict JSON schema, answer validation.
//! - [`resolve`]: name keys, name similarity, and the same/doubtful/different decision.
//! - [`confirm`]: the model's contract for a doubtful pair: prompt, schema, answer.
//! - [`provenance`]: facts, their supports, and the pure planner of deletes and replaces.
//! - [`summary`]: an entity's description from its chunks' descriptions: selection, or the
//!   model's summary (prompt, schema, answer) and when to ask for it.

pub mod chunk;
pub mod confirm;
pub mod extraction;
pub mod format;
pub mod parse;
pub mod provenance;
pub mod resolve;
pub mod summary;

pub use chunk::{Chunk, ChunkConfig, ChunkConfigError, chunk};
pub use extraction::{
    ExtractedEntity, ExtractedRelationship, Extraction, PROMPT_VERSION, SCHEMA_NAME, SchemaError,
};
pub use format::{Format, UnsupportedFormat, detect};
pub use parse::{ParseAnswer, ParseError, Parsed, Section, parse};
pub use provenance::{ChunkRef, Fact, Plan, SourceKey, Support, apply, plan_delete, plan_replace};
pub use resolve::{
    Decision, ResolveConfig, acronyms, compare, compare_keys, decide, may_be_acronym, name_key,
    similarity,
};

/// The text of a caught panic's payload (what `panic!` was given), when it has one.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    (payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .or_else(|| payload.downcast_ref::<String>().cloned())
}
