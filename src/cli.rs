//! What the one-shot commands (`kbq import`, `kbq ingest`) share: how they end.

use std::io::IsTerminal;
use std::process::ExitCode;

/// Prints a command's one-line result (to standard error at a terminal, where the progress
/// bars are, else to standard output for a script to read) and the exit status: 0 when
/// nothing failed, 1 when something did.
pub fn finish(summary: &str, failed: bool) -> ExitCode {
    if std::io::stderr().is_terminal() {
        eprintln!("{summary}")
    } else {
        println!("{summary}")
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
