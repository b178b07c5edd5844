//! The graph workers: ractor factories of [`GraphWorker`]s that answer the four graph
//! operations from the knowledge base, and [`GraphPool`], the handle the HTTP edge calls.
//!
//! The operations run in [`GraphLane`]s, one factory each with its own bound and its own
//! workers, so that a slow class of request cannot fill the workers a cheap one needs: entity
//! lookups and traversals never wait behind name searches, nor either behind graph documents.
//! The lookup and search lanes also run on a runtime of their own (see
//! [`Runtime`](crate::Runtime) and [`GraphLane::on_lookup_runtime`]). An HTTP worker's own
//! lookups, and its graph documents when they are answered from memory, are answered on its
//! thread by a [`LocalGraphActor`](crate::local::LocalGraphActor) of each lane, within that
//! lane's bound.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use kbq_store::{
    DocumentsQuery, EntityRef, GraphDocuments, KnowledgeBase, StoreError, TraversalJson,
    TraversalQuery,
};
use ractor::factory::{FactoryMessage, FactoryRef, Job, Worker, WorkerId};
use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::pool::{PoolError, PoolHandle, PoolStats, answer};

/// What the graph workers do. Each variant names the knowledge base it reads (the request's
/// workspace, which the edge resolved from its key) and answers through its reply port: a
/// worker holds no knowledge base of its own, so no request can read another's.
pub enum GraphRequest {
    /// Walk the graph from an entity; the answer comes as JSON (see [`TraversalJson`]).
    Traverse(
        Arc<KnowledgeBase>,
        TraversalQuery,
        RpcReplyPort<Result<TraversalJson, StoreError>>,
    ),
    /// Find entities whose names contain a string.
    Search {
        kb: Arc<KnowledgeBase>,
        query: String,
        entity_type: Option<String>,
        limit: usize,
        reply: RpcReplyPort<Result<Vec<EntityRef>, StoreError>>,
    },
    /// Fetch one entity by exact name.
    Entity(
        Arc<KnowledgeBase>,
        String,
        RpcReplyPort<Result<Option<EntityRef>, StoreError>>,
    ),
    /// Walk, then resolve the entities reached to documents.
    Documents(
        Arc<KnowledgeBase>,
        DocumentsQuery,
        RpcReplyPort<Result<GraphDocuments, StoreError>>,
    ),
    /// Panic inside the worker: only for tests of supervision.
    #[cfg(feature = "fault-injection")]
    Panic,
    /// Hold the worker until the sender is dropped or sends: only for tests of load.
    #[cfg(feature = "fault-injection")]
    Hold(
        tokio::sync::oneshot::Receiver<()>,
        RpcReplyPort<Result<(), StoreError>>,
    ),
}

/// Why a graph call did not produce an answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GraphError {
    /// The store answered with an error.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No worker answered in time.
    #[error("the graph workers did not answer within {0:?}")]
    Timeout(Duration),
    /// The worker stopped (crashed) before answering; it has been replaced.
    #[error("the graph worker stopped before answering")]
    WorkerLost,
    /// The pool is not running (shutting down, or being restarted).
    #[error("the graph workers are not running: {0}")]
    NotRunning(String),
    /// Every worker is busy and the queue is full: the request was not queued.
    #[error("the graph workers are busy: {0} requests are already running or queued")]
    Overloaded(usize),
}

/// A class of graph request, served by a pool of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphLane {
    /// Entity lookups and traversals: cheap, and what interactive clients wait for.
    Lookup,
    /// Name searches.
    Search,
    /// Traversals resolved to documents: the slowest graph class.
    Documents,
}

impl GraphLane {
    /// Every lane, in the order of [`GraphPool`]'s handles and of metrics.
    pub const ALL: [GraphLane; 3] = [GraphLane::Lookup, GraphLane::Search, GraphLane::Documents];

    /// The pool's name in metrics and logs. The lookup lane keeps the name the single graph
    /// pool had, `graph`.
    pub fn pool_name(self) -> &'static str {
        match self {
            GraphLane::Lookup => "graph",
            GraphLane::Search => "graph:search",
            GraphLane::Documents => "graph:documents",
        }
    }

    /// Whether the lane runs on the lookup runtime (`graph.lookup_threads`) rather than the
    /// main runtime. Name search answers from the in-memory name index in tens of
    /// microseconds, whatever the query's length, so it runs beside lookups, apart from the
    /// slow classes of the main runtime (graph documents, RAG, chats), while its own pool
    /// bounds and sheds it apart from lookups.
    pub fn on_lookup_runtime(self) -> bool {
        matches!(self, GraphLane::Lookup | GraphLane::Search)
    }

    /// The lane's place in [`GraphLane::ALL`].
    pub(crate) fn index(self) -> usize {
        match self {
            GraphLane::Lookup => 0,
            GraphLane::Search => 1,
            GraphLane::Documents => 2,
        }
    }
}

