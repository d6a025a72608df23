//! `serverbench freeze` and `serverbench verify`: a submission's decisions written once (deployment,
//! targets, concurrency, window, development seeds, the server, the gates' thresholds, and held-out
//! seeds chosen from them), and the final replay on those held-out seeds against a fresh server, scored
//! only if every behaviour gate passes. Each replay is a `serverbench replay` child process.

use crate::cli::{FreezeArgs, VerifyArgs};
use crate::inputs;
use crate::meta::{deployment_sha256, Meta};
use crate::output::write_json;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serverbench_backends::fidelity::{self, PromptFidelity};
use serverbench_backends::{Api, ClientConfig, HttpClient, Server as ServerKind};
use serverbench_sim::{Deployment, Outcome, Record, Slo, Summary};
use serverbench_workloads::tokens::{prompt_tokens, Vocab};
use serverbench_workloads::Workload;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

/// Thresholds of the behaviour gates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    /// Most requests that may fail at the server, as a fraction.
    pub max_error_rate: f64,
    /// Most requests that may overflow the context, as a fraction.
    pub max_overflow_rate: f64,
    /// Most completed requests whose `usage.prompt_tokens` may differ from the prompt sent.
    pub max_prompt_mismatches: usize,
    /// Most completed requests whose output length may differ from the one asked for.
    pub max_length_mismatches: usize,
    /// Most requests with more streamed chunks than usage tokens, or without usage.
    pub max_stream_usage_mismatches: usize,
    /// The natural-stop probe must end with `finish_reason: "stop"` (the server still honours
    /// end-of-sequence when not told to ignore it).
    pub require_natural_stop: bool,
    /// Every lane must complete at least one request in every held-out run (no session stalled).
    pub require_every_lane_progress: bool,
    /// Generation fidelity against a reference server.
    #[serde(default)]
    pub fidelity: FidelityGates,
}

/// Thresholds of the generation-fidelity gates (`verify --reference`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FidelityGates {
    /// The score counts only with a reference check (`freeze --no-fidelity` turns it off).
    pub required: bool,
    /// Held-out prompts whose greedy continuations are compared.
    pub prompts: usize,
    /// Most tokens of each prompt (the end of a held-out request's prompt).
    pub max_prompt_tokens: u32,
    /// Tokens of each greedy continuation.
    pub continuation_tokens: u32,
    /// Largest mean per-token log-probability regret (nats) a continuation that differs from the
    /// reference's may have under the reference (the benchmark's 4.0).
    pub max_regret: f64,
    /// Least fraction of continuation tokens before the first difference from the reference.
    pub min_greedy_agreement: f64,
    /// Most tokens of each answer of a question set (`verify --answers`).
    pub answer_tokens: u32,
}

impl Default for FidelityGates {
    fn default() -> FidelityGates {
        FidelityGates {
            required: true,
            prompts: 16,
            max_prompt_tokens: 2048,
            continuation_tokens: 32,
            max_regret: 4.0,
            min_greedy_agreement: 0.0,
            answer_tokens: 64,
        }
    }
}

impl Default for Gates {
    fn default() -> Gates {
        Gates {
            max_error_rate: 0.01,
            max_overflow_rate: 0.01,
            max_prompt_mismatches: 0,
            max_length_mismatches: 0,
            max_stream_usage_mismatches: 0,
            require_natural_stop: true,
            require_every_lane_progress: true,
            fidelity: FidelityGates::default(),
        }
    }
}

/// The server a submission is verified against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// Base URL (`verify --url` may point a fresh deployment elsewhere).
    pub url: String,
    /// `--server` kind.
    pub kind: String,
    /// `--api`.
    pub api: String,
    /// Model name sent.
    pub model: String,
}

