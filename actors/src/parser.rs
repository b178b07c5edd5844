//! Where a source's bytes are parsed. The text formats are parsed on the main runtime's
//! blocking pool. PDF and DOCX ([`Format::parsed_apart`]) are parsed, by default, in a
//! process of their own: the kbq executable run as `kbq parse-document --format FORMAT`,
//! which reads the bytes on its standard input and writes a [`ParseAnswer`] as JSON on its
//! standard output. A crafted file that exhausts the parser's stack (which aborts a process),
//! its memory, or its time then ends that process only: the job fails with the reason, and
//! the node, its other jobs and its requests go on.
//!
//! The child runs with limits set between fork and exec: its address space
//! ([`ParserProcess::memory_bytes`]), no core file, and the kernel's out-of-memory killer told
//! to take it first. It is killed when the parse takes longer than the job's time limit and
//! when the job is cancelled (the future that waits for it is dropped).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kbq_ingest::{Format, ParseAnswer, Parsed};
use tokio::io::AsyncWriteExt;

/// How PDF and DOCX sources are parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parser {
    /// In this process, on the blocking pool, like the text formats.
    InProcess,
    /// In a child process, one per document.
    Process(ParserProcess),
}

/// The program run to parse a document apart, and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParserProcess {
    /// The program: the kbq executable (anything that answers `parse-document --format F`
    /// as it does).
    pub program: PathBuf,
    /// The child's address-space limit (`RLIMIT_AS`), in bytes; `None`: no limit.
    pub memory_bytes: Option<u64>,
}

/// Parses `bytes` as `format`, waiting at most `timeout`. The error is the message a failed
/// job gives.
pub(crate) async fn parse(
    parser: &Parser,
    bytes: std::sync::Arc<[u8]>,
    format: Format,
    timeout: Duration,
) -> Result<Parsed, String> {
    let parsing = async move {
        match parser {
            Parser::Process(process) if format.parsed_apart() => {
                parse_apart(process, &bytes, format).await
            }
            _ => tokio::task::spawn_blocking(move || kbq_ingest::parse(&bytes, format))
                .await
                .map_err(|e| format!("parsing stopped: {e}"))?
                .map_err(|e| e.to_string()),
        }
    };
    tokio::time::timeout(timeout, parsing)
        .await
        .map_err(|_| format!("parsing took longer than {} s", timeout.as_secs_f64()))?
}

/// Runs the parser process on `bytes`. Dropping the future kills the child.
async fn parse_apart(
    process: &ParserProcess,
    bytes: &[u8],
    format: Format,
) -> Result<Parsed, String> {
    let mut command = tokio::process::Command::new(&process.program);
    command
        .args(["parse-document", "--format", format.name()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    limit_child(&mut command, process.memory_bytes);
    let mut child = command.spawn().map_err(|e| {
        format!(
            "the {format} parser could not be started ({}): {e}",
            process.program.display()
        )
    })?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // The bytes are written while the output is read: a child that answers before it has
    // read everything (or dies) must not leave the write waiting on a full pipe.
    let write = async move {
        // A child that stops reading is judged by its exit status, not by this write.
        let _ = stdin.write_all(bytes).await;
        drop(stdin);
    };
    let (_, output) = tokio::join!(write, child.wait_with_output());
    let output = output.map_err(|e| format!("the {format} parser could not be waited for: {e}"))?;
    if !output.status.success() {
        return Err(stopped(format, &output.status, &output.stderr));
    }
    match serde_json::from_slice::<ParseAnswer>(&output.stdout) {
        Ok(ParseAnswer::Parsed(parsed)) => Ok(parsed),
        Ok(ParseAnswer::Failed(reason)) => Err(reason),
        Err(e) => Err(format!(
            "the {format} parser answered something other than a parsed document: {e}"
        )),
    }
}

/// The message of a parser process that did not end well: its exit code or signal, and the
/// last line it wrote on its standard error (a Rust panic's or allocator's message).
fn stopped(format: Format, status: &std::process::ExitStatus, stderr: &[u8]) -> String {
    #[cfg(unix)]
    let how = {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (_, Some(signal)) => {
                format!("was stopped by signal {signal} ({})", signal_name(signal))
            }
            (Some(code), _) => format!("exited with status {code}"),
            _ => "ended".to_string(),
        }
    };
    #[cfg(not(unix))]
    let how = format!("exited with {status}");
    let said = String::from_utf8_lossy(stderr);
    let last = said
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(str::trim);
    match last {
        Some(line) => {
            let line: String = line.chars().take(300).collect();
            format!("the {format} parser {how}: {line}")
        }
        None => format!("the {format} parser {how}"),
    }
}

#[cfg(unix)]
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "a crash: SIGSEGV, as when its stack is exhausted",
        libc::SIGABRT => "an abort: SIGABRT, as when its memory runs out",
        libc::SIGKILL => "SIGKILL, as from the out-of-memory killer",
        libc::SIGBUS => "a crash: SIGBUS",
        libc::SIGILL => "a crash: SIGILL",
        libc::SIGFPE => "a crash: SIGFPE",
        _ => "a signal",
    }
}

