//! Worker pools: `PoolHandle`, the one handle every pool's callers use (the graph's, each
//! tool's, each provider's: admission bound, shedding, timeout, in-flight count, size), the
//! `Slot` a supervisor refills when it restarts a child, the `Admission` that bounds a pool,
//! and the factory plumbing every pool shares (spawning one, answering a job unless its
//! caller has gone, reading its stats). Its own file, below every actor file, so that they
//! all take these from one place and never through the root.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use ractor::factory::{FactoryRef, JobKey, Worker};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef, Message, RpcReplyPort, SpawnErr};

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
    supervisor: ActorCell,
) -> Result<FactoryRef<(), W::Message>, SpawnErr>
where
    W: Worker<Key = ()>,
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
async fn requester_gone<T>(reply: &RpcReplyPort<T>) {
    while !reply.is_closed() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `work` and sends what it gives, unless its caller gives up first. A request whose
/// caller has already gone (it timed out while the request waited in a queue) is not started;
/// one whose caller goes while it runs is dropped at once, freeing its worker.
pub(crate) async fn answer<T>(reply: RpcReplyPort<T>, work: impl Future<Output = T>) {
    if reply.is_closed() {
        return;
    }
    tokio::select! {
        // The work first: work that finishes at its first poll (an in-memory read) answers
        // without ever arming the wait for a caller that went.
        biased;
        result = work => {
            let _ = reply.send(result);
        }
        () = requester_gone(&reply) => {}
    }
}

/// Asks a factory for its stats; `None` when it does not answer within 100 ms.
pub(crate) async fn pool_stats<K, M>(factory: FactoryRef<K, M>) -> Option<PoolStats>
where
    K: JobKey,
    M: Message,
{
    let wait = Some(Duration::from_millis(100));
    let (active, queued) = futures::join!(factory.active_workers(wait), factory.queue_depth(wait));
    match (active, queued) {
        (Ok(CallResult::Success(active_workers)), Ok(CallResult::Success(queue_depth))) => {
            Some(PoolStats {
                active_workers,
                queue_depth,
            })
        }
        _ => None,
    }
}

/// Why a pool did not answer a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PoolError {
    /// The slot holds no factory (it is starting or being restarted): nothing was asked.
    NotRunning,
    /// The factory did not take the job (it is stopping); ractor's reason.
    Refused(String),
    /// The pool had its most workers plus its queue admitted (this many): shed at once.
    Overloaded(usize),
    /// No worker answered within this long.
    Timeout(Duration),
    /// The worker stopped (crashed) before answering.
    WorkerLost,
}

/// The handle of one bounded worker pool, as its callers use it: it follows the pool's
/// factory across restarts (through its [`Slot`]), admits at most `admit` calls at once and
/// sheds the next at once, gives every call a timeout, and keeps the numbers metrics read
/// (calls in flight, and the size the capacity controller gave the pool). Cloning it shares
/// all of that.
pub(crate) struct PoolHandle<M: Message> {
    slot: Slot<FactoryRef<(), M>>,
    /// Longest wait of a call, unless the caller gives its own.
    timeout: Duration,
    /// Calls admitted and not yet answered (running or queued).
    in_flight: Arc<AtomicUsize>,
    /// Most calls admitted at once: the pool's most workers plus its queue capacity.
    admit: usize,
    /// Workers the pool starts (and restarts) with: its least size.
    least: usize,
    /// Workers in the pool: its least size at start, then as the capacity controller sets it.
    size: Arc<AtomicUsize>,
}

impl<M: Message> Clone for PoolHandle<M> {
    fn clone(&self) -> Self {
        PoolHandle {
            slot: self.slot.clone(),
            timeout: self.timeout,
            in_flight: self.in_flight.clone(),
            admit: self.admit,
            least: self.least,
            size: self.size.clone(),
        }
    }
}

impl<M: Message> PoolHandle<M> {
    /// A handle on a pool not yet spawned: its supervisor fills [`slot`](Self::slot) with a
    /// factory of `least` workers, at start and at each restart.
    pub(crate) fn new(least: usize, admit: usize, timeout: Duration) -> Self {
        PoolHandle {
            slot: Arc::new(RwLock::new(None)),
            timeout,
            in_flight: Arc::default(),
            admit: admit.max(1),
            least,
            size: Arc::new(AtomicUsize::new(least)),
        }
    }

