//! Ingestion of raw documents: a source's bytes become chunks (documents of the source),
//! entities and relationships extracted from each chunk by the configured model, resolved
//! against the graph's names, and the supports that say which chunk gave which fact.
//!
//! A job travels: [`Ingestor::submit`] (checks, stores the job) -> [`IngestActor`] (queues
//! jobs, runs at most `max_jobs` at once, takes over the unfinished jobs no live node holds) -> a job
//! task: parse (blocking pool) -> chunk -> extract (model calls through the provider actors,
//! at most `max_calls_in_flight` at once, each answer kept by chunk hash) -> wait to write,
//! with the other jobs waiting, as one group -> resolve -> write chunks, supports, new
//! entities and relationships (the group's together) -> retract what only the old version of
//! the source supported -> the source's record, last. Every write is idempotent, so a job
//! that stopped half way (cancelled, a node restarted) is completed by running it again, and
//! the kept answers mean the model is not asked twice for the same chunk.
//!
//! Progress is a [`JobView`] on a watch channel per job (HTTP polls it or streams it as
//! events) and in the job's record in the store.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use futures::StreamExt;
use kbq_ingest::provenance::{ChunkRef, Fact, SourceKey, Support, plan_delete, plan_replace};
use kbq_ingest::{
    Chunk, ChunkConfig, Decision, Extraction, Format, PROMPT_VERSION, ResolveConfig, SCHEMA_NAME,
    UnsupportedFormat,
};
use kbq_store::sources::{Retracted, SourceRecord, chunk_source_id, extraction_key, summary_key};
use kbq_store::{KnowledgeBase, NewDocument, NewEntity, NewRelationship, StoreError};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::agent::Agent;
use crate::backend::ChatRequest;
use crate::parser::{self, Parser};
use crate::pool::Slot;
use parking_lot::RwLock;

/// How ingestion runs: `[ingest]` in the configuration.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// How sources are cut into chunks.
    pub chunk: ChunkConfig,
    /// Model calls in flight at once, over all jobs.
    pub max_calls_in_flight: usize,
    /// Jobs that run at once; more wait in the queue.
    pub max_jobs: usize,
    /// Bytes of sources the running jobs hold at once; a job that would pass it waits (in
    /// its turn) until enough have ended, but runs alone whatever its size.
    pub max_running_bytes: u64,
    /// Jobs waiting at once; more are refused.
    pub max_queued: usize,
    /// The entity types the model is asked to look for (none: it chooses).
    pub entity_types: Vec<String>,
    /// The providers extraction asks, in order; `None`: every provider in priority order.
    pub providers: Option<Vec<String>>,
    /// Attempts per chunk when an answer breaks the schema (at least 1).
    pub attempts: u32,
    /// When two names are the same entity.
    pub resolve: ResolveConfig,
    /// Whether the model is asked to confirm a doubtful pair.
    pub confirm_doubtful: bool,
    /// Threads of the runtime jobs run on, apart from the main runtime; 0 runs them on the
    /// main runtime.
    pub threads: usize,
    /// How far below the main runtime's priority those threads run (nice steps).
    pub nice: u8,
    /// Whether those threads run in Linux's idle scheduling class (`SCHED_IDLE`) as well:
    /// below every thread of the normal class, however niced, so that a thread that wakes
    /// (a lookup's) takes the core at once, where a niced thread that holds it first runs
    /// out its slice. Under a load that keeps every core busy, ingestion then all but stops.
    pub idle_class: bool,
    /// Ended jobs this node keeps in memory; older ones are answered from the store.
    pub keep_ended_jobs: usize,
    /// How long after it ended a job is forgotten: its record goes from the store, and
    /// from this node's memory; `None`: never.
    pub forget_ended_after: Option<Duration>,
    /// Largest source accepted, in bytes.
    pub max_source_bytes: usize,
    /// How long a node holds its jobs without renewing its lease; the jobs of a node whose
    /// lease ended (it stopped) are taken over by another node.
    pub lease: Duration,
    /// Whether this node takes over the store's unfinished jobs that no live node holds (a
    /// server does; `kbq ingest` runs only its own).
    pub claims: bool,
    /// Distinct descriptions from which the model summarises an entity's (below, or with no
    /// model, the most representative is selected); 0: never summarise.
    pub summarise_after: usize,
    /// Where PDF and DOCX sources are parsed ([`crate::parser`]).
    pub parser: Parser,
    /// How long a source's parse may take before its job fails (HTML nested thousands deep
    /// parses in time that grows with the square of its depth).
    pub parse_timeout: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            chunk: ChunkConfig::default(),
            max_calls_in_flight: 8,
            max_jobs: 64,
            max_running_bytes: 256 << 20,
            max_queued: 1000,
            entity_types: Vec::new(),
            providers: None,
            attempts: 2,
            resolve: ResolveConfig::default(),
            confirm_doubtful: true,
            threads: 2,
            nice: 10,
            idle_class: false,
            keep_ended_jobs: 1000,
            forget_ended_after: Some(Duration::from_secs(7 * 24 * 3600)),
            max_source_bytes: 16 << 20,
            lease: Duration::from_secs(30),
            claims: true,
            summarise_after: 4,
            parser: Parser::InProcess,
            parse_timeout: Duration::from_secs(60),
        }
    }
}

/// Where a job is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobStatus {
    /// Whether the job has ended.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// What a job did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounts {
    /// Chunks of the source.
    pub chunks: u64,
    /// Chunks whose extraction failed (the model's answers broke the schema, or it failed).
    pub chunks_failed: u64,
    /// Calls made to a model (kept answers are not asked again).
    pub model_calls: u64,
    /// Entities that were not in the graph.
    pub entities_added: u64,
    /// Names resolved to an entity of another name already in the graph or the source.
    pub entities_merged: u64,
    /// Relationships that were not in the graph.
    pub relationships_added: u64,
    /// Entities and relationships removed because only the old version of the source
    /// supported them.
    pub entities_retracted: u64,
    pub relationships_retracted: u64,
}

/// A job as clients see it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub job_id: String,
    pub status: JobStatus,
    pub source: String,
    pub source_id: String,
    /// Chunks whose extraction is done (or that needed none), of `chunks_total`.
    pub chunks_done: u64,
    pub chunks_total: u64,
    pub counts: JobCounts,
    /// Why the job failed.
    pub error: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub updated_at: i64,
}

/// A source as submitted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceInput {
    pub source: String,
    pub source_id: String,
    pub title: Option<String>,
    pub url: Option<String>,
    /// The content type the client gave, if any.
    pub content_type: Option<String>,
    /// The file name the client gave, if any (its extension tells the format).
    pub file_name: Option<String>,
    /// Kept apart from the job's record in the store ([`KnowledgeBase::put_job`]); a
    /// record written before that holds it as hex.
    #[serde(skip_serializing, default, deserialize_with = "hex_bytes::deserialize")]
    pub content: Vec<u8>,
}

/// A job as the store keeps it: what the client sees, whose it is, and the input, so that a
/// job can be run again after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobRecord {
    view: JobView,
    owner: String,
    format: Format,
    input: SourceInput,
}

/// Why a submission or a call was refused.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Unsupported(#[from] UnsupportedFormat),
    #[error("content: must be at most {max} bytes, got {got}")]
    TooLarge { max: usize, got: usize },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("ingestion is busy: {0} jobs waiting")]
    Busy(usize),
    #[error("ingestion is not running")]
    NotRunning,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What deleting a source did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SourceDeletion {
    pub chunks: u64,
    pub entities: u64,
    pub relationships: u64,
}

/// One job known to this node.
struct Running {
    owner: String,
    progress: watch::Sender<JobView>,
    cancel: CancellationToken,
    /// Held while the job's record is read and written again, so that the job's task and a
    /// cancellation never write it at once (the store would refuse one with a conflict).
    record: tokio::sync::Mutex<()>,
    /// The bytes of its source, counted against `max_running_bytes` while it runs.
    bytes: u64,
    /// The keys its chunks' model answers are kept under, with each chunk's hash, once it
    /// asks a model, and its confirmations' keys (with no hash): a job that fails or is
    /// cancelled leaves them in its record, and they go with the record (unless a source
    /// holds the chunk, or lists the confirmation).
    kept: parking_lot::Mutex<Vec<(String, String)>>,
}

/// What jobs share: the store, the model, the settings, and the jobs known to this node.
pub struct IngestDeps {
    kb: Arc<KnowledgeBase>,
    agent: Agent,
    config: IngestConfig,
    /// Whether a model answers extraction (not the built-in provider alone).
    model: Option<String>,
    jobs: parking_lot::Mutex<HashMap<Uuid, Arc<Running>>>,
    /// One lock per source, so that two jobs (or a job and a delete) of one source never
    /// interleave their writes.
    sources: parking_lot::Mutex<HashMap<SourceKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Shared by every workspace's ingestor: the bound is the node's.
    calls: Arc<tokio::sync::Semaphore>,
    /// Held by a group of jobs while it resolves and writes, and by a source's deletion.
    writes: tokio::sync::Mutex<()>,
    /// Held while entities' descriptions are remade, so that the last to run reads every
    /// description written before it.
    describing: tokio::sync::Mutex<()>,
    /// Jobs waiting to write; the next group takes them all.
    pending: parking_lot::Mutex<Vec<Pending>>,
    /// The runtime jobs run on (`None`: the caller's).
    runtime: Option<tokio::runtime::Handle>,
    /// This node's name in its jobs and its lease: a new one each time the node starts.
    node: String,
    /// When this node last forgot the jobs that ended too long ago.
    forgot: parking_lot::Mutex<Option<std::time::Instant>>,
}

/// The edge's handle on ingestion.
#[derive(Clone)]
pub struct Ingestor {
    deps: Arc<IngestDeps>,
    actor: Slot<ActorRef<IngestMessage>>,
}

/// Starts the ingestors of workspaces other than `default`, each with an IngestActor of its
/// own that the root supervises, and stops them when their workspace goes.
#[derive(Clone)]
pub struct Ingestors {
    shared: IngestShared,
    root: ActorRef<crate::root::RootMessage>,
}

impl Ingestors {
    pub(crate) fn new(shared: IngestShared, root: ActorRef<crate::root::RootMessage>) -> Self {
        Ingestors { shared, root }
    }

    /// The ingestor of `kb`, its actor running: it resumes the unfinished jobs of `kb` as
    /// the default workspace's does at start-up.
    pub async fn start(&self, kb: Arc<KnowledgeBase>) -> Result<Ingestor, IngestError> {
        let ingestor = Ingestor::new(kb, &self.shared, Arc::new(RwLock::new(None)));
        let started = ractor::call!(
            self.root,
            crate::root::RootMessage::StartIngest,
            (ingestor.deps(), ingestor.slot())
        );
        started.map_err(|_| IngestError::NotRunning)?;
        Ok(ingestor)
    }

    /// Stops `ingestor`'s actor for good: its workspace was deleted. Its jobs stop with it.
    pub fn stop(&self, ingestor: &Ingestor) {
        let _ = self
            .root
            .cast(crate::root::RootMessage::StopIngest(ingestor.slot()));
    }
}

/// What every workspace's ingestor shares: the agent whose providers answer extraction, the
/// settings, the model, the runtime jobs run on, and the node's bound on model calls.
#[derive(Clone)]
pub(crate) struct IngestShared {
    pub(crate) agent: Agent,
    pub(crate) config: IngestConfig,
    pub(crate) model: Option<String>,
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    pub(crate) calls: Arc<tokio::sync::Semaphore>,
}

