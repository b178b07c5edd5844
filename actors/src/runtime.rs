//! The [`Runtime`]: builds every pool's handle, the providers' backends and the health
//! board, starts the [`RootSupervisor`] with them, and hands the edge its handles (the graph
//! pool, the agent, the pools for metrics).
//!
//! It also owns the tokio runtime of the lookup and search lanes. Entity lookups, traversals
//! and name searches are answered in microseconds from the in-memory indexes; on the main
//! runtime they would wait behind whatever else its threads are polling (SurrealDB statements
//! run inside the futures that await them, graph documents, RAG, chats, writes). Threads of their own are scheduled by the OS beside
//! the main runtime's, so a cheap request waits for a core, not for a queue of slow futures.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use kbq_tools::Toolbox;
use parking_lot::RwLock;
use ractor::{Actor, ActorRef, SpawnErr};

use crate::agent::Agent;
use crate::backend::{Backend, OpenAiBackend, RetryPolicy};
use crate::builtin::BuiltinBackend;
use crate::capacity::{ElasticPool, Pools};
use crate::config::{ProviderConfig, ProviderKind, RuntimeConfig};
use crate::graph::{ActorsHere, GraphLane, GraphPool};
use crate::health::HealthBoard;
use crate::ingest::{IngestShared, Ingestor, Ingestors};
use crate::local::LocalActors;
use crate::pool::PoolHandle;
use crate::root::{ProviderSpec, RootArguments, RootMessage, RootSupervisor};
use crate::router::{ProviderHandle, ProviderRouter};
use crate::session::SessionDeps;
use crate::tools::{ToolJob, ToolPool};

/// The running actor system.
pub struct Runtime {
    pub graph: GraphPool,
    pub agent: Agent,
    /// The default workspace's ingestor.
    pub ingest: Ingestor,
    /// Starts and stops the ingestors of other workspaces.
    pub ingestors: Ingestors,
    pub pools: Pools,
    root: ActorRef<RootMessage>,
    root_handle: tokio::task::JoinHandle<()>,
    /// Declared last: dropped after the tree, whose lookup lane and ingestion jobs run on
    /// them.
    _lane: LaneRuntime,
    _ingest: LaneRuntime,
    _scan: ScanLane,
}

/// A runtime of kbq's own beside the main one: the lookup lane's, the scan lane's or
/// ingestion's (the last two's threads lowered by `nice`). Dropping a tokio runtime inside
/// another runtime's task panics, so it is shut down in the background: its threads end
/// once their tasks are gone.
struct LaneRuntime(Option<tokio::runtime::Runtime>);

impl LaneRuntime {
    fn start(threads: usize, name: &str, nice: u8, idle_class: bool) -> Result<Self, SpawnErr> {
        if threads == 0 {
            return Ok(LaneRuntime(None));
        }
        let nice = crate::priority::lowered_by(nice);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .on_thread_start(move || {
                crate::priority::set_current_thread(nice);
                if idle_class {
                    crate::priority::set_current_thread_idle();
                }
            })
            .enable_all()
            .build()
            .map(|rt| LaneRuntime(Some(rt)))
            .map_err(|e| SpawnErr::StartupFailed(Box::new(e)))
    }

    fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.0.as_ref().map(|rt| rt.handle().clone())
    }
}

impl Drop for LaneRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The scan lane's runtime, given to the knowledge base for its large searches and taken
/// back from it when dropped, before the runtime goes: a search after that runs on tokio's
/// blocking pool rather than on a runtime that has stopped.
struct ScanLane {
    kb: Arc<KnowledgeBase>,
    _runtime: LaneRuntime,
}

impl ScanLane {
    fn start(kb: &Arc<KnowledgeBase>, threads: usize, nice: u8) -> Result<Self, SpawnErr> {
        let runtime = LaneRuntime::start(threads, "kbq-scan", nice, false)?;
        kb.set_scan_lane(runtime.handle());
        Ok(ScanLane {
            kb: kb.clone(),
            _runtime: runtime,
        })
    }
}

impl Drop for ScanLane {
    fn drop(&mut self) {
        self.kb.set_scan_lane(None);
    }
}

