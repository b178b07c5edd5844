//! The [`SessionSupervisor`]: the parent of every `ChatSessionActor`, in a file of its own
//! because it is an actor of its own (one actor per file).

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

/// Messages to the session supervisor.
#[derive(Debug)]
pub enum SessionSupervisorMessage {}

/// Parent of every chat session. A session is one request: it is never restarted; its
/// failure is logged and its caller gets an error.
pub struct SessionSupervisor;

impl Actor for SessionSupervisor {
    type Msg = SessionSupervisorMessage;
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
            tracing::error!(session = %cell.get_id(), error = %err, "chat session failed");
        }
        Ok(())
    }
}