impl std::fmt::Debug for GraphRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GraphRequest::Traverse(_, q, _) => f.debug_tuple("Traverse").field(q).finish(),
            GraphRequest::Search { query, .. } => f.debug_tuple("Search").field(query).finish(),
            GraphRequest::Entity(_, name, _) => f.debug_tuple("Entity").field(name).finish(),
            GraphRequest::Documents(_, q, _) => f.debug_tuple("Documents").field(q).finish(),
            #[cfg(feature = "fault-injection")]
            GraphRequest::Panic => f.write_str("Panic"),
            #[cfg(feature = "fault-injection")]
            GraphRequest::Hold(..) => f.write_str("Hold"),
        }
    }
}

/// One worker of the pool. Stateless: each request brings the knowledge base it reads.
pub struct GraphWorker;

impl Worker for GraphWorker {
    type Key = ();
    type Message = GraphRequest;
    type Arguments = ();
    type State = ();

    async fn pre_start(
        &self,
        _wid: WorkerId,
        _factory: &ActorRef<FactoryMessage<(), GraphRequest>>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _wid: WorkerId,
        _factory: &ActorRef<FactoryMessage<(), GraphRequest>>,
        Job { key, msg, .. }: Job<(), GraphRequest>,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        serve(msg).await;
        Ok(key)
    }
}

/// Answers one graph request from its knowledge base through its reply port: what a
/// [`GraphWorker`] of a lane and a [`LocalGraphActor`](crate::local::LocalGraphActor) beside
/// an HTTP worker both do.
pub(crate) async fn serve(msg: GraphRequest) {
    // A caller that gave up (it timed out, or its client went away) has closed its port:
    // its request is not started, or stops where it is, and the worker moves on.
    match msg {
        GraphRequest::Traverse(kb, q, reply) => answer(reply, kb.traverse_json(&q)).await,
        GraphRequest::Search {
            kb,
            query,
            entity_type,
            limit,
            reply,
        } => {
            answer(
                reply,
                kb.search_entities(&query, entity_type.as_deref(), limit),
            )
            .await
        }
        GraphRequest::Entity(kb, name, reply) => answer(reply, kb.entity(&name)).await,
        GraphRequest::Documents(kb, q, reply) => answer(reply, kb.graph_documents(&q)).await,
        #[cfg(feature = "fault-injection")]
        GraphRequest::Panic => panic!("graph worker panicked on request (fault injection)"),
        #[cfg(feature = "fault-injection")]
        GraphRequest::Hold(release, reply) => {
            answer(reply, async {
                let _ = release.await;
                Ok(())
            })
            .await
        }
    }
}

/// The handle the edge uses: one pool per [`GraphLane`]; every call has a timeout, a full
/// lane sheds at once, and each lane's handle follows its factory across restarts by the
/// root supervisor.
#[derive(Clone)]
pub struct GraphPool {
    lanes: [PoolHandle<GraphRequest>; 3],
    /// The HTTP workers' own graph actors, for the lanes answered from memory.
    local: Option<Arc<dyn ActorsHere>>,
}

/// Finds the calling thread's own actor for a lane: the HTTP workers' `LocalGraphActor`s
/// ([`crate::local`] implements it, and depends on this file, not this file on it).
pub(crate) trait ActorsHere: Send + Sync {
    /// The calling thread's actor for `lane`, or `None`: the lane's factory answers.
    fn here(&self, lane: GraphLane) -> Option<ActorRef<GraphRequest>>;
}

impl From<PoolError> for GraphError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::NotRunning => GraphError::NotRunning("restarting".into()),
            PoolError::Refused(reason) => GraphError::NotRunning(reason),
            PoolError::Overloaded(n) => GraphError::Overloaded(n),
            PoolError::Timeout(after) => GraphError::Timeout(after),
            PoolError::WorkerLost => GraphError::WorkerLost,
        }
    }
}

impl GraphPool {
    /// `lanes` in the order of [`GraphLane::ALL`]; `local`: the graph actors of the threads
    /// that serve their own requests.
    pub(crate) fn new(
        lanes: [PoolHandle<GraphRequest>; 3],
        local: Option<Arc<dyn ActorsHere>>,
    ) -> Self {
        GraphPool { lanes, local }
    }

    fn lane(&self, lane: GraphLane) -> &PoolHandle<GraphRequest> {
        &self.lanes[lane.index()]
    }

    /// Workers in the lookup lane now (the lane of traversals and entity lookups).
    pub fn size(&self) -> usize {
        self.lane(GraphLane::Lookup).size()
    }

    /// Requests running or queued in the lookup lane now.
    pub fn in_flight(&self) -> usize {
        self.in_flight_in(GraphLane::Lookup)
    }

    /// Requests running or queued in `lane` now.
    pub fn in_flight_in(&self, lane: GraphLane) -> usize {
        self.lane(lane).in_flight()
    }

