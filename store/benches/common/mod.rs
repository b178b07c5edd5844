//! Helpers the store benchmarks share.

use std::time::Duration;

/// A numeric setting from the environment, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Summary of latency samples.
pub struct Stats {
    pub mean: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
}

pub fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let n = samples.len();
    let at = |q: usize| samples[(n * q / 100).min(n - 1)];
    Stats {
        mean: samples.iter().sum::<Duration>() / n as u32,
        p50: at(50),
        p95: at(95),
        p99: at(99),
    }
}
