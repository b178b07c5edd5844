//! The sections the HTTP edge reads: `[server]`, `[limits]`, `[auth]`, `[versions.vN]` and
//! `[log]`, each with its defaults and its rules. They are their own file because nothing
//! below the edge (the store, the actor runtime) reads them.

use chrono::{Months, NaiveDate};
use serde::{Deserialize, Serialize};

use super::{ConfigError, bad, within};
use crate::auth::{KeyEntry, Scope};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    /// A second address that answers the probes only (`/livez`, `/readyz`,
    /// `/v1/agent/health`), on an HTTP worker thread of its own; empty: none.
    pub probe_listen: String,
    /// Largest request body accepted; larger bodies get 413.
    pub max_body_bytes: usize,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// How long in-flight requests may finish after a stop signal.
    pub shutdown_timeout_secs: u64,
    /// Longest time a request's head (request line and headers) may take to arrive; then
    /// 408 and the connection is closed.
    pub header_timeout_ms: u64,
    /// Longest time a request's body may take to arrive, from the end of its head; then 408
    /// `request_timeout` and the connection is closed.
    pub body_timeout_ms: u64,
    /// How long a stopping server keeps serving, with `/readyz` failing, before it stops
    /// accepting: the time a load balancer needs to see it and move traffic away.
    pub shutdown_delay_ms: u64,
    /// How much lower than the rest the main runtime's threads run (Linux nice, 0 to 19).
    pub main_runtime_nice: u8,
    /// Threads of the scan lane, the runtime the large searches of the in-memory indexes run
    /// on (at most this many at once); 0: one per CPU.
    pub scan_threads: usize,
    /// How much lower than the main runtime's threads the scan lane's run (nice steps).
    pub scan_nice: u8,
    /// No longer read: the built indexes are not remapped on huge pages (crate::huge_pages
    /// says why). Accepted so that a configuration that sets it still loads; a warning says
    /// it is ignored.
    #[serde(skip_serializing)]
    pub huge_pages: Option<bool>,
    /// Browser origins (`scheme://host[:port]`) whose pages may call kbq (CORS); none by
    /// default (docs/configuration.md).
    pub cors_origins: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            probe_listen: String::new(),
            max_body_bytes: 1 << 20,
            workers: 0,
            shutdown_timeout_secs: 30,
            shutdown_delay_ms: 0,
            header_timeout_ms: 5_000,
            body_timeout_ms: 30_000,
            main_runtime_nice: 2,
            scan_threads: 0,
            scan_nice: 8,
            huge_pages: None,
            cors_origins: Vec::new(),
        }
    }
}

impl ServerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return bad("server.listen", "must be an address like 127.0.0.1:8080");
        }
        if !self.probe_listen.is_empty()
            && self.probe_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return bad(
                "server.probe_listen",
                "must be empty (no probe listener) or an address like 127.0.0.1:8081",
            );
        }
        within(
            "server.max_body_bytes",
            self.max_body_bytes,
            1024,
            256 << 20,
        )?;
        if self.workers > 256 {
            return bad("server.workers", "must be between 0 (one per core) and 256");
        }
        within(
            "server.shutdown_delay_ms",
            self.shutdown_delay_ms,
            0,
            600_000,
        )?;
        within(
            "server.header_timeout_ms",
            self.header_timeout_ms,
            100,
            600_000,
        )?;
        within(
            "server.body_timeout_ms",
            self.body_timeout_ms,
            100,
            3_600_000,
        )?;
        within("server.main_runtime_nice", self.main_runtime_nice, 0, 19)?;
        within("server.scan_threads", self.scan_threads, 0, 64)?;
        within("server.scan_nice", self.scan_nice, 0, 19)?;
        for (i, origin) in self.cors_origins.iter().enumerate() {
            if !crate::cors::is_origin(origin) {
                return bad(
                    &format!("server.cors_origins[{i}]"),
                    "must be an origin as a browser sends it: http:// or https://, a lower-case host, an optional port, nothing after",
                );
            }
        }
        Ok(())
    }
}