/// Everything that was decided, as `freeze` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frozen {
    /// The resolved deployment, as `--print-config` prints it.
    pub deployment_yaml: String,
    /// SHA-256 of that YAML.
    pub deployment_sha256: String,
    /// The SLO targets.
    pub slo: Slo,
    /// Declared concurrency (lanes).
    pub concurrency: u32,
    /// Window of each run, seconds.
    pub window_s: f64,
    /// Seeds used during development.
    pub dev_seeds: Vec<u64>,
    /// Seeds of the final replay: disjoint from the development seeds, chosen from the deployment's hash.
    pub held_out_seeds: Vec<u64>,
    /// The server.
    pub server: Server,
    /// Gate thresholds.
    pub gates: Gates,
}

/// The frozen file: the decisions and the SHA-256 that seals them.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FrozenFile {
    frozen: Frozen,
    frozen_sha256: String,
}

/// SHA-256 of the decisions, hex (their JSON, fields in declaration order).
fn seal(f: &Frozen) -> String {
    let text = serde_json::to_string(f).expect("the frozen decisions serialise");
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` seeds from 1,000,000 on, starting at an offset the deployment's hash picks, none a development seed.
fn held_out_seeds(sha256: &str, dev: &[u64], n: usize) -> Vec<u64> {
    let offset = u64::from_str_radix(&sha256[..8], 16).unwrap_or(0) % 1_000_000;
    (1_000_000 + offset..)
        .filter(|s| !dev.contains(s))
        .take(n)
        .collect()
}

/// `serverbench freeze`.
pub fn freeze(a: FreezeArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    let dev_seeds = inputs::seeds(&a.dev_seeds)?;
    if a.held_out == 0 || a.held_out > 64 {
        bail!(
            "--held-out: must be between 1 and 64 seeds, got {}",
            a.held_out
        );
    }
    inputs::checked(serverbench_sim::RunConfig::new(a.concurrency, 0, a.window))?;
    let sha = deployment_sha256(&d);
    let frozen = Frozen {
        deployment_yaml: d.to_yaml(),
        held_out_seeds: held_out_seeds(&sha, &dev_seeds, a.held_out),
        deployment_sha256: sha,
        slo: d.slo,
        concurrency: a.concurrency,
        window_s: a.window,
        dev_seeds,
        server: Server {
            url: a.url.clone(),
            kind: a.server.clone(),
            api: a.api.clone(),
            model: a.model.clone().unwrap_or_else(|| d.model.name.clone()),
        },
        gates: Gates {
            fidelity: fidelity_thresholds(&a)?,
            ..Gates::default()
        },
    };
    let file = FrozenFile {
        frozen_sha256: seal(&frozen),
        frozen,
    };
    let dir = a
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = a
        .out
        .file_name()
        .ok_or_else(|| anyhow!("--out: {} names no file", a.out.display()))?
        .to_string_lossy()
        .into_owned();
    write_json(dir, &name, &Meta::now(Some(&d)), &file)?;
    outln!(
        "froze {} (sha256 {}…) at c = {}, {} s; held-out seeds {:?}; wrote {}",
        d.name,
        &file.frozen.deployment_sha256[..12],
        file.frozen.concurrency,
        file.frozen.window_s,
        file.frozen.held_out_seeds,
        a.out.display()
    )?;
    Ok(())
}

/// A frozen file read and checked: the seal matches, and the deployment still resolves to its hash.
fn read_frozen(path: &Path) -> Result<(Frozen, Deployment)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the frozen file", path.display()))?;
    let file: FrozenFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a file `serverbench freeze` wrote", path.display()))?;
    let f = file.frozen;
    if seal(&f) != file.frozen_sha256 {
        bail!(
            "{}: the frozen decisions changed after `freeze` (their sha256 is {}, the file was sealed with {}): the deployment, targets, concurrency, seeds or gates were edited",
            path.display(),
            seal(&f),
            file.frozen_sha256
        );
    }
    let d = Deployment::from_yaml(
        &format!("{} (deployment_yaml)", path.display()),
        &f.deployment_yaml,
    )?;
    if deployment_sha256(&d) != f.deployment_sha256 || d.slo != f.slo {
        bail!(
            "{}: the frozen deployment no longer resolves to what was frozen (sha256 {} against {}): this build reads it differently",
            path.display(),
            deployment_sha256(&d),
            f.deployment_sha256
        );
    }
    Ok((f, d))
}

/// One held-out run's outcome.
#[derive(Clone, Debug, Serialize)]
struct Run {
    seed: u64,
    summary: Summary,
    client: serde_json::Value,
    natural_stop: Option<String>,
    lanes_without_progress: Vec<u32>,
}

/// One gate's result.
#[derive(Clone, Debug, Serialize)]
struct Gate {
    name: &'static str,
    passed: bool,
    detail: String,
}

/// `serverbench verify`: exits 3 when a gate fails (the score does not count).
pub fn verify(a: VerifyArgs) -> Result<()> {
    inputs::time_scale(a.time_scale)?;
    let (f, d) = read_frozen(&a.frozen)?;
    let url = a.url.clone().unwrap_or_else(|| f.server.url.clone());
    let questions = match &a.answers {
        Some(path) => Some(read_questions(path)?),
        None => None,
    };
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("{}: cannot create directory", a.out.display()))?;
    let deployment_file = a.out.join("deployment.yaml");
    std::fs::write(&deployment_file, &f.deployment_yaml)
        .with_context(|| format!("{}: cannot write", deployment_file.display()))?;
    let mut runs = Vec::new();
    for (i, &seed) in f.held_out_seeds.iter().enumerate() {
        let dir = a.out.join(format!("seed_{seed}"));
        replay_child(&f, &url, &deployment_file, seed, i == 0, a.time_scale, &dir)?;
        runs.push(read_run(&dir, seed, f.concurrency)?);
    }
    let measured = match &a.reference {
        Some(reference) => {
            eprintln!("checking generation against the reference {reference}");
            Some(check_fidelity(
                &f,
                &d,
                &a,
                &url,
                reference,
                questions.as_deref(),
            )?)
        }
        None => None,
    };
    let mut gates = gates(&f.gates, &runs, &f.server.api);
    gates.extend(fidelity_gates(&f.gates.fidelity, &measured));
    let passed = gates.iter().all(|g| g.passed);
    let mean = |x: fn(&Summary) -> f64| {
        runs.iter().map(|r| x(&r.summary)).sum::<f64>() / runs.len() as f64
    };
    let (dd, g, ff) = (
        mean(|s| s.score.d),
        mean(|s| s.score.g),
        mean(|s| s.score.f),
    );
    outln!(
        "serverbench verify — {} at c = {}, {} s, held-out seeds {:?}, against {url}\n",
        d.name,
        f.concurrency,
        f.window_s,
        f.held_out_seeds
    )?;
    outln!("  {:<28} {:<6} detail", "gate", "")?;
    for gate in &gates {
        outln!(
            "  {:<28} {:<6} {}",
            gate.name,
            if gate.passed { "pass" } else { "FAIL" },
            gate.detail
        )?;
    }
    outln!()?;
    for r in &runs {
        outln!(
            "  seed {:>8}: D = {:.3}  G = {:.3}  f = {:.1} %  ({} requests, {} completed)",
            r.seed,
            r.summary.score.d,
            r.summary.score.g,
            100.0 * r.summary.score.f,
            r.summary.requests,
            r.summary.completed
        )?;
    }
    if passed {
        outln!("\n  VERIFIED. Final score over the held-out seeds: D = {dd:.3}, G = {g:.3}, f = {:.1} %", 100.0 * ff)?;
    } else {
        let reasons: Vec<&str> = gates.iter().filter(|g| !g.passed).map(|g| g.name).collect();
        outln!(
            "\n  FAILED: {} (the held-out runs measured D = {dd:.3}, which does not count)",
            reasons.join(", ")
        )?;
    }
    let meta = Meta::now(Some(&d)).with_server(Some(&url), &f.server.model);
    write_json(
        &a.out,
        "verify.json",
        &meta,
        &serde_json::json!({
            "verified": passed,
            "score": passed.then(|| serde_json::json!({"d": dd, "g": g, "f": ff})),
            "measured": {"d": dd, "g": g, "f": ff},
            "gates": gates,
            "fidelity": measured.as_ref().map(|m| match m {
                Ok(r) => serde_json::to_value(r).unwrap_or_default(),
                Err(e) => serde_json::json!({"error": e}),
            }),
            "runs": runs,
            "frozen": f,
        }),
    )?;
    outln!(
        "  wrote {}/verify.json and each run's records",
        a.out.display()
    )?;
    if passed {
        Ok(())
    } else {
        Err(crate::Exit::new(3, "verification failed: the final score does not count").into())
    }
}

fn replay_child(
    f: &Frozen,
    url: &str,
    deployment: &Path,
    seed: u64,
    probe: bool,
    time_scale: f64,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    let mut cmd = Command::new(std::env::current_exe().context("cannot find this executable")?);
    cmd.arg("replay")
        .args([
            "--url",
            url,
            "--server",
            &f.server.kind,
            "--api",
            &f.server.api,
            "--model",
            &f.server.model,
        ])
        .arg("-d")
        .arg(deployment)
        .args([
            "-c",
            &f.concurrency.to_string(),
            "-s",
            &seed.to_string(),
            "-w",
            &f.window_s.to_string(),
        ])
        .args([
            "--start",
            "cold",
            "--prompt-salt",
            &(seed ^ 0x5EA1).to_string(),
        ])
        .args(["--time-scale", &time_scale.to_string()])
        .arg("--out")
        .arg(dir);
    if !probe {
        cmd.arg("--no-probe");
    }
    eprintln!("replaying held-out seed {seed} → {}", dir.display());
    let status = cmd.status().context("cannot start the replay")?;
    if !dir.join("summary.json").exists() {
        bail!("the replay of held-out seed {seed} failed ({status}) before writing its summary");
    }
    Ok(())
}

fn read_run(dir: &Path, seed: u64, concurrency: u32) -> Result<Run> {
    let path = dir.join("summary.json");
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", path.display()))?;
    let summary: Summary = serde_json::from_value(v["summary"].clone())
        .with_context(|| format!("{}: no replay summary", path.display()))?;
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap_or_default();
    let mut progressed = vec![false; concurrency as usize];
    for line in records.lines() {
        let r: Record = serde_json::from_str(line).with_context(|| {
            format!(
                "{}: a malformed record",
                dir.join("records.jsonl").display()
            )
        })?;
        if r.outcome == Outcome::Completed {
            if let Some(p) = progressed.get_mut(r.lane as usize) {
                *p = true;
            }
        }
    }
    Ok(Run {
        seed,
        summary,
        natural_stop: v["natural_stop_probe"]["finish_reason"]
            .as_str()
            .map(str::to_string),
        client: v["client"].clone(),
        lanes_without_progress: (0..concurrency)
            .filter(|&l| !progressed[l as usize])
            .collect(),
    })
}

/// Every gate over every held-out run.
fn gates(t: &Gates, runs: &[Run], api: &str) -> Vec<Gate> {
    let sum = |key: &str| -> usize {
        runs.iter()
            .map(|r| r.client[key].as_u64().unwrap_or(0) as usize)
            .sum()
    };
    let worst = |x: fn(&Summary) -> f64| runs.iter().map(|r| x(&r.summary)).fold(0.0, f64::max);
    let mut g = Vec::new();
    let mut gate = |name, passed, detail: String| {
        g.push(Gate {
            name,
            passed,
            detail,
        })
    };
    let prompts = sum("prompt_mismatches");
    if api == "chat" {
        gate(
            "full prompt",
            true,
            "not checked with --api chat (a chat template adds tokens)".into(),
        );
    } else {
        gate(
            "full prompt",
            prompts <= t.max_prompt_mismatches,
            format!("{prompts} completed requests whose usage.prompt_tokens differs from the prompt sent (at most {})", t.max_prompt_mismatches),
        );
    }
    let lengths = sum("length_mismatches");
    gate(
        "exact output length",
        lengths <= t.max_length_mismatches,
        format!(
            "{lengths} completed requests of another length than asked for (at most {})",
            t.max_length_mismatches
        ),
    );
    let stream =
        sum("usage_missing") + sum("chunk_usage_mismatches") + sum("unrecognised_output_streams");
    gate(
        "stream agrees with usage",
        stream <= t.max_stream_usage_mismatches,
        format!("{stream} requests without usage, with more chunks than usage tokens, or streaming an uncounted field (at most {})", t.max_stream_usage_mismatches),
    );
    let probe = runs.iter().find_map(|r| r.natural_stop.clone());
    gate(
        "natural stop",
        !t.require_natural_stop || probe.as_deref() == Some("stop"),
        format!(
            "the probe without ignore_eos ended with finish_reason {}",
            probe.as_deref().unwrap_or("(none)")
        ),
    );
    let stalled: Vec<String> = runs
        .iter()
        .filter(|r| !r.lanes_without_progress.is_empty())
        .map(|r| format!("seed {}: lanes {:?}", r.seed, r.lanes_without_progress))
        .collect();
    gate(
        "every session progresses",
        !t.require_every_lane_progress || stalled.is_empty(),
        if stalled.is_empty() {
            "every lane completed requests in every run".into()
        } else {
            format!("lanes that completed nothing: {}", stalled.join("; "))
        },
    );
    let errors = worst(|s| s.error_rate);
    gate(
        "error rate",
        errors <= t.max_error_rate,
        format!(
            "worst run {:.2} % of requests failed (at most {:.2} %)",
            100.0 * errors,
            100.0 * t.max_error_rate
        ),
    );
    let overflow = worst(|s| s.overflow_rate);
    gate(
        "context overflow rate",
        overflow <= t.max_overflow_rate,
        format!(
            "worst run {:.2} % overflowed the context (at most {:.2} %)",
            100.0 * overflow,
            100.0 * t.max_overflow_rate
        ),
    );
    g
}

/// The fidelity thresholds `freeze`'s flags ask for.
fn fidelity_thresholds(a: &FreezeArgs) -> Result<FidelityGates> {
    if a.fidelity_prompts == 0 || a.fidelity_prompts > 256 {
        bail!(
            "--fidelity-prompts: must be between 1 and 256, got {}",
            a.fidelity_prompts
        );
    }
    if !(0.0..=1.0).contains(&a.min_greedy_agreement) {
        bail!(
            "--min-greedy-agreement: must be a fraction from 0 to 1, got {}",
            a.min_greedy_agreement
        );
    }
    if !(a.max_regret.is_finite() && a.max_regret > 0.0) {
        bail!(
            "--max-regret: must be a positive number of nats, got {}",
            a.max_regret
        );
    }
    Ok(FidelityGates {
        required: !a.no_fidelity,
        prompts: a.fidelity_prompts,
        min_greedy_agreement: a.min_greedy_agreement,
        max_regret: a.max_regret,
        ..FidelityGates::default()
    })
}

/// One question of a question set: a text prompt and the answer its continuation must contain.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    prompt: String,
    answer: String,
}

/// A question set (JSONL, one `{"prompt": …, "answer": …}` per line; blank lines skipped).
fn read_questions(path: &Path) -> Result<Vec<Question>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the question set", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let q: Question = serde_json::from_str(line).with_context(|| {
            format!(
                "{}:{}: not a question: {{\"prompt\": text, \"answer\": text}} expected",
                path.display(),
                i + 1
            )
        })?;
        if q.answer.trim().is_empty() {
            bail!(
                "{}:{}: answer: empty (every answer must be text the continuation can contain)",
                path.display(),
                i + 1
            );
        }
        out.push(q);
    }
    if out.is_empty() {
        bail!("{}: the question set has no questions", path.display());
    }
    Ok(out)
}

/// What the reference check measured.
#[derive(Clone, Debug, Serialize)]
struct FidelityReport {
    reference: String,
    prompts: Vec<PromptFidelity>,
    answers: Option<AnswerCounts>,
}

/// Questions answered correctly by each server.
#[derive(Clone, Copy, Debug, Serialize)]
struct AnswerCounts {
    questions: usize,
    candidate: usize,
    reference: usize,
}

/// The held-out prompts of the fidelity check: the first held-out seed's sessions, one request of each
/// tree at a varying depth, its last tokens up to the frozen prompt length, salted apart from the
/// replays' prompts.
fn fidelity_prompts(f: &Frozen, d: &Deployment) -> Result<Vec<Vec<u32>>> {
    let seed = f.held_out_seeds[0];
    let source = Workload::default()
        .source(seed, d.context_limit)
        .map_err(|e| anyhow!("workload: {e}"))?;
    let vocab = Vocab::new(100, d.model_spec().vocab)
        .ok_or_else(|| anyhow!("the model's vocabulary has no usable token ids"))?
        .salted(seed ^ 0xF1DE);
    let t = &f.gates.fidelity;
    Ok((0..t.prompts as u64)
        .map(|k| {
            let tree = source.tree(k);
            let requests = tree.requests();
            let r = &requests[k as usize % requests.len()];
            let mut p = prompt_tokens(tree.session_id, r, tree.block_size, vocab);
            // The end of the prompt: its start is the system prompt every session shares.
            p.split_off(p.len().saturating_sub(t.max_prompt_tokens as usize))
        })
        .collect())
}

/// A client for the fidelity requests to one server.
fn fidelity_client(url: &str, server: &str, model: &str) -> Result<HttpClient> {
    Ok(HttpClient::new(ClientConfig {
        base_url: url.to_string(),
        api: Api::CompletionsTokens,
        server: ServerKind::parse(server).ok_or_else(|| {
            anyhow!(
                "server kind `{server}`: expected one of {}",
                ServerKind::names()
            )
        })?,
        model: model.to_string(),
        timeout: std::time::Duration::from_secs(600),
        api_key: std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        affinity_header: None,
        headers: Vec::new(),
        key_over_plain_http: false,
        words: None,
    })?)
}

/// Greedy continuations of the held-out prompts from candidate and reference, teacher forcing where
/// they differ, and the question set when given. A failed request is the check's failure (`Ok(Err)`),
/// not an error of `verify`.
fn check_fidelity(
    f: &Frozen,
    d: &Deployment,
    a: &VerifyArgs,
    url: &str,
    reference: &str,
    questions: Option<&[Question]>,
) -> Result<std::result::Result<FidelityReport, String>> {
    let prompts = fidelity_prompts(f, d)?;
    let cand = fidelity_client(url, &f.server.kind, &f.server.model)?;
    let refr = fidelity_client(
        reference,
        &a.reference_server,
        a.reference_model.as_deref().unwrap_or(&f.server.model),
    )?;
    let t = f.gates.fidelity.clone();
    let rt = crate::real::runtime()?;
    Ok(rt.block_on(async move {
        let mut out = Vec::new();
        for p in &prompts {
            out.push(fidelity::compare(&cand, &refr, p, t.continuation_tokens).await?);
        }
        let answers = match questions {
            None => None,
            Some(qs) => {
                let mut counts = AnswerCounts {
                    questions: qs.len(),
                    candidate: 0,
                    reference: 0,
                };
                for q in qs {
                    let c = fidelity::answer(&cand, &q.prompt, t.answer_tokens)
                        .await
                        .map_err(|e| format!("candidate: {e}"))?;
                    let r = fidelity::answer(&refr, &q.prompt, t.answer_tokens)
                        .await
                        .map_err(|e| format!("reference: {e}"))?;
                    counts.candidate += c.contains(q.answer.trim()) as usize;
                    counts.reference += r.contains(q.answer.trim()) as usize;
                }
                Some(counts)
            }
        };
        Ok(FidelityReport {
            reference: reference.to_string(),
            prompts: out,
            answers,
        })
    }))
}

/// The generation-fidelity gates.
fn fidelity_gates(
    t: &FidelityGates,
    measured: &Option<std::result::Result<FidelityReport, String>>,
) -> Vec<Gate> {
    let one = |passed, detail: String| {
        vec![Gate {
            name: "generation fidelity",
            passed,
            detail,
        }]
    };
    let r = match measured {
        None if !t.required => {
            return one(
                true,
                "not required (frozen with --no-fidelity)".into(),
            )
        }
        None => {
            return one(
                false,
                "no --reference given: the score counts only after the candidate's generation is checked against a reference".into(),
            )
        }
        Some(Err(e)) => return one(false, format!("the check could not run: {e}")),
        Some(Ok(r)) => r,
    };
    let tokens: usize = r.prompts.iter().map(|p| p.continuation_tokens).sum();
    let agreed: usize = r.prompts.iter().map(|p| p.agreed_tokens).sum();
    let agreement = agreed as f64 / tokens.max(1) as f64;
    let identical = r.prompts.iter().filter(|p| !p.suspicious()).count();
    let worst = r
        .prompts
        .iter()
        .filter(|p| p.suspicious())
        .map(|p| p.mean_regret)
        .fold(0.0, f64::max);
    let mut g = vec![
        Gate {
            name: "greedy agreement",
            passed: agreement >= t.min_greedy_agreement,
            detail: format!(
                "{:.1} % of continuation tokens agree before the first difference; {identical} of {} continuations identical (at least {:.1} %)",
                100.0 * agreement,
                r.prompts.len(),
                100.0 * t.min_greedy_agreement
            ),
        },
        Gate {
            name: "teacher-forced regret",
            passed: worst <= t.max_regret,
            detail: format!(
                "{} continuations differ; worst mean per-token regret under the reference {worst:.2} nats (at most {})",
                r.prompts.len() - identical,
                t.max_regret
            ),
        },
    ];
    g.push(match r.answers {
        None => Gate {
            name: "answer tests",
            passed: true,
            detail: "no question set given (--answers)".into(),
        },
        Some(c) => Gate {
            name: "answer tests",
            passed: fidelity::answers_pass(c.candidate, c.reference, c.questions),
            detail: format!(
                "candidate {} of {}, reference {} (at least max(0, {} − {}))",
                c.candidate,
                c.questions,
                c.reference,
                c.reference,
                c.questions / 10
            ),
        },
    });
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Run {
        let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        Run {
            seed: 1,
            summary: serverbench_sim::summarise(&[], &d, 60.0).1,
            client: serde_json::json!({"prompt_mismatches": 0, "length_mismatches": 0}),
            natural_stop: Some("stop".into()),
            lanes_without_progress: vec![],
        }
    }

    /// Each gate passes on a healthy run and fails, alone, on a run broken its way.
    #[test]
    fn every_gate_fails_for_its_own_reason() {
        let t = Gates::default();
        assert!(gates(&t, &[healthy()], "tokens").iter().all(|g| g.passed));
        type Breaks = fn(&mut Run);
        let broken: [(&str, Breaks); 7] = [
            ("full prompt", |r| r.client["prompt_mismatches"] = 3.into()),
            ("exact output length", |r| {
                r.client["length_mismatches"] = 1.into()
            }),
            ("stream agrees with usage", |r| {
                r.client["unrecognised_output_streams"] = 2.into()
            }),
            ("natural stop", |r| r.natural_stop = Some("length".into())),
            ("every session progresses", |r| {
                r.lanes_without_progress = vec![1]
            }),
            ("error rate", |r| r.summary.error_rate = 0.02),
            ("context overflow rate", |r| r.summary.overflow_rate = 0.05),
        ];
        for (name, breaks) in broken {
            let mut run = healthy();
            breaks(&mut run);
            // The probe runs with the first seed only: the broken run comes first.
            let failed: Vec<&str> = gates(&t, &[run, healthy()], "tokens")
                .iter()
                .filter(|g| !g.passed)
                .map(|g| g.name)
                .collect();
            assert_eq!(failed, [name]);
        }
        let mut chat = healthy();
        chat.client["prompt_mismatches"] = 9.into();
        assert!(
            gates(&t, &[chat], "chat").iter().all(|g| g.passed),
            "a chat template adds tokens"
        );
    }

    fn report(agreed: usize, regret: f64, answers: Option<(usize, usize)>) -> FidelityReport {
        let p = PromptFidelity {
            prompt_tokens: 100,
            continuation_tokens: 32,
            agreed_tokens: agreed,
            mean_regret: regret,
            max_regret: regret,
        };
        FidelityReport {
            reference: "r".into(),
            prompts: vec![
                p.clone(),
                PromptFidelity {
                    agreed_tokens: 32,
                    mean_regret: 0.0,
                    ..p
                },
            ],
            answers: answers.map(|(candidate, reference)| AnswerCounts {
                questions: 10,
                candidate,
                reference,
            }),
        }
    }

    fn failed(
        t: &FidelityGates,
        m: Option<std::result::Result<FidelityReport, String>>,
    ) -> Vec<&'static str> {
        fidelity_gates(t, &m)
            .into_iter()
            .filter(|g| !g.passed)
            .map(|g| g.name)
            .collect()
    }

    /// Each fidelity gate passes on a faithful candidate and fails, alone, for its own reason; a
    /// missing reference fails unless the frozen file does not require one.
    #[test]
    fn every_fidelity_gate_fails_for_its_own_reason() {
        let t = FidelityGates {
            min_greedy_agreement: 0.5,
            ..FidelityGates::default()
        };
        let none: Vec<&str> = vec![];
        assert_eq!(failed(&t, Some(Ok(report(32, 0.0, Some((10, 10)))))), none);
        assert_eq!(failed(&t, Some(Ok(report(20, 3.9, Some((9, 10)))))), none);
        assert_eq!(
            failed(&t, Some(Ok(report(20, 4.1, None)))),
            ["teacher-forced regret"]
        );
        // 32 + 0 of 64 tokens agree: exactly the threshold passes, one fewer fails.
        assert_eq!(failed(&t, Some(Ok(report(0, 0.5, None)))), none);
        let strict = FidelityGates {
            min_greedy_agreement: 0.6,
            ..t.clone()
        };
        assert_eq!(
            failed(&strict, Some(Ok(report(0, 0.5, None)))),
            ["greedy agreement"]
        );
        assert_eq!(
            failed(&t, Some(Ok(report(32, 0.0, Some((8, 10)))))),
            ["answer tests"]
        );
        assert_eq!(failed(&t, None), ["generation fidelity"]);
        assert_eq!(
            failed(&t, Some(Err("reference: HTTP 400".into()))),
            ["generation fidelity"]
        );
        let optional = FidelityGates {
            required: false,
            ..t
        };
        assert_eq!(failed(&optional, None), none);
    }

    #[test]
    fn held_out_seeds_are_disjoint_from_development_and_fixed_by_the_hash() {
        let sha = "00000abc".repeat(8);
        let a = held_out_seeds(&sha, &[1_002_748, 3], 3);
        assert_eq!(a, held_out_seeds(&sha, &[1_002_748, 3], 3));
        assert!(a.iter().all(|s| *s >= 1_000_000 && *s != 1_002_748));
        assert_eq!(a.len(), 3);
        assert_ne!(a, held_out_seeds(&"0fff0000".repeat(8), &[], 3));
    }
}
