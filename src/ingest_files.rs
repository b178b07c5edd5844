//! `kbq ingest PATH...`: files and folders (recursively) into the store, through the same
//! pipeline as `POST /data/v1/ingest/sources` (docs/ingest.md), with a progress bar. Each
//! file is the source (`files`, its path as given); running again on the same files asks the
//! model nothing for those whose content has not changed.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use kbq_actors::Runtime;
use kbq_actors::ingest::{JobCounts, JobStatus, JobView, SourceInput};

use crate::config::Config;

/// The `source` of every file this command ingests.
pub const SOURCE: &str = "files";

/// Who owns the jobs this command runs (the store keeps each job's owner).
const OWNER: &str = "cli";

/// Ingests `paths` into the store of `config`. Exit status as `kbq import`'s: 0 when every
/// file was ingested, 1 when any failed, 2 when the store or the paths could not be read.
pub async fn run(config: Config, workspace: &str, paths: Vec<PathBuf>) -> ExitCode {
    let files = match files_of(&paths) {
        Ok(files) if files.is_empty() => {
            eprintln!(
                "kbq: no file to ingest in the paths given (docs/ingest.md lists the formats)"
            );
            return ExitCode::from(2);
        }
        Ok(files) => files,
        Err(e) => {
            eprintln!("kbq: {e}");
            return ExitCode::from(2);
        }
    };
    let kb = match crate::workspaces_cli::open_workspace(&config, workspace).await {
        Ok(kb) => kb,
        Err(message) => {
            eprintln!("kbq: {message}");
            return ExitCode::from(2);
        }
    };
    // The command runs its own files' jobs only: unfinished jobs in the store are a
    // server's to take over.
    let mut runtime_config = config.runtime_config();
    runtime_config.ingest.claims = false;
    // No lookups run beside a command's jobs: the idle class would only hand its cores to
    // whatever else the machine runs (config.ingest.idle_class).
    runtime_config.ingest.idle_class = false;
    let runtime = match Runtime::start(kb.clone(), runtime_config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kbq: the actor runtime did not start: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let outcome = ingest_all(&runtime, &files).await;
    runtime.stop().await;
    let secs = started.elapsed().as_secs_f64();
    for (file, reason) in &outcome.failures {
        eprintln!("{}: {reason}", file.display());
    }
    let c = &outcome.counts;
    let summary = format!(
        "ingested {} of {} files ({} chunks) in {secs:.1}s: {} entities and {} relationships added, {} names merged, {} entities and {} relationships retracted, {} model calls, {} chunks failed; {} failed",
        outcome.succeeded,
        files.len(),
        c.chunks,
        c.entities_added,
        c.relationships_added,
        c.entities_merged,
        c.entities_retracted,
        c.relationships_retracted,
        c.model_calls,
        c.chunks_failed,
        outcome.failures.len(),
    );
    crate::cli::finish(&summary, !outcome.failures.is_empty())
}

/// What ingesting the files did.
#[derive(Default)]
struct Outcome {
    succeeded: usize,
    counts: JobCounts,
    failures: Vec<(PathBuf, String)>,
}

/// Submits the files a few at a time (twice the jobs that run at once, so that the next is
/// queued when one ends) and follows their jobs, the bar counting files and the message the
/// chunks, model calls and facts of the jobs so far.
async fn ingest_all(runtime: &Runtime, files: &[PathBuf]) -> Outcome {
    let ingestor = &runtime.ingest;
    let ahead = ingestor.config().max_jobs.max(1) * 2;
    let bar = ProgressBar::new(files.len() as u64).with_prefix("files");
    bar.set_style(
        ProgressStyle::with_template("{prefix:>6} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut outcome = Outcome::default();
    let mut waiting: VecDeque<&PathBuf> = files.iter().collect();
    let mut running: Vec<(&PathBuf, tokio::sync::watch::Receiver<JobView>)> = Vec::new();
    let mut done_counts = JobCounts::default();
    while !waiting.is_empty() || !running.is_empty() {
        // The files that fit are submitted at once: their job records are written in one
        // statement (the store groups the writes made at the same time).
        let room = ahead.saturating_sub(running.len()).min(waiting.len());
        let next: Vec<&PathBuf> = waiting.drain(..room).collect();
        let submitted =
            futures::future::join_all(next.iter().map(|file| submit(runtime, file))).await;
        for (file, submitted) in next.into_iter().zip(submitted) {
            match submitted {
                Ok(watch) => running.push((file, watch)),
                Err(reason) => {
                    outcome.failures.push((file.clone(), reason));
                    bar.inc(1);
                }
            }
        }
        // The jobs that ended leave the running list; the rest are shown.
        let mut shown = done_counts;
        let (mut chunks_done, mut chunks_total) = (0, 0);
        let mut still = Vec::with_capacity(running.len());
        for (file, mut watch) in running.drain(..) {
            let view = watch.borrow_and_update().clone();
            if view.status.is_final() {
                add(&mut done_counts, &view.counts);
                add(&mut shown, &view.counts);
                match view.status {
                    JobStatus::Succeeded => outcome.succeeded += 1,
                    _ => outcome.failures.push((
                        file.clone(),
                        view.error.unwrap_or_else(|| format!("{:?}", view.status)),
                    )),
                }
                bar.inc(1);
            } else {
                add(&mut shown, &view.counts);
                chunks_done += view.chunks_done;
                chunks_total += view.chunks_total;
                still.push((file, watch));
            }
        }
        running = still;
        bar.set_message(format!(
            "chunks {chunks_done}/{chunks_total} in the files being read; {} model calls; {} entities, {} relationships added",
            shown.model_calls, shown.entities_added, shown.relationships_added
        ));
        if !running.is_empty() {
            // Until a job changes (one that ends makes room for the next file at once), or
            // 100 ms for the bar. A fixed sleep here held unchanged files, which end in
            // about a millisecond, to `ahead` per 100 ms.
            let changes = running
                .iter_mut()
                .map(|(_, watch)| Box::pin(watch.changed()));
            let changed = tokio::time::timeout(
                Duration::from_millis(100),
                futures::future::select_all(changes),
            )
            .await;
            if let Ok((Err(_), _, _)) = changed {
                // A job's sender is gone before its end was seen: no change will wake this
                // loop, so it reads again in 100 ms.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    bar.finish();
    outcome.counts = done_counts;
    outcome
}

/// Submits one file; its job's progress.
async fn submit(
    runtime: &Runtime,
    file: &Path,
) -> Result<tokio::sync::watch::Receiver<JobView>, String> {
    let content = std::fs::read(file).map_err(|e| format!("cannot read: {e}"))?;
    let input = SourceInput {
        source: SOURCE.into(),
        source_id: file.display().to_string(),
        title: None,
        url: None,
        content_type: None,
        file_name: Some(file.display().to_string()),
        content,
    };
    let view = runtime
        .ingest
        .submit(input, OWNER)
        .await
        .map_err(|e| e.to_string())?;
    runtime
        .ingest
        .watch(&view.job_id, OWNER)
        .ok_or_else(|| "its job was lost".to_string())
}

fn add(total: &mut JobCounts, c: &JobCounts) {
    total.chunks += c.chunks;
    total.chunks_failed += c.chunks_failed;
    total.model_calls += c.model_calls;
    total.entities_added += c.entities_added;
    total.entities_merged += c.entities_merged;
    total.relationships_added += c.relationships_added;
    total.entities_retracted += c.entities_retracted;
    total.relationships_retracted += c.relationships_retracted;
}

/// The files named, and those under the folders named whose extension ingestion reads, in
/// name order. A file named outright is taken whatever its extension (its job says why it
/// cannot be read).
fn files_of(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        let meta =
            std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if meta.is_dir() {
            walk(path, &mut files).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        } else {
            files.push(path.clone());
        }
    }
    files.dedup();
    Ok(files)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with('.') {
            // Hidden files and folders (.git, editors' files) are not sources.
            continue;
        }
        if path.is_dir() {
            walk(&path, files)?;
        } else if kbq_ingest::detect(None, Some(name)).is_ok() {
            files.push(path);
        }
    }
    Ok(())
}
