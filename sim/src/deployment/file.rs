//! A deployment as YAML: the form a file writes (the model, hardware and profile by preset name or as
//! a mapping of their fields), the one path from text to a resolved [`Deployment`] — `base:` preset,
//! overrides deep-merged onto it, every name looked up once — and back to text.

use super::{Deployment, DeploymentOf, DEFAULT_DEPLOYMENT};
use crate::engine::Policy;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml::Value;
use serverbench_calibration::{FieldError, HardwareSpec, InputError, ModelSpec, Profile};
use serverbench_config::{from_value, line_of, merge, parse_value, parse_yaml, to_value};

/// A deployment as a file writes it: `model`, `hardware` and `profile` are a preset's name or a mapping
/// of every field of a [`ModelSpec`], [`HardwareSpec`] or [`Profile`] (an override that is a mapping
/// changes only the fields it names).
pub type DeploymentFile = DeploymentOf<Value, Value, Value>;

/// What a deployment file refers to beyond the presets, read by the caller (this crate reads no
/// files).
pub struct Referenced<'a> {
    /// The profile a file names by `profile: PATH` (`PATH` as written), or `None` when there is no
    /// such file (then the name is an unknown preset).
    pub profile_file: &'a dyn Fn(&str) -> Result<Option<Profile>, InputError>,
    /// A profile replacing the file's before the deployment is checked (`--profile`): the file it
    /// was read from, and the profile.
    pub profile: Option<(&'a str, &'a Profile)>,
    /// The model a file names by `model: PATH` (a Hugging Face `config.json`, or a folder holding one;
    /// `PATH` as written), or `None` when there is no such file (then the name is an unknown preset).
    pub model_file: &'a dyn Fn(&str) -> Result<Option<ModelSpec>, InputError>,
}

impl Default for Referenced<'_> {
    fn default() -> Self {
        Referenced {
            profile_file: &|_| Ok(None),
            profile: None,
            model_file: &|_| Ok(None),
        }
    }
}

/// The three parts of a deployment that name presets of their own.
const SPECS: [&str; 3] = ["model", "hardware", "profile"];

impl DeploymentFile {
    /// The file form of a resolved deployment: each spec by name where it is that preset unchanged,
    /// else as the mapping of its fields.
    pub fn of(d: &Deployment) -> DeploymentFile {
        fn named<T: PartialEq + Serialize>(spec: &T, name: &str, preset: Option<T>) -> Value {
            match preset {
                Some(p) if p == *spec => Value::String(name.to_string()),
                _ => to_value(spec),
            }
        }
        DeploymentOf {
            name: d.name.clone(),
            model: named(&d.model, &d.model.name, ModelSpec::preset(&d.model.name)),
            hardware: named(
                &d.hardware,
                &d.hardware.name,
                HardwareSpec::preset(&d.hardware.name),
            ),
            profile: named(
                &d.profile,
                &d.profile.name,
                Profile::preset(&d.profile.name),
            ),
            tp: d.tp,
            dp: d.dp,
            router: d.router,
            weights: d.weights,
            quant_group_size: d.quant_group_size,
            state_dtype: d.state_dtype,
            context_limit: d.context_limit,
            prices: d.prices,
            gpu_hour_dollars: d.gpu_hour_dollars,
            slo: d.slo,
            engine: d.engine.clone(),
            workload: d.workload.clone(),
            protocol: d.protocol,
            reference: d.reference.clone(),
        }
    }

    /// Looks up every preset name and checks the result; the error names the field.
    pub fn resolve(self) -> Result<Deployment, FieldError> {
        let d = DeploymentOf {
            name: self.name,
            model: spec(
                "model",
                self.model,
                ModelSpec::preset,
                ModelSpec::preset_names,
            )?,
            hardware: spec(
                "hardware",
                self.hardware,
                HardwareSpec::preset,
                HardwareSpec::preset_names,
            )?,
            profile: spec(
                "profile",
                self.profile,
                Profile::preset,
                Profile::preset_names,
            )?,
            tp: self.tp,
            dp: self.dp,
            router: self.router,
            weights: self.weights,
            quant_group_size: self.quant_group_size,
            state_dtype: self.state_dtype,
            context_limit: self.context_limit,
            prices: self.prices,
            gpu_hour_dollars: self.gpu_hour_dollars,
            slo: self.slo,
            engine: self.engine,
            workload: self.workload,
            protocol: self.protocol,
            reference: self.reference,
        };
        d.check()?;
        Ok(d)
    }
}

