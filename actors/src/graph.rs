//! The graph workers: a ractor factory of [`GraphWorker`]s that answer the four graph
//! operations from the knowledge base, and [`GraphPool`], the handle the HTTP edge calls.

use std::sync::Arc;
use std::time::Duration;

use kbq_store::{
    DocumentsQuery, EntityRef, GraphDocuments, KnowledgeBase, StoreError, Traversal, TraversalQuery,
};
use ractor::factory::{FactoryMessage, FactoryRef, Job, Worker, WorkerId};
use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::pool::{PoolError, PoolHandle, PoolStats, answer};

/// What the graph workers do. Each variant answers through its reply port.
#[derive(Debug)]
pub enum GraphRequest {
    /// Walk the graph from an entity.
    Traverse(TraversalQuery, RpcReplyPort<Result<Traversal, StoreError>>),
    /// Find entities whose names contain a string.
    Search {
        query: String,
        entity_type: Option<String>,
        limit: usize,
        reply: RpcReplyPort<Result<Vec<EntityRef>, StoreError>>,
    },
    /// Fetch one entity by exact name.
    Entity(String, RpcReplyPort<Result<Option<EntityRef>, StoreError>>),
    /// Walk, then resolve the entities reached to documents.
    Documents(
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

/// One worker of the pool. Stateless apart from its handle on the knowledge base.
pub struct GraphWorker;

impl Worker for GraphWorker {
    type Key = ();
    type Message = GraphRequest;
    type Arguments = Arc<KnowledgeBase>;
    type State = Arc<KnowledgeBase>;

    async fn pre_start(
        &self,
        _wid: WorkerId,
        _factory: &ActorRef<FactoryMessage<(), GraphRequest>>,
        kb: Arc<KnowledgeBase>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(kb)
    }

    async fn handle(
        &self,
        _wid: WorkerId,
        _factory: &ActorRef<FactoryMessage<(), GraphRequest>>,
        Job { key, msg, .. }: Job<(), GraphRequest>,
        kb: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A caller that gave up (it timed out, or its client went away) has closed its port:
        // its request is not started, or stops where it is, and the worker moves on.
        match msg {
            GraphRequest::Traverse(q, reply) => answer(reply, kb.traverse(&q)).await,
            GraphRequest::Search {
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
            GraphRequest::Entity(name, reply) => answer(reply, kb.entity(&name)).await,
            GraphRequest::Documents(q, reply) => answer(reply, kb.graph_documents(&q)).await,
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
        Ok(key)
    }
}

/// The handle the edge uses: every call has a timeout, a full pool sheds at once, and the
/// handle follows the factory across restarts by the root supervisor.
#[derive(Clone)]
pub struct GraphPool(PoolHandle<GraphRequest>);

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
    pub(crate) fn new(pool: PoolHandle<GraphRequest>) -> Self {
        GraphPool(pool)
    }

    /// Workers in the pool now.
    pub fn size(&self) -> usize {
        self.0.size()
    }

    /// Requests running or queued now.
    pub fn in_flight(&self) -> usize {
        self.0.in_flight()
    }

    /// Holds one worker until `release` sends or is dropped; resolves when the worker lets
    /// go. Only for tests of load.
    #[cfg(feature = "fault-injection")]
    pub async fn hold(
        &self,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), GraphError> {
        self.call(|reply| GraphRequest::Hold(release, reply)).await
    }

    pub async fn traverse(&self, query: TraversalQuery) -> Result<Traversal, GraphError> {
        self.call(|reply| GraphRequest::Traverse(query, reply))
            .await
    }

    pub async fn search(
        &self,
        query: String,
        entity_type: Option<String>,
        limit: usize,
    ) -> Result<Vec<EntityRef>, GraphError> {
        self.call(|reply| GraphRequest::Search {
            query,
            entity_type,
            limit,
            reply,
        })
        .await
    }

    pub async fn entity(&self, name: String) -> Result<Option<EntityRef>, GraphError> {
        self.call(|reply| GraphRequest::Entity(name, reply)).await
    }

    pub async fn documents(&self, query: DocumentsQuery) -> Result<GraphDocuments, GraphError> {
        self.call(|reply| GraphRequest::Documents(query, reply))
            .await
    }

    /// Makes one worker panic. Only for tests of supervision.
    #[cfg(feature = "fault-injection")]
    pub fn inject_panic(&self) {
        if let Some(f) = self.factory() {
            let _ = f.dispatch((), GraphRequest::Panic);
        }
    }

    /// Workers and queued requests of the pool, or `None` while it restarts.
    pub async fn stats(&self) -> Option<PoolStats> {
        self.0.stats().await
    }

    /// The current factory, e.g. to kill it in a test of supervision.
    pub fn factory(&self) -> Option<FactoryRef<(), GraphRequest>> {
        self.0.factory()
    }

    async fn call<T: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<Result<T, StoreError>>) -> GraphRequest,
    ) -> Result<T, GraphError> {
        Ok(self.0.call(build).await??)
    }
}
