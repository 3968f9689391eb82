//! Deadlines of the upstream exchanges in flight on one router thread, kept by one task that
//! ticks once a second instead of a timer per request: a request puts its deadline in a list
//! (no clock read, nothing in tokio's timer wheel), and the tick wakes those whose deadline
//! has passed. A deadline is never met early, and up to one tick late (later only when the
//! thread is so busy that its ticks run late), as a timeout of a minute can afford.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use slab::Slab;

/// The deadlines of one router thread's requests; clones share them.
#[derive(Clone)]
pub(super) struct Deadlines {
    ticks: Arc<Mutex<Ticks>>,
}

/// The deadline passed before the future finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Elapsed;

struct Ticks {
    /// How long a tick is.
    every: Duration,
    /// Ticks counted since the ticking started. Ticks are at least a tick's length apart
    /// (tokio's `MissedTickBehavior::Delay`), so `n` more counts take at least `n - 1` ticks'
    /// length of time, whenever they start.
    now: u64,
    /// Whether the ticking task was started (on the first deadline, on that request's
    /// runtime: the router thread's own).
    ticking: bool,
    waiting: Slab<Waiting>,
}

/// A request's deadline, as a tick count (passed once the count reaches it), and who to wake
/// then.
struct Waiting {
    at: u64,
    waker: Option<Waker>,
}

impl Deadlines {
    /// Deadlines checked every `every`.
    pub(super) fn new(every: Duration) -> Deadlines {
        Deadlines {
            ticks: Arc::new(Mutex::new(Ticks {
                every,
                now: 0,
                ticking: false,
                waiting: Slab::new(),
            })),
        }
    }

    /// Runs `future` until it finishes or `timeout` passes (measured in whole ticks, rounded up,
    /// and one more: the current tick may be nearly over), whichever comes first. Must be
    /// awaited on a tokio runtime (the first deadline starts the ticking there).
    pub(super) async fn within<F: Future>(
        &self,
        timeout: Duration,
        future: F,
    ) -> Result<F::Output, Elapsed> {
        let mut future = pin!(future);
        let mut slot: Option<Slot<'_>> = None;
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            let Some(slot) = &slot else {
                // A deadline just added has not passed.
                slot = Some(self.add(timeout, cx.waker()));
                return Poll::Pending;
            };
            let mut ticks = self.ticks.lock().expect("deadlines");
            let now = ticks.now;
            let waiting = &mut ticks.waiting[slot.key];
            if waiting.at <= now {
                return Poll::Ready(Err(Elapsed));
            }
            match &waiting.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => waiting.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    /// Puts a deadline `timeout` from now in the list, with who to wake when it passes (and
    /// starts the ticking if it is not).
    fn add(&self, timeout: Duration, waker: &Waker) -> Slot<'_> {
        let mut ticks = self.ticks.lock().expect("deadlines");
        let after = timeout.as_nanos().div_ceil(ticks.every.as_nanos().max(1)) as u64 + 1;
        let at = ticks.now.saturating_add(after);
        let key = ticks.waiting.insert(Waiting {
            at,
            waker: Some(waker.clone()),
        });
        if !ticks.ticking {
            ticks.ticking = true;
            tokio::spawn(tick(Ticking(Arc::downgrade(&self.ticks)), ticks.every));
        }
        Slot { of: self, key }
    }

    /// How many deadlines are in the list.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ticks.lock().expect("deadlines").waiting.len()
    }
}

/// A deadline in the list, taken out when its request is over (finished, timed out or
/// dropped).
struct Slot<'a> {
    of: &'a Deadlines,
    key: usize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.of
            .ticks
            .lock()
            .expect("deadlines")
            .waiting
            .remove(self.key);
    }
}

/// The ticking task's hold on the deadlines: when the task ends or is dropped (its runtime
/// shut down), the next deadline starts another.
struct Ticking(Weak<Mutex<Ticks>>);

impl Drop for Ticking {
    fn drop(&mut self) {
        if let Some(ticks) = self.0.upgrade()
            && let Ok(mut ticks) = ticks.lock()
        {
            ticks.ticking = false;
        }
    }
}

/// Counts the ticks and wakes the requests whose deadline has passed (after letting go of the
/// list: a woken request takes its deadline out of it); ends when the deadlines are dropped.
async fn tick(ticking: Ticking, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: not a tick's length after anything.
    interval.tick().await;
    let mut passed: Vec<Waker> = Vec::new();
    loop {
        interval.tick().await;
        let Some(ticks) = ticking.0.upgrade() else {
            return;
        };
        {
            let mut ticks = ticks.lock().expect("deadlines");
            ticks.now += 1;
            let now = ticks.now;
            for (_, waiting) in ticks.waiting.iter_mut() {
                if waiting.at <= now {
                    passed.extend(waiting.waker.take());
                }
            }
        }
        for waker in passed.drain(..) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_future_that_finishes_in_time_is_answered_and_its_deadline_is_taken_out() {
        let deadlines = Deadlines::new(Duration::from_millis(10));
        let out = deadlines
            .within(Duration::from_millis(200), async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                7
            })
            .await;
        assert_eq!(out, Ok(7));
        // A ready future never goes in the list.
        assert_eq!(deadlines.within(Duration::ZERO, async { 8 }).await, Ok(8));
        assert_eq!(deadlines.len(), 0);
    }

    #[tokio::test]
    async fn a_future_that_does_not_finish_is_stopped_after_its_timeout_not_before() {
        let deadlines = Deadlines::new(Duration::from_millis(10));
        let started = Instant::now();
        let out = deadlines
            .within(Duration::from_millis(50), std::future::pending::<()>())
            .await;
        let took = started.elapsed();
        assert_eq!(out, Err(Elapsed));
        assert!(took >= Duration::from_millis(50), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert_eq!(deadlines.len(), 0);
        // Others in flight are not touched by one that passed; a dropped one leaves the list.
        let slow = deadlines.within(Duration::from_secs(60), std::future::pending::<()>());
        let quick = deadlines.within(Duration::from_millis(30), std::future::pending::<()>());
        let mut slow = Box::pin(slow);
        tokio::select! {
            _ = &mut slow => panic!("the slow one has a minute"),
            out = quick => assert_eq!(out, Err(Elapsed)),
        }
        assert_eq!(deadlines.len(), 1);
        drop(slow);
        assert_eq!(deadlines.len(), 0);
    }

    #[test]
    fn deadlines_outliving_the_runtime_that_ticked_them_tick_on_the_next() {
        let deadlines = Deadlines::new(Duration::from_millis(10));
        let run = |deadlines: &Deadlines| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            // Bounded: with no ticking task, the deadline would never pass.
            runtime.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    deadlines.within(Duration::from_millis(30), std::future::pending::<()>()),
                )
                .await
            })
        };
        assert_eq!(run(&deadlines), Ok(Err(Elapsed)));
        // That runtime is gone, and its ticking task with it: the next one ticks anew.
        assert_eq!(run(&deadlines), Ok(Err(Elapsed)));
    }
}