/// A spec from a preset name or from the mapping of its fields.
fn spec<T: DeserializeOwned>(
    field: &str,
    v: Value,
    preset: fn(&str) -> Option<T>,
    names: fn() -> String,
) -> Result<T, FieldError> {
    match v {
        Value::String(name) => preset(&name).ok_or_else(|| {
            let files = match field {
                "profile" => {
                    " nor a profile file (a path is read from the deployment file's folder)"
                }
                _ => "",
            };
            FieldError::new(
                field,
                format!(
                    "unknown {field} {name:?}: not a preset ({}){files}",
                    names()
                ),
            )
        }),
        v @ Value::Mapping(_) => from_value(v).map_err(|e| e.under(field)),
        other => Err(FieldError::new(
            field,
            format!("expected a preset name or a mapping of its fields, got {other:?}"),
        )),
    }
}

/// A built-in preset's file parsed and resolved; a preset that does not is a bug and panics (the
/// registry's tests parse them all).
pub(super) fn parse_preset(f: &serverbench_config::PresetFile) -> Deployment {
    let file: DeploymentFile =
        parse_yaml(f.file, f.text).unwrap_or_else(|e| panic!("built-in preset {e}"));
    let d = file
        .resolve()
        .unwrap_or_else(|e| panic!("built-in preset {}", e.in_file(f.file, f.text)));
    assert_eq!(d.name, f.name, "{}: `name` must be the file's name", f.file);
    d
}

impl Deployment {
    /// The deployment as YAML, each spec by preset name where it is that preset unchanged (what
    /// `--print-config` prints; `from_yaml` reads it back equal).
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(&DeploymentFile::of(self)).expect("deployments serialise")
    }

    /// Parses a deployment YAML: `base: PRESET` (default: the default deployment) plus any fields to
    /// override; a `profile` must be a preset or a mapping (files are read by [`Deployment::from_yaml_with`]).
    pub fn from_yaml(file: &str, text: &str) -> Result<Deployment, InputError> {
        Deployment::from_yaml_with(file, text, &Referenced::default())
    }

    /// Parses a deployment YAML as [`Deployment::from_yaml`] does, with what it refers to beyond the
    /// presets: a `profile` named by file, read by `refs.profile_file`, and `refs.profile`, which
    /// replaces the file's profile before the deployment is checked. A file that overrides fields of
    /// its base and sets no `name` is named `BASE edited by FILE`, not as the preset it no longer is.
    pub fn from_yaml_with(
        file: &str,
        text: &str,
        refs: &Referenced<'_>,
    ) -> Result<Deployment, InputError> {
        let mut over = parse_value(file, text)?;
        let base_name = match over.get("base") {
            None => DEFAULT_DEPLOYMENT.to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(FieldError::new("base", "expected a preset name").in_file(file, text))
            }
        };
        let base = Deployment::preset(&base_name).ok_or_else(|| {
            FieldError::new(
                "base",
                format!(
                    "unknown preset {base_name:?} (presets: {})",
                    Deployment::preset_names()
                ),
            )
            .in_file(file, text)
        })?;
        let Value::Mapping(m) = &mut over else {
            return base.merged(file, text, "", over);
        };
        m.remove("base");
        let edited = m.keys().any(|k| k.as_str() != Some("name"));
        let named = m.contains_key("name");
        if let Some(Value::String(name)) = m.get("profile") {
            if Profile::preset(name).is_none() {
                if let Some(p) = (refs.profile_file)(name)? {
                    m.insert("profile".into(), to_value(&p));
                }
            }
        }
        if let Some((_, p)) = refs.profile {
            m.insert("profile".into(), to_value(p));
        }
        // A file that moves the deployment to another GPU of the catalog runs on that GPU's datasheet
        // profile unless it names one (the base's was measured on its own GPU), and at that GPU's price
        // unless it sets one.
        if let Some(Value::String(hw)) = m.get("hardware").cloned() {
            let datasheet = format!("{hw}-datasheet");
            let moved = hw != base.hardware.name;
            if moved && !m.contains_key("profile") && Profile::preset(&datasheet).is_some() {
                m.insert("profile".into(), Value::String(datasheet));
            }
            if let Some(h) = HardwareSpec::preset(&hw).filter(|_| moved) {
                if !m.contains_key("gpu_hour_dollars") {
                    m.insert("gpu_hour_dollars".into(), to_value(&h.dollars_per_hour));
                }
            }
        }
        if let Some(Value::String(name)) = m.get("model") {
            if ModelSpec::preset(name).is_none() {
                if let Some(spec) = (refs.model_file)(name)? {
                    m.insert("model".into(), to_value(&spec));
                }
            }
        }
        let mut d = base
            .merged(file, text, "", over)
            .map_err(|e| match refs.profile {
                // The command line's profile does not fit: its file is the one to name.
                Some((pf, _)) if e.field.split('.').next() == Some("profile") => {
                    InputError::new(pf, 0, e.field, e.reason)
                }
                _ => e,
            })?;
        if edited && !named {
            let short = std::path::Path::new(file)
                .file_name()
                .map_or(file.into(), |f| f.to_string_lossy());
            d.name = format!("{base_name} edited by {short}");
        }
        Ok(d)
    }

    /// Applies a YAML of any deployment fields on top of this deployment (as a `base` would be).
    pub fn with_overrides(self, file: &str, text: &str) -> Result<Deployment, InputError> {
        let over = parse_value(file, text)?;
        self.merged(file, text, "", over)
    }

    /// Applies an engine YAML (any subset of `engine` fields).
    pub fn with_engine_yaml(self, file: &str, text: &str) -> Result<Deployment, InputError> {
        let over = parse_value(file, text)?;
        let mut wrapped = serde_yaml::Mapping::new();
        wrapped.insert("engine".into(), over);
        self.merged(file, text, "engine", Value::Mapping(wrapped))
    }

    /// `over` (read from `text` of `file`, whose fields sit under `prefix`) deep-merged onto this
    /// deployment, resolved and checked.
    fn merged(
        &self,
        file: &str,
        text: &str,
        prefix: &str,
        mut over: Value,
    ) -> Result<Deployment, InputError> {
        let locate = |e: FieldError| {
            let rel = match e.field.strip_prefix(prefix) {
                Some(rest) if !prefix.is_empty() => rest.trim_start_matches('.').to_string(),
                _ => e.field.clone(),
            };
            InputError::new(file, line_of(text, &rel), rel, e.reason)
        };
        if !over.is_mapping() {
            return Err(locate(FieldError::new(
                prefix,
                "expected a mapping of fields",
            )));
        }
        if let Some(engine) = over.get_mut("engine") {
            apply_policy_budgets(engine);
        }
        let mut base = to_value(&DeploymentFile::of(self));
        for key in SPECS {
            expand_preset(&mut base, &over, key);
        }
        merge(&mut base, over);
        let parsed: DeploymentFile = from_value(base).map_err(locate)?;
        parsed.resolve().map_err(locate)
    }
}

