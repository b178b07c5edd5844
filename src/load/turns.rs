//! [`Turns`]: `--turns-ms`, the mix's routes measured alone but interleaved. Instead of
//! drawing each request's route by weight, every mix client sends one route for its turn
//! (`weight` × the unit), then the next route, in the mix's order, round and round from the
//! start of the run. Each route's throughput is over its own turns only.
//!
//! Why: routes measured alone one after another were measured in different minutes, and this
//! machine's speed moves from one minute to the next (a run's `/livez` has measured anywhere
//! from 50,000 to 65,000 req/s). A ratio of two routes measured in turns a second apart takes
//! the same slow minutes in both, where a ratio of two routes measured a minute apart takes
//! whichever each got.
//!
//! The first fifth of every turn settles and is not measured: the last turn's requests drain,
//! and the capacity controller grows the new route's pools (it grows a pool a tick, 100 ms,
//! after its queue builds). A request sent while its turn settles is not measured, and a
//! response counts towards throughput only when it arrives in its own route's turn, after
//! the settling, within the measured window.

use std::time::Duration;

use super::Route;

/// The share of each turn that settles before it is measured: a fifth.
const SETTLE_DIVISOR: u32 = 5;

#[derive(Debug, Clone)]
pub struct Turns {
    /// (the mix's slot, the turn's length), in the mix's order.
    turns: Vec<(usize, Duration)>,
    /// One round of every turn.
    cycle: Duration,
}

impl Turns {
    /// Turns of `weight` × `unit` each for the routes of `mix`, in its order; `None` for a
    /// mix with no positive weight or a zero unit.
    pub fn new(unit: Duration, mix: &[(Route, u32)]) -> Option<Turns> {
        let turns: Vec<(usize, Duration)> = mix
            .iter()
            .enumerate()
            .filter(|(_, (_, weight))| *weight > 0)
            .map(|(slot, &(_, weight))| (slot, unit * weight))
            .collect();
        let cycle: Duration = turns.iter().map(|(_, d)| *d).sum();
        (!cycle.is_zero()).then_some(Turns { turns, cycle })
    }

    /// The mix's slot whose turn it is at `at` since the start, and whether the turn has
    /// settled by then (is measured).
    pub fn at(&self, at: Duration) -> (usize, bool) {
        let mut into = Duration::from_nanos((at.as_nanos() % self.cycle.as_nanos()) as u64);
        for &(slot, length) in &self.turns {
            if into < length {
                return (slot, into >= length / SETTLE_DIVISOR);
            }
            into -= length;
        }
        unreachable!("the cycle is the sum of the turns")
    }

    /// How much of `from..to` (since the start) falls in `slot`'s turns after they settle:
    /// the time over which that route's throughput is measured.
    pub fn measured(&self, slot: usize, from: Duration, to: Duration) -> Duration {
        let (from, to, cycle) = (from.as_nanos(), to.as_nanos(), self.cycle.as_nanos());
        if to <= from {
            return Duration::ZERO;
        }
        let mut offset = 0u128;
        let mut spans = Vec::new();
        for &(s, length) in &self.turns {
            let length = length.as_nanos();
            if s == slot {
                spans.push((
                    offset + length / u128::from(SETTLE_DIVISOR),
                    offset + length,
                ));
            }
            offset += length;
        }
        let mut total = 0u128;
        for round in from / cycle..=to / cycle {
            for &(start, end) in &spans {
                let (start, end) = (round * cycle + start, round * cycle + end);
                total += end.min(to).saturating_sub(start.max(from));
            }
        }
        Duration::from_nanos(total as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Route, Turns};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn routes_take_turns_by_weight_and_each_turn_settles_for_a_fifth() {
        // Traverse for 200 ms, then chat for 100 ms, round and round.
        let turns = Turns::new(ms(100), &[(Route::Traverse, 2), (Route::Chat, 1)]).unwrap();
        assert_eq!(turns.at(ms(0)), (0, false));
        assert_eq!(turns.at(ms(39)), (0, false));
        assert_eq!(turns.at(ms(40)), (0, true));
        assert_eq!(turns.at(ms(199)), (0, true));
        assert_eq!(turns.at(ms(200)), (1, false));
        assert_eq!(turns.at(ms(219)), (1, false));
        assert_eq!(turns.at(ms(220)), (1, true));
        assert_eq!(turns.at(ms(299)), (1, true));
        assert_eq!(turns.at(ms(300)), (0, false));
        assert_eq!(turns.at(ms(3_000_250)), (1, true));
        // Routes of weight 0 take no turn; slots stay the mix's.
        let turns = Turns::new(ms(10), &[(Route::Livez, 0), (Route::Health, 1)]).unwrap();
        assert_eq!(turns.at(ms(5)), (1, true));
        assert_eq!(turns.at(ms(11)), (1, false));
        assert_eq!(turns.at(ms(12)), (1, true));
        assert!(Turns::new(ms(10), &[(Route::Livez, 0)]).is_none());
        assert!(Turns::new(Duration::ZERO, &[(Route::Livez, 1)]).is_none());
    }

    #[test]
    fn each_route_is_measured_over_its_settled_turns_only() {
        let turns = Turns::new(ms(100), &[(Route::Traverse, 2), (Route::Chat, 1)]).unwrap();
        // Whole rounds: 160 ms of traverse and 80 ms of chat in every 300 ms.
        assert_eq!(turns.measured(0, ms(0), ms(3000)), ms(1600));
        assert_eq!(turns.measured(1, ms(0), ms(3000)), ms(800));
        // Cut turns: from 100 ms into the first round to 250 ms into the second.
        assert_eq!(turns.measured(0, ms(100), ms(550)), ms(100 + 160));
        assert_eq!(turns.measured(1, ms(100), ms(550)), ms(80 + 30));
        assert_eq!(turns.measured(2, ms(0), ms(3000)), Duration::ZERO);
        assert_eq!(turns.measured(0, ms(500), ms(500)), Duration::ZERO);
        // Agrees with `at`, sampled every millisecond.
        for (from, to) in [(0, 3000), (37, 1234), (299, 301), (1000, 1999)] {
            for slot in 0..2 {
                let sampled = (from..to)
                    .filter(|&t| turns.at(ms(t)) == (slot, true))
                    .count();
                assert_eq!(
                    turns.measured(slot, ms(from), ms(to)),
                    ms(sampled as u64),
                    "{slot} {from}..{to}"
                );
            }
        }
    }
}
