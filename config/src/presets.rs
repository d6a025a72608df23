//! The built-in presets: every YAML file under the repository's `presets/<kind>/`, embedded at build
//! time (`build.rs`). A preset's name is its file name without `.yaml`.

/// One embedded preset file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PresetFile {
    /// Its folder: `models`, `hardware`, `profiles` or `deployments`.
    pub kind: &'static str,
    /// Its name (the file name without `.yaml`).
    pub name: &'static str,
    /// Its path in the repository, for error messages.
    pub file: &'static str,
    /// Its text.
    pub text: &'static str,
}

const ALL: &[PresetFile] = include!(concat!(env!("OUT_DIR"), "/presets.rs"));

/// The presets of one kind, in name order.
pub fn preset_files(kind: &str) -> impl Iterator<Item = &'static PresetFile> + '_ {
    ALL.iter().filter(move |p| p.kind == kind)
}

/// The preset of `kind` named `name`.
pub fn preset_file(kind: &str, name: &str) -> Option<&'static PresetFile> {
    preset_files(kind).find(|p| p.name == name)
}

/// Parses the preset of `kind` named `name` as a `T` (`None` if there is none); see [`parse_presets`]
/// for what a broken built-in preset does.
pub fn parse_preset<T: serde::de::DeserializeOwned>(
    kind: &str,
    name: &str,
    check: fn(&T) -> Result<(), crate::FieldError>,
    name_of: fn(&T) -> &str,
) -> Option<T> {
    preset_file(kind, name).map(|f| parse_file(f, check, name_of))
}

fn parse_file<T: serde::de::DeserializeOwned>(
    f: &PresetFile,
    check: fn(&T) -> Result<(), crate::FieldError>,
    name_of: fn(&T) -> &str,
) -> T {
    let v: T = crate::parse_yaml(f.file, f.text).unwrap_or_else(|e| panic!("built-in preset {e}"));
    if let Err(e) = check(&v) {
        panic!("built-in preset {}", e.in_file(f.file, f.text));
    }
    assert_eq!(
        name_of(&v),
        f.name,
        "{}: `name` must be the file's name",
        f.file
    );
    v
}

/// Parses every preset of `kind` as a `T`, in name order. A preset is part of the program: one that
/// does not parse, fails `check` or whose `name` differs from its file name is a bug, and panics
/// (the registry's tests parse them all).
pub fn parse_presets<T: serde::de::DeserializeOwned>(
    kind: &str,
    check: fn(&T) -> Result<(), crate::FieldError>,
    name: fn(&T) -> &str,
) -> Vec<T> {
    preset_files(kind)
        .map(|f| {
            let v: T =
                crate::parse_yaml(f.file, f.text).unwrap_or_else(|e| panic!("built-in preset {e}"));
            if let Err(e) = check(&v) {
                panic!("built-in preset {}", e.in_file(f.file, f.text));
            }
            assert_eq!(
                name(&v),
                f.name,
                "{}: `name` must be the file's name",
                f.file
            );
            v
        })
        .collect()
}

/// Names of the presets of `kind`, comma-separated (for error messages).
pub fn preset_names(kind: &str) -> String {
    preset_files(kind)
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}