impl Runtime {
    /// Starts the root supervisor and its children.
    pub async fn start(kb: Arc<KnowledgeBase>, config: RuntimeConfig) -> Result<Runtime, SpawnErr> {
        let toolbox = Toolbox::default();
        // Every pool's least and most workers; the capacity controller sizes it in between.
        let bounds = |min: usize, max: usize| (min.max(1), max.max(min.max(1)));
        let (graph_min, graph_max) = bounds(config.graph_workers, config.graph_max_workers);
        let (tool_min, tool_max) = bounds(config.tool_workers, config.tool_max_workers);
        let (provider_min, provider_max) =
            bounds(config.provider_workers, config.provider_max_workers);

        // One pool per lane, each with the graph section's bounds.
        let graph = GraphLane::ALL.map(|_| {
            PoolHandle::new(
                graph_min,
                graph_max + config.graph_queue_capacity,
                config.graph_call_timeout,
            )
        });
        let lane = LaneRuntime::start(config.graph_lane_threads, "kbq-lookup", 0, false)?;
        let scan = ScanLane::start(&kb, config.scan_threads, config.scan_nice)?;
        let ingest_runtime = LaneRuntime::start(
            config.ingest.threads,
            "kbq-ingest",
            config.ingest.nice,
            config.ingest.idle_class,
        )?;
        let tool_pools: HashMap<String, PoolHandle<ToolJob>> = toolbox
            .tools()
            .iter()
            .map(|t| {
                let pool = PoolHandle::new(
                    tool_min,
                    tool_max + config.tool_queue_capacity,
                    config.tool_timeout,
                );
                (t.name().to_string(), pool)
            })
            .collect();
        // Before the backends: the built-in provider calls the tools through these pools.
        let tools = ToolPool::new(tool_pools.clone());

        let provider_configs = if config.providers.is_empty() {
            vec![ProviderConfig {
                name: "builtin".into(),
                kind: ProviderKind::Builtin,
                timeout: Duration::from_secs(30),
                retry: RetryPolicy {
                    max_retries: 0,
                    min_delay: Duration::from_millis(50),
                    max_delay: Duration::from_secs(1),
                },
            }]
        } else {
            config.providers.clone()
        };
        let providers: Vec<ProviderSpec> = provider_configs
            .iter()
            .map(|p| {
                let backend: Arc<dyn Backend> = match &p.kind {
                    ProviderKind::Builtin => Arc::new(BuiltinBackend::new(&p.name, tools.clone())),
                    ProviderKind::OpenAi {
                        base_url,
                        model,
                        api_key,
                    } => Arc::new(OpenAiBackend::new(
                        &p.name,
                        base_url,
                        model,
                        api_key.clone(),
                        p.timeout,
                    )),
                };
                ProviderSpec {
                    name: p.name.clone(),
                    backend,
                    retry: p.retry,
                    pool: PoolHandle::new(
                        provider_min,
                        provider_max + config.provider_queue_capacity,
                        config.session.provider_timeout,
                    ),
                }
            })
            .collect();
        let board = HealthBoard::new(
            &providers
                .iter()
                .map(|p| (p.name.clone(), p.backend.kind()))
                .collect::<Vec<_>>(),
            config.health,
        );

        // Every pool the capacity controller sizes, in the order metrics list them.
        let mut pools: Vec<ElasticPool> = GraphLane::ALL
            .iter()
            .zip(&graph)
            .map(|(lane, pool)| ElasticPool::new(lane.pool_name().into(), pool, graph_max))
            .collect();
        let mut tool_names: Vec<&String> = tool_pools.keys().collect();
        tool_names.sort();
        for name in tool_names {
            let pool = &tool_pools[name];
            pools.push(ElasticPool::new(format!("tool:{name}"), pool, tool_max));
        }
        for p in &providers {
            let name = format!("provider:{}", p.name);
            pools.push(ElasticPool::new(name, &p.pool, provider_max));
        }
        let pools = Arc::new(pools);

        let router = ProviderRouter {
            providers: providers
                .iter()
                .map(|p| ProviderHandle {
                    name: p.name.clone(),
                    pool: p.pool.clone(),
                })
                .collect(),
            board: board.clone(),
        };
        let edge_slot = Arc::new(RwLock::new(None));
        let deps = SessionDeps {
            definitions: Arc::new(toolbox.openai_definitions()),
            toolbox: toolbox.clone(),
            tools,
            router,
            limits: config.session,
        };
        let agent = Agent::new(deps, edge_slot.clone(), tokio::runtime::Handle::current());
        let shared = IngestShared::new(
            agent.clone(),
            config.ingest.clone(),
            extraction_model(&provider_configs, config.ingest.providers.as_deref()),
            ingest_runtime.handle(),
        );
        let ingest = Ingestor::new(kb.clone(), &shared, Arc::new(RwLock::new(None)));
        let args = RootArguments {
            graph: graph.clone(),
            lookup_runtime: lane.handle(),
            capacity_slot: Arc::new(RwLock::new(None)),
            pools: pools.clone(),
            toolbox: toolbox.clone(),
            tools: tool_pools,
            providers,
            health_board: board,
            health_slot: Arc::new(RwLock::new(None)),
            edge_slot: edge_slot.clone(),
            ingest: (ingest.deps(), ingest.slot()),
        };
        let (root, root_handle) = Actor::spawn(None, RootSupervisor, args).await?;
        // Lookups and graph documents answered from memory on the HTTP workers' own actors
        // (crate::local).
        let local = LocalActors::new(kb.clone(), edge_slot.clone())
            .map(|l| Arc::new(l) as Arc<dyn ActorsHere>);
        Ok(Runtime {
            graph: GraphPool::new(graph, local),
            pools: Pools::new(pools),
            agent,
            ingest,
            ingestors: Ingestors::new(shared, root.clone()),
            root,
            root_handle,
            _lane: lane,
            _ingest: ingest_runtime,
            _scan: scan,
        })
    }

