//! Ingestion's tools, for keys with the `write` scope: a source added, its job followed, the
//! source retracted. They do what `POST /data/v1/ingest/sources` (with a JSON body),
//! `GET /data/v1/ingest/jobs/{job_id}` and `DELETE /data/v1/ingest/sources/{source}/{source_id}`
//! do (src/routes/sources.rs), with the same fields, checks and answers, through the same
//! [`Ingestor`](kbq_actors::ingest::Ingestor): the caller's workspace's.

use kbq_ingest::provenance::SourceKey;
use kbq_store::model::MAX_NAME_CHARS;
use rmcp::model::JsonObject;
use serde_json::{Value, json};

use super::{Effect, answered, arguments, invalid_arguments, not_found, object};
use crate::offload::Offload;
use crate::routes::sources::{SourceRequest, SourceRetraction, ingest_error};
use crate::workspaces::{SOURCE, Workspace};

pub const ADD_SOURCE: &str = "AddSourceTool";
pub const INGEST_JOB: &str = "IngestJobTool";
pub const DELETE_SOURCE: &str = "DeleteSourceTool";

/// Ingestion's tools. Each needs `write`, as its route does, even IngestJobTool, which only
/// reads: a job is the key's that wrote.
pub const TOOLS: [&str; 3] = [ADD_SOURCE, INGEST_JOB, DELETE_SOURCE];

/// The runtime ingestion's store work runs on (crate::offload): a tool call over HTTP runs on
/// an HTTP worker's thread. The ingestion itself is the caller's workspace's.
pub struct Ingestion {
    offload: Offload,
}

impl Ingestion {
    pub fn new(offload: Offload) -> Self {
        Ingestion { offload }
    }

    /// Runs the ingestion tool `name` in `workspace` as `owner`: its answer, or the tool
    /// error.
    pub(super) async fn run(
        &self,
        workspace: &Workspace,
        name: &str,
        owner: &str,
        args: Value,
    ) -> Result<Value, Value> {
        let ingestor = workspace.ingestor.clone();
        let owner = owner.to_string();
        let answer = match name {
            ADD_SOURCE => {
                let input = arguments::<SourceRequest>(&args)?
                    .into_input()
                    .map_err(invalid_arguments)?;
                workspace.room_for(SOURCE).await.map_err(answered)?;
                let view = self
                    .offload
                    .run(async move { ingestor.submit(input, &owner).await })
                    .await
                    .map_err(answered)?
                    .map_err(|e| answered(ingest_error(e)))?;
                serde_json::to_value(view)
            }
            INGEST_JOB => {
                #[derive(serde::Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Job {
                    job_id: String,
                }
                let Job { job_id } = arguments(&args)?;
                let view = self
                    .offload
                    .run(async move { ingestor.job(&job_id, &owner).await })
                    .await
                    .map_err(answered)?
                    .map_err(|e| answered(ingest_error(e)))?
                    .ok_or_else(|| not_found("no job of this key has this id"))?;
                serde_json::to_value(view)
            }
            DELETE_SOURCE => {
                #[derive(serde::Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Source {
                    source: String,
                    source_id: String,
                }
                let Source { source, source_id } = arguments(&args)?;
                crate::extract::name("source", &source).map_err(invalid_arguments)?;
                crate::extract::name("source_id", &source_id).map_err(invalid_arguments)?;
                let key = SourceKey::new(source, source_id);
                let done = self
                    .offload
                    .run(async move { ingestor.delete_source(&key).await })
                    .await
                    .map_err(answered)?
                    .map_err(|e| answered(ingest_error(e)))?
                    .ok_or_else(|| not_found("no source of this name was ingested"))?;
                serde_json::to_value(SourceRetraction {
                    deleted: true,
                    chunks: done.chunks,
                    entities: done.entities,
                    relationships: done.relationships,
                })
            }
            other => {
                return Err(kbq_tools::ToolError::UnknownTool(other.into())
                    .to_result()
                    .value());
            }
        };
        Ok(answer.unwrap_or(Value::Null))
    }
}

/// The catalogue's entries of ingestion's tools: name, description, input and output schemas,
/// effect. `schema` gives a schema of the API's document, standing alone.
pub(super) fn tools(
    schema: impl Fn(&str) -> JsonObject,
) -> [(&'static str, &'static str, JsonObject, JsonObject, Effect); 3] {
    let name = |description: &str| json!({"type": "string", "description": description, "minLength": 1, "maxLength": MAX_NAME_CHARS});
    let mut source = schema("SourceRequest");
    // Over MCP a source is text: the route's other form, a multipart upload, is not here.
    source.insert(
        "description".into(),
        "A source: its text in `content`, as plain text, Markdown or HTML.".into(),
    );
    [
        (
            ADD_SOURCE,
            "Add a document to the knowledge base (a note, a page), as plain text, Markdown or HTML, named by `source` (a collection) and `source_id` (its id there). It is cut into chunks that the search tools find; with a model configured, the entities and relationships it states join the graph. Answers at once with the ingestion job: call IngestJobTool with its `job_id` until `status` is succeeded, failed or cancelled. Adding the same `source` and `source_id` again replaces what that source said before; with unchanged content it changes nothing. The same as POST /data/v1/ingest/sources with a JSON body.",
            source,
            schema("JobView"),
            Effect::Replaces,
        ),
        (
            INGEST_JOB,
            "An ingestion job this key started with AddSourceTool: its `status` (queued, running, succeeded, failed, cancelled), progress (`chunks_done` of `chunks_total`), counts, and `error` when it failed. The same as GET /data/v1/ingest/jobs/{job_id}.",
            object(json!({
                "type": "object",
                "properties": {"job_id": {"type": "string", "description": "The job's id, as AddSourceTool answered it"}},
                "required": ["job_id"],
                "additionalProperties": false
            })),
            schema("JobView"),
            Effect::Reads,
        ),
        (
            DELETE_SOURCE,
            "Retract a source that was added: its chunks, and every entity and relationship that no other source (nor an import) supports. The same as DELETE /data/v1/ingest/sources/{source}/{source_id}.",
            object(json!({
                "type": "object",
                "properties": {
                    "source": name("The source's namespace, as it was added"),
                    "source_id": name("The source's id within `source`, as it was added"),
                },
                "required": ["source", "source_id"],
                "additionalProperties": false
            })),
            schema("SourceRetraction"),
            Effect::Replaces,
        ),
    ]
}
