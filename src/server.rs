//! Assembles and starts kbq: knowledge base, actor runtime, keys, versions, and the actix-web
//! server. Tests start it on `127.0.0.1:0` and stop it through [`Server::stop`].

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::middleware::{Condition, from_fn};
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use futures::FutureExt;
use kbq_actors::{Agent, GraphPool, Runtime};
use kbq_store::KnowledgeBase;

use crate::auth::Keys;
use crate::config::Config;
use crate::offload::Offload;
use crate::openapi::Live;
use crate::routes::docs::ApiDocument;
use crate::routes::ingest::IngestService;
use crate::routes::rag::RagService;
use crate::routes::sources::SourcesService;
use crate::startup::{Readiness, Stage};
use crate::versions::{Clock, SystemClock, Versions};
use crate::workspaces::Workspaces;
use crate::{demo, middleware, routes, startup, versions};

/// What the caller of [`start`] chooses beyond the config.
pub struct Options {
    pub clock: Arc<dyn Clock>,
    /// Plaintext development keys (`KBQ_API_KEYS`).
    pub plaintext_keys: Vec<String>,
    /// Draw a progress bar while the indexes are built (`kbq serve` on a terminal).
    pub progress_bar: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            clock: Arc::new(SystemClock),
            plaintext_keys: Vec::new(),
            progress_bar: false,
        }
    }
}

/// The task that follows other nodes' writes, once start-up has started it.
type Follower = Arc<parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>>;

/// The probes' own listener (`server.probe_listen`).
struct ProbeListener {
    addr: SocketAddr,
    handle: ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A running kbq.
pub struct Server {
    pub addr: SocketAddr,
    probes: Option<ProbeListener>,
    pub kb: Arc<KnowledgeBase>,
    pub graph: GraphPool,
    pub agent: Agent,
    handle: ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    runtime: Runtime,
    /// What start-up is doing; ready once the store is connected and indexed.
    readiness: Arc<Readiness>,
    /// `server.shutdown_delay_ms`.
    shutdown_delay: std::time::Duration,
    /// Connects the store, builds the indexes and loads the demo (see [`start`]).
    startup: tokio::task::JoinHandle<()>,
    /// Follows writes made by other nodes (a shared SurrealDB server only), once connected.
    follower: Follower,
    /// Closes the workspaces `[workspaces]` says not to keep open.
    _sweeper: tokio_util::task::AbortOnDropHandle<()>,
    /// Counts the nodes the rate budgets are shared among (a shared server only).
    _sharing: Option<tokio_util::task::AbortOnDropHandle<()>>,
}

impl Server {
    /// The probes' own address, when `server.probe_listen` names one.
    pub fn probe_addr(&self) -> Option<SocketAddr> {
        self.probes.as_ref().map(|p| p.addr)
    }

    /// The actor runtime, e.g. to read its restart count.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Waits until start-up is done (the store connected and indexed), at most `timeout`;
    /// true when it is.
    pub async fn wait_ready(&self, timeout: std::time::Duration) -> bool {
        self.readiness.wait(timeout).await
    }

    /// Stops: from this moment `/readyz` fails; when `graceful`, kbq serves on for
    /// `server.shutdown_delay_ms`, then stops accepting and lets the requests in flight
    /// finish (within `server.shutdown_timeout_secs`); then the actors stop.
    pub async fn stop(self, graceful: bool) {
        self.readiness.set(Stage::Stopping);
        if graceful && !self.shutdown_delay.is_zero() {
            tracing::info!(
                delay_ms = self.shutdown_delay.as_millis() as u64,
                "stopping: /readyz fails; serving on while load balancers notice"
            );
            tokio::time::sleep(self.shutdown_delay).await;
        }
        self.handle.stop(graceful).await;
        let _ = self.task.await;
        // The probes answer until the API's requests in flight are done.
        if let Some(probes) = self.probes {
            probes.handle.stop(graceful).await;
            let _ = probes.task.await;
        }
        self.startup.abort();
        if let Some(f) = self.follower.lock().take() {
            f.abort();
        }
        self.runtime.stop().await;
    }

    /// Runs until `signal` completes, then stops gracefully.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        tracing::info!("stopping: draining in-flight requests");
        self.stop(true).await;
    }
}

