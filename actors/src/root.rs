//! The root supervisor: spawns every long-lived child linked to itself and restarts any that
//! stops. ractor's default supervision stops the parent when a child fails; kbq keeps serving.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use kbq_tools::Toolbox;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::backend::{Backend, RetryPolicy};
use crate::capacity::ElasticPool;
use crate::edge_supervisor::{EdgeSupervisor, EdgeSupervisorMessage};
use crate::graph::{GraphLane, GraphRequest, GraphWorker};
use crate::health::{HealthActor, HealthArguments, HealthBoard, HealthMessage};
use crate::ingest::{IngestActor, IngestDeps, IngestMessage};
use crate::pool::{PoolHandle, Slot, spawn_pool};
use crate::provider::{ProviderArguments, ProviderMessage, ProviderWorker};
use crate::tools::{ToolJob, ToolWorker};

/// A provider as the root builds it.
pub(crate) struct ProviderSpec {
    pub name: String,
    pub backend: Arc<dyn Backend>,
    pub retry: RetryPolicy,
    /// Its workers, as the router calls them.
    pub pool: PoolHandle<ProviderMessage>,
}

/// What the root needs to build (and rebuild) its children.
pub struct RootArguments {
    pub(crate) kb: Arc<KnowledgeBase>,
    /// The root fills each pool's slot with a factory of the pool's least workers.
    /// One graph pool per lane, in the order of [`GraphLane::ALL`].
    pub(crate) graph: [PoolHandle<GraphRequest>; 3],
    /// Where the lookup lane's factory runs; `None`: on the root's runtime.
    pub(crate) lookup_runtime: Option<tokio::runtime::Handle>,
    pub(crate) capacity_slot: Slot<ActorRef<crate::capacity::CapacityMessage>>,
    /// The pools the capacity controller sizes.
    pub(crate) pools: Arc<Vec<ElasticPool>>,
    pub(crate) toolbox: Toolbox,
    pub(crate) tools: HashMap<String, PoolHandle<ToolJob>>,
    pub(crate) providers: Vec<ProviderSpec>,
    pub(crate) health_board: HealthBoard,
    pub(crate) health_slot: Slot<ActorRef<HealthMessage>>,
    pub(crate) edge_slot: Slot<ActorRef<EdgeSupervisorMessage>>,
    /// What ingestion jobs share, and where the edge finds the ingestion actor.
    pub(crate) ingest: Arc<IngestDeps>,
    pub(crate) ingest_slot: Slot<ActorRef<IngestMessage>>,
}

/// The arguments, kept to rebuild any child, and how many restarts there were.
pub struct RootState {
    args: RootArguments,
    restarts: u64,
}

/// Messages to the root.
#[derive(Debug)]
pub enum RootMessage {
    /// How many times a child has been restarted.
    Restarts(ractor::RpcReplyPort<u64>),
}

/// How long to wait before restarting a child that stopped, so a child that fails at start
/// cannot spin.
const RESTART_PAUSE: Duration = Duration::from_millis(100);

/// Which child an actor id belongs to.
enum Child {
    Graph(GraphLane),
    Capacity,
    Tool(String),
    Provider(usize),
    Health,
    Edge,
    Ingest,
}

fn id_of<T: Clone + Into<ActorCell>>(slot: &Slot<T>) -> Option<ActorId> {
    slot.read().clone().map(|r| r.into().get_id())
}

impl RootState {
    fn child(&self, id: ActorId) -> Option<Child> {
        let a = &self.args;
        if let Some(lane) = GraphLane::ALL
            .into_iter()
            .zip(&a.graph)
            .find_map(|(lane, pool)| (id_of(pool.slot()) == Some(id)).then_some(lane))
        {
            return Some(Child::Graph(lane));
        }
        if id_of(&a.capacity_slot) == Some(id) {
            return Some(Child::Capacity);
        }
        if id_of(&a.health_slot) == Some(id) {
            return Some(Child::Health);
        }
        if id_of(&a.edge_slot) == Some(id) {
            return Some(Child::Edge);
        }
        if id_of(&a.ingest_slot) == Some(id) {
            return Some(Child::Ingest);
        }
        if let Some((name, _)) = a.tools.iter().find(|(_, t)| id_of(t.slot()) == Some(id)) {
            return Some(Child::Tool(name.clone()));
        }
        a.providers
            .iter()
            .position(|p| id_of(p.pool.slot()) == Some(id))
            .map(Child::Provider)
    }
}