impl IngestShared {
    pub(crate) fn new(
        agent: Agent,
        config: IngestConfig,
        model: Option<String>,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        // The entity types asked for are part of the prompt: answers kept for other types
        // are not this model's answers to it.
        let model = model.map(|m| match config.entity_types.is_empty() {
            true => m,
            false => format!("{m};types={}", config.entity_types.join(",")),
        });
        let calls = Arc::new(tokio::sync::Semaphore::new(
            config.max_calls_in_flight.max(1),
        ));
        IngestShared {
            agent,
            config,
            model,
            runtime,
            calls,
        }
    }
}

impl Ingestor {
    /// The ingestor of `kb` (one workspace's knowledge base), whose actor the root starts
    /// into `actor`.
    pub(crate) fn new(
        kb: Arc<KnowledgeBase>,
        shared: &IngestShared,
        actor: Slot<ActorRef<IngestMessage>>,
    ) -> Self {
        let IngestShared {
            agent,
            config,
            model,
            runtime,
            calls,
        } = shared.clone();
        Ingestor {
            deps: Arc::new(IngestDeps {
                kb,
                agent,
                config,
                model,
                jobs: Default::default(),
                forgot: Default::default(),
                sources: Default::default(),
                calls,
                writes: Default::default(),
                describing: Default::default(),
                pending: Default::default(),
                runtime,
                node: Uuid::new_v4().to_string(),
            }),
            actor,
        }
    }

    pub(crate) fn deps(&self) -> Arc<IngestDeps> {
        self.deps.clone()
    }

    pub(crate) fn slot(&self) -> Slot<ActorRef<IngestMessage>> {
        self.actor.clone()
    }

    /// The knowledge base sources are written to.
    pub fn knowledge_base(&self) -> &Arc<KnowledgeBase> {
        &self.deps.kb
    }

    /// The settings.
    pub fn config(&self) -> &IngestConfig {
        &self.deps.config
    }

    /// Whether a model extracts entities and relationships; without one, chunks are linked
    /// to the entities already in the graph that they name.
    pub fn extracts(&self) -> bool {
        self.deps.model.is_some()
    }

    /// The jobs this node holds in memory: (queued, running, ended).
    pub fn jobs_here(&self) -> (u64, u64, u64) {
        self.deps.jobs_here()
    }

    /// Checks `input`, stores its job and queues it. Answers the job as queued.
    pub async fn submit(&self, input: SourceInput, owner: &str) -> Result<JobView, IngestError> {
        let format = kbq_ingest::detect(input.content_type.as_deref(), input.file_name.as_deref())?;
        let max = self.deps.config.max_source_bytes;
        if input.content.len() > max {
            return Err(IngestError::TooLarge {
                max,
                got: input.content.len(),
            });
        }
        check_source_name("source", &input.source)?;
        check_source_name("source_id", &input.source_id)?;
        let Some(actor) = self.actor.read().clone() else {
            return Err(IngestError::NotRunning);
        };
        let (queued, running, _) = self.deps.jobs_here();
        let queued = (queued + running) as usize;
        if queued >= self.deps.config.max_queued {
            return Err(IngestError::Busy(queued));
        }
        let now = now_ms();
        let job_id = Uuid::new_v4();
        let view = JobView {
            job_id: job_id.to_string(),
            status: JobStatus::Queued,
            source: input.source.clone(),
            source_id: input.source_id.clone(),
            chunks_done: 0,
            chunks_total: 0,
            counts: JobCounts::default(),
            error: None,
            created_at: now,
            updated_at: now,
        };
        let record = JobRecord {
            view: view.clone(),
            owner: owner.to_string(),
            format,
            input,
        };
        self.deps.save(&record).await?;
        self.deps.register(job_id, &record);
        actor
            .cast(IngestMessage::Run(job_id))
            .map_err(|_| IngestError::NotRunning)?;
        Ok(view)
    }

    /// The job `job_id` of `owner` (another owner's job is not found).
    pub async fn job(&self, job_id: &str, owner: &str) -> Result<Option<JobView>, IngestError> {
        let Ok(id) = Uuid::parse_str(job_id) else {
            return Ok(None);
        };
        if let Some(r) = self.deps.jobs.lock().get(&id).cloned() {
            return Ok((r.owner == owner).then(|| r.progress.borrow().clone()));
        }
        // A job another node ran, or this node before a restart.
        Ok(self
            .deps
            .load(id)
            .await?
            .filter(|r| r.owner == owner)
            .map(|r| r.view))
    }

    /// Follows the job `job_id` of `owner` as it runs; `None` when it is not known here.
    pub fn watch(&self, job_id: &str, owner: &str) -> Option<watch::Receiver<JobView>> {
        let id = Uuid::parse_str(job_id).ok()?;
        let r = self.deps.jobs.lock().get(&id).cloned()?;
        (r.owner == owner).then(|| r.progress.subscribe())
    }

    /// Cancels the job `job_id` of `owner`; what it wrote stays consistent (see the module's
    /// docs). Answers the job, `None` when it is not found.
    pub async fn cancel(&self, job_id: &str, owner: &str) -> Result<Option<JobView>, IngestError> {
        let Ok(id) = Uuid::parse_str(job_id) else {
            return Ok(None);
        };
        let running = self.deps.jobs.lock().get(&id).cloned();
        match running {
            Some(r) if r.owner == owner => {
                r.cancel.cancel();
                let view = r.progress.borrow().clone();
                if view.status == JobStatus::Queued {
                    // Not started: it ends here.
                    let view = self.deps.finish(id, JobStatus::Cancelled, None).await?;
                    return Ok(Some(view));
                }
                Ok(Some(view))
            }
            Some(_) => Ok(None),
            // Another node holds the job (or none does yet): ask, through the store, whoever
            // holds it to cancel it; it hears at its next renewal.
            None => {
                let Some(record) = self.deps.load(id).await?.filter(|r| r.owner == owner) else {
                    return Ok(None);
                };
                if !record.view.status.is_final() {
                    self.deps.kb.request_cancel(job_id).await?;
                }
                Ok(Some(record.view))
            }
        }
    }

    /// Retracts `source`: its chunks, and every fact no other source (nor an import)
    /// supports. `None` when it was never ingested.
    pub async fn delete_source(
        &self,
        source: &SourceKey,
    ) -> Result<Option<SourceDeletion>, IngestError> {
        let lock = self.deps.source_lock(source);
        let _held = lock.lock().await;
        let writing = self.deps.writes.lock().await;
        let mut phases = Phases::start();
        let kb = &self.deps.kb;
        let Some(record) = kb.source_record(source).await? else {
            return Ok(None);
        };
        let facts = kb.supports_of(source, &[]).await?;
        let plan = plan_delete(&facts, source);
        phases.mark("plan");
        let retracted = kb.retract(&plan).await?;
        phases.mark("retract");
        let positions: Vec<u32> = (0..record.chunks.len() as u32).collect();
        let chunks = kb.delete_chunks(source, &positions).await?;
        kb.delete_source_record(source).await?;
        phases.mark("chunks");
        forget_answers(kb, &record, &[], &BTreeSet::new()).await;
        drop(writing);
        // The entities that keep other sources' descriptions get theirs remade without this
        // source's. A failure here leaves the old description, not a half-retracted source.
        if let Err(e) = self
            .deps
            .describe(None, touched(&plan, &BTreeMap::new()))
            .await
        {
            tracing::warn!(error = %e, "descriptions not remade after a retraction");
        }
        phases.mark("descriptions");
        tracing::debug!(source = %source.source, source_id = %source.source_id, %phases, "source deleted");
        Ok(Some(SourceDeletion {
            chunks,
            entities: retracted.entities,
            relationships: retracted.relationships,
        }))
    }
}

fn check_source_name(field: &'static str, value: &str) -> Result<(), IngestError> {
    kbq_store::model::check_name(field, value).map_err(|e| IngestError::Invalid {
        field,
        reason: match e {
            StoreError::Invalid { reason, .. } => reason,
            other => other.to_string(),
        },
    })
}

impl IngestDeps {
    /// The jobs this node holds in memory: (queued, running, ended).
    fn jobs_here(&self) -> (u64, u64, u64) {
        let mut counts = (0, 0, 0);
        for r in self.jobs.lock().values() {
            match r.progress.borrow().status {
                JobStatus::Queued => counts.0 += 1,
                JobStatus::Running => counts.1 += 1,
                _ => counts.2 += 1,
            }
        }
        counts
    }

    fn source_lock(&self, source: &SourceKey) -> Arc<tokio::sync::Mutex<()>> {
        self.sources
            .lock()
            .entry(source.clone())
            .or_default()
            .clone()
    }

    fn register(&self, id: Uuid, record: &JobRecord) -> Arc<Running> {
        let running = Arc::new(Running {
            owner: record.owner.clone(),
            progress: watch::Sender::new(record.view.clone()),
            cancel: CancellationToken::new(),
            record: tokio::sync::Mutex::new(()),
            // A record taken over from the store comes without its input: counted at the
            // largest a source may be.
            bytes: match record.input.content.len() {
                0 => self.config.max_source_bytes as u64,
                n => n as u64,
            },
            kept: Default::default(),
        });
        self.jobs.lock().insert(id, running.clone());
        running
    }