pub async fn start(config: Config, options: Options) -> anyhow::Result<Server> {
    // Not connected yet: the listener binds first, and the store connects and builds its
    // indexes behind it (`start_up`), while `/readyz` and the gate report how far it got.
    let kb = KnowledgeBase::new(config.store_config(), config.embedder());
    let readiness = web::Data::new(Readiness::new(options.progress_bar));
    let runtime = Runtime::start(kb.clone(), config.runtime_config())
        .await
        .context("starting the actor runtime")?;

    let mut keys = Keys::new(&config.auth.keys, &options.plaintext_keys);
    if let Some(generated) = keys
        .ensure_one(&config.data_dir)
        .context("keeping the generated API key")?
    {
        if generated.new {
            eprintln!(
                "\n  No API key was configured, so kbq made one (kept in {}):\n\n    {}\n\n  Send it as: Authorization: Bearer <key>\n",
                generated.path.display(),
                generated.key
            );
        } else {
            tracing::info!(path = %generated.path.display(), "using the API key kept in the data directory");
        }
    }

    let workspaces = web::Data::new(workspaces(&config, &kb, &runtime));
    let extractor = workspaces.default_workspace().knowledge.extractor.clone();
    let sweeper = workspaces.clone().into_inner().keep_sweeping();
    let keys = web::Data::new(keys.with_minted(kb.clone(), Offload::current()));
    let versions = web::Data::new(Versions::new(&config.versions, options.clock.clone()));
    let graph = web::Data::new(runtime.graph.clone());
    let agent = web::Data::new(runtime.agent.clone());
    let agent_limits = web::Data::new(config.agent.clone());
    let models = web::Data::new(crate::models::Models::new(
        &runtime.agent.providers(),
        &config.chat.aliases,
    ));
    let rate_limits = web::Data::new(crate::limits::RateLimits::new(&config.limits));
    // Nodes on one server share the budgets (crate::limits): the nodes alive are counted
    // every few seconds.
    let sharing = kb.config().is_server().then(|| {
        let (limits, kb) = (rate_limits.clone().into_inner(), kb.clone());
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tick.tick().await;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                if let Ok(nodes) = kb.live_nodes(now).await {
                    limits.share_among(nodes);
                }
            }
        }))
    });
    let kb_data = web::Data::from(kb.clone());
    // RAG search and ingestion call the knowledge base on this runtime (crate::offload).
    let offload = Offload::current();
    let rag = rag_service(&config, offload.clone());
    let ingest = web::Data::new(IngestService::new(offload.clone()));
    let sources = web::Data::new(SourcesService::new(runtime.ingest.clone(), offload.clone()));
    let admin = web::Data::new(routes::admin::AdminService {
        offload: offload.clone(),
    });
    let metrics = web::Data::new(crate::metrics::Metrics::default());
    let pools = web::Data::new(runtime.pools.clone());
    let document = web::Data::new(ApiDocument::new(api_document(&config, &kb, &models)?));
    let mcp = web::Data::from(crate::mcp::http::service(mcp_server(
        &runtime,
        rag.clone(),
        document.json(),
        Some(metrics.clone()),
        None,
    )?));
    let payload = web::PayloadConfig::new(config.server.max_body_bytes);
    let body_timeout = middleware::BodyTimeout(std::time::Duration::from_millis(
        config.server.body_timeout_ms,
    ));
    let gate_readiness = readiness.clone();
    let cors_origins = web::Data::new(crate::cors::CorsOrigins::new(&config.server.cors_origins));
    // The app each HTTP worker builds, on the API's listener and (`probes_only`) on the
    // probes' own.
    let app = move |probes_only: bool| {
        App::new()
            .app_data(keys.clone())
            .app_data(workspaces.clone())
            .app_data(admin.clone())
            .app_data(versions.clone())
            .app_data(graph.clone())
            .app_data(agent.clone())
            .app_data(agent_limits.clone())
            .app_data(models.clone())
            .app_data(rate_limits.clone())
            .app_data(kb_data.clone())
            .app_data(rag.clone())
            .app_data(ingest.clone())
            .app_data(sources.clone())
            .app_data(payload.clone())
            .app_data(body_timeout)
            .app_data(metrics.clone())
            .app_data(pools.clone())
            .app_data(document.clone())
            .app_data(gate_readiness.clone())
            .app_data(cors_origins.clone())
            .configure(routes::configure)
            .app_data(mcp.clone())
            .service(routes::mcp_scope())
            .default_service(web::to(routes::not_found))
            .wrap(Condition::new(
                probes_only,
                from_fn(routes::probes::only_probes),
            ))
            .wrap(from_fn(versions::apply_version_policy))
            .wrap(from_fn(startup::gate))
            .wrap(from_fn(middleware::body_deadline))
            .wrap(from_fn(middleware::error_bodies))
            .wrap(from_fn(crate::metrics::record))
            .wrap(from_fn(crate::cors::cors))
            .wrap(from_fn(middleware::request_id))
    };
    // The same connection rules on both listeners.
    macro_rules! edge {
        ($server:expr) => {
            $server
                .on_connect(crate::peer::on_connect)
                .shutdown_timeout(config.server.shutdown_timeout_secs)
                .client_request_timeout(std::time::Duration::from_millis(
                    config.server.header_timeout_ms,
                ))
                .disable_signals()
        };
    }
    let api_app = app.clone();
    let mut server = edge!(HttpServer::new(move || {
        // Each HTTP worker thread builds its app here, and answers its own entity lookups,
        // traversals and graph documents with graph actors of its own (kbq_actors::local).
        kbq_actors::local::serve_graph_on_this_thread();
        api_app(false)
    }));
    if config.server.workers > 0 {
        server = server.workers(config.server.workers);
    }
    let server = server
        .bind(&config.server.listen)
        .with_context(|| format!("binding {}", config.server.listen))?;
    let addr = *server.addrs().first().context("no listening address")?;
    // The probes' listener: one worker, which sleeps between probes.
    let probes = if config.server.probe_listen.is_empty() {
        None
    } else {
        let server = edge!(HttpServer::new(move || app(true)))
            .workers(1)
            .bind(&config.server.probe_listen)
            .with_context(|| format!("binding {}", config.server.probe_listen))?;
        let addr = *server
            .addrs()
            .first()
            .context("no probe listening address")?;
        Some((addr, server.run()))
    };
    let mut server = server.run();
    let handle = server.handle();
    // The server's first poll starts its accept thread and HTTP workers. Poll it here, on the
    // caller's thread (`kbq serve`: the main thread), so they are not created by a thread of
    // the main runtime, whose lowered priority they would inherit (crate::priority).
    let _ = futures::poll!(&mut server);
    let task = tokio::spawn(server);
    let probes = match probes {
        Some((addr, mut server)) => {
            let handle = server.handle();
            let _ = futures::poll!(&mut server);
            tracing::info!(%addr, "kbq answering probes");
            Some(ProbeListener {
                addr,
                handle,
                task: tokio::spawn(server),
            })
        }
        None => None,
    };
    tracing::info!(%addr, store = %config.store.url, "kbq listening");
    if config.server.huge_pages.is_some() {
        tracing::warn!(
            "server.huge_pages is no longer read: the built indexes stay on ordinary pages"
        );
    }
    let follower = Arc::new(parking_lot::Mutex::new(None));
    let starting = start_up(
        kb.clone(),
        readiness.clone().into_inner(),
        config.store.load_demo,
        (config.store.follow_changes && kb.config().is_server()).then(|| follower.clone()),
    );
    let startup = tokio::spawn(async move {
        starting.await;
        // Hybrid search's first request would otherwise build the entity automaton itself.
        extractor.warm();
    });
    Ok(Server {
        addr,
        probes,
        kb,
        graph: runtime.graph.clone(),
        agent: runtime.agent.clone(),
        readiness: readiness.into_inner(),
        shutdown_delay: std::time::Duration::from_millis(config.server.shutdown_delay_ms),
        handle,
        task,
        runtime,
        startup,
        follower,
        _sweeper: sweeper,
        _sharing: sharing,
    })
}

