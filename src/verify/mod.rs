//! `serverbench freeze` and `serverbench verify`: a submission's decisions written once (deployment,
//! targets, concurrency, window, development seeds, the server, the gates' thresholds, and held-out
//! seeds chosen from them), and the final replay on those held-out seeds against a fresh server, scored
//! only if every behaviour gate passes. Each replay is a `serverbench replay` child process; the
//! generation check against a reference is `fidelity`.

use crate::cli::{FreezeArgs, VerifyArgs};
use crate::inputs;
use crate::meta::{deployment_sha256, Meta};
use crate::output::write_json;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serverbench_sim::{Deployment, Outcome, Record, Slo, Summary};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

mod fidelity;
pub use fidelity::FidelityGates;
use fidelity::{check_fidelity, fidelity_gates, fidelity_thresholds, read_questions};

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
    /// Most requests whose usage count differs from the output chunks streamed, or without usage.
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
    /// The replay protocol of the final runs (absent in files frozen before it was recorded: cold).
    #[serde(default = "cold", skip_serializing_if = "is_cold")]
    pub protocol: String,
    /// Seeds used during development.
    pub dev_seeds: Vec<u64>,
    /// Seeds of the final replay: disjoint from the development seeds, chosen from the deployment's hash.
    pub held_out_seeds: Vec<u64>,
    /// The server.
    pub server: Server,
    /// Gate thresholds.
    pub gates: Gates,
}

fn cold() -> String {
    "cold".into()
}

fn is_cold(p: &str) -> bool {
    p == "cold"
}

/// The frozen file: the decisions, the SHA-256 of their JSON (which finds an accidental edit), and
/// the evaluator's Ed25519 signature of that JSON (which finds any edit: only the private key makes it).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FrozenFile {
    frozen: Frozen,
    frozen_sha256: String,
    /// Hex; absent in an unsigned file (`freeze` without `--key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<String>,
}

/// The decisions' bytes that the hash and the signature cover: their JSON, fields in declaration order.
fn signed_bytes(f: &Frozen) -> Vec<u8> {
    serde_json::to_vec(f).expect("the frozen decisions serialise")
}

/// SHA-256 of the decisions, hex.
fn seal(f: &Frozen) -> String {
    hex(&Sha256::digest(signed_bytes(f)))
}

/// How `verify` treats the frozen file's signature.
enum Trust {
    /// It must match this public key (hex).
    Key(String),
    /// Not checked: a rehearsal, never VERIFIED.
    Unsigned,
}

/// A key argument: a file holding the hex key, or the hex itself.
fn key_text(given: &str, flag: &str) -> Result<String> {
    let path = Path::new(given);
    if path.is_file() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{flag} {}: cannot read", path.display()))?;
        return Ok(text.trim().to_string());
    }
    if given.trim().len() == 64 && given.trim().bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(given.trim().to_ascii_lowercase());
    }
    bail!("{flag} {given}: neither a key file nor 64 hexadecimal digits")
}

/// `serverbench keygen`: writes NAME.key (private, readable by its owner only) and NAME.pub.
pub fn keygen(a: crate::cli::KeygenArgs) -> Result<()> {
    let (private, public) = serverbench_study::seal::new_key_pair()?;
    let with = |ext: &str| {
        let mut p = a.out.clone().into_os_string();
        p.push(ext);
        std::path::PathBuf::from(p)
    };
    let (key_path, pub_path) = (with(".key"), with(".pub"));
    for p in [&key_path, &pub_path] {
        if p.exists() {
            bail!(
                "{}: exists already; a new key pair never replaces one",
                p.display()
            );
        }
    }
    write_new(&key_path, &private, true)?;
    write_new(&pub_path, &public, false)?;
    outln!(
        "wrote {} (private: `freeze --key`; keep it from candidates) and {} (public: `verify --public-key`)\npublic key {public}",
        key_path.display(),
        pub_path.display()
    )?;
    Ok(())
}