    /// Stores a new job's record, and its input beside it.
    async fn save(&self, record: &JobRecord) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let value = serde_json::to_value(record)
            .map_err(|e| StoreError::Query(format!("job record: {e}")))?;
        let input = Some(record.input.content.clone());
        let saved = self
            .kb
            .put_job(&record.view.job_id, value, &self.node, input)
            .await;
        tracing::debug!(job = %record.view.job_id, took_ms = started.elapsed().as_secs_f64() * 1e3, "job record saved");
        saved
    }

    /// Renews this node's lease (one row, however many jobs it holds), and cancels the jobs
    /// of this node whose cancellation another node asked for.
    async fn renew(&self) {
        let until = now_ms() + self.config.lease.as_millis() as i64;
        if let Err(e) = self.kb.heartbeat(&self.node, until).await {
            tracing::warn!(error = %e, "the node's lease on its ingest jobs not renewed");
        }
        self.forget_ended().await;
        let (queued, running, _) = self.jobs_here();
        if queued + running == 0 {
            return;
        }
        match self.kb.cancels_asked(&self.node).await {
            Ok(cancel) => {
                for id in cancel {
                    let running = Uuid::parse_str(&id)
                        .ok()
                        .and_then(|id| self.jobs.lock().get(&id).cloned());
                    if let Some(r) = running {
                        tracing::info!(job = %id, "ingest job cancelled from another node");
                        r.cancel.cancel();
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cancellations asked for not read"),
        }
    }

    /// Forgets the jobs that ended longer ago than `forget_ended_after`: their records in
    /// the store (any node's: every node does this, and a record goes once), and this
    /// node's memory of them. At most once per [`FORGET_EVERY`], or per
    /// `forget_ended_after` when that is shorter.
    async fn forget_ended(&self) {
        let Some(after) = self.config.forget_ended_after else {
            return;
        };
        {
            let mut forgot = self.forgot.lock();
            if forgot.is_some_and(|t| t.elapsed() < after.min(FORGET_EVERY)) {
                return;
            }
            *forgot = Some(std::time::Instant::now());
        }
        let before = now_ms() - after.as_millis() as i64;
        match self.kb.forget_ended_jobs(before).await {
            Ok(0) => {}
            Ok(forgotten) => tracing::info!(forgotten, "ended ingest jobs forgotten"),
            Err(e) => tracing::warn!(error = %e, "ended ingest jobs not forgotten"),
        }
        self.jobs.lock().retain(|_, r| {
            let view = r.progress.borrow();
            !(view.status.is_final() && view.updated_at < before)
        });
    }

    /// The job's stored record, without its input ([`Self::load_input`]).
    async fn load(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        Ok(self
            .kb
            .job(&id.to_string())
            .await?
            .and_then(|v| serde_json::from_value(v).ok()))
    }

    /// The job's stored record with its input, to run it.
    async fn load_input(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let Some(mut record) = self.load(id).await? else {
            return Ok(None);
        };
        // A record written before inputs were kept apart holds its own.
        if record.input.content.is_empty()
            && let Some(content) = self.kb.job_input(&id.to_string()).await?
        {
            record.input.content = content;
        }
        Ok(Some(record))
    }

    /// Updates the job's view (and its record, when `persist`: a change of status or error,
    /// stored before it is shown).
    async fn update(
        &self,
        id: Uuid,
        persist: bool,
        change: impl FnOnce(&mut JobView),
    ) -> Result<JobView, StoreError> {
        let running = self.jobs.lock().get(&id).cloned();
        let Some(running) = running else {
            return Err(StoreError::Query(format!("job {id} is not known here")));
        };
        if !persist {
            running.progress.send_modify(|v| {
                change(v);
                v.updated_at = now_ms();
            });
            return Ok(running.progress.borrow().clone());
        }
        // A status is stored before it is shown: whoever sees a job end (a client, or `kbq
        // ingest`, which then exits) finds its record ended too. It is shown even when the
        // store refused it: the job has ended here.
        let _writing = running.record.lock().await;
        let mut view = running.progress.borrow().clone();
        change(&mut view);
        view.updated_at = now_ms();
        // A job that failed or was cancelled leaves the keys of the answers it may have kept
        // in its record, to go with it.
        let kept = match view.status {
            JobStatus::Failed | JobStatus::Cancelled => running.kept.lock().clone(),
            _ => Vec::new(),
        };
        let stored = match serde_json::to_value(&view) {
            Ok(value) => self.kb.put_job_end(&view.job_id, value, kept).await,
            Err(e) => Err(StoreError::Query(format!("job view: {e}"))),
        };
        running.progress.send_modify(|v| {
            v.status = view.status;
            v.error = view.error.clone();
            v.updated_at = view.updated_at;
        });
        stored?;
        Ok(running.progress.borrow().clone())
    }

    async fn finish(
        &self,
        id: Uuid,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<JobView, StoreError> {
        self.update(id, true, |v| {
            v.status = status;
            v.error = error;
        })
        .await
    }

    /// Runs the job `id` to its end and records how it ended.
    async fn run(self: Arc<Self>, id: Uuid) {
        let running = self.jobs.lock().get(&id).cloned();
        let Some(running) = running else { return };
        if running.progress.borrow().status.is_final() {
            return;
        }
        let record = match self.load_input(id).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "ingest job not read");
                return;
            }
        };
        let source = SourceKey::new(&record.input.source, &record.input.source_id);
        let lock = self.source_lock(&source);
        let held = tokio::select! {
            held = lock.lock() => held,
            _ = running.cancel.cancelled() => {
                let _ = self.finish(id, JobStatus::Cancelled, None).await;
                return;
            }
        };
        let _ = self
            .update(id, true, |v| v.status = JobStatus::Running)
            .await;
        // A job is a trace of its own: its chunks, model calls and statements are in it. Like
        // a request's, its span is `info`: every log line of the job carries its id.
        let span = tracing::info_span!(
            "ingest.job",
            otel.name = "ingest job",
            kbq.job_id = %id,
            kbq.source = %source.source,
            kbq.source_id = %source.source_id,
        );
        let outcome = self
            .ingest(id, &record, &source, &running.cancel)
            .instrument(span)
            .await;
        drop(held);
        let ended = match outcome {
            Ok(()) => self.finish(id, JobStatus::Succeeded, None).await,
            Err(JobFailure::Cancelled) => self.finish(id, JobStatus::Cancelled, None).await,
            Err(JobFailure::Failed(e)) => {
                tracing::warn!(job = %id, error = %e, "ingest job failed");
                self.finish(id, JobStatus::Failed, Some(e)).await
            }
        };
        if let Err(e) = ended {
            tracing::warn!(job = %id, error = %e, "ingest job's end not recorded");
        }
    }

    /// The pipeline for one source. A cancellation is heeded until the writes begin; from
    /// there the job runs to its end (the writes take a fraction of the time the model
    /// does), so that a cancelled job leaves the old version or the new, never a mix.
    async fn ingest(
        &self,
        id: Uuid,
        record: &JobRecord,
        source: &SourceKey,
        cancel: &CancellationToken,
    ) -> Result<(), JobFailure> {
        match self.prepare(id, record, source, cancel).await? {
            Some(prepared) => self.write(prepared, cancel).await,
            None => Ok(()),
        }
    }

    /// Everything before the writes: parse, chunk, and extract (or find the graph's names
    /// each chunk mentions). `None` when the source is unchanged: nothing to write.
    async fn prepare(
        &self,
        id: Uuid,
        record: &JobRecord,
        source: &SourceKey,
        cancel: &CancellationToken,
    ) -> Result<Option<Prepared>, JobFailure> {
        let mut phases = Phases::start();
        let input = &record.input;
        let format = record.format;
        let content: Arc<[u8]> = input.content.as_slice().into();
        let parsing = parser::parse(
            &self.config.parser,
            content,
            format,
            self.config.parse_timeout,
        );
        let parsed = tokio::select! {
            parsed = parsing => parsed.map_err(JobFailure::Failed)?,
            _ = cancel.cancelled() => return Err(JobFailure::Cancelled),
        };
        phases.mark("parse");
        let chunks = kbq_ingest::chunk(&parsed, &self.config.chunk);
        let content_hash = hex::encode(Sha256::digest(&input.content));
        let hashes: Vec<String> = chunks.iter().map(|c| c.hash.clone()).collect();
        let old = self.kb.source_record(source).await?;
        let total = chunks.len() as u64;
        self.update(id, false, |v| {
            v.chunks_total = total;
            v.counts.chunks = total;
        })
        .await?;
        if let Some(old) = &old
            && old.content_hash == content_hash
            && old.chunks == hashes
            && old.extracted_by == self.model
        {
            // The same content as the version stored: nothing to do, nothing to ask.
            self.update(id, false, |v| v.chunks_done = total).await?;
            return Ok(None);
        }
        let title = input
            .title
            .clone()
            .or_else(|| parsed.title.clone())
            .unwrap_or_else(|| input.source_id.clone());

        if let Some(model) = &self.model
            && let Some(running) = self.jobs.lock().get(&id)
        {
            *running.kept.lock() = (hashes.iter().collect::<BTreeSet<_>>().into_iter())
                .map(|hash| (hash.clone(), extraction_key(hash, model, PROMPT_VERSION)))
                .collect();
        }
        // Extraction, or (without a model) the graph's names each chunk mentions.
        let finding = async {
            match &self.model {
                Some(model) => self.extract_all(id, &chunks, &title, model).await,
                None => {
                    let found = self.mentions_all(id, &chunks).await?;
                    let failed = vec![false; found.len()];
                    Ok((found, failed))
                }
            }
        };
        let (found, failed): (Vec<Option<Extraction>>, Vec<bool>) = tokio::select! {
            found = finding => found?,
            _ = cancel.cancelled() => return Err(JobFailure::Cancelled),
        };
        phases.mark("extract");
        let pairs = match &self.model {
            Some(model) if self.config.confirm_doubtful => {
                self.confirm_doubtful(id, &found, model).await?
            }
            _ => Pairs::default(),
        };
        phases.mark("confirm");
        Ok(Some(Prepared {
            id,
            source: source.clone(),
            url: input.url.clone(),
            content_type: format.content_type().to_string(),
            title,
            chunks,
            content_hash,
            hashes,
            found,
            failed,
            old,
            pairs,
            asked_again: 0,
            phases,
        }))
    }

    /// Writes a prepared job, with whatever other jobs are waiting to write (a group
    /// commit): the jobs that wait while a group writes are written together by the next,
    /// in statements of many rows that run on several cores. One group writes at a time:
    /// two groups naming one entity would otherwise both find it missing and both write it
    /// (a store transaction conflict, or one's type and description over the other's), and
    /// resolution reads the graph the writes change. Extraction, the slow part, still runs
    /// for every job at once.
    async fn write(
        &self,
        mut prepared: Prepared,
        cancel: &CancellationToken,
    ) -> Result<(), JobFailure> {
        let id = prepared.id;
        let touched = loop {
            let (done, mut result) = tokio::sync::oneshot::channel();
            self.pending.lock().push(Pending { prepared, done });
            let written = tokio::select! {
                // Written by the group another job led while this one waited: done, without
                // taking the lock, which would make this job lead (and wait for) the next
                // group.
                written = &mut result => written,
                writing = self.writes.lock() => {
                    let group = std::mem::take(&mut *self.pending.lock());
                    if !group.is_empty() {
                        self.write_group(group).await;
                    }
                    drop(writing);
                    result.await
                }
                _ = cancel.cancelled() => {
                    // Cancelled while waiting: withdrawn, unless a group has taken it already.
                    let withdrawn = {
                        let mut pending = self.pending.lock();
                        let at = pending.iter().position(|p| p.prepared.id == id);
                        at.map(|at| pending.swap_remove(at)).is_some()
                    };
                    if withdrawn {
                        return Err(JobFailure::Cancelled);
                    }
                    result.await
                }
            };
            match written.unwrap_or_else(|_| Err(lost_write()))? {
                Written::Done(touched) => break touched,
                Written::AskAgain(back) => {
                    // Nothing of it was written: its pairs are asked again against the graph
                    // as it is now (answers already kept are not asked twice).
                    prepared = *back;
                    prepared.asked_again += 1;
                    if let Some(model) = &self.model {
                        let asking = self.confirm_doubtful(id, &prepared.found, model);
                        prepared.pairs = tokio::select! {
                            pairs = asking => pairs?,
                            _ = cancel.cancelled() => return Err(JobFailure::Cancelled),
                        };
                    }
                    prepared.phases.mark("ask again");
                }
            }
        };
        // After the write lock: a summary may wait for the model.
        Ok(self.describe(Some(id), touched).await?)
    }

    /// Remakes the description of each entity in `touched` from the descriptions every
    /// source's chunks gave of it ([`kbq_ingest::summary`]): the most representative one, or,
    /// from `ingest.summarise_after` distinct ones and with a model, the model's summary of
    /// them, asked again only when their count reaches the next doubling or falls. An
    /// import's entity, and one no longer in the graph, are left as they are. Model calls
    /// count in the job `id`'s.
    async fn describe(&self, id: Option<Uuid>, touched: Touched) -> Result<(), StoreError> {
        if touched.is_empty() {
            return Ok(());
        }
        let asked = std::time::Instant::now();
        let _held = self.describing.lock().await;
        let held = std::time::Instant::now();
        let result = self.describe_held(id, &touched).await;
        tracing::debug!(job = ?id, entities = touched.len(), waited_ms = (held - asked).as_secs_f64() * 1e3, took_ms = held.elapsed().as_secs_f64() * 1e3, "descriptions remade");
        result
    }

    /// [`Self::describe`], the lock held.
    async fn describe_held(&self, id: Option<Uuid>, touched: &Touched) -> Result<(), StoreError> {
        // Descriptions added that say what the entity's description says, with none taken,
        // change nothing: the entity is not read again. (Its description is one of its
        // descriptions, so the distinct ones stay the same; or a summary, which a chunk
        // would have to repeat word for word.)
        // An entity no longer in the graph is left alone.
        let mut entities = HashMap::with_capacity(touched.len());
        for (name, touch) in touched {
            let Some(entity) = self.kb.entity(name).await? else {
                continue;
            };
            let current = entity_description(&entity);
            if touch.dropped == 0
                && !current.is_empty()
                && touch
                    .texts
                    .iter()
                    .all(|t| kbq_ingest::summary::same(t, current))
            {
                continue;
            }
            entities.insert(name.clone(), entity);
        }
        if entities.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = entities.keys().cloned().collect();
        let after = self.config.summarise_after;
        let mut changed = Vec::new();
        for d in self.kb.descriptions_of(&names).await? {
            if d.imported {
                continue;
            }
            let entity = &entities[&d.entity];
            let touch = &touched[&d.entity];
            let now = kbq_ingest::summary::distinct(d.texts.iter().map(|(_, t)| t.as_str()));
            let current = entity_description(entity);
            let level = kbq_ingest::summary::level(now.len(), after);
            let description = match (level, &self.model) {
                (Some(level), Some(model)) => {
                    let before = kbq_ingest::summary::distinct(
                        d.texts
                            .iter()
                            .filter(|(s, _)| !touch.added.contains(s))
                            .map(|(_, t)| t.as_str()),
                    );
                    let due = touch.dropped > 0
                        || kbq_ingest::summary::level(before.len(), after) != Some(level)
                        || current.is_empty();
                    if !due {
                        continue;
                    }
                    let ranked = kbq_ingest::summary::ranked(&now);
                    match self.summarise(id, entity, &ranked, model).await? {
                        Some(summary) => summary,
                        // No answer kept the schema: the selection.
                        None => ranked[0].to_string(),
                    }
                }
                _ => kbq_ingest::summary::select(&now)
                    .unwrap_or_default()
                    .to_string(),
            };
            if description != current {
                let mut properties = entity.properties.clone();
                match description.is_empty() {
                    true => properties.remove("description"),
                    false => properties.insert("description".into(), Value::String(description)),
                };
                changed.push(NewEntity {
                    name: entity.name.clone(),
                    entity_type: entity.entity_type.clone(),
                    properties,
                });
            }
        }
        self.kb.upsert_entities(&changed).await
    }

    /// The model's description of `entity` from `texts` (the most representative first),
    /// kept by its question; `None` when no answer kept the schema.
    async fn summarise(
        &self,
        id: Option<Uuid>,
        entity: &kbq_store::model::Entity,
        texts: &[&str],
        model: &str,
    ) -> Result<Option<String>, StoreError> {
        use kbq_ingest::summary;
        let (system, user) = summary::messages(&entity.name, &entity.entity_type, texts);
        // One summary is kept per entity, the last asked: a summary asked for other
        // descriptions (or of another model, or prompt) is not this question's answer.
        let asked = hex::encode(Sha256::digest(format!(
            "{system}\0{user}\0{model}\0{}",
            summary::PROMPT_VERSION
        )));
        let request =
            || structured_request(system, user, summary::SCHEMA_NAME, summary::json_schema());
        let fresh = |kept: &KeptSummary| kept.asked == asked;
        let kept = self
            .ask_kept(
                id,
                &summary_key(&entity.name),
                request,
                "summary",
                fresh,
                |text| {
                    let description =
                        summary::validate(text).ok_or("not {\"description\": text}")?;
                    Ok::<_, &str>(KeptSummary {
                        asked: asked.clone(),
                        description,
                    })
                },
            )
            .await?;
        Ok(kept.map(|k| k.description))
    }

    /// Writes a group of jobs of different sources, each job's outcome sent to it: chunks,
    /// then every job's supports, then the new entities and relationships, then each job's
    /// retractions and source record. A job whose reads fail fails alone; a write that fails
    /// fails every job of the group, and each is completed by running it again (the order
    /// above is the single job's).
    async fn write_group(&self, group: Vec<Pending>) {
        let kb = &self.kb;
        let mut phases = Phases::start();
        let size = group.len();
        let mut jobs: Vec<Writing> = Vec::with_capacity(size);
        // The names the group's jobs add to the graph, in the order resolved: a later job's
        // near spelling of one is that entity, as it would be had the first job been written
        // alone before it.
        let mut group_added: Vec<(String, String)> = Vec::new();
        for Pending { mut prepared, done } in group {
            prepared.phases.mark("wait to write");
            match self.resolve(&prepared, &mut group_added).await {
                Ok(Some(resolved)) => {
                    jobs.push(Writing::new(prepared, resolved, done, &self.model))
                }
                Ok(None) => {
                    let _ = done.send(Ok(Written::AskAgain(Box::new(prepared))));
                }
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            }
        }
        phases.mark("resolve");
        // The chunks' documents are written beside the graph's writes: they depend on none of
        // them, and their statement runs on a task of its own (the analysis and embedding of
        // their text with it), so the two share the cores. A job has ended only once both
        // have, and its source's record is written after.
        let chunk_documents: Vec<NewDocument> = jobs.iter().flat_map(Writing::documents).collect();
        let documents = async {
            let started = std::time::Instant::now();
            kb.upsert_documents(&chunk_documents).await?;
            Ok::<_, StoreError>(started.elapsed())
        };
        let graph = async {
            // What is in the graph already, read before anything is written: a fact there
            // that no source supports is an import's, and no source's deletion takes it away.
            let mut names: BTreeSet<&str> = BTreeSet::new();
            let mut relationships: BTreeMap<(&str, &str, &str), &NewRelationship> = BTreeMap::new();
            for job in &jobs {
                names.extend(job.entities.keys().map(String::as_str));
                for (key, r) in &job.relationships {
                    relationships
                        .entry((key.0.as_str(), key.1.as_str(), key.2.as_str()))
                        .or_insert(r);
                }
            }
            let names: Vec<String> = names.into_iter().map(str::to_string).collect();
            let missing: BTreeSet<String> =
                kb.missing_entities(&names).await?.into_iter().collect();
            let relationships: Vec<NewRelationship> =
                relationships.into_values().cloned().collect();
            let new_relationships = kb.missing_relationships(&relationships).await?;
            let new_edges: BTreeSet<(&str, &str, &str)> = new_relationships
                .iter()
                .map(|r| {
                    (
                        r.source_name.as_str(),
                        r.target_name.as_str(),
                        r.relationship_type.as_str(),
                    )
                })
                .collect();
            phases.mark("read graph");

            // Each job's supports, read on tasks of their own so that the jobs' reads run on
            // several cores: all of the source's own, and another origin's only for a fact
            // that was there before the group without the store's mark of a fact with
            // supports. Such a fact with none at all is an import's. Any other fact of the new
            // version stays for this version's sake whatever others say: the planner needs
            // another origin's supports only to decide whether a fact the old version gave
            // goes, and reads those among the source's own.
            let existed = |fact: &Fact| match fact {
                Fact::Entity { name } => names.contains(name) && !missing.contains(name),
                Fact::Relationship {
                    source,
                    target,
                    relationship_type,
                } => !new_edges.contains(&(
                    source.as_str(),
                    target.as_str(),
                    relationship_type.as_str(),
                )),
                _ => false,
            };
            // A fact several jobs name is asked about once: `unsourced` keys them.
            let were_there: Vec<Fact> = jobs
                .iter()
                .flat_map(|j| j.new_version.keys())
                .filter(|fact| existed(fact))
                .cloned()
                .collect();
            let unsourced: BTreeSet<Fact> = kb.unsourced(&were_there).await?.into_iter().collect();
            let reads: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let known: Vec<Fact> = job
                        .new_version
                        .keys()
                        .filter(|fact| unsourced.contains(*fact))
                        .cloned()
                        .collect();
                    let (kb, source) = (kb.clone(), job.prepared.source.clone());
                    tokio::spawn(async move { kb.supports_of(&source, &known).await })
                })
                .collect();
            // Every fact a job of the group names: another job's supports of it are written
            // before a job's retractions, but were not there when its plan read the store.
            let named: BTreeSet<Fact> = jobs
                .iter()
                .flat_map(|j| j.new_version.keys().cloned())
                .collect();
            let mut imports = Vec::new();
            let mut add_supports = Vec::new();
            let mut retext = Vec::new();
            let mut texts = BTreeMap::new();
            for (job, read) in jobs.iter_mut().zip(reads) {
                let mut facts = read
                    .await
                    .map_err(|e| StoreError::Query(format!("reading supports failed: {e}")))??;
                for (fact, supports) in &mut facts {
                    if supports.is_empty() && existed(fact) {
                        supports.push(Support::Import);
                        imports.push((fact.clone(), Support::Import));
                    }
                }
                let new_version: Vec<(Fact, Vec<u32>)> = job
                    .new_version
                    .iter()
                    .map(|(f, c)| (f.clone(), c.iter().copied().collect()))
                    .collect();
                let mut plan = plan_replace(&facts, &job.prepared.source, &new_version);
                if job.prepared.failed.iter().any(|&f| f) {
                    // What the failed chunks said is not known: nothing the old version
                    // supported is retracted until a submission reads every chunk (the next
                    // one asks again).
                    plan.remove.clear();
                    plan.drop_supports.clear();
                }
                // A fact to remove that another job names stays, without this source's
                // supports.
                plan.keep(&facts, &job.prepared.source, &named);
                job.touched = touched(&plan, &job.texts);
                // A description the old version recorded for a chunk that changed: the same
                // fact (entity and chunk), perhaps other words.
                let p = &job.prepared;
                let changed = |i: u32| {
                    p.old.as_ref().and_then(|o| o.chunks.get(i as usize))
                        != p.hashes.get(i as usize)
                };
                let adding: BTreeSet<&Fact> = plan.add_supports.iter().map(|(f, _)| f).collect();
                for (fact, text) in &job.texts {
                    if let Fact::Description { entity, chunk } = fact
                        && p.old.is_some()
                        && changed(chunk.chunk)
                        && !adding.contains(fact)
                    {
                        retext.push((fact.clone(), Support::Chunk(chunk.clone()), text.clone()));
                        job.touched.entry(entity.clone()).or_default().dropped += 1;
                    }
                }
                add_supports.append(&mut plan.add_supports);
                texts.append(&mut job.texts);
                job.plan = plan;
            }
            phases.mark("read supports");

            // The supports first: a group stopped after them and before the facts is
            // completed by running its jobs again, and a fact it wrote is never taken for an
            // import's.
            kb.add_supports(&imports, &BTreeMap::new()).await?;
            kb.add_supports(&add_supports, &texts).await?;
            kb.set_support_texts(&retext).await?;
            // The facts that were there unmarked now have their supports recorded (an
            // import's, or a source's read above).
            let marked: Vec<Fact> = unsourced.into_iter().collect();
            kb.mark_sourced(&marked).await?;
            phases.mark("write supports");
            let mut seen = BTreeSet::new();
            let mut new_entities = Vec::new();
            for job in &mut jobs {
                for (name, entity) in &job.entities {
                    if missing.contains(name) && seen.insert(name.clone()) {
                        new_entities.push(entity.clone());
                        job.entities_added += 1;
                    }
                }
            }
            kb.upsert_sourced_entities(&new_entities).await?;
            phases.mark("write entities");
            let mut seen = BTreeSet::new();
            for job in &mut jobs {
                for key in job.relationships.keys() {
                    let edge = (key.0.as_str(), key.1.as_str(), key.2.as_str());
                    if new_edges.contains(&edge) && seen.insert(edge) {
                        job.relationships_added += 1;
                    }
                }
            }
            kb.upsert_sourced_relationships(&new_relationships).await?;
            phases.mark("write relationships");
            Ok::<(), StoreError>(())
        };
        let documents_took = match tokio::try_join!(documents, graph) {
            Ok((took, ())) => took,
            Err(e) => {
                for job in jobs {
                    let _ = job.done.send(Err(JobFailure::from(e.clone())));
                }
                return;
            }
        };
        let chunks: usize = jobs.iter().map(|j| j.prepared.chunks.len()).sum();
        // Each job's retractions, then every source record in one write: a job has ended
        // once its record is there.
        let mut finished = Vec::with_capacity(jobs.len());
        let mut records = Vec::new();
        for mut job in jobs {
            let retracted = self.finish_writing(&mut job).await.map(|record| {
                records.push(record);
            });
            finished.push((job, retracted));
        }
        let recorded = self.kb.put_source_records(&records).await;
        for (mut job, retracted) in finished {
            let outcome = retracted
                .and_then(|()| recorded.clone().map_err(JobFailure::from))
                .map(|()| Written::Done(std::mem::take(&mut job.touched)));
            job.prepared.phases.mark("retract and record");
            tracing::debug!(job = %job.prepared.id, chunks = job.prepared.chunks.len(), group = size, phases = %job.prepared.phases, "ingest job written");
            let _ = job.done.send(outcome);
        }
        phases.mark("retract and record");
        tracing::debug!(jobs = size, chunks, phases = %phases, documents_ms = documents_took.as_secs_f64() * 1e3, "ingest group written");
    }

    /// One job's writes after its group's: its counts, its retractions and the chunks past
    /// the new version's end. Answers the source's record, for the caller to write last.
    async fn finish_writing(&self, job: &mut Writing) -> Result<SourceRecord, JobFailure> {
        let kb = &self.kb;
        let p = &job.prepared;
        let (entities_added, relationships_added, merged) = (
            job.entities_added,
            job.relationships_added,
            job.resolved.merged,
        );
        self.update(p.id, false, |v| {
            v.counts.entities_added = entities_added;
            v.counts.relationships_added = relationships_added;
            v.counts.entities_merged = merged;
        })
        .await?;
        let Retracted {
            entities: entities_retracted,
            relationships: relationships_retracted,
            ..
        } = kb.retract(&job.plan).await?;
        self.update(p.id, false, |v| {
            v.counts.entities_retracted = entities_retracted;
            v.counts.relationships_retracted = relationships_retracted;
        })
        .await?;
        // Chunks the old version had past the new one's end.
        if let Some(old) = &p.old
            && old.chunks.len() > p.chunks.len()
        {
            let gone: Vec<u32> = (p.chunks.len() as u32..old.chunks.len() as u32).collect();
            kb.delete_chunks(&p.source, &gone).await?;
        }
        if let Some(old) = &p.old {
            // Read by another model (or none), the old version's answers are not this one's:
            // its unchanged chunks keep theirs only when the same model read them.
            let keep: &[String] = match old.extracted_by == self.model {
                true => &p.hashes,
                false => &[],
            };
            forget_answers(kb, old, keep, &p.pairs.keys).await;
        }
        let mut hashes = p.hashes.clone();
        for (hash, failed) in hashes.iter_mut().zip(&p.failed) {
            if *failed {
                // Recorded as no hash: the next submission of the same content is not
                // "unchanged", and asks the model for this chunk again.
                hash.clear();
            }
        }
        Ok(SourceRecord {
            source: p.source.source.clone(),
            source_id: p.source.source_id.clone(),
            title: p.title.clone(),
            url: p.url.clone(),
            content_type: p.content_type.clone(),
            content_hash: p.content_hash.clone(),
            chunks: hashes,
            extracted_by: self.model.clone(),
            confirmations: p.pairs.keys.iter().cloned().collect(),
            updated_at: now_ms(),
        })
    }

    /// Each chunk's extraction, `None` where it failed (and which failed); the model is asked
    /// for a chunk only when no answer for its text is kept.
    async fn extract_all(
        &self,
        id: Uuid,
        chunks: &[Chunk],
        title: &str,
        model: &str,
    ) -> Result<(Vec<Option<Extraction>>, Vec<bool>), JobFailure> {
        // The futures are made first: a stream that maps by a closure over borrowed chunks
        // is not `Send` for every lifetime, as a spawned job needs.
        let calls: Vec<_> = chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| async move { (i, self.extract_one(id, chunk, title, model).await) })
            .collect();
        let results: Vec<(usize, Result<Option<Extraction>, StoreError>)> =
            futures::stream::iter(calls)
                .buffer_unordered(self.config.max_calls_in_flight.max(1))
                .collect()
                .await;
        let mut out = vec![None; chunks.len()];
        for (i, r) in results {
            out[i] = r?;
        }
        // A chunk the model answered has an extraction, if an empty one.
        let failed = out.iter().map(Option::is_none).collect();
        Ok((out, failed))
    }

    async fn extract_one(
        &self,
        id: Uuid,
        chunk: &Chunk,
        title: &str,
        model: &str,
    ) -> Result<Option<Extraction>, StoreError> {
        let key = extraction_key(&chunk.hash, model, PROMPT_VERSION);
        let request = || {
            let (system, user) = kbq_ingest::extraction::messages(
                &chunk.text,
                &chunk.heading_path,
                Some(title),
                &self.config.entity_types,
            );
            extraction_request(system, user)
        };
        let span = tracing::debug_span!(
            "ingest.chunk",
            kbq.chunk = chunk.index,
            kbq.chunk_bytes = chunk.text.len(),
        );
        let extraction = self
            .ask_kept(
                Some(id),
                &key,
                request,
                &format!("chunk {}", chunk.index),
                |_| true,
                kbq_ingest::extraction::validate,
            )
            .instrument(span)
            .await?;
        let failed = u64::from(extraction.is_none());
        self.update(id, false, |v| {
            v.chunks_done += 1;
            v.counts.chunks_failed += failed;
        })
        .await?;
        Ok(extraction)
    }

    /// Without a model: each chunk's mentions of entities already in the graph, as an
    /// extraction of those entities alone (phrases of one to four words, matched by name).
    async fn mentions_all(
        &self,
        id: Uuid,
        chunks: &[Chunk],
    ) -> Result<Vec<Option<Extraction>>, JobFailure> {
        let mut out = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let phrases = phrases(&chunk.text, 4);
            let missing: BTreeSet<String> = self
                .kb
                .missing_entities(&phrases)
                .await?
                .into_iter()
                .collect();
            let mut seen = BTreeSet::new();
            let entities: Vec<kbq_ingest::ExtractedEntity> = phrases
                .into_iter()
                .filter(|p| !missing.contains(p) && seen.insert(p.clone()))
                .map(|name| kbq_ingest::ExtractedEntity {
                    name,
                    entity_type: String::new(),
                    description: String::new(),
                })
                .collect();
            out.push((!entities.is_empty()).then_some(Extraction {
                entities,
                relationships: Vec::new(),
            }));
            self.update(id, false, |v| v.chunks_done += 1).await?;
        }
        Ok(out)
    }

    /// Resolves every name the extractions give: to itself, to another name of the same
    /// source under the same key (case, spacing, punctuation), or to an entity of the graph
    /// that [`Self::decide`] calls the same (or doubtful, and confirmed). `None`, with
    /// nothing resolved, when a name is doubtful with an entity of the graph or a name an
    /// earlier job of the group adds, and the model confirms pairs but was never asked about
    /// that one (it was not there when the job asked): the job is to ask again
    /// ([`Written::AskAgain`]), at most [`ASK_AGAIN`] times.
    async fn resolve(
        &self,
        prepared: &Prepared,
        group_added: &mut Vec<(String, String)>,
    ) -> Result<Option<Resolution>, JobFailure> {
        let asks = self.model.is_some()
            && self.config.confirm_doubtful
            && prepared.asked_again < ASK_AGAIN;
        let pairs = &prepared.pairs;
        let mut names: Vec<&str> = Vec::new();
        for e in prepared.found.iter().flatten() {
            names.extend(e.entities.iter().map(|e| e.name.as_str()));
            for r in &e.relationships {
                names.push(&r.source);
                names.push(&r.target);
            }
        }
        let described = described(&prepared.found);
        let mut resolution = Resolution::default();
        let mut by_key: HashMap<String, String> = HashMap::new();
        // The names this source adds to the graph, in the order met: a later near spelling
        // of one is that entity.
        let mut added: Vec<(String, String)> = Vec::new();
        for name in names {
            if resolution.to.contains_key(name) {
                continue;
            }
            let key = kbq_ingest::name_key(name);
            if let Some(first) = by_key.get(&key) {
                if first != name {
                    resolution.merged += 1;
                }
                resolution.to.insert(name.to_string(), first.clone());
                continue;
            }
            let description = described.get(name).copied().unwrap_or_default();
            let found = match self.in_graph(name, description).await? {
                InGraph::Same(found) => Some(found),
                InGraph::Doubtful(found) => {
                    let confirmed = found.iter().find(|c| pairs.is_confirmed(name, c));
                    if confirmed.is_none()
                        && asks
                        && found.iter().any(|c| !pairs.was_asked(name, c))
                    {
                        return Ok(None);
                    }
                    confirmed.cloned()
                }
                InGraph::None => None,
            };
            let canonical = match found {
                Some(found) => found,
                None => {
                    // One pass: the first the same or confirmed, and whether a name an
                    // earlier job adds is doubtful and was never asked about.
                    let mut unasked = false;
                    let ours = added.iter().map(|a| (a, false));
                    let theirs = group_added.iter().map(|a| (a, true));
                    let near = ours.chain(theirs).find_map(|((a, a_key), earlier_job)| {
                        if pairs.is_confirmed(name, a) {
                            return Some(a);
                        }
                        match kbq_ingest::compare_keys(&key, a_key, None, &self.config.resolve) {
                            Decision::Same => Some(a),
                            Decision::Doubtful if earlier_job => {
                                unasked |= !pairs.was_asked(name, a);
                                None
                            }
                            _ => None,
                        }
                    });
                    if near.is_none() && unasked && asks {
                        return Ok(None);
                    }
                    match near {
                        Some(a) => a.clone(),
                        None => {
                            added.push((name.to_string(), key.clone()));
                            name.to_string()
                        }
                    }
                }
            };
            if canonical != name {
                resolution.merged += 1;
            }
            by_key.insert(key, canonical.clone());
            resolution.to.insert(name.to_string(), canonical);
        }
        group_added.append(&mut added);
        Ok(Some(resolution))
    }

    /// The entity of the graph that `name` (described by `description`, empty if unknown)
    /// names: itself; else the first candidate of the name search (by the name's longest
    /// words, then its acronyms), or of the entities whose names go by the name as their
    /// acronym, that [`Self::decide`] calls the same; else the first few it calls doubtful.
    async fn in_graph(&self, name: &str, description: &str) -> Result<InGraph, StoreError> {
        if self.kb.entity(name).await?.is_some() {
            return Ok(InGraph::Same(name.to_string()));
        }
        let key = kbq_ingest::name_key(name);
        // The name search matches case-insensitively by substring: a variant of spacing or
        // punctuation is found by its longest word, and a near spelling whose longest word
        // is the one misspelt by its second longest.
        // Each word once, longest first; of words as long, the later in the name first.
        let mut words: Vec<&str> = Vec::new();
        for w in key.split(' ').rev() {
            if !w.is_empty() && !words.contains(&w) {
                words.push(w);
            }
        }
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        let probes = words
            .iter()
            .enumerate()
            .filter(|&(i, w)| i == 0 || w.chars().count() >= PROBE_WORD_CHARS)
            .take(PROBES)
            .map(|(_, w)| *w);
        // An entity named by the name's acronym ("IBM" for "International Business
        // Machines"), which shares none of its words: the name search's hits of exactly that
        // key.
        let acronyms = kbq_ingest::acronyms(&key);
        let probes = probes
            .map(|w| (Probe::Search, w, false))
            .chain(acronyms.iter().map(|a| (Probe::Search, a.as_str(), true)))
            // The other way round: the entities whose names go by this one as their acronym
            // ("International Business Machines" for "IBM").
            .chain(kbq_ingest::may_be_acronym(&key).then_some((
                Probe::Initials,
                key.as_str(),
                false,
            )));
        let mut doubtful = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for (how, probe, exact) in probes {
            let candidates = match how {
                Probe::Search => self.kb.search_entities(probe, None, 50).await?,
                Probe::Initials => self.kb.entities_by_acronym(probe, 50).await?,
            };
            for c in &candidates {
                if exact && kbq_ingest::name_key(&c.name) != probe {
                    continue;
                }
                if !seen.insert(c.name.clone()) {
                    continue;
                }
                match self.decide(&key, description, c).await? {
                    Decision::Same => return Ok(InGraph::Same(c.name.clone())),
                    Decision::Doubtful if doubtful.len() < DOUBTFUL_ASKED => {
                        doubtful.push(c.name.clone())
                    }
                    _ => {}
                }
            }
        }
        Ok(match doubtful.is_empty() {
            true => InGraph::None,
            false => InGraph::Doubtful(doubtful),
        })
    }

    /// [`kbq_ingest::compare`] of a name (by its key, `key`) and an entity of the graph, with
    /// the cosine of their descriptions' embeddings when both are known and the names alone
    /// do not say different (descriptions only ever lower a decision).
    async fn decide(
        &self,
        key: &str,
        description: &str,
        entity: &kbq_store::model::Entity,
    ) -> Result<Decision, StoreError> {
        let config = &self.config.resolve;
        let their_key = kbq_ingest::name_key(&entity.name);
        let by_name = kbq_ingest::compare_keys(key, &their_key, None, config);
        let theirs = entity_description(entity);
        if by_name == Decision::Different
            || description.is_empty()
            || theirs.is_empty()
            || key == their_key
        {
            return Ok(by_name);
        }
        let vectors = self
            .kb
            .embedder()
            .embed(&[description.to_string(), theirs.to_string()])
            .await?;
        let cosine = match vectors.as_slice() {
            [a, b] => Some(kbq_store::cosine(a, b)),
            _ => None,
        };
        Ok(kbq_ingest::compare_keys(key, &their_key, cosine, config))
    }

    /// The doubtful pairs of a job's names and the graph's entities (and of its own new
    /// names) that the model is asked about, and those it confirms as one entity; asked
    /// before the job waits to write, so that no group waits on a model. Each pair's answer
    /// is kept, as extractions are. A failed call confirms nothing.
    async fn confirm_doubtful(
        &self,
        id: Uuid,
        found: &[Option<Extraction>],
        model: &str,
    ) -> Result<Pairs, StoreError> {
        let mut pairs = Pairs::default();
        let described = described(found);
        let typed: HashMap<&str, &str> = found
            .iter()
            .flatten()
            .flat_map(|e| &e.entities)
            .map(|e| (e.name.as_str(), e.entity_type.as_str()))
            .collect();
        let mut names: BTreeSet<String> = BTreeSet::new();
        for e in found.iter().flatten() {
            names.extend(
                e.entities_with_relationship_ends()
                    .into_iter()
                    .map(|e| e.name),
            );
        }
        // A name of the job as the model is asked about it.
        let ours = |name| kbq_ingest::confirm::Named {
            name,
            entity_type: typed.get(name).copied().unwrap_or_default(),
            description: described.get(name).copied().unwrap_or_default(),
        };
        // The names that will be new entities (in the graph neither as they are nor by a
        // confirmed pair), for the pairs among them below.
        let mut new_names: Vec<&str> = Vec::new();
        for name in &names {
            let name = name.as_str();
            let others = match self.in_graph(name, ours(name).description).await? {
                InGraph::Same(_) => continue,
                InGraph::None => Vec::new(),
                InGraph::Doubtful(others) => others,
            };
            let mut merged = false;
            for other in others {
                let Some(entity) = self.kb.entity(&other).await? else {
                    continue;
                };
                let theirs = kbq_ingest::confirm::Named {
                    name: &entity.name,
                    entity_type: &entity.entity_type,
                    description: entity_description(&entity),
                };
                let (same, key) = self.ask_same(id, ours(name), theirs, model).await?;
                pairs.record(name, &other, same, &key);
                if same == Some(true) {
                    merged = true;
                    break;
                }
            }
            if !merged {
                new_names.push(name);
            }
        }
        // Two new names of the source that are doubtful by name are asked about too, so that
        // they are one entity when the model says so, as they would be had the first been in
        // the graph already. Either order is confirmed: resolution meets them in the text's.
        for (i, &a) in new_names.iter().enumerate() {
            for &b in &new_names[i + 1..] {
                if kbq_ingest::compare(a, b, None, &self.config.resolve) != Decision::Doubtful {
                    continue;
                }
                let (same, key) = self.ask_same(id, ours(a), ours(b), model).await?;
                pairs.record(a, b, same, &key);
                pairs.record(b, a, same, &key);
            }
        }
        // A job that fails or is cancelled leaves the confirmations it may have kept with its
        // record, as it does its chunks' answers (no chunk hash: a source's record holds them
        // by key).
        if let Some(running) = self.jobs.lock().get(&id) {
            let mut kept = running.kept.lock();
            for key in &pairs.keys {
                if !kept.iter().any(|(hash, k)| hash.is_empty() && k == key) {
                    kept.push((String::new(), key.clone()));
                }
            }
        }
        Ok(pairs)
    }

    /// The model's answer to whether `a` and `b` are one entity (`None` when no answer kept
    /// the schema), and the key it is kept under, by the pair.
    async fn ask_same(
        &self,
        id: Uuid,
        a: kbq_ingest::confirm::Named<'_>,
        b: kbq_ingest::confirm::Named<'_>,
        model: &str,
    ) -> Result<(Option<bool>, String), StoreError> {
        let (system, user) = kbq_ingest::confirm::messages(a, b);
        // Kept by the pair of names: the same pair is not asked again when a description
        // changes (an entity's description is remade as sources describe it).
        let pair = hex::encode(Sha256::digest(format!(
            "same\0{}\0{}\0{}\0{}",
            a.name, a.entity_type, b.name, b.entity_type
        )));
        let key = extraction_key(&pair, model, kbq_ingest::confirm::PROMPT_VERSION);
        let request = || {
            structured_request(
                system,
                user,
                kbq_ingest::confirm::SCHEMA_NAME,
                kbq_ingest::confirm::json_schema(),
            )
        };
        let same = self
            .ask_kept(
                Some(id),
                &key,
                request,
                "confirmation",
                |_| true,
                |text| kbq_ingest::confirm::validate(text).ok_or("not {\"same\": boolean}"),
            )
            .await?;
        Ok((same, key))
    }

    /// The answer kept under `key`, if `fresh` takes it for this question's; else the model
    /// asked `request` ([`Self::ask`]), and its valid answer kept under `key`, so that no
    /// question is asked twice. `None` when no answer was valid.
    async fn ask_kept<T: Serialize + serde::de::DeserializeOwned, E: std::fmt::Display>(
        &self,
        id: Option<Uuid>,
        key: &str,
        request: impl FnOnce() -> ChatRequest,
        what: &str,
        fresh: impl Fn(&T) -> bool,
        validate: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Option<T>, StoreError> {
        if let Some(kept) = self.kb.cached_extraction(key).await?
            && let Ok(answer) = serde_json::from_value::<T>(kept)
            && fresh(&answer)
        {
            return Ok(Some(answer));
        }
        let answer = self.ask(id, &request(), what, validate).await?;
        if let Some(answer) = &answer {
            let kept = serde_json::to_value(answer).unwrap_or(Value::Null);
            self.kb.cache_extraction(key, kept).await?;
        }
        Ok(answer)
    }

    /// Asks the model `request` up to `ingest.attempts` times, each call under the bound on
    /// calls in flight and counted in the job's `model_calls`, until `validate` accepts an
    /// answer's text; `None` when none did. `what` names the call in the log.
    async fn ask<T, E: std::fmt::Display>(
        &self,
        id: Option<Uuid>,
        request: &ChatRequest,
        what: &str,
        validate: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Option<T>, StoreError> {
        for attempt in 1..=self.config.attempts.max(1) {
            let answer = {
                let _permit = self.calls.acquire().await;
                if let Some(id) = id {
                    self.update(id, false, |v| v.counts.model_calls += 1)
                        .await?;
                }
                self.agent
                    .complete(self.config.providers.as_deref(), request)
                    .await
            };
            match answer {
                Ok(answer) => {
                    let text = answer.message["content"].as_str().unwrap_or_default();
                    match validate(text) {
                        Ok(valid) => return Ok(Some(valid)),
                        Err(e) => {
                            tracing::warn!(job = ?id, call = what, attempt, error = %e, "a model answer broke its schema");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(job = ?id, call = what, attempt, error = %e, "a model call failed");
                }
            }
        }
        Ok(None)
    }
}

/// How [`IngestDeps::in_graph`] asks the graph for candidates of a name.
#[derive(Clone, Copy)]
enum Probe {
    /// The name search, by a word of the name or one of its acronyms.
    Search,
    /// The entities whose names go by the name as their acronym.
    Initials,
}

/// What the graph has for a name.
enum InGraph {
    Same(String),
    /// The candidates [`IngestDeps::decide`] calls doubtful, best first, at most
    /// [`DOUBTFUL_ASKED`].
    Doubtful(Vec<String>),
    None,
}

/// Doubtful candidates of one name sent to the model, in the name search's order, until one
/// is confirmed.
const DOUBTFUL_ASKED: usize = 3;

/// The words of a name's key the graph's name search is asked for, longest first.
const PROBES: usize = 2;

/// The fewest characters of a word, past the longest, worth a name search: a shorter one
/// ("of", "inc") matches too many names to find the one meant among the first 50.
const PROBE_WORD_CHARS: usize = 5;

/// Each name's first non-empty description in a job's answers.
fn described(found: &[Option<Extraction>]) -> HashMap<&str, &str> {
    let mut described = HashMap::new();
    for e in found.iter().flatten().flat_map(|e| &e.entities) {
        if !e.description.is_empty() {
            described
                .entry(e.name.as_str())
                .or_insert(e.description.as_str());
        }
    }
    described
}

/// An entity's description (`properties.description`), empty if it has none.
fn entity_description(entity: &kbq_store::model::Entity) -> &str {
    entity
        .properties
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The kept answer of a summary ([`IngestDeps::summarise`]): the question's digest (with
/// the model and prompt version) and the description the model gave.
#[derive(Serialize, Deserialize)]
struct KeptSummary {
    asked: String,
    description: String,
}

/// Where a job's time went, phase by phase (logged at debug when it has written).
struct Phases {
    last: std::time::Instant,
    spent: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn start() -> Self {
        Phases {
            last: std::time::Instant::now(),
            spent: Vec::new(),
        }
    }

    /// Ends the phase `name`, which began where the last one ended.
    fn mark(&mut self, name: &'static str) {
        let now = std::time::Instant::now();
        self.spent.push((name, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, spent)) in self.spent.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.1} ms", spent.as_secs_f64() * 1e3)?;
        }
        Ok(())
    }
}

/// A job's work before its writes.
struct Prepared {
    id: Uuid,
    source: SourceKey,
    url: Option<String>,
    content_type: String,
    title: String,
    chunks: Vec<Chunk>,
    content_hash: String,
    hashes: Vec<String>,
    /// Each chunk's extraction, `None` where it failed or found nothing.
    found: Vec<Option<Extraction>>,
    failed: Vec<bool>,
    /// The version stored before, if any.
    old: Option<SourceRecord>,
    /// The doubtful pairs the model was asked about, and those it called one.
    pairs: Pairs,
    /// How many times the job was sent back from its write group to ask about pairs it met
    /// there ([`Written::AskAgain`]).
    asked_again: u8,
    phases: Phases,
}

/// Doubtful pairs of a job, each as (a name of the job, an entity of the graph or another
/// name of the job).
#[derive(Default)]
struct Pairs {
    /// Every pair the model was asked about, whatever it answered (a failed call included).
    asked: BTreeSet<(String, String)>,
    /// The pairs the model called one entity.
    confirmed: BTreeSet<(String, String)>,
    /// The keys the answers are kept under: the source's record lists them
    /// (`SourceRecord::confirmations`), and they go with the last source that does.
    keys: BTreeSet<String>,
}

impl Pairs {
    /// Records the model's answer about (`a`, `b`), kept under `key`: asked, and one entity
    /// when `same` says so.
    fn record(&mut self, a: &str, b: &str, same: Option<bool>, key: &str) {
        self.keys.insert(key.to_string());
        let pair = (a.to_string(), b.to_string());
        if same == Some(true) {
            self.confirmed.insert(pair.clone());
        }
        self.asked.insert(pair);
    }

    fn was_asked(&self, a: &str, b: &str) -> bool {
        !self.asked.is_empty() && self.asked.contains(&(a.to_string(), b.to_string()))
    }

    fn is_confirmed(&self, a: &str, b: &str) -> bool {
        !self.confirmed.is_empty() && self.confirmed.contains(&(a.to_string(), b.to_string()))
    }
}

/// A job waiting to write, and where its outcome goes.
struct Pending {
    prepared: Prepared,
    done: tokio::sync::oneshot::Sender<Result<Written, JobFailure>>,
}

/// What became of a job its write group took.
enum Written {
    /// Written: the entities whose descriptions it changed.
    Done(Touched),
    /// Not written: one of its names is doubtful with a name the graph (or an earlier job of
    /// the group) gained after the job's pairs were asked, and that pair was never asked. The
    /// job asks again, as it would have had it been prepared after that write, and then waits
    /// to write anew.
    AskAgain(Box<Prepared>),
}

/// The entities whose descriptions a job or a retraction changed: for each, the
/// description supports it added, and how many it dropped.
type Touched = BTreeMap<String, Touch>;

#[derive(Debug, Default)]
struct Touch {
    added: BTreeSet<Support>,
    /// The texts of the added descriptions.
    texts: Vec<String>,
    dropped: usize,
}

/// The entities whose description supports `plan` adds (their texts in `texts`), drops or
/// removes with their fact.
fn touched(plan: &kbq_ingest::provenance::Plan, texts: &BTreeMap<Fact, String>) -> Touched {
    let mut touched = Touched::new();
    for (fact, support) in &plan.add_supports {
        if let Fact::Description { entity, .. } = fact {
            let touch: &mut Touch = touched.entry(entity.clone()).or_default();
            touch.added.insert(support.clone());
            touch.texts.extend(texts.get(fact).cloned());
        }
    }
    let dropped = plan.drop_supports.iter().map(|(fact, _)| fact);
    for fact in dropped.chain(&plan.remove) {
        if let Fact::Description { entity, .. } = fact {
            touched.entry(entity.clone()).or_default().dropped += 1;
        }
    }
    touched
}

/// A job while its group writes: what its version says, by fact.
struct Writing {
    prepared: Prepared,
    resolved: Resolution,
    done: tokio::sync::oneshot::Sender<Result<Written, JobFailure>>,
    /// The facts this version supports, with the chunks that support each.
    new_version: BTreeMap<Fact, BTreeSet<u32>>,
    /// The words of each description fact.
    texts: BTreeMap<Fact, String>,
    entities: BTreeMap<String, NewEntity>,
    relationships: BTreeMap<(String, String, String), NewRelationship>,
    plan: kbq_ingest::provenance::Plan,
    /// The entities whose descriptions the plan changes.
    touched: Touched,
    entities_added: u64,
    relationships_added: u64,
}

impl Writing {
    fn new(
        prepared: Prepared,
        resolved: Resolution,
        done: tokio::sync::oneshot::Sender<Result<Written, JobFailure>>,
        model: &Option<String>,
    ) -> Self {
        let mut new_version: BTreeMap<Fact, BTreeSet<u32>> = BTreeMap::new();
        let mut texts = BTreeMap::new();
        let mut entities = BTreeMap::new();
        let mut relationships = BTreeMap::new();
        for (chunk, extraction) in prepared.chunks.iter().zip(&prepared.found) {
            let Some(extraction) = extraction else {
                continue;
            };
            if model.is_none() {
                // Mentions link the chunk; they state no fact.
                continue;
            }
            for e in extraction.entities_with_relationship_ends() {
                let name = resolved.name(&e.name).to_string();
                new_version
                    .entry(Fact::entity(&name))
                    .or_default()
                    .insert(chunk.index);
                if name != e.name {
                    new_version
                        .entry(Fact::Alias {
                            entity: name.clone(),
                            alias: e.name.clone(),
                        })
                        .or_default()
                        .insert(chunk.index);
                }
                if !e.description.is_empty() {
                    let fact = Fact::Description {
                        entity: name.clone(),
                        chunk: ChunkRef {
                            source: prepared.source.clone(),
                            chunk: chunk.index,
                        },
                    };
                    texts.insert(fact.clone(), e.description.clone());
                    new_version.entry(fact).or_default().insert(chunk.index);
                }
                entities.entry(name.clone()).or_insert_with(|| NewEntity {
                    name: name.clone(),
                    entity_type: e.entity_type.clone(),
                    properties: description_properties(&e.description),
                });
            }
            for r in &extraction.relationships {
                let (s, t) = (
                    resolved.name(&r.source).to_string(),
                    resolved.name(&r.target).to_string(),
                );
                if s == t {
                    continue;
                }
                new_version
                    .entry(Fact::relationship(&s, &t, &r.relationship_type))
                    .or_default()
                    .insert(chunk.index);
                relationships
                    .entry((s.clone(), t.clone(), r.relationship_type.clone()))
                    .or_insert_with(|| NewRelationship {
                        source_name: s,
                        target_name: t,
                        relationship_type: r.relationship_type.clone(),
                        properties: description_properties(&r.description),
                    });
            }
        }
        Writing {
            prepared,
            resolved,
            done,
            new_version,
            texts,
            entities,
            relationships,
            plan: Default::default(),
            touched: Touched::new(),
            entities_added: 0,
            relationships_added: 0,
        }
    }

    /// The chunks, as documents of the source, each linked to every entity it gave: the
    /// first as its `entity_name`, the others as its mentions.
    fn documents(&self) -> impl Iterator<Item = NewDocument> + '_ {
        let p = &self.prepared;
        p.chunks
            .iter()
            .zip(&p.found)
            .map(move |(chunk, extraction)| {
                let mut names: Vec<String> = Vec::new();
                for e in extraction.iter().flat_map(|e| &e.entities) {
                    let name = self.resolved.name(&e.name);
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_string());
                    }
                }
                let mut names = names.into_iter();
                NewDocument {
                    title: chunk_title(&p.title, &chunk.heading_path),
                    content: chunk.text.clone(),
                    source: p.source.source.clone(),
                    source_id: chunk_source_id(&p.source.source_id, chunk.index),
                    content_type: p.content_type.clone(),
                    url: p.url.clone(),
                    entity_name: names.next(),
                    mentions: names.collect(),
                }
            })
    }
}

