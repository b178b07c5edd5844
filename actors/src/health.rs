//! Provider health: the [`HealthBoard`] that everyone reads without waiting, and the
//! [`HealthActor`] that writes it from interval probes and from live-traffic outcomes.
//!
//! Rules: a provider that fails `failure_threshold` times in a row is ejected for a cooldown
//! (`cooldown`, doubled on each repeat ejection up to `max_cooldown`; the count resets once it
//! stays up for `max_cooldown`). An ejected provider gets no traffic; after its cooldown the
//! first successful probe brings it back. healthy = every provider up, degraded = some up and
//! some down, unhealthy = none up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Serialize;

use crate::backend::{Backend, ProviderError};

/// Thresholds and timings of the health rules.
#[derive(Debug, Clone, Copy)]
pub struct HealthPolicy {
    pub probe_interval: Duration,
    pub failure_threshold: u32,
    pub cooldown: Duration,
    pub max_cooldown: Duration,
}

/// The overall value.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    Degraded,
    Unhealthy,
}

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    kind: &'static str,
    consecutive_failures: u32,
    ejected_until: Option<Instant>,
    ejections: u32,
    up_since: Option<Instant>,
    latency: Option<Duration>,
    last_error: Option<String>,
    last_checked: Option<Instant>,
}

/// An entry's reported times at `now`.
struct Timings {
    latency_ms: Option<f64>,
    ejected_for_ms: Option<u64>,
    checked_ms_ago: Option<u64>,
}

impl Entry {
    /// Whether the provider may take traffic: it is not ejected.
    fn is_up(&self) -> bool {
        self.ejected_until.is_none()
    }

    /// `up` or `down`.
    fn status(&self) -> &'static str {
        if self.is_up() { "up" } else { "down" }
    }

    fn timings(&self, now: Instant) -> Timings {
        Timings {
            latency_ms: self
                .latency
                .map(|d| (d.as_secs_f64() * 1e5).round() / 100.0),
            ejected_for_ms: self
                .ejected_until
                .map(|t| t.saturating_duration_since(now).as_millis() as u64),
            checked_ms_ago: self
                .last_checked
                .map(|t| now.duration_since(t).as_millis() as u64),
        }
    }
}

/// healthy = every provider up, degraded = some up and some down, unhealthy = none up.
fn overall(entries: &[Entry]) -> Health {
    let up = entries.iter().filter(|e| e.is_up()).count();
    match (up, entries.len()) {
        (0, _) => Health::Unhealthy,
        (u, n) if u == n => Health::Healthy,
        _ => Health::Degraded,
    }
}

/// One provider's state as reported.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct ProviderStatus {
    pub name: String,
    pub kind: &'static str,
    /// `up` or `down`.
    pub status: &'static str,
    /// Latency of the last successful call or probe, in milliseconds.
    pub latency_ms: Option<f64>,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
    /// Milliseconds left before an ejected provider may come back.
    pub ejected_for_ms: Option<u64>,
    /// Milliseconds since the provider was last heard from.
    pub checked_ms_ago: Option<u64>,
}

/// A consistent copy of the board.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct HealthReport {
    pub status: Health,
    pub providers: Vec<ProviderStatus>,
}

/// The shared health state, in provider priority order.
#[derive(Clone)]
pub struct HealthBoard {
    entries: Arc<RwLock<Vec<Entry>>>,
    policy: HealthPolicy,
}