/// Per-key request budgets; a rate of 0 turns a budget off.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub graph_per_minute: u32,
    pub graph_burst: u32,
    pub agent_per_minute: u32,
    pub agent_burst: u32,
    /// The same budgets for each workspace, all its keys together; 0: none.
    pub workspace_graph_per_minute: u32,
    pub workspace_graph_burst: u32,
    pub workspace_agent_per_minute: u32,
    pub workspace_agent_burst: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            graph_per_minute: 1200,
            graph_burst: 100,
            agent_per_minute: 60,
            agent_burst: 10,
            workspace_graph_per_minute: 0,
            workspace_graph_burst: 1000,
            workspace_agent_per_minute: 0,
            workspace_agent_burst: 100,
        }
    }
}

impl LimitsSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = self;
        within("limits.graph_per_minute", l.graph_per_minute, 0, 10_000_000)?;
        within("limits.graph_burst", l.graph_burst, 1, 1_000_000)?;
        within("limits.agent_per_minute", l.agent_per_minute, 0, 10_000_000)?;
        within("limits.agent_burst", l.agent_burst, 1, 1_000_000)?;
        within(
            "limits.workspace_graph_per_minute",
            l.workspace_graph_per_minute,
            0,
            100_000_000,
        )?;
        within(
            "limits.workspace_graph_burst",
            l.workspace_graph_burst,
            1,
            10_000_000,
        )?;
        within(
            "limits.workspace_agent_per_minute",
            l.workspace_agent_per_minute,
            0,
            100_000_000,
        )?;
        within(
            "limits.workspace_agent_burst",
            l.workspace_agent_burst,
            1,
            10_000_000,
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    pub keys: Vec<KeyEntry>,
}

