//! kbq's supervised runtime: every piece of work runs in a ractor actor under one root.
//!
//! # Supervision tree
//! ```text
//! RootSupervisor                      restarts any child that fails or stops
//! └── graph factory                   routes jobs to idle workers, queues the rest
//!     ├── GraphWorker 0               restarted by the factory if it panics
//!     ├── GraphWorker 1
//!     └── ... (graph.workers)
//! ```
//! A request travels: HTTP handler -> [`GraphPool`] (with a timeout) -> factory -> a
//! [`GraphWorker`] -> `kbq_store::KnowledgeBase` -> reply port -> handler.
//!
//! # Layout
//! - [`graph`]: the graph worker, its request enum, and the [`GraphPool`] handle.
//! - [`root`]: the [`RootSupervisor`] and its restart policy.

pub mod graph;
pub mod root;

use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use parking_lot::RwLock;
use ractor::factory::FactoryRef;
use ractor::{Actor, ActorRef, SpawnErr};

pub use graph::{GraphError, GraphPool, GraphRequest, GraphWorker};
pub use root::{RootMessage, RootSupervisor};

/// Sizes and timeouts of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub graph_workers: usize,
    /// Longest wait of an edge call into the graph workers.
    pub graph_call_timeout: Duration,
}

/// The running actor system.
pub struct Runtime {
    pub graph: GraphPool,
    root: ActorRef<RootMessage>,
    root_handle: tokio::task::JoinHandle<()>,
}

impl Runtime {
    /// Starts the root supervisor and its children.
    pub async fn start(kb: Arc<KnowledgeBase>, config: RuntimeConfig) -> Result<Runtime, SpawnErr> {
        // The slot is filled by the root's pre_start; until then it holds a placeholder that
        // the root replaces before `spawn` returns.
        let placeholder = placeholder_factory().await?;
        let slot: Arc<RwLock<FactoryRef<(), GraphRequest>>> =
            Arc::new(RwLock::new(placeholder.clone()));
        let args = root::RootArguments {
            kb,
            graph_workers: config.graph_workers.max(1),
            graph_slot: slot.clone(),
        };
        let (root, root_handle) = Actor::spawn(None, RootSupervisor, args).await?;
        placeholder.stop(None);
        Ok(Runtime {
            graph: GraphPool::new(slot, config.graph_call_timeout),
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

/// A factory with no workers, used only to give the slot a value before the root starts.
async fn placeholder_factory() -> Result<FactoryRef<(), GraphRequest>, SpawnErr> {
    let args = ractor::factory::FactoryArguments::builder()
        .worker_builder(Box::new(ractor::factory::worker_builder(|_wid| {
            unreachable!("the placeholder factory starts no workers")
        })))
        .queue(Default::default())
        .router(Default::default())
        .num_initial_workers(0)
        .build();
    let (factory, _) = Actor::spawn(None, graph::GraphFactory::default(), args).await?;
    Ok(factory)
}