/// Writes `text` and a newline to a file that must not exist (`private`: readable by its owner only).
fn write_new(path: &Path, text: &str, private: bool) -> Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = o
        .open(path)
        .with_context(|| format!("{}: cannot create", path.display()))?;
    writeln!(f, "{text}").with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
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
    serverbench_backends::base_url(&a.url)?;
    let private = a
        .key
        .as_ref()
        .map(|k| key_text(&k.to_string_lossy(), "--key"))
        .transpose()?;
    let name = a.protocol.as_deref().unwrap_or("cold");
    let protocol = serverbench_sim::Protocol::parse(name).ok_or_else(|| {
        anyhow!(
            "--protocol: expected one of {}, got {name:?}",
            serverbench_sim::Protocol::NAMES.join(", "),
        )
    })?;
    let sha = deployment_sha256(&d);
    let frozen = Frozen {
        deployment_yaml: d.to_yaml(),
        held_out_seeds: held_out_seeds(&sha, &dev_seeds, a.held_out),
        deployment_sha256: sha,
        slo: d.slo,
        concurrency: a.concurrency,
        window_s: a.window,
        protocol: protocol.name().to_string(),
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
    let signature = private
        .map(|k| serverbench_study::seal::sign(&k, &signed_bytes(&frozen)))
        .transpose()
        .context("--key")?;
    let file = FrozenFile {
        frozen_sha256: seal(&frozen),
        signature,
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
    if file.signature.is_none() {
        outln!("  unsigned (no --key): `verify --unsigned` rehearses it; only a signed file can be VERIFIED")?;
    }
    Ok(())
}

/// A frozen file read and checked: the signature matches the evaluator's public key (unless a
/// rehearsal), the hash matches, the decisions make sense whoever signed them, and the deployment still
/// resolves to its hash.
fn read_frozen(path: &Path, trust: &Trust) -> Result<(Frozen, Deployment)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the frozen file", path.display()))?;
    let file: FrozenFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a file `serverbench freeze` wrote", path.display()))?;
    let f = file.frozen;
    if let Trust::Key(public) = trust {
        let Some(signature) = &file.signature else {
            bail!("{}: unsigned (frozen without --key): it cannot be verified, only rehearsed with --unsigned", path.display());
        };
        serverbench_study::seal::check(public, &signed_bytes(&f), signature)
            .with_context(|| format!("{}: signature", path.display()))?;
    }
    if seal(&f) != file.frozen_sha256 {
        bail!(
            "{}: the frozen decisions changed after `freeze`: the deployment, targets, concurrency, seeds or gates were edited",
            path.display()
        );
    }
    check_decisions(&f).map_err(|e| anyhow!("{}: {e}", path.display()))?;
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

/// What the signature cannot vouch for (the evaluator's own tool could have been misused): held-out
/// seeds present, none a development seed, a window and concurrency a replay can run, a URL a replay
/// takes.
fn check_decisions(f: &Frozen) -> Result<()> {
    if f.held_out_seeds.is_empty() || f.held_out_seeds.len() > 64 {
        bail!(
            "held_out_seeds: {} seeds; a verification replays 1 to 64",
            f.held_out_seeds.len()
        );
    }
    if let Some(s) = f.held_out_seeds.iter().find(|s| f.dev_seeds.contains(s)) {
        bail!("held_out_seeds: seed {s} is also a development seed");
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(s) = f.held_out_seeds.iter().find(|s| !seen.insert(**s)) {
        bail!("held_out_seeds: seed {s} is given twice");
    }
    inputs::checked(serverbench_sim::RunConfig::new(
        f.concurrency,
        0,
        f.window_s,
    ))
    .context("concurrency and window_s")?;
    serverbench_backends::base_url(&f.server.url).context("server.url")?;
    Ok(())
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
    let trust = match &a.public_key {
        Some(k) => Trust::Key(key_text(k, "--public-key")?),
        None => Trust::Unsigned,
    };
    let (f, d) = read_frozen(&a.frozen, &trust)?;
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
        replay_child(&f, &url, &deployment_file, seed, i == 0, &a, &dir)?;
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
    let rehearsal = matches!(trust, Trust::Unsigned);
    if passed && rehearsal {
        outln!("\n  REHEARSED (--unsigned: the file's signature was not checked, so this is not a verification). The held-out runs measured D = {dd:.3}, G = {g:.3}, f = {:.1} %", 100.0 * ff)?;
    } else if passed {
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
            "verified": passed && !rehearsal,
            "signature_checked": !rehearsal,
            "score": (passed && !rehearsal).then(|| serde_json::json!({"d": dd, "g": g, "f": ff})),
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

/// One held-out replay as a `serverbench replay` child process (the first with the natural-stop probe).
fn replay_child(
    f: &Frozen,
    url: &str,
    deployment: &Path,
    seed: u64,
    probe: bool,
    a: &VerifyArgs,
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
            "--protocol",
            &f.protocol,
            "--prompt-salt",
            &(seed ^ 0x5EA1).to_string(),
        ])
        .args(["--time-scale", &a.time_scale.to_string()])
        .arg("--out")
        .arg(dir);
    if !probe {
        cmd.arg("--no-probe");
    }
    if let Some(t) = &a.tokenizer {
        cmd.arg("--tokenizer").arg(t);
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
    // A candidate's usage is not taken on trust here: several tokens in a chunk count against it as
    // a usage below the chunks does (a candidate streams each token; set its engine to).
    let stream = sum("usage_missing")
        + sum("chunk_usage_mismatches")
        + sum("coalesced_streams")
        + sum("unrecognised_output_streams");
    gate(
        "stream agrees with usage",
        stream <= t.max_stream_usage_mismatches,
        format!("{stream} requests without usage, with a usage count other than the output chunks streamed, or streaming an uncounted field (at most {})", t.max_stream_usage_mismatches),
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
    let not_finite: Vec<u64> = runs
        .iter()
        .filter(|r| {
            let s = &r.summary;
            ![
                s.score.d,
                s.score.g,
                s.score.f,
                s.error_rate,
                s.overflow_rate,
            ]
            .iter()
            .all(|x| x.is_finite())
        })
        .map(|r| r.seed)
        .collect();
    gate(
        "finite scores",
        !runs.is_empty() && not_finite.is_empty(),
        if runs.is_empty() {
            "no held-out run was scored".into()
        } else if not_finite.is_empty() {
            format!(
                "D, G, f and the rates of all {} runs are numbers",
                runs.len()
            )
        } else {
            format!("seeds {not_finite:?} scored something that is not a number")
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
        let broken: [(&str, Breaks); 8] = [
            ("full prompt", |r| r.client["prompt_mismatches"] = 3.into()),
            ("finite scores", |r| r.summary.score.d = f64::NAN),
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

    /// Decisions signed with the evaluator's key that still make no verification are refused for what
    /// they are; the same file edited by anyone else is refused for its signature.
    #[test]
    fn a_signature_vouches_for_who_decided_and_the_checks_for_what() {
        let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        let good = Frozen {
            deployment_yaml: d.to_yaml(),
            deployment_sha256: deployment_sha256(&d),
            slo: d.slo,
            concurrency: 2,
            window_s: 60.0,
            protocol: "cold".into(),
            dev_seeds: vec![0, 1, 2],
            held_out_seeds: vec![1_000_007, 1_000_008],
            server: Server {
                url: "http://127.0.0.1:8000".into(),
                kind: "vllm".into(),
                api: "tokens".into(),
                model: "m".into(),
            },
            gates: Gates::default(),
        };
        let (private, public) = serverbench_study::seal::new_key_pair().unwrap();
        let dir = std::env::temp_dir().join(format!("sb-frozen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |f: &Frozen, name: &str, key: &str| {
            let file = FrozenFile {
                frozen: f.clone(),
                frozen_sha256: seal(f),
                signature: Some(serverbench_study::seal::sign(key, &signed_bytes(f)).unwrap()),
            };
            let path = dir.join(name);
            std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
            path
        };
        let trust = Trust::Key(public);
        assert!(read_frozen(&write(&good, "good.json", &private), &trust).is_ok());
        type Bad = (&'static str, fn(&mut Frozen), &'static str);
        let bad: [Bad; 5] = [
            ("empty", |f| f.held_out_seeds.clear(), "0 seeds"),
            (
                "dev",
                |f| f.held_out_seeds[1] = 2,
                "seed 2 is also a development seed",
            ),
            ("twice", |f| f.held_out_seeds[1] = 1_000_007, "given twice"),
            ("url", |f| f.server.url = "not-a-url".into(), "server.url"),
            ("window", |f| f.window_s = -5.0, "concurrency and window_s"),
        ];
        for (name, breaks, why) in bad {
            let mut f = good.clone();
            breaks(&mut f);
            let e = read_frozen(&write(&f, name, &private), &trust).unwrap_err();
            assert!(format!("{e:#}").contains(why), "{name}: {e:#}");
        }
        let (other, _) = serverbench_study::seal::new_key_pair().unwrap();
        let e = read_frozen(&write(&good, "other.json", &other), &trust).unwrap_err();
        assert!(
            format!("{e:#}").contains("signature does not match"),
            "{e:#}"
        );
        // A rehearsal reads it, but the decisions are still checked.
        assert!(read_frozen(&dir.join("other.json"), &Trust::Unsigned).is_ok());
        assert!(read_frozen(&dir.join("empty"), &Trust::Unsigned).is_err());
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
