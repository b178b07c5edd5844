//! Ingestion under `/data/v1/ingest` (scope `write`): upserts of entities, relationships and
//! documents in JSON arrays, and NDJSON in the import format. All four share the import's
//! code path (`kbq_store::import`), so a record is checked, deduplicated and written exactly
//! as `kbq import` would, and the graph and vector indexes are current when the answer comes.

use std::future::Future;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use kbq_store::import::{self, ImportReport, Silent};
use kbq_store::{
    EntityDeletion, KnowledgeBase, NewDocument, NewEntity, NewRelationship, Record, StoreError,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{self, Items, Rules, name_in_path};
use crate::offload::Offload;
use crate::workspaces::{Adding, Workspace};

/// How many records one JSON array holds.
pub const BATCH: Items = Items {
    field: "body",
    min: 1,
    max: 10_000,
};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/entities").route(web::post().to(entities)))
        .service(web::resource("/relationships").route(web::post().to(relationships)))
        .service(web::resource("/documents").route(web::post().to(documents)))
        .service(web::resource("/ndjson").route(web::post().to(ndjson)))
        .service(web::resource("/entities/{name:.*}").route(web::delete().to(delete_entity)))
        .service(web::resource("/documents/{id}").route(web::delete().to(delete_document)));
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Failure {
    /// Position in the array, from 0.
    pub index: usize,
    /// What the data refused: a relationship's end, or a document's entity, that is not an
    /// entity.
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchReport {
    /// Records in the array.
    pub received: usize,
    /// Records written (inserted or updated); duplicates in one array count once.
    pub written: usize,
    pub failures: Vec<Failure>,
}

impl Rules for NewEntity {
    const NAMES: &'static [&'static str] = &["name", "entity_type"];
}

impl Rules for NewRelationship {
    const NAMES: &'static [&'static str] = &["source_name", "target_name", "relationship_type"];
}

impl Rules for NewDocument {
    const NAMES: &'static [&'static str] = &["source", "source_id", "content_type", "entity_name"];
    const NOT_BLANK: &'static [&'static str] = &["content"];
    const LENGTHS: &'static [(&'static str, usize)] = &[
        ("title", kbq_store::model::MAX_TITLE_CHARS),
        ("content", kbq_store::model::MAX_CONTENT_CHARS),
    ];
}

/// The NDJSON route's `kind` of each record type, as [`Record`] reads it.
pub const KINDS: [(&str, &str); 3] = [
    ("entity", "NewEntity"),
    ("relationship", "NewRelationship"),
    ("document", "NewDocument"),
];

/// Reads `body` as a JSON array of [`BATCH`] `T`s, each by its schema and rules, and
/// keeps each record's position. A body that breaks them is refused whole with a 400 naming
/// the element and field (`[3].name`), so a bad request writes nothing; what depends on the
/// data (a relationship's missing end) is reported per record in the answer instead.
fn batch<T: DeserializeOwned>(
    body: &[u8],
    what: &str,
    wrap: impl Fn(T) -> Record,
) -> Result<Vec<(usize, Record)>, ApiError> {
    let items: Vec<T> = extract::parse_array(body, what)?;
    let Items { min, max, .. } = BATCH;
    if !(min..=max).contains(&items.len()) {
        return Err(ApiError::invalid(
            "body",
            format!("the array must hold {min} to {max} {what}"),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let record = wrap(item);
            record
                .validate()
                .map_err(|e| at(&format!("[{index}]"), e))?;
            Ok((index, record))
        })
        .collect()
}

/// A record's rule broken at `place` (`[3]`, `line 4`): the error names the place and field.
fn at(place: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::Invalid { field, reason } => {
            let field = format!("{place}.{field}");
            ApiError::invalid(field.clone(), format!("{field} {reason}"))
        }
        other => other.into(),
    }
}

/// What the ingest handlers need beside the request's workspace (whose knowledge base they
/// write): the runtime its writes run on.
pub struct IngestService {
    offload: Offload,
}

impl IngestService {
    pub fn new(offload: Offload) -> Self {
        IngestService { offload }
    }

    /// Runs one call on `workspace`'s knowledge base on the main runtime and waits for its
    /// answer.
    async fn store<T, F>(
        &self,
        workspace: &Workspace,
        work: impl FnOnce(Arc<KnowledgeBase>) -> F,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        Ok(self.offload.run(work(workspace.kb.clone())).await??)
    }

