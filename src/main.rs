//! The `kbq` command: `serve` (default), `import`, `reindex`, `gen`, `load`, `keys new`.

use std::io::{BufReader, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use kbq::config::{Config, LogFormat};
use kbq::server::{self, Options};
use kbq_store::import::{self, Phase, Progress};

#[derive(Parser)]
#[command(
    name = "kbq",
    version,
    about = "Knowledge base query service and agent runtime"
)]
struct Cli {
    /// A TOML config file (also KBQ_CONFIG).
    #[arg(long, global = true, env = "KBQ_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve {
        /// Listen address, e.g. 0.0.0.0:8080 (overrides server.listen).
        #[arg(long)]
        listen: Option<String>,
        /// Store URL: mem://, surrealkv://PATH, ws:// or wss://HOST:PORT (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// Do not load the demo knowledge base into an empty store.
        #[arg(long)]
        no_demo: bool,
    },
    /// Serve kbq's MCP tools on standard input and output, for an MCP host that starts kbq as
    /// a local process (docs/mcp.md). Calls are made as the key in KBQ_API_KEY when it is
    /// set, else as the local user, with every scope.
    Mcp {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// Do not load the demo knowledge base into an empty store.
        #[arg(long)]
        no_demo: bool,
    },
    /// Import an NDJSON file (`-` for standard input) into the store.
    Import {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// The workspace to import into (docs/workspaces.md).
        #[arg(long, default_value = "default")]
        workspace: String,
        file: PathBuf,
    },
    /// Export a workspace's whole knowledge base in the import format (docs/import-format.md),
    /// read from one transaction: `kbq import` of the file into an empty store gives it back.
    Export {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// The workspace to export (docs/workspaces.md).
        #[arg(long, default_value = "default")]
        workspace: String,
        /// The file to write (standard output when not given, or `-`).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Ingest files and folders (recursively): Markdown, HTML, PDF, DOCX and text, chunked,
    /// their entities and relationships extracted by the configured model (docs/ingest.md).
    /// Files whose content has not changed since the last run ask the model nothing.
    Ingest {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// The workspace to ingest into (docs/workspaces.md).
        #[arg(long, default_value = "default")]
        workspace: String,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Embed every document again with the configured embedder (after changing `[embedder]`).
    Reindex {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// The workspace whose documents to embed again (docs/workspaces.md).
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// Measure retrieval quality: run each labelled query of FILE (docs/eval.md) through
    /// semantic, keyword and hybrid search and print recall at 1, 5 and 10, MRR, nDCG at 10
    /// and each method's query times.
    Eval {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        /// The workspace to search (docs/workspaces.md).
        #[arg(long, default_value = "default")]
        workspace: String,
        /// Hops hybrid search walks from each entity the query names, as the API's
        /// `graph_depth` (0 to 3).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=3))]
        graph_depth: u32,
        /// Only this many queries, spread evenly over the file (0: all).
        #[arg(long, default_value_t = 0)]
        queries: usize,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
        file: PathBuf,
    },
    /// Write a synthetic knowledge base in the import format: seeded, power-law degrees,
    /// generated document text. The same arguments always write the same file.
    Gen {
        /// Entities (2 to 10000000).
        #[arg(long, default_value_t = 1000)]
        entities: usize,
        /// Relationships (fewer when the graph cannot hold that many distinct ones).
        #[arg(long, default_value_t = 3000)]
        relationships: usize,
        /// Documents per entity, as a fraction from 0.0 to 1.0.
        #[arg(long, default_value_t = 1.0)]
        documents: f64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Where to write (`-` for standard output).
        #[arg(long, short, default_value = "-")]
        output: PathBuf,
    },
    /// Drive a running kbq on this machine with a weighted mix of requests and report
    /// throughput, latency percentiles and errors per route.
    Load {
        /// The server, on loopback.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// The API key to send (also KBQ_LOAD_KEY).
        #[arg(long, env = "KBQ_LOAD_KEY")]
        key: String,
        /// Clients that each send one request at a time, its route drawn from --mix (0: none,
        /// only the --route-concurrency clients).
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Clients dedicated to one route each, beside the mix's and in the same measured
        /// window, reported apart: route=clients,... (e.g. livez=1,health=1).
        #[arg(long, default_value = "")]
        route_concurrency: String,
        /// Where the --route-concurrency clients send, if not to --url: e.g. a server's
        /// probe listener (server.probe_listen), on loopback.
        #[arg(long)]
        dedicated_url: Option<String>,
        /// Milliseconds between the starts of a dedicated client's requests (0: back to back,
        /// which makes a probe a load of its own).
        #[arg(long, default_value_t = 0)]
        route_interval_ms: u64,
        /// Seconds of load before the measured run; their samples are dropped.
        #[arg(long, default_value_t = 0)]
        warmup: u64,
        /// Longest measured run, in seconds.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Most requests in the measured run.
        #[arg(long)]
        requests: Option<u64>,
        /// Routes and weights: traverse, search, entity, documents, rag, chat, health, livez.
        #[arg(long, default_value = kbq::load::DEFAULT_MIX)]
        mix: String,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Search queries of this many characters, at a random offset in an entity's name
        /// (default: the name's first four).
        #[arg(long)]
        search_len: Option<usize>,
        /// The mix's routes take turns instead of being drawn by weight: every mix client
        /// sends one route for weight × this many milliseconds, then the next, round and
        /// round. Each route's req/s is over its own turns, less the first fifth of each
        /// (it settles), so routes measured alone are measured in the same minutes.
        #[arg(long)]
        turns_ms: Option<u64>,
        /// Threads of the runtime of the mix's clients (it shares the machine with the server);
        /// dedicated clients have a thread of their own.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// The import file the server's knowledge base was loaded from: the entity names are
        /// sampled from it by degree, and the queries made from its documents (default: from
        /// the server's own answers). See docs/operations.md.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Entity names to ask about, sampled by degree (with --data).
        #[arg(long, default_value_t = 2000)]
        names: usize,
        /// Distinct RAG and chat queries, each six words of a document; more than the run
        /// sends makes every query a first-time one, a few makes them repeated.
        #[arg(long, default_value_t = 5000)]
        queries: usize,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Parse one document read on standard input, writing it as JSON on standard output: the
    /// process kbq runs to parse a PDF or DOCX source apart (docs/ingest.md, "Parsing").
    #[command(hide = true)]
    ParseDocument {
        /// The document's format: text, markdown, html, pdf or docx.
        #[arg(long, value_parser = format_named)]
        format: kbq_ingest::Format,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Manage workspaces and their keys in a store, as the admin API does
    /// (docs/workspaces.md); each prints its result as JSON.
    Workspaces {
        /// Store URL (overrides store.url).
        #[arg(long)]
        store: Option<String>,
        #[command(subcommand)]
        command: kbq::workspaces_cli::WorkspacesCommand,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Print a fresh random key and the SHA-256 to put in config.
    New,
}

/// A format by the name the API gives it.
fn format_named(name: &str) -> Result<kbq_ingest::Format, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| "must be one of text, markdown, html, pdf, docx".to_string())
}

/// `kbq parse-document`: standard input's bytes parsed as `format`, written as a
/// [`kbq_ingest::ParseAnswer`] on standard output. A document that does not parse is an
/// answer too (exit 0); only a failure to read or write exits otherwise.
fn parse_document(format: kbq_ingest::Format) -> ExitCode {
    use std::io::{Read, Write};
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        eprintln!("kbq: parse-document: reading standard input: {e}");
        return ExitCode::from(2);
    }
    let answer = kbq_ingest::ParseAnswer::from(kbq_ingest::parse(&bytes, format));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = serde_json::to_writer(&mut out, &answer)
        .map_err(std::io::Error::from)
        .and_then(|()| out.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kbq: parse-document: writing standard output: {e}");
            ExitCode::from(2)
        }
    }
}

/// mimalloc, not the system's allocator: see [`kbq::huge_pages::off_while_building`].
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    kbq::huge_pages::off_while_building();
    let cli = Cli::parse();
    if let Some(Command::ParseDocument { format }) = &cli.command {
        return parse_document(*format);
    }
    if let Some(Command::Keys {
        command: KeysCommand::New,
    }) = &cli.command
    {
        let key = kbq::auth::new_key();
        println!(
            "key:    {key}\nsha256: {}",
            hex::encode(kbq::auth::hash(&key))
        );
        println!(
            "\nAdd to config:\n[[auth.keys]]\nname = \"my-client\"\nsha256 = \"{}\"",
            hex::encode(kbq::auth::hash(&key))
        );
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Gen {
        entities,
        relationships,
        documents,
        seed,
        output,
    }) = &cli.command
    {
        return generate(*entities, *relationships, *documents, *seed, output);
    }
    if let Some(Command::Load {
        url,
        key,
        concurrency,
        route_concurrency,
        dedicated_url,
        route_interval_ms,
        warmup,
        duration,
        requests,
        mix,
        seed,
        search_len,
        turns_ms,
        threads,
        data,
        names,
        queries,
        json,
    }) = &cli.command
    {
        let parsed = kbq::load::parse_mix(mix)
            .map_err(|e| format!("--mix: {e}"))
            .and_then(|mix| {
                let dedicated = kbq::load::parse_route_concurrency(route_concurrency)
                    .map_err(|e| format!("--route-concurrency: {e}"))?;
                Ok((mix, dedicated))
            });
        let (mix, route_concurrency) = match parsed {
            Ok(p) => p,
            Err(e) => {
                eprintln!("kbq: {e}");
                return ExitCode::from(2);
            }
        };
        let options = kbq::load::LoadOptions {
            url: url.trim_end_matches('/').to_string(),
            key: key.clone(),
            concurrency: *concurrency,
            route_concurrency,
            dedicated_url: dedicated_url
                .as_deref()
                .map(|u| u.trim_end_matches('/').to_string()),
            route_interval: std::time::Duration::from_millis(*route_interval_ms),
            warmup: std::time::Duration::from_secs(*warmup),
            duration: std::time::Duration::from_secs(*duration),
            max_requests: *requests,
            mix,
            seed: *seed,
            search_len: *search_len,
            client_threads: *threads,
            turns: turns_ms.map(std::time::Duration::from_millis),
            data: data.clone(),
            names: *names,
            queries: *queries,
        };
        return match kbq::load::run_blocking(options) {
            Ok(report) if *json => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("reports serialize")
                );
                ExitCode::SUCCESS
            }
            Ok(report) => {
                println!("{}", report.table());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kbq: load: {e}");
                ExitCode::from(2)
            }
        };
    }
    let mut config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kbq: {e}");
            return ExitCode::from(2);
        }
    };
    let command = cli.command.unwrap_or(Command::Serve {
        listen: None,
        store: None,
        no_demo: false,
    });
    // While serving, the main runtime runs the slow classes of work below the HTTP workers
    // and the graph lookup lane, whose threads this thread creates (kbq::priority).
    let nice = kbq::priority::lowered_by(match command {
        Command::Serve { .. } => config.server.main_runtime_nice,
        _ => 0,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || kbq::priority::set_current_thread(nice))
        .build()
        .expect("tokio runtime");
    // The command line overrides the configuration, and is held to the same rules.
    match &command {
        Command::Serve {
            listen,
            store,
            no_demo,
        } => {
            config.server.listen = listen.clone().unwrap_or(config.server.listen);
            config.store.url = store.clone().unwrap_or(config.store.url);
            config.store.load_demo &= !no_demo;
        }
        Command::Import { store, .. }
        | Command::Export { store, .. }
        | Command::Eval { store, .. }
        | Command::Ingest { store, .. }
        | Command::Reindex { store, .. }
        | Command::Workspaces { store, .. } => {
            config.store.url = store.clone().unwrap_or(config.store.url);
        }
        Command::Mcp { store, no_demo } => {
            config.store.url = store.clone().unwrap_or(config.store.url);
            config.store.load_demo &= !no_demo;
        }
        Command::Keys { .. }
        | Command::Gen { .. }
        | Command::Load { .. }
        | Command::ParseDocument { .. } => {
            unreachable!("handled above")
        }
    }
    if let Err(e) = config.validate() {
        eprintln!("kbq: {e}");
        return ExitCode::from(2);
    }
    // A command that prints its result logs only warnings and errors (RUST_LOG still rules):
    // the storage engine's start-up lines are not its result.
    let one_shot = matches!(
        command,
        Command::Import { .. }
            | Command::Export { .. }
            | Command::Eval { .. }
            | Command::Ingest { .. }
            | Command::Reindex { .. }
            | Command::Workspaces { .. }
    );
    let traced = matches!(
        command,
        Command::Serve { .. } | Command::Mcp { .. } | Command::Ingest { .. }
    );
    let _telemetry = init_logs(&config, one_shot, traced);
    match command {
        Command::Serve { .. } => runtime.block_on(serve(config)),
        Command::Import {
            file, workspace, ..
        } => runtime.block_on(import_file(config, &workspace, file)),
        Command::Export {
            workspace, output, ..
        } => runtime.block_on(kbq::export::run(config, &workspace, output)),
        Command::Ingest {
            paths, workspace, ..
        } => runtime.block_on(kbq::ingest_files::run(config, &workspace, paths)),
        Command::Reindex { workspace, .. } => runtime.block_on(reindex(config, &workspace)),
        Command::Eval {
            workspace,
            graph_depth,
            queries,
            json,
            file,
            ..
        } => runtime.block_on(eval(config, &workspace, file, queries, graph_depth, json)),
        Command::Mcp { .. } => runtime.block_on(mcp(config)),
        Command::Workspaces { command, .. } => {
            runtime.block_on(kbq::workspaces_cli::run(config, command))
        }
        Command::Keys { .. }
        | Command::Gen { .. }
        | Command::Load { .. }
        | Command::ParseDocument { .. } => {
            unreachable!("handled above")
        }
    }
}

