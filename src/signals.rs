//! SIGINT (Ctrl-C) and SIGTERM (what `timeout`, docker, systemd and SLURM send), for the commands that
//! run long: the first asks the command to stop and write what it has, marked partial; a second, while
//! it is still stopping, ends the process at once with exit code 130. A signal within half a second of
//! the first is the same request again (`timeout` signals the process and then its group), not a second.

use crate::output::replays_bar;
use anyhow::{Context, Result};
use serverbench_backends::{Interrupt, StudyStop};
use serverbench_study::{Executor, StudyError, Work};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exit code of an interrupted command (128 + SIGINT, the shell's convention).
pub const INTERRUPTED: i32 = 130;

/// Calls `first(name)` on the first SIGINT or SIGTERM (`name` is `SIGINT` or `SIGTERM`) and
/// `again(name)` on each later one, from a thread of its own. From this call on, neither signal kills
/// the process by itself.
pub fn on_stop(
    first: impl Fn(&str) + Send + 'static,
    again: impl Fn(&str) + Send + 'static,
) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot listen for SIGINT and SIGTERM")?;
    let seen = AtomicU32::new(0);
    let mut first_at: Option<Instant> = None;
    std::thread::Builder::new()
        .name("serverbench-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let name = if signal == SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                let now = Instant::now();
                if is_echo(first_at, now) {
                    continue;
                }
                match seen.fetch_add(1, Ordering::Relaxed) {
                    0 => {
                        first_at = Some(now);
                        first(name)
                    }
                    _ => again(name),
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// How soon after the first a signal is the same request again, not a second one: GNU `timeout` (and
/// a shell's job control) signal the process and then its process group, so one request arrives twice
/// within microseconds; a person pressing Ctrl-C again takes longer.
const ECHO: Duration = Duration::from_millis(500);

/// Whether a signal at `now` repeats the first one (at `first`) rather than asking again.
fn is_echo(first: Option<Instant>, now: Instant) -> bool {
    first.is_some_and(|f| now.duration_since(f) < ECHO)
}

/// On the first SIGINT or SIGTERM, says `NAME: {doing} (again: quit at once)` and calls
/// `then(NAME)`; a second ends the process at once ([`exit_now`]).
pub fn stop_on_signal(doing: String, then: impl Fn(&str) + Send + 'static) -> Result<()> {
    on_stop(
        move |name| {
            eprintln!("\n{name}: {doing} (again: quit at once)");
            then(name)
        },
        exit_now,
    )
}

/// A stop request that [`stop_on_signal`] makes, saying `doing`.
pub fn interrupt(doing: &str) -> Result<Interrupt> {
    let stop = Interrupt::new();
    let first = stop.clone();
    stop_on_signal(doing.to_string(), move |name| first.request(name))?;
    Ok(stop)
}

/// What a second signal does while a command stops: it ends the process at once.
pub fn exit_now(name: &str) {
    eprintln!("\n{name} again: stopping at once, without writing more");
    std::process::exit(INTERRUPTED);
}

/// How long a stopped study waits for the replays it is running before it writes what finished
/// without them: well inside docker's 10 s between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

/// A study's stop request, made on the first SIGINT or SIGTERM (a second ends the process at once).
pub fn study_stop() -> Result<StudyStop> {
    let stop = StudyStop::default();
    let s = stop.clone();
    let doing = format!(
        "starting no more replays; writing those that finished within {} s, marked partial",
        GRACE.as_secs()
    );
    stop_on_signal(doing, move |name| s.request(name))?;
    Ok(stop)
}

/// A study's runs on a thread of their own under its stop request ([`study_stop`]), with a progress
/// bar, until done or stopped.
pub struct Stoppable<'a>(pub &'a StudyStop);

impl Executor for Stoppable<'_> {
    fn execute<T: Clone + Send + 'static>(
        &self,
        n: usize,
        work: Work<T>,
    ) -> Result<Vec<Option<T>>, StudyError> {
        let bar = replays_bar(n, true);
        let tick = bar.clone();
        let runs = self.0.graceful(GRACE, Arc::new(move || tick.inc(1)));
        let runs = runs.execute(n, work);
        bar.finish_and_clear();
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_right_after_the_first_is_its_echo() {
        let t = Instant::now();
        assert!(!is_echo(None, t));
        assert!(is_echo(Some(t), t + Duration::from_millis(1)));
        assert!(!is_echo(Some(t), t + Duration::from_millis(600)));
    }
}
