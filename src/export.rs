//! `kbq export`: a workspace's whole knowledge base written in the import format, from one
//! transaction of the store (docs/operations.md, "Backup and restore").

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use kbq_store::export::{ExportCounts, ExportEvent};

use crate::config::Config;

/// Runs `kbq export`: 0 when the whole knowledge base was written, 1 when the store failed
/// part way (a file named by `-o` is then left as it was), 2 when it could not start.
pub async fn run(config: Config, workspace: &str, output: Option<PathBuf>) -> ExitCode {
    let (kb, database) = match crate::workspaces_cli::open_database(&config, workspace).await {
        Ok(opened) => opened,
        Err(message) => {
            eprintln!("kbq: {message}");
            return ExitCode::from(2);
        }
    };
    let to_file = output.filter(|p| p.as_os_str() != "-");
    // A file is written beside its name and renamed once whole, so that a failed export
    // leaves no half a backup under the name of a whole one.
    let partial = to_file.as_deref().map(partial_name);
    let mut out: Box<dyn Write> = match &partial {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
            Err(e) => {
                eprintln!("kbq: cannot write {}: {e}", p.display());
                return ExitCode::from(2);
            }
        },
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let started = std::time::Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let export = tokio::spawn(async move { kb.export(database.as_deref(), tx).await });
    let bar = bar();
    let mut failed: Option<String> = None;
    while let Some(event) = rx.recv().await {
        match event {
            ExportEvent::Totals(totals) => bar.set_length(totals.total()),
            ExportEvent::Lines { records, bytes } => {
                if let Err(e) = out.write_all(&bytes) {
                    failed = Some(format!("cannot write: {e}"));
                    break;
                }
                bar.inc(records);
            }
        }
    }
    drop(rx);
    bar.finish_and_clear();
    let written: Option<ExportCounts> = match export.await {
        Ok(Ok(counts)) if failed.is_none() => Some(counts),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => {
            failed.get_or_insert(e.to_string());
            None
        }
        Err(e) => {
            failed.get_or_insert(e.to_string());
            None
        }
    };
    let flushed = out.flush();
    drop(out);
    let (Some(counts), Ok(())) = (written, flushed.as_ref()) else {
        if let Some(p) = &partial {
            let _ = std::fs::remove_file(p);
        }
        let why = failed.unwrap_or_else(|| format!("cannot write: {}", flushed.unwrap_err()));
        eprintln!("kbq: export stopped: {why}");
        return ExitCode::FAILURE;
    };
    if let (Some(p), Some(f)) = (&partial, &to_file)
        && let Err(e) = std::fs::rename(p, f)
    {
        eprintln!("kbq: cannot name the export {}: {e}", f.display());
        return ExitCode::FAILURE;
    }
    let secs = started.elapsed().as_secs_f64();
    let summary = format!(
        "exported {} entities, {} relationships, {} documents, {} memories, {} sources, {} supports, {} kept answers{} in {secs:.1}s",
        counts.entities,
        counts.relationships,
        counts.documents,
        counts.memories,
        counts.sources,
        counts.supports,
        counts.extractions,
        to_file
            .as_ref()
            .map(|f| format!(" to {}", f.display()))
            .unwrap_or_default(),
    );
    // The records went to standard output when no file was named: the summary goes to
    // standard error there, whatever it is.
    if to_file.is_none() {
        eprintln!("{summary}");
        return ExitCode::SUCCESS;
    }
    crate::cli::finish(&summary, false)
}

/// Where `file` is written until it is whole: `FILE.partial`.
fn partial_name(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// A bar of records written, drawn only at a terminal.
fn bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0).with_prefix("records");
    bar.set_style(
        ProgressStyle::with_template("{prefix:>13} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar
}
