//! The text `calibrate`, `model show` and `hardware list` print: a fit's coefficients and error, the
//! per-class tables of `--check` and `--from-ops`, `--per-step`'s CSV, the profile file's text, what the
//! cost model derives from a model, and the GPU catalog. Pure: values in, text out.

use crate::calibrate::ProbeFit;
use crate::fit::{check_profile, Fit};
use crate::moe::MoeFit;
use crate::ops::ClassFit;
use crate::{AttentionLayers, HardwareSpec, ModelSpec, Profile, StepSample};
use std::collections::BTreeMap;

/// The profile file `calibrate` writes: a comment naming the command, then the profile as YAML.
pub fn profile_yaml(p: &Profile) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# Cost-model profile written by `serverbench calibrate`; see docs/calibration.md.\n{}",
        serde_yaml::to_string(p)?
    ))
}

/// `calibrate --check`'s table: the profile's error on the steps, per class of step.
pub fn check_table(
    profile: &str,
    target: &str,
    samples: &[StepSample],
    predicted: &[f64],
) -> String {
    let mut t = format!(
        "profile {profile} against {} steps ({target} time)\n\n",
        samples.len()
    );
    t.push_str("| steps | count | median error | median abs error | p90 abs error |\n");
    t.push_str("|---|---:|---:|---:|---:|\n");
    for c in check_profile(samples, predicted) {
        t.push_str(&format!(
            "| {} | {} | {:+.2} % | {:.2} % | {:.2} % |\n",
            c.class,
            c.steps,
            100.0 * c.median_error,
            100.0 * c.abs.median_ape,
            100.0 * c.abs.p90_ape
        ));
    }
    t
}

/// One CSV row per step: its features, the measured and the predicted time and the relative error.
pub fn per_step_csv(samples: &[StepSample], predicted: &[f64]) -> String {
    let mut out = String::from(
        "index,prefill_chunks,prefill_new_tokens,prefill_cached_max,decode_seqs,decode_context,decode_shared,measured_ms,predicted_ms,error_pct\n",
    );
    for (i, (s, p)) in samples.iter().zip(predicted).enumerate() {
        let b = s.shape(None);
        let cached = s.prefill.iter().map(|&(_, c)| c).max().unwrap_or(0);
        out += &format!(
            "{i},{},{},{cached},{},{},{},{:.4},{:.4},{:.3}\n",
            s.prefill.len(),
            b.prefill_tokens,
            b.decode_seqs,
            b.decode_context,
            b.decode_shared,
            1e3 * s.seconds,
            1e3 * p,
            100.0 * (p - s.seconds) / s.seconds
        );
    }
    out
}

/// The fitted coefficients and the fit's error, two lines (`calibrate` prints them on standard error).
pub fn fit_text(fit: &Fit) -> String {
    let c = &fit.profile;
    let mut t = format!(
        "fitted {} steps, held out {}: GEMM {:.1} %, weight streaming {:.1} % ({:.1} % at one token), attention {:.1} %, KV {:.1} % ({:.1} % for shared re-reads) of peak; \
         step overhead {:.3} ms, per sequence {:.1} µs; prefill attention {:.2} µs per token of span + {:.2} per round of {:.0} tiles\n",
        fit.train.steps,
        fit.held_out.steps,
        100.0 * c.gemm_efficiency,
        100.0 * c.memory_efficiency,
        100.0 * c.single_row_memory_efficiency.unwrap_or(c.memory_efficiency),
        100.0 * c.attention_efficiency,
        100.0 * c.kv_efficiency.unwrap_or(c.memory_efficiency),
        100.0
            * c.shared_kv_efficiency
                .or(c.kv_efficiency)
                .unwrap_or(c.memory_efficiency),
        1e3 * c.step_overhead_s,
        1e6 * c.per_sequence_overhead_s,
        1e6 * c.attention_span_s_per_token,
        1e6 * c.attention_sweep_s_per_token,
        c.attention_parallel_tiles
    );
    t.push_str(&format!(
        "step-time error: held out median {:.2} %, p90 {:.2} %; fitted median {:.2} %, p90 {:.2} %\n",
        100.0 * fit.held_out.median_ape,
        100.0 * fit.held_out.p90_ape,
        100.0 * fit.train.median_ape,
        100.0 * fit.train.p90_ape
    ));
    t
}

