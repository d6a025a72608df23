//! A study's runs carried out on a thread of their own and given up on a grace period after a stop is
//! requested: the executor behind `sweep`'s and `screen`'s Ctrl-C. It installs no signal handler and
//! draws nothing: the caller's `done` hears of each finished run.

use crate::Interrupt;
use serverbench_study::{Executor, Stop, StudyError, Work};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs a study's work on a thread of its own until it returns or, once `stop` is requested, for at
/// most `grace` more; then it returns the runs that finished (`None` for the others).
pub struct Graceful {
    /// The stop flag the work sees (set by the caller's signal handler).
    pub stop: Arc<Stop>,
    /// How long a stopped study waits for the runs under way.
    pub grace: Duration,
    /// Called as each run finishes (a progress bar's tick).
    pub done: Arc<dyn Fn() + Send + Sync>,
}

impl Executor for Graceful {
    fn execute<T: Clone + Send + 'static>(
        &self,
        n: usize,
        work: Work<T>,
    ) -> Result<Vec<Option<T>>, StudyError> {
        let finished: Arc<Mutex<Vec<Option<T>>>> = Arc::new(Mutex::new(vec![None; n]));
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, kept, tick) = (self.stop.clone(), finished.clone(), self.done.clone());
        std::thread::Builder::new()
            .name("serverbench-study".into())
            .spawn(move || {
                let done = |i: usize, r: &T| {
                    kept.lock().expect("finished runs")[i] = Some(r.clone());
                    tick();
                };
                let _ = tx.send(work(&stop, &done));
            })
            .map_err(|e| StudyError::Executor(format!("cannot start the study thread: {e}")))?;
        let mut stopped_at: Option<Instant> = None;
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(StudyError::Executor("the study thread stopped".into()))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if self.stop.is_requested() {
                let at = *stopped_at.get_or_insert_with(Instant::now);
                if at.elapsed() >= self.grace {
                    return Ok(finished.lock().expect("finished runs").clone());
                }
            }
        }
    }
}

/// A study's stop request: the flag its runs see, and why the first request came (a signal's name).
#[derive(Clone, Debug, Default)]
pub struct StudyStop {
    stop: Arc<Stop>,
    why: Interrupt,
}

impl StudyStop {
    /// Asks the study to start no more runs; `why` is kept from the first request.
    pub fn request(&self, why: &str) {
        self.why.request(why);
        self.stop.request();
    }

    /// Why the first request came, once one did.
    pub fn why(&self) -> Option<String> {
        self.why.why()
    }

    /// The flag the study's runs see.
    pub fn flag(&self) -> &Stop {
        &self.stop
    }

    /// The study's runs carried out under this request ([`Graceful`]): given up on `grace` after it,
    /// each finished run told to `done`.
    pub fn graceful(&self, grace: Duration, done: Arc<dyn Fn() + Send + Sync>) -> Graceful {
        Graceful {
            stop: self.stop.clone(),
            grace,
            done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    fn graceful(ticks: &Arc<AtomicUsize>) -> Graceful {
        let ticks = ticks.clone();
        Graceful {
            stop: Arc::new(Stop::default()),
            grace: Duration::from_millis(100),
            done: Arc::new(move || {
                ticks.fetch_add(1, Ordering::Relaxed);
            }),
        }
    }

    #[test]
    fn work_that_ends_returns_its_own_results() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let work: Work<u32> = Box::new(|_, done| {
            done(0, &7);
            done(1, &8);
            Ok(vec![Some(7), Some(8)])
        });
        let runs = graceful(&ticks).execute(2, work).unwrap();
        assert_eq!(runs, vec![Some(7), Some(8)]);
        assert_eq!(ticks.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_stopped_study_keeps_the_runs_that_finished_within_the_grace() {
        static RELEASE: AtomicBool = AtomicBool::new(false);
        let ticks = Arc::new(AtomicUsize::new(0));
        let g = graceful(&ticks);
        g.stop.request();
        let work: Work<u32> = Box::new(|_, done| {
            done(0, &7);
            // A run that outlasts the grace: the executor returns without it.
            while !RELEASE.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(vec![Some(7), Some(8), Some(9)])
        });
        let runs = g.execute(3, work).unwrap();
        RELEASE.store(true, Ordering::Relaxed);
        assert_eq!(runs, vec![Some(7), None, None]);
        assert_eq!(ticks.load(Ordering::Relaxed), 1);
    }

    /// A request stops the study's flag and its executor's runs, and keeps the first reason.
    #[test]
    fn a_study_stop_request_raises_the_flag_and_keeps_its_first_reason() {
        let stop = StudyStop::default();
        assert!(stop.why().is_none() && !stop.flag().is_requested());
        let g = stop.graceful(Duration::from_millis(10), Arc::new(|| {}));
        stop.request("SIGTERM");
        stop.request("SIGINT");
        assert_eq!(stop.why().as_deref(), Some("SIGTERM"));
        assert!(stop.flag().is_requested() && g.stop.is_requested());
    }
}
