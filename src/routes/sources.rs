//! Raw documents in (scope `write`, under `/data/v1/ingest`): a source is submitted as JSON
//! or as a multipart upload and answered at once with its job (202); the job is read,
//! followed as server-sent events, or cancelled; a source is retracted. The pipeline is
//! kbq-actors' (`kbq_actors::ingest`), docs/ingest.md tells what it does.

use std::sync::Arc;

use actix_multipart::Multipart;
use actix_web::http::header;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use futures::StreamExt;
use kbq_actors::ingest::{IngestError, Ingestor, JobView, SourceDeletion, SourceInput};
use kbq_ingest::provenance::SourceKey;
use kbq_store::KnowledgeBase;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::KeyIdentity;
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{self, Rules};
use crate::offload::Offload;
use crate::workspaces::{SOURCE, Workspace};

/// Room for a multipart or JSON envelope around the largest source.
const ENVELOPE_BYTES: usize = 64 << 10;

/// The body is read as a stream (not through `server.max_body_bytes`): a source may be up to
/// `ingest.max_source_bytes`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/sources")
            .route(web::post().to(submit))
            .route(web::get().to(list)),
    )
    .service(web::resource("/sources/{source}/{source_id}").route(web::delete().to(retract)))
    .service(
        web::resource("/jobs/{job_id}")
            .route(web::get().to(job))
            .route(web::delete().to(cancel)),
    )
    .service(web::resource("/jobs/{job_id}/events").route(web::get().to(events)));
}

/// The default workspace's ingestion handle (its settings, and its jobs for metrics), and
/// the runtime the store work runs on. A request's own ingestion is its workspace's
/// ([`Workspace::ingestor`]).
pub struct SourcesService {
    ingestor: Ingestor,
    offload: Offload,
}

impl SourcesService {
    pub fn new(ingestor: Ingestor, offload: Offload) -> Self {
        SourcesService { ingestor, offload }
    }

    /// The default workspace's ingestion handle.
    pub fn ingestor(&self) -> &Ingestor {
        &self.ingestor
    }

    /// Where the routes' store work runs.
    pub fn offload(&self) -> &Offload {
        &self.offload
    }

    pub fn max_source_bytes(&self) -> usize {
        self.ingestor.config().max_source_bytes
    }

    /// A page of the merges recorded in `kb` ([`kbq_store::KnowledgeBase::merges`]).
    pub async fn merges(
        &self,
        kb: &Arc<KnowledgeBase>,
        entity: Option<String>,
        after: Option<String>,
        limit: usize,
    ) -> Result<(Vec<kbq_store::sources::Merge>, bool), ApiError> {
        let kb = kb.clone();
        Ok(self
            .offload
            .run(async move { kb.merges(entity.as_deref(), after.as_deref(), limit).await })
            .await??)
    }

    /// The entity `name` is an alias of, when a source's resolution merged it into one: what
    /// an entity lookup or a traversal by a name that is no entity tries next.
    pub async fn alias_target(
        &self,
        kb: &Arc<KnowledgeBase>,
        name: &str,
    ) -> Result<Option<String>, ApiError> {
        let kb = kb.clone();
        let name = name.to_string();
        Ok(self
            .offload
            .run(async move { kb.alias_target(&name).await })
            .await??)
    }
}

/// A source as JSON: its text in `content`. Binary formats (PDF, DOCX) come as a multipart
/// upload instead.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceRequest {
    /// The source's namespace (a collection, a connector).
    pub source: String,
    /// The source's id within `source`; ingesting the same pair again replaces its
    /// contribution.
    pub source_id: String,
    /// Defaults to the document's own title (a Markdown H1, an HTML `<title>`), else
    /// `source_id`.
    #[serde(default)]
    pub title: Option<String>,
    /// The document's text.
    pub content: String,
    /// `text/plain`, `text/markdown` or `text/html` (with or without parameters); default
    /// `text/plain`.
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
}

