//! `workload fit` as one call ([`fit_corpus`]): imported sessions fitted into a spec, aimed at
//! published targets when given, with the KS report, the held-out sessions and every session left out
//! named. Pure: the caller imports the files, and writes and prints the answer.

use crate::aim::{self, AimReport, Targets};
use crate::fit::{self, FitReport};
use crate::{Imported, Session, SessionTree, WorkloadSpec};
use serverbench_config::FieldError;

/// What to fit, and how.
pub struct FitRequest<'a> {
    /// The corpus, as imported.
    pub imported: Imported,
    /// The files it was imported from, as named (for the spec's source line).
    pub files: &'a [String],
    /// Sessions to check the generator against besides the held-out ones (none: no check rows).
    pub check: &'a [SessionTree],
    /// Published targets to aim the fitted spec at, with the targets they refine.
    pub targets: Option<&'a (Targets, Option<Targets>)>,
    /// Sessions the generator draws for the comparison.
    pub generated: u64,
    /// The generator's context limit, tokens.
    pub context_limit: u32,
    /// The spec's name.
    pub name: Option<String>,
    /// What the fit measures beyond the fields every fit writes (each session's own speed, its own
    /// application prefix).
    pub options: crate::fit::FitOptions,
}

/// `workload fit`'s answer.
#[derive(Debug)]
pub struct FittedCorpus {
    /// The spec (aimed, when targets were given).
    pub spec: WorkloadSpec,
    /// Where it came from: the spec file's first line.
    pub source: String,
    /// The fit's report: quantiles and KS distances, fitted, held out, generated and checked.
    pub report: FitReport,
    /// The aim's rounds, when targets were given.
    pub aimed: Option<AimReport>,
    /// The held-out sessions (every [`fit::HOLD_OUT_EVERY`]th), as corpus sessions.
    pub held_out: Vec<Session>,
    /// Sessions left out of the fit: their name (with the log's session id where there is one) and why.
    pub left_out: Vec<(String, String)>,
}

impl FittedCorpus {
    /// The spec file's text: the source as a comment, then the spec as YAML.
    pub fn spec_yaml(&self) -> Result<String, serde_yaml::Error> {
        Ok(format!(
            "# {}\n{}",
            self.source,
            serde_yaml::to_string(&self.spec)?
        ))
    }
}

/// Why a corpus could not be fitted.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// The fitted spec does not generate.
    #[error("the fitted spec: {0}")]
    Fit(FieldError),
    /// The aim at the targets failed.
    #[error("aiming the fitted spec at {targets}: {error}")]
    Aim {
        /// The targets' name.
        targets: String,
        /// Why.
        error: FieldError,
    },
}

/// Fits the request's corpus (without the sessions its targets leave out), then aims the spec at its
/// targets.
pub fn fit_corpus(req: FitRequest<'_>) -> Result<FittedCorpus, FitError> {
    let mut imported = req.imported;
    let note = req
        .targets
        .map(|(t, parent)| t.keep_corpus_sessions(parent.as_ref(), &mut imported));
    let fold = req.options.held_out_fold();
    let source = source_line(&imported, req.files, note, fold);
    let (mut spec, report) = fit::fit_and_report(
        &imported.trees,
        req.check,
        &source,
        req.generated,
        req.context_limit,
        req.options,
    )
    .map_err(FitError::Fit)?;
    let aimed = match req.targets {
        Some((t, parent)) => {
            let rounds = aim::ROUNDS;
            let (s, r) = aim::aim(
                &spec,
                t,
                parent.as_ref(),
                req.context_limit,
                req.generated,
                rounds,
            )
            .map_err(|error| FitError::Aim {
                targets: t.name.clone(),
                error,
            })?;
            spec = s;
            Some(r)
        }
        None => None,
    };
    spec.name = req.name;
    Ok(FittedCorpus {
        spec,
        held_out: held_out(&imported, fold),
        left_out: left_out(&imported, &report),
        source,
        report,
        aimed,
    })
}

/// The spec's source line: how many sessions of which format from which files, and the aim's note.
fn source_line(imported: &Imported, files: &[String], note: Option<String>, fold: usize) -> String {
    let from = if fold == fit::DEFAULT_FOLD {
        String::new()
    } else {
        format!(" from position {fold}")
    };
    let source = format!(
        "workload fit of {} sessions ({}) from {}, every {}th held out{from}",
        imported.trees.len(),
        imported.format.name(),
        files.join(" "),
        fit::HOLD_OUT_EVERY
    );
    match note {
        Some(note) => format!("{source}; {note}"),
        None => source,
    }
}