/// The outcome of a job whose group stopped before telling it.
fn lost_write() -> JobFailure {
    JobFailure::Failed("the job's writes stopped before they ended".to_string())
}

/// Names as resolved, and how many were merged into another.
#[derive(Default)]
struct Resolution {
    to: HashMap<String, String>,
    merged: u64,
}

impl Resolution {
    fn name<'a>(&'a self, name: &'a str) -> &'a str {
        self.to.get(name).map_or(name, String::as_str)
    }
}

/// Why a job did not succeed.
#[derive(Debug)]
enum JobFailure {
    /// Cancelled before its writes began.
    Cancelled,
    /// Failed, with the reason its record gives.
    Failed(String),
}

impl From<StoreError> for JobFailure {
    fn from(e: StoreError) -> Self {
        JobFailure::Failed(e.to_string())
    }
}

/// How many times a job may be sent back from its write group to ask about doubtful pairs
/// it meets there ([`Written::AskAgain`]); past that, such a pair stays apart. Each time,
/// jobs written meanwhile are what it meets: the bound is reached only while others keep
/// adding doubtful names.
const ASK_AGAIN: u8 = 3;

/// The model request for one chunk: its messages and the `kbq_extraction` schema as
/// structured output.
fn extraction_request(system: String, user: String) -> ChatRequest {
    structured_request(
        system,
        user,
        SCHEMA_NAME,
        kbq_ingest::extraction::json_schema(),
    )
}