impl AuthSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, k) in self.keys.iter().enumerate() {
            if k.name.trim().is_empty() {
                return bad(&format!("auth.keys[{i}].name"), "must not be empty");
            }
            if k.sha256.len() != 64 || !k.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return bad(
                    &format!("auth.keys[{i}].sha256"),
                    "must be 64 hex digits (see `kbq keys new`)",
                );
            }
            if let Some(scopes) = &k.scopes {
                let field = format!("auth.keys[{i}].scopes");
                if scopes.is_empty() {
                    return bad(&field, "must name at least one scope; omit it for all");
                }
                if scopes.iter().any(|s| Scope::parse(s).is_none()) {
                    return bad(&field, "each must be one of read, write, agent, admin");
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum VersionStatus {
    Current,
    Stable,
    Deprecated,
    Sunset,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VersionSection {
    pub status: VersionStatus,
    /// `YYYY-MM-DD`.
    pub released: String,
    /// From this date (00:00 UTC) responses carry the deprecation headers.
    #[serde(default)]
    pub deprecated_at: Option<String>,
    /// From this date (00:00 UTC) every request under the version gets 410.
    #[serde(default)]
    pub sunset_at: Option<String>,
    #[serde(default)]
    pub migration_guide: Option<String>,
    /// The version that replaces this one, e.g. `v2`.
    #[serde(default)]
    pub successor: Option<String>,
}

/// True for a version's name: `v` and a major number (`v1`, `v12`). Path prefixes are
/// recognised by the same rule (`crate::versions`).
pub fn is_version_name(name: &str) -> bool {
    name.len() > 1 && name.starts_with('v') && name[1..].bytes().all(|b| b.is_ascii_digit())
}

/// A version date, `YYYY-MM-DD`.
pub fn parse_date(value: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(value, "%Y-%m-%d").ok()
}

impl VersionSection {
    /// The version `v1` as kbq ships it: current, no dates beyond its release.
    pub(super) fn v1() -> VersionSection {
        VersionSection {
            status: VersionStatus::Current,
            released: "2026-01-16".into(),
            deprecated_at: None,
            sunset_at: None,
            migration_guide: None,
            successor: None,
        }
    }

    /// The rules of `[versions.{name}]`.
    pub fn validate(&self, name: &str) -> Result<(), ConfigError> {
        if !is_version_name(name) {
            return bad(
                &format!("versions.{name}"),
                "must be named v<major>, e.g. v1",
            );
        }
        let date = |field: &str, value: &str| -> Result<NaiveDate, ConfigError> {
            parse_date(value).ok_or_else(|| {
                ConfigError(format!("versions.{name}.{field} must be a date YYYY-MM-DD"))
            })
        };
        let released = date("released", &self.released)?;
        let deprecated = self
            .deprecated_at
            .as_deref()
            .map(|d| date("deprecated_at", d))
            .transpose()?;
        let sunset = self
            .sunset_at
            .as_deref()
            .map(|d| date("sunset_at", d))
            .transpose()?;
        // The dates drive behaviour; the status must not contradict them.
        if self.status == VersionStatus::Deprecated && deprecated.is_none() {
            return bad(
                &format!("versions.{name}.deprecated_at"),
                "is required when status is deprecated",
            );
        }
        if self.status == VersionStatus::Sunset && sunset.is_none() {
            return bad(
                &format!("versions.{name}.sunset_at"),
                "is required when status is sunset",
            );
        }
        if deprecated.is_some_and(|d| d < released) {
            return bad(
                &format!("versions.{name}.deprecated_at"),
                "must not be before released",
            );
        }
        if let Some(sunset) = sunset {
            let Some(deprecated) = deprecated else {
                return bad(
                    &format!("versions.{name}.sunset_at"),
                    "needs deprecated_at (a version is deprecated before it is sunset)",
                );
            };
            if sunset < deprecated + Months::new(6) {
                return bad(
                    &format!("versions.{name}.sunset_at"),
                    "must be at least 6 months after deprecated_at (the deprecation support period)",
                );
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

/// When text logs carry colour escape codes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogColor {
    /// Only when standard error is a terminal and `NO_COLOR` is not set.
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// A tracing filter, e.g. `info` or `kbq=debug,info`. `RUST_LOG` overrides it.
    pub level: String,
    pub format: LogFormat,
    pub color: LogColor,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            level: "info".into(),
            format: LogFormat::Text,
            color: LogColor::Auto,
        }
    }
}

impl LogSection {
    /// Whether text logs are coloured, given whether standard error is a terminal and the
    /// value of `NO_COLOR` (<https://no-color.org>: any non-empty value turns colour off).
    pub fn colored(&self, stderr_is_terminal: bool, no_color: Option<&str>) -> bool {
        match self.color {
            LogColor::Always => true,
            LogColor::Never => false,
            LogColor::Auto => stderr_is_terminal && no_color.is_none_or(str::is_empty),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if tracing_subscriber::EnvFilter::try_new(&self.level).is_err() {
            return bad(
                "log.level",
                "must be a tracing filter such as info or kbq=debug,info",
            );
        }
        Ok(())
    }
}

/// OTLP over HTTP, its body protobuf: `telemetry.protocol`'s default.
pub const HTTP_PROTOBUF: &str = "http/protobuf";
/// OTLP over gRPC.
pub const GRPC: &str = "grpc";

/// `[telemetry]`: traces exported over OTLP (docs/operations.md, "Traces"). Off unless
/// `enabled` or an `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
/// variable is set; the standard `OTEL_*` variables win over these keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// Export traces.
    pub enabled: bool,
    /// How spans are sent: `http/protobuf` or `grpc` (`OTEL_EXPORTER_OTLP_PROTOCOL` wins).
    pub protocol: String,
    /// The collector's base URL: over HTTP traces go to `{endpoint}/v1/traces`, over gRPC to
    /// the endpoint itself. None: `http://127.0.0.1:4318` over HTTP, `http://127.0.0.1:4317`
    /// over gRPC (the OTLP defaults).
    pub endpoint: Option<String>,
    /// The `service.name` of every span (`OTEL_SERVICE_NAME` wins).
    pub service_name: String,
    /// The share of traces kept, 0.0 to 1.0, when the caller's `traceparent` does not decide
    /// (`OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` win).
    pub sample_ratio: f64,
    /// Put prompts, answers, tool arguments and results in spans. Off: spans carry sizes,
    /// names, counts and timings, no text.
    pub include_content: bool,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection {
            enabled: false,
            protocol: HTTP_PROTOBUF.into(),
            endpoint: None,
            service_name: "kbq".into(),
            sample_ratio: 1.0,
            include_content: false,
        }
    }
}

impl TelemetrySection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return bad("telemetry.sample_ratio", "must be from 0.0 to 1.0");
        }
        if ![HTTP_PROTOBUF, GRPC].contains(&self.protocol.as_str()) {
            return bad(
                "telemetry.protocol",
                "must be \"http/protobuf\" or \"grpc\"",
            );
        }
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return bad("telemetry.endpoint", "must be an http:// or https:// URL");
        }
        if self.service_name.trim().is_empty() {
            return bad("telemetry.service_name", "must not be empty");
        }
        Ok(())
    }
}
