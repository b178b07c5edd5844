//! The root supervisor: spawns the worker pools linked to itself and restarts any that stops.
//! ractor's default supervision stops the parent when a child fails; kbq keeps serving instead.

use std::sync::Arc;
use std::time::Duration;

use kbq_store::KnowledgeBase;
use parking_lot::RwLock;
use ractor::factory::FactoryRef;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::graph::{self, GraphRequest};

/// What the root needs to build its children.
pub struct RootArguments {
    pub kb: Arc<KnowledgeBase>,
    pub graph_workers: usize,
    /// Where the current graph factory is published for [`crate::GraphPool`].
    pub(crate) graph_slot: Arc<RwLock<FactoryRef<(), GraphRequest>>>,
}

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
        let factory =
            graph::spawn_factory(args.kb.clone(), args.graph_workers, myself.get_cell()).await?;
        *args.graph_slot.write() = factory;
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
        let graph = state.args.graph_slot.read().get_id();
        if stopped == graph {
            tokio::time::sleep(RESTART_PAUSE).await;
            let factory = graph::spawn_factory(
                state.args.kb.clone(),
                state.args.graph_workers,
                myself.get_cell(),
            )
            .await?;
            *state.args.graph_slot.write() = factory;
            state.restarts += 1;
            tracing::info!(restarts = state.restarts, "graph workers restarted");
        }
        Ok(())
    }
}
