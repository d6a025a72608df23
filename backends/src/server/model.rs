//! The emulator's language model: a deterministic next-token distribution over the whole context, so
//! that `serve` answers greedy continuations, log-probabilities and echoed prompts the way a served
//! checkpoint does — the same context always gives the same distribution, another checkpoint
//! (`model_seed`) or a context the server altered gives other ones. It never reads weights or text and
//! does no IO; its numbers are for checking a client's arithmetic, not for language.

use serverbench_workloads::hash::mix2;

/// Probability of the most likely next token.
const P_TOP: f64 = 0.6;
/// How many runner-up tokens share [`P_ALT`] each; the rest of the vocabulary shares what is left.
const ALTERNATES: u32 = 4;
const P_ALT: f64 = 0.08;

/// The smallest vocabulary the distribution is defined on.
pub const MIN_VOCAB: u32 = 16;

/// How a server was told to mis-serve its model (to show `verify` failing for the right reason).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// The model computes what it should.
    #[default]
    None,
    /// The model sees only the last N prompt tokens (usage still counts them all).
    TruncatePrompt(u32),
    /// At this fraction of output positions (in millionths) the runner-up token is emitted instead of
    /// the most likely one — numerically different but faithful, as two GPU kernels can be.
    RunnerUp(u32),
    /// The CUDA engine reads a request's cached prefix through a broken block table (every cached
    /// block read as its first): the prefix cache's reuse is corrupted while cold prompts are right.
    CorruptPrefixCache,
}

impl Fault {
    /// Reads `none`, `truncate-prompt:N` or `runner-up:P`.
    pub fn parse(s: &str) -> Result<Fault, String> {
        match s.split_once(':') {
            None if s == "none" => Ok(Fault::None),
            None if s == "corrupt-prefix-cache" => Ok(Fault::CorruptPrefixCache),
            Some(("truncate-prompt", n)) => n
                .parse::<u32>()
                .map(Fault::TruncatePrompt)
                .map_err(|_| format!("truncate-prompt:{n}: N must be a whole number of tokens")),
            Some(("runner-up", p)) => match p.parse::<f64>() {
                Ok(x) if (0.0..=1.0).contains(&x) => Ok(Fault::RunnerUp((x * 1e6).round() as u32)),
                _ => Err(format!("runner-up:{p}: P must be a fraction from 0 to 1")),
            },
            _ => Err(format!(
                "{s}: expected `none`, `truncate-prompt:N` (the model sees only the last N prompt tokens), `runner-up:P` (a fraction P of output tokens is the second most likely) or `corrupt-prefix-cache` (CUDA engine: cached prefixes are read from the wrong blocks)"
            )),
        }
    }

    /// The token emitted after `c`: the most likely one, or the runner-up where this fault says so.
    pub fn choose(self, model: &PseudoModel, c: Context) -> u32 {
        match self {
            Fault::RunnerUp(ppm) if mix2(model.keyed(c), 0xF11F) % 1_000_000 < ppm as u64 => {
                model.top(c, 2)[1].0
            }
            _ => model.greedy(c),
        }
    }

    /// The part of a prompt the model sees.
    pub fn visible(self, ids: &[u32]) -> &[u32] {
        match self {
            Fault::None | Fault::RunnerUp(_) | Fault::CorruptPrefixCache => ids,
            Fault::TruncatePrompt(n) => &ids[ids.len().saturating_sub(n as usize)..],
        }
    }
}

/// What the emulated checkpoint is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generation {
    /// Which checkpoint: two servers with the same seed and vocabulary compute the same model.
    pub model_seed: u64,
    /// A deliberate fault.
    pub fault: Fault,
}

/// The model over a vocabulary.
#[derive(Clone, Copy, Debug)]
pub struct PseudoModel {
    vocab: u32,
    /// The checkpoint's key, mixed into every choice.
    key: u64,
}

/// Where the model is in a sequence: a digest of every token so far — the same running hash whose
/// values at block boundaries are the prompt's block ids ([`super::prompt_blocks`]), so that one pass
/// over a prompt gives both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context(pub(super) u64);

/// The running hash's value before any token.
pub(super) const START: u64 = 0x9E37_79B9;

impl PseudoModel {
    /// The model of `vocab` tokens (at least [`MIN_VOCAB`]) and checkpoint `seed`.
    pub fn new(vocab: u32, seed: u64) -> PseudoModel {
        assert!(
            vocab >= MIN_VOCAB,
            "a vocabulary of at least {MIN_VOCAB} tokens"
        );
        PseudoModel {
            vocab,
            key: mix2(seed, 0x5EED_0FC0_DE00),
        }
    }

    /// The context before any token.
    pub fn start(&self) -> Context {
        Context(START)
    }

    /// The context after `ids`.
    pub fn after(&self, ids: &[u32]) -> Context {
        let mut c = self.start();
        for &t in ids {
            self.push(&mut c, t);
        }
        c
    }

    /// Appends one token.
    pub fn push(&self, c: &mut Context, token: u32) {
        c.0 = mix2(c.0, token as u64);
    }

