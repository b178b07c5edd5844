//! `[ingest]`: how raw documents become chunks and graph facts (docs/ingest.md).

use serde::{Deserialize, Serialize};

use super::{ConfigError, bad, within};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IngestSection {
    /// Longest chunk, in characters (Unicode scalar values).
    pub chunk_chars: usize,
    /// Characters a chunk repeats of the one before it, within a section.
    pub chunk_overlap_chars: usize,
    /// Model calls in flight at once, over every job of this node.
    pub max_calls_in_flight: usize,
    /// Jobs that run at once on this node; more wait.
    pub max_jobs: usize,
    /// Bytes of sources the jobs running on this node hold at once, in MiB; a job that would
    /// pass it waits in its turn (one job runs whatever its size).
    pub max_running_mb: u64,
    /// Jobs that may wait; more are refused with 503.
    pub max_queued: usize,
    /// Largest source accepted, in bytes (413 above it).
    pub max_source_bytes: usize,
    /// Entity types the model is asked to look for; empty: it chooses.
    pub entity_types: Vec<String>,
    /// The providers extraction asks, by name, in order; empty: every provider in priority
    /// order, as the agent does.
    pub providers: Vec<String>,
    /// Answers per chunk when one breaks the `kbq_extraction` schema (at least 1).
    pub attempts: u32,
    /// Name similarity from which two names are the same entity.
    pub same_name: f64,
    /// Name similarity from which two names are a doubtful pair (at most `same_name`).
    pub doubtful_name: f64,
    /// Description cosine a pair the same by name needs; below it the pair is doubtful.
    pub same_description: f32,
    /// Description cosine below which a doubtful pair is different.
    pub different_description: f32,
    /// Whether the model is asked to confirm a doubtful pair; if not, the pair stays apart.
    pub confirm_doubtful: bool,
    /// Threads of the runtime ingestion jobs run on; 0: the main runtime.
    pub threads: usize,
    /// How many nice steps below the main runtime those threads run.
    pub nice: u8,
    /// Whether those threads run in Linux's idle scheduling class too (`kbq serve` and
    /// `kbq mcp`; `kbq ingest` has no lookups to give way to).
    pub idle_class: bool,
    /// Ended jobs this node keeps in memory; older ones are answered from the store.
    pub keep_ended_jobs: usize,
    /// Seconds after its end that a job is forgotten (its record deleted; the job then
    /// answers 404); 0: never.
    pub forget_ended_jobs_after_secs: u64,
    /// Seconds a node holds its jobs without renewing its lease (every 2 s); another node
    /// takes over the jobs of a node whose lease ended.
    pub job_lease_secs: u64,
    /// Distinct descriptions of an entity from which the model summarises them into its
    /// description; below, or with no model, the most representative one is selected. 0:
    /// never summarise.
    pub summarise_after: usize,
    /// Whether PDF and DOCX sources are parsed in kbq's own process rather than in a process
    /// of their own, where a crafted file that crashes the parser ends only that process.
    pub parse_in_process: bool,
    /// The program run to parse PDF and DOCX apart (`PROGRAM parse-document --format F`);
    /// empty: the running kbq executable.
    pub parser_program: String,
    /// The parser process's address-space limit, in MiB; 0: none.
    pub parser_memory_mb: u64,
    /// Seconds a source's parse may take before its job fails.
    pub parse_timeout_secs: u64,
}

impl Default for IngestSection {
    fn default() -> Self {
        IngestSection {
            chunk_chars: 1200,
            chunk_overlap_chars: 150,
            max_calls_in_flight: 8,
            max_jobs: 64,
            max_running_mb: 256,
            max_queued: 1000,
            max_source_bytes: 16 << 20,
            entity_types: Vec::new(),
            providers: Vec::new(),
            attempts: 2,
            same_name: 0.95,
            doubtful_name: 0.80,
            same_description: 0.80,
            different_description: 0.50,
            confirm_doubtful: true,
            threads: 2,
            nice: 10,
            idle_class: true,
            keep_ended_jobs: 1000,
            forget_ended_jobs_after_secs: 7 * 24 * 3600,
            job_lease_secs: 30,
            summarise_after: 4,
            parse_in_process: false,
            parser_program: String::new(),
            parser_memory_mb: 4096,
            parse_timeout_secs: 60,
        }
    }
}

