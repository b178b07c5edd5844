//! The [`CapacityController`]: sizes the graph worker pool to its load, between configured
//! bounds. Every tick it reads the factory's queue depth and busy workers: a queue grows the
//! pool by as many workers as requests wait (up to the maximum); a pool whose busy workers
//! stay at half its size or less for [`IDLE_TICKS`] ticks in a row shrinks towards them
//! (down to the minimum).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ractor::factory::FactoryRef;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef};

use crate::graph::GraphRequest;
use crate::root::Slot;

/// How often the controller looks at the pool.
pub const TICK: Duration = Duration::from_millis(100);
/// Quiet ticks in a row before the pool shrinks (2 s).
pub const IDLE_TICKS: u32 = 20;

pub struct CapacityArguments {
    pub(crate) factory: Slot<FactoryRef<(), GraphRequest>>,
    pub min: usize,
    pub max: usize,
    /// The pool's current size, shared with [`crate::GraphPool`] for metrics.
    pub(crate) size: Arc<AtomicUsize>,
}

pub struct CapacityState {
    args: CapacityArguments,
    factory: Option<ActorId>,
    idle: u32,
}

#[derive(Debug)]
pub enum CapacityMessage {
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
            args,
            factory: None,
            idle: 0,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        CapacityMessage::Tick: CapacityMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some(factory) = state.args.factory.read().clone() else {
            return Ok(());
        };
        let (min, max) = (state.args.min, state.args.max);
        // A restarted factory starts again at the minimum.
        if state.factory != Some(factory.get_id()) {
            state.factory = Some(factory.get_id());
            state.args.size.store(min, Ordering::Release);
            state.idle = 0;
        }
        let Some(stats) = crate::pool_stats(factory.clone()).await else {
            return Ok(());
        };
        let size = state.args.size.load(Ordering::Acquire);
        let (next, idle) = next_size(
            size,
            stats.active_workers,
            stats.queue_depth,
            state.idle,
            min,
            max,
        );
        state.idle = idle;
        if next != size {
            tracing::info!(
                from = size,
                to = next,
                busy = stats.active_workers,
                queued = stats.queue_depth,
                "graph pool resized"
            );
            factory.adjust_worker_pool(next)?;
            state.args.size.store(next, Ordering::Release);
        }
        Ok(())
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