async fn spawn_child(
    child: &Child,
    args: &RootArguments,
    root: ActorCell,
) -> Result<(), ActorProcessingErr> {
    match child {
        Child::Graph(lane) => {
            let pool = &args.graph[lane.index()];
            let spawn = spawn_pool(|| GraphWorker, args.kb.clone(), pool.least(), root);
            // A factory's actors run where it is spawned: lookups and name searches on the
            // lookup runtime.
            let f = match &args.lookup_runtime {
                Some(rt) if lane.on_lookup_runtime() => rt.spawn(spawn).await??,
                _ => spawn.await?,
            };
            *pool.slot().write() = Some(f);
        }
        Child::Capacity => {
            let capacity = crate::capacity::CapacityArguments {
                pools: args.pools.clone(),
            };
            let (c, _) =
                Actor::spawn_linked(None, crate::capacity::CapacityController, capacity, root)
                    .await?;
            *args.capacity_slot.write() = Some(c);
        }
        Child::Tool(name) => {
            let tool = args.toolbox.get(name).cloned().ok_or("unknown tool")?;
            let pool = args.tools.get(name).ok_or("unknown tool")?;
            let f = spawn_pool(|| ToolWorker, tool, pool.least(), root).await?;
            *pool.slot().write() = Some(f);
        }
        Child::Provider(i) => {
            let spec = &args.providers[*i];
            let provider = ProviderArguments {
                name: spec.name.clone(),
                backend: spec.backend.clone(),
                retry: spec.retry,
                health: args.health_slot.clone(),
            };
            let f = spawn_pool(|| ProviderWorker, provider, spec.pool.least(), root).await?;
            *spec.pool.slot().write() = Some(f);
        }
        Child::Health => {
            let health = HealthArguments {
                board: args.health_board.clone(),
                providers: args
                    .providers
                    .iter()
                    .map(|p| (p.name.clone(), p.backend.clone()))
                    .collect(),
            };
            let (h, _) = Actor::spawn_linked(None, HealthActor, health, root).await?;
            *args.health_slot.write() = Some(h);
        }
        Child::Edge => {
            let (s, _) = Actor::spawn_linked(None, EdgeSupervisor, (), root).await?;
            *args.edge_slot.write() = Some(s);
        }
        Child::Ingest => {
            let (i, _) = Actor::spawn_linked(None, IngestActor, args.ingest.clone(), root).await?;
            *args.ingest_slot.write() = Some(i);
        }
    }
    Ok(())
}

/// The root of the tree: starts every long-lived child and restarts any that stops.
pub struct RootSupervisor;

impl Actor for RootSupervisor {
    type Msg = RootMessage;
    type State = RootState;
    type Arguments = RootArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: RootArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let root = myself.get_cell();
        spawn_child(&Child::Health, &args, root.clone()).await?;
        for i in 0..args.providers.len() {
            spawn_child(&Child::Provider(i), &args, root.clone()).await?;
        }
        for lane in GraphLane::ALL {
            spawn_child(&Child::Graph(lane), &args, root.clone()).await?;
        }
        if args.pools.iter().any(ElasticPool::is_elastic) {
            spawn_child(&Child::Capacity, &args, root.clone()).await?;
        }
        let names: Vec<String> = args.tools.keys().cloned().collect();
        for name in names {
            spawn_child(&Child::Tool(name), &args, root.clone()).await?;
        }
        spawn_child(&Child::Ingest, &args, root.clone()).await?;
        spawn_child(&Child::Edge, &args, root).await?;
        Ok(RootState { args, restarts: 0 })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: RootMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RootMessage::Restarts(reply) => {
                let _ = reply.send(state.restarts);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let stopped = match &event {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(actor = %cell.get_id(), error = %err, "child failed");
                cell.get_id()
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                tracing::warn!(actor = %cell.get_id(), ?reason, "child stopped");
                cell.get_id()
            }
            _ => return Ok(()),
        };
        if let Some(child) = state.child(stopped) {
            tokio::time::sleep(RESTART_PAUSE).await;
            spawn_child(&child, &state.args, myself.get_cell()).await?;
            state.restarts += 1;
            tracing::info!(restarts = state.restarts, "child restarted");
        }
        Ok(())
    }
}