/// A request for an answer of `schema` (OpenAI structured output, strict), at temperature 0.
fn structured_request(system: String, user: String, name: &str, schema: Value) -> ChatRequest {
    let mut options = serde_json::Map::new();
    options.insert(
        "response_format".into(),
        json!({
            "type": "json_schema",
            "json_schema": {
                "name": name,
                "strict": true,
                "schema": schema,
            }
        }),
    );
    ChatRequest {
        messages: Arc::new(vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": user}),
        ]),
        tools: Arc::new(Vec::new()),
        tool_results: Arc::new(Vec::new()),
        tool_choice: None,
        temperature: Some(0.0),
        max_tokens: None,
        options,
        workspace: None,
        span: Default::default(),
    }
}

/// A chunk document's title: the source's title and the chunk's headings.
fn chunk_title(title: &str, headings: &[String]) -> String {
    let mut t = title.to_string();
    for h in headings {
        if h != title {
            t.push_str(" › ");
            t.push_str(h);
        }
    }
    t
}

fn description_properties(description: &str) -> serde_json::Map<String, Value> {
    let mut p = serde_json::Map::new();
    if !description.is_empty() {
        p.insert("description".into(), Value::String(description.to_string()));
    }
    p
}

/// The phrases of one to `most` words of `text`, in order, words split at white space and
/// stripped of the punctuation around them.
fn phrases(text: &str, most: usize) -> Vec<String> {
    let words: Vec<&str> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for i in 0..words.len() {
        for n in 1..=most.min(words.len() - i) {
            out.push(words[i..i + n].join(" "));
        }
    }
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The input's bytes in a job record written before inputs were kept apart, as hex (the
/// record is JSON).
mod hex_bytes {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        hex::decode(text).map_err(|_| serde::de::Error::custom("bad hex"))
    }
}

