//! The discrete-event kernel: integer-nanosecond time and an event queue that pops equal times in insertion order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A point in (simulated or real) time, in nanoseconds since the run started.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Time(pub u64);

impl Time {
    /// Time zero.
    pub const ZERO: Time = Time(0);

    /// From seconds (rounded to the nearest nanosecond).
    pub fn from_secs(s: f64) -> Time {
        Time((s * 1e9).round().max(0.0) as u64)
    }

    /// As seconds.
    pub fn secs(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// This time plus `ns` nanoseconds.
    #[inline]
    pub fn plus(self, ns: u64) -> Time {
        Time(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    #[inline]
    pub fn since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Scheduling an event before the current time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot schedule an event at {at:?}, before the current time {now:?}")]
pub struct PastError {
    /// When the event was asked for.
    pub at: Time,
    /// The queue's current time.
    pub now: Time,
}

struct Entry<E> {
    at: Time,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse so the earliest (time, insertion) pops first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A priority queue of events ordered by `(time, insertion order)`.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: Time,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the last popped event.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedules `event` at `at`; an error if `at` is before the current time.
    pub fn schedule(&mut self, at: Time, event: E) -> Result<(), PastError> {
        if at < self.now {
            return Err(PastError { at, now: self.now });
        }
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
        self.seq += 1;
        Ok(())
    }

    /// The time of the next event, if any.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| e.at)
    }

    /// Pops the next event and advances the clock to it.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let e = self.heap.pop()?;
        self.now = e.at;
        Some((e.at, e.event))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_times_pop_in_insertion_order() {
        let mut q = EventQueue::new();
        for (t, e) in [(5, 'a'), (1, 'b'), (5, 'c'), (1, 'd'), (3, 'e')] {
            q.schedule(Time(t), e).unwrap();
        }
        let order: String = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, "bdeac");
    }

    #[test]
    fn scheduling_into_the_past_is_an_error() {
        let mut q = EventQueue::new();
        q.schedule(Time(10), ()).unwrap();
        q.pop();
        assert_eq!(
            q.schedule(Time(9), ()),
            Err(PastError {
                at: Time(9),
                now: Time(10)
            })
        );
        assert!(
            q.schedule(Time(10), ()).is_ok(),
            "the current time itself is allowed"
        );
    }
}