/// When an override changes some fields of a spec the base names by preset, the base gets the preset's
/// fields first, so that the override merges into them. An override that is a whole spec on its own
/// (every required field: what printing a deployment writes) replaces the base's instead, so fields it
/// leaves out because they are unset (`kv_efficiency`, a fit's `op_classes`) stay unset.
fn expand_preset(base: &mut Value, over: &Value, key: &str) {
    let Some(o @ Value::Mapping(_)) = over.get(key) else {
        return;
    };
    let whole = match key {
        "model" => from_value::<ModelSpec>(o.clone()).is_ok(),
        "hardware" => from_value::<HardwareSpec>(o.clone()).is_ok(),
        _ => from_value::<Profile>(o.clone()).is_ok(),
    };
    if whole {
        if let Value::Mapping(m) = base {
            m.remove(key);
        }
        return;
    }
    let Some(Value::String(name)) = base.get(key) else {
        return;
    };
    let expanded = match key {
        "model" => ModelSpec::preset(name).map(|m| to_value(&m)),
        "hardware" => HardwareSpec::preset(name).map(|h| to_value(&h)),
        _ => Profile::preset(name).map(|p| to_value(&p)),
    };
    if let (Some(v), Value::Mapping(m)) = (expanded, base) {
        m.insert(key.into(), v);
    }
}