impl SourceRequest {
    /// The source to submit, once its optional texts are checked (`text/plain` when no
    /// content type is given).
    pub(crate) fn into_input(self) -> Result<SourceInput, ApiError> {
        check_optional("title", self.title.as_deref())?;
        check_optional("url", self.url.as_deref())?;
        Ok(SourceInput {
            source: self.source,
            source_id: self.source_id,
            title: self.title,
            url: self.url,
            content_type: Some(self.content_type.unwrap_or_else(|| "text/plain".into())),
            file_name: None,
            content: self.content.into_bytes(),
        })
    }
}

impl Rules for SourceRequest {
    const NAMES: &'static [&'static str] = &["source", "source_id"];
    const LENGTHS: &'static [(&'static str, usize)] = &[
        ("title", kbq_store::model::MAX_TITLE_CHARS),
        ("url", kbq_store::model::MAX_TITLE_CHARS),
    ];
}

impl Rules for SourceUpload {
    const NAMES: &'static [&'static str] = &["source", "source_id"];
    const LENGTHS: &'static [(&'static str, usize)] = SourceRequest::LENGTHS;
}

/// One server-sent event of a job's stream, as an SSE client reads it: `progress` and `end`
/// each carry the job (a [`JobView`]) as JSON in `data`.
#[derive(ToSchema)]
#[allow(dead_code)] // the document's only
pub struct JobEvent {
    #[schema(pattern = "^(progress|end)$")]
    event: String,
    /// The job, as JSON.
    data: String,
}

/// Submits a source: Markdown, HTML, PDF (its text layer), DOCX or plain text.
///
/// Either `multipart/form-data` with a `file` part (its content type, or its file name's
/// extension, tells the format) and optional `source`, `source_id`, `title` and `url` parts
/// (`source` defaults to `upload`, `source_id` to the file name), or a JSON object. The answer
/// comes at once with the job, which runs in the background: read it at
/// `/data/v1/ingest/jobs/{job_id}`, or follow it at `.../events`. Submitting a source again
/// with unchanged content asks no model and changes nothing.
#[utoipa::path(
    post,
    path = "/data/v1/ingest/sources",
    tag = "ingest",
    request_body(content(
        (SourceRequest = "application/json"),
        (SourceUpload = "multipart/form-data"),
    )),
    responses(
        (status = 202, description = "The job, queued", body = JobView),
        (status = 400, description = ErrorCode::InvalidRequest.answers("a field is missing, blank, too long, or of the wrong type; `field` names it"), body = ErrorBody),
        (status = 413, description = ErrorCode::PayloadTooLarge.answers("the source is larger than `ingest.max_source_bytes`"), body = ErrorBody),
        (status = 415, description = ErrorCode::UnsupportedMediaType.answers("the content type or extension is not one ingestion reads; the message lists them"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer, or `ingest.max_queued` jobs are waiting"), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn submit(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let owner = owner(&req)?;
    let is_multipart = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        });
    let input = if is_multipart {
        let multipart = Multipart::new(req.headers(), payload);
        upload(multipart, sources.max_source_bytes()).await?
    } else {
        let limit = sources.max_source_bytes() + ENVELOPE_BYTES;
        let body = payload
            .to_bytes_limited(limit)
            .await
            .map_err(|_| too_large("content", sources.max_source_bytes()))?
            .map_err(|e| ApiError::invalid("body", format!("the body could not be read: {e}")))?;
        extract::parse::<SourceRequest>(&body)?.into_input()?
    };
    // A source becomes documents (its chunks): a workspace whose documents, or their bytes,
    // are at its quota takes none. How many chunks it makes is known once it is parsed.
    ws.room_for(SOURCE).await?;
    let ingestor = ws.ingestor.clone();
    let view = sources
        .offload
        .run(async move { ingestor.submit(input, &owner).await })
        .await?
        .map_err(ingest_error)?;
    Ok(HttpResponse::Accepted()
        .insert_header((
            header::LOCATION,
            format!("/data/v1/ingest/jobs/{}", view.job_id),
        ))
        .json(view))
}

/// The parts of a multipart upload, as the OpenAPI document shows them; a part of another
/// name is refused, as an unknown field of the JSON body is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SourceUpload {
    /// The document: its part's content type or its file name's extension tells the format.
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
    /// Default `upload`.
    pub source: Option<String>,
    /// Default: the file name.
    pub source_id: Option<String>,
    pub title: Option<String>,
    pub url: Option<String>,
}

