//! `freeze` and `verify`: a submission's decisions written once (deployment, targets, concurrency,
//! window, development seeds, the server, the gates' thresholds, and held-out seeds chosen from them)
//! and sealed, and the final replay on those held-out seeds against a fresh server, scored only if every
//! behaviour gate passes (`gates`); the generation check against a reference is `fidelity`. It reads
//! and writes the frozen file and the runs' files; it never starts a replay itself (the caller does,
//! one held-out seed at a time) and never prints.

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serverbench_sim::{Deployment, Outcome, Record, RunConfig, Slo, Summary};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

mod fidelity;
mod gates;
use fidelity::{check_fidelity, fidelity_thresholds, read_questions, Servers, Thresholds};
pub use fidelity::{AnswerCounts, FidelityGates, FidelityReport};
use gates::{fidelity_gates, gates};
pub use gates::{Gate, Gates, Run};

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

/// A frozen file's decisions for tests: `slo` at c = 2 for 60 s, cold, development seed 0, these
/// held-out seeds, a vLLM server at `http://h:1` asked for `m` by chat, the default gates.
#[cfg(test)]
pub(crate) fn test_frozen(slo: Slo, held_out_seeds: Vec<u64>) -> Frozen {
    Frozen {
        deployment_yaml: String::new(),
        deployment_sha256: String::new(),
        slo,
        concurrency: 2,
        window_s: 60.0,
        protocol: "cold".into(),
        dev_seeds: vec![0],
        held_out_seeds,
        server: Server {
            url: "http://h:1".into(),
            kind: "vllm".into(),
            api: "chat".into(),
            model: "m".into(),
        },
        gates: Gates::default(),
    }
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
pub struct FrozenFile {
    /// The decisions.
    pub frozen: Frozen,
    /// SHA-256 of the decisions' JSON, hex.
    pub frozen_sha256: String,
    /// Hex; absent in an unsigned file (`freeze` without `--key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
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
pub enum Trust {
    /// It must match this public key (hex).
    Key(String),
    /// Not checked: a rehearsal, never VERIFIED.
    Unsigned,
}

/// A key argument: a file holding the hex key, or the hex itself (`flag` names it in errors).
pub fn key_text(given: &str, flag: &str) -> Result<String> {
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

/// A new key pair written beside `out` (a path without the extension): `out.key` (private, readable
/// by its owner only) and `out.pub`, neither of which may exist yet. Returns their paths and the
/// public key.
pub fn keygen(out: &Path) -> Result<(PathBuf, PathBuf, String)> {
    let (private, public) = serverbench_study::seal::new_key_pair()?;
    let with = |ext: &str| {
        let mut p = out.to_path_buf().into_os_string();
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
    Ok((key_path, pub_path, public))
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

/// What `freeze` is told, beside the deployment and the development seeds.
#[derive(Clone, Debug)]
pub struct FreezeOptions {
    /// Seeds used during development; the held-out seeds avoid them.
    pub dev_seeds: Vec<u64>,
    /// Held-out seeds the final replay runs (1 to 64).
    pub held_out: usize,
    /// Declared concurrency (lanes).
    pub concurrency: u32,
    /// Window of each final run, seconds.
    pub window: f64,
    /// The final runs' protocol (`None`: cold).
    pub protocol: Option<String>,
    /// The server's base URL.
    pub url: String,
    /// The server kind.
    pub server: String,
    /// Endpoint and prompt form.
    pub api: String,
    /// Model name to send (`None`: the deployment's model).
    pub model: Option<String>,
    /// The evaluator's private key: a key file or its hex (`None`: unsigned).
    pub key: Option<PathBuf>,
    /// The score counts without a generation check against a reference.
    pub no_fidelity: bool,
    /// Held-out prompts of the generation check.
    pub fidelity_prompts: usize,
    /// Least fraction of continuation tokens that agree with the reference's.
    pub min_greedy_agreement: f64,
    /// Largest mean per-token regret (nats) of a continuation that differs.
    pub max_regret: f64,
}

/// `serverbench freeze`: the decisions about `d`, checked, sealed and (with a key) signed.
pub fn freeze(d: &Deployment, o: &FreezeOptions) -> Result<FrozenFile> {
    if o.held_out == 0 || o.held_out > 64 {
        bail!(
            "--held-out: must be between 1 and 64 seeds, got {}",
            o.held_out
        );
    }
    checked(RunConfig::new(o.concurrency, 0, o.window))?;
    crate::base_url(&o.url)?;
    let private = o
        .key
        .as_ref()
        .map(|k| key_text(&k.to_string_lossy(), "--key"))
        .transpose()?;
    let name = o.protocol.as_deref().unwrap_or("cold");
    let protocol = serverbench_sim::Protocol::parse(name).ok_or_else(|| {
        anyhow!(
            "--protocol: expected one of {}, got {name:?}",
            serverbench_sim::Protocol::NAMES.join(", "),
        )
    })?;
    let sha = deployment_sha256(d);
    let frozen = Frozen {
        deployment_yaml: d.to_yaml(),
        held_out_seeds: held_out_seeds(&sha, &o.dev_seeds, o.held_out),
        deployment_sha256: sha,
        slo: d.slo,
        concurrency: o.concurrency,
        window_s: o.window,
        protocol: protocol.name().to_string(),
        dev_seeds: o.dev_seeds.clone(),
        server: Server {
            url: o.url.clone(),
            kind: o.server.clone(),
            api: o.api.clone(),
            model: o.model.clone().unwrap_or_else(|| d.model.name.clone()),
        },
        gates: Gates {
            fidelity: fidelity_thresholds(&Thresholds {
                no_fidelity: o.no_fidelity,
                fidelity_prompts: o.fidelity_prompts,
                min_greedy_agreement: o.min_greedy_agreement,
                max_regret: o.max_regret,
            })?,
            ..Gates::default()
        },
    };
    let signature = private
        .map(|k| serverbench_study::seal::sign(&k, &signed_bytes(&frozen)))
        .transpose()
        .context("--key")?;
    Ok(FrozenFile {
        frozen_sha256: seal(&frozen),
        signature,
        frozen,
    })
}

/// `cfg` if its options are in range, else an error naming the flag.
fn checked(cfg: RunConfig) -> Result<RunConfig> {
    cfg.check()
        .map_err(|e| anyhow!("--{}: {}", e.field.replace('_', "-"), e.reason))?;
    Ok(cfg)
}

/// SHA-256 of a deployment's resolved YAML, hex: equal hashes, equal deployments.
pub fn deployment_sha256(d: &Deployment) -> String {
    hex(&Sha256::digest(d.to_yaml().as_bytes()))
}

/// rehearsal), the hash matches, the decisions make sense whoever signed them, and the deployment still
/// resolves to its hash.
pub fn read_frozen(path: &Path, trust: &Trust) -> Result<(Frozen, Deployment)> {
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
    checked(RunConfig::new(f.concurrency, 0, f.window_s)).context("concurrency and window_s")?;
    crate::base_url(&f.server.url).context("server.url")?;
    Ok(())
}

/// What `verify` is told.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The frozen file.
    pub frozen: PathBuf,
    /// The evaluator's public key (a key file or its hex); `None`: a rehearsal.
    pub public_key: Option<String>,
    /// The fresh deployment's URL, when it is not the frozen one.
    pub url: Option<String>,
    /// Where `deployment.yaml` and each held-out run go.
    pub out: PathBuf,
    /// A reference server of the same checkpoint to check generation against.
    pub reference: Option<String>,
    /// The reference's model name (`None`: the frozen one).
    pub reference_model: Option<String>,
    /// The reference's server kind.
    pub reference_server: String,
    /// A question set both servers answer.
    pub answers: Option<PathBuf>,
}

/// One held-out replay the caller runs: against `url`, with the frozen decisions and the deployment
/// in `deployment`, its summary and records written to `dir`.
#[derive(Clone, Debug)]
pub struct HeldOutReplay<'a> {
    /// The frozen decisions.
    pub frozen: &'a Frozen,
    /// The server's URL.
    pub url: &'a str,
    /// The frozen deployment's YAML file.
    pub deployment: &'a Path,
    /// The held-out seed.
    pub seed: u64,
    /// Whether this replay runs the natural-stop probe (the first one only).
    pub probe: bool,
    /// Where the replay writes `summary.json` and `records.jsonl`.
    pub dir: &'a Path,
}

impl HeldOutReplay<'_> {
    /// The prompt salt of this seed's replay (`replay --prompt-salt`): the server may live across the
    /// held-out runs, and no run may be served from another's cache.
    pub fn prompt_salt(&self) -> u64 {
        self.seed ^ 0x5EA1
    }
}

/// Everything `verify` found: the decisions, the runs, the gates and the measured score.
#[derive(Clone, Debug)]
pub struct Verification {
    /// The frozen decisions.
    pub frozen: Frozen,
    /// Their deployment.
    pub deployment: Deployment,
    /// The server the runs went to.
    pub url: String,
    /// The held-out runs, in seed order.
    pub runs: Vec<Run>,
    /// The generation check, when a reference was given (`Err`: it could not run).
    pub fidelity: Option<std::result::Result<FidelityReport, String>>,
    /// Every gate.
    pub gates: Vec<Gate>,
    /// Whether every gate passed.
    pub passed: bool,
    /// The signature was not checked (`--unsigned`): never VERIFIED.
    pub rehearsal: bool,
    /// Mean D, G and f over the held-out runs.
    pub measured: (f64, f64, f64),
}

impl Verification {
    /// The frozen file was signed, and every gate passed: the score counts.
    pub fn verified(&self) -> bool {
        self.passed && !self.rehearsal
    }

    /// What `verify.json` holds (without its metadata).
    pub fn to_json(&self) -> serde_json::Value {
        let (dd, g, ff) = self.measured;
        serde_json::json!({
            "verified": self.verified(),
            "signature_checked": !self.rehearsal,
            "score": self.verified().then(|| serde_json::json!({"d": dd, "g": g, "f": ff})),
            "measured": {"d": dd, "g": g, "f": ff},
            "gates": self.gates,
            "fidelity": self.fidelity.as_ref().map(|m| match m {
                Ok(r) => serde_json::to_value(r).unwrap_or_default(),
                Err(e) => serde_json::json!({"error": e}),
            }),
            "runs": self.runs,
            "frozen": self.frozen,
        })
    }
}

/// `serverbench verify`: reads and checks the frozen file, writes its deployment to `out`, has
/// `replay` run each held-out seed (as a `serverbench replay` would), checks generation against the
/// reference, and scores everything through the gates. `note` hears what is being done.
pub fn verify(
    o: &VerifyOptions,
    replay: &mut dyn FnMut(&HeldOutReplay<'_>) -> Result<()>,
    note: &dyn Fn(&str),
) -> Result<Verification> {
    let trust = match &o.public_key {
        Some(k) => Trust::Key(key_text(k, "--public-key")?),
        None => Trust::Unsigned,
    };
    let (f, d) = read_frozen(&o.frozen, &trust)?;
    let protocol = serverbench_sim::Protocol::parse(&f.protocol).ok_or_else(|| {
        anyhow!(
            "frozen protocol {:?}: not one serverbench knows",
            f.protocol
        )
    })?;
    let url = o.url.clone().unwrap_or_else(|| f.server.url.clone());
    let questions = match &o.answers {
        Some(path) => Some(read_questions(path)?),
        None => None,
    };
    std::fs::create_dir_all(&o.out)
        .with_context(|| format!("{}: cannot create directory", o.out.display()))?;
    let deployment_file = o.out.join("deployment.yaml");
    std::fs::write(&deployment_file, &f.deployment_yaml)
        .with_context(|| format!("{}: cannot write", deployment_file.display()))?;
    let mut runs = Vec::new();
    for (i, &seed) in f.held_out_seeds.iter().enumerate() {
        let dir = o.out.join(format!("seed_{seed}"));
        replay(&HeldOutReplay {
            frozen: &f,
            url: &url,
            deployment: &deployment_file,
            seed,
            probe: i == 0,
            dir: &dir,
        })?;
        let mut run = read_run(&dir, seed, f.concurrency)?;
        let moved = simulated_progress(&f, &d, protocol, seed)?;
        run.lanes_without_progress
            .retain(|&l| moved.get(l as usize).copied().unwrap_or(true));
        runs.push(run);
    }
    let fidelity = match &o.reference {
        Some(reference) => {
            note(&format!(
                "checking generation against the reference {reference}"
            ));
            let servers = Servers {
                candidate: (&url, &f.server.kind, &f.server.model),
                reference: (
                    reference,
                    &o.reference_server,
                    o.reference_model.as_deref().unwrap_or(&f.server.model),
                ),
            };
            Some(check_fidelity(
                f.held_out_seeds[0],
                &f.gates.fidelity,
                &d,
                &servers,
                questions.as_deref(),
            )?)
        }
        None => None,
    };
    // The AgentX protocols send chat completions whatever the frozen `--api` (as AgentX does).
    let api = match protocol.is_agentx() {
        true => "chat",
        false => f.server.api.as_str(),
    };
    let mut gates = gates(&f.gates, &runs, api);
    gates.extend(fidelity_gates(&f.gates.fidelity, &fidelity));
    let passed = gates.iter().all(|g| g.passed);
    let mean = |x: fn(&Summary) -> f64| {
        runs.iter().map(|r| x(&r.summary)).sum::<f64>() / runs.len() as f64
    };
    let measured = (
        mean(|s| s.score.d),
        mean(|s| s.score.g),
        mean(|s| s.score.f),
    );
    Ok(Verification {
        frozen: f,
        deployment: d,
        url,
        runs,
        fidelity,
        gates,
        passed,
        rehearsal: matches!(trust, Trust::Unsigned),
        measured,
    })
}

/// Per lane, whether the frozen deployment's simulated server completes a request on it in the
/// held-out run of `seed` (the same workload, protocol, concurrency and window the replay runs): a
/// lane it leaves without progress (under the AgentX protocols a lane can start after a short window,
/// or send one request longer than it) is not held against the server under test.
fn simulated_progress(
    f: &Frozen,
    d: &Deployment,
    protocol: serverbench_sim::Protocol,
    seed: u64,
) -> Result<Vec<bool>> {
    let mut cfg = RunConfig::new(f.concurrency, seed, f.window_s);
    cfg.protocol = protocol;
    let workload = serverbench_workloads::Workload::builtin(d.workload.as_deref());
    let out = serverbench_study::Study::new(d.clone(), workload, cfg).run(&cfg)?;
    Ok(progressed(&out.records, f.concurrency))
}

/// Per lane, whether one of `records` completed on it.
fn progressed<'a>(records: impl IntoIterator<Item = &'a Record>, concurrency: u32) -> Vec<bool> {
    let mut moved = vec![false; concurrency as usize];
    for r in records
        .into_iter()
        .filter(|r| r.outcome == Outcome::Completed)
    {
        if let Some(m) = moved.get_mut(r.lane as usize) {
            *m = true;
        }
    }
    moved
}

/// A held-out run as its replay wrote it in `dir` (`summary.json`, `records.jsonl`).
pub fn read_run(dir: &Path, seed: u64, concurrency: u32) -> Result<Run> {
    let path = dir.join("summary.json");
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", path.display()))?;
    let summary: Summary = serde_json::from_value(v["summary"].clone())
        .with_context(|| format!("{}: no replay summary", path.display()))?;
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap_or_default();
    let records = records
        .lines()
        .map(|line| {
            serde_json::from_str::<Record>(line).with_context(|| {
                format!(
                    "{}: a malformed record",
                    dir.join("records.jsonl").display()
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let progressed = progressed(&records, concurrency);
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn each_held_out_seed_salts_its_prompts_apart() {
        let frozen = Frozen {
            deployment_yaml: String::new(),
            deployment_sha256: String::new(),
            slo: Deployment::preset("qwen3-8b-1xh200").unwrap().slo,
            concurrency: 1,
            window_s: 60.0,
            protocol: "cold".into(),
            dev_seeds: Vec::new(),
            held_out_seeds: vec![1_000_007],
            server: Server {
                url: "http://h:1".into(),
                kind: "vllm".into(),
                api: "tokens".into(),
                model: "m".into(),
            },
            gates: Gates::default(),
        };
        let replay = |seed| HeldOutReplay {
            frozen: &frozen,
            url: "http://h:1",
            deployment: Path::new("d.yaml"),
            seed,
            probe: false,
            dir: Path::new("."),
        };
        assert_eq!(replay(1_000_007).prompt_salt(), 1_000_007 ^ 0x5EA1);
        assert_ne!(replay(1).prompt_salt(), replay(2).prompt_salt());
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