/// Longest wait at start-up for the follower's first subscription and rebuild.
const FIRST_SYNC: std::time::Duration = std::time::Duration::from_secs(120);

/// How long start-up waits between attempts to reach a store that does not answer.
const CONNECT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The workspaces of a node whose default workspace is `kb`, with `runtime`'s ingestion,
/// opened on the calling (main) runtime, following other nodes' writes on a shared server.
fn workspaces(config: &Config, kb: &Arc<KnowledgeBase>, runtime: &Runtime) -> Workspaces {
    Workspaces::new(
        kb.clone(),
        runtime.ingest.clone(),
        runtime.ingestors.clone(),
        Offload::current(),
        config.store.follow_changes && kb.config().is_server(),
        config.keeping(),
    )
}

/// RAG search on `offload`, within `graph.call_timeout_ms`, hybrid fusing with `[rag]`'s
/// weights: for the RAG routes and the MCP tools.
fn rag_service(config: &Config, offload: Offload) -> web::Data<RagService> {
    web::Data::new(RagService::new(
        offload,
        std::time::Duration::from_millis(config.graph.call_timeout_ms),
        config.rag.weights(&config.embedder),
    ))
}

/// The MCP handler of `/mcp` and of `kbq mcp`: the runtime's pools, `rag`, the tool
/// catalogue from the served OpenAPI `document`, and `local` as the caller when no HTTP
/// request names one.
fn mcp_server(
    runtime: &Runtime,
    rag: web::Data<RagService>,
    document: &str,
    metrics: Option<web::Data<crate::metrics::Metrics>>,
    local: Option<crate::mcp::LocalCaller>,
) -> anyhow::Result<crate::mcp::KbqMcp> {
    let document: serde_json::Value =
        serde_json::from_str(document).context("reading back the OpenAPI document")?;
    let deps = Arc::new(crate::mcp::McpDeps {
        tools: runtime.agent.tools().clone(),
        graph: runtime.graph.clone(),
        rag,
        ingest: crate::mcp::sources::Ingestion::new(Offload::current()),
        metrics,
    });
    let catalogue = Arc::new(crate::mcp::catalogue(&document));
    Ok(crate::mcp::KbqMcp::new(deps, catalogue, local))
}

