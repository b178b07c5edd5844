//! The [`EdgeSupervisor`]: the parent of the actors that run beside the HTTP edge rather than
//! in a pool, in a file of its own because it is an actor of its own (one actor per file).

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::graph::GraphRequest;

/// Messages to the edge supervisor.
#[derive(Debug)]
pub enum EdgeSupervisorMessage {}

/// Parent of every `ChatSessionActor` (one per chat request) and of every `LocalGraphActor`
/// (one per lane answered on an HTTP worker thread, per thread). It restarts neither: a
/// session is one request, and its caller gets an error; a local graph actor is replaced by
/// its own thread at that thread's next request of its lane (`crate::local`), since only that
/// thread can run it. It logs each failure.
pub struct EdgeSupervisor;

impl Actor for EdgeSupervisor {
    type Msg = EdgeSupervisorMessage;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            // Told apart by their message type: a local graph actor takes graph requests.
            let actor = match cell.is_message_type_of::<GraphRequest>() {
                Some(true) => "local graph actor",
                _ => "chat session",
            };
            tracing::error!(actor, id = %cell.get_id(), error = %err, "actor failed");
        }
        Ok(())
    }
}