    /// Holds one worker of `lane` until `release` sends or is dropped; resolves when the
    /// worker lets go. Only for tests of load.
    #[cfg(feature = "fault-injection")]
    pub async fn hold_in(
        &self,
        lane: GraphLane,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), GraphError> {
        self.call(lane, |reply| GraphRequest::Hold(release, reply))
            .await
    }

    /// [`hold_in`](Self::hold_in) the lookup lane.
    #[cfg(feature = "fault-injection")]
    pub async fn hold(
        &self,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), GraphError> {
        self.hold_in(GraphLane::Lookup, release).await
    }

    /// The walk from `query.start` in `kb`, as the JSON an answer writes out.
    pub async fn traverse(
        &self,
        kb: &Arc<KnowledgeBase>,
        query: TraversalQuery,
    ) -> Result<TraversalJson, GraphError> {
        let kb = kb.clone();
        let span = tracing::debug_span!(
            "graph.traverse",
            kbq.lane = "lookup",
            kbq.depth = query.depth,
            kbq.limit = query.limit
        );
        self.local_or_lane(GraphLane::Lookup, |reply| {
            GraphRequest::Traverse(kb, query, reply)
        })
        .instrument(span)
        .await
    }

    /// Entities of `kb` whose names match `query`.
    pub async fn search(
        &self,
        kb: &Arc<KnowledgeBase>,
        query: String,
        entity_type: Option<String>,
        limit: usize,
    ) -> Result<Vec<EntityRef>, GraphError> {
        let kb = kb.clone();
        let span = tracing::debug_span!("graph.search", kbq.lane = "search", kbq.limit = limit);
        self.call(GraphLane::Search, |reply| GraphRequest::Search {
            kb,
            query,
            entity_type,
            limit,
            reply,
        })
        .instrument(span)
        .await
    }

    /// The entity of `kb` named `name`.
    pub async fn entity(
        &self,
        kb: &Arc<KnowledgeBase>,
        name: String,
    ) -> Result<Option<EntityRef>, GraphError> {
        let kb = kb.clone();
        let span = tracing::debug_span!("graph.entity", kbq.lane = "lookup");
        self.local_or_lane(GraphLane::Lookup, |reply| {
            GraphRequest::Entity(kb, name, reply)
        })
        .instrument(span)
        .await
    }

    /// The walk of `query` in `kb`, resolved to documents.
    pub async fn documents(
        &self,
        kb: &Arc<KnowledgeBase>,
        query: DocumentsQuery,
    ) -> Result<GraphDocuments, GraphError> {
        let kb = kb.clone();
        let span = tracing::debug_span!("graph.documents", kbq.lane = "documents");
        self.local_or_lane(GraphLane::Documents, |reply| {
            GraphRequest::Documents(kb, query, reply)
        })
        .instrument(span)
        .await
    }

    /// Makes one worker of the lookup lane panic. Only for tests of supervision.
    #[cfg(feature = "fault-injection")]
    pub fn inject_panic(&self) {
        if let Some(f) = self.factory() {
            let _ = f.dispatch((), GraphRequest::Panic);
        }
    }

    /// The calling thread's actor of `lane` (started if it has none running), when this
    /// thread answers that lane's requests itself (see [`crate::local`]). Only for tests.
    #[cfg(feature = "fault-injection")]
    pub fn local_actor_here(&self, lane: GraphLane) -> Option<ActorRef<GraphRequest>> {
        self.local.as_ref().and_then(|l| l.here(lane))
    }

    /// Workers and queued requests of the lookup lane, or `None` while it restarts.
    pub async fn stats(&self) -> Option<PoolStats> {
        self.lane(GraphLane::Lookup).stats().await
    }

    /// The lookup lane's current factory, e.g. to kill it in a test of supervision.
    pub fn factory(&self) -> Option<FactoryRef<(), GraphRequest>> {
        self.factory_in(GraphLane::Lookup)
    }

    /// `lane`'s current factory, or `None` while it restarts.
    pub fn factory_in(&self, lane: GraphLane) -> Option<FactoryRef<(), GraphRequest>> {
        self.lane(lane).factory()
    }

    /// A call of `lane`: answered by the calling thread's own
    /// [`LocalGraphActor`](crate::local::LocalGraphActor) of that lane on an HTTP worker,
    /// else by the lane's factory. The lane's handle admits it either way.
    async fn local_or_lane<T: Send + 'static>(
        &self,
        lane: GraphLane,
        build: impl FnOnce(RpcReplyPort<Result<T, StoreError>>) -> GraphRequest,
    ) -> Result<T, GraphError> {
        match self.local.as_ref().and_then(|l| l.here(lane)) {
            Some(actor) => Ok(self.lane(lane).call_actor(&actor, build).await??),
            None => self.call(lane, build).await,
        }
    }

    async fn call<T: Send + 'static>(
        &self,
        lane: GraphLane,
        build: impl FnOnce(RpcReplyPort<Result<T, StoreError>>) -> GraphRequest,
    ) -> Result<T, GraphError> {
        Ok(self.lane(lane).call(build).await??)
    }
}