/// Reads a multipart upload: the `file` part (at most `max` bytes) and the text parts.
async fn upload(mut multipart: Multipart, max: usize) -> Result<SourceInput, ApiError> {
    let mut file: Option<(Vec<u8>, Option<String>, Option<String>)> = None;
    let mut text: std::collections::BTreeMap<String, String> = Default::default();
    while let Some(field) = multipart.next().await {
        let mut field = field.map_err(|e| {
            ApiError::invalid("body", format!("the multipart body is malformed: {e}"))
        })?;
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "file" => {
                let content_type = field.content_type().map(|m| m.essence_str().to_string());
                let file_name = field
                    .content_disposition()
                    .and_then(|d| d.get_filename())
                    .map(str::to_string);
                let mut bytes = Vec::new();
                while let Some(chunk) = field.next().await {
                    let chunk = chunk.map_err(|e| {
                        ApiError::invalid("file", format!("the file part could not be read: {e}"))
                    })?;
                    if bytes.len() + chunk.len() > max {
                        return Err(too_large("file", max));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                file = Some((bytes, content_type, file_name));
            }
            "source" | "source_id" | "title" | "url" => {
                let mut bytes = Vec::new();
                while let Some(chunk) = field.next().await {
                    let chunk = chunk.map_err(|e| {
                        ApiError::invalid(name.clone(), format!("{name} could not be read: {e}"))
                    })?;
                    if bytes.len() + chunk.len() > ENVELOPE_BYTES {
                        return Err(ApiError::invalid(
                            name.clone(),
                            format!("{name} is too long"),
                        ));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                let value = String::from_utf8(bytes).map_err(|_| {
                    ApiError::invalid(name.clone(), format!("{name} must be UTF-8"))
                })?;
                text.insert(name, value);
            }
            other => {
                return Err(ApiError::invalid(
                    other.to_string(),
                    format!(
                        "unknown part `{other}`: expected file, source, source_id, title or url"
                    ),
                ));
            }
        }
    }
    let Some((content, content_type, file_name)) = file else {
        return Err(ApiError::invalid("file", "the `file` part is required"));
    };
    let source_id = match text.remove("source_id").or_else(|| file_name.clone()) {
        Some(id) => id,
        None => {
            return Err(ApiError::invalid(
                "source_id",
                "source_id is required when the file part has no file name",
            ));
        }
    };
    // A generic type says nothing: the file name's extension tells the format then.
    let content_type = content_type.filter(|t| t != "application/octet-stream");
    check_optional("title", text.get("title").map(String::as_str))?;
    check_optional("url", text.get("url").map(String::as_str))?;
    Ok(SourceInput {
        source: text.remove("source").unwrap_or_else(|| "upload".into()),
        source_id,
        title: text.remove("title"),
        url: text.remove("url"),
        content_type,
        file_name,
        content,
    })
}

/// Reads a job: its status, progress and counts.
#[utoipa::path(
    get,
    path = "/data/v1/ingest/jobs/{job_id}",
    tag = "ingest",
    params(("job_id" = String, Path, description = "The job's id, as submitting answered it")),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 404, description = ErrorCode::NotFound.answers("no job of this key has this id, or it ended longer ago than `ingest.forget_ended_jobs_after_secs` (7 days by default)"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn job(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    req: HttpRequest,
    job_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let owner = owner(&req)?;
    let ingestor = ws.ingestor.clone();
    let job_id = job_id.into_inner();
    let view = sources
        .offload
        .run(async move { ingestor.job(&job_id, &owner).await })
        .await?
        .map_err(ingest_error)?
        .ok_or_else(no_job)?;
    Ok(HttpResponse::Ok().json(view))
}

/// Follows a job as server-sent events: a `progress` event with the job (as
/// `/data/v1/ingest/jobs/{job_id}` answers it) at once and at each change, and a last `end`
/// event when it has ended; then the stream closes.
#[utoipa::path(
    get,
    path = "/data/v1/ingest/jobs/{job_id}/events",
    tag = "ingest",
    params(("job_id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "`text/event-stream`: `progress` events, each `data` a job, then one `end` event", content_type = "text/event-stream", body = JobEvent),
        (status = 404, description = ErrorCode::NotFound.answers("no job of this key has this id"), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn events(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    req: HttpRequest,
    job_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let owner = owner(&req)?;
    let job_id = job_id.into_inner();
    let Some(mut watch) = ws.ingestor.watch(&job_id, &owner) else {
        // Not running here: a job that ended (or another node's) is one event and the end.
        let ingestor = ws.ingestor.clone();
        let view = sources
            .offload
            .run(async move { ingestor.job(&job_id, &owner).await })
            .await?
            .map_err(ingest_error)?
            .ok_or_else(no_job)?;
        let body = format!("{}{}", event("progress", &view), event("end", &view));
        return Ok(super::event_stream().body(body));
    };
    let stream = async_stream(move |tx| async move {
        loop {
            let view = watch.borrow_and_update().clone();
            let done = view.status.is_final();
            if tx.send(event("progress", &view)).await.is_err() {
                return;
            }
            if done {
                let _ = tx.send(event("end", &view)).await;
                return;
            }
            if watch.changed().await.is_err() {
                return;
            }
        }
    });
    Ok(super::event_stream()
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream))
}

/// A stream of the strings `produce` sends, ending when it returns.
fn async_stream<F, Fut>(
    produce: F,
) -> impl futures::Stream<Item = Result<web::Bytes, actix_web::Error>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<String>) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(16);
    actix_web::rt::spawn(produce(tx));
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|s| (Ok(web::Bytes::from(s)), rx))
    })
}

fn event(name: &str, view: &JobView) -> String {
    format!(
        "event: {name}\ndata: {}\n\n",
        serde_json::to_string(view).unwrap_or_default()
    )
}

/// Cancels a job. What it wrote stays consistent: a cancelled job of a source that was
/// ingested before leaves that version's facts or the new version's (submit it again to
/// finish); a job that had ended is answered as it ended.
#[utoipa::path(
    delete,
    path = "/data/v1/ingest/jobs/{job_id}",
    tag = "ingest",
    params(("job_id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job: `cancelled`, or as it had ended", body = JobView),
        (status = 404, description = ErrorCode::NotFound.answers("no job of this key has this id"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn cancel(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    req: HttpRequest,
    job_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let owner = owner(&req)?;
    let ingestor = ws.ingestor.clone();
    let job_id = job_id.into_inner();
    let view = sources
        .offload
        .run(async move {
            let view = ingestor.cancel(&job_id, &owner).await?;
            // A running job stops at its next step: wait for it to say so, briefly.
            if let Some(v) = &view
                && !v.status.is_final()
                && let Some(mut watch) = ingestor.watch(&job_id, &owner)
            {
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    watch.wait_for(|v| v.status.is_final()),
                )
                .await;
                return Ok(Some(watch.borrow().clone()));
            }
            Ok::<_, IngestError>(view)
        })
        .await?
        .map_err(ingest_error)?
        .ok_or_else(no_job)?;
    Ok(HttpResponse::Ok().json(view))
}

/// What retracting a source did.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceRetraction {
    pub deleted: bool,
    /// The source's chunks (documents) deleted.
    pub chunks: u64,
    /// Entities and relationships no other source (nor an import) supported, removed.
    pub entities: u64,
    pub relationships: u64,
}

/// Retracts a source: its chunks, and every entity, relationship, alias and description that
/// no other source supports. What another source or an import also states stays.
#[utoipa::path(
    delete,
    path = "/data/v1/ingest/sources/{source}/{source_id}",
    tag = "ingest",
    params(
        ("source" = String, Path, description = "The source's namespace, percent-encoded"),
        ("source_id" = String, Path, description = "The source's id, percent-encoded"),
    ),
    responses(
        (status = 200, description = "What was retracted", body = SourceRetraction),
        (status = 400, description = ErrorCode::InvalidRequest.answers("`source` or `source_id` breaks the name rule"), body = ErrorBody),
        (status = 404, description = ErrorCode::NotFound.answers("no source of this name was ingested"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer; a retry completes the retraction"), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn retract(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (source, source_id) = path.into_inner();
    extract::name("source", &source)?;
    extract::name("source_id", &source_id)?;
    let ingestor = ws.ingestor.clone();
    let key = SourceKey::new(source, source_id);
    let done: Option<SourceDeletion> = sources
        .offload
        .run(async move { ingestor.delete_source(&key).await })
        .await?
        .map_err(ingest_error)?;
    let done = done
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "no source of this name was ingested"))?;
    Ok(HttpResponse::Ok().json(SourceRetraction {
        deleted: true,
        chunks: done.chunks,
        entities: done.entities,
        relationships: done.relationships,
    }))
}

/// Sources a listing shows at most.
const LISTED: usize = 1000;

/// A source as the listing shows it: its current version.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceSummary {
    pub source: String,
    pub source_id: String,
    pub title: String,
    #[schema(required = true)]
    pub url: Option<String>,
    pub content_type: String,
    /// Its chunks: the documents it became.
    pub chunks: u64,
    /// The model that extracted its entities and relationships; `null` when none did.
    #[schema(required = true)]
    pub extracted_by: Option<String>,
    /// When this version was ingested (RFC 3339).
    pub updated_at: String,
}

/// The workspace's sources, most recently ingested first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceList {
    /// At most 1,000: the most recent.
    pub sources: Vec<SourceSummary>,
    /// Sources in the workspace, listed or not.
    pub total: u64,
}