/// Sets the child's limits between fork and exec.
#[cfg(target_os = "linux")]
fn limit_child(command: &mut tokio::process::Command, memory_bytes: Option<u64>) {
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setrlimit, open, write, close) on values prepared before
    // the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            if let Some(bytes) = memory_bytes {
                let memory = libc::rlimit {
                    rlim_cur: bytes as libc::rlim_t,
                    rlim_max: bytes as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &memory) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // The out-of-memory killer takes this process before the node (best effort).
            let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn limit_child(_: &mut tokio::process::Command, _: Option<u64>) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parser_stopped_by_a_signal_is_named_with_its_last_words() {
        use std::os::unix::process::ExitStatusExt;
        let status = std::process::ExitStatus::from_raw(libc::SIGSEGV);
        let message = stopped(
            Format::Pdf,
            &status,
            b"\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow\n\n",
        );
        assert_eq!(
            message,
            "the pdf parser was stopped by signal 11 (a crash: SIGSEGV, as when its stack is exhausted): fatal runtime error: stack overflow"
        );
        let status = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(
            stopped(Format::Docx, &status, b""),
            "the docx parser exited with status 3"
        );
    }

    #[tokio::test]
    async fn a_parser_that_does_not_answer_in_time_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let program = dir.path().join("hang");
        std::fs::write(
            &program,
            format!(
                "#!/bin/sh\necho $$ > {}\nexec sleep 600\n",
                pid_file.display()
            ),
        )
        .unwrap();
        make_executable(&program);
        let parser = Parser::Process(ParserProcess {
            program,
            memory_bytes: None,
        });
        let bytes: std::sync::Arc<[u8]> = b"%PDF-1.4".to_vec().into();
        let err = parse(&parser, bytes, Format::Pdf, Duration::from_millis(500))
            .await
            .unwrap_err();
        assert_eq!(err, "parsing took longer than 0.5 s");
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed on drop, then reaped by the runtime: gone, or a zombie for a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
            let alive = state.is_some_and(|s| !s.contains(") Z "));
            if !alive {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the parser still runs"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn the_text_formats_are_parsed_here_whatever_the_parser() {
        let parser = Parser::Process(ParserProcess {
            program: PathBuf::from("/nonexistent/kbq"),
            memory_bytes: None,
        });
        let bytes: std::sync::Arc<[u8]> = b"# Title\n\nSome text.".to_vec().into();
        let parsed = parse(
            &parser,
            bytes.clone(),
            Format::Markdown,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(parsed.title.as_deref(), Some("Title"));
        let err = parse(&parser, bytes, Format::Pdf, Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            err.starts_with("the pdf parser could not be started (/nonexistent/kbq): "),
            "{err}"
        );
    }

    fn make_executable(path: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