    /// How many times the root has restarted a child.
    pub async fn restarts(&self) -> u64 {
        ractor::call!(self.root, RootMessage::Restarts).unwrap_or(0)
    }

    /// Stops the tree and waits for it.
    pub async fn stop(self) {
        self.root.stop(None);
        let _ = self.root_handle.await;
    }
}

/// What names the model that extraction asks, for keeping its answers: each provider of the
/// chain (all providers when `None`) with its model. `None` when only the built-in provider
/// would answer: it is not a language model, and ingestion then links chunks to the names
/// already in the graph instead.
fn extraction_model(providers: &[ProviderConfig], chain: Option<&[String]>) -> Option<String> {
    let asked: Vec<String> = providers
        .iter()
        .filter(|p| chain.is_none_or(|c| c.contains(&p.name)))
        .filter_map(|p| match &p.kind {
            ProviderKind::OpenAi { model, .. } => Some(format!("{}={model}", p.name)),
            ProviderKind::Builtin => None,
        })
        .collect();
    (!asked.is_empty()).then(|| asked.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::{current_nice, in_idle_class};

    #[test]
    fn a_lane_runtime_runs_its_tasks_on_named_threads_lowered_by_its_nice() {
        let before = current_nice();
        let lane = LaneRuntime::start(1, "kbq-test-lane", 4, false).unwrap();
        let (name, nice, idle) = lane.0.as_ref().unwrap().block_on(async {
            tokio::spawn(async {
                let name = std::thread::current().name().map(str::to_string);
                (name, current_nice(), in_idle_class())
            })
            .await
            .unwrap()
        });
        assert_eq!(name.as_deref(), Some("kbq-test-lane"));
        if cfg!(target_os = "linux") {
            assert_eq!(nice, (before + 4).min(19));
        }
        assert!(!idle);
        assert_eq!(current_nice(), before);
        assert!(
            LaneRuntime::start(0, "none", 4, false)
                .unwrap()
                .handle()
                .is_none()
        );
    }

    #[test]
    fn a_lane_runtime_in_the_idle_class_runs_its_tasks_there_and_leaves_others_alone() {
        let before = current_nice();
        let lane = LaneRuntime::start(1, "kbq-test-idle", 4, true).unwrap();
        let (nice, idle) = lane.0.as_ref().unwrap().block_on(async {
            tokio::spawn(async { (current_nice(), in_idle_class()) })
                .await
                .unwrap()
        });
        if cfg!(target_os = "linux") {
            assert!(idle);
            assert_eq!(nice, (before + 4).min(19));
        }
        assert!(!in_idle_class());
    }

    #[test]
    fn the_scan_lane_is_the_knowledge_bases_until_it_is_dropped() {
        let kb = KnowledgeBase::new(
            kbq_store::StoreConfig::memory(),
            Arc::new(kbq_store::HashingEmbedder::default()),
        );
        let workspace = kb.workspace_kb("other");
        let scan = ScanLane::start(&kb, 1, 3).unwrap();
        let lane = kb.scan_lane().expect("the lane is the knowledge base's");
        // A workspace's knowledge base searches on its parent's lane.
        assert!(workspace.scan_lane().is_some());
        let name = std::thread::spawn(move || {
            futures::executor::block_on(
                lane.spawn(async { std::thread::current().name().map(str::to_string) }),
            )
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(name.as_deref(), Some("kbq-scan"));
        drop(scan);
        assert!(
            kb.scan_lane().is_none(),
            "taken back before its runtime stops"
        );
        assert!(workspace.scan_lane().is_none());
        // No threads, no lane: the blocking pool.
        let _none = ScanLane::start(&kb, 0, 3).unwrap();
        assert!(kb.scan_lane().is_none());
    }
}