/// Lists the sources ingested into the key's workspace: the 1,000 most recent, newest first,
/// and how many there are.
#[utoipa::path(
    get,
    path = "/data/v1/ingest/sources",
    tag = "ingest",
    responses(
        (status = 200, description = "The sources, newest first", body = SourceList),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer now"), body = ErrorBody),
    ),
    security(("bearer" = ["write"]), ("api_key" = ["write"])),
)]
async fn list(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
) -> Result<HttpResponse, ApiError> {
    let kb = ws.kb.clone();
    let (records, total) = sources
        .offload
        .run(async move { kb.recent_sources(LISTED).await })
        .await??;
    let sources = records
        .into_iter()
        .map(|r| SourceSummary {
            chunks: r.chunks.len() as u64,
            updated_at: chrono::DateTime::from_timestamp_millis(r.updated_at)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            source: r.source,
            source_id: r.source_id,
            title: r.title,
            url: r.url,
            content_type: r.content_type,
            extracted_by: r.extracted_by,
        })
        .collect();
    Ok(HttpResponse::Ok().json(SourceList { sources, total }))
}

fn owner(req: &HttpRequest) -> Result<String, ApiError> {
    req.extensions()
        .get::<KeyIdentity>()
        .map(|k| k.id.to_string())
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidApiKey, "an API key is required"))
}

