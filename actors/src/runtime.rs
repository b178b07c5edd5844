//! The [`Runtime`]: builds every pool's handle, the providers' backends and the health
//! board, starts the [`RootSupervisor`] with them, and hands the edge its handles (the graph
//! pool, the agent, the pools for metrics).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use kbq_tools::{EntityExtractor, Toolbox};
use parking_lot::RwLock;
use ractor::{Actor, ActorRef, SpawnErr};

use crate::agent::Agent;
use crate::backend::{Backend, OpenAiBackend, RetryPolicy};
use crate::builtin::BuiltinBackend;
use crate::capacity::{ElasticPool, Pools};
use crate::config::{ProviderConfig, ProviderKind, RuntimeConfig};
use crate::graph::GraphPool;
use crate::health::HealthBoard;
use crate::pool::PoolHandle;
use crate::root::{ProviderSpec, RootArguments, RootMessage, RootSupervisor};
use crate::router::{ProviderHandle, ProviderRouter};
use crate::session::SessionDeps;
use crate::tools::{ToolJob, ToolPool};

/// The running actor system.
pub struct Runtime {
    pub graph: GraphPool,
    pub agent: Agent,
    pub pools: Pools,
    root: ActorRef<RootMessage>,
    root_handle: tokio::task::JoinHandle<()>,
}

impl Runtime {
    /// Starts the root supervisor and its children.
    pub async fn start(kb: Arc<KnowledgeBase>, config: RuntimeConfig) -> Result<Runtime, SpawnErr> {
        let extractor = Arc::new(EntityExtractor::new(kb.clone()));
        let toolbox = Toolbox::default();
        // Every pool's least and most workers; the capacity controller sizes it in between.
        let bounds = |min: usize, max: usize| (min.max(1), max.max(min.max(1)));
        let (graph_min, graph_max) = bounds(config.graph_workers, config.graph_max_workers);
        let (tool_min, tool_max) = bounds(config.tool_workers, config.tool_max_workers);
        let (provider_min, provider_max) =
            bounds(config.provider_workers, config.provider_max_workers);

        let graph = PoolHandle::new(
            graph_min,
            graph_max + config.graph_queue_capacity,
            config.graph_call_timeout,
        );
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
                    ProviderKind::Builtin => Arc::new(BuiltinBackend::new(
                        &p.name,
                        kb.clone(),
                        extractor.clone(),
                        tools.clone(),
                    )),
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
        let mut pools = vec![ElasticPool::new("graph".into(), &graph, graph_max)];
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
        let session_slot = Arc::new(RwLock::new(None));
        let args = RootArguments {
            kb: kb.clone(),
            graph: graph.clone(),
            capacity_slot: Arc::new(RwLock::new(None)),
            pools: pools.clone(),
            toolbox: toolbox.clone(),
            tools: tool_pools,
            providers,
            health_board: board,
            health_slot: Arc::new(RwLock::new(None)),
            session_slot: session_slot.clone(),
        };
        let (root, root_handle) = Actor::spawn(None, RootSupervisor, args).await?;
        let deps = SessionDeps {
            kb,
            extractor,
            toolbox,
            tools,
            router,
            limits: config.session,
        };
        Ok(Runtime {
            graph: GraphPool::new(graph),
            pools: Pools::new(pools),
            agent: Agent::new(deps, session_slot),
            root,
            root_handle,
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
