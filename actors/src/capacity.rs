//! The [`CapacityController`]: sizes every elastic worker pool (the graph workers, each
//! tool's workers, each provider's workers) to its load, between the pool's bounds. Every
//! tick it reads each factory's queue depth and busy workers: a queue grows the pool by as
//! many workers as requests wait (up to the maximum); a pool whose busy workers stay at half
//! its size or less for [`IDLE_TICKS`] ticks in a row shrinks towards them (down to the
//! minimum). [`Pools`] is the same list of pools as metrics read it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, Message};

use crate::pool::{PoolHandle, PoolStats};

/// How often the controller looks at the pools.
pub const TICK: Duration = Duration::from_millis(100);
/// Quiet ticks in a row before a pool shrinks (2 s).
pub const IDLE_TICKS: u32 = 20;

/// A pool the controller can read and resize, whatever its message type.
pub(crate) trait Resizable: Send + Sync {
    /// The running factory's id (a restarted factory has a new one), or `None` while it
    /// restarts.
    fn id(&self) -> Option<ActorId>;
    fn stats(&self) -> BoxFuture<'_, Option<PoolStats>>;
    /// Workers in the pool, as last recorded.
    fn size(&self) -> usize;
    /// Calls the pool's handle has admitted and not yet answered.
    fn in_flight(&self) -> usize;
    /// Records the pool's size.
    fn set_size(&self, workers: usize);
    /// Grows or shrinks the running factory to `workers`.
    fn resize(&self, workers: usize) -> Result<(), ActorProcessingErr>;
}

impl<M: Message> Resizable for PoolHandle<M> {
    fn id(&self) -> Option<ActorId> {
        self.factory().map(|f| f.get_id())
    }

    fn stats(&self) -> BoxFuture<'_, Option<PoolStats>> {
        Box::pin(PoolHandle::stats(self))
    }

    fn size(&self) -> usize {
        PoolHandle::size(self)
    }

    fn in_flight(&self) -> usize {
        PoolHandle::in_flight(self)
    }

    fn set_size(&self, workers: usize) {
        PoolHandle::set_size(self, workers)
    }

    fn resize(&self, workers: usize) -> Result<(), ActorProcessingErr> {
        if let Some(f) = self.factory() {
            f.adjust_worker_pool(workers)?;
        }
        Ok(())
    }
}

/// One pool under the controller.
pub(crate) struct ElasticPool {
    /// As in metrics and logs: `graph` (and its other lanes `graph:search`,
    /// `graph:documents`), `tool:NAME`, `provider:NAME`.
    pub name: String,
    /// The pool's handle, shared with its callers: the controller records sizes on it.
    pub pool: Box<dyn Resizable>,
    pub min: usize,
    pub max: usize,
}

impl ElasticPool {
    /// `pool`, sized between its least workers and `max`.
    pub(crate) fn new<M: Message>(name: String, pool: &PoolHandle<M>, max: usize) -> Self {
        ElasticPool {
            name,
            min: pool.least(),
            max,
            pool: Box::new(pool.clone()),
        }
    }

    pub(crate) fn is_elastic(&self) -> bool {
        self.max > self.min
    }
}

/// The pools the controller sizes.
pub struct CapacityArguments {
    pub(crate) pools: Arc<Vec<ElasticPool>>,
}

/// What the controller remembers of one pool between ticks.
#[derive(Default, Clone, Copy)]
struct Seen {
    factory: Option<ActorId>,
    idle: u32,
}

/// The pools, and what the controller saw of each at the last tick.
pub struct CapacityState {
    pools: Arc<Vec<ElasticPool>>,
    seen: Vec<Seen>,
}

/// Messages to the controller.
#[derive(Debug)]
pub enum CapacityMessage {
    /// Time to look at every pool (every [`TICK`]).
    Tick,
}

/// The next size of a pool of `size` workers with `busy` busy and `queued` waiting, after
/// `idle` quiet ticks; and the idle count to carry on.
pub fn next_size(
    size: usize,
    busy: usize,
    queued: usize,
    idle: u32,
    min: usize,
    max: usize,
) -> (usize, u32) {
    if queued > 0 {
        return ((size + queued).clamp(min, max), 0);
    }
    if size > min && busy * 2 <= size {
        if idle + 1 >= IDLE_TICKS {
            return ((busy + 1).max(size / 2).clamp(min, max), 0);
        }
        return (size, idle + 1);
    }
    (size, 0)
}

