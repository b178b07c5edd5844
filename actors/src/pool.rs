//! Worker pools: the [`Slot`] a supervisor refills when it restarts a child, the
//! [`Admission`] that bounds a pool, and the factory plumbing every pool shares (spawning one,
//! answering a job unless its caller has gone, reading its stats). Its own file so that every
//! actor file takes these from one place below them, never through the root.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use ractor::{Actor, SpawnErr};

/// A child's current handle: the supervisor writes it at each (re)start, callers read it.
pub(crate) type Slot<T> = Arc<RwLock<Option<T>>>;

/// One admitted request of a bounded pool; the place is given back when it drops.
pub(crate) struct Admission(Arc<AtomicUsize>);

impl Admission {
    /// Takes a place if fewer than `limit` are taken; else says how many are.
    pub(crate) fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Result<Admission, usize> {
        let before = counter.fetch_add(1, Ordering::AcqRel);
        let admission = Admission(counter.clone());
        if before >= limit {
            return Err(before);
        }
        Ok(admission)
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A worker pool's state as its factory reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers busy with a request.
    pub active_workers: usize,
    /// Requests waiting for a worker.
    pub queue_depth: usize,
}

/// Spawns a worker pool linked to `supervisor`: a ractor factory of `workers` workers made
/// by `make`, each started with a clone of `args`. Jobs wait in the factory's queue for the
/// next idle worker; the pool's handle bounds how many it admits.
pub(crate) async fn spawn_pool<W>(
    make: fn() -> W,
    args: W::Arguments,
    workers: usize,
    supervisor: ractor::ActorCell,
) -> Result<ractor::factory::FactoryRef<(), W::Message>, SpawnErr>
where
    W: ractor::factory::Worker<Key = ()>,
    W::Arguments: Clone + Sync,
{
    use ractor::factory::{Factory, FactoryArguments, queues, routing, worker_builder};
    let args = FactoryArguments::builder()
        .worker_builder(Box::new(worker_builder(move |_wid| (make(), args.clone()))))
        .queue(queues::DefaultQueue::default())
        .router(routing::QueuerRouting::default())
        .num_initial_workers(workers)
        .build();
    let factory = Factory::<
        (),
        W::Message,
        W::Arguments,
        W,
        routing::QueuerRouting<(), W::Message>,
        queues::DefaultQueue<(), W::Message>,
    >::default();
    let (factory, _) = Actor::spawn_linked(None, factory, args, supervisor).await?;
    Ok(factory)
}

/// Resolves once nobody waits for the reply any more (the caller timed out, or was dropped
/// with its client's connection).
async fn requester_gone<T>(reply: &ractor::RpcReplyPort<T>) {
    while !reply.is_closed() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `work` and sends what it gives, unless its caller gives up first. A request whose
/// caller has already gone (it timed out while the request waited in a queue) is not started;
/// one whose caller goes while it runs is dropped at once, freeing its worker.
pub(crate) async fn answer<T>(reply: ractor::RpcReplyPort<T>, work: impl Future<Output = T>) {
    if reply.is_closed() {
        return;
    }
    tokio::select! {
        result = work => {
            let _ = reply.send(result);
        }
        () = requester_gone(&reply) => {}
    }
}

/// Asks a factory for its stats; `None` when it does not answer within 100 ms.
pub(crate) async fn pool_stats<K, M>(
    factory: ractor::factory::FactoryRef<K, M>,
) -> Option<PoolStats>
where
    K: ractor::factory::JobKey,
    M: ractor::Message,
{
    let wait = Some(Duration::from_millis(100));
    let (active, queued) = futures::join!(factory.active_workers(wait), factory.queue_depth(wait));
    match (active, queued) {
        (
            Ok(ractor::rpc::CallResult::Success(active_workers)),
            Ok(ractor::rpc::CallResult::Success(queue_depth)),
        ) => Some(PoolStats {
            active_workers,
            queue_depth,
        }),
        _ => None,
    }
}
