//! The root supervisor: spawns every long-lived child linked to itself and restarts any that
//! stops. ractor's default supervision stops the parent when a child fails; kbq keeps serving.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
    /// The default workspace's ingestion: what its jobs share, and where the edge finds its
    /// actor.
    pub(crate) ingest: Ingest,
}

/// A workspace's ingestion: what its jobs share, and the slot of its IngestActor.
pub(crate) type Ingest = (Arc<IngestDeps>, Slot<ActorRef<IngestMessage>>);

/// The arguments, kept to rebuild any child, the ingestion of every workspace open (the
/// default one first), and how many restarts there were.
pub struct RootState {
    args: RootArguments,
    ingests: Vec<Ingest>,
    restarts: u64,
}

/// Messages to the root.
pub enum RootMessage {
    /// How many times a child has been restarted.
    Restarts(ractor::RpcReplyPort<u64>),
    /// Start (and from now on restart) a workspace's IngestActor into its slot; replies once
    /// it runs.
    StartIngest(Ingest, ractor::RpcReplyPort<()>),
    /// Stop the IngestActor of the slot, and do not restart it: its workspace was deleted.
    StopIngest(Slot<ActorRef<IngestMessage>>),
}

impl std::fmt::Debug for RootMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RootMessage::Restarts(_) => "Restarts",
            RootMessage::StartIngest(..) => "StartIngest",
            RootMessage::StopIngest(_) => "StopIngest",
        })
    }
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
    Ingest(Ingest),
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
        if let Some(ingest) = self
            .ingests
            .iter()
            .find(|(_, slot)| id_of(slot) == Some(id))
        {
            return Some(Child::Ingest(ingest.clone()));
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
            let spawn = spawn_pool(|| GraphWorker, (), pool.least(), root);
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
        Child::Ingest((deps, slot)) => {
            let (i, _) = Actor::spawn_linked(None, IngestActor, deps.clone(), root).await?;
            *slot.write() = Some(i);
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
        spawn_child(&Child::Ingest(args.ingest.clone()), &args, root.clone()).await?;
        spawn_child(&Child::Edge, &args, root).await?;
        Ok(RootState {
            ingests: vec![args.ingest.clone()],
            args,
            restarts: 0,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: RootMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RootMessage::Restarts(reply) => {
                let _ = reply.send(state.restarts);
            }
            RootMessage::StartIngest(ingest, reply) => {
                state.ingests.push(ingest.clone());
                spawn_child(&Child::Ingest(ingest), &state.args, myself.get_cell()).await?;
                let _ = reply.send(());
            }
            RootMessage::StopIngest(slot) => {
                let id = id_of(&slot);
                state.ingests.retain(|(_, s)| !Arc::ptr_eq(s, &slot));
                if let (Some(actor), Some(_)) = (slot.write().take(), id) {
                    actor.stop(None);
                }
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