/// Pause before the actor's first look for unfinished jobs, so that a node that starts many
/// does not hold its start-up.
const CLAIM_AFTER: Duration = Duration::from_millis(200);

/// Longest time between two renewals of this node's lease, which is also how soon it hears
/// of a cancellation asked on another node.
const RENEW_EVERY: Duration = Duration::from_secs(2);

/// How often a node forgets the jobs that ended too long ago (see
/// [`IngestConfig::forget_ended_after`]).
const FORGET_EVERY: Duration = Duration::from_secs(600);

/// The ingestion actor: queues jobs and runs at most `max_jobs` at once; takes over the
/// unfinished jobs that no live node holds (those of a node that stopped, this one
/// included) and renews its own lease.
pub struct IngestActor;

/// The actor's state: jobs waiting, and the tasks of those running (aborted with the state,
/// should the actor stop; their jobs are resumed by the next one).
pub struct IngestState {
    deps: Arc<IngestDeps>,
    waiting: std::collections::VecDeque<Uuid>,
    running: HashMap<Uuid, (tokio_util::task::AbortOnDropHandle<()>, u64)>,
    /// The bytes of the running jobs' sources.
    running_bytes: u64,
    /// The jobs that ended on this node, oldest first: the table of jobs keeps the last
    /// `keep_ended_jobs` of them (their progress channels, for followers), and the store the
    /// rest.
    ended: std::collections::VecDeque<Uuid>,
    /// Renews this node's lease every [`RENEW_EVERY`] (or a third of the lease).
    _renewals: tokio_util::task::AbortOnDropHandle<()>,
    /// Whether a claim has run: the first queues again the jobs this node knows, and on an
    /// embedded store takes every unfinished job.
    claimed: bool,
}