    /// Parses a JSON array of `T` (see [`batch`]) and writes its valid records through the
    /// import's code path.
    async fn write_batch<T: DeserializeOwned>(
        &self,
        workspace: &Workspace,
        body: &[u8],
        what: &str,
        wrap: impl Fn(T) -> Record,
    ) -> Result<HttpResponse, ApiError> {
        let records = batch(body, what, wrap)?;
        room_for(workspace, &records).await?;
        let received = records.len();
        let report = self
            .store(workspace, move |kb| async move {
                import::import_records(&kb, records, &Silent).await
            })
            .await?;
        let mut failures: Vec<Failure> = report
            .failures
            .into_iter()
            .map(|f| Failure {
                index: f.line,
                reason: f.reason,
            })
            .collect();
        failures.sort_by_key(|f| f.index);
        Ok(HttpResponse::Ok().json(BatchReport {
            received,
            written: report.entities + report.relationships + report.documents,
            failures,
        }))
    }
}

/// `403 quota_exceeded` unless `workspace` has room for `records`: the entities among them
/// that it does not hold yet, and every document with its content's bytes (one that replaces
/// a document counts too).
async fn room_for(workspace: &Workspace, records: &[(usize, Record)]) -> Result<(), ApiError> {
    if !workspace.quota.bounds_holdings() {
        return Ok(());
    }
    let mut names = Vec::new();
    let mut adding = Adding::default();
    for (_, record) in records {
        match record {
            Record::Entity(e) => names.push(e.name.clone()),
            Record::Document(d) => {
                adding.documents += 1;
                adding.document_bytes += d.content.len() as u64;
            }
            Record::Relationship(_) => {}
        }
    }
    names.sort();
    names.dedup();
    adding.entities = workspace.kb.missing_entities(&names).await?.len() as u64;
    workspace.room_for(adding).await
}

/// Why any ingest route answers 503.
const UNAVAILABLE: &str = "the knowledge base cannot answer now; the statements written before the failure stay written, and a retry is safe";