/// How each attention layout fitted the endpoint's probes, and the one kept (`frontend`: the front
/// end's time per prompt token was fitted too).
pub fn probe_fit_text(p: &ProbeFit, frontend: bool) -> String {
    let mut t = String::new();
    for trial in &p.trials {
        t.push_str(&format!(
            "attention {:?}: request latency {:.2} ms{}, RMS error over the probes {:.2} %\n",
            trial.layout,
            trial.request_latency_s * 1e3,
            if frontend {
                format!(
                    " + {:.3} µs per prompt token",
                    trial.frontend_s_per_token * 1e6
                )
            } else {
                String::new()
            },
            100.0 * trial.error.sqrt()
        ));
    }
    t.push_str(&format!(
        "kept attention {:?}\n",
        p.fit.profile.attention_layout
    ));
    t
}

/// `calibrate --from-moe-probes`' per-case table and its summary line (on standard error): each case's
/// measured time per output token beside the base and the fitted profile's, held-out cases marked.
pub fn moe_fit_text(fit: &MoeFit, model: &ModelSpec) -> String {
    let mut t = format!(
        "{:>6} {:>8} {:>12} {:>16} {:>16}\n",
        "batch", "context", "measured ms", "base ms (err)", "fitted ms (err)"
    );
    for r in &fit.rows {
        let err = |s: f64| {
            format!(
                "{:.2} ({:+.1} %)",
                s * 1e3,
                100.0 * (s / r.measured_s - 1.0)
            )
        };
        t.push_str(&format!(
            "{:>6} {:>8} {:>12.2} {:>16} {:>16}{}\n",
            r.batch,
            r.context,
            r.measured_s * 1e3,
            err(r.base_s),
            err(r.fitted_s),
            if r.held_out { "  held out" } else { "" }
        ));
    }
    let p = &fit.profile;
    let layers = model.experts.as_ref().map_or(0, |e| e.layers);
    t.push_str(&format!(
        "fitted {} cases, held out {}: moe_layer_s {:.2} µs per routed layer ({:.2} ms per step over {} layers), expert_memory_efficiency {:.1} % of peak; held-out median error {:.1} %, p90 {:.1} %\n",
        fit.train.steps,
        fit.held_out.steps,
        p.moe_layer_s * 1e6,
        p.moe_layer_s * 1e3 * layers as f64,
        layers,
        100.0 * p.expert_memory_efficiency.unwrap_or(p.memory_efficiency),
        100.0 * fit.held_out.median_ape,
        100.0 * fit.held_out.p90_ape
    ));
    if !fit.prefill_rows.is_empty() {
        t.push_str(&moe_prefill_text(fit, model));
    }
    t
}

/// The prefill cases' part of [`moe_fit_text`]: each case's time to first token measured, with the
/// base's eager floor and with the fitted one.
fn moe_prefill_text(fit: &MoeFit, model: &ModelSpec) -> String {
    let mut t = format!(
        "{:>8} {:>8} {:>12} {:>18} {:>18}\n",
        "cached", "new", "TTFT ms", "before ms (err)", "fitted ms (err)"
    );
    for r in &fit.prefill_rows {
        let err = |s: f64| {
            format!(
                "{:.1} ({:+.1} %)",
                s * 1e3,
                100.0 * (s / r.case.ttft_s - 1.0)
            )
        };
        t.push_str(&format!(
            "{:>8} {:>8} {:>12.1} {:>18} {:>18}{}\n",
            r.case.cached,
            r.case.new,
            r.case.ttft_s * 1e3,
            err(r.base_s),
            err(r.fitted_s),
            if r.fitted { "" } else { "  held out" }
        ));
    }
    let held: Vec<f64> = fit
        .prefill_rows
        .iter()
        .filter(|r| !r.fitted)
        .map(|r| (r.fitted_s / r.case.ttft_s - 1.0).abs())
        .collect();
    let held = crate::fit::summarize(held);
    let p = &fit.profile;
    t.push_str(&format!(
        "eager floor {:.3} ms per layer ({:.1} ms per eager step over {} layers) fitted to {} fresh prompts with a step the graphs do not cover; held out {} cases: median error {:.1} %, p90 {:.1} %\n",
        p.eager_s_per_layer * 1e3,
        p.eager_s_per_layer * 1e3 * model.layers as f64,
        model.layers,
        fit.prefill_rows.iter().filter(|r| r.fitted).count(),
        held.steps,
        100.0 * held.median_ape,
        100.0 * held.p90_ape
    ));
    t
}

