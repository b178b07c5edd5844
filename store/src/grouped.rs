//! Statements of one kind that concurrent callers send become one statement (a group
//! commit): the first caller runs the statement for its own item and every item queued
//! while it ran, and the callers that arrive meanwhile queue for the next round.
//!
//! There is no task of its own: a round is run by one of its callers (the leader), which then
//! hands the lead to the first caller still queued. A leader dropped while its round runs
//! (its caller cancelled) leaves the callers of that round to run their items alone, and the
//! lead still passes on, so that no caller waits on a round nobody runs.

use std::future::Future;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::{Result, StoreError};

/// What a queued caller hears: its item's answer, or that it leads the next round.
enum Turn<O> {
    Done(Result<O>),
    Lead,
}

type Queued<I, O> = (I, oneshot::Sender<Turn<O>>);

/// Items of type `I`, answered `O` each, grouped into rounds.
pub(crate) struct Grouped<I, O> {
    state: Mutex<State<I, O>>,
}

struct State<I, O> {
    queue: Vec<Queued<I, O>>,
    leading: bool,
}

impl<I: Clone, O> Default for Grouped<I, O> {
    fn default() -> Self {
        Grouped {
            state: Mutex::new(State {
                queue: Vec::new(),
                leading: false,
            }),
        }
    }
}

impl<I: Clone, O> Grouped<I, O> {
    /// `item`'s answer from `round`, which gets the items of a round (the caller's first)
    /// and answers one `O` per item, in their order.
    pub(crate) async fn run<F, Fut>(&self, item: I, round: F) -> Result<O>
    where
        F: Fn(Vec<I>) -> Fut,
        Fut: Future<Output = Result<Vec<O>>>,
    {
        let waiting = {
            let mut state = self.state.lock();
            if state.leading {
                let (tx, rx) = oneshot::channel();
                state.queue.push((item.clone(), tx));
                Some(rx)
            } else {
                state.leading = true;
                None
            }
        };
        if let Some(rx) = waiting {
            match rx.await {
                Ok(Turn::Done(answer)) => return answer,
                Ok(Turn::Lead) => {}
                // The round that took this item was dropped unfinished: the item alone.
                Err(_) => return one(round(vec![item]).await),
            }
        }
        let _lead = Lead(self);
        let others = std::mem::take(&mut self.state.lock().queue);
        let mut items = Vec::with_capacity(others.len() + 1);
        items.push(item);
        let mut senders = Vec::with_capacity(others.len());
        for (i, tx) in others {
            items.push(i);
            senders.push(tx);
        }
        let count = items.len();
        let answers = match round(items).await {
            Ok(answers) if answers.len() != count => Err(StoreError::Query(format!(
                "a grouped statement answered {} rows for {count} items",
                answers.len()
            ))),
            answers => answers,
        };
        match answers {
            Ok(answers) => {
                let mut answers = answers.into_iter();
                let mine = answers.next().expect("one answer per item");
                for (tx, answer) in senders.into_iter().zip(answers) {
                    let _ = tx.send(Turn::Done(Ok(answer)));
                }
                Ok(mine)
            }
            Err(e) => {
                for tx in senders {
                    let _ = tx.send(Turn::Done(Err(e.clone())));
                }
                Err(e)
            }
        }
    }
}

/// The one answer of a round of one item.
fn one<O>(answers: Result<Vec<O>>) -> Result<O> {
    answers?
        .pop()
        .ok_or_else(|| StoreError::Query("a grouped statement answered no row".into()))
}

/// Held by a round's leader: when it ends (or is dropped), the lead passes to the first
/// caller still waiting, or lapses.
struct Lead<'a, I, O>(&'a Grouped<I, O>);

impl<I, O> Drop for Lead<'_, I, O> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        while !state.queue.is_empty() {
            let (_, tx) = state.queue.remove(0);
            // A caller dropped while queued cannot lead: the next one is asked.
            if tx.send(Turn::Lead).is_ok() {
                return;
            }
        }
        state.leading = false;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Doubles each item, counting rounds and waiting a little in each, so that callers
    /// arriving meanwhile queue.
    async fn doubled(rounds: &AtomicUsize, items: Vec<u32>) -> Result<Vec<u32>> {
        rounds.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(items.into_iter().map(|i| i * 2).collect())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_share_rounds_and_each_gets_its_own_answer() {
        let grouped = Arc::new(Grouped::<u32, u32>::default());
        let rounds = Arc::new(AtomicUsize::new(0));
        let calls: Vec<_> = (0..40u32)
            .map(|i| {
                let (grouped, rounds) = (grouped.clone(), rounds.clone());
                tokio::spawn(async move {
                    grouped
                        .run(i, |items| doubled(&rounds, items))
                        .await
                        .map(|a| (i, a))
                })
            })
            .collect();
        for call in calls {
            let (i, answer) = call.await.unwrap().unwrap();
            assert_eq!(answer, i * 2);
        }
        let rounds = rounds.load(Ordering::SeqCst);
        assert!(rounds < 40, "{rounds} rounds for 40 callers");
        assert!(
            !grouped.state.lock().leading,
            "the lead lapses when nobody waits"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_round_fails_each_of_its_callers() {
        let grouped = Arc::new(Grouped::<u32, u32>::default());
        let calls: Vec<_> = (0..10u32)
            .map(|i| {
                let grouped = grouped.clone();
                tokio::spawn(async move {
                    grouped
                        .run(i, |_| async {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            Err::<Vec<u32>, _>(StoreError::Query("refused".into()))
                        })
                        .await
                })
            })
            .collect();
        for call in calls {
            assert!(matches!(call.await.unwrap(), Err(StoreError::Query(m)) if m == "refused"));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_dropped_mid_round_leaves_no_caller_waiting() {
        let grouped = Arc::new(Grouped::<u32, u32>::default());
        let rounds = Arc::new(AtomicUsize::new(0));
        // The first caller leads a round that never ends, and is dropped.
        let stuck = {
            let grouped = grouped.clone();
            tokio::spawn(async move {
                grouped
                    .run(0, |_| std::future::pending::<Result<Vec<u32>>>())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let calls: Vec<_> = (1..6u32)
            .map(|i| {
                let (grouped, rounds) = (grouped.clone(), rounds.clone());
                tokio::spawn(async move { grouped.run(i, |items| doubled(&rounds, items)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        stuck.abort();
        for (i, call) in (1..6u32).zip(calls) {
            let answer = tokio::time::timeout(Duration::from_secs(5), call)
                .await
                .expect("a queued caller is not left waiting")
                .unwrap()
                .unwrap();
            assert_eq!(answer, i * 2);
        }
    }
}