/// When an engine override names a policy but not its budgets, fills in that policy's defaults.
fn apply_policy_budgets(engine: &mut Value) {
    let Some(policy) = engine
        .get("policy")
        .and_then(|p| p.as_str())
        .and_then(Policy::named)
    else {
        return;
    };
    let (tokens, seqs) = policy.get().default_budgets();
    if let Value::Mapping(m) = engine {
        for (k, v) in [("max_num_batched_tokens", tokens), ("max_num_seqs", seqs)] {
            m.entry(k.into()).or_insert(v.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_print_by_name_and_read_back_equal() {
        for d in Deployment::presets() {
            let text = d.to_yaml();
            assert!(text.contains(&format!("model: {}", d.model.name)), "{text}");
            assert_eq!(Deployment::from_yaml("p.yaml", &text).unwrap(), d);
        }
    }

    #[test]
    fn a_changed_spec_prints_in_full_and_reads_back_equal() {
        let d = Deployment::preset("qwen3-8b-1xh200")
            .unwrap()
            .with_overrides(
                "o.yaml",
                "model: {layers: 40}\nprofile: {step_overhead_s: 0.004}\n",
            )
            .unwrap();
        assert_eq!(d.model.layers, 40);
        assert_eq!(d.model.hidden, 4096, "the other fields are the preset's");
        assert_eq!(d.profile.step_overhead_s, 0.004);
        let text = serde_yaml::to_string(&d).unwrap();
        assert!(
            text.contains("layers: 40") && text.contains("hardware: h200"),
            "{text}"
        );
        assert_eq!(Deployment::from_yaml("p.yaml", &text).unwrap(), d);
    }

    /// A printed spec replaces the default deployment's: the unset fields it leaves out stay unset (the
    /// default's fitted profile has a `kv_efficiency` and a fit record; the datasheet one has neither).
    #[test]
    fn a_printed_spec_keeps_its_unset_fields_unset() {
        let d = Deployment::preset("qwen3.5-9b-2xl40")
            .unwrap()
            .with_overrides(
                "o.yaml",
                "profile: l40-datasheet
",
            )
            .unwrap()
            .with_overrides(
                "o.yaml",
                "profile: {step_overhead_s: 0.003}
",
            )
            .unwrap();
        assert_eq!(d.profile.kv_efficiency, None);
        let text = serde_yaml::to_string(&DeploymentFile::of(&d)).unwrap();
        assert_eq!(Deployment::from_yaml("p.yaml", &text).unwrap(), d);
    }

    /// A profile named by file comes from the caller's reader (this crate reads no files); one the
    /// caller hands in replaces the file's before the check; an edited file is named after itself.
    #[test]
    fn referenced_profiles_and_edited_names() {
        let fit = Profile {
            name: "my-fit".into(),
            ..Profile::preset("l40-datasheet").unwrap()
        };
        let reader = |name: &str| Ok((name == "fits/my.yaml").then(|| fit.clone()));
        let refs = Referenced {
            profile_file: &reader,
            ..Referenced::default()
        };
        let text = "base: qwen3.5-9b-2xl40\nprofile: fits/my.yaml\n";
        let d = Deployment::from_yaml_with("dir/d.yaml", text, &refs).unwrap();
        assert_eq!(d.profile, fit);
        assert_eq!(d.name, "qwen3.5-9b-2xl40 edited by d.yaml");
        let e = Deployment::from_yaml("d.yaml", text).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "profile"), "{e}");
        // A file moving to the L40 without a profile runs on the L40's datasheet profile, and takes
        // an L40 profile handed in; a wrong one names its file.
        let moved = "base: qwen3-8b-1xh200\nhardware: l40\n";
        let on_l40 = Deployment::from_yaml("m.yaml", moved).unwrap();
        assert_eq!(on_l40.profile.name, "l40-datasheet");
        assert_eq!(on_l40.gpu_hour_dollars, on_l40.hardware.dollars_per_hour);
        let e = Deployment::from_yaml(
            "m.yaml",
            "base: qwen3-8b-1xh200\nhardware: l40\nprofile: h200-datasheet\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "profile", "{e}");
        let refs = Referenced {
            profile: Some(("fit.yaml", &fit)),
            ..Referenced::default()
        };
        assert_eq!(
            Deployment::from_yaml_with("m.yaml", moved, &refs)
                .unwrap()
                .profile,
            fit
        );
        let e = Deployment::from_yaml_with("h.yaml", "base: qwen3-8b-1xh200\n", &refs).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.field.as_str()),
            ("fit.yaml", "profile"),
            "{e}"
        );
        // Only a base, or a name of its own: that name.
        let only = Deployment::from_yaml("o.yaml", "base: gemma4-e4b-1xl40\n").unwrap();
        assert_eq!(only.name, "gemma4-e4b-1xl40");
        let own = Deployment::from_yaml("o.yaml", "name: mine\ntp: 2\n").unwrap();
        assert_eq!(own.name, "mine");
    }

    #[test]
    fn names_and_specs_that_do_not_resolve_name_the_field_and_line() {
        let e = Deployment::from_yaml("d.yaml", "tp: 2\nmodel: llama-9000\n").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "model"));
        assert!(
            e.reason.contains("unknown model") && e.reason.contains("qwen3-8b"),
            "{e}"
        );
        let e = Deployment::from_yaml("d.yaml", "hardware:\n  memory_bytes: -1\n").unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "hardware.memory_bytes"),
            "{e}"
        );
        let e = Deployment::from_yaml("d.yaml", "model: {hidden: x}\n").unwrap_err();
        assert_eq!(e.field, "model.hidden", "{e}");
        let e = Deployment::from_yaml(
            "d.yaml",
            "base: qwen3-8b-1xh200\nhardware: l40\nprofile: h200-datasheet\n",
        )
        .unwrap_err();
        assert_eq!(
            e.field, "profile",
            "an H200 profile on an L40 is refused: {e}"
        );
        let e = Deployment::preset("qwen3-8b-1xh200")
            .unwrap()
            .with_engine_yaml("e.yaml", "policy: vllm\nblock_size: 0\n")
            .unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "block_size"),
            "fields of the file: {e}"
        );
    }
}