/// Messages to the ingestion actor.
#[derive(Debug)]
pub enum IngestMessage {
    /// Queue the job (stored and registered already).
    Run(Uuid),
    /// A job's task ended.
    Ended(Uuid),
    /// Take over the jobs the store holds unfinished that no live node holds, and resume
    /// them.
    Claim,
}

impl Actor for IngestActor {
    type Msg = IngestMessage;
    type State = IngestState;
    type Arguments = Arc<IngestDeps>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        deps: Arc<IngestDeps>,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_after(CLAIM_AFTER, || IngestMessage::Claim);
        let every = RENEW_EVERY.min(deps.config.lease / 3);
        let renewing = deps.clone();
        // On the actor's runtime: a task of the ingestion runtime that is the first to ask
        // the store would start SurrealDB's storage threads at that runtime's lower priority.
        let renewals = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                renewing.renew().await;
            }
        });
        Ok(IngestState {
            deps,
            waiting: Default::default(),
            running: HashMap::new(),
            running_bytes: 0,
            ended: Default::default(),
            _renewals: tokio_util::task::AbortOnDropHandle::new(renewals),
            claimed: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: IngestMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            IngestMessage::Run(id) => {
                if !state.running.contains_key(&id) && !state.waiting.contains(&id) {
                    state.waiting.push_back(id);
                }
            }
            IngestMessage::Ended(id) => {
                if let Some((_, bytes)) = state.running.remove(&id) {
                    state.running_bytes -= bytes;
                }
                state.ended.push_back(id);
                while state.ended.len() > state.deps.config.keep_ended_jobs {
                    let Some(old) = state.ended.pop_front() else {
                        break;
                    };
                    state.deps.jobs.lock().remove(&old);
                }
            }
            // A restarted actor starts with no queue: at its first claim, the jobs this node
            // knows that have not ended are queued again first.
            IngestMessage::Claim if !state.claimed => {
                let known: Vec<Uuid> = state
                    .deps
                    .jobs
                    .lock()
                    .iter()
                    .filter(|(_, r)| !r.progress.borrow().status.is_final())
                    .map(|(id, _)| *id)
                    .collect();
                for id in known {
                    if !state.running.contains_key(&id) && !state.waiting.contains(&id) {
                        state.waiting.push_back(id);
                    }
                }
                if state.deps.config.claims {
                    claim(&myself, state).await;
                }
            }
            IngestMessage::Claim => claim(&myself, state).await,
        }
        // In arrival order: a job that would pass the bytes bound waits for room, and the
        // jobs behind it with it.
        while state.running.len() < state.deps.config.max_jobs.max(1) {
            let Some(&id) = state.waiting.front() else {
                break;
            };
            let bytes = state
                .deps
                .jobs
                .lock()
                .get(&id)
                .map_or(state.deps.config.max_source_bytes as u64, |r| r.bytes);
            if !state.running.is_empty()
                && state.running_bytes + bytes > state.deps.config.max_running_bytes
            {
                break;
            }
            state.waiting.pop_front();
            let deps = state.deps.clone();
            let me = myself.clone();
            let job = async move {
                let failed = async {
                    let _ = deps
                        .finish(id, JobStatus::Failed, Some(STOPPED_BY_A_FAULT.to_string()))
                        .await;
                };
                run_to_an_end(id, deps.clone().run(id), failed).await;
                let _ = me.cast(IngestMessage::Ended(id));
            };
            // On the ingestion runtime, below the main runtime's priority: a job's parsing,
            // resolution and SurrealDB writes run there, and lookups go first.
            let task = match &state.deps.runtime {
                Some(runtime) => runtime.spawn(job),
                None => tokio::spawn(job),
            };
            state.running_bytes += bytes;
            state
                .running
                .insert(id, (tokio_util::task::AbortOnDropHandle::new(task), bytes));
        }
        Ok(())
    }
}

