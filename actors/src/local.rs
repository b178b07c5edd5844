//! The [`LocalGraphActor`]s: graph actors on each HTTP worker thread that answer that thread's
//! own graph requests from memory, one per lane that is answered there, and `LocalActors`,
//! with which [`GraphPool`](crate::GraphPool) finds (or starts) the calling thread's actor.
//!
//! A request a lane's factory answers crosses threads twice (to the lane's runtime and back)
//! and takes three actor messages (the factory's dispatch, the worker's job, the worker's
//! "finished"). Those wake-ups and context switches were about a quarter of a traversal's
//! server time (docs/benchmarks.md). The actor on the caller's own thread takes one message
//! and crosses no thread. The lanes answered there:
//!
//! - **Lookup** (entity lookups and traversals), when the graph index answers them
//!   (`KnowledgeBase::uses_index`). A lookup from the index takes microseconds, so it holds
//!   its HTTP worker about as long as writing its answer does.
//! - **Documents** (graph documents), when they are answered from memory alone
//!   (`KnowledgeBase::answers_documents_in_memory`: the graph index, the documents held by an
//!   embedded store, the built-in embedder). Bounded work: the walk collects at most 200
//!   entities, and a walk that links more than a tenth of a millisecond of codes chooses its
//!   documents on the scan lane (`KnowledgeBase::set_scan_lane`, `kbq_store::related`).
//!
//! Each lane has an actor of its own on a thread, so a thread's lookups never wait in a
//! mailbox behind its documents requests: the thread's scheduler alternates between them.
//! Name search stays in its lane: a short query ranks among tens of thousands of names.
//!
//! Elsewhere each lane's factory answers: a request that would wait on SurrealDB or on a
//! remote embedder (one actor per thread would run those one at a time), and a request made
//! on any other thread (`kbq mcp` over stdio, or a test's). The agent's tools read the
//! knowledge base directly, not through the pool. Either way the lane's handle admits the
//! call: the lane's bound, shedding, timeout and in-flight count cover both.

use std::cell::RefCell;
use std::sync::Arc;

use kbq_store::KnowledgeBase;
use ractor::actor::ActorRuntime;
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus};

use crate::edge_supervisor::EdgeSupervisorMessage;
use crate::graph::{ActorsHere, GraphLane, GraphRequest, serve};
use crate::pool::Slot;

/// A thread's actors, by [`GraphLane::index`]: `None` where the lane has none running yet.
type Actors = [Option<ActorRef<GraphRequest>>; GraphLane::ALL.len()];

thread_local! {
    /// `None`: this thread does not serve its own graph requests. `Some(actors)`: it does.
    static HERE: RefCell<Option<Actors>> = const { RefCell::new(None) };
}

/// Makes the calling thread answer its own graph requests with actors of its own, each started
/// at the first request of its lane. Each HTTP worker thread calls it as it builds its app.
pub fn serve_graph_on_this_thread() {
    HERE.with(|here| {
        let mut here = here.borrow_mut();
        if here.is_none() {
            *here = Some(Default::default());
        }
    });
}

/// A graph actor on one HTTP worker thread: the thread's requests of one lane.
pub struct LocalGraphActor;

impl Actor for LocalGraphActor {
    type Msg = GraphRequest;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<GraphRequest>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<GraphRequest>,
        msg: GraphRequest,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        serve(msg).await;
        Ok(())
    }
}

/// What [`GraphPool`](crate::GraphPool) needs to find or start the calling thread's
/// [`LocalGraphActor`] of a lane.
pub(crate) struct LocalActors {
    /// The actors' parent, the [`EdgeSupervisor`](crate::edge_supervisor::EdgeSupervisor).
    parent: Slot<ActorRef<EdgeSupervisorMessage>>,
    /// Which lanes are answered on the HTTP workers' threads, by [`GraphLane::index`].
    lanes: [bool; GraphLane::ALL.len()],
}

impl LocalActors {
    /// The lanes `kb` answers from memory, on the HTTP workers' threads; `None` when it
    /// answers none of them so. Every workspace's knowledge base has the same store
    /// configuration as `kb`, and so answers the same lanes from memory.
    pub(crate) fn new(
        kb: Arc<KnowledgeBase>,
        parent: Slot<ActorRef<EdgeSupervisorMessage>>,
    ) -> Option<Self> {
        let lanes = GraphLane::ALL.map(|lane| match lane {
            GraphLane::Lookup => kb.uses_index(),
            GraphLane::Search => false,
            GraphLane::Documents => kb.answers_documents_in_memory(),
        });
        lanes
            .contains(&true)
            .then_some(LocalActors { parent, lanes })
    }
}

impl ActorsHere for LocalActors {
    /// The calling thread's actor of `lane`, started (on this thread's runtime) when it has
    /// none running: the first time, and after its actor failed. `None` for a lane answered
    /// only by its factory, on a thread that does not serve its own requests, and while the
    /// edge supervisor restarts.
    fn here(&self, lane: GraphLane) -> Option<ActorRef<GraphRequest>> {
        if !self.lanes[lane.index()] {
            return None;
        }
        HERE.with(|here| {
            let mut here = here.borrow_mut();
            let actor = &mut here.as_mut()?[lane.index()];
            let stopped = |a: &ActorRef<GraphRequest>| {
                matches!(a.get_status(), ActorStatus::Stopping | ActorStatus::Stopped)
            };
            if let Some(running) = actor.as_ref().filter(|a| !stopped(a)) {
                return Some(running.clone());
            }
            let parent = self.parent.read().clone()?;
            // Spawned on the current runtime: the HTTP worker's own, a single thread.
            let (started, _) =
                ActorRuntime::spawn_linked_instant(None, LocalGraphActor, (), parent.get_cell())
                    .ok()?;
            *actor = Some(started.clone());
            Some(started)
        })
    }
}