/// Logs to standard error, and traces over OTLP when `traced` and export is on
/// (kbq::telemetry): the guard returned flushes them at exit.
fn init_logs(config: &Config, one_shot: bool, traced: bool) -> Option<kbq::telemetry::Telemetry> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // A command ends its runtime without waiting for the storage engine to shut its embedded
    // store down: what the store holds is in its write-ahead log, which the next open replays.
    // Waiting cost about 0.6 s a command and 1 GiB of memory touched (surrealkv's close swaps
    // in a fresh memtable of the configured size, then surrealkv's default of up to 1 GiB, to
    // flush the old one), against 0.05 s for a small import. So as the runtime ends, the datastore's
    // maintenance tasks are cancelled mid-way and SurrealDB logs each cancelled one as an
    // error (`surrealdb_core::kvs::tasks`); surrealkv's own tasks log their cancelled join
    // (`surrealkv::task`, which otherwise logs only compactions, which a serving node logs);
    // and surrealkv's tree, dropped outside a runtime, warns that it cannot close itself. A
    // command prints none of them.
    let level = if one_shot {
        "warn,surrealkv::lsm=error,surrealkv::task=off,surrealdb_core::kvs::tasks=off"
    } else {
        &config.log.level
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let colored = config.log.colored(
        std::io::stderr().is_terminal(),
        std::env::var("NO_COLOR").ok().as_deref(),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colored)
        .with_writer(std::io::stderr);
    let fmt = match config.log.format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    let (otel, guard) = match traced.then(|| kbq::telemetry::layer(&config.telemetry)) {
        Some(Ok(Some((layer, guard)))) => (Some(layer), Some(guard)),
        Some(Err(e)) => {
            eprintln!("kbq: {e}; traces are not exported");
            (None, None)
        }
        _ => (None, None),
    };
    registry.with(otel).init();
    if let Some(warning) = (traced.then(kbq::telemetry::Environment::read))
        .and_then(|env| env.protocol_warning(&config.telemetry))
    {
        tracing::warn!("{warning}");
    }
    guard
}