/// The OpenAPI document this configuration serves.
fn api_document(
    config: &Config,
    kb: &KnowledgeBase,
    models: &crate::models::Models,
) -> anyhow::Result<String> {
    Live {
        agent: &config.agent,
        models,
        embedder: (
            kb.embedder().name(),
            kb.embedder().dimension(),
            kb.embedder().can_shorten(),
        ),
    }
    .document()
    .context("serializing the OpenAPI document")
}

/// `kbq mcp`: the MCP tools of `/mcp` over standard input and output, for a host that starts
/// kbq as a local process (docs/mcp.md). The store is opened, indexed and, when empty and
/// asked, given the demo as `serve` does; then the same handler as `/mcp` answers until the
/// host closes standard input. Calls are made with `key` (`KBQ_API_KEY`: a configured key or
/// one minted into the store), in its workspace; without one, as the local user in `default`.
/// A key that is neither fails with [`UnknownKey`].
pub async fn mcp_stdio(config: Config, key: Option<String>) -> anyhow::Result<()> {
    use rmcp::ServiceExt;

    let kb = KnowledgeBase::new(config.store_config(), config.embedder());
    let runtime = Runtime::start(kb.clone(), config.runtime_config())
        .await
        .context("starting the actor runtime")?;
    let follower: Option<Follower> = (config.store.follow_changes && kb.config().is_server())
        .then(|| Arc::new(parking_lot::Mutex::new(None)));
    start_up(
        kb.clone(),
        Arc::new(Readiness::new(false)),
        config.store.load_demo,
        follower.clone(),
    )
    .await;
    let models = crate::models::Models::new(&runtime.agent.providers(), &config.chat.aliases);
    let workspaces = Arc::new(workspaces(&config, &kb, &runtime));
    let (caller, owner) = match key {
        None => {
            let caller = crate::mcp::Caller::local(workspaces.default_workspace().clone());
            let owner = caller.owner.clone();
            (crate::mcp::LocalCaller::Fixed(caller), owner)
        }
        Some(key) => {
            let keys = Arc::new(
                Keys::new(&config.auth.keys, &crate::auth::plaintext_keys())
                    .with_minted(kb.clone(), Offload::current()),
            );
            // Refused at start as at each call; only at start does it stop the command.
            let caller = keyed_caller(&keys, &workspaces, &key)
                .await?
                .ok_or(UnknownKey)?;
            let owner = caller.owner.clone();
            let resolve = move || {
                let (keys, workspaces, key) = (keys.clone(), workspaces.clone(), key.clone());
                async move {
                    keyed_caller(&keys, &workspaces, &key)
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| {
                            "KBQ_API_KEY is no longer a key of this store: it was revoked, or its workspace deleted".to_string()
                        })
                }
                .boxed()
            };
            (crate::mcp::LocalCaller::Keyed(Arc::new(resolve)), owner)
        }
    };
    let server = mcp_server(
        &runtime,
        rag_service(&config, Offload::current()),
        &api_document(&config, &kb, &models)?,
        None,
        Some(caller),
    )?;
    tracing::info!(%owner, "serving MCP on standard input and output");
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("starting MCP on standard input and output")?;
    let ended = running.waiting().await;
    if let Some(f) = follower.and_then(|f| f.lock().take()) {
        f.abort();
    }
    runtime.stop().await;
    ended.context("the MCP session failed")?;
    Ok(())
}

