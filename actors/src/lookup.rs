//! The [`LookupActor`]s: a graph actor on each HTTP worker thread that answers that thread's
//! entity lookups and traversals from the in-memory graph index, and [`LocalLookups`], with
//! which [`GraphPool`](crate::GraphPool) finds (or starts) the calling thread's actor.
//!
//! A lookup the lookup lane answers crosses threads twice (to the lane's runtime and back)
//! and takes three actor messages (the factory's dispatch, the worker's job, the worker's
//! "finished"). Those wake-ups and context switches were about a quarter of a traversal's
//! server time (docs/benchmarks.md). The actor on the caller's own thread takes one message
//! and crosses no thread. A lookup from the index takes microseconds, so it holds its HTTP
//! worker about as long as writing its answer does.
//!
//! Only where the index answers (`KnowledgeBase::uses_index`): without it a lookup is a
//! statement to SurrealDB, and one actor per thread would run those one at a time, so they
//! stay in the lane. A lookup made on any other thread goes to the lane too: `kbq mcp`'s
//! entity lookup over stdio, or a test's. (The agent's tools read the knowledge base
//! directly, not through the pool.)
//! Either way the lookup lane's handle admits the call: the lane's bound, shedding, timeout
//! and in-flight count cover both.

use std::cell::RefCell;
use std::sync::Arc;

use kbq_store::KnowledgeBase;
use ractor::actor::ActorRuntime;
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus};

use crate::edge_supervisor::EdgeSupervisorMessage;
use crate::graph::{GraphRequest, LookupsHere, serve};
use crate::pool::Slot;

thread_local! {
    /// `None`: this thread does not serve lookups. `Some(None)`: it does, and has no running
    /// actor yet. `Some(Some(actor))`: its actor.
    static HERE: RefCell<Option<Option<ActorRef<GraphRequest>>>> = const { RefCell::new(None) };
}

/// Makes the calling thread answer its own lookups with an actor of its own, started at its
/// first lookup. Each HTTP worker thread calls it as it builds its app.
pub fn serve_lookups_on_this_thread() {
    HERE.with(|here| {
        let mut here = here.borrow_mut();
        if here.is_none() {
            *here = Some(None);
        }
    });
}

/// A graph actor on one HTTP worker thread: the thread's entity lookups and traversals.
pub struct LookupActor;

impl Actor for LookupActor {
    type Msg = GraphRequest;
    type State = Arc<KnowledgeBase>;
    type Arguments = Arc<KnowledgeBase>;

    async fn pre_start(
        &self,
        _myself: ActorRef<GraphRequest>,
        kb: Arc<KnowledgeBase>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(kb)
    }

    async fn handle(
        &self,
        _myself: ActorRef<GraphRequest>,
        msg: GraphRequest,
        kb: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        serve(kb, msg).await;
        Ok(())
    }
}

/// What [`GraphPool`](crate::GraphPool) needs to find or start the calling thread's
/// [`LookupActor`].
pub(crate) struct LocalLookups {
    kb: Arc<KnowledgeBase>,
    /// The actors' parent, the [`EdgeSupervisor`](crate::edge_supervisor::EdgeSupervisor).
    parent: Slot<ActorRef<EdgeSupervisorMessage>>,
}

impl LocalLookups {
    /// Lookups on the HTTP workers' threads, when `kb` answers them from its index.
    pub(crate) fn new(
        kb: Arc<KnowledgeBase>,
        parent: Slot<ActorRef<EdgeSupervisorMessage>>,
    ) -> Option<Self> {
        kb.uses_index().then_some(LocalLookups { kb, parent })
    }
}

impl LookupsHere for LocalLookups {
    /// The calling thread's lookup actor, started (on this thread's runtime) when it has none
    /// running: the first time, and after its actor failed. `None` on a thread that does not
    /// serve lookups, and while the edge supervisor restarts.
    fn here(&self) -> Option<ActorRef<GraphRequest>> {
        HERE.with(|here| {
            let mut here = here.borrow_mut();
            let actor = here.as_mut()?;
            let stopped = |a: &ActorRef<GraphRequest>| {
                matches!(a.get_status(), ActorStatus::Stopping | ActorStatus::Stopped)
            };
            if let Some(running) = actor.as_ref().filter(|a| !stopped(a)) {
                return Some(running.clone());
            }
            let parent = self.parent.read().clone()?;
            // Spawned on the current runtime: the HTTP worker's own, a single thread.
            let (started, _) = ActorRuntime::spawn_linked_instant(
                None,
                LookupActor,
                self.kb.clone(),
                parent.get_cell(),
            )
            .ok()?;
            *actor = Some(started.clone());
            Some(started)
        })
    }
}
