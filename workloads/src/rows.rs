//! A spec's sessions as the AgentX protocols read a corpus: generated as the corpus recorded them (in
//! a context as long as its sessions ran), and those that cannot fit the deployment's context left
//! out whole, as a valid AgentX run of a corpus on that server must leave their traces out
//! (`--max-context-length`). It never cuts or compacts a session to make it fit.

use crate::generator::{Generator, TreeSource};
use crate::spec::WorkloadSpec;
use crate::tree::SessionTree;
use serverbench_config::FieldError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The context the corpora's sessions ran in (Claude's 1M-token context: `cc-traces-weka-062126`
/// reconstructs inputs of up to 990,016 tokens): a spec's rows are generated against it.
pub const RECORDED_CONTEXT: u32 = 1_048_576;

/// Most sessions drawn in a row without one that fits: the first row must be found within it (else
/// the spec is refused for this context), and a later row not found within it repeats the rows found.
pub const MAX_DRAWS_PER_ROW: u64 = 10_000;

/// The rows of a spec's corpus that fit a context: row `k` is the `k`-th session of the generator's
/// stream (against [`RECORDED_CONTEXT`]) whose peak request fits. Rows are kept once found (a replay
/// reads a few per lane), so each is generated once.
#[derive(Debug)]
pub struct FittingRows {
    generator: Generator,
    context_limit: u32,
    /// The corpus's first rows as recorded that fit, in order, before the generator's
    /// ([`FittingRows::with_first_rows`]).
    first: Vec<Arc<SessionTree>>,
    /// The generator's rows found so far, and the next generator index to try.
    found: Mutex<(Vec<Arc<SessionTree>>, u64)>,
}

impl FittingRows {
    /// The rows of `spec`'s stream of `seed` that fit `context_limit`; an error naming `context_limit`
    /// when none of the first [`MAX_DRAWS_PER_ROW`] sessions does.
    pub fn new(spec: WorkloadSpec, seed: u64, context_limit: u32) -> Result<Self, FieldError> {
        Self::with_first_rows(spec, seed, context_limit, &[])
    }

    /// The same, with a corpus's first rows as recorded before the generator's: those of `first` that
    /// fit `context_limit` whole are rows 0, 1, … in their order (the rest are left out, as AgentX's
    /// `--max-context-length` leaves them out), and the spec's stream follows, unchanged.
    pub fn with_first_rows(
        spec: WorkloadSpec,
        seed: u64,
        context_limit: u32,
        first: &[Arc<SessionTree>],
    ) -> Result<Self, FieldError> {
        if context_limit <= spec.system_prefix_tokens {
            return Err(none_fit(
                context_limit,
                format!(
                    "every session starts with the spec's {}-token prefix",
                    spec.system_prefix_tokens
                ),
            ));
        }
        let generator = recorded(spec, seed, context_limit)?;
        let rows = FittingRows {
            generator,
            context_limit,
            first: first
                .iter()
                .filter(|t| fits(t, context_limit))
                .cloned()
                .collect(),
            found: Mutex::new((Vec::new(), 0)),
        };
        if rows.generated_row(0).is_none() {
            return Err(none_fit(
                context_limit,
                format!("none of the spec's first {MAX_DRAWS_PER_ROW} sessions does"),
            ));
        }
        Ok(rows)
    }

    /// How many of the first rows given fit the context (rows 0 … n − 1).
    #[cfg(test)]
    fn first_rows(&self) -> usize {
        self.first.len()
    }

    /// Row `k`: a first row, else the generator's row `k` less their number.
    fn row(&self, k: u64) -> Option<Arc<SessionTree>> {
        match self.first.get(k as usize) {
            Some(tree) => Some(tree.clone()),
            None => self.generated_row(k - self.first.len() as u64),
        }
    }

    /// The generator's row `k`, searching on as far as needed; `None` when a search of
    /// [`MAX_DRAWS_PER_ROW`] sessions found none.
    fn generated_row(&self, k: u64) -> Option<Arc<SessionTree>> {
        let mut guard = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let (found, next) = &mut *guard;
        while (found.len() as u64) <= k {
            let start = *next;
            loop {
                if *next - start >= MAX_DRAWS_PER_ROW {
                    return None;
                }
                let tree = self.generator.generate(*next);
                *next += 1;
                if fits(&tree, self.context_limit) {
                    found.push(Arc::new(tree));
                    break;
                }
            }
        }
        Some(found[k as usize].clone())
    }
}

/// The generator of `spec`'s sessions as its corpus recorded them: against [`RECORDED_CONTEXT`], or
/// a longer context.
fn recorded(spec: WorkloadSpec, seed: u64, context_limit: u32) -> Result<Generator, FieldError> {
    Generator::new(spec, seed, context_limit.max(RECORDED_CONTEXT))
}

/// Whether `tree` fits `context_limit` whole (every request's prompt plus output).
pub fn fits(tree: &SessionTree, context_limit: u32) -> bool {
    tree.peak_context() <= context_limit as u64
}

/// How many of the first `sessions` of `spec`'s stream of `seed` (as recorded) fit `context_limit`
/// whole: the share of a corpus an AgentX run on that context keeps.
pub fn fitting_among(
    spec: &WorkloadSpec,
    seed: u64,
    sessions: u64,
    context_limit: u32,
) -> Result<usize, FieldError> {
    let g = recorded(spec.clone(), seed, context_limit)?;
    Ok((0..sessions)
        .filter(|&k| fits(&g.generate(k), context_limit))
        .count())
}