impl IngestSection {
    pub(super) fn validate(&self, providers: &[super::ProviderSection]) -> Result<(), ConfigError> {
        within("ingest.chunk_chars", self.chunk_chars, 100, 100_000)?;
        if self.chunk_overlap_chars >= self.chunk_chars {
            return bad(
                "ingest.chunk_overlap_chars",
                "must be less than ingest.chunk_chars",
            );
        }
        within(
            "ingest.max_calls_in_flight",
            self.max_calls_in_flight,
            1,
            1024,
        )?;
        within("ingest.max_jobs", self.max_jobs, 1, 1024)?;
        within("ingest.max_running_mb", self.max_running_mb, 1, 1 << 20)?;
        within("ingest.max_queued", self.max_queued, 1, 1_000_000)?;
        within("ingest.max_source_bytes", self.max_source_bytes, 1, 1 << 30)?;
        within("ingest.attempts", self.attempts, 1, 10)?;
        within("ingest.same_name", self.same_name, 0.0, 1.0)?;
        within("ingest.threads", self.threads, 0, 64)?;
        within("ingest.nice", self.nice, 0, 19)?;
        within("ingest.keep_ended_jobs", self.keep_ended_jobs, 1, 1_000_000)?;
        within(
            "ingest.forget_ended_jobs_after_secs",
            self.forget_ended_jobs_after_secs,
            0,
            10 * 365 * 24 * 3600,
        )?;
        within("ingest.job_lease_secs", self.job_lease_secs, 6, 3600)?;
        within("ingest.summarise_after", self.summarise_after, 0, 1000)?;
        within(
            "ingest.parse_timeout_secs",
            self.parse_timeout_secs,
            1,
            3600,
        )?;
        if self.parser_memory_mb != 0 && !(256..=1 << 20).contains(&self.parser_memory_mb) {
            return bad(
                "ingest.parser_memory_mb",
                "must be 0 (no limit) or between 256 and 1048576",
            );
        }
        within(
            "ingest.doubtful_name",
            self.doubtful_name,
            0.0,
            self.same_name,
        )?;
        within("ingest.same_description", self.same_description, -1.0, 1.0)?;
        within(
            "ingest.different_description",
            self.different_description,
            -1.0,
            self.same_description,
        )?;
        for (i, t) in self.entity_types.iter().enumerate() {
            if t.trim().is_empty() || t.chars().count() > 64 {
                return bad(
                    &format!("ingest.entity_types[{i}]"),
                    "must be 1 to 64 characters, not only white space",
                );
            }
        }
        for (i, name) in self.providers.iter().enumerate() {
            if !providers.iter().any(|p| &p.name == name) {
                return bad(
                    &format!("ingest.providers[{i}]"),
                    "must name a provider of [[providers]]",
                );
            }
        }
        Ok(())
    }

    /// The runtime's settings.
    pub(super) fn runtime(&self) -> kbq_actors::ingest::IngestConfig {
        kbq_actors::ingest::IngestConfig {
            chunk: kbq_ingest::ChunkConfig::new(self.chunk_chars, self.chunk_overlap_chars)
                .unwrap_or_default(),
            max_calls_in_flight: self.max_calls_in_flight,
            max_jobs: self.max_jobs,
            max_running_bytes: self.max_running_mb << 20,
            max_queued: self.max_queued,
            entity_types: self.entity_types.clone(),
            providers: (!self.providers.is_empty()).then(|| self.providers.clone()),
            attempts: self.attempts,
            resolve: kbq_ingest::ResolveConfig {
                same_name: self.same_name,
                doubtful_name: self.doubtful_name,
                same_description: self.same_description,
                different_description: self.different_description,
            },
            confirm_doubtful: self.confirm_doubtful,
            threads: self.threads,
            nice: self.nice,
            idle_class: self.idle_class,
            keep_ended_jobs: self.keep_ended_jobs,
            forget_ended_after: (self.forget_ended_jobs_after_secs > 0)
                .then(|| std::time::Duration::from_secs(self.forget_ended_jobs_after_secs)),
            max_source_bytes: self.max_source_bytes,
            lease: std::time::Duration::from_secs(self.job_lease_secs),
            claims: true,
            summarise_after: self.summarise_after,
            parser: self.parser(),
            parse_timeout: std::time::Duration::from_secs(self.parse_timeout_secs),
        }
    }

    /// Where PDF and DOCX are parsed: apart, by `parser_program` or this executable, unless
    /// `parse_in_process` says otherwise (or this executable cannot be found, which is
    /// logged).
    fn parser(&self) -> kbq_actors::parser::Parser {
        use kbq_actors::parser::{Parser, ParserProcess};
        if self.parse_in_process {
            return Parser::InProcess;
        }
        let program = match self.parser_program.as_str() {
            "" => match running_executable() {
                Ok(program) => program,
                Err(error) => {
                    tracing::warn!(%error, "kbq's own executable was not found: PDF and DOCX are parsed in process");
                    return Parser::InProcess;
                }
            },
            program => program.into(),
        };
        Parser::Process(ParserProcess {
            program,
            memory_bytes: (self.parser_memory_mb > 0).then_some(self.parser_memory_mb << 20),
        })
    }
}

/// The executable this process runs. On Linux `/proc/self/exe`, which the child opens after
/// its fork: the very image that runs, even when an upgrade has replaced or deleted the file
/// since the start, so the parser always speaks this version's protocol.
fn running_executable() -> std::io::Result<std::path::PathBuf> {
    if cfg!(target_os = "linux") {
        let path = std::path::PathBuf::from("/proc/self/exe");
        if path.exists() {
            return Ok(path);
        }
    }
    std::env::current_exe()
}