impl HealthBoard {
    pub fn new(providers: &[(String, &'static str)], policy: HealthPolicy) -> Self {
        let now = Instant::now();
        let entries = providers
            .iter()
            .map(|(name, kind)| Entry {
                name: name.clone(),
                kind,
                consecutive_failures: 0,
                ejected_until: None,
                ejections: 0,
                up_since: Some(now),
                latency: None,
                last_error: None,
                last_checked: None,
            })
            .collect();
        HealthBoard {
            entries: Arc::new(RwLock::new(entries)),
            policy,
        }
    }

    /// Providers that may take traffic now, in priority order.
    pub fn available(&self) -> Vec<String> {
        self.entries
            .read()
            .iter()
            .filter(|e| e.is_up())
            .map(|e| e.name.clone())
            .collect()
    }

    pub fn report(&self) -> HealthReport {
        self.report_at(Instant::now())
    }

    fn report_at(&self, now: Instant) -> HealthReport {
        let entries = self.entries.read();
        let providers: Vec<ProviderStatus> = entries
            .iter()
            .map(|e| {
                let t = e.timings(now);
                ProviderStatus {
                    name: e.name.clone(),
                    kind: e.kind,
                    status: e.status(),
                    latency_ms: t.latency_ms,
                    last_error: e.last_error.clone(),
                    consecutive_failures: e.consecutive_failures,
                    ejected_for_ms: t.ejected_for_ms,
                    checked_ms_ago: t.checked_ms_ago,
                }
            })
            .collect();
        HealthReport {
            status: overall(&entries),
            providers,
        }
    }

    /// Appends the report as JSON, the bytes `serde_json` writes for [`Self::report`] (a
    /// unit test holds both to the same bytes), and returns its overall value. Load
    /// balancers ask for it often: it is written from the board, with nothing copied.
    pub fn write_report(&self, out: &mut String) -> Health {
        self.write_report_at(Instant::now(), out)
    }

    fn write_report_at(&self, now: Instant, out: &mut String) -> Health {
        use std::fmt::Write as _;

        use kbq_store::json::{write_optional_f64, write_optional_str, write_str};
        // Writing to a `String` cannot fail.
        let optional_u64 = |out: &mut String, x: Option<u64>| match x {
            Some(x) => _ = write!(out, "{x}"),
            None => out.push_str("null"),
        };
        let entries = self.entries.read();
        let status = overall(&entries);
        out.push_str(match status {
            Health::Healthy => "{\"status\":\"healthy\",\"providers\":[",
            Health::Degraded => "{\"status\":\"degraded\",\"providers\":[",
            Health::Unhealthy => "{\"status\":\"unhealthy\",\"providers\":[",
        });
        for (i, e) in entries.iter().enumerate() {
            let t = e.timings(now);
            out.push_str(if i > 0 { ",{\"name\":" } else { "{\"name\":" });
            write_str(out, &e.name);
            out.push_str(",\"kind\":");
            write_str(out, e.kind);
            out.push_str(",\"status\":\"");
            out.push_str(e.status());
            out.push_str("\",\"latency_ms\":");
            write_optional_f64(out, t.latency_ms);
            out.push_str(",\"last_error\":");
            write_optional_str(out, e.last_error.as_deref());
            out.push_str(",\"consecutive_failures\":");
            _ = write!(out, "{}", e.consecutive_failures);
            out.push_str(",\"ejected_for_ms\":");
            optional_u64(out, t.ejected_for_ms);
            out.push_str(",\"checked_ms_ago\":");
            optional_u64(out, t.checked_ms_ago);
            out.push('}');
        }
        out.push_str("]}");
        status
    }

    fn record(&self, o: &Outcome) {
        let now = Instant::now();
        let policy = self.policy;
        let mut entries = self.entries.write();
        let Some(e) = entries.iter_mut().find(|e| e.name == o.provider) else {
            return;
        };
        e.last_checked = Some(now);
        if o.ok {
            e.latency = Some(o.latency);
            e.consecutive_failures = 0;
            match e.ejected_until {
                // Only a probe after the cooldown brings an ejected provider back.
                Some(until) if o.probe && now >= until => {
                    e.ejected_until = None;
                    e.up_since = Some(now);
                    tracing::info!(provider = %e.name, "provider back after ejection");
                }
                Some(_) => {}
                None => {
                    if e.up_since
                        .is_some_and(|t| now.duration_since(t) >= policy.max_cooldown)
                    {
                        e.ejections = 0;
                    }
                }
            }
            return;
        }
        e.last_error = o.error.clone();
        e.consecutive_failures += 1;
        let eject = match e.ejected_until {
            None => e.consecutive_failures >= policy.failure_threshold,
            // A failed probe after the cooldown starts a longer one.
            Some(until) => o.probe && now >= until,
        };
        if eject {
            e.ejections += 1;
            let factor = 1u32 << (e.ejections - 1).min(16);
            let cooldown = policy
                .cooldown
                .saturating_mul(factor)
                .min(policy.max_cooldown);
            e.ejected_until = Some(now + cooldown);
            e.up_since = None;
            tracing::warn!(provider = %e.name, ?cooldown, error = ?o.error, "provider ejected");
        }
    }
}

/// The result of one call or probe.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub provider: String,
    pub ok: bool,
    pub latency: Duration,
    pub error: Option<String>,
    /// True for a probe, false for live traffic.
    pub probe: bool,
}

impl Outcome {
    /// The outcome of a call or probe of `provider` that started at `started`.
    pub fn of<T>(
        provider: String,
        started: Instant,
        result: &Result<T, ProviderError>,
        probe: bool,
    ) -> Self {
        Outcome {
            provider,
            ok: result.is_ok(),
            latency: started.elapsed(),
            error: result.as_ref().err().map(|e| e.to_string()),
            probe,
        }
    }
}

/// What the health actor is built from: the board it keeps, and the providers it probes.
pub struct HealthArguments {
    pub board: HealthBoard,
    pub providers: Vec<(String, Arc<dyn Backend>)>,
}

/// The board and the providers to probe.
pub struct HealthState {
    board: HealthBoard,
    providers: Vec<(String, Arc<dyn Backend>)>,
}

/// Messages to the health actor.
#[derive(Debug)]
pub enum HealthMessage {
    /// A call or probe finished.
    Outcome(Outcome),
    /// Time to probe every provider.
    Tick,
}

/// Probes providers on an interval and records every outcome on the board. It never waits
/// on a provider: each probe runs on a task of its own (not in the provider's worker pool,
/// where it could queue behind busy workers) and reports back as a message.
pub struct HealthActor;

impl Actor for HealthActor {
    type Msg = HealthMessage;
    type State = HealthState;
    type Arguments = HealthArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HealthArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(args.board.policy.probe_interval, || HealthMessage::Tick);
        Ok(HealthState {
            board: args.board,
            providers: args.providers,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: HealthMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            HealthMessage::Outcome(o) => state.board.record(&o),
            HealthMessage::Tick => {
                for (name, backend) in &state.providers {
                    probe(name.clone(), backend.clone(), myself.clone());
                }
            }
        }
        Ok(())
    }
}

/// Checks one provider's reachability once (no retries) and tells `health` the outcome.
/// Probes run on tasks of their own, never in the provider's pool, so a busy pool cannot
/// delay them.
fn probe(name: String, backend: Arc<dyn Backend>, health: ActorRef<HealthMessage>) {
    tokio::spawn(async move {
        let started = Instant::now();
        let result = backend.probe().await;
        let outcome = Outcome::of(name, started, &result, true);
        let _ = health.cast(HealthMessage::Outcome(outcome));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> HealthBoard {
        let policy = HealthPolicy {
            probe_interval: Duration::from_secs(1),
            failure_threshold: 2,
            cooldown: Duration::from_millis(30),
            max_cooldown: Duration::from_secs(10),
        };
        HealthBoard::new(&[("a".into(), "openai"), ("b".into(), "builtin")], policy)
    }

    fn outcome(provider: &str, ok: bool, probe: bool) -> Outcome {
        Outcome {
            provider: provider.into(),
            ok,
            latency: Duration::from_millis(5),
            error: (!ok).then(|| "boom".into()),
            probe,
        }
    }

    #[test]
    fn failures_eject_and_a_probe_after_the_cooldown_restores() {
        let b = board();
        assert_eq!(b.report().status, Health::Healthy);
        b.record(&outcome("a", false, false));
        assert_eq!(
            b.report().status,
            Health::Healthy,
            "one failure is not an ejection"
        );
        b.record(&outcome("a", false, false));
        assert_eq!(b.report().status, Health::Degraded);
        assert_eq!(b.available(), vec!["b"]);
        b.record(&outcome("a", true, true));
        assert_eq!(b.available(), vec!["b"], "too early: still cooling down");
        std::thread::sleep(Duration::from_millis(40));
        b.record(&outcome("a", true, true));
        assert_eq!(b.report().status, Health::Healthy);
        // A second ejection lasts twice as long.
        b.record(&outcome("a", false, false));
        b.record(&outcome("a", false, false));
        let left = b.report().providers[0].ejected_for_ms.unwrap();
        assert!(left > 30 && left <= 60, "{left}");
        b.record(&outcome("b", false, false));
        b.record(&outcome("b", false, false));
        assert_eq!(b.report().status, Health::Unhealthy);
        assert_eq!(b.report().providers[1].last_error.as_deref(), Some("boom"));
    }

    /// The report written by hand is what `serde_json` writes for it, at the same instant, in
    /// every state: fresh, failing with an error that needs escapes, ejected, back with a
    /// latency, and with no provider up.
    #[test]
    fn the_written_report_is_what_serde_json_writes() {
        let b = HealthBoard::new(
            &[("a \"quoted\"".into(), "openai"), ("b".into(), "builtin")],
            HealthPolicy {
                probe_interval: Duration::from_secs(1),
                failure_threshold: 2,
                cooldown: Duration::from_millis(30),
                max_cooldown: Duration::from_secs(10),
            },
        );
        let same = |b: &HealthBoard, expected: Health| {
            let now = Instant::now();
            let mut out = String::new();
            assert_eq!(b.write_report_at(now, &mut out), expected);
            assert_eq!(out, serde_json::to_string(&b.report_at(now)).unwrap());
            let mut fresh = String::new();
            assert_eq!(b.write_report(&mut fresh), expected);
            out
        };
        same(&b, Health::Healthy);
        let mut failed = outcome("a \"quoted\"", false, false);
        failed.error = Some("line\n\t\"x\" \\ é \u{1}".into());
        b.record(&failed);
        same(&b, Health::Healthy);
        b.record(&failed);
        let written = same(&b, Health::Degraded);
        assert!(written.contains("\"status\":\"down\""), "{written}");
        let mut ok = outcome("b", true, true);
        ok.latency = Duration::from_micros(1_234_567);
        b.record(&ok);
        let written = same(&b, Health::Degraded);
        assert!(written.contains("\"latency_ms\":1234.57"), "{written}");
        b.record(&outcome("b", false, false));
        b.record(&outcome("b", false, false));
        same(&b, Health::Unhealthy);
    }
}
