//! Prometheus metrics at `GET /metrics` (text exposition format 0.0.4): requests by route,
//! method and status, latency histograms by route, worker pools, providers, tool calls and
//! rate-limit rejections. docs/operations.md lists every series.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};
use dashmap::DashMap;
use kbq_actors::{Agent, Pools};
use kbq_store::{IndexStats, KnowledgeBase};

use crate::startup::Readiness;

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The route label of a request no route matched: a label per path would let any client
/// grow the series without bound.
pub const UNMATCHED: &str = "unmatched";

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Nanoseconds.
    sum: AtomicU64,
}

/// Every counter and histogram; gauges are read at scrape time.
#[derive(Default)]
pub struct Metrics {
    requests: DashMap<(String, String, u16), AtomicU64>,
    latency: DashMap<String, Histogram>,
    rate_limited: DashMap<&'static str, AtomicU64>,
    tool_calls: DashMap<(String, &'static str), AtomicU64>,
}

impl Metrics {
    pub fn observe_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .entry((route.to_string(), method.to_string(), status))
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
        let h = self.latency.entry(route.to_string()).or_default();
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                h.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum.fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    /// A request refused with 429 by the budget of `group` (`graph` or `agent`).
    pub fn observe_rate_limited(&self, group: &'static str) {
        self.rate_limited
            .entry(group)
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// One tool call of an agent session; `ok` false when its result is an error.
    pub fn observe_tool_call(&self, tool: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.tool_calls
            .entry((tool.to_string(), outcome))
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text, with the pools, providers and indexes read now.
    pub async fn render(&self, pools: &Pools, agent: &Agent, memory: &MemoryReading) -> String {
        let mut out = String::new();
        memory.render(&mut out);
        header(
            &mut out,
            "kbq_http_requests_total",
            "counter",
            "HTTP requests by route pattern, method and status.",
        );
        let mut rows: Vec<_> = self
            .requests
            .iter()
            .map(|e| (e.key().clone(), e.value().load(Ordering::Relaxed)))
            .collect();
        rows.sort();
        for ((route, method, status), n) in rows {
            let _ = writeln!(
                out,
                "kbq_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                escape(&route),
                escape(&method)
            );
        }
        header(
            &mut out,
            "kbq_http_request_duration_seconds",
            "histogram",
            "Time from a request's arrival to its response, by route pattern.",
        );
        let mut routes: Vec<String> = self.latency.iter().map(|e| e.key().clone()).collect();
        routes.sort();
        for route in routes {
            let Some(h) = self.latency.get(&route) else {
                continue;
            };
            let r = escape(&route);
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "kbq_http_request_duration_seconds_bucket{{route=\"{r}\",le=\"{le}\"}} {}",
                    h.buckets[i].load(Ordering::Relaxed)
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "kbq_http_request_duration_seconds_bucket{{route=\"{r}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "kbq_http_request_duration_seconds_sum{{route=\"{r}\"}} {}",
                h.sum.load(Ordering::Relaxed) as f64 / 1e9
            );
            let _ = writeln!(
                out,
                "kbq_http_request_duration_seconds_count{{route=\"{r}\"}} {count}"
            );
        }

        let readings = pools.read().await;
        pool_gauge(
            &mut out,
            "kbq_pool_workers",
            "Workers in each actor pool now (each pool's size follows its load between its bounds).",
            readings.iter().map(|r| (&r.name, Some(r.size))),
        );
        pool_gauge(
            &mut out,
            "kbq_pool_in_flight",
            "Requests each actor pool has admitted and not yet answered, running or queued (graph and graph:documents: with the requests the HTTP workers' own actors answer).",
            readings.iter().map(|r| (&r.name, Some(r.in_flight))),
        );
        // A restarting pool's factory has no stats: it has no line in these two.
        pool_gauge(
            &mut out,
            "kbq_pool_active_workers",
            "Workers of each actor pool busy with a request.",
            readings
                .iter()
                .map(|r| (&r.name, r.stats.map(|s| s.active_workers))),
        );
        pool_gauge(
            &mut out,
            "kbq_pool_queue_depth",
            "Requests waiting for a worker, per actor pool.",
            readings
                .iter()
                .map(|r| (&r.name, r.stats.map(|s| s.queue_depth))),
        );

        let report = agent.health().report();
        header(
            &mut out,
            "kbq_provider_up",
            "gauge",
            "1 while a provider is up, 0 while it is ejected.",
        );
        for p in &report.providers {
            let _ = writeln!(
                out,
                "kbq_provider_up{{provider=\"{}\",kind=\"{}\"}} {}",
                escape(&p.name),
                p.kind,
                u8::from(p.status == "up")
            );
        }
        header(
            &mut out,
            "kbq_provider_consecutive_failures",
            "gauge",
            "Failed calls and probes in a row, per provider.",
        );
        for p in &report.providers {
            let _ = writeln!(
                out,
                "kbq_provider_consecutive_failures{{provider=\"{}\"}} {}",
                escape(&p.name),
                p.consecutive_failures
            );
        }
        header(
            &mut out,
            "kbq_provider_latency_seconds",
            "gauge",
            "Latency of each provider's last successful call or probe.",
        );
        for p in &report.providers {
            if let Some(ms) = p.latency_ms {
                let _ = writeln!(
                    out,
                    "kbq_provider_latency_seconds{{provider=\"{}\"}} {}",
                    escape(&p.name),
                    ms / 1000.0
                );
            }
        }
        header(
            &mut out,
            "kbq_tool_calls_total",
            "counter",
            "Tool calls made by agent sessions, by tool and outcome (ok or error).",
        );
        let mut calls: Vec<_> = self
            .tool_calls
            .iter()
            .map(|e| (e.key().clone(), e.value().load(Ordering::Relaxed)))
            .collect();
        calls.sort();
        for ((tool, outcome), n) in calls {
            let _ = writeln!(
                out,
                "kbq_tool_calls_total{{tool=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(&tool)
            );
        }
        header(
            &mut out,
            "kbq_rate_limited_total",
            "counter",
            "Requests refused with 429, by rate-limit budget (graph or agent).",
        );
        let mut limited: Vec<_> = self
            .rate_limited
            .iter()
            .map(|e| (*e.key(), e.value().load(Ordering::Relaxed)))
            .collect();
        limited.sort();
        for (group, n) in limited {
            let _ = writeln!(out, "kbq_rate_limited_total{{budget=\"{group}\"}} {n}");
        }
        out
    }
}

/// What start-up, the in-memory indexes and the process hold, read at scrape time.
pub struct MemoryReading {
    pub ready: bool,
    /// Whether the store answered a ping at scrape time.
    pub store_up: bool,
    pub indexes: IndexStats,
    /// Resident set size, where the platform tells it.
    pub resident_bytes: Option<u64>,
    /// Ingestion jobs this node holds in memory: queued, running, ended.
    pub ingest_jobs: (u64, u64, u64),
    /// The workspaces other than `default` open on this node at the last sweep.
    pub workspaces: crate::workspaces::Swept,
    /// Workspaces this node has closed since it started: idle, and for the index budget.
    pub workspaces_closed: (u64, u64),
    /// The nodes the rate budgets are shared among (1 on an embedded store).
    pub rate_limit_nodes: u64,
}

impl MemoryReading {
    fn render(&self, out: &mut String) {
        header(
            out,
            "kbq_ready",
            "gauge",
            "1 once start-up is done (the store connected and its indexes built), else 0.",
        );
        let _ = writeln!(out, "kbq_ready {}", u8::from(self.ready));
        header(
            out,
            "kbq_store_up",
            "gauge",
            "1 when the store answered a ping at scrape time (within 1 s), else 0. Readiness does not follow it: a node whose store is down still answers from its indexes.",
        );
        let _ = writeln!(out, "kbq_store_up {}", u8::from(self.store_up));
        let s = &self.indexes;
        header(
            out,
            "kbq_index_bytes",
            "gauge",
            "Approximate heap bytes of each in-memory index: graph (nodes, edges, their entities and relationships), names (the name-search index), vectors (with the inverted file), keyword (BM25 postings), documents (the documents an embedded store holds).",
        );
        for (index, bytes) in [
            ("graph", s.graph_bytes),
            ("names", s.names_bytes),
            ("vectors", s.vectors_bytes),
            ("keyword", s.keyword_bytes),
            ("documents", s.documents_bytes),
        ] {
            let _ = writeln!(out, "kbq_index_bytes{{index=\"{index}\"}} {bytes}");
        }
        header(
            out,
            "kbq_index_records",
            "gauge",
            "Records in the in-memory indexes: entities and relationships (graph), documents (keyword) and vectors.",
        );
        for (kind, n) in [
            ("entities", s.entities),
            ("relationships", s.relationships),
            ("documents", s.documents),
            ("vectors", s.vectors),
        ] {
            let _ = writeln!(out, "kbq_index_records{{kind=\"{kind}\"}} {n}");
        }
        header(
            out,
            "kbq_ingest_jobs",
            "gauge",
            "Ingestion jobs this node holds in memory, by state: queued, running, ended (at most ingest.keep_ended_jobs).",
        );
        let (queued, running, ended) = self.ingest_jobs;
        for (state, n) in [("queued", queued), ("running", running), ("ended", ended)] {
            let _ = writeln!(out, "kbq_ingest_jobs{{state=\"{state}\"}} {n}");
        }
        header(
            out,
            "kbq_workspaces_open",
            "gauge",
            "Workspaces other than default open on this node (their indexes built), at the last sweep (every 5 s at most). The kbq_index_* series are default's.",
        );
        let _ = writeln!(out, "kbq_workspaces_open {}", self.workspaces.open);
        header(
            out,
            "kbq_workspaces_index_bytes",
            "gauge",
            "Approximate heap bytes of the indexes of the workspaces other than default open on this node, at the last sweep; workspaces.index_budget_mb bounds it.",
        );
        let _ = writeln!(
            out,
            "kbq_workspaces_index_bytes {}",
            self.workspaces.index_bytes
        );
        header(
            out,
            "kbq_workspace_index_bytes",
            "gauge",
            "Approximate heap bytes of an open workspace's indexes, for the workspaces.metrics_series open workspaces with the largest, at the last sweep. database is the workspace's (the admin API shows it), never its name.",
        );
        for w in &self.workspaces.largest {
            let _ = writeln!(
                out,
                "kbq_workspace_index_bytes{{database=\"{}\"}} {}",
                w.database, w.index_bytes
            );
        }
        header(
            out,
            "kbq_workspace_idle_seconds",
            "gauge",
            "Seconds since a request last used an open workspace, for the same workspaces as kbq_workspace_index_bytes; workspaces.idle_close_secs closes it.",
        );
        for w in &self.workspaces.largest {
            let _ = writeln!(
                out,
                "kbq_workspace_idle_seconds{{database=\"{}\"}} {}",
                w.database, w.idle_secs
            );
        }
        header(
            out,
            "kbq_workspaces_closed_total",
            "counter",
            "Workspaces this node closed, by reason: idle (workspaces.idle_close_secs) or budget (workspaces.index_budget_mb).",
        );
        for (reason, n) in [
            ("idle", self.workspaces_closed.0),
            ("budget", self.workspaces_closed.1),
        ] {
            let _ = writeln!(
                out,
                "kbq_workspaces_closed_total{{reason=\"{reason}\"}} {n}"
            );
        }
        header(
            out,
            "kbq_rate_limit_nodes",
            "gauge",
            "The nodes the rate budgets are shared among: each enforces its share, rounded up. 1 on an embedded store.",
        );
        let _ = writeln!(out, "kbq_rate_limit_nodes {}", self.rate_limit_nodes);
        if let Some(rss) = self.resident_bytes {
            header(
                out,
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size of the kbq process in bytes.",
            );
            let _ = writeln!(out, "process_resident_memory_bytes {rss}");
        }
    }
}

/// The process's resident set size, from /proc/self/statm (Linux).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A gauge with a line per pool that has a value (`pool` label).
fn pool_gauge<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (&'a String, Option<usize>)>,
) {
    header(out, name, "gauge", help);
    for (pool, value) in values {
        if let Some(value) = value {
            let _ = writeln!(out, "{name}{{pool=\"{}\"}} {value}", escape(pool));
        }
    }
}

/// A label value as the exposition format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Middleware: counts every response by route pattern, method and status, and times it.
pub async fn record(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let metrics = req.app_data::<web::Data<Metrics>>().cloned();
    let method = req.method().to_string();
    let res = next.call(req).await?;
    if let Some(metrics) = metrics {
        let route = res
            .request()
            .match_pattern()
            .unwrap_or_else(|| UNMATCHED.to_string());
        metrics.observe_request(
            &route,
            &method,
            res.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
    }
    Ok(res)
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "probes",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain")),
)]
pub async fn metrics(
    metrics: web::Data<Metrics>,
    pools: web::Data<Pools>,
    agent: web::Data<Agent>,
    kb: web::Data<KnowledgeBase>,
    readiness: web::Data<Readiness>,
    sources: web::Data<crate::routes::sources::SourcesService>,
    req: actix_web::HttpRequest,
) -> HttpResponse {
    // The workspaces and the rate budgets, when the app has them (a test's may not).
    let workspaces = req.app_data::<web::Data<crate::workspaces::Workspaces>>();
    let limits = req.app_data::<web::Data<crate::limits::RateLimits>>();
    let store_up = crate::routes::probes::store_state(&kb).await == "up";
    // Walking every index takes milliseconds on a large store: off the HTTP worker.
    let kb = kb.into_inner();
    let indexes = web::block(move || kb.index_stats())
        .await
        .unwrap_or_default();
    let memory = MemoryReading {
        ready: readiness.is_ready(),
        store_up,
        indexes,
        resident_bytes: resident_bytes(),
        ingest_jobs: sources.ingestor().jobs_here(),
        workspaces: workspaces.map(|w| w.last_sweep()).unwrap_or_default(),
        workspaces_closed: workspaces.map(|w| w.closed()).unwrap_or_default(),
        rate_limit_nodes: limits.map_or(1, |l| l.nodes()),
    };
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(metrics.render(&pools, &agent, &memory).await)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
    }
}