/// Sizes every elastic pool to its load, once a [`TICK`].
pub struct CapacityController;

impl Actor for CapacityController {
    type Msg = CapacityMessage;
    type State = CapacityState;
    type Arguments = CapacityArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: CapacityArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(TICK, || CapacityMessage::Tick);
        Ok(CapacityState {
            seen: vec![Seen::default(); args.pools.len()],
            pools: args.pools,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        CapacityMessage::Tick: CapacityMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let pools = state.pools.clone();
        let elastic: Vec<usize> = (0..pools.len())
            .filter(|&i| pools[i].is_elastic())
            .collect();
        let stats = futures::future::join_all(elastic.iter().map(|&i| pools[i].pool.stats())).await;
        for (&i, stats) in elastic.iter().zip(stats) {
            let pool = &pools[i];
            let seen = &mut state.seen[i];
            let Some(id) = pool.pool.id() else {
                continue;
            };
            // A restarted factory starts again at the minimum.
            if seen.factory != Some(id) {
                *seen = Seen {
                    factory: Some(id),
                    idle: 0,
                };
                pool.pool.set_size(pool.min);
            }
            let Some(stats) = stats else { continue };
            let size = pool.pool.size();
            let (next, idle) = next_size(
                size,
                stats.active_workers,
                stats.queue_depth,
                seen.idle,
                pool.min,
                pool.max,
            );
            seen.idle = idle;
            if next != size {
                tracing::info!(
                    pool = %pool.name,
                    from = size,
                    to = next,
                    busy = stats.active_workers,
                    queued = stats.queue_depth,
                    "pool resized"
                );
                pool.pool.resize(next)?;
                pool.pool.set_size(next);
            }
        }
        Ok(())
    }
}

/// Every worker pool of the runtime (the graph workers, each tool's, each provider's), as
/// metrics read them.
#[derive(Clone)]
pub struct Pools(Arc<Vec<ElasticPool>>);

/// One pool as read now.
#[derive(Debug, Clone)]
pub struct PoolReading {
    /// `graph`, `graph:search`, `graph:documents`, `tool:NAME` or `provider:NAME`.
    pub name: String,
    /// Workers in the pool.
    pub size: usize,
    /// Calls the pool's handle has admitted and not yet answered, running or queued. For
    /// `graph` (the lookup lane) and `graph:documents` this counts the requests the HTTP
    /// workers' own actors answer too (`crate::local`), which the factory's stats do not see.
    pub in_flight: usize,
    /// Busy workers and queued requests; `None` while the pool restarts.
    pub stats: Option<PoolStats>,
}

impl Pools {
    pub(crate) fn new(pools: Arc<Vec<ElasticPool>>) -> Self {
        Pools(pools)
    }

    /// Reads every pool, in a fixed order.
    pub async fn read(&self) -> Vec<PoolReading> {
        let stats = futures::future::join_all(self.0.iter().map(|p| p.pool.stats())).await;
        self.0
            .iter()
            .zip(stats)
            .map(|(p, stats)| PoolReading {
                name: p.name.clone(),
                size: p.pool.size(),
                in_flight: p.pool.in_flight(),
                stats,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{IDLE_TICKS, next_size};

    #[test]
    fn the_pool_grows_with_its_queue_and_shrinks_after_a_quiet_spell() {
        // Requests waiting: grow by as many, up to the maximum.
        assert_eq!(next_size(2, 2, 3, 5, 2, 16), (5, 0));
        assert_eq!(next_size(14, 14, 9, 0, 2, 16), (16, 0));
        // Busy but not queueing: stay.
        assert_eq!(next_size(8, 8, 0, 7, 2, 16), (8, 0));
        // Quiet: count, then shrink to half (or busy + 1), never under the minimum.
        assert_eq!(next_size(8, 1, 0, 0, 2, 16), (8, 1));
        assert_eq!(next_size(8, 1, 0, IDLE_TICKS - 1, 2, 16), (4, 0));
        assert_eq!(next_size(3, 0, 0, IDLE_TICKS - 1, 2, 16), (2, 0));
        assert_eq!(next_size(2, 0, 0, IDLE_TICKS - 1, 2, 16), (2, 0));
        // A fixed pool never moves.
        assert_eq!(next_size(4, 0, 9, 0, 4, 4), (4, 0));
    }
}
