//! Start-up: kbq binds its listener before the knowledge base has connected, so that probes
//! are answered at once while a large store is read and its indexes built. [`Readiness`]
//! tracks what start-up is doing; `/readyz` reports it, and [`gate`] answers every API request
//! that needs the knowledge base with 503 `service_unavailable` and `Retry-After` until
//! start-up is done.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;
use indicatif::{ProgressBar, ProgressStyle};
use kbq_store::progress::LoadProgress;
use parking_lot::Mutex;

use crate::error::ApiError;

/// What start-up is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reaching the store (retried until it answers).
    Connecting,
    /// Reading the store and building the in-memory indexes; the percent finished.
    BuildingIndexes(u8),
    /// Importing the bundled demo into an empty store.
    LoadingDemo,
    Ready,
    /// Shutting down: in-flight requests finish, new work is refused.
    Stopping,
}

impl Stage {
    fn encode(self) -> u32 {
        match self {
            Stage::Connecting => 0,
            Stage::BuildingIndexes(p) => 1 << 8 | u32::from(p.min(100)),
            Stage::LoadingDemo => 2 << 8,
            Stage::Ready => 3 << 8,
            Stage::Stopping => 4 << 8,
        }
    }

    fn decode(v: u32) -> Stage {
        match v >> 8 {
            0 => Stage::Connecting,
            1 => Stage::BuildingIndexes((v & 0xff) as u8),
            2 => Stage::LoadingDemo,
            3 => Stage::Ready,
            _ => Stage::Stopping,
        }
    }

    /// Why kbq is not ready yet, as `/readyz` and the gated routes say it; `None` when ready.
    pub fn reason(self) -> Option<String> {
        match self {
            Stage::Connecting => Some("store connecting".into()),
            Stage::BuildingIndexes(p) => Some(format!("building indexes: {p}%")),
            Stage::LoadingDemo => Some("loading the demo knowledge base".into()),
            Stage::Ready => None,
            Stage::Stopping => Some("stopping".into()),
        }
    }
}

/// The start-up stage, shared by the start-up task, the gate and `/readyz`.
pub struct Readiness {
    stage: AtomicU32,
    ready: tokio::sync::watch::Sender<bool>,
    started: Instant,
    /// The progress bar, on a terminal, while indexes are built.
    bar: Mutex<Option<ProgressBar>>,
    show_bar: bool,
    /// The last tenth of the index build written to the log.
    logged_tenth: AtomicU32,
}

impl Readiness {
    /// Starts at [`Stage::Connecting`]. With `show_bar`, building the indexes draws a
    /// progress bar on standard error (for a terminal).
    pub fn new(show_bar: bool) -> Readiness {
        Readiness {
            stage: AtomicU32::new(Stage::Connecting.encode()),
            ready: tokio::sync::watch::Sender::new(false),
            started: Instant::now(),
            bar: Mutex::new(None),
            show_bar,
            logged_tenth: AtomicU32::new(0),
        }
    }

    pub fn stage(&self) -> Stage {
        Stage::decode(self.stage.load(Ordering::Acquire))
    }

    pub fn is_ready(&self) -> bool {
        self.stage() == Stage::Ready
    }

    /// Moves to `stage`; once [`Stage::Stopping`], start-up can no longer move it back.
    pub fn set(&self, stage: Stage) {
        let stopping = Stage::Stopping.encode();
        if self
            .stage
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now != stopping).then_some(stage.encode())
            })
            .is_err()
        {
            return;
        }
        if !matches!(stage, Stage::BuildingIndexes(_)) {
            self.finish_bar();
        }
        if stage == Stage::Ready {
            tracing::info!(
                elapsed_ms = self.started.elapsed().as_millis() as u64,
                "ready"
            );
            self.ready.send_replace(true);
        }
    }

    /// Waits until start-up is done, at most `timeout`; true when it is.
    pub async fn wait(&self, timeout: Duration) -> bool {
        let mut ready = self.ready.subscribe();
        tokio::time::timeout(timeout, ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    fn finish_bar(&self) {
        if let Some(bar) = self.bar.lock().take() {
            bar.finish_and_clear();
        }
    }
}

impl LoadProgress for Readiness {
    fn advance(&self, done: u32, total: u32) {
        let percent = (u64::from(done) * 100 / u64::from(total.max(1))).min(100) as u8;
        self.stage
            .store(Stage::BuildingIndexes(percent).encode(), Ordering::Release);
        // The log gets a line per tenth, for stores that take long enough to have several.
        let tenth = u32::from(percent / 10);
        if self.logged_tenth.fetch_max(tenth, Ordering::AcqRel) < tenth {
            tracing::info!(
                percent,
                elapsed_ms = self.started.elapsed().as_millis() as u64,
                "building indexes"
            );
        }
        if self.show_bar {
            let mut bar = self.bar.lock();
            let bar = bar.get_or_insert_with(|| {
                let bar = ProgressBar::new(100).with_prefix("indexes");
                bar.set_style(
                    ProgressStyle::with_template("{prefix:>13} [{bar:40}] {pos}% {elapsed}")
                        .expect("template")
                        .progress_chars("=> "),
                );
                bar
            });
            bar.set_position(u64::from(percent));
        }
    }
}

/// Gives the pages of freed memory back to the system now. Building the indexes allocates
/// and frees far more than the indexes keep (each part's rows, decoded, then indexed); the
/// allocator (mimalloc) would give the freed pages back by itself only after a delay.
pub fn release_free_memory() {
    // SAFETY: mi_collect only frees and purges the allocator's own free pages; it has no
    // preconditions and touches no memory in use.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// Paths served while starting: the probes, metrics, the API's description, and the two API
/// routes that read no knowledge base (the model list and the providers' health board).
fn served_while_starting(path: &str) -> bool {
    matches!(
        path,
        "/livez" | "/readyz" | "/metrics" | "/openapi.json" | "/v1/models" | "/v1/agent/health"
    ) || path == "/docs"
        || path.starts_with("/docs/")
}

/// Middleware: until start-up is done, every request but those `served_while_starting`
/// gets 503 `service_unavailable` with `Retry-After: 1`, its message saying why. A stopping
/// server serves on: only `/readyz` fails, so that load balancers move traffic away while
/// the requests they still send are answered (`server.shutdown_delay_ms`).
pub async fn gate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let stage = req
        .app_data::<web::Data<Readiness>>()
        .map_or(Stage::Ready, |r| r.stage());
    match stage.reason() {
        Some(reason) if stage != Stage::Stopping && !served_while_starting(req.path()) => {
            Err(ApiError::unavailable(format!("kbq is starting: {reason}")).into())
        }
        _ => next
            .call(req)
            .await
            .map(ServiceResponse::map_into_boxed_body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_survive_their_encoding() {
        for stage in [
            Stage::Connecting,
            Stage::BuildingIndexes(0),
            Stage::BuildingIndexes(40),
            Stage::BuildingIndexes(100),
            Stage::LoadingDemo,
            Stage::Ready,
            Stage::Stopping,
        ] {
            assert_eq!(Stage::decode(stage.encode()), stage);
        }
        assert_eq!(
            Stage::BuildingIndexes(40).reason().as_deref(),
            Some("building indexes: 40%")
        );
    }

    #[test]
    fn progress_sets_the_percent() {
        let r = Readiness::new(false);
        assert_eq!(r.stage(), Stage::Connecting);
        r.advance(2, 5);
        assert_eq!(r.stage(), Stage::BuildingIndexes(40));
        r.set(Stage::Ready);
        assert!(r.is_ready());
        assert_eq!(r.stage().reason(), None);
    }
}
