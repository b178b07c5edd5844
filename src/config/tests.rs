//! Unit tests of the configuration: the shipped files, and every rule with its message. Their
//! own file because the table of broken rules is longer than the code it checks.

use super::*;
use crate::auth::KeyEntry;

#[test]
fn defaults_are_valid() {
    Config::default().validate().unwrap();
}

fn from_file(path: &str) -> Config {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    Figment::from(Serialized::defaults(Config::default()))
        .merge(Toml::file(file))
        .extract()
        .unwrap()
}

#[test]
fn the_shipped_default_file_is_the_built_in_defaults() {
    assert_eq!(from_file("config/default.toml"), Config::default());
}

#[test]
fn the_shipped_examples_are_valid() {
    for example in [
        "config/examples/remote.toml",
        "config/examples/deprecation.toml",
    ] {
        from_file(example).validate().unwrap();
    }
}

#[test]
fn pdf_and_docx_are_parsed_apart_by_this_executable_unless_told_otherwise() {
    use kbq_actors::parser::{Parser, ParserProcess};
    let mut c = Config::default();
    assert_eq!(
        c.ingest.runtime().parser,
        Parser::Process(ParserProcess {
            program: if cfg!(target_os = "linux") {
                "/proc/self/exe".into()
            } else {
                std::env::current_exe().unwrap()
            },
            memory_bytes: Some(4096 << 20),
        })
    );
    c.ingest.parser_program = "/opt/kbq/bin/kbq".into();
    c.ingest.parser_memory_mb = 0;
    assert_eq!(
        c.ingest.runtime().parser,
        Parser::Process(ParserProcess {
            program: "/opt/kbq/bin/kbq".into(),
            memory_bytes: None,
        })
    );
    c.ingest.parse_in_process = true;
    assert_eq!(c.ingest.runtime().parser, Parser::InProcess);
}

#[test]
fn bad_values_name_their_key() {
    let mut c = Config::default();
    c.graph.workers = 0;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("graph.workers")
    );
    let mut c = Config::default();
    c.graph.lookup_threads = 65;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("graph.lookup_threads")
    );
    let mut c = Config::default();
    c.server.scan_threads = 65;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("server.scan_threads"), "{err}");
    let mut c = Config::default();
    c.server.scan_nice = 20;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("server.scan_nice"), "{err}");
    let mut c = Config::default();
    c.store.url = "postgres://x".into();
    assert!(c.validate().unwrap_err().to_string().contains("store.url"));
    // A pool's most workers may not be fewer than its least.
    let mut c = Config::default();
    c.agent.provider_workers = 16;
    c.agent.provider_max_workers = 8;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("agent.provider_max_workers"), "{err}");
    let mut c = Config::default();
    c.agent.tool_max_workers = 2;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("agent.tool_max_workers"), "{err}");
    let mut c = Config::default();
    c.agent.provider_queue_capacity = 2_000_000;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("agent.provider_queue_capacity"), "{err}");
    let mut c = Config::default();
    let v1 = c.versions.get_mut("v1").unwrap();
    v1.deprecated_at = Some("2026-06-01".into());
    v1.sunset_at = Some("2026-09-01".into());
    assert!(c.validate().unwrap_err().to_string().contains("6 months"));
    let mut c = Config::default();
    c.versions.get_mut("v1").unwrap().status = VersionStatus::Sunset;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("versions.v1.sunset_at is required")
    );
    for scopes in [vec![], vec!["read".to_string(), "root".to_string()]] {
        let mut c = Config::default();
        c.auth.keys = vec![KeyEntry {
            name: "k".into(),
            sha256: "ab".repeat(32),
            scopes: Some(scopes),
        }];
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("auth.keys[0].scopes")
        );
    }
}

fn openai_provider(name: &str) -> ProviderSection {
    ProviderSection {
        name: name.into(),
        kind: ProviderKindName::Openai,
        base_url: Some("http://127.0.0.1:1/v1".into()),
        model: Some("m".into()),
        api_key_env: None,
        timeout_ms: 30_000,
        max_retries: 2,
    }
}