/// The error of a job stopped by a fault of kbq's own (a panic) rather than by its input.
const STOPPED_BY_A_FAULT: &str =
    "the job stopped on a fault of kbq's own (logged as an error); submit the source again";

/// Runs the job `id` (`run`); if it panics, logs it and runs `failed`, which records the job
/// as failed, so that a fault in kbq still ends the job: its watchers (`kbq ingest`, a
/// client following its events) see it fail instead of waiting for ever, and its place
/// among the jobs running is given back. Whatever the job had written stays as a job
/// stopped half way leaves it (docs/ingest.md, "Failures"). Answers whether `run` ended of
/// itself.
async fn run_to_an_end(
    id: Uuid,
    run: impl std::future::Future<Output = ()>,
    failed: impl std::future::Future<Output = ()>,
) -> bool {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(run).catch_unwind().await {
        Ok(()) => true,
        Err(panic) => {
            let what = kbq_ingest::panic_message(&*panic).unwrap_or_default();
            tracing::error!(job = %id, panic = %what, "ingest job stopped by a panic; recorded as failed");
            failed.await;
            false
        }
    }
}

/// Takes over the store's unfinished jobs that no live node holds, queues them, and asks for
/// the next claim in half a lease.
async fn claim(myself: &ActorRef<IngestMessage>, state: &mut IngestState) {
    let deps = &state.deps;
    // An embedded store has one process, this one: every unfinished job is an earlier
    // run's. A server's are those whose node stopped renewing its lease.
    let every = !state.claimed && !deps.kb.config().is_server();
    let now = now_ms();
    let until = now + deps.config.lease.as_millis() as i64;
    let jobs = match deps.kb.claim_jobs(&deps.node, now, until, every).await {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!(error = %e, "unfinished ingest jobs not claimed; trying again");
            let again = Duration::from_secs(5).min(deps.config.lease / 2);
            myself.send_after(again, || IngestMessage::Claim);
            return;
        }
    };
    state.claimed = true;
    myself.send_after(deps.config.lease / 2, || IngestMessage::Claim);
    for value in jobs {
        let Ok(record) = serde_json::from_value::<JobRecord>(value) else {
            continue;
        };
        let Ok(id) = Uuid::parse_str(&record.view.job_id) else {
            continue;
        };
        if deps.jobs.lock().contains_key(&id) {
            continue;
        }
        tracing::info!(job = %id, "taking over an unfinished ingest job");
        deps.register(id, &record);
        state.waiting.push_back(id);
    }
}

/// Forgets the kept answers of `old`'s chunks (as its model read them) that `keep` (the
/// source's new chunks) and no other source hold, and of `old`'s confirmations that
/// `keep_confirmations` (the new version's) and no other source's record list (see
/// `KnowledgeBase::forget_kept_answers`). The answers are a cache: a failure is logged, and
/// leaves them kept.
async fn forget_answers(
    kb: &KnowledgeBase,
    old: &SourceRecord,
    keep: &[String],
    keep_confirmations: &BTreeSet<String>,
) {
    // The keys of every prompt version so far: a version's answers are never asked for
    // again once the prompt has changed, so the kept chunks lose theirs of older versions.
    let mut candidates: Vec<(String, String)> = match &old.extracted_by {
        None => Vec::new(),
        Some(model) => (old.chunks.iter())
            .filter(|hash| !hash.is_empty())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .flat_map(|hash| {
                let newest = match keep.contains(hash) {
                    true => PROMPT_VERSION - 1,
                    false => PROMPT_VERSION,
                };
                (1..=newest).map(move |v| (hash.clone(), extraction_key(hash, model, v)))
            })
            .collect(),
    };
    candidates.extend(
        (old.confirmations.iter())
            .filter(|key| !keep_confirmations.contains(*key))
            .map(|key| (String::new(), key.clone())),
    );
    match kb.forget_kept_answers(&old.key(), &candidates).await {
        Ok(n) if n > 0 => {
            tracing::debug!(answers = n, "kept answers of retracted chunks forgotten")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "kept answers of retracted chunks not forgotten"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_that_panics_is_recorded_as_failed_and_ends() {
        let recorded = std::sync::atomic::AtomicBool::new(false);
        let failed = async { recorded.store(true, std::sync::atomic::Ordering::SeqCst) };
        let ended = run_to_an_end(Uuid::nil(), async { panic!("a fault") }, failed).await;
        assert!(!ended);
        assert!(recorded.load(std::sync::atomic::Ordering::SeqCst));
        let recorded = std::sync::atomic::AtomicBool::new(false);
        let failed = async { recorded.store(true, std::sync::atomic::Ordering::SeqCst) };
        assert!(run_to_an_end(Uuid::nil(), async {}, failed).await);
        assert!(!recorded.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn a_job_records_input_is_kept_apart_and_an_older_records_hex_is_read() {
        let bytes: Vec<u8> = (0..=255).collect();
        let input = SourceInput {
            source: "s".into(),
            source_id: "i".into(),
            title: None,
            url: None,
            content_type: None,
            file_name: None,
            content: bytes.clone(),
        };
        let mut json = serde_json::to_value(input).unwrap();
        assert_eq!(json.get("content"), None, "{json}");
        // A record from before held the bytes as hex.
        let text = hex::encode(&bytes);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(&text[text.len() - 4..], "feff");
        json["content"] = text.into();
        let back: SourceInput = serde_json::from_value(json).unwrap();
        assert_eq!(back.content, bytes);
    }
}
