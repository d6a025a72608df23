//! Precise wake-ups for the real-time driver: one OS thread sleeps until the earliest registered
//! deadline and wakes the task that waits for it. Tokio's timer has 1 ms ticks; this thread wakes within
//! tens of microseconds and never spins. It only wakes tasks, never runs them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;
use tokio::sync::oneshot;

/// A deadline and the task waiting for it; ordered by deadline, then by registration.
struct Wake {
    at: Instant,
    seq: u64,
    waiter: oneshot::Sender<()>,
}

impl PartialEq for Wake {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Wake {}
impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Wake {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The wake-up service; its thread ends when the `Timer` is dropped.
pub struct Timer {
    tx: mpsc::Sender<(Instant, oneshot::Sender<()>)>,
}

impl Timer {
    /// Starts the timer thread.
    pub fn new() -> Timer {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("serverbench-timer".into())
            .spawn(move || run(rx))
            .expect("a thread for the replay's timer");
        Timer { tx }
    }

    /// Returns at `deadline` (at once if it has passed). Dropping the future early is fine: the
    /// thread's wake-up then goes nowhere.
    pub async fn sleep_until(&self, deadline: Instant) {
        if deadline <= Instant::now() {
            return;
        }
        let (waiter, woken) = oneshot::channel();
        if self.tx.send((deadline, waiter)).is_err() {
            // The thread is gone (it cannot be, while `self` lives); tokio's timer still works.
            tokio::time::sleep_until(deadline.into()).await;
            return;
        }
        let _ = woken.await;
    }
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

fn run(rx: mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    let mut heap: BinaryHeap<Reverse<Wake>> = BinaryHeap::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|w| w.0.at <= now) {
            let Reverse(w) = heap.pop().expect("peeked");
            let _ = w.waiter.send(()); // the waiter may have stopped waiting
        }
        let next = match heap.peek() {
            Some(w) => rx.recv_timeout(w.0.at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, waiter)) => {
                heap.push(Reverse(Wake { at, seq, waiter }));
                seq += 1;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn wakes_each_waiter_at_its_deadline_in_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let timer = std::sync::Arc::new(Timer::new());
        let start = Instant::now();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for (i, ms) in [30u64, 10, 20, 0].into_iter().enumerate() {
                let (timer, order) = (timer.clone(), order.clone());
                tasks.push(tokio::spawn(async move {
                    let due = start + Duration::from_millis(ms);
                    timer.sleep_until(due).await;
                    let late = Instant::now().saturating_duration_since(due);
                    order.lock().unwrap().push(i);
                    assert!(Instant::now() >= due, "woke early");
                    late
                }));
            }
            // A waiter that gives up early does not disturb the others.
            let _ = tokio::time::timeout(
                Duration::from_millis(1),
                timer.sleep_until(start + Duration::from_millis(15)),
            )
            .await;
            for t in tasks {
                let late = t.await.unwrap();
                assert!(late < Duration::from_millis(20), "woke {late:?} late");
            }
        });
        assert_eq!(*order.lock().unwrap(), vec![3, 1, 2, 0]);
    }
}