/// An `openai` embedder that keeps every rule.
fn openai_embedder() -> EmbedderSection {
    EmbedderSection {
        kind: EmbedderKind::Openai,
        base_url: Some("https://e/v1".into()),
        model: Some("m".into()),
        ..EmbedderSection::default()
    }
}

fn key_entry(sha256: &str, scopes: Option<&[&str]>) -> KeyEntry {
    KeyEntry {
        name: "k".into(),
        sha256: sha256.into(),
        scopes: scopes.map(|s| s.iter().map(|s| s.to_string()).collect()),
    }
}

/// A rule's whole message, and a change to the defaults that breaks that rule alone.
type BrokenRule = (&'static str, fn(&mut Config));

/// Every rule: operators read the messages, and black-box tests check some of them.
fn broken_rules() -> Vec<BrokenRule> {
    vec![
        (
            "server.listen must be an address like 127.0.0.1:8080",
            |c| c.server.listen = "nowhere".into(),
        ),
        (
            "server.probe_listen must be empty (no probe listener) or an address like 127.0.0.1:8081",
            |c| c.server.probe_listen = "localhost:8081".into(),
        ),
        (
            "server.max_body_bytes must be between 1024 and 268435456",
            |c| c.server.max_body_bytes = 10,
        ),
        (
            "server.workers must be between 0 (one per core) and 256",
            |c| c.server.workers = 300,
        ),
        (
            "store.url must start with mem://, surrealkv://, ws:// or wss://",
            |c| c.store.url = "postgres://x".into(),
        ),
        ("store.url needs a path after surrealkv://", |c| {
            c.store.url = "surrealkv://".into()
        }),
        (
            "store.namespace and store.database must not be empty",
            |c| c.store.database = String::new(),
        ),
        (
            "store.username and store.password must be given together",
            |c| c.store.username = Some("root".into()),
        ),
        ("store.query_timeout_ms must be between 1 and 600000", |c| {
            c.store.query_timeout_ms = 0
        }),
        (
            "store.connect_timeout_ms must be between 1 and 600000",
            |c| c.store.connect_timeout_ms = 600_001,
        ),
        ("graph.call_timeout_ms must be between 1 and 600000", |c| {
            c.graph.call_timeout_ms = 0
        }),
        ("graph.workers must be between 1 and 256", |c| {
            c.graph.workers = 0
        }),
        (
            "graph.max_workers must be between graph.workers and 1024",
            |c| c.graph.max_workers = 2,
        ),
        ("graph.queue_capacity must be between 0 and 1000000", |c| {
            c.graph.queue_capacity = 1_000_001
        }),
        ("agent.max_steps must be between 1 and 64", |c| {
            c.agent.max_steps = 0
        }),
        ("agent.max_wall_ms must be between 100 and 3600000", |c| {
            c.agent.max_wall_ms = 99
        }),
        (
            "agent.max_message_chars must be between 1 and 1048576",
            |c| c.agent.max_message_chars = 0,
        ),
        ("agent.max_history must be between 0 and 1000", |c| {
            c.agent.max_history = 1001
        }),
        (
            "agent.max_tokens_limit must be between 1 and 1000000",
            |c| c.agent.max_tokens_limit = 0,
        ),
        ("agent.tool_workers must be between 1 and 256", |c| {
            c.agent.tool_workers = 0
        }),
        ("agent.tool_timeout_ms must be between 1 and 600000", |c| {
            c.agent.tool_timeout_ms = 0
        }),
        ("agent.max_sessions must be between 1 and 1000000", |c| {
            c.agent.max_sessions = 0
        }),
        ("agent.tool_max_workers must be between 4 and 1024", |c| {
            c.agent.tool_max_workers = 2
        }),
        ("agent.provider_workers must be between 1 and 1024", |c| {
            c.agent.provider_workers = 0
        }),
        (
            "agent.provider_max_workers must be between 8 and 8192",
            |c| c.agent.provider_max_workers = 4,
        ),
        (
            "agent.provider_queue_capacity must be between 0 and 1000000",
            |c| c.agent.provider_queue_capacity = 1_000_001,
        ),
        (
            "agent.tool_queue_capacity must be between 0 and 1000000",
            |c| c.agent.tool_queue_capacity = 1_000_001,
        ),
        (
            "health.probe_interval_ms must be between 10 and 3600000",
            |c| c.health.probe_interval_ms = 9,
        ),
        ("health.failure_threshold must be between 1 and 100", |c| {
            c.health.failure_threshold = 0
        }),
        ("health.cooldown_ms must be between 1 and 3600000", |c| {
            c.health.cooldown_ms = 0
        }),
        (
            "health.max_cooldown_ms must be between 5000 and 86400000",
            |c| c.health.max_cooldown_ms = 4_999,
        ),
        (
            "limits.graph_per_minute must be between 0 and 10000000",
            |c| c.limits.graph_per_minute = 10_000_001,
        ),
        ("limits.graph_burst must be between 1 and 1000000", |c| {
            c.limits.graph_burst = 0
        }),
        (
            "limits.agent_per_minute must be between 0 and 10000000",
            |c| c.limits.agent_per_minute = 10_000_001,
        ),
        ("limits.agent_burst must be between 1 and 1000000", |c| {
            c.limits.agent_burst = 0
        }),
        ("providers[1].name must be present and unique", |c| {
            c.providers = vec![openai_provider("a"), openai_provider("a")]
        }),
        ("providers[0].name must be present and unique", |c| {
            c.providers = vec![openai_provider(" ")]
        }),
        (
            "providers[0].base_url must be an http:// or https:// URL for kind openai",
            |c| {
                c.providers = vec![ProviderSection {
                    base_url: Some("ftp://x".into()),
                    ..openai_provider("a")
                }]
            },
        ),
        ("providers[0].model is required for kind openai", |c| {
            c.providers = vec![ProviderSection {
                model: Some(" ".into()),
                ..openai_provider("a")
            }]
        }),
        (
            "providers[0].timeout_ms must be between 1 and 600000",
            |c| {
                c.providers = vec![ProviderSection {
                    timeout_ms: 0,
                    ..openai_provider("a")
                }]
            },
        ),
        ("providers[0].max_retries must be between 0 and 10", |c| {
            c.providers = vec![ProviderSection {
                max_retries: 11,
                ..openai_provider("a")
            }]
        }),
        ("auth.keys[0].name must not be empty", |c| {
            c.auth.keys = vec![KeyEntry {
                name: " ".into(),
                ..key_entry(&"ab".repeat(32), None)
            }]
        }),
        (
            "auth.keys[0].sha256 must be 64 hex digits (see `kbq keys new`)",
            |c| c.auth.keys = vec![key_entry(&"xy".repeat(32), None)],
        ),
        (
            "auth.keys[0].scopes must name at least one scope; omit it for all",
            |c| c.auth.keys = vec![key_entry(&"ab".repeat(32), Some(&[]))],
        ),
        (
            "auth.keys[0].scopes each must be one of read, write, agent, admin",
            |c| c.auth.keys = vec![key_entry(&"ab".repeat(32), Some(&["read", "root"]))],
        ),
        (
            "ingest.parse_timeout_secs must be between 1 and 3600",
            |c| c.ingest.parse_timeout_secs = 0,
        ),
        (
            "ingest.parser_memory_mb must be 0 (no limit) or between 256 and 1048576",
            |c| c.ingest.parser_memory_mb = 100,
        ),
        ("versions.x1 must be named v<major>, e.g. v1", |c| {
            c.versions.insert("x1".into(), VersionSection::v1());
        }),
        ("versions.v1.released must be a date YYYY-MM-DD", |c| {
            c.versions.get_mut("v1").unwrap().released = "2026/01/16".into()
        }),
        ("versions.v1.deprecated_at must be a date YYYY-MM-DD", |c| {
            c.versions.get_mut("v1").unwrap().deprecated_at = Some("soon".into())
        }),
        ("versions.v1.sunset_at must be a date YYYY-MM-DD", |c| {
            c.versions.get_mut("v1").unwrap().sunset_at = Some("later".into())
        }),
        (
            "versions.v1.deprecated_at is required when status is deprecated",
            |c| c.versions.get_mut("v1").unwrap().status = VersionStatus::Deprecated,
        ),
        (
            "versions.v1.sunset_at is required when status is sunset",
            |c| c.versions.get_mut("v1").unwrap().status = VersionStatus::Sunset,
        ),
        (
            "versions.v1.deprecated_at must not be before released",
            |c| c.versions.get_mut("v1").unwrap().deprecated_at = Some("2025-01-01".into()),
        ),
        (
            "versions.v1.sunset_at needs deprecated_at (a version is deprecated before it is sunset)",
            |c| c.versions.get_mut("v1").unwrap().sunset_at = Some("2027-01-01".into()),
        ),
        (
            "versions.v1.sunset_at must be at least 6 months after deprecated_at (the deprecation support period)",
            |c| {
                let v1 = c.versions.get_mut("v1").unwrap();
                v1.deprecated_at = Some("2026-06-01".into());
                v1.sunset_at = Some("2026-09-01".into());
            },
        ),
        (
            "log.level must be a tracing filter such as info or kbq=debug,info",
            |c| c.log.level = "kbq=loud".into(),
        ),
        ("embedder.dimension must be between 8 and 8192", |c| {
            c.embedder.dimension = 4
        }),
        (
            "embedder.base_url must be an http:// or https:// URL for kind openai",
            |c| c.embedder.kind = EmbedderKind::Openai,
        ),
        ("embedder.model is required for kind openai", |c| {
            c.embedder.kind = EmbedderKind::Openai;
            c.embedder.base_url = Some("https://api.example/v1".into());
        }),
        ("embedder.batch_size must be between 1 and 2048", |c| {
            c.embedder = openai_embedder();
            c.embedder.batch_size = 0;
        }),
        ("embedder.timeout_ms must be between 1 and 600000", |c| {
            c.embedder = openai_embedder();
            c.embedder.timeout_ms = 0;
        }),
        ("embedder.max_retries must be at most 10", |c| {
            c.embedder = openai_embedder();
            c.embedder.max_retries = 11;
        }),
        (
            "chat.aliases.kbq must be a new model name (not empty, `kbq` or a provider's name)",
            |c| {
                c.chat.aliases.insert("kbq".into(), vec!["builtin".into()]);
            },
        ),
        (
            "chat.aliases.builtin must be a new model name (not empty, `kbq` or a provider's name)",
            |c| {
                c.chat
                    .aliases
                    .insert("builtin".into(), vec!["builtin".into()]);
            },
        ),
        ("chat.aliases.fast must list at least one provider", |c| {
            c.chat.aliases.insert("fast".into(), vec![]);
        }),
        (
            "chat.aliases.fast names `nope`, which is not a configured provider",
            |c| {
                c.chat
                    .aliases
                    .insert("fast".into(), vec!["builtin".into(), "nope".into()]);
            },
        ),
    ]
}

#[test]
fn each_rule_gives_its_message() {
    for (message, break_rule) in broken_rules() {
        let mut c = Config::default();
        break_rule(&mut c);
        let err = c.validate().unwrap_err().to_string();
        assert_eq!(err, format!("configuration: {message}"));
    }
}

#[test]
fn logs_are_coloured_on_a_terminal_or_when_asked() {
    let mut log = LogSection::default();
    assert!(log.colored(true, None));
    assert!(log.colored(true, Some("")));
    assert!(!log.colored(true, Some("1")), "NO_COLOR turns it off");
    assert!(!log.colored(false, None), "not on a pipe or a file");
    log.color = LogColor::Always;
    assert!(log.colored(false, Some("1")));
    log.color = LogColor::Never;
    assert!(!log.colored(true, None));
}
