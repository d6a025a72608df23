//! Who carries out a study's runs: the study hands its runs over as one piece of [`Work`], and an
//! [`Executor`] runs it and hands back each run's result, or `None` for a run that never finished.
//! [`Inline`] runs everything on the calling thread to the end; `serverbench_backends::Graceful` runs
//! the work on a thread of its own and, once stopped by a signal, gives up on the runs under way.
//! Never reads a clock or prints: an executor that waits does so outside this crate.

use crate::{Stop, StudyError};

/// A study's runs: called with the stop flag and `done(i, result)`, which it calls as run `i`
/// finishes; returns every run's result in job order (`None` for a run not started).
pub type Work<T> = Box<
    dyn FnOnce(&Stop, &(dyn Fn(usize, &T) + Sync)) -> Result<Vec<Option<T>>, StudyError> + Send,
>;

/// Carries out a study's [`Work`].
pub trait Executor {
    /// Runs `work` (`n` runs) and returns each run's result in job order; `None` for a run that did
    /// not finish (the study is then partial).
    fn execute<T: Clone + Send + 'static>(
        &self,
        n: usize,
        work: Work<T>,
    ) -> Result<Vec<Option<T>>, StudyError>;
}

/// Runs on the calling thread until every run finished, calling its function after each run.
pub struct Inline<'a>(pub &'a (dyn Fn() + Sync));

impl Executor for Inline<'_> {
    fn execute<T: Clone + Send + 'static>(
        &self,
        _n: usize,
        work: Work<T>,
    ) -> Result<Vec<Option<T>>, StudyError> {
        work(&Stop::default(), &|_, _| (self.0)())
    }
}

/// An executor that finishes only the first run, as one stopped right after it does.
#[cfg(test)]
pub(crate) struct FirstOnly;

#[cfg(test)]
impl Executor for FirstOnly {
    fn execute<T: Clone + Send + 'static>(
        &self,
        n: usize,
        work: Work<T>,
    ) -> Result<Vec<Option<T>>, StudyError> {
        let mut all = work(&Stop::default(), &|_, _| {})?;
        all.truncate(1);
        all.resize(n, None);
        Ok(all)
    }
}
