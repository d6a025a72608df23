//! The one scaled clock of the real-time parts: wall time since a start, multiplied by a time scale
//! (`serve --time-scale` and `replay --time-scale` compress time for tests), in integer nanoseconds
//! of engine (or server) time.

use std::time::{Duration, Instant};

/// Engine time as a function of the wall clock.
#[derive(Clone, Copy, Debug)]
pub struct ScaledClock {
    start: Instant,
    scale: f64,
}

impl ScaledClock {
    /// A clock that starts now and runs `scale` times faster than the wall clock.
    pub fn new(scale: f64) -> ScaledClock {
        ScaledClock {
            start: Instant::now(),
            scale,
        }
    }

    /// Engine nanoseconds at the wall-clock instant `at`.
    pub fn at(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.start).as_nanos() as f64 * self.scale) as u64
    }

    /// Engine nanoseconds now.
    pub fn now(&self) -> u64 {
        self.at(Instant::now())
    }

    /// The wall-clock instant of engine time `ns`.
    pub fn instant(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos((ns as f64 / self.scale) as u64)
    }

    /// Sleeps the calling thread until engine time `ns` (returns at once if it has passed).
    pub fn sleep_until(&self, ns: u64) {
        let due = self.instant(ns);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}