fn no_job() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no job of this key has this id")
}

fn too_large(field: &str, max: usize) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("{field} must be at most {max} bytes (ingest.max_source_bytes)"),
    );
    e.field = Some(field.to_string());
    e
}

fn check_optional(field: &str, value: Option<&str>) -> Result<(), ApiError> {
    match value {
        Some(v) if kbq_store::model::longer_than(v, kbq_store::model::MAX_TITLE_CHARS) => {
            Err(ApiError::invalid(
                field,
                format!(
                    "{field} must be at most {} characters",
                    kbq_store::model::MAX_TITLE_CHARS
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The one mapping of ingestion's refusals to answers (the MCP tools' too).
pub(crate) fn ingest_error(e: IngestError) -> ApiError {
    match e {
        IngestError::Unsupported(u) => {
            let mut e = ApiError::new(ErrorCode::UnsupportedMediaType, u.to_string());
            e.field = Some("content_type".into());
            e
        }
        IngestError::TooLarge { max, .. } => too_large("content", max),
        IngestError::Invalid { field, reason } => {
            ApiError::invalid(field, format!("{field} {reason}"))
        }
        IngestError::Busy(n) => ApiError::unavailable(format!(
            "{n} ingestion jobs are waiting (ingest.max_queued); retry later"
        )),
        IngestError::NotRunning => ApiError::unavailable("ingestion is restarting; retry"),
        IngestError::Store(e) => e.into(),
    }
}