/// `calibrate --from-ops`' per-class table (on standard error): every class fitted on every GPU, the ones the profile uses
/// marked with their field.
pub fn ops_table(
    fits: &[ClassFit],
    used: &[(&'static str, ClassFit)],
    skipped: &BTreeMap<String, usize>,
) -> String {
    let mut t = String::from(
        "| class | GPU | value | rows fitted | fitted median abs error | rows held out | held-out median error | held-out median abs error | profile field |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let pct = |x: Option<f64>, signed: bool| match (x, signed) {
        (Some(x), true) => format!("{:+.1} %", 100.0 * x),
        (Some(x), false) => format!("{:.1} %", 100.0 * x),
        (None, _) => "—".into(),
    };
    for f in fits {
        let field = used
            .iter()
            .find(|(_, u)| u.class == f.class && u.gpu == f.gpu)
            .map_or("", |(name, _)| name);
        t.push_str(&format!(
            "| {} | {} | {:.4} | {} | {} | {} | {} | {} | {} |\n",
            f.class.label(),
            f.gpu,
            f.value,
            f.fitted,
            pct(Some(f.fitted_median_ape), false),
            f.held_out,
            pct(f.held_out_median_error, true),
            pct(f.held_out_median_ape, false),
            field
        ));
    }
    if !skipped.is_empty() {
        t.push_str("\nrows of operators no profile term prices (not fitted): ");
        t.push_str(
            &skipped
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        t.push('\n');
    }
    t
}

/// The catalog's table: one row per GPU, its profiles last (fitted ones marked).
pub fn catalog(gpus: &[HardwareSpec], profiles: &[Profile]) -> String {
    let mut out = format!(
        "{:<14} {:>9} {:>9} {:>10} {:>10} {:>11} {:>7}  profiles (* fitted to measurements)\n",
        "gpu", "memory GB", "TB/s", "bf16 TF/s", "fp8 TF/s", "link GB/s", "$/GPU-h"
    );
    let no_fp8 = gpus.iter().any(|h| h.fp8_flops <= h.bf16_flops);
    for h in gpus {
        // A GPU without fp8 tensor cores runs fp8 weights at its bf16 rate: marked, not passed off.
        let fp8 = match h.fp8_flops <= h.bf16_flops {
            true => format!("{:.0}†", h.fp8_flops / 1e12),
            false => format!("{:.0}", h.fp8_flops / 1e12),
        };
        let mut names: Vec<String> = profiles
            .iter()
            .filter(|p| p.hardware == h.name)
            .map(|p| format!("{}{}", p.name, if p.fitted { "*" } else { "" }))
            .collect();
        names.sort();
        out.push_str(&format!(
            "{:<14} {:>9.1} {:>9.2} {:>10.0} {:>10} {:>11.0} {:>7.2}  {}\n",
            h.name,
            h.memory_bytes / 1e9,
            h.memory_bandwidth / 1e12,
            h.bf16_flops / 1e12,
            fp8,
            h.link_bandwidth / 1e9,
            h.dollars_per_hour,
            names.join(", ")
        ));
    }
    if no_fp8 {
        out.push_str("† no fp8 tensor cores: fp8 weights run at the bf16 rate\n");
    }
    out
}

fn billions(x: f64) -> String {
    format!("{:.3} B", x / 1e9)
}

fn group(label: &str, g: &AttentionLayers) -> String {
    let window = g
        .window
        .map_or_else(String::new, |w| format!(", window {w}"));
    let decode = g.decode_flops_per_pair().map_or_else(String::new, |f| {
        format!(" (decode, absorbed latent: {f:.0})")
    });
    format!(
        "  {label:<22} {} layers ({} with their own KV), {} query / {} KV heads of {}{window}; {:.0} FLOPs per (query, key) pair{decode}\n",
        g.layers,
        g.kv_layers,
        g.q_heads,
        g.kv_heads,
        g.head_dim,
        g.flops_per_pair()
    )
}

/// The text `model show` prints: what the cost model derives from a model.
pub fn model_text(m: &ModelSpec) -> String {
    let mut out = format!(
        "{}: {} layers, hidden {}, vocabulary {}, context {}\n",
        m.name, m.layers, m.hidden, m.vocab, m.native_context
    );
    out.push_str(&format!(
        "  parameters             {} held, {} multiplied per token (2 × that = {:.2} GFLOPs of matmuls per token), {} quantizable\n",
        billions(m.total_params),
        billions(m.matmul_params),
        2.0 * m.matmul_params / 1e9,
        billions(m.quantizable_params)
    ));
    if m.full_attention.layers > 0 {
        out.push_str(&group("full attention", &m.full_attention));
    }
    if let Some(s) = &m.sliding_attention {
        out.push_str(&group("sliding attention", s));
    }
    if let Some(l) = &m.linear_attention {
        out.push_str(&format!(
            "  linear attention       {} layers, {} bytes of state per sequence per layer, {:.0} FLOPs per token per layer\n",
            l.layers, l.state_bytes_per_layer, l.flops_per_token_per_layer
        ));
    }
    out.push_str(&format!(
        "  KV per token           {} bytes stored, {} read per decode step; {} bytes of fixed state per sequence\n",
        m.kv_bytes_per_token(),
        m.kv_read_bytes_per_token(),
        m.state_bytes_per_seq()
    ));
    if let Some(e) = &m.experts {
        out.push_str(&format!(
            "  experts                {} of {} per token in {} layers, {:.2} M parameters each ({} active per token); a step of n tokens reads {} × (1 − (1 − {}/{})ⁿ) per layer (uniform routing): {:.1} at 1, {:.1} at 16, {:.1} at 256\n",
            e.per_token,
            e.count,
            e.layers,
            e.params_per_expert / 1e6,
            billions(e.active_params()),
            e.count,
            e.per_token,
            e.count,
            e.distinct(1.0),
            e.distinct(16.0),
            e.distinct(256.0)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_step(seconds: f64) -> StepSample {
        StepSample {
            prefill: Vec::new(),
            decode: vec![4096, 8192],
            decode_kv_distinct: None,
            seconds,
        }
    }

    #[test]
    fn a_moe_fit_reads_as_printed() {
        use crate::fit::FitAccuracy;
        use crate::moe::MoeRow;
        let model = crate::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap();
        let mut profile = Profile::preset("h200-qwen3-8b-vllm").unwrap();
        profile.moe_layer_s = 50e-6;
        profile.expert_memory_efficiency = Some(0.875);
        let accuracy = |steps| FitAccuracy {
            steps,
            median_ape: 0.016,
            p90_ape: 0.033,
        };
        let row = MoeRow {
            batch: 8,
            context: 2048,
            measured_s: 0.010,
            base_s: 0.008,
            fitted_s: 0.0101,
            held_out: true,
        };
        let fit = MoeFit {
            profile,
            rows: vec![row],
            train: accuracy(6),
            held_out: accuracy(5),
            prefill_rows: vec![],
        };
        let text = moe_fit_text(&fit, &model);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "     8     2048        10.00   8.00 (-20.0 %)   10.10 (+1.0 %)  held out"
        );
        assert_eq!(lines[2], "fitted 6 cases, held out 5: moe_layer_s 50.00 µs per routed layer (2.40 ms per step over 48 layers), expert_memory_efficiency 87.5 % of peak; held-out median error 1.6 %, p90 3.3 %");
        assert_eq!(lines.len(), 3, "no prefill table without prefill cases");
        // With prefill cases: one row each, then the floor and the held-out error.
        let case = |cached, new, ttft_s| crate::moe::MoePrefill {
            cached,
            new,
            ttft_s,
        };
        let fit = MoeFit {
            profile: Profile {
                eager_s_per_layer: 1.25e-3,
                ..fit.profile.clone()
            },
            prefill_rows: vec![
                crate::moe::MoePrefillRow {
                    case: case(0, 2048, 0.080),
                    base_s: 0.040,
                    fitted_s: 0.076,
                    fitted: true,
                },
                crate::moe::MoePrefillRow {
                    case: case(8192, 2048, 0.100),
                    base_s: 0.080,
                    fitted_s: 0.095,
                    fitted: false,
                },
            ],
            ..fit
        };
        let text = moe_fit_text(&fit, &model);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            &lines[3..],
            [
                "  cached      new      TTFT ms    before ms (err)    fitted ms (err)",
                "       0     2048         80.0     40.0 (-50.0 %)      76.0 (-5.0 %)",
                "    8192     2048        100.0     80.0 (-20.0 %)      95.0 (-5.0 %)  held out",
                "eager floor 1.250 ms per layer (60.0 ms per eager step over 48 layers) fitted to 1 fresh prompts with a step the graphs do not cover; held out 1 cases: median error 5.0 %, p90 5.0 %",
            ]
        );
    }

    #[test]
    fn a_fit_and_a_probe_fit_read_as_printed() {
        use crate::calibrate::{LayoutTrial, ProbeFit};
        use crate::fit::FitAccuracy;
        let accuracy = FitAccuracy {
            steps: 10,
            median_ape: 0.008,
            p90_ape: 0.023,
        };
        let fit = Fit {
            profile: Profile::preset("h200-qwen3-8b-vllm").unwrap(),
            train: accuracy,
            held_out: accuracy,
        };
        let text = fit_text(&fit);
        assert!(
            text.starts_with("fitted 10 steps, held out 10: GEMM "),
            "{text}"
        );
        assert!(text.ends_with("step-time error: held out median 0.80 %, p90 2.30 %; fitted median 0.80 %, p90 2.30 %\n"), "{text}");
        let layout = fit.profile.attention_layout;
        let trial = LayoutTrial {
            layout,
            request_latency_s: 0.004,
            frontend_s_per_token: 2e-7,
            error: 0.0004,
        };
        let p = ProbeFit {
            trials: vec![trial],
            fit,
        };
        assert_eq!(
            probe_fit_text(&p, true),
            format!("attention {layout:?}: request latency 4.00 ms + 0.200 µs per prompt token, RMS error over the probes 2.00 %\nkept attention {layout:?}\n")
        );
    }

    #[test]
    fn per_step_rows_and_the_check_table_read_as_printed() {
        let steps = [decode_step(0.010)];
        let csv = per_step_csv(&steps, &[0.011]);
        assert_eq!(
            csv.lines().nth(1),
            Some("0,0,0,0,2,12288,0,10.0000,11.0000,10.000"),
            "{csv}"
        );
        let table = check_table("p", "gpu", &steps, &[0.011]);
        assert!(
            table.starts_with("profile p against 1 steps (gpu time)\n\n| steps | count |"),
            "{table}"
        );
        let yaml = profile_yaml(&Profile::preset("h200-qwen3-8b-vllm").unwrap()).unwrap();
        assert!(yaml.starts_with("# Cost-model profile written by `serverbench calibrate`"));
    }

    /// Every GPU of the catalog has a profile to run on, and the table lists them all.
    #[test]
    fn every_catalog_gpu_has_a_profile() {
        let (gpus, profiles) = (HardwareSpec::presets(), Profile::presets());
        assert!(gpus.len() >= 12, "{} GPUs", gpus.len());
        let table = catalog(&gpus, &profiles);
        for h in &gpus {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("{} ", h.name)))
                .unwrap();
            assert!(
                row.contains(&format!("{}-", h.name)) || row.contains("l40-"),
                "{row}"
            );
        }
        assert!(table.contains("h200-qwen3-8b-vllm*"), "{table}");
        // The A100s' fp8 column is their bf16 rate, marked as such; the H200's is its own.
        let row = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap()
                .to_string()
        };
        assert!(row("a100-80gb ").contains("312†"), "{table}");
        assert!(!row("h200 ").contains('†'), "{table}");
        assert!(table.contains("† no fp8 tensor cores"), "{table}");
    }

    #[test]
    fn a_mixture_of_experts_shows_its_experts_and_a_dense_model_none() {
        let dense = model_text(&ModelSpec::preset("qwen3-8b").unwrap());
        assert!(
            dense.contains("8.190 B held") && !dense.contains("experts"),
            "{dense}"
        );
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/hf/qwen3-30b-a3b.json"
        ))
        .unwrap();
        let moe = model_text(&crate::hf::from_config("qwen3-30b-a3b", &text).unwrap());
        assert!(moe.contains("8 of 128 per token in 48 layers"), "{moe}");
        assert!(moe.contains("98304 bytes stored"), "{moe}");
    }
}