    /// Where the supervisor puts the pool's factory at each (re)start.
    pub(crate) fn slot(&self) -> &Slot<FactoryRef<(), M>> {
        &self.slot
    }

    /// The running factory, or `None` while it restarts.
    pub(crate) fn factory(&self) -> Option<FactoryRef<(), M>> {
        self.slot.read().clone()
    }

    /// Workers the pool starts with.
    pub(crate) fn least(&self) -> usize {
        self.least
    }

    /// Calls running or queued now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Workers in the pool now.
    pub(crate) fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }

    /// Records the pool's size (only the capacity controller changes it).
    pub(crate) fn set_size(&self, workers: usize) {
        self.size.store(workers, Ordering::Release);
    }

    /// Busy workers and queued calls, or `None` while the pool restarts.
    pub(crate) async fn stats(&self) -> Option<PoolStats> {
        pool_stats(self.factory()?).await
    }

    /// Sends the job `build` makes and waits for its answer, at most the handle's timeout.
    pub(crate) async fn call<R: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<R>) -> M,
    ) -> Result<R, PoolError> {
        self.call_within(Some(self.timeout), build).await
    }

    /// As [`call`](Self::call), waiting at most `timeout` (for ever when `None`).
    pub(crate) async fn call_within<R: Send + 'static>(
        &self,
        timeout: Option<Duration>,
        build: impl FnOnce(RpcReplyPort<R>) -> M,
    ) -> Result<R, PoolError> {
        let factory = self.factory().ok_or(PoolError::NotRunning)?;
        // Shed instead of queueing without bound: a full pool answers at once.
        let _admitted =
            Admission::take(&self.in_flight, self.admit).map_err(PoolError::Overloaded)?;
        outcome(factory.call_job((), build, timeout).await, timeout)
    }

    /// As [`call`](Self::call), sent to `actor` rather than to the pool's factory, within the
    /// pool's bound and timeout: a lane's calls that an HTTP worker's own
    /// [`LocalGraphActor`](crate::local::LocalGraphActor) answers.
    pub(crate) async fn call_actor<R: Send + 'static>(
        &self,
        actor: &ActorRef<M>,
        build: impl FnOnce(RpcReplyPort<R>) -> M,
    ) -> Result<R, PoolError> {
        let _admitted =
            Admission::take(&self.in_flight, self.admit).map_err(PoolError::Overloaded)?;
        outcome(
            actor.call(build, Some(self.timeout)).await,
            Some(self.timeout),
        )
    }
}

/// A pool call's answer, or why there is none (`timeout`: the call's).
fn outcome<R, E: std::fmt::Display>(
    called: Result<CallResult<R>, E>,
    timeout: Option<Duration>,
) -> Result<R, PoolError> {
    match called {
        Ok(CallResult::Success(answer)) => Ok(answer),
        // Only a call with a timeout can time out.
        Ok(CallResult::Timeout) => Err(PoolError::Timeout(timeout.unwrap_or_default())),
        Ok(CallResult::SenderError) => Err(PoolError::WorkerLost),
        Err(e) => Err(PoolError::Refused(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admission_holds_a_place_until_it_drops_and_a_full_pool_takes_none() {
        let counter = Arc::new(AtomicUsize::new(0));
        let first = Admission::take(&counter, 2).unwrap();
        let second = Admission::take(&counter, 2).unwrap();
        assert_eq!(Admission::take(&counter, 2).err(), Some(2));
        assert_eq!(
            counter.load(Ordering::Acquire),
            2,
            "a refusal holds no place"
        );
        drop(first);
        drop(second);
        assert_eq!(counter.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_handle_without_a_factory_answers_not_running_and_admits_nothing() {
        let pool = PoolHandle::<()>::new(2, 3, Duration::from_secs(1));
        assert_eq!((pool.least(), pool.size()), (2, 2));
        let answer = pool.call(|_reply: RpcReplyPort<()>| ()).await;
        assert_eq!(answer, Err(PoolError::NotRunning));
        assert_eq!(pool.in_flight(), 0);
        assert!(pool.stats().await.is_none());
    }
}