/// The caller `key` stands for, in its workspace: `None` when no key of the configuration or
/// the store is `key`.
async fn keyed_caller(
    keys: &Keys,
    workspaces: &Arc<crate::workspaces::Workspaces>,
    key: &str,
) -> anyhow::Result<Option<crate::mcp::Caller>> {
    let found = keys
        .resolve(key)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let Some(identity) = found else {
        return Ok(None);
    };
    let workspace = workspaces
        .get(&identity.workspace)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    Ok(Some(crate::mcp::Caller::new(&identity, workspace)))
}

/// `kbq mcp`'s `KBQ_API_KEY` is no key this configuration or the store knows.
#[derive(Debug, thiserror::Error)]
#[error(
    "KBQ_API_KEY is not one of this configuration's keys ([[auth.keys]] or KBQ_API_KEYS), nor a key minted into the store"
)]
pub struct UnknownKey;

/// Connects the knowledge base (retrying until it answers) and builds its indexes, starts
/// following other nodes' writes into `follower` (given for a shared server that follows
/// them), loads the demo into an
/// empty store, then declares kbq ready. It runs on a task of the main runtime: an embedded
/// store starts SurrealDB's storage threads here, and they should share the main runtime's
/// lowered priority (crate::priority), like all the other slow work.
async fn start_up(
    kb: Arc<KnowledgeBase>,
    readiness: Arc<Readiness>,
    load_demo: bool,
    follower: Option<Follower>,
) {
    let started = std::time::Instant::now();
    let mut last_warning: Option<std::time::Instant> = None;
    if follower.is_some() {
        kb.follow_changes_from_start();
    }
    while let Err(e) = kb.connect(&*readiness).await {
        readiness.set(Stage::Connecting);
        // A store that stays away is logged every ten seconds, not at every attempt.
        if last_warning.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10)) {
            tracing::warn!(error = %e, url = %kb.config().url, "knowledge base not ready yet; retrying");
            last_warning = Some(std::time::Instant::now());
        }
        tokio::time::sleep(CONNECT_RETRY).await;
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "knowledge base connected and indexed"
    );
    startup::release_free_memory();
    if let Some(slot) = follower {
        let (task, mut first_sync) = kb.follow_changes();
        *slot.lock() = Some(task);
        // The follower starts from the subscription the connection made before it built the
        // indexes. Should it have to subscribe and rebuild instead (the connection was lost
        // meanwhile), writing the demo (or answering) before that rebuild is done would race
        // it (follow.rs). A store that goes away does not hold start-up past FIRST_SYNC: the
        // indexes just built answer.
        let synced = tokio::time::timeout(FIRST_SYNC, first_sync.wait_for(|done| *done)).await;
        if synced.is_err() {
            tracing::warn!(
                waited_s = FIRST_SYNC.as_secs(),
                "not yet following other nodes' writes; starting without"
            );
        }
    }
    if load_demo {
        readiness.set(Stage::LoadingDemo);
        match demo::load_if_empty(&kb).await {
            Ok(Some(report)) => tracing::info!(
                entities = report.entities,
                relationships = report.relationships,
                documents = report.documents,
                "loaded the demo knowledge base"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "demo knowledge base not loaded"),
        }
    }
    readiness.set(Stage::Ready);
}