    /// The context as this checkpoint sees it.
    fn keyed(&self, c: Context) -> u64 {
        mix2(c.0, self.key)
    }

    /// The most likely next token.
    pub fn greedy(&self, c: Context) -> u32 {
        (mix2(self.keyed(c), 0x6EED) % self.vocab as u64) as u32
    }

    /// The runner-up tokens: distinct, none the greedy one.
    fn alternates(&self, c: Context) -> impl Iterator<Item = u32> {
        let g = self.greedy(c) as u64;
        let v = self.vocab as u64;
        let stride = 1 + mix2(self.keyed(c), 0xA17) % ((v - 1) / ALTERNATES as u64);
        (1..=ALTERNATES as u64).map(move |j| ((g + j * stride) % v) as u32)
    }

    /// The most likely next tokens, best first (at most `1 + ALTERNATES`), with their natural-log
    /// probabilities.
    pub fn top(&self, c: Context, k: usize) -> Vec<(u32, f64)> {
        std::iter::once((self.greedy(c), P_TOP.ln()))
            .chain(self.alternates(c).map(|t| (t, P_ALT.ln())))
            .take(k)
            .collect()
    }

    /// Natural-log probability of `token` next.
    pub fn logprob(&self, c: Context, token: u32) -> f64 {
        if token == self.greedy(c) {
            P_TOP.ln()
        } else if self.alternates(c).any(|t| t == token) {
            P_ALT.ln()
        } else {
            let rest = 1.0 - P_TOP - ALTERNATES as f64 * P_ALT;
            (rest / (self.vocab - 1 - ALTERNATES) as f64).ln()
        }
    }
}

/// Text of one token as the emulator writes it.
pub fn token_text(id: u32, as_ids: bool) -> String {
    if as_ids {
        format!("token_id:{id}")
    } else {
        format!(" t{id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The distribution sums to one over the whole vocabulary, its top list agrees with `logprob`, and
    /// the greedy token is the most likely.
    #[test]
    fn the_distribution_is_a_distribution() {
        let m = PseudoModel::new(1000, 7);
        for prefix in [&[][..], &[1, 2, 3], &[999; 40]] {
            let c = m.after(prefix);
            let total: f64 = (0..1000).map(|t| m.logprob(c, t).exp()).sum();
            assert!((total - 1.0).abs() < 1e-9, "{total}");
            let top = m.top(c, 9);
            assert_eq!(top.len(), 5);
            assert_eq!(top[0].0, m.greedy(c));
            for (t, lp) in &top {
                assert_eq!(*lp, m.logprob(c, *t));
            }
            let best = (0..1000).max_by(|&a, &b| m.logprob(c, a).total_cmp(&m.logprob(c, b)));
            assert_eq!(best, Some(m.greedy(c)));
        }
    }

    /// The same context gives the same next token; another checkpoint or an altered context does not
    /// (in almost every case).
    #[test]
    fn another_checkpoint_or_context_changes_the_model() {
        let (a, b) = (PseudoModel::new(50_000, 0), PseudoModel::new(50_000, 1));
        let ids: Vec<u32> = (0..200).collect();
        assert_eq!(a.greedy(a.after(&ids)), a.greedy(a.after(&ids)));
        let differs = (1..100)
            .filter(|&n| a.greedy(a.after(&ids[..n])) != b.greedy(b.after(&ids[..n])))
            .count();
        assert!(differs >= 98, "{differs}");
        let seen = Fault::TruncatePrompt(50).visible(&ids);
        assert_eq!(seen, &ids[150..]);
        assert_ne!(a.after(seen), a.after(&ids));
    }

    #[test]
    fn faults_parse_or_say_what_is_expected() {
        assert_eq!(Fault::parse("none"), Ok(Fault::None));
        assert_eq!(
            Fault::parse("corrupt-prefix-cache"),
            Ok(Fault::CorruptPrefixCache)
        );
        assert_eq!(
            Fault::parse("truncate-prompt:64"),
            Ok(Fault::TruncatePrompt(64))
        );
        assert!(Fault::parse("truncate-prompt:x")
            .unwrap_err()
            .contains("whole number"));
        assert!(Fault::parse("kv").unwrap_err().contains("expected"));
        assert_eq!(Fault::parse("runner-up:0.25"), Ok(Fault::RunnerUp(250_000)));
        assert!(Fault::parse("runner-up:2")
            .unwrap_err()
            .contains("fraction"));
    }

    /// `runner-up:P` changes about a fraction P of the choices, each to the second most likely token.
    #[test]
    fn the_runner_up_fault_changes_the_asked_fraction() {
        let m = PseudoModel::new(50_000, 3);
        let f = Fault::RunnerUp(250_000);
        let changed = (0..4000u32)
            .map(|t| m.after(&[t]))
            .filter(|&c| {
                let id = f.choose(&m, c);
                assert!(id == m.greedy(c) || id == m.top(c, 2)[1].0);
                id != m.greedy(c)
            })
            .count();
        assert!((900..1100).contains(&changed), "{changed}");
    }
}