/// The rows of a workload's corpus per context limit, found once and shared by every run that reads
/// them (a sweep's runs read the same rows: finding them is most of a short replay's work where few
/// sessions fit).
#[derive(Clone, Debug, Default)]
pub struct RowsCache {
    found: Arc<Mutex<HashMap<u32, Arc<FittingRows>>>>,
    /// The corpus's first rows as recorded, before the spec's ([`FittingRows::with_first_rows`]).
    first: Arc<Vec<Arc<SessionTree>>>,
}

impl RowsCache {
    /// An empty cache whose rows start with `first`, a corpus's first rows as recorded.
    pub fn with_first_rows(first: Vec<Arc<SessionTree>>) -> RowsCache {
        RowsCache {
            found: Arc::default(),
            first: Arc::new(first),
        }
    }

    /// An empty cache with the same first rows (for another draw of the spec's rows).
    pub fn fresh(&self) -> RowsCache {
        RowsCache {
            found: Arc::default(),
            first: self.first.clone(),
        }
    }

    /// The rows of `spec`'s stream of `seed` that fit `context_limit` (one cache serves one spec and
    /// seed: [`crate::Workload`] keeps one per corpus).
    pub fn rows(
        &self,
        spec: &WorkloadSpec,
        seed: u64,
        context_limit: u32,
    ) -> Result<Arc<FittingRows>, FieldError> {
        let mut map = self.found.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rows) = map.get(&context_limit) {
            return Ok(rows.clone());
        }
        let rows = Arc::new(FittingRows::with_first_rows(
            spec.clone(),
            seed,
            context_limit,
            &self.first,
        )?);
        map.insert(context_limit, rows.clone());
        Ok(rows)
    }
}

/// No session of the spec fits `context_limit` whole, because of `why`.
fn none_fit(context_limit: u32, why: String) -> FieldError {
    FieldError::new(
        "context_limit",
        format!(
            "no session of the spec fits a context of {context_limit} tokens whole (a request's prompt plus output): {why}, so an AgentX run of its corpus on it would leave out every trace"
        ),
    )
}

impl TreeSource for FittingRows {
    fn tree(&self, k: u64) -> Arc<SessionTree> {
        self.row(k).unwrap_or_else(|| {
            // No further row within the search: the generator's rows found repeat (at least one
            // exists).
            let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
            let k = k - self.first.len() as u64;
            found.0[(k % found.0.len() as u64) as usize].clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_sessions_that_fit_whole_in_stream_order() {
        let spec = WorkloadSpec::default();
        let limit = 131_072;
        let rows = FittingRows::new(spec.clone(), 0, limit).unwrap();
        let g = Generator::new(spec, 0, RECORDED_CONTEXT).unwrap();
        let fitting: Vec<u64> = (0..400)
            .filter(|&i| g.generate(i).peak_context() <= limit as u64)
            .take(5)
            .collect();
        assert!(fitting.len() == 5 && fitting[4] > 4, "{fitting:?}");
        let first = fitting[4] + 1;
        assert_eq!(
            fitting_among(&WorkloadSpec::default(), 0, first, limit).unwrap(),
            5
        );
        for (k, &i) in fitting.iter().enumerate().rev() {
            assert_eq!(*rows.tree(k as u64), g.generate(i));
        }
        // A context every session fits leaves the stream as it is.
        let all = FittingRows::new(WorkloadSpec::default(), 0, RECORDED_CONTEXT).unwrap();
        for k in 0..5 {
            assert_eq!(*all.tree(k), g.generate(k));
        }
    }

    #[test]
    fn first_rows_that_fit_come_before_the_specs_unchanged_stream() {
        let spec = WorkloadSpec::default();
        let limit = 131_072;
        let other = Generator::new(spec.clone(), 7, RECORDED_CONTEXT).unwrap();
        let (short, long): (Vec<_>, Vec<_>) = (0..200)
            .map(|i| Arc::new(other.generate(i)))
            .partition(|t| t.peak_context() <= limit as u64);
        let first = vec![
            long[0].clone(),
            short[0].clone(),
            long[1].clone(),
            short[1].clone(),
        ];
        let plain = FittingRows::new(spec.clone(), 0, limit).unwrap();
        let rows = FittingRows::with_first_rows(spec.clone(), 0, limit, &first).unwrap();
        assert_eq!(rows.first_rows(), 2);
        assert_eq!(rows.tree(0), short[0]);
        assert_eq!(rows.tree(1), short[1]);
        for k in 0..3 {
            assert_eq!(rows.tree(k + 2), plain.tree(k));
        }
        // A cache keeps its first rows for another draw of the spec's rows, and for every context.
        let cache = RowsCache::with_first_rows(first.clone());
        let wide = cache.fresh().rows(&spec, 3, RECORDED_CONTEXT).unwrap();
        assert_eq!(wide.first_rows(), 4);
        assert_eq!(wide.tree(2), long[1]);
        let drawn = Generator::new(spec, 3, RECORDED_CONTEXT).unwrap();
        assert_eq!(*wide.tree(4), drawn.generate(0));
    }

    #[test]
    fn a_context_no_session_fits_is_refused_by_name() {
        let e = FittingRows::new(WorkloadSpec::default(), 0, 12_000)
            .err()
            .unwrap();
        assert_eq!(e.field, "context_limit");
        assert!(e.reason.contains("fits a context of 12000 tokens"), "{e}");
        assert!(e.reason.contains("15168-token prefix"), "{e}");
        // Past the prefix, but shorter than any session of a spec whose first prompts are all long.
        let spec = WorkloadSpec {
            session_shapes: Some(vec![[200_000.0, 3.0, 0.0]]),
            resumed_share: None,
            session_think_speeds: None,
            session_app_prefixes: None,
            ..WorkloadSpec::default()
        };
        let e = FittingRows::new(spec, 0, 100_000).err().unwrap();
        assert!(e.reason.contains("first 10000 sessions"), "{e}");
    }
}