async fn mcp(config: Config) -> ExitCode {
    let key = std::env::var("KBQ_API_KEY").ok();
    match kbq::server::mcp_stdio(config, key).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<kbq::server::UnknownKey>().is_some() => {
            eprintln!("kbq: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "kbq mcp failed");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> ExitCode {
    if std::env::var_os("KBQ_API_KEY").is_some() && std::env::var_os("KBQ_API_KEYS").is_none() {
        tracing::warn!(
            "KBQ_API_KEY is the clients' key, which the server does not read; \
             the server's plaintext keys are KBQ_API_KEYS"
        );
    }
    let plaintext_keys = kbq::auth::plaintext_keys();
    let server = match server::start(
        config,
        Options {
            plaintext_keys,
            progress_bar: std::io::stderr().is_terminal(),
            ..Options::default()
        },
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kbq: {e:#}");
            return ExitCode::from(2);
        }
    };
    server.run_until(shutdown_signal()).await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Shows one bar per import phase, with counts and rate.
struct Bars {
    bar: parking_lot::Mutex<Option<ProgressBar>>,
}

impl Bars {
    fn new() -> Bars {
        Bars {
            bar: parking_lot::Mutex::new(None),
        }
    }

    /// Leaves the last phase's bar on the screen.
    fn finish(&self) {
        if let Some(bar) = self.bar.lock().take() {
            bar.finish();
        }
    }
}

impl Progress for Bars {
    fn start(&self, phase: Phase, total: u64) {
        let name = match phase {
            Phase::Entities => "entities",
            Phase::Relationships => "relationships",
            Phase::Documents => "documents",
            Phase::Embeddings => "embeddings",
            Phase::Kept => "kept records",
        };
        let bar = ProgressBar::new(total).with_prefix(name);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>13} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
                .expect("template")
                .progress_chars("=> "),
        );
        if let Some(old) = self.bar.lock().replace(bar) {
            old.finish();
        }
    }
    fn advance(&self, done: u64) {
        if let Some(bar) = &*self.bar.lock() {
            bar.inc(done);
        }
    }
}

async fn import_file(config: Config, workspace: &str, file: PathBuf) -> ExitCode {
    let kb = match kbq::workspaces_cli::open_workspace(&config, workspace).await {
        Ok(kb) => kb,
        Err(message) => {
            eprintln!("kbq: {message}");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    let bars = Bars::new();
    let result = if file.as_os_str() == "-" {
        import::import(&kb, std::io::stdin().lock(), &bars).await
    } else {
        match std::fs::File::open(&file) {
            Ok(f) => import::import(&kb, BufReader::new(f), &bars).await,
            Err(e) => {
                eprintln!("kbq: cannot read {}: {e}", file.display());
                return ExitCode::from(2);
            }
        }
    };
    bars.finish();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kbq: import stopped: {e}");
            return ExitCode::from(2);
        }
    };
    for f in &report.failures {
        eprintln!("line {}: {}", f.line, f.reason);
    }
    let secs = started.elapsed().as_secs_f64();
    let restored = report.restored;
    let kept = if restored.total() == 0 {
        String::new()
    } else {
        format!(
            ", {} memories, {} sources, {} supports, {} kept answers",
            restored.memories, restored.sources, restored.supports, restored.extractions
        )
    };
    let summary = format!(
        "imported {} entities, {} relationships, {} documents{kept} from {} records in {secs:.1}s; {} failed",
        report.entities,
        report.relationships,
        report.documents,
        report.records,
        report.failures.len()
    );
    kbq::cli::finish(&summary, !report.failures.is_empty())
}

async fn eval(
    config: Config,
    workspace: &str,
    file: PathBuf,
    sample: usize,
    graph_depth: u32,
    json: bool,
) -> ExitCode {
    use kbq_tools::rag::Method;
    let queries = match std::fs::File::open(&file) {
        Ok(f) => kbq::eval::read_queries(BufReader::new(f)),
        Err(e) => Err(format!("cannot read it: {e}")),
    };
    let queries = match queries {
        Ok(q) => kbq::eval::spread(q, sample),
        Err(e) => {
            eprintln!("kbq: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let kb = match kbq::workspaces_cli::open_workspace(&config, workspace).await {
        Ok(kb) => kb,
        Err(message) => {
            eprintln!("kbq: {message}");
            return ExitCode::from(2);
        }
    };
    let methods = [Method::Semantic, Method::Keyword, Method::Hybrid];
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new((queries.len() * methods.len()) as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix("searches");
    let weights = config.rag.weights(&config.embedder);
    let report = kbq::eval::run(kb, &queries, &methods, graph_depth, weights, || bar.inc(1)).await;
    bar.finish_and_clear();
    match report {
        Ok(r) if json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&r).expect("reports serialize")
            );
            ExitCode::SUCCESS
        }
        Ok(r) => {
            print!("{}", r.table());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kbq: eval stopped: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn reindex(config: Config, workspace: &str) -> ExitCode {
    let embedder = config.embedder();
    let (name, dimension) = (embedder.name().to_string(), embedder.dimension());
    let kb = match kbq::workspaces_cli::open_for_reembed(&config, workspace).await {
        Ok(kb) => kb,
        Err(message) => {
            eprintln!("kbq: {message}");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    let bars = Bars::new();
    let result = kb.reembed(&bars).await;
    bars.finish();
    match result {
        Ok(n) => {
            println!(
                "embedded {n} documents with {name} ({dimension} dimensions) in {:.1}s",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "kbq: reindex stopped: {e}; the store still records its previous embedder, so run it again to finish"
            );
            ExitCode::from(2)
        }
    }
}

fn generate(
    entities: usize,
    relationships: usize,
    documents: f64,
    seed: u64,
    output: &std::path::Path,
) -> ExitCode {
    use std::io::Write;
    if !(2..=10_000_000).contains(&entities) {
        eprintln!("kbq: --entities must be between 2 and 10000000");
        return ExitCode::from(2);
    }
    if !(0.0..=1.0).contains(&documents) {
        eprintln!("kbq: --documents must be between 0.0 and 1.0");
        return ExitCode::from(2);
    }
    let records = kbq_store::generate::generate(kbq_store::generate::Spec {
        entities,
        relationships,
        document_ratio: documents,
        seed,
    });
    let to_stdout = output.as_os_str() == "-";
    let sink: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        match std::fs::File::create(output) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("kbq: cannot write {}: {e}", output.display());
                return ExitCode::from(2);
            }
        }
    };
    let mut out = std::io::BufWriter::new(sink);
    let bar = if to_stdout || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(records.len() as u64)
    };
    let mut counts = [0usize; 3];
    for (i, r) in records.iter().enumerate() {
        counts[match r {
            kbq_store::Record::Entity(_) => 0,
            kbq_store::Record::Relationship(_) => 1,
            kbq_store::Record::Document(_) => 2,
        }] += 1;
        let line = serde_json::to_string(r).expect("records serialize");
        if let Err(e) = writeln!(out, "{line}") {
            eprintln!("kbq: writing failed: {e}");
            return ExitCode::from(2);
        }
        if i % 10_000 == 0 {
            bar.set_position(i as u64);
        }
    }
    bar.finish_and_clear();
    if let Err(e) = out.flush() {
        eprintln!("kbq: writing failed: {e}");
        return ExitCode::from(2);
    }
    eprintln!(
        "generated {} entities, {} relationships, {} documents (seed {seed})",
        counts[0], counts[1], counts[2]
    );
    ExitCode::SUCCESS
}