/// The held-out sessions (the fifth `fold`): a log's own where it was reduced, else each tree's.
fn held_out(imported: &Imported, fold: usize) -> Vec<Session> {
    (0..imported.trees.len())
        .filter(|&i| fit::is_held_out(i, fold))
        .map(|i| match &imported.reduced {
            Some(r) => r.sessions[i].clone(),
            None => Session::from_tree(&imported.trees[i], imported.format.name()),
        })
        .collect()
}

/// Each session the fit left out, named, with why.
fn left_out(imported: &Imported, report: &FitReport) -> Vec<(String, String)> {
    report
        .left_out
        .iter()
        .map(|l| {
            let name = imported
                .reduced
                .as_ref()
                .and_then(|r| r.sessions.get(l.session as usize))
                .map_or_else(
                    || format!("session {}", l.session),
                    |s| format!("session {} ({})", l.session, s.id),
                );
            (name, l.why.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Generator, TraceFormat};

    fn corpus(n: u64) -> Imported {
        let spec = WorkloadSpec::preset("synthetic-v1").unwrap();
        let g = Generator::new(spec, 3, 40_960).unwrap();
        Imported {
            format: TraceFormat::NATIVE,
            trees: (0..n).map(|k| g.generate(k)).collect(),
            reduced: None,
            unread: Vec::new(),
        }
    }

    fn request(imported: Imported, files: &[String]) -> FitRequest<'_> {
        FitRequest {
            imported,
            files,
            check: &[],
            targets: None,
            generated: 100,
            context_limit: 40_960,
            name: Some("fitted".into()),
            options: Default::default(),
        }
    }

    #[test]
    fn a_fit_names_its_source_and_holds_out_every_fifth_session() {
        let files = ["a.jsonl".to_string(), "b.jsonl".to_string()];
        let f = fit_corpus(request(corpus(20), &files)).unwrap();
        assert_eq!(
            f.source,
            format!(
                "workload fit of 20 sessions (native) from a.jsonl b.jsonl, every {}th held out",
                fit::HOLD_OUT_EVERY
            )
        );
        assert_eq!(f.spec.name.as_deref(), Some("fitted"));
        assert!(f.aimed.is_none());
        let held = (0..20)
            .filter(|&i| fit::is_held_out(i, fit::DEFAULT_FOLD))
            .count();
        assert_eq!(f.held_out.len(), held);
        assert_eq!(f.report.held_out_sessions, held);
        assert_eq!(f.left_out.len(), f.report.left_out.len());
        let yaml = f.spec_yaml().unwrap();
        assert!(
            yaml.starts_with(&format!("# {}\nname: fitted\n", f.source)),
            "{yaml}"
        );
    }

    #[test]
    fn the_five_folds_hold_out_every_session_once_and_name_themselves() {
        let files = ["a.jsonl".to_string()];
        let mut seen = Vec::new();
        for fold in 0..fit::HOLD_OUT_EVERY {
            let mut req = request(corpus(23), &files);
            req.options.fold = Some(fold);
            let f = fit_corpus(req).unwrap();
            let ids: Vec<String> = f.held_out.iter().map(|s| s.id.clone()).collect();
            assert_eq!(
                ids.len(),
                (23 - fold).div_ceil(fit::HOLD_OUT_EVERY),
                "fold {fold}"
            );
            assert_eq!(f.report.held_out_sessions, ids.len());
            let fitted = f.report.fitted_sessions + f.report.left_out.len();
            assert_eq!(fitted + ids.len(), 23, "fold {fold}");
            let named = f
                .source
                .ends_with(&format!("held out from position {fold}"));
            assert_eq!(named, fold != fit::DEFAULT_FOLD, "{}", f.source);
            seen.extend(ids);
        }
        let all: Vec<String> = (0..23)
            .map(|i| Session::from_tree(&corpus(23).trees[i], "native").id)
            .collect();
        seen.sort();
        let mut want = all.clone();
        want.sort();
        assert_eq!(seen, want, "each session held out by exactly one fold");
    }
}
