//! `serverbench freeze`, `keygen` and `verify`: their flags handed to `serverbench_backends::verify`,
//! each held-out replay as a `serverbench replay` child process (`serverbench_backends::child`), and the
//! results printed and written.
//! It decides no gate and computes no score.

use crate::cli::{FreezeArgs, KeygenArgs, VerifyArgs};
use crate::inputs;

use crate::output::{write_json, write_path};
use anyhow::{bail, Result};
use serverbench_backends::child::{self, HeldOutFlags};
use serverbench_backends::report::{frozen_text, keygen_text, verification_text};
use serverbench_backends::verify::{self, FreezeOptions, HeldOutReplay, VerifyOptions};

/// `serverbench keygen`.
pub fn keygen(a: KeygenArgs) -> Result<()> {
    let (key_path, pub_path, public) = verify::keygen(&a.out)?;
    out!("{}", keygen_text(&key_path, &pub_path, &public))?;
    Ok(())
}

/// `serverbench freeze`.
pub fn freeze(a: FreezeArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    let options = FreezeOptions {
        dev_seeds: inputs::seeds(&a.dev_seeds)?,
        held_out: a.held_out,
        concurrency: a.concurrency,
        window: a.window,
        protocol: a.protocol.clone(),
        url: a.url.clone(),
        server: a.client.server.clone(),
        api: a.client.api.clone(),
        model: a.client.model.clone(),
        key: a.key.clone(),
        no_fidelity: a.no_fidelity,
        fidelity_prompts: a.fidelity_prompts,
        min_greedy_agreement: a.min_greedy_agreement,
        max_regret: a.max_regret,
    };
    let file = verify::freeze(&d, &options)?;
    if a.out.file_name().is_none() {
        bail!("--out: {} names no file", a.out.display());
    }
    let text = crate::meta::now(Some(&d)).json(&file)?;
    write_path(&a.out, |w| w.write_all(text.as_bytes()))?;
    out!("{}", frozen_text(&d.name, &file, &a.out))?;
    Ok(())
}

/// `serverbench verify`: exits 3 when a gate fails (the score does not count).
pub fn verify(a: VerifyArgs) -> Result<()> {
    inputs::time_scale(a.time_scale)?;
    let options = VerifyOptions {
        frozen: a.frozen.clone(),
        public_key: a.public_key.clone(),
        url: a.url.clone(),
        out: a.out.clone(),
        reference: a.reference.clone(),
        reference_model: a.reference_model.clone(),
        reference_server: a.reference_server.clone(),
        answers: a.answers.clone(),
    };
    let flags = HeldOutFlags {
        time_scale: a.time_scale,
        tokenizer: a.tokenizer.as_deref(),
        output_tokenizer: a.output_tokenizer.as_deref(),
    };
    let (exe, note) = (crate::this_exe()?, |n: &str| eprintln!("{n}"));
    let replay = &mut |r: &HeldOutReplay<'_>| child::replay_held_out(r, &flags, &exe, &note);
    let v = verify::verify(&options, replay, &note)?;
    out!("{}", verification_text(&v))?;
    let meta =
        crate::meta::now(Some(&v.deployment)).with_server(Some(&v.url), &v.frozen.server.model);
    write_json(&a.out, "verify.json", &meta, &v.to_json())?;
    outln!(
        "  wrote {}/verify.json and each run's records",
        a.out.display()
    )?;
    if v.passed {
        Ok(())
    } else {
        Err(crate::exit(
            3,
            "verification failed: the final score does not count",
        ))
    }
}