/// The three array upserts differ only in their path and record type: one piece writes each
/// handler with its OpenAPI operation.
macro_rules! upsert {
    ($(#[doc = $doc:literal])* $name:ident, $path:literal, $record:ident, $what:literal, $wrap:expr) => {
        $(#[doc = $doc])*
        #[utoipa::path(
            post,
            path = $path,
            tag = "ingest",
            request_body = Vec<$record>,
            responses(
                (status = 200, description = "What was received and written, and why any record failed", body = BatchReport),
                (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
            ),
            security(("bearer" = ["write"]), ("api_key" = ["write"])),
        )]
        async fn $name(
            ingest: web::Data<IngestService>,
            ws: web::ReqData<Workspace>,
            body: web::Bytes,
        ) -> Result<HttpResponse, ApiError> {
            ingest.write_batch::<$record>(&ws, &body, $what, $wrap).await
        }
    };
}

upsert!(
    /// Upserts entities from a JSON array of 1 to 10,000.
    ///
    /// Every record is checked first: one against its schema refuses the whole request (400,
    /// naming it: `[1].name`) and nothing is written. What only the data refuses (a missing
    /// end or entity) is reported by the record's position, and the rest written.
    entities,
    "/data/v1/ingest/entities",
    NewEntity,
    "entities",
    Record::Entity
);

upsert!(
    /// Upserts relationships from a JSON array of 1 to 10,000.
    ///
    /// Every record is checked first: one against its schema refuses the whole request (400,
    /// naming it: `[1].name`) and nothing is written. What only the data refuses (a missing
    /// end or entity) is reported by the record's position, and the rest written.
    relationships,
    "/data/v1/ingest/relationships",
    NewRelationship,
    "relationships",
    Record::Relationship
);

upsert!(
    /// Upserts documents from a JSON array of 1 to 10,000.
    ///
    /// Every record is checked first: one against its schema refuses the whole request (400,
    /// naming it: `[1].name`) and nothing is written. What only the data refuses (a missing
    /// end or entity) is reported by the record's position, and the rest written.
    documents,
    "/data/v1/ingest/documents",
    NewDocument,
    "documents",
    Record::Document
);

#[derive(Debug, Serialize, ToSchema)]
pub struct NdjsonFailure {
    /// 1-based line number, counting every line.
    pub line: usize,
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NdjsonReport {
    pub records: usize,
    pub entities: usize,
    pub relationships: usize,
    pub documents: usize,
    pub failures: Vec<NdjsonFailure>,
}

impl From<ImportReport> for NdjsonReport {
    fn from(r: ImportReport) -> Self {
        NdjsonReport {
            records: r.records,
            entities: r.entities,
            relationships: r.relationships,
            documents: r.documents,
            failures: r
                .failures
                .into_iter()
                .map(|f| NdjsonFailure {
                    line: f.line,
                    reason: f.reason,
                })
                .collect(),
        }
    }
}

/// Imports NDJSON in the import format, one record per line, exactly as `kbq import` reads a file.
///
/// Each line is an object whose `kind` (`entity`, `relationship` or `document`) selects the
/// record (docs/import-format.md); blank lines are skipped. Every line is checked first: one
/// against the format refuses the whole body (400, naming it: `line 3.name`) and nothing is
/// written. What only the data refuses is reported by line. Any `Content-Type` is accepted.
#[utoipa::path(
    post,
    path = "/data/v1/ingest/ndjson",
    tag = "ingest",
    request_body(content = String, content_type = "application/x-ndjson", description = "One record per line"),
    responses(
        (status = 200, description = "Counts by kind, and the lines that failed", body = NdjsonReport),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn ndjson(
    ingest: web::Data<IngestService>,
    ws: web::ReqData<Workspace>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let records = lines(&body)?;
    room_for(&ws, &records).await?;
    let report = ingest
        .store(&ws, move |kb| async move {
            import::import_records(&kb, records, &Silent).await
        })
        .await?;
    Ok(HttpResponse::Ok().json(NdjsonReport::from(report)))
}

/// Reads NDJSON in the import format: every non-blank line a record by its schema and rules,
/// with its 1-based line number. A line that breaks them refuses the whole body with a 400
/// naming the line and field (`line 4.name`), so a bad request writes nothing.
fn lines(body: &[u8]) -> Result<Vec<(usize, Record)>, ApiError> {
    let mut records = Vec::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let place = format!("line {}", i + 1);
        if line.trim_ascii().is_empty() {
            continue;
        }
        let record: Record = extract::parse(line).map_err(|e| {
            let field = match e.field.as_deref() {
                None | Some("body") => place.clone(),
                Some(field) => format!("{place}.{field}"),
            };
            ApiError::invalid(field, format!("{place}: {}", e.message))
        })?;
        record.validate().map_err(|e| at(&place, e))?;
        records.push((i + 1, record));
    }
    if records.is_empty() {
        return Err(ApiError::invalid(
            "body",
            "the body must hold at least one record",
        ));
    }
    Ok(records)
}

/// Deletes an entity and its relationships; its documents stay, unlinked.
///
/// The name is exact and percent-encoded, as in the entity lookup. A missing entity is not an
/// error: the answer says `"deleted": false`.
#[utoipa::path(
    delete,
    path = "/data/v1/ingest/entities/{name}",
    tag = "ingest",
    params(("name" = String, Path, description = "The exact name, percent-encoded (`OS%2F360` is `OS/360`)")),
    responses(
        (status = 200, description = "What was deleted", body = EntityDeletion),
        (status = 400, description = ErrorCode::InvalidRequest.answers("the name is blank, too long, or not UTF-8"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn delete_entity(
    ingest: web::Data<IngestService>,
    ws: web::ReqData<Workspace>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let name = name_in_path(&req, "/ingest/entities/", "name")?;
    let done = ingest
        .store(&ws, move |kb| async move { kb.delete_entity(&name).await })
        .await?;
    Ok(HttpResponse::Ok().json(done))
}

/// What a document delete did.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentDeletion {
    /// False when there was no such document.
    pub deleted: bool,
}

/// Deletes a document by id; `"deleted": false` when there was none.
#[utoipa::path(
    delete,
    path = "/data/v1/ingest/documents/{id}",
    tag = "ingest",
    params(("id" = String, Path, description = "`document:d` and 32 hex digits, or the part after `document:`")),
    responses(
        (status = 200, description = "Whether a document was deleted", body = DocumentDeletion),
        (status = 400, description = format!("`{}` (`field` `id`): not a document id", ErrorCode::InvalidRequest.as_str()), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn delete_document(
    ingest: web::Data<IngestService>,
    ws: web::ReqData<Workspace>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let deleted = ingest
        .store(&ws, move |kb| async move { kb.delete_document(&id).await })
        .await?;
    Ok(HttpResponse::Ok().json(DocumentDeletion { deleted }))
}
